"""The API floor (controller stopped): the same client library doing the controller's API work
for N networks with no controller logic, to set convergence against."""

from __future__ import annotations

import datetime as _dt
import time

from hack.bed import LocalCluster
from hack.benchkit.load import FINALIZER, GROUP, VERSION, in_threads, network_body
from hack.benchkit.report import figure


def run_floor(cluster: LocalCluster, n: int, threads: int, prefix: str = "floor", full: bool = False) -> float:
    """Same client library, same API work, no controller logic. Returns seconds.

    ``full`` adds the controller's other writes per network: two Events and a merge patch
    of the namespace annotation."""
    from kubernetes import client

    def one(co, i: int) -> None:
        ns, body = network_body(prefix, i, "floor-none")
        name = body["metadata"]["name"]
        net = co.create_namespaced_custom_object(GROUP, VERSION, ns, "proxmoxnetworks", body)
        co.create_cluster_custom_object("kubeovn.io", "v1", "vlans", {
            "apiVersion": "kubeovn.io/v1", "kind": "Vlan",
            "metadata": {"name": body["spec"]["subnet"], "finalizers": [FINALIZER], "labels": {
                "proxmox.cozystack.io/zone": "floor-none",
                "proxmox.cozystack.io/network-namespace": ns,
                "proxmox.cozystack.io/network-name": name}},
            "spec": {"id": 1 + i % 4094, "provider": "floor-pn"},
        })
        net = co.patch_namespaced_custom_object(
            GROUP, VERSION, ns, "proxmoxnetworks", name,
            [{"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}],
            _content_type="application/json-patch+json",
        )
        now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        net["status"] = {
            "observedGeneration": net["metadata"]["generation"], "vlan": 1 + i % 4094, "bridge": "vmbr0",
            "conditions": [{"type": "VLANAllocated", "status": "True", "reason": "Allocated", "message": "floor",
                            "observedGeneration": net["metadata"]["generation"], "lastTransitionTime": now}],
        }
        co.replace_namespaced_custom_object_status(GROUP, VERSION, ns, "proxmoxnetworks", name, net)
        if full:
            core = client.CoreV1Api(co.api_client)
            for reason in ("VLANAllocated", "SubnetNotFound"):
                core.create_namespaced_event(ns, {
                    "apiVersion": "v1", "kind": "Event",
                    "metadata": {"generateName": f"{name}.", "namespace": ns},
                    "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ProxmoxNetwork",
                                       "name": name, "namespace": ns, "uid": net["metadata"]["uid"]},
                    "reason": reason, "message": "floor", "type": "Normal",
                    "source": {"component": "proxmox-network-controller"},
                    "firstTimestamp": now, "lastTimestamp": now, "count": 1,
                })
            core.patch_namespace(ns, {"metadata": {"annotations": {f"bench.pnc/{prefix}-{i % 50}": f"vmbr0/{1 + i % 4094}/pool"}}})

    t0 = time.monotonic()
    in_threads(cluster, threads, n, one)
    return time.monotonic() - t0


def run_floors(r: dict, cluster: LocalCluster, n: int, threads: int, log=print) -> None:
    """The plain floor and floor+ (controller stopped), and convergence/floor when converged."""
    r["floor_s"] = run_floor(cluster, n, threads)
    r["floor_full_s"] = run_floor(cluster, n, threads, prefix="floorfull", full=True)
    if r.get("converge_s") is not None:
        r["ratio"] = r["converge_s"] / r["floor_s"]
        r["ratio_full"] = r["converge_s"] / r["floor_full_s"]
    log(f"[N={n}] floor {r['floor_s']:.2f}s; controller/floor = {figure(r, 'ratio')}; "
        f"floor with events+namespace patch {r['floor_full_s']:.2f}s, ratio {figure(r, 'ratio_full')}")
