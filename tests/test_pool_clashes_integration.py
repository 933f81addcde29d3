"""Pool clashes (issue 15, item 3; product-decisions.md §8), next to the real peers.

The controller runs as its own user next to kube-ovn-controller v1.13.0 and the in-cluster
IPAM provider v1.0.3 (conftest ``peers_bed``, whose CRDs include the provider's
GlobalInClusterIPPool and Kube-OVN's IP):

* another InClusterIPPool (in the namespace, or any other) or a GlobalInClusterIPPool whose
  addresses overlap the network's pool: made before it, ``IPPoolReady=False/PoolOverlapsPool``
  naming the pools (first five, then a count), Ready False with the same reason and message;
  made after it, ``IPPoolReady=True/PoolOverlapsPool`` and the network stays Ready
  (product-decisions.md §10); the gauge ``cozy_proxmox_network_pool_overlaps`` counts them;
  it clears when the other pool moves or goes. The same addresses in two VPCs are no overlap. The provider itself accepts the overlap (it checks addresses only within
  one pool: cluster-api-ipam-provider-in-cluster #272, capmox #763);
* a pod with a fixed ``ovn.kubernetes.io/ip_address`` inside the VM pool, which the real
  kube-ovn-controller admits and gives a Kube-OVN IP (kube-ovn #2653), is
  ``AddressConflict`` naming the pod, the IP and the provider's IPAddress of that address;
* the controller never writes to pools, IPs, pods, claims or addresses (the audit log).

Only events drive the passes here (the resync is an hour): a pool's change reaches the
networks whose pools overlap its old or new range through ``keys.for_pool_overlap``.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
import time
from typing import Iterator

import pytest
from kubernetes import client as k8s
from prometheus_client.parser import text_string_to_metric_families

from hack.tools.audit import writes_until_now
from hack.bed import LocalCluster
from hack.tools.objects import Admin, condition, reason, unique
from hack.tools.wait import wait_for
from tests.support.peers import ADDRESS_V, IPAM, KUBEOVN, POOL_V, WAIT, Ctl, Trunk, kube_get, make_vpc

pytestmark = pytest.mark.integration

CAPI = ("cluster.x-k8s.io", "v1beta1")
PX = ("proxmox.cozystack.io", "v1alpha1")
OVERLAP_TAIL = ("; the IPAM provider checks addresses only within one pool, so two machines can be given the "
                "same address: take the shared addresses out of one of the pools (spec.addresses or "
                "spec.excludedAddresses)")
CONFLICT_TAIL = ("; a machine given one of them clashes with the pod: give the pod another address, or take the "
                 "address out of the pool (spec.excludedAddresses)")
_octets = itertools.count(1)


@pytest.fixture(scope="module")
def admin(peers_admin: Admin) -> Admin:
    return peers_admin


@pytest.fixture(scope="module")
def trunk(admin: Admin) -> Trunk:
    return Trunk(admin, nodes=(("pools-node", "ch-pools"),))


@pytest.fixture(scope="module")
def vpc(admin: Admin) -> str:
    """The tenant VPC of every Subnet here (field report R2: not the default VPC)."""
    make_vpc(admin, "pools-vpc")
    return "pools-vpc"


@pytest.fixture(scope="module")
def zone(admin: Admin, trunk: Trunk) -> str:
    name = unique("pools-zone")
    admin.create_zone(name, trunk.provider, ["600-649"])
    return name


@pytest.fixture(scope="module")
def ctl(peers_bed: LocalCluster, trunk: Trunk) -> Iterator[Ctl]:
    c = Ctl(peers_bed)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def namespace(admin: Admin, hint: str) -> str:
    name = unique(hint)
    admin.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    return name


class Net:
    """One ProxmoxNetwork with its Subnet (``10.79.<o>.0/24``, ``excludeIps`` .1 and
    .100-.150) and its pool (.100-.150), all sound: the network gets Ready. ``octet``: another
    network's ``o``, for the same addresses (in another VPC)."""

    def __init__(self, admin: Admin, zone: str, ns: str, vpc: str, octet: int | None = None, ready: bool = True) -> None:
        self.a, self.ns = admin, ns
        self.o = octet if octet is not None else next(_octets)
        self.p = f"10.79.{self.o}"
        self.name, self.sub, self.pool = "net", unique("pools-sub"), "vm-pool"
        admin.co.create_cluster_custom_object(*KUBEOVN, "subnets", {
            "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": self.sub},
            "spec": {"vpc": vpc, "vlan": self.sub, "cidrBlock": f"{self.p}.0/24", "gateway": f"{self.p}.1",
                     "protocol": "IPv4",
                     "excludeIps": [f"{self.p}.1", f"{self.p}.100..{self.p}.150"]}})
        create_pool(admin, self.pool, [f"{self.p}.100-{self.p}.150"], self.p, ns=ns)
        admin.create_network(ns, self.name, zone, self.sub, self.pool)
        if ready:
            self.wait("Ready", "Ready")

    def get(self) -> dict:
        return self.a.network(self.ns, self.name)

    def wait(self, ctype: str, expected: str, message: str | None = None) -> dict:
        def check():
            obj = self.get()
            c = condition(obj, ctype)
            if not c or c.get("reason") != expected or c.get("observedGeneration") != obj["metadata"]["generation"]:
                return None
            return obj if message is None or c.get("message") == message else None
        return wait_for(check, timeout=WAIT, what=f"{ctype}={expected} on {self.ns}/{self.name}"
                        + (f" saying {message!r}" if message else ""))


