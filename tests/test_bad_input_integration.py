"""The bad-input corpus (product-decisions.md §6: "Bad input never crashes the controller or
loses data: it becomes a condition with a reason and a message that says what to fix").

Every case is fed to a running controller (as its own user) next to the real peers
(kube-ovn-controller v1.13.0 and the in-cluster IPAM provider v1.0.3 of a peers bed of this
module's own, conftest ``peers_bed``): malformed zones (ranges, reserved and static VLANs,
selectors), networks, pools and their addresses, Subnet fields (with what the real Kube-OVN
says of them), the prune-timer annotation on a Vlan, the namespace annotation
``proxmox.cozystack.io/networks``, and OVN NB rows we do not own. Each ends in the condition
the spec names (reference-behaviour.md §4, §5.3-§5.6, §7) or is ignored; input the CRD schema
refuses is answered 422 by the API server and never reaches the controller. Throughout, no
reconcile may crash (the log never says ``reconcile crashed``), the workers stay alive, and
no allocated VLAN or finalizer is lost.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from typing import Iterator

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from hack.bed import LocalCluster
from hack.tools.objects import Admin, condition, reason, unique
from tests.support.controller import vlan_cached
from tests.support.peers import KUBE_OVN, Ctl, Trunk, kube_get, make_vpc
from hack.tools.wait import wait_for

pytestmark = pytest.mark.integration

FINALIZER = "proxmox.cozystack.io/network"
KUBEOVN = ("kubeovn.io", "v1")
IPAM = ("ipam.cluster.x-k8s.io", "v1alpha2")
PX = ("proxmox.cozystack.io", "v1alpha1")
DELETED_SUBNETS = "proxmox.cozystack.io/deleted-subnets"
NS_ANNOTATION = "proxmox.cozystack.io/networks"
PRUNE = 6.0  # --subnet-prune-timeout here, seconds
# Subnets' third octet: pools of one range in two tests would be PoolOverlapsPool (issue 15).
_octets = itertools.count(1)


@pytest.fixture(scope="module")
def cluster(peers_bed: LocalCluster) -> LocalCluster:
    """This module's bed: the real peers run on it (the session bed has none)."""
    return peers_bed


@pytest.fixture(scope="module")
def admin(peers_admin: Admin) -> Admin:
    return peers_admin


@pytest.fixture(scope="module")
def trunk(admin: Admin) -> Trunk:
    """One trunk Node; every zone's ProviderNetwork is made ready on it (its label), because
    the real kube-ovn-controller rewrites a ProviderNetwork's status from the Nodes' labels."""
    return Trunk(admin, nodes=(("bad-input-node", "ch-bad-input"),))


@pytest.fixture(scope="module")
def vpc(admin: Admin) -> str:
    """The tenant VPC every Subnet here is in (a Subnet in the default VPC is field report
    R2's SubnetInvalid, not what these cases are about)."""
    make_vpc(admin, "bad-input-vpc")
    return "bad-input-vpc"


@pytest.fixture
def unique_namespace(request: pytest.FixtureRequest, admin: Admin) -> str:
    name = unique(request.node.originalname.replace("_", "-")[5:40].strip("-"))
    admin.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    return name


