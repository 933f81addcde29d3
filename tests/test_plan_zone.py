"""The ProxmoxNetworkZone planner, pure (no server): ``plan_zone(ZoneSnapshot) -> Plan``.

Expected reasons and messages are the spec's (reference-behaviour.md §8, §8.1, §7;
product-decisions.md §4.4, §7), not read off the code. A pass is driven by :func:`drive`
(``tests.support.plans.drive``, a stand-in for ``controller.apply.executor.run``): each requested read
is answered from a dict of canned fresh values keyed by the action's ``into`` as written
(``owners[<vlan>]``, ``fresh[<vlan>]``, ``listed[<vlan>]``) and folded by the action.
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
    FAILED,
    Event,
    EventSpec,
    ForgetZone,
    Get,
    Into,
    Log,
    Metric,
    Plan,
    ReleaseVlan,
    RemoveFinalizer,
    SetPruneTimers,
    SetZone,
    SetZoneKept,
    SplitListed,
    WriteStatus,
)
from controller.plan.zone import ZoneSnapshot, plan_zone
from tests.support import plans

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 10, 7, 8, 0, 0, tzinfo=UTC)
FIN = names.FINALIZER
ZONE, PROVIDER, NS = "zone-a", "physnet1", "tenant-a"


def ts(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def zone(name=ZONE, provider=PROVIDER, ranges=("101-110",), reserved=(), static=(), status=None):
    spec: dict[str, Any] = {"bridge": "vmbr70", "providerNetwork": provider, "vlanRanges": list(ranges)}
    if reserved:
        spec["reservedVLANs"] = list(reserved)
    if static:
        spec["staticAssignments"] = [{"namespace": NS, "name": n, "vlan": v} for n, v in static]
    z: dict[str, Any] = {"metadata": {"name": name, "generation": 2}, "spec": spec}
    if status is not None:
        z["status"] = status
    return z


def vlan(name, vid, owner=(NS, None), zone_label=ZONE, provider=PROVIDER, subnets=(), annotations=None):
    labels = {names.LABEL_NETWORK_NAMESPACE: owner[0], names.LABEL_NETWORK_NAME: f"net-{name}" if owner[1] is None else owner[1]}
    if zone_label is not None:
        labels[names.LABEL_ZONE] = zone_label
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "labels": labels, "finalizers": [FIN]}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"metadata": meta, "spec": {"id": vid, "provider": provider}, "status": {"subnets": list(subnets)}}


def owner_key(v) -> str:
    labels = v["metadata"]["labels"]
    return f"{labels[names.LABEL_NETWORK_NAMESPACE]}/{labels[names.LABEL_NETWORK_NAME]}"


def provider_network(ready=True, nodes=("n1", "n2")):
    return {"metadata": {"name": PROVIDER}, "status": {"ready": ready, "readyNodes": list(nodes)}}


def subnet(name="sub-x", vlan_name="v1", deleting=False, finalizers=(FIN,), using=0):
    meta: dict[str, Any] = {"name": name, "finalizers": list(finalizers)}
    if deleting:
        meta["deletionTimestamp"] = "2026-10-07T07:50:00Z"
    return {"metadata": meta, "spec": {"vlan": vlan_name, "cidrBlock": "10.0.0.0/24"},
            "status": {"v4usingIPs": using}}


def snap(labelled=(), others=(), z=None, cached=None, **kw) -> ZoneSnapshot:
    """A zone pass; ``labelled`` Vlans carry the zone label, ``others`` are only on the provider.
    Owners of ``labelled`` are in the network cache unless ``cached`` says otherwise."""
    z = z or zone()
    base: dict[str, Any] = dict(
        name=ZONE, zone=z, now=T0, on_provider=tuple(labelled) + tuple(others), labelled=tuple(labelled),
        zones=(z,), networks=len(labelled), provider_network=provider_network(),
        cached_networks=frozenset(owner_key(v) for v in labelled) if cached is None else frozenset(cached),
    )
    base.update(kw)
    return ZoneSnapshot(**base)


@attrs.frozen
class Pass(plans.Pass[ZoneSnapshot]):
    """A zone pass, with the zone's Ready condition and VLAN counts at hand."""

    @property
    def ready(self):
        return self.crm("Ready")

    @property
    def counts(self):
        return tuple(self.status[k] for k in ("totalVLANs", "allocatedVLANs", "freeVLANs", "networks"))


