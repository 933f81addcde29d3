"""Issue 15's field reports against the real API server, with a controller restart in the
middle where the issue asks for one (items 2 and 4; item 5 is tests/test_reuse_delay_integration.py).

Expected values: product-decisions.md §8 ("The allocation record is the network's
status.vlan", "Holders are named", "Oldest claimant wins", "We delete only what we own",
"A 422 on an object built from the user's spec"), and docs/runbook.md's text for
the new reasons. The bed is the plain one (kube-apiserver + etcd; the IPAM and capmox CRDs
from tests/fixtures): networks have no Subnet, so they stop at VLANAllocated, which is all
these rules touch.
"""

from __future__ import annotations

import datetime as dt

import pytest
from kubernetes.client.rest import ApiException

from controller import names
from controller.watch.keys import NetworkKey
from controller.runtime.kube import ApiError
from controller.rfc3339 import parse
from hack.tools.objects import PX, Admin, reason, unique, wait_condition
from hack.tools.wait import wait_for
from tests.support.controller import running_controller

pytestmark = pytest.mark.integration

KUBEOVN = ("kubeovn.io", "v1")
IPAM = ("ipam.cluster.x-k8s.io", "v1beta1")


def gone(admin: Admin, ns: str, name: str) -> bool:
    try:
        admin.network(ns, name)
    except ApiException as exc:
        return exc.status == 404
    return False


class Bed:
    """A zone of its own (range ``first``..``first``+9) on a provider of its own."""

    def __init__(self, admin: Admin, ns: str, first: int) -> None:
        self.a, self.ns = admin, ns
        self.provider, self.zone = unique("pn")[:12], unique("zone")
        admin.create_provider_network(self.provider)
        admin.create_zone(self.zone, self.provider, [f"{first}-{first + 9}"])

    def network(self, name: str, subnet: str | None = None) -> str:
        sub = subnet or unique("sub")
        self.a.create_network(self.ns, name, self.zone, sub)
        return sub

    def wait(self, name: str, expected: str, ctype: str = "VLANAllocated") -> dict:
        return wait_condition(self.a, self.ns, name, ctype, expected, 40)

    def events(self, reason_: str) -> list[dict]:
        return [e for e in self.a.core.list_namespaced_event(self.ns).to_dict()["items"] if e["reason"] == reason_]

    def annotation(self) -> str:
        ns = self.a.core.read_namespace(self.ns)
        return (ns.metadata.annotations or {}).get(names.ANNOTATION_NAMESPACE_NETWORKS, "")


def test_a_vlan_id_changed_by_hand_is_never_followed_and_both_ids_stay_used(admin_client, cluster, unique_namespace):
    admin = Admin(admin_client)
    bed = Bed(admin, unique_namespace, 1400)
    with running_controller(cluster) as mgr:
        sub = bed.network("a")
        assert bed.wait("a", "Allocated")["status"]["vlan"] == 1400
        wait_for(lambda: "/1400/" in bed.annotation(), timeout=30, what="the allow-list lists 1400")
        admin.co.patch_cluster_custom_object(*KUBEOVN, "vlans", sub, {"spec": {"id": 1405}})
        obj = bed.wait("a", "VLANChangedExternally")
        msg = (f'Vlan "{sub}" was changed to VLAN 1405 by someone else, but VLAN 1400 was allocated to this network '
               f'and its VMs still use it; put spec.id of Vlan "{sub}" back to 1400, or accept VLAN 1405 by annotating '
               'this network proxmox.cozystack.io/accept-vlan-id="1405"')
        assert reason(obj, "VLANAllocated") == ("False", "VLANChangedExternally", msg)
        assert reason(obj, "Ready") == ("False", "VLANChangedExternally", msg)
        assert obj["status"]["vlan"] == 1400
        assert admin.vlan(sub)["spec"]["id"] == 1405  # never written back
        wait_for(lambda: bed.events("VLANChangedExternally"), timeout=30, what="the Warning Event")
        assert bed.events("VLANChangedExternally")[0]["type"] == "Warning"
        wait_for(lambda: mgr.metrics.network_vlan_changed.labels(unique_namespace, "a")._value.get() == 1,
                 timeout=30, what="the gauge of changed Vlan IDs")
        assert "/1400/" in bed.annotation() and "/1405/" not in bed.annotation()
    # A restart changes nothing: the record is in the cluster.
    with running_controller(cluster):
        bed.network("b")
        assert bed.wait("b", "Allocated")["status"]["vlan"] == 1401  # neither 1400 nor 1405 ...
        for i, want in ((2, 1402), (3, 1403), (4, 1404), (5, 1406)):  # ... and 1405 is skipped too
            bed.network(f"n{i}")
            assert bed.wait(f"n{i}", "Allocated")["status"]["vlan"] == want
        obj = admin.network(unique_namespace, "a")
        assert reason(obj, "VLANAllocated")[1] == "VLANChangedExternally" and obj["status"]["vlan"] == 1400
        # The operator accepts the new ID: the record and the allow-list follow, 1400 is free.
        admin.co.patch_namespaced_custom_object(*PX, unique_namespace, "proxmoxnetworks", "a", {
            "metadata": {"annotations": {names.ANNOTATION_ACCEPT_VLAN_ID: "1405"}}})
        obj = bed.wait("a", "Allocated")
        assert obj["status"]["vlan"] == 1405
        wait_for(lambda: "/1405/" in bed.annotation() and "/1400/" not in bed.annotation(), timeout=30,
                 what="the allow-list follows")
        bed.network("c")
        assert bed.wait("c", "Allocated")["status"]["vlan"] == 1400


