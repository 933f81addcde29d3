"""No duplicate VLAN under cache lag (product-decisions.md §4.4, §8 "Safety by
construction"), as a property.

The Vlan cache is a real :class:`ThreadSafeStore` fed only when the test "delivers" watch
events, so it lags the creates by an arbitrary amount; the API side is a minimal
in-memory stand-in with the behaviour that matters here (create of an existing name
answers 409 AlreadyExists, as kube-apiserver does; every object gets a UID and a rising
resourceVersion). Whatever the interleaving of allocations, deliveries and deletions, no
two Vlans on one provider share an ID and every network that got a Vlan got its own.

Issue 12: the first two tests here missed a duplicate that one process made under a burst.
Events were delivered only *between* allocations, never while an allocation was reading the
used set, and the concurrent test never delivered any event at all; the bug lived exactly
in that gap (the store was read, then the informer moved a Vlan from the assumed set into
the store, then the assumed set was read). The tests after them deliver events in the
middle of the manager's reads, late and out of order across Vlans, with several zones
sharing one provider and overlapping ranges.
"""

from __future__ import annotations

import copy
import datetime as _dt
import random
import sys
import threading
import uuid

import pytest
import urllib3
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.vlans import ensure
from controller.rules import reuse
from controller.runtime.kube import ApiError, KubeWriter
from controller.apply.vlans import ASSUME_VERIFY_AFTER, VlanManager
from controller.watch.indexes import (
    vlan_index_provider,
    vlan_index_provider_id,
    vlan_index_zone,
    vlan_indexers,
)
from informers import ThreadSafeStore

PROVIDER = "physnet1"


