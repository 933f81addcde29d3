"""The ProxmoxNetwork planner, pure (no server): ``plan_network(NetworkSnapshot) -> Plan``.

Expected reasons and messages are the spec's (reference-behaviour.md §5, §6, §9.2, §9.5;
product-decisions.md §4, §6-§8), not read off the code. A pass is driven by :func:`drive`,
``tests.support.plans.drive``: ``controller.apply.executor.run`` with each action's result
canned (a requested read from a dict of canned fresh values keyed by the action's ``into``)
and folded by the action; an action already applied in the pass is not applied again.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller import names
from controller.plan.actions import (
    ReportOnce,
    AddFinalizer,
    AdoptVlan,
    AllocateVlan,
    EnsureGateway,
    Event,
    EventSpec,
    ForgetNetwork,
    ForgetOverlay,
    Get,
    Holding,
    Into,
    ListConsumers,
    Log,
    Metric,
    NetworkGone,
    Plan,
    ReleaseGateway,
    ReleaseVlan,
    RemoveFinalizer,
    RequestTriple,
    SetDeleting,
    SetForeignSubnets,
    SetGatewayChassis,
    SetGatewayServing,
    SetNetwork,
    SetPoolCidrs,
    SetPoolConflicts,
    SetPruneTimers,
    SetStuckHolders,
    SetVlanChanged,
    SplitListed,
    WriteStatus,
)
from controller.rules.consumers import Consumers, count_consumers
from controller.plan.gateway import GatewayOutcome
from controller.plan.network import plan_network
from controller.plan.network_status import NetworkSnapshot
from ovn.nb_plan import GatewayState
from tests.support import plans
from tests.support.gateway import assigned
from tests.support.plans import with_annotation

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 10, 7, 8, 0, 0, tzinfo=UTC)
FIN = names.FINALIZER
NS, NAME, KEY = "tenant-a", "net-a", "tenant-a/net-a"
ZONE, PROVIDER, BRIDGE = "zone-a", "physnet1", "vmbr70"
SUBNET, POOL, VPC, VID = "sub-a", "pool-a", "vpc-x", 101
LRP = f"{VPC}-{SUBNET}"
TRIPLE = f"{BRIDGE}/{VID}/{POOL}"
DELETED_AT = "2026-10-07T07:30:00Z"
# The default pool() (10.0.0.10-10.0.0.50) as the fewest CIDRs covering exactly it, worked out
# by hand: .10-.11 /31, .12-.15 /30, .16-.31 /28, .32-.47 /28, .48-.49 /31, .50 /32.
POOL_CIDRS = "10.0.0.10/31,10.0.0.12/30,10.0.0.16/28,10.0.0.32/28,10.0.0.48/31,10.0.0.50/32"
ASSIGNED = assigned(LRP, f"px-{LRP}", [("ch1", 100), ("ch2", 90)])


def ts(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


# -- objects -------------------------------------------------------------------------------


def network(status=None, *, finalizers=(FIN,), deleting=None, uid="uid-net", generation=3):
    meta: dict[str, Any] = {"name": NAME, "namespace": NS, "uid": uid, "generation": generation,
                            "resourceVersion": "7", "finalizers": list(finalizers)}
    if deleting:
        meta["deletionTimestamp"] = deleting
    net: dict[str, Any] = {"metadata": meta, "spec": {"zone": ZONE, "subnet": SUBNET, "ipPool": POOL}}
    if status is not None:
        net["status"] = status
    return net


def zone(**spec):
    base = {"bridge": BRIDGE, "providerNetwork": PROVIDER, "vlanRanges": ["101-110"]}
    base.update(spec)
    return {"metadata": {"name": ZONE, "generation": 1}, "spec": base}


def namespace(labels=None):
    return {"metadata": {"name": NS, "labels": dict(labels or {})}}


def vlan(name=SUBNET, vid=VID, *, owner=(NS, NAME), provider=PROVIDER, finalizers=(FIN,), subnets=(),
         conflict=None, annotations=None, uid="uid-vlan", created="2026-10-07T07:00:00Z", deleting=None,
         pool_cidrs=POOL_CIDRS):
    """A Vlan as the controller keeps it; ``pool_cidrs`` is its admission annotation (None: absent)."""
    meta: dict[str, Any] = {
        "name": name, "uid": uid, "creationTimestamp": created, "resourceVersion": "11",
        "labels": {names.LABEL_ZONE: ZONE, names.LABEL_NETWORK_NAMESPACE: owner[0],
                   names.LABEL_NETWORK_NAME: owner[1]},
        "finalizers": list(finalizers),
    }
    ann = dict(annotations or {})
    if pool_cidrs is not None:
        ann[names.ANNOTATION_POOL_CIDRS] = pool_cidrs
    if ann:
        meta["annotations"] = ann
    if deleting:
        meta["deletionTimestamp"] = deleting
    status: dict[str, Any] = {"subnets": list(subnets)}
    if conflict is not None:
        status["conflict"] = conflict
    return {"metadata": meta, "spec": {"id": vid, "provider": provider}, "status": status}


def subnet(*, bound_to=SUBNET, vpc=VPC, cidr="10.0.0.0/24", gateway="10.0.0.1",
           exclude=("10.0.0.1..10.0.0.99",), ready=True, ready_message="", validated=None,
           finalizers=(FIN,), deleting=None, status_extra=None):
    meta: dict[str, Any] = {"name": SUBNET, "uid": "uid-sub", "finalizers": list(finalizers)}
    if deleting:
        meta["deletionTimestamp"] = deleting
    conds = [{"type": "Ready", "status": "True" if ready else "False", "message": ready_message}]
    if validated is not None:
        conds.append({"type": "Validated", "status": "False", "message": validated})
    spec: dict[str, Any] = {"cidrBlock": cidr, "gateway": gateway, "excludeIps": list(exclude), "vpc": vpc}
    if bound_to is not None:
        spec["vlan"] = bound_to
    return {"metadata": meta, "spec": spec, "status": {"conditions": conds, **(status_extra or {})}}


def pool(*, addresses=("10.0.0.10-10.0.0.50",), prefix=24, gateway="10.0.0.1", ip=(41, 3, 38)):
    return {"metadata": {"name": POOL, "namespace": NS, "creationTimestamp": "2026-12-01T10:00:00Z"},
            "spec": {"addresses": list(addresses), "prefix": prefix, "gateway": gateway},
            "status": {"ipAddresses": dict(zip(("total", "used", "free"), ip))}}


def live(**kw) -> NetworkSnapshot:
    base: dict[str, Any] = dict(
        key=KEY, network=network(), now=T0, manage_gateway=False, zone=zone(), namespace=namespace(),
        vlan=vlan(), holders=(vlan(),), subnet=subnet(), subnet_bound=True, pool=pool(), annotation=TRIPLE,
    )
    base.update(kw)
    return NetworkSnapshot(**base)


def gw_live(**kw) -> NetworkSnapshot:
    """Gateway management on, with an NB side."""
    return live(manage_gateway=True, gateway_enabled=True, **kw)


# -- the in-test runner (tests.support.plans) ------------------------------------------------


def with_finalizer(obj, present: bool):
    out = copy.deepcopy(dict(obj))
    fins = [f for f in out["metadata"].get("finalizers") or [] if f != FIN]
    out["metadata"]["finalizers"] = fins + [FIN] if present else fins
    return out


def answer(a, s, canned):
    """What the executor's handler would return for a network pass's action ``a`` (reads from
    ``canned``; ``allocate``: a Holding's fields, or ``refusal``); the actions a zone pass
    plans too are :func:`tests.support.plans.answer`'s."""
    if isinstance(a, ListConsumers):
        return canned[str(a.into)]
    if isinstance(a, ReleaseGateway):
        return canned["gateway_release"]
    if isinstance(a, EnsureGateway):
        return canned["gateway"]
    if isinstance(a, AllocateVlan):
        allocation = canned["allocate"]
        return allocation["refusal"] if "refusal" in allocation else Holding(**allocation)
    if isinstance(a, AdoptVlan):
        v = with_annotation(with_finalizer(a.vlan, True), names.ANNOTATION_DELETED_SUBNETS, None)
        return Holding(v, (v,))
    if isinstance(a, RequestTriple):
        return canned.get("annotation", s.annotation)
    if isinstance(a, AddFinalizer):
        return with_finalizer(a.obj, True)
    if isinstance(a, RemoveFinalizer):
        return with_finalizer(a.obj, False)
    return plans.answer(a, s, canned)


Pass = plans.Pass[NetworkSnapshot]


def drive(s: NetworkSnapshot, canned: dict[str, Any] | None = None) -> Pass:
    """A network pass over ``s``, as ``controller.apply.executor.run(plan_network, s, executor)`` runs it."""
    return plans.drive(plan_network, s, canned, answer=answer)


def converged(s: NetworkSnapshot, canned=None) -> NetworkSnapshot:
    """``s`` with its network carrying the status a pass over ``s`` writes."""
    p = drive(s, canned)
    return attrs.evolve(s, network=network(copy.deepcopy(p.status)))


# =============================================================================================
# Entry (§5.1)
# =============================================================================================


def test_notfound_network_forgets_its_series_and_its_triple():
    plan = plan_network(NetworkSnapshot(key=KEY, network=None, now=T0))
    assert plan.actions == (ForgetNetwork(NS, NAME), NetworkGone(KEY))
    assert not plan.replan and plan.requeue_after is None


def test_missing_finalizer_is_added_first_and_alone():
    net = network(finalizers=("other.io/keep",))
    plan = plan_network(live(network=net))
    assert plan.actions == (AddFinalizer(names.PROXMOX_NETWORKS, net, Into("network")),)
    assert plan.replan


def test_finalizer_added_then_the_pass_goes_on():
    p = drive(live(network=network(finalizers=())))
    assert isinstance(p.applied[0], AddFinalizer)
    assert p.crm("Ready")[0] == "True"


# =============================================================================================
# §5.3 zone and namespace
# =============================================================================================


def test_zone_not_found():
    p = drive(live(zone=None))
    want = ("False", "ZoneNotFound", f'ProxmoxNetworkZone "{ZONE}" does not exist')
    assert p.crm("VLANAllocated") == want
    assert p.crm("Ready") == want
    assert not p.of(AllocateVlan)


def test_early_stop_keeps_the_stale_vlan_fields():
    old = {"vlan": VID, "vlanName": SUBNET, "bridge": BRIDGE, "cidr": "10.0.0.0/24"}
    p = drive(live(zone=None, network=network(old)))
    assert {k: p.status[k] for k in old} == old


@pytest.mark.parametrize("selector, ns_obj", [
    ({"matchLabels": {"tenant": "yes"}}, namespace({"tenant": "no"})),
    ({"matchExpressions": [{"key": "tenant", "operator": "Equals", "values": ["yes"]}]}, namespace({"tenant": "yes"})),
    ({"matchLabels": {"tenant": "yes"}}, None),
    ({}, None),
], ids=["no-match", "invalid-selector", "absent-namespace", "empty-selector-absent-namespace"])
def test_namespace_not_allowed(selector, ns_obj):
    p = drive(live(zone=zone(namespaceSelector=selector), namespace=ns_obj, vlan=None, holders=()))
    want = ("False", "NamespaceNotAllowed",
            f'namespace "{NS}" does not match the namespaceSelector of zone "{ZONE}"')
    assert p.crm("VLANAllocated") == want
    assert p.crm("Ready") == want
    assert not p.of(AllocateVlan)  # no Vlan is created for a refused namespace


def test_no_selector_admits_a_namespace_not_in_the_cache_and_its_status_waits_for_the_triple():
    # A Namespace created just before its network may not have reached the watch: §5.3 admits
    # it without a selector, but a cache miss is no NotFound, so the status (and the group,
    # which follows it) waits for the annotation to list the triple (§5.9 step 8; flake hunt
    # failure 13: the VLAN showed 1 s before admission allowed it).
    p = drive(gw_live(namespace=None, annotation=None), {"annotation": None})
    assert p.of(RequestTriple) == [RequestTriple(NS, KEY, TRIPLE)]  # admitted: its VLAN's triple asked for
    assert not p.of(WriteStatus)
    assert not p.of(EnsureGateway)


def test_matching_selector_admits():
    p = drive(live(zone=zone(namespaceSelector={"matchLabels": {"tenant": "yes"}}),
                   namespace=namespace({"tenant": "yes"})))
    assert p.crm("VLANAllocated")[1] == "Allocated"


# =============================================================================================
# §5.4 VLAN
# =============================================================================================


def test_no_vlan_plans_an_allocation_then_reports_it():
    made = vlan()
    s = live(vlan=None, holders=())
    p = drive(s, {"allocate": {"vlan": made, "holders": (made,), "allocated_now": True}})
    # The pool is in the cache: the Vlan is created with its CIDRs (issue 15 item 6), so no
    # second write follows the create.
    assert p.applied[0] == AllocateVlan(s.network, s.zone, ((names.ANNOTATION_POOL_CIDRS, POOL_CIDRS),))
    assert p.of(SetPoolCidrs) == []
    assert p.crm("VLANAllocated") == ("True", "Allocated", f"VLAN {VID} on bridge {BRIDGE}")
    ev = [a for a in p.of(Event) if a.reason == "VLANAllocated"]
    assert len(ev) == 1 and ev[0].type == "Normal" and str(VID) in ev[0].message


def test_an_allocation_before_the_pool_is_known_carries_no_cidrs_and_the_next_step_writes_them():
    made = vlan(pool_cidrs=None)
    s = live(vlan=None, holders=(), pool=None)
    p = drive(s, {"allocate": {"vlan": made, "holders": (made,), "allocated_now": True}})
    assert p.applied[0] == AllocateVlan(s.network, s.zone)
    assert p.of(SetPoolCidrs) == []  # nothing to write while the pool is absent
    later = drive(live(vlan=made, holders=(made,)))
    assert later.of(SetPoolCidrs) == [SetPoolCidrs(made, POOL_CIDRS)]


@pytest.mark.parametrize("reason, message", [
    ("ZoneExhausted", f'zone "{ZONE}" has no free VLAN in 101-110'),
    ("ZoneInvalid", 'vlan range "110-101" ends before it starts'),
    ("StaticVLANReserved", f'static VLAN 105 is reserved in zone "{ZONE}"'),
    ("StaticVLANInUse", f'static VLAN 105 is already used on provider "{PROVIDER}"'),
])
def test_allocation_refusal_is_passed_through(reason, message):
    p = drive(live(vlan=None, holders=()), {"allocate": {"refusal": (reason, message)}})
    assert p.crm("VLANAllocated") == ("False", reason, message)
    assert p.crm("Ready") == ("False", reason, message)
    assert "vlan" not in p.status


def test_zone_exhausted_is_a_warning_event_on_the_ready_transition():
    msg = f'zone "{ZONE}" has no free VLAN in 101-110'
    p = drive(live(vlan=None, holders=()), {"allocate": {"refusal": ("ZoneExhausted", msg)}})
    assert p.of(WriteStatus)[-1].event == EventSpec("Warning", "ZoneExhausted", msg)


def test_refusal_already_in_the_snapshot_plans_no_allocation():
    p = drive(live(vlan=None, holders=(), refusal=("ZoneExhausted", f'zone "{ZONE}" has no free VLAN in 101-110')))
    assert not p.of(AllocateVlan)
    assert p.crm("VLANAllocated")[1] == "ZoneExhausted"


@pytest.mark.parametrize("manage, waiting", [
    (True, ["SubnetReady", "IPPoolReady", "GatewayReady"]),
    (False, ["SubnetReady", "IPPoolReady"]),
])
def test_dependents_wait_for_the_vlan(manage, waiting):
    p = drive(live(manage_gateway=manage, gateway_enabled=manage, refusal=("ZoneExhausted", "full"), vlan=None))
    for ctype in waiting:
        assert p.crm(ctype) == ("Unknown", "WaitingForVLAN", "waits for a VLAN to be allocated")
    if not manage:
        assert p.crm("GatewayReady")[1] == "Disabled"


@pytest.mark.parametrize("owner, shown", [(("other", "net-b"), "other/net-b"), (("", ""), "/")])
def test_vlan_name_taken(owner, shown):
    p = drive(live(vlan=vlan(owner=owner)))
    assert p.crm("VLANAllocated") == ("False", "VLANNameTaken",
                                      f'Kube-OVN Vlan "{SUBNET}" exists and belongs to {shown}')
    assert not p.of(AdoptVlan) and not p.of(AllocateVlan)


# -- issue 15, item 7: bad input ends in a condition; the oldest claimant wins ------------------


@pytest.mark.parametrize("subnet, why", [
    ("Sub_A", "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
              "and must start and end with an alphanumeric character"),
    ("-sub", "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
             "and must start and end with an alphanumeric character"),
    ("a" * 254, "must be no more than 253 characters (it has 254)"),
])
def test_a_subnet_name_the_api_server_refuses_is_a_condition_not_a_create(subnet, why):
    net = network()
    net["spec"]["subnet"] = subnet
    p = drive(live(network=net, vlan=None, holders=()))
    shown = subnet if len(subnet) <= 64 else subnet[:64] + "..."
    msg = (f'spec.subnet "{shown}" cannot name a Kube-OVN Vlan or Subnet: {why}; '
           "spec.subnet is immutable: recreate the network with the name of the Kube-OVN Subnet")
    assert p.crm("VLANAllocated") == ("False", "SubnetNameInvalid", msg)
    assert p.crm("Ready") == ("False", "SubnetNameInvalid", msg)
    assert not p.of(AllocateVlan)
    # No retry until the spec changes: the pass succeeds and comes back only as every
    # network does (the periodic check), not with a write's backoff.
    assert p.last.requeue_after == drive(live()).last.requeue_after


def test_a_253_character_dotted_name_is_a_valid_vlan_name():
    net = network()
    net["spec"]["subnet"] = ".".join(["a" * 63] * 4)[:253].rstrip(".")
    made = vlan()
    p = drive(live(network=net, vlan=None, holders=()), {"allocate": {"vlan": made, "holders": (made,)}})
    assert p.of(AllocateVlan)


def rival(ns, name, created, uid):
    r = network(uid=uid)
    r["metadata"].update({"namespace": ns, "name": name, "creationTimestamp": created})
    return r


def test_an_older_network_naming_the_subnet_keeps_it_whatever_the_order():
    me = network()
    me["metadata"]["creationTimestamp"] = "2026-10-07T07:10:00Z"
    older = rival("tenant-b", "net-b", "2026-10-07T07:05:00Z", "uid-b")
    p = drive(live(network=me, vlan=None, holders=(), rivals=(me, older)))
    assert p.crm("VLANAllocated") == (
        "False", "VLANNameTaken",
        f'Subnet "{SUBNET}" is claimed by network tenant-b/net-b, created first (2026-10-07T07:05:00Z); '
        "one Subnet extends to one network")
    assert not p.of(AllocateVlan)
    # The older one allocates with the newer one in its cache.
    s = live(network=older, vlan=None, holders=(), rivals=(me, older))
    made = vlan(owner=("tenant-b", "net-b"))
    assert drive(s, {"allocate": {"vlan": made, "holders": (made,)}}).of(AllocateVlan)


def test_same_creation_second_is_ordered_by_namespace_then_name():
    at = "2026-10-07T07:05:00Z"
    me = rival(NS, NAME, at, "uid-net")
    before = rival("a-first", "zz", at, "uid-a")  # "a-first" < "tenant-a"
    assert drive(live(network=me, vlan=None, holders=(), rivals=(before, me))).crm("VLANAllocated")[1] == "VLANNameTaken"
    after = rival(NS, "net-z", at, "uid-z")
    made = vlan()
    assert drive(live(network=me, vlan=None, holders=(), rivals=(after, me)),
                 {"allocate": {"vlan": made, "holders": (made,)}}).of(AllocateVlan)


def test_a_network_that_holds_its_vlan_keeps_it_when_an_older_rival_appears():
    # Never release on a guess: the newer one already took the Vlan; the older one reads
    # VLANNameTaken (the Vlan belongs to the other).
    me = network()
    me["metadata"]["creationTimestamp"] = "2026-10-07T07:10:00Z"
    older = rival("tenant-b", "net-b", "2026-10-07T07:05:00Z", "uid-b")
    p = drive(live(network=me, rivals=(me, older)))
    assert p.crm("VLANAllocated")[1] == "Allocated"
    assert not p.of(ReleaseVlan)


def test_vlan_provider_mismatch():
    p = drive(live(vlan=vlan(provider="physnet9")))
    assert p.crm("VLANAllocated") == (
        "False", "VLANProviderMismatch",
        f'Vlan "{SUBNET}" uses provider "physnet9", zone "{ZONE}" uses "{PROVIDER}"')


def test_owned_vlan_without_finalizer_is_adopted():
    v = vlan(finalizers=())
    p = drive(live(vlan=v, holders=(v,)))
    assert p.of(AdoptVlan) == [AdoptVlan(v)]
    assert p.crm("VLANAllocated")[1] == "Allocated"


def test_kube_ovn_conflict():
    v = vlan(conflict=True)
    p = drive(live(vlan=v, holders=(v,)))
    want = ("False", "VLANConflict",
            f'Kube-OVN reports VLAN {VID} on provider "{PROVIDER}" as conflicting with another Vlan')
    assert p.crm("VLANAllocated") == want
    assert p.crm("Ready") == want
    assert (p.status["vlan"], p.status["vlanName"], p.status["bridge"]) == (VID, SUBNET, BRIDGE)  # stay set


@pytest.mark.parametrize("strangers, names_", [
    (("tenant-b-sub",), 'Subnet "tenant-b-sub" also names'),
    (("a-sub", "b-sub"), 'Subnet "a-sub", "b-sub" also name'),
])
def test_another_subnet_on_our_vlan_is_a_conflict_naming_it(strangers, names_):
    """Field report R1: Kube-OVN puts every Subnet naming a Vlan on it with a localnet port
    of its own; a Subnet other than the network's on its Vlan is VLANConflict, the VLAN
    stays allocated (never released, nothing deleted), and the gauge counts them."""
    p = drive(gw_live(strangers=strangers))
    want = ("False", "VLANConflict", (
        f'{names_} Vlan "{SUBNET}" (VLAN {VID}) of this network: Kube-OVN puts each on the VLAN with a localnet '
        "port of its own, joining its L2 segment to this network's. Delete it or point it at a Vlan of its own; "
        f"the controller never deletes it, and keeps VLAN {VID} allocated while it exists"))
    assert p.crm("VLANAllocated") == want and p.crm("Ready") == want
    assert p.status["vlan"] == VID
    assert not p.of(ReleaseVlan) and not p.of(ReleaseGateway)
    assert SetForeignSubnets(NS, NAME, len(strangers)) in p.applied
    assert p.of(WriteStatus)[-1].event == EventSpec("Warning", "VLANConflict", want[2])


def test_no_stranger_sets_the_gauge_to_zero():
    assert SetForeignSubnets(NS, NAME, 0) in drive(live()).applied


def kube_ovn_took_it_down(sub):
    """The Subnet as Kube-OVN v1.15 leaves it when its Vlan is flagged (validateSubnetVlan)."""
    sub["status"]["conditions"][0].update(reason="ValidateSubnetVlanFailed", message=(
        f"failed to validate vlan for subnet {SUBNET}, subnet {SUBNET} has invalid conflict vlan {SUBNET}"))
    return sub


HAND_DUP = f'VLAN {VID} on provider "{PROVIDER}" is also held by Vlan "hand-made"'


@pytest.mark.parametrize("sub, note", [
    (kube_ovn_took_it_down(subnet(ready=False)),
     f'; Kube-OVN flags Vlan "{SUBNET}" as conflicting too and has taken Subnet "{SUBNET}" down '
     "(Ready=False, ValidateSubnetVlanFailed)"),
    (subnet(), f'; Kube-OVN flags Vlan "{SUBNET}" as conflicting too and stops configuring Subnet "{SUBNET}"'),
])
def test_kube_ovn_flag_with_a_duplicate_names_the_duplicate_and_what_kube_ovn_did(sub, note):
    """Issue 24: on v1.15 a hand-made duplicate gets ours flagged and the Subnet taken down;
    the condition names the duplicate (our check comes first) and says what Kube-OVN did."""
    v = vlan(conflict=True)
    hand = vlan("hand-made", owner=("", ""), finalizers=(), uid="uid-hand")
    p = drive(live(vlan=v, holders=(v, hand), subnet=sub))
    want = ("False", "VLANConflict", HAND_DUP + note +
            "; delete the other Vlan, then Kube-OVN clears the flag at its next check of this one")
    assert p.crm("VLANAllocated") == want
    assert p.crm("Ready") == want
    assert not p.of(ReleaseVlan) and not p.of(Get)  # reported, nothing of ours written or given back


def test_s6_a_duplicate_names_the_subnets_on_it_and_is_a_conflict_whatever_they_show():
    """Field report S6: the message names the Subnets on the other Vlan (each has a
    localnet port on the VLAN); their status (here a healthy range) plays no part, and the
    network keeps its VLAN."""
    hand = vlan("foreign-302", owner=("", ""), finalizers=(), uid="uid-hand")
    p = drive(live(holders=(vlan(), hand), holder_subnets={"foreign-302": ("foreign-sub", "other-sub")}))
    assert p.crm("VLANAllocated") == ("False", "VLANConflict",
                                      f'VLAN {VID} on provider "{PROVIDER}" is also held by Vlan "foreign-302" '
                                      '(Subnet "foreign-sub", "other-sub")')
    assert p.status["vlan"] == VID and not p.of(ReleaseVlan)


def test_a_duplicate_kube_ovn_has_not_flagged_ours_for_is_our_message_alone():
    hand = vlan("hand-made", owner=("", ""), finalizers=(), uid="uid-hand")
    p = drive(live(holders=(vlan(), hand)))
    assert p.crm("VLANAllocated") == ("False", "VLANConflict", HAND_DUP)


def test_allocated_message():
    p = drive(live())
    assert p.crm("VLANAllocated") == ("True", "Allocated", f"VLAN {VID} on bridge {BRIDGE}")
    assert (p.status["vlan"], p.status["vlanName"], p.status["bridge"]) == (VID, SUBNET, BRIDGE)


def test_allocated_notes_a_different_static_assignment():
    z = zone(staticAssignments=[{"namespace": NS, "name": NAME, "vlan": 120}])
    p = drive(live(zone=z))
    assert p.crm("VLANAllocated")[2] == (
        f"VLAN {VID} on bridge {BRIDGE}; the static assignment asks for VLAN 120, "
        "which applies only when the network is recreated")


@pytest.mark.parametrize("spec, why", [
    ({"vlanRanges": ["200-210"]}, "VLAN 101 is outside the zone's current vlanRanges (200-210)"),
    ({"vlanRanges": ["100-110"], "reservedVLANs": [101]}, "VLAN 101 is now among the zone's reservedVLANs"),
], ids=["ranges-moved", "now-reserved"])
def test_a_vlan_the_zone_no_longer_hands_out_is_kept_with_its_own_reason(spec, why):
    """Issue 26 item 7: the range changed after the allocation; the network keeps its VLAN
    (§4.2: never re-allocated) and says so instead of a plain ``Allocated``."""
    p = drive(live(zone=zone(**spec)))
    assert p.crm("VLANAllocated") == ("True", "AllocatedOutsideRanges", (
        f"VLAN 101 on bridge {BRIDGE}; {why}: the network keeps it until it is deleted, "
        "and it is not handed out again while so"))
    assert p.status["vlan"] == 101 and p.crm("Ready")[0] == "True"
    assert not p.of(AllocateVlan) and not p.of(ReleaseVlan)


def test_a_static_vlan_outside_the_ranges_is_simply_allocated():
    z = zone(vlanRanges=["200-210"], staticAssignments=[{"namespace": NS, "name": NAME, "vlan": 101}])
    assert drive(live(zone=z)).crm("VLANAllocated") == ("True", "Allocated", f"VLAN 101 on bridge {BRIDGE}")


def test_allocated_static_assignment_equal_to_the_vlan_adds_nothing():
    z = zone(staticAssignments=[{"namespace": NS, "name": NAME, "vlan": VID}])
    assert drive(live(zone=z)).crm("VLANAllocated")[2] == f"VLAN {VID} on bridge {BRIDGE}"


def test_mtu_is_copied_from_the_zone():
    assert drive(live(zone=zone(mtu=1400))).status["mtu"] == 1400
    assert "mtu" not in drive(live(network=network({"mtu": 9000}))).status


def edited(vid: int):
    """Our Vlan after someone changed its spec.id by hand (the edit bumps the generation)."""
    v = vlan(vid=vid)
    v["metadata"]["generation"] = 2
    return v


CHANGED = (f'Vlan "{SUBNET}" was changed to VLAN 107 by someone else, but VLAN {VID} was allocated to this '
           f'network and its VMs still use it; put spec.id of Vlan "{SUBNET}" back to {VID}, or accept VLAN 107 '
           'by annotating this network proxmox.cozystack.io/accept-vlan-id="107"')


def test_vlan_id_changed_under_the_network_is_not_followed():
    # product-decisions.md §8: the allocation record is status.vlan; never written back,
    # never followed silently.
    v = edited(107)
    recorded = {"vlan": VID, "vlanName": SUBNET, "bridge": BRIDGE}
    p = drive(live(vlan=v, holders=(v,), network=network(recorded)))
    assert p.crm("VLANAllocated") == ("False", "VLANChangedExternally", CHANGED)
    assert p.crm("Ready") == ("False", "VLANChangedExternally", CHANGED)
    assert p.status["vlan"] == VID  # the record (and so the namespace triple) keeps the allocated ID
    assert not [a for a in p.applied if isinstance(a, (AdoptVlan, AllocateVlan, ReleaseVlan, RequestTriple))]
    assert p.of(WriteStatus)[-1].event == EventSpec("Warning", "VLANChangedExternally", CHANGED)
    assert SetVlanChanged(NS, NAME, True) in p.applied


def test_vlan_id_put_back_is_allocated_again():
    recorded = {"vlan": VID, "vlanName": SUBNET, "bridge": BRIDGE}
    v = edited(VID)  # generation 3 after the second edit: same ID as recorded
    v["metadata"]["generation"] = 3
    p = drive(live(vlan=v, holders=(v,), network=network(recorded)))
    assert p.crm("VLANAllocated")[:2] == ("True", "Allocated")
    assert SetVlanChanged(NS, NAME, False) in p.applied


@pytest.mark.parametrize("value, follows", [("107", True), (" 107 ", True), ("105", False), ("", False)])
def test_the_operator_accepts_the_new_id_with_the_annotation(value, follows):
    net = network({"vlan": VID, "vlanName": SUBNET, "bridge": BRIDGE})
    net["metadata"]["annotations"] = {names.ANNOTATION_ACCEPT_VLAN_ID: value}
    v = edited(107)
    p = drive(live(vlan=v, holders=(v,), network=net, annotation=f"{TRIPLE},{BRIDGE}/107/{POOL}"))
    if follows:
        assert p.crm("VLANAllocated") == ("True", "Allocated", f"VLAN 107 on bridge {BRIDGE}")
        assert p.status["vlan"] == 107
    else:
        assert p.crm("VLANAllocated")[1] == "VLANChangedExternally"
        assert p.status["vlan"] == VID


def test_a_vlan_the_controller_made_anew_is_followed():
    # A repaired duplicate is a new Vlan (generation 1) with a new ID: the controller's own
    # allocation, even when the status write of that pass was lost.
    v = vlan(vid=107)
    v["metadata"]["generation"] = 1
    p = drive(live(vlan=v, holders=(v,), network=network({"vlan": VID, "vlanName": SUBNET, "bridge": BRIDGE}),
                   annotation=f"{TRIPLE},{BRIDGE}/107/{POOL}"))
    assert p.crm("VLANAllocated")[:2] == ("True", "Allocated")
    assert p.status["vlan"] == 107


# -- duplicates (product-decisions.md §7, §8) --------------------------------------------------

OURS = vlan(created="2026-10-07T07:59:00Z")  # the newer of the two
TWIN = vlan("sub-b", owner=(NS, "net-b"), uid="uid-twin", created="2026-10-07T07:00:00Z")


def dup(**kw):
    base = dict(vlan=OURS, holders=(OURS, TWIN), subnet=None, subnet_bound=False)
    base.update(kw)
    return live(**base)


GIVE_BACK_CLEAR = {"fresh_vlan": OURS, "fresh_named_subnet": None, "fresh_consumers": Consumers()}
FRESH_READS = [Get(names.VLANS, SUBNET, None, Into("fresh_vlan")),
               Get(names.SUBNETS, SUBNET, None, Into("fresh_named_subnet")),
               ListConsumers(NS, POOL, Into("fresh_consumers"))]


def test_duplicate_holder_is_a_conflict_naming_the_other_vlan():
    hand = vlan("hand-made", owner=("", ""), finalizers=(), uid="uid-hand")
    p = drive(live(holders=(vlan(), hand)))
    st_, reason, msg = p.crm("VLANAllocated")
    assert (st_, reason) == ("False", "VLANConflict")
    assert '"hand-made"' in msg and str(VID) in msg and PROVIDER in msg
    assert not p.of(ReleaseVlan)
    assert not p.of(Get) and not p.of(ListConsumers)  # a hand-made twin is only reported


def test_self_made_unbound_duplicate_is_given_back_after_fresh_reads():
    p = drive(dup(), GIVE_BACK_CLEAR)
    release = p.index(lambda a: isinstance(a, ReleaseVlan))
    assert [p.applied.index(r) for r in FRESH_READS] == sorted(p.applied.index(r) for r in FRESH_READS)
    assert all(p.applied.index(r) < release for r in FRESH_READS)
    assert p.applied[release].vlan == OURS
    st_, reason, msg = p.crm("VLANAllocated")
    assert (st_, reason) == ("False", "VLANConflict") and '"sub-b"' in msg
    ev = [a for a in p.of(Event) if a.reason == "VLANDuplicateRepaired"]
    assert len(ev) == 1 and ev[0].type == "Warning"


@pytest.mark.parametrize("fresh", [
    {"fresh_vlan": None},
    {"fresh_vlan": vlan(created=OURS["metadata"]["creationTimestamp"], subnets=["sub-a"])},
    {"fresh_vlan": vlan(created=OURS["metadata"]["creationTimestamp"], uid="uid-recreated")},
    {"fresh_vlan": vlan(created=OURS["metadata"]["creationTimestamp"], deleting="2026-10-07T07:59:30Z")},
    {"fresh_vlan": vlan(vid=102, created=OURS["metadata"]["creationTimestamp"])},
    {"fresh_named_subnet": subnet()},
    {"fresh_consumers": Consumers(addresses=1)},
    {"fresh_consumers": Consumers(machines=1)},
], ids=["vlan-gone", "vlan-lists-a-subnet", "vlan-recreated", "vlan-deleting", "vlan-id-changed",
        "subnet-named-after-it", "address-in-pool", "machine-on-pool"])
def test_duplicate_not_given_back_when_a_fresh_read_shows_use(fresh):
    p = drive(dup(), {**GIVE_BACK_CLEAR, **fresh})
    assert not p.of(ReleaseVlan)
    assert p.crm("VLANAllocated")[1] == "VLANConflict"
    assert p.applied[0] == FRESH_READS[0]  # decided on fresh reads, the Vlan first


@pytest.mark.parametrize("kw", [
    {"subnet_bound": True},  # the cache shows a Subnet bound to it
    {"vlan": vlan(created="2026-10-07T06:00:00Z"), "holders": (vlan(created="2026-10-07T06:00:00Z"), TWIN)},  # older
    {"holders": (OURS, vlan("sub-b", owner=("", ""), uid="uid-twin"))},  # twin not made by us
], ids=["bound", "ours-is-older", "twin-hand-made"])
def test_duplicate_that_is_not_ours_to_give_back_is_only_reported(kw):
    p = drive(dup(**kw))
    assert not p.of(ReleaseVlan) and not p.of(ListConsumers)
    assert p.crm("VLANAllocated")[1] == "VLANConflict"


# =============================================================================================
# §5.2 / §5.8 gateway pre-step, Ready
# =============================================================================================


def test_management_off_gateway_disabled_and_ready():
    p = drive(live())
    assert p.crm("GatewayReady") == (
        "Unknown", "Disabled",
        "the controller does not manage the router port's HA chassis group (--manage-gateway-chassis=false)")
    assert p.crm("Ready") == ("True", "Ready", "the subnet is usable from Proxmox")
    assert p.last.requeue_after == 600
    assert not p.of(EnsureGateway)


def test_management_switched_on_drops_a_stale_disabled():
    old = converged(live())
    p = drive(attrs.evolve(old, manage_gateway=True, gateway_enabled=True),
              {"gateway": GatewayOutcome(GatewayState("ChassisAssigned", ASSIGNED, 2))})
    assert p.crm("GatewayReady")[1] == "ChassisAssigned"


def test_pending_when_gateway_managed_but_never_evaluated():
    p = drive(live(manage_gateway=True, gateway_enabled=False))
    assert p.crm("Ready") == ("False", "Pending", "GatewayReady has not been evaluated")


# =============================================================================================
# §5.5 Subnet
# =============================================================================================


def test_subnet_not_found():
    p = drive(live(subnet=None, manage_gateway=True, gateway_enabled=True))
    want = ("False", "SubnetNotFound", f'Kube-OVN Subnet "{SUBNET}" does not exist')
    assert p.crm("SubnetReady") == want and p.crm("Ready") == want
    assert p.crm("IPPoolReady") == ("Unknown", "SubnetUnavailable",
                                    "the pool is checked against the subnet once the subnet is bound")
    assert p.crm("GatewayReady") == ("Unknown", "SubnetUnavailable",
                                     "the router port is looked up once the subnet is bound")
    assert not p.of(EnsureGateway)


def test_missing_subnet_keeps_the_stale_address_fields():
    old = {"cidr": "10.9.0.0/24", "gateway": "10.9.0.1", "prefix": 24}
    p = drive(live(subnet=None, network=network(dict(old))))
    assert {k: p.status[k] for k in old} == old


@pytest.mark.parametrize("bound_to, shown", [("other", "other"), (None, "")])
def test_subnet_not_bound(bound_to, shown):
    p = drive(live(subnet=subnet(bound_to=bound_to, finalizers=())))
    assert p.crm("SubnetReady") == ("False", "SubnetNotBound",
                                    f'Subnet "{SUBNET}" has spec.vlan "{shown}", expected "{SUBNET}"')
    assert not p.of(AddFinalizer)  # no finalizer on a subnet that is not bound
    assert p.crm("IPPoolReady")[1] == "SubnetUnavailable"


@pytest.mark.parametrize("message, shown", [
    ("", "Kube-OVN has not reported the subnet Ready yet"),
    ("logical switch not created", "logical switch not created"),
])
def test_subnet_not_ready(message, shown):
    p = drive(live(subnet=subnet(ready=False, ready_message=message)))
    assert p.crm("SubnetReady") == ("False", "SubnetNotReady", shown)


@pytest.mark.parametrize("message", ["cidr 10.0.0.0/24 conflicts with subnet ovn-default", ""])
def test_subnet_invalid(message):
    p = drive(live(subnet=subnet(ready=False, ready_message="x", validated=message)))
    assert p.crm("SubnetReady") == ("False", "SubnetInvalid", message)


def test_subnet_ready_fills_the_address_fields():
    p = drive(live())
    assert p.crm("SubnetReady") == ("True", "Ready", "Kube-OVN reports the subnet Ready")
    assert (p.status["cidr"], p.status["gateway"], p.status["prefix"]) == ("10.0.0.0/24", "10.0.0.1", 24)


def test_bound_subnet_gets_our_finalizer_unless_terminating():
    sub = subnet(finalizers=())
    assert drive(live(subnet=sub)).of(AddFinalizer) == [AddFinalizer(names.SUBNETS, sub, Into("subnet"))]
    assert not drive(live(subnet=subnet(finalizers=(), deleting=DELETED_AT))).of(AddFinalizer)


# =============================================================================================
# §5.6 IP pool
# =============================================================================================


def test_pool_not_found():
    p = drive(live(pool=None, network=network({"ipPool": {"total": 1, "used": 0, "free": 1}})))
    assert p.crm("IPPoolReady") == ("False", "PoolNotFound", f'InClusterIPPool "{POOL}" does not exist in this namespace')
    assert "ipPool" not in p.status


SPLIT_FAILURES = [
    ({"cidr": "10.0.0.0/33"}, {}, "SubnetCIDRInvalid",
     'subnet cidrBlock "10.0.0.0/33": netip.ParsePrefix("10.0.0.0/33"): prefix length out of range'),
    ({}, {"prefix": 25}, "PoolPrefixMismatch", "pool prefix /25 differs from subnet 10.0.0.0/24"),
    ({"cidr": "10.0.0.7/24"}, {"prefix": 16}, "PoolPrefixMismatch", "pool prefix /16 differs from subnet 10.0.0.0/24"),
    ({}, {"gateway": "10.0.0.254"}, "PoolGatewayMismatch",
     'pool gateway "10.0.0.254" differs from subnet gateway "10.0.0.1"'),
    ({"exclude": ("10.0.0.1..10.0.0.99", "nonsense")}, {}, "SubnetExcludeIPsInvalid",
     '"nonsense" is not an address, range or CIDR'),
    ({}, {"addresses": ("10.0.0.60-10.0.0.x",)}, "PoolAddressInvalid", '"10.0.0.60-10.0.0.x": bad end address'),
    ({}, {"addresses": ("10.0.1.10-10.0.1.20",)}, "PoolOutsideSubnet",
     'pool address "10.0.1.10-10.0.1.20" is outside 10.0.0.0/24'),
    ({}, {"addresses": ("10.0.0.90-10.0.0.120",)}, "PoolOverlapsSubnet",
     'pool address "10.0.0.90-10.0.0.120" is not in the subnet\'s excludeIps, so Kube-OVN may hand it to a pod'),
]


@pytest.mark.parametrize("sub_kw, pool_kw, reason, message", SPLIT_FAILURES,
                         ids=[f"{r}-{i}" for i, (_, _, r, _) in enumerate(SPLIT_FAILURES)])
def test_pool_split_failure(sub_kw, pool_kw, reason, message):
    p = drive(live(subnet=subnet(**sub_kw), pool=pool(**pool_kw)))
    assert p.crm("IPPoolReady") == ("False", reason, message)
    assert p.crm("Ready") == ("False", reason, message)


def test_empty_subnet_gateway_skips_the_gateway_check():
    p = drive(live(subnet=subnet(gateway=""), pool=pool(gateway="10.0.0.254")))
    assert p.crm("IPPoolReady")[1] == "Ready"


def test_pool_exhausted_stays_ready():
    p = drive(live(pool=pool(ip=(41, 41, 0))))
    assert p.crm("IPPoolReady") == ("True", "PoolExhausted",
                                    "all 41 addresses of the pool are allocated; new machines will wait")
    assert p.crm("Ready")[0] == "True"
    assert p.status["ipPool"] == {"total": 41, "used": 41, "free": 0}


def test_pool_without_address_counts_keeps_the_previous_usage():
    no_counts = pool()
    del no_counts["status"]
    p = drive(live(pool=no_counts, network=network({"ipPool": {"total": 41, "used": 1, "free": 40}})))
    assert p.status["ipPool"] == {"total": 41, "used": 1, "free": 40}


# -- issue 15, item 3: PoolOverlapsPool, AddressConflict ------------------------------------

OVERLAP_TAIL = ("; the IPAM provider checks addresses only within one pool, so two machines can be given the "
                "same address: take the shared addresses out of one of the pools (spec.addresses or "
                "spec.excludedAddresses)")
CONFLICT_TAIL = ("; a machine given one of them clashes with the pod: give the pod another address, or take the "
                 "address out of the pool (spec.excludedAddresses)")


POOL_MADE = "2026-12-01T10:00:00Z"  # the network's own pool's creationTimestamp (pool())
BEFORE, AFTER = "2026-12-01T09:00:00Z", "2026-12-01T11:00:00Z"


def other_pool(name, addresses, ns="tenant-b", created=BEFORE):
    """Another pool, by default made before the network's (so an overlap is the network's)."""
    meta = {"name": name, "creationTimestamp": created, **({"namespace": ns} if ns else {})}
    return {"metadata": meta, "spec": {"addresses": list(addresses), "prefix": 24, "gateway": "10.0.0.1"}}


def kube_ovn_ip(name, address, pod="web-1", ns=NS):
    return {"metadata": {"name": name},
            "spec": {"podName": pod, "namespace": ns, "subnet": SUBNET, "v4IpAddress": address}}


def test_pool_overlapping_other_pools():
    others = (("InClusterIPPool", pool()),  # the network's own pool, as the index returns it
              ("InClusterIPPool", other_pool("pool-b", ["10.0.0.40-10.0.0.60"])),
              ("GlobalInClusterIPPool", other_pool("shared", ["10.0.0.45"], ns=None)),
              ("InClusterIPPool", other_pool("far", ["10.0.0.51-10.0.0.60"])))
    p = drive(live(other_pools=others))
    message = ('addresses of InClusterIPPool "pool-a" are also in InClusterIPPool tenant-b/pool-b '
               "(10.0.0.40-10.0.0.50), GlobalInClusterIPPool shared (10.0.0.45)" + OVERLAP_TAIL)
    assert p.crm("IPPoolReady") == ("False", "PoolOverlapsPool", message)
    assert p.crm("Ready") == ("False", "PoolOverlapsPool", message)
    assert SetPoolConflicts(NS, NAME, 2, 0) in p.applied


def test_a_later_pool_of_no_network_is_a_warning_and_the_network_stays_ready():
    """product-decisions.md §10: a Ready network is never taken down by someone else's later
    choice; the pool made after it is named in a True PoolOverlapsPool (doctor prints it)."""
    later = (("InClusterIPPool", other_pool("late", ["10.0.0.45"], created=AFTER)),)
    p = drive(live(other_pools=later))
    message = ('addresses of InClusterIPPool "pool-a" are also in InClusterIPPool tenant-b/late (10.0.0.45) '
               "(made after it: the network stays Ready)" + OVERLAP_TAIL)
    assert p.crm("IPPoolReady") == ("True", "PoolOverlapsPool", message)
    assert p.crm("Ready")[:2] == ("True", "Ready")
    assert SetPoolConflicts(NS, NAME, 1, 0) in p.applied


@pytest.mark.parametrize("other_vpc, created, want", [
    ("vpc-b", BEFORE, ("True", "Ready")),  # another VPC: no overlap, whatever the age
    ("vpc-b", AFTER, ("True", "Ready")),
    (VPC, BEFORE, ("False", "PoolOverlapsPool")),  # the same VPC, ours later: ours carries it
    (VPC, AFTER, ("True", "Ready")),  # the same VPC, theirs later: their network carries it
])
def test_a_pool_of_another_network_overlaps_only_in_the_same_vpc_and_only_on_the_later_pool(other_vpc, created, want):
    others = (("InClusterIPPool", other_pool("net-b-pool", ["10.0.0.45"], created=created)),)
    p = drive(live(other_pools=others, pool_vpcs={"tenant-b/net-b-pool": frozenset({other_vpc})}))
    assert p.crm("IPPoolReady")[:2] == want


def test_pool_overlapping_nothing_but_itself_is_ready():
    p = drive(live(other_pools=(("InClusterIPPool", pool()), ("InClusterIPPool", other_pool("x", ["10.0.1.1"])))))
    assert p.crm("IPPoolReady")[:2] == ("True", "Ready")
    assert SetPoolConflicts(NS, NAME, 0, 0) in p.applied


def test_same_pool_name_in_another_namespace_is_another_pool():
    p = drive(live(other_pools=(("InClusterIPPool", other_pool(POOL, ["10.0.0.50"], ns="tenant-b")),)))
    assert p.crm("IPPoolReady")[:2] == ("False", "PoolOverlapsPool")
    assert "InClusterIPPool tenant-b/pool-a (10.0.0.50)" in p.crm("IPPoolReady")[2]


def test_address_held_by_a_kube_ovn_ip():
    addr = {"metadata": {"name": "vm1-inet", "namespace": NS},
            "spec": {"address": "10.0.0.20", "poolRef": {"kind": "InClusterIPPool", "name": POOL}}}
    p = drive(live(kube_ovn_ips=(kube_ovn_ip("web-1.tenant-a", "10.0.0.20"),
                                 kube_ovn_ip("db.tenant-a", "10.0.0.200", pod="db")),
                   pool_addresses=(addr,)))
    message = ('Kube-OVN has given addresses of InClusterIPPool "pool-a" to pods: 10.0.0.20 (pod tenant-a/web-1, '
               "Kube-OVN IP web-1.tenant-a, IPAddress tenant-a/vm1-inet)" + CONFLICT_TAIL)
    assert p.crm("IPPoolReady") == ("False", "AddressConflict", message)
    assert p.crm("Ready") == ("False", "AddressConflict", message)
    assert SetPoolConflicts(NS, NAME, 0, 1) in p.applied


def pool_address(name, addr):
    return {"metadata": {"name": name, "namespace": NS},
            "spec": {"address": addr, "poolRef": {"kind": "InClusterIPPool", "name": POOL}}}


def test_one_address_given_to_two_ipaddresses_is_a_conflict_naming_both():
    """Field report R6: the IPAM provider handed one address to two claims under cache lag;
    both IPAddresses are named, each counts as a holder of its own."""
    twice = (pool_address("vm1-inet", "10.0.0.210"), pool_address("vm2-inet", "10.0.0.210"),
             pool_address("vm3-inet", "10.0.0.211"))
    p = drive(live(pool_addresses=twice))
    message = ('InClusterIPPool "pool-a" gave one address to several IPAddresses: 10.0.0.210 (IPAddress '
               "tenant-a/vm1-inet, IPAddress tenant-a/vm2-inet); their VMs would answer for one address: delete the "
               "IPAddressClaim of the VM that is to get another address (the provider then gives it a free one), the "
               "controller deletes nothing")
    assert p.crm("IPPoolReady") == ("False", "AddressConflict", message)
    assert SetPoolConflicts(NS, NAME, 0, 1) in p.applied
    # Holders are objects, never merged by address: three IPAddresses hold the pool.
    c = count_consumers(None, POOL, [], twice, [])
    assert c.addresses == 3 and [h.name for h in c.holders] == ["vm1-inet", "vm2-inet", "vm3-inet"]


def test_a_pod_and_a_second_ipaddress_on_the_pool_are_both_named():
    twice = (pool_address("vm1-inet", "10.0.0.210"), pool_address("vm2-inet", "10.0.0.210"))
    p = drive(live(pool_addresses=twice, kube_ovn_ips=(kube_ovn_ip("web-1.tenant-a", "10.0.0.20"),)))
    msg = p.crm("IPPoolReady")[2]
    assert msg.startswith('Kube-OVN has given addresses of InClusterIPPool "pool-a" to pods: 10.0.0.20')
    assert '; InClusterIPPool "pool-a" gave one address to several IPAddresses: 10.0.0.210' in msg
    assert SetPoolConflicts(NS, NAME, 0, 2) in p.applied


def test_pool_precedence_split_then_overlap_then_conflict_then_exhausted():
    overlap = (("InClusterIPPool", other_pool("pool-b", ["10.0.0.10"])),)
    conflict = (kube_ovn_ip("web-1.tenant-a", "10.0.0.11"),)
    # A split failure first (the pool's own fault); the gauges still count.
    p = drive(live(pool=pool(prefix=25), other_pools=overlap, kube_ovn_ips=conflict))
    assert p.crm("IPPoolReady")[:2] == ("False", "PoolPrefixMismatch")
    assert SetPoolConflicts(NS, NAME, 1, 1) in p.applied
    # Then the overlap, then the conflict, and only then the True reasons.
    assert drive(live(other_pools=overlap, kube_ovn_ips=conflict)).crm("IPPoolReady")[1] == "PoolOverlapsPool"
    assert drive(live(kube_ovn_ips=conflict, pool=pool(ip=(41, 41, 0)))).crm("IPPoolReady")[1] == "AddressConflict"


def test_pool_clashes_wait_for_the_bound_subnet():
    p = drive(live(subnet=subnet(bound_to="other"), other_pools=(("InClusterIPPool", other_pool("b", ["10.0.0.10"])),)))
    assert p.crm("IPPoolReady")[:2] == ("Unknown", "SubnetUnavailable")


def test_a_converged_overlap_writes_nothing_more():
    s = live(other_pools=(("InClusterIPPool", other_pool("pool-b", ["10.0.0.10"])),))
    assert not drive(converged(s)).of(WriteStatus)


def test_garbage_in_other_pools_and_ips_is_no_crash():
    others = (("InClusterIPPool", {"metadata": {"name": "g", "namespace": "x"}, "spec": {"addresses": ["garbage", 5]}}),
              ("GlobalInClusterIPPool", {"metadata": {"name": "h"}, "spec": None}),
              ("InClusterIPPool", {"metadata": {}}))
    ips = ({"metadata": {"name": "weird"}, "spec": {"v4IpAddress": "10.0.0.x,", "ipAddress": 7}}, {})
    p = drive(live(other_pools=others, kube_ovn_ips=ips))
    assert p.crm("IPPoolReady")[:2] == ("True", "Ready")


def test_pool_ready():
    p = drive(live())
    assert p.crm("IPPoolReady") == ("True", "Ready", "pool lies inside the subnet's excludeIps")
    assert p.status["ipPool"] == {"total": 41, "used": 3, "free": 38}


# =============================================================================================
# Issue 15, item 6: the pool's addresses on the Vlan, for admission (docs/admission.md)
# =============================================================================================

CIDRS_KEY = names.ANNOTATION_POOL_CIDRS


def test_a_vlan_without_the_pool_cidrs_gets_them_before_the_status():
    v = vlan(pool_cidrs=None)
    p = drive(live(vlan=v, holders=(v,)))
    assert p.of(SetPoolCidrs) == [SetPoolCidrs(v, POOL_CIDRS)]
    assert p.index(lambda a: isinstance(a, SetPoolCidrs)) < p.index(lambda a: isinstance(a, WriteStatus))
    assert p.crm("Ready")[0] == "True"
    assert p.snapshot.vlan["metadata"]["annotations"] == {CIDRS_KEY: POOL_CIDRS}


def test_a_vlan_with_the_right_pool_cidrs_is_not_written():
    s = converged(live())
    plan = plan_network(s)
    assert not [a for a in plan.actions if isinstance(a, SetPoolCidrs)]
    assert plan.writes == ()


@pytest.mark.parametrize("addresses,expected", [
    # ranges, CIDRs and single addresses (reference-behaviour.md §5.6 syntax), worked out by hand
    (["10.0.0.100..10.0.0.103"], "10.0.0.100/30"),
    (["10.0.0.7/30", " 10.0.0.20 "], "10.0.0.4/30,10.0.0.20/32"),
    (["10.0.0.21", "10.0.0.20"], "10.0.0.20/31"),                      # merged, ascending
    (["10.0.0.10-10.0.0.12", "fd00::1-fd00::3"], "10.0.0.10/31,10.0.0.12/32,fd00::1/128,fd00::2/127"),
])
def test_the_pool_cidrs_follow_the_pool(addresses, expected):
    p = drive(live(pool=pool(addresses=addresses, prefix=24)))
    assert [a.value for a in p.of(SetPoolCidrs)] == [expected]


def test_a_pool_without_a_usable_address_removes_the_pool_cidrs():
    p = drive(live(pool=pool(addresses=["not-an-address"])))
    assert [a.value for a in p.of(SetPoolCidrs)] == [None]
    assert p.crm("IPPoolReady")[1] == "PoolAddressInvalid"
    v = vlan(pool_cidrs=None)
    assert drive(live(vlan=v, holders=(v,), pool=pool(addresses=[]))).of(SetPoolCidrs) == []


def test_an_absent_pool_leaves_the_pool_cidrs_as_they_are():
    v = vlan(pool_cidrs="10.9.9.0/24")
    p = drive(live(vlan=v, holders=(v,), pool=None))
    assert p.of(SetPoolCidrs) == []
    assert p.crm("IPPoolReady")[1] == "PoolNotFound"


@pytest.mark.parametrize("kw", [
    {"owner": ("tenant-b", "net-b")},                    # VLANNameTaken: not this network's Vlan
    {"deleting": "2026-10-07T07:59:00Z"},                # Terminating
], ids=["foreign", "terminating"])
def test_no_pool_cidrs_on_a_vlan_that_is_not_ours_to_write(kw):
    v = vlan(pool_cidrs=None, **kw)
    assert drive(live(vlan=v, holders=(v,))).of(SetPoolCidrs) == []


def test_an_adopted_vlan_gets_the_pool_cidrs_after_the_adoption():
    v = vlan(finalizers=(), pool_cidrs=None)
    p = drive(live(vlan=v, holders=(v,)))
    (adopt,), (cidrs,) = p.of(AdoptVlan), p.of(SetPoolCidrs)
    assert p.applied.index(adopt) < p.applied.index(cidrs)
    assert FIN in cidrs.vlan["metadata"]["finalizers"]  # patched on top of the adopted Vlan
    assert cidrs.value == POOL_CIDRS


def test_the_pool_cidrs_are_written_while_the_vlan_id_was_changed_by_hand():
    """VLANChangedExternally stops the pass, but the pool is still the network's."""
    v = vlan(vid=109, pool_cidrs=None)
    v["metadata"]["generation"] = 2
    p = drive(live(vlan=v, holders=(v,), network=network({"vlan": VID})))
    assert p.crm("VLANAllocated")[1] == "VLANChangedExternally"
    assert [a.value for a in p.of(SetPoolCidrs)] == [POOL_CIDRS]


def test_a_deleting_network_never_writes_the_pool_cidrs():
    net = network({"vlan": VID}, deleting=DELETED_AT)
    v = vlan(pool_cidrs=None)
    p = drive(live(network=net, vlan=v, holders=(v,), consumers=Consumers(machines=1)))
    assert p.of(SetPoolCidrs) == []


# =============================================================================================
# §5.7 / §9.2 / §9.5 gateway step
# =============================================================================================


def default_vpc_message(where: str) -> str:
    return (f'Subnet "{SUBNET}" {where}; a Proxmox network needs a tenant VPC: the default VPC\'s router is the '
            "cluster's, so the controller never makes it the gateway of a VLAN. Recreate the Subnet with spec.vpc "
            "set to the tenant's VPC (the VLAN stays allocated meanwhile)")


@pytest.mark.parametrize("vpc, where", [
    ("", 'has no spec.vpc, so Kube-OVN puts it in the default VPC "ovn-cluster"'),
    ("ovn-cluster", 'is in the default VPC "ovn-cluster"'),
])
def test_a_subnet_in_the_default_vpc_is_invalid_gets_no_group_and_keeps_its_vlan(vpc, where):
    """Field report R2: whatever Kube-OVN reports of it, a Subnet with no spec.vpc (Kube-OVN
    defaults it into ovn-cluster) or in ovn-cluster is SubnetInvalid; the network's groups
    are released (a no-op without one), none is ensured, and the VLAN stays allocated."""
    p = drive(gw_live(subnet=subnet(vpc=vpc)), {"gateway_release": ""})
    invalid = ("False", "SubnetInvalid", default_vpc_message(where))
    assert p.crm("SubnetReady") == invalid and p.crm("Ready") == invalid
    assert p.crm("GatewayReady") == ("Unknown", "SubnetUnavailable",
                                     f'no HA chassis group on router port "ovn-cluster-{SUBNET}" of the default VPC: '
                                     "see SubnetReady")
    assert p.of(ReleaseGateway) == [ReleaseGateway(KEY)] and not p.of(EnsureGateway)
    assert p.crm("VLANAllocated")[:2] == ("True", "Allocated") and p.status["vlan"] == VID
    assert SetGatewayChassis(NS, NAME, 0) in p.applied
    assert p.of(WriteStatus)[-1].event == EventSpec("Warning", "SubnetInvalid", default_vpc_message(where))


def vpc_for(*namespaces: str) -> dict:
    return {"metadata": {"name": VPC}, "spec": {"namespaces": list(namespaces)}}


def test_a_subnet_in_another_tenants_vpc_is_reported_not_refused():
    """Field report R2, report only (a ProxmoxNetwork names no VPC): Vpc.spec.namespaces
    lists other namespaces. SubnetReady stays True with the note, a Warning Event once."""
    note = (f'Subnet "{SUBNET}" is in VPC "{VPC}", whose spec.namespaces lists tenant-b, tenant-c and not "{NS}": '
            "another tenant's VPC? Its VMs would reach that VPC's router and subnets")
    p = drive(live(subnet_vpc=vpc_for("tenant-b", "tenant-c")))
    assert p.crm("SubnetReady") == ("True", "Ready", f"Kube-OVN reports the subnet Ready; {note}")
    assert p.crm("Ready")[:2] == ("True", "Ready")
    assert [(a.type, a.reason, a.message) for a in p.applied if isinstance(a, Event)] == [
        ("Warning", "SubnetInForeignVPC", note)]
    # Reported once: the next pass finds the note in the stored condition.
    again = drive(converged(live(subnet_vpc=vpc_for("tenant-b", "tenant-c"))))
    assert not [a for a in again.applied if isinstance(a, Event)]


@pytest.mark.parametrize("vpc", [None, vpc_for(), vpc_for(NS), vpc_for("tenant-b", NS)],
                         ids=["not-found", "no-namespaces", "ours", "shared"])
def test_a_vpc_that_lists_no_namespace_or_ours_is_not_reported(vpc):
    p = drive(live(subnet_vpc=vpc))
    assert p.crm("SubnetReady") == ("True", "Ready", "Kube-OVN reports the subnet Ready")
    assert not [a for a in p.applied if isinstance(a, Event)]


def test_a_default_vpc_group_that_cannot_be_deleted_says_why():
    p = drive(gw_live(subnet=subnet(vpc="ovn-cluster")), {"gateway_release": "OVN NB is not connected"})
    assert p.crm("GatewayReady")[2].endswith("; deleting the network's group from OVN NB failed: OVN NB is not connected")


@pytest.mark.parametrize("manage", [False, True])
def test_a_default_vpc_subnet_without_gateway_management_or_nb_is_invalid_all_the_same(manage):
    """Management off, or on without an NB address (no OVN side): nothing to release."""
    p = drive(live(subnet=subnet(vpc="ovn-cluster"), manage_gateway=manage, gateway_enabled=False), {})
    assert p.crm("SubnetReady")[:2] == ("False", "SubnetInvalid")
    assert not p.of(ReleaseGateway)


def test_a_trunk_node_held_down_brings_the_pass_back_when_it_leaves():
    """Field report R12: the pass comes back when the hold-down of a trunk node ends (then
    the node leaves the group), not at the 5 min resync."""
    canned = {"gateway": GatewayOutcome(GatewayState("ChassisAssigned", ASSIGNED, 2))}
    assert drive(gw_live(trunk=("t1",), trunk_recheck=12.5), canned).last.requeue_after == 12.5
    assert drive(gw_live(trunk=("t1",)), canned).last.requeue_after == 300
    assert drive(live(trunk_recheck=12.5)).last.requeue_after == 600  # no NB side: nothing to come back for


def test_chassis_assigned_from_the_nb_outcome():
    s = gw_live(trunk=("t1",), siblings=frozenset({SUBNET}))
    p = drive(s, {"gateway": GatewayOutcome(GatewayState("ChassisAssigned", ASSIGNED, 2))})
    assert p.of(EnsureGateway) == [EnsureGateway(KEY, VPC, SUBNET, ("t1",), frozenset({SUBNET}))]
    assert p.crm("GatewayReady") == ("True", "ChassisAssigned", ASSIGNED)
    assert p.crm("Ready") == ("True", "Ready", "the subnet is usable from Proxmox")
    assert SetGatewayChassis(NS, NAME, 2) in p.applied
    assert p.last.requeue_after == 300


def up_network(failing_since: dt.datetime | None = None) -> NetworkSnapshot:
    """A managed network whose written status is Ready with ChassisAssigned (at T0 - 1 h)."""
    s = gw_live(now=T0 - dt.timedelta(hours=1))
    s = converged(s, {"gateway": GatewayOutcome(GatewayState("ChassisAssigned", ASSIGNED, 2))})
    status = copy.deepcopy(s.network["status"])
    if failing_since is not None:
        status["gatewayFailingSince"] = ts(failing_since)
    return attrs.evolve(s, now=T0, network=network(status))


NB_DOWN = {"gateway": GatewayOutcome(error="connection refused")}


def test_first_nb_failure_keeps_chassis_assigned_and_records_the_start():
    s = up_network()
    p = drive(s, NB_DOWN)
    prev = next(c for c in s.network["status"]["conditions"] if c["type"] == "GatewayReady")
    assert p.cond("GatewayReady") == prev  # kept exactly
    assert p.crm("Ready")[0] == "True"
    assert p.status["gatewayFailingSince"] == ts(T0)  # kept in the object (product-decisions.md §4.6)
    assert p.last.requeue_after == 30


def test_nb_failure_at_9m59s_still_keeps_chassis_assigned_and_writes_nothing():
    s = up_network(T0 - dt.timedelta(minutes=9, seconds=59))
    p = drive(s, NB_DOWN)
    assert [a for plan in p.plans for a in plan.writes] == [EnsureGateway(KEY, VPC, SUBNET, (), frozenset())]
    assert p.last.requeue_after == 30
    assert [m.ready for m in p.of(SetNetwork)] == [True]  # still Ready


def test_nb_failure_after_the_grace_is_false():
    since = T0 - dt.timedelta(minutes=10)
    p = drive(up_network(since), NB_DOWN)
    want = ("False", "NBUnavailable",
            f'could not bring the HA chassis group of router port "{LRP}" up to date in OVN NB since '
            f"{ts(since)}: connection refused")
    assert p.crm("GatewayReady") == want
    assert p.crm("Ready") == want


def test_first_nb_failure_posts_a_warning_once():
    p = drive(up_network(), NB_DOWN)
    assert [a.type for a in p.of(Event) if a.reason == "NBUnavailable"] == ["Warning"]
    assert not [a for a in drive(up_network(T0 - dt.timedelta(minutes=1)), NB_DOWN).of(Event)
                if a.reason == "NBUnavailable"]


def test_never_up_network_fails_at_once_on_the_nb():
    p = drive(gw_live(), NB_DOWN)
    assert p.crm("GatewayReady")[:2] == ("False", "NBUnavailable")


# =============================================================================================
# §5.9 step 8 namespace annotation
# =============================================================================================


def test_status_waits_for_the_namespace_annotation():
    p = drive(gw_live(annotation=""), {"annotation": ""})
    assert p.of(RequestTriple) == [RequestTriple(NS, KEY, TRIPLE)]
    assert not p.of(WriteStatus)
    assert not p.of(EnsureGateway)  # the group follows the status


def test_status_waits_with_management_off_too():
    p = drive(live(annotation="vmbr70/102/other"), {"annotation": "vmbr70/102/other"})
    assert p.of(RequestTriple) == [RequestTriple(NS, KEY, TRIPLE)]
    assert not p.of(WriteStatus)


def test_status_written_once_the_annotation_lists_the_triple():
    p = drive(gw_live(annotation=""), {"annotation": f"a/1/b,{TRIPLE}",
                                       "gateway": GatewayOutcome(GatewayState("ChassisAssigned", ASSIGNED, 2))})
    assert p.index(lambda a: isinstance(a, RequestTriple)) < p.index(lambda a: isinstance(a, EnsureGateway))
    assert p.status["vlan"] == VID


def test_status_that_already_shows_the_triple_is_not_held_back():
    s = converged(live())
    p = drive(attrs.evolve(s, annotation="", zone=None), {"annotation": ""})
    assert p.of(RequestTriple) == [RequestTriple(NS, KEY, TRIPLE)]  # asked again (§5.9 step 8)
    assert p.crm("Ready")[1] == "ZoneNotFound"  # and written: the stored status already shows the triple


# =============================================================================================
# A pass that changes nothing writes nothing (product-decisions.md §6)
# =============================================================================================


def test_converged_network_plans_no_write():
    s = converged(live())
    plan = plan_network(s)
    assert not plan.replan
    assert plan.writes == ()


def test_converged_managed_network_writes_only_the_nb_ensure():
    outcome = GatewayOutcome(GatewayState("ChassisAssigned", ASSIGNED, 2))
    s = converged(gw_live(), {"gateway": outcome})
    assert plan_network(s).writes == (EnsureGateway(KEY, VPC, SUBNET, (), frozenset()),)
    assert plan_network(attrs.evolve(s, gateway=outcome)).writes == ()
    assert s.network["status"]["conditions"] and s.network["status"]["vlan"] == VID


# =============================================================================================
# §6 deletion
# =============================================================================================

OLD = {"vlan": VID, "vlanName": SUBNET, "bridge": BRIDGE}


def deleting(status=None, **kw) -> NetworkSnapshot:
    base: dict[str, Any] = dict(key=KEY, network=network(dict(OLD) if status is None else status, deleting=DELETED_AT),
                                now=T0)
    base.update(kw)
    return NetworkSnapshot(**base)


def clear(**over) -> dict[str, Any]:
    """Fresh reads that let the VLAN go."""
    out = {"fresh_consumers": Consumers(), "fresh_subnet": None, "gateway_release": "", "fresh_vlan": vlan(),
           "fresh_network": network(dict(OLD), deleting=DELETED_AT), "listed": ((), ())}
    out.update(over)
    return out


def waits(p: Pass, reason: str, message: str, after: float) -> None:
    assert p.crm("Ready") == ("False", reason, message)
    assert p.last.requeue_after == after
    assert SetDeleting(NS, NAME, True) in p.applied
    assert not p.of(ReleaseVlan)
    assert not [a for a in p.applied if isinstance(a, RemoveFinalizer) and a.resource == names.PROXMOX_NETWORKS]


def net_finalizer_removed(p: Pass) -> bool:
    return any(isinstance(a, RemoveFinalizer) and a.resource == names.PROXMOX_NETWORKS for a in p.applied)


def test_deleting_network_without_our_finalizer_plans_nothing():
    s = deleting(network=network(OLD, deleting=DELETED_AT, finalizers=("other.io/x",)))
    assert plan_network(s) == Plan()


def test_in_use_from_the_cache_needs_no_fresh_read():
    p = drive(deleting(consumers=Consumers(used=2, machines=1)))
    waits(p, "InUse",
          f'2 address(es) of pool "{POOL}" are allocated and 1 ProxmoxMachine(s) reference it; '
          f'VLAN {VID} and subnet "{SUBNET}" are kept until they are gone', 30)
    assert not p.of(ListConsumers) and not p.of(Get)


def test_in_use_from_the_fresh_consumer_list():
    p = drive(deleting(), clear(fresh_consumers=Consumers(used=0, machines=2)))
    assert p.applied[0] == ListConsumers(NS, POOL, Into("fresh_consumers"))
    waits(p, "InUse",
          f'0 address(es) of pool "{POOL}" are allocated and 2 ProxmoxMachine(s) reference it; '
          f'VLAN {VID} and subnet "{SUBNET}" are kept until they are gone', 30)
    assert not p.of(Get)


def test_a_kind_the_fresh_read_cannot_list_holds_the_network():
    """R8: an unknown holder is a holder; the message quotes what could not be listed."""
    unlisted = ("proxmoxmachines.infrastructure.cluster.x-k8s.io/v1alpha2 (HTTP 500 InternalError: conversion "
                "webhook for infrastructure.cluster.x-k8s.io/v1alpha1, Kind=ProxmoxMachine failed)",)
    p = drive(deleting(), clear(fresh_consumers=Consumers(unlisted=unlisted)))
    waits(p, "InUse",
          f'0 address(es) of pool "{POOL}" are allocated and 0 ProxmoxMachine(s) reference it; cannot list '
          f'{unlisted[0]}, and an object that cannot be read may hold the pool, so VLAN {VID} and subnet '
          f'"{SUBNET}" are kept until it can be listed and nothing holds them', 30)
    assert not p.of(Get)  # nothing after the consumers is read, nothing released


def machine(name, **meta):
    return {"metadata": {"name": name, "namespace": NS, **meta},
            "spec": {"network": {"default": {"ipv4PoolRef": {"kind": "InClusterIPPool", "name": POOL}}}}}


def claim(name, address="", **meta):
    out = {"metadata": {"name": name, "namespace": NS, **meta},
           "spec": {"poolRef": {"kind": "InClusterIPPool", "name": POOL}}}
    if address:
        out["status"] = {"addressRef": {"name": address}}
    return out


def address(name, claim_name="", **meta):
    spec = {"poolRef": {"kind": "InClusterIPPool", "name": POOL}}
    if claim_name:
        spec["claimRef"] = {"name": claim_name}
    return {"metadata": {"name": name, "namespace": NS, **meta}, "spec": spec}


def test_in_use_names_the_first_five_holders_then_a_count():
    # product-decisions.md §8: holders are named in InUse (first five, then a count).
    machines = [machine(f"pm-{i}") for i in range(7)]
    p = drive(deleting(consumers=count_consumers(None, POOL, machines, [], [])))
    assert p.crm("Ready") == ("False", "InUse", (
        f'0 address(es) of pool "{POOL}" are allocated and 7 ProxmoxMachine(s) reference it; held by '
        "ProxmoxMachine pm-0, ProxmoxMachine pm-1, ProxmoxMachine pm-2, ProxmoxMachine pm-3, ProxmoxMachine pm-4 "
        f'and 2 more; VLAN {VID} and subnet "{SUBNET}" are kept until they are gone'))
    assert SetStuckHolders(NS, NAME, 0) in p.applied


def test_in_use_says_what_is_odd_about_each_holder():
    # Issue 15, item 4 (cluster-api-ipam-provider-in-cluster PR #317: a claim stuck
    # Terminating on a finalizer whose owner is gone).
    stuck = claim("vm-0-eth0", address="vm-0-eth0", deletionTimestamp="2026-10-07T07:40:00Z",
                  finalizers=["ipam.cluster.x-k8s.io/ReleaseAddress"],
                  ownerReferences=[{"kind": "ProxmoxMachine", "name": "vm-0", "uid": "u0"}])
    c = count_consumers(None, POOL, [machine("vm-1")],
                        [address("vm-0-eth0", "vm-0-eth0"), address("lost", "gone-claim")],
                        [stuck, claim("vm-1-eth0")])
    p = drive(deleting(consumers=c))
    assert p.crm("Ready")[2] == (
        f'0 address(es) of pool "{POOL}" are allocated and 1 ProxmoxMachine(s) reference it; '
        "2 IPAddress(es) and 2 IPAddressClaim(s) name the pool; held by ProxmoxMachine vm-1, "
        "IPAddressClaim vm-0-eth0 (deleting since 2026-10-07T07:40:00Z on finalizer "
        "ipam.cluster.x-k8s.io/ReleaseAddress; owner ProxmoxMachine vm-0 not found), "
        "IPAddressClaim vm-1-eth0 (no IPAddress), IPAddress lost (its IPAddressClaim gone-claim not found), "
        f'IPAddress vm-0-eth0; VLAN {VID} and subnet "{SUBNET}" are kept until they are gone')
    assert SetStuckHolders(NS, NAME, 3) in p.applied


def test_in_use_quotes_a_machines_failed_deletion():
    """Issue 26 item 7: capmox could not destroy the VM; InUse quotes why (both condition
    lists a capmox machine may carry: v1alpha1's, v1alpha2's deprecated v1beta1 ones)."""
    failed = {"type": "VMProvisioned", "status": "False", "reason": "DeletionFailed", "severity": "Warning",
              "message": "VM 107 is running - destroy failed"}
    v1 = machine("pm-1", deletionTimestamp="2026-10-07T07:40:00Z", finalizers=["proxmoxmachine.infrastructure.cluster.x-k8s.io"])
    v1["status"] = {"conditions": [{"type": "Ready", "status": "False", "reason": "DeletionFailed",
                                    "message": "VM 107 is running - destroy failed"}, failed,
                                   {"type": "VMProvisioned", "status": "True", "reason": "SomethingFailed"}]}
    v2 = machine("pm-2")
    v2["status"] = {"conditions": [{"type": "Ready", "status": "False", "reason": "Deleting"}],
                    "deprecated": {"v1beta1": {"conditions": [failed]}}}
    p = drive(deleting(consumers=count_consumers(None, POOL, [v1, v2], [], [])))
    assert p.crm("Ready")[2] == (
        f'0 address(es) of pool "{POOL}" are allocated and 2 ProxmoxMachine(s) reference it; held by '
        "ProxmoxMachine pm-1 (deleting since 2026-10-07T07:40:00Z on finalizer "
        'proxmoxmachine.infrastructure.cluster.x-k8s.io; Ready DeletionFailed: "VM 107 is running - destroy failed"; '
        'VMProvisioned DeletionFailed: "VM 107 is running - destroy failed"), '
        'ProxmoxMachine pm-2 (VMProvisioned DeletionFailed: "VM 107 is running - destroy failed"); '
        f'VLAN {VID} and subnet "{SUBNET}" are kept until they are gone')
    assert SetStuckHolders(NS, NAME, 2) in p.applied


def test_deletion_wait_leaves_observed_generation_and_other_conditions_alone():
    was = converged(live()).network["status"]
    p = drive(deleting(copy.deepcopy(was), network=network(copy.deepcopy(was), deleting=DELETED_AT, generation=9),
                       consumers=Consumers(used=1)))
    assert p.status["observedGeneration"] == 3
    for c in was["conditions"]:
        if c["type"] != "Ready":
            assert p.cond(c["type"]) == c


def test_the_subnet_is_read_fresh_after_the_consumers():
    p = drive(deleting(), clear(fresh_subnet=subnet(), fresh_vlan=None))
    assert p.applied[:2] == (ListConsumers(NS, POOL, Into("fresh_consumers")),
                             Get(names.SUBNETS, SUBNET, None, Into("fresh_subnet")))


def test_subnet_still_exists():
    p = drive(deleting(), clear(fresh_subnet=subnet(bound_to="elsewhere")))
    waits(p, "SubnetStillExists", f'Subnet "{SUBNET}" still exists; VLAN {VID} is released after it is deleted', 30)


def test_subnet_deleting_gets_our_finalizer_removed():
    sub = subnet(deleting="2026-10-07T07:40:00Z", finalizers=(FIN, "kubeovn.io/kube-ovn-controller"))
    p = drive(deleting(), clear(fresh_subnet=sub))
    assert RemoveFinalizer(names.SUBNETS, sub) in p.applied
    waits(p, "SubnetDeleting",
          f'waiting for Kube-OVN to delete Subnet "{SUBNET}" before VLAN {VID} is released', 10)


def test_subnet_deleting_held_only_by_us_keeps_our_finalizer():
    sub = subnet(deleting="2026-10-07T07:40:00Z", finalizers=(FIN,), status_extra={"v4usingIPs": 3})
    p = drive(deleting(), clear(fresh_subnet=sub))
    assert not [a for a in p.of(RemoveFinalizer) if a.resource == names.SUBNETS]
    st_, reason, msg = p.crm("Ready")
    assert (st_, reason) == ("False", "SubnetDeleting")
    assert msg.startswith(f'waiting for Kube-OVN to delete Subnet "{SUBNET}" before VLAN {VID} is released')
    assert "3 IP(s)" in msg
    assert p.last.requeue_after == 10


def test_gateway_release_pending():
    p = drive(deleting(manage_gateway=True, gateway_enabled=True), clear(gateway_release="NB timed out"))
    assert ReleaseGateway(KEY) in p.applied
    waits(p, "GatewayReleasePending",
          "could not delete the network's HA chassis group from OVN NB: NB timed out", 30)


@pytest.mark.parametrize("manage, vid", [(False, VID), (True, 0)], ids=["management-off", "no-vlan-yet"])
def test_gateway_release_only_with_management_and_a_vlan(manage, vid):
    p = drive(deleting({"vlan": vid} if vid else {}, manage_gateway=manage), clear(fresh_vlan=None))
    assert not p.of(ReleaseGateway)
    assert net_finalizer_removed(p)


def test_a_group_whose_status_write_was_lost_is_released():
    """§6 step 3 skips the release when status.vlan was never written, but the pass that
    writes the group can lose the status write after it (the leader killed in between, a
    409): when the NB cache shows a group owned by the network it is released first, and an
    NB error holds the finalizer (chaos short form: a group left after teardown)."""
    s = deleting({}, manage_gateway=True, gateway_enabled=True, owns_group=True)
    p = drive(s, clear())
    assert ReleaseGateway(KEY) in p.applied
    assert net_finalizer_removed(p)
    p = drive(s, clear(gateway_release="NB timed out"))
    assert p.crm("Ready")[:2] == ("False", "GatewayReleasePending")
    assert not net_finalizer_removed(p)
    assert not p.of(ReleaseVlan)


def test_release_order():
    s = deleting(manage_gateway=True, gateway_enabled=True)
    p = drive(s, clear())
    kinds = [type(a).__name__ for a in p.applied if not isinstance(a, (Metric, Log))]
    assert kinds == ["ListConsumers", "Get", "ReleaseGateway", "Get", "Get", "SplitListed", "ReleaseVlan", "Event",
                     "RemoveFinalizer"]
    gets = p.of(Get)
    assert gets == [Get(names.SUBNETS, SUBNET, None, Into("fresh_subnet")), Get(names.VLANS, SUBNET, None, Into("fresh_vlan")),
                    Get(names.PROXMOX_NETWORKS, NAME, NS, Into("fresh_network"))]
    assert p.applied[-2:] == (RemoveFinalizer(names.PROXMOX_NETWORKS, s.network, Into("finalized")),
                              ForgetNetwork(NS, NAME))
    assert p.last.requeue_after is None and not p.of(WriteStatus)


def test_normal_release_posts_vlan_released():
    p = drive(deleting(), clear())
    assert p.of(ReleaseVlan)[0].vlan == vlan()
    ev = p.of(Event)
    assert [(e.type, e.reason) for e in ev] == [("Normal", "VLANReleased")]
    assert str(VID) in ev[0].message


def test_vlan_gone_skips_to_the_network_finalizer():
    p = drive(deleting(), clear(fresh_vlan=None))
    assert not p.of(ReleaseVlan) and not p.of(SplitListed)
    assert net_finalizer_removed(p)


@pytest.mark.parametrize("owner", [("other", "net-b"), ("", ""), (NS, "net-b")])
def test_vlan_owned_by_someone_else_is_never_released(owner):
    p = drive(deleting(), clear(fresh_vlan=vlan(owner=owner)))
    assert not p.of(ReleaseVlan) and not p.of(SetPruneTimers)
    assert net_finalizer_removed(p)


def test_a_vlan_the_network_never_took_over_is_not_touched_at_deletion():
    # Issue 15, item 7: a hand-made Vlan with our labels, refused (here: wrong provider,
    # never adopted, so without our finalizer), is neither patched nor deleted.
    refused = vlan(provider="physnet9", finalizers=())
    p = drive(deleting(), clear(fresh_vlan=refused))
    assert not p.of(ReleaseVlan) and not p.of(SetPruneTimers) and not p.of(SplitListed)
    assert net_finalizer_removed(p)


@pytest.mark.parametrize("fresh_net", [
    network(OLD, deleting=DELETED_AT, uid="uid-recreated"),
    network(OLD),
    network(OLD, deleting=DELETED_AT, finalizers=()),
    None,
], ids=["other-uid", "not-deleting", "no-finalizer", "gone"])
def test_not_still_ours_forgets_the_overlay_and_releases_nothing(fresh_net):
    p = drive(deleting(), clear(fresh_network=fresh_net))
    assert p.applied[-1] == ForgetOverlay(KEY)
    assert not p.of(ReleaseVlan) and not p.of(SplitListed) and not net_finalizer_removed(p)


def test_vlan_still_referenced():
    p = drive(deleting(), clear(listed=((SUBNET,), ())))
    waits(p, "VLANStillReferenced", f'Kube-OVN still lists subnets [{SUBNET}] on Vlan "{SUBNET}"', 10)
    assert p.cond("SwitchDeleted") is None


def test_vlan_still_referenced_by_subnets_of_someone_else_says_they_are_never_deleted():
    # Field report R1: the release waits for them; they are not ours to delete.
    p = drive(deleting(), clear(listed=(("sub-x", "sub-y"), ())))
    waits(p, "VLANStillReferenced", f'Kube-OVN still lists subnets [sub-x sub-y] on Vlan "{SUBNET}"; [sub-x sub-y] '
          f"are not this network's: the controller never deletes them, and VLAN {VID} is released once they are gone",
          10)
    assert not p.of(ReleaseVlan)


@pytest.mark.parametrize("listed", [((), ()), ((), ("gone-sub",))], ids=["none-listed", "a-gone-one-listed"])
def test_a_subnet_naming_the_vlan_holds_the_release_whatever_status_subnets_says(listed):
    """Field reports, fourth round, S5: Vlan.status.subnets is a status field an older Vlan CRD
    prunes (and Kube-OVN down never writes); a Subnet whose spec.vlan names the Vlan (the
    cache) holds the VLAN all the same, named as another's."""
    p = drive(deleting(strangers=("sub-x",)), clear(listed=listed))
    waits(p, "VLANStillReferenced", f'subnets [sub-x] name Vlan "{SUBNET}" in spec.vlan; [sub-x] are not this '
          f"network's: the controller never deletes them, and VLAN {VID} is released once they are gone", 10)
    both = drive(deleting(strangers=("sub-x", "sub-y")), clear(listed=(("sub-y",), ())))
    waits(both, "VLANStillReferenced", f'Kube-OVN still lists subnets [sub-y] on Vlan "{SUBNET}"; subnets [sub-x] '
          f'name Vlan "{SUBNET}" in spec.vlan; [sub-x sub-y] are not this network\'s: the controller never deletes '
          f"them, and VLAN {VID} is released once they are gone", 10)
    if not listed[1]:
        assert drive(deleting(), clear(listed=listed)).of(ReleaseVlan)  # nothing naming it: released


def timers(**starts: str) -> dict[str, str]:
    return {names.ANNOTATION_DELETED_SUBNETS: json.dumps(starts, separators=(",", ":"), sort_keys=True)}


def test_switch_deleting_until_newest_timer_plus_timeout():
    v = vlan(subnets=["g1", "g2"], annotations=timers(g1="2026-10-07T07:50:00Z", g2="2026-10-07T07:55:00Z"))
    p = drive(deleting(), clear(fresh_vlan=v, listed=((), ("g1", "g2"))))
    waits(p, "SwitchDeleting",
          f'Kube-OVN still lists deleted subnets [g1 g2] on Vlan "{SUBNET}" until it has deleted their logical '
          f"switches; VLAN {VID} is released then, or at 2026-10-07T08:05:00Z at the latest", 10)
    assert not p.of(SetPruneTimers)
    assert p.cond("SwitchDeleted") == {
        "type": "SwitchDeleted", "status": "False", "reason": "ListedOnVlan",
        "message": "Kube-OVN still lists deleted subnets [g1 g2] on the Vlan",
        "observedGeneration": 3, "lastTransitionTime": ts(T0)}


def test_switch_deleting_requeues_at_the_deadline_when_sooner():
    v = vlan(subnets=["g1"], annotations=timers(g1="2026-10-07T07:50:00Z"))
    p = drive(deleting(now=dt.datetime(2026, 10, 7, 7, 59, 57, tzinfo=UTC)),
              clear(fresh_vlan=v, listed=((), ("g1",))))
    assert p.crm("Ready")[1] == "SwitchDeleting" and p.last.requeue_after == 3


def test_switch_deleted_keeps_the_start_of_the_wait():
    prev = {"type": "SwitchDeleted", "status": "False", "reason": "ListedOnVlan", "message": "x",
            "observedGeneration": 3, "lastTransitionTime": "2026-10-07T07:50:00Z"}
    v = vlan(subnets=["g1"], annotations=timers(g1="2026-10-07T07:55:00Z"))
    p = drive(deleting({**OLD, "conditions": [prev]}), clear(fresh_vlan=v, listed=((), ("g1",))))
    assert p.cond("SwitchDeleted")["lastTransitionTime"] == "2026-10-07T07:50:00Z"


def test_switch_deleted_is_dropped_once_nothing_gone_is_listed():
    prev = {"type": "SwitchDeleted", "status": "False", "reason": "ListedOnVlan", "message": "x",
            "observedGeneration": 3, "lastTransitionTime": "2026-10-07T07:50:00Z"}
    p = drive(deleting({**OLD, "conditions": [prev]}, consumers=Consumers(used=1)))
    assert p.cond("SwitchDeleted") is None


def test_prune_timers_are_stored_before_deciding():
    v = vlan(subnets=["g1"])
    p = drive(deleting(), clear(fresh_vlan=v, listed=((), ("g1",))))
    stored = p.of(SetPruneTimers)
    assert stored == [SetPruneTimers(v, '{"g1":"2026-10-07T08:00:00Z"}', Into("fresh_vlan"))]
    assert p.index(lambda a: isinstance(a, SetPruneTimers)) < p.index(lambda a: isinstance(a, WriteStatus))
    assert p.crm("Ready")[2].endswith("or at 2026-10-07T08:10:00Z at the latest")


def test_timer_older_than_the_deletion_restarts():
    v = vlan(subnets=["g1"], annotations=timers(g1="2026-10-07T07:00:00Z"))  # before DELETED_AT
    p = drive(deleting(), clear(fresh_vlan=v, listed=((), ("g1",))))
    assert p.of(SetPruneTimers)[0].value == '{"g1":"2026-10-07T08:00:00Z"}'
    assert not p.of(ReleaseVlan)


def test_release_after_the_prune_timeout_warns():
    v = vlan(subnets=["g1"], annotations=timers(g1="2026-10-07T07:45:00Z"))
    p = drive(deleting(), clear(fresh_vlan=v, listed=((), ("g1",))))
    assert p.of(ReleaseVlan)[0].vlan == v
    ev = p.of(Event)
    assert [(e.type, e.reason) for e in ev] == [("Warning", "VLANReleasedAfterPruneTimeout")]
    assert str(VID) in ev[0].message and "g1" in ev[0].message
    assert any(isinstance(a, Log) and a.event ==
               "Kube-OVN did not prune deleted subnets from the Vlan in time; releasing the VLAN anyway"
               for a in p.applied)
    assert p.index(lambda a: isinstance(a, ReleaseVlan)) < p.index(
        lambda a: isinstance(a, RemoveFinalizer) and a.resource == names.PROXMOX_NETWORKS)


def test_live_subnet_holds_even_past_the_prune_timeout():
    v = vlan(subnets=["g1", "l1"], annotations=timers(g1="2026-10-07T07:31:00Z"))
    p = drive(deleting(), clear(fresh_vlan=v, listed=(("l1",), ("g1",))))
    assert p.crm("Ready")[1] == "VLANStillReferenced"
    assert p.cond("SwitchDeleted")["reason"] == "ListedOnVlan"


def second_switch_deleting_pass(old_status) -> Pass:
    v = vlan(subnets=["g1"], annotations=timers(g1="2026-10-07T07:55:00Z"))
    canned = clear(fresh_vlan=v, listed=((), ("g1",)))
    first = drive(deleting(old_status), canned)
    assert first.crm("Ready")[1] == "SwitchDeleting"
    return drive(deleting(copy.deepcopy(first.status), now=T0 + dt.timedelta(seconds=10)), canned)


def test_unchanged_deletion_wait_writes_nothing_the_second_time():
    was_live = converged(live()).network["status"]  # a network that was Ready before its deletion
    again = second_switch_deleting_pass(was_live)
    assert [a for p in again.plans for a in p.writes] == []
    assert again.last.requeue_after == 10


def test_unchanged_deletion_wait_writes_nothing_even_when_ready_was_new():
    again = second_switch_deleting_pass(dict(OLD))  # the stored status had no conditions yet
    assert [a for p in again.plans for a in p.writes] == []


# =============================================================================================
# Properties
# =============================================================================================

NAMES_LIVE = ["l1", "l2"]
NAMES_GONE = [SUBNET, "g2"]


def often(value, *others):
    """A strategy that draws ``value`` about half the time (the release path must be reached)."""
    return st.sampled_from([value] * max(1, len(others)) + list(others))


@st.composite
def deletion_cases(draw):
    now = T0 + dt.timedelta(seconds=draw(st.integers(0, 2 * 3600)))
    timeout = float(draw(st.sampled_from([60, 600, 1800])))
    deleted_ago = draw(st.sampled_from([0, 30, int(3 * timeout), 4 * 3600])) + draw(st.integers(0, 5))
    deleted = now.replace(microsecond=0) - dt.timedelta(seconds=deleted_ago)
    vid = draw(st.sampled_from([0, VID]))
    live_names = tuple(draw(often([], ["l1"], ["l1", "l2"])))
    gone_names = tuple(draw(st.lists(st.sampled_from(NAMES_GONE), unique=True)))
    stored: dict[str, str] = {}
    for n in NAMES_GONE:
        kind = draw(st.sampled_from(["past", "past", "past", "none", "any", "garbage"]))
        if kind == "past":  # before now: ran out (by up to one more timeout), or not yet
            ran_out = draw(st.booleans())
            ago = draw(st.integers(int(timeout), int(2 * timeout))) if ran_out else draw(st.integers(0, int(timeout) - 1))
            stored[n] = ts(now - dt.timedelta(seconds=ago))
        elif kind == "any":
            stored[n] = ts(T0 + dt.timedelta(seconds=draw(st.integers(-2 * 3600, 3 * 3600))))
        elif kind == "garbage":
            stored[n] = "yesterday"
    return dict(
        now=now, deleted=deleted, timeout=timeout, vid=vid, live=live_names, gone=gone_names, stored=stored,
        owner=draw(often("ours", "other", "absent")),
        sub=draw(often("absent", "present", "deleting", "deleting-held")),
        fresh_net=draw(often("ours", "other-uid", "not-deleting", "no-finalizer", "gone")),
        manage=draw(st.booleans()), cache_busy=draw(often(False, True)), fresh_busy=draw(often(False, True)),
        gw_error=draw(often("", "NB down")),
    )


def build(case):
    deleted = ts(case["deleted"])
    net = network({"vlan": case["vid"]} if case["vid"] else {}, deleting=deleted)
    ann = timers(**case["stored"]) if case["stored"] else None
    v = vlan(subnets=list(case["live"] + case["gone"]), annotations=ann,
             owner=(NS, NAME) if case["owner"] == "ours" else ("other", "net-b"))
    subs = {"absent": None, "present": subnet(),
            "deleting": subnet(deleting=deleted, finalizers=(FIN, "kubeovn.io/kube-ovn-controller")),
            "deleting-held": subnet(deleting=deleted, status_extra={"v4usingIPs": 2})}
    nets = {"ours": network({}, deleting=deleted), "other-uid": network({}, deleting=deleted, uid="uid-2"),
            "not-deleting": network({}), "no-finalizer": network({}, deleting=deleted, finalizers=()), "gone": None}
    s = NetworkSnapshot(key=KEY, network=net, now=case["now"], manage_gateway=case["manage"],
                        gateway_enabled=case["manage"], prune_timeout=case["timeout"],
                        consumers=Consumers(used=1) if case["cache_busy"] else Consumers())
    canned = {"fresh_consumers": Consumers(claims=1) if case["fresh_busy"] else Consumers(),
              "fresh_subnet": subs[case["sub"]], "gateway_release": case["gw_error"],
              "fresh_vlan": None if case["owner"] == "absent" else v,
              "fresh_network": nets[case["fresh_net"]], "listed": (case["live"], case["gone"])}
    return s, canned


def prune_deadline_passed(case) -> bool:
    """§7.1 from the spec: a gone name keeps a valid stored start no later than now and not
    before the deletion second, else restarts now; release once now >= newest + timeout."""
    now_s = case["now"].replace(microsecond=0)
    starts = []
    for n in case["gone"]:
        raw = case["stored"].get(n)
        start = dt.datetime.strptime(raw, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) if raw and raw != "yesterday" else None
        if start is None or start > now_s or start < case["deleted"]:
            start = now_s
        starts.append(start)
    return not starts or case["now"] >= max(starts) + dt.timedelta(seconds=case["timeout"])


def release_allowed(case) -> bool:
    return (not case["cache_busy"] and not case["fresh_busy"] and case["sub"] == "absent"
            and not (case["manage"] and case["vid"] and case["gw_error"])
            and case["owner"] == "ours" and case["fresh_net"] == "ours"
            and not case["live"] and prune_deadline_passed(case))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deletion_cases())
