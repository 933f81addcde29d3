"""Egress on the wire: Kube-OVN v1.15.24's own VpcEgressGateway takes a VM out of its VPC.

The bed: the peers, the data plane, and a kubelet with Kube-OVN's CNI behind Multus on the
last two trunk nodes (``LocalCluster(trunk_kubelets=2, multus=True)``), so the gateway's
pods are the ones kube-ovn-controller makes (its Deployment, their init script, their
``net1`` on the transit network through the NetworkAttachmentDefinition), in Kube-OVN's
gateway image built here (hack/build-egress.sh). The transit network is the one
``charts/proxmox-network`` renders with ``transit.enabled``; the tenant's subnets and
VpcEgressGateway the ones ``charts/proxmox-network-subnet`` renders with ``egress.enabled``,
against the zone's ``spec.egress`` (read by ``--dry-run=server``). On the transit network's far
side, hack/bed/world.py plays the seed's transit router: a server on an address no VPC owns
and the bed's API server, as a worker joining dials it.

* a VM on the Proxmox-backed subnet reaches the world (ping, an HTTP transfer) and the world
  sees the gateway's transit address as the source, never the VM's;
* a worker joining: from the VM, the API server answers ``/readyz`` through the gateway,
  its certificate checked against the cluster's CA;
* port security on the gateway's port: what Kube-OVN v1.15.24 sets without the controller's
  annotation, with it, and with port security turned on by hand (the VM's egress then fails
  while the gateway itself still reaches the world);
* Geneve on the underlay during a transfer, when the VPC's router port and the gateway pod
  share a chassis and when they do not;
* two VPCs' gateways on the transit network: each reaches the world, neither the other;
* Kube-OVN #6100: a Subnet added to the VPC of a running gateway, egress probed before, during
  and after; the gateway's reroute policies deleted by hand while it says Ready: what the
  affected network reports;
* the gateway's failover (``replicas: 2``, one pod deleted) under a VM's probe: the gap.

Every figure printed is a measurement of this run.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import time
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client as k8s

from controller import doctor
from controller.reconcile.egress import ANNOTATION_PORT_SECURITY, LABEL_GATEWAY
from hack.bed import DATAPLANE_PROVIDER, DataPlane, LocalCluster, Prober, Vm, ovsdb_rows
from hack.bed.trunk_kubelet import TRUNK_TOLERATION
from hack.bed.world import SERVER, World
from hack.tools.objects import Admin, unique
from hack.tools.vms import pod_vm, vm_for_network
from hack.tools.wait import wait_for
from tests.support.beds import admin_of, running
from tests.support.peers import KUBEOVN, vpc_homed_on
from tests.test_charts_integration import CHART, CHARTS, build_helm, helm_apply, render, run_helm, set_args
from tests.test_wire_integration import Tenant, gateway_controller, reaches

pytestmark = pytest.mark.integration

WAIT = 120.0
SUBNET_CHART = CHARTS / "proxmox-network-subnet"
ZONE_API = "proxmox.cozystack.io/v1alpha1/ProxmoxNetworkZone"
TRANSIT_VLAN, TRANSIT_CIDR, TRANSIT_GATEWAY = 3490, "10.70.0.0/24", "10.70.0.1"
# The transit network's MTU, set as the package's ``transit.mtu`` and on the router's side.
TRANSIT_MTU = 1400


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The peers, the data plane and the bed's node, with kubelets and Multus on the last two
    trunk nodes."""
    yield from running(LocalCluster(tmp_path_factory.mktemp("egress-wire"), with_peers=True, with_dataplane=True,
                                    with_node=True, trunk_kubelets=2, multus=True), "bed with Multus")


@pytest.fixture(scope="module")
def dp(bed: LocalCluster) -> DataPlane:
    assert bed.dataplane is not None
    return bed.dataplane


@pytest.fixture(scope="module")
def admin(bed: LocalCluster) -> Iterator[Admin]:
    yield from admin_of(bed)


@pytest.fixture(scope="module")
def helm() -> str:
    return build_helm()


