"""The network lifecycle on a real kube-apiserver: Subnet and pool checks, consumers,
deletion order, prune timers, the gateway conditions, Events.

Most tests run next to the real peers (kube-ovn-controller v1.13.0 and the in-cluster IPAM
provider v1.0.3 of a peers bed of this module's own, conftest ``peers_bed``): Kube-OVN makes
and deletes the logical switches and prunes ``Vlan.status.subnets``, the provider counts
pools and makes and releases addresses; "Kube-OVN lost the delete" is kube-ovn-controller
stopped while the Subnet goes (tests/support/peers.py). Two tests still write a peer's state
by hand on the session bed (``cluster``, no peers), each saying why in one line: the state
is one the real peer cannot produce on demand. The rest of the lifecycle on the real peers
(Ready on Kube-OVN's router port, Kube-OVN's finalizer, the prune timeout with Kube-OVN
stopped, orphans, claims and ProtectPool, a hand-made duplicate) is
tests/test_real_peers_lifecycle_integration.py.

Expected texts: reference-behaviour.md §5.5, §5.6, §6, §7, §8.1; product-decisions.md §4.3.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import time
from typing import Iterator

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from controller.runtime.leader import DEFAULT_LEASE_NAME as LEASE
from controller.runtime.leader import DEFAULT_LEASE_NAMESPACE as LEASE_NAMESPACE
from hack.bed import CONTROLLER_NAMESPACE, CONTROLLER_SA, LocalCluster
from hack.tools.controller_process import ControllerProcess
from hack.tools.objects import Admin, reason, unique, unique_prefix, wait_condition
from tests.support.controller import running_controller
from tests.support.peers import ADDRESS_V, IPAM_PROVIDER, OURS, Trunk, kube_get, lose_subnet_delete, make_vpc
from hack.tools.wait import wait_for

pytestmark = pytest.mark.integration

FINALIZER = "proxmox.cozystack.io/network"
IPAM = ("ipam.cluster.x-k8s.io", "v1alpha2")
IPAM_GROUP = "ipam.cluster.x-k8s.io"
KUBEOVN = ("kubeovn.io", "v1")
PX = ("proxmox.cozystack.io", "v1alpha1")
CAPMOX = "infrastructure.cluster.x-k8s.io"
DELETED_SUBNETS = "proxmox.cozystack.io/deleted-subnets"
PRUNE = 4.0  # --subnet-prune-timeout for these tests, seconds


def parse(ts: str) -> dt.datetime:
    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))


# =========================================================================== by hand (session bed, no peers)


@pytest.fixture
def admin(admin_client):
    return Admin(admin_client)


@pytest.fixture
def ctl(cluster):
    with running_controller(cluster, subnet_prune_timeout=PRUNE) as mgr:
        yield mgr


class Env:
    """One zone on its own provider, one namespace, helpers to write the peers' state by hand
    (also used by test_gateway_integration.py, test_doctor_integration.py and
    test_zz_rbac_usage.py, on the same bed)."""

    def __init__(self, admin: Admin, ns: str) -> None:
        self.a = admin
        self.ns = ns
        # A /24 per Subnet (pools of one range anywhere on the bed are PoolOverlapsPool):
        # ``p`` is the newest Subnet's, which the next pool takes by default.
        self.p = unique_prefix()
        self._subnets = 0
        self.provider = unique("pn")[:12]
        self.zone = unique("zone")
        admin.create_provider_network(self.provider)
        admin.create_zone(self.zone, self.provider, ["1200-1299"])

    # Kube-OVN ------------------------------------------------------------------------
    def subnet(self, name: str, vlan: str, cidr=None, gateway=None, exclude=None, vpc="vpc1", finalizers=()) -> dict:
        """Defaults: a /24 of its own (``self.p`` then), gateway .1, ``excludeIps`` .1 and .200-.250."""
        if cidr is None:
            if self._subnets:
                self.p = unique_prefix()
            self._subnets += 1
        p = self.p
        cidr, gateway = cidr or f"{p}.0/24", gateway or f"{p}.1"
        exclude = (f"{p}.1", f"{p}.200..{p}.250") if exclude is None else exclude
        body = {"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
                "metadata": {"name": name, "finalizers": list(finalizers)},
                "spec": {"vlan": vlan, "cidrBlock": cidr, "gateway": gateway, "excludeIps": list(exclude), "vpc": vpc}}
        return self.a.co.create_cluster_custom_object(*KUBEOVN, "subnets", body)

    def patch_subnet(self, name: str, spec: dict) -> dict:
        return self.a.co.patch_cluster_custom_object(*KUBEOVN, "subnets", name, {"spec": spec})

    def subnet_conditions(self, name: str, *conds: tuple[str, str, str]) -> None:
        status = {"conditions": [
            {"type": t, "status": s, "reason": "Test", "message": m,
             "lastTransitionTime": "2026-01-01T00:00:00Z"} for t, s, m in conds]}
        self.a.co.patch_cluster_custom_object_status(*KUBEOVN, "subnets", name, {"status": status})

    def get_subnet(self, name: str) -> dict:
        return self.a.co.get_cluster_custom_object(*KUBEOVN, "subnets", name)

    def delete_subnet(self, name: str) -> None:
        self.a.co.delete_cluster_custom_object(*KUBEOVN, "subnets", name)

    def vlan_subnets(self, vlan: str, subnets: list[str]) -> None:
        self.a.set_vlan_status(vlan, {"subnets": subnets})

    # IPAM ----------------------------------------------------------------------------
    def pool(self, name: str, addresses=None, prefix=24, gateway=None, total=51, used=0) -> dict:
        """Defaults: .200-.250 and gateway .1 of the newest Subnet's /24."""
        addresses = (f"{self.p}.200-{self.p}.250",) if addresses is None else addresses
        gateway = gateway or f"{self.p}.1"
        body = {"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
                "metadata": {"name": name, "namespace": self.ns},
                "spec": {"addresses": list(addresses), "prefix": prefix, "gateway": gateway}}
        self.a.co.create_namespaced_custom_object(*IPAM, self.ns, "inclusterippools", body)
        return self.pool_status(name, total, used)

    def pool_status(self, name: str, total: int, used: int) -> dict:
        status = {"ipAddresses": {"total": total, "used": used, "free": total - used}}
        return self.a.co.patch_namespaced_custom_object_status(*IPAM, self.ns, "inclusterippools", name,
                                                               {"status": status})

    def patch_pool(self, name: str, spec: dict) -> dict:
        return self.a.co.patch_namespaced_custom_object(*IPAM, self.ns, "inclusterippools", name, {"spec": spec})

    # waiting -----------------------------------------------------------------------------
    def wait(self, net: str, ctype: str, expected: str, timeout: float = 40) -> dict:
        return wait_condition(self.a, self.ns, net, ctype, expected, timeout)

    def gone(self, net: str, timeout: float = 30) -> None:
        def check():
            try:
                self.a.network(self.ns, net)
            except ApiException as exc:
                return exc.status == 404
            return False
        wait_for(check, timeout=timeout, what=f"{net} deleted")

    def vlan_exists(self, name: str) -> bool:
        try:
            self.a.vlan(name)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise


def ready_network(env: Env, net: str, sub: str, pool: str) -> dict:
    """A network whose Subnet, pool and VLAN are all fine, the peers' part written by hand
    (management off: Ready True)."""
    env.a.create_network(env.ns, net, env.zone, sub, pool)
    env.wait(net, "VLANAllocated", "Allocated")
    env.subnet(sub, sub)
    env.subnet_conditions(sub, ("Validated", "True", ""), ("Ready", "True", ""))
    env.pool(pool)
    env.vlan_subnets(sub, [sub])
    return env.wait(net, "Ready", "Ready")


def test_subnet_and_pool_reasons(admin, ctl, unique_namespace):
    # By hand: Kube-OVN's Ready/Validated messages and a full pool's count on command; the real peers overwrite them.
    env = Env(admin, unique_namespace)
    p = env.p
    ns, net, sub, pool = unique_namespace, "n", unique("sub"), "p"
    admin.create_network(ns, net, env.zone, sub, pool)
    obj = env.wait(net, "VLANAllocated", "Allocated")
    vid = obj["status"]["vlan"]
    assert reason(obj, "SubnetReady") == ("False", "SubnetNotFound", f'Kube-OVN Subnet "{sub}" does not exist')
    assert reason(obj, "IPPoolReady") == ("False", "PoolNotFound", f'InClusterIPPool "{pool}" does not exist in this namespace')

    env.subnet(sub, "someone-else")
    obj = env.wait(net, "SubnetReady", "SubnetNotBound")
    assert reason(obj, "SubnetReady")[2] == f'Subnet "{sub}" has spec.vlan "someone-else", expected "{sub}"'
    assert FINALIZER not in (env.get_subnet(sub)["metadata"].get("finalizers") or [])  # unbound: not ours to hold
    env.pool(pool)
    obj = env.wait(net, "IPPoolReady", "SubnetUnavailable")
    assert reason(obj, "IPPoolReady") == ("Unknown", "SubnetUnavailable",
                                          "the pool is checked against the subnet once the subnet is bound")

    env.patch_subnet(sub, {"vlan": sub})
    obj = env.wait(net, "SubnetReady", "SubnetNotReady")
    assert reason(obj, "SubnetReady")[2] == "Kube-OVN has not reported the subnet Ready yet"
    assert (obj["status"]["cidr"], obj["status"]["gateway"], obj["status"]["prefix"]) == (f"{p}.0/24", f"{p}.1", 24)
    # Not handled by Kube-OVN yet (no status, no finalizer of its own): ours waits for it.
    assert FINALIZER not in (env.get_subnet(sub)["metadata"].get("finalizers") or [])
    assert reason(obj, "IPPoolReady") == ("True", "Ready", "pool lies inside the subnet's excludeIps")

    env.subnet_conditions(sub, ("Ready", "False", "allocating the logical switch"))
    obj = env.wait(net, "SubnetReady", "SubnetNotReady")
    wait_for(lambda: reason(env.a.network(ns, net), "SubnetReady")[2] == "allocating the logical switch")
    # A Ready False is a pass of Kube-OVN's that has not ended (v1.15 adds its own finalizer
    # before Ready True, and retries a failed pass): ours still waits.
    assert FINALIZER not in (env.get_subnet(sub)["metadata"].get("finalizers") or [])
    env.subnet_conditions(sub, ("Validated", "False", "vlan tag clash"), ("Ready", "False", "x"))
    obj = env.wait(net, "SubnetReady", "SubnetInvalid")
    assert reason(obj, "SubnetReady")[2] == "vlan tag clash"
    env.subnet_conditions(sub, ("Validated", "True", ""), ("Ready", "True", ""))
    obj = env.wait(net, "Ready", "Ready")
    assert wait_for(lambda: FINALIZER in (env.get_subnet(sub)["metadata"].get("finalizers") or []))
    assert reason(obj, "SubnetReady") == ("True", "Ready", "Kube-OVN reports the subnet Ready")
    assert reason(obj, "Ready") == ("True", "Ready", "the subnet is usable from Proxmox")
    assert obj["status"]["ipPool"] == {"total": 51, "used": 0, "free": 51}
    # The namespace annotation admission reads: <bridge>/<vlan>/<pool>.
    nsobj = admin.core.read_namespace(ns)
    assert nsobj.metadata.annotations["proxmox.cozystack.io/networks"] == f"vmbr1/{vid}/{pool}"

    cases = [
        ("pool", {"prefix": 23}, "PoolPrefixMismatch", f"pool prefix /23 differs from subnet {p}.0/24"),
        ("pool", {"prefix": 24, "gateway": f"{p}.254"}, "PoolGatewayMismatch",
         f'pool gateway "{p}.254" differs from subnet gateway "{p}.1"'),
        ("pool", {"gateway": f"{p}.1", "addresses": [f"{p}.x"]}, "PoolAddressInvalid",
         f'"{p}.x" is not an address, range or CIDR'),
        ("pool", {"addresses": ["10.21.0.5"]}, "PoolOutsideSubnet", f'pool address "10.21.0.5" is outside {p}.0/24'),
        ("pool", {"addresses": [f"{p}.100-{p}.210"]}, "PoolOverlapsSubnet",
         f'pool address "{p}.100-{p}.210" is not in the subnet\'s excludeIps, so Kube-OVN may hand it to a pod'),
        ("pool", {"addresses": [f"{p}.200-{p}.250"]}, "Ready", "pool lies inside the subnet's excludeIps"),
        ("subnet", {"excludeIps": ["bogus"]}, "SubnetExcludeIPsInvalid", '"bogus" is not an address, range or CIDR'),
        ("subnet", {"excludeIps": [f"{p}.200..{p}.250"], "cidrBlock": f"{p}.0/33"}, "SubnetCIDRInvalid",
         f'subnet cidrBlock "{p}.0/33": netip.ParsePrefix("{p}.0/33"): prefix length out of range'),
        ("subnet", {"cidrBlock": f"{p}.0/24"}, "Ready", "pool lies inside the subnet's excludeIps"),
    ]
    for what, spec, expected, message in cases:
        (env.patch_pool(pool, spec) if what == "pool" else env.patch_subnet(sub, spec))
        obj = wait_for(lambda: (lambda o: o if reason(o, "IPPoolReady")[1:] == (expected, message) else None)(
            env.a.network(ns, net)), what=f"IPPoolReady {expected}")
        assert reason(obj, "IPPoolReady")[0] == ("True" if expected == "Ready" else "False")
        if expected != "Ready":
            assert reason(obj, "Ready")[1:] == (expected, message)

    env.pool_status(pool, 51, 51)
    obj = env.wait(net, "IPPoolReady", "PoolExhausted")
    assert reason(obj, "IPPoolReady") == ("True", "PoolExhausted",
                                          "all 51 addresses of the pool are allocated; new machines will wait")
    assert reason(obj, "Ready")[0] == "True"  # exhausted pools stay Ready
    assert obj["status"]["ipPool"] == {"total": 51, "used": 51, "free": 0}