def drive(s: ZoneSnapshot, canned: dict[str, Any] | None = None) -> Pass:
    """A zone pass over ``s``, as ``controller.apply.executor.run(plan_zone, s, executor)`` runs it; a zone
    pass plans only actions :func:`tests.support.plans.answer` knows."""
    return plans.drive(plan_zone, s, canned, result=Pass)


def timers(**starts: str) -> dict[str, str]:
    return {names.ANNOTATION_DELETED_SUBNETS: json.dumps(starts, separators=(",", ":"), sort_keys=True)}


# =============================================================================================
# §8 steps 1-3, 10: Ready
# =============================================================================================


def test_zone_not_found_forgets_its_series():
    assert plan_zone(ZoneSnapshot(name=ZONE, zone=None, now=T0)) == Plan((ForgetZone(ZONE),))


@pytest.mark.parametrize("ranges, message", [
    (("110-101",), 'vlan range "110-101" ends before it starts'),
    (("0",), 'vlan range "0": 0 is outside 1-4094'),
    (("101-4095",), 'vlan range "101-4095": 4095 is outside 1-4094'),
])
def test_zone_invalid(ranges, message):
    p = drive(snap(z=zone(ranges=ranges)))
    assert p.ready == ("False", "ZoneInvalid", message)
    assert p.status["observedGeneration"] == 2
    assert not [a for a in p.applied if isinstance(a, Metric)]  # counters and metrics untouched
    assert p.last.requeue_after is None


def test_provider_network_not_found():
    p = drive(snap(provider_network=None))
    assert p.ready == ("False", "ProviderNetworkNotFound", f'Kube-OVN ProviderNetwork "{PROVIDER}" does not exist')


@pytest.mark.parametrize("pn", [provider_network(ready=False), {"metadata": {"name": PROVIDER}}])
def test_provider_network_not_ready(pn):
    p = drive(snap(provider_network=pn))
    assert p.ready == ("False", "ProviderNetworkNotReady",
                       f'Kube-OVN ProviderNetwork "{PROVIDER}" is not ready on every node it should be')


def test_not_ready_transition_is_a_warning_event():
    p = drive(snap(provider_network=None))
    assert p.of(WriteStatus)[0].event == EventSpec(
        "Warning", "ProviderNetworkNotFound", f'Kube-OVN ProviderNetwork "{PROVIDER}" does not exist')


def test_ready_counts_free_allocated_and_networks():
    z = zone(reserved=(105,), static=(("pinned", 108),))
    same_provider = zone("zone-b", static=(("b", 106),))
    other_provider = zone("zone-c", provider="physnet9", static=(("c", 107),))
    a, b = vlan("v-a", 101), vlan("v-b", 102)
    hand = vlan("hand", 103, zone_label=None)  # on the provider, not ours: used, not allocated
    p = drive(snap([a, b], [hand], z=z, zones=(z, same_provider, other_provider), networks=4))
    # 101-110 without 105: 9 candidates; used 101, 102, 103 and the pins 106, 108 (107 is another provider's)
    assert p.counts == (9, 2, 4, 4)
    assert p.ready == ("True", "Ready", "4 of 9 VLANs free; trunk ready on 2 node(s)")
    assert SetZone(ZONE, 9, 2, 4, 4, 0) in p.applied
    assert p.last.requeue_after == 600


def test_stranded_ids_are_listed_sorted_as_strings():
    z = zone(reserved=(105,), static=(("pinned", 300),))
    vs = [vlan("v-200", 200), vlan("v-105", 105), vlan("v-300", 300), vlan("v-1000", 1000), vlan("v-101", 101)]
    p = drive(snap(vs, z=z))
    assert p.ready == ("True", "Ready", "8 of 9 VLANs free; trunk ready on 2 node(s); allocated outside the current "
                                        "ranges: 1000 (v-1000), 105 (v-105), 200 (v-200)")
    assert p.counts[:2] == (9, 5)
    assert SetZoneKept(ZONE, 3, 0) in p.applied  # issue 26 item 7


def test_duplicate_ids_on_the_provider_are_named():
    a = vlan("v-a", 101)
    hand = vlan("hand", 101, zone_label=None)
    p = drive(snap([a, vlan("v-b", 102)], [hand, vlan("x", 102, zone_label=None)]))
    st_, reason, msg = p.ready
    assert (st_, reason) == ("True", "Ready")
    assert msg.startswith("8 of 10 VLANs free; trunk ready on 2 node(s)")
    for part in ("101", "v-a", "hand", "102", "v-b", "x"):
        assert part in msg.split("trunk ready on 2 node(s)")[1]