class Transit:
    """The transit network of ``charts/proxmox-network`` (``transit.enabled``) in the gateway
    namespace, and the world on its far side."""

    def __init__(self, bed: LocalCluster, dp: DataPlane, admin: Admin, helm: str) -> None:
        self.ns, self.name = unique("pnc-egress"), unique("transit")[:20]
        admin.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=self.ns)))
        values = {"providerNetwork": {"name": DATAPLANE_PROVIDER}, "gateway": {"manage": False},
                  "admission": {"enabled": False},
                  "transit": {"enabled": True, "name": self.name, "vlan": TRANSIT_VLAN, "cidr": TRANSIT_CIDR,
                              "gateway": TRANSIT_GATEWAY, "excludeIps": ["10.70.0.1..10.70.0.9"],
                              "mtu": TRANSIT_MTU}}
        objs = [o for o in render(helm, CHART, values, namespace=self.ns, release="pnc-transit")
                if o["kind"] in ("Vlan", "NetworkAttachmentDefinition", "Subnet")]
        helm_apply(bed, objs)
        self.provider = f"{self.name}.{self.ns}.ovn"  # admission-and-packaging.md (e)
        self.world = World(dp, self.name[-8:], TRANSIT_VLAN, f"{TRANSIT_GATEWAY}/24", bed.server,
                           mtu=TRANSIT_MTU).start()

    def egress(self) -> dict:
        """A zone's ``spec.egress`` on this transit network."""
        return {"externalSubnet": self.name, "gatewayNamespace": self.ns}


@pytest.fixture(scope="module")
def transit(bed: LocalCluster, dp: DataPlane, admin: Admin, helm: str) -> Iterator[Transit]:
    t = Transit(bed, dp, admin, helm)
    try:
        yield t
    finally:
        t.world.stop()


