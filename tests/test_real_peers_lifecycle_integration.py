"""The network lifecycle against the real peers (issue 13 part 5; Kube-OVN v1.15.24 since
issue 24): the controller as it runs (``running_controller``, gateway management on, the
bed's NB) next to the real kube-ovn-controller and the real in-cluster IPAM provider v1.0.3
of ``LocalCluster(with_peers=True)``, on a bed of this module's own. Nothing here plays a
peer: Kube-OVN makes the logical switches, router ports, ``Vlan.status.subnets`` and its own
finalizer; the provider fulfils claims, counts pools and holds ``ProtectPool``. Faults are
made by stopping, killing or pausing the real processes. Where the real peers differ from
what the tests once assumed: docs/testing.md "What the real peers taught us".

* a network with its Vlan, a VPC Subnet (``logicalGateway``) and a pool reaches Ready, with
  its HA_Chassis_Group on the router port Kube-OVN made and ``cr-<port>`` from ovn-northd;
* kube-ovn-controller killed and restarted, then Kube-OVN's own defaulting of a Subnet spec:
  the port keeps its group, and an independent monitor of the NB counts the changes to the
  port's row (none) and our writes (none): the two controllers do not fight;
* a claim of the real provider holds the network ``InUse`` exactly as long as the provider
  keeps the address (the provider paused with the claim deleted: still held), the pool
  deleted meanwhile is held by ``ProtectPool``, and the deletion proceeds once it lets go;
* a Subnet deleted while Kube-OVN counts IPs in it waits for Kube-OVN's own finalizer, and
  the real pruning of ``Vlan.status.subnets`` releases the VLAN without the timeout; when
  Kube-OVN's finalizer is stripped by hand (v1.13 put none on a Subnet that had ours), ours
  stays until Kube-OVN's count is zero (the bug this module found, controller/rules/kubeovn.py);
* kube-ovn-controller stopped while the Subnet goes: the VLAN is released at the prune
  timeout;
* a hand-made duplicate Vlan: ``VLANConflict`` naming it; Kube-OVN v1.15 flags both Vlans
  (``status.conflict``) and takes our Subnet down after its restart, which our condition says,
  and the controller writes nothing back;
* Kube-OVN's Subnet defaults (``vpc: ovn-cluster`` when absent): the router port looked up is
  ``ovn-cluster-<subnet>``, which Kube-OVN makes only with ``logicalGateway``.

Expected texts: reference-behaviour.md §5.4-§5.6, §6, §7, §9; product-decisions.md §4.3, §7;
docs/api.md (zone message). Expected peer behaviour: kube-ovn v1.15.24 ``pkg/controller``
(subnet.go ``handleSubnetFinalizer``, ``validateSubnetVlan``, ``handleDeleteSubnet``;
vlan.go ``checkVlanConflict``; gc.go), cluster-api ipam provider v1.0.3
(``inclusterippool.go``, ``pkg/ipamutil``).
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from controller import names
from controller.runtime.kube import KubeWriter
from hack.tools.audit import write_marker, writes_before
from hack.bed import ClusterError, LocalCluster, ovsdb_rows, ovsdb_set
from hack.tools.objects import Admin, reason, unique, wait_condition
from tests.support.gateway import assigned as chassis_assigned
from tests.support.ovsdb import RowMonitor, ha_chassis_groups
from tests.support.peers import (
    ADDRESS_V,
    IPAM,
    IPAM_PROVIDER,
    KUBE_OVN,
    KUBE_OVN_FINALIZER,
    KUBEOVN,
    OURS,
    POOL_V,
    Ctl,
    Trunk,
    kube_get,
    make_vpc,
    strip_kube_ovn_finalizer,
)
from hack.tools.wait import wait_for

pytestmark = pytest.mark.integration

PX = ("proxmox.cozystack.io", "v1alpha1")
PROTECT_POOL = "ipam.cluster.x-k8s.io/ProtectPool"
ROOT = Path(__file__).resolve().parent.parent
VPC = "vpc-x"  # the spec's test-vector VPC: worker1 outranks worker2 (§9.3)
TRUNK = (("worker1", "ch-worker1"), ("worker2", "ch-worker2"))
PRUNE = 10.0  # --subnet-prune-timeout here, seconds
WAIT = 60.0


# --------------------------------------------------------------------------- the bed


@pytest.fixture(scope="module")
def bed(peers_bed: LocalCluster) -> LocalCluster:
    return peers_bed


@pytest.fixture(scope="module")
def admin(peers_admin: Admin) -> Admin:
    return peers_admin


@pytest.fixture(scope="module")
def ctl(bed: LocalCluster, world: "World") -> Iterator[Ctl]:
    c = Ctl(bed, manage_gateway=True, ovn_nb_address=bed.nb_tcp, subnet_prune_timeout=PRUNE)
    c.start()
    try:
        yield c
    finally:
        c.stop()


class World:
    """What every test shares: one ProviderNetwork with its two trunk Nodes (ready label and
    chassis annotation, as Kube-OVN's node agent and ovn-controller would set them), the VPC."""

    def __init__(self, bed: LocalCluster, admin: Admin) -> None:
        self.bed, self.a = bed, admin
        self.provider = Trunk(admin, TRUNK).provider
        make_vpc(admin, VPC)
        self._ranges = itertools.count(2100, 100)
        self._octets = itertools.count(60)

    def get(self, plural: str, name: str) -> dict:
        return self.a.co.get_cluster_custom_object(*KUBEOVN, plural, name)

    def gone(self, plural: str, name: str) -> bool:
        try:
            self.get(plural, name)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    def scene(self) -> "Scene":
        return Scene(self, next(self._ranges), next(self._octets))


@pytest.fixture(scope="module")
def world(bed: LocalCluster, admin: Admin) -> World:
    return World(bed, admin)


class Scene:
    """One test's zone (its own VLAN range, so the lowest free ID is known), namespace and
    network ``net`` on Subnet ``sub`` (VPC ``vpc-x``, the Vlan named after it,
    ``logicalGateway: true``, ``10.<o>.0.0/24``, the pool's range in ``excludeIps``) with
    InClusterIPPool ``pool``."""

    def __init__(self, world: World, first_vlan: int, octet: int) -> None:
        self.w, self.a, self.bed = world, world.a, world.bed
        self.first_vlan = first_vlan
        self.zone = unique("zone")
        self.a.create_zone(self.zone, world.provider, [f"{first_vlan}-{first_vlan + 99}"])
        self.ns = unique("tenant")
        self.a.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=self.ns)))
        self.net, self.sub, self.pool = "net", unique("rs"), "pool"
        self.prefix = f"10.{octet}.0"
        self.lrp, self.group = f"{VPC}-{self.sub}", f"px-{VPC}-{self.sub}"
        self.as_ready: dict = {}  # set by ready()

    # objects --------------------------------------------------------------------------
    def create_network(self) -> dict:
        self.a.create_network(self.ns, self.net, self.zone, self.sub, self.pool)
        return self.wait("VLANAllocated", "Allocated")

    def create_subnet(self, **spec: Any) -> None:
        body = {"vpc": VPC, "vlan": self.sub, "cidrBlock": f"{self.prefix}.0/24", "gateway": f"{self.prefix}.1",
                "protocol": "IPv4", "logicalGateway": True, "excludeIps": [f"{self.prefix}.200..{self.prefix}.250"]}
        body.update(spec)
        self.a.co.create_cluster_custom_object(*KUBEOVN, "subnets", {
            "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": self.sub},
            "spec": {k: v for k, v in body.items() if v is not None}})

    def create_pool(self) -> None:
        self.a.co.create_namespaced_custom_object(IPAM, POOL_V, self.ns, "inclusterippools", {
            "apiVersion": f"{IPAM}/{POOL_V}", "kind": "InClusterIPPool", "metadata": {"name": self.pool},
            "spec": {"addresses": [f"{self.prefix}.200-{self.prefix}.250"], "prefix": 24,
                     "gateway": f"{self.prefix}.1"}})

    def ready(self) -> dict:
        """Network, Subnet and pool at once (as a chart applies them), awaited Ready; returns
        the network as it was read Ready (also kept as ``as_ready``).

        A later read may not be Ready: Kube-OVN's first passes over a new Subnet can take
        its Ready condition away for a moment and give it back (v1.15.24
        ``handleAddOrUpdateSubnet`` patches the whole status from its informer's copy, which
        can lag its own last write: the conditions of an older version come back), and the
        network follows Kube-OVN, as §5.5 says (flake hunt, failure 10)."""
        self.a.create_network(self.ns, self.net, self.zone, self.sub, self.pool)
        self.create_subnet()
        self.create_pool()
        self.as_ready = self.wait("Ready", "Ready")
        wait_for(self.settled, timeout=WAIT, what=f"{self.ns}/{self.net} Ready with Kube-OVN's Subnet settled")
        return self.as_ready

    def settled(self) -> bool:
        """The network Ready on both sides of a read of Kube-OVN's side showing its passes over
        the Subnet done: the Vlan lists the Subnet, the Subnet is Ready and its last status
        patch was a pass's end (``Validated`` carries the reason ``Ready`` was set with; a
        pass's first patch sets ``Validated`` alone), and the network unchanged around it.
        Tests that count the controller's writes from here on must not see Kube-OVN's
        settling (failure 10: a flip of Ready in such a window)."""
        before = self.network()
        conds = {c.get("type"): c for c in (self.subnet().get("status") or {}).get("conditions") or []}
        ready, validated = conds.get("Ready") or {}, conds.get("Validated") or {}
        kube_ovn_done = (ready.get("status") == "True" and validated.get("reason") == ready.get("reason")
                         and (self.vlan().get("status") or {}).get("subnets") == [self.sub])
        after = self.network()
        return (kube_ovn_done and before["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]
                and (reason(after, "Ready") or ("",))[0] == "True")

    def delete_network(self) -> None:
        self.a.co.delete_namespaced_custom_object(*PX, self.ns, "proxmoxnetworks", self.net)

    def delete_subnet(self) -> None:
        self.a.co.delete_cluster_custom_object(*KUBEOVN, "subnets", self.sub)

    def subnet(self) -> dict:
        return self.w.get("subnets", self.sub)

    def finalizers(self) -> list[str]:
        return self.subnet()["metadata"].get("finalizers") or []

    def vlan(self) -> dict:
        return self.w.get("vlans", self.sub)

    def kube_ovn_ip(self, name: str, address: str) -> None:
        """A Kube-OVN IP in the Subnet, as Kube-OVN makes one for a pod: it counts in the
        Subnet's ``v4usingIPs``."""
        self.a.co.create_cluster_custom_object(*KUBEOVN, "ips", {
            "apiVersion": "kubeovn.io/v1", "kind": "IP",
            "metadata": {"name": f"{name}.{self.ns}", "labels": {self.sub: "", "ovn.kubernetes.io/subnet": self.sub}},
            "spec": {"podName": name, "namespace": self.ns, "subnet": self.sub, "nodeName": TRUNK[0][0],
                     "v4IpAddress": address, "macAddress": "00:00:00:12:34:56", "podType": ""}})

    def kube_ovn_ready(self) -> bool:
        conds = (self.subnet().get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)

    def using_ips(self) -> int:
        return int((self.subnet().get("status") or {}).get("v4usingIPs") or 0)

    # reading --------------------------------------------------------------------------
    def network(self) -> dict:
        return self.a.network(self.ns, self.net)

    def wait(self, ctype: str, expected: str, timeout: float = WAIT) -> dict:
        return wait_condition(self.a, self.ns, self.net, ctype, expected, timeout)

    def network_gone(self, timeout: float = WAIT) -> None:
        def gone() -> bool:
            try:
                self.network()
            except ApiException as e:
                return e.status == 404
            return False

        wait_for(gone, timeout=timeout, what=f"{self.ns}/{self.net} deleted")

    def events(self, ctl: Ctl, why: str) -> list[k8s.CoreV1Event]:
        ctl.mgr.events.flush()
        return [e for e in self.a.core.list_namespaced_event(self.ns).items
                if e.involved_object.name == self.net and e.reason == why]

    def port(self) -> dict | None:
        rows = ovsdb_rows(self.bed.nbctl, "Logical_Router_Port", f"name={self.lrp}")
        return rows[0] if rows else None

    def cr_binding(self) -> list[dict]:
        return ovsdb_rows(self.bed.sbctl, "Port_Binding", f"logical_port=cr-{self.lrp}")


def kube_ovn_log_since(bed: LocalCluster, offset: int) -> str:
    with open(bed.workdir / f"{KUBE_OVN}.log", "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def kube_ovn_log_size(bed: LocalCluster) -> int:
    return (bed.workdir / f"{KUBE_OVN}.log").stat().st_size


def handled(bed: LocalCluster, subnet: str, offset: int) -> bool:
    """Kube-OVN has run a full add-or-update of ``subnet`` since ``offset`` (its last step
    records the ``ResetLogicalSwitchAclSuccess`` event)."""
    return any(f'Name:"{subnet}"' in line and "ResetLogicalSwitchAclSuccess" in line
               for line in kube_ovn_log_since(bed, offset).splitlines())


def assigned(sc: Scene) -> str:
    """§9.4's ChassisAssigned message for vpc-x with worker1/worker2 (§9.3 vectors)."""
    return chassis_assigned(sc.lrp, sc.group, [("ch-worker1", 100), ("ch-worker2", 90)])


@pytest.fixture
def peers_back(bed: LocalCluster) -> Iterator[None]:
    """Whatever a test did to the peers, both run again afterwards."""
    try:
        yield
    finally:
        for peer in (KUBE_OVN, IPAM_PROVIDER):
            try:
                pid = bed.peer_pid(peer)
            except ClusterError:
                bed.start_peer(peer)
                continue
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    bed.resume_peer(peer)


# --------------------------------------------------------------------------- (a) Ready, on Kube-OVN's router port


@pytest.fixture(scope="module")
def ready_scene(world: World, ctl: Ctl) -> Scene:
    sc = world.scene()
    sc.ready()
    return sc


def test_network_is_ready_with_its_group_on_kube_ovns_router_port(bed, ctl, world, ready_scene):
    sc = ready_scene
    obj = sc.as_ready  # the network as it turned Ready (not a later read: Scene.ready says why)
    vid = obj["status"]["vlan"]
    assert vid == sc.first_vlan  # the lowest free ID of the zone's range
    assert reason(obj, "VLANAllocated") == ("True", "Allocated", f"VLAN {vid} on bridge vmbr1")
    assert reason(obj, "SubnetReady") == ("True", "Ready", "Kube-OVN reports the subnet Ready")
    assert reason(obj, "IPPoolReady") == ("True", "Ready", "pool lies inside the subnet's excludeIps")
    assert reason(obj, "GatewayReady") == ("True", "ChassisAssigned", assigned(sc))
    assert reason(obj, "Ready") == ("True", "Ready", "the subnet is usable from Proxmox")
    # Counted by the real provider: .200-.250 is 51 addresses, the gateway is not among them.
    wait_for(lambda: sc.network()["status"].get("ipPool") == {"total": 51, "used": 0, "free": 51},
             timeout=WAIT, what="the provider's pool counts on the network")
    st = sc.network()["status"]
    assert (st["cidr"], st["gateway"], st["prefix"], st["vlanName"]) == (f"{sc.prefix}.0/24", f"{sc.prefix}.1", 24, sc.sub)

    # Kube-OVN's side: the Vlan lists the Subnet; the Subnet carries our finalizer and the
    # spec defaults Kube-OVN writes (the gateway added to excludeIps, provider ovn, enableLb).
    vlan = sc.vlan()
    assert vlan["spec"] == {"id": vid, "provider": world.provider}
    assert vlan["status"]["subnets"] == [sc.sub]
    sub = sc.subnet()
    assert OURS in sub["metadata"]["finalizers"]
    assert sub["spec"]["excludeIps"] == [f"{sc.prefix}.1", f"{sc.prefix}.200..{sc.prefix}.250"]
    assert (sub["spec"]["provider"], sub["spec"]["enableLb"]) == ("ovn", True)

    # The NB: Kube-OVN's localnet port with our VLAN, Kube-OVN's router port, our group on it.
    (localnet,) = ovsdb_rows(bed.nbctl, "Logical_Switch_Port", f"name=localnet.{sc.sub}")
    assert (localnet["type"], localnet["tag"], localnet["options"]) == ("localnet", vid, {"network_name": world.provider})
    port = sc.port()
    assert port is not None and port["external_ids"] == {"lr": VPC, "vendor": "kube-ovn"}
    assert port["networks"] == f"{sc.prefix}.1/24"
    (group,) = ha_chassis_groups(bed.nbctl, sc.group)
    assert group["external_ids"] == {"owner": "proxmox-network", "network": f"{sc.ns}/{sc.net}"}
    assert group["chassis"] == {"ch-worker1": [100], "ch-worker2": [90]}
    assert port["ha_chassis_group"] == group["uuid"]
    assert port["gateway_chassis"] == []
    # ovn-northd's chassis-redirect port of the distributed gateway port.
    cr = wait_for(sc.cr_binding, timeout=WAIT, what=f"SB binding cr-{sc.lrp}")
    assert [b["type"] for b in cr] == ["chassisredirect"]
    assert cr[0]["options"]["distributed-port"] == sc.lrp


# --------------------------------------------------------------------------- (b) restart, defaulting: no fight


def test_kube_ovn_restart_and_its_defaulting_leave_our_group_alone(bed, admin, ctl, ready_scene, peers_back):
    sc = ready_scene
    before_port = sc.port()
    (before_group,) = ha_chassis_groups(bed.nbctl, sc.group)
    assert before_port["ha_chassis_group"] == before_group["uuid"]
    gw_before = reason(sc.network(), "GatewayReady")
    ltt_before = [c for c in sc.network()["status"]["conditions"] if c["type"] == "Ready"][0]["lastTransitionTime"]
    ours_before = ctl.mgr.gateway.applier.transactions

    with RowMonitor(bed.nb_tcp, "Logical_Router_Port") as mon:
        t0 = time.monotonic()
        offset = kube_ovn_log_size(bed)
        bed.kill_peer(KUBE_OVN)
        bed.start_peer(KUBE_OVN)  # returns once it leads and its default VPC is Ready again
        wait_for(lambda: handled(bed, sc.sub, offset), timeout=WAIT,
                 what=f"kube-ovn-controller handling Subnet {sc.sub} after the restart")
        wait_for(lambda: "start to gc vpc dns" in kube_ovn_log_since(bed, offset), timeout=WAIT,
                 what="kube-ovn-controller's start-up garbage collection")

        # Kube-OVN's own defaulting: a spec without enableLb and provider gets them back
        # (formatSubnet updates the Subnet, then handles it again).
        offset = kube_ovn_log_size(bed)
        KubeWriter(admin.api_client).json_patch(names.SUBNETS, sc.sub, [
            {"op": "remove", "path": "/spec/enableLb"}, {"op": "remove", "path": "/spec/provider"}])
        wait_for(lambda: (lambda s: s["enableLb"] is True and s["provider"] == "ovn")(sc.subnet()["spec"]),
                 timeout=WAIT, what="Kube-OVN writing its Subnet defaults back")
        wait_for(lambda: handled(bed, sc.sub, offset), timeout=WAIT,
                 what=f"kube-ovn-controller handling Subnet {sc.sub} after its defaulting")
        ctl.resync()  # and a full pass of ours after all of it
        t1 = time.monotonic()

        changes = mon.changes(sc.lrp, t0)
        without = mon.time_without(sc.lrp, "ha_chassis_group", t0, t1)
    ours = ctl.mgr.gateway.applier.transactions - ours_before
    print(f"\nrouter port {sc.lrp}, {t1 - t0:.1f}s from the kill of kube-ovn-controller through its restart, "
          f"its Subnet defaulting and a full resync of ours: {len(changes)} change(s) of the row in the NB "
          f"{changes}, {ours} NB write(s) of ours, {without:.3f}s without its HA_Chassis_Group")
    assert changes == [] and ours == 0 and without == 0.0

    assert sc.port()["ha_chassis_group"] == before_group["uuid"]
    assert ha_chassis_groups(bed.nbctl, sc.group) == [before_group]
    assert [b["type"] for b in sc.cr_binding()] == ["chassisredirect"]
    obj = sc.network()
    assert reason(obj, "GatewayReady") == gw_before
    assert [c for c in obj["status"]["conditions"] if c["type"] == "Ready"][0]["lastTransitionTime"] == ltt_before


# --------------------------------------------------------------------------- (c) the real IPAM provider


def test_claim_holds_the_network_in_use_exactly_while_the_provider_keeps_its_address(bed, admin, ctl, world,
                                                                                     peers_back):
    sc = world.scene()
    obj = sc.ready()
    vid, co = obj["status"]["vlan"], admin.co

    def get(plural: str, name: str, version: str = ADDRESS_V) -> dict | None:
        try:
            return co.get_namespaced_custom_object(IPAM, version, sc.ns, plural, name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    co.create_namespaced_custom_object(IPAM, ADDRESS_V, sc.ns, "ipaddressclaims", {
        "apiVersion": f"{IPAM}/{ADDRESS_V}", "kind": "IPAddressClaim", "metadata": {"name": "vm-1-net1"},
        "spec": {"poolRef": {"apiGroup": IPAM, "kind": "InClusterIPPool", "name": sc.pool}}})
    addr = wait_for(lambda: get("ipaddresses", "vm-1-net1"), timeout=WAIT, what="the provider's IPAddress")
    assert addr["spec"]["address"] == f"{sc.prefix}.200"  # the lowest free address of the pool
    wait_for(lambda: sc.network()["status"].get("ipPool") == {"total": 51, "used": 1, "free": 50},
             timeout=WAIT, what="the provider's count (used 1) on the network")

    sc.delete_network()
    held = (f'1 address(es) of pool "{sc.pool}" are allocated and 0 ProxmoxMachine(s) reference it; '
            f"1 IPAddress(es) and 1 IPAddressClaim(s) name the pool; held by IPAddressClaim vm-1-net1, "
            f'IPAddress vm-1-net1; VLAN {vid} and subnet "{sc.sub}" are kept until they are gone')
    obj = sc.wait("Ready", "InUse")
    assert reason(obj, "Ready") == ("False", "InUse", held)

    # The pool deleted meanwhile: the provider keeps it with ProtectPool while its address exists.
    co.delete_namespaced_custom_object(IPAM, POOL_V, sc.ns, "inclusterippools", sc.pool)
    protected = held.replace("; held by", f"; the pool is being deleted and still carries {PROTECT_POOL}; held by")
    wait_for(lambda: reason(sc.network(), "Ready")[2] == protected, timeout=WAIT, what="InUse naming ProtectPool")
    assert PROTECT_POOL in get("inclusterippools", sc.pool, POOL_V)["metadata"]["finalizers"]

    # The claim deleted while the provider is paused: the provider has not released the
    # address yet, so the network stays InUse, also after a full resync of ours.
    bed.pause_peer(IPAM_PROVIDER)
    co.delete_namespaced_custom_object(IPAM, ADDRESS_V, sc.ns, "ipaddressclaims", "vm-1-net1")
    assert get("ipaddressclaims", "vm-1-net1")["metadata"].get("deletionTimestamp")
    ctl.resync()
    assert get("ipaddresses", "vm-1-net1") is not None
    assert reason(sc.network(), "Ready")[:2] == ("False", "InUse")
    assert OURS in sc.vlan()["metadata"]["finalizers"] and OURS in sc.finalizers()

    bed.resume_peer(IPAM_PROVIDER)
    obj = sc.wait("Ready", "SubnetStillExists")
    # It moved on only once the provider had released the address, the claim and the pool.
    assert get("ipaddresses", "vm-1-net1") is None
    assert get("ipaddressclaims", "vm-1-net1") is None and get("inclusterippools", sc.pool, POOL_V) is None
    assert reason(obj, "Ready")[2] == f'Subnet "{sc.sub}" still exists; VLAN {vid} is released after it is deleted'

    sc.delete_subnet()
    sc.network_gone()
    assert world.gone("vlans", sc.sub) and world.gone("subnets", sc.sub)
    assert ha_chassis_groups(bed.nbctl, sc.group) == []


# --------------------------------------------------------------------------- (d) Subnet deletion and Kube-OVN


def test_subnet_deletion_waits_for_kube_ovns_finalizer_then_its_pruning_releases_the_vlan(bed, ctl, world):
    sc = world.scene()
    vid = sc.create_network()["status"]["vlan"]
    # Kube-OVN's finalizer first on the Subnet: it handles the Subnet before our controller
    # sees it (v1.15 adds its own next to any other; v1.13 only to a Subnet without any).
    ctl.stop()
    try:
        sc.create_subnet()
        sc.create_pool()
        wait_for(lambda: sc.finalizers() == [KUBE_OVN_FINALIZER] and sc.kube_ovn_ready(),
                 timeout=WAIT, what="Kube-OVN's finalizer on the Subnet")
    finally:
        ctl.start()
    sc.wait("Ready", "Ready")
    assert sc.finalizers() == [KUBE_OVN_FINALIZER, OURS]
    sc.kube_ovn_ip("vm-pod", f"{sc.prefix}.10")
    wait_for(lambda: sc.using_ips() == 1, timeout=WAIT, what="Kube-OVN counting the IP in the Subnet")

    sc.delete_network()
    sc.wait("Ready", "SubnetStillExists")
    sc.delete_subnet()
    obj = sc.wait("Ready", "SubnetDeleting")
    assert reason(obj, "Ready")[2] == f'waiting for Kube-OVN to delete Subnet "{sc.sub}" before VLAN {vid} is released'
    # Ours is off; Kube-OVN keeps its own while it counts the IP, and the switch stays.
    wait_for(lambda: sc.finalizers() == [KUBE_OVN_FINALIZER], timeout=WAIT, what="only Kube-OVN's finalizer left")
    ctl.resync()
    assert reason(sc.network(), "Ready")[1] == "SubnetDeleting"
    assert sc.vlan()["status"]["subnets"] == [sc.sub]
    assert ovsdb_rows(bed.nbctl, "Logical_Switch", f"name={sc.sub}")

    # The IP goes: Kube-OVN lets the Subnet go, deletes its switch and router port and prunes
    # the name from the Vlan itself; the VLAN is released then, not at the prune timeout.
    world.a.co.delete_cluster_custom_object(*KUBEOVN, "ips", f"vm-pod.{sc.ns}")
    sc.network_gone()
    assert world.gone("subnets", sc.sub) and world.gone("vlans", sc.sub)
    assert not ovsdb_rows(bed.nbctl, "Logical_Switch", f"name={sc.sub}")
    assert sc.port() is None and ha_chassis_groups(bed.nbctl, sc.group) == []
    wait_for(lambda: not sc.cr_binding(), timeout=WAIT, what=f"cr-{sc.lrp} gone from the SB")
    released = sc.events(ctl, "VLANReleased")
    assert [e.message for e in released] == [f'released VLAN {vid} (Vlan "{sc.sub}")']
    assert sc.events(ctl, "VLANReleasedAfterPruneTimeout") == []


def ready_with_a_counted_ip(sc: Scene) -> int:
    """A Ready network whose Subnet carries both finalizers (Kube-OVN v1.15 adds its own next
    to ours) and a Kube-OVN IP it counts in use. Returns the VLAN."""
    vid = sc.ready()["status"]["vlan"]
    wait_for(lambda: sorted(sc.finalizers()) == sorted([KUBE_OVN_FINALIZER, OURS]), timeout=WAIT,
             what="both finalizers on the Subnet")
    sc.kube_ovn_ip("vm-pod", f"{sc.prefix}.10")
    wait_for(lambda: sc.using_ips() == 1, timeout=WAIT, what="Kube-OVN counting the IP in the Subnet")
    return vid


def only_ours_left(admin: Admin, sc: Scene) -> None:
    """The deleting Subnet stuck on Kube-OVN's finalizer (#4243), which an operator strips by
    hand: ours is then the only thing keeping it (v1.13 reached that state on its own: it
    added its finalizer only to a Subnet with none)."""
    strip_kube_ovn_finalizer(admin, sc.sub)
    wait_for(lambda: sc.finalizers() == [OURS], timeout=WAIT, what="only our finalizer left")


def test_subnet_whose_kube_ovn_finalizer_was_stripped_is_kept_while_it_counts_ips(bed, admin, ctl, world, peers_back):
    """Ours then keeps the deleting Subnet until Kube-OVN counts no IP in it (before the
    fix, removing ours deleted the Subnet, and Kube-OVN its switch, under the IP)."""
    sc = world.scene()
    vid = ready_with_a_counted_ip(sc)

    sc.delete_network()
    sc.wait("Ready", "SubnetStillExists")
    # Kube-OVN's finalizer first off, by hand, before the Subnet's delete reaches our pass:
    # ctl stopped meanwhile, so ours is still on when the controller sees it deleting.
    ctl.stop()
    try:
        sc.delete_subnet()
        wait_for(lambda: sc.subnet()["metadata"].get("deletionTimestamp"), timeout=WAIT, what="the Subnet deleting")
        only_ours_left(admin, sc)
    finally:
        ctl.start()
    sc.wait("Ready", "SubnetDeleting")
    want = (f'waiting for Kube-OVN to delete Subnet "{sc.sub}" before VLAN {vid} is released; Kube-OVN counts 1 '
            f"IP(s) in use in it and has no finalizer of its own on it, so the controller keeps its finalizer until "
            f"they are released")
    wait_for(lambda: reason(sc.network(), "Ready")[2] == want, timeout=WAIT, what="the held-by-us message")
    ctl.resync()
    assert sc.finalizers() == [OURS] and sc.subnet()["metadata"]["deletionTimestamp"]
    assert ovsdb_rows(bed.nbctl, "Logical_Switch", f"name={sc.sub}")

    world.a.co.delete_cluster_custom_object(*KUBEOVN, "ips", f"vm-pod.{sc.ns}")
    sc.network_gone()
    assert world.gone("subnets", sc.sub) and world.gone("vlans", sc.sub)
    assert not ovsdb_rows(bed.nbctl, "Logical_Switch", f"name={sc.sub}")
    assert sc.events(ctl, "VLANReleasedAfterPruneTimeout") == []


def test_orphaned_vlan_keeps_a_subnet_kube_ovn_counts_ips_in(bed, admin, ctl, world, peers_back):
    """The zone's orphan collection (§8.1) applies the same rule: the network gone with its
    finalizer stripped by hand, the Subnet deleted while Kube-OVN counts an IP in it, and
    Kube-OVN's finalizer stripped too: ours stays until the IP is released."""
    sc = world.scene()
    ready_with_a_counted_ip(sc)
    sc.delete_network()
    sc.wait("Ready", "SubnetStillExists")
    ctl.stop()
    try:
        admin.strip_finalizers(*PX, "proxmoxnetworks", sc.net, sc.ns)
        sc.network_gone()
        sc.delete_subnet()
        wait_for(lambda: sc.subnet()["metadata"].get("deletionTimestamp"), timeout=WAIT, what="the Subnet deleting")
        only_ours_left(admin, sc)
    finally:
        ctl.start()
    zone_message = lambda: reason(admin.zone(sc.zone), "Ready")[2]  # noqa: E731
    wait_for(lambda: "1 orphaned Vlan(s) still referenced by a subnet" in zone_message(), timeout=WAIT,
             what=f"the orphan counted on the zone (Subnet {sc.subnet() if not world.gone('subnets', sc.sub) else 'gone'}, "
                  f"zone message {zone_message()!r})")
    assert not world.gone("subnets", sc.sub), "the Subnet went while Kube-OVN counted an IP in it"
    ctl.resync()
    assert sc.finalizers() == [OURS] and sc.subnet()["metadata"]["deletionTimestamp"]
    assert not world.gone("vlans", sc.sub)

    world.a.co.delete_cluster_custom_object(*KUBEOVN, "ips", f"vm-pod.{sc.ns}")
    wait_for(lambda: world.gone("subnets", sc.sub), timeout=WAIT, what="the Subnet let go")
    wait_for(lambda: world.gone("vlans", sc.sub), timeout=WAIT, what="the orphaned Vlan collected")
    wait_for(lambda: "orphaned" not in zone_message(), timeout=WAIT, what="no orphan left on the zone")


def _parse(ts: str) -> dt.datetime:
    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))


def test_vlan_is_released_at_the_prune_timeout_when_kube_ovn_is_stopped(bed, ctl, world, peers_back):
    sc = world.scene()
    vid = sc.ready()["status"]["vlan"]
    sc.delete_network()
    sc.wait("Ready", "SubnetStillExists")
    # The Subnet's deletion completes while kube-ovn-controller is down: Kube-OVN lets it
    # go (no IP counted), it is stopped, and then our finalizer comes off.
    ctl.stop()
    try:
        sc.delete_subnet()
        wait_for(lambda: sc.finalizers() == [OURS], timeout=WAIT, what="Kube-OVN letting the Subnet go")
        bed.stop_peer(KUBE_OVN)
    finally:
        ctl.start()
    obj = sc.wait("Ready", "SwitchDeleting")
    assert world.gone("subnets", sc.sub)
    assert sc.vlan()["status"]["subnets"] == [sc.sub]  # nobody prunes it: Kube-OVN missed the delete
    started = _parse(json.loads(sc.vlan()["metadata"]["annotations"][names.ANNOTATION_DELETED_SUBNETS])[sc.sub])
    deadline = (started + dt.timedelta(seconds=PRUNE)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert reason(obj, "Ready") == ("False", "SwitchDeleting",
        f'Kube-OVN still lists deleted subnets [{sc.sub}] on Vlan "{sc.sub}" until it has deleted their logical '
        f"switches; VLAN {vid} is released then, or at {deadline} at the latest")
    assert reason(obj, "SwitchDeleted") == ("False", "ListedOnVlan",
                                            f"Kube-OVN still lists deleted subnets [{sc.sub}] on the Vlan")
    # The release hook ran: the network's group is gone from the router port Kube-OVN left.
    assert ha_chassis_groups(bed.nbctl, sc.group) == []

    sc.network_gone(timeout=PRUNE + WAIT)
    assert dt.datetime.now(dt.timezone.utc) >= started + dt.timedelta(seconds=PRUNE)
    assert world.gone("vlans", sc.sub)
    (ev,) = sc.events(ctl, "VLANReleasedAfterPruneTimeout")
    assert ev.type == "Warning"
    assert ev.message == (f"released VLAN {vid}: Kube-OVN still listed deleted subnets [{sc.sub}] after the prune "
                          f"timeout of {int(PRUNE)}s")

    # Kube-OVN back: its start-up garbage collection removes the switch it never deleted
    # (gcLogicalSwitch), but not the router port (gcLogicalRouterPort takes only peer
    # ports): that is left on the VPC router, with nothing of ours on it.
    offset = kube_ovn_log_size(bed)
    bed.start_peer(KUBE_OVN)
    wait_for(lambda: not ovsdb_rows(bed.nbctl, "Logical_Switch", f"name={sc.sub}"), timeout=WAIT,
             what=f"Kube-OVN collecting the logical switch {sc.sub}")
    wait_for(lambda: "start to gc vpc dns" in kube_ovn_log_since(bed, offset), timeout=WAIT,
             what="kube-ovn-controller's start-up garbage collection")
    port = sc.port()
    assert port is not None and port["ha_chassis_group"] == []


# --------------------------------------------------------------------------- (e) a hand-made duplicate Vlan


def test_hand_made_duplicate_vlan_on_kube_ovn_v115_flags_both_takes_the_subnet_down_and_we_write_nothing_back(
        bed, admin, ctl, world, peers_back):
    """Issue 24. Kube-OVN v1.15 flags a Vlan (``status.conflict``) at its check of it while
    another holds its provider and ID: the duplicate at once, ours at its next event (here
    a restart of kube-ovn-controller), and takes our Subnet down
    (``Ready=False ValidateSubnetVlanFailed``) at its next check of the Subnet that reads the
    flag (certain at the restart after). Our VLANConflict names the duplicate and says
    so; across the restart the controller writes nothing but the network's status, once per
    state it reports, and nothing to the Vlan or the Subnet. With the duplicate gone and
    Kube-OVN's next check of ours (a restart again: its own retry backs off up to 1000 s),
    the network is Ready again with its group untouched."""
    sc = world.scene()
    vid = sc.ready()["status"]["vlan"]
    (group_before,) = ha_chassis_groups(bed.nbctl, sc.group)
    dup = unique("dup")
    before = write_marker(bed)
    admin.create_vlan(dup, vid, world.provider)

    ours_named = f'VLAN {vid} on provider "{world.provider}" is also held by Vlan "{dup}"'
    obj = sc.wait("VLANAllocated", "VLANConflict")
    assert reason(obj, "VLANAllocated")[2].startswith(ours_named)
    # Kube-OVN flags the duplicate at once; ours only at its next check of it.
    wait_for(lambda: (world.get("vlans", dup).get("status") or {}).get("conflict") is True, timeout=WAIT,
             what="Kube-OVN flagging the duplicate")
    zone_ready = lambda: reason(admin.zone(sc.zone), "Ready")[2]  # noqa: E731
    held = ", ".join(sorted([dup, sc.sub]))
    wait_for(lambda: f"; duplicate VLAN IDs on provider: {vid} ({held})" in zone_ready(), timeout=WAIT,
             what="the duplicate on the zone")

    # A restart of kube-ovn-controller checks ours: flagged. Whether that start also takes the
    # Subnet down depends on which of its two queues runs first (the flag does not re-queue the
    # Subnets of a Vlan: pkg/controller/vlan.go enqueueUpdateVlan), so a second restart, which
    # reads the flag from the start, is the sequence a user sees for certain.
    bed.stop_peer(KUBE_OVN)
    bed.start_peer(KUBE_OVN)
    wait_for(lambda: (sc.vlan().get("status") or {}).get("conflict") is True, timeout=WAIT,
             what="Kube-OVN flagging our Vlan")
    bed.stop_peer(KUBE_OVN)
    bed.start_peer(KUBE_OVN)
    wait_for(lambda: any(c.get("type") == "Ready" and c.get("reason") == "ValidateSubnetVlanFailed"
                         for c in (sc.subnet().get("status") or {}).get("conditions") or []),
             timeout=WAIT, what="Kube-OVN taking the Subnet down")
    down = (f'{ours_named}; Kube-OVN flags Vlan "{sc.sub}" as conflicting too and has taken Subnet "{sc.sub}" '
            "down (Ready=False, ValidateSubnetVlanFailed); delete the other Vlan, then Kube-OVN clears the flag "
            "at its next check of this one")
    wait_for(lambda: reason(sc.network(), "VLANAllocated") == ("False", "VLANConflict", down), timeout=WAIT,
             what="our condition saying what Kube-OVN did")
    obj = sc.network()
    assert reason(obj, "Ready") == ("False", "VLANConflict", down)
    assert reason(obj, "GatewayReady") == ("Unknown", "WaitingForVLAN", "waits for a VLAN to be allocated")
    # Nothing of Kube-OVN's side touched by us: the localnet port keeps our VLAN, our group stays.
    (localnet,) = ovsdb_rows(bed.nbctl, "Logical_Switch_Port", f"name=localnet.{sc.sub}")
    assert localnet["tag"] == vid
    assert ha_chassis_groups(bed.nbctl, sc.group) == [group_before]

    # Writes, from the duplicate's creation through the restart to a settled full pass: only
    # the network's status, once per message it showed (named, then Kube-OVN's part added),
    # and the events; never the Vlan, the Subnet or the pool.
    ctl.resync()
    writes = writes_before(bed, bed.controller_user, write_marker(bed), since_marker=before)
    kinds = sorted({(w.resource, w.subresource) for w in writes})
    assert set(kinds) <= {("proxmoxnetworks", "status"), ("events", ""), ("proxmoxnetworkzones", "status")}, \
        [f"{w} {w.request_uri} {w.received}" for w in writes if w.resource != "events"]
    status_writes = [w for w in writes if w.resource == "proxmoxnetworks" and w.name == sc.net]
    assert 1 <= len(status_writes) <= 3, [str(w) for w in status_writes]
    ctl.mgr.events.flush()  # an Event queued by the last status write is posted before the marker
    settled = write_marker(bed)
    ctl.resync()
    assert writes_before(bed, bed.controller_user, write_marker(bed), since_marker=settled) == []

    # The duplicate goes; Kube-OVN clears ours at its next check (a restart) and the network is Ready.
    admin.co.delete_cluster_custom_object(*KUBEOVN, "vlans", dup)
    bed.stop_peer(KUBE_OVN)
    bed.start_peer(KUBE_OVN)
    obj = sc.wait("Ready", "Ready")
    assert reason(obj, "VLANAllocated") == ("True", "Allocated", f"VLAN {vid} on bridge vmbr1")
    assert reason(obj, "GatewayReady") == ("True", "ChassisAssigned", assigned(sc))
    assert "conflict" not in (sc.vlan().get("status") or {}) or sc.vlan()["status"]["conflict"] is False
    assert ha_chassis_groups(bed.nbctl, sc.group) == [group_before]


# --------------------------------------------------------------------------- Kube-OVN's Subnet defaults


DEFAULT_VPC_TAIL = ("; a Proxmox network needs a tenant VPC: the default VPC's router is the cluster's, so the "
                    "controller never makes it the gateway of a VLAN. Recreate the Subnet with spec.vpc set to the "
                    "tenant's VPC (the VLAN stays allocated meanwhile)")


def default_vpc_router_port(bed: LocalCluster, sub: str) -> dict:
    """Kube-OVN's router port of ``sub`` on the cluster router, awaited."""
    return wait_for(lambda: next(iter(ovsdb_rows(bed.nbctl, "Logical_Router_Port", f"name=ovn-cluster-{sub}")), None),
                    timeout=WAIT, what=f"Kube-OVN's router port ovn-cluster-{sub}")


@pytest.mark.parametrize("vpc", [None, "ovn-cluster"], ids=["no-vpc", "vpc-ovn-cluster"])
def test_a_subnet_in_the_default_vpc_never_gets_a_group_on_the_cluster_router(bed, ctl, world, vpc):
    """Field report R2 (kubeovn/kube-ovn#5530). Kube-OVN writes ``vpc: ovn-cluster`` into a
    Subnet without one and, for ``logicalGateway: true``, makes router port
    ``ovn-cluster-<subnet>`` on the cluster's own router. The controller never makes that
    port a tenant VLAN's gateway: no group, ``SubnetInvalid`` naming the VPC and what to do,
    and the VLAN stays allocated. Before this check the network got ChassisAssigned there
    (checked on main before the change: the group ``px-ovn-cluster-<subnet>`` was written)."""
    sc = world.scene()
    sc.create_network()
    sc.create_subnet(vpc=vpc)
    sc.create_pool()
    wait_for(lambda: sc.subnet()["spec"].get("vpc") == "ovn-cluster", timeout=WAIT, what="Kube-OVN's default VPC")
    port = default_vpc_router_port(bed, sc.sub)
    # Kube-OVN's default lands at once, so both read "is in": the "has no spec.vpc" message
    # is for the moment before it (test_plan_network.py).
    invalid = ("False", "SubnetInvalid", f'Subnet "{sc.sub}" is in the default VPC "ovn-cluster"{DEFAULT_VPC_TAIL}')
    obj = wait_for(lambda: (n := sc.network()) and reason(n, "SubnetReady") == invalid and n, timeout=WAIT,
                   what="SubnetInvalid for the default VPC")
    assert reason(obj, "Ready") == invalid
    assert reason(obj, "GatewayReady") == (
        "Unknown", "SubnetUnavailable",
        f'no HA chassis group on router port "ovn-cluster-{sc.sub}" of the default VPC: see SubnetReady')
    assert reason(obj, "VLANAllocated")[:2] == ("True", "Allocated") and obj["status"]["vlan"] == sc.first_vlan
    assert ha_chassis_groups(bed.nbctl, f"px-ovn-cluster-{sc.sub}") == []
    assert ovsdb_rows(bed.nbctl, "Logical_Router_Port", f"name=ovn-cluster-{sc.sub}")[0]["ha_chassis_group"] == []
    assert port["name"] == f"ovn-cluster-{sc.sub}"
    # The Event is written after the status (controller.apply.executor), so it is awaited, not read once.
    wait_for(lambda: any(e.type == "Warning" for e in sc.events(ctl, "SubnetInvalid")),
             timeout=WAIT, what="the SubnetInvalid Warning Event")


def test_a_subnet_in_another_tenants_vpc_is_reported_and_served(bed, ctl, world):
    """Field report R2, its last variant, report only (a ProxmoxNetwork has no VPC field): a
    namespace's VPCs are those whose ``spec.namespaces`` (Kube-OVN's field) lists it. A
    Subnet in a VPC that lists only another namespace gets its group as usual; SubnetReady
    stays True and says so, with one Warning Event ``SubnetInForeignVPC``; once the VPC
    lists the network's namespace the note goes (the Vpc's event brings the pass)."""
    sc = world.scene()
    other, vpc = unique("tenant-b"), unique("vpc-b")
    world.a.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=other)))
    world.a.co.create_cluster_custom_object(*KUBEOVN, "vpcs", {
        "apiVersion": "kubeovn.io/v1", "kind": "Vpc", "metadata": {"name": vpc}, "spec": {"namespaces": [other]}})
    wait_for(lambda: ((kube_get(world.a, "vpcs", vpc) or {}).get("status") or {}).get("standby"), timeout=WAIT,
             what=f"Vpc {vpc} up")
    sc.create_network()
    sc.create_subnet(vpc=vpc)
    sc.create_pool()
    obj = sc.wait("Ready", "Ready")
    note = (f'Subnet "{sc.sub}" is in VPC "{vpc}", whose spec.namespaces lists {other} and not "{sc.ns}": '
            "another tenant's VPC? Its VMs would reach that VPC's router and subnets")
    assert reason(obj, "SubnetReady") == ("True", "Ready", f"Kube-OVN reports the subnet Ready; {note}")
    assert reason(obj, "GatewayReady")[:2] == ("True", "ChassisAssigned")
    assert ha_chassis_groups(bed.nbctl, f"px-{vpc}-{sc.sub}") != []
    # The Event is written after the status (controller.apply.executor): awaited, then counted.
    events = wait_for(lambda: sc.events(ctl, "SubnetInForeignVPC"), timeout=WAIT,
                      what="the SubnetInForeignVPC Warning Event")
    assert len(events) == 1 and events[0].type == "Warning" and events[0].message == note

    world.a.co.patch_cluster_custom_object(*KUBEOVN, "vpcs", vpc, {"spec": {"namespaces": [other, sc.ns]}})
    wait_for(lambda: reason(sc.network(), "SubnetReady") == ("True", "Ready", "Kube-OVN reports the subnet Ready"),
             timeout=WAIT, what="the note gone once the VPC lists the namespace")


