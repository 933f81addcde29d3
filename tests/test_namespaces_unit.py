"""The namespace annotation's reconciler (controller/reconcile/namespaces.py), with no server.

reference-behaviour.md §5.9: the annotation ``proxmox.cozystack.io/networks`` lists the
sorted ``<bridge>/<vlan>/<ipPool>`` triples of the namespace's networks with a VLAN and a
bridge (Terminating networks without our finalizer left out, duplicates kept, the key
deleted when the list is empty, no write when equal), and a network's triple is in it
before the network's status shows the VLAN (step 8).

The pure pieces (the desired value, the event → key functions) are tested directly, with
hypothesis where an invariant applies; the reconciler itself runs with the real
``NetworkReconciler`` over the in-memory API server of the lifecycle model, queued by hand.
"""

from __future__ import annotations

import copy
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller import names
from controller.reconcile.namespaces import NamespaceReconciler
from controller.watch.keys import keys_for_namespace, keys_for_network
from controller.rules.annotation import contribution, desired_value, lists_zone_bridge, open_pending
from controller.plan.gateway import GatewayOutcome
from ovn.nb_plan import CHASSIS_ASSIGNED, GatewayState
from controller.reconcile.network import NetworkReconciler
from controller.watch.indexes import Listers
from controller.runtime.recent import RecentWrites
from controller.apply.vlans import VlanManager
from tests.test_lifecycle_model import PLURALS, FakeApiServer, FakeWriter, new_stores

NS = "tenant"
ANN = names.ANNOTATION_NAMESPACE_NETWORKS


def net(name: str, vlan: int = 0, bridge: str = "", pool: str = "p", deleting: bool = False,
        finalizer: bool = True, ns: str = NS) -> dict:
    meta: dict = {"name": name, "namespace": ns, "finalizers": [names.FINALIZER] if finalizer else []}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status = {"vlan": vlan, "bridge": bridge} if vlan or bridge else {}
    return {"metadata": meta, "spec": {"ipPool": pool}, "status": status}


def spec_full_sync(networks: list[dict]) -> str:
    """§5.9 "Full sync", written from the spec's words."""
    out = []
    for n in networks:
        m = n["metadata"]
        if m.get("deletionTimestamp") and names.FINALIZER not in (m.get("finalizers") or []):
            continue
        s = n.get("status") or {}
        if s.get("vlan") and s.get("bridge"):
            out.append(f'{s["bridge"]}/{s["vlan"]}/{n["spec"].get("ipPool", "")}')
    return ",".join(sorted(out))


# --------------------------------------------------------------------------- the desired value


def test_full_sync_examples_of_the_spec():
    nets = [
        net("a", 101, "vmbr1", "pa"),
        net("b", 0, "vmbr1"),  # no VLAN: not listed
        net("c", 102, ""),  # no bridge: not listed
        net("d", 103, "vmbr1", "pd", deleting=True),  # Terminating, ours still on it: listed
        net("e", 104, "vmbr1", "pe", deleting=True, finalizer=False),  # Terminating, ours gone: dropped
        net("f", 101, "vmbr1", "pa"),  # the same triple twice: kept twice
    ]
    assert desired_value(nets) == "vmbr1/101/pa,vmbr1/101/pa,vmbr1/103/pd"
    assert desired_value([]) == ""
    assert desired_value([net("x")], ["vmbr2/7/q"]) == "vmbr2/7/q"


def test_open_pending_drops_what_the_status_shows_and_what_is_gone():
    nets = {
        f"{NS}/shown": net("shown", 5, "vmbr1", "p"),
        f"{NS}/waiting": net("waiting"),
        f"{NS}/moved": net("moved", 6, "vmbr1", "old"),
        f"{NS}/leaving": net("leaving", deleting=True, finalizer=False),
    }
    pending = {
        f"{NS}/shown": "vmbr1/5/p",  # the status shows it: the pending add is done
        f"{NS}/waiting": "vmbr1/9/p",
        f"{NS}/moved": "vmbr1/6/new",  # a new pool: both triples until the status moves
        f"{NS}/leaving": "vmbr1/8/p",
        f"{NS}/gone": "vmbr1/4/p",  # not in the cache any more
    }
    assert open_pending(nets, pending) == {f"{NS}/waiting": "vmbr1/9/p", f"{NS}/moved": "vmbr1/6/new"}
    assert desired_value(nets.values(), open_pending(nets, pending).values()) == (
        "vmbr1/5/p,vmbr1/6/new,vmbr1/6/old,vmbr1/9/p")


