"""No duplicate VLAN under cache lag (product-decisions.md §4.4), as a property.

The Vlan cache is a real :class:`ThreadSafeStore` fed only when the test "delivers" watch
events, so it lags the creates by an arbitrary amount; the API side is a minimal
in-memory stand-in with the one behaviour that matters here (create of an existing name
answers 409 AlreadyExists, as kube-apiserver does). Whatever the interleaving of
allocations, deliveries and deletions, no two Vlans on one provider share an ID and every
network that got a Vlan got its own.
"""

from __future__ import annotations

import copy
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.kube import ApiError
from controller.vlans import VlanManager, vlan_index_provider, vlan_index_zone
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
            self.objects[name] = stored
            self.events.append(("add", stored))
            self.writes += 1
            return copy.deepcopy(stored)

    def get(self, resource, name, namespace=None):
        with self.lock:
            if name not in self.objects:
                raise ApiError(404, "NotFound", name)
            return copy.deepcopy(self.objects[name])

    def json_patch(self, resource, name, ops, namespace=None):  # adoption: not reached here
        return self.get(resource, name)

    def delete_now(self, name: str) -> None:
        with self.lock:
            obj = self.objects.pop(name, None)
            if obj is not None:
                self.events.append(("delete", obj))

    def deliver(self, n: int, store: ThreadSafeStore, mgr: VlanManager) -> None:
        with self.lock:
            batch, self.events = self.events[:n], self.events[n:]
        for kind, obj in batch:
            if kind == "add":
                store.add(obj)
                mgr.observe(obj)
            else:
                store.delete(obj)


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
            out = mgr.ensure(network(arg), z)
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
            out = mgr.ensure(network(i), z)
            results[i] = out.vlan["spec"]["id"]

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # The cache never saw a single create, yet all 160 IDs are distinct and lowest-first.
    assert len(store) == 0
    assert sorted(results.values()) == list(range(1, 161))