def test_property_no_release_unless_every_fresh_read_allows_it(case):
    s, canned = build(case)
    p = drive(s, canned)
    released = bool(p.of(ReleaseVlan))
    assert released == release_allowed(case)
    if released:
        at = p.index(lambda a: isinstance(a, ReleaseVlan))
        for read in ("fresh_subnet", "fresh_vlan", "fresh_network"):
            assert p.index(lambda a, r=read: isinstance(a, Get) and a.into == Into(r)) < at
        assert p.index(lambda a: isinstance(a, SplitListed)) < at
        assert p.index(lambda a: isinstance(a, ListConsumers)) < at
        assert net_finalizer_removed(p)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deletion_cases())
def test_property_network_finalizer_never_before_a_required_release(case):
    s, canned = build(case)
    p = drive(s, canned)
    if not net_finalizer_removed(p):
        return
    fin = p.index(lambda a: isinstance(a, RemoveFinalizer) and a.resource == names.PROXMOX_NETWORKS)
    assert not case["cache_busy"] and not case["fresh_busy"] and case["sub"] == "absent"
    assert not (case["manage"] and case["vid"] and case["gw_error"])
    if case["owner"] == "ours":  # a Vlan of ours exists: it must have gone first
        assert p.index(lambda a: isinstance(a, ReleaseVlan)) < fin


