"""The ProxmoxNetwork planner: a pure function from what a pass observed to what it does
(reference-behaviour.md §5 and §6; product-decisions.md §6).

:func:`plan_network` reads a :class:`NetworkSnapshot` (the listers' objects, the namespace
annotation, the clock reading of the pass, and the fresh reads and write results of the
pass so far) and returns a :class:`controller.plan.actions.Plan`. It has no client, no clock of
its own and no I/O. A live network's plan adds our finalizer, allocates or adopts its
Vlan, derives the whole status again and writes it only when it differs from the stored
one (so a converged network costs no write). A deleting network walks the release order of
§6 as a state machine whose next step depends only on fresh reads: it asks for each read
it needs (``Get``, ``ListConsumers``, ``SplitListed``) and never lets the VLAN go while a
consumer, the Subnet, the NB or a Kube-OVN reference may still use it.
"""

from __future__ import annotations

import copy
import datetime as _dt
from collections.abc import Mapping
from typing import Any

import attrs

from controller import names, reasons, schema
from controller.rules import allocator, kubeovn, release
from controller.plan.actions import (
    UNREAD,
    AddFinalizer,
    AdoptVlan,
    AllocateVlan,
    EnsureGateway,
    Event,
    EventSpec,
    ForgetOverlay,
    Get,
    ListConsumers,
    Log,
    Metric,
    NetworkGone,
    Plan,
    ReleaseGateway,
    ReleaseVlan,
    RemoveFinalizer,
    ReportOnce,
    RequestTriple,
    SetPoolCidrs,
    SetPruneTimers,
    SplitListed,
    WriteStatus,
    unread,
)
from controller.rules.addresses import (
    IN_CLUSTER_IP_POOL,
    address_conflicts_message,
    check_pool_split,
    duplicate_addresses_message,
    find_address_conflicts,
    find_duplicate_addresses,
    find_pool_overlaps,
    overlap_order,
    split_overlaps,
    pool_overlaps_message,
    pool_cidrs,
    pool_spans,
    prefix_bits,
)
from controller.rules.conditions import (
    FALSE,
    TRUE,
    UNKNOWN,
    compute_ready,
    find,
    remove_condition,
    set_condition,
    transition,
)
from controller.rfc3339 import Clock
from controller.rules.consumers import Consumers
from controller.names import NORMAL, WARNING
from controller.rules.foreign import find_foreign_addresses, foreign_address_message
from controller.plan.gateway import (
    FAILING_SINCE,
    GATEWAY_MTU,
    GROUP_STANDS,
    SERVING_CHASSIS,
    SERVING_SETTLE,
    GatewayOutcome,
    gateway_status,
)
from controller.rules.annotation import namespace_triple, split_value
from controller.rules.prune import go_list
from controller.rfc3339 import format_utc, parse
from controller.rules.selectors import InvalidSelector, matches
from controller.rules.vlan_claims import (
    changed_externally,
    claim_refusal,
    gives_back_duplicate,
    needs_adoption,
    older_claimant,
    recorded_id,
    taken_over,
    vlan_name_error,
    vlan_owner,
)
from ovn import planner as nb_planner

GATEWAY_DISABLED_MESSAGE = (
    "the controller does not manage the router port's HA chassis group (--manage-gateway-chassis=false)"
)
WAITING_FOR_VLAN = "waits for a VLAN to be allocated"
RESYNC_PERIOD = 600.0  # §5.10 with management off
GATEWAY_RETRY = 30.0  # gatewayRetryPeriod (§5.10)
GATEWAY_RESYNC = 300.0  # gatewayResyncPeriod (§5.10)
IN_USE_RETRY = 30.0
SUBNET_EXISTS_RETRY = 30.0
SUBNET_DELETING_RETRY = 10.0
GATEWAY_RELEASE_RETRY = 30.0
VLAN_REFERENCED_RETRY = 10.0
SWITCH_DELETING_RETRY = 10.0

# Ready reasons an operator only needs to know about, not act on: their Events are Normal.
NORMAL_REASONS = frozenset(
    {reasons.READY, reasons.PENDING, reasons.IN_USE, reasons.SUBNET_STILL_EXISTS, reasons.SUBNET_DELETING,
     reasons.VLAN_STILL_REFERENCED, reasons.SWITCH_DELETING,
     reasons.SUBNET_NOT_READY}
)


@attrs.frozen
class NetworkSnapshot:
    """What one pass over a network has observed so far.

    Filled by the observer (``controller.reconcile.network``) from the listers; the fields marked
    "pass" are filled by the executor as the plan's actions run (:data:`UNREAD` until then).

    :ivar network: the network (cache with our own writes overlaid), None when NotFound.
    :ivar now: the clock reading of the pass (aware UTC).
    :ivar zone, namespace: the network's zone and Namespace from the caches (None: absent).
    :ivar vlan: the Vlan named after ``spec.subnet`` (cache, else assumed set), or None.
    :ivar holders: the Vlans on the zone's provider with ``vlan``'s ID (assumed and cached).
    :ivar rivals: the cached networks (any namespace, this one included) naming the same
        ``spec.subnet``.
    :ivar subnet: the Subnet named by ``spec.subnet`` (cache), or None.
    :ivar subnet_bound: some cached Subnet names ``vlan`` in ``spec.vlan``.
    :ivar strangers: names (sorted) of the cached Subnets other than ``spec.subnet`` that name
        the network's Vlan in ``spec.vlan`` (field-reports.md R1); read for a deleting network too
        (they hold the release, whatever ``Vlan.status.subnets`` says: field reports, fourth
        round, field-reports.md S5).
    :ivar holder_subnets: for each other Vlan of ``holders``, the names (sorted) of the cached
        Subnets naming it (field-reports.md S6).
    :ivar pool: the network's InClusterIPPool (cache), or None.
    :ivar other_pools: ``(kind, pool)`` of the InClusterIPPools (any namespace) and
        GlobalInClusterIPPools that may share addresses with ``pool`` (the overlap index's
        candidates; the planner checks them exactly). May include ``pool`` itself.
    :ivar pool_vpcs: ``<namespace>/<name>`` of each InClusterIPPool of ``other_pools`` that
        networks use -> the VPCs of their Subnets (product-decisions.md §10: addresses are
        unique per VPC).
    :ivar kube_ovn_ips: the Kube-OVN IPs of ``spec.subnet`` (cache).
    :ivar pool_addresses: the IPAddresses whose ``spec.poolRef`` names ``pool`` (cache).
    :ivar consumers: the pool's consumers counted from the caches.
    :ivar machines: the ProxmoxMachines of the namespace with a NIC that references ``pool``
        or is on the zone's bridge with the network's VLAN (cache; field-reports.md S4).
    :ivar machine_claims: the IPAddressClaims those machines own (cache).
    :ivar machine_addresses: the IPAddresses of those claims (cache).
    :ivar owns_group: the NB cache holds an HA_Chassis_Group owned by this network (read
        for a deleting network only; §6 step 3 releases then even without ``status.vlan``).
    :ivar annotation: the namespace annotation's value (None: no Namespace).
    :ivar trunk, siblings: the gateway step's inputs (trunk nodes, the VPC's subnet names).
    :ivar subnet_vpc: the Kube-OVN Vpc the Subnet names (None: not found, or Vpcs not served).
    :ivar trunk_recheck: seconds until a trunk node held down leaves ``trunk`` (field report
        field-reports.md R12), None when none is held: the pass comes back then.
    :ivar sb_binding: the router port's ``cr-`` binding in the OVN SB (``ovn.sb.Binding``),
        None when the SB is not read (product-decisions.md §10); ``serving_settle`` the
        seconds a missing binding is let pass (``controller.plan.gateway.serving``).
    :ivar pruned: the status fields the API server prunes for ProxmoxNetworks (a CRD older
        than the controller: ``controller.schema``); the write decision leaves them out.
    """

    key: str
    network: Mapping[str, Any] | None
    now: _dt.datetime
    manage_gateway: bool = False
    gateway_enabled: bool = False
    prune_timeout: float = 600.0
    grace: float = 600.0
    zone: Mapping[str, Any] | None = None
    namespace: Mapping[str, Any] | None = None
    vlan: Mapping[str, Any] | None = None
    holders: tuple[Mapping[str, Any], ...] = ()
    rivals: tuple[Mapping[str, Any], ...] = ()
    subnet: Mapping[str, Any] | None = None
    subnet_vpc: Mapping[str, Any] | None = None
    subnet_bound: bool = False
    strangers: tuple[str, ...] = ()
    holder_subnets: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    pool: Mapping[str, Any] | None = None
    other_pools: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    pool_vpcs: Mapping[str, frozenset[str]] = attrs.field(factory=dict)
    kube_ovn_ips: tuple[Mapping[str, Any], ...] = ()
    pool_addresses: tuple[Mapping[str, Any], ...] = ()
    consumers: Consumers = attrs.field(factory=Consumers)
    machines: tuple[Mapping[str, Any], ...] = ()
    machine_claims: tuple[Mapping[str, Any], ...] = ()
    machine_addresses: tuple[Mapping[str, Any], ...] = ()
    owns_group: bool = False
    annotation: str | None = None
    trunk: tuple[Any, ...] = ()
    trunk_recheck: float | None = None
    siblings: frozenset[str] = frozenset()
    sb_binding: Any = None
    serving_settle: float = SERVING_SETTLE
    kube_ovn_stale_after: float = kubeovn.KUBE_OVN_STALE_AFTER
    pruned: frozenset[str] = frozenset()
    # pass: allocation and adoption
    refusal: tuple[str, str] | None = None
    allocated_now: bool = False
    requested: bool = False
    gateway: GatewayOutcome | None = None
    # pass: fresh reads of a release (§6) and of a duplicate's give-back (field-reports.md B15)
    fresh_consumers: Any = UNREAD
    fresh_subnet: Any = UNREAD
    fresh_vlan: Any = UNREAD
    fresh_network: Any = UNREAD
    fresh_named_subnet: Any = UNREAD
    listed: Any = UNREAD
    gateway_release: Any = UNREAD
    released: bool = False
    subnet_released: bool = False
    finalized: Any = UNREAD