class Bed:
    """A namespace, zones on providers of their own, and helpers to build networks with a
    Subnet and a pool (shaped like Kube-OVN's and CAPI's, sound unless a case breaks them)."""

    def __init__(self, admin: Admin, trunk: Trunk, ns: str, vpc: str) -> None:
        self.a = admin
        self.trunk = trunk
        self.ns = ns
        self.vpc = vpc
        self.octet = 0  # of the newest Subnet; module-wide, so no two tests' pools share a range

    def zone(self, ranges: list[str], **spec) -> tuple[str, str]:
        provider = self.trunk.add_provider()
        name = unique("bad-zone")
        self.a.create_zone(name, provider, ranges, **spec)
        return name, provider

    def subnet(self, name: str, **overrides) -> None:
        self.octet = next(_octets)
        n = f"10.77.{self.octet}"
        spec = {"vpc": self.vpc, "vlan": name, "cidrBlock": f"{n}.0/24", "gateway": f"{n}.1", "protocol": "IPv4",
                "excludeIps": [f"{n}.1", f"{n}.100..{n}.150"]}
        spec.update(overrides)
        self.a.co.create_cluster_custom_object(*KUBEOVN, "subnets", {
            "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": name}, "spec": spec})

    def pool(self, name: str, **overrides) -> None:
        n = f"10.77.{self.octet}"
        spec = {"addresses": [f"{n}.100-{n}.150"], "prefix": 24, "gateway": f"{n}.1"}
        spec.update(overrides)
        self.a.co.create_namespaced_custom_object(*IPAM, self.ns, "inclusterippools", {
            "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
            "metadata": {"name": name, "namespace": self.ns}, "spec": spec})

    def network(self, name: str, zone: str, subnet_overrides: dict | None = None, pool_overrides: dict | None = None,
                with_subnet: bool = True, with_pool: bool = True, sub: str | None = None) -> tuple[str, str]:
        sub, pool = sub or unique(f"{name}-s"), f"{name}-pool"
        if with_subnet:
            self.subnet(sub, **(subnet_overrides or {}))
        if with_pool:
            self.pool(pool, **(pool_overrides or {}))
        self.a.create_network(self.ns, name, zone, sub, pool)
        return sub, pool

    def wait(self, name: str, ctype: str, expected: str, timeout: float = 40) -> tuple[dict, dict]:
        def check():
            obj = self.a.network(self.ns, name)
            c = condition(obj, ctype)
            gen = obj["metadata"].get("generation")
            return (obj, c) if c and c.get("reason") == expected and c.get("observedGeneration") == gen else None
        return wait_for(check, timeout=timeout, what=f"{ctype}={expected} on {self.ns}/{name}")

    def zone_ready(self, zone: str, expected: str, timeout: float = 40) -> dict:
        def check():
            z = self.a.zone(zone)
            c = condition(z, "Ready")
            return c if c and c.get("reason") == expected else None
        return wait_for(check, timeout=timeout, what=f"zone {zone} Ready={expected}")


@pytest.fixture
def bed(admin, trunk, unique_namespace, vpc):
    return Bed(admin, trunk, unique_namespace, vpc)


def watch_for_crashes(mgr) -> list[str]:
    """Wrap the reconcilers of a running manager: any exception other than an API error or a
    connection error (which the worker retries as designed) is recorded — that is what the
    worker would log as ``reconcile crashed``."""
    from controller.runtime.kube import ApiError

    crashes: list[str] = []
    for attr in ("network_reconciler", "zone_reconciler"):
        rec = getattr(mgr, attr)
        inner = rec.reconcile

        def wrapped(key, inner=inner, attr=attr):
            try:
                return inner(key)
            except (ApiError, OSError):
                raise
            except Exception as exc:  # noqa: BLE001
                crashes.append(f"{attr} {key}: {type(exc).__name__}: {exc}")
                raise
        rec.reconcile = wrapped
    return crashes


class WatchedCtl(Ctl):
    """The module's controller, its reconcilers watched for crashes (again after a restart)."""

    crashes: list[str] = []

    def start(self) -> None:
        super().start()
        self.crashes = watch_for_crashes(self.mgr)


@pytest.fixture(scope="module")
def ctl(cluster: LocalCluster, trunk: Trunk) -> Iterator[WatchedCtl]:
    c = WatchedCtl(cluster, subnet_prune_timeout=PRUNE)
    c.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def controller(ctl: WatchedCtl):
    """The controller next to the real peers; afterwards: no reconcile crashed, every worker alive."""
    if ctl.mgr is None:
        ctl.start()
    ctl.crashes.clear()
    yield ctl.mgr
    if ctl.mgr is None:  # a test that stops it failed before starting it again
        ctl.start()
    assert ctl.crashes == []
    assert ctl.mgr.healthy(), "a worker or the resync thread died"
    assert ctl.mgr.caches_fresh()


