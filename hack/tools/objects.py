"""Admin-side helpers for integration tests: build and read the objects the controller
works on (zones, networks, Kube-OVN Vlans and ProviderNetworks)."""

from __future__ import annotations

import itertools
import threading
import uuid
from typing import Any

from kubernetes import client as k8s

from ovn.planner import group_name, router_port_name

PX = ("proxmox.cozystack.io", "v1alpha1")
KUBEOVN = ("kubeovn.io", "v1")
IPAM_POOL = ("ipam.cluster.x-k8s.io", "v1alpha2")  # InClusterIPPool


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


_prefixes = itertools.count(100 * 256)
_prefix_lock = threading.Lock()


def unique_prefix() -> str:
    """The first three octets of a /24 no other caller in this process got (``10.100.0`` ..
    ``10.199.255``): tests' Subnets and pools on one bed each get their own range, since two
    pools sharing an address are ``PoolOverlapsPool`` (issue 15, item 3), in any namespace."""
    with _prefix_lock:
        v = next(_prefixes)
    if v >= 200 * 256:
        raise RuntimeError("unique_prefix: out of /24s")
    return f"10.{v >> 8}.{v & 255}"


class Admin:
    """Thin wrapper over CustomObjectsApi as the cluster admin."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self.api_client = api_client
        self.co = k8s.CustomObjectsApi(api_client)
        self.core = k8s.CoreV1Api(api_client)

    # zones / networks ------------------------------------------------------------
    def create_zone(self, name: str, provider: str, ranges: list[str], bridge: str = "vmbr1", **spec: Any) -> dict:
        body = {
            "apiVersion": "proxmox.cozystack.io/v1alpha1",
            "kind": "ProxmoxNetworkZone",
            "metadata": {"name": name},
            "spec": {"bridge": bridge, "providerNetwork": provider, "vlanRanges": ranges, **spec},
        }
        return self.co.create_cluster_custom_object(*PX, "proxmoxnetworkzones", body)

    def zone(self, name: str) -> dict:
        return self.co.get_cluster_custom_object(*PX, "proxmoxnetworkzones", name)

    def patch_zone(self, name: str, patch: dict) -> dict:
        return self.co.patch_cluster_custom_object(*PX, "proxmoxnetworkzones", name, patch)

    def create_network(self, ns: str, name: str, zone: str, subnet: str, pool: str = "pool") -> dict:
        body = {
            "apiVersion": "proxmox.cozystack.io/v1alpha1",
            "kind": "ProxmoxNetwork",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"zone": zone, "subnet": subnet, "ipPool": pool},
        }
        return self.co.create_namespaced_custom_object(*PX, ns, "proxmoxnetworks", body)

    def network(self, ns: str, name: str) -> dict:
        return self.co.get_namespaced_custom_object(*PX, ns, "proxmoxnetworks", name)

    def create_proxmox_subnet(self, ns: str, name: str, zone: str, vpc: str, prefix: str) -> dict[str, str]:
        """A tenant's Proxmox-backed subnet as its chart renders it: ProxmoxNetwork ``ns/name``
        in ``zone``, Kube-OVN Subnet ``name`` (VPC ``vpc``, Vlan ``name``, ``<prefix>.0/24``,
        gateway ``<prefix>.1``, ``logicalGateway``, ``excludeIps`` the pool's range) and
        InClusterIPPool ``<name>-pool`` over ``<prefix>.200-<prefix>.250``
        (admission-and-packaging.md (f): the pool inside the Subnet and inside its
        ``excludeIps``). Returns the names and addresses (``subnet``, ``pool``, ``gateway``,
        ``router_port``, ``group``: the HA chassis group the controller names
        ``px-<vpc>-<subnet>``)."""
        pool, gateway = f"{name}-pool", f"{prefix}.1"
        self.create_network(ns, name, zone, name, pool)
        self.co.create_cluster_custom_object(*KUBEOVN, "subnets", {
            "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": name},
            "spec": {"vpc": vpc, "vlan": name, "cidrBlock": f"{prefix}.0/24", "gateway": gateway,
                     "protocol": "IPv4", "logicalGateway": True, "excludeIps": [f"{prefix}.200..{prefix}.250"]}})
        self.co.create_namespaced_custom_object(*IPAM_POOL, ns, "inclusterippools", {
            "apiVersion": "/".join(IPAM_POOL), "kind": "InClusterIPPool", "metadata": {"name": pool},
            "spec": {"addresses": [f"{prefix}.200-{prefix}.250"], "prefix": 24, "gateway": gateway}})
        return {"subnet": name, "pool": pool, "gateway": gateway, "router_port": router_port_name(vpc, name),
                "group": group_name(vpc, name)}

    def create_vpc(self, name: str) -> dict:
        """A Kube-OVN Vpc with an empty spec (Kube-OVN makes its router)."""
        return self.co.create_cluster_custom_object(*KUBEOVN, "vpcs", {
            "apiVersion": "kubeovn.io/v1", "kind": "Vpc", "metadata": {"name": name}, "spec": {}})

    # Kube-OVN ----------------------------------------------------------------------
    def create_provider_network(self, name: str, ready: bool = True, ready_nodes: list[str] | None = None,
                                default_interface: str = "eth1") -> dict:
        """A ProviderNetwork with the status its node agent would write. The real CRD wants
        ``spec.defaultInterface`` and a name of at most 12 bytes; on a bed with the real
        kube-ovn-controller it rewrites this status every 30 s from the Nodes'
        ``<name>.provider-network.kubernetes.io/ready`` labels, counting every Node it does
        not exclude: v1.15 would call it not ready because of the Nodes of other trunks (the
        data plane's, another test's), so it selects its own trunk nodes (``nodeSelector`` on
        that label, as an operator selects the nodes of a trunk that not every node carries)."""
        body = {"apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork", "metadata": {"name": name},
                "spec": {"defaultInterface": default_interface,
                         "nodeSelector": {"matchLabels": {f"{name}.provider-network.kubernetes.io/ready": "true"}}}}
        self.co.create_cluster_custom_object(*KUBEOVN, "provider-networks", body)
        # A merge patch: the real kube-ovn-controller writes the new object too (issue 28: a
        # replace with the create's resourceVersion lost that race with a 409 under load).
        status = {"ready": ready, "readyNodes": ready_nodes if ready_nodes is not None else ["node-a"]}
        return self.co.patch_cluster_custom_object_status(*KUBEOVN, "provider-networks", name, {"status": status})

    def create_vlan(self, name: str, vid: int, provider: str, labels: dict | None = None,
                    finalizers: list[str] | None = None) -> dict:
        meta: dict[str, Any] = {"name": name, "labels": labels or {}}
        if finalizers:
            meta["finalizers"] = finalizers
        body = {"apiVersion": "kubeovn.io/v1", "kind": "Vlan", "metadata": meta, "spec": {"id": vid, "provider": provider}}
        return self.co.create_cluster_custom_object(*KUBEOVN, "vlans", body)

    def vlan(self, name: str) -> dict:
        return self.co.get_cluster_custom_object(*KUBEOVN, "vlans", name)

    def vlans(self) -> list[dict]:
        return self.co.list_cluster_custom_object(*KUBEOVN, "vlans")["items"]

    def set_vlan_status(self, name: str, status: dict) -> dict:
        # A merge patch: a read-modify-write would race the controller's own Vlan patches.
        return self.co.patch_cluster_custom_object_status(*KUBEOVN, "vlans", name, {"status": status})

    def strip_finalizers(self, group: str, version: str, plural: str, name: str, ns: str | None = None) -> None:
        """Remove every finalizer by hand, as an impatient admin would (JSON patch: the
        client drops None values, so a merge patch with ``finalizers: null`` would be a no-op)."""
        from controller.runtime.kube import KubeWriter
        from informers import Resource

        ops = [{"op": "remove", "path": "/metadata/finalizers"}]
        KubeWriter(self.api_client).json_patch(Resource(group, version, plural, namespaced=ns is not None), name, ops, ns)

    def label_namespace(self, ns: str, labels: dict) -> None:
        self.core.patch_namespace(ns, {"metadata": {"labels": labels}})


def condition(obj: dict, ctype: str) -> dict | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def reason(obj: dict, ctype: str) -> tuple[str, str, str] | None:
    """(status, reason, message) of condition ``ctype`` or None."""
    c = condition(obj, ctype)
    return (c["status"], c["reason"], c["message"]) if c else None


def wait_condition(admin: "Admin", ns: str, name: str, ctype: str, expected_reason: str, timeout: float = 40) -> dict:
    """Wait until network ``ns/name`` has condition ``ctype`` with ``expected_reason``; returns it."""
    from hack.tools.wait import wait_for

    def check():
        obj = admin.network(ns, name)
        r = reason(obj, ctype)
        return obj if r and r[1] == expected_reason else None

    return wait_for(check, timeout=timeout, what=f"{ctype}={expected_reason} on {ns}/{name}")