def test_a_group_already_on_a_default_vpc_router_port_is_removed_with_its_pointer(bed, ctl, world):
    """Field report R2: a group a controller without the check attached to
    ``ovn-cluster-<subnet>`` (written here as it wrote one: our owner and network ids, the
    port pointing at it) is deleted together with the port's pointer; the VLAN stays."""
    sc = world.scene()
    sc.create_network()  # its Vlan: Kube-OVN configures a Subnet only once the Vlan it names exists
    ctl.stop()
    try:
        sc.create_subnet(vpc="ovn-cluster")
        sc.create_pool()
        port = default_vpc_router_port(bed, sc.sub)
        group = f"px-ovn-cluster-{sc.sub}"
        uuid = bed.nbctl("--id=@g", "create", "HA_Chassis_Group", f"name={group}",
                         'external_ids:owner="proxmox-network"', f'external_ids:network="{sc.ns}/{sc.net}"',
                         "--", "set", "Logical_Router_Port", port["_uuid"], "ha_chassis_group=@g").strip()
        assert uuid and ha_chassis_groups(bed.nbctl, group)
    finally:
        ctl.start()
    wait_for(lambda: ha_chassis_groups(bed.nbctl, group) == [], timeout=WAIT, what="the group deleted")
    assert ovsdb_rows(bed.nbctl, "Logical_Router_Port", f"name=ovn-cluster-{sc.sub}")[0]["ha_chassis_group"] == []
    obj = sc.wait("SubnetReady", "SubnetInvalid")
    assert reason(obj, "VLANAllocated")[:2] == ("True", "Allocated")


