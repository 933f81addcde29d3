"""The field reports of ../shared/cases/field-reports.md (B03, B04, B14, B15) as tests,
with the Kube-OVN and IPAM emulators playing the peers (tests/emulators/).

Where a report's suggested behaviour differs from the spec, the spec's names and rules are
used (reasons ``SwitchDeleting``, ``SubnetDeleting``, ``InUse``; prune timers of
reference-behaviour.md §7), as the report file itself asks.
"""

from __future__ import annotations

import threading

import pytest

from controller.kube import KubeWriter
from informers import Resource
from tests.emulators.ipam import IpamEmulator
from tests.emulators.kubeovn import KubeOvnEmulator
from tests.support.controller import running_controller
from hack.objects import Admin, reason, unique, wait_condition
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration

FINALIZER = "proxmox.cozystack.io/network"
KUBEOVN = ("kubeovn.io", "v1")
IPAM = ("ipam.cluster.x-k8s.io", "v1alpha2")
PX = ("proxmox.cozystack.io", "v1alpha1")
SUBNETS = Resource("kubeovn.io", "v1", "subnets", namespaced=False)


@pytest.fixture
def admin(admin_client):
    return Admin(admin_client)


class Tenant:
    """A zone on its own provider and a namespace; a network with a real (emulated) Subnet
    and pool."""

    def __init__(self, admin: Admin, ns: str, ranges=("1300-1302",)) -> None:
        self.a = admin
        self.ns = ns
        self.provider = unique("pn")[:12]
        self.zone = unique("zone")
        admin.create_provider_network(self.provider)
        admin.create_zone(self.zone, self.provider, list(ranges))

    def network(self, name: str, third_octet: int) -> str:
        sub = unique(f"{name}")
        pool = f"{name}-pool"
        net24 = f"10.{third_octet}.0"
        self.a.create_network(self.ns, name, self.zone, sub, pool)
        self.a.co.create_cluster_custom_object(*KUBEOVN, "subnets", {
            "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": sub},
            "spec": {"vlan": sub, "vpc": "vpc-" + self.ns[-6:], "cidrBlock": f"{net24}.0/24", "gateway": f"{net24}.1",
                     "excludeIps": [f"{net24}.1", f"{net24}.100..{net24}.150"]}})
        self.a.co.create_namespaced_custom_object(*IPAM, self.ns, "inclusterippools", {
            "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
            "metadata": {"name": pool, "namespace": self.ns},
            "spec": {"addresses": [f"{net24}.100-{net24}.150"], "prefix": 24, "gateway": f"{net24}.1"}})
        return sub

    def wait(self, net: str, ctype: str, expected: str, timeout: float = 40) -> dict:
        return wait_condition(self.a, self.ns, net, ctype, expected, timeout)

    def delete(self, net: str) -> None:
        self.a.co.delete_namespaced_custom_object(*PX, self.ns, "proxmoxnetworks", net)

    def gone(self, net: str, timeout: float = 40) -> None:
        def check():
            try:
                self.a.network(self.ns, net)
            except Exception as exc:
                return getattr(exc, "status", None) == 404
            return False
        wait_for(check, timeout=timeout, what=f"{net} gone")

    def subnet(self, name: str) -> dict | None:
        items = self.a.co.list_cluster_custom_object(*KUBEOVN, "subnets", field_selector=f"metadata.name={name}")["items"]
        return items[0] if items else None


def test_b03_delete_lost_keeps_the_vlan_until_the_prune_timeout(admin, cluster, unique_namespace):
    """Kube-OVN lost the Subnet delete: the switch and localnet stay in the NB and
    Vlan.status.subnets is never pruned. The VLAN stays used (no other network gets it)
    until the prune timeout, then it is released with a Warning Event."""
    t = Tenant(admin, unique_namespace, ranges=("1300-1301",))
    timeout = 6.0
    with KubeOvnEmulator(cluster, delete_mode="lost"), IpamEmulator(cluster), \
            running_controller(cluster, subnet_prune_timeout=timeout) as ctl:
        sub = t.network("tenant-c", 31)
        obj = t.wait("tenant-c", "Ready", "Ready")
        vid = obj["status"]["vlan"]
        tag = cluster.nbctl("--bare", "--columns=tag", "find", "Logical_Switch_Port", f"name=localnet.{sub}").strip()
        assert tag == str(vid)

        t.delete("tenant-c")
        t.wait("tenant-c", "Ready", "SubnetStillExists")
        admin.co.delete_cluster_custom_object(*KUBEOVN, "subnets", sub)
        obj = t.wait("tenant-c", "Ready", "SwitchDeleting")
        assert t.subnet(sub) is None
        # The NB still has the localnet tagged with our VLAN, and the Vlan still lists the subnet.
        assert cluster.nbctl("--bare", "--columns=tag", "find", "Logical_Switch_Port", f"name=localnet.{sub}").strip() == str(vid)
        assert admin.vlan(sub)["status"]["subnets"] == [sub]

        # Another tenant asks for a VLAN now: it must not get the one still on the wire.
        other = t.network("tenant-d", 32)
        o = t.wait("tenant-d", "VLANAllocated", "Allocated")
        assert o["status"]["vlan"] != vid

        t.gone("tenant-c", timeout=timeout + 30)
        with pytest.raises(Exception) as exc:
            admin.vlan(sub)
        assert getattr(exc.value, "status", None) == 404
        ctl.events.flush()
        events = admin.core.list_namespaced_event(unique_namespace).items
        assert any(e.reason == "VLANReleasedAfterPruneTimeout" and e.type == "Warning" for e in events)
        # Clean up the second network's peers while the emulators run.
        t.delete("tenant-d")
        admin.co.delete_cluster_custom_object(*KUBEOVN, "subnets", other)