def full_resync(mgr) -> None:
    """Queue every key and wait until all of them have been processed."""
    before = mgr.resyncs_completed
    mgr.enqueue_all()
    wait_for(lambda: mgr.resyncs_completed > before, what="a full resync")


def refused(fn) -> ApiException:
    with pytest.raises(ApiException) as exc:
        fn()
    assert exc.value.status == 422, exc.value.body
    return exc.value


# --------------------------------------------------------------------------- zones


@pytest.mark.parametrize("ranges, message", [
    (["0"], 'vlan range "0": 0 is outside 1-4094'),
    (["4095"], 'vlan range "4095": 4095 is outside 1-4094'),
    (["120", "300-200"], 'vlan range "300-200" ends before it starts'),
    (["0-5"], 'vlan range "0-5": 0 is outside 1-4094'),
])
def test_zone_ranges_the_schema_admits_end_in_zone_invalid(admin, bed, controller, ranges, message):
    zone, _ = bed.zone(ranges)
    c = bed.zone_ready(zone, "ZoneInvalid")
    assert (c["status"], c["message"]) == ("False", message)
    bed.network("n1", zone)
    obj, c = bed.wait("n1", "VLANAllocated", "ZoneInvalid")
    assert (c["status"], c["message"]) == ("False", message)
    assert reason(obj, "Ready")[:2] == ("False", "ZoneInvalid")
    assert "vlan" not in obj["status"]
    # Fixing the zone is all it takes: the network then gets the lowest free ID.
    admin.patch_zone(zone, {"spec": {"vlanRanges": ["130-131"]}})
    obj, c = bed.wait("n1", "VLANAllocated", "Allocated")
    assert obj["status"]["vlan"] == 130


@pytest.mark.parametrize("spec", [
    {"vlanRanges": ["abc"]},
    {"vlanRanges": ["-5"]},
    {"vlanRanges": ["1 - 5"]},
    {"vlanRanges": []},
    {"vlanRanges": ["100"], "reservedVLANs": [0]},
    {"vlanRanges": ["100"], "reservedVLANs": [4095]},
    {"vlanRanges": ["100"], "staticAssignments": [{"namespace": "a", "name": "b", "vlan": 5000}]},
    {"vlanRanges": ["100"], "staticAssignments": [{"namespace": "a", "vlan": 7}]},
    {"vlanRanges": ["100"], "mtu": 100},
])
def test_zone_input_the_schema_refuses_never_reaches_the_controller(admin, spec):
    body = {"bridge": "vmbr1", "providerNetwork": "pn-x", **spec}
    refused(lambda: admin.co.create_cluster_custom_object(*PX, "proxmoxnetworkzones", {
        "apiVersion": "proxmox.cozystack.io/v1alpha1", "kind": "ProxmoxNetworkZone",
        "metadata": {"name": unique("refused")}, "spec": body}))


def test_reserved_vlans_covering_the_range_exhaust_the_zone(bed, controller):
    zone, _ = bed.zone(["300-301"], reservedVLANs=[300, 301, 999])  # 999 lies outside: ignored
    bed.network("n1", zone)
    _, c = bed.wait("n1", "VLANAllocated", "ZoneExhausted")
    assert c["message"] == f'zone "{zone}" has no free VLAN in 300-301'
    z = bed.zone_ready(zone, "Ready")
    assert z["message"].startswith("0 of 0 VLANs free")


def test_static_assignment_to_a_reserved_vlan(bed, controller):
    zone, _ = bed.zone(["400-401"], reservedVLANs=[401],
                       staticAssignments=[{"namespace": bed.ns, "name": "pinned", "vlan": 401}])
    bed.network("pinned", zone)
    _, c = bed.wait("pinned", "VLANAllocated", "StaticVLANReserved")
    assert c["message"] == f'static VLAN 401 is reserved in zone "{zone}"'


