"""Objects of a platform cluster shaped as their projects write them (issue 29): the kinds
the controller caches that grow with the cluster, not with its networks. Used by
``hack/bench_cache.py`` (bytes per cached object) and ``hack/bench_scale.py`` (the cluster's
population).

Shapes (sizes and fields, not values) follow what the projects serve: Kube-OVN v1.15's
``IP`` (pkg/controller/pod.go, ``createOrUpdateIPCR``: labels for subnet, node and
namespace, the kube-ovn-controller finalizer, managedFields of its server-side writes), a
kubelet-registered Node with Kube-OVN's annotations and provider-network labels and a
typical image list, a Namespace applied with ``kubectl apply`` (last-applied annotation),
CAPI IPAM v1beta1 ``IPAddress``/``IPAddressClaim`` as the in-cluster provider writes them,
and capmox ``ProxmoxMachine`` v1alpha1 and v1alpha2. Every object is fresh from
``json.loads`` (as the informer decodes it), so no two share their strings.
"""

from __future__ import annotations

import json
from typing import Any

IPAM = "ipam.cluster.x-k8s.io"


def _managed(manager: str, fields: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"manager": manager, "operation": "Update", "apiVersion": "v1", "time": "2026-12-01T00:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": fields}]


def _fresh(obj: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(obj))


def kube_ovn_ip(i: int, subnet: str, namespace: str, node: str) -> dict[str, Any]:
    pod = f"app-{i:06d}-7d9f8c6b5-x{i % 97:02d}q"
    addr = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
    return _fresh({
        "apiVersion": "kubeovn.io/v1", "kind": "IP",
        "metadata": {"name": f"{pod}.{namespace}", "uid": f"00000000-0000-4000-8000-{i:012d}",
                     "resourceVersion": str(100000 + i), "generation": 1, "creationTimestamp": "2026-12-01T00:00:00Z",
                     "finalizers": ["kubeovn.io/kube-ovn-controller"],
                     "labels": {"ovn.kubernetes.io/subnet": subnet, "ovn.kubernetes.io/node-name": node,
                                namespace: "", "ovn.kubernetes.io/ip_reserved": "false"},
                     "managedFields": _managed("kube-ovn-controller", {
                         "f:metadata": {"f:finalizers": {".": {}, 'v:"kubeovn.io/kube-ovn-controller"': {}},
                                        "f:labels": {".": {}, "f:ovn.kubernetes.io/node-name": {},
                                                     "f:ovn.kubernetes.io/subnet": {}, f"f:{namespace}": {}}},
                         "f:spec": {".": {}, "f:attachIps": {}, "f:attachMacs": {}, "f:attachSubnets": {},
                                    "f:containerID": {}, "f:ipAddress": {}, "f:macAddress": {}, "f:namespace": {},
                                    "f:nodeName": {}, "f:podName": {}, "f:podType": {}, "f:subnet": {},
                                    "f:v4IpAddress": {}, "f:v6IpAddress": {}}})},
        "spec": {"podName": pod, "namespace": namespace, "subnet": subnet, "attachSubnets": [], "nodeName": node,
                 "ipAddress": addr, "v4IpAddress": addr, "v6IpAddress": "", "attachIps": [],
                 "macAddress": f"00:00:00:{(i >> 16) & 255:02x}:{(i >> 8) & 255:02x}:{i & 255:02x}",
                 "attachMacs": [], "containerID": f"{i:064x}", "podType": ""}})


