"""Unit tests of controller/metrics.py against reference-behaviour.md §13.

Everything is read back from the text exposition (what a scrape returns), so
the tests check names, types and labels as Prometheus sees them.
"""

from __future__ import annotations

import math
import urllib.request

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from controller.metrics import GO_DEFAULT_BUCKETS, Metrics
from controller.runtime.workqueue_metrics import WORKQUEUE_BUCKETS
from controller.runtime.workqueue import RateLimitingQueue

WQ = "proxmox-network-networks"  # the network controller's queue, registered by Metrics()

# name as in §13 (and ours) -> (type, label names)
SERIES: dict[str, tuple[str, frozenset[str]]] = {
    "cozy_proxmox_zone_vlans_total": ("gauge", frozenset({"zone"})),
    "cozy_proxmox_zone_vlans_allocated": ("gauge", frozenset({"zone"})),
    "cozy_proxmox_zone_vlans_free": ("gauge", frozenset({"zone"})),
    "cozy_proxmox_zone_networks": ("gauge", frozenset({"zone"})),
    "cozy_proxmox_orphaned_vlans": ("gauge", frozenset({"zone"})),
    "cozy_proxmox_zone_vlans_outside_ranges": ("gauge", frozenset({"zone"})),  # issue 26, item 7
    "cozy_proxmox_zone_vlans_held_for_reuse": ("gauge", frozenset({"zone"})),  # issue 26, item 7
    "cozy_proxmox_network_ready": ("gauge", frozenset({"namespace", "network", "zone", "vlan"})),
    "cozy_proxmox_network_ippool_addresses": ("gauge", frozenset({"namespace", "network", "state"})),
    "cozy_proxmox_network_consumers": ("gauge", frozenset({"namespace", "network"})),
    "cozy_proxmox_network_deleting": ("gauge", frozenset({"namespace", "network"})),
    "cozy_proxmox_network_vlan_changed_externally": ("gauge", frozenset({"namespace", "network"})),  # issue 15
    "cozy_proxmox_network_stuck_holders": ("gauge", frozenset({"namespace", "network"})),  # issue 15
    "cozy_proxmox_network_pool_overlaps": ("gauge", frozenset({"namespace", "network"})),  # issue 15, item 3
    "cozy_proxmox_network_address_conflicts": ("gauge", frozenset({"namespace", "network"})),  # issue 15, item 3
    "cozy_proxmox_network_gateway_chassis": ("gauge", frozenset({"namespace", "network"})),
    "cozy_proxmox_network_foreign_subnets": ("gauge", frozenset({"namespace", "network"})),  # R1
    "cozy_proxmox_network_egress_reroute_missing": ("gauge", frozenset({"namespace", "network"})),
    "cozy_proxmox_network_gateway_ready": ("gauge", frozenset({"namespace", "network"})),
    "cozy_proxmox_network_gateway_bound": ("gauge", frozenset({"namespace", "network"})),
    "cozy_proxmox_network_gateway_serving_chassis": ("gauge", frozenset({"namespace", "network", "chassis"})),
    "cozy_proxmox_gateway_sb_synced": ("gauge", frozenset()),
    "cozy_proxmox_gateway_groups_collected_total": ("counter", frozenset()),
    "cozy_proxmox_gateway_nb_errors_total": ("counter", frozenset()),
    "cozy_proxmox_gateway_nb_transactions_total": ("counter", frozenset({"op"})),
    "cozy_proxmox_vlan_allocations_total": ("counter", frozenset({"zone", "result"})),
    "cozy_proxmox_network_reconcile_errors_total": ("counter", frozenset({"reason"})),
    "cozy_proxmox_api_unauthorized_total": ("counter", frozenset()),  # R11
    "cozy_proxmox_status_writes_total": ("counter", frozenset({"crd"})),  # S5
    "cozy_proxmox_crd_pruned_status_fields": ("gauge", frozenset({"crd"})),  # S5
    "cozy_proxmox_network_reconcile_duration_seconds": ("histogram", frozenset()),
    # ours
    "cozy_proxmox_leader": ("gauge", frozenset()),
    "cozy_proxmox_informer_last_event_age_seconds": ("gauge", frozenset({"resource"})),
    "cozy_proxmox_informer_relists_total": ("counter", frozenset({"resource"})),
    "cozy_proxmox_informer_watch_restarts_total": ("counter", frozenset({"resource", "reason"})),
    "cozy_proxmox_informer_list_failing": ("gauge", frozenset({"resource"})),  # R8
    "workqueue_depth": ("gauge", frozenset({"name"})),
    "workqueue_adds_total": ("counter", frozenset({"name"})),
    "workqueue_retries_total": ("counter", frozenset({"name"})),
    "workqueue_queue_duration_seconds": ("histogram", frozenset({"name"})),
    "workqueue_work_duration_seconds": ("histogram", frozenset({"name"})),
    "workqueue_unfinished_work_seconds": ("gauge", frozenset({"name"})),
    "workqueue_longest_running_processor_seconds": ("gauge", frozenset({"name"})),
}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeInformer:
    def __init__(self, age: float, relists: int = 0, restarts: dict[str, int] | None = None) -> None:
        self.age = age
        self.relists = relists
        self.watch_restarts = {"expired": 0, "dropped": 0, "timeout": 0, "closed": 0, "error": 0}
        self.watch_restarts.update(restarts or {})
        self.last_error: str | None = None

    def last_sync_age(self) -> float:
        return self.age