class EgressTenant:
    """A tenant whose chart has ``egress.enabled``: its namespace, VPC and zone (with the
    transit network as ``spec.egress``), the subnets and the VpcEgressGateway the chart renders.

    Two fields are added to the gateway the chart renders, as a platform places its gateways:
    the toleration of the bed's trunk taint (which keeps the bed's other pods off the trunk
    nodes) and, with ``node``, that node's hostname in its node selector.
    """

    def __init__(self, bed: LocalCluster, admin: Admin, helm: str, transit: Transit, first_vlan: int,
                 cidrs: dict[str, str], vpc: str = "", replicas: int = 1, node: str = "") -> None:
        self.bed, self.a, self.helm, self.transit = bed, admin, helm, transit
        tenant = Tenant(admin, first_vlan, vpc=vpc, egress=transit.egress())
        self.ns, self.vpc, self.zone = tenant.ns, tenant.vpc, tenant.zone
        self.cidrs, self.replicas, self.node = dict(cidrs), replicas, node
        self.subnets: dict[str, str] = {}  # subnet name in values -> Subnet (and network) name
        self.gateway = f"{self.vpc}-egress"
        self.applied: list[dict] = []
        self.render_and_apply()

    def values(self) -> dict:
        return {"vpc": self.vpc, "egress": {"enabled": True, "replicas": self.replicas},
                "subnets": [{"name": n, "cidr": c, "proxmox": {"zone": self.zone}} for n, c in self.cidrs.items()]}

    def render_and_apply(self) -> None:
        """``helm template --dry-run=server`` (the chart reads the zone), applied as Helm does."""
        r = run_helm(self.helm, "template", "tenant", str(SUBNET_CHART), "--namespace", self.ns,
                     "--api-versions", ZONE_API, "--dry-run=server", *set_args(self.values()),
                     env={**os.environ, "KUBECONFIG": str(self.bed.admin_kubeconfig)})
        objs = [d for d in yaml.safe_load_all(r.stdout) if d]
        for o in objs:
            if o["kind"] == "Subnet" and o["spec"].get("vlan"):
                self.subnets[o["metadata"]["labels"]["cozystack.io/subnetName"]] = o["metadata"]["name"]
            if o["kind"] == "VpcEgressGateway":
                o["spec"]["tolerations"] = [TRUNK_TOLERATION]
                if self.node:
                    for term in o["spec"]["nodeSelector"]:
                        term["matchLabels"]["kubernetes.io/hostname"] = self.node
        assert any(o["kind"] == "VpcEgressGateway" for o in objs), "the chart rendered no VpcEgressGateway"
        # An upgrade sends what changed since the last render (Helm's three-way merge leaves a
        # field alone that it did not change, such as the excludeIps kube-ovn-controller extends).
        changed = [o for o in objs if o not in self.applied]
        helm_apply(self.bed, changed)
        self.applied = objs

    def add_subnet(self, name: str, cidr: str) -> str:
        """One more Proxmox-backed subnet in the chart's values, applied; its Subnet name."""
        self.cidrs[name] = cidr
        self.render_and_apply()
        return self.subnets[name]

    def egress_gateway(self) -> dict:
        return self.a.co.get_namespaced_custom_object(*KUBEOVN, self.transit.ns, "vpc-egress-gateways",
                                                      self.gateway)

    def is_ready(self) -> dict | None:
        """The VpcEgressGateway if it says Ready with all its replicas now, else None."""
        gw = self.egress_gateway()
        st = gw.get("status") or {}
        return gw if st.get("ready") and len(st.get("externalIPs") or []) == self.replicas else None

    def ready(self) -> dict:
        """Wait until the VpcEgressGateway says Ready with all its replicas; the object."""
        return wait_for(self.is_ready, timeout=WAIT, what=f"VpcEgressGateway {self.gateway} Ready")

    def pods(self) -> list[k8s.V1Pod]:
        """The gateway's running pods."""
        got = self.a.core.list_namespaced_pod(self.transit.ns, label_selector=f"{LABEL_GATEWAY}={self.gateway}")
        return [p for p in got.items if p.status.phase == "Running" and not p.metadata.deletion_timestamp]

    def pod_vm(self, pod: k8s.V1Pod) -> Vm:
        """The gateway pod's own network namespace (to probe from the gateway itself)."""
        return pod_vm(self.bed.trunk_kubelets[pod.spec.node_name], pod)

    def transit_ip(self, pod: k8s.V1Pod) -> str:
        return pod.metadata.annotations[f"{self.transit.provider}.kubernetes.io/ip_address"]

    def vm(self, dp: DataPlane, subnet: str, name: str) -> Vm:
        return vm_for_network(dp, self.a.co, self.ns, self.subnets[subnet], name)

    def reroutes(self) -> list[dict]:
        """The gateway's reroute policies on the VPC's router (Kube-OVN v1.15.24: priority
        29100, ``external_ids:vpc-egress-gateway=<ns>/<name>``)."""
        return [r for r in ovsdb_rows(self.bed.nbctl, "Logical_Router_Policy",
                                      f'external_ids:vpc-egress-gateway="{self.transit.ns}/{self.gateway}"')
                if r["action"] == "reroute"]


def readyz(vm: Vm, bed: LocalCluster) -> str:
    """A joining worker's ``/readyz`` from ``vm`` through the gateway (:meth:`World.readyz`)."""
    return World.readyz(vm, bed.ca_file, bed.controller_token)