def test_static_assignment_to_a_vlan_in_use_and_two_pins_on_one_vlan(admin, bed, controller):
    zone, provider = bed.zone(["410-412"], staticAssignments=[
        {"namespace": bed.ns, "name": "taken", "vlan": 500},
        {"namespace": bed.ns, "name": "first", "vlan": 501},
        {"namespace": bed.ns, "name": "second", "vlan": 501},
    ])
    handmade = unique("handmade")
    admin.create_vlan(handmade, 500, provider)  # not ours: still used (B01)
    vlan_cached(controller, handmade)
    bed.network("taken", zone)
    _, c = bed.wait("taken", "VLANAllocated", "StaticVLANInUse")
    assert c["message"] == f'static VLAN 500 is already used on provider "{provider}"'
    bed.network("first", zone)
    obj, _ = bed.wait("first", "VLANAllocated", "Allocated")
    assert obj["status"]["vlan"] == 501
    bed.network("second", zone)
    _, c = bed.wait("second", "VLANAllocated", "StaticVLANInUse")
    assert c["message"] == f'static VLAN 501 is already used on provider "{provider}"'
    # A dynamic network never gets a pinned ID.
    bed.network("dyn", zone)
    obj, _ = bed.wait("dyn", "VLANAllocated", "Allocated")
    assert obj["status"]["vlan"] == 410


@pytest.mark.parametrize("selector", [
    {"matchExpressions": [{"key": "team", "operator": "Sideways", "values": ["a"]}]},
    {"matchExpressions": [{"key": "team", "operator": "In", "values": []}]},
    {"matchExpressions": [{"key": "team", "operator": "Exists", "values": ["a"]}]},
])
def test_a_selector_that_cannot_be_evaluated_admits_nobody(bed, controller, selector):
    zone, _ = bed.zone(["420"], namespaceSelector=selector)
    bed.network("n1", zone)
    obj, c = bed.wait("n1", "VLANAllocated", "NamespaceNotAllowed")
    assert c["message"] == f'namespace "{bed.ns}" does not match the namespaceSelector of zone "{zone}"'
    assert "vlan" not in obj["status"]


# --------------------------------------------------------------------------- networks


def test_network_naming_a_missing_zone(bed, controller):
    bed.network("lost", "no-such-zone-" + unique("z"))
    _, c = bed.wait("lost", "VLANAllocated", "ZoneNotFound")
    assert c["message"].startswith('ProxmoxNetworkZone "no-such-zone-') and c["message"].endswith('" does not exist')


def test_network_whose_vlan_name_belongs_to_another_network(admin, bed, controller):
    zone, provider = bed.zone(["430-431"])
    sub = unique("n1-s")
    # The other network's Vlan is there first: made after ours, the controller could win the name.
    admin.create_vlan(sub, 431, provider, labels={"proxmox.cozystack.io/network-namespace": "elsewhere",
                                                  "proxmox.cozystack.io/network-name": "other"})
    bed.network("n1", zone, with_subnet=False, sub=sub)
    _, c = bed.wait("n1", "VLANAllocated", "VLANNameTaken")
    assert c["message"] == f'Kube-OVN Vlan "{sub}" exists and belongs to elsewhere/other'
    assert admin.vlan(sub)["spec"]["id"] == 431 and not admin.vlan(sub)["metadata"].get("finalizers")  # untouched


def test_network_without_subnet_or_pool(bed, controller):
    zone, _ = bed.zone(["440-441"])
    sub, pool = bed.network("bare", zone, with_subnet=False, with_pool=False)
    obj, c = bed.wait("bare", "SubnetReady", "SubnetNotFound")
    assert c["message"] == f'Kube-OVN Subnet "{sub}" does not exist'
    c = condition(obj, "IPPoolReady")
    assert (c["reason"], c["message"]) == ("PoolNotFound", f'InClusterIPPool "{pool}" does not exist in this namespace')
    assert obj["status"]["vlan"] == 440  # the VLAN is allocated meanwhile and kept