def requeue_after(manage_gateway: bool, status: Mapping[str, Any]) -> float:
    """§5.10: 10 min with management off; 30 s while an NB failure is recorded or
    GatewayReady waits for the NB, the SB, the router port or a serving chassis; 5 min
    otherwise."""
    if not manage_gateway:
        return RESYNC_PERIOD
    if status.get(FAILING_SINCE):
        return GATEWAY_RETRY
    gw = find(status.get("conditions"), names.GATEWAY_READY)
    if gw is not None and gw.get("reason") in (reasons.NB_UNAVAILABLE, reasons.ROUTER_PORT_MISSING,
                                              reasons.SB_UNAVAILABLE, reasons.NO_SERVING_CHASSIS):
        return GATEWAY_RETRY
    return GATEWAY_RESYNC


def outside_ranges(zspec: Mapping[str, Any], vid: Any, static: int | None) -> str:
    """Why a network's VLAN ``vid`` is no longer the zone's to hand out (its ranges or
    reserved IDs changed after the allocation; a static VLAN of the network may lie outside
    the ranges, §4.2), or "" when it still is. The zone's own stranded list
    (reference-behaviour.md §8 step 5) applies the same rule."""
    if not isinstance(vid, int) or vid == static:
        return ""
    try:
        if vid in allocator.candidates(zspec):
            return ""
    except allocator.VLANRangeError:
        return ""  # the zone is ZoneInvalid: the zone's condition says why
    if vid in (zspec.get("reservedVLANs") or []):
        return f"VLAN {vid} is now among the zone's reservedVLANs"
    ranges = ", ".join(str(r) for r in (zspec.get("vlanRanges") or []))
    return f"VLAN {vid} is outside the zone's current vlanRanges ({ranges})"


def set_not_ready(
    conds: list[dict[str, Any]], ctype: str, reason: str, message: str, gen: int, manage_gateway: bool,
    clock: Clock,
) -> None:
    """``setNotReady`` of §5.4: the condition False, and when it is VLANAllocated the
    conditions that depend on a VLAN become Unknown/``WaitingForVLAN``."""
    set_condition(conds, ctype, FALSE, reason, message, gen, clock)
    if ctype == names.VLAN_ALLOCATED:
        deps = [names.SUBNET_READY, names.IPPOOL_READY]
        gw = find(conds, names.GATEWAY_READY)
        if manage_gateway and (gw is None or gw.get("reason") != reasons.DISABLED):
            deps.append(names.GATEWAY_READY)
        for dep in deps:
            set_condition(conds, dep, UNKNOWN, reasons.WAITING_FOR_VLAN, WAITING_FOR_VLAN, gen, clock)
    compute_ready(conds, gen, clock)


def duplicate_holders(vlan: Mapping[str, Any], on_provider: Any) -> list[str]:
    """Names of the other Vlans on the same provider holding the same ID (sorted)."""
    vid = allocator.vlan_id(vlan)
    me = vlan["metadata"]["name"]
    return sorted(
        v["metadata"]["name"]
        for v in on_provider
        if v["metadata"]["name"] != me and allocator.vlan_id(v) == vid
    )


def on_vlan_note(subnets: tuple[str, ...]) -> str:
    """`` (Subnet "a", "b")`` for the Subnets naming a duplicate Vlan, "" for none (field
    report field-reports.md S6: each has a localnet port on the VLAN; on Kube-OVN v1.15 such a Subnet may still
    show a healthy range, so the Vlan objects and their Subnets are what the check rests on)."""
    if not subnets:
        return ""
    named = ", ".join(f'"{n}"' for n in subnets)
    return f" (Subnet {named})"


def strangers_message(vname: str, vid: Any, strangers: tuple[str, ...]) -> str:
    """VLANConflict's message for Subnets of someone else on the network's Vlan (field
    report field-reports.md R1: Kube-OVN gives every Subnet naming a Vlan its own localnet port with the
    Vlan's tag, so their VMs and pods share one L2 segment with this network's)."""
    named = ", ".join(f'"{n}"' for n in strangers)
    return (f'Subnet {named} also name{"s" if len(strangers) == 1 else ""} Vlan "{vname}" (VLAN {vid}) of this '
            "network: Kube-OVN puts each on the VLAN with a localnet port of its own, joining its L2 segment to "
            "this network's. Delete it or point it at a Vlan of its own; the controller never deletes it, and "
            f"keeps VLAN {vid} allocated while it exists")


