"""Multus on a trunk kubelet, and the egress gateway's image (hack/bed/multus.py,
hack/build-egress.sh): what a Kube-OVN VpcEgressGateway's pods need on the bed.

The bed runs one trunk kubelet with ``multus=True``: Multus's thin plugin first in the
node's CNI directory, Kube-OVN's conflist its cluster network. The tenant's external network
is as Kube-OVN's egress gateway wants it: a NetworkAttachmentDefinition of type ``kube-ovn``
and an underlay Subnet on a VLAN of the bed's trunk whose provider is ``<nad>.<ns>.ovn``. A
"router" on that VLAN (a namespace on a trunk access port, hack/bed/dataplane.py) owns the
Subnet's gateway address, which Kube-OVN's agent checks by ARP before it finishes the
interface.

* a pod naming the attachment in ``k8s.v1.cni.cncf.io/networks`` gets ``net1`` with the
  address kube-ovn-controller allocated for the provider, Multus reports it in the pod's
  network status, and the router reaches it on the VLAN;
* a pod shaped as Kube-OVN v1.15.24 shapes a gateway's (its init container's command,
  privileged; ``sleep infinity`` as 65534 with NET_ADMIN and NET_RAW) on the bed's gateway
  image runs ``init-vpc-egress-gateway.sh`` to completion: its policy rules and the
  masquerade chain are in the pod's namespace.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from hack.bed import NETWORKS_ANNOTATION, DataPlane, LocalCluster, Vm
from hack.bed.trunk_kubelet import TRUNK_TAINT, TrunkKubelet
from hack.tools.objects import Admin, unique
from hack.tools.wait import wait_for
from tests.support.beds import admin_of, running
from tests.support.peers import KUBEOVN

pytestmark = pytest.mark.integration

WAIT = 120.0
VLAN = 3500
CIDR, GATEWAY, ROUTER_GATEWAY = "198.18.50.0/24", "198.18.50.1", "198.18.50.254"
NETWORK_STATUS = "k8s.v1.cni.cncf.io/network-status"


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The peers, the data plane and the bed's node, a kubelet with Multus on the last trunk node."""
    yield from running(LocalCluster(tmp_path_factory.mktemp("multus"), with_peers=True, with_dataplane=True,
                                    with_node=True, trunk_kubelets=1, multus=True), "bed with Multus")


@pytest.fixture(scope="module")
def admin(bed: LocalCluster) -> Iterator[Admin]:
    yield from admin_of(bed)


class External:
    """Namespace ``ns`` with NetworkAttachmentDefinition ``nad`` (Kube-OVN, on the trunk
    kubelet's agent), the VLAN, the underlay Subnet of provider ``<nad>.<ns>.ovn`` and the
    router owning its gateway."""

    def __init__(self, bed: LocalCluster, admin: Admin) -> None:
        dp = bed.dataplane
        assert dp is not None
        self.ns, self.nad, self.vlan, self.subnet = unique("egress"), "ext", unique("vlan"), unique("ext")
        self.provider = f"{self.nad}.{self.ns}.ovn"
        admin.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=self.ns)))
        admin.co.create_namespaced_custom_object("k8s.cni.cncf.io", "v1", self.ns, "network-attachment-definitions", {
            "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": self.nad, "namespace": self.ns},
            "spec": {"config": bed.nad_config(self.nad, self.ns)}})
        admin.co.create_cluster_custom_object(*KUBEOVN, "vlans", {
            "apiVersion": "kubeovn.io/v1", "kind": "Vlan", "metadata": {"name": self.vlan},
            "spec": {"id": VLAN, "provider": dp.provider}})
        admin.co.create_cluster_custom_object(*KUBEOVN, "subnets", {
            "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": self.subnet},
            "spec": {"protocol": "IPv4", "cidrBlock": CIDR, "gateway": GATEWAY, "vlan": self.vlan,
                     "provider": self.provider, "excludeIps": [GATEWAY]}})
        self.router: Vm = dp.add_vm(unique("router"), VLAN, f"{GATEWAY}/24", ROUTER_GATEWAY)

        def ready() -> bool:
            sub = admin.co.get_cluster_custom_object(*KUBEOVN, "subnets", self.subnet)
            conds = {c["type"]: c["status"] for c in (sub.get("status") or {}).get("conditions") or []}
            return conds.get("Ready") == "True"

        wait_for(ready, timeout=WAIT, what=f"Subnet {self.subnet} Ready")


@pytest.fixture(scope="module")
def ext(bed: LocalCluster, admin: Admin) -> External:
    return External(bed, admin)


def kubelet_of(bed: LocalCluster) -> TrunkKubelet:
    (tk,) = bed.trunk_kubelets.values()
    return tk


