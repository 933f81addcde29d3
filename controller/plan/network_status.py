"""What a network pass observed (:class:`NetworkSnapshot`) and the status vocabulary both
network planners share: retry periods, condition messages, the Ready Event and the metric
series of a status (reference-behaviour.md §5; product-decisions.md §6). Pure.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

import attrs

from controller import names, reasons
from controller.rules import allocator, kubeovn
from controller.plan.actions import (
    UNREAD,
    EventSpec,
    ForgetGateway,
    Metric,
    SetGatewayReady,
    SetGatewayServing,
    SetNetwork,
    SetStuckHolders,
    SetVlanChanged,
)
from controller.rules.conditions import FALSE, TRUE, UNKNOWN, compute_ready, find, set_condition, transition
from controller.rfc3339 import Clock
from controller.rules.consumers import Consumers
from controller.names import NORMAL, WARNING
from controller.plan.gateway import FAILING_SINCE, SERVING_CHASSIS, SERVING_SETTLE, GatewayOutcome
from controller.rules.annotation import namespace_triple, split_value
from controller.rules.selectors import InvalidSelector, matches


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
    :ivar egress_gateways: the VpcEgressGateways of the Subnet's VPC (cache; None when the
        kind is not served or the NB is not read); ``router_policies`` the VPC router's
        egress reroutes in the NB (``controller.rules.egress_reroute.RouterPolicies``, None
        when the NB is not read).
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
    egress_gateways: tuple[Mapping[str, Any], ...] | None = None
    router_policies: Any = None
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
    out = [SetNetwork(
        ns, name, str(spec.get("zone") or ""), status.get("vlan") or 0,
        ready is not None and ready.get("status") == TRUE, status.get("ipPool"), False,
    )]
    va = find(status.get("conditions"), names.VLAN_ALLOCATED)
    out.append(SetVlanChanged(ns, name, va is not None and va.get("reason") == reasons.VLAN_CHANGED_EXTERNALLY))
    out.append(SetStuckHolders(ns, name, 0))  # holders are judged while deleting
    gw = find(status.get("conditions"), names.GATEWAY_READY)
    if gw is None or gw.get("reason") == reasons.DISABLED:
        out.append(ForgetGateway(ns, name))
    else:
        out.append(SetGatewayReady(ns, name, gw.get("status") == TRUE))
        out.append(SetGatewayServing(ns, name, *serving_series(status, gw)))
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