@st.composite
def any_snapshot(draw):
    if draw(st.booleans()):
        s, canned = build(draw(deletion_cases()))
        return s, canned
    manage = draw(st.booleans())
    v = draw(st.sampled_from([None, vlan(), vlan(finalizers=()), vlan(conflict=True), vlan(owner=("o", "n")),
                              vlan(provider="p9"), vlan(annotations=timers(g="2026-10-07T07:00:00Z"))]))
    s = live(
        manage_gateway=manage, gateway_enabled=manage and draw(st.booleans()),
        network=network(draw(st.sampled_from([None, dict(OLD), {"vlan": 105, "bridge": BRIDGE}])),
                        finalizers=draw(st.sampled_from([(FIN,), ()]))),
        zone=draw(st.sampled_from([None, zone(), zone(namespaceSelector={"matchLabels": {"a": "b"}}),
                                   zone(staticAssignments=[{"namespace": NS, "name": NAME, "vlan": 120}])])),
        vlan=v, holders=(() if v is None else draw(st.sampled_from([(v,), (v, TWIN)]))),
        subnet=draw(st.sampled_from([None, subnet(), subnet(bound_to="x"), subnet(vpc=""), subnet(ready=False),
                                     subnet(finalizers=())])),
        subnet_bound=draw(st.booleans()),
        pool=draw(st.sampled_from([None, pool(), pool(prefix=25), pool(ip=(4, 4, 0))])),
        annotation=draw(st.sampled_from([None, "", TRIPLE])),
        refusal=draw(st.sampled_from([None, ("ZoneExhausted", "full")])),
    )
    made = vlan()
    canned = {"allocate": {"vlan": made, "holders": (made,), "allocated_now": True},
              "gateway": draw(st.sampled_from([GatewayOutcome(GatewayState("ChassisAssigned", ASSIGNED, 2)),
                                               GatewayOutcome(error="refused")])),
              "annotation": draw(st.sampled_from(["", TRIPLE])),
              "gateway_release": draw(st.sampled_from(["", "OVN NB is not connected"])),
              "fresh_vlan": draw(st.sampled_from([None, v or made])), "fresh_named_subnet": None,
              "fresh_consumers": Consumers()}
    return s, canned


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_snapshot())
def test_property_plan_is_deterministic_and_leaves_the_snapshot_alone(sc):
    s, canned = sc
    before = copy.deepcopy(s)
    assert plan_network(s) == plan_network(s)
    assert s == before
    drive(s, canned)  # a whole pass, every later plan included, leaves the first snapshot as it was
    assert s == before