def families(m: Metrics) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(generate_latest(m.registry).decode())}


def samples(m: Metrics) -> dict[tuple[str, frozenset], float]:
    """(sample name, frozenset of label items) -> value."""
    out = {}
    for fam in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def series_of(m: Metrics, name: str) -> dict[frozenset, float]:
    return {labels: v for (n, labels), v in samples(m).items() if n == name}


def lbl(**kw: str) -> frozenset:
    return frozenset(kw.items())


def populate(m: Metrics) -> None:
    """Touch every series once."""
    m.set_zone("zone-a", 10, 3, 7, 3, 1)
    m.set_zone_kept("zone-a", 1, 2)
    m.set_network("tenant-a", "net-1", "zone-a", 101, True, {"total": 20, "used": 5, "free": 15}, False)
    m.set_gateway_chassis("tenant-a", "net-1", 2)
    m.set_gateway_ready("tenant-a", "net-1", True)
    m.set_gateway_serving("tenant-a", "net-1", True, "chassis-1")
    m.set_gateway_sb_synced(True)
    m.set_vlan_changed("tenant-a", "net-1", False)
    m.set_stuck_holders("tenant-a", "net-1", 0)
    m.set_foreign_subnets("tenant-a", "net-1", 1)
    m.set_egress_reroute_missing("tenant-a", "net-1", True)
    m.set_pool_conflicts("tenant-a", "net-1", 0, 0)
    m.gateway_group_collected()
    m.gateway_nb_error()
    m.gateway_nb_transaction("ensure")
    m.vlan_allocation("zone-a", "allocated")
    m.reconcile_error("error")
    m.status_write("proxmoxnetworks.proxmox.cozystack.io")
    m.set_status_fields_pruned("proxmoxnetworks.proxmox.cozystack.io", 0)
    m.observe_reconcile(0.03)
    m.set_leader(True)
    m.register_informers({"subnets": FakeInformer(12.0, relists=1, restarts={"closed": 4})})
    m.workqueue.event(WQ, "add", "tenant-a/net-1")
    m.workqueue.event(WQ, "get", "tenant-a/net-1")
    m.workqueue.event(WQ, "retry", "tenant-a/net-1")
    m.workqueue.event(WQ, "done", "tenant-a/net-1")


def _family_name(name: str, kind: str) -> str:
    # the text parser names a counter family without its _total suffix
    return name[: -len("_total")] if kind == "counter" and name.endswith("_total") else name


# --------------------------------------------------------------- names, types, labels


def test_every_family_is_exposed_with_its_type_even_before_any_value():
    fams = families(Metrics())
    for name, (kind, _labels) in SERIES.items():
        fam = fams.get(_family_name(name, kind))
        assert fam is not None, f"{name} missing from the exposition"
        assert fam.type == kind, f"{name}: {fam.type} != {kind}"