def _claim(ns: str, name: str, pool: str, **meta) -> dict:
    return {"apiVersion": f"{IPAM[0]}/{IPAM[1]}", "kind": "IPAddressClaim",
            "metadata": {"name": name, "namespace": ns, **meta},
            "spec": {"poolRef": {"apiGroup": IPAM[0], "kind": "InClusterIPPool", "name": pool}}}


def test_in_use_names_a_claim_stuck_terminating_across_a_restart(admin_client, cluster, unique_namespace):
    # cluster-api-ipam-provider-in-cluster PR #317: a claim stuck Terminating on a finalizer
    # whose owner is gone.
    admin, ns = Admin(admin_client), unique_namespace
    bed = Bed(admin, ns, 1420)
    fin = "ipam.cluster.x-k8s.io/ReleaseAddress"
    owner = [{"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "ProxmoxMachine", "name": "vm-0",
              "uid": "00000000-0000-0000-0000-000000000001"}]
    admin.co.create_namespaced_custom_object(*IPAM, ns, "ipaddressclaims",
                                             _claim(ns, "vm-0-eth0", "pool", finalizers=[fin], ownerReferences=owner))
    admin.co.delete_namespaced_custom_object(*IPAM, ns, "ipaddressclaims", "vm-0-eth0")
    since = admin.co.get_namespaced_custom_object(*IPAM, ns, "ipaddressclaims", "vm-0-eth0")["metadata"][
        "deletionTimestamp"]
    held = (f'0 address(es) of pool "pool" are allocated and 0 ProxmoxMachine(s) reference it; 0 IPAddress(es) and '
            f"1 IPAddressClaim(s) name the pool; held by IPAddressClaim vm-0-eth0 (deleting since {since} on finalizer "
            f"{fin}; owner ProxmoxMachine vm-0 not found; no IPAddress); VLAN 1420 and subnet \"{{sub}}\" are kept "
            "until they are gone")
    try:
        with running_controller(cluster) as mgr:
            sub = bed.network("a")
            bed.wait("a", "Allocated")
            admin.co.delete_namespaced_custom_object(*PX, ns, "proxmoxnetworks", "a")
            obj = bed.wait("a", "InUse", ctype="Ready")
            assert reason(obj, "Ready") == ("False", "InUse", held.format(sub=sub))
            wait_for(lambda: mgr.metrics.network_stuck_holders.labels(ns, "a")._value.get() == 1, timeout=30,
                     what="the gauge of stuck holders")
        with running_controller(cluster) as mgr:
            mgr.enqueue_all()
            wait_for(lambda: mgr.metrics.network_stuck_holders.labels(ns, "a")._value.get() == 1, timeout=30,
                     what="the gauge after the restart")
            assert reason(admin.network(ns, "a"), "Ready") == ("False", "InUse", held.format(sub=sub))
            # The claim goes: the network is released.
            admin.strip_finalizers(*IPAM, "ipaddressclaims", "vm-0-eth0", ns)

            wait_for(lambda: gone(admin, ns, "a"), timeout=60, what="the network released")
    finally:
        try:
            admin.strip_finalizers(*IPAM, "ipaddressclaims", "vm-0-eth0", ns)
        except ApiError:  # gone already
            pass


