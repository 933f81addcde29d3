"""The package on the wire (issue 27, "Must show"): what the charts render, applied as Helm
applies it to the bed with the real kube-ovn-controller v1.15.24, the real IPAM provider and
real chassis (hack/bed/dataplane.py), then judged by packets.

* the tenant chart (``charts/proxmox-network-subnet``): VMs on two of its rendered subnets,
  made as capmox makes them (the VLAN from the network's status, the address from a claim on
  the rendered pool), each get exactly one ARP answer from their gateway, ping it, and reach
  each other through the VPC router;
* the transit network of ``charts/proxmox-network`` (admission-and-packaging.md (e)): two
  VPCs' egress-gateway ports on it cannot reach each other, while both reach the router side
  and the router side reaches both; with the drop ACL taken out of the Subnet, the same two
  ports do reach each other (the positive control: the path exists, the ACL is what cuts it).

An egress gateway's transit port is played by a pod whose network is the transit Subnet: the
same kind of logical switch port on the same switch, so the switch's ACLs judge it the same
way (a VpcEgressGateway's pods need a kubelet, which the trunk Nodes of the bed do not run).
"""

from __future__ import annotations

import contextlib

import pytest
from kubernetes import client as k8s

from hack.bed import DATAPLANE_PROVIDER, ovsdb_rows
from hack.tools.objects import unique, wait_condition
from hack.tools.vms import pod_on_subnet, vm_for_network
from hack.tools.wait import wait_for
from ovn.planner import group_name, router_port_name
from tests.support.peers import KUBEOVN
from tests.test_charts_integration import CHART, CHARTS, as_list, build_helm, helm_apply, render
from tests.test_wire_integration import WAIT, Tenant, answers, gateway_controller, reaches, settled
from tests.test_wire_integration import bed, dp  # noqa: F401 - the peers bed with its data plane (fixtures)

pytestmark = pytest.mark.integration
BED_DATAPLANE = True  # the peers bed with its chassis, trunk and node agents (tests/conftest.py)

SUBNET_CHART = CHARTS / "proxmox-network-subnet"
ZONE_API = "proxmox.cozystack.io/v1alpha1/ProxmoxNetworkZone"  # the tenant chart asks for it


@pytest.fixture(scope="module")
def helm() -> str:
    return build_helm()


def test_vms_on_the_tenant_charts_subnets_reach_their_gateways_and_each_other(bed, dp, peers_admin, helm):
    a = peers_admin
    t = Tenant(a, 3310)
    values = {"vpc": t.vpc, "subnets": [{"name": "web", "cidr": "10.84.0.0/24", "proxmox": {"zone": t.zone}},
                                        {"name": "db", "cidr": "10.85.0.0/24", "proxmox": {"zone": t.zone}}]}
    objs = render(helm, SUBNET_CHART, values, namespace=t.ns, release="tenant", api_versions=(ZONE_API,))
    subnets = {o["metadata"]["labels"].get("cozystack.io/subnetName", o["metadata"]["name"]): o
               for o in objs if o["kind"] == "Subnet"}
    assert len(subnets) == 2
    helm_apply(bed, objs)
    with gateway_controller(bed):
        vms = {}
        for i, (label, sub) in enumerate(sorted(subnets.items())):
            name = sub["metadata"]["name"]
            obj = wait_condition(a, t.ns, name, "Ready", "Ready", WAIT)
            assert 3310 <= obj["status"]["vlan"] <= 3319
            vm = vm_for_network(dp, a.co, t.ns, name, f"vm-chart-{i}")
            gateway, prefix = sub["spec"]["gateway"], sub["spec"]["cidrBlock"].rsplit(".", 1)[0]
            # The pool the chart rendered: the middle half of the /24 (section (f)), the Subnet's gateway.
            assert vm.gateway == gateway and vm.address.startswith(f"{prefix}.") and vm.address.endswith("/24")
            assert 64 <= int(vm.address.split("/")[0].rsplit(".", 1)[1]) <= 191
            (port,) = ovsdb_rows(bed.nbctl, "Logical_Router_Port", f"name={router_port_name(t.vpc, name)}")
            mac = port["mac"].lower()
            first = wait_for(lambda: answers(vm, gateway), timeout=WAIT, interval=0,
                             what=f"an ARP answer from {name}'s gateway")
            assert set(first) == {(gateway, mac)}
            # One reply per request once OVN has settled the port on the group's highest
            # priority (while it moves, a request can get two replies or none).
            settled(bed, group_name(t.vpc, name), router_port_name(t.vpc, name))
            for _ in range(2):  # exactly one reply per request: one chassis answers
                assert answers(vm, gateway) == [(gateway, mac)]
            assert reaches(vm, gateway)
            vms[name] = vm
        one, two = vms.values()
        assert reaches(one, two.address.split("/")[0]) and reaches(two, one.address.split("/")[0])
        print(f"\n[wire, tenant chart] {', '.join(f'{n}: VLAN {v.vlan}, VM {v.address}' for n, v in vms.items())}; "
              f"each answered once by its gateway, the two VMs reach each other through the router")