def kube_ovn_conflict_note(vlan: Mapping[str, Any], subnet: Mapping[str, Any] | None) -> str:
    """What Kube-OVN itself does about a duplicate of ``vlan``, appended to our VLANConflict
    message ("" when it has not flagged ours). Kube-OVN v1.15 flags every Vlan of a
    duplicated ID it checks (ours at its next event or restart) and then stops configuring
    the Subnets on it: ``validateSubnetVlan`` sets the Subnet ``Ready=False`` with reason
    ``ValidateSubnetVlanFailed`` (pkg/controller/subnet.go), so no new port gets on the VLAN
    until the duplicate is gone and Kube-OVN checks ours again."""
    if not kubeovn.flags_conflict(vlan):
        return ""
    vname = vlan["metadata"]["name"]
    note = f'; Kube-OVN flags Vlan "{vname}" as conflicting too'
    if subnet is not None:
        sname = subnet["metadata"]["name"]
        ready = find((subnet.get("status") or {}).get("conditions") or [], "Ready") or {}
        if ready.get("status") == FALSE and ready.get("reason") == kubeovn.SUBNET_VLAN_INVALID:
            note += f' and has taken Subnet "{sname}" down (Ready=False, {kubeovn.SUBNET_VLAN_INVALID})'
        else:
            note += f' and stops configuring Subnet "{sname}"'
    return note + "; delete the other Vlan, then Kube-OVN clears the flag at its next check of this one"


def subnet_conditions(subnet: Mapping[str, Any]) -> tuple[str, str, str]:
    """SubnetReady (status, reason, message) from Kube-OVN's conditions (§5.5)."""
    conds = (subnet.get("status") or {}).get("conditions") or []
    ready = find(conds, "Ready")  # Kube-OVN's condition type
    if ready is not None and ready.get("status") == TRUE:
        return TRUE, reasons.READY, "Kube-OVN reports the subnet Ready"
    reason = reasons.SUBNET_NOT_READY
    message = (ready or {}).get("message") or "Kube-OVN has not reported the subnet Ready yet"
    validated = find(conds, "Validated")
    if validated is not None and validated.get("status") == FALSE:
        reason, message = reasons.SUBNET_INVALID, validated.get("message") or ""
    return FALSE, reason, message


def namespace_allowed(namespace: Mapping[str, Any] | None, selector: Any) -> bool:
    """§5.3: no selector admits every namespace; an absent Namespace or an invalid
    selector admits none."""
    if selector is None:
        return True
    if namespace is None:
        return False
    labels = (namespace.get("metadata") or {}).get("labels") or {}
    try:
        return matches(selector, labels)
    except InvalidSelector:
        return False


def listed(annotation: str | None, triple: str) -> bool:
    """Whether ``triple`` may show in a status of the namespace: it is in the annotation
    (§5.9 step 8). ``None`` (the Namespace not in our cache) lists nothing: §5.9's "cached Get
    ... NotFound → nothing" would read a watch that has not yet brought a Namespace created
    just before its network, and the status would show a VLAN that admission does not yet
    allow (flake hunt, failure 13). A live network's Namespace exists (the API server removes
    a Namespace only after its content), so the status waits for the Namespace's add event."""
    return annotation is not None and triple in split_value(annotation)


def status_waits(s: NetworkSnapshot, status: Mapping[str, Any]) -> bool:
    """``status`` shows a triple the namespace annotation does not list yet, and the stored
    status does not show it either (§5.9 step 8): it is not written now."""
    net = s.network or {}
    triple = namespace_triple({"spec": net.get("spec"), "status": status})
    return bool(triple) and namespace_triple(net) != triple and not listed(s.annotation, triple)


def ready_event(old: Mapping[str, Any], status: Mapping[str, Any]) -> EventSpec | None:
    """The Event of a Ready transition (product-decisions.md §4.1): Normal for the reasons
    an operator need not act on, else Warning."""
    after = transition(old.get("conditions"), status.get("conditions"), names.READY)
    if after is None:
        return None
    etype = NORMAL if after.get("reason") in NORMAL_REASONS else WARNING
    return EventSpec(etype, after.get("reason", ""), after.get("message", ""))


def network_series(net: Mapping[str, Any], status: Mapping[str, Any]) -> list[Metric]:
    """The network series of reference-behaviour.md §13 from the status just computed."""
    meta, spec = net["metadata"], net.get("spec") or {}
    ns, name = meta["namespace"], meta["name"]
    ready = find(status.get("conditions"), names.READY)
    out = [Metric("set_network", (
        ns, name, str(spec.get("zone") or ""), status.get("vlan") or 0,
        ready is not None and ready.get("status") == TRUE, status.get("ipPool"), False,
    ))]
    va = find(status.get("conditions"), names.VLAN_ALLOCATED)
    out.append(Metric("set_vlan_changed", (ns, name, va is not None and va.get("reason") == reasons.VLAN_CHANGED_EXTERNALLY)))
    out.append(Metric("set_stuck_holders", (ns, name, 0)))  # holders are judged while deleting
    gw = find(status.get("conditions"), names.GATEWAY_READY)
    if gw is None or gw.get("reason") == reasons.DISABLED:
        out.append(Metric("forget_gateway", (ns, name)))
    else:
        out.append(Metric("set_gateway_ready", (ns, name, gw.get("status") == TRUE)))
        out.append(Metric("set_gateway_serving", (ns, name, *serving_series(status, gw))))
    return out


def serving_series(status: Mapping[str, Any], gw: Mapping[str, Any]) -> tuple[bool | None, str]:
    """(bound, chassis) of the serving-chassis series from the status (product-decisions.md
    §10): bound while ``servingChassis`` accompanies a True ChassisAssigned, unbound with
    NoServingChassis, absent (None) otherwise (the SB unknown or not read, another reason)."""
    chassis = str(status.get(SERVING_CHASSIS) or "")
    if gw.get("reason") == reasons.NO_SERVING_CHASSIS:
        return False, ""
    if gw.get("reason") == reasons.CHASSIS_ASSIGNED and gw.get("status") == TRUE and chassis:
        return True, chassis
    return None, ""


def plan_network(s: NetworkSnapshot) -> Plan:
    """The next plan of a pass over ``s.key`` (see the module docstring)."""
    net = s.network
    if net is None:
        ns, _, name = s.key.partition("/")
        return Plan((Metric("forget_network", (ns, name)), NetworkGone(s.key)))
    meta = net["metadata"]
    if meta.get("deletionTimestamp"):
        return plan_deletion(s)
    if names.FINALIZER not in (meta.get("finalizers") or []):
        return Plan((AddFinalizer(names.PROXMOX_NETWORKS, net, "network"),), replan=True)
    return _Live(s).plan()