def test_subnet_bound_to_another_vlan(bed, controller):
    zone, _ = bed.zone(["450"])
    sub, _ = bed.network("nb", zone, subnet_overrides={"vlan": "someone-elses-vlan"})
    _, c = bed.wait("nb", "SubnetReady", "SubnetNotBound")
    assert c["message"] == f'Subnet "{sub}" has spec.vlan "someone-elses-vlan", expected "{sub}"'
    s = bed.a.co.get_cluster_custom_object(*KUBEOVN, "subnets", sub)
    assert FINALIZER not in (s["metadata"].get("finalizers") or [])  # never held when not bound


# --------------------------------------------------------------------------- Subnet fields and pools


def kube_ovn_log(cluster: LocalCluster) -> str:
    return (cluster.workdir / f"{KUBE_OVN}.log").read_text(errors="replace")


def test_subnet_fields_kube_ovn_refuses(cluster, bed, controller):
    """What the real Kube-OVN says of a broken Subnet is passed on (§5.5), and our own pool
    check names the field. An unparsable CIDR is refused before Kube-OVN writes any status
    (it logs and retries): the network waits on ``SubnetNotReady``. A gateway outside the CIDR
    and an unparsable ``excludeIps`` entry are Kube-OVN's ``Validated=False``: ``SubnetInvalid``
    with Kube-OVN's message (for the entry, after Kube-OVN has rewritten it in the spec)."""
    zone, _ = bed.zone(["460-462"])
    sub, _ = bed.network("cidr", zone, subnet_overrides={"cidrBlock": "10.77.0.0/33"})
    _, c = bed.wait("cidr", "IPPoolReady", "SubnetCIDRInvalid")
    assert c["message"].startswith('subnet cidrBlock "10.77.0.0/33": ')
    wait_for(lambda: f"subnet {sub} cidr 10.77.0.0/33 is invalid" in kube_ovn_log(cluster), timeout=40,
             what="Kube-OVN refusing the CIDR")
    _, c = bed.wait("cidr", "SubnetReady", "SubnetNotReady")
    assert (c["status"], c["message"]) == ("False", "Kube-OVN has not reported the subnet Ready yet")
    assert not (kube_get(bed.a, "subnets", sub).get("status") or {}).get("conditions")

    sub, _ = bed.network("gw", zone, subnet_overrides={"gateway": "10.77.99.1"})
    o = bed.octet
    _, c = bed.wait("gw", "SubnetReady", "SubnetInvalid")
    assert (c["status"], c["message"]) == ("False", f"gateway 10.77.99.1 is not in cidr 10.77.{o}.0/24")

    # Kube-OVN formats excludeIps before it validates them: the unparsable start becomes
    # "<nil>" in the Subnet's spec, and both its message and ours quote that.
    sub, _ = bed.network("excl", zone, subnet_overrides={"excludeIps": ["banana..10.77.9.9"]})
    excl = wait_for(lambda: (lambda e: e if "<nil>..10.77.9.9" in e else None)(
        kube_get(bed.a, "subnets", sub)["spec"]["excludeIps"]), timeout=40, what="Kube-OVN's rewrite of excludeIps")
    assert "banana..10.77.9.9" not in excl, excl
    _, c = bed.wait("excl", "SubnetReady", "SubnetInvalid")
    assert (c["status"], c["message"]) == ("False", "ip <nil> in excludeIps is not a valid address")
    wait_for(lambda: reason(bed.a.network(bed.ns, "excl"), "IPPoolReady") == (
        "False", "SubnetExcludeIPsInvalid", '"<nil>..10.77.9.9": bad start address'), timeout=40,
        what="our excludeIps message on Kube-OVN's rewrite")