def create_pool(admin: Admin, name: str, addresses: list[str], prefix: str, ns: str | None = None) -> None:
    """An InClusterIPPool in ``ns``, or a GlobalInClusterIPPool when ``ns`` is None."""
    kind = "InClusterIPPool" if ns else "GlobalInClusterIPPool"
    body = {"apiVersion": f"{IPAM}/{POOL_V}", "kind": kind, "metadata": {"name": name},
            "spec": {"addresses": addresses, "prefix": 24, "gateway": f"{prefix}.1"}}
    if ns:
        admin.co.create_namespaced_custom_object(IPAM, POOL_V, ns, "inclusterippools", body)
    else:
        admin.co.create_cluster_custom_object(IPAM, POOL_V, "globalinclusterippools", body)


def gauge(ctl: Ctl, family: str, ns: str, name: str) -> float | None:
    for fam in text_string_to_metric_families(ctl.mgr.metrics.exposition().decode()):
        for s in fam.samples:
            if s.name == family and s.labels == {"namespace": ns, "network": name}:
                return s.value
    return None


def no_writes_on(bed: LocalCluster, user: str, resources: set[str]) -> None:
    writes, _ = writes_until_now(bed, user)
    touched = [w for w in writes if w.resource in resources]
    assert touched == [], touched


def await_gauge(ctl: Ctl, family: str, ns: str, name: str, value: float) -> None:
    """The gauge reaches ``value`` (it is set by the action after the status write, so a
    status seen by the test can come a moment before it)."""
    wait_for(lambda: gauge(ctl, family, ns, name) == value, timeout=30, what=f"{family} of {ns}/{name} == {value}")


LATER = " (made after it: the network stays Ready)"


def test_overlapping_pools_made_later_are_reported_on_the_ready_network_until_they_move_or_go(
        admin, peers_bed, zone, ctl, vpc):
    """product-decisions.md §10: pools of no network made after the network's overlap it; the
    network stays Ready and names them in a True ``PoolOverlapsPool`` (a warning doctor
    prints), the gauge counts them; it clears when they move or go."""
    ns, other_ns = namespace(admin, "pools-a"), namespace(admin, "pools-b")
    n = Net(admin, zone, ns, vpc)
    p = n.p

    # A second InClusterIPPool in the namespace (the case of capmox #763); the provider takes it.
    create_pool(admin, "twin", [f"{p}.140-{p}.160"], p, ns=ns)
    msg = (f'addresses of InClusterIPPool "vm-pool" are also in InClusterIPPool {ns}/twin '
           f"({p}.140-{p}.150)" + LATER + OVERLAP_TAIL)
    obj = n.wait("IPPoolReady", "PoolOverlapsPool", msg)
    assert reason(obj, "IPPoolReady") == ("True", "PoolOverlapsPool", msg)
    assert reason(obj, "Ready")[:2] == ("True", "Ready")
    await_gauge(ctl, "cozy_proxmox_network_pool_overlaps", ns, "net", 1)

    # One in another namespace, and a GlobalInClusterIPPool: InClusterIPPools first, by name.
    create_pool(admin, "other", [f"{p}.100"], p, ns=other_ns)
    glob = unique("pools-global")
    create_pool(admin, glob, [f"{p}.120-{p}.121", f"{p}.130"], p)
    first, second = sorted([f"{ns}/twin ({p}.140-{p}.150)", f"{other_ns}/other ({p}.100)"])
    msg = (f'addresses of InClusterIPPool "vm-pool" are also in InClusterIPPool {first}, InClusterIPPool {second}, '
           f"GlobalInClusterIPPool {glob} ({p}.120-{p}.121 and 1 more range(s))" + LATER + OVERLAP_TAIL)
    n.wait("IPPoolReady", "PoolOverlapsPool", msg)
    await_gauge(ctl, "cozy_proxmox_network_pool_overlaps", ns, "net", 3)

    # The twin moves off the pool, the other goes: only the global pool is left.
    admin.co.patch_namespaced_custom_object(IPAM, POOL_V, ns, "inclusterippools", "twin",
                                            {"spec": {"addresses": [f"{p}.151-{p}.160"]}})
    admin.co.delete_namespaced_custom_object(IPAM, POOL_V, other_ns, "inclusterippools", "other")
    msg = (f'addresses of InClusterIPPool "vm-pool" are also in GlobalInClusterIPPool {glob} '
           f"({p}.120-{p}.121 and 1 more range(s))" + LATER + OVERLAP_TAIL)
    n.wait("IPPoolReady", "PoolOverlapsPool", msg)

    admin.co.delete_cluster_custom_object(IPAM, POOL_V, "globalinclusterippools", glob)
    obj = n.wait("IPPoolReady", "Ready")
    assert reason(obj, "IPPoolReady") == ("True", "Ready", "pool lies inside the subnet's excludeIps")
    await_gauge(ctl, "cozy_proxmox_network_pool_overlaps", ns, "net", 0)
    # Never edited by us: the twin's spec is what the admin wrote.
    twin = admin.co.get_namespaced_custom_object(IPAM, POOL_V, ns, "inclusterippools", "twin")
    assert twin["spec"]["addresses"] == [f"{p}.151-{p}.160"]
    no_writes_on(peers_bed, peers_bed.controller_user, {"inclusterippools", "globalinclusterippools"})


