"""Pure planning of OVN HA_Chassis_Groups for Proxmox networks (no I/O).

Reference behaviour §9.1 (naming, ownership, claim rule) and §9.3 (trunk-node
selection, rendezvous hashing, priorities), with product decision §4.7: the
VPC's current active chassis stays on top while it is still eligible, so a node
joining the trunk never moves a live gateway, and all router ports of one VPC
keep the same active chassis.

Inputs are plain data: Node objects as dicts (``metadata.name``, ``labels``,
``annotations``, ``deletionTimestamp``) and existing groups as ``GroupView``
(or dicts with ``name``, ``external_ids``, ``chassis`` = [(chassis, priority)]).

The NB transaction built on ``plan_group`` (§9.4 ``plan_ensure``, §9.6 ``plan_delete``) is
:mod:`ovn.nb_plan`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

OWNER = "proxmox-network"
OWNER_KEY = "owner"
NETWORK_KEY = "network"
GROUP_PREFIX = "px-"
CHASSIS_ANNOTATION = "ovn.kubernetes.io/chassis"
READY_LABEL_SUFFIX = ".provider-network.kubernetes.io/ready"

_MASK = (1 << 64) - 1
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


# --------------------------------------------------------------------------- naming


def router_port_name(vpc: str, subnet: str) -> str:
    """LRP of a subnet: ``<vpc>-<subnet>``."""
    return f"{vpc}-{subnet}"


def group_name(vpc: str, subnet: str) -> str:
    """HA_Chassis_Group of a subnet's router port: ``px-<vpc>-<subnet>``."""
    return GROUP_PREFIX + router_port_name(vpc, subnet)


def ready_label(provider: str) -> str:
    return f"{provider}{READY_LABEL_SUFFIX}"


def rendezvous_key(vpc: str) -> str:
    return f"vpc/{vpc}"


def group_external_ids(network_key: str) -> dict[str, str]:
    return {OWNER_KEY: OWNER, NETWORK_KEY: network_key}


# --------------------------------------------------------------------------- trunk nodes


class TrunkNode(NamedTuple):
    name: str
    chassis: str


def _meta(node: Mapping[str, Any]) -> Mapping[str, Any]:
    m = node.get("metadata")
    return m if isinstance(m, Mapping) else node


def trunk_nodes(nodes: Iterable[Mapping[str, Any]], provider: str) -> list[TrunkNode]:
    """Eligible trunk nodes of a provider network, sorted by node name (§9.3).

    A node qualifies when its label ``<provider>.provider-network.kubernetes.io/ready``
    is ``"true"``, its ``ovn.kubernetes.io/chassis`` annotation (trimmed) is non-empty
    and it has no deletionTimestamp. A chassis already taken by a node with a smaller
    name is skipped (de-duplication independent of the input order). A deleting node
    does not take a chassis.
    """
    label = ready_label(provider)
    cands: list[tuple[str, Mapping[str, Any]]] = []
    for n in nodes:
        m = _meta(n)
        name = m.get("name") or ""
        if not name:
            continue
        labels = m.get("labels") or {}
        if labels.get(label) != "true":
            continue
        cands.append((name, m))
    cands.sort(key=lambda t: t[0])
    seen: set[str] = set()
    out: list[TrunkNode] = []
    for name, m in cands:
        chassis = ((m.get("annotations") or {}).get(CHASSIS_ANNOTATION) or "").strip()
        if not chassis or chassis in seen or m.get("deletionTimestamp"):
            continue
        seen.add(chassis)
        out.append(TrunkNode(name, chassis))
    return out


# --------------------------------------------------------------------------- hashing


def fnv1a64(data: bytes, h: int = FNV_OFFSET) -> int:
    for b in data:
        h ^= b
        h = (h * FNV_PRIME) & _MASK
    return h


def splitmix64_mix(x: int) -> int:
    """The splitmix64 finaliser, without the golden-ratio increment."""
    x &= _MASK
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK
    x ^= x >> 31
    return x


def score(key: str, node: str) -> int:
    """Rendezvous score: splitmix64(FNV-1a(key || 0x00 || node))."""
    return splitmix64_mix(fnv1a64(key.encode() + b"\x00" + node.encode()))


def _name_of(node: Any) -> str:
    return node if isinstance(node, str) else node.name