def test_converged_zone_writes_nothing():
    s = snap([vlan("v-a", 101)])
    first = drive(s)
    again = plan_zone(attrs.evolve(s, zone=zone(status=copy.deepcopy(first.status))))
    assert again.writes == () and not again.replan


# =============================================================================================
# §8.1 orphans
# =============================================================================================

CLEAR = {"listed[v1]": ((), ())}


def orphan_pass(v, **kw) -> Pass:
    canned = {"fresh[v1]": v, **CLEAR, **kw.pop("canned", {})}
    return drive(snap([v], cached=kw.pop("cached", ()), **kw), canned)


@pytest.mark.parametrize("owner", [("", "net-x"), (NS, "")], ids=["no-namespace", "no-name"])
def test_vlan_with_an_empty_owner_label_is_collected_without_asking_for_the_network(owner):
    v = vlan("v1", 101, owner=owner)
    p = orphan_pass(v)
    assert not [a for a in p.of(Get) if a.resource == names.PROXMOX_NETWORKS]
    assert p.of(ReleaseVlan) == [ReleaseVlan(v, "collected orphaned VLAN", {"vlan": 101, "name": "v1"},
                                             into=Into("released", "v1"))]
    ev = p.of(Event)
    assert [(e.type, e.reason) for e in ev] == [("Normal", "OrphanedVLANCollected")]
    assert "v1" in ev[0].message and "101" in ev[0].message
    assert p.counts[1] == 0  # allocated excludes the collected one
    assert SetZone(ZONE, 10, 0, 9, 1, 0) in p.applied


@pytest.mark.parametrize("owner", [(NS, "net-gone"), ("", "")], ids=["network-gone", "no-owner"])
def test_an_orphan_without_our_finalizer_is_named_and_never_touched(owner):
    """Issue 26 item 7, product-decisions.md §8 ("we delete only what we own"): a hand-made
    Vlan with our labels but not our finalizer (the controller writes it in the create call,
    or on adoption) is reported on the zone and counted as an orphan, never read for
    collection, patched or deleted."""
    v = vlan("v1", 101, owner=owner)
    v["metadata"]["finalizers"] = ["example.com/keep"]
    p = orphan_pass(v, canned={"owners[v1]": None})
    assert not p.of(ReleaseVlan) and not p.of(RemoveFinalizer) and not p.of(SetPruneTimers)
    assert not [a for a in p.of(Get) if a.resource == names.VLANS] and not p.of(Event)
    assert p.ready == ("True", "Ready", (
        "9 of 10 VLANs free; trunk ready on 2 node(s); Vlan(s) labelled as this zone's whose network does not "
        f"exist, without the finalizer {FIN} (never made or adopted by the controller), left alone: "
        '"v1" (VLAN 101)'))
    assert p.counts[1] == 1
    assert SetZone(ZONE, 10, 1, 9, 1, 1) in p.applied


def test_a_terminating_orphan_without_our_finalizer_is_neither_named_nor_touched():
    v = vlan("v1", 101, owner=("", ""))
    v["metadata"].update(finalizers=["kubeovn.io/kube-ovn-controller"], deletionTimestamp="2026-10-07T07:59:00Z")
    p = orphan_pass(v)
    assert not p.of(ReleaseVlan) and not p.of(Get)
    assert p.ready[2] == "9 of 10 VLANs free; trunk ready on 2 node(s)"


def test_a_terminating_orphan_with_our_finalizer_is_collected():
    """A release cut short between its delete and the finalizer's removal (controller.apply.vlans
    release order): the Vlan is still ours, and the zone finishes the release."""
    v = vlan("v1", 101, owner=(NS, "net-gone"))
    v["metadata"]["deletionTimestamp"] = "2026-10-07T07:59:00Z"
    p = orphan_pass(v, canned={"owners[v1]": None})
    assert p.of(ReleaseVlan) == [ReleaseVlan(v, "collected orphaned VLAN", {"vlan": 101, "name": "v1"},
                                             into=Into("released", "v1"))]