def test_identical_events_are_aggregated(admin, cluster, ctl, unique_namespace):
    """product-decisions.md §4.1: one Event per distinct transition, identical ones counted."""
    # By hand: Vlan status.conflict, which Kube-OVN v1.13 lacks (its CRD prunes it); newer versions may set it.
    env = Env(admin, unique_namespace)
    ns, sub = unique_namespace, unique("sub")
    admin.create_network(ns, "ev", env.zone, sub, "p")
    obj = env.wait("ev", "VLANAllocated", "Allocated")
    vid = obj["status"]["vlan"]
    for _ in range(3):
        admin.set_vlan_status(sub, {"conflict": True})
        env.wait("ev", "VLANAllocated", "VLANConflict")
        admin.set_vlan_status(sub, {"conflict": False})
        env.wait("ev", "VLANAllocated", "Allocated")
    ctl.events.flush()

    def conflict_events():
        evs = [e for e in admin.core.list_namespaced_event(ns).items
               if e.involved_object.name == "ev" and e.reason == "VLANConflict"]
        return evs if evs and evs[0].count == 3 else None

    evs = wait_for(conflict_events, what="one aggregated VLANConflict event")
    assert len(evs) == 1 and evs[0].type == "Warning"
    assert evs[0].message == f'Kube-OVN reports VLAN {vid} on provider "{env.provider}" as conflicting with another Vlan'
    allocated = [e for e in admin.core.list_namespaced_event(ns).items if e.reason == "VLANAllocated"]
    assert len(allocated) == 1 and allocated[0].count == 1



def machine_v1alpha1(ns: str, name: str, pool: str) -> dict:
    return {"apiVersion": f"{CAPMOX}/v1alpha1", "kind": "ProxmoxMachine", "metadata": {"name": name, "namespace": ns},
            "spec": {"network": {"default": {"bridge": "vmbr0"}, "additionalDevices": [
                {"name": "net1", "bridge": "vmbr1",
                 "ipv4PoolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": pool}}]}}}


def machine_v1alpha2(ns: str, name: str, pool: str) -> dict:
    return {"apiVersion": f"{CAPMOX}/v1alpha2", "kind": "ProxmoxMachine", "metadata": {"name": name, "namespace": ns},
            "spec": {"network": {"networkDevices": [
                {"name": "net0", "bridge": "vmbr0"},
                {"name": "net1", "bridge": "vmbr1",
                 "ipPoolRef": [{"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": pool}]}]}}}