class _Live:
    """One plan of a live network (§5.2-§5.9). Builds the status in a copy of the stored
    one and the actions in order; a method returns the plan as soon as it needs a result."""

    def __init__(self, s: NetworkSnapshot) -> None:
        self.s = s
        self.net: Mapping[str, Any] = s.network  # type: ignore[assignment]
        meta = self.net["metadata"]
        self.ns, self.name = meta["namespace"], meta["name"]
        self.spec = self.net.get("spec") or {}
        self.gen = int(meta.get("generation") or 0)
        self.old: Mapping[str, Any] = self.net.get("status") or {}
        self.status: dict[str, Any] = copy.deepcopy(dict(self.old))
        self.status["observedGeneration"] = self.gen
        self.conds: list[dict[str, Any]] = self.status.setdefault("conditions", [])
        self.actions: list[Any] = []
        self.clock = lambda: s.now  # noqa: E731
        self.overlaps = 0  # the pool gauges: 0 until the pool step has looked
        self.conflicts = 0
        self.in_default_vpc = False  # set by the Subnet step (field-reports.md R2)
        self.serving_recheck: float | None = None  # set by the gateway step (§10)
        self.stale_recheck: float | None = None  # set by the Subnet step (field-reports.md S1)

    def not_ready(self, reason: str, message: str) -> None:
        set_not_ready(self.conds, names.VLAN_ALLOCATED, reason, message, self.gen, self.s.manage_gateway, self.clock)

    def plan(self) -> Plan:
        pending = self.fill()
        if pending is not None:
            return pending
        return self.finish(waits=False)

    def fill(self) -> Plan | None:
        """The status of a live pass into ``self.status``; a Plan when a result is needed
        first, or when the status waits for the namespace annotation (the gateway step was
        then skipped: the group follows the status)."""
        s, spec, conds, gen = self.s, self.spec, self.conds, self.gen
        # §5.2 gateway pre-step.
        gw = find(conds, names.GATEWAY_READY)
        if not s.manage_gateway:
            set_condition(conds, names.GATEWAY_READY, UNKNOWN, reasons.DISABLED, GATEWAY_DISABLED_MESSAGE, gen, self.clock)
        elif gw is not None and gw.get("reason") == reasons.DISABLED:
            remove_condition(conds, names.GATEWAY_READY)

        # §5.3 zone and namespace.
        zname = str(spec.get("zone") or "")
        zone = s.zone
        if zone is None:
            self.not_ready(reasons.ZONE_NOT_FOUND, f'ProxmoxNetworkZone "{zname}" does not exist')
            return None
        zspec = zone.get("spec") or {}
        if not namespace_allowed(s.namespace, zspec.get("namespaceSelector")):
            self.not_ready(reasons.NAMESPACE_NOT_ALLOWED,
                           f'namespace "{self.ns}" does not match the namespaceSelector of zone "{zname}"')
            return None

        # §5.4 VLAN.
        provider = str(zspec.get("providerNetwork") or "")
        if s.refusal is not None:
            self.not_ready(*s.refusal)
            return None
        vlan = s.vlan
        if vlan is None:
            refusal = self.may_claim()
            if refusal is not None:
                self.not_ready(*refusal)
                return None
            return Plan(tuple(self.actions) + (AllocateVlan(self.net, zone, self.created_annotations()),), replan=True)
        refusal = claim_refusal(vlan, self.ns, self.name, zname, provider)
        if refusal is not None:
            self.not_ready(*refusal)
            return None
        if needs_adoption(vlan):
            return Plan(tuple(self.actions) + (AdoptVlan(vlan),), replan=True)
        self.pool_cidrs_step(vlan)
        vid = allocator.vlan_id(vlan)
        vname = vlan["metadata"]["name"]
        bridge = str(zspec.get("bridge") or "")
        recorded = recorded_id(self.net)
        accepted = ((self.net["metadata"].get("annotations") or {}).get(names.ANNOTATION_ACCEPT_VLAN_ID))
        if not s.allocated_now and changed_externally(vlan, recorded, accepted):
            # Never written back, never followed: status.vlan (and so the namespace
            # annotation) keeps the allocated ID the VMs use.
            self.not_ready(reasons.VLAN_CHANGED_EXTERNALLY,
                           f'Vlan "{vname}" was changed to VLAN {vid} by someone else, but VLAN {recorded} was '
                           f"allocated to this network and its VMs still use it; put spec.id of Vlan \"{vname}\" "
                           f"back to {recorded}, or accept VLAN {vid} by annotating this network "
                           f'{names.ANNOTATION_ACCEPT_VLAN_ID}="{vid}"')
            return None
        if s.allocated_now:
            self.actions.append(Event(self.net, NORMAL, reasons.EVENT_VLAN_ALLOCATED,
                                      f'allocated VLAN {vid} on provider "{provider}" (Vlan "{vname}")'))
        status = self.status
        status["vlan"] = vid if vid is not None else 0
        status["vlanName"] = vname
        status["bridge"] = bridge
        mtu = zspec.get("mtu")
        if isinstance(mtu, int) and not isinstance(mtu, bool):
            status["mtu"] = mtu
        else:
            status.pop("mtu", None)
        # Our own duplicate check first: its message names the other Vlans, which Kube-OVN's
        # flag does not (v1.15 flags ours too at any update of it while a
        # duplicate exists, and un-Readies the Subnet).
        others = duplicate_holders(vlan, s.holders)
        if others:
            return self.duplicate(vlan, vid, provider, others)
        if s.strangers:
            self.not_ready(reasons.VLAN_CONFLICT, strangers_message(vname, vid, s.strangers))
            return None
        if kubeovn.flags_conflict(vlan):
            self.not_ready(reasons.VLAN_CONFLICT,
                           f'Kube-OVN reports VLAN {vid} on provider "{provider}" as conflicting with another Vlan')
            return None
        msg = f"VLAN {vid} on bridge {bridge}"
        static = allocator.static_assignment_for(zone, self.ns, self.name)
        if static is not None and static != vid:
            msg += f"; the static assignment asks for VLAN {static}, which applies only when the network is recreated"
        why = outside_ranges(zspec, vid, static)
        if why:
            msg += f"; {why}: the network keeps it until it is deleted, and it is not handed out again while so"
        set_condition(conds, names.VLAN_ALLOCATED, TRUE, reasons.ALLOCATED_OUTSIDE_RANGES if why else reasons.ALLOCATED,
                      msg, gen, self.clock)

        subnet = self.subnet_step(vname)
        self.pool_step(subnet)
        self.foreign_step(subnet, bridge, vid)
        if s.manage_gateway:
            if subnet is None:
                set_condition(conds, names.GATEWAY_READY, UNKNOWN, reasons.SUBNET_UNAVAILABLE,
                              "the router port is looked up once the subnet is bound", gen, self.clock)
            elif self.in_default_vpc and s.gateway_enabled:
                pending = self.no_default_vpc_gateway(subnet)
                if pending is not None:
                    return pending
            elif s.gateway_enabled:
                if status_waits(s, status):
                    # The group follows the status: while the status waits for the namespace
                    # annotation no group is written (the status write after the group can
                    # still be lost: §6 step 3 also asks the NB cache, ``owns_group``).
                    return self.finish(waits=True)
                pending = self.gateway_step(subnet)
                if pending is not None:
                    return pending
            else:
                c = find(conds, names.GATEWAY_READY)
                if c is not None and c.get("reason") in (reasons.SUBNET_UNAVAILABLE, reasons.WAITING_FOR_VLAN):
                    remove_condition(conds, names.GATEWAY_READY)
        compute_ready(conds, gen, self.clock)
        return None

    def pool_cidrs_step(self, vlan: Mapping[str, Any]) -> None:
        """the network's own Vlan carries its pool's addresses as CIDRs
        (annotation ``proxmox.cozystack.io/pool-cidrs``, :func:`controller.rules.addresses.pool_cidrs`),
        which the admission policies ``proxmox-network-{pod,ip}-addresses`` read with the
        Vlan as their param (docs/admission.md). Written only when it differs, so a converged
        pass writes nothing; not while the pool is absent from the cache (its last addresses
        may still be held by VMs) nor on a Terminating Vlan."""
        if self.s.pool is None or vlan["metadata"].get("deletionTimestamp") or not taken_over(vlan):
            return
        want = self.wanted_pool_cidrs()
        have = (vlan["metadata"].get("annotations") or {}).get(names.ANNOTATION_POOL_CIDRS)
        if want != have:
            self.actions.append(SetPoolCidrs(vlan, want))

    def wanted_pool_cidrs(self) -> str | None:
        """The ``pool-cidrs`` value the network's Vlan should carry (None: no usable
        address, or no pool in the cache)."""
        return pool_cidrs(self.s.pool.get("spec") or {}) if self.s.pool is not None else None

    def created_annotations(self) -> tuple[tuple[str, str], ...]:
        """What a Vlan made now carries from the start: the pool's CIDRs when the pool is in
        the cache (:meth:`pool_cidrs_step` then has nothing to write)."""
        want = self.wanted_pool_cidrs()
        return ((names.ANNOTATION_POOL_CIDRS, want),) if want is not None else ()

    def may_claim(self) -> tuple[str, str] | None:
        """Before a Vlan is made for ``spec.subnet``: why not, as (reason, message); None
        when it may be. The name must be one the API server takes (no create that can only
        be refused), and no older network may claim the same Subnet."""
        sname = str(self.spec.get("subnet") or "")
        bad = vlan_name_error(sname)
        if bad is not None:
            shown = sname if len(sname) <= 64 else sname[:64] + "..."
            return (reasons.SUBNET_NAME_INVALID,
                    f'spec.subnet "{shown}" cannot name a Kube-OVN Vlan or Subnet: {bad}; '
                    "spec.subnet is immutable: recreate the network with the name of the Kube-OVN Subnet")
        older = older_claimant(self.net, self.s.rivals)
        if older is not None:
            om = older["metadata"]
            return (reasons.VLAN_NAME_TAKEN,
                    f'Subnet "{sname}" is claimed by network {om.get("namespace")}/{om.get("name")}, created first '
                    f'({om.get("creationTimestamp")}); one Subnet extends to one network')
        return None

    def duplicate(self, vlan: Mapping[str, Any], vid: int | None, provider: str, others: list[str]) -> Plan | None:
        """product-decisions.md §7: a duplicate ID is VLANConflict; the Vlan of a
        self-made duplicate nothing has bound yet is given back, decided on fresh reads."""
        s = self.s
        vname = vlan["metadata"]["name"]
        held = ", ".join(f'"{o}"' + on_vlan_note(s.holder_subnets.get(o, ())) for o in others)
        msg = f'VLAN {vid} on provider "{provider}" is also held by Vlan {held}'
        twins = [v for v in s.holders if v["metadata"]["name"] != vname]
        if gives_back_duplicate(vlan, twins) and not s.subnet_bound:
            pending = self.give_back(vlan)
            if pending is not None:
                return pending
            if s.released:
                self.actions.append(Event(
                    self.net, WARNING, reasons.VLAN_DUPLICATE_REPAIRED,
                    f'{msg}; gave back Vlan "{vname}" (made by this controller, not bound yet) and allocating again'))
                msg += "; this network's Vlan was given back and is allocated again"
        self.not_ready(reasons.VLAN_CONFLICT, msg + kube_ovn_conflict_note(vlan, s.subnet))
        return None

    def give_back(self, vlan: Mapping[str, Any]) -> Plan | None:
        """The give-back of field-reports.md B15: the Vlan is still the same object, not
        Terminating, with the same ID and no subnet listed; no Subnet is named after it;
        no consumer holds the network's pool. A Plan while a fresh read is missing."""
        s = self.s
        name = vlan["metadata"]["name"]
        if s.released:
            return None
        if unread(s.fresh_vlan):
            return self.need(Get(names.VLANS, name, None, "fresh_vlan"))
        fresh = s.fresh_vlan
        if fresh is None:
            return None
        fm = fresh.get("metadata") or {}
        if (fm.get("uid") != vlan["metadata"].get("uid") or fm.get("deletionTimestamp")
                or allocator.vlan_id(fresh) != allocator.vlan_id(vlan)
                or (fresh.get("status") or {}).get("subnets")):
            return None
        if unread(s.fresh_named_subnet):
            return self.need(Get(names.SUBNETS, name, None, "fresh_named_subnet"))
        if s.fresh_named_subnet is not None:
            return None
        if unread(s.fresh_consumers):
            return self.need(ListConsumers(self.ns, str(self.spec.get("ipPool") or ""), "fresh_consumers"))
        if s.fresh_consumers.busy:
            return None
        return self.need(
            Log("warning", "giving back a duplicate VLAN this controller made",
                {"vlan": name, "id": allocator.vlan_id(fresh), "network": s.key}),
            ReleaseVlan(fresh, "", {}),
        )

    def need(self, *actions: Any) -> Plan:
        return Plan(tuple(self.actions) + actions, replan=True)

    def subnet_step(self, vlan_name: str) -> Mapping[str, Any] | None:
        """§5.5; the Subnet when it is bound to our Vlan, else None."""
        s, conds, gen, status = self.s, self.conds, self.gen, self.status
        sname = str(self.spec.get("subnet") or "")
        sub = s.subnet
        if sub is None:
            set_condition(conds, names.SUBNET_READY, FALSE, reasons.SUBNET_NOT_FOUND,
                          f'Kube-OVN Subnet "{sname}" does not exist', gen, self.clock)
            return None
        sspec = sub.get("spec") or {}
        actual = sspec.get("vlan") or ""
        if actual != vlan_name:
            set_condition(conds, names.SUBNET_READY, FALSE, reasons.SUBNET_NOT_BOUND,
                          f'Subnet "{sname}" has spec.vlan "{actual}", expected "{vlan_name}"', gen, self.clock)
            return None
        smeta = sub.get("metadata") or {}
        if (not smeta.get("deletionTimestamp") and names.FINALIZER not in (smeta.get("finalizers") or [])
                and kubeovn.processed(sub)):
            self.actions.append(AddFinalizer(names.SUBNETS, sub, "subnet"))
        cidr = str(sspec.get("cidrBlock") or "")
        status["cidr"] = cidr
        gateway = sspec.get("gateway")
        if gateway:
            status["gateway"] = gateway
        else:
            status.pop("gateway", None)
        bits = prefix_bits(cidr)
        if bits is not None:
            status["prefix"] = bits
        if kubeovn.in_default_vpc(sub):
            # field-reports.md R2: whatever Kube-OVN says of it, never a tenant VLAN's gateway.
            self.in_default_vpc = True
            set_condition(conds, names.SUBNET_READY, FALSE, reasons.SUBNET_INVALID, kubeovn.default_vpc_message(sub),
                          gen, self.clock)
            return sub
        st, reason, message = subnet_conditions(sub)
        vlan = s.vlan
        ours = vlan is not None and vlan_owner(vlan) == (self.ns, self.name)
        stale, self.stale_recheck = kubeovn.stale_vlan_validation(sub, vlan if ours else None, s.now,
                                                                   s.kube_ovn_stale_after)
        if stale:
            # field-reports.md S1: Kube-OVN's state, not the tenant's mistake; the Vlan and Subnet stay untouched.
            reason, message = reasons.SUBNET_NOT_READY, stale
            was = find((self.old.get("conditions") or []), names.SUBNET_READY) or {}
            if stale not in str(was.get("message") or ""):
                self.actions.append(Event(self.net, WARNING, reasons.KUBE_OVN_STALE, stale))
        foreign = kubeovn.foreign_vpc_note(sub, self.s.subnet_vpc, self.ns)
        if foreign:
            # Report only (field-reports.md R2): a ProxmoxNetwork names no VPC to hold the Subnet to.
            message = f"{message}; {foreign}"
            was = find((self.old.get("conditions") or []), names.SUBNET_READY) or {}
            if foreign not in str(was.get("message") or ""):
                self.actions.append(Event(self.net, WARNING, reasons.SUBNET_IN_FOREIGN_VPC, foreign))
        set_condition(conds, names.SUBNET_READY, st, reason, message, gen, self.clock)
        return sub

    def pool_step(self, subnet: Mapping[str, Any] | None) -> None:
        """§5.6 and product-decisions.md §8. IPPoolReady, first failure wins: ``PoolNotFound``;
        Unknown ``SubnetUnavailable``; the split checks of
        :func:`controller.rules.addresses.check_pool_split` (the pool's own fields and its place
        in the Subnet, ending with ``PoolOverlapsSubnet``); ``PoolOverlapsPool`` (another
        pool shares addresses); ``AddressConflict`` (a Kube-OVN IP holds one now); True
        ``PoolExhausted``; True ``Ready``. ``PoolOverlapsPool`` follows product-decisions.md §10
        (:func:`controller.rules.addresses.split_overlaps`): False on the pool that came later, True
        (a warning, before ``PoolExhausted``) on a pool that a later pool of no network
        overlaps. The pool's own faults come first: until they are
        fixed its addresses are not the ones it will hand out. The two clashes follow in the
        order of product-decisions.md §8; both gauges count whatever the condition shows
        (docs/api.md, "IPPoolReady")."""
        conds, gen, status, clock = self.conds, self.gen, self.status, self.clock
        pname = str(self.spec.get("ipPool") or "")
        pool = self.s.pool
        if pool is None:
            status.pop("ipPool", None)
            set_condition(conds, names.IPPOOL_READY, FALSE, reasons.POOL_NOT_FOUND,
                          f'InClusterIPPool "{pname}" does not exist in this namespace', gen, clock)
            return
        own = pool_spans(pool.get("spec"))
        own_vpc = kubeovn.subnet_vpc(subnet) if subnet is not None else ""
        overlaps, later = split_overlaps(
            find_pool_overlaps((IN_CLUSTER_IP_POOL, f"{self.ns}/{pname}"), own, self.s.other_pools),
            (str((pool.get("metadata") or {}).get("creationTimestamp") or ""), f"{self.ns}/{pname}"),
            own_vpc, self.s.pool_vpcs)
        conflicts = find_address_conflicts(own, self.s.kube_ovn_ips, self.s.pool_addresses)
        twice = find_duplicate_addresses(self.s.pool_addresses)
        was = find(self.old.get("conditions") or [], names.IPPOOL_READY) or {}
        if was.get("status") == TRUE:
            # A Ready network is never taken down by someone else's later choice (§10): an overlap
            # appearing while its pool is Ready (another pool made or edited since) only warns.
            later, overlaps = [*overlaps, *later], []
        self.overlaps, self.conflicts = len(overlaps), len(conflicts) + len(twice)
        ip = (pool.get("status") or {}).get("ipAddresses")
        if isinstance(ip, Mapping):
            status["ipPool"] = {k: ip.get(k) if isinstance(ip.get(k), int) else 0 for k in ("total", "used", "free")}
        if subnet is None:
            set_condition(conds, names.IPPOOL_READY, UNKNOWN, reasons.SUBNET_UNAVAILABLE,
                          "the pool is checked against the subnet once the subnet is bound", gen, clock)
            return
        sspec = subnet.get("spec") or {}
        excludes = sspec.get("excludeIps") or []
        failure = check_pool_split(
            str(sspec.get("cidrBlock") or ""),
            str(sspec.get("gateway") or ""),
            [str(e) for e in excludes] if isinstance(excludes, list) else [],
            pool.get("spec") or {},
        )
        if failure is None and overlaps:
            failure = reasons.POOL_OVERLAPS_POOL, pool_overlaps_message(pname, overlaps)
        if failure is None and (conflicts or twice):
            failure = reasons.ADDRESS_CONFLICT, "; ".join(
                ([address_conflicts_message(pname, conflicts)] if conflicts else [])
                + ([duplicate_addresses_message(pname, twice)] if twice else []))
        if failure is not None:
            set_condition(conds, names.IPPOOL_READY, FALSE, failure[0], failure[1], gen, clock)
            return
        if later:
            self.overlaps += len(later)  # the gauge counts what the condition names
            set_condition(conds, names.IPPOOL_READY, TRUE, reasons.POOL_OVERLAPS_POOL,
                          pool_overlaps_message(pname, sorted(later, key=overlap_order), later=True), gen, clock)
            return
        usage = status.get("ipPool")
        if usage and usage.get("total", 0) > 0 and usage.get("free", 0) == 0:
            set_condition(conds, names.IPPOOL_READY, TRUE, reasons.POOL_EXHAUSTED,
                          f"all {usage['total']} addresses of the pool are allocated; new machines will wait", gen, clock)
            return
        set_condition(conds, names.IPPOOL_READY, TRUE, reasons.READY, "pool lies inside the subnet's excludeIps", gen, clock)

    def foreign_step(self, subnet: Mapping[str, Any] | None, bridge: str, vid: int | None) -> None:
        """field-reports.md S4 (capmox#868): an address a machine's NIC on the network holds from
        another pool, outside the Subnet's CIDR, is a Warning Event on the network, once per
        machine, NIC and address (:class:`ReportOnce`). Report only: no condition changes,
        and such an address holds nothing (only objects naming the network's pool do). Looked
        at once the Subnet is bound (its CIDR says what is outside); each such pass reports
        the whole set, so an address gone and back is posted again."""
        if subnet is None:
            return
        s = self.s
        cidr = str((subnet.get("spec") or {}).get("cidrBlock") or "")
        found = find_foreign_addresses(str(self.spec.get("ipPool") or ""), cidr, bridge, vid, s.machines,
                                       s.machine_claims, s.machine_addresses)
        events = tuple(
            (f.key, Event(self.net, WARNING, reasons.FOREIGN_ADDRESS_ON_NETWORK,
                          foreign_address_message(self.name, vid, cidr, f)))
            for f in found)
        self.actions.append(ReportOnce(s.key, str(self.net["metadata"].get("uid") or ""), events))

    def no_default_vpc_gateway(self, subnet: Mapping[str, Any]) -> Plan | None:
        """field-reports.md R2: no group on a router port of the default VPC; one the network
        already has (made before this check existed) is deleted with its router port's
        pointer (:class:`ReleaseGateway`, a no-op without one)."""
        s = self.s
        if unread(s.gateway_release):
            return self.need(ReleaseGateway(s.key))
        self.status.pop(FAILING_SINCE, None)
        port = nb_planner.router_port_name(kubeovn.DEFAULT_VPC, str((subnet.get("metadata") or {}).get("name") or ""))
        message = f'no HA chassis group on router port "{port}" of the default VPC: see SubnetReady'
        if s.gateway_release:
            message += f"; deleting the network's group from OVN NB failed: {s.gateway_release}"
        set_condition(self.conds, names.GATEWAY_READY, UNKNOWN, reasons.SUBNET_UNAVAILABLE, message, self.gen,
                      self.clock)
        self.actions.append(Metric("set_gateway_chassis", (self.ns, self.name, 0)))
        return None

    def gateway_step(self, subnet: Mapping[str, Any]) -> Plan | None:
        """§9.2: the router port's group; a Plan while the NB outcome is missing."""
        s = self.s
        sname = str((subnet.get("metadata") or {}).get("name") or "")
        vpc = str((subnet.get("spec") or {}).get("vpc") or "")  # never empty here: no_default_vpc_gateway
        if s.gateway is None:
            b = s.sb_binding
            # The SB not known: the chassis it last showed, so an SB outage moves no group (§10).
            if b is None:
                serving = ""
            elif b.known:
                serving = b.chassis
            else:
                serving = str(self.old.get(SERVING_CHASSIS) or "")
            mtu = self.status.get("mtu")
            return self.need(EnsureGateway(s.key, vpc, sname, s.trunk, s.siblings, serving,
                                           mtu if isinstance(mtu, int) else None))
        actions, self.serving_recheck = gateway_status(
            s.gateway, self.net, nb_planner.router_port_name(vpc, sname), self.status, self.conds, self.old, self.gen,
            s.now, s.grace, s.sb_binding, s.serving_settle)
        self.actions += actions
        return None

    def finish(self, waits: bool) -> Plan:
        """§5.9 step 8 and the write: the triple is in the annotation before any status
        shows it; the status is written only when it differs."""
        s, status = self.s, self.status
        triple = namespace_triple({"spec": self.spec, "status": status})
        if triple and not listed(s.annotation, triple) and not s.requested:
            return self.need(RequestTriple(self.ns, s.key, triple))
        ready = find(status["conditions"], names.READY)
        if ready is not None and ready.get("status") != TRUE:
            self.actions.append(Metric("reconcile_error", (ready.get("reason", ""),)))
        requeue = requeue_after(s.manage_gateway, status)
        if s.gateway_enabled and s.trunk_recheck is not None:
            requeue = min(requeue, max(s.trunk_recheck, 1.0))  # field-reports.md R12: the held node leaves then
        if self.serving_recheck is not None:
            requeue = min(requeue, max(self.serving_recheck, 0.5))  # §10: the settle time ends then
        if self.stale_recheck is not None:
            requeue = min(requeue, max(self.stale_recheck, 1.0))  # field-reports.md S1: Kube-OVN is called stale then
        gw = find(status["conditions"], names.GATEWAY_READY)
        if s.sb_binding is None or gw is None or gw.get("reason") not in (reasons.CHASSIS_ASSIGNED,
                                                                           reasons.SB_UNAVAILABLE):
            status.pop(SERVING_CHASSIS, None)  # only next to what the SB said serves (§10)
        if gw is None or gw.get("reason") not in GROUP_STANDS:
            status.pop(GATEWAY_MTU, None)  # only while the group the option goes with stands
        if waits or status_waits(s, status):
            return Plan(tuple(self.actions), requeue_after=requeue)
        if schema.differs(status, self.old, s.pruned):
            self.actions.append(WriteStatus(names.PROXMOX_NETWORKS, self.net, status, "network",
                                            ready_event(self.old, status)))
        self.actions += network_series(self.net, status)
        self.actions.append(Metric("set_pool_conflicts", (self.ns, self.name, self.overlaps, self.conflicts)))
        self.actions.append(Metric("set_foreign_subnets", (self.ns, self.name, len(s.strangers))))
        return Plan(tuple(self.actions), requeue_after=requeue)


