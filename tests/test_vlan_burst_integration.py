"""Issue 12 on a real kube-apiserver: a burst of allocations on zones sharing one provider
network never gives two Vlans the same ID.

Shape of the report: five zones on one provider network, every one with ``1-4094``,
networks allocated fast by several workers of one process. Here the parts are the real ones
of that process: :class:`VlanManager`, the Vlan and zone informers of a
:class:`SharedInformerFactory` on the controller user's client, the Vlan informer's handlers
wired as ``controller/manager.py`` wires ``observe``, and the controller user's
:class:`KubeWriter`. Only the worker pool is the test's: ``WORKERS`` threads, released
together by a barrier, call ``ensure`` for synthetic network dicts (network ``i`` in zone
``i mod 5``). The informer thread keeps delivering the Vlans just created while the workers
read the used set, which is the interleaving of the issue.

Afterwards the Vlans are listed through the API: one per network, no ID twice on the
provider, and exactly ``1..N`` (lowest free, reference-behaviour.md §4.3: the zones share
the range, so N allocations take the N lowest IDs).

A short GIL switch interval during the burst makes the informer thread preempt a worker
more often, also in the middle of a used-set read; the code under test is unchanged.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import sys
import threading
import time

import pytest

from tests.support.vlans import ensure
from controller import names
from controller.runtime.kube import KubeWriter
from controller.watch.indexes import zone_index_provider
from controller.apply.vlans import VlanManager
from controller.watch.indexes import vlan_index_provider, vlan_index_provider_id, vlan_index_zone
from informers import SharedInformerFactory
from hack.tools.objects import KUBEOVN, PX, Admin, unique
from hack.tools.wait import wait_for

pytestmark = pytest.mark.integration

ZONES = 5
NETWORKS = 600
WORKERS = 8
SWITCH_INTERVAL = 1e-5  # seconds; CPython's default is 5e-3


@pytest.fixture
def admin(admin_client):
    return Admin(admin_client)


def network(ns: str, i: int, zone: str, prefix: str) -> dict:
    return {
        "metadata": {"namespace": ns, "name": f"net-{i}"},
        "spec": {"zone": zone, "subnet": f"{prefix}-{i}", "ipPool": "pool"},
    }


def wire_observe(informer, mgr: VlanManager) -> None:
    """The Vlan informer's calls of ``observe`` as controller/manager.py makes them."""
    informer.add_event_handler(
        on_add=lambda o: mgr.observe(o),
        on_update=lambda old, new: mgr.observe(new),
        on_delete=lambda o: mgr.observe(o, deleted=True),
    )


def cleanup(admin: Admin, vlan_names: list[str], zone_names: list[str]) -> None:
    """As the admin: strip every finalizer and delete the test's Vlans, then its zones."""

    def tolerate(fn, *statuses: int) -> None:
        try:
            fn()
        except Exception as err:  # controller.runtime.kube.ApiError or kubernetes' ApiException
            if getattr(err, "status", None) not in statuses:
                raise

    def drop(plural: str, name: str) -> None:
        # 404: never created (or gone); 422: no finalizers left to remove.
        tolerate(lambda: admin.strip_finalizers(*KUBEOVN, plural, name), 404, 422)
        tolerate(lambda: admin.co.delete_cluster_custom_object(*KUBEOVN, plural, name), 404)

    with cf.ThreadPoolExecutor(8) as ex:
        for f in [ex.submit(drop, "vlans", n) for n in vlan_names]:
            f.result()
    for z in zone_names:
        tolerate(lambda: admin.co.delete_cluster_custom_object(*PX, "proxmoxnetworkzones", z), 404)


def test_burst_on_zones_sharing_a_provider_gives_distinct_lowest_ids(cluster, admin, unique_namespace):
    tag = unique("burst")
    provider = unique("pn")[:12]  # the CRD allows 12 bytes
    zone_names = [f"{tag}-zone-{k}" for k in range(ZONES)]
    subnets = [f"{tag}-{i}" for i in range(NETWORKS)]
    api = cluster.api_client("controller")
    factory = SharedInformerFactory(api)
    try:
        for z in zone_names:
            admin.create_zone(z, provider, ["1-4094"])

        zone_inf = factory.informer(names.PROXMOX_NETWORK_ZONES, indexers={"provider": zone_index_provider})
        vlan_inf = factory.informer(names.VLANS, indexers={
            "provider": vlan_index_provider, "provider_id": vlan_index_provider_id, "zone": vlan_index_zone})
        mgr = VlanManager(vlan_inf.store, zone_inf.store, KubeWriter(api))
        wire_observe(vlan_inf, mgr)
        factory.start()
        assert factory.wait_for_cache_sync(60), "informers did not sync"

        def cached_zones():
            zs = zone_inf.store.by_index("provider", provider)
            return zs if len(zs) == ZONES else None

        zones = wait_for(cached_zones, what="the five zones in the cache")
        zone_of = {z["metadata"]["name"]: z for z in zones}

        barrier = threading.Barrier(WORKERS)
        outcomes: dict[int, object] = {}
        errors: list[BaseException] = []

        def worker(w: int) -> None:
            try:
                barrier.wait(timeout=30)
                for i in range(w, NETWORKS, WORKERS):
                    zn = zone_names[i % ZONES]
                    outcomes[i] = ensure(mgr, network(unique_namespace, i, zn, tag), zone_of[zn])
            except BaseException as err:  # reported below, with the others' results
                errors.append(err)

        old_interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL)
        t0 = time.monotonic()
        try:
            threads = [threading.Thread(target=worker, args=(w,), name=f"burst-{w}") for w in range(WORKERS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            sys.setswitchinterval(old_interval)
        burst_s = time.monotonic() - t0
        assert not errors, f"ensure raised: {errors[:3]!r}"
        refused = {i: o for i, o in outcomes.items() if o.vlan is None}
        assert not refused, f"refused: {dict(list(refused.items())[:5])!r}"

        items = [v for v in admin.vlans() if (v.get("spec") or {}).get("provider") == provider]
        ids = collections.Counter(v["spec"]["id"] for v in items)
        dups = {vid: n for vid, n in ids.items() if n > 1}
        print(f"\nburst: {NETWORKS} allocations by {WORKERS} workers in {burst_s:.1f}s; "
              f"{len(items)} Vlans, {len(ids)} distinct IDs, {len(dups)} duplicated IDs {sorted(dups)[:10]}")
        assert not dups, f"{len(dups)} VLAN IDs held twice on {provider}: {sorted(dups.items())[:10]}"
        # Every network got its own Vlan (named after its subnet, labelled with it).
        assert sorted(v["metadata"]["name"] for v in items) == sorted(subnets)
        for v in items:
            i = int(v["metadata"]["name"].rsplit("-", 1)[1])
            assert v["metadata"]["labels"]["proxmox.cozystack.io/network-name"] == f"net-{i}"
            assert v["metadata"]["labels"]["proxmox.cozystack.io/zone"] == zone_names[i % ZONES]
            assert outcomes[i].vlan["spec"]["id"] == v["spec"]["id"]
        assert sorted(ids) == list(range(1, NETWORKS + 1))
    finally:
        factory.stop()
        api.close()
        cleanup(admin, subnets, zone_names)