def attached_pod(tk: TrunkKubelet, admin: Admin, ext: External, name: str, spec: dict) -> dict:
    """Pod ``ext.ns/name`` with the attachment on the trunk kubelet's node; once Ready, its
    object (as a dict). :raises AssertionError: not Ready within WAIT (with its Events)."""
    admin.core.create_namespaced_pod(ext.ns, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {NETWORKS_ANNOTATION: f"{ext.ns}/{ext.nad}"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": tk.node.name},
            "tolerations": [{"key": TRUNK_TAINT["key"], "operator": "Exists", "effect": TRUNK_TAINT["effect"]}],
            "terminationGracePeriodSeconds": 0,
            **spec,
        }})

    def ready() -> dict | None:
        pod = admin.api_client.sanitize_for_serialization(admin.core.read_namespaced_pod(name, ext.ns))
        conds = {c["type"]: c["status"] for c in (pod.get("status") or {}).get("conditions") or []}
        return pod if conds.get("Ready") == "True" else None

    try:
        return wait_for(ready, timeout=WAIT, what=f"pod {ext.ns}/{name} Ready on {tk.node.name}")
    except AssertionError as e:
        events = [f"{ev.reason}: {ev.message}" for ev in admin.core.list_namespaced_event(
            ext.ns, field_selector=f"involvedObject.name={name}").items]
        raise AssertionError(f"{e}; events: {events[-4:]}") from e


def net1_namespace(tk: TrunkKubelet, address: str) -> str:
    """The sandbox network namespace (of the node's containerd) whose ``net1`` has ``address``."""

    def find() -> str | None:
        for path in tk.node.sandbox_netns():
            netns = path.rsplit("/", 1)[1]
            out = subprocess.run(["ip", "-n", netns, "-j", "-4", "addr", "show", "net1"], capture_output=True,
                                 text=True).stdout
            if any(a.get("local") == address for link in json.loads(out or "[]") for a in link.get("addr_info", [])):
                return netns
        return None

    return wait_for(find, timeout=30, what=f"a sandbox whose net1 has {address}")


def test_multus_gives_a_pod_net1_on_the_vlan_subnet(bed, admin, ext):
    tk = kubelet_of(bed)
    pod = attached_pod(tk, admin, ext, "attached", {"containers": [{
        "name": "c", "image": tk.node.busybox_image, "imagePullPolicy": "Never", "command": ["sleep", "100000"]}]})
    ann = pod["metadata"]["annotations"]
    address = ann[f"{ext.provider}.kubernetes.io/ip_address"]
    assert ann[f"{ext.provider}.kubernetes.io/logical_switch"] == ext.subnet

    # Multus made net1 (the attachment) besides eth0 (Kube-OVN's conflist) and says so.
    status = {n["interface"]: n for n in json.loads(ann[NETWORK_STATUS]) if n.get("interface")}
    assert status["net1"]["name"] == f"{ext.ns}/{ext.nad}"
    assert address in status["net1"]["ips"]
    assert "eth0" in status

    net1_namespace(tk, address)  # the pod's sandbox has net1 with that address
    assert ext.router.ping(address, count=3) == 3, f"the router on VLAN {VLAN} does not reach net1 ({address})"


def test_gateway_image_runs_kube_ovns_init_script(bed, admin, ext):
    tk = kubelet_of(bed)
    internal = admin.co.get_cluster_custom_object(*KUBEOVN, "subnets", "ovn-default")["spec"]["gateway"]
    mount = [{"name": "usr-local-sbin", "mountPath": "/usr/local/sbin"}]
    # As Kube-OVN v1.15.24's reconcileVpcEgressGatewayWorkload makes the gateway's pod.
    pod = attached_pod(tk, admin, ext, "gateway", {
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "volumes": [{"name": "usr-local-sbin", "emptyDir": {}}],
        "initContainers": [{
            "name": "init", "image": bed.egress_image, "imagePullPolicy": "Never",
            "command": ["bash", "-exc", "chmod +t /usr/local/sbin && bash /kube-ovn/init-vpc-egress-gateway.sh"],
            "env": [{"name": "INTERNAL_GATEWAY_IPV4", "value": internal},
                    {"name": "EXTERNAL_GATEWAY_IPV4", "value": GATEWAY},
                    {"name": "NO_SNAT_SOURCES_IPV4", "value": ""}],
            "securityContext": {"privileged": True},
            "volumeMounts": mount,
        }],
        "containers": [{
            "name": "gateway", "image": bed.egress_image, "imagePullPolicy": "Never",
            "command": ["sleep", "infinity"],
            "securityContext": {"privileged": False, "runAsUser": 65534,
                                "capabilities": {"add": ["NET_ADMIN", "NET_RAW"], "drop": ["ALL"]}},
            "volumeMounts": mount,
        }],
    })
    (init,) = pod["status"]["initContainerStatuses"]
    assert init["state"]["terminated"]["exitCode"] == 0
    address = pod["metadata"]["annotations"][f"{ext.provider}.kubernetes.io/ip_address"]
    netns = net1_namespace(tk, address)

    # The script's policy routing: from the external side (net1) by table 1000, whose default
    # route is the internal gateway; and the masquerade chain on POSTROUTING.
    rules = subprocess.run(["ip", "-n", netns, "-4", "rule", "show"], capture_output=True, text=True,
                           check=True).stdout
    assert "1002:\tfrom all iif net1 lookup 1000" in rules, rules
    table = subprocess.run(["ip", "-n", netns, "-4", "route", "show", "table", "1000"], capture_output=True,
                           text=True, check=True).stdout
    assert f"default via {internal} dev eth0" in table, table
    nat = subprocess.run(["ip", "netns", "exec", netns, "iptables-nft", "-t", "nat", "-S", "POSTROUTING"],
                         capture_output=True, text=True, check=True).stdout
    assert "-A POSTROUTING -j VEG-MASQUERADE" in nat, nat
    assert ext.router.ping(address, count=3) == 3