def test_a_network_whose_pool_came_after_an_overlapping_pool_carries_the_overlap(admin, zone, ctl, vpc):
    """The later pool carries ``PoolOverlapsPool`` (False, Ready False with it): a network
    made on addresses another pool already hands out."""
    ns = namespace(admin, "pools-late")
    o = next(_octets)
    p = f"10.79.{o}"
    create_pool(admin, "first", [f"{p}.120"], p, ns=ns)
    made = admin.co.get_namespaced_custom_object(IPAM, POOL_V, ns, "inclusterippools", "first")
    # creationTimestamp has whole seconds: the network's pool must come in a later one.
    wait_for(lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) > made["metadata"]["creationTimestamp"],
             timeout=5, interval=0.05, what="the next second")
    n = Net(admin, zone, ns, vpc, octet=o, ready=False)
    msg = f'addresses of InClusterIPPool "vm-pool" are also in InClusterIPPool {ns}/first ({p}.120)' + OVERLAP_TAIL
    n.wait("IPPoolReady", "PoolOverlapsPool", msg)
    # Ready names the overlap once the Subnet is Ready: Kube-OVN's first pass over a Subnet
    # made with its network may fail on the Vlan not there yet (field-reports.md S1), and
    # SubnetReady comes before IPPoolReady in Ready.
    obj = n.wait("Ready", "PoolOverlapsPool", msg)
    assert reason(obj, "IPPoolReady") == ("False", "PoolOverlapsPool", msg)
    assert reason(obj, "Ready") == ("False", "PoolOverlapsPool", msg)
    await_gauge(ctl, "cozy_proxmox_network_pool_overlaps", ns, "net", 1)


def test_the_same_addresses_in_two_vpcs_are_no_overlap_and_take_no_ready_network_down(admin, zone, ctl, vpc):
    """product-decisions.md §10, "Addresses are unique per VPC", the operator's trial: tenant B
    installs the same CIDR and VM range as tenant A, in its own VPC. Both networks are Ready,
    neither names the other, both overlap gauges stay 0; A never leaves Ready meanwhile."""
    a = Net(admin, zone, namespace(admin, "pools-ta"), vpc)
    seen: list = []
    done = threading.Event()

    def watch_a() -> None:
        while not done.wait(0.2):
            seen.append(reason(a.get(), "Ready")[:2])

    watch = threading.Thread(target=watch_a, daemon=True)
    other = unique("pools-vpc-b")
    make_vpc(admin, other)
    watch.start()
    try:
        b = Net(admin, zone, namespace(admin, "pools-tb"), other, octet=a.o)  # waits for B's Ready
        for n in (a, b):  # (while B's pool had no network yet, A named it as a later pool: a warning)
            n.wait("IPPoolReady", "Ready", "pool lies inside the subnet's excludeIps")
        ctl.resync()  # every network looked at again with both pools in the caches
        for n in (a, b):
            assert reason(n.get(), "Ready")[:2] == ("True", "Ready")
            await_gauge(ctl, "cozy_proxmox_network_pool_overlaps", n.ns, n.name, 0)
    finally:
        done.set()
        watch.join(10)
    assert seen and set(seen) == {("True", "Ready")}, set(seen)