# =============================================================================================
# The serving chassis (product-decisions.md §10)
# =============================================================================================


def test_the_serving_chassis_is_recorded_and_dropped_when_nothing_serves_or_the_sb_is_not_read():
    from ovn.sb import Binding

    outcome = {"gateway": GatewayOutcome(GatewayState("ChassisAssigned", ASSIGNED, 2, members=("ch-a", "ch-b")))}
    served = drive(gw_live(trunk=("t1",), sb_binding=Binding(True, True, "ch-a", "pve-1", T0)), outcome)
    assert served.status["servingChassis"] == "ch-a"
    assert SetGatewayServing(NS, NAME, True, "ch-a") in served.applied
    up = attrs.evolve(gw_live(trunk=("t1",)), network=network(copy.deepcopy(served.status)))
    gone = drive(attrs.evolve(up, sb_binding=Binding(True, True, "", "", T0 - dt.timedelta(minutes=1))), outcome)
    assert gone.crm("GatewayReady")[:2] == ("False", "NoServingChassis")
    assert "servingChassis" not in gone.status
    assert SetGatewayServing(NS, NAME, False, "") in gone.applied
    unread = drive(up, outcome)  # the SB not read (any more)
    assert unread.crm("GatewayReady")[:2] == ("True", "ChassisAssigned")
    assert "servingChassis" not in unread.status
    lost = drive(attrs.evolve(up, sb_binding=Binding(False, since=T0, error="lost")), outcome)
    assert lost.crm("GatewayReady")[:2] == ("Unknown", "SBUnavailable")
    assert lost.status["servingChassis"] == "ch-a"  # the last one known, kept