def test_a_subnet_name_the_api_server_would_refuse_is_a_condition(admin_client, cluster, unique_namespace):
    admin = Admin(admin_client)
    bed = Bed(admin, unique_namespace, 1440)
    long = "s" * 300
    with running_controller(cluster) as mgr:
        bed.network("long", long)
        obj = bed.wait("long", "SubnetNameInvalid")
        assert reason(obj, "VLANAllocated") == (
            "False", "SubnetNameInvalid",
            f'spec.subnet "{"s" * 64}..." cannot name a Kube-OVN Vlan or Subnet: must be no more than 253 characters '
            "(it has 300); spec.subnet is immutable: recreate the network with the name of the Kube-OVN Subnet")
        assert names.FINALIZER in obj["metadata"]["finalizers"]
        rv, passes = obj["metadata"]["resourceVersion"], mgr.resyncs_completed
        mgr.enqueue_all()
        wait_for(lambda: mgr.resyncs_completed > passes, timeout=30, what="a full resync")
        # No retry loop: a pass over it writes nothing, and no Vlan was ever asked for.
        assert admin.network(unique_namespace, "long")["metadata"]["resourceVersion"] == rv
        assert mgr.network_controller.queue.num_requeues(NetworkKey(unique_namespace, "long")) == 0
        # spec.subnet is immutable: the way out is a delete, which goes at once (nothing was made).
        admin.co.delete_namespaced_custom_object(*PX, unique_namespace, "proxmoxnetworks", "long")

        wait_for(lambda: gone(admin, unique_namespace, "long"), timeout=40, what="the network deleted")


def test_the_oldest_network_naming_a_subnet_keeps_it_whatever_the_order(admin_client, cluster, unique_namespace):
    admin, ns = Admin(admin_client), unique_namespace
    bed = Bed(admin, ns, 1460)
    sub = unique("sub")
    # Both exist before any controller runs; the newer one sorts first by name.
    bed.network("z-older", sub)
    created = parse(admin.network(ns, "z-older")["metadata"]["creationTimestamp"])
    # creationTimestamp has second precision: the newer one must be created a second later.
    wait_for(lambda: dt.datetime.now(dt.timezone.utc).replace(microsecond=0) > created, what="the next second")
    bed.network("a-newer", sub)
    older = admin.network(ns, "z-older")
    with running_controller(cluster):
        assert bed.wait("z-older", "Allocated")["status"]["vlan"] == 1460
        obj = bed.wait("a-newer", "VLANNameTaken")
        assert reason(obj, "VLANAllocated")[2] in (
            f'Subnet "{sub}" is claimed by network {ns}/z-older, created first '
            f'({older["metadata"]["creationTimestamp"]}); one Subnet extends to one network',
            f'Kube-OVN Vlan "{sub}" exists and belongs to {ns}/z-older')
        assert admin.vlan(sub)["metadata"]["labels"][names.LABEL_NETWORK_NAME] == "z-older"


def test_a_vlan_the_network_refused_is_left_alone_when_it_is_deleted(admin_client, cluster, unique_namespace):
    admin, ns = Admin(admin_client), unique_namespace
    bed = Bed(admin, ns, 1480)
    sub = unique("sub")
    other = unique("pn")[:12]
    admin.create_provider_network(other)
    # A hand-made Vlan with our labels, on the wrong provider, without our finalizer.
    admin.create_vlan(sub, 1481, other, labels={names.LABEL_NETWORK_NAMESPACE: ns, names.LABEL_NETWORK_NAME: "a"})
    before = admin.vlan(sub)
    with running_controller(cluster):
        bed.network("a", sub)
        bed.wait("a", "VLANProviderMismatch")
        admin.co.delete_namespaced_custom_object(*PX, ns, "proxmoxnetworks", "a")

        wait_for(lambda: gone(admin, ns, "a"), timeout=40, what="the network deleted")
    after = admin.vlan(sub)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]  # never patched
    assert not after["metadata"].get("deletionTimestamp")
