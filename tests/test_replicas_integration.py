"""Two controller processes with leader election (the defaults: 15 s lease, 10 s renew
deadline, 2 s retry; product-decisions.md §4.5), as the controller user: one leads, the other
waits; both are Ready (readiness = serving, §9); SIGKILL the leader in the middle of a burst and the standby takes
over; nothing is allocated twice. The takeover time is printed (a figure, not an assertion).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from hack.probe import Endpoints
from hack.objects import Admin, reason, unique
from hack.wait import wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent


class Replica:
    def __init__(self, cluster, log: Path) -> None:
        self.log = log
        self.endpoints = Endpoints(log)  # ports picked by the process's own bind: no race for them
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "controller.main", f"--kubeconfig={cluster.controller_kubeconfig}",
             "--manage-gateway-chassis=false", "--leader-elect",
             "--health-probe-bind-address=127.0.0.1:0", "--metrics-bind-address=127.0.0.1:0"],
            cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=open(log, "wb"), stderr=subprocess.STDOUT,
        )

    def probe(self, path: str) -> int:
        return self.endpoints.status(path)

    def metric(self, name: str) -> str:
        with urllib.request.urlopen(self.endpoints.metrics_url(), timeout=2) as r:
            return "\n".join(line for line in r.read().decode().splitlines() if line.startswith(name))

    def ready(self) -> bool:
        return self.probe("/readyz") == 200

    def leading(self) -> bool:
        try:
            return self.metric("cozy_proxmox_leader") == "cozy_proxmox_leader 1.0"
        except (OSError, LookupError):
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def test_kill_the_leader_under_load(admin_client, cluster, unique_namespace, tmp_path):
    admin = Admin(admin_client)
    ns = unique_namespace
    provider = unique("pn")[:12]
    zone = unique("zone")
    admin.create_provider_network(provider)
    admin.create_zone(zone, provider, ["2000-2099"])
    a, b = Replica(cluster, tmp_path / "a.log"), Replica(cluster, tmp_path / "b.log")
    try:
        wait_for(lambda: a.leading() or b.leading(), timeout=60, what="a leader")
        leader, standby = (a, b) if a.leading() else (b, a)
        wait_for(lambda: standby.probe("/healthz") == 200, timeout=60, what="the standby up")
        # Readiness = serving (product-decisions §9): the warm standby is Ready, not leading.
        wait_for(standby.ready, timeout=60, what="the standby Ready")
        assert leader.ready() and standby.metric("cozy_proxmox_leader") == "cozy_proxmox_leader 0.0"

        for i in range(20):
            admin.create_network(ns, f"n{i:02d}", zone, unique(f"s{i:02d}"))
        wait_for(lambda: sum(1 for i in range(20)
                             if (reason(admin.network(ns, f"n{i:02d}"), "VLANAllocated") or ("", ""))[1] == "Allocated") >= 5,
                 what="the burst under way")
        leader.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        for i in range(20, 30):
            admin.create_network(ns, f"n{i:02d}", zone, unique(f"s{i:02d}"))
        wait_for(standby.leading, timeout=60, what="the standby takes over")
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
        c = Replica(cluster, tmp_path / "c.log")
        try:
            t0 = time.monotonic()
            wait_for(c.leading, timeout=30, what="takeover after a released lease")
            print(f"takeover after a released lease: {time.monotonic() - t0:.1f}s")
        finally:
            c.stop()
    finally:
        a.stop()
        b.stop()
