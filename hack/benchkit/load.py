"""The benchmarks' load: namespaces, ready ProviderNetworks, zones of range 1-4094 and the
ProxmoxNetworks' bodies, created by admin threads (one ApiClient per thread)."""

from __future__ import annotations

import concurrent.futures as cf
import threading

from hack.bed import LocalCluster

GROUP, VERSION = "proxmox.cozystack.io", "v1alpha1"
FINALIZER = "proxmox.cozystack.io/network"
NAMESPACES = 10
LAYOUT_PER_ZONE = "per-zone"  # one ProviderNetwork per zone
LAYOUT_SHARED = "shared"  # every zone on one ProviderNetwork, ranges overlapping
LAYOUT_TEXT = {LAYOUT_PER_ZONE: "1 provider per zone", LAYOUT_SHARED: "all zones on 1 provider"}


def zone_provider(z: int, shared_provider: bool = False) -> str:
    """The ProviderNetwork of zone ``z``: its own, or the one every zone shares."""
    return "bench-pn-0" if shared_provider else f"bench-pn-{z}"


def provider_names(zones: int, shared_provider: bool = False) -> list[str]:
    return sorted({zone_provider(z, shared_provider) for z in range(zones)})


def setup_objects(cluster: LocalCluster, zones: int, shared_provider: bool = False) -> None:
    """Namespaces, ProviderNetworks (ready) and ``zones`` zones with range 1-4094, each on
    its own provider, or with ``shared_provider`` all on one (overlapping ranges)."""
    from kubernetes import client

    api = cluster.api_client("admin")
    try:
        core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
        for i in range(NAMESPACES):
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=f"bench-{i}")))
        for k, pn in enumerate(provider_names(zones, shared_provider)):
            co.create_cluster_custom_object("kubeovn.io", "v1", "provider-networks", {
                "apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork",
                "metadata": {"name": pn}, "spec": {"defaultInterface": f"eth{k + 1}"},
            })
            co.patch_cluster_custom_object_status("kubeovn.io", "v1", "provider-networks", pn,
                                                  {"status": {"ready": True, "readyNodes": ["pve-1", "pve-2"]}})
        for z in range(zones):
            co.create_cluster_custom_object(GROUP, VERSION, "proxmoxnetworkzones", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "ProxmoxNetworkZone",
                "metadata": {"name": f"bench-z{z}"},
                "spec": {"bridge": f"vmbr{z}", "providerNetwork": zone_provider(z, shared_provider),
                         "vlanRanges": ["1-4094"]},
            })
    finally:
        api.close()


def network_body(prefix: str, i: int, zone: str) -> tuple[str, dict]:
    ns = f"bench-{i % NAMESPACES}"
    return ns, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ProxmoxNetwork",
        "metadata": {"name": f"{prefix}-{i}", "namespace": ns},
        "spec": {"zone": zone, "subnet": f"{ns}-{prefix}-{i}", "ipPool": "pool"},
    }


def in_threads(cluster: LocalCluster, threads: int, n: int, fn) -> None:
    """fn(co, i) for i in range(n) on ``threads`` threads, one ApiClient per thread."""
    from kubernetes import client

    local = threading.local()
    clients = []
    lock = threading.Lock()

    def work(i: int) -> None:
        co = getattr(local, "co", None)
        if co is None:
            api = cluster.api_client("admin")
            with lock:
                clients.append(api)
            co = local.co = client.CustomObjectsApi(api)
        fn(co, i)

    try:
        with cf.ThreadPoolExecutor(threads) as ex:
            for f in [ex.submit(work, i) for i in range(n)]:
                f.result()
    finally:
        for api in clients:
            api.close()