def test_owner_missing_from_the_cache_is_read_fresh_and_tolerantly():
    v = vlan("v1", 101)
    p = orphan_pass(v, canned={"owners[v1]": None})
    assert p.applied[0] == Get(names.PROXMOX_NETWORKS, "net-v1", NS, Into("owners", "v1"), tolerate=True)
    reads = [p.index(lambda a, r=r: getattr(a, "into", None) == Into(r, "v1")) for r in ("owners", "fresh", "listed")]
    assert reads == sorted(reads) and reads[-1] < p.index(lambda a: isinstance(a, ReleaseVlan))
    assert p.counts[1] == 0


@pytest.mark.parametrize("owner_read", [
    FAILED,
    {"metadata": {"name": "net-v1", "namespace": NS}},
    {"metadata": {"name": "net-v1", "namespace": NS, "deletionTimestamp": "2026-10-07T07:59:00Z"}},
], ids=["read-failed", "found-fresh", "terminating"])
def test_owner_not_known_to_be_gone_is_not_an_orphan(owner_read):
    p = orphan_pass(vlan("v1", 101), canned={"owners[v1]": owner_read})
    assert not p.of(ReleaseVlan)
    assert not [a for a in p.of(Get) if a.resource == names.VLANS]  # no collection started
    assert p.counts[1] == 1
    assert p.ready[2] == "9 of 10 VLANs free; trunk ready on 2 node(s)"


def test_owner_in_the_cache_is_not_asked_for():
    v = vlan("v1", 101)
    p = drive(snap([v]))
    assert not p.of(Get) and not p.of(ReleaseVlan)


def test_bound_subnet_keeps_the_orphan():
    v = vlan("v1", 101, owner=("", ""))
    p = orphan_pass(v, bound={"v1": (subnet(),)})
    assert not p.of(ReleaseVlan) and not p.of(RemoveFinalizer)
    assert p.ready[2] == "9 of 10 VLANs free; trunk ready on 2 node(s); 1 orphaned Vlan(s) still referenced by a subnet"
    assert p.counts[1] == 1
    assert SetZone(ZONE, 10, 1, 9, 1, 1) in p.applied
    assert p.last.requeue_after == 600


def test_deleting_bound_subnet_gets_our_finalizer_removed():
    sub = subnet(deleting=True, finalizers=(FIN, "kubeovn.io/kube-ovn-controller"))
    p = orphan_pass(vlan("v1", 101, owner=("", "")), bound={"v1": (sub,)})
    assert RemoveFinalizer(names.SUBNETS, sub) in p.applied
    assert not p.of(ReleaseVlan)


def test_deleting_subnet_held_only_by_us_keeps_our_finalizer():
    sub = subnet(deleting=True, finalizers=(FIN,), using=4)
    p = orphan_pass(vlan("v1", 101, owner=("", "")), bound={"v1": (sub,)})
    assert not p.of(RemoveFinalizer) and not p.of(ReleaseVlan)


def test_live_listed_subnet_keeps_the_orphan_without_recheck():
    v = vlan("v1", 101, owner=("", ""), subnets=["s1"])
    p = orphan_pass(v, canned={"listed[v1]": (("s1",), ())})
    assert not p.of(ReleaseVlan)
    assert p.ready[2].endswith("; 1 orphaned Vlan(s) still referenced by a subnet")
    assert p.last.requeue_after == 600


def test_prune_timer_sets_the_recheck():
    v = vlan("v1", 101, owner=("", ""), subnets=["g"], annotations=timers(g=ts(T0 - dt.timedelta(minutes=4))))
    p = orphan_pass(v, canned={"listed[v1]": ((), ("g",))})
    assert not p.of(ReleaseVlan) and not p.of(SetPruneTimers)
    assert p.last.requeue_after == 360  # newest + 10 min - now
    assert p.ready[2].endswith("; 1 orphaned Vlan(s) still referenced by a subnet")  # timers count too


def test_prune_timers_are_stored_before_deciding():
    v = vlan("v1", 101, owner=("", ""), subnets=["g"])
    p = orphan_pass(v, canned={"listed[v1]": ((), ("g",))})
    assert p.of(SetPruneTimers) == [SetPruneTimers(v, f'{{"g":"{ts(T0)}"}}', Into("fresh", "v1"))]
    assert p.index(lambda a: isinstance(a, SetPruneTimers)) < p.index(lambda a: isinstance(a, WriteStatus))
    assert p.last.requeue_after == 600 and not p.of(ReleaseVlan)