def test_a_hand_made_vlan_with_our_labels_but_not_our_finalizer_is_reported_never_deleted(bed, ctl, world):
    """Issue 26 item 7 (an acceptance run saw such a Vlan deleted 38 ms after it appeared):
    a Vlan labelled with our zone and a network that does not exist, without our finalizer,
    is no proof of ownership (product-decisions.md §8): the zone names it and counts it as an
    orphan, and the Vlan stays as its maker wrote it."""
    sc = world.scene()
    name = unique("hand-made")
    world.a.co.create_cluster_custom_object(*KUBEOVN, "vlans", {
        "apiVersion": "kubeovn.io/v1", "kind": "Vlan", "metadata": {"name": name, "labels": {
            names.LABEL_ZONE: sc.zone, names.LABEL_NETWORK_NAMESPACE: sc.ns,
            names.LABEL_NETWORK_NAME: "no-such-network"}},
        "spec": {"id": sc.first_vlan + 50, "provider": world.provider}})
    try:
        wait_for(lambda: f'left alone: "{name}" (VLAN {sc.first_vlan + 50})' in reason(world.a.zone(sc.zone), "Ready")[2],
                 timeout=WAIT, what="the hand-made Vlan named on the zone")
        ctl.resync()
        vlan = world.get("vlans", name)
        assert not vlan["metadata"].get("deletionTimestamp")
        assert names.FINALIZER not in (vlan["metadata"].get("finalizers") or [])
        assert vlan["metadata"]["labels"][names.LABEL_NETWORK_NAME] == "no-such-network"
    finally:
        world.a.co.delete_cluster_custom_object(*KUBEOVN, "vlans", name)