def test_every_series_has_exactly_its_labels():
    m = Metrics()
    populate(m)
    fams = families(m)
    for name, (kind, labels) in SERIES.items():
        fam = fams[_family_name(name, kind)]
        assert fam.samples, f"{name} has no sample after populate()"
        for s in fam.samples:
            got = set(s.labels) - ({"le"} if s.name.endswith("_bucket") else set())
            assert got == labels, f"{s.name}: labels {sorted(got)} != {sorted(labels)}"
        if kind == "counter":
            assert {s.name for s in fam.samples} == {name}
        elif kind == "histogram":
            assert {s.name for s in fam.samples} == {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        else:
            assert {s.name for s in fam.samples} == {name}


def test_no_foreign_families_and_no_created_series():
    m = Metrics()
    populate(m)
    fams = families(m)
    expected = {_family_name(n, k) for n, (k, _) in SERIES.items()}
    assert set(fams) == expected
    assert not any(n.endswith("_created") for (n, _l) in samples(m))


def test_reconcile_histogram_has_go_default_buckets():
    m = Metrics()
    m.observe_reconcile(0.2)
    buckets = series_of(m, "cozy_proxmox_network_reconcile_duration_seconds_bucket")
    les = sorted(float(dict(k)["le"]) for k in buckets)
    assert les == [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, math.inf]
    assert list(GO_DEFAULT_BUCKETS) == les[:-1]
    assert buckets[lbl(le="0.1")] == 0 and buckets[lbl(le="0.25")] == 1
    assert series_of(m, "cozy_proxmox_network_reconcile_duration_seconds_count") == {frozenset(): 1}


def test_workqueue_histograms_have_client_go_buckets():
    les = sorted(float(dict(k)["le"]) for k in series_of(Metrics(), "workqueue_work_duration_seconds_bucket"))
    assert les == [10.0**e for e in range(-8, 4)] + [math.inf]
    assert len(WORKQUEUE_BUCKETS) == 12


def test_instances_are_independent():
    a, b = Metrics(), Metrics()
    a.set_zone("z", 1, 1, 0, 1, 0)
    assert series_of(a, "cozy_proxmox_zone_vlans_free") == {lbl(zone="z"): 0}
    assert series_of(b, "cozy_proxmox_zone_vlans_free") == {}


# ----------------------------------------------------------------------- lifecycle


def test_set_network_replaces_the_ready_series():
    m = Metrics()
    m.set_network("ns", "net", "zone-a", None, False, None, False)
    assert series_of(m, "cozy_proxmox_network_ready") == {
        lbl(namespace="ns", network="net", zone="zone-a", vlan="0"): 0}
    m.set_network("ns", "net", "zone-a", 101, True, None, False)
    assert series_of(m, "cozy_proxmox_network_ready") == {
        lbl(namespace="ns", network="net", zone="zone-a", vlan="101"): 1}
    # zone moved and VLAN changed: still one series
    m.set_network("ns", "net", "zone-b", 7, False, None, False)
    assert series_of(m, "cozy_proxmox_network_ready") == {
        lbl(namespace="ns", network="net", zone="zone-b", vlan="7"): 0}
    assert series_of(m, "cozy_proxmox_network_deleting") == {lbl(namespace="ns", network="net"): 0}


def test_set_network_pool_series_are_kept_when_the_pool_disappears():
    m = Metrics()
    m.set_network("ns", "net", "z", 5, True, {"total": 10, "used": 4, "free": 6}, False)
    pool = {lbl(namespace="ns", network="net", state="total"): 10,
            lbl(namespace="ns", network="net", state="used"): 4,
            lbl(namespace="ns", network="net", state="free"): 6}
    assert series_of(m, "cozy_proxmox_network_ippool_addresses") == pool
    assert series_of(m, "cozy_proxmox_network_consumers") == {lbl(namespace="ns", network="net"): 4}
    m.set_network("ns", "net", "z", 5, False, None, False)
    assert series_of(m, "cozy_proxmox_network_ippool_addresses") == pool
    assert series_of(m, "cozy_proxmox_network_consumers") == {lbl(namespace="ns", network="net"): 4}


def test_deleting_flag():
    m = Metrics()
    m.set_deleting("ns", "net", True)
    assert series_of(m, "cozy_proxmox_network_deleting") == {lbl(namespace="ns", network="net"): 1}
    m.set_network("ns", "net", "z", 5, True, None, False)
    assert series_of(m, "cozy_proxmox_network_deleting") == {lbl(namespace="ns", network="net"): 0}
    m.set_network("ns", "net", "z", 5, False, None, True)
    assert series_of(m, "cozy_proxmox_network_deleting") == {lbl(namespace="ns", network="net"): 1}


PER_NETWORK = (
    "cozy_proxmox_network_ready",
    "cozy_proxmox_network_ippool_addresses",
    "cozy_proxmox_network_consumers",
    "cozy_proxmox_network_deleting",
    "cozy_proxmox_network_vlan_changed_externally",
    "cozy_proxmox_network_stuck_holders",
    "cozy_proxmox_network_pool_overlaps",
    "cozy_proxmox_network_address_conflicts",
    "cozy_proxmox_network_gateway_chassis",
    "cozy_proxmox_network_gateway_ready",
    "cozy_proxmox_network_gateway_bound",
    "cozy_proxmox_network_gateway_serving_chassis",
    "cozy_proxmox_network_foreign_subnets",
    "cozy_proxmox_network_egress_reroute_missing",
)


def _full_network(m: Metrics, ns: str, name: str, vlan: int) -> None:
    m.set_network(ns, name, "z", vlan, True, {"total": 8, "used": 1, "free": 7}, False)
    m.set_gateway_chassis(ns, name, 3)
    m.set_gateway_ready(ns, name, True)
    m.set_gateway_serving(ns, name, True, f"chassis-{vlan}")
    m.set_vlan_changed(ns, name, False)
    m.set_stuck_holders(ns, name, 1)
    m.set_pool_conflicts(ns, name, 2, 1)
    m.set_foreign_subnets(ns, name, 1)
    m.set_egress_reroute_missing(ns, name, True)


def test_forget_network_removes_all_its_series_and_nothing_else():
    m = Metrics()
    _full_network(m, "ns", "net", 10)
    _full_network(m, "ns", "other", 11)  # same namespace
    _full_network(m, "ns2", "net", 12)  # same name, other namespace
    m.set_zone("z", 10, 3, 7, 3, 0)
    before = samples(m)
    m.forget_network("ns", "net")
    after = samples(m)
    gone = set(before) - set(after)
    assert set(after) < set(before)
    for name, labels in gone:
        assert name in PER_NETWORK
        assert dict(labels)["namespace"] == "ns" and dict(labels)["network"] == "net"
    for name in PER_NETWORK:
        left = series_of(m, name)
        assert not any(dict(k).get("namespace") == "ns" and dict(k).get("network") == "net" for k in left)
        assert {(dict(k)["namespace"], dict(k)["network"]) for k in left} == {("ns", "other"), ("ns2", "net")}
    # 1 ready + 3 pool + consumers + deleting + vlan changed + stuck holders + pool overlaps
    # + address conflicts + 4 gateway (chassis, ready, bound, serving chassis) + foreign subnets
    # + egress reroute missing
    assert len(gone) == 16
    # forgetting twice, or a network never seen, is harmless
    m.forget_network("ns", "net")
    m.forget_network("nope", "nope")
    assert samples(m) == after


def test_forget_network_removes_a_ready_series_after_vlan_changes():
    m = Metrics()
    m.set_network("ns", "net", "z", None, False, None, False)
    m.set_network("ns", "net", "z", 42, True, None, False)
    m.forget_network("ns", "net")
    assert series_of(m, "cozy_proxmox_network_ready") == {}


def test_gateway_series():
    m = Metrics()
    m.set_gateway_chassis("ns", "net", 0)
    m.set_gateway_ready("ns", "net", False)
    assert series_of(m, "cozy_proxmox_network_gateway_chassis") == {lbl(namespace="ns", network="net"): 0}
    assert series_of(m, "cozy_proxmox_network_gateway_ready") == {lbl(namespace="ns", network="net"): 0}
    m.set_gateway_chassis("ns", "net", 3)
    m.set_gateway_ready("ns", "net", True)
    assert series_of(m, "cozy_proxmox_network_gateway_chassis") == {lbl(namespace="ns", network="net"): 3}
    assert series_of(m, "cozy_proxmox_network_gateway_ready") == {lbl(namespace="ns", network="net"): 1}
    m.forget_gateway("ns", "net")
    assert series_of(m, "cozy_proxmox_network_gateway_chassis") == {}
    assert series_of(m, "cozy_proxmox_network_gateway_ready") == {}
    m.gateway_group_collected(2)
    m.gateway_nb_error()
    m.gateway_nb_error()
    assert series_of(m, "cozy_proxmox_gateway_groups_collected_total") == {frozenset(): 2}
    assert series_of(m, "cozy_proxmox_gateway_nb_errors_total") == {frozenset(): 2}


def test_serving_chassis_keeps_one_series_per_network_and_goes_with_the_sb():
    # product-decisions.md §10: the serving chassis as the SB shows it; absent while unknown.
    m = Metrics()
    m.set_gateway_serving("ns", "net", True, "ch-a")
    m.set_gateway_serving("ns", "other", True, "ch-a")
    assert series_of(m, "cozy_proxmox_network_gateway_bound") == {lbl(namespace="ns", network="net"): 1,
                                                                 lbl(namespace="ns", network="other"): 1}
    m.set_gateway_serving("ns", "net", True, "ch-b")  # an OVN failover
    assert series_of(m, "cozy_proxmox_network_gateway_serving_chassis") == {
        lbl(namespace="ns", network="net", chassis="ch-b"): 1, lbl(namespace="ns", network="other", chassis="ch-a"): 1}
    m.set_gateway_serving("ns", "net", False, "")  # nothing serves it
    assert series_of(m, "cozy_proxmox_network_gateway_bound")[lbl(namespace="ns", network="net")] == 0
    assert lbl(namespace="ns", network="net", chassis="ch-b") not in series_of(
        m, "cozy_proxmox_network_gateway_serving_chassis")
    m.set_gateway_serving("ns", "other", None, "ch-a")  # the SB is not known
    assert lbl(namespace="ns", network="other") not in series_of(m, "cozy_proxmox_network_gateway_bound")
    assert series_of(m, "cozy_proxmox_network_gateway_serving_chassis") == {}
    m.forget_gateway("ns", "net")
    assert series_of(m, "cozy_proxmox_network_gateway_bound") == {}


def test_zone_series_and_forget_zone():
    m = Metrics()
    m.set_zone("a", 100, 40, 60, 41, 2)
    m.set_zone("b", 5, 5, 0, 5, 0)
    m.set_zone_kept("a", 3, 1)
    m.set_zone_kept("b", 0, 0)
    assert series_of(m, "cozy_proxmox_zone_vlans_outside_ranges") == {lbl(zone="a"): 3, lbl(zone="b"): 0}
    assert series_of(m, "cozy_proxmox_zone_vlans_held_for_reuse") == {lbl(zone="a"): 1, lbl(zone="b"): 0}
    assert series_of(m, "cozy_proxmox_zone_vlans_total") == {lbl(zone="a"): 100, lbl(zone="b"): 5}
    assert series_of(m, "cozy_proxmox_zone_vlans_allocated")[lbl(zone="a")] == 40
    assert series_of(m, "cozy_proxmox_zone_vlans_free")[lbl(zone="b")] == 0
    assert series_of(m, "cozy_proxmox_zone_networks")[lbl(zone="a")] == 41
    assert series_of(m, "cozy_proxmox_orphaned_vlans")[lbl(zone="a")] == 2
    m.forget_zone("a")
    for name in ("cozy_proxmox_zone_vlans_total", "cozy_proxmox_zone_vlans_allocated",
                 "cozy_proxmox_zone_vlans_free", "cozy_proxmox_zone_networks", "cozy_proxmox_orphaned_vlans",
                 "cozy_proxmox_zone_vlans_outside_ranges", "cozy_proxmox_zone_vlans_held_for_reuse"):
        assert set(series_of(m, name)) == {lbl(zone="b")}
    m.forget_zone("a")  # twice is harmless


def test_counters_vlan_allocations_and_reconcile_errors():
    m = Metrics()
    m.vlan_allocation("z", "allocated")
    m.vlan_allocation("z", "allocated")
    m.vlan_allocation("z", "conflict")
    m.vlan_allocation("y", "exhausted")
    with pytest.raises(ValueError):
        m.vlan_allocation("z", "bogus")
    assert series_of(m, "cozy_proxmox_vlan_allocations_total") == {
        lbl(zone="z", result="allocated"): 2, lbl(zone="z", result="conflict"): 1,
        lbl(zone="y", result="exhausted"): 1}
    m.reconcile_error("error")
    m.reconcile_error("VLANExhausted")
    m.reconcile_error("VLANExhausted")
    assert series_of(m, "cozy_proxmox_network_reconcile_errors_total") == {
        lbl(reason="error"): 1, lbl(reason="VLANExhausted"): 2}


def test_leader_gauge():
    m = Metrics()
    assert series_of(m, "cozy_proxmox_leader") == {frozenset(): 0}
    m.set_leader(True)
    assert series_of(m, "cozy_proxmox_leader") == {frozenset(): 1}
    m.set_leader(False)
    assert series_of(m, "cozy_proxmox_leader") == {frozenset(): 0}


# ---------------------------------------------------------------------- work queue


def test_workqueue_hook_counts_with_a_real_queue():
    clock = FakeClock()
    m = Metrics(clock=clock)
    q = RateLimitingQueue(name=WQ, clock=clock, metrics_hook=m.workqueue.hook_for(WQ))
    n = lbl(name=WQ)

    assert series_of(m, "workqueue_depth") == {n: 0}
    assert series_of(m, "workqueue_adds_total") == {n: 0}

    q.add("ns/a")
    q.add("ns/a")  # deduplicated: no second add
    q.add("ns/b")
    assert series_of(m, "workqueue_adds_total") == {n: 2}
    assert series_of(m, "workqueue_depth") == {n: 2}

    clock.now += 2.0
    assert q.get(timeout=0) == "ns/a"
    assert series_of(m, "workqueue_depth") == {n: 1}
    assert series_of(m, "workqueue_queue_duration_seconds_count") == {n: 1}
    assert series_of(m, "workqueue_queue_duration_seconds_sum") == {n: 2.0}

    clock.now += 3.0
    assert series_of(m, "workqueue_unfinished_work_seconds") == {n: 3.0}
    assert series_of(m, "workqueue_longest_running_processor_seconds") == {n: 3.0}
    assert q.get(timeout=0) == "ns/b"  # waited 5 s
    clock.now += 1.0
    assert series_of(m, "workqueue_unfinished_work_seconds") == {n: 5.0}  # 4 + 1
    assert series_of(m, "workqueue_longest_running_processor_seconds") == {n: 4.0}

    q.add("ns/a")  # while processing: dirty, queued again by done()
    assert series_of(m, "workqueue_adds_total") == {n: 2}
    q.add_rate_limited("ns/b")
    assert series_of(m, "workqueue_retries_total") == {n: 1}

    q.done("ns/a")
    assert series_of(m, "workqueue_work_duration_seconds_count") == {n: 1}
    assert series_of(m, "workqueue_work_duration_seconds_sum") == {n: 4.0}
    assert series_of(m, "workqueue_adds_total") == {n: 3}
    assert series_of(m, "workqueue_depth") == {n: 1}
    q.done("ns/b")
    assert series_of(m, "workqueue_unfinished_work_seconds") == {n: 0.0}
    assert series_of(m, "workqueue_longest_running_processor_seconds") == {n: 0.0}
    assert series_of(m, "workqueue_queue_duration_seconds_sum") == {n: 7.0}


def test_workqueue_hook_for_another_queue_and_unknown_event():
    m = Metrics(clock=FakeClock())
    hook = m.workqueue.hook_for("zones")
    hook("add", "z")
    hook("bogus", "z")  # ignored
    assert series_of(m, "workqueue_adds_total") == {lbl(name=WQ): 0, lbl(name="zones"): 1}
    assert series_of(m, "workqueue_depth") == {lbl(name=WQ): 0, lbl(name="zones"): 1}


# ----------------------------------------------------------------------- informers


def test_informer_metrics_are_read_at_scrape_time():
    m = Metrics()
    assert series_of(m, "cozy_proxmox_informer_last_event_age_seconds") == {}
    subnets = FakeInformer(12.5, relists=2, restarts={"expired": 1, "closed": 7})
    vlans = FakeInformer(math.inf)
    m.register_informers({"subnets": subnets, "vlans": vlans})
    assert series_of(m, "cozy_proxmox_informer_last_event_age_seconds") == {
        lbl(resource="subnets"): 12.5, lbl(resource="vlans"): math.inf}
    assert series_of(m, "cozy_proxmox_informer_relists_total") == {
        lbl(resource="subnets"): 2, lbl(resource="vlans"): 0}
    restarts = series_of(m, "cozy_proxmox_informer_watch_restarts_total")
    assert restarts[lbl(resource="subnets", reason="expired")] == 1
    assert restarts[lbl(resource="subnets", reason="closed")] == 7
    assert {dict(k)["reason"] for k in restarts} == {"expired", "dropped", "timeout", "closed", "error"}
    subnets.age = 1.0
    subnets.relists = 3
    subnets.watch_restarts["timeout"] += 1
    assert series_of(m, "cozy_proxmox_informer_last_event_age_seconds")[lbl(resource="subnets")] == 1.0
    assert series_of(m, "cozy_proxmox_informer_relists_total")[lbl(resource="subnets")] == 3
    assert series_of(m, "cozy_proxmox_informer_watch_restarts_total")[lbl(resource="subnets", reason="timeout")] == 1


def test_a_kind_that_cannot_be_listed_is_named_and_an_informer_replaced_is_dropped():
    """R8: ``cozy_proxmox_informer_list_failing`` is 1 while the informer's last LIST or
    WATCH failed; the informer of a version given up on leaves the exposition."""
    m = Metrics()
    machines = FakeInformer(3.0)
    machines.last_error = "HTTP 500: conversion webhook for infrastructure.cluster.x-k8s.io/v1alpha1 failed"
    m.register_informers({"proxmoxmachines.infrastructure.cluster.x-k8s.io/v1alpha2": machines,
                          "subnets": FakeInformer(1.0)})
    assert series_of(m, "cozy_proxmox_informer_list_failing") == {
        lbl(resource="proxmoxmachines.infrastructure.cluster.x-k8s.io/v1alpha2"): 1, lbl(resource="subnets"): 0}
    m.unregister_informer("proxmoxmachines.infrastructure.cluster.x-k8s.io/v1alpha2")
    assert series_of(m, "cozy_proxmox_informer_list_failing") == {lbl(resource="subnets"): 0}


def test_a_broken_informer_does_not_break_the_scrape():
    class Broken:
        relists = 0
        watch_restarts: dict[str, int] = {}

        def last_sync_age(self) -> float:
            raise RuntimeError("boom")

    m = Metrics()
    m.register_informers({"broken": Broken(), "ok": FakeInformer(3.0)})
    assert series_of(m, "cozy_proxmox_informer_last_event_age_seconds") == {lbl(resource="ok"): 3.0}


def test_a_real_informer_before_its_first_list():
    from informers import RESTART_REASONS, Resource, SharedIndexInformer

    inf = SharedIndexInformer(Resource("kubeovn.io", "v1", "subnets", namespaced=False), object())
    m = Metrics()
    m.register_informers({"subnets": inf})
    assert series_of(m, "cozy_proxmox_informer_last_event_age_seconds") == {lbl(resource="subnets"): math.inf}
    assert series_of(m, "cozy_proxmox_informer_relists_total") == {lbl(resource="subnets"): 0}
    assert series_of(m, "cozy_proxmox_informer_watch_restarts_total") == {
        lbl(resource="subnets", reason=r): 0 for r in RESTART_REASONS}


# -------------------------------------------------------------------------- serving


def test_serve_on_loopback():
    m = Metrics()
    m.set_zone("z", 1, 0, 1, 0, 0)
    host, port = m.serve("127.0.0.1", 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            body = resp.read().decode()
        assert 'cozy_proxmox_zone_vlans_free{zone="z"} 1.0' in body
        query = "name[]=cozy_proxmox_gateway_nb_errors_total&name[]=cozy_proxmox_gateway_nb_errors_created"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics?{query}", timeout=5) as resp:
            body = resp.read().decode()
        assert "cozy_proxmox_gateway_nb_errors_total 0.0" in body
        assert "_created" not in body and "zone_vlans" not in body
        with pytest.raises(RuntimeError):
            m.serve("127.0.0.1", 0)
    finally:
        m.shutdown()
    assert host == "127.0.0.1" and port > 0