def rendezvous_order(key: str, nodes: Iterable[Any]) -> list[Any]:
    """Nodes (names or objects with ``.name``) by score descending, ties by name."""
    return sorted(nodes, key=lambda n: (-score(key, _name_of(n)), _name_of(n)))


def priorities(n: int) -> list[int]:
    """Top = max(100, 10n), then stepping down by 10; empty for n <= 0."""
    if n <= 0:
        return []
    top = max(100, 10 * n)
    return [top - 10 * i for i in range(n)]


# --------------------------------------------------------------------------- existing groups


@dataclass(frozen=True)
class GroupView:
    """An existing HA_Chassis_Group with its HA_Chassis resolved."""

    name: str
    external_ids: Mapping[str, str] = field(default_factory=dict)
    chassis: Sequence[tuple[str, int]] = ()  # (chassis_name, priority)
    uuid: str = ""
    chassis_uuids: Sequence[str] = ()  # HA_Chassis uuid of each ``chassis`` entry
    ha_chassis: Sequence[str] = ()  # every uuid the group references (dangling, duplicates too)

    @property
    def owner(self) -> str:
        return self.external_ids.get(OWNER_KEY, "") or ""

    @property
    def network(self) -> str:
        return self.external_ids.get(NETWORK_KEY, "") or ""

    def top(self) -> tuple[str, int] | None:
        """Highest-priority chassis (ties by chassis name), or None when empty."""
        if not self.chassis:
            return None
        return min(self.chassis, key=lambda c: (-c[1], c[0]))


def as_group(g: GroupView | Mapping[str, Any]) -> GroupView:
    if isinstance(g, GroupView):
        return g
    return GroupView(
        name=g.get("name", ""),
        external_ids=dict(g.get("external_ids") or {}),
        chassis=[(str(c), int(p)) for c, p in (g.get("chassis") or ())],
        uuid=str(g.get("uuid") or g.get("_uuid") or ""),
    )


def groups_from_snapshot(snap: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, GroupView]:
    """Resolve an ``NBClient.snapshot()`` into GroupViews by group name.

    HA_Chassis references with no row, and rows with no chassis name, are dropped; a
    second row naming a chassis already seen in the group is dropped (referenced uuids
    are walked in uuid order, the order the IDL lists a set in, so the result is
    deterministic). Groups with duplicate names: the smallest uuid wins.
    """
    chassis_rows = snap.get("HA_Chassis", {})
    out: dict[str, GroupView] = {}
    for uuid in sorted(snap.get("HA_Chassis_Group", {})):
        row = snap["HA_Chassis_Group"][uuid]
        name = row.get("name", "")
        if name in out:
            continue
        seen: set[str] = set()
        members: list[tuple[str, int]] = []
        member_uuids: list[str] = []
        refs = sorted(row.get("ha_chassis") or ())
        for cu in refs:
            c = chassis_rows.get(cu)
            if c is None or not c.get("chassis_name") or c.get("chassis_name") in seen:
                continue
            seen.add(c["chassis_name"])
            members.append((c["chassis_name"], int(c.get("priority", 0))))
            member_uuids.append(cu)
        out[name] = GroupView(name, dict(row.get("external_ids") or {}), members, uuid, tuple(member_uuids), tuple(refs))
    return out


# --------------------------------------------------------------------------- claim rule


@dataclass(frozen=True)
class Claim:
    allowed: bool
    adopt: bool = False  # allowed, but external_ids must be (re)written to ours
    reason: str = ""  # why refused (empty when allowed)


def claim(group: GroupView | Mapping[str, Any] | None, network_key: str) -> Claim:
    """Claim rule of §9.1 for an existing group of our name (None: no group)."""
    if group is None:
        return Claim(True)
    g = as_group(group)
    if not g.owner:
        return Claim(True, adopt=True)
    if g.owner != OWNER:
        return Claim(False, reason=f'OVN HA_Chassis_Group "{g.name}" belongs to "{g.owner}"')
    if g.network != network_key:
        return Claim(False, reason=f'OVN HA_Chassis_Group "{g.name}" belongs to network "{g.network}"')
    return Claim(True)


def foreign_message(reason: str) -> str:
    """ForeignGroup condition message for a refused claim (§9.4 case 1)."""
    return f"{reason}; the controller leaves it alone"


# --------------------------------------------------------------------------- sticky active


