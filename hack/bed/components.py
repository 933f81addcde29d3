"""The bed's components as processes: spawn one with its log and pid file, notice that it exited
during its start, stop it (a paused one too), read the pid files, and guard against pid reuse.
The :class:`Components` mixin of :class:`~hack.bed.cluster.LocalCluster`, which owns
``workdir``, ``detach`` and ``_procs``."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from hack.bed.common import COMPONENTS, ClusterError
from hack.bed.procs import _pid_cmdline, _tail, pid_alive, spawn, terminate_pid


class Components:
    """LocalCluster's components by name: spawn, check, stop, pid files."""

    def _spawn(
        self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        proc = spawn(argv, log, self.workdir / f"{name}.pid", detach=self.detach, env=env, cwd=self.workdir)
        self._procs[name] = proc
        return proc

    def _fail(self, name: str, what: str, log: Path) -> ClusterError:
        proc = self._procs.get(name)
        state = ""
        if proc is not None and proc.poll() is not None:
            state = f" (exited with {proc.returncode})"
        return ClusterError(f"{name} {what}{state}; last lines of {log}:\n{_tail(log)}")

    def _check_alive(self, name: str, log: Path) -> None:
        proc = self._procs.get(name)
        if proc is not None and proc.poll() is not None:
            raise self._fail(name, "exited during start", log)

    def _stop_component(self, name: str, pid: int, timeout: float) -> None:
        """SIGTERM one component (SIGKILL after ``timeout``), a paused one too; drop its pid file."""
        proc = self._procs.pop(name, None)
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                os.kill(proc.pid, signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        elif pid_alive(pid) and self._looks_like(name, pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            terminate_pid(pid, timeout)
        (self.workdir / f"{name}.pid").unlink(missing_ok=True)

    def _looks_like(self, name: str, pid: int) -> bool:
        """Guard against pid reuse: the process must be the binary we started, in our dir."""
        cmd = _pid_cmdline(pid)
        binary = {
            "etcd": "etcd",
            "kube-apiserver": "kube-apiserver",
            "ovsdb-nb": "ovsdb-server",
            "ovsdb-sb": "ovsdb-server",
            "ovn-northd": "ovn-northd",
            "kube-ovn-controller": "kube-ovn-controller",
            "ipam-provider": "ipam-provider-in-cluster",
            "containerd": "containerd",
            "api-forward": "socat",
            "nb-forward": "socat",
            "kubelet": "kubelet",
            "kube-controller-manager": "kube-controller-manager",
            "kube-scheduler": "kube-scheduler",
        }[name]
        return binary in cmd and str(self.workdir) in cmd

    def _read_pids(self) -> dict[str, int]:
        out = {}
        for name in COMPONENTS:
            p = self.workdir / f"{name}.pid"
            try:
                out[name] = int(p.read_text().strip())
            except (OSError, ValueError):
                pass
        return out