@contextlib.contextmanager
def geneve(dp: DataPlane) -> Iterator[list[str]]:
    """Every Geneve packet on the bed's underlay from the block's start until its end and the
    first packet seen (tcpdump on the underlay bridge, one line each with the inner packet
    decoded); the lines, filled in at the end."""
    out = dp.dir / "geneve.txt"
    with open(out, "w") as sink:
        proc = subprocess.Popen(["ip", "netns", "exec", dp.under_ns, "tcpdump", "-i", "underlay", "-nn", "-l",
                                 "--immediate-mode", "geneve"], stdout=sink, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    said = [proc.stderr.readline() for _ in range(2)]  # the "verbose output suppressed" note, then this
    assert any("listening on" in line for line in said), f"tcpdump: {said}"
    lines: list[str] = []
    try:
        yield lines
        # The capture's positive control: at least one Geneve packet (BFD between the chassis
        # runs every second), awaited, so a short block cannot pass for an empty underlay.
        wait_for(lambda: out.read_text().strip(), timeout=WAIT, what="a Geneve packet on the underlay")
    finally:
        proc.terminate()
        proc.wait(10)
        lines.extend(line for line in out.read_text().splitlines() if line.strip())


def lsp_port_security(bed: LocalCluster, pod: k8s.V1Pod) -> list[str]:
    """The NB ``port_security`` of the gateway pod's port on its internal subnet."""
    (row,) = ovsdb_rows(bed.nbctl, "Logical_Switch_Port", f"name={pod.metadata.name}.{pod.metadata.namespace}")
    ps = row["port_security"]
    return [ps] if isinstance(ps, str) else list(ps)


def port_security_annotation(admin: Admin, pod: k8s.V1Pod) -> str | None:
    """The pod's ``ovn.kubernetes.io/port_security`` annotation as the API server has it now."""
    got = admin.core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
    return (got.metadata.annotations or {}).get(ANNOTATION_PORT_SECURITY)


def set_port_security(admin: Admin, pod: k8s.V1Pod, value: str | None) -> None:
    admin.core.patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace,
                                    {"metadata": {"annotations": {ANNOTATION_PORT_SECURITY: value}}})


# --------------------------------------------------------------------------- the tenants


@pytest.fixture(scope="module")
def ctl(bed: LocalCluster) -> Iterator:
    with gateway_controller(bed) as c:
        yield c


@pytest.fixture(scope="module")
def gw_node(bed: LocalCluster) -> str:
    """The trunk kubelet's node the single-replica gateways are placed on."""
    return list(bed.trunk_kubelets)[-1]


@pytest.fixture(scope="module")
def alpha(bed, dp, admin, helm, transit, gw_node, ctl) -> EgressTenant:
    """Tenant alpha: one Proxmox-backed subnet; its VPC's router ports and its gateway pod
    on the same chassis."""
    t = EgressTenant(bed, admin, helm, transit, 3500, {"web": "10.88.0.0/24"}, vpc=vpc_homed_on(dp, gw_node),
                     node=gw_node)
    t.ready()
    return t


@pytest.fixture(scope="module")
def beta(bed, dp, admin, helm, transit, gw_node, ctl) -> EgressTenant:
    """Tenant beta: its gateway pod on the same node as alpha's, its VPC's router ports on
    another chassis."""
    t = EgressTenant(bed, admin, helm, transit, 3510, {"app": "10.90.0.0/24"}, vpc=vpc_homed_on(dp, gw_node, False),
                     node=gw_node)
    t.ready()
    return t


# --------------------------------------------------------------------------- the tests


def test_a_vm_goes_out_through_its_vpcs_egress_gateway_snatted_and_a_joining_worker_reaches_the_api_server(
        bed, dp, transit, alpha):
    t = alpha
    gw = t.ready()
    (pod,) = t.pods()
    snat = t.transit_ip(pod)
    assert snat in gw["status"]["externalIPs"]
    vm = t.vm(dp, "web", "vm-alpha")
    vm_ip = vm.address.split("/")[0]
    assert reaches(vm, vm.gateway)  # the VPC router: the positive control for what follows
    t0 = time.monotonic()
    wait_for(lambda: vm.ping(SERVER, count=1, timeout=1) == 1, timeout=WAIT, interval=0,
             what="the VM's first ping answered by the world")
    first_s = time.monotonic() - t0
    assert vm.ping(SERVER, count=5, timeout=1) == 5
    rate = transit.world.fetch(vm)
    seen = transit.world.clients()
    assert seen and set(seen) == {snat}, f"the world saw {seen}; the gateway's transit address is {snat}"
    assert vm_ip not in seen
    status = readyz(vm, bed)
    assert status == "HTTP/1.1 200 OK ok", status
    print(f"\n[egress] gateway {t.gateway} on {pod.spec.node_name}; VM {vm_ip} (VLAN {vm.vlan}) -> world {SERVER}: "
          f"first answer after {first_s:.1f}s, then 5/5 pings, {transit.world.payload_bytes >> 20} MiB over HTTP "
          f"at {rate:.1f} MiB/s; the world saw {sorted(set(seen))} (the gateway's transit address), never {vm_ip}; "
          f"the API server through the gateway: {status}")