def test_pools_that_do_not_fit_their_subnet(bed, controller):
    zone, _ = bed.zone(["470-479"])
    bed.network("prefix", zone, pool_overrides={"prefix": 16})
    _, c = bed.wait("prefix", "IPPoolReady", "PoolPrefixMismatch")
    assert c["message"] == f"pool prefix /16 differs from subnet 10.77.{bed.octet}.0/24"

    bed.network("gw", zone, pool_overrides={"gateway": "10.77.99.254"})
    _, c = bed.wait("gw", "IPPoolReady", "PoolGatewayMismatch")
    assert c["message"] == f'pool gateway "10.77.99.254" differs from subnet gateway "10.77.{bed.octet}.1"'

    bed.network("garbage", zone, pool_overrides={"addresses": ["not-an-ip"]})
    _, c = bed.wait("garbage", "IPPoolReady", "PoolAddressInvalid")
    assert c["message"] == '"not-an-ip" is not an address, range or CIDR'

    bed.network("outside", zone, pool_overrides={"addresses": ["10.9.9.9"]})
    _, c = bed.wait("outside", "IPPoolReady", "PoolOutsideSubnet")
    assert c["message"] == f'pool address "10.9.9.9" is outside 10.77.{bed.octet}.0/24'

    bed.network("overlap", zone, pool_overrides={"addresses": [f"10.77.{bed.octet + 1}.90-10.77.{bed.octet + 1}.120"]})
    o = bed.octet
    _, c = bed.wait("overlap", "IPPoolReady", "PoolOverlapsSubnet")
    assert c["message"] == (f'pool address "10.77.{o}.90-10.77.{o}.120" is not in the subnet\'s excludeIps, '
                            "so Kube-OVN may hand it to a pod")
    for name in ("prefix", "gw", "garbage", "outside", "overlap"):
        obj, _ = bed.wait(name, "SubnetReady", "Ready")
        # Ready names the first unmet condition (VLANAllocated, SubnetReady, IPPoolReady).
        assert reason(obj, "Ready")[:2] == ("False", reason(obj, "IPPoolReady")[1])
        assert obj["status"]["vlan"] in range(470, 480)  # allocated and kept whatever the pool says


def test_malformed_consumers_hold_nothing_and_crash_nothing(admin, bed, controller):
    """ProxmoxMachines and IPAddresses with references of the wrong shape are no consumers
    (controller.rules.consumers never raises); a deleting network is released."""
    zone, _ = bed.zone(["480"])
    sub, pool = bed.network("n1", zone)
    bed.wait("n1", "Ready", "Ready")
    capmox = "infrastructure.cluster.x-k8s.io"
    created = 0
    for i, (version, network) in enumerate([
        ("v1alpha2", {"networkDevices": [{"name": "net1", "ipPoolRef": [{"kind": "Wrong", "name": pool}]}]}),
        ("v1alpha2", {"networkDevices": [{"name": "net1"}]}),
        ("v1alpha2", {"networkDevices": [{"name": "net1", "ipPoolRef": []}]}),
        ("v1alpha1", {"default": {"bridge": "vmbr0"}, "additionalDevices": [
            {"name": "net1", "bridge": "vmbr1", "ipv4PoolRef": {"kind": "GlobalInClusterIPPool", "name": pool}}]}),
        ("v1alpha2", {}),
    ]):
        try:
            admin.co.create_namespaced_custom_object(capmox, version, bed.ns, "proxmoxmachines", {
                "apiVersion": f"{capmox}/{version}", "kind": "ProxmoxMachine",
                "metadata": {"name": f"odd-{i}", "namespace": bed.ns}, "spec": {"network": network}})
            created += 1
        except ApiException as exc:
            assert exc.status == 422  # refused by the schema: never reaches the controller
    assert created >= 3
    admin.co.delete_namespaced_custom_object(*PX, bed.ns, "proxmoxnetworks", "n1")
    obj, _ = bed.wait("n1", "Ready", "SubnetStillExists")
    admin.co.delete_cluster_custom_object(*KUBEOVN, "subnets", sub)

    def gone():
        try:
            admin.network(bed.ns, "n1")
        except ApiException as exc:
            return exc.status == 404
        return False
    wait_for(gone, timeout=60, what="n1 released")