# =========================================================================== on the real peers (a peers bed)


@pytest.fixture(scope="module")
def trunk(peers_admin: Admin) -> Trunk:
    return Trunk(peers_admin)


_ranges = itertools.count(1400, 10)


class PeerEnv:
    """One zone on the trunk's provider (a VLAN range of its own), one namespace and its VPC;
    Subnets in that VPC (``10.<o>.0.0/24``, the pool's ``.200-.250`` in ``excludeIps``) and
    pools, all handled by the real peers."""

    def __init__(self, bed: LocalCluster, admin: Admin, trunk: Trunk) -> None:
        self.bed, self.a = bed, admin
        self.provider = trunk.provider
        self.first_vlan = next(_ranges)
        self.zone = unique("zone")
        admin.create_zone(self.zone, self.provider, [f"{self.first_vlan}-{self.first_vlan + 9}"])
        self.ns = unique("life")
        admin.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=self.ns)))
        self.vpc = unique("life-vpc")
        make_vpc(admin, self.vpc)
        self.prefixes: dict[str, str] = {}

    def subnet(self, name: str, vlan: str) -> str:
        """A Subnet on Vlan ``vlan``; returns its first three octets."""
        p = self.prefixes.setdefault(name, unique_prefix())
        self.a.co.create_cluster_custom_object(*KUBEOVN, "subnets", {
            "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": name},
            "spec": {"vpc": self.vpc, "vlan": vlan, "cidrBlock": f"{p}.0/24", "gateway": f"{p}.1",
                     "protocol": "IPv4", "excludeIps": [f"{p}.200..{p}.250"]}})
        return p

    def pool(self, name: str, p: str) -> None:
        self.a.co.create_namespaced_custom_object(*IPAM, self.ns, "inclusterippools", {
            "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool", "metadata": {"name": name},
            "spec": {"addresses": [f"{p}.200-{p}.250"], "prefix": 24, "gateway": f"{p}.1"}})

    def ready_network(self, net: str, sub: str, pool: str) -> dict:
        """Network, Subnet and pool at once (as a chart applies them), awaited Ready."""
        self.a.create_network(self.ns, net, self.zone, sub, pool)
        self.pool(pool, self.subnet(sub, sub))
        return self.wait(net, "Ready", "Ready")

    def delete_network(self, net: str) -> None:
        self.a.co.delete_namespaced_custom_object(*PX, self.ns, "proxmoxnetworks", net)

    def delete_subnet(self, name: str) -> None:
        self.a.co.delete_cluster_custom_object(*KUBEOVN, "subnets", name)

    def wait(self, net: str, ctype: str, expected: str, timeout: float = 60) -> dict:
        return wait_condition(self.a, self.ns, net, ctype, expected, timeout)

    def gone(self, net: str, timeout: float = 60) -> None:
        def check() -> bool:
            try:
                self.a.network(self.ns, net)
            except ApiException as exc:
                return exc.status == 404
            return False
        wait_for(check, timeout=timeout, what=f"{net} deleted")

    def vlan_exists(self, name: str) -> bool:
        return kube_get(self.a, "vlans", name) is not None

    def timer(self, vlan: str, sub: str) -> dt.datetime:
        return parse(json.loads(self.a.vlan(vlan)["metadata"]["annotations"][DELETED_SUBNETS])[sub])


@pytest.fixture
def penv(peers_bed: LocalCluster, peers_admin: Admin, trunk: Trunk) -> PeerEnv:
    return PeerEnv(peers_bed, peers_admin, trunk)


@pytest.fixture
def pctl(peers_bed: LocalCluster, trunk: Trunk) -> Iterator:
    with running_controller(peers_bed, subnet_prune_timeout=PRUNE) as mgr:
        yield mgr


def ip_address(ns: str, name: str, pool: str, address: str) -> dict:
    """An IPAddress made by hand (as clusterctl move makes one in the target cluster)."""
    return {"apiVersion": f"{IPAM_GROUP}/{ADDRESS_V}", "kind": "IPAddress", "metadata": {"name": name, "namespace": ns},
            "spec": {"address": address, "prefix": 24, "gateway": address.rsplit(".", 1)[0] + ".1",
                     "claimRef": {"name": name},
                     "poolRef": {"apiGroup": IPAM_GROUP, "kind": "InClusterIPPool", "name": pool}}}


