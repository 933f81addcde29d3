"""The bed's faults: kube-apiserver killed and started again, the NB ovsdb-server stopped and
started again, and :class:`PeerSupervisor`, which kills a real peer for the ``kubeovn`` /
``ipam`` faults and starts again one that exits by itself (judging why, :func:`exit_reason`).
The etcd compaction is the bed's own ``LocalCluster.compact``."""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from hack.bed import PEERS, ClusterError, LocalCluster
from hack.chaoskit.common import log


def restart_apiserver(cluster: LocalCluster, down: float) -> None:
    """Kill kube-apiserver (SIGKILL: a crash, no graceful drain), keep it down for ``down``
    seconds, start it again with the same flags and port, wait for /readyz.

    Uses LocalCluster's process handles: ``_procs`` and the ``_start_apiserver`` /
    ``_wait_apiserver`` steps of its own start (hack/bed/ is not changed for this).
    """
    proc = cluster._procs["kube-apiserver"]
    proc.kill()
    proc.wait(10)
    time.sleep(down)  # the outage itself: a duration, not a condition to await
    cluster._start_apiserver()
    cluster._wait_apiserver()


def stop_ovsdb(cluster: LocalCluster, db: str) -> None:
    """Stop the bed's ``db`` ("nb" or "sb") ovsdb-server: SIGTERM, SIGKILL after 10 s."""
    proc = cluster._procs[f"ovsdb-{db}"]
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def start_ovsdb(cluster: LocalCluster, db: str) -> None:
    """Start the bed's ``db`` ovsdb-server again on the same socket, port and database file;
    returns once it answers. Call it from the thread that runs the bed: the bed's processes
    die with the thread that started them."""
    w = cluster.workdir
    port = cluster._ports[db]
    cluster._spawn(
        f"ovsdb-{db}",
        ["ovsdb-server", str(w / f"{db}.db"), f"--remote=punix:{w / f'{db}.sock'}", f"--remote=ptcp:{port}:127.0.0.1",
         f"--unixctl={w / f'{db}.ctl'}", f"--log-file={w / f'ovsdb-{db}.log'}", "-vconsole:off", "-vfile:info"],
        w / f"ovsdb-{db}.console.log",
        env=cluster._ovn_env() if db == "sb" else None,
    )
    (cluster._wait_sb if db == "sb" else cluster._wait_nb)()


def restart_nb(cluster: LocalCluster, down: float) -> None:
    """Stop the NB ovsdb-server, keep it down for ``down`` seconds, start it again on the
    same socket and port with the same database file."""
    stop_ovsdb(cluster, "nb")
    time.sleep(down)
    start_ovsdb(cluster, "nb")


