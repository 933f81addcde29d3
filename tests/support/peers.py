"""Helpers for tests that run next to the real peers (``LocalCluster(with_peers=True)``,
conftest ``peers_bed``): kube-ovn-controller v1.15.24 and the in-cluster IPAM provider v1.0.3.

* :class:`Ctl`: the controller under test (``running_controller``), which a test may stop
  and start again with the same options, and a full resync it awaits.
* :class:`Trunk`: one ProviderNetwork with trunk Nodes labelled ready on it (the real
  kube-ovn-controller rewrites the ProviderNetwork's status every 30 s from those labels)
  and carrying an ``ovn.kubernetes.io/chassis`` annotation, as the node agent and
  ovn-controller would leave them.
* :func:`make_vpc`: a Kube-OVN Vpc, awaited up (its router is in the NB).
* :func:`kube_ovn_ip`: a Kube-OVN ``IP`` in a Subnet, as Kube-OVN makes one for a pod; it
  counts in the Subnet's ``v4usingIPs`` and so holds Kube-OVN's finalizer.
* :func:`lose_subnet_delete`: "Kube-OVN lost the delete", made with the real process
  stopped: the Subnet goes while kube-ovn-controller is down (Kube-OVN's own finalizer, if
  it has one, stripped by hand as an operator would), so its switch stays in the NB and
  ``Vlan.status.subnets`` keeps the name (Kube-OVN prunes it only on the delete event).
* :func:`strip_kube_ovn_finalizer`: Kube-OVN's finalizer taken off a deleting Subnet by
  hand, as an operator does with a Subnet stuck on it (#4243), every other entry kept.
* :func:`restore_peers`: both peers run again, whatever a test did to them.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from controller import names
from controller.runtime.kube import KubeWriter
from hack.bed import ClusterError, LocalCluster, pid_state
from hack.tools.objects import Admin, unique
from ovn.planner import rendezvous_key, rendezvous_order
from tests.support.controller import running_controller
from hack.tools.wait import wait_for

KUBE_OVN = "kube-ovn-controller"
IPAM_PROVIDER = "ipam-provider"
KUBEOVN = ("kubeovn.io", "v1")
OURS = "proxmox.cozystack.io/network"
KUBE_OVN_FINALIZER = "kubeovn.io/kube-ovn-controller"  # Kube-OVN's util.KubeOVNControllerFinalizer
IPAM = "ipam.cluster.x-k8s.io"
POOL_V = "v1alpha2"
ADDRESS_V = "v1beta1"  # the newest version cluster-api v1.10's IPAddress/IPAddressClaim serve
WAIT = 60.0


class Ctl:
    """The controller under test, which a test may stop and start again (same options)."""

    def __init__(self, bed: LocalCluster, **options: Any) -> None:
        self.bed = bed
        self.options = options
        self._cm: Any = None
        self.mgr: Any = None

    def start(self) -> None:
        self._cm = running_controller(self.bed, **self.options)
        self.mgr = self._cm.__enter__()

    def stop(self) -> None:
        if self._cm is not None:
            cm, self._cm, self.mgr = self._cm, None, None
            cm.__exit__(None, None, None)

    def resync(self) -> None:
        """A full pass of every key, awaited (the controller reports it done)."""
        before = self.mgr.resyncs_completed
        self.mgr.enqueue_all()
        wait_for(lambda: self.mgr.resyncs_completed > before, timeout=WAIT, what="a full resync")


class Trunk:
    """A ProviderNetwork (name of at most 12 bytes, ``spec.defaultInterface``, as the real CRD
    wants) and trunk Nodes labelled ready on it, with their chassis annotation."""

    def __init__(self, admin: Admin, nodes: tuple[tuple[str, str], ...] = (("worker1", "ch-worker1"),
                                                                           ("worker2", "ch-worker2"))) -> None:
        self.a = admin
        self.nodes = nodes
        self.provider = unique("pn")
        admin.create_provider_network(self.provider, ready_nodes=[n for n, _ in nodes])
        for node, chassis in nodes:
            admin.core.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(
                name=node, labels={self.ready_label(self.provider): "true"},
                annotations={"ovn.kubernetes.io/chassis": chassis})))

    @staticmethod
    def ready_label(provider: str) -> str:
        return f"{provider}.provider-network.kubernetes.io/ready"

    def add_provider(self) -> str:
        """Another ProviderNetwork, ready on the same Nodes (the label the node agent sets)."""
        provider = unique("pn")
        self.a.create_provider_network(provider, ready_nodes=[n for n, _ in self.nodes])
        for node, _ in self.nodes:
            self.a.core.patch_node(node, {"metadata": {"labels": {self.ready_label(provider): "true"}}})
        return provider


def kube_get(admin: Admin, plural: str, name: str) -> dict | None:
    """A cluster-scoped Kube-OVN object, or None when it does not exist."""
    try:
        return admin.co.get_cluster_custom_object(*KUBEOVN, plural, name)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def make_vpc(admin: Admin, name: str) -> None:
    admin.co.create_cluster_custom_object(*KUBEOVN, "vpcs", {
        "apiVersion": "kubeovn.io/v1", "kind": "Vpc", "metadata": {"name": name}, "spec": {}})
    wait_for(lambda: ((kube_get(admin, "vpcs", name) or {}).get("status") or {}).get("standby"), timeout=WAIT,
             what=f"Vpc {name} up")


def vpc_homed_on(dp: Any, node: str, want: bool = True) -> str:
    """A fresh VPC name whose gateway chassis (the first of product-decisions.md §10's
    rendezvous order over ``dp``'s trunk nodes) is ``node`` (``want``) or is not.

    :raises AssertionError: no such name in 200 tries.
    """
    nodes = [ch.name for ch in dp.chassis]
    for _ in range(200):
        vpc = unique("vpc")
        if (rendezvous_order(rendezvous_key(vpc), nodes)[0] == node) == want:
            return vpc
    raise AssertionError(f"no VPC name homed {'on' if want else 'off'} {node} in 200 tries")


def kube_ovn_ip(admin: Admin, subnet: str, ns: str, pod: str, address: str, node: str = "worker1") -> str:
    """A Kube-OVN IP for pod ``ns/pod`` in ``subnet``; returns its name."""
    name = f"{pod}.{ns}"
    admin.co.create_cluster_custom_object(*KUBEOVN, "ips", {
        "apiVersion": "kubeovn.io/v1", "kind": "IP",
        "metadata": {"name": name, "labels": {subnet: "", "ovn.kubernetes.io/subnet": subnet}},
        "spec": {"podName": pod, "namespace": ns, "subnet": subnet, "nodeName": node,
                 "v4IpAddress": address, "macAddress": "00:00:00:12:34:56", "podType": ""}})
    return name


def subnet_finalizers(admin: Admin, subnet: str) -> list[str] | None:
    """The Subnet's finalizers; None once it is gone."""
    sub = kube_get(admin, "subnets", subnet)
    return None if sub is None else (sub["metadata"].get("finalizers") or [])


def kube_ovn_ready(admin: Admin, subnet: str) -> bool:
    conds = ((kube_get(admin, "subnets", subnet) or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def lose_subnet_delete(bed: LocalCluster, admin: Admin, subnet: str) -> None:
    """Delete ``subnet`` while kube-ovn-controller is stopped (it stays stopped; the caller
    starts it again): our finalizer comes off as the controller decides, Kube-OVN's own (if
    it put one on) is stripped by hand, as an operator would; returns once the Subnet is gone."""
    bed.stop_peer(KUBE_OVN)
    admin.co.delete_cluster_custom_object(*KUBEOVN, "subnets", subnet)

    def ours_off() -> list[str] | str | None:
        fins = subnet_finalizers(admin, subnet)
        if fins is None:
            return "gone"
        return fins if OURS not in fins else None  # [] (going now) waits on

    fins = wait_for(ours_off, timeout=WAIT, what=f"our finalizer off Subnet {subnet}")
    if fins != "gone":
        assert fins == [KUBE_OVN_FINALIZER], fins
        admin.strip_finalizers(*KUBEOVN, "subnets", subnet)
    wait_for(lambda: kube_get(admin, "subnets", subnet) is None, timeout=WAIT, what=f"Subnet {subnet} gone")


def strip_kube_ovn_finalizer(admin: Admin, subnet: str) -> None:
    """Remove Kube-OVN's finalizer from ``subnet`` (a guarded JSON patch of that entry only).
    On a deleting Subnet Kube-OVN v1.15 never adds it again (``handleSubnetFinalizer`` adds
    it only while ``deletionTimestamp`` is zero)."""
    sub = kube_get(admin, "subnets", subnet)
    assert sub is not None, f"Subnet {subnet} is gone"
    fins = sub["metadata"].get("finalizers") or []
    i = fins.index(KUBE_OVN_FINALIZER)
    path = f"/metadata/finalizers/{i}"
    KubeWriter(admin.api_client).json_patch(names.SUBNETS, subnet, [
        {"op": "test", "path": path, "value": KUBE_OVN_FINALIZER}, {"op": "remove", "path": path}])


def restore_peers(bed: LocalCluster) -> None:
    """Whatever a test did to the peers, both run again afterwards."""
    for peer in (KUBE_OVN, IPAM_PROVIDER):
        try:
            pid = bed.peer_pid(peer)
        except ClusterError:
            bed.start_peer(peer)
            continue
        if pid_state(pid) == "T":
            bed.resume_peer(peer)