def test_b04_subnet_stuck_on_kube_ovns_finalizer(admin, cluster, unique_namespace):
    """Our Subnet finalizer comes off as soon as nothing of ours needs it; Kube-OVN's is
    never touched; the Vlan stays held while the Subnet object exists."""
    t = Tenant(admin, unique_namespace)
    with KubeOvnEmulator(cluster) as kovn, IpamEmulator(cluster), running_controller(cluster, subnet_prune_timeout=30):
        sub = t.network("tenant-e", 41)
        obj = t.wait("tenant-e", "Ready", "Ready")
        vid = obj["status"]["vlan"]
        kovn.set_using_ips(sub, 1)  # a leaked IP CR keeps kube-ovn-controller on
        t.delete("tenant-e")
        admin.co.delete_cluster_custom_object(*KUBEOVN, "subnets", sub)
        obj = t.wait("tenant-e", "Ready", "SubnetDeleting")
        assert reason(obj, "Ready")[2] == f'waiting for Kube-OVN to delete Subnet "{sub}" before VLAN {vid} is released'
        wait_for(lambda: (t.subnet(sub) or {}).get("metadata", {}).get("finalizers") == ["kube-ovn-controller"],
                 what="only Kube-OVN's finalizer left")
        assert admin.vlan(sub)["spec"]["id"] == vid  # held
        kovn.set_using_ips(sub, 0)
        t.gone("tenant-e")
        assert t.subnet(sub) is None


def test_b14_finalizer_edits_never_drop_or_readd_another_controllers_entry(admin, cluster, unique_namespace):
    """Another controller toggles its own finalizer on the Subnet while ours adds and, on
    deletion, removes ours: every edit is a guarded JSON patch, so the other entry's final
    state is exactly what its owner last wrote."""
    t = Tenant(admin, unique_namespace)
    other = KubeWriter(admin.api_client)
    sub = unique("tenant-m")
    admin.co.create_cluster_custom_object(*KUBEOVN, "subnets", {
        "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": sub, "finalizers": ["example.com/a"]},
        "spec": {"vlan": sub, "cidrBlock": "10.51.0.0/24", "gateway": "10.51.0.1", "excludeIps": ["10.51.0.1"]}})
    stop = threading.Event()
    state = {"b": False, "edits": 0}

    def toggler():
        # The other controller: add or remove "example.com/b", guarded by resourceVersion, retrying on conflict.
        while not stop.is_set() and state["edits"] < 60:
            cur = other.get(SUBNETS, sub)
            fins = cur["metadata"].get("finalizers") or []
            rv = cur["metadata"]["resourceVersion"]
            test = {"op": "test", "path": "/metadata/resourceVersion", "value": rv}
            try:
                if "example.com/b" in fins:
                    other.json_patch(SUBNETS, sub, [test, {"op": "remove", "path": f"/metadata/finalizers/{fins.index('example.com/b')}"}])
                    state["b"] = False
                else:
                    other.json_patch(SUBNETS, sub, [test, {"op": "add", "path": "/metadata/finalizers/-", "value": "example.com/b"}])
                    state["b"] = True
                state["edits"] += 1
            except Exception:
                continue

    th = threading.Thread(target=toggler)
    with running_controller(cluster):
        th.start()
        admin.create_network(t.ns, "tenant-m", t.zone, sub, "pool")
        t.wait("tenant-m", "VLANAllocated", "Allocated")
        wait_for(lambda: FINALIZER in (t.subnet(sub)["metadata"].get("finalizers") or []), what="our Subnet finalizer")
        th.join(timeout=60)
        stop.set()
        fins = t.subnet(sub)["metadata"]["finalizers"]
        assert "example.com/a" in fins and FINALIZER in fins
        assert ("example.com/b" in fins) == state["b"]
        assert state["edits"] > 0
        # Deletion: our entry comes off a Terminating Subnet, the others stay.
        t.delete("tenant-m")
        admin.co.delete_cluster_custom_object(*KUBEOVN, "subnets", sub)
        wait_for(lambda: FINALIZER not in (t.subnet(sub)["metadata"].get("finalizers") or []), what="ours removed")
        fins = t.subnet(sub)["metadata"]["finalizers"]
        assert "example.com/a" in fins and ("example.com/b" in fins) == state["b"]


