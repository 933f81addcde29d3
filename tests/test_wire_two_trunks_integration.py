"""Two trunk nodes on the wire (issue 25): a bed whose data plane has two chassis.

OVN's HA logic (ovn-controller, controller/ha-chassis.c ``ha_chassis_group_is_active``; not
changed by Kube-OVN's patches): a chassis of a group of two or more counts itself active
only while it has at least one live BFD session (its ``active_tunnels`` is not empty),
unless it is the only chassis of the group the SB still lists. When the active chassis'
datapath dies (ovs-vswitchd killed: its SB Chassis row stays), the survivor of a group of
two has no BFD session left and stays passive: nobody answers the VMs. The controller says
so in ``GatewayReady`` and with a Warning Event when it writes a group of fewer than three
chassis (docs/runbook.md, ChassisAssigned). With the SB read (product-decisions.md §10)
the status follows the chassis that holds ``cr-``: what the SB shows, and what it cannot.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.bed import LocalCluster
from hack.chaoskit import start_ovsdb, stop_ovsdb
from hack.tools.objects import Admin, reason
from hack.tools.wait import wait_for
from tests.support.beds import admin_of, running
from tests.support.ovsdb import ha_chassis_groups
from tests.test_wire_integration import Tenant, gateway_controller, reaches

pytestmark = pytest.mark.integration

WAIT = 60.0
WINDOW = 20.0  # seconds the survivor is watched for a takeover that does not come


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from running(LocalCluster(tmp_path_factory.mktemp("two-trunks"), with_peers=True, with_dataplane=True,
                                    dataplane_chassis=2), "bed with a two-chassis data plane")


@pytest.fixture(scope="module")
def admin(bed: LocalCluster) -> Iterator[Admin]:
    yield from admin_of(bed)


# -- the gateway as it serves (product-decisions.md §10) ------------------------------------

def serving(n) -> str | None:
    return (n.network().get("status") or {}).get("servingChassis")


def bound_gauge(ctl, n) -> float | None:
    return ctl.mgr.metrics.registry.get_sample_value(
        "cozy_proxmox_network_gateway_bound", {"namespace": n.ns, "network": n.name})


def test_with_two_trunk_nodes_the_survivor_does_not_take_over_and_the_network_says_so(bed, admin):
    dp = bed.dataplane
    assert dp is not None and len(dp.chassis) == 2
    n = Tenant(admin, 3300).subnet(80)
    with gateway_controller(bed, ovn_sb_address=bed.sb_tcp):
        obj = n.wait("GatewayReady", "ChassisAssigned")
        (group,) = ha_chassis_groups(bed.nbctl, n.group)
        assert sorted(group["chassis"].values()) == [[90], [100]]
        # What the controller tells the operator about a group of two.
        msg = reason(obj, "GatewayReady")[2]
        assert msg.endswith("; with 2 chassis OVN moves the gateway only while the survivor keeps a BFD session "
                            "with another chassis, so it stays on a failed active chassis: make at least 3 nodes "
                            "of the provider network ready"), msg
        # The Event is queued after the status is written (controller.apply.executor): awaited, then counted.
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
        try:
            # The survivor never claims cr-, and the VM gets no answer, for the whole window.
            # The dead chassis' ovn-controller, still running, mostly keeps cr- claimed (the SB
            # then names it, and the status cannot see this outage); in some runs it released
            # it, and nothing held it (docs/operations.md, "The gateway as it serves").
            holders = set()
            while time.monotonic() - killed < WINDOW:
                holders.add(n.cr_chassis(bed))
                assert holders <= {active, None}, holders
                assert vm.arping(n.gateway, count=1, timeout=1) == []
            assert serving(n) in (active, None)
            print(f"\n[wire] two chassis, the active datapath killed: cr- held by {sorted(map(str, holders))} "
                  f"over {WINDOW:.0f}s, never by the survivor; no ARP answer")
        finally:
            # The failed chassis back (whatever happened: the module's other tests need it).
            dp.start_vswitchd(chassis.ns, chassis.rundir)
        assert reaches(vm, n.gateway)


def test_the_status_follows_the_serving_chassis_and_says_when_nothing_serves(bed, admin):
    """product-decisions.md §10 on the wire, two trunk nodes. The active node's
    ovn-controller stopped as a node agent's shutdown stops it (its Chassis leaves the SB):
    the survivor claims ``cr-``, the status names it (``GatewayMoved``), Ready stays. Both
    stopped: nothing serves the port, GatewayReady and Ready turn False/NoServingChassis
    (the bound gauge 0, no servingChassis) within seconds; both back: Ready again. No
    group is emptied: the only NB write is the survivor raised to the top."""
    dp = bed.dataplane
    n = Tenant(admin, 3310).subnet(81)
    with gateway_controller(bed, ovn_sb_address=bed.sb_tcp) as ctl:
        n.wait("Ready", "Ready")
        active = n.settled(bed)
        wait_for(lambda: serving(n) == active, timeout=WAIT, what="status.servingChassis on the active chassis")
        assert f'chassis "{active}"' in reason(n.network(), "GatewayReady")[2]
        wait_for(lambda: bound_gauge(ctl, n) == 1, timeout=WAIT, what="the bound gauge at 1")
        first = next(c for c in dp.chassis if c.system_id == active)
        other = next(c for c in dp.chassis if c.system_id != active)
        stopped = []
        try:
            dp.stop_ovn_controller(first)
            stopped.append(first)
            wait_for(lambda: serving(n) == other.system_id, timeout=WAIT, what="the survivor serving it")
            assert reason(n.network(), "Ready")[:2] == ("True", "Ready")
            wait_for(lambda: [e for e in admin.core.list_namespaced_event(n.ns).items
                              if e.involved_object.name == n.name and e.reason == "GatewayMoved"],
                     what="the GatewayMoved Event")
            dp.stop_ovn_controller(other)
            stopped.append(other)
            t0 = time.monotonic()
            obj = n.wait("Ready", "NoServingChassis")
            took = time.monotonic() - t0
            gw = reason(obj, "GatewayReady")
            assert gw[:2] == ("False", "NoServingChassis"), gw
            assert f"cr-{n.lrp} is bound to no chassis" in gw[2], gw
            assert "servingChassis" not in (obj.get("status") or {})
            wait_for(lambda: bound_gauge(ctl, n) == 0, timeout=WAIT, what="the bound gauge at 0")
            (group,) = ha_chassis_groups(bed.nbctl, n.group)
            assert sorted(group["chassis"]) == sorted(c.system_id for c in dp.chassis)  # never emptied
            print(f"\n[wire] nothing serves: Ready=False/NoServingChassis {took:.1f}s after the last ovn-controller stopped")
            print(f"[wire] GatewayReady: {gw}; cozy_proxmox_network_gateway_bound {bound_gauge(ctl, n)}")
            # doctor names it: the serving line and the GatewayReady warning.
            doc = subprocess.run([sys.executable, "-m", "controller.main", "doctor", f"--kubeconfig={bed.admin_kubeconfig}",
                                  "-n", n.ns, n.name], capture_output=True, text=True, timeout=60,
                                 cwd=str(Path(__file__).resolve().parent.parent))
            print(doc.stdout)
            assert doc.returncode == 0, doc.stderr
            assert "  gateway served by no chassis for " in doc.stdout
            assert "  GatewayReady=False NoServingChassis: nothing serves router port" in doc.stdout
        finally:
            for ch in stopped:
                dp.start_ovn_controller(ch)
        t1 = time.monotonic()
        n.wait("Ready", "Ready")
        wait_for(lambda: serving(n) is not None, timeout=WAIT, what="a serving chassis again")
        print(f"[wire] served again: Ready {time.monotonic() - t1:.1f}s after the ovn-controllers started")
        # The chassis that claimed cr- first on the way back serves it, and is on top.
        (group,) = ha_chassis_groups(bed.nbctl, n.group)
        assert sorted(group["chassis"]) == sorted(c.system_id for c in dp.chassis)
        wait_for(lambda: max(ha_chassis_groups(bed.nbctl, n.group)[0]["chassis"].items(),
                             key=lambda c: c[1][0])[0] == serving(n), timeout=WAIT, what="the serving chassis on top")


def test_an_sb_outage_and_restart_change_no_group_and_no_vlan_and_say_unknown(bed, admin):
    """product-decisions.md §10: while the SB is unreachable GatewayReady is Unknown
    (SBUnavailable), never False, Ready stays, and nothing is written to the NB or a Vlan."""
    n = Tenant(admin, 3320).subnet(82)
    with gateway_controller(bed, ovn_sb_address=bed.sb_tcp) as ctl:
        n.wait("Ready", "Ready")
        wait_for(lambda: serving(n) is not None, timeout=WAIT, what="a serving chassis")
        groups = ha_chassis_groups(bed.nbctl, n.group)
        writes = ctl.mgr.gateway.applier.transactions
        vlan = n.network()["status"]["vlan"]
        stop_ovsdb(bed, "sb")
        try:
            def unknown() -> dict | None:
                o = n.network()
                return o if (reason(o, "GatewayReady") or ("", "", ""))[1] == "SBUnavailable" else None

            obj = wait_for(unknown, timeout=WAIT, what="GatewayReady Unknown/SBUnavailable during the SB outage")
            gw = reason(obj, "GatewayReady")
            assert gw[0] == "Unknown" and "OVN SB has not answered since" in gw[2], gw
            assert reason(obj, "Ready")[:2] == ("True", "Ready")
            assert (obj.get("status") or {}).get("servingChassis")  # the last one known, kept
            # (set by the pass's metric action after its status write: a status seen can come first)
            wait_for(lambda: bound_gauge(ctl, n) is None, timeout=WAIT, what="the bound gauge absent")
            assert ha_chassis_groups(bed.nbctl, n.group) == groups
        finally:
            start_ovsdb(bed, "sb")  # on this thread: the bed's processes die with their thread
        n.wait("GatewayReady", "ChassisAssigned")
        wait_for(lambda: serving(n) is not None, timeout=WAIT, what="a serving chassis after the SB restart")
        assert ha_chassis_groups(bed.nbctl, n.group) == groups
        assert ctl.mgr.gateway.applier.transactions == writes
        assert n.network()["status"]["vlan"] == vlan