# =============================================================================================
# The path MTU (product-decisions.md §10)
# =============================================================================================


@pytest.mark.parametrize("zone_mtu", [1450, None])
def test_the_gateway_ensure_carries_the_zones_mtu_and_the_status_shows_the_ports_gateway_mtu(zone_mtu):
    z = zone(mtu=zone_mtu) if zone_mtu is not None else zone()
    outcome = {"gateway": GatewayOutcome(GatewayState("ChassisAssigned", ASSIGNED, 2, members=("ch-a", "ch-b"),
                                                      mtu=1400))}
    p = drive(gw_live(trunk=("t1",), zone=z), outcome)
    (ensure,) = p.of(EnsureGateway)
    assert ensure.zone_mtu == zone_mtu
    assert p.status["gatewayMtu"] == 1400
    # The group gone from the port (another tool's group now): the MTU goes with it.
    up = attrs.evolve(gw_live(trunk=("t1",), zone=z), network=network(copy.deepcopy(p.status)))
    foreign = drive(up, {"gateway": GatewayOutcome(GatewayState("ForeignGroup", "someone else's", 0))})
    assert "gatewayMtu" not in foreign.status
    # An NB outage keeps what the port last carried.
    lost = drive(up, {"gateway": GatewayOutcome(error="connection refused")})
    assert lost.status["gatewayMtu"] == 1400
    # Management off: nothing of ours on the port.
    off = drive(attrs.evolve(up, manage_gateway=False, gateway_enabled=False), outcome)
    assert "gatewayMtu" not in off.status