def node(i: int, providers: list[str]) -> dict[str, Any]:
    name = f"worker-{i:04d}"
    labels = {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "node-role.kubernetes.io/worker": "",
              "topology.kubernetes.io/zone": f"rack-{i % 8}", "kube-ovn/role": "node"}
    for p in providers:
        labels[f"{p}.provider-network.kubernetes.io/ready"] = "true"
        labels[f"{p}.provider-network.kubernetes.io/interface"] = "eth1"
        labels[f"{p}.provider-network.kubernetes.io/mtu"] = "1500"
    return _fresh({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"10000000-0000-4000-8000-{i:012d}", "resourceVersion": str(200000 + i),
                     "creationTimestamp": "2026-11-01T00:00:00Z", "labels": labels,
                     "annotations": {"ovn.kubernetes.io/chassis": f"{i:08x}-7a3c-4b1e-9f0d-2c5e8a1b3d7f",
                                     "ovn.kubernetes.io/allocated": "true", "ovn.kubernetes.io/cidr": "100.64.0.0/16",
                                     "ovn.kubernetes.io/gateway": "100.64.0.1",
                                     "ovn.kubernetes.io/ip_address": f"100.64.{i >> 8}.{i & 255}",
                                     "ovn.kubernetes.io/logical_switch": "join",
                                     "ovn.kubernetes.io/mac_address": f"00:00:00:11:{i >> 8:02x}:{i & 255:02x}",
                                     "ovn.kubernetes.io/port_name": f"node-{name}",
                                     "node.alpha.kubernetes.io/ttl": "0",
                                     "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
                     "managedFields": _managed("kubelet", {"f:status": {"f:conditions": {}, "f:images": {},
                                                                       "f:nodeInfo": {}, "f:allocatable": {}}})},
        "spec": {"podCIDR": f"10.244.{i & 255}.0/24", "podCIDRs": [f"10.244.{i & 255}.0/24"],
                 "providerID": f"proxmox://{i:08x}-0000-0000-0000-000000000000"},
        "status": {
            "addresses": [{"type": "InternalIP", "address": f"192.168.{i >> 8}.{i & 255}"},
                          {"type": "Hostname", "address": name}],
            "allocatable": {"cpu": "31800m", "ephemeral-storage": "95491281146", "hugepages-2Mi": "0",
                            "memory": "131427328Ki", "pods": "110"},
            "capacity": {"cpu": "32", "ephemeral-storage": "103609120Ki", "hugepages-2Mi": "0",
                         "memory": "131529728Ki", "pods": "110"},
            "conditions": [{"type": t, "status": "False" if t != "Ready" else "True",
                            "lastHeartbeatTime": "2026-12-04T00:00:00Z", "lastTransitionTime": "2026-11-01T00:00:00Z",
                            "reason": f"Kubelet{t}", "message": f"kubelet reports {t}"}
                           for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": [{"names": [f"registry.example.io/platform/component-{k:02d}@sha256:{(i * 131 + k):064x}",
                                  f"registry.example.io/platform/component-{k:02d}:v1.{k}.0"],
                        "sizeBytes": 10_000_000 + k * 1_000_003} for k in range(40)],
            "nodeInfo": {"architecture": "amd64", "bootID": f"{i:032x}", "containerRuntimeVersion": "containerd://2.1.4",
                         "kernelVersion": "6.8.12-4-pve", "kubeProxyVersion": "", "kubeletVersion": "v1.34.1",
                         "machineID": f"{i:032x}", "operatingSystem": "linux", "osImage": "Talos (v1.11.2)",
                         "systemUUID": f"{i:08x}-0000-0000-0000-000000000000"}}})


def namespace(i: int) -> dict[str, Any]:
    name = f"tenant-{i:05d}"
    labels = {"kubernetes.io/metadata.name": name, "tenant.cozystack.io/name": name,
              "cozystack.io/system": "false", "pod-security.kubernetes.io/enforce": "baseline",
              "namespace.cozystack.io/host": f"{name}.example.io"}
    applied = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    return _fresh({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "uid": f"20000000-0000-4000-8000-{i:012d}", "resourceVersion": str(300000 + i),
                     "creationTimestamp": "2026-10-01T00:00:00Z", "labels": labels,
                     "annotations": {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied),
                                     "ovn.kubernetes.io/cidr": "10.244.0.0/16",
                                     "ovn.kubernetes.io/logical_switch": "ovn-default",
                                     "ovn.kubernetes.io/exclude_ips": "10.244.0.1"},
                     "managedFields": _managed("kubectl-client-side-apply", {"f:metadata": {"f:labels": {}}})},
        "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})


def _ref(pool: str) -> dict[str, str]:
    return {"apiGroup": IPAM, "kind": "InClusterIPPool", "name": pool}