class FakeVlanApi:
    """Stores Vlans by name; create is atomic and refuses a taken name."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.events: list[tuple[str, dict]] = []  # watch events not yet delivered
        self.lock = threading.Lock()
        self.writes = 0
        self.rv = 0

    def create(self, resource, obj, namespace=None):
        with self.lock:
            name = obj["metadata"]["name"]
            if name in self.objects:
                raise ApiError(409, "AlreadyExists", f'vlans "{name}" already exists')
            self.rv += 1
            stored = copy.deepcopy(obj)
            stored["metadata"]["resourceVersion"] = str(self.rv)
            stored["metadata"]["uid"] = str(uuid.uuid4())
            self.objects[name] = stored
            self.events.append(("add", stored))
            self.writes += 1
            return copy.deepcopy(stored)

    def get(self, resource, name, namespace=None):
        with self.lock:
            if name not in self.objects:
                raise ApiError(404, "NotFound", name)
            return copy.deepcopy(self.objects[name])

    get_or_none = KubeWriter.get_or_none  # the writer's own 404 rule over this get

    def json_patch(self, resource, name, ops, namespace=None):  # adoption: not reached here
        return self.get(resource, name)

    def delete_now(self, name: str) -> None:
        with self.lock:
            obj = self.objects.pop(name, None)
            if obj is not None:
                self.rv += 1
                obj = copy.deepcopy(obj)
                obj["metadata"]["resourceVersion"] = str(self.rv)
                self.events.append(("delete", obj))

    def take(self, pick: int) -> tuple[str, dict] | None:
        """Remove one undelivered event: the ``pick``-th (mod the count) among the
        first event of each Vlan name, so events of different Vlans arrive out of order
        while each Vlan's own events keep the watch's order."""
        with self.lock:
            seen: set[str] = set()
            heads = []
            for k, (_, obj) in enumerate(self.events):
                name = obj["metadata"]["name"]
                if name not in seen:
                    seen.add(name)
                    heads.append(k)
            if not heads:
                return None
            return self.events.pop(heads[pick % len(heads)])

    def deliver(self, n: int, store: ThreadSafeStore, mgr: VlanManager) -> None:
        with self.lock:
            batch, self.events = self.events[:n], self.events[n:]
        for kind, obj in batch:
            apply_event(kind, obj, store, mgr)


def apply_event(kind: str, obj: dict, store: ThreadSafeStore, mgr: VlanManager) -> None:
    """What the informer does with one watch event: the store first, then the handler
    (``controller.manager`` wires ``VlanManager.observe`` this way)."""
    if kind == "add":
        store.add(obj)
        mgr.observe(obj)
    else:
        store.delete(obj)
        mgr.observe(obj, deleted=True)


def zone(ranges):
    return {"metadata": {"name": "z"}, "spec": {"bridge": "vmbr1", "providerNetwork": PROVIDER, "vlanRanges": ranges}}


def network(i: int) -> dict:
    return {"metadata": {"namespace": "ns", "name": f"n{i}"}, "spec": {"zone": "z", "subnet": f"s{i}", "ipPool": "p"}}


ops = st.lists(
    st.one_of(
        st.tuples(st.just("alloc"), st.integers(0, 14)),
        st.tuples(st.just("deliver"), st.integers(1, 5)),
        st.tuples(st.just("delete"), st.integers(0, 14)),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops=ops, handmade=st.sets(st.integers(100, 115), max_size=4))
def test_no_two_vlans_share_an_id_whatever_the_cache_lag(ops, handmade):
    api = FakeVlanApi()
    store = ThreadSafeStore({"provider": vlan_index_provider, "zone": vlan_index_zone})
    zones = ThreadSafeStore()
    z = zone(["100-115"])
    zones.add(z)
    # Hand-made Vlans already in the cache (the synced initial list).
    for vid in sorted(handmade):
        obj = {"metadata": {"name": f"hand-{vid}", "resourceVersion": "0"}, "spec": {"id": vid, "provider": PROVIDER}}
        api.objects[obj["metadata"]["name"]] = obj
        store.add(obj)
    mgr = VlanManager(store, zones, api)  # type: ignore[arg-type]

    for op, arg in ops:
        if op == "alloc":
            out = ensure(mgr, network(arg), z)
            if out.vlan is not None:
                assert out.vlan["metadata"]["labels"]["proxmox.cozystack.io/network-name"] == f"n{arg}"
            else:
                assert out.reason == "ZoneExhausted"
        elif op == "deliver":
            api.deliver(arg, store, mgr)
        else:
            api.delete_now(f"s{arg}")
        ids = [o["spec"]["id"] for o in api.objects.values()]
        assert len(ids) == len(set(ids)), f"duplicate VLAN IDs: {sorted(ids)}"


def test_concurrent_workers_on_a_lagging_cache_get_distinct_ids():
    api = FakeVlanApi()
    store = ThreadSafeStore({"provider": vlan_index_provider, "zone": vlan_index_zone})
    zones = ThreadSafeStore()
    z = zone(["1-200"])
    zones.add(z)
    mgr = VlanManager(store, zones, api)  # type: ignore[arg-type]
    results: dict[int, int] = {}
    barrier = threading.Barrier(8)

    def worker(w: int) -> None:
        barrier.wait()
        for i in range(w, 160, 8):
            out = ensure(mgr, network(i), z)
            results[i] = out.vlan["spec"]["id"]

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # The cache never saw a single create, yet all 160 IDs are distinct and lowest-first.
    assert len(store) == 0
    assert sorted(results.values()) == list(range(1, 161))


# --------------------------------------------------------------------------------------
# Events delivered in the middle of the manager's reads (issue 12)


class InterleavingStore(ThreadSafeStore):
    """A real store that, right after each read the manager makes, lets the watch deliver
    the events a schedule asks for: the informer thread running between two of the
    allocator's reads, at the points hypothesis chooses."""

    def __init__(self, indexers, after_read) -> None:
        super().__init__(indexers)
        self.after_read = after_read
        self.manager: VlanManager | None = None

    def _deliver(self) -> None:
        # A real informer thread would block on the manager's assumed-set lock and deliver
        # right after; on this one thread that would deadlock, so deliver at the next read.
        if self.manager is not None and not self.manager._assumed_lock.locked():
            self.after_read()

    def get(self, key):
        out = super().get(key)
        self._deliver()
        return out

    def by_index(self, index_name, value, ordered=True):
        out = super().by_index(index_name, value, ordered)
        self._deliver()
        return out


def shared_zones(ranges: list[list[str]]) -> list[dict]:
    return [
        {"metadata": {"name": f"z{k}"}, "spec": {"bridge": "vmbr1", "providerNetwork": PROVIDER, "vlanRanges": r}}
        for k, r in enumerate(ranges)
    ]