# --------------------------------------------------------------------------- annotations


@pytest.mark.parametrize("value", ["!!!,,,", "vmbr9/9999/ghost-pool", ",", "x" * 300])
def test_garbage_in_the_namespace_annotation_is_replaced_by_the_truth(admin, bed, controller, value):
    admin.core.patch_namespace(bed.ns, {"metadata": {"annotations": {NS_ANNOTATION: value}}})
    zone, _ = bed.zone(["490"])
    _, pool = bed.network("n1", zone)
    obj, _ = bed.wait("n1", "VLANAllocated", "Allocated")
    want = f"vmbr1/490/{pool}"
    wait_for(lambda: (admin.core.read_namespace(bed.ns).metadata.annotations or {}).get(NS_ANNOTATION) == want,
             what="namespace annotation repaired")


def test_namespace_annotation_of_a_namespace_without_networks_is_left_alone(admin, unique_namespace, controller):
    """A namespace we have no network in is not ours to edit: its annotation stays."""
    admin.core.patch_namespace(unique_namespace, {"metadata": {"annotations": {NS_ANNOTATION: "??"}}})
    full_resync(controller)
    assert admin.core.read_namespace(unique_namespace).metadata.annotations[NS_ANNOTATION] == "??"


def test_a_leftover_triple_on_a_zone_bridge_in_a_namespace_without_networks_is_removed(
        admin, bed, unique_namespace, controller):
    """What a leader killed between a network's NotFound pass and its namespace pass leaves
    (chaos short form, seed 7): the namespace has no network any more, and its annotation
    still lists a triple on a zone's bridge, which admission would keep honouring. Only this
    controller writes such a triple, so the namespace is ours: the §5.9 full sync (an empty
    list) deletes the key, whatever else the value holds."""
    bed.zone(["497"])  # a zone on vmbr1
    admin.core.patch_namespace(unique_namespace, {"metadata": {"annotations": {
        NS_ANNOTATION: "vmbr1/497/ghost-pool,??"}}})
    wait_for(lambda: NS_ANNOTATION not in (admin.core.read_namespace(unique_namespace).metadata.annotations or {}),
             what="the leftover annotation removed")