def test_vm_holds_the_network_until_the_last_consumer_is_gone(peers_bed, peers_admin, penv, pctl, peers_restored):
    """A v1alpha1 machine, then a v1alpha2 machine, then only an IPAddress keep the network
    InUse with Vlan and Subnet held; the address alone holds it while the real provider has
    not counted it (the provider paused: the pool's count lags, B15), and once counted; it
    releases once the last one is gone, and Kube-OVN's pruning lets the VLAN go."""
    admin, env, co = peers_admin, penv, peers_admin.co
    ns, net, sub, pool = env.ns, "vmnet", unique("sub"), "vmpool"
    obj = env.ready_network(net, sub, pool)
    vid = obj["status"]["vlan"]
    # Counted by the provider: Ready does not wait for the pool's status, so this can come later.
    wait_for(lambda: env.a.network(ns, net)["status"].get("ipPool") == {"total": 51, "used": 0, "free": 51},
             timeout=60, what="the provider's count of the pool")
    co.create_namespaced_custom_object(CAPMOX, "v1alpha1", ns, "proxmoxmachines", machine_v1alpha1(ns, "m1", pool))
    env.delete_network(net)

    in_use = (f'0 address(es) of pool "{pool}" are allocated and 1 ProxmoxMachine(s) reference it; '
              f'held by ProxmoxMachine m1; VLAN {vid} and subnet "{sub}" are kept until they are gone')
    obj = env.wait(net, "Ready", "InUse")
    assert reason(obj, "Ready") == ("False", "InUse", in_use)

    co.create_namespaced_custom_object(CAPMOX, "v1alpha2", ns, "proxmoxmachines", machine_v1alpha2(ns, "m2", pool))
    co.delete_namespaced_custom_object(CAPMOX, "v1alpha1", ns, "proxmoxmachines", "m1")
    # Only the v1alpha2 machine is left: still one machine.
    wait_for(lambda: len(co.list_namespaced_custom_object(CAPMOX, "v1alpha2", ns, "proxmoxmachines")["items"]) == 1)
    peers_bed.pause_peer(IPAM_PROVIDER)
    p = env.prefixes[sub]
    co.create_namespaced_custom_object(IPAM_GROUP, ADDRESS_V, ns, "ipaddresses",
                                       ip_address(ns, "m2-net1-00-inet", pool, f"{p}.200"))
    co.delete_namespaced_custom_object(CAPMOX, "v1alpha2", ns, "proxmoxmachines", "m2")
    # The provider has not counted the address: it alone holds the network (B15).
    obj = wait_for(lambda: (lambda o: o if "0 ProxmoxMachine(s)" in reason(o, "Ready")[2] else None)(
        admin.network(ns, net)), what="the machines gone from the message")
    assert reason(obj, "Ready") == ("False", "InUse",
        f'0 address(es) of pool "{pool}" are allocated and 0 ProxmoxMachine(s) reference it; '
        f'1 IPAddress(es) and 0 IPAddressClaim(s) name the pool; held by IPAddress m2-net1-00-inet (its '
        f'IPAddressClaim m2-net1-00-inet not found); VLAN {vid} and subnet "{sub}" are kept until they are gone')
    assert FINALIZER in admin.vlan(sub)["metadata"]["finalizers"]
    assert FINALIZER in kube_get(admin, "subnets", sub)["metadata"]["finalizers"]

    peers_bed.resume_peer(IPAM_PROVIDER)
    obj = wait_for(lambda: (lambda o: o if reason(o, "Ready")[2].startswith("1 address(es)") else None)(
        admin.network(ns, net)), what="the provider's count of the address")
    assert reason(obj, "Ready")[1] == "InUse"
    co.delete_namespaced_custom_object(IPAM_GROUP, ADDRESS_V, ns, "ipaddresses", "m2-net1-00-inet")

    obj = env.wait(net, "Ready", "SubnetStillExists")
    assert reason(obj, "Ready")[2] == f'Subnet "{sub}" still exists; VLAN {vid} is released after it is deleted'
    env.delete_subnet(sub)  # Kube-OVN deletes its switch and prunes the name from the Vlan
    env.gone(net)
    assert not env.vlan_exists(sub)
    # The pass after the network is gone drops it from the namespace annotation.
    wait_for(lambda: "proxmox.cozystack.io/networks" not in (admin.core.read_namespace(ns).metadata.annotations or {}),
             what="namespace annotation removed")


def test_vlan_still_referenced_by_another_subnet(peers_admin, penv, pctl):
    """A second Subnet on the network's Vlan: Kube-OVN lists both in ``Vlan.status.subnets``;
    the network's own Subnet deleted (and pruned by Kube-OVN), the VLAN is held while
    Kube-OVN lists the other (``VLANStillReferenced``), and released once it goes too."""
    admin, env = peers_admin, penv
    net, sub, pool = "n", unique("sub"), "p"
    obj = env.ready_network(net, sub, pool)
    vid = obj["status"]["vlan"]
    other = unique("other")
    env.subnet(other, sub)
    wait_for(lambda: sorted(admin.vlan(sub)["status"]["subnets"]) == sorted([sub, other]), timeout=60,
             what="Kube-OVN listing both Subnets on the Vlan")
    assert OURS not in (kube_get(admin, "subnets", other)["metadata"].get("finalizers") or [])  # not the network's
    env.delete_network(net)
    env.wait(net, "Ready", "SubnetStillExists")
    env.delete_subnet(sub)
    obj = env.wait(net, "Ready", "VLANStillReferenced")
    assert reason(obj, "Ready")[2] == (
        f'Kube-OVN still lists subnets [{other}] on Vlan "{sub}"; [{other}] are not this network\'s: the controller '
        f"never deletes them, and VLAN {vid} is released once they are gone")
    assert admin.vlan(sub)["status"]["subnets"] == [other]
    assert admin.vlan(sub)["spec"]["id"] == vid
    env.delete_subnet(other)
    env.gone(net)
    assert not env.vlan_exists(sub)


