"""The controller as supervised subprocesses (the mode without ``--pods``): :class:`Replica`, one
controller process as the controller's service-account user, and :class:`Supervisor`, which
keeps two running as a Deployment would and records every exit."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

from hack.bed import LocalCluster
from hack.chaoskit.common import log
from hack.chaoskit.config import ChaosConfig
from hack.tools.controller_process import ControllerProcess


def gateway_flags(cluster: LocalCluster, cfg: ChaosConfig) -> list[str]:
    if not cfg.manage_gateway:
        return ["--manage-gateway-chassis=false"]
    return ["--manage-gateway-chassis=true", f"--ovn-nb-address={cluster.nb_tcp}"]


class Replica(ControllerProcess):
    """One controller process, as the controller's service-account user."""

    def __init__(self, cluster: LocalCluster, logdir: Path, n: int, cfg: ChaosConfig) -> None:
        self.n = n
        self.killed = False
        self.started = time.monotonic()
        super().__init__([f"--kubeconfig={cluster.controller_kubeconfig}", "--leader-elect=true",
                          *gateway_flags(cluster, cfg), f"--subnet-prune-timeout={cfg.subnet_prune_timeout}",
                          f"--resync-period={cfg.resync_period}", f"--vlan-reuse-delay={cfg.vlan_reuse_delay}",
                          "--log-format=console"], logdir / f"replica-{n}.log")

    def tail(self, n: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


class Supervisor:
    """Keeps ``count`` replicas running, like a Deployment; records every exit.

    An exit is *expected* when we SIGKILLed the process, or when it exited with 1 after
    logging "leadership lost" within ``outage_grace`` seconds of an API server outage (the
    leader cannot renew while the API server is down: product-decisions.md §4.5).
    """

    def __init__(self, cluster: LocalCluster, logdir: Path, cfg: ChaosConfig, count: int = 2,
                 restart_delay: float = 1.0, outage_grace: float = 60.0) -> None:
        self.cluster = cluster
        self.logdir = logdir
        self.cfg = cfg
        self.count = count
        self.restart_delay = restart_delay
        self.outage_grace = outage_grace
        self.replicas: list[Replica] = []
        self.exits: list[dict[str, Any]] = []
        self.outages: list[tuple[float, float]] = []  # (start, end) of API outages
        self._n = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)

    def start(self) -> "Supervisor":
        with self._lock:
            for _ in range(self.count):
                self._spawn()
        self._thread.start()
        return self

    def _spawn(self) -> Replica:
        self._n += 1
        r = Replica(self.cluster, self.logdir, self._n, self.cfg)
        self.replicas.append(r)
        return r

    def _expected(self, r: Replica, rc: int, at: float) -> bool:
        if r.killed:
            return True
        if rc == 1:
            text = r.log.read_text(errors="replace") if r.log.exists() else ""
            near_outage = any(s - 5 <= at <= e + self.outage_grace for s, e in self.outages)
            return near_outage and ("leadership lost" in text or "unable to start manager" in text)
        return False

    def _loop(self) -> None:
        pending: list[float] = []
        while not self._stop.is_set():
            with self._lock:
                for r in list(self.replicas):
                    rc = r.proc.poll()
                    if rc is None:
                        continue
                    now = time.monotonic()
                    self.replicas.remove(r)
                    exp = self._expected(r, rc, now)
                    self.exits.append({"replica": r.n, "rc": rc, "killed": r.killed, "expected": exp,
                                       "uptime": round(now - r.started, 1), "tail": "" if exp else r.tail()})
                    if not exp:
                        log(f"replica {r.n} exited unexpectedly rc={rc}:\n{r.tail()}")
                    pending.append(now + self.restart_delay)
                due = [p for p in pending if p <= time.monotonic()]
                for p in due:
                    pending.remove(p)
                    self._spawn()
            self._stop.wait(0.1)
        # Stopped from this thread: the replicas it spawned carry PR_SET_PDEATHSIG, which
        # fires when the *thread* that forked them ends, so they are stopped before it does.
        self._stop_replicas()

    def leader(self, timeout: float = 90.0) -> Replica:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._lock:
                current = list(self.replicas)
            leading = [r for r in current if r.leads()]
            if len(leading) == 1:
                return leading[0]
            time.sleep(0.1)
        raise RuntimeError(f"no single ready leader within {timeout}s")

    def kill_leader(self, timeout: float = 90.0) -> Replica:
        r = self.leader(timeout)
        r.killed = True
        r.proc.send_signal(signal.SIGKILL)
        return r

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)

    def _stop_replicas(self) -> None:
        with self._lock:
            for r in self.replicas:
                r.stop()
                rc = r.proc.returncode
                if rc not in (0,):
                    self.exits.append({"replica": r.n, "rc": rc, "killed": False, "expected": False,
                                       "uptime": round(time.monotonic() - r.started, 1),
                                       "tail": r.tail() + "\n(clean stop did not exit 0)"})