@pytest.mark.parametrize("stored", [
    "not json at all",
    json.dumps({"SUB": 5}),
    json.dumps(["SUB"]),
    json.dumps({"SUB": "2999-01-01T00:00:00Z"}),  # in the future: restarts now
    json.dumps({"SUB": "yesterday"}),
])
def test_garbage_prune_timer_annotation_restarts_the_timer(admin, bed, cluster, ctl, controller, peers_restored,
                                                           stored):
    """Kube-OVN lost the Subnet delete (B03): the name stays listed on the Vlan. Whatever
    sits in the ``deleted-subnets`` annotation when the controller first sees the Subnet gone,
    an unreadable timer restarts at now, so the VLAN is held for the full prune timeout (never
    released early, never held for ever), and the annotation is rewritten in the spec's
    format. The lost delete is made with the real kube-ovn-controller stopped while the
    Subnet goes (its finalizers stripped by hand, with our controller stopped too, so that the
    garbage is in place before its first pass sees the Subnet gone)."""
    zone, _ = bed.zone(["495"])
    sub, _ = bed.network("n1", zone)
    bed.wait("n1", "Ready", "Ready")
    ctl.stop()
    cluster.stop_peer(KUBE_OVN)
    admin.co.delete_namespaced_custom_object(*PX, bed.ns, "proxmoxnetworks", "n1")
    admin.co.delete_cluster_custom_object(*KUBEOVN, "subnets", sub)
    admin.strip_finalizers(*KUBEOVN, "subnets", sub)
    wait_for(lambda: kube_get(admin, "subnets", sub) is None, what="the Subnet gone")
    assert admin.vlan(sub)["status"]["subnets"] == [sub]  # nobody pruned it
    admin.co.patch_cluster_custom_object(*KUBEOVN, "vlans", sub, {
        "metadata": {"annotations": {DELETED_SUBNETS: stored.replace("SUB", sub)}}})
    written = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    ctl.start()
    mgr = ctl.mgr

    obj, c = bed.wait("n1", "Ready", "SwitchDeleting")
    timers = json.loads(admin.vlan(sub)["metadata"]["annotations"][DELETED_SUBNETS])
    assert list(timers) == [sub] and timers[sub].endswith("Z") and len(timers[sub]) == 20
    started = dt.datetime.fromisoformat(timers[sub].replace("Z", "+00:00"))
    assert started >= written  # restarted now: not the garbage, not earlier
    deadline = (started + dt.timedelta(seconds=PRUNE)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert c["message"] == (f'Kube-OVN still lists deleted subnets [{sub}] on Vlan "{sub}" until it has '
                            f"deleted their logical switches; VLAN 495 is released then, or at {deadline} at the "
                            "latest")

    def gone():
        try:
            admin.network(bed.ns, "n1")
        except ApiException as exc:
            return exc.status == 404
        return False
    wait_for(gone, timeout=PRUNE + 40, what="released after the prune timeout")
    assert dt.datetime.now(dt.timezone.utc) >= started + dt.timedelta(seconds=PRUNE)
    assert ctl.crashes == []
    assert mgr.healthy()


# --------------------------------------------------------------------------- NB rows we do not own


def test_foreign_ha_chassis_groups_are_left_alone(cluster, bed, controller):
    """HA_Chassis_Group rows someone else wrote — one even named like ours (``px-…``) but
    without our ownership mark — are never modified or deleted (field-reports invariant 4:
    only rows we own). With --manage-gateway-chassis=false nothing is written to the NB."""
    names = [unique("foreign-grp"), "px-" + unique("vpc") + "-" + unique("sub")]
    for n in names:
        cluster.nbctl("ha-chassis-group-add", n)
        cluster.nbctl("ha-chassis-group-add-chassis", n, "chassis-x", "10")
        cluster.nbctl("set", "HA_Chassis_Group", n, "external_ids:owner=someone-else")
    before = {n: cluster.nbctl("--bare", "--columns=_uuid,external_ids", "find", "HA_Chassis_Group", f"name={n}")
              for n in names}
    zone, _ = bed.zone(["498"])
    bed.network("n1", zone)
    bed.wait("n1", "Ready", "Ready")
    full_resync(controller)
    after = {n: cluster.nbctl("--bare", "--columns=_uuid,external_ids", "find", "HA_Chassis_Group", f"name={n}")
             for n in names}
    assert after == before
    for n in names:
        cluster.nbctl("ha-chassis-group-del", n)


# --------------------------------------------------------------------------- nothing lost


def test_bad_input_next_to_good_networks_loses_nothing(admin, bed, controller):
    """A zone broken after allocation keeps its networks' VLANs and finalizers (adoption
    keeps an ID even when it is no longer in the ranges, reference-behaviour.md §4.3)."""
    zone, provider = bed.zone(["600-601"])
    sub, _ = bed.network("keep", zone)
    obj, _ = bed.wait("keep", "Ready", "Ready")
    vid = obj["status"]["vlan"]
    admin.patch_zone(zone, {"spec": {"vlanRanges": ["0"]}})
    bed.zone_ready(zone, "ZoneInvalid")
    full_resync(controller)
    obj = admin.network(bed.ns, "keep")
    assert obj["status"]["vlan"] == vid
    assert FINALIZER in obj["metadata"]["finalizers"]
    v = admin.vlan(sub)
    assert v["spec"]["id"] == vid and FINALIZER in v["metadata"]["finalizers"]
    s = admin.co.get_cluster_custom_object(*KUBEOVN, "subnets", sub)
    assert FINALIZER in s["metadata"]["finalizers"]