def test_orphan_continues_a_timer_and_is_collected_when_it_ran_out():
    # A deleting network's timer (its finalizer removed by hand): no notBefore, the wall clock.
    v = vlan("v1", 101, owner=("", ""), subnets=["g"], annotations=timers(g="2026-10-07T07:00:00Z"))
    p = orphan_pass(v, canned={"listed[v1]": ((), ("g",))})
    assert not p.of(SetPruneTimers)
    assert p.of(ReleaseVlan)[0].vlan == v
    assert any(isinstance(a, Log) and a.event ==
               "Kube-OVN did not prune deleted subnets from the orphaned Vlan in time; collecting it anyway"
               for a in p.applied)
    assert [e.reason for e in p.of(Event)] == ["OrphanedVLANCollected"]


def test_orphan_already_gone_counts_as_collected():
    p = orphan_pass(vlan("v1", 101, owner=("", "")), canned={"fresh[v1]": None})
    assert not p.of(ReleaseVlan) and not p.of(SplitListed)
    assert p.counts[1] == 0


def test_allocated_excludes_only_the_collected():
    kept = vlan("v-kept", 102)
    orphan = vlan("v1", 101, owner=("", ""))
    held = vlan("v-held", 103, owner=("", ""))
    canned = {"fresh[v1]": orphan, "listed[v1]": ((), ()), "fresh[v-held]": held, "listed[v-held]": ((), ())}
    p = drive(snap([kept, orphan, held], cached={owner_key(kept)}, bound={"v-held": (subnet(vlan_name="v-held"),)}),
              canned)
    assert [a.vlan["metadata"]["name"] for a in p.of(ReleaseVlan)] == ["v1"]
    assert p.counts[:2] == (10, 2)
    assert p.ready[2].endswith("; 1 orphaned Vlan(s) still referenced by a subnet")


# =============================================================================================
# Property: an orphan goes only when nothing can still use it (§8.1, product-decisions.md §6)
# =============================================================================================


@st.composite
def orphan_cases(draw):
    timeout = float(draw(st.sampled_from([60, 600])))
    now = T0 + dt.timedelta(seconds=draw(st.integers(0, 3600)))
    owner = draw(st.sampled_from(["gone", "empty", "gone", "failed", "found", "cached"]))
    bound = draw(st.sampled_from([None, None, "bound", "deleting"]))
    live = tuple(draw(st.sampled_from([(), (), ("s1",)])))
    gone = tuple(draw(st.sampled_from([(), ("g",), ("g", "h")])))
    stored = {}
    for n in ("g", "h"):
        kind = draw(st.sampled_from(["ran-out", "ran-out", "running", "none", "future", "garbage"]))
        if kind == "ran-out":
            stored[n] = ts(now - dt.timedelta(seconds=draw(st.integers(int(timeout), 3 * int(timeout)))))
        elif kind == "running":
            stored[n] = ts(now - dt.timedelta(seconds=draw(st.integers(0, int(timeout) - 1))))
        elif kind == "future":
            stored[n] = ts(now + dt.timedelta(seconds=draw(st.integers(1, 600))))
        elif kind == "garbage":
            stored[n] = "not a time"
    fresh_gone = draw(st.sampled_from([False, False, False, True]))
    return dict(timeout=timeout, now=now, owner=owner, bound=bound, live=live, gone=gone, stored=stored,
                fresh_gone=fresh_gone)


def orphan_snapshot(case):
    v = vlan("v1", 101, owner=("", "") if case["owner"] == "empty" else (NS, "net-v1"),
             subnets=list(case["live"] + case["gone"]), annotations=timers(**case["stored"]) if case["stored"] else None)
    bound = {None: {}, "bound": {"v1": (subnet(),)},
             "deleting": {"v1": (subnet(deleting=True, finalizers=(FIN, "kubeovn.io/kube-ovn-controller")),)}}
    owners = {"gone": None, "failed": FAILED, "found": {"metadata": {"name": "net-v1", "namespace": NS}}}
    canned = {"fresh[v1]": None if case["fresh_gone"] else v, "listed[v1]": (case["live"], case["gone"])}
    if case["owner"] in owners:
        canned["owners[v1]"] = owners[case["owner"]]
    s = snap([v], cached={f"{NS}/net-v1"} if case["owner"] == "cached" else (), now=case["now"],
             prune_timeout=case["timeout"], bound=bound[case["bound"]])
    return s, canned