def test_many_overlapping_pools_are_named_five_then_a_count(admin, zone, ctl, vpc):
    ns = namespace(admin, "pools-many")
    n = Net(admin, zone, ns, vpc)
    p = n.p
    for i in range(1, 8):
        create_pool(admin, f"extra-{i}", [f"{p}.{100 + i}"], p, ns=ns)
    named = ", ".join(f"InClusterIPPool {ns}/extra-{i} ({p}.{100 + i})" for i in range(1, 6))
    msg = f'addresses of InClusterIPPool "vm-pool" are also in {named} and 2 more' + LATER + OVERLAP_TAIL
    obj = n.wait("IPPoolReady", "PoolOverlapsPool", msg)
    assert reason(obj, "Ready")[:2] == ("True", "Ready")
    await_gauge(ctl, "cozy_proxmox_network_pool_overlaps", ns, "net", 7)


def test_a_pod_on_an_address_of_the_pool_is_an_address_conflict(admin, peers_bed, zone, ctl, vpc):
    ns = namespace(admin, "pools-pod")
    n = Net(admin, zone, ns, vpc)
    p = n.p
    # A machine's address from the provider: the first free one of the pool.
    admin.co.create_namespaced_custom_object(*CAPI, ns, "clusters", {
        "apiVersion": "/".join(CAPI), "kind": "Cluster", "metadata": {"name": "c1"}, "spec": {}})
    admin.co.create_namespaced_custom_object(IPAM, ADDRESS_V, ns, "ipaddressclaims", {
        "apiVersion": f"{IPAM}/{ADDRESS_V}", "kind": "IPAddressClaim",
        "metadata": {"name": "m1-net1-inet", "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "spec": {"poolRef": {"apiGroup": IPAM, "kind": "InClusterIPPool", "name": n.pool}}})
    address = wait_for(lambda: admin.co.get_namespaced_custom_object(IPAM, ADDRESS_V, ns, "ipaddresses", "m1-net1-inet"),
                       timeout=WAIT, what="the provider's IPAddress")
    assert address["spec"]["address"] == f"{p}.100"

    # A pod pinned to the same address in the Subnet: Kube-OVN admits it (kube-ovn #2653).
    admin.core.create_namespaced_pod(ns, k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="web-1", annotations={
            "ovn.kubernetes.io/logical_switch": n.sub, "ovn.kubernetes.io/ip_address": f"{p}.100"}),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="c", image="busybox")])))
    wait_for(lambda: (kube_get(admin, "ips", f"web-1.{ns}") or {}).get("spec", {}).get("v4IpAddress") == f"{p}.100",
             timeout=WAIT, what="Kube-OVN's IP for the pod")
    msg = (f'Kube-OVN has given addresses of InClusterIPPool "vm-pool" to pods: {p}.100 (pod {ns}/web-1, '
           f"Kube-OVN IP web-1.{ns}, IPAddress {ns}/m1-net1-inet)" + CONFLICT_TAIL)
    obj = n.wait("IPPoolReady", "AddressConflict", msg)
    assert reason(obj, "Ready") == ("False", "AddressConflict", msg)
    await_gauge(ctl, "cozy_proxmox_network_address_conflicts", ns, "net", 1)
    # The controller deletes nothing: pod, IP, claim and address are all still there.
    assert admin.core.read_namespaced_pod("web-1", ns).metadata.deletion_timestamp is None
    assert kube_get(admin, "ips", f"web-1.{ns}") is not None
    no_writes_on(peers_bed, peers_bed.controller_user, {"pods", "ips", "ipaddresses", "ipaddressclaims"})

    # The pod goes (no kubelet here: an unscheduled pod is deleted at once), Kube-OVN
    # releases its IP, and the conflict clears.
    admin.core.delete_namespaced_pod("web-1", ns)
    wait_for(lambda: kube_get(admin, "ips", f"web-1.{ns}") is None, timeout=WAIT, what="Kube-OVN releasing the IP")
    obj = n.wait("Ready", "Ready")
    assert reason(obj, "IPPoolReady")[:2] == ("True", "Ready")
    await_gauge(ctl, "cozy_proxmox_network_address_conflicts", ns, "net", 0)