# -- deletion (§6) ---------------------------------------------------------------------------


def plan_deletion(s: NetworkSnapshot) -> Plan:
    """The next step of a deleting network (§6), from fresh reads only.

    1. no consumer (the caches, then fresh LISTs: field-reports.md B15); 2. the Subnet gone (fresh GET; our
    Subnet finalizer goes once Kube-OVN deletes it); 3. the network's groups gone from the
    NB; 4. the Vlan released once Kube-OVN lists no subnet on it, or the newest prune timer
    ran out (:func:`controller.rules.release.release_step`); 5. our finalizer removed.
    """
    net: Mapping[str, Any] = s.network  # type: ignore[assignment]
    meta, spec = net["metadata"], net.get("spec") or {}
    if names.FINALIZER not in (meta.get("finalizers") or []):
        return Plan()
    ns, name = meta["namespace"], meta["name"]
    gen = int(meta.get("generation") or 0)
    old = net.get("status") or {}
    status = copy.deepcopy(dict(old))
    conds: list[dict[str, Any]] = status.setdefault("conditions", [])
    prev_switch = find(old.get("conditions"), names.SWITCH_DELETED)
    # (It comes back only while deleted subnets are listed, at its old place: an unchanged
    # wait must compare equal to the stored status and write nothing.)
    switch_at = next((i for i, c in enumerate(conds) if c.get("type") == names.SWITCH_DELETED), None)
    remove_condition(conds, names.SWITCH_DELETED)
    vid = int(status.get("vlan") or 0)
    pname = str(spec.get("ipPool") or "")
    sname = str(spec.get("subnet") or "")
    clock = lambda: s.now  # noqa: E731
    actions: list[Any] = []

    def need(*more: Any) -> Plan:
        return Plan(tuple(actions) + more, replan=True)

    def wait(reason: str, message: str, after: float, stuck: int = 0) -> Plan:
        set_condition(conds, names.READY, FALSE, reason, message, gen, clock)
        if schema.differs(status, old, s.pruned):
            actions.append(WriteStatus(names.PROXMOX_NETWORKS, net, status, "network", ready_event(old, status)))
        actions.append(Metric("set_deleting", (ns, name, True)))
        actions.append(Metric("set_stuck_holders", (ns, name, stuck)))
        return Plan(tuple(actions), requeue_after=after)

    # 1. Consumers.
    consumers = s.consumers
    if not consumers.busy:
        # The cache says free: confirm with a fresh read before anything is released (field-reports.md B15).
        if unread(s.fresh_consumers):
            return need(ListConsumers(ns, pname, "fresh_consumers"))
        consumers = s.fresh_consumers
    if consumers.busy:
        return wait(reasons.IN_USE, consumers.message(pname, vid, sname), IN_USE_RETRY, consumers.stuck)

    # 2. The Subnet (read from the API: a release is never decided on a lagging cache).
    if unread(s.fresh_subnet):
        return need(Get(names.SUBNETS, sname, None, "fresh_subnet"))
    sub = s.fresh_subnet
    if sub is not None:
        # The Subnet is back (or still here): a timer an earlier deletion of the same name
        # started must not shorten the wait of its next deletion (§7.1: a name no longer
        # gone is dropped).
        pending = _drop_live_timers(s, ns, name, sname, actions)
        if pending is not None:
            return pending
        if not (sub.get("metadata") or {}).get("deletionTimestamp"):
            return wait(reasons.SUBNET_STILL_EXISTS,
                        f'Subnet "{sname}" still exists; VLAN {vid} is released after it is deleted', SUBNET_EXISTS_RETRY)
        message = f'waiting for Kube-OVN to delete Subnet "{sname}" before VLAN {vid} is released'
        held = kubeovn.held_only_by_us(sub)
        if held:
            # Kube-OVN put no finalizer of its own on it (ours came first): ours keeps the
            # Subnet while Kube-OVN still counts IPs in it (docs/testing.md, "What the real
            # peers taught us").
            message += (f"; Kube-OVN counts {held} IP(s) in use in it and has no finalizer of its own on it, "
                        f"so the controller keeps its finalizer until they are released")
        elif names.FINALIZER in ((sub.get("metadata") or {}).get("finalizers") or []):
            actions.append(RemoveFinalizer(names.SUBNETS, sub))
        return wait(reasons.SUBNET_DELETING, message, SUBNET_DELETING_RETRY)

    # 3. Gateway release (holds the VLAN while the NB still points at it). Also when the
    # stored status never showed the VLAN but the NB has the network's group: the pass that
    # wrote the group can lose its status write (a 409, the leader killed in between).
    if s.manage_gateway and (vid or s.owns_group):
        if unread(s.gateway_release):
            return need(ReleaseGateway(s.key))
        if s.gateway_release:
            return wait(reasons.GATEWAY_RELEASE_PENDING,
                        f"could not delete the network's HA chassis group from OVN NB: {s.gateway_release}",
                        GATEWAY_RELEASE_RETRY)

    # 4. The Vlan.
    if unread(s.fresh_vlan):
        return need(Get(names.VLANS, sname, None, "fresh_vlan"))
    vlan = s.fresh_vlan
    if vlan is not None and vlan_owner(vlan) == (ns, name) and taken_over(vlan) and not s.released:
        # The release cannot be undone: act only for the very object the API server still
        # has, deleting and holding our finalizer (not a stale cache entry).
        if unread(s.fresh_network):
            return need(Get(names.PROXMOX_NETWORKS, name, ns, "fresh_network"))
        if not still_ours(net, s.fresh_network):
            return Plan(tuple(actions) + (ForgetOverlay(s.key),))
        if unread(s.listed):
            return need(SplitListed(vlan, "listed"))
        live, gone = s.listed
        step = release.release_step(vlan, live, gone, s.now, parse(meta.get("deletionTimestamp")), s.prune_timeout)
        if step.stores_timers:
            return need(SetPruneTimers(vlan, step.timers, "fresh_vlan"))
        if gone:
            ltt = (prev_switch.get("lastTransitionTime") if prev_switch and prev_switch.get("status") == FALSE
                   else format_utc(s.now))
            conds.insert(len(conds) if switch_at is None else switch_at, {
                "type": names.SWITCH_DELETED, "status": FALSE, "reason": reasons.LISTED_ON_VLAN,
                "message": f"Kube-OVN still lists deleted subnets {go_list(gone)} on the Vlan",
                "observedGeneration": gen, "lastTransitionTime": ltt,
            })
        vname = vlan["metadata"]["name"]
        released_id = allocator.vlan_id(vlan)
        # field-reports.md S5: Vlan.status.subnets is Kube-OVN's list, and a status
        # field: an older Vlan CRD prunes it, Kube-OVN down never writes it. A Subnet naming
        # the Vlan (spec.vlan, the cache) holds it too, listed or not (the zone's orphan
        # collection holds on the same two).
        naming = [n for n in s.strangers if n not in live]
        if naming and step.kind != release.WAIT_LIVE:
            step = attrs.evolve(step, kind=release.WAIT_LIVE)
        if step.kind == release.WAIT_LIVE:
            message = f'Kube-OVN still lists subnets {go_list(live)} on Vlan "{vname}"' if live else ""
            if naming:
                message += ("; " if message else "") + f'subnets {go_list(naming)} name Vlan "{vname}" in spec.vlan'
            others = sorted({n for n in live if n != sname} | set(naming))
            if others:
                # field-reports.md R1: another's Subnet on our Vlan is theirs to delete.
                message += (f"; {go_list(others)} are not this network's: the controller never deletes them, and "
                            f"VLAN {released_id} is released once they are gone")
            return wait(reasons.VLAN_STILL_REFERENCED, message, VLAN_REFERENCED_RETRY)
        if step.kind == release.WAIT_PRUNE:
            assert step.deadline is not None
            return wait(
                reasons.SWITCH_DELETING,
                f'Kube-OVN still lists deleted subnets {go_list(gone)} on Vlan "{vname}" until it has deleted '
                f"their logical switches; VLAN {released_id} is released then, or at "
                f"{format_utc(step.deadline)} at the latest",
                min((step.deadline - s.now).total_seconds(), SWITCH_DELETING_RETRY),
            )
        zone = (vlan["metadata"].get("labels") or {}).get(names.LABEL_ZONE, "")
        if step.timed_out:
            actions.append(Log("info", "Kube-OVN did not prune deleted subnets from the Vlan in time; releasing the VLAN anyway",
                               {"vlan": released_id, "subnets": list(gone), "timeout": s.prune_timeout}))
            done = Event(net, WARNING, reasons.VLAN_RELEASED_AFTER_PRUNE_TIMEOUT,
                         f"released VLAN {released_id}: Kube-OVN still listed deleted subnets "
                         f"{go_list(gone)} after the prune timeout of {int(s.prune_timeout)}s")
        else:
            done = Event(net, NORMAL, reasons.VLAN_RELEASED, f'released VLAN {released_id} (Vlan "{vname}")')
        return need(ReleaseVlan(vlan, "released VLAN",
                                {"zone": zone, "vlan": released_id, "subnet": sname, "network": s.key}), done)

    # 5. Our finalizer.
    if unread(s.finalized):
        return Plan(tuple(actions) + (RemoveFinalizer(names.PROXMOX_NETWORKS, net, "finalized"),
                                      Metric("forget_network", (ns, name))))
    return Plan(tuple(actions))