def test_port_security_on_the_gateways_port_without_the_controllers_change_with_it_and_turned_on_by_hand(
        bed, dp, admin, transit, alpha, ctl):
    """Kube-OVN v1.15.24 sets OVN port security on a pod's port only when the pod's
    ``ovn.kubernetes.io/port_security`` annotation is ``"true"`` (pkg/controller/pod.go), so a
    gateway pod without the controller's annotation already forwards; the annotation's
    ``"false"`` is what keeps it so when the annotation says otherwise. Measured here: the
    port's ``port_security`` and the VM's egress in each state."""
    t = alpha
    (pod,) = t.pods()
    vm = t.vm(dp, "web", "vm-ps")
    gw_self = t.pod_vm(pod)
    # With the controller: its annotation on the pod, no port security on the port, egress works.
    wait_for(lambda: port_security_annotation(admin, pod) == "false", timeout=WAIT,
             what="the controller's port-security annotation on the gateway pod")
    assert lsp_port_security(bed, pod) == []
    assert wait_for(lambda: vm.ping(SERVER, count=1, timeout=1) == 1, timeout=WAIT, interval=0, what="egress")
    states = {"controller": (lsp_port_security(bed, pod), vm.ping(SERVER, count=5, timeout=1))}
    ctl.stop()
    try:
        # Turned on by hand: the port drops what the gateway forwards for the VM.
        set_port_security(admin, pod, "true")
        on = wait_for(lambda: lsp_port_security(bed, pod) or None, timeout=WAIT, what="port security on the port")
        lost = vm.ping(SERVER, count=5, timeout=1)
        states["true"] = (on, lost)
        assert lost == 0, f"with port security on, {lost}/5 of the VM's pings crossed the gateway"
        assert reaches(gw_self, SERVER)  # the gateway itself still reaches the world
        assert reaches(vm, vm.gateway)  # and the VM its router
        # The annotation removed by hand: Kube-OVN's own default for an unannotated pod, awaited
        # as the port losing the port security the annotation had put on.
        set_port_security(admin, pod, None)
        wait_for(lambda: lsp_port_security(bed, pod) == [], timeout=WAIT, what="Kube-OVN's default on the port")
        states["unannotated"] = (lsp_port_security(bed, pod), vm.ping(SERVER, count=5, timeout=1))
    finally:
        ctl.start()
    # The controller back: its annotation on the pod, egress through the open port.
    t0 = time.monotonic()
    wait_for(lambda: port_security_annotation(admin, pod) == "false", timeout=WAIT,
             what="the controller's annotation back on the gateway pod")
    wait_for(lambda: vm.ping(SERVER, count=1, timeout=1) == 1, timeout=WAIT, interval=0, what="egress")
    back_s = time.monotonic() - t0
    assert lsp_port_security(bed, pod) == []
    assert states["controller"] == ([], 5)
    assert states["unannotated"] == ([], 5), states
    assert all(f" {pod.status.pod_ip}" in entry for entry in states["true"][0]), states
    print(f"\n[egress, port security] port {pod.metadata.name}.{pod.metadata.namespace}: with the controller "
          f"port_security={states['controller'][0]}, VM egress 5/5; annotation 'true' by hand "
          f"port_security={states['true'][0]}, 0/5 while the gateway itself reaches the world; annotation removed "
          f"by hand port_security={states['unannotated'][0]}, 5/5 (Kube-OVN v1.15.24's default is off); the "
          f"controller back: its annotation and egress in {back_s:.1f}s")


