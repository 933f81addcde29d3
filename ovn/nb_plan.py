"""The NB side of one network's gateway as a plan (``reference-behaviour.md`` §9.4): pure.

:func:`plan_ensure` and :func:`plan_delete` read a snapshot of the NB tables the controller
uses and return an :class:`NBPlan`: the verify preconditions and the row operations of one
OVSDB transaction (``ovn.gateway.apply_plan`` commits it), and the :class:`GatewayState` the network's
``GatewayReady`` reports. Which chassis, in which order, is :mod:`ovn.planner`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ovn.planner import (
    GATEWAY_MTU_OPTION,
    OWNER_KEY,
    GroupPlan,
    TrunkNode,
    assigned_message,
    group_name,
    groups_from_snapshot,
    plan_group,
    router_port_name,
)

LRP_TABLE = "Logical_Router_Port"


GROUP_TABLE = "HA_Chassis_Group"


CHASSIS_TABLE = "HA_Chassis"


# Reasons of GatewayReady (§9.4).
CHASSIS_ASSIGNED = "ChassisAssigned"


ROUTER_PORT_MISSING = "RouterPortMissing"


NO_TRUNK_NODES = "NoTrunkNodes"


FOREIGN_GROUP = "ForeignGroup"


NEW_GROUP = "pxgroup"  # named uuid of a group the plan inserts (§9.1)


def new_chassis_ref(i: int) -> str:
    """Named uuid of the HA_Chassis the plan inserts for wanted entry ``i`` (§9.1)."""
    return f"pxchassis{i}"


@dataclass(frozen=True)
class GatewayState:
    """Outcome of one ensure: the GatewayReady reason/message and the chassis gauge.

    ``created``/``adopted``/``updated`` say what the write does (all False when nothing
    is written); ``members`` the group's chassis after the pass, highest priority first
    (empty unless assigned), and ``active`` the first of them ("" if none).
    """

    reason: str
    message: str
    chassis: int = 0
    created: bool = False
    adopted: bool = False
    updated: bool = False
    members: tuple[str, ...] = ()
    mtu: int = 0  # the port's options:gateway_mtu after the pass (0: not managed by the controller)

    @property
    def active(self) -> str:
        return self.members[0] if self.members else ""

    @property
    def assigned(self) -> bool:
        return self.reason == CHASSIS_ASSIGNED


@dataclass(frozen=True)
class Verify:
    """Guard: the transaction commits only while these columns of the row are still
    what the plan read (OVSDB ``wait``)."""

    table: str
    uuid: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class InsertChassis:
    ref: str
    chassis_name: str
    priority: int


@dataclass(frozen=True)
class SetPriority:
    uuid: str
    priority: int


@dataclass(frozen=True)
class InsertGroup:
    ref: str
    name: str
    external_ids: Mapping[str, str]
    ha_chassis: tuple[str, ...]


@dataclass(frozen=True)
class SetGroupChassis:
    uuid: str
    ha_chassis: tuple[str, ...]


@dataclass(frozen=True)
class SetExternalIds:
    uuid: str
    external_ids: Mapping[str, str]


@dataclass(frozen=True)
class PointPort:
    uuid: str
    group: str


@dataclass(frozen=True)
class ClearPointer:
    uuid: str


@dataclass(frozen=True)
class DeleteGroup:
    uuid: str


@dataclass(frozen=True)
class SetPortOption:
    """One key of the router port's ``options`` (an OVSDB map mutation: Kube-OVN's own keys
    are not rewritten)."""

    uuid: str
    key: str
    value: str


@dataclass(frozen=True)
class DeletePortOption:
    uuid: str
    key: str


Action = (InsertChassis | SetPriority | InsertGroup | SetGroupChassis | SetExternalIds | PointPort | ClearPointer
          | DeleteGroup | SetPortOption | DeletePortOption)


@dataclass(frozen=True)
class NBPlan:
    """One guarded NB transaction: the guards, then the actions in order. No actions:
    nothing is written. ``state`` is what the pass reports once it is committed."""

    state: GatewayState
    actions: tuple[Action, ...] = ()
    guards: tuple[Verify, ...] = ()
    group: GroupPlan | None = None


Snapshot = Mapping[str, Mapping[str, Mapping[str, Any]]]


def _describe(snap: Snapshot, uuid: str) -> str:
    """§9.4 case 4 wording of the group a port already uses."""
    row = snap.get(GROUP_TABLE, {}).get(uuid)
    name = str((row or {}).get("name") or "")
    if not name:
        return f"HA_Chassis_Group {uuid}"
    owner = (row.get("external_ids") or {}).get(OWNER_KEY, "")  # type: ignore[union-attr]
    return f'HA_Chassis_Group "{name}" of "{owner}"' if owner else f'HA_Chassis_Group "{name}"'


def plan_ensure(
    network_key: str,
    vpc: str,
    subnet: str,
    trunk: Sequence[TrunkNode],
    snap: Snapshot,
    vpc_subnets: Iterable[str] = (),
    votes: Mapping[str, int] | None = None,
    serving: str = "",
    mtu: int = 0,
) -> NBPlan:
    """The §9.4 decision for the router port ``<vpc>-<subnet>``, and its write.

    :param trunk: eligible trunk nodes (``trunk_nodes``), any order.
    :param snap: NB rows in the shape of ``NBClient.snapshot()``; at least the port,
        this network's group, the group the port points at and their HA_Chassis rows.
    :param vpc_subnets: the VPC's other subnets: their groups (from ``snap``) vote for
        the VPC's active chassis (sticky, product-decisions.md §4.7) ...
    :param votes: ... unless the caller keeps the VPC's tally and passes it.
    :param serving: the chassis holding ``cr-<port>`` in the SB ("" unknown), kept on top.
    :param mtu: the port's ``options:gateway_mtu`` (:func:`gateway_mtu`; 0: left alone),
        written with the group.

    First match returns with nothing written: ForeignGroup by claim, RouterPortMissing,
    ForeignGroup by ``gateway_chassis``, ForeignGroup by another pointed group,
    NoTrunkNodes; else ChassisAssigned with the writes that bring the group and the
    port pointer to the wanted state, guarded by the port's ``ha_chassis_group`` and
    ``gateway_chassis`` and by every other column written from a value read.
    """
    lrp = router_port_name(vpc, subnet)
    gname = group_name(vpc, subnet)
    groups = groups_from_snapshot(snap)
    mine = groups.get(gname)
    if votes is None:
        names = {group_name(vpc, s) for s in vpc_subnets} | {gname}
        rows = [groups[n] for n in sorted(names) if n in groups]
    else:
        rows = [mine] if mine is not None else []
    gp = plan_group(network_key, vpc, subnet, list(trunk), rows, votes, serving)

    # 1. Someone else's group of our name.
    if not gp.allowed:
        return NBPlan(GatewayState(FOREIGN_GROUP, gp.message), group=gp)
    # 2. No router port (yet).
    port_uuid, port = next(
        ((u, r) for u, r in sorted(snap.get(LRP_TABLE, {}).items()) if r.get("name") == lrp), ("", None))
    if port is None:
        return NBPlan(GatewayState(ROUTER_PORT_MISSING, f'OVN has no logical router port "{lrp}" yet'), group=gp)
    # 3. A gateway port configured by hand (or by another tool).
    gwc = len(port.get("gateway_chassis") or ())
    if gwc:
        return NBPlan(GatewayState(
            FOREIGN_GROUP, f'router port "{lrp}" has {gwc} gateway_chassis; the controller leaves it alone'), group=gp)
    # 4. The port already points at another group.
    pointed = [str(u) for u in (port.get("ha_chassis_group") or ())]
    if pointed and (mine is None or pointed[0] != mine.uuid):
        return NBPlan(GatewayState(
            FOREIGN_GROUP, f'router port "{lrp}" already uses {_describe(snap, pointed[0])}; the controller leaves it alone',
        ), group=gp)
    # 5./6. Never attach an empty group (field-reports.md B06).
    have_mtu = _int(str((port.get("options") or {}).get(GATEWAY_MTU_OPTION, ""))) if mtu > 0 else 0
    if not trunk:
        return NBPlan(GatewayState(
            NO_TRUNK_NODES, "no node of the zone's provider network is ready with an OVN chassis",
            len(mine.chassis) if mine is not None else 0, mtu=have_mtu if mine is not None else 0), group=gp)

    wanted = gp.chassis
    message = assigned_message(lrp, gname, wanted)
    have = dict(zip((c for c, _ in mine.chassis), zip(mine.chassis_uuids, (p for _, p in mine.chassis))))\
        if mine is not None else {}
    actions: list[Action] = []
    guards: list[Verify] = []
    keep: list[str] = []
    add: list[str] = []
    for i, (ch, prio) in enumerate(wanted):
        if ch in have:
            uuid, old = have[ch]
            keep.append(uuid)
            if old != prio:
                guards.append(Verify(CHASSIS_TABLE, uuid, ("priority",)))
                actions.append(SetPriority(uuid, prio))
        else:
            ref = new_chassis_ref(i)
            actions.append(InsertChassis(ref, ch, prio))
            add.append(ref)
    created = adopted = False
    if mine is None:
        actions.append(InsertGroup(NEW_GROUP, gname, gp.external_ids, tuple(add)))
        group_ref = NEW_GROUP
        created = True
    else:
        group_ref = mine.uuid
        if add or set(mine.ha_chassis) - set(keep):
            guards.append(Verify(GROUP_TABLE, mine.uuid, ("ha_chassis",)))
            actions.append(SetGroupChassis(mine.uuid, tuple(keep + add)))
        if gp.claim.adopt:
            # Adoption in place: same uuid, other keys (e.g. "note") kept.
            guards.append(Verify(GROUP_TABLE, mine.uuid, ("external_ids",)))
            actions.append(SetExternalIds(mine.uuid, gp.external_ids))
            adopted = True
    if not pointed:
        actions.append(PointPort(port_uuid, group_ref))
    group_written = bool(actions)
    if mtu > 0 and have_mtu != mtu:
        actions.append(SetPortOption(port_uuid, GATEWAY_MTU_OPTION, str(mtu)))
    if actions:
        # The decision read both port columns: a concurrent change voids the whole
        # transaction (group insert included).
        guards.insert(0, Verify(LRP_TABLE, port_uuid, ("ha_chassis_group", "gateway_chassis")))
    state = GatewayState(CHASSIS_ASSIGNED, message, len(wanted), created, adopted, group_written and not created,
                         tuple(c for c, _ in wanted), mtu)
    return NBPlan(state, tuple(actions), tuple(guards), gp)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def plan_delete(snap: Snapshot, group_uuid: str, clear_mtu: bool = True) -> NBPlan:
    """Release of one group (§9.6): clear every router port pointing at it (and, with
    ``clear_mtu``, the ``options:gateway_mtu`` the ensure wrote with it: the port is Kube-OVN's
    plain router port again; off when the controller leaves the option alone), then delete it,
    while it is still ours (``external_ids`` guarded) and no port pointer moved."""
    ports = sorted(u for u, r in snap.get(LRP_TABLE, {}).items()
                   if group_uuid in [str(g) for g in (r.get("ha_chassis_group") or ())])
    guards = [Verify(LRP_TABLE, p, ("ha_chassis_group",)) for p in ports]
    guards.append(Verify(GROUP_TABLE, group_uuid, ("external_ids",)))
    actions: list[Action] = []
    for p in ports:
        actions.append(ClearPointer(p))
        if clear_mtu and GATEWAY_MTU_OPTION in (snap[LRP_TABLE][p].get("options") or {}):
            actions.append(DeletePortOption(p, GATEWAY_MTU_OPTION))
    actions.append(DeleteGroup(group_uuid))
    return NBPlan(GatewayState("", ""), tuple(actions), tuple(guards))