def test_a_strangers_subnet_on_our_vlan_is_a_conflict_and_never_deleted(bed, ctl, world):
    """Field report R1, on the real Kube-OVN: a second Subnet (another tenant's, made before
    the admission policy or with it off) names the network's Vlan; Kube-OVN gives it a
    localnet port with our tag. The network says VLANConflict naming it, keeps its VLAN,
    and a deletion of the network waits for the stranger (VLANStillReferenced) and never
    deletes it; once the stranger goes the VLAN is released."""
    sc = world.scene()
    vid = sc.ready()["status"]["vlan"]
    stranger = unique("stranger")
    p = f"10.{next(world._octets)}.9"
    world.a.co.create_cluster_custom_object(*KUBEOVN, "subnets", {
        "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": stranger},
        "spec": {"vpc": VPC, "vlan": sc.sub, "cidrBlock": f"{p}.0/24", "gateway": f"{p}.1", "protocol": "IPv4"}})
    try:
        wait_for(lambda: ovsdb_rows(bed.nbctl, "Logical_Switch_Port", f"name=localnet.{stranger}"), timeout=WAIT,
                 what="Kube-OVN's localnet port for the stranger (the joined segment)")
        obj = sc.wait("VLANAllocated", "VLANConflict")
        assert reason(obj, "VLANAllocated")[2].startswith(
            f'Subnet "{stranger}" also names Vlan "{sc.sub}" (VLAN {vid}) of this network: ')
        assert reason(obj, "Ready")[:2] == ("False", "VLANConflict") and obj["status"]["vlan"] == vid
        sc.delete_network()
        sc.delete_subnet()
        obj = sc.wait("Ready", "VLANStillReferenced")
        assert reason(obj, "Ready")[2] == (
            f'Kube-OVN still lists subnets [{stranger}] on Vlan "{sc.sub}"; [{stranger}] are not this network\'s: the '
            f"controller never deletes them, and VLAN {vid} is released once they are gone")
        ctl.resync()
        assert not world.gone("subnets", stranger) and not world.gone("vlans", sc.sub)
    finally:
        world.a.co.delete_cluster_custom_object(*KUBEOVN, "subnets", stranger)
    wait_for(lambda: world.gone("vlans", sc.sub), timeout=WAIT, what="the VLAN released once the stranger went")


