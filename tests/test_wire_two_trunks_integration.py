"""Two trunk nodes on the wire (issue 25): a bed whose data plane has two chassis.

OVN's HA logic (ovn-controller, controller/ha-chassis.c ``ha_chassis_group_is_active``; not
changed by Kube-OVN's patches): a chassis of a group of two or more counts itself active
only while it has at least one live BFD session (its ``active_tunnels`` is not empty),
unless it is the only chassis of the group the SB still lists. When the active chassis'
datapath dies (ovs-vswitchd killed: its SB Chassis row stays), the survivor of a group of
two has no BFD session left and stays passive: nobody answers the VMs. The controller says
so in ``GatewayReady`` and with a Warning Event when it writes a group of fewer than three
chassis (docs/operations.md, ChassisAssigned).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from hack.bed import ClusterError, LocalCluster
from hack.objects import Admin, reason
from hack.wait import wait_for
from tests.support.ovsdb import ha_chassis_groups
from tests.test_wire_integration import Tenant, gateway_controller, reaches

pytestmark = pytest.mark.integration

WAIT = 60.0
WINDOW = 20.0  # seconds the survivor is watched for a takeover that does not come


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("two-trunks"), with_peers=True, with_dataplane=True,
                     dataplane_chassis=2)
    try:
        c.start()
    except ClusterError as e:
        pytest.fail(f"bed with a two-chassis data plane did not start: {e}", pytrace=False)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def admin(bed: LocalCluster) -> Iterator[Admin]:
    api = bed.api_client("admin")
    try:
        yield Admin(api)
    finally:
        api.close()


def test_with_two_trunk_nodes_the_survivor_does_not_take_over_and_the_network_says_so(bed, admin):
    dp = bed.dataplane
    assert dp is not None and len(dp.chassis) == 2
    n = Tenant(admin, 3300).subnet(80)
    with gateway_controller(bed):
        obj = n.wait("GatewayReady", "ChassisAssigned")
        (group,) = ha_chassis_groups(bed.nbctl, n.group)
        assert sorted(group["chassis"].values()) == [[90], [100]]
        # What the controller tells the operator about a group of two.
        msg = reason(obj, "GatewayReady")[2]
        assert msg.endswith("; with 2 chassis OVN moves the gateway only while the survivor keeps a BFD session "
                            "with another chassis, so it stays on a failed active chassis: make at least 3 nodes "
                            "of the provider network ready"), msg
        # The Event is queued after the status is written (controller.apply): awaited, then counted.
        events = wait_for(lambda: [e for e in admin.core.list_namespaced_event(n.ns).items
                                   if e.involved_object.name == n.name and e.reason == "GatewayWithoutFailover"],
                          what="the GatewayWithoutFailover Warning Event")
        assert len(events) == 1 and events[0].type == "Warning"

        vm = n.vm(dp, "vm-two")
        assert reaches(vm, n.gateway)
        active = n.settled(bed)
        chassis = next(c for c in dp.chassis if c.system_id == active)
        dp.kill_vswitchd(chassis)
        killed = time.monotonic()
        # The survivor never claims cr-, and the VM gets no answer, for the whole window.
        while time.monotonic() - killed < WINDOW:
            assert n.cr_chassis(bed) in (active, None)
            assert vm.arping(n.gateway, count=1, timeout=1) == []
        # The failed chassis back: the gateway answers again.
        dp.start_vswitchd(chassis.ns, chassis.rundir)
        assert reaches(vm, n.gateway)
