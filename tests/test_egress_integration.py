"""Egress-gateway pods (reference-behaviour.md §12): port security goes off only at the end
of a verified ownership chain Pod -> ReplicaSet -> Deployment -> VpcEgressGateway.

Here every link is written by hand on a bed without peers (the real VpcEgressGateway CRD,
no Kube-OVN to act on it), so each one can be forged or broken: a Pod of a StatefulSet,
another owner, a UID that does not match. The chain Kube-OVN v1.15 and kube-controller-manager
really make is in tests/test_egress_real_integration.py."""

from __future__ import annotations

import pytest

from tests.support.controller import running_controller
from hack.tools.wait import wait_for

pytestmark = pytest.mark.integration

LABEL = "ovn.kubernetes.io/vpc-egress-gateway"
ANN = "ovn.kubernetes.io/port_security"


def chain(admin_client, ns: str, name: str, *, vpc_label: str | None = "vpc-a", rs_kind="ReplicaSet",
          owner_name: str | None = None, break_uid: bool = False) -> str:
    """Create a VpcEgressGateway, its Deployment, ReplicaSet and Pod (as Kube-OVN and the
    Deployment controller would); variations break one link. Returns the pod name."""
    from kubernetes import client

    co = client.CustomObjectsApi(admin_client)
    apps = client.AppsV1Api(admin_client)
    core = client.CoreV1Api(admin_client)
    labels = {"cozystack.io/vpcId": vpc_label} if vpc_label is not None else {}
    gw = co.create_namespaced_custom_object("kubeovn.io", "v1", ns, "vpc-egress-gateways", {
        "apiVersion": "kubeovn.io/v1", "kind": "VpcEgressGateway",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        # What the real CRD requires besides the VPC: the external Subnet and one policy.
        "spec": {"vpc": "vpc-a", "externalSubnet": "ext", "policies": [{"snat": True, "ipBlocks": ["10.0.0.0/24"]}]}})
    sel = {"matchLabels": {"app": name}}
    tmpl = {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "gw"}]}}
    dep = apps.create_namespaced_deployment(ns, {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "ownerReferences": [{
            "apiVersion": "kubeovn.io/v1", "kind": "VpcEgressGateway", "name": owner_name or name,
            "uid": gw["metadata"]["uid"]}]},
        "spec": {"selector": sel, "template": tmpl}})
    rs = apps.create_namespaced_replica_set(ns, {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": f"{name}-rs", "namespace": ns, "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "Deployment", "name": name, "controller": True,
            "uid": "00000000-0000-0000-0000-000000000000" if break_uid else dep.metadata.uid}]},
        "spec": {"selector": sel, "template": tmpl}})
    pod = core.create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-pod", "namespace": ns, "labels": {LABEL: name, "app": name},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": rs_kind, "name": f"{name}-rs",
                                          "controller": True, "uid": rs.metadata.uid}]},
        "spec": {"containers": [{"name": "c", "image": "gw"}]}})
    return pod.metadata.name


def annotation(admin_client, ns, pod):
    from kubernetes import client

    return (client.CoreV1Api(admin_client).read_namespaced_pod(pod, ns).metadata.annotations or {}).get(ANN)


def test_port_security_only_at_the_end_of_a_verified_chain(admin_client, cluster, unique_namespace):
    ns = unique_namespace
    with running_controller(cluster) as ctl:
        bad = {
            "wrong-vpc-label": chain(admin_client, ns, "gw-wrong-vpc", vpc_label="vpc-b"),
            "no-vpc-label": chain(admin_client, ns, "gw-no-label", vpc_label=None),
            "not-a-replicaset": chain(admin_client, ns, "gw-statefulset", rs_kind="StatefulSet"),
            "other-owner": chain(admin_client, ns, "gw-other-owner", owner_name="someone-else"),
            "uid-mismatch": chain(admin_client, ns, "gw-uid", break_uid=True),
        }
        good = chain(admin_client, ns, "gw-good")
        wait_for(lambda: annotation(admin_client, ns, good) == "false", what="port security off on the real gateway")
        done = ctl.resyncs_completed
        ctl.enqueue_all()
        wait_for(lambda: ctl.resyncs_completed > done, what="resync complete")
        for why, pod in bad.items():
            assert annotation(admin_client, ns, pod) is None, why
