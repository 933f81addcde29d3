"""The ProxmoxNetwork planner: a pure function from what a pass observed to what it does
(reference-behaviour.md §5 and §6; product-decisions.md §6).

:func:`plan_network` reads a :class:`controller.plan.network_status.NetworkSnapshot` (the
listers' objects, the namespace annotation, the clock reading of the pass, and the fresh
reads and write results of the pass so far) and returns a
:class:`controller.plan.actions.Plan`. It has no client, no clock of its own and no I/O. A
live network's plan (here) adds our finalizer, allocates or adopts its Vlan, derives the
whole status again and writes it only when it differs from the stored one (so a converged
network costs no write). A deleting network's plan is
:func:`controller.plan.network_deletion.plan_deletion`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


from controller import names, reasons, schema
from controller.rules import allocator, kubeovn
from controller.plan.actions import (
    AddFinalizer,
    AdoptVlan,
    AllocateVlan,
    EnsureGateway,
    Event,
    ForgetNetwork,
    Get,
    Into,
    Level,
    ListConsumers,
    Log,
    NetworkGone,
    Plan,
    ReconcileError,
    ReleaseGateway,
    ReleaseVlan,
    ReportOnce,
    RequestTriple,
    SetEgressRerouteMissing,
    SetForeignSubnets,
    SetGatewayChassis,
    SetPoolCidrs,
    SetPoolConflicts,
    WriteStatus,
    unread,
)
from controller.rules.pool_conflicts import (
    address_conflicts_message,
    duplicate_addresses_message,
    find_address_conflicts,
    find_duplicate_addresses,
    find_pool_overlaps,
    overlap_order,
    split_overlaps,
    pool_overlaps_message,
)
from controller.rules.pool_cidrs import pool_cidrs
from controller.rules.spans import IN_CLUSTER_IP_POOL, pool_spans
from controller.rules.ranges import check_pool_split, prefix_bits
from controller.rules.conditions import (
    FALSE,
    TRUE,
    UNKNOWN,
    compute_ready,
    find,
    remove_condition,
    set_condition,
)
from controller.names import NORMAL, WARNING
from controller.rules.foreign import find_foreign_addresses, foreign_address_message
from controller.rules.egress_reroute import missing_message, restored_message, reroute_report
from controller.plan.gateway import FAILING_SINCE, GATEWAY_MTU, GROUP_STANDS, SERVING_CHASSIS, gateway_status
from controller.rules.annotation import namespace_triple
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
from controller.plan.network_status import (
    GATEWAY_DISABLED_MESSAGE,
    NetworkSnapshot,
    duplicate_holders,
    kube_ovn_conflict_note,
    listed,
    namespace_allowed,
    network_series,
    on_vlan_note,
    outside_ranges,
    ready_event,
    requeue_after,
    set_not_ready,
    status_waits,
    strangers_message,
    subnet_conditions,
)
from controller.plan.network_deletion import plan_deletion


# The ReportOnce topic of the egress reroute reports.
EGRESS_TOPIC = "egress-reroute"


def plan_network(s: NetworkSnapshot) -> Plan:
    """The next plan of a pass over ``s.key`` (see the module docstring)."""
    net = s.network
    if net is None:
        ns, _, name = s.key.partition("/")
        return Plan((ForgetNetwork(ns, name), NetworkGone(s.key)))
    meta = net["metadata"]
    if meta.get("deletionTimestamp"):
        return plan_deletion(s)
    if names.FINALIZER not in (meta.get("finalizers") or []):
        return Plan((AddFinalizer(names.PROXMOX_NETWORKS, net, Into("network")),), replan=True)
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
        # The egress reroute gauge: 0 unless the egress step finds a gateway's reroute gone;
        # None (left as it is) when the NB or the gateways are not read, or the NB is not known.
        self.egress_missing: bool | None = (
            False if s.router_policies is not None and s.egress_gateways is not None else None)

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
        self.egress_step(subnet)
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
        (annotation ``proxmox.cozystack.io/pool-cidrs``, :func:`controller.rules.pool_cidrs.pool_cidrs`),
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
            return self.need(Get(names.VLANS, name, None, Into("fresh_vlan")))
        fresh = s.fresh_vlan
        if fresh is None:
            return None
        fm = fresh.get("metadata") or {}
        if (fm.get("uid") != vlan["metadata"].get("uid") or fm.get("deletionTimestamp")
                or allocator.vlan_id(fresh) != allocator.vlan_id(vlan)
                or (fresh.get("status") or {}).get("subnets")):
            return None
        if unread(s.fresh_named_subnet):
            return self.need(Get(names.SUBNETS, name, None, Into("fresh_named_subnet")))
        if s.fresh_named_subnet is not None:
            return None
        if unread(s.fresh_consumers):
            return self.need(ListConsumers(self.ns, str(self.spec.get("ipPool") or ""), Into("fresh_consumers")))
        if s.fresh_consumers.busy:
            return None
        return self.need(
            Log(Level.WARNING, "giving back a duplicate VLAN this controller made",
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
            self.actions.append(AddFinalizer(names.SUBNETS, sub, Into("subnet")))
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
        was = find((self.old.get("conditions") or []), names.SUBNET_READY) or {}
        stale, self.stale_recheck = kubeovn.stale_vlan_validation(
            sub, vlan if ours else None, s.now, s.kube_ovn_stale_after,
            shown=str(was.get("message") or "").startswith(kubeovn.STALE_PREFIX))
        if stale:
            # field-reports.md S1: Kube-OVN's state, not the tenant's mistake; the Vlan and Subnet stay untouched.
            reason, message = reasons.SUBNET_NOT_READY, stale
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
        :func:`controller.rules.ranges.check_pool_split` (the pool's own fields and its place
        in the Subnet, ending with ``PoolOverlapsSubnet``); ``PoolOverlapsPool`` (another
        pool shares addresses); ``AddressConflict`` (a Kube-OVN IP holds one now); True
        ``PoolExhausted``; True ``Ready``. ``PoolOverlapsPool`` follows product-decisions.md §10
        (:func:`controller.rules.pool_conflicts.split_overlaps`): False on the pool that came later, True
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

    def egress_step(self, subnet: Mapping[str, Any] | None) -> None:
        """A Ready VpcEgressGateway of the Subnet's VPC that the Subnet is a source of, whose
        reroute policy is missing from the VPC's router in the OVN NB
        (:func:`controller.rules.egress_reroute.reroute_report`): a Warning
        ``EgressRerouteMissing`` once per gateway while it lasts, a Normal
        ``EgressRerouteRestored`` when it is back (:class:`ReportOnce`), and the gauge. Report
        only: no condition changes. Nothing while the NB is not known (unknown is not
        missing), nor without the NB or the VpcEgressGateway kind."""
        s = self.s
        if s.router_policies is None or s.egress_gateways is None:
            return
        uid = str(self.net["metadata"].get("uid") or "")
        if subnet is None:
            self.actions.append(ReportOnce(s.key, uid, (), topic=EGRESS_TOPIC))
            return
        sname = str((subnet.get("metadata") or {}).get("name") or "")
        vpc = kubeovn.subnet_vpc(subnet)
        report = reroute_report(s.egress_gateways, sname, str((subnet.get("spec") or {}).get("cidrBlock") or ""),
                                vpc, s.router_policies)
        if report is None:
            self.egress_missing = None
            return
        events = tuple((m.gateway, Event(self.net, WARNING, reasons.EGRESS_REROUTE_MISSING, missing_message(m, sname)))
                       for m in report.missing)
        ended = tuple((g, Event(self.net, NORMAL, reasons.EGRESS_REROUTE_RESTORED, restored_message(g, vpc, sname)))
                      for g in report.standing)
        self.actions.append(ReportOnce(s.key, uid, events, topic=EGRESS_TOPIC, ended=ended))
        self.egress_missing = bool(report.missing)

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
        self.actions.append(SetGatewayChassis(self.ns, self.name, 0))
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
            self.actions.append(ReconcileError(ready.get("reason", "")))
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
            self.actions.append(WriteStatus(names.PROXMOX_NETWORKS, self.net, status, Into("network"),
                                            ready_event(self.old, status)))
        self.actions += network_series(self.net, status)
        self.actions.append(SetPoolConflicts(self.ns, self.name, self.overlaps, self.conflicts))
        self.actions.append(SetForeignSubnets(self.ns, self.name, len(s.strangers)))
        if self.egress_missing is not None:
            self.actions.append(SetEgressRerouteMissing(self.ns, self.name, self.egress_missing))
        return Plan(tuple(self.actions), requeue_after=requeue)


# -- deletion (§6) ---------------------------------------------------------------------------