def test_one_address_handed_to_two_ipaddresses_is_named_on_the_network(admin, peers_bed, zone, ctl, vpc):
    """Field report R6: the provider gave one address to two claims (under cache lag; made
    here as the second claim's IPAddress with the first one's address). The network names
    both IPAddresses, each counts as a holder of its own, and nothing is deleted."""
    ns = namespace(admin, "pools-twice")
    n = Net(admin, zone, ns, vpc)
    admin.co.create_namespaced_custom_object(*CAPI, ns, "clusters", {
        "apiVersion": "/".join(CAPI), "kind": "Cluster", "metadata": {"name": "c1"}, "spec": {}})
    for claim in ("m1-net1-inet", "m2-net1-inet"):
        admin.co.create_namespaced_custom_object(IPAM, ADDRESS_V, ns, "ipaddressclaims", {
            "apiVersion": f"{IPAM}/{ADDRESS_V}", "kind": "IPAddressClaim",
            "metadata": {"name": claim, "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
            "spec": {"poolRef": {"apiGroup": IPAM, "kind": "InClusterIPPool", "name": n.pool}}})
    first = wait_for(lambda: admin.co.get_namespaced_custom_object(IPAM, ADDRESS_V, ns, "ipaddresses", "m1-net1-inet"),
                     timeout=WAIT, what="the provider's first IPAddress")
    wait_for(lambda: admin.co.get_namespaced_custom_object(IPAM, ADDRESS_V, ns, "ipaddresses", "m2-net1-inet"),
             timeout=WAIT, what="the provider's second IPAddress")
    # The lag: a third IPAddress, as the provider would write it for a claim it answered from
    # a stale view of the pool, with the first one's address.
    twin = copy.deepcopy(first)
    twin["metadata"] = {"name": "m3-net1-inet", "namespace": ns}
    twin["spec"]["claimRef"] = {"name": "m3-net1-inet"}
    admin.co.create_namespaced_custom_object(IPAM, ADDRESS_V, ns, "ipaddresses", twin)
    addr = first["spec"]["address"]
    msg = (f'InClusterIPPool "vm-pool" gave one address to several IPAddresses: {addr} (IPAddress {ns}/m1-net1-inet, '
           f"IPAddress {ns}/m3-net1-inet); their VMs would answer for one address: delete the IPAddressClaim of the "
           "VM that is to get another address (the provider then gives it a free one), the controller deletes nothing")
    obj = n.wait("IPPoolReady", "AddressConflict", msg)
    assert reason(obj, "Ready") == ("False", "AddressConflict", msg)
    await_gauge(ctl, "cozy_proxmox_network_address_conflicts", ns, "net", 1)
    no_writes_on(peers_bed, peers_bed.controller_user, {"ipaddresses", "ipaddressclaims"})
    # Deleting the network: three IPAddresses hold it, one each (never merged by address).
    admin.co.delete_namespaced_custom_object(*PX, ns, "proxmoxnetworks", "net")
    obj = n.wait("Ready", "InUse")
    assert "3 IPAddress(es) and 2 IPAddressClaim(s) name the pool" in reason(obj, "Ready")[2]


def test_a_burst_of_50_networks_on_the_real_peers_sees_no_refused_write(admin, peers_bed, trunk, ctl, vpc):
    """Field reports, fourth round, item 3: no refused write on the normal path. 50 networks,
    each with its Subnet and pool, created at once next to the real kube-ovn-controller (which
    defaults each Subnet, puts its finalizer on and writes its status within a second): every
    network gets Ready, and the audit log holds no 4xx answer to any write of the controller
    (a refused finalizer patch was one per Subnet before)."""
    zone = unique("burst-zone")
    admin.create_zone(zone, trunk.provider, ["700-799"])
    _, start = writes_until_now(peers_bed, peers_bed.controller_user)
    nets = []
    for _ in range(50):
        nets.append(Net(admin, zone, namespace(admin, "pools-burst"), vpc, ready=False))
    for n in nets:
        n.wait("Ready", "Ready")
    writes, _ = writes_until_now(peers_bed, peers_bed.controller_user, since_marker=start)
    refused = [w for w in writes if 400 <= w.code < 500]
    print(f"\n[burst] 50 networks: {len(writes)} controller writes, {len(refused)} refused")
    ids = {w.audit_id for w in refused}
    why = [json.loads(line).get("responseStatus") for line in peers_bed.audit_log.read_text().splitlines()
           if any(i in line for i in ids) and '"ResponseComplete"' in line]
    first = [w for w in writes if refused and w.name == refused[0].name]
    assert refused == [], "\n".join(f"{w}: {r}" for w, r in zip(refused, why)) + "\nall: " + "; ".join(
        f"{w.received.time()} {w}" for w in first)