def test_delete_lost_releases_after_the_prune_timeout_across_a_restart(peers_bed, peers_admin, penv,
                                                                       peers_restored):
    """Kube-OVN lost the delete (B03; kube-ovn-controller stopped while the Subnet goes): the
    Subnet is gone but the Vlan still lists it. The VLAN is released once the timer in the
    Vlan annotation runs out; a controller restart in between neither restarts nor extends it."""
    admin, env = peers_admin, penv
    net, sub, pool = "lost", unique("sub"), "p"
    timeout = 8.0
    with running_controller(peers_bed, subnet_prune_timeout=timeout):
        obj = env.ready_network(net, sub, pool)
        vid = obj["status"]["vlan"]
        env.delete_network(net)
        env.wait(net, "Ready", "SubnetStillExists")
        lose_subnet_delete(peers_bed, admin, sub)
        obj = env.wait(net, "Ready", "SwitchDeleting")
        started = env.timer(sub, sub)
    assert admin.vlan(sub)["status"]["subnets"] == [sub]
    deadline = (started + dt.timedelta(seconds=timeout)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert reason(obj, "Ready") == ("False", "SwitchDeleting",
        f'Kube-OVN still lists deleted subnets [{sub}] on Vlan "{sub}" until it has deleted their logical switches; '
        f"VLAN {vid} is released then, or at {deadline} at the latest")
    assert started >= parse(obj["metadata"]["deletionTimestamp"])  # notBefore = the deletion
    # A new controller process continues the same timer (state lives in the Vlan, not memory).
    with running_controller(peers_bed, subnet_prune_timeout=timeout):
        env.gone(net, timeout=timeout + 20)
        released_at = dt.datetime.now(dt.timezone.utc)
    assert not env.vlan_exists(sub)
    assert released_at >= started + dt.timedelta(seconds=timeout)


def test_recreated_network_gets_a_full_wait(peers_bed, peers_admin, penv, peers_restored):
    """A network deleted while Kube-OVN still lists its subnet (kube-ovn-controller stopped
    while the Subnet went), its finalizer then stripped by hand, and a network of the same
    name created again: adoption drops the old timers, and its own deletion gets the full
    prune wait (§7.2)."""
    admin, env = peers_admin, penv
    timeout = 15.0
    ns, net, sub, pool = env.ns, "again", unique("sub"), "p"
    with running_controller(peers_bed, subnet_prune_timeout=timeout):
        env.ready_network(net, sub, pool)
        env.delete_network(net)
        env.wait(net, "Ready", "SubnetStillExists")
        lose_subnet_delete(peers_bed, admin, sub)
        env.wait(net, "Ready", "SwitchDeleting")
        old_start = env.timer(sub, sub)
        # Timers have second precision: let the clock pass the old timer's second first.
        wait_for(lambda: dt.datetime.now(dt.timezone.utc) >= old_start + dt.timedelta(seconds=2), what="clock")
        # Someone strips the finalizer by hand and recreates the network at once.
        admin.strip_finalizers(*PX, "proxmoxnetworks", net, ns)
        env.gone(net)
        admin.create_network(ns, net, env.zone, sub, pool)
        env.wait(net, "VLANAllocated", "Allocated")
        # Adopted: same Vlan, old timers dropped.
        wait_for(lambda: DELETED_SUBNETS not in (admin.vlan(sub)["metadata"].get("annotations") or {}),
                 what="the old timers dropped")
        env.delete_network(net)
        obj = env.wait(net, "Ready", "SwitchDeleting")
        started = env.timer(sub, sub)
        assert started >= parse(obj["metadata"]["deletionTimestamp"])
        assert started > old_start
        deadline = (started + dt.timedelta(seconds=timeout)).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert reason(obj, "Ready")[2].endswith(f"or at {deadline} at the latest")
        env.gone(net, timeout=timeout + 20)
        assert dt.datetime.now(dt.timezone.utc) >= started + dt.timedelta(seconds=timeout)
        assert not env.vlan_exists(sub)


def test_gateway_management_on_conditions_without_an_nb(peers_bed, peers_admin, penv):
    """With --manage-gateway-chassis=true and no NB address: GatewayReady waits for the VLAN
    and the bound Subnet; with no NB nothing holds the release (§6 step 3). A release the
    NB refuses holds the VLAN: ``test_gateway_integration``'s
    ``test_never_up_network_fails_at_once_and_release_waits_for_the_nb`` stops a real NB."""
    admin, env = peers_admin, penv
    ns, sub, pool = env.ns, unique("sub"), "p"
    with running_controller(peers_bed, manage_gateway=True, subnet_prune_timeout=PRUNE):
        # A network refused its VLAN: every dependent condition, the gateway's included, waits.
        admin.create_network(ns, "nozone", "no-such-zone", unique("s"))
        obj = env.wait("nozone", "VLANAllocated", "ZoneNotFound")
        assert reason(obj, "GatewayReady") == ("Unknown", "WaitingForVLAN", "waits for a VLAN to be allocated")

        admin.create_network(ns, "gw", env.zone, sub, pool)
        obj = env.wait("gw", "VLANAllocated", "Allocated")
        assert reason(obj, "GatewayReady") == ("Unknown", "SubnetUnavailable",
                                               "the router port is looked up once the subnet is bound")
        env.pool(pool, env.subnet(sub, sub))  # Kube-OVN reports it Ready
        obj = env.wait("gw", "Ready", "Pending")
        assert reason(obj, "SubnetReady") == ("True", "Ready", "Kube-OVN reports the subnet Ready")
        assert reason(obj, "Ready") == ("False", "Pending", "GatewayReady has not been evaluated")

        env.delete_network("gw")
        env.wait("gw", "Ready", "SubnetStillExists")
        env.delete_subnet(sub)
        env.gone("gw")
        assert not env.vlan_exists(sub)


def test_subnet_recreated_and_deleted_again_gets_its_own_full_wait(peers_bed, peers_admin, penv, peers_restored):
    """A Subnet of the same name that comes back (kube-ovn-controller stopped all along, so
    nobody prunes) drops the earlier timer; its second deletion waits the whole prune timeout
    again (§7.1, field report B03)."""
    admin, env = peers_admin, penv
    timeout = 12.0
    with running_controller(peers_bed, subnet_prune_timeout=timeout):
        sub = unique("sub")
        env.ready_network("twice", sub, "p")
        env.delete_network("twice")
        env.wait("twice", "Ready", "SubnetStillExists")
        lose_subnet_delete(peers_bed, admin, sub)
        env.wait("twice", "Ready", "SwitchDeleting")
        first = env.timer(sub, sub)
        env.subnet(sub, sub)  # it comes back
        env.wait("twice", "Ready", "SubnetStillExists")
        wait_for(lambda: DELETED_SUBNETS not in (admin.vlan(sub)["metadata"].get("annotations") or {}),
                 what="the old timer dropped")
        wait_for(lambda: dt.datetime.now(dt.timezone.utc) >= first + dt.timedelta(seconds=2), what="clock")
        env.delete_subnet(sub)
        obj = env.wait("twice", "Ready", "SwitchDeleting")
        second = env.timer(sub, sub)
        assert second > first
        deadline = (second + dt.timedelta(seconds=timeout)).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert reason(obj, "Ready")[2].endswith(f"or at {deadline} at the latest")
        env.gone("twice", timeout=timeout + 20)
        assert dt.datetime.now(dt.timezone.utc) >= second + dt.timedelta(seconds=timeout)
        assert not env.vlan_exists(sub)


def test_a_shrunk_range_and_a_failed_vm_deletion_are_named_on_the_network(peers_admin, penv, pctl):
    """Issue 26 item 7, found by an acceptance run on the real peers: the zone's ranges moved
    away from the network's VLAN (kept: ``AllocatedOutsideRanges``, no longer a plain
    ``Allocated``), and a Terminating machine capmox could not destroy holds the network:
    ``InUse`` quotes its ``DeletionFailed`` condition."""
    admin, env, co = peers_admin, penv, peers_admin.co
    ns, net, sub, pool = env.ns, "keepnet", unique("sub"), "keeppool"
    vid = env.ready_network(net, sub, pool)["status"]["vlan"]
    moved = f"{env.first_vlan + 5}-{env.first_vlan + 9}"
    assert vid == env.first_vlan  # the lowest free ID (§4.2), so outside the moved range
    co.patch_cluster_custom_object(*PX, "proxmoxnetworkzones", env.zone, {"spec": {"vlanRanges": [moved]}})
    obj = env.wait(net, "VLANAllocated", "AllocatedOutsideRanges")
    assert reason(obj, "VLANAllocated")[2].endswith(
        f"; VLAN {vid} is outside the zone's current vlanRanges ({moved}): the network keeps it until it is "
        "deleted, and it is not handed out again while so")
    assert obj["status"]["vlan"] == vid and reason(obj, "Ready")[0] == "True"

    body = machine_v1alpha1(ns, "pm-107", pool)
    body["metadata"]["finalizers"] = ["proxmoxmachine.infrastructure.cluster.x-k8s.io"]
    co.create_namespaced_custom_object(CAPMOX, "v1alpha1", ns, "proxmoxmachines", body)
    try:
        co.patch_namespaced_custom_object_status(CAPMOX, "v1alpha1", ns, "proxmoxmachines", "pm-107", {"status": {
            "conditions": [{"type": "VMProvisioned", "status": "False", "reason": "DeletionFailed", "severity": "Warning",
                            "message": "VM 107 is running - destroy failed",
                            "lastTransitionTime": "2026-12-04T10:00:00Z"}]}})
        co.delete_namespaced_custom_object(CAPMOX, "v1alpha1", ns, "proxmoxmachines", "pm-107")
        env.delete_network(net)
        quoted = 'VMProvisioned DeletionFailed: "VM 107 is running - destroy failed"'
        obj = wait_for(lambda: (lambda o: o if quoted in reason(o, "Ready")[2] else None)(admin.network(ns, net)),
                       timeout=60, what="InUse quoting the failed deletion")
        assert reason(obj, "Ready")[:2] == ("False", "InUse")
        assert "ProxmoxMachine pm-107 (deleting since " in reason(obj, "Ready")[2]
        assert env.vlan_exists(sub)
    finally:
        admin.strip_finalizers(CAPMOX, "v1alpha1", "proxmoxmachines", "pm-107", ns)
    env.delete_subnet(sub)
    env.gone(net)


class RotatingToken:
    """The controller's ServiceAccount token in a file, as the kubelet keeps a projected one:
    each token is bound to a Secret of its own (TokenRequest ``boundObjectRef``), so deleting
    that Secret makes the API server refuse the token at once (401), as an expired one is.
    :meth:`rotate` writes a new token (atomic rename, as the kubelet does) and then revokes
    the previous one."""

    def __init__(self, bed: LocalCluster, admin: Admin, directory) -> None:
        import yaml

        self.a, self.path, self.secret = admin, directory / "token", ""
        self.rotate()
        self.kubeconfig = directory / "token.kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "sa",
            "clusters": [{"name": "bed", "cluster": {"server": bed.server, "certificate-authority": str(bed.ca_file)}}],
            "users": [{"name": "sa", "user": {"tokenFile": str(self.path)}}],
            "contexts": [{"name": "sa", "context": {"cluster": "bed", "user": "sa"}}]}))

    def rotate(self) -> None:
        old, self.secret = self.secret, unique("pnc-token")
        s = self.a.core.create_namespaced_secret(CONTROLLER_NAMESPACE, k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(name=self.secret)))
        tr = self.a.core.create_namespaced_service_account_token(CONTROLLER_SA, CONTROLLER_NAMESPACE, k8s.AuthenticationV1TokenRequest(
            spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=3600, bound_object_ref=k8s.V1BoundObjectReference(
                api_version="v1", kind="Secret", name=self.secret, uid=s.metadata.uid))))
        tmp = self.path.with_suffix(".new")
        tmp.write_text(tr.status.token)
        tmp.replace(self.path)
        if old:
            self.a.core.delete_namespaced_secret(old, CONTROLLER_NAMESPACE)