def test_geneve_on_the_underlay_when_router_port_and_gateway_share_a_chassis_and_when_not(
        bed, dp, transit, alpha, beta):
    """The VM's packets inside Geneve on the underlay during a transfer through its gateway;
    the capture runs until it has seen a Geneve packet (BFD between the chassis at least), its
    positive control."""
    counts = {}
    for t, label in ((alpha, "shared"), (beta, "apart")):
        (pod,) = t.pods()
        vm = t.vm(dp, next(iter(t.subnets)), f"vm-gen-{label}")
        vm_ip = vm.address.split("/")[0]
        wait_for(lambda: vm.ping(SERVER, count=1, timeout=1) == 1, timeout=WAIT, interval=0, what="egress")
        with geneve(dp) as lines:
            rate = transit.world.fetch(vm)
        ours = [line for line in lines if f" {vm_ip}" in line or f" {SERVER}" in line]
        counts[label] = (len(ours), len(lines), rate, pod.spec.node_name, t.vpc, ours[:3])
    print(f"\n[egress, Geneve] during a {transit.world.payload_bytes >> 20} MiB transfer: " + "; ".join(
        f"{label} (gateway pod on {n}, VPC {vpc}): {c} of {total} Geneve packets carry the VM's flow, "
        f"{r:.1f} MiB/s{(' e.g. ' + ' | '.join(ex)) if ex else ''}"
        for label, (c, total, r, n, vpc, ex) in counts.items()))
    assert counts["shared"][0] == 0


def test_two_vpcs_gateways_on_the_transit_network_reach_the_world_and_not_each_other(dp, transit, alpha, beta):
    (pa,), (pb,) = alpha.pods(), beta.pods()
    a, b = alpha.pod_vm(pa), beta.pod_vm(pb)
    ip_a, ip_b = alpha.transit_ip(pa), beta.transit_ip(pb)
    assert reaches(a, SERVER) and reaches(b, SERVER)  # each reaches the world (and the router)
    assert reaches(a, TRANSIT_GATEWAY) and reaches(b, TRANSIT_GATEWAY)
    lost = (a.run("ping", "-n", "-q", "-c", "3", "-W", "1", "-I", "net1", ip_b).stdout,
            b.run("ping", "-n", "-q", "-c", "3", "-W", "1", "-I", "net1", ip_a).stdout)
    assert all(" 0 received" in out for out in lost), lost
    assert reaches(a, SERVER) and reaches(b, SERVER)  # still, after the probes
    print(f"\n[egress, two VPCs] gateways {ip_a} ({alpha.vpc}) and {ip_b} ({beta.vpc}) on the transit network: "
          f"each reaches the world; neither the other (3 of 3 pings lost each way)")


