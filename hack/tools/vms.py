"""VMs as capmox makes them, on the bed's data plane (issue 25; hack/bed/dataplane.py).

capmox gives a Proxmox VM its NIC on a ProxmoxNetwork as follows, and so does
:func:`vm_for_network`: the NIC's bridge and VLAN ``tag=`` from the network's status
(``bridge``, ``vlan``), its address from an ``IPAddressClaim`` on the network's pool
(``spec.ipPool``), fulfilled here by the real in-cluster IPAM provider, and the gateway and
prefix from the ``IPAddress`` the provider writes (which takes them from the pool). The
VM is a namespace on a trunk access port with that tag (:meth:`DataPlane.add_vm`); every
trunk port is on the one trunk bridge, whatever the network's bridge name.

Pods of a Subnet are made as Kube-OVN makes them (:func:`pod_on_subnet`): the Pod object,
bound to a trunk Node, and its logical switch port ``<pod>.<namespace>`` with its address
by the real kube-ovn-controller; what kube-ovn-cni does on the node (the interface in
``br-int`` with ``iface-id``, the address inside the pod) is played by the bed
(:meth:`DataPlane.add_pod`), and the chassis' ovn-controller binds the port. Real pods
(:func:`real_pod`) run on a trunk node with a kubelet (hack/bed/trunk_kubelet.py): there
the scheduler places them and Kube-OVN's own agent plumbs their port.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from kubernetes.client import CustomObjectsApi
from kubernetes.client.rest import ApiException

from hack.bed import Chassis, DataPlane, Vm
from hack.bed.dataplane import POD_MTU, UNDERLAY_MTU
from hack.tools.wait import wait_for

IPAM = "ipam.cluster.x-k8s.io"
ADDRESS_V = "v1beta1"  # the newest version cluster-api v1.10's IPAddress/IPAddressClaim serve
PX = ("proxmox.cozystack.io", "v1alpha1")


def claim_address(co: Any, ns: str, pool: str, claim: str, timeout: float = 60.0) -> dict[str, Any]:
    """An ``IPAddressClaim`` named ``claim`` on InClusterIPPool ``pool`` in ``ns``, as capmox
    makes one per NIC; returns the ``IPAddress`` the provider made for it (its ``spec``:
    ``address``, ``prefix``, ``gateway``).

    :raises AssertionError: the provider has not fulfilled the claim within ``timeout`` seconds.
    """
    co.create_namespaced_custom_object(IPAM, ADDRESS_V, ns, "ipaddressclaims", {
        "apiVersion": f"{IPAM}/{ADDRESS_V}", "kind": "IPAddressClaim", "metadata": {"name": claim},
        "spec": {"poolRef": {"apiGroup": IPAM, "kind": "InClusterIPPool", "name": pool}}})

    def address() -> dict[str, Any] | None:
        try:
            return co.get_namespaced_custom_object(IPAM, ADDRESS_V, ns, "ipaddresses", claim)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    return wait_for(address, timeout=timeout, what=f"the provider's IPAddress for claim {ns}/{claim}")["spec"]


def vm_for_network(dp: DataPlane, co: Any, ns: str, network: str, name: str, timeout: float = 60.0) -> Vm:
    """A VM with one NIC on ProxmoxNetwork ``ns/network`` (which must show its VLAN in its
    status): the claim ``<name>-net0`` on the network's pool, the VM ``name`` on the trunk
    with the network's VLAN, its MTU (``status.mtu``, which capmox gives the NIC; none: the
    default) and the claimed address."""
    net = co.get_namespaced_custom_object(*PX, ns, "proxmoxnetworks", network)
    vlan = (net.get("status") or {}).get("vlan")
    if not isinstance(vlan, int) or not vlan:
        raise ValueError(f"network {ns}/{network} shows no VLAN in its status yet")
    spec = claim_address(co, ns, net["spec"]["ipPool"], f"{name}-net0", timeout)
    mtu = (net.get("status") or {}).get("mtu")
    return dp.add_vm(name, vlan, f"{spec['address']}/{spec['prefix']}", spec["gateway"],
                     mtu if isinstance(mtu, int) else None)


# Kube-OVN's pod annotations (its default provider "ovn").
LOGICAL_SWITCH = "ovn.kubernetes.io/logical_switch"
ALLOCATED = "ovn.kubernetes.io/allocated"


def kube_ovn_pod_mtu(subnet: dict[str, Any]) -> int:
    """The MTU kube-ovn-cni v1.15 gives a pod of ``subnet`` (pkg/daemon/handler.go): the
    Subnet's ``spec.mtu``; else, on a VLAN Subnet without ``logicalGateway``, its provider
    network's (the NIC's: the bed's :data:`UNDERLAY_MTU`); else the overlay's (:data:`POD_MTU`)."""
    spec = subnet.get("spec") or {}
    if isinstance(spec.get("mtu"), int) and spec["mtu"] > 0:
        return spec["mtu"]
    if spec.get("vlan") and not spec.get("logicalGateway") and not spec.get("u2oInterconnection"):
        return UNDERLAY_MTU
    return POD_MTU


def pod_on_subnet(dp: DataPlane, core: Any, ns: str, subnet: str, name: str, chassis: Chassis,
                  timeout: float = 60.0) -> Vm:
    """Pod ``ns/name`` on ``subnet`` (annotation ``ovn.kubernetes.io/logical_switch``), bound
    to ``chassis``' Node; once kube-ovn-controller has allocated its address (annotations
    ``allocated``, ``ip_address``, ``mac_address``, ``cidr``, ``gateway``), its network on
    the chassis at the MTU Kube-OVN gives it (:func:`kube_ovn_pod_mtu`). The Pod's container never runs (no kubelet on a trunk Node)."""
    core.create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {LOGICAL_SWITCH: subnet}},
        "spec": {"nodeName": chassis.name, "containers": [{"name": "c", "image": "registry.invalid/not-pulled:1"}]}})

    def allocated() -> dict[str, str] | None:
        ann = core.read_namespaced_pod(name, ns).metadata.annotations or {}
        return ann if ann.get(ALLOCATED) == "true" and ann.get("ovn.kubernetes.io/ip_address") else None

    ann = wait_for(allocated, timeout=timeout, what=f"Kube-OVN allocating pod {ns}/{name}")
    prefix = ann["ovn.kubernetes.io/cidr"].split("/")[1]
    sub = CustomObjectsApi(core.api_client).get_cluster_custom_object("kubeovn.io", "v1", "subnets", subnet)
    return dp.add_pod(name, chassis, f"{name}.{ns}", ann["ovn.kubernetes.io/mac_address"],
                      f"{ann['ovn.kubernetes.io/ip_address']}/{prefix}", ann["ovn.kubernetes.io/gateway"],
                      kube_ovn_pod_mtu(sub))


