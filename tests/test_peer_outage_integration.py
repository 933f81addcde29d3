"""The controller process started while a peer is down (issue 15, part 1): it never
crash-loops and stops within 2 s of SIGTERM.

The controller runs as its own process (``python -m controller.main``, as the container
runs it) with leader election on, as the controller user. The OVN NB is a real
``ovsdb-server`` stopped and started again; "API server down" is a kubeconfig naming a
port nothing listens on.

Expected values: issue 15 ("stays leader for >= 60 s, networks keep Ready through the grace,
recovers when the NB returns; SIGTERM with the NB down exits in < 2 s"), reference-behaviour
§9.5 (the NB grace, 10 min by default), product-decisions.md §4.5 (leader election, lease
``proxmox-network-controller.proxmox.cozystack.io`` in ``proxmox-network-system``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from prometheus_client.parser import text_string_to_metric_families

from controller.plan.gateway import FAILING_SINCE
from controller.runtime.kube import ApiError, KubeWriter
from controller.runtime.leader import DEFAULT_LEASE_NAME, lease_path
from controller.metrics import NETWORK_WORKQUEUE_NAME
from hack.bed import LocalCluster
from hack.tools.objects import Admin, reason
from hack.tools.wait import wait_for
from tests.support.ovsdb import NBServer, free_port
from tests.support.schedstat import runqueue_wait, wait_exited
from tests.test_gateway_integration import bound_network, private_nb_bed

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
LEASE_NS = "kube-system"  # controller.runtime.leader.DEFAULT_LEASE_NAMESPACE
LEADING_FOR = 60.0  # issue 15: "stays leader for >= 60 s"
EXIT_WITHIN = 2.0  # issue 15: "SIGTERM with the NB down exits in < 2 s"


class Process:
    """``python -m controller.main`` with JSON logs to a file."""

    def __init__(self, kubeconfig: Path, log: Path, *flags: str) -> None:
        self.log = log
        # -X faulthandler: a process that does not exit is aborted and its threads' stacks
        # land in the log, which the failure shows.
        argv = [sys.executable, "-X", "faulthandler", "-m", "controller.main", f"--kubeconfig={kubeconfig}",
                "--metrics-bind-address=0", "--health-probe-bind-address=0", "--log-format=json", *flags]
        self._out = log.open("w")
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=self._out, stderr=subprocess.STDOUT)

    def lines(self) -> list[dict]:
        out = []
        for ln in self.log.read_text().splitlines():
            if ln.startswith("{"):
                try:
                    out.append(json.loads(ln))
                except ValueError:
                    pass
        return out

    def events(self, name: str) -> list[dict]:
        return [ln for ln in self.lines() if ln.get("event") == name]

    def terminate(self) -> tuple[int, float, float]:
        """SIGTERM; returns (exit code, seconds from the signal to the exit, seconds of that
        span spent runnable but waiting for a CPU by the controller's main thread and by this
        thread, which measures: ``tests.support.schedstat``)."""
        pid = self.proc.pid
        pidfd = os.pidfd_open(pid)  # signalled and awaited through it: nothing reaps the pid behind us
        try:
            # Clock first, then the waits (and the reverse at the end): a preemption between the
            # two reads lands in the span, never in the waits left out of it.
            t0 = time.monotonic()
            ours, theirs = runqueue_wait(), runqueue_wait(pid)
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
            if not wait_exited(pidfd, pid, 30):
                signal.pidfd_send_signal(pidfd, signal.SIGABRT)
                self.proc.wait(10)
                raise AssertionError("no exit 30 s after SIGTERM; the log ends:\n" + self.log.read_text()[-20000:])
            ours = runqueue_wait() - ours
            took = time.monotonic() - t0
            theirs = runqueue_wait(pid) - theirs  # exited, not reaped yet: its figures are still there
        finally:
            os.close(pidfd)
        rc = self.proc.wait()
        queued = ours + theirs
        # the figures the team reads (-s)
        print(f"\n[exit] rc {rc}, {took:.2f} s after SIGTERM, {queued:.2f} s of it waiting for a CPU "
              f"(the controller {theirs:.2f} s, the test {ours:.2f} s)")
        return rc, took, queued

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._out.close()


def exits_at_once(proc: Process) -> None:
    """SIGTERM: exit code 0 within EXIT_WITHIN of the process's own time (issue 15).

    The time its main thread spent runnable but waiting for a CPU (and the test's own thread,
    waking up to see the exit) is the machine's, not the product's: on a machine kept busy by
    others (issue 28's hog) it is measured from the run itself and left out. A thread asleep
    (on a join, a lock, the GIL, an atexit handler) gathers none, so an exit held up by the
    product still counts in full. On an idle machine the wait is about zero and the bound is
    issue 15's 2 s of wall clock."""
    rc, took, queued = proc.terminate()
    assert rc == 0, f"exit code {rc}; the log ends:\n{proc.log.read_text()[-8000:]}"
    assert took - queued < EXIT_WITHIN, f"exit took {took:.2f} s, {queued:.2f} s of it waiting for a CPU"


@pytest.fixture
def lease(cluster):
    """The controller's Lease, removed before and after (no holder left for other tests)."""
    writer = KubeWriter(cluster.api_client("admin"))

    def read() -> dict | None:
        try:
            return writer.request("GET", lease_path(LEASE_NS, DEFAULT_LEASE_NAME))
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def delete() -> None:
        try:
            writer.request("DELETE", lease_path(LEASE_NS, DEFAULT_LEASE_NAME))
        except ApiError as err:
            if err.status != 404:
                raise

    delete()
    yield read
    delete()


def test_leader_started_with_the_nb_down_keeps_leading_and_recovers(admin_client, cluster, unique_namespace,
                                                                      tmp_path, lease):
    admin = Admin(admin_client)
    server, env, trunk, sub, r = private_nb_bed(admin, admin_client, unique_namespace, tmp_path)
    ns, net = unique_namespace, "outage"
    flags = ("--leader-elect=true", "--manage-gateway-chassis=true", f"--ovn-nb-address={server.remote}")
    first = Process(cluster.controller_kubeconfig, tmp_path / "first.log", *flags)
    proc = None
    try:
        # A Ready network with its gateway up, made by a first controller with the NB up.
        r.create()
        wait_for(lambda: (lease() or {}).get("spec", {}).get("holderIdentity"), timeout=60, what="first leader")
        bound_network(env, net, sub, "p")
        env.wait(net, "Ready", "Ready")
        assert first.terminate()[0] == 0
        # The NB goes down; a new controller process starts while it is down.
        server.stop()
        proc = Process(cluster.controller_kubeconfig, tmp_path / "second.log", *flags)
        holder = wait_for(lambda: (lease() or {}).get("spec", {}).get("holderIdentity"), timeout=60,
                          what="the new process leads")
        started = time.monotonic()
        # Its passes find the NB down (the failure recorded) and keep the network Ready: the grace.
        obj = wait_for(lambda: (o := admin.network(ns, net))["status"].get(FAILING_SINCE) and o,
                       timeout=60, what="the NB failure recorded")
        assert reason(obj, "Ready")[:2] == ("True", "Ready")
        assert reason(obj, "GatewayReady")[:2] == ("True", "ChassisAssigned")
        # Leading for 60 s with the NB down: the process lives, the lease stays its own and
        # is renewed (a process that lost it would exit with code 1).
        renewed = None
        while time.monotonic() - started < LEADING_FOR:
            assert proc.proc.poll() is None, f"the controller exited: {proc.events('leadership lost')}"
            spec = (lease() or {}).get("spec", {})
            assert spec.get("holderIdentity") == holder
            renewed = spec.get("renewTime")
            time.sleep(1.0)  # sampling a duration the issue fixes; no condition to await
        assert proc.proc.poll() is None
        assert not proc.events("leadership lost")
        obj = admin.network(ns, net)
        assert reason(obj, "Ready")[:2] == ("True", "Ready")
        assert wait_for(lambda: (lease() or {})["spec"]["renewTime"] != renewed, timeout=30, what="renewed again")
        # The NB returns: the failure record goes, the gateway stays assigned.
        server.start()
        obj = wait_for(lambda: (o := admin.network(ns, net)) and FAILING_SINCE not in o["status"] and o,
                       timeout=60, what="recovered")
        assert reason(obj, "Ready")[:2] == ("True", "Ready")
        assert reason(obj, "GatewayReady")[:2] == ("True", "ChassisAssigned")
        # SIGTERM with the NB down again: out in < 2 s, exit code 0, no thread left behind.
        server.stop()
        exits_at_once(proc)
        assert not proc.events("thread did not stop")
    finally:
        first.close()
        if proc is not None:
            proc.close()
        trunk.leave("worker1")
        server.stop()


def test_api_server_down_at_start_retries_with_backoff_and_stops_at_once(cluster, tmp_path, lease):
    cfg = yaml.safe_load(Path(cluster.controller_kubeconfig).read_text())
    dead = free_port()
    for c in cfg["clusters"]:
        c["cluster"]["server"] = f"https://127.0.0.1:{dead}"
    kubeconfig = tmp_path / "dead.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(cfg))
    proc = Process(kubeconfig, tmp_path / "controller.log", "--leader-elect=true", "--manage-gateway-chassis=false")
    try:
        # Backoff from 1 s doubling (jittered in [d/2, d], never below 1 s): never a tight loop.
        wait_for(lambda: len(proc.events("API discovery failed; retrying")) >= 3, timeout=60,
                 what="three discovery retries")
        retries = proc.events("API discovery failed; retrying")[:3]
        delays = [ln["retry_in"] for ln in retries]
        assert delays[0] == 1.0 and 1.0 <= delays[1] <= 2.0 and 2.0 <= delays[2] <= 4.0
        at = [dt.datetime.fromisoformat(ln["timestamp"].replace("Z", "+00:00")) for ln in retries]
        # (retry_in is logged rounded to 0.1 s)
        assert (at[1] - at[0]).total_seconds() >= delays[0] - 0.05
        assert (at[2] - at[1]).total_seconds() >= delays[1] - 0.05
        assert all(str(dead) in ln["error"] or "refused" in ln["error"].lower() for ln in retries)
        assert proc.proc.poll() is None  # still trying, not exited
        exits_at_once(proc)
        assert not proc.events("unable to start manager")
    finally:
        proc.close()


def test_sigterm_while_the_workers_wait_for_the_nb_exits_at_once(cluster, tmp_path, lease):
    """The first seconds of a leader started with the NB down: network workers and the
    gateway collector are waiting for the NB's first sync (up to 10 s); SIGTERM ends them."""
    server = NBServer(tmp_path / "nb")  # created, never started: nothing listens
    proc = Process(cluster.controller_kubeconfig, tmp_path / "controller.log", "--leader-elect=true",
                   "--manage-gateway-chassis=true", f"--ovn-nb-address={server.remote}")
    try:
        wait_for(lambda: proc.events("started leading; starting workers"), timeout=60, what="leading")
        exits_at_once(proc)
        assert not proc.events("thread did not stop")
        assert not proc.events("leadership lost")
    finally:
        proc.close()


def longest_running(port: int, queue: str) -> float:
    """``workqueue_longest_running_processor_seconds`` of ``queue`` from /metrics (0 when absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            if sample.name == "workqueue_longest_running_processor_seconds" and sample.labels.get("name") == queue:
                return sample.value
    return 0.0


def test_sigterm_with_a_pass_stuck_on_the_nb_leaves_the_lease_to_expire(admin_client, cluster, unique_namespace,
                                                                         tmp_path, lease):
    """A worker still inside an NB transaction when the stop budget ends (the NB hung): the
    transaction was sent, and the NB may commit it when it wakes up, after a standby that took
    over at once had already acted (a group written after the new leader released it). So the
    Lease is not released; it expires (product-decisions.md §4.5: only the leader writes)."""
    admin = Admin(admin_client)
    server, env, trunk, sub, r = private_nb_bed(admin, admin_client, unique_namespace, tmp_path)
    ns, net = unique_namespace, "stuck"
    port = free_port()
    proc = Process(cluster.controller_kubeconfig, tmp_path / "controller.log", "--leader-elect=true",
                   "--manage-gateway-chassis=true", f"--ovn-nb-address={server.remote}",
                   f"--metrics-bind-address=127.0.0.1:{port}")
    try:
        r.create()
        holder = wait_for(lambda: (lease() or {}).get("spec", {}).get("holderIdentity"), timeout=60, what="leading")
        bound_network(env, net, sub, "p")
        env.wait(net, "Ready", "Ready")
        server.pause()
        trunk.join("worker2")  # a trunk Node joins: the network's next pass writes its group, to a hung NB
        wait_for(lambda: longest_running(port, NETWORK_WORKQUEUE_NAME) > 0.5, timeout=30,
                 what="a network pass waiting on the NB")
        exits_at_once(proc)
        assert proc.events("thread did not stop")
        assert proc.events("a worker is still running; the lease is left to expire")
        spec = (lease() or {}).get("spec", {})
        assert spec.get("holderIdentity") == holder  # not released: a standby waits out the lease
        assert reason(admin.network(ns, net), "Ready")[:2] == ("True", "Ready")
    finally:
        proc.close()
        server.resume()
        trunk.leave("worker1", "worker2")
        server.stop()


def test_a_leader_started_without_the_ipam_and_capmox_crds_allocates_and_stops_at_once(tmp_path):
    """Issue 15 part 1, the IPAM and capmox CRDs missing: on a bed of its own that has every
    CRD but theirs, discovery says once per kind that it is not served, the leader's workers
    start, a network gets its VLAN and reads its pool as not found (nothing can hold it), and
    SIGTERM ends the process at once."""
    crds = tmp_path / "crds"
    crds.mkdir()
    for f in (ROOT / "tests" / "fixtures" / "crds").glob("*.yaml"):
        if not f.name.startswith(("ipam-", "capmox-")):
            shutil.copy(f, crds / f.name)
    bed = LocalCluster(tmp_path / "bed", with_nb=False, with_peers=False,
                       manifest_dirs=[ROOT / "manifests" / "crds", ROOT / "manifests" / "rbac", crds])
    bed.start()
    api = bed.api_client("admin")
    proc = None
    try:
        admin = Admin(api)
        admin.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="tenant")))
        admin.create_provider_network("pn-nocrds", ready=True, ready_nodes=["node-a"])
        admin.create_zone("zone-nocrds", "pn-nocrds", ["1600-1609"])
        proc = Process(bed.controller_kubeconfig, tmp_path / "controller.log", "--leader-elect=true",
                       "--manage-gateway-chassis=false")
        wait_for(lambda: proc.events("started leading; starting workers"), timeout=60, what="leading")
        admin.create_network("tenant", "net", "zone-nocrds", "sub-nocrds")
        obj = wait_for(lambda: (o := admin.network("tenant", "net")).get("status", {}).get("vlan") and o,
                       timeout=60, what="the VLAN allocated")
        assert obj["status"]["vlan"] == 1600  # the lowest free ID of the zone (spec §6)
        assert reason(obj, "VLANAllocated")[:2] == ("True", "Allocated")
        wait_for(lambda: (reason(admin.network("tenant", "net"), "IPPoolReady") or ("",))[:2]
                 == ("False", "PoolNotFound"), timeout=60, what="the pool reported not found")
        assert reason(admin.network("tenant", "net"), "IPPoolReady")[2] == \
            'InClusterIPPool "pool" does not exist in this namespace'
        missing = {(ln["group"], ln["resource"]) for ln in proc.events("kind not served; treated as having no objects")}
        assert missing == {("ipam.cluster.x-k8s.io", "inclusterippools"), ("ipam.cluster.x-k8s.io", "ipaddresses"),
                           ("ipam.cluster.x-k8s.io", "ipaddressclaims"),
                           ("ipam.cluster.x-k8s.io", "globalinclusterippools"),
                           ("infrastructure.cluster.x-k8s.io", "proxmoxmachines")}
        assert proc.proc.poll() is None
        exits_at_once(proc)
        assert not proc.events("leadership lost") and not proc.events("unable to start manager")
    finally:
        if proc is not None:
            proc.close()
        api.close()
        bed.stop()