def test_rotated_service_account_tokens_are_reread_and_nothing_is_released_on_a_401(
        peers_bed, peers_admin, penv, tmp_path, peers_restored):
    """R11 (../shared/cases/field-reports.md): the controller as a process of its own reading
    its ServiceAccount's token from a file that is rotated three times, the previous token
    revoked each time, while it leads and a deleted network is held by a machine and an
    address. Each rotation costs at least one 401 (the old token is refused) and every 401 is
    retried once with the re-read token: no request fails (no ``API error`` with 401 in the
    log), the leader keeps its Lease (same holder, no transition) and ``/readyz`` stays 200,
    no informer relists more than once per rotation, the network stays held while its
    holders exist and goes once the deletions made during a rotation are seen."""
    import threading

    admin, env, co = peers_admin, penv, peers_admin.co
    ns, net, sub, pool = env.ns, "tokennet", unique("sub"), "tokenpool"
    token = RotatingToken(peers_bed, admin, tmp_path)
    log = tmp_path / "controller.log"
    proc = ControllerProcess([f"--kubeconfig={token.kubeconfig}", "--manage-gateway-chassis=false", "--leader-elect",
                              f"--subnet-prune-timeout={PRUNE}s", "--resync-period=30s", "--log-format=console"], log)
    ep = proc.endpoints
    not_ready: list[float] = []
    stop = threading.Event()
    try:
        # Readiness is serving, not leading (product-decisions §9): wait for the Lease itself.
        wait_for(proc.leads, timeout=60, what="the controller leading")
        assert ep.status("/readyz") == 200
        coord = k8s.CoordinationV1Api(admin.co.api_client)
        holder = coord.read_namespaced_lease(LEASE, LEASE_NAMESPACE).spec
        obj = env.ready_network(net, sub, pool)
        vid = obj["status"]["vlan"]
        wait_for(lambda: env.a.network(ns, net)["status"].get("ipPool", {}).get("total") == 51, timeout=60,
                 what="the provider's count of the pool")
        p = env.prefixes[sub]
        co.create_namespaced_custom_object(CAPMOX, "v1alpha1", ns, "proxmoxmachines", machine_v1alpha1(ns, "m1", pool))
        co.create_namespaced_custom_object(IPAM_GROUP, ADDRESS_V, ns, "ipaddresses",
                                           ip_address(ns, "m1-net1-00-inet", pool, f"{p}.200"))
        env.delete_network(net)
        obj = wait_for(lambda: (lambda o: o if "held by" in reason(o, "Ready")[2] and "1 IPAddress" in reason(o, "Ready")[2]
                                else None)(admin.network(ns, net)), timeout=60, what="InUse, held by the machine and the address")
        assert reason(obj, "Ready")[1] == "InUse"

        def watch_ready() -> None:
            while not stop.wait(0.2):
                if ep.status("/readyz") != 200:
                    not_ready.append(time.monotonic())

        threading.Thread(target=watch_ready, daemon=True).start()
        unauthorized = "cozy_proxmox_api_unauthorized_total"
        relists = "cozy_proxmox_informer_relists_total"
        per_rotation = []
        for step in range(3):
            before, relists_before = ep.samples(unauthorized), ep.samples(relists)
            token.rotate()
            if step == 1:  # the holders go while the token rotates
                co.delete_namespaced_custom_object(CAPMOX, "v1alpha1", ns, "proxmoxmachines", "m1")
                co.delete_namespaced_custom_object(IPAM_GROUP, ADDRESS_V, ns, "ipaddresses", "m1-net1-00-inet")
            # The Lease is renewed every 2 s: its next renewal meets the revoked token.
            after = wait_for(lambda: (lambda m: m if sum(m.values()) > sum(before.values()) else None)(
                ep.samples(unauthorized)), timeout=30, what="the revoked token refused")
            per_rotation.append(sum(after.values()) - sum(before.values()))
            assert reason(admin.network(ns, net), "Ready")[1] in ("InUse", "SubnetStillExists")
            moved = {k: v - relists_before.get(k, 0.0) for k, v in ep.samples(relists).items()}
            assert all(v <= 1 for v in moved.values()), moved
            if step == 1:
                obj = env.wait(net, "Ready", "SubnetStillExists", timeout=30)  # within one resync (30 s)
                assert reason(obj, "Ready")[2] == f'Subnet "{sub}" still exists; VLAN {vid} is released after it is deleted'
        env.delete_subnet(sub)
        env.gone(net)
        stop.set()
        assert not_ready == []
        now = coord.read_namespaced_lease(LEASE, LEASE_NAMESPACE).spec
        assert (now.holder_identity, now.lease_transitions) == (holder.holder_identity, holder.lease_transitions)
        text = log.read_text()
        assert "status=401" not in text and "Unauthorized" not in text and "leadership lost" not in text, text[-3000:]
        assert proc.alive()
        print(f"\n[R11] 401s per rotation: {per_rotation}")
    finally:
        stop.set()
        proc.stop()