network_st = st.builds(
    lambda i, vlan, bridge, pool, deleting, finalizer: net(f"n{i}", vlan, bridge, pool, deleting, finalizer),
    st.integers(0, 3), st.integers(0, 4), st.sampled_from(["", "vmbr1", "vmbr2"]), st.sampled_from(["", "a", "b"]),
    st.booleans(), st.booleans(),
)
triple_st = st.builds(lambda b, v, p: f"{b}/{v}/{p}", st.sampled_from(["vmbr1", "vmbr2"]), st.integers(1, 4),
                      st.sampled_from(["a", "b"]))


@given(st.lists(network_st, max_size=8), st.dictionaries(st.integers(0, 5).map(lambda i: f"{NS}/n{i}"), triple_st))
def test_desired_value_is_the_full_sync_plus_the_open_pending_adds(networks, pending):
    by_key = {f'{NS}/{n["metadata"]["name"]}': n for n in networks}  # one object per key, as in a cache
    nets = list(by_key.values())
    still = open_pending(by_key, pending)
    value = desired_value(nets, still.values())
    items = value.split(",") if value else []
    assert items == sorted(items)
    # Every open pending add is in it, on top of the spec's full sync (multiset: duplicates kept).
    full = spec_full_sync(nets)
    assert Counter(items) == Counter(full.split(",") if full else []) + Counter(still.values())
    # Nothing pending: exactly the spec's full sync.
    assert desired_value(nets) == full
    # A pending add is open only for a network in the cache whose status does not show it.
    for key, triple in still.items():
        assert key in by_key and contribution(by_key[key]) != triple


# --------------------------------------------------------------------------- events -> keys


def test_network_events_queue_the_namespace_when_the_contribution_changes():
    bare, allocated = net("a"), net("a", 7, "vmbr1")
    assert keys_for_network(None, allocated) == [NS]
    assert keys_for_network(None, bare) == []
    assert keys_for_network(bare, allocated) == [NS]
    assert keys_for_network(allocated, copy.deepcopy(allocated)) == []  # conditions only: nothing to do
    moved = copy.deepcopy(allocated)
    moved["spec"]["ipPool"] = "q"
    assert keys_for_network(allocated, moved) == [NS]
    deleting = net("a", 7, "vmbr1", deleting=True)
    released = net("a", 7, "vmbr1", deleting=True, finalizer=False)
    assert keys_for_network(allocated, deleting) == []  # still listed while our finalizer is on
    assert keys_for_network(deleting, released) == [NS]
    assert keys_for_network(allocated, None) == [NS]
    assert keys_for_network(released, None) == []
    assert keys_for_network(None, None) == []


def test_namespace_events_queue_it_when_added_or_its_annotation_changed():
    plain = {"metadata": {"name": NS}}
    labelled = {"metadata": {"name": NS, "labels": {"x": "y"}}}
    edited = {"metadata": {"name": NS, "annotations": {ANN: "vmbr1/9/p"}}}
    assert keys_for_namespace(None, plain) == [NS]
    assert keys_for_namespace(plain, labelled) == []
    assert keys_for_namespace(plain, edited) == [NS]
    assert keys_for_namespace(edited, None) == []


