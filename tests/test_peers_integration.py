"""The real peers (issue 13 part 2; v1.15.24 since issue 24): kube-ovn-controller and the in-cluster IPAM
provider v1.0.3 run by ``LocalCluster(with_peers=True)`` on a bed of this module's own, and
what the product relies on them for, read back from the API server and from the NB/SB with
``ovn-nbctl``/``ovn-sbctl``:

* a Vlan and a Subnet with ``spec.vlan``: Kube-OVN's logical switch with ``localnet.<subnet>``
  tagged with the VLAN ID and ``options:network_name`` = the Vlan's provider, the Subnet
  listed in ``Vlan.status.subnets``, its finalizer ``kubeovn.io/kube-ovn-controller``;
* a Vpc and a Subnet shaped like the chart's Proxmox subnets (``logicalGateway: true``): the
  router port ``<vpc>-<subnet>`` on router ``<vpc>``; our python-ovs client and
  ``GatewayApplier`` work on the 7.3.0 NB Kube-OVN needs (group ``px-<vpc>-<subnet>``, the
  port's pointer) and ``ovn-northd`` makes ``cr-<vpc>-<subnet>`` in the SB;
* kube-ovn-controller SIGKILLed and started again: once it has handled the Subnet again and
  run its start-up garbage collection, the router port still points at our group;
* an InClusterIPPool and an IPAddressClaim: the IPAddress named after the claim, the pool's
  counts, ProtectPool, and the address released with the claim;
* the bed's fault methods on the IPAM provider: stopped, it fulfils nothing; paused, it
  releases nothing; back, it catches up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from hack.bed import ClusterError, LocalCluster, ovsdb_rows, ovsdb_set
from ovn import planner
from ovn.gateway import GatewayApplier
from ovn.ovsdb import fetch_schema
from hack.tools.objects import Admin, unique
from tests.support.ovsdb import ha_chassis_groups
from hack.tools.wait import wait_for

pytestmark = pytest.mark.integration

KUBEOVN = ("kubeovn.io", "v1")
IPAM = "ipam.cluster.x-k8s.io"
POOL_V = "v1alpha2"
ADDRESS_V = "v1beta1"  # the newest version cluster-api v1.10's IPAddress/IPAddressClaim serve
KUBE_OVN_FINALIZER = "kubeovn.io/kube-ovn-controller"  # Kube-OVN's util.KubeOVNControllerFinalizer
PROTECT_POOL = "ipam.cluster.x-k8s.io/ProtectPool"
WAIT = 60.0  # seconds; both peers usually answer within one or two


@pytest.fixture(scope="module")
def bed(peers_bed: LocalCluster) -> LocalCluster:
    return peers_bed


@pytest.fixture(scope="module")
def admin(peers_admin: Admin) -> Admin:
    return peers_admin


class Objects:
    """Cluster-scoped Kube-OVN objects a test made; deleted newest first, each awaited gone
    (Kube-OVN removes its own finalizer once it has deleted what it made in the NB)."""

    def __init__(self, admin: Admin) -> None:
        self.co = admin.co
        self.made: list[tuple[str, str]] = []

    def create(self, plural: str, name: str, spec: dict[str, Any], kind: str) -> dict:
        body = {"apiVersion": "kubeovn.io/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}
        obj = self.co.create_cluster_custom_object(*KUBEOVN, plural, body)
        self.made.append((plural, name))
        return obj

    def provider_network(self) -> str:
        """A ProviderNetwork as the real CRD wants it (name of at most 12 bytes,
        ``spec.defaultInterface``), with the status its node agent would write (no agent here)."""
        name = unique("pn")
        self.create("provider-networks", name, {"defaultInterface": "eth1"}, "ProviderNetwork")
        self.co.patch_cluster_custom_object_status(*KUBEOVN, "provider-networks", name,
                                                   {"status": {"ready": True, "readyNodes": ["testbed"]}})
        return name

    def get(self, plural: str, name: str) -> dict:
        return self.co.get_cluster_custom_object(*KUBEOVN, plural, name)

    def gone(self, plural: str, name: str) -> bool:
        try:
            self.get(plural, name)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    def cleanup(self) -> None:
        for plural, name in reversed(self.made):
            try:
                self.co.delete_cluster_custom_object(*KUBEOVN, plural, name)
            except ApiException as e:
                if e.status != 404:
                    raise
            wait_for(lambda: self.gone(plural, name), timeout=WAIT, what=f"{plural}/{name} deleted")


@pytest.fixture
def objects(admin: Admin) -> Iterator[Objects]:
    o = Objects(admin)
    try:
        yield o
    finally:
        o.cleanup()


def subnet_ready(objects: Objects, name: str) -> dict | None:
    sub = objects.get("subnets", name)
    conds = {c["type"]: c["status"] for c in (sub.get("status") or {}).get("conditions") or []}
    return sub if conds.get("Ready") == "True" else None


def log_since(path: Path, offset: int) -> str:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


# --------------------------------------------------------------------------- (a) Vlan + Subnet


def test_subnet_on_a_vlan_gets_kube_ovns_localnet_port(bed, objects):
    name, provider = unique("pv"), objects.provider_network()
    objects.create("vlans", name, {"id": 321, "provider": provider}, "Vlan")
    objects.create("subnets", name, {"vlan": name, "cidrBlock": "10.230.0.0/24", "gateway": "10.230.0.1",
                                     "protocol": "IPv4"}, "Subnet")

    sub = wait_for(lambda: subnet_ready(objects, name), timeout=WAIT, what=f"Subnet {name} Ready")
    assert KUBE_OVN_FINALIZER in sub["metadata"]["finalizers"]

    switch = ovsdb_rows(bed.nbctl, "Logical_Switch", f"name={name}")
    assert len(switch) == 1 and switch[0]["external_ids"]["vendor"] == "kube-ovn"
    ports = ovsdb_rows(bed.nbctl, "Logical_Switch_Port", f"name=localnet.{name}")
    assert len(ports) == 1
    lsp = ports[0]
    assert (lsp["type"], lsp["tag"], lsp["options"], lsp["addresses"]) == (
        "localnet", 321, {"network_name": provider}, "unknown")
    assert lsp["_uuid"] in ovsdb_set(switch[0]["ports"])

    listed = wait_for(lambda: (objects.get("vlans", name).get("status") or {}).get("subnets"),
                      timeout=WAIT, what=f"Vlan {name} status.subnets")
    assert listed == [name]
    # Kube-OVN also lists the Vlan on its ProviderNetwork.
    vlans = wait_for(lambda: (objects.get("provider-networks", provider).get("status") or {}).get("vlans"),
                     timeout=WAIT, what=f"ProviderNetwork {provider} status.vlans")
    assert vlans == [name]


# --------------------------------------------------------------------------- (b), (c) router port and our group


@pytest.fixture(scope="module")
def applier(bed: LocalCluster) -> Iterator[GatewayApplier]:
    a = GatewayApplier(bed.nb_tcp).start()
    try:
        assert a.nb.wait_synced(15), a.nb.last_error
        yield a
    finally:
        a.stop()


@pytest.fixture(scope="module")
def vpc_subnet(bed: LocalCluster, admin: Admin, applier: GatewayApplier) -> Iterator[dict[str, str]]:
    """VPC ``vpc-x`` (the spec's test-vector VPC) with one Subnet shaped like the chart's
    Proxmox subnets, Ready, with Kube-OVN's router port."""
    objects = Objects(admin)
    vpc, subnet, provider = "vpc-x", unique("px"), objects.provider_network()
    objects.create("vpcs", vpc, {}, "Vpc")
    objects.create("vlans", subnet, {"id": 322, "provider": provider}, "Vlan")
    objects.create("subnets", subnet, {
        "vpc": vpc, "vlan": subnet, "cidrBlock": "10.231.0.0/24", "gateway": "10.231.0.1", "protocol": "IPv4",
        "logicalGateway": True, "private": False, "enableLb": False, "excludeIps": ["10.231.0.100..10.231.0.150"],
    }, "Subnet")
    key = f"pnc-peers/{subnet}"
    try:
        wait_for(lambda: subnet_ready(objects, subnet), timeout=WAIT, what=f"Subnet {subnet} Ready")
        yield {"vpc": vpc, "subnet": subnet, "lrp": planner.router_port_name(vpc, subnet),
               "group": planner.group_name(vpc, subnet), "key": key}
    finally:
        applier.release(key)  # the product's own release: pointer cleared, group deleted
        objects.cleanup()


def ensure(applier: GatewayApplier, vs: dict[str, str]):
    trunk = [planner.TrunkNode(w, f"ch-{w}") for w in ("worker2", "worker1")]
    return applier.ensure(vs["key"], vs["vpc"], vs["subnet"], trunk)


def port_group(bed: LocalCluster, lrp: str) -> str | None:
    (port,) = ovsdb_rows(bed.nbctl, "Logical_Router_Port", f"name={lrp}")
    return port["ha_chassis_group"] or None


def test_router_port_of_kube_ovn_gets_our_group_and_a_chassis_redirect_port(bed, applier, vpc_subnet):
    vs = vpc_subnet
    # The NB is the one Kube-OVN v1.15 maps (its OVN 25.03 build's), read by our client from the server.
    assert fetch_schema(bed.nb_tcp)["version"] == "7.11.0"

    routers = ovsdb_rows(bed.nbctl, "Logical_Router", f"name={vs['vpc']}")
    assert len(routers) == 1
    ports = ovsdb_rows(bed.nbctl, "Logical_Router_Port", f"name={vs['lrp']}")
    assert len(ports) == 1 and ports[0]["networks"] == "10.231.0.1/24"
    assert ports[0]["_uuid"] in ovsdb_set(routers[0]["ports"])
    (peer,) = ovsdb_rows(bed.nbctl, "Logical_Switch_Port", f"name={vs['subnet']}-{vs['vpc']}")
    assert (peer["type"], peer["options"]["router-port"]) == ("router", vs["lrp"])
    (localnet,) = ovsdb_rows(bed.nbctl, "Logical_Switch_Port", f"name=localnet.{vs['subnet']}")
    assert localnet["tag"] == 322

    st = ensure(applier, vs)
    # §9.3 vectors for vpc-x: worker1 outranks worker2.
    assert (st.reason, st.chassis) == ("ChassisAssigned", 2)
    (group,) = ha_chassis_groups(bed.nbctl, vs["group"])
    assert group["external_ids"] == {"owner": "proxmox-network", "network": vs["key"]}
    assert group["chassis"] == {"ch-worker1": [100], "ch-worker2": [90]}
    assert port_group(bed, vs["lrp"]) == group["uuid"]

    cr = wait_for(lambda: ovsdb_rows(bed.sbctl, "Port_Binding", f"logical_port=cr-{vs['lrp']}"),
                  timeout=WAIT, what=f"SB binding cr-{vs['lrp']}")
    assert [b["type"] for b in cr] == ["chassisredirect"]


def test_kube_ovn_killed_and_restarted_leaves_our_group_on_the_port(bed, applier, vpc_subnet):
    vs = vpc_subnet
    assert ensure(applier, vs).reason == "ChassisAssigned"
    (before,) = ha_chassis_groups(bed.nbctl, vs["group"])
    assert port_group(bed, vs["lrp"]) == before["uuid"]

    log = bed.workdir / "kube-ovn-controller.log"
    offset = log.stat().st_size
    old_pid = bed.peer_pid("kube-ovn-controller")
    bed.kill_peer("kube-ovn-controller")
    with pytest.raises(ClusterError, match="not running"):
        bed.peer_pid("kube-ovn-controller")
    bed.start_peer("kube-ovn-controller")  # returns once it leads and its default VPC is Ready
    assert bed.peer_pid("kube-ovn-controller") != old_pid

    # The new process has handled our Subnet (the event it records last) and run its
    # start-up garbage collection of logical routers and router ports.
    done = f'Name:"{vs["subnet"]}"'
    wait_for(lambda: any(done in line and "ResetLogicalSwitchAclSuccess" in line
                         for line in log_since(log, offset).splitlines()),
             timeout=WAIT, what=f"kube-ovn-controller handling Subnet {vs['subnet']} after the restart")
    wait_for(lambda: "start to gc vpc dns" in log_since(log, offset), timeout=WAIT,
             what="kube-ovn-controller's start-up gc")

    assert port_group(bed, vs["lrp"]) == before["uuid"]
    assert ha_chassis_groups(bed.nbctl, vs["group"]) == [before]
    assert [b["type"] for b in ovsdb_rows(bed.sbctl, "Port_Binding", f"logical_port=cr-{vs['lrp']}")] == ["chassisredirect"]


# --------------------------------------------------------------------------- (d) IPAM


@pytest.fixture
def namespace(admin: Admin) -> Iterator[str]:
    name = unique("ipam")
    admin.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        admin.core.delete_namespace(name)  # stays Terminating: the bed has no namespace controller


def test_claim_is_fulfilled_counted_and_released_by_the_ipam_provider(admin, namespace):
    co, ns = admin.co, namespace
    co.create_namespaced_custom_object(IPAM, POOL_V, ns, "inclusterippools", {
        "apiVersion": f"{IPAM}/{POOL_V}", "kind": "InClusterIPPool", "metadata": {"name": "pool"},
        "spec": {"addresses": ["10.232.0.10-10.232.0.19"], "prefix": 24, "gateway": "10.232.0.1"},
    })

    def pool() -> dict:
        return co.get_namespaced_custom_object(IPAM, POOL_V, ns, "inclusterippools", "pool")

    def counts() -> dict | None:
        return (pool().get("status") or {}).get("ipAddresses")

    assert wait_for(counts, timeout=WAIT, what="pool status") == {"total": 10, "used": 0, "free": 10, "outOfRange": 0}
    assert PROTECT_POOL in pool()["metadata"]["finalizers"]

    co.create_namespaced_custom_object(IPAM, ADDRESS_V, ns, "ipaddressclaims", {
        "apiVersion": f"{IPAM}/{ADDRESS_V}", "kind": "IPAddressClaim", "metadata": {"name": "vm-1-net0"},
        "spec": {"poolRef": {"apiGroup": IPAM, "kind": "InClusterIPPool", "name": "pool"}},
    })
    addr = wait_for(lambda: co.get_namespaced_custom_object(IPAM, ADDRESS_V, ns, "ipaddresses", "vm-1-net0"),
                    timeout=WAIT, what="IPAddress vm-1-net0")
    assert addr["spec"]["address"] == "10.232.0.10"  # the lowest free address
    assert (addr["spec"]["prefix"], addr["spec"]["gateway"]) == (24, "10.232.0.1")
    assert addr["spec"]["claimRef"] == {"name": "vm-1-net0"}
    assert addr["spec"]["poolRef"] == {"apiGroup": IPAM, "kind": "InClusterIPPool", "name": "pool"}
    def address_ref() -> dict | None:
        claim = co.get_namespaced_custom_object(IPAM, ADDRESS_V, ns, "ipaddressclaims", "vm-1-net0")
        return (claim.get("status") or {}).get("addressRef")

    assert wait_for(address_ref, timeout=WAIT, what="claim status.addressRef") == {"name": "vm-1-net0"}
    assert wait_for(lambda: counts()["used"] == 1 and counts(), timeout=WAIT, what="used=1") == {
        "total": 10, "used": 1, "free": 9, "outOfRange": 0}

    co.delete_namespaced_custom_object(IPAM, ADDRESS_V, ns, "ipaddressclaims", "vm-1-net0")

    def address_gone() -> bool:
        try:
            co.get_namespaced_custom_object(IPAM, ADDRESS_V, ns, "ipaddresses", "vm-1-net0")
        except ApiException as e:
            return e.status == 404
        return False

    wait_for(address_gone, timeout=WAIT, what="IPAddress vm-1-net0 released")
    assert wait_for(lambda: counts()["used"] == 0 and counts(), timeout=WAIT, what="used=0") == {
        "total": 10, "used": 0, "free": 10, "outOfRange": 0}

    co.delete_namespaced_custom_object(IPAM, POOL_V, ns, "inclusterippools", "pool")

    def pool_gone() -> bool:
        try:
            pool()
        except ApiException as e:
            return e.status == 404
        return False

    wait_for(pool_gone, timeout=WAIT, what="pool deleted (ProtectPool lifted: no address left)")


def test_ipam_provider_stopped_then_paused_acts_only_when_back(bed, admin, namespace):
    """The fault methods: nothing fulfils a claim while the provider is stopped, nothing
    releases an address while it is paused; each time it catches up once it is back."""
    co, ns = admin.co, namespace
    co.create_namespaced_custom_object(IPAM, POOL_V, ns, "inclusterippools", {
        "apiVersion": f"{IPAM}/{POOL_V}", "kind": "InClusterIPPool", "metadata": {"name": "pool"},
        "spec": {"addresses": ["10.233.0.10-10.233.0.19"], "prefix": 24, "gateway": "10.233.0.1"},
    })

    def address() -> dict | None:
        try:
            return co.get_namespaced_custom_object(IPAM, ADDRESS_V, ns, "ipaddresses", "vm-2-net0")
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    bed.stop_peer("ipam-provider")
    assert not (bed.workdir / "ipam-provider.pid").exists()
    co.create_namespaced_custom_object(IPAM, ADDRESS_V, ns, "ipaddressclaims", {
        "apiVersion": f"{IPAM}/{ADDRESS_V}", "kind": "IPAddressClaim", "metadata": {"name": "vm-2-net0"},
        "spec": {"poolRef": {"apiGroup": IPAM, "kind": "InClusterIPPool", "name": "pool"}},
    })
    assert address() is None
    bed.start_peer("ipam-provider")
    assert wait_for(address, timeout=WAIT, what="IPAddress vm-2-net0")["spec"]["address"] == "10.233.0.10"

    pid = bed.peer_pid("ipam-provider")
    bed.pause_peer("ipam-provider")
    try:
        with open(f"/proc/{pid}/stat") as f:
            assert f.read().rsplit(")", 1)[1].split()[0] == "T"  # stopped
        co.delete_namespaced_custom_object(IPAM, ADDRESS_V, ns, "ipaddressclaims", "vm-2-net0")
        claim = co.get_namespaced_custom_object(IPAM, ADDRESS_V, ns, "ipaddressclaims", "vm-2-net0")
        assert claim["metadata"].get("deletionTimestamp")  # held by the provider's ReleaseAddress
        assert address() is not None
    finally:
        bed.resume_peer("ipam-provider")
    wait_for(lambda: address() is None, timeout=WAIT, what="IPAddress vm-2-net0 released after resume")
    assert bed.peer_pid("ipam-provider") == pid
