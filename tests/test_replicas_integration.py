"""Two controller processes with leader election (the defaults: 15 s lease, 10 s renew
deadline, 2 s retry; product-decisions.md §4.5), as the controller user: one leads, the other
waits; both are Ready (readiness = serving, §9); SIGKILL the leader in the middle of a burst and the standby takes
over; nothing is allocated twice. The takeover time is printed (a figure, not an assertion).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from hack.tools.controller_process import ControllerProcess
from hack.tools.objects import Admin, reason, unique
from hack.tools.wait import wait_for

pytestmark = pytest.mark.integration

def replica(cluster, log: Path) -> ControllerProcess:
    return ControllerProcess([f"--kubeconfig={cluster.controller_kubeconfig}", "--manage-gateway-chassis=false",
                              "--leader-elect"], log)


def test_kill_the_leader_under_load(admin_client, cluster, unique_namespace, tmp_path):
    admin = Admin(admin_client)
    ns = unique_namespace
    provider = unique("pn")[:12]
    zone = unique("zone")
    admin.create_provider_network(provider)
    admin.create_zone(zone, provider, ["2000-2099"])
    a, b = replica(cluster, tmp_path / "a.log"), replica(cluster, tmp_path / "b.log")
    try:
        wait_for(lambda: a.leads() or b.leads(), timeout=60, what="a leader")
        leader, standby = (a, b) if a.leads() else (b, a)
        wait_for(lambda: standby.status("/healthz") == 200, timeout=60, what="the standby up")
        # Readiness = serving (product-decisions §9): the warm standby is Ready, not leading.
        wait_for(standby.ready, timeout=60, what="the standby Ready")
        assert leader.ready() and standby.endpoints.samples("cozy_proxmox_leader") == {frozenset(): 0}

        for i in range(20):
            admin.create_network(ns, f"n{i:02d}", zone, unique(f"s{i:02d}"))
        wait_for(lambda: sum(1 for i in range(20)
                             if (reason(admin.network(ns, f"n{i:02d}"), "VLANAllocated") or ("", ""))[1] == "Allocated") >= 5,
                 what="the burst under way")
        leader.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        for i in range(20, 30):
            admin.create_network(ns, f"n{i:02d}", zone, unique(f"s{i:02d}"))
        wait_for(standby.leads, timeout=60, what="the standby takes over")
        takeover = time.monotonic() - killed

        def all_allocated():
            items = admin.co.list_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks")["items"]
            done = [i for i in items if (reason(i, "VLANAllocated") or ("", ""))[1] == "Allocated"]
            return items if len(done) == 30 else None

        items = wait_for(all_allocated, timeout=60, what="30 allocations")
        ids = sorted(i["status"]["vlan"] for i in items)
        assert ids == list(range(2000, 2030))
        on_provider = [v["spec"]["id"] for v in admin.vlans() if v["spec"]["provider"] == provider]
        assert sorted(on_provider) == ids  # nothing allocated twice, no stray Vlan
        print(f"\ntakeover after SIGKILL of the leader: {takeover:.1f}s (lease 15s)")

        # A clean stop releases the lease: the restarted replica leads again quickly.
        standby.stop()
        assert standby.proc.returncode == 0
        c = replica(cluster, tmp_path / "c.log")
        try:
            t0 = time.monotonic()
            wait_for(c.leads, timeout=30, what="takeover after a released lease")
            print(f"takeover after a released lease: {time.monotonic() - t0:.1f}s")
        finally:
            c.stop()
    finally:
        a.stop()
        b.stop()