# --------------------------------------------------------------------------- the reconciler


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Bed:
    """The real NetworkReconciler and NamespaceReconciler on the lifecycle model's fake API
    server, with the two queues as lists the test drains by hand, and a check after every
    request: no network status shows a VLAN whose triple the annotation lacks."""

    def __init__(self, server: FakeApiServer | None = None) -> None:
        self.api = server or FakeApiServer()
        if server is None:
            self.api.put("namespaces", {"metadata": {"name": NS}})
            self.api.put("provider-networks", {"metadata": {"name": "pn"}, "status": {"ready": True}})
            self.api.put("proxmoxnetworkzones", {"metadata": {"name": "z"}, "spec": {
                "bridge": "vmbr1", "providerNetwork": "pn", "vlanRanges": ["100-199"]}})
        self.api.events.clear()
        self.stores = new_stores()
        for plural, key in PLURALS.items():
            for o in self.api.items(plural):
                self.stores[key].add(o)
        self.writer = FakeWriter(self.api)
        request = self.writer.request

        def checked(*args, **kwargs):
            out = request(*args, **kwargs)
            self.check_listed()
            return out

        self.writer.request = checked  # type: ignore[method-assign]
        self.clock = Clock()
        self.ns_queue: list[str] = []
        self.net_queue: list[str] = []
        overlay = RecentWrites(self.stores["networks"])
        self.nsr = NamespaceReconciler(self.stores["networks"], self.stores["namespaces"], self.writer, overlay,
                                       enqueue=self.ns_queue.append, enqueue_network=self.net_queue.append,
                                       write_window=1.0, monotonic=self.clock, zones=self.stores["zones"])
        self.vlans = VlanManager(self.stores["vlans"], self.stores["zones"], self.writer)
        self.net = NetworkReconciler(Listers(**self.stores), self.writer, self.vlans, manage_gateway=False,
                                     namespaces=self.nsr, recent=overlay)

    def check_listed(self) -> None:
        with self.api.lock:
            nsobj = self.api.find("namespaces", NS)
            listed = Counter((((nsobj or {}).get("metadata") or {}).get("annotations") or {}).get(ANN, "").split(","))
            for n in self.api.items("proxmoxnetworks"):
                t = contribution(n)
                assert t is None or listed[t] > 0, f"{n['metadata']['name']} shows {t} before the annotation"

    def deliver(self) -> None:
        with self.api.lock:
            events, self.api.events = self.api.events, []
        for plural, etype, obj in events:
            store = self.stores[PLURALS[plural]]
            store.delete(obj) if etype == "DELETED" else store.add(obj)
            if plural == "vlans":
                self.vlans.observe(obj, deleted=etype == "DELETED")
            elif plural == "proxmoxnetworks":
                self.net.recent.observe(obj)
            elif plural == "namespaces":
                self.nsr.recent.observe(obj)

    def create(self, name: str, pool: str = "p") -> None:
        self.api.put("proxmoxnetworks", {"metadata": {"name": name, "namespace": NS},
                                         "spec": {"zone": "z", "subnet": f"s-{name}", "ipPool": pool}})

    def network_pass(self, name: str):
        result = self.net.reconcile(f"{NS}/{name}")
        self.deliver()
        return result

    def namespace_pass(self):
        self.ns_queue.clear()
        result = self.nsr.reconcile(NS)
        self.deliver()
        return result

    def listed_then_released(self, name: str) -> None:
        """``name`` created, allocated and listed (two network passes around a namespace
        pass), then deleted and released (Vlan deleted, our finalizer removed): gone from the
        API server; its NotFound pass not run yet."""
        self.create(name)
        self.deliver()
        self.network_pass(name)
        self.namespace_pass()
        self.network_pass(name)
        assert self.annotation() == "vmbr1/100/p"
        self.api.delete("proxmoxnetworks", name, NS)
        self.deliver()
        self.network_pass(name)
        assert self.api.find("proxmoxnetworks", name, NS) is None

    def annotation(self) -> str | None:
        return ((self.api.find("namespaces", NS)["metadata"].get("annotations")) or {}).get(ANN)

    def status(self, name: str) -> dict:
        return self.api.find("proxmoxnetworks", name, NS).get("status") or {}


def count_namespace_patches(bed: Bed):
    seen = []
    request = bed.writer.request

    def counting(method, path, *args, **kwargs):
        if method == "PATCH" and path.startswith("/api/v1/namespaces/") and path.count("/") == 4:
            seen.append(path)
        return request(method, path, *args, **kwargs)

    bed.writer.request = counting  # type: ignore[method-assign]
    return seen