def group_vote(group: GroupView | Mapping[str, Any]) -> str | None:
    """The chassis a group votes for as the VPC's active one, or None.

    Only a group we own votes, with its top chassis, and only while its priorities are
    exactly what the planner writes (``priorities(n)``): a hand-edited or half-written
    group (say one member raised to 200) must not move the active chassis of the whole
    VPC; it is repaired to the VPC's choice instead.
    """
    g = as_group(group)
    if g.owner != OWNER or not g.chassis:
        return None
    if sorted((p for _, p in g.chassis), reverse=True) != priorities(len(g.chassis)):
        return None
    top = g.top()
    return top[0] if top else None


def tally_votes(vpc_groups: Iterable[GroupView | Mapping[str, Any]]) -> dict[str, int]:
    """chassis -> number of the VPC's groups voting for it (``group_vote``)."""
    votes: dict[str, int] = {}
    for g in vpc_groups:
        v = group_vote(g)
        if v is not None:
            votes[v] = votes.get(v, 0) + 1
    return votes


def pick_active(votes: Mapping[str, int], order: Sequence[str]) -> str | None:
    """Of the eligible chassis (``order``: rendezvous order), the one most groups vote
    for; a tie goes to the one the rendezvous order ranks higher."""
    best: str | None = None
    for c in order:
        if votes.get(c, 0) > (votes.get(best, 0) if best is not None else 0):
            best = c
    return best


def wanted_chassis(
    vpc: str,
    trunk: Sequence[TrunkNode],
    vpc_groups: Iterable[GroupView | Mapping[str, Any]] = (),
    votes: Mapping[str, int] | None = None,
    serving: str = "",
    successors: Sequence[str] = (),
) -> list[tuple[str, int]]:
    """Wanted (chassis, priority) for any router port of ``vpc``.

    Rendezvous order over ``vpc/<vpc>``; the chassis that serves the port (``serving``: it
    holds ``cr-<port>`` in the OVN SB) is moved to the top while it is in ``trunk``, so no
    membership change moves a serving gateway and a failover's survivor keeps it when the
    failed chassis returns (product-decisions.md §10); else the VPC's current active chassis
    (``pick_active`` over the groups' votes; ``votes`` from ``tally_votes`` may be passed
    instead of the groups) while it is still in ``trunk``; else the first of ``successors``
    (the port's own group when it votes, highest priority first) still in ``trunk``: the chassis OVN fails
    over to when the active one leaves, so a node that left and comes back under a new chassis
    ID (field-reports.md R7) joins below it instead of taking the gateway back.
    """
    order = [t.chassis for t in rendezvous_order(rendezvous_key(vpc), trunk)]
    active = serving if serving in order else None
    if active is None:
        active = pick_active(votes if votes is not None else tally_votes(vpc_groups), order)
    if active is None:
        active = next((c for c in successors if c in order), None)
    if active is not None:
        order.remove(active)
        order.insert(0, active)
    return list(zip(order, priorities(len(order))))


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class GroupPlan:
    name: str
    external_ids: dict[str, str]
    chassis: list[tuple[str, int]]  # wanted, highest priority first
    claim: Claim
    existing: GroupView | None = None

    @property
    def allowed(self) -> bool:
        return self.claim.allowed

    @property
    def message(self) -> str:
        return foreign_message(self.claim.reason) if not self.claim.allowed else ""