def _drop_live_timers(s: NetworkSnapshot, ns: str, name: str, sname: str, actions: list[Any]) -> Plan | None:
    """While the Subnet exists, drop the prune timers our Vlan keeps for it (§7.1)."""
    if unread(s.fresh_vlan):
        return Plan(tuple(actions) + (Get(names.VLANS, sname, None, "fresh_vlan"),), replan=True)
    vlan = s.fresh_vlan
    if vlan is None or vlan_owner(vlan) != (ns, name):
        return None
    if names.ANNOTATION_DELETED_SUBNETS not in ((vlan.get("metadata") or {}).get("annotations") or {}):
        return None
    if unread(s.listed):
        return Plan(tuple(actions) + (SplitListed(vlan, "listed"),), replan=True)
    _, gone = s.listed
    step = release.release_step(vlan, (), gone, s.now, None, s.prune_timeout)
    if step.stores_timers:
        return Plan(tuple(actions) + (SetPruneTimers(vlan, step.timers, "fresh_vlan"),), replan=True)
    return None


def still_ours(net: Mapping[str, Any], cur: Mapping[str, Any] | None) -> bool:
    """The API server's copy of ``net`` has the same UID, is deleting and carries our finalizer."""
    if cur is None:
        return False
    meta, cm = net["metadata"], cur.get("metadata") or {}
    return (
        cm.get("uid") == meta.get("uid")
        and bool(cm.get("deletionTimestamp"))
        and names.FINALIZER in (cm.get("finalizers") or [])
    )
