"""One controller process (``python -m controller.main`` from this checkout) for tests and
the hack/ harnesses: started with its probe and metrics servers on ports the kernel picks
(read back from its log by :class:`hack.tools.probe.Endpoints`), stopped as a Deployment stops a
pod (SIGTERM, then SIGKILL after a grace period)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

from hack.bed import die_with_parent
from hack.tools.probe import Endpoints

REPO = Path(__file__).resolve().parents[2]

# Last on the command line, so they win over a chart's own bind addresses.
OWN_PORTS = ("--health-probe-bind-address=127.0.0.1:0", "--metrics-bind-address=127.0.0.1:0")


class ControllerProcess:
    """``python -m controller.main *args`` writing stdout and stderr to ``log``.

    ``env`` replaces the environment (default: this process's); ``PYTHONPATH`` is set to the
    checkout either way. ``append`` keeps what ``log`` already holds (a restarted replica).
    The child dies with the process that started it (PR_SET_PDEATHSIG), so a crashed test
    leaves no controller behind writing to the next test's cluster.
    """

    def __init__(self, args: Sequence[str], log: Path, *, env: Mapping[str, str] | None = None,
                 append: bool = False) -> None:
        self.log = log
        self.endpoints = Endpoints(log)
        environ = dict(os.environ if env is None else env, PYTHONPATH=str(REPO))
        with open(log, "ab" if append else "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "controller.main", *args, *OWN_PORTS], cwd=REPO, env=environ,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def status(self, path: str) -> int:
        """HTTP status of ``path`` on the probe server; 0 before it serves."""
        return self.endpoints.status(path)

    def ready(self) -> bool:
        """Alive and ``/readyz`` answers 200 (serving: every warm replica, product-decisions §9)."""
        return self.alive() and self.status("/readyz") == 200

    def leads(self) -> bool:
        """Alive and holding the leader Lease (``cozy_proxmox_leader`` 1)."""
        return self.alive() and self.endpoints.leads()

    def stop(self, grace: float = 20.0) -> int:
        """SIGTERM, SIGKILL after ``grace`` seconds; the exit status (negative: the signal)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                return self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait(5)

    def __enter__(self) -> "ControllerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
