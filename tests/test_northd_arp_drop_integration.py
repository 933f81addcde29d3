"""Why the gateway step exists, shown on the platform's own ovn-northd (issue 24).

Kube-OVN's OVN carries its patch 477695a0 "northd: skip arp/nd request for lrp addresses
from localnet ports": for a logical switch with a localnet port, ovn-northd adds a
priority-105 ``drop;`` in ``ls_in_arp_rsp`` for an ARP request from the localnet port to the
IP of a peer router port that has **no** ``ha_chassis_group`` and **no** ``gateway_chassis``
(dist/images/patches/477695a010affe56efdd66b60510fa612f8704c1.patch, northd.c
``build_lswitch_arp_nd_responder_known_ips``). Kube-OVN (v1.15.24) never writes a group on
a VLAN Subnet's router port itself, so on this OVN a Proxmox VM on the VLAN gets no answer
from its VPC gateway unless this controller has written the port's group (spec §6).

Here, on the bed's northd built from Kube-OVN's patched sources (hack/build-ovn.sh), the
real kube-ovn-controller and the controller under test:

* with gateway management off (the control), the network is Ready on Kube-OVN's side and
  the drop flow for the gateway IP is in the SB and stays;
* with gateway management on, the controller writes the port's HA chassis group and
  ovn-northd removes the flow.
"""

from __future__ import annotations

from typing import Iterator

import pytest
from kubernetes import client as k8s

from hack.bed import LocalCluster, ovsdb_rows
from hack.tools.objects import Admin, reason, unique, wait_condition
from hack.tools.wait import wait_for
from tests.support.ovsdb import ha_chassis_groups
from tests.support.peers import KUBEOVN, Ctl, Trunk, make_vpc

pytestmark = pytest.mark.integration

VPC = "vpc-arp"
WAIT = 60.0


def arp_drops(bed: LocalCluster, switch: str, localnet: str, address: str) -> list[str]:
    """The logical flows of ``switch`` that drop an ARP request from ``localnet`` for
    ``address`` in ``ls_in_arp_rsp`` (the patch's match, verbatim)."""
    match = f'match=(inport == "{localnet}" && arp.tpa == {address} && arp.op == 1)'
    return [line.strip() for line in bed.sbctl("lflow-list", switch).splitlines()
            if "(ls_in_arp_rsp" in line and "priority=105" in line and match in line and "action=(drop;)" in line]


@pytest.fixture(scope="module")
def scene(peers_bed: LocalCluster, peers_admin: Admin) -> Iterator[dict]:
    a = peers_admin
    provider = Trunk(a).provider
    make_vpc(a, VPC)
    zone, ns, sub = unique("zone"), unique("tenant"), unique("arp")
    a.create_zone(zone, provider, ["3100-3199"])
    a.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    yield {"provider": provider, "zone": zone, "ns": ns, "sub": sub, "lrp": f"{VPC}-{sub}",
           "group": f"px-{VPC}-{sub}", "gateway": "10.31.0.1"}


def test_localnet_arp_to_the_gateway_is_dropped_until_the_controller_writes_the_group(peers_bed, peers_admin, scene):
    bed, a, s = peers_bed, peers_admin, scene
    ns, sub, gw = s["ns"], s["sub"], s["gateway"]
    localnet = f"localnet.{sub}"

    # The control: the controller without gateway management. Everything else is as usual.
    control = Ctl(bed, manage_gateway=False)
    control.start()
    try:
        a.create_network(ns, "net", s["zone"], sub, "pool")
        a.co.create_cluster_custom_object(*KUBEOVN, "subnets", {
            "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": sub},
            "spec": {"vpc": VPC, "vlan": sub, "cidrBlock": "10.31.0.0/24", "gateway": gw, "protocol": "IPv4",
                     "logicalGateway": True, "excludeIps": ["10.31.0.200..10.31.0.250"]}})
        wait_condition(a, ns, "net", "SubnetReady", "Ready", WAIT)
        # Kube-OVN's router port, with no group, and northd's drop for its address.
        port = wait_for(lambda: (ovsdb_rows(bed.nbctl, "Logical_Router_Port", f"name={s['lrp']}") or [None])[0],
                        timeout=WAIT, what=f"router port {s['lrp']}")
        assert port["networks"] == f"{gw}/24"
        drops = wait_for(lambda: arp_drops(bed, sub, localnet, gw), timeout=WAIT,
                         what="the localnet ARP drop for the gateway in the SB")
        assert len(drops) == 1, drops
        # It stays: a full pass of the controller without gateway management writes no group.
        control.resync()
        (port,) = ovsdb_rows(bed.nbctl, "Logical_Router_Port", f"name={s['lrp']}")
        assert port["ha_chassis_group"] == [] and port["gateway_chassis"] == []
        assert ha_chassis_groups(bed.nbctl, s["group"]) == []
        assert len(arp_drops(bed, sub, localnet, gw)) == 1
    finally:
        control.stop()

    # The controller as shipped: gateway management on. Its group removes the drop.
    ctl = Ctl(bed, manage_gateway=True, ovn_nb_address=bed.nb_tcp)
    ctl.start()
    try:
        net = wait_condition(a, ns, "net", "GatewayReady", "ChassisAssigned", WAIT)
        assert reason(net, "GatewayReady")[0] == "True"
        (group,) = ha_chassis_groups(bed.nbctl, s["group"])
        wait_for(lambda: not arp_drops(bed, sub, localnet, gw), timeout=WAIT,
                 what="ovn-northd removing the ARP drop once the port has a group")
        (port,) = ovsdb_rows(bed.nbctl, "Logical_Router_Port", f"name={s['lrp']}")
        assert port["ha_chassis_group"] == group["uuid"]
    finally:
        ctl.stop()