def test_a_burst_in_one_namespace_shares_patches_and_no_status_shows_an_unlisted_vlan():
    bed = Bed()
    patches = count_namespace_patches(bed)
    names_ = [f"n{i}" for i in range(30)]
    for n in names_:
        bed.create(n)
    bed.deliver()
    for n in names_:
        bed.network_pass(n)
    # Finalizer and Vlan are written, the status is not: every pass asked for its triple.
    assert all("vlan" not in bed.status(n) for n in names_)
    assert bed.ns_queue and set(bed.ns_queue) == {NS}
    bed.namespace_pass()
    assert len(patches) == 1
    assert sorted(bed.net_queue) == sorted(f"{NS}/{n}" for n in names_)  # each told once
    bed.net_queue.clear()
    for n in names_:
        bed.network_pass(n)
    vids = sorted(bed.status(n)["vlan"] for n in names_)
    assert vids == list(range(100, 130))
    assert bed.annotation() == ",".join(sorted(f"vmbr1/{v}/p" for v in vids))
    # The status writes are seen; the next pass finds nothing pending and writes nothing.
    bed.clock.t = 1.0
    assert bed.namespace_pass().requeue_after == 600.0  # the resync: nothing left to add
    assert len(patches) == 1

    # Two more inside the window: the pass waits for the window's end, then one patch.
    for n in ("late0", "late1"):
        bed.create(n)
    bed.deliver()
    bed.network_pass("late0")
    result = bed.namespace_pass()
    assert len(patches) == 1 and result.requeue_after == 1.0  # the window of the last pass
    bed.network_pass("late1")
    bed.clock.t = 1.4
    assert bed.namespace_pass().requeue_after == pytest.approx(0.6)
    assert bed.net_queue == []
    bed.clock.t = 2.0
    bed.namespace_pass()
    assert len(patches) == 2
    assert sorted(bed.net_queue) == [f"{NS}/late0", f"{NS}/late1"]
    for n in ("late0", "late1"):
        bed.network_pass(n)
        assert bed.status(n)["vlan"] in (130, 131)


def test_a_namespace_not_yet_in_the_cache_holds_the_status_until_its_triple_is_written():
    """Flake hunt, failure 13: a Namespace created just before its network, whose add event
    our watch has not delivered yet. A cache miss is no NotFound: no status shows the VLAN
    (``Bed`` checks after every request that the server's annotation lists it), and the
    Namespace's add event lets the annotation, then the status, be written."""
    bed = Bed()
    nsobj = bed.api.find("namespaces", NS)
    bed.stores["namespaces"].delete(nsobj)  # on the server, not yet in the cache
    bed.create("a")
    bed.deliver()
    bed.network_pass("a")
    assert "vlan" not in bed.status("a") and bed.ns_queue == [NS]  # asked for its triple
    bed.namespace_pass()
    assert bed.annotation() is None and bed.net_queue == []  # nothing to write to, nobody told
    bed.network_pass("a")
    assert "vlan" not in bed.status("a")  # still waits
    # The watch brings the Namespace (its add event queues the namespace and its networks).
    bed.stores["namespaces"].add(nsobj)
    bed.nsr.recent.observe(nsobj)
    bed.network_pass("a")
    bed.namespace_pass()
    assert bed.annotation() == "vmbr1/100/p" and bed.net_queue == [f"{NS}/a"]
    bed.network_pass("a")
    assert bed.status("a")["vlan"] == 100


