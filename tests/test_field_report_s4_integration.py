"""Field report S4 (../shared/cases/field-reports.md, fourth round; capmox#868) on the real
peers: a kube-apiserver with the capmox CRDs (ProxmoxMachine and ProxmoxMachineTemplate
v1alpha2) and the admission policies of manifests/admission, the real in-cluster IPAM
provider v1.0.3 and kube-ovn-controller v1.15.24 of a peers bed of this module's own
(conftest ``peers_bed``), next to the controller as it runs (gateway management on).

capmox v0.8+ takes ``defaultIPv4: false`` as unset and sets it true on net0 again, so net0
claims the ProxmoxCluster's pool (``<m>-net0-00-inet``) besides its own ``ipPoolRef``
(``<m>-net0-01-inet``). No capmox runs here: the test writes what capmox writes (the machine
read back with ``defaultIPv4: true``, the two claims with their owner reference, named as
capmox-and-ipam.md says) and the real provider fulfils the claims.

Expected (the report): only the claim and IPAddress of ``pool-s4`` hold ``net-s4``
(``cozy_proxmox_network_consumers`` = 1), the cluster-pool address is no holder and no
``AddressConflict``; one Warning Event ``ForeignAddressOnNetwork`` on the network (not one
per pass), the same line in ``doctor``, Ready unchanged; the machine-binding policy admits
the machine. Deleted in the report's order (machine, cluster-pool claim, tenant-pool claim),
the hold goes only once the ``pool-s4`` address is gone, and the network's finalizer comes
off only after a fresh LIST saw it gone (the audit log).
"""

from __future__ import annotations

import datetime as dt
from typing import Iterator

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from controller import doctor, names
from controller.rules import annotation
from controller.runtime.kube import KubeWriter
from hack.tools.audit import read_events
from hack.bed import LocalCluster
from hack.tools.objects import PX, Admin, reason, unique, wait_condition
from hack.tools.wait import wait_for
from informers import Resource
from tests.support.peers import ADDRESS_V, IPAM, KUBEOVN, OURS, POOL_V, WAIT, Ctl, Trunk, kube_get, make_vpc

pytestmark = pytest.mark.integration

VPC = "vpc-s4"
CAPMOX = ("infrastructure.cluster.x-k8s.io", "v1alpha2")
NET, SUB, POOL, CLUSTER_POOL = "net-s4", "net-s4", "pool-s4", "cl-v4-icip"
MACHINE, TEMPLATE = "m-s4", "tpl-s4"
CL_CLAIM, OWN_CLAIM = f"{MACHINE}-net0-00-inet", f"{MACHINE}-net0-01-inet"  # capmox v0.8 names
VID = 301
MACHINES = Resource(*CAPMOX, "proxmoxmachines", namespaced=True)


@pytest.fixture(scope="module")
def bed(peers_bed: LocalCluster) -> LocalCluster:
    return peers_bed


@pytest.fixture(scope="module")
def admin(peers_admin: Admin) -> Admin:
    return peers_admin


@pytest.fixture(scope="module")
def ctl(bed: LocalCluster, admin: Admin) -> Iterator[Ctl]:
    trunk = Trunk(admin)
    make_vpc(admin, VPC)
    admin.create_zone("zone-s4", trunk.provider, ["301-309"])
    c = Ctl(bed, manage_gateway=True, ovn_nb_address=bed.nb_tcp, subnet_prune_timeout=10.0)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def pool_ref(name: str) -> dict[str, str]:
    return {"apiGroup": IPAM, "kind": "InClusterIPPool", "name": name}


def net0(default_ipv4: bool) -> dict:
    return {"name": "net0", "bridge": "vmbr1", "vlan": VID, "model": "virtio", "ipPoolRef": [pool_ref(POOL)],
            "defaultIPv4": default_ipv4}