def test_a_subnet_added_to_a_vpc_with_a_running_gateway_and_its_reroute_policies_deleted(
        bed, dp, admin, transit, alpha, ctl):
    """Kube-OVN #6100: adding a Subnet to a VPC with a running gateway must not cut its egress;
    probed before, during and after (v1.15.24). Then the gateway's reroute policies deleted by
    hand while it says Ready: the VM's egress and what the affected network reports."""
    t = alpha
    vm = t.vm(dp, "web", "vm-r5")
    wait_for(lambda: vm.ping(SERVER, count=1, timeout=1) == 1, timeout=WAIT, interval=0, what="egress")
    before = {p.metadata.name for p in t.pods()}
    gap, span, lost = subnet_added_under_probe(t, dp, vm, "db", "10.89.0.0/24")
    after = {p.metadata.name for p in t.pods()}
    print(f"\n[egress, #6100] replicas 1: a Subnet added to VPC {t.vpc} with its gateway running: egress cut for "
          f"{gap:.2f}s ({lost} of the 0.1 s probes lost over {span:.1f}s); the gateway pod {sorted(before)} was "
          f"replaced by {sorted(after)}; the new subnet's VM reaches the world")
    # Kube-OVN v1.15.24 puts a route to each source subnet into the gateway pods' template
    # (pkg/controller/vpc_egress_gateway.go), so a new subnet rolls the Deployment (maxSurge 0):
    # with one replica, egress waits for the new pod.
    assert before.isdisjoint(after) and len(after) == 1

    # The reroute policies gone while the gateway says Ready (deleted by hand, as #6100 leaves it).
    gauge = ctl.mgr.metrics.network_egress_reroute_missing
    net = t.subnets["web"]
    wait_for(lambda: gauge.labels(t.ns, net)._value.get() == 0, timeout=WAIT, what="the gauge at 0 first")
    policies = t.reroutes()
    t0 = time.monotonic()
    for row in policies:
        bed.nbctl("lr-policy-del", t.vpc, str(row["_uuid"]))
    assert t.egress_gateway()["status"]["ready"] is True
    wait_for(lambda: gauge.labels(t.ns, net)._value.get() == 1, timeout=WAIT, what="the gauge at 1")
    seen_s = time.monotonic() - t0
    ctl.mgr.events.flush()
    (warn,) = wait_for(lambda: events(admin, t.ns, net, "EgressRerouteMissing"), timeout=WAIT, what="the Warning")
    assert warn.type == "Warning" and f'router "{t.vpc}"' in warn.message
    cut = vm.ping(SERVER, count=5, timeout=1)
    assert reaches(vm, vm.gateway)  # the VM still reaches its router: only the way out is gone
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert doctor.main(["--kubeconfig", str(bed.admin_kubeconfig), "-n", t.ns, net,
                            "--ovn-nb-address", bed.nb_tcp]) == 0
    assert f"  warning: {warn.message}" in out.getvalue().splitlines()
    # Does kube-ovn-controller make them again by itself? Then a change of the gateway (what any
    # reconcile of it does): its policies back, the Normal Event, egress back.
    by_itself = t.reroutes()
    t.a.co.patch_namespaced_custom_object(*KUBEOVN, t.transit.ns, "vpc-egress-gateways", t.gateway,
                                          {"metadata": {"annotations": {"pnc-test/touched": str(time.time())}}})
    t1 = time.monotonic()
    wait_for(lambda: len(t.reroutes()) == len(policies), timeout=WAIT, what="the reroutes made again")
    wait_for(lambda: gauge.labels(t.ns, net)._value.get() == 0, timeout=WAIT, what="the gauge back at 0")
    ctl.mgr.events.flush()
    wait_for(lambda: events(admin, t.ns, net, "EgressRerouteRestored"), timeout=WAIT, what="the Normal Event")
    wait_for(lambda: vm.ping(SERVER, count=1, timeout=1) == 1, timeout=WAIT, interval=0, what="egress back")
    back_s = time.monotonic() - t1
    print(f"[egress, #6100 policies] {len(policies)} reroute policies of {t.gateway} deleted by hand while it says "
          f"Ready: the VM's egress {cut}/5; the network's gauge at 1 and the Warning after {seen_s:.1f}s; doctor "
          f"names it; kube-ovn-controller had made {len(by_itself)} again on its own; after a change of the gateway "
          f"they, the Normal Event and egress were back in {back_s:.1f}s")
    assert cut == 0


def subnet_added_under_probe(t: EgressTenant, dp: DataPlane, vm: Vm, name: str, cidr: str) -> tuple[float, float, int]:
    """A Proxmox-backed subnet added to ``t``'s chart while ``vm`` pings the world every 0.1 s:
    waits for its network Ready, every gateway pod replaced as Kube-OVN rolls the Deployment
    (a new source subnet changes the pods' template) and the gateway Ready again, a VM on the
    new subnet reaching the world, then 20 probes in a row answered after all that; returns
    the longest gap (s) from the addition to that run, the time probed (s) and the probes lost."""
    probe = Prober(vm, "ping", SERVER, interval=0.1)
    try:
        wait_for(lambda: probe.steady_after(time.monotonic() - 2, 10), timeout=WAIT, what="steady probes")
        before = {p.metadata.name for p in t.pods()}
        t0 = time.monotonic()
        added = t.add_subnet(name, cidr)
        wait_for(lambda: any(c["type"] == "Ready" and c["status"] == "True"
                             for c in (t.a.network(t.ns, added).get("status") or {}).get("conditions") or []),
                 timeout=WAIT, what=f"network {added} Ready")
        assert added in t.egress_gateway()["spec"]["policies"][0]["subnets"]

        def rolled() -> bool:  # every pod replaced (the Deployment's template changed), the gateway Ready
            names = {p.metadata.name for p in t.pods()}
            return len(names) == t.replicas and names.isdisjoint(before) and not rolling(t) and bool(t.is_ready())

        wait_for(rolled, timeout=WAIT, what="the gateway's pods replaced and the gateway Ready")
        new_vm = t.vm(dp, name, f"{vm.name}-{name}")
        assert reaches(new_vm, SERVER)
        settled = time.monotonic()
        end = wait_for(lambda: probe.steady_after(settled, 20), timeout=WAIT, what="steady egress after the roll")
        lost = len([x for x in probe.lost_at() if t0 <= x <= end])
        return probe.longest_gap(t0, end), end - t0, lost
    finally:
        probe.stop()