def test_an_ask_made_again_while_a_pass_finds_no_namespace_is_written_by_the_next_pass():
    """The Namespace's add event lands between a namespace pass's cache read (nothing) and
    its bookkeeping, and the network asks again meanwhile (the same triple): the ask is kept,
    so the pass the add event queued writes it and tells the network at once, not at its
    periodic requeue (review of failure 13's fix)."""
    bed = Bed()
    nsobj = bed.api.find("namespaces", NS)
    store = bed.stores["namespaces"]
    store.delete(nsobj)
    bed.create("a")
    bed.deliver()
    bed.network_pass("a")
    assert bed.ns_queue == [NS]
    get = store.get
    raced = []

    def miss_then_the_watch_delivers(key):
        out = get(key)
        if key == NS and out is None and not raced:
            raced.append(key)
            store.add(nsobj)  # the watch brings it ...
            bed.nsr.recent.observe(nsobj)
            bed.network_pass("a")  # ... and its add event's network pass asks again
        return out

    store.get = miss_then_the_watch_delivers  # type: ignore[method-assign]
    bed.namespace_pass()  # read nothing, before the add
    store.get = get  # type: ignore[method-assign]
    assert raced and bed.annotation() is None and bed.net_queue == []
    bed.namespace_pass()  # the pass the add event queued
    assert bed.annotation() == "vmbr1/100/p" and bed.net_queue == [f"{NS}/a"]
    bed.network_pass("a")
    assert bed.status("a")["vlan"] == 100


def test_a_restarted_controller_writes_nothing():
    bed = Bed()
    for n in ("a", "b"):
        bed.create(n)
    bed.deliver()
    for t in (0.0, 1.0):
        for n in ("a", "b"):
            bed.network_pass(n)
        bed.clock.t = t
        bed.namespace_pass()
    assert bed.annotation() == "vmbr1/100/p,vmbr1/101/p"
    again = Bed(bed.api)
    before = again.writer.writes
    for n in ("a", "b"):
        assert again.network_pass(n).requeue_after == 600.0
    again.namespace_pass()
    assert again.writer.writes == before
    assert again.ns_queue == [] and again.net_queue == []


def test_the_notfound_pass_removes_the_triple_and_the_key_when_empty():
    bed = Bed()
    bed.listed_then_released("a")
    bed.ns_queue.clear()
    bed.network_pass("a")  # NotFound
    assert bed.ns_queue == [NS]
    bed.clock.t = 5.0
    bed.namespace_pass()
    assert bed.annotation() is None  # the key is deleted, not set to ""


def test_a_hand_edit_is_repaired_and_a_namespace_without_networks_is_left_alone():
    bed = Bed()
    bed.api.put("namespaces", {"metadata": {"name": "other", "annotations": {ANN: "??"}}})
    bed.deliver()
    assert bed.nsr.reconcile("other").requeue_after is None
    assert bed.api.find("namespaces", "other")["metadata"]["annotations"] == {ANN: "??"}
    bed.create("a")
    bed.deliver()
    bed.network_pass("a")
    bed.namespace_pass()
    bed.network_pass("a")
    ns = bed.api.find("namespaces", NS)
    ns["metadata"]["annotations"][ANN] = "!!!,vmbr9/9999/ghost"
    bed.api.put("namespaces", ns)
    bed.deliver()
    bed.clock.t = 5.0
    assert bed.namespace_pass().requeue_after == 600.0  # and again within NAMESPACE_SYNC_PERIOD
    assert bed.annotation() == "vmbr1/100/p"


def test_a_leftover_of_a_killed_leader_is_removed_with_no_memory_of_the_departure():
    """The network went, and the leader that released it died before the namespace pass:
    the next leader (a fresh reconciler, no departure mark) finds a namespace without
    networks whose annotation lists a triple on the zone's bridge, and deletes the key."""
    bed = Bed()
    bed.listed_then_released("a")  # then the leader dies before its NotFound pass
    assert bed.annotation() == "vmbr1/100/p"
    again = Bed(bed.api)
    assert again.nsr.reconcile(NS).requeue_after is None
    assert again.annotation() is None


def test_lists_zone_bridge():
    assert lists_zone_bridge("vmbr1/100/p", ["vmbr1"])
    assert lists_zone_bridge("??,vmbr2/7/q", ["vmbr1", "vmbr2"])
    assert not lists_zone_bridge("vmbr9/100/p", ["vmbr1"])
    assert not lists_zone_bridge("??", ["vmbr1"])
    assert not lists_zone_bridge("vmbr1", ["vmbr1"])  # not a triple
    assert not lists_zone_bridge("", ["vmbr1"]) and not lists_zone_bridge(None, ["vmbr1"])
    assert not lists_zone_bridge("vmbr1/100/p", [])