class S4:
    """The report's objects in a namespace of their own."""

    def __init__(self, admin: Admin) -> None:
        self.a, self.co = admin, admin.co
        self.ns = unique("tenant-a")
        admin.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=self.ns)))

    # -- the tenant's network and the cluster's pool ----------------------------------------
    def ready(self) -> dict:
        """Network ``net-s4`` (Subnet 10.72.0.0/24 in vpc-s4, pool-s4 over .200-.250 in its
        excludeIps) and the ProxmoxCluster's pool ``cl-v4-icip`` (10.0.50.0/24, as capmox makes
        it from ``ipv4Config``); returns the network Ready and listed in the namespace."""
        self.a.create_network(self.ns, NET, "zone-s4", SUB, POOL)
        self.co.create_cluster_custom_object(*KUBEOVN, "subnets", {
            "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": SUB},
            "spec": {"vpc": VPC, "vlan": SUB, "cidrBlock": "10.72.0.0/24", "gateway": "10.72.0.1",
                     "protocol": "IPv4", "logicalGateway": True, "excludeIps": ["10.72.0.200..10.72.0.250"]}})
        self.pool(POOL, ["10.72.0.200-10.72.0.250"], "10.72.0.1")
        self.pool(CLUSTER_POOL, ["10.0.50.10-10.0.50.100"], "10.0.50.1")
        obj = self.wait("Ready", "Ready")
        triple = annotation.namespace_triple(obj)
        assert triple == f"vmbr1/{VID}/{POOL}"

        def listed() -> bool:
            ann = (self.a.core.read_namespace(self.ns).metadata.annotations or {}).get(
                names.ANNOTATION_NAMESPACE_NETWORKS)
            return triple in annotation.split_value(ann)

        wait_for(listed, timeout=WAIT, what=f"namespace {self.ns}'s networks annotation listing {triple}")
        return obj

    def pool(self, name: str, addresses: list[str], gateway: str) -> None:
        self.co.create_namespaced_custom_object(IPAM, POOL_V, self.ns, "inclusterippools", {
            "apiVersion": f"{IPAM}/{POOL_V}", "kind": "InClusterIPPool", "metadata": {"name": name},
            "spec": {"addresses": addresses, "prefix": 24, "gateway": gateway}})

    # -- what capmox v0.8 writes --------------------------------------------------------------
    def machine_from_template(self) -> dict:
        """Template ``tpl-s4`` (net0 on VLAN 301, ``ipPoolRef: [pool-s4]``, ``defaultIPv4:
        false``), machine ``m-s4`` from it, then read back as capmox v0.8's defaulting webhook
        leaves it (``defaultIPv4: true``, an UPDATE the machine-binding policy judges)."""
        spec = {"network": {"networkDevices": [net0(False)]}}
        self.co.create_namespaced_custom_object(*CAPMOX, self.ns, "proxmoxmachinetemplates", {
            "apiVersion": "/".join(CAPMOX), "kind": "ProxmoxMachineTemplate", "metadata": {"name": TEMPLATE},
            "spec": {"template": {"spec": spec}}})
        tpl = self.co.get_namespaced_custom_object(*CAPMOX, self.ns, "proxmoxmachinetemplates", TEMPLATE)
        self.co.create_namespaced_custom_object(*CAPMOX, self.ns, "proxmoxmachines", {
            "apiVersion": "/".join(CAPMOX), "kind": "ProxmoxMachine", "metadata": {"name": MACHINE},
            "spec": tpl["spec"]["template"]["spec"]})
        path = "/spec/network/networkDevices/0/defaultIPv4"
        KubeWriter(self.a.api_client).json_patch(MACHINES, MACHINE, [
            {"op": "test", "path": path, "value": False}, {"op": "replace", "path": path, "value": True}], self.ns)
        return self.co.get_namespaced_custom_object(*CAPMOX, self.ns, "proxmoxmachines", MACHINE)

    def claim(self, name: str, pool: str, counter: int, machine: dict) -> None:
        """An IPAddressClaim as capmox v0.8 makes it: owned by the machine (controller
        reference), ``pool-ref-counter`` annotation, ``default-gateway`` on the default pool's.
        No ``cluster.x-k8s.io/cluster-name`` label and no ``spec.clusterName``: the provider
        then reconciles it without a Cluster object (capmox-and-ipam.md)."""
        ann = {"ipam.capmox.cluster.x-k8s.io/pool-ref-counter": str(counter)}
        if counter == 0:
            ann["ipam.capmox.cluster.x-k8s.io/default-gateway"] = "true"
        self.co.create_namespaced_custom_object(IPAM, ADDRESS_V, self.ns, "ipaddressclaims", {
            "apiVersion": f"{IPAM}/{ADDRESS_V}", "kind": "IPAddressClaim",
            "metadata": {"name": name, "annotations": ann, "ownerReferences": [{
                "apiVersion": "/".join(CAPMOX), "kind": "ProxmoxMachine", "name": MACHINE,
                "uid": machine["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"poolRef": pool_ref(pool)}})

    # -- reading --------------------------------------------------------------------------------
    def get(self, plural: str, name: str, version: str = ADDRESS_V) -> dict | None:
        try:
            return self.co.get_namespaced_custom_object(IPAM, version, self.ns, plural, name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def network(self) -> dict:
        return self.a.network(self.ns, NET)

    def wait(self, ctype: str, expected: str, timeout: float = WAIT) -> dict:
        return wait_condition(self.a, self.ns, NET, ctype, expected, timeout)

    def events(self, ctl: Ctl, why: str) -> list[k8s.CoreV1Event]:
        ctl.mgr.events.flush()
        return [e for e in self.a.core.list_namespaced_event(self.ns).items
                if e.involved_object.name == NET and e.reason == why]


def ready_condition(obj: dict) -> dict:
    return next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")


def sample(ctl: Ctl, metric: str, ns: str) -> float | None:
    return ctl.mgr.metrics.registry.get_sample_value(metric, {"namespace": ns, "network": NET})


def audit(bed: LocalCluster, ns: str) -> list[dict]:
    """The completed requests of the audit log about namespace ``ns`` or Subnet ``net-s4``."""
    return [e for e in read_events(bed) if e.get("stage") == "ResponseComplete"
            and ((e.get("objectRef") or {}).get("namespace") == ns
                 or (e.get("objectRef") or {}).get("name") == SUB)]


def ts(e: dict, key: str = "requestReceivedTimestamp") -> dt.datetime:
    return dt.datetime.fromisoformat(e[key].replace("Z", "+00:00"))


def test_s4_the_cluster_pool_address_of_net0_is_reported_and_never_holds_the_network(bed, admin, ctl, capsys):
    s = S4(admin)
    before = s.ready()
    ready_before = ready_condition(before)

    # Steps 1-2: the machine from the template, read back as capmox v0.8 leaves it; the
    # machine-binding policy admitted the create and the UPDATE (defaultIPv4 is not judged).
    m = s.machine_from_template()
    assert m["spec"]["network"]["networkDevices"][0]["defaultIPv4"] is True
    s.claim(CL_CLAIM, CLUSTER_POOL, 0, m)
    s.claim(OWN_CLAIM, POOL, 1, m)
    cl_addr = wait_for(lambda: s.get("ipaddresses", CL_CLAIM), timeout=WAIT, what="the cluster-pool IPAddress")
    own_addr = wait_for(lambda: s.get("ipaddresses", OWN_CLAIM), timeout=WAIT, what="the pool-s4 IPAddress")
    cl_ip, own_ip = cl_addr["spec"]["address"], own_addr["spec"]["address"]
    assert (cl_ip, own_ip) == ("10.0.50.10", "10.72.0.200")  # each pool's lowest free address

    # One Warning on the network, naming machine, NIC, network, address and pool.
    message = (f'machine "{MACHINE}" net0 is on network "{NET}" (VLAN {VID}) but also holds {cl_ip} from '
               f'InClusterIPPool "{CLUSTER_POOL}" (IPAddress "{CL_CLAIM}"), an address outside the network\'s subnet '
               "10.72.0.0/24 on its VLAN; a default pool: capmox v0.8+ sets defaultIPv4/defaultIPv6 on net0 again "
               "although the machine says false (cluster-api-provider-proxmox#868). The address does not hold the "
               "network and the controller deletes nothing: see ForeignAddressOnNetwork in docs/runbook.md")
    (ev,) = wait_for(lambda: s.events(ctl, "ForeignAddressOnNetwork"), timeout=WAIT, what="the Warning Event")
    assert (ev.type, ev.message, ev.count) == ("Warning", message, 1)
    assert ev.involved_object.kind == "ProxmoxNetwork" and ev.involved_object.namespace == s.ns

    # Holders by pool only: the provider counts one address of pool-s4; no AddressConflict.
    wait_for(lambda: sample(ctl, "cozy_proxmox_network_consumers", s.ns) == 1, timeout=WAIT,
             what="cozy_proxmox_network_consumers 1")
    ctl.resync()
    ctl.resync()  # passes over a converged network: the Event is not posted again
    obj = s.network()
    assert obj["status"]["ipPool"] == {"total": 51, "used": 1, "free": 50}
    assert reason(obj, "IPPoolReady") == ("True", "Ready", "pool lies inside the subnet's excludeIps")
    assert ready_condition(obj) == ready_before  # Ready unchanged, its lastTransitionTime too
    assert sample(ctl, "cozy_proxmox_network_address_conflicts", s.ns) == 0
    assert s.events(ctl, "AddressConflict") == []
    (ev,) = s.events(ctl, "ForeignAddressOnNetwork")
    assert ev.count == 1

    # doctor says the same (any user that reads the objects).
    assert doctor.main(["--kubeconfig", str(bed.admin_kubeconfig), "-n", s.ns, NET]) == 0
    out = capsys.readouterr().out
    assert f"{s.ns}/{NET}: Ready=True (Ready)" in out
    assert f"  warning: {message}" in out.splitlines()

    # Step 3: the network goes; the machine, the pool-s4 claim and its address hold it, the
    # cluster pool's never.
    admin.co.delete_namespaced_custom_object(*PX, s.ns, "proxmoxnetworks", NET)
    held = (f'1 address(es) of pool "{POOL}" are allocated and 1 ProxmoxMachine(s) reference it; 1 IPAddress(es) '
            f"and 1 IPAddressClaim(s) name the pool; held by ProxmoxMachine {MACHINE}, IPAddressClaim {OWN_CLAIM}, "
            f'IPAddress {OWN_CLAIM}; VLAN {VID} and subnet "{SUB}" are kept until they are gone')
    wait_for(lambda: reason(s.network(), "Ready") == ("False", "InUse", held), timeout=WAIT, what="InUse, by pool")
    # doctor on the deleting network: the holders of pool-s4 one a line, and the warning still.
    assert doctor.main(["--kubeconfig", str(bed.admin_kubeconfig), "-n", s.ns, NET]) == 0
    lines = capsys.readouterr().out.splitlines()
    holders = lines[lines.index(next(x for x in lines if x.startswith("  waits on: consumers"))) + 1:][:3]
    assert holders == [f"    ProxmoxMachine {MACHINE}", f"    IPAddressClaim {OWN_CLAIM}", f"    IPAddress {OWN_CLAIM}"]
    assert f"  warning: {message}" in lines

    admin.co.delete_namespaced_custom_object(*CAPMOX, s.ns, "proxmoxmachines", MACHINE)
    held = (f'1 address(es) of pool "{POOL}" are allocated and 0 ProxmoxMachine(s) reference it; 1 IPAddress(es) '
            f"and 1 IPAddressClaim(s) name the pool; held by IPAddressClaim {OWN_CLAIM} (owner ProxmoxMachine "
            f'{MACHINE} not found), IPAddress {OWN_CLAIM}; VLAN {VID} and subnet "{SUB}" are kept until they are gone')
    wait_for(lambda: reason(s.network(), "Ready") == ("False", "InUse", held), timeout=WAIT,
             what="InUse without the machine")

    # The cluster-pool claim first: its address goes, the network is still held.
    admin.co.delete_namespaced_custom_object(IPAM, ADDRESS_V, s.ns, "ipaddressclaims", CL_CLAIM)
    wait_for(lambda: s.get("ipaddresses", CL_CLAIM) is None and s.get("ipaddressclaims", CL_CLAIM) is None,
             timeout=WAIT, what="the cluster-pool claim and address gone")
    ctl.resync()
    assert reason(s.network(), "Ready") == ("False", "InUse", held)
    assert OURS in (kube_get(admin, "vlans", SUB) or {}).get("metadata", {}).get("finalizers", [])
    assert names.FINALIZER in s.network()["metadata"]["finalizers"]

    # Then the pool-s4 claim: the provider releases its address, and only then the hold goes.
    admin.co.delete_namespaced_custom_object(IPAM, ADDRESS_V, s.ns, "ipaddressclaims", OWN_CLAIM)
    obj = s.wait("Ready", "SubnetStillExists")
    assert reason(obj, "Ready")[2] == f'Subnet "{SUB}" still exists; VLAN {VID} is released after it is deleted'
    assert s.get("ipaddresses", OWN_CLAIM) is None and s.get("ipaddressclaims", OWN_CLAIM) is None
    admin.co.delete_cluster_custom_object(*KUBEOVN, "subnets", SUB)

    def gone() -> bool:
        try:
            s.network()
        except ApiException as e:
            return e.status == 404
        return False

    wait_for(gone, timeout=WAIT, what=f"{s.ns}/{NET} deleted")
    assert s.events(ctl, "ForeignAddressOnNetwork")[0].count == 1

    # The audit log: the pool-s4 address vanished with its last write (the provider taking
    # its finalizer off); the controller read the Subnet (release step 2) and took its
    # finalizer off the network only after a fresh namespaced LIST of IPAddresses made after
    # that; before it, no such step.
    user = bed.controller_user

    def by_controller(events: list[dict], verb: str, resource: str, name: str | None = None) -> list[dict]:
        return [e for e in events if (e.get("user") or {}).get("username") == user and e.get("verb") == verb
                and (e.get("objectRef") or {}).get("resource") == resource
                and (name is None or (e.get("objectRef") or {}).get("name") == name)
                and not (e.get("objectRef") or {}).get("subresource")]

    def finalizer_off() -> list[dict]:
        events = audit(bed, s.ns)
        if not by_controller(events, "get", "subnets", SUB):
            return []
        return events if by_controller(events, "patch", "proxmoxnetworks", NET)[1:] else []

    events = wait_for(finalizer_off, timeout=WAIT, what="the finalizer removal in the audit log")
    address_gone = max(ts(e, "stageTimestamp") for e in events
                       if (e.get("objectRef") or {}).get("resource") == "ipaddresses"
                       and (e.get("objectRef") or {}).get("name") == OWN_CLAIM
                       and e.get("verb") in ("update", "patch", "delete"))
    fresh = [ts(e) for e in by_controller(events, "list", "ipaddresses")
             if (e.get("objectRef") or {}).get("namespace") == s.ns and "watch=" not in e.get("requestURI", "")]
    first_step2 = min(ts(e) for e in by_controller(events, "get", "subnets", SUB))
    fin_off = max(ts(e) for e in by_controller(events, "patch", "proxmoxnetworks", NET))  # its finalizer off
    assert first_step2 > address_gone  # nothing went past the consumers while the address existed
    assert any(address_gone < t < first_step2 for t in fresh), (address_gone, fresh, first_step2)
    assert fin_off > first_step2