def plan_group(
    network_key: str,
    vpc: str,
    subnet: str,
    wanted: Sequence[TrunkNode] | Sequence[tuple[str, int]] | Sequence[str],
    existing_rows: Iterable[GroupView | Mapping[str, Any]] = (),
    votes: Mapping[str, int] | None = None,
    serving: str = "",
) -> GroupPlan:
    """Desired state of the group of one network's router port.

    ``wanted``: trunk nodes (TrunkNode, ordered here with the sticky active rule),
    or an already prioritised [(chassis, priority)] list, or chassis names in order.
    ``existing_rows``: existing groups of the VPC's networks (this network's group
    included if it exists); used for the claim rule and the sticky active chassis.
    ``votes``: the VPC's tally (``tally_votes``), when the caller keeps it; then only
    this network's own group needs to be among ``existing_rows``.
    ``serving``: the chassis holding the port's ``cr-`` binding ("" unknown): kept on top.

    external_ids: ours on a fresh group; on an existing group the existing map
    overlaid with owner/network (adoption keeps other keys such as ``note``).
    """
    name = group_name(vpc, subnet)
    groups = [as_group(g) for g in existing_rows]
    mine = next((g for g in groups if g.name == name), None)
    c = claim(mine, network_key)
    wanted = list(wanted)
    if wanted and isinstance(wanted[0], TrunkNode):
        # Only a group of ours in the planner's shape names successors (as only it votes).
        successors = ([c for c, _ in sorted(mine.chassis, key=lambda c: (-c[1], c[0]))]
                      if mine is not None and group_vote(mine) is not None else [])
        chassis = wanted_chassis(vpc, wanted, groups, votes, serving, successors)  # type: ignore[arg-type]
    elif wanted and isinstance(wanted[0], tuple):
        chassis = [(str(ch), int(p)) for ch, p in wanted]  # type: ignore[misc]
    else:
        names = [str(w) for w in wanted]
        chassis = list(zip(names, priorities(len(names))))
    ext = dict(mine.external_ids) if mine is not None else {}
    ext.update(group_external_ids(network_key))
    return GroupPlan(name, ext, chassis, c, mine)


# Fewer chassis than this and the gateway does not move when the active chassis fails.
FAILOVER_CHASSIS = 3


def failover_note(n: int) -> str:
    """What a group of ``n`` chassis cannot do, appended to the ChassisAssigned message
    ("" from :data:`FAILOVER_CHASSIS` on). found on the wire and in OVN's source:
    ovn-controller (controller/ha-chassis.c ``ha_chassis_group_is_active``) lets a chassis of
    a group of two or more be active only while it has a live BFD session, unless the SB
    lists no other chassis of the group; a survivor of two whose peer's datapath died has
    none left, so the gateway stays on the failed chassis."""
    if n == 1:
        return "; with 1 chassis there is no failover: make at least 3 nodes of the provider network ready"
    if n == 2:
        return ("; with 2 chassis OVN moves the gateway only while the survivor keeps a BFD session with another "
                "chassis, so it stays on a failed active chassis: make at least 3 nodes of the provider network ready")
    return ""


def assigned_message(lrp: str, group: str, chassis: Sequence[tuple[str, int]]) -> str:
    """ChassisAssigned condition message (§9.4), with :func:`failover_note` for a group of
    fewer than three chassis."""
    parts = ", ".join(f"{c}={p}" for c, p in chassis)
    return (
        f'router port "{lrp}" has HA chassis group "{group}" with {len(chassis)} chassis '
        f"({parts}); the highest priority is active{failover_note(len(chassis))}"
    )


# --------------------------------------------------------------------------- path MTU

GATEWAY_MTU_OPTION = "gateway_mtu"
# Kube-OVN's default pod MTU on Geneve: a 1500-byte tunnel NIC less its 100-byte budget for
# the encapsulation (kube-ovn pkg/util/const.go GeneveHeaderLength, pkg/daemon/config.go).
KUBE_OVN_OVERLAY_MTU = 1400
PROXMOX_DEFAULT_MTU = 1500  # a VM NIC's MTU when the zone sets none (capmox leaves it to Proxmox)


def gateway_mtu(zone_mtu: int | None, overlay_mtu: int) -> int:
    """The router port's ``options:gateway_mtu`` (product-decisions.md §10): the largest IP
    packet that crosses the gateway in both directions, the smaller of the VLAN's MTU (the
    zone's ``mtu``; unset: Proxmox's default, 1500) and the overlay's
    (``overlay_mtu``, what Kube-OVN gives pods: the Geneve tunnel carries no more). ovn-northd
    then answers a larger packet entering the router from the VLAN, or leaving it onto the
    VLAN, with ICMP "fragmentation needed" (``icmp4.frag_mtu`` = this value) instead of
    letting the tunnel or the VM's NIC drop it. 0 when ``overlay_mtu`` is 0 (the option is
    left alone)."""
    if overlay_mtu <= 0:
        return 0
    if isinstance(zone_mtu, int) and not isinstance(zone_mtu, bool) and zone_mtu > 0:
        return min(zone_mtu, overlay_mtu)
    return min(PROXMOX_DEFAULT_MTU, overlay_mtu)


# --------------------------------------------------------------------------- §9.4 decision


# Actions. A row is named by its uuid, or by the named uuid of a row the same plan
# inserts (``NEW_GROUP``, ``new_chassis_ref(i)``).