def zone_network(i: int, zname: str) -> dict:
    return {"metadata": {"namespace": "ns", "name": f"n{i}"}, "spec": {"zone": zname, "subnet": f"s{i}", "ipPool": "p"}}


range_entry = st.tuples(st.integers(1, 12), st.integers(0, 6)).map(lambda t: f"{t[0]}-{t[0] + t[1]}")


@settings(max_examples=300, deadline=None)
@given(
    ranges=st.lists(st.lists(range_entry, min_size=1, max_size=2), min_size=2, max_size=4),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("alloc"), st.integers(0, 19)),
            st.tuples(st.just("delete"), st.integers(0, 19)),
        ),
        max_size=40,
    ),
    # Mostly no delivery at a read, so that a Vlan can stay undelivered past its own
    # create and arrive in the middle of a later allocation.
    schedule=st.lists(st.tuples(st.sampled_from([0, 0, 0, 0, 1, 1, 2, 3]), st.integers(0, 50)), max_size=200),
)
def test_events_delivered_between_the_allocators_reads_never_free_an_id(ranges, ops, schedule):
    """Several zones share one provider with overlapping ranges; after every cache read
    the allocator makes, the schedule delivers 0-3 pending events, any Vlan's first
    (out of order across Vlans). Before the fix of issue 12 this finds the duplicate
    within a few hundred examples. No two Vlans on the provider ever share an ID."""
    api = FakeVlanApi()
    plan = iter(schedule)

    def after_read() -> None:
        count, pick = next(plan, (0, 0))
        for _ in range(count):
            ev = api.take(pick)
            if ev is None:
                return
            apply_event(ev[0], ev[1], store, mgr)

    store = InterleavingStore({"provider": vlan_index_provider, "provider_id": vlan_index_provider_id,
                               "zone": vlan_index_zone}, after_read)
    zones = ThreadSafeStore()
    zs = shared_zones(ranges)
    for z in zs:
        zones.add(z)
    mgr = VlanManager(store, zones, api)  # type: ignore[arg-type]
    store.manager = mgr
    for op, i in ops:
        if op == "alloc":
            z = zs[i % len(zs)]
            try:
                out = ensure(mgr, zone_network(i, z["metadata"]["name"]), z)
            except ApiError as err:  # adopting a Vlan deleted behind the cache: the pass retries
                assert err.not_found
                continue
            if out.vlan is not None:
                assert out.vlan["metadata"]["name"] == f"s{i}"
            else:
                assert out.reason == "ZoneExhausted", out
        else:
            api.delete_now(f"s{i}")
        ids = [o["spec"]["id"] for o in api.objects.values()]
        assert len(ids) == len(set(ids)), f"duplicate VLAN IDs: {sorted(ids)}"


def test_a_vlan_moving_from_the_assumed_set_into_the_cache_mid_read_keeps_its_id():
    """The exact interleaving of issue 12: network A's Vlan is created (ID 1, assumed);
    while network B's allocation reads the cache, the watch delivers A's Vlan (the store
    shows it, the assumed set lets it go). B must get ID 2, not 1."""
    api = FakeVlanApi()
    armed = [False]

    class AfterProviderList(InterleavingStore):
        def by_index(self, index_name, value, ordered=True):
            out = ThreadSafeStore.by_index(self, index_name, value, ordered)
            if armed[0] and index_name == "provider":
                armed[0] = False
                api.deliver(100, store, mgr)
            return out

    store = AfterProviderList({"provider": vlan_index_provider, "provider_id": vlan_index_provider_id}, lambda: None)
    zones = ThreadSafeStore()
    z0, z1 = shared_zones([["1-10"], ["1-10"]])
    zones.add(z0)
    zones.add(z1)
    mgr = VlanManager(store, zones, api)  # type: ignore[arg-type]
    store.manager = mgr
    a = ensure(mgr, zone_network(0, "z0"), z0)
    assert a.vlan["spec"]["id"] == 1 and store.get("s0") is None  # created, not yet seen
    armed[0] = True
    b = ensure(mgr, zone_network(1, "z1"), z1)
    assert b.vlan["spec"]["id"] == 2