def may_collect(case) -> bool:
    """§8.1 from the spec: an orphan (empty owner label, or the owner NotFound) is collected when
    no live subnet is listed, no cached Subnet names it, and every gone name's timer (a valid
    stored start no later than now, else now) has run for the timeout."""
    if case["owner"] not in ("empty", "gone") or case["fresh_gone"] or case["live"] or case["bound"]:
        return False
    starts = []
    for n in case["gone"]:
        raw = case["stored"].get(n, "")
        start = dt.datetime.strptime(raw, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) if raw[:1] == "2" else None
        starts.append(case["now"] if start is None or start > case["now"] else start)
    return not starts or case["now"] >= max(starts) + dt.timedelta(seconds=case["timeout"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(orphan_cases())
def test_property_orphan_released_only_when_nothing_uses_it(case):
    s, canned = orphan_snapshot(case)
    p = drive(s, canned)
    assert bool(p.of(ReleaseVlan)) == may_collect(case)
    if p.of(ReleaseVlan):
        at = p.index(lambda a: isinstance(a, ReleaseVlan))
        assert p.index(lambda a: isinstance(a, SplitListed)) < at
        assert p.index(lambda a: isinstance(a, Get) and a.into == Into("fresh", "v1")) < at


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(orphan_cases())
def test_property_zone_plan_is_deterministic_and_leaves_the_snapshot_alone(case):
    s, canned = orphan_snapshot(case)
    before = copy.deepcopy(s)
    assert plan_zone(s) == plan_zone(s)
    drive(s, canned)
    assert s == before


# =============================================================================================
# The VLAN reuse delay (product-decisions.md §8; issue 15, item 5)
# =============================================================================================

def released(z, **entries):
    """``z`` carrying the reuse-delay record ``{"102": until, ...}``."""
    out = copy.deepcopy(z)
    value = ",".join(f"{vid[1:]}@{ts(until)}" for vid, until in sorted(entries.items(), key=lambda kv: int(kv[0][1:])))
    out["metadata"]["annotations"] = {names.ANNOTATION_RELEASED_VLANS: value}
    return out


def test_held_ids_are_not_free_and_are_shown_with_their_end():
    until = T0 + dt.timedelta(minutes=4)
    z = released(zone(), v102=until, v104=T0 + dt.timedelta(minutes=9))
    p = drive(snap([vlan("v-a", 101)], z=z, zones=(z,)))
    assert p.status["vlansHeldForReuse"] == [{"vlan": 102, "until": ts(until)},
                                             {"vlan": 104, "until": ts(T0 + dt.timedelta(minutes=9))}]
    assert p.counts == (10, 1, 7, 1)  # 101 used, 102 and 104 held
    assert p.ready == ("True", "Ready", "7 of 10 VLANs free; trunk ready on 2 node(s); 2 released ID(s) held by "
                                        f"the VLAN reuse delay, free again from {ts(until)}")
    assert p.last.requeue_after == 240.0  # back when the first one expires
    assert SetZoneKept(ZONE, 0, 2) in p.applied  # issue 26 item 7
    assert not [a for a in p.applied if type(a).__name__ == "PruneReleasedVlans"]


def test_a_record_on_another_zone_of_the_provider_holds_the_id_here_too():
    other = released(zone("zone-b"), v103=T0 + dt.timedelta(minutes=5))
    z = zone()
    p = drive(snap([], z=z, zones=(z, other)))
    assert p.counts[2] == 9
    assert "vlansHeldForReuse" not in p.status  # shown on the zone that recorded it


def test_expired_entries_are_pruned_first_then_the_status_is_written():
    z = released(zone(), v102=T0 - dt.timedelta(seconds=1), v103=T0 + dt.timedelta(minutes=1))
    p = drive(snap([], z=z, zones=(z,)))
    first = p.applied[0]
    assert type(first).__name__ == "PruneReleasedVlans"
    assert first.value == f"103@{ts(T0 + dt.timedelta(minutes=1))}"
    assert p.status["vlansHeldForReuse"] == [{"vlan": 103, "until": ts(T0 + dt.timedelta(minutes=1))}]
    # Everything expired: the annotation goes.
    z = released(zone(), v102=T0)
    p = drive(snap([], z=z, zones=(z,)))
    assert p.applied[0].value is None and "vlansHeldForReuse" not in p.status
