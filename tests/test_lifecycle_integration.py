"""The network lifecycle on a real kube-apiserver: Subnet and pool checks, consumers,
deletion order, prune timers, orphans. Here the test plays Kube-OVN and the IPAM provider
by hand (exact control over each peer state); tests/test_field_reports.py runs the same
paths against the emulators.

Expected texts: reference-behaviour.md §5.5, §5.6, §6, §7, §8.1; product-decisions.md §4.3.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from tests.support.controller import running_controller
from hack.objects import Admin, reason, unique, wait_condition
from tests.support.wait import wait_for

pytestmark = pytest.mark.integration

FINALIZER = "proxmox.cozystack.io/network"
IPAM = ("ipam.cluster.x-k8s.io", "v1alpha2")
KUBEOVN = ("kubeovn.io", "v1")
CAPMOX = "infrastructure.cluster.x-k8s.io"
PRUNE = 4.0  # --subnet-prune-timeout for these tests, seconds


@pytest.fixture
def admin(admin_client):
    return Admin(admin_client)


@pytest.fixture
def ctl(cluster):
    with running_controller(cluster, subnet_prune_timeout=PRUNE) as mgr:
        yield mgr


class Env:
    """One zone on its own provider, one namespace, helpers to play the peers."""

    def __init__(self, admin: Admin, ns: str) -> None:
        self.a = admin
        self.ns = ns
        self.provider = unique("pn")[:12]
        self.zone = unique("zone")
        admin.create_provider_network(self.provider)
        admin.create_zone(self.zone, self.provider, ["1200-1299"])

    # Kube-OVN ------------------------------------------------------------------------
    def subnet(self, name: str, vlan: str, cidr="10.20.0.0/24", gateway="10.20.0.1",
               exclude=("10.20.0.1", "10.20.0.200..10.20.0.250"), vpc="vpc1", finalizers=()) -> dict:
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
    def pool(self, name: str, addresses=("10.20.0.200-10.20.0.250",), prefix=24, gateway="10.20.0.1",
             total=51, used=0) -> dict:
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
            except Exception as exc:  # ApiException 404
                return getattr(exc, "status", None) == 404
            return False
        wait_for(check, timeout=timeout, what=f"{net} deleted")

    def vlan_exists(self, name: str) -> bool:
        try:
            self.a.vlan(name)
            return True
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return False
            raise


def ready_network(env: Env, net: str, sub: str, pool: str) -> dict:
    """A network whose Subnet, pool and VLAN are all fine (management off: Ready True)."""
    env.a.create_network(env.ns, net, env.zone, sub, pool)
    env.wait(net, "VLANAllocated", "Allocated")
    env.subnet(sub, sub)
    env.subnet_conditions(sub, ("Validated", "True", ""), ("Ready", "True", ""))
    env.pool(pool)
    env.vlan_subnets(sub, [sub])
    return env.wait(net, "Ready", "Ready")


def test_subnet_and_pool_reasons(admin, ctl, unique_namespace):
    env = Env(admin, unique_namespace)
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
    assert (obj["status"]["cidr"], obj["status"]["gateway"], obj["status"]["prefix"]) == ("10.20.0.0/24", "10.20.0.1", 24)
    assert wait_for(lambda: FINALIZER in (env.get_subnet(sub)["metadata"].get("finalizers") or []))
    assert reason(obj, "IPPoolReady") == ("True", "Ready", "pool lies inside the subnet's excludeIps")

    env.subnet_conditions(sub, ("Ready", "False", "allocating the logical switch"))
    obj = env.wait(net, "SubnetReady", "SubnetNotReady")
    wait_for(lambda: reason(env.a.network(ns, net), "SubnetReady")[2] == "allocating the logical switch")
    env.subnet_conditions(sub, ("Validated", "False", "vlan tag clash"), ("Ready", "False", "x"))
    obj = env.wait(net, "SubnetReady", "SubnetInvalid")
    assert reason(obj, "SubnetReady")[2] == "vlan tag clash"
    env.subnet_conditions(sub, ("Validated", "True", ""), ("Ready", "True", ""))
    obj = env.wait(net, "Ready", "Ready")
    assert reason(obj, "SubnetReady") == ("True", "Ready", "Kube-OVN reports the subnet Ready")
    assert reason(obj, "Ready") == ("True", "Ready", "the subnet is usable from Proxmox")
    assert obj["status"]["ipPool"] == {"total": 51, "used": 0, "free": 51}
    # The namespace annotation admission reads: <bridge>/<vlan>/<pool>.
    nsobj = admin.core.read_namespace(ns)
    assert nsobj.metadata.annotations["proxmox.cozystack.io/networks"] == f"vmbr1/{vid}/{pool}"

    cases = [
        ("pool", {"prefix": 23}, "PoolPrefixMismatch", "pool prefix /23 differs from subnet 10.20.0.0/24"),
        ("pool", {"prefix": 24, "gateway": "10.20.0.254"}, "PoolGatewayMismatch",
         'pool gateway "10.20.0.254" differs from subnet gateway "10.20.0.1"'),
        ("pool", {"gateway": "10.20.0.1", "addresses": ["10.20.0.x"]}, "PoolAddressInvalid",
         '"10.20.0.x" is not an address, range or CIDR'),
        ("pool", {"addresses": ["10.21.0.5"]}, "PoolOutsideSubnet", 'pool address "10.21.0.5" is outside 10.20.0.0/24'),
        ("pool", {"addresses": ["10.20.0.100-10.20.0.210"]}, "PoolOverlapsSubnet",
         'pool address "10.20.0.100-10.20.0.210" is not in the subnet\'s excludeIps, so Kube-OVN may hand it to a pod'),
        ("pool", {"addresses": ["10.20.0.200-10.20.0.250"]}, "Ready", "pool lies inside the subnet's excludeIps"),
        ("subnet", {"excludeIps": ["bogus"]}, "SubnetExcludeIPsInvalid", '"bogus" is not an address, range or CIDR'),
        ("subnet", {"excludeIps": ["10.20.0.200..10.20.0.250"], "cidrBlock": "10.20.0.0/33"}, "SubnetCIDRInvalid",
         'subnet cidrBlock "10.20.0.0/33": netip.ParsePrefix("10.20.0.0/33"): prefix length out of range'),
        ("subnet", {"cidrBlock": "10.20.0.0/24"}, "Ready", "pool lies inside the subnet's excludeIps"),
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


def ip_address(ns: str, name: str, pool: str) -> dict:
    return {"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddress", "metadata": {"name": name, "namespace": ns},
            "spec": {"address": "10.20.0.200", "prefix": 24, "gateway": "10.20.0.1",
                     "claimRef": {"name": name},
                     "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": pool}}}


def test_vm_holds_the_network_until_the_last_consumer_is_gone(admin, ctl, unique_namespace):
    """issue: a v1alpha1 machine, then a v1alpha2 machine, then only an IPAddress keep the
    network InUse with Vlan, Subnet and pool held; it releases once the last one is gone."""
    env = Env(admin, unique_namespace)
    ns, net, sub, pool = unique_namespace, "vmnet", unique("sub"), "vmpool"
    obj = ready_network(env, net, sub, pool)
    vid = obj["status"]["vlan"]
    co = admin.co
    co.create_namespaced_custom_object(CAPMOX, "v1alpha1", ns, "proxmoxmachines", machine_v1alpha1(ns, "m1", pool))
    admin.co.delete_namespaced_custom_object(*("proxmox.cozystack.io", "v1alpha1"), ns, "proxmoxnetworks", net)

    in_use = (f'0 address(es) of pool "{pool}" are allocated and 1 ProxmoxMachine(s) reference it; '
              f'VLAN {vid} and subnet "{sub}" are kept until they are gone')
    obj = env.wait(net, "Ready", "InUse")
    assert reason(obj, "Ready") == ("False", "InUse", in_use)

    co.create_namespaced_custom_object(CAPMOX, "v1alpha2", ns, "proxmoxmachines", machine_v1alpha2(ns, "m2", pool))
    co.delete_namespaced_custom_object(CAPMOX, "v1alpha1", ns, "proxmoxmachines", "m1")
    # Only the v1alpha2 machine is left: still one machine.
    wait_for(lambda: len(co.list_namespaced_custom_object(CAPMOX, "v1alpha2", ns, "proxmoxmachines")["items"]) == 1)
    co.create_namespaced_custom_object("ipam.cluster.x-k8s.io", "v1beta2", ns, "ipaddresses", ip_address(ns, "m2-net1-00-inet", pool))
    env.pool_status(pool, 51, 1)
    co.delete_namespaced_custom_object(CAPMOX, "v1alpha2", ns, "proxmoxmachines", "m2")
    obj = wait_for(lambda: (lambda o: o if "0 ProxmoxMachine(s)" in reason(o, "Ready")[2] else None)(admin.network(ns, net)))
    assert reason(obj, "Ready") == ("False", "InUse",
        f'1 address(es) of pool "{pool}" are allocated and 0 ProxmoxMachine(s) reference it; '
        f'1 IPAddress(es) and 0 IPAddressClaim(s) name the pool; VLAN {vid} and subnet "{sub}" are kept until they are gone')
    # Everything is still held.
    assert FINALIZER in admin.vlan(sub)["metadata"]["finalizers"]
    assert FINALIZER in env.get_subnet(sub)["metadata"]["finalizers"]

    # The pool's count lags (B15): the address object alone holds the network.
    env.pool_status(pool, 51, 0)
    obj = wait_for(lambda: (lambda o: o if reason(o, "Ready")[2].startswith("0 address(es)") else None)(admin.network(ns, net)))
    assert reason(obj, "Ready")[1] == "InUse"
    co.delete_namespaced_custom_object("ipam.cluster.x-k8s.io", "v1beta2", ns, "ipaddresses", "m2-net1-00-inet")

    obj = env.wait(net, "Ready", "SubnetStillExists")
    assert reason(obj, "Ready")[2] == f'Subnet "{sub}" still exists; VLAN {vid} is released after it is deleted'
    env.delete_subnet(sub)  # our finalizer keeps it Terminating until we let go
    # The Subnet goes (we removed our finalizer from the Terminating Subnet), the Vlan
    # still lists it: SwitchDeleting until Kube-OVN prunes it.
    obj = env.wait(net, "Ready", "SwitchDeleting")
    assert f'Kube-OVN still lists deleted subnets [{sub}] on Vlan "{sub}"' in reason(obj, "Ready")[2]
    assert reason(obj, "SwitchDeleted")[:2] == ("False", "ListedOnVlan")
    assert reason(obj, "SwitchDeleted")[2] == f"Kube-OVN still lists deleted subnets [{sub}] on the Vlan"
    env.vlan_subnets(sub, [])
    env.gone(net)
    assert not env.vlan_exists(sub)
    # The pass after the network is gone drops it from the namespace annotation.
    wait_for(lambda: "proxmox.cozystack.io/networks" not in (admin.core.read_namespace(ns).metadata.annotations or {}),
             what="namespace annotation removed")


def test_subnet_deleting_and_vlan_still_referenced(admin, ctl, unique_namespace):
    env = Env(admin, unique_namespace)
    ns, net, sub, pool = unique_namespace, "n", unique("sub"), "p"
    obj = ready_network(env, net, sub, pool)
    vid = obj["status"]["vlan"]
    # Kube-OVN's own finalizer keeps the Subnet Terminating after ours is gone (B04).
    env.a.co.patch_cluster_custom_object(*KUBEOVN, "subnets", sub,
                                         {"metadata": {"finalizers": ["kube-ovn-controller", FINALIZER]}})
    other = unique("other")
    env.subnet(other, sub, cidr="10.30.0.0/24", gateway="10.30.0.1", exclude=())
    env.vlan_subnets(sub, [sub, other])
    admin.co.delete_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks", net)
    obj = env.wait(net, "Ready", "SubnetStillExists")
    env.delete_subnet(sub)
    obj = env.wait(net, "Ready", "SubnetDeleting")
    assert reason(obj, "Ready")[2] == f'waiting for Kube-OVN to delete Subnet "{sub}" before VLAN {vid} is released'
    # Ours is off, Kube-OVN's is untouched.
    assert wait_for(lambda: env.get_subnet(sub)["metadata"].get("finalizers") == ["kube-ovn-controller"])
    assert env.vlan_exists(sub)
    # Kube-OVN finishes: its finalizer goes, the Subnet is gone; another subnet still sits on the Vlan.
    env.a.strip_finalizers(*KUBEOVN, "subnets", sub)
    obj = env.wait(net, "Ready", "VLANStillReferenced")
    assert reason(obj, "Ready")[2] == f'Kube-OVN still lists subnets [{other}] on Vlan "{sub}"'
    env.delete_subnet(other)
    env.vlan_subnets(sub, [])
    env.gone(net)
    assert not env.vlan_exists(sub)


def parse(ts: str) -> dt.datetime:
    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))


def test_delete_lost_releases_after_the_prune_timeout_across_a_restart(admin, cluster, unique_namespace):
    """Kube-OVN lost the delete (B03): the Subnet is gone but the Vlan still lists it. The
    VLAN is released once the timer in the Vlan annotation runs out; a controller restart
    in between neither restarts nor extends it."""
    env = Env(admin, unique_namespace)
    ns, net, sub, pool = unique_namespace, "lost", unique("sub"), "p"
    timeout = 8.0
    with running_controller(cluster, subnet_prune_timeout=timeout):
        obj = ready_network(env, net, sub, pool)
        vid = obj["status"]["vlan"]
        admin.co.delete_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks", net)
        env.delete_subnet(sub)  # Kube-OVN never prunes: status.subnets keeps [sub]
        obj = env.wait(net, "Ready", "SwitchDeleting")
        ann = admin.vlan(sub)["metadata"]["annotations"]["proxmox.cozystack.io/deleted-subnets"]
    started = parse(__import__("json").loads(ann)[sub])
    deadline = (started + dt.timedelta(seconds=timeout)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert reason(obj, "Ready") == ("False", "SwitchDeleting",
        f'Kube-OVN still lists deleted subnets [{sub}] on Vlan "{sub}" until it has deleted their logical switches; '
        f"VLAN {vid} is released then, or at {deadline} at the latest")
    assert started >= parse(obj["metadata"]["deletionTimestamp"])  # notBefore = the deletion
    # A new controller process continues the same timer (state lives in the Vlan, not memory).
    with running_controller(cluster, subnet_prune_timeout=timeout):
        env.gone(net, timeout=timeout + 20)
        released_at = dt.datetime.now(dt.timezone.utc)
    assert not env.vlan_exists(sub)
    assert released_at >= started + dt.timedelta(seconds=timeout)


def test_recreated_network_gets_a_full_wait(admin, cluster, unique_namespace):
    """A network deleted while Kube-OVN still lists its subnet, its finalizer then stripped
    by hand, and a network of the same name created again: adoption drops the old timers,
    and its own deletion gets the full prune wait (§7.2)."""
    with running_controller(cluster, subnet_prune_timeout=15.0):
        _recreated_network_gets_a_full_wait(admin, unique_namespace, 15.0)


def _recreated_network_gets_a_full_wait(admin, unique_namespace, timeout):
    env = Env(admin, unique_namespace)
    ns, net, sub, pool = unique_namespace, "again", unique("sub"), "p"
    ready_network(env, net, sub, pool)
    admin.co.delete_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks", net)
    env.delete_subnet(sub)
    env.wait(net, "Ready", "SwitchDeleting")
    old = admin.vlan(sub)["metadata"]["annotations"]["proxmox.cozystack.io/deleted-subnets"]
    # Timers have second precision: let the clock pass the old timer's second first.
    old_start = parse(__import__("json").loads(old)[sub])
    wait_for(lambda: dt.datetime.now(dt.timezone.utc) >= old_start + dt.timedelta(seconds=2), what="clock")
    # Someone strips the finalizer by hand and recreates the network at once.
    admin.strip_finalizers("proxmox.cozystack.io", "v1alpha1", "proxmoxnetworks", net, ns)
    env.gone(net)
    admin.create_network(ns, net, env.zone, sub, pool)
    env.wait(net, "VLANAllocated", "Allocated")
    # Adopted: same Vlan, old timers dropped.
    wait_for(lambda: "proxmox.cozystack.io/deleted-subnets" not in (admin.vlan(sub)["metadata"].get("annotations") or {}))
    assert old
    admin.co.delete_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks", net)
    obj = env.wait(net, "Ready", "SwitchDeleting")
    new = __import__("json").loads(admin.vlan(sub)["metadata"]["annotations"]["proxmox.cozystack.io/deleted-subnets"])
    started = parse(new[sub])
    assert started >= parse(obj["metadata"]["deletionTimestamp"])
    assert started > parse(__import__("json").loads(old)[sub])
    deadline = (started + dt.timedelta(seconds=timeout)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert reason(obj, "Ready")[2].endswith(f"or at {deadline} at the latest")
    env.gone(net, timeout=timeout + 20)
    assert not env.vlan_exists(sub)


def test_orphaned_vlan_is_collected_after_the_finalizer_is_stripped(admin, ctl, unique_namespace):
    env = Env(admin, unique_namespace)
    ns, net, sub, pool = unique_namespace, "orphan", unique("sub"), "p"
    ready_network(env, net, sub, pool)
    admin.co.delete_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks", net)
    env.wait(net, "Ready", "SubnetStillExists")
    # Someone strips our finalizer: the network is gone, its Vlan and Subnet are left.
    admin.strip_finalizers("proxmox.cozystack.io", "v1alpha1", "proxmoxnetworks", net, ns)
    env.gone(net)
    # The orphan is held while a Subnet is bound to it...
    def zone_msg():
        return reason(admin.zone(env.zone), "Ready")[2]
    wait_for(lambda: "1 orphaned Vlan(s) still referenced by a subnet" in zone_msg(), what="orphan counted")
    assert env.vlan_exists(sub)
    # ...and collected once the Subnet is gone: no network holds it, so our finalizer
    # comes off the deleting Subnet, and Kube-OVN's pruning frees the Vlan.
    env.delete_subnet(sub)
    wait_for(lambda: not env.a.co.list_cluster_custom_object(*KUBEOVN, "subnets",
                                                               field_selector=f"metadata.name={sub}")["items"],
             what="Subnet released by the orphan collection")
    env.vlan_subnets(sub, [])
    wait_for(lambda: not env.vlan_exists(sub), timeout=30, what="orphan collected")
    wait_for(lambda: "orphaned" not in zone_msg())


def test_gateway_management_on_conditions_and_release_pending(admin, cluster, unique_namespace):
    """With --manage-gateway-chassis=true: GatewayReady waits for the VLAN and the bound
    Subnet, and a failing gateway release holds the VLAN (GatewayReleasePending, §6 step 3)."""
    env = Env(admin, unique_namespace)
    ns, sub, pool = unique_namespace, unique("sub"), "p"
    with running_controller(cluster, manage_gateway=True, subnet_prune_timeout=PRUNE) as mgr:
        # A network refused its VLAN: every dependent condition, the gateway's included, waits.
        admin.create_network(ns, "nozone", "no-such-zone", unique("s"))
        obj = env.wait("nozone", "VLANAllocated", "ZoneNotFound")
        assert reason(obj, "GatewayReady") == ("Unknown", "WaitingForVLAN", "waits for a VLAN to be allocated")

        admin.create_network(ns, "gw", env.zone, sub, pool)
        obj = env.wait("gw", "VLANAllocated", "Allocated")
        assert reason(obj, "GatewayReady") == ("Unknown", "SubnetUnavailable",
                                               "the router port is looked up once the subnet is bound")
        env.subnet(sub, sub)
        env.subnet_conditions(sub, ("Validated", "True", ""), ("Ready", "True", ""))
        env.pool(pool)
        obj = env.wait("gw", "Ready", "Pending")
        assert reason(obj, "Ready") == ("False", "Pending", "GatewayReady has not been evaluated")

        calls = []

        def failing_release(net):
            calls.append(net["metadata"]["name"])
            return "connection refused"

        mgr.network_reconciler.gateway_release = failing_release
        admin.co.delete_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks", "gw")
        env.wait("gw", "Ready", "SubnetStillExists")
        env.delete_subnet(sub)
        obj = env.wait("gw", "Ready", "GatewayReleasePending")
        assert reason(obj, "Ready")[2] == (
            "could not delete the network's HA chassis group from OVN NB: connection refused")
        assert env.vlan_exists(sub) and calls
        mgr.network_reconciler.gateway_release = lambda net: None
        env.vlan_subnets(sub, [])
        env.gone("gw")
        assert not env.vlan_exists(sub)


def test_identical_events_are_aggregated(admin, cluster, ctl, unique_namespace):
    """product-decisions.md §4.1: one Event per distinct transition, identical ones counted."""
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


def test_subnet_recreated_and_deleted_again_gets_its_own_full_wait(admin, cluster, unique_namespace):
    """A Subnet of the same name that comes back drops the earlier timer; its second
    deletion waits the whole prune timeout again (§7.1, field report B03)."""
    timeout = 20.0
    with running_controller(cluster, subnet_prune_timeout=timeout):
        env = Env(admin, unique_namespace)
        ns, sub = unique_namespace, unique("sub")
        ready_network(env, "twice", sub, "p")
        admin.co.delete_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks", "twice")
        env.wait("twice", "Ready", "SubnetStillExists")
        env.delete_subnet(sub)
        env.wait("twice", "Ready", "SwitchDeleting")
        first = parse(json.loads(admin.vlan(sub)["metadata"]["annotations"]["proxmox.cozystack.io/deleted-subnets"])[sub])
        env.subnet(sub, sub)  # it comes back
        env.wait("twice", "Ready", "SubnetStillExists")
        wait_for(lambda: "proxmox.cozystack.io/deleted-subnets" not in (admin.vlan(sub)["metadata"].get("annotations") or {}),
                 what="the old timer dropped")
        wait_for(lambda: dt.datetime.now(dt.timezone.utc) >= first + dt.timedelta(seconds=2), what="clock")
        env.delete_subnet(sub)
        obj = env.wait("twice", "Ready", "SwitchDeleting")
        second = parse(json.loads(admin.vlan(sub)["metadata"]["annotations"]["proxmox.cozystack.io/deleted-subnets"])[sub])
        assert second > first
        deadline = (second + dt.timedelta(seconds=timeout)).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert reason(obj, "Ready")[2].endswith(f"or at {deadline} at the latest")
        env.vlan_subnets(sub, [])
        env.gone("twice")