def test_b14_no_finalizer_is_added_to_a_deleting_subnet(admin, cluster, unique_namespace):
    t = Tenant(admin, unique_namespace)
    sub = unique("dying")
    admin.co.create_cluster_custom_object(*KUBEOVN, "subnets", {
        "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": sub, "finalizers": ["kube-ovn-controller"]},
        "spec": {"vlan": sub, "cidrBlock": "10.52.0.0/24", "gateway": "10.52.0.1", "excludeIps": ["10.52.0.1"]}})
    admin.co.delete_cluster_custom_object(*KUBEOVN, "subnets", sub)
    with running_controller(cluster):
        admin.create_network(t.ns, "late", t.zone, sub, "pool")
        obj = t.wait("late", "SubnetReady", "SubnetNotReady")
        assert obj["status"]["cidr"] == "10.52.0.0/24"
        assert t.subnet(sub)["metadata"]["finalizers"] == ["kube-ovn-controller"]


def test_b15_pool_deleted_while_addresses_are_in_use(admin, cluster, unique_namespace):
    """The pool is deleted while a VM's address is still allocated: ProtectPool keeps it
    Terminating, the network stays InUse; nothing is released until the address is gone,
    and a paused address holds it even then."""
    t = Tenant(admin, unique_namespace)
    ns = t.ns
    with KubeOvnEmulator(cluster), IpamEmulator(cluster) as ipam, running_controller(cluster, subnet_prune_timeout=5):
        sub = t.network("tenant-n", 61)
        pool = "tenant-n-pool"
        t.wait("tenant-n", "Ready", "Ready")
        admin.co.create_namespaced_custom_object("ipam.cluster.x-k8s.io", "v1beta2", ns, "ipaddressclaims", {
            "apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
            "metadata": {"name": "pm-1-net1-inet", "namespace": ns},
            "spec": {"poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": pool}}})
        wait_for(lambda: ipam.pool_status(ns, pool) and ipam.pool_status(ns, pool)["used"] == 1, what="address allocated")
        admin.co.delete_namespaced_custom_object(*IPAM, ns, "inclusterippools", pool)
        t.delete("tenant-n")
        obj = t.wait("tenant-n", "Ready", "InUse")
        msg = reason(obj, "Ready")[2]
        assert "1 IPAddress(es) and 1 IPAddressClaim(s) name the pool" in msg
        assert admin.vlan(sub)["metadata"]["finalizers"] == [FINALIZER]
        # The address is paused (a clusterctl move): still nothing released once the claim goes.
        admin.co.patch_namespaced_custom_object("ipam.cluster.x-k8s.io", "v1beta2", ns, "ipaddresses", "pm-1-net1-inet",
                                                {"metadata": {"annotations": {"cluster.x-k8s.io/paused": ""}}})
        obj = wait_for(lambda: "cluster.x-k8s.io/paused" in reason(admin.network(ns, "tenant-n"), "Ready")[2]
                       and admin.network(ns, "tenant-n"), what="paused named")
        admin.co.patch_namespaced_custom_object("ipam.cluster.x-k8s.io", "v1beta2", ns, "ipaddresses", "pm-1-net1-inet",
                                                {"metadata": {"annotations": {"cluster.x-k8s.io/paused": None}}})
        admin.co.delete_namespaced_custom_object("ipam.cluster.x-k8s.io", "v1beta2", ns, "ipaddressclaims", "pm-1-net1-inet")
        # Address gone -> ProtectPool released by IPAM -> pool gone -> the Subnet is next.
        t.wait("tenant-n", "Ready", "SubnetStillExists")
        admin.co.delete_cluster_custom_object(*KUBEOVN, "subnets", sub)
        t.gone("tenant-n")


def test_b05_vpc_router_gone_before_its_subnets(admin, cluster, unique_namespace):
    """The VPC's router (and its ports) vanish before the Subnet: the lifecycle is not held
    by the missing router, and the controller never creates routers or router ports itself.
    (The GatewayReady/RouterPortMissing half of B05 belongs to the OVN gateway work.)"""
    t = Tenant(admin, unique_namespace)
    vpc = "vpc-" + t.ns[-6:]
    with KubeOvnEmulator(cluster) as kovn, IpamEmulator(cluster), running_controller(cluster, subnet_prune_timeout=5):
        sub = t.network("tenant-f", 71)
        t.wait("tenant-f", "Ready", "Ready")
        assert cluster.nbctl("--bare", "--columns=name", "find", "Logical_Router_Port", f"name={vpc}-{sub}").strip()
        kovn.drop_router(vpc)
        assert not cluster.nbctl("--bare", "--columns=name", "find", "Logical_Router", f"name={vpc}").strip()
        t.delete("tenant-f")
        admin.co.delete_cluster_custom_object(*KUBEOVN, "subnets", sub)
        t.gone("tenant-f")
        # Nothing brought the router or its port back.
        assert not cluster.nbctl("--bare", "--columns=name", "find", "Logical_Router", f"name={vpc}").strip()
        assert not cluster.nbctl("--bare", "--columns=name", "find", "Logical_Router_Port", f"name={vpc}-{sub}").strip()