class PeerSupervisor:
    """The real peers (kube-ovn-controller, the IPAM provider), kept running as their
    Deployments would keep them: a peer that exits without the harness killing it is started
    again (``LocalCluster.start_peer``, which returns once it is at work) and the exit is
    recorded. An exit within ``grace`` seconds of an API server or NB outage or an etcd
    compaction is *expected* (caused by it: kube-ovn-controller exits when it cannot renew its
    lease, as our replicas do, and v1.13.0 panics on the tombstone a relist hands its Subnet
    delete handler); any other is unexpected and fails the run.

    :meth:`fault` is the ``kubeovn`` / ``ipam`` fault: SIGKILL, ``down`` seconds, start again.
    A peer this supervisor (re)starts lives as long as the thread that started it (the bed's
    processes carry PR_SET_PDEATHSIG): the main thread for a fault, the supervisor's thread
    for a restart after an exit; both outlive the run's load.
    """

    def __init__(self, cluster: LocalCluster, outages: list[tuple[float, float]], grace: float = 60.0,
                 start_deadline: float = 240.0) -> None:
        self.cluster = cluster
        self.outages = outages  # (start, end) of API server and NB outages, appended by the run
        self.grace = grace
        self.start_deadline = start_deadline
        self.exits: list[dict[str, Any]] = []
        self.kills: dict[str, int] = {name: 0 for name in PEERS}
        self.restart_seconds: list[float] = []  # start_peer until at work, after each fault
        self._started = {name: time.monotonic() for name in PEERS}
        self._offsets = {name: self._log_size(name) for name in PEERS}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="peer-supervisor", daemon=True)

    def start(self) -> "PeerSupervisor":
        for name in PEERS:
            self.cluster.peer_pid(name)  # both run (the bed waited for them), or ClusterError
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.start_deadline + 30)

    def _log(self, name: str) -> Path:
        return self.cluster.workdir / f"{name}.log"

    def _log_size(self, name: str) -> int:
        try:
            return self._log(name).stat().st_size
        except OSError:
            return 0

    def _log_since_start(self, name: str) -> str:
        try:
            with open(self._log(name), "rb") as f:
                f.seek(self._offsets[name])
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _running(self, name: str) -> bool:
        try:
            self.cluster.peer_pid(name)
            return True
        except ClusterError:
            return False

    def _restart(self, name: str) -> float:
        """Start ``name`` until it is at work (retrying while the API server is away); returns
        how long that took."""
        t0 = time.monotonic()
        end = t0 + self.start_deadline
        while True:
            self._offsets[name] = self._log_size(name)
            try:
                self.cluster.start_peer(name)
                self._started[name] = time.monotonic()
                return time.monotonic() - t0
            except ClusterError as exc:
                if time.monotonic() > end:
                    raise RuntimeError(f"{name} did not come back within {self.start_deadline:.0f}s: {exc}") from exc
                log(f"{name} did not start ({str(exc).splitlines()[0]}); again")
                with contextlib.suppress(ClusterError):
                    self.cluster.kill_peer(name)  # one that hangs in its start
                self._stop.wait(1.0)

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                for name in PEERS:
                    if self._running(name):
                        continue
                    now = time.monotonic()
                    proc = self.cluster._procs.get(name)
                    rc = proc.poll() if proc is not None else None
                    near = any(s - 5 <= now <= e + self.grace for s, e in self.outages)
                    since = self._log_since_start(name)
                    why = exit_reason(since)
                    tail = "\n".join(since.splitlines()[-12:])
                    exit_ = {"peer": name, "rc": rc, "expected": near, "uptime": round(now - self._started[name], 1),
                             "why": why[-300:], "tail": "" if near else tail}
                    self.exits.append(exit_)
                    log(f"peer {name} exited (rc {rc}, {'after an outage' if near else 'UNEXPECTED'}): {why[-300:]}")
                    try:
                        exit_["restart_seconds"] = round(self._restart(name), 1)
                    except RuntimeError as exc:
                        exit_["expected"] = False
                        exit_["tail"] = f"{tail}\n{exc}"
                        log(str(exc))

    def fault(self, name: str, down: float) -> str:
        """SIGKILL ``name`` (a crash: no Lease release), keep it down ``down`` seconds, start
        it again; returns once it is at work, with a detail for the fault record."""
        with self._lock:
            self.cluster.kill_peer(name)
            self.kills[name] += 1
            time.sleep(down)  # the outage itself: a duration, not a condition to await
            took = self._restart(name)
            self.restart_seconds.append(took)
            return f"down {down:.1f}s, at work again {took:.1f}s after its start"


def exit_reason(text: str) -> str:
    """The line of a peer's log (since its start) that says why it exited: the first Go
    panic, else the last fatal line (klog's ``F<mmdd> …``, or ``leaderelection lost``), else
    the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    panic = next((ln for ln in lines if ln.startswith("panic:") or ln.startswith("fatal error:")), None)
    if panic:
        return panic
    for ln in reversed(lines):
        if re.match(r"F\d{4} ", ln) or "leaderelection lost" in ln:
            return ln
    return lines[-1] if lines else ""