def test_a_status_field_the_crd_prunes_makes_no_write_and_a_real_change_writes_it_again():
    """Field reports, fourth round, S5: a CRD older than the controller prunes gatewayMtu and
    servingChassis. The stored status lacks them for good; the write decision leaves out what
    the server cannot hold (controller.schema.differs), so a converged network writes nothing,
    and a real change writes the whole status (its read-back keeps telling which fields the
    CRD holds)."""
    from ovn.sb import Binding

    outcome = {"gateway": GatewayOutcome(GatewayState("ChassisAssigned", ASSIGNED, 2, members=("ch-a", "ch-b"),
                                                      mtu=1400))}
    binding = Binding(True, True, "ch-a", "pve-1", T0)
    p = drive(gw_live(trunk=("t1",), sb_binding=binding), outcome)
    assert (p.status["gatewayMtu"], p.status["servingChassis"]) == (1400, "ch-a")
    stored = {k: v for k, v in p.status.items() if k not in ("gatewayMtu", "servingChassis")}
    up = gw_live(trunk=("t1",), sb_binding=binding, network=network(copy.deepcopy(stored)))
    assert drive(up, outcome).of(WriteStatus)  # not known pruned: written (and its read-back will tell)
    pruned = frozenset({"status.gatewayMtu", "status.servingChassis"})
    assert drive(attrs.evolve(up, pruned=pruned), outcome).of(WriteStatus) == []
    # A real change (the pool's counts) writes the whole status, pruned fields and all.
    changed = drive(attrs.evolve(up, pruned=pruned, pool=pool(ip=(41, 4, 37))), outcome)
    (write,) = changed.of(WriteStatus)
    assert write.status["ipPool"] == {"total": 41, "used": 4, "free": 37}
    assert (write.status["gatewayMtu"], write.status["servingChassis"]) == (1400, "ch-a")