def test_a_late_delete_of_an_earlier_vlan_of_the_same_name_does_not_drop_the_new_one():
    """client-go's assume-cache rule: only the assumed object itself (same UID, a version
    at least as new) or its own deletion ends the assumption. A Vlan ``s0`` is deleted and
    made again; the old one's DELETED event arrives after the new create."""
    api = FakeVlanApi()
    store = ThreadSafeStore({"provider": vlan_index_provider, "provider_id": vlan_index_provider_id})
    zones = ThreadSafeStore()
    (z0,) = shared_zones([["1-10"]])
    zones.add(z0)
    mgr = VlanManager(store, zones, api)  # type: ignore[arg-type]
    first = ensure(mgr, zone_network(0, "z0"), z0).vlan
    api.delete_now("s0")
    api.events.clear()  # neither the first ADDED nor its DELETED has been delivered yet
    mgr.observe(first, deleted=True)  # the assumed Vlan itself is gone: the assumption ends
    second = ensure(mgr, zone_network(0, "z0"), z0).vlan
    assert second["spec"]["id"] == 1 and second["metadata"]["uid"] != first["metadata"]["uid"]
    mgr.observe(first, deleted=True)  # late, of the earlier object
    mgr.observe(first)  # an older version of the earlier object
    assert ensure(mgr, zone_network(1, "z0"), z0).vlan["spec"]["id"] == 2


def test_real_threads_with_a_watch_thread_delivering_late_and_out_of_order():
    """Eight workers on four zones that share one provider (overlapping ranges) allocate
    while a watch thread delivers each create late, out of order across Vlans, with the
    interpreter switching threads as often as it can. The IDs are distinct and, since
    every zone covers 1-400, exactly 1..N (lowest free first)."""
    api = FakeVlanApi()
    store = ThreadSafeStore({"provider": vlan_index_provider, "provider_id": vlan_index_provider_id})
    zones = ThreadSafeStore()
    zs = shared_zones([["1-400"], ["1-200", "201-400"], ["1-400"], ["1-100", "50-400"]])
    for z in zs:
        zones.add(z)
    mgr = VlanManager(store, zones, api)  # type: ignore[arg-type]
    n, workers = 320, 8
    results: dict[int, int] = {}
    done = threading.Event()
    barrier = threading.Barrier(workers + 1)

    def watch() -> None:
        rnd = random.Random(12)
        barrier.wait()
        while not done.is_set() or api.events:
            ev = api.take(rnd.randrange(8))
            if ev is not None:
                apply_event(ev[0], ev[1], store, mgr)

    def worker(w: int) -> None:
        barrier.wait()
        for i in range(w, n, workers):
            z = zs[i % len(zs)]
            results[i] = ensure(mgr, zone_network(i, z["metadata"]["name"]), z).vlan["spec"]["id"]

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker, args=(w,)) for w in range(workers)]
        watcher = threading.Thread(target=watch)
        for t in threads + [watcher]:
            t.start()
        for t in threads:
            t.join()
        done.set()
        watcher.join()
    finally:
        sys.setswitchinterval(old)
    assert sorted(results.values()) == list(range(1, n + 1))
    assert len(store) == n


def test_an_id_changed_by_hand_leaves_the_allocated_one_used_too():
    # product-decisions.md §8: both IDs count as used until the operator resolves it; the
    # allocated one is the owner network's status.vlan, read from the cluster (restart-proof).
    from controller import names

    store = ThreadSafeStore(vlan_indexers())
    nets = ThreadSafeStore()
    api = FakeVlanApi()
    labels = {names.LABEL_NETWORK_NAMESPACE: "t", names.LABEL_NETWORK_NAME: "n1", names.LABEL_ZONE: "z"}
    mgr = VlanManager(store, ThreadSafeStore(), api, networks=nets)  # type: ignore[arg-type]
    # A Vlan as the controller made it (generation 1): the cached record counts.
    store.add({"metadata": {"name": "s1", "labels": labels, "generation": 1}, "spec": {"id": 102, "provider": PROVIDER}})
    nets.add({"metadata": {"namespace": "t", "name": "n1"}, "status": {"vlan": 102}})
    assert mgr.used_ids(PROVIDER) == {102}
    # Edited by hand (generation 2) while the network cache lags (it does not show the
    # record yet): the record is read fresh from the API server.
    store.update({"metadata": {"name": "s1", "labels": labels, "generation": 2}, "spec": {"id": 107, "provider": PROVIDER}})
    nets.update({"metadata": {"namespace": "t", "name": "n1"}, "status": {}})
    api.objects["n1"] = {"metadata": {"namespace": "t", "name": "n1"}, "status": {"vlan": 102}}
    assert mgr.used_ids(PROVIDER) == {102, 107}
    # Accepted (the record follows): one ID again.
    api.objects["n1"]["status"]["vlan"] = 107
    assert mgr.used_ids(PROVIDER) == {107}