def test_without_a_queue_the_pass_writes_annotation_then_status():
    """A NetworkReconciler on its own (the lifecycle model's way): the annotation is written
    within the network's pass, before its status."""
    bed = Bed()
    bed.net = NetworkReconciler(Listers(**bed.stores), bed.writer, bed.vlans, manage_gateway=False)
    bed.create("a")
    bed.deliver()
    bed.network_pass("a")
    bed.network_pass("a")
    assert bed.status("a")["vlan"] == 100
    assert bed.annotation() == "vmbr1/100/p"


def test_an_ask_made_while_a_namespace_pass_runs_is_kept_for_the_next_pass():
    bed = Bed()
    for n in ("a", "b"):
        bed.create(n)
    bed.deliver()
    bed.network_pass("a")
    patch = bed.writer.merge_patch

    def patch_then_b_asks(*args, **kwargs):
        out = patch(*args, **kwargs)
        bed.writer.merge_patch = patch  # type: ignore[method-assign]
        bed.network_pass("b")  # between the pass's patch and its bookkeeping
        return out

    bed.writer.merge_patch = patch_then_b_asks  # type: ignore[method-assign]
    bed.namespace_pass()
    assert bed.annotation() == "vmbr1/100/p"
    assert bed.net_queue == [f"{NS}/a"]
    assert bed.ns_queue == [NS]  # b's ask queued the next pass ...
    bed.clock.t = 1.0
    bed.namespace_pass()  # ... which still has b's pending add
    assert bed.annotation() == "vmbr1/100/p,vmbr1/101/p"
    assert bed.net_queue == [f"{NS}/a", f"{NS}/b"]
    for n in ("a", "b"):
        bed.network_pass(n)
    assert [bed.status(n)["vlan"] for n in ("a", "b")] == [100, 101]


class RecordingGateway:
    """Stands in for controller.apply.gateway.GatewayStep: records which passes would write the
    network's HA chassis group."""

    class _Applier:
        def forget(self, key: str) -> None:
            pass

    grace = 600.0

    def __init__(self) -> None:
        self.applier = self._Applier()
        self.evaluated: list[str] = []

    def trunk(self, provider: str) -> tuple[list, None]:
        return [], None

    def siblings(self, vpc: str) -> frozenset:
        return frozenset()

    def binding(self, vpc: str, subnet: str) -> None:
        return None  # the OVN SB is not read

    def ensure(self, key, vpc, subnet, trunk, siblings, serving="", zone_mtu=None) -> GatewayOutcome:
        self.evaluated.append(key)
        return GatewayOutcome(state=GatewayState(CHASSIS_ASSIGNED, "assigned", 1))

    def owns(self, key: str) -> bool:
        return key in self.evaluated  # a group was written for it

    def release(self, key) -> str:
        return ""


def test_no_gateway_group_is_written_while_the_status_waits_for_the_annotation():
    """§6 step 3 releases a group only when status.vlan is set ("a network that never had a
    VLAN never wrote a group"): so the gateway step must not run in a pass whose status waits
    for the namespace annotation. (A leader killed between such a pass and the status write
    left a group no deletion released: found by the chaos short form.)"""
    bed = Bed()
    gw = RecordingGateway()
    bed.net = NetworkReconciler(Listers(**bed.stores), bed.writer, bed.vlans, manage_gateway=True,
                                namespaces=bed.nsr, recent=bed.net.recent, gateway=gw)
    bed.api.put("subnets", {"metadata": {"name": "s-n0"},
                            "spec": {"vlan": "s-n0", "vpc": "v", "cidrBlock": "10.0.0.0/24", "gateway": "10.0.0.1",
                                     "excludeIps": ["10.0.0.1", "10.0.0.200..10.0.0.250"]},
                            "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    bed.create("n0")
    bed.deliver()
    bed.network_pass("n0")
    assert "vlan" not in bed.status("n0")
    assert gw.evaluated == []
    bed.namespace_pass()
    bed.network_pass("n0")
    assert bed.status("n0")["vlan"] == 100
    assert gw.evaluated == [f"{NS}/n0"]