@pytest.mark.parametrize("status, finalizers, adds", [
    ({}, [], False),  # just created: Kube-OVN has not handled it yet
    ({}, ["kubeovn.io/kube-ovn-controller"], True),  # v1.15 put its finalizer on
    ({"conditions": [{"type": "Validated", "status": "True"}]}, [], False),  # v1.15 validates before its finalizer
    # A failed pass wrote Ready False before Kube-OVN's finalizer; its retry adds that finalizer.
    ({"conditions": [{"type": "Ready", "status": "False", "reason": "ValidateSubnetVlanFailed"}]}, [], False),
    ({"conditions": [{"type": "Ready", "status": "True"}]}, [], True),  # an older Kube-OVN finished a pass
])
def test_our_subnet_finalizer_waits_until_kube_ovn_has_handled_the_subnet(status, finalizers, adds):
    """Field reports, fourth round: our first finalizer patch raced Kube-OVN's defaulting and
    its own finalizer (a refused write each time, and v1.15's unguarded merge patch of the list
    could drop an entry added before its own)."""
    sub = subnet()
    sub["status"] = status
    sub["metadata"]["finalizers"] = finalizers
    p = plan_network(live(subnet=sub))
    assert any(isinstance(a, AddFinalizer) and a.resource == names.SUBNETS for a in p.actions) == adds