def rolling(t: EgressTenant) -> bool:
    """The gateway's Deployment has not finished rolling out its current template."""
    d = k8s.AppsV1Api(t.a.core.api_client).read_namespaced_deployment(t.gateway, t.transit.ns)
    st = d.status
    return not (st.observed_generation == d.metadata.generation and (st.updated_replicas or 0) == t.replicas
                and (st.ready_replicas or 0) == t.replicas and not (st.unavailable_replicas or 0)
                and (st.replicas or 0) == t.replicas)


def events(admin: Admin, ns: str, name: str, reason: str) -> list:
    return [e for e in admin.core.list_namespaced_event(ns).items
            if e.involved_object.name == name and e.reason == reason]


def test_failover_of_the_gateways_pods_under_a_vms_probe(bed, dp, admin, helm, transit, ctl):
    """``replicas: 2`` (one pod per trunk kubelet's node, Kube-OVN's anti-affinity); the pod
    deleted while a VM pings the world every 0.1 s: the longest gap, and egress after."""
    t = EgressTenant(bed, admin, helm, transit, 3520, {"fo": "10.91.0.0/24"}, replicas=2)
    t.ready()
    pods = t.pods()
    assert len(pods) == 2 and len({p.spec.node_name for p in pods}) == 2
    vm = t.vm(dp, "fo", "vm-fo")
    wait_for(lambda: vm.ping(SERVER, count=1, timeout=1) == 1, timeout=WAIT, interval=0, what="egress")
    probe = Prober(vm, "ping", SERVER, interval=0.1)
    try:
        wait_for(lambda: probe.steady_after(time.monotonic() - 2, 10), timeout=WAIT, what="steady probes")
        victim = pods[0]
        t0 = time.monotonic()
        admin.core.delete_namespaced_pod(victim.metadata.name, victim.metadata.namespace, grace_period_seconds=0)
        recovered = wait_for(lambda: t.is_ready() and len(t.pods()) == 2 and victim.metadata.name not in
                             {p.metadata.name for p in t.pods()}, timeout=WAIT, what="the replacement pod")
        assert recovered
        replaced = time.monotonic()
        # The window runs from the deletion past the replacement, so that a cut whenever the
        # victim's sandbox actually goes is inside it.
        end = wait_for(lambda: probe.steady_after(replaced, 20), timeout=WAIT, what="egress steady after")
        lost = [x for x in probe.lost_at() if t0 <= x <= end]
    finally:
        probe.stop()
    gap = probe.longest_gap(t0, end)
    print(f"\n[egress, failover] {t.gateway}: pod {victim.metadata.name} on {victim.spec.node_name} deleted under "
          f"0.1 s probes: longest gap {gap:.2f}s, {len(lost)} probes lost over {end - t0:.1f}s; "
          f"the replacement Ready {replaced - t0:.1f}s after")
    assert reaches(vm, SERVER)
    # Kube-OVN #6100 with two replicas: the roll a new subnet causes replaces one pod at a time.
    gap, span, lost = subnet_added_under_probe(t, dp, vm, "fo2", "10.92.0.0/24")
    print(f"[egress, #6100] replicas 2: a Subnet added: longest gap {gap:.2f}s ({lost} probes lost over {span:.1f}s)")
    assert gap < 2.0, f"egress cut for {gap:.2f}s while a Subnet was added to a VPC with two gateway replicas"