def real_pod(kubelet: Any, core: Any, ns: str, subnet: str, name: str, timeout: float = 90.0) -> Vm:
    """Pod ``ns/name`` on ``subnet`` (annotation ``ovn.kubernetes.io/logical_switch``) placed by
    the scheduler on the trunk node of ``kubelet`` (a :class:`~hack.bed.trunk_kubelet.TrunkKubelet`:
    its hostname label, tolerating the trunk taint): its address from kube-ovn-controller, its
    port from the node's own kube-ovn-daemon through Kube-OVN's CNI. Returns it once Ready,
    as a :class:`Vm` whose namespace is the pod's sandbox (its ``cni-…`` network namespace in
    that node's containerd, found by the pod's IP).

    :raises AssertionError: the pod is not Ready within ``timeout`` seconds (with its Events).
    """
    from hack.bed.trunk_kubelet import TRUNK_TOLERATION

    node = kubelet.node
    core.create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {LOGICAL_SWITCH: subnet}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node.name},
            "tolerations": [TRUNK_TOLERATION],
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": node.busybox_image, "imagePullPolicy": "Never",
                            "command": ["sleep", "100000"]}],
        }})

    def ready() -> Any:
        pod = core.read_namespaced_pod(name, ns)
        conds = {c.type: c.status for c in (pod.status.conditions or [])}
        return pod if conds.get("Ready") == "True" and pod.status.pod_ip else None

    try:
        pod = wait_for(ready, timeout=timeout, what=f"pod {ns}/{name} Ready on {node.name}")
    except AssertionError as e:
        events = [f"{ev.reason}: {ev.message}" for ev in core.list_namespaced_event(
            ns, field_selector=f"involvedObject.name={name}").items]
        raise AssertionError(f"{e}; events: {events[-3:]}") from e
    return pod_vm(kubelet, pod, timeout)


def pod_vm(kubelet: Any, pod: Any, timeout: float = 90.0) -> Vm:
    """A running pod of ``kubelet``'s node (a ``V1Pod`` with its IP) as a :class:`Vm` whose
    namespace is the pod's sandbox: the ``cni-…`` network namespace in that node's containerd
    whose ``eth0`` has the pod's IP.

    :raises AssertionError: no such namespace within ``timeout`` seconds.
    """
    node = kubelet.node
    ann = pod.metadata.annotations or {}
    ip = pod.status.pod_ip

    def sandbox() -> str | None:
        for path in node.sandbox_netns():
            netns = path.rsplit("/", 1)[1]
            out = subprocess.run(["ip", "-n", netns, "-j", "-4", "addr", "show", "eth0"], capture_output=True,
                                 text=True).stdout
            if any(a.get("local") == ip for link in json.loads(out or "[]") for a in link.get("addr_info", [])):
                return netns
        return None

    name = f"{pod.metadata.namespace}/{pod.metadata.name}"
    netns = wait_for(sandbox, timeout=timeout, what=f"the sandbox network namespace of pod {name}")
    prefix = ann["ovn.kubernetes.io/cidr"].split("/")[1]
    link = json.loads(subprocess.run(["ip", "-n", netns, "-j", "link", "show", "eth0"], capture_output=True,
                                     text=True, check=True).stdout)[0]
    return Vm(name=pod.metadata.name, ns=netns, port="", vlan=0, address=f"{ip}/{prefix}",
              gateway=ann["ovn.kubernetes.io/gateway"], mac=link["address"].lower())