def test_an_overlap_appearing_while_the_pool_is_ready_only_warns():
    """product-decisions.md §10: a Ready network is never taken down by someone else's later
    choice, also when an older pool is edited to overlap it: the overlap is named in a True
    PoolOverlapsPool, Ready stays."""
    older = (("InClusterIPPool", other_pool("edited", ["10.0.0.45"], created=BEFORE)),)
    fresh = drive(live(other_pools=older))
    assert fresh.crm("IPPoolReady")[:2] == ("False", "PoolOverlapsPool")  # a pool made on taken addresses
    ready = converged(live())
    assert ready.network["status"]["conditions"]
    p = drive(attrs.evolve(ready, other_pools=older))
    assert p.crm("IPPoolReady")[:2] == ("True", "PoolOverlapsPool")
    assert p.crm("Ready")[:2] == ("True", "Ready")
    assert SetPoolConflicts(NS, NAME, 1, 0) in p.applied


# =============================================================================================
# Field report S1: a Subnet made before its Vlan, Kube-OVN's state stale
# =============================================================================================

S1_STALE = (f'Kube-OVN has not re-validated Subnet "{SUBNET}" since Vlan "{SUBNET}" was created; '
            "kube-ovn-controller before v1.15.5 needs a restart (kube-ovn#6352)")
VLAN_MISSING = f'failed to validate vlan for subnet {SUBNET}, failed to get vlan {SUBNET}: vlan "{SUBNET}" not found'


def vlan_failed(updated: str) -> dict:
    """The Subnet as kube-ovn-controller's patchSubnetStatus leaves it after a failed
    validateSubnetVlan (pkg/controller/subnet_status.go): Ready False with the reason,
    Validated True with the same reason."""
    sub = subnet()
    sub["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "reason": "ValidateSubnetVlanFailed", "message": VLAN_MISSING,
         "lastUpdateTime": updated, "lastTransitionTime": updated},
        {"type": "Validated", "status": "True", "reason": "ValidateSubnetVlanFailed", "message": ""},
    ]
    return sub


def test_s1_before_the_grace_the_subnet_is_not_ready_with_kube_ovns_message_and_comes_back_at_its_end():
    """S1: the Vlan was made 60 s ago (2 min grace): Kube-OVN's own message, no Event; the
    pass comes back when the grace ends."""
    made = T0 - dt.timedelta(seconds=60)
    p = drive(live(vlan=vlan(created=ts(made)), subnet=vlan_failed("2026-10-07T07:00:00Z")))
    assert p.crm("SubnetReady") == ("False", "SubnetNotReady", VLAN_MISSING)
    assert not [a for a in p.applied if isinstance(a, Event)]
    assert p.plans[-1].requeue_after == pytest.approx(60.0)


def test_s1_after_the_grace_the_stale_state_is_named_once_and_nothing_is_touched():
    """S1 expected: SubnetReady=False SubnetNotReady (never SubnetInvalid/VLANConflict) with
    the message naming the stale Kube-OVN state, one Warning Event KubeOVNStale; no write to
    the Vlan or the Subnet, VLAN 101 stays allocated."""
    made = T0 - dt.timedelta(seconds=121)
    s = live(vlan=vlan(created=ts(made)), subnet=vlan_failed(ts(made - dt.timedelta(seconds=30))))
    p = drive(s)
    assert p.crm("SubnetReady") == ("False", "SubnetNotReady", S1_STALE)
    assert p.crm("VLANAllocated")[:2] == ("True", "Allocated") and p.status["vlan"] == VID
    assert [(a.type, a.reason, a.message) for a in p.applied if isinstance(a, Event)] == [
        ("Warning", "KubeOVNStale", S1_STALE)]
    touched = [a for a in p.applied if not isinstance(a, (Event, Metric, WriteStatus, ReportOnce))]
    assert touched == []
    again = drive(converged(s))
    assert not [a for a in again.applied if isinstance(a, Event)]


def test_s1_a_condition_kube_ovn_rewrote_after_the_vlan_counts_from_its_rewrite():
    """S1: the grace runs from the later of the Vlan's creation and the condition's last
    update (Kube-OVN looked again, so the clock restarts)."""
    made = T0 - dt.timedelta(seconds=300)
    p = drive(live(vlan=vlan(created=ts(made)), subnet=vlan_failed(ts(T0 - dt.timedelta(seconds=30)))))
    assert p.crm("SubnetReady") == ("False", "SubnetNotReady", VLAN_MISSING)
    assert p.plans[-1].requeue_after == pytest.approx(90.0)


@pytest.mark.parametrize("case", ["flagged", "foreign"])
def test_s1_a_flagged_or_foreign_vlan_is_not_called_stale(case):
    """S1 applies only to the network's own Vlan with status.conflict not set: a flagged
    Vlan is Kube-OVN's duplicate check doing its job, a foreign one is not ours to vouch for."""
    made = T0 - dt.timedelta(seconds=600)
    v = vlan(created=ts(made), conflict=True) if case == "flagged" else vlan(created=ts(made), owner=("x", "y"))
    p = drive(live(vlan=v, holders=(v,), subnet=vlan_failed(ts(made))))
    assert S1_STALE not in str(p.crm("SubnetReady"))
    assert not [a for a in p.applied if isinstance(a, Event) and a.reason == "KubeOVNStale"]


def test_s1_once_named_the_stale_state_stays_named_on_a_copy_of_the_vlan_without_its_creation_time():
    """S1: a pass that reads the Vlan from this process's own write (no creationTimestamp)
    must not flip SubnetReady back to Kube-OVN's message while Kube-OVN's state holds."""
    made = T0 - dt.timedelta(seconds=121)
    s = live(vlan=vlan(created=ts(made)), subnet=vlan_failed(ts(made - dt.timedelta(seconds=30))))
    written = vlan(created=ts(made))
    del written["metadata"]["creationTimestamp"]
    p = drive(attrs.evolve(converged(s), vlan=written, holders=(written,)))
    assert not p.of(WriteStatus)  # nothing changed: still named stale
    assert not [a for a in p.applied if isinstance(a, Event)]