# --------------------------------------------------------------------------- the package's transit network


def test_the_charts_transit_network_gets_its_isolation_acls_from_the_real_kube_ovn(bed, world, tmp_path):
    """Issue 27 item 1: the chart's transit network (admission-and-packaging.md (e)) on the
    trunk provider, applied as rendered: the real kube-ovn-controller makes the Subnet's
    logical switch and writes the two ACLs that keep the egress gateways of different VPCs
    apart into the NB (allow from the router side at 2001, drop to the transit CIDR but the
    gateway at 2000), each as the chart wrote it."""
    import json as _json

    from tests.test_charts_integration import CHART, as_list, build_helm, render

    helm = build_helm()
    ns, name = unique("pnc-transit"), unique("transit")[:20]
    world.a.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    values = {"providerNetwork": {"name": world.provider}, "gateway": {"manage": False}, "admission": {"enabled": False},
              "transit": {"enabled": True, "name": name, "vlan": 3990, "cidr": "10.72.0.0/24", "gateway": "10.72.0.1",
                          "excludeIps": ["10.72.0.1..10.72.0.9"]}}
    objs = [o for o in render(helm, CHART, values, namespace=ns, release="pnc-transit")
            if o["kind"] in ("Vlan", "NetworkAttachmentDefinition", "Subnet")]
    assert sorted(o["kind"] for o in objs) == ["NetworkAttachmentDefinition", "Subnet", "Vlan"]
    r = bed.run_kubectl("apply", "--server-side", "--field-manager=helm", "-f", "-",
                        input=as_list(objs).encode(), check=False)
    assert r.returncode == 0, r.stderr.decode()
    try:
        want = {("from-lport", 2001, f'inport == "localnet.{name}"', "allow"),
                ("from-lport", 2000, "ip4 && ip4.dst == 10.72.0.0/24 && ip4.dst != 10.72.0.1", "drop")}

        def acls_on_the_switch() -> set | None:
            """The Subnet's ACL rows, once the wanted ones are there and the Subnet's logical
            switch references each. Kube-OVN rewrites a switch's ACLs in more than one
            transaction, so a row read and the switch read a moment later can disagree
            (issue 28: the switch was read with no ACL between two ACL reads that had them):
            read both until they agree."""
            rows = ovsdb_rows(bed.nbctl, "ACL", f"external_ids:subnet={name}")
            got = {(a["direction"], a["priority"], a["match"], a["action"]) for a in rows}
            switches = ovsdb_rows(bed.nbctl, "Logical_Switch", f"name={name}")
            if not want <= got or len(switches) != 1:
                return None
            wanted = {a["_uuid"] for a in rows if (a["direction"], a["priority"], a["match"], a["action"]) in want}
            return got if wanted <= set(ovsdb_set(switches[0]["acls"])) else None

        got = wait_for(acls_on_the_switch, timeout=WAIT, what="the transit Subnet's ACLs in the NB, on its logical switch")
        sub = world.get("subnets", name)
        assert (sub["spec"]["provider"], sub["spec"]["vlan"], sub["spec"]["disableGatewayCheck"]) == (
            f"{name}.{ns}.ovn", name, True)
        print(f"\n[transit] Kube-OVN's ACL rows for {name}: {sorted(got)}; "
              f"the NAD's config {_json.loads(objs[[o['kind'] for o in objs].index('NetworkAttachmentDefinition')]['spec']['config'])}")
    finally:
        bed.run_kubectl("delete", "-f", "-", "--wait=false", input=as_list(objs).encode(), check=False)