def ip_address(i: int, ns: str, pool: str) -> dict[str, Any]:
    claim = f"machine-{i:05d}-net0-inet"
    return _fresh({
        "apiVersion": f"{IPAM}/v1beta1", "kind": "IPAddress",
        "metadata": {"name": claim, "namespace": ns, "uid": f"30000000-0000-4000-8000-{i:012d}",
                     "resourceVersion": str(400000 + i), "creationTimestamp": "2026-12-01T00:00:00Z",
                     "finalizers": [f"{IPAM}/ProtectAddress"],
                     "labels": {"cluster.x-k8s.io/cluster-name": f"cluster-{i % 50}",
                                f"{IPAM}/ip-pool-name": pool},
                     "ownerReferences": [
                         {"apiVersion": f"{IPAM}/v1beta1", "kind": "IPAddressClaim", "name": claim,
                          "uid": f"40000000-0000-4000-8000-{i:012d}", "controller": True, "blockOwnerDeletion": True},
                         {"apiVersion": f"{IPAM}/v1alpha2", "kind": "InClusterIPPool", "name": pool,
                          "uid": "50000000-0000-4000-8000-000000000000", "blockOwnerDeletion": True}],
                     "managedFields": _managed("cluster-api-ipam-provider-in-cluster", {"f:spec": {}})},
        "spec": {"address": f"10.{(i >> 8) & 255}.{i & 255}.10", "prefix": 24, "gateway": f"10.{(i >> 8) & 255}.0.1",
                 "claimRef": {"name": claim}, "poolRef": _ref(pool)}})


def ip_address_claim(i: int, ns: str, pool: str) -> dict[str, Any]:
    claim = f"machine-{i:05d}-net0-inet"
    return _fresh({
        "apiVersion": f"{IPAM}/v1beta1", "kind": "IPAddressClaim",
        "metadata": {"name": claim, "namespace": ns, "uid": f"40000000-0000-4000-8000-{i:012d}",
                     "resourceVersion": str(500000 + i), "creationTimestamp": "2026-12-01T00:00:00Z",
                     "finalizers": [f"{IPAM}/ReleaseAddress"],
                     "labels": {"cluster.x-k8s.io/cluster-name": f"cluster-{i % 50}"},
                     "ownerReferences": [{"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                                          "kind": "ProxmoxMachine", "name": f"machine-{i:05d}",
                                          "uid": f"60000000-0000-4000-8000-{i:012d}", "controller": True,
                                          "blockOwnerDeletion": True}],
                     "managedFields": _managed("capmox", {"f:spec": {}})},
        "spec": {"poolRef": _ref(pool)},
        "status": {"addressRef": {"name": claim},
                   "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T00:00:01Z"}]}})


def proxmox_machine(i: int, ns: str, pool: str, version: str = "v1alpha1") -> dict[str, Any]:
    name = f"machine-{i:05d}"
    if version == "v1alpha1":
        network = {"default": {"bridge": "vmbr1", "vlan": 1000 + i % 3000, "model": "virtio", "ipv4PoolRef": _ref(pool),
                               "dnsServers": ["10.0.0.53"]}}
    else:
        network = {"networkDevices": [{"name": "net0", "bridge": "vmbr1", "vlan": 1000 + i % 3000, "model": "virtio",
                                       "ipPoolRef": [_ref(pool)], "dnsServers": ["10.0.0.53"]}]}
    return _fresh({
        "apiVersion": f"infrastructure.cluster.x-k8s.io/{version}", "kind": "ProxmoxMachine",
        "metadata": {"name": name, "namespace": ns, "uid": f"60000000-0000-4000-8000-{i:012d}",
                     "resourceVersion": str(600000 + i), "creationTimestamp": "2026-12-01T00:00:00Z",
                     "finalizers": ["proxmoxmachine.infrastructure.cluster.x-k8s.io"],
                     "labels": {"cluster.x-k8s.io/cluster-name": f"cluster-{i % 50}",
                                "cluster.x-k8s.io/deployment-name": f"cluster-{i % 50}-md-0",
                                "cluster.x-k8s.io/set-name": f"cluster-{i % 50}-md-0-x7k2p"},
                     "annotations": {"cluster.x-k8s.io/cloned-from-name": f"cluster-{i % 50}-md-0",
                                     "cluster.x-k8s.io/cloned-from-groupkind": "ProxmoxMachineTemplate.infrastructure"},
                     "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine", "name": name,
                                          "uid": f"70000000-0000-4000-8000-{i:012d}", "controller": True}],
                     "managedFields": _managed("manager", {"f:spec": {}, "f:status": {}})},
        "spec": {"sourceNode": f"pve{i % 5}", "templateID": 9000, "format": "qcow2", "full": True,
                 "numSockets": 2, "numCores": 4, "memoryMiB": 8192, "providerID": f"proxmox://{i:08x}",
                 "virtualMachineID": 1000 + i,
                 "disks": {"bootVolume": {"disk": "scsi0", "sizeGb": 60}},
                 "checks": {"skipCloudInitStatus": False, "skipQemuGuestAgent": False},
                 "network": network},
        "status": {"ready": True, "vmStatus": "ready", "bootstrapDataProvided": True,
                   "addresses": [{"type": "Hostname", "address": name},
                                 {"type": "InternalIP", "address": f"10.{(i >> 8) & 255}.{i & 255}.10"}],
                   "ipAddresses": {"net0": {"ipv4": f"10.{(i >> 8) & 255}.{i & 255}.10"}},
                   "proxmoxNode": f"pve{i % 5}",
                   "conditions": [{"type": t, "status": "True", "lastTransitionTime": "2026-12-01T00:05:00Z"}
                                  for t in ("Ready", "VMProvisioned")]}})


