"""Egress-gateway pods on the real chain (issue 24 item 4; reference-behaviour.md §12).

The VpcEgressGateway is Kube-OVN v1.15.24's own: the real kube-ovn-controller makes its
Deployment (``<prefix><name>``, labelled ``ovn.kubernetes.io/vpc-egress-gateway: <name>``,
owned by the gateway without ``controller: true``), the bed's kube-controller-manager its
ReplicaSet and Pod, and kube-scheduler binds the Pod to the bed's node. The Pod never runs:
its image is not pullable here and the node has no Kube-OVN CNI or Multus, which is all the
controller needs to decide (it reads ownership, not the pod's state). What Kube-OVN needs
first: the VPC, the internal Subnet, an external Subnet whose provider names a
NetworkAttachmentDefinition (``<nad>.<namespace>``; its CRD is a fixture, no Multus is served
here) and an image in the gateway's spec.

* a gateway rendered for its own VPC (label ``cozystack.io/vpcId`` equal to ``spec.vpc``):
  the controller turns port security off on its Pod;
* a gateway of the same tenant whose label names another VPC, and one without the label:
  the real chain holds up to the gateway, which the check refuses; their Pods are left alone.

The forged chains (a Pod of a StatefulSet, another owner, a UID that does not match) are in
tests/test_egress_integration.py: they are Pods a tenant writes by hand, not what Kube-OVN makes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from controller.reconcile.egress import LABEL_GATEWAY
from hack.bed import LocalCluster
from hack.tools.objects import Admin, unique
from hack.tools.wait import wait_for
from tests.support.beds import admin_of
from tests.support.controller import running_controller
from tests.support.nodebed import node_bed
from tests.support.peers import KUBEOVN, make_vpc

pytestmark = pytest.mark.integration

ANN = "ovn.kubernetes.io/port_security"
VPC_ID = "cozystack.io/vpcId"
WAIT = 90.0


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from node_bed(tmp_path_factory.mktemp("egress"), with_peers=True)


@pytest.fixture(scope="module")
def admin(bed: LocalCluster) -> Iterator[Admin]:
    yield from admin_of(bed)


class Tenant:
    """A tenant namespace with its VPC, internal Subnet, and an external Subnet on a
    NetworkAttachmentDefinition, as the tenant's vpc chart renders them."""

    def __init__(self, admin: Admin) -> None:
        self.a = admin
        self.ns = unique("tenant")
        admin.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=self.ns)))
        self.vpc = unique("vpc")
        make_vpc(admin, self.vpc)
        self.internal, self.external, self.nad = unique("int"), unique("ext"), "egress-attach"
        admin.co.create_namespaced_custom_object("k8s.cni.cncf.io", "v1", self.ns, "network-attachment-definitions", {
            "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": self.nad, "namespace": self.ns},
            "spec": {"config": json.dumps({"cniVersion": "0.3.1", "type": "macvlan", "master": "eth1",
                                           "ipam": {"type": "kube-ovn", "provider": f"{self.nad}.{self.ns}"}})}})
        for name, spec in ((self.internal, {"vpc": self.vpc, "cidrBlock": "10.77.0.0/24", "gateway": "10.77.0.1",
                                            "protocol": "IPv4", "namespaces": [self.ns]}),
                           (self.external, {"cidrBlock": "198.18.77.0/24", "gateway": "198.18.77.1",
                                            "protocol": "IPv4", "provider": f"{self.nad}.{self.ns}"})):
            admin.co.create_cluster_custom_object(*KUBEOVN, "subnets", {
                "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": name}, "spec": spec})

    def gateway(self, name: str, vpc_label: str | None) -> None:
        labels = {VPC_ID: vpc_label} if vpc_label is not None else {}
        self.a.co.create_namespaced_custom_object(*KUBEOVN, self.ns, "vpc-egress-gateways", {
            "apiVersion": "kubeovn.io/v1", "kind": "VpcEgressGateway",
            "metadata": {"name": name, "namespace": self.ns, "labels": labels},
            "spec": {"vpc": self.vpc, "replicas": 1, "internalSubnet": self.internal,
                     "externalSubnet": self.external, "image": "registry.invalid/vpc-egress-gateway:not-pulled",
                     "policies": [{"snat": True, "ipBlocks": ["10.77.0.0/24"]}]}})

    def pod_of(self, gateway: str) -> k8s.V1Pod:
        """The gateway's Pod, once kube-controller-manager has made it and kube-scheduler bound it."""
        def bound() -> k8s.V1Pod | None:
            pods = self.a.core.list_namespaced_pod(self.ns, label_selector=f"{LABEL_GATEWAY}={gateway}").items
            return pods[0] if len(pods) == 1 and pods[0].spec.node_name else None
        return wait_for(bound, timeout=WAIT, what=f"the Pod of VpcEgressGateway {gateway} bound to a node")


def test_port_security_off_only_on_the_pod_of_kube_ovns_real_gateway_for_its_own_vpc(bed, admin):
    t = Tenant(admin)
    with running_controller(bed) as ctl:
        t.gateway("gw-own", vpc_label=t.vpc)
        t.gateway("gw-other-vpc", vpc_label="vpc-of-someone-else")
        t.gateway("gw-unlabelled", vpc_label=None)
        pods = {name: t.pod_of(name) for name in ("gw-own", "gw-other-vpc", "gw-unlabelled")}

        # The chain as the real peers made it: Pod -> ReplicaSet -> Deployment -> VpcEgressGateway.
        own = pods["gw-own"]
        (rs_ref,) = own.metadata.owner_references
        assert (rs_ref.kind, rs_ref.api_version, rs_ref.controller) == ("ReplicaSet", "apps/v1", True)
        rs = k8s.AppsV1Api(admin.api_client).read_namespaced_replica_set(rs_ref.name, t.ns)
        (dep_ref,) = rs.metadata.owner_references
        assert (dep_ref.kind, dep_ref.name, dep_ref.controller) == ("Deployment", "gw-own", True)
        dep = k8s.AppsV1Api(admin.api_client).read_namespaced_deployment("gw-own", t.ns)
        (gw_ref,) = dep.metadata.owner_references
        gw = admin.co.get_namespaced_custom_object(*KUBEOVN, t.ns, "vpc-egress-gateways", "gw-own")
        assert (gw_ref.kind, gw_ref.api_version, gw_ref.name, gw_ref.uid) == (
            "VpcEgressGateway", "kubeovn.io/v1", "gw-own", gw["metadata"]["uid"])
        assert not gw_ref.controller  # Kube-OVN's SetOwnerReference: no controller flag (§12 does not ask for one)
        assert own.metadata.labels[LABEL_GATEWAY] == "gw-own"

        def annotation(pod: k8s.V1Pod) -> str | None:
            fresh = admin.core.read_namespaced_pod(pod.metadata.name, t.ns)
            return (fresh.metadata.annotations or {}).get(ANN)

        wait_for(lambda: annotation(own) == "false", timeout=WAIT, what="port security off on the real gateway's Pod")
        done = ctl.resyncs_completed
        ctl.enqueue_all()
        wait_for(lambda: ctl.resyncs_completed > done, timeout=WAIT, what="a full resync")
        assert annotation(pods["gw-other-vpc"]) is None
        assert annotation(pods["gw-unlabelled"]) is None
        # They never ran: the image is not pullable and the node has no Kube-OVN CNI.
        phase = admin.core.read_namespaced_pod(own.metadata.name, t.ns).status.phase
        assert phase == "Pending", phase