# --------------------------------------------------------------------------- the tenant chart


def test_the_tenant_chart_on_the_real_peers_binds_serves_and_holds_through_an_uninstall(bed, ctl, world):
    """Issue 27 item 2: ``charts/proxmox-network-subnet`` rendered for a tenant VPC that
    exists and applied as Helm would: the real Kube-OVN binds its Subnet to the Vlan the
    controller allocates under the Subnet's name, the network goes Ready with its gateway
    group, the real IPAM provider hands a claim an address of the vmRange. Then the release
    is deleted (as ``helm uninstall`` deletes, without waiting) while the claim holds its
    address: the deletion returns, the network stays InUse holding its VLAN and Subnet, and
    the VLAN is released only after the claim is gone."""
    from tests.test_charts_integration import as_list, build_helm, run_helm, set_args

    helm = build_helm()
    sc = world.scene()
    values = {"vpc": VPC, "subnets": [{"name": "workers", "cidr": f"{sc.prefix}.0/24", "proxmox": {"zone": sc.zone}}]}
    r = run_helm(helm, "template", "tenant", str(ROOT / "charts" / "proxmox-network-subnet"), "--namespace", sc.ns,
                 "--api-versions", "proxmox.cozystack.io/v1alpha1/ProxmoxNetworkZone", *set_args(values))
    objs = [d for d in yaml.safe_load_all(r.stdout) if d]
    sub = next(o["metadata"]["name"] for o in objs if o["kind"] == "Subnet")
    apply = world.bed.run_kubectl("apply", "--server-side", "--field-manager=helm", "-f", "-",
                                  input=as_list(objs).encode(), check=False)
    assert apply.returncode == 0, apply.stderr.decode()
    obj = wait_condition(world.a, sc.ns, sub, "Ready", "Ready", WAIT)
    vid = obj["status"]["vlan"]
    assert vid == sc.first_vlan and world.get("vlans", sub)["spec"]["id"] == vid
    assert world.get("subnets", sub)["spec"]["vlan"] == sub
    assert reason(obj, "GatewayReady")[:2] == ("True", "ChassisAssigned")
    assert reason(obj, "IPPoolReady") == ("True", "Ready", "pool lies inside the subnet's excludeIps")
    co = world.a.co
    co.create_namespaced_custom_object(IPAM, ADDRESS_V, sc.ns, "ipaddressclaims", {
        "apiVersion": f"{IPAM}/{ADDRESS_V}", "kind": "IPAddressClaim", "metadata": {"name": "vm-1-net0"},
        "spec": {"poolRef": {"apiGroup": IPAM, "kind": "InClusterIPPool", "name": sub}}})

    def address() -> str | None:
        c = co.get_namespaced_custom_object(IPAM, ADDRESS_V, sc.ns, "ipaddressclaims", "vm-1-net0")
        ref = ((c.get("status") or {}).get("addressRef") or {}).get("name")
        if not ref:
            return None
        return co.get_namespaced_custom_object(IPAM, ADDRESS_V, sc.ns, "ipaddresses", ref)["spec"]["address"]

    got = wait_for(address, timeout=WAIT, what="the provider's address for the claim")
    assert 64 <= int(got.rsplit(".", 1)[1]) <= 191 and got.startswith(f"{sc.prefix}.")  # the middle half

    # Release safety: an upgrade that drops the subnet while the controller counts the address is refused.
    wait_for(lambda: (world.a.network(sc.ns, sub)["status"].get("ipPool") or {}).get("used") == 1, timeout=WAIT,
             what="the network counting the address")
    r = run_helm(helm, "template", "tenant", str(ROOT / "charts" / "proxmox-network-subnet"), "--namespace", sc.ns,
                 "--dry-run=server", "--api-versions", "proxmox.cozystack.io/v1alpha1/ProxmoxNetworkZone",
                 *set_args({"vpc": VPC, "subnets": []}), check=False,
                 env={**os.environ, "KUBECONFIG": str(world.bed.admin_kubeconfig)})
    assert r.returncode == 1
    assert ('subnet "workers" is Proxmox-backed and 1 VM address(es) are still allocated on it; delete those '
            'machines before removing the subnet') in r.stderr, r.stderr

    # "helm uninstall": every object of the release deleted, nothing waited for.
    gone = world.bed.run_kubectl("delete", "--wait=false", "-f", "-", input=as_list(objs).encode(), check=False)
    assert gone.returncode == 0, gone.stderr.decode()
    obj = wait_condition(world.a, sc.ns, sub, "Ready", "InUse", WAIT)
    assert "held by IPAddressClaim vm-1-net0" in reason(obj, "Ready")[2]
    assert world.get("vlans", sub)["spec"]["id"] == vid and OURS in world.get("subnets", sub)["metadata"]["finalizers"]
    co.delete_namespaced_custom_object(IPAM, ADDRESS_V, sc.ns, "ipaddressclaims", "vm-1-net0")
    wait_for(lambda: world.gone("vlans", sub), timeout=3 * WAIT, what="the VLAN released after the last address")
    print(f"\n[tenant chart] {sub}: VLAN {vid}, address {got}; held through the uninstall until the claim went")