def test_two_vpcs_egress_ports_on_the_transit_network_reach_the_router_side_and_not_each_other(bed, dp, peers_admin,
                                                                                               helm):
    a = peers_admin
    ns, name = unique("pnc-transit"), unique("transit")[:20]
    cidr, gateway, vlan = "10.86.0.0/24", "10.86.0.1", 3390
    a.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    values = {"providerNetwork": {"name": DATAPLANE_PROVIDER}, "gateway": {"manage": False},
              "admission": {"enabled": False},
              "transit": {"enabled": True, "name": name, "vlan": vlan, "cidr": cidr, "gateway": gateway,
                          "excludeIps": ["10.86.0.1..10.86.0.9"]}}
    objs = [o for o in render(helm, CHART, values, namespace=ns, release="pnc-transit")
            if o["kind"] in ("Vlan", "NetworkAttachmentDefinition", "Subnet")]
    drop = ("from-lport", 2000, f"ip4 && ip4.dst == {cidr} && ip4.dst != {gateway}", "drop")
    allow = ("from-lport", 2001, f'inport == "localnet.{name}"', "allow")

    def acls() -> set[tuple]:
        return {(r["direction"], r["priority"], r["match"], r["action"])
                for r in ovsdb_rows(bed.nbctl, "ACL", f"external_ids:subnet={name}")}

    helm_apply(bed, objs)
    pods: list[str] = []
    made: list[str] = []  # on the data plane
    try:
        wait_for(lambda: {drop, allow} <= acls(), timeout=WAIT, what="the transit Subnet's ACLs in the NB")
        router = dp.add_vm(f"rtr-{name[-6:]}", vlan, f"{gateway}/24", "10.86.0.254")
        made.append(router.name)
        ports = []
        for i, vpc in enumerate(("a", "b")):  # each VPC's gateway on its own trunk node
            pod = f"egress-{vpc}"
            pods.append(pod)
            ports.append(pod_on_subnet(dp, a.core, ns, name, pod, dp.chassis[i]))
            made.append(pod)
            wait_for(lambda: (ovsdb_rows(bed.sbctl, "Port_Binding", f"logical_port={pod}.{ns}")
                              or [{}])[0].get("chassis"), timeout=WAIT, what=f"{pod} bound on its chassis")
        gw_a, gw_b = ports
        ip_a, ip_b = gw_a.address.split("/")[0], gw_b.address.split("/")[0]
        # Positive controls: both reach the router side; the router side (from localnet, 2001) reaches both.
        assert reaches(gw_a, gateway) and reaches(gw_b, gateway)
        assert reaches(router, ip_a) and reaches(router, ip_b)
        # The refusal: neither reaches the other (ARP is not ip4: it resolves; the ping is dropped).
        assert gw_a.ping(ip_b, count=3, timeout=1) == 0 and gw_b.ping(ip_a, count=3, timeout=1) == 0
        assert reaches(gw_a, gateway) and reaches(gw_b, gateway)  # still, after the probes

        # The same path without the drop ACL: the two ports do reach each other.
        sub = a.co.get_cluster_custom_object(*KUBEOVN, "subnets", name)
        kept = [acl for acl in sub["spec"]["acls"] if acl["action"] != "drop"]
        a.co.patch_cluster_custom_object(*KUBEOVN, "subnets", name, {"spec": {"acls": kept}})
        wait_for(lambda: drop not in acls(), timeout=WAIT, what="the drop ACL out of the NB")
        assert reaches(gw_a, ip_b) and reaches(gw_b, ip_a)
        print(f"\n[wire, transit] {name} (VLAN {vlan}): egress ports {ip_a} and {ip_b} on two chassis each reach "
              f"the router side {gateway} and are reached by it; not each other (3 of 3 pings lost each way) "
              f"until the drop ACL is taken out")
    finally:
        for vm in made:
            dp.remove_vm(vm)
        for pod in pods:
            with contextlib.suppress(Exception):
                a.core.delete_namespaced_pod(pod, ns, grace_period_seconds=0)
        bed.run_kubectl("delete", "-f", "-", "--wait=false", input=as_list(objs).encode(), check=False)