class FakeZoneApi:
    """One zone: ``get`` and the guarded JSON patch of one annotation that
    ``VlanManager.hold_for_reuse`` writes."""

    def __init__(self, z: dict) -> None:
        self.zone = copy.deepcopy(z)
        self.zone["metadata"]["resourceVersion"] = "1"

    def get(self, resource, name, namespace=None):
        return copy.deepcopy(self.zone)

    get_or_none = KubeWriter.get_or_none

    def json_patch(self, resource, name, ops, namespace=None):
        test, op = ops
        meta = self.zone["metadata"]
        if test["value"] != meta["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        if op["path"] == "/metadata/annotations":
            meta["annotations"] = dict(op["value"])
        else:
            key = op["path"].rsplit("/", 1)[1].replace("~1", "/").replace("~0", "~")
            meta.setdefault("annotations", {})[key] = op["value"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        return copy.deepcopy(self.zone)


@settings(max_examples=200, deadline=None)
@given(micro=st.integers(0, 999_999), delay=st.integers(1, 3600), vid=st.integers(100, 115))
def test_the_releasing_process_holds_an_id_exactly_as_long_as_the_zone_record(micro, delay, vid):
    """product-decisions.md §8 (VLAN reuse delay): the zone's record of a released ID, which
    the zone pass prunes once it has lapsed (and whose prune wakes the networks waiting in
    ``ZoneExhausted``), and the releasing process's own hold end at the same instant, never
    before release + delay. Found by ``hack/bench_scale.py --vlan-space``: the record had
    second resolution (fraction dropped) while the hold kept it, so a network woken by the
    prune was refused again and waited for its 10-minute requeue."""
    released_at = _dt.datetime(2026, 12, 4, 23, 51, 53, micro, tzinfo=_dt.timezone.utc)
    clock = [released_at]
    api = FakeZoneApi(zone(["100-115"]))
    zones = ThreadSafeStore()
    mgr = VlanManager(ThreadSafeStore(vlan_indexers()), zones, api, reuse_delay=delay,  # type: ignore[arg-type]
                      now=lambda: clock[0])
    mgr.hold_for_reuse({"metadata": {"name": "s1", "labels": {"proxmox.cozystack.io/zone": "z"}},
                        "spec": {"id": vid, "provider": PROVIDER}})
    record = reuse.entries_of(api.zone)[vid]
    assert record >= released_at + _dt.timedelta(seconds=delay)  # the delay is never shortened
    zones.add(api.zone)  # the cache shows the record
    clock[0] = record - _dt.timedelta(microseconds=1)
    assert vid in mgr.held_ids(PROVIDER)
    # The zone pass prunes the lapsed record; the networks it wakes find the ID free.
    pruned = copy.deepcopy(api.zone)
    del pruned["metadata"]["annotations"]
    zones.add(pruned)
    clock[0] = record
    assert mgr.held_ids(PROVIDER) == {}


# --------------------------------------------------------------------------------------
# A create whose answer was lost (the API server killed after the write reached etcd)


class LosingVlanApi(FakeVlanApi):
    """A create that lands and then loses its answer, as when kube-apiserver dies after
    etcd committed the write: the client sees a dropped connection, never a status."""

    def __init__(self) -> None:
        super().__init__()
        self.lose_next = 0
        self.down = False

    def create(self, resource, obj, namespace=None):
        if self.down:
            raise urllib3.exceptions.MaxRetryError(None, "/apis/kubeovn.io/v1/vlans", "connection refused")
        stored = super().create(resource, obj, namespace)
        if self.lose_next:
            self.lose_next -= 1
            raise urllib3.exceptions.ProtocolError("Connection aborted.", "Remote end closed connection without response")
        return stored

    def get(self, resource, name, namespace=None):
        if self.down:
            raise urllib3.exceptions.MaxRetryError(None, f"/apis/kubeovn.io/v1/vlans/{name}", "connection refused")
        return super().get(resource, name, namespace)


def losing_bed(ranges: list[str]) -> tuple[LosingVlanApi, ThreadSafeStore, dict, list[float], VlanManager]:
    """A :class:`LosingVlanApi`, an empty Vlan cache, one zone over ``ranges`` and a manager on a
    clock the test moves (``clock[0]``, seconds)."""
    api = LosingVlanApi()
    store = ThreadSafeStore({"provider": vlan_index_provider, "zone": vlan_index_zone})
    zones = ThreadSafeStore()
    z = zone(ranges)
    zones.add(z)
    clock = [0.0]
    return api, store, z, clock, VlanManager(store, zones, api, monotonic=lambda: clock[0])  # type: ignore[arg-type]


def test_an_id_whose_create_lost_its_answer_is_not_given_to_another_network():
    """The chaos run's duplicate: net A's create landed but its answer was lost, the watch
    had not brought the Vlan back, and the next network got the same ID. An ID whose
    create may have landed stays used until the cache or a read settles it."""
    api, store, z, clock, mgr = losing_bed(["300-310"])

    api.lose_next = 1
    with pytest.raises(urllib3.exceptions.ProtocolError):
        ensure(mgr, network(1), z)
    assert api.objects["s1"]["spec"]["id"] == 300  # it landed
    api.down = True  # the API server restarting
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        ensure(mgr, network(1), z)
    api.down = False

    out = ensure(mgr, network(2), z)
    assert out.vlan["spec"]["id"] == 301
    # net 1's retry adopts what its lost create made, with the ID it picked then.
    assert ensure(mgr, network(1), z).vlan["spec"]["id"] == 300
    ids = [o["spec"]["id"] for o in api.objects.values()]
    assert sorted(ids) == [300, 301]


def test_an_id_whose_create_did_not_land_is_free_again_once_a_read_says_so():
    """A create refused by a dead server leaves nothing: after the grace period a read
    finds no Vlan of that name, and the ID is the lowest free one again."""
    api, store, z, clock, mgr = losing_bed(["300-310"])

    api.down = True
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        ensure(mgr, network(1), z)
    api.down = False
    # Within the grace period the ID stays used (the request may still be in flight).
    assert ensure(mgr, network(2), z).vlan["spec"]["id"] == 301
    clock[0] += ASSUME_VERIFY_AFTER + 1
    assert ensure(mgr, network(3), z).vlan["spec"]["id"] == 300
    assert sorted(o["spec"]["id"] for o in api.objects.values()) == [300, 301]


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(
    st.one_of(
        st.tuples(st.just("alloc"), st.integers(0, 9)),
        st.tuples(st.just("alloc_lost"), st.integers(0, 9)),
        st.tuples(st.just("deliver"), st.integers(1, 5)),
        st.tuples(st.just("delete"), st.integers(0, 9)),
        st.tuples(st.just("wait"), st.just(0)),
    ),
    max_size=50,
))
def test_lost_answers_never_make_a_duplicate(ops):
    api, store, z, clock, mgr = losing_bed(["100-111"])
    for op, arg in ops:
        if op in ("alloc", "alloc_lost"):
            api.lose_next = 1 if op == "alloc_lost" else 0
            try:
                out = ensure(mgr, network(arg), z)
            except urllib3.exceptions.ProtocolError:
                assert op == "alloc_lost"
            else:
                assert out.vlan is not None or out.reason == "ZoneExhausted"
            api.lose_next = 0
        elif op == "deliver":
            api.deliver(arg, store, mgr)
        elif op == "wait":
            clock[0] += ASSUME_VERIFY_AFTER + 1
        else:
            api.delete_now(f"s{arg}")
        ids = [o["spec"]["id"] for o in api.objects.values()]
        assert len(ids) == len(set(ids)), f"duplicate VLAN IDs: {sorted(ids)}"