# --------------------------------------------------------------------------- S1: a Subnet made before its Vlan


def subnet_ready(sc: Scene) -> dict:
    conds = (sc.subnet().get("status") or {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == "Ready"), {})


def test_s1_a_subnet_made_before_its_vlan_gets_ready_on_kube_ovn_v1_15_24(bed, ctl, world):
    """Field report S1, the control: on v1.15.24 (which has kube-ovn#6352) a Subnet made
    while its Vlan does not exist yet, with the controller down, is marked
    ``ValidateSubnetVlanFailed`` by Kube-OVN; once the controller is up and makes the Vlan,
    Kube-OVN validates it again by itself (no restart of kube-ovn-controller) and the
    network reaches Ready on the VLAN it was given."""
    sc = world.scene()
    kube_ovn_pid = bed.peer_pid(KUBE_OVN)
    ctl.stop()
    try:
        sc.create_subnet()
        sc.create_pool()
        sc.a.create_network(sc.ns, sc.net, sc.zone, sc.sub, sc.pool)
        wait_for(lambda: subnet_ready(sc).get("reason") == "ValidateSubnetVlanFailed", timeout=WAIT,
                 what="Kube-OVN marking the Subnet ValidateSubnetVlanFailed (no Vlan yet)")
        assert world.gone("vlans", sc.sub)
    finally:
        ctl.start()
    obj = sc.wait("Ready", "Ready")
    assert obj["status"]["vlan"] == sc.first_vlan
    assert reason(obj, "SubnetReady")[:2] == ("True", "Ready")
    assert bed.peer_pid(KUBE_OVN) == kube_ovn_pid  # no restart needed
    assert not sc.events(ctl, "KubeOVNStale")