def kube_ovn_subnet(i: int, vpc: str, namespaces: list[str]) -> dict[str, Any]:
    """A tenant Subnet of a custom VPC as Kube-OVN v1.15 serves it once Ready
    (pkg/apis/kubeovn/v1/subnet.go; defaults of pkg/controller/subnet.go ``formatSubnet``)."""
    name = f"subnet-{i:05d}"
    prefix = f"10.{64 + (i >> 8)}.{i & 255}"
    return _fresh({
        "apiVersion": "kubeovn.io/v1", "kind": "Subnet",
        "metadata": {"name": name, "uid": f"80000000-0000-4000-8000-{i:012d}", "resourceVersion": str(700000 + i),
                     "generation": 2, "creationTimestamp": "2026-11-15T00:00:00Z",
                     "finalizers": ["kubeovn.io/kube-ovn-controller"],
                     "labels": {"app.kubernetes.io/managed-by": "Helm", "cozystack.io/subnetName": f"net-{i % 7}"},
                     "annotations": {"meta.helm.sh/release-name": "tenant", "meta.helm.sh/release-namespace": namespaces[0]},
                     "managedFields": _managed("helm", {"f:spec": {}})},
        "spec": {"vpc": vpc, "default": False, "protocol": "IPv4", "cidrBlock": f"{prefix}.0/24",
                 "gateway": f"{prefix}.1", "excludeIps": [f"{prefix}.1"], "provider": "ovn",
                 "gatewayType": "distributed", "gatewayNode": "", "natOutgoing": False, "private": False,
                 "enableLb": True, "enableDHCP": False, "enableIPv6RA": False, "logicalGateway": False,
                 "disableGatewayCheck": False, "disableInterConnection": False, "u2oInterconnection": False,
                 "enableMulticastSnoop": False, "namespaces": namespaces, "mtu": 1400},
        "status": {"v4availableIPs": 200, "v4usingIPs": 53, "v4availableIPrange": f"{prefix}.55-{prefix}.254",
                   "v4usingIPrange": f"{prefix}.2-{prefix}.54", "v6availableIPs": 0, "v6usingIPs": 0,
                   "activateGateway": "", "dhcpV4OptionsUUID": "", "dhcpV6OptionsUUID": "",
                   "u2oInterconnectionIP": "", "u2oInterconnectionMAC": "", "u2oInterconnectionVPC": "",
                   "natOutgoingPolicyRules": None,
                   "conditions": [{"type": t, "status": "True", "reason": "ResetLogicalSwitchAclSuccess" if t == "Ready"
                                   else "ValidatedSubnet", "message": "", "lastUpdateTime": "2026-11-15T00:00:05Z",
                                   "lastTransitionTime": "2026-11-15T00:00:05Z"} for t in ("Validated", "Ready")]}})