def test_s1_kube_ovns_stale_validation_is_named_and_nothing_is_nudged(bed, world, peers_back, capsys):
    """Field report S1 on the affected versions (v1.15.0-v1.15.4 are not in the bed): the
    state they leave is made through the API. kube-ovn-controller stopped, the Subnet carries
    what ``patchSubnetStatus`` wrote for the missing Vlan (Ready=False
    ValidateSubnetVlanFailed, Validated True); the controller makes the Vlan and, after
    ``--kube-ovn-stale-after`` (5 s here), shows SubnetReady=False SubnetNotReady with the
    stale message (never SubnetInvalid or VLANConflict) and one Warning Event KubeOVNStale,
    and ``doctor`` prints it. The Vlan is neither re-created nor re-tagged, the Subnet's spec
    and conditions are left as they are, the VLAN stays allocated. Kube-OVN started again
    (the restart the message asks for) validates the Subnet and the network is Ready on the
    same Vlan."""
    from controller import doctor

    sc = world.scene()
    bed.stop_peer(KUBE_OVN)
    sc.create_subnet()
    sc.create_pool()
    failed = (f"failed to validate vlan for subnet {sc.sub}, failed to get vlan {sc.sub}: "
              f'vlan.kubeovn.io "{sc.sub}" not found')
    at = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    sc.a.co.patch_cluster_custom_object_status(*KUBEOVN, "subnets", sc.sub, {"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "ValidateSubnetVlanFailed", "message": failed,
         "lastUpdateTime": at, "lastTransitionTime": at},
        {"type": "Validated", "status": "True", "reason": "ValidateSubnetVlanFailed", "message": "",
         "lastUpdateTime": at, "lastTransitionTime": at},
        {"type": "Error", "status": "True", "reason": "ValidateSubnetVlanFailed", "message": failed,
         "lastUpdateTime": at, "lastTransitionTime": at}]}})
    before = sc.subnet()
    stale = (f'Kube-OVN has not re-validated Subnet "{sc.sub}" since Vlan "{sc.sub}" was created; '
             "kube-ovn-controller before v1.15.5 needs a restart (kube-ovn#6352)")
    c = Ctl(bed, manage_gateway=True, ovn_nb_address=bed.nb_tcp, subnet_prune_timeout=PRUNE,
            kube_ovn_stale_after=5.0)
    c.start()
    try:
        sc.a.create_network(sc.ns, sc.net, sc.zone, sc.sub, sc.pool)
        made = sc.wait("VLANAllocated", "Allocated")
        vlan = sc.vlan()
        wait_for(lambda: reason(sc.network(), "SubnetReady") == ("False", "SubnetNotReady", stale), timeout=WAIT,
                 what="SubnetReady naming Kube-OVN's stale state")
        c.resync()
        obj = sc.network()
        assert reason(obj, "SubnetReady") == ("False", "SubnetNotReady", stale)
        assert reason(obj, "VLANAllocated")[:2] == ("True", "Allocated")
        assert obj["status"]["vlan"] == made["status"]["vlan"] == sc.first_vlan
        (ev,) = sc.events(c, "KubeOVNStale")
        assert ev.type == "Warning" and ev.message == stale
        after = sc.vlan()
        assert (after["metadata"]["uid"], after["spec"]["id"]) == (vlan["metadata"]["uid"], sc.first_vlan)
        sub = sc.subnet()
        assert sub["spec"] == before["spec"] and sub["status"]["conditions"] == before["status"]["conditions"]

        capsys.readouterr()
        assert doctor.main(["--kubeconfig", str(bed.admin_kubeconfig), "-n", sc.ns, sc.net]) == 0
        assert f"  SubnetReady=False SubnetNotReady: {stale}" in capsys.readouterr().out.splitlines()

        bed.start_peer(KUBE_OVN)
        ready = sc.wait("Ready", "Ready")
        assert ready["status"]["vlan"] == sc.first_vlan and sc.vlan()["metadata"]["uid"] == vlan["metadata"]["uid"]
        assert len(sc.events(c, "KubeOVNStale")) == 1
    finally:
        c.stop()


# --------------------------------------------------------------------------- S6: a foreign Vlan on our ID


def ready_gauge(ctl: Ctl, sc: Scene) -> float | None:
    m = ctl.mgr.metrics.registry
    samples = [s for f in m.collect() if f.name == "cozy_proxmox_network_ready" for s in f.samples
               if s.labels.get("namespace") == sc.ns and s.labels.get("network") == sc.net]
    return samples[0].value if len(samples) == 1 else None


def test_s6_a_foreign_vlan_on_our_id_is_a_conflict_whatever_its_subnet_shows_and_is_never_touched(
        bed, admin, ctl, world, peers_back, capsys):
    """Field report S6 on v1.15.24 (kube-ovn#6527 is not in any v1.15 tag). Our network is
    Ready on VLAN v; then, while our controller restarts, someone else's chart makes Vlan
    ``foreign`` with ID v on our provider, Subnet ``fsub`` on it and a pod address in it.
    Expected: the network keeps VLAN v (never re-tagged or released), VLANAllocated=False
    VLANConflict naming both ``foreign`` and ``fsub``, whichever Vlan Kube-OVN flags;
    ``cozy_proxmox_network_ready`` 0 until the foreign objects are gone; ``doctor`` with the
    NB lists the localnet ports on VLAN v, ours and the foreign one; the controller never
    writes to ``foreign`` or ``fsub`` (audit log).

    On v1.15 whether the foreign Subnet gets its localnet port depends on which of
    Kube-OVN's queues runs first (the race of S6); when it did not, the test adds the port as
    that race leaves it (``localnet.fsub``, tag v, ``network_name`` our provider) so the
    NB holds two localnets with one tag either way."""
    from controller import doctor

    sc = world.scene()
    vid = sc.ready()["status"]["vlan"]
    ours = sc.vlan()
    foreign, fsub = unique("foreign"), unique("fsub")
    before = write_marker(bed)
    ctl.stop()
    try:
        admin.create_vlan(foreign, vid, world.provider)
        admin.co.create_cluster_custom_object(*KUBEOVN, "subnets", {
            "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": fsub},
            "spec": {"vlan": foreign, "vpc": VPC, "cidrBlock": "10.173.0.0/24", "gateway": "10.173.0.1",
                     "protocol": "IPv4"}})
        admin.co.create_cluster_custom_object(*KUBEOVN, "ips", {
            "apiVersion": "kubeovn.io/v1", "kind": "IP",
            "metadata": {"name": f"fixed.{sc.ns}", "labels": {fsub: "", "ovn.kubernetes.io/subnet": fsub}},
            "spec": {"podName": "fixed", "namespace": sc.ns, "subnet": fsub, "nodeName": TRUNK[0][0],
                     "v4IpAddress": "10.173.0.10", "macAddress": "00:00:00:17:30:10", "podType": ""}})
    finally:
        ctl.start()
    named = f'VLAN {vid} on provider "{world.provider}" is also held by Vlan "{foreign}" (Subnet "{fsub}")'
    wait_for(lambda: reason(sc.network(), "VLANAllocated")[:2] == ("False", "VLANConflict")
             and reason(sc.network(), "VLANAllocated")[2].startswith(named), timeout=WAIT,
             what="VLANConflict naming the foreign Vlan and its Subnet")
    obj = sc.network()
    assert obj["status"]["vlan"] == vid and reason(obj, "Ready")[:2] == ("False", "VLANConflict")
    wait_for(lambda: ready_gauge(ctl, sc) == 0.0, timeout=WAIT, what="cozy_proxmox_network_ready 0")
    wait_for(lambda: any((v.get("status") or {}).get("conflict") is True for v in (world.get("vlans", foreign),
                                                                                  sc.vlan())),
             timeout=WAIT, what="Kube-OVN flagging one of the two Vlans")

    if not ovsdb_rows(bed.nbctl, "Logical_Switch_Port", f"name=localnet.{fsub}"):
        if not ovsdb_rows(bed.nbctl, "Logical_Switch", f"name={fsub}"):
            bed.nbctl("ls-add", fsub)
        bed.nbctl("lsp-add", fsub, f"localnet.{fsub}", "--", "lsp-set-type", f"localnet.{fsub}", "localnet",
                  "--", "lsp-set-options", f"localnet.{fsub}", f"network_name={world.provider}",
                  "--", "set", "Logical_Switch_Port", f"localnet.{fsub}", f"tag={vid}",
                  f"external_ids:ls={fsub}", "external_ids:vendor=kube-ovn")
    capsys.readouterr()
    assert doctor.main(["--kubeconfig", str(bed.admin_kubeconfig), "-n", sc.ns, sc.net,
                        "--ovn-nb-address", bed.nb_tcp]) == 0
    out = capsys.readouterr().out.splitlines()
    i = out.index(f'  OVN NB localnet ports on VLAN {vid} of provider "{world.provider}": 2')
    assert sorted(out[i + 1:i + 3]) == sorted([
        f'    localnet.{fsub} (logical switch "{fsub}", foreign)',
        f'    localnet.{sc.sub} (logical switch "{sc.sub}", this network\'s)'])

    # Nothing of the foreign side or of ours touched: never edited, re-tagged or deleted.
    ctl.resync()
    writes = writes_before(bed, bed.controller_user, write_marker(bed), since_marker=before)
    assert not [w for w in writes if w.name in (foreign, fsub) or w.resource in ("vlans", "subnets", "ips")], \
        [str(w) for w in writes]
    now = sc.vlan()
    assert (now["metadata"]["uid"], now["spec"]["id"]) == (ours["metadata"]["uid"], vid)
    assert sc.network()["status"]["vlan"] == vid and ready_gauge(ctl, sc) == 0.0

    # The foreign objects go (their owner's doing); Kube-OVN checks ours again at its restart.
    admin.co.delete_cluster_custom_object(*KUBEOVN, "ips", f"fixed.{sc.ns}")
    admin.co.delete_cluster_custom_object(*KUBEOVN, "subnets", fsub)
    admin.co.delete_cluster_custom_object(*KUBEOVN, "vlans", foreign)
    wait_for(lambda: world.gone("vlans", foreign), timeout=WAIT, what="the foreign Vlan gone")
    bed.stop_peer(KUBE_OVN)
    bed.start_peer(KUBE_OVN)
    obj = sc.wait("Ready", "Ready")
    assert obj["status"]["vlan"] == vid
    wait_for(lambda: ready_gauge(ctl, sc) == 1.0, timeout=WAIT, what="cozy_proxmox_network_ready 1")
