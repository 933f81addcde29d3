"""The controller under a benchmark: a child process (``python -m controller.main``, or under
yappi, hack/benchkit/profiled_main.py) with a JSON log tailed line by line and its metrics
read over HTTP, and the /proc figures of a process (CPU seconds, resident MiB).

The checkout the controller runs from is :data:`CONTROLLER_TREE` (``--controller-tree`` of
hack/bench.py sets it); the bed, the CRDs and the harness are always this tree's.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Sequence

from hack.bed import LocalCluster, free_ports
from hack.benchkit.writes import mark, record_writes

REPO = Path(__file__).resolve().parents[2]
# The checkout the controller runs from (``--controller-tree``); the bed and CRDs are this tree's.
CONTROLLER_TREE = REPO
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """A memory field of ``/proc/<pid>/status`` in MiB: ``VmRSS`` (resident now) or
    ``VmHWM`` (the peak resident set); NaN when absent."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Controller:
    """The controller as a child process with a JSON log we tail."""

    def __init__(self, cluster: LocalCluster, log_path: Path, resync: str = "10m", profile: Path | None = None,
                 nb: str | None = None, tree: Path | None = None, args: Sequence[str] = ()):
        tree = Path(tree or CONTROLLER_TREE)
        self.tree = tree
        self.log_path = log_path
        self.metrics_port = free_ports(1)[0]
        gw = ["--manage-gateway-chassis=true", f"--ovn-nb-address={nb}"] if nb else ["--manage-gateway-chassis=false"]
        flags = [
            f"--kubeconfig={cluster.controller_kubeconfig}",
            *gw,
            "--leader-elect=false",
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            "--health-probe-bind-address=0",
            "--log-format=json",
            f"--resync-period={resync}",
            *args,
        ]
        # The controller's packages come from ``tree``; the profiling wrapper is this tree's.
        path = [str(tree)]
        if profile is not None:
            cmd = [sys.executable, "-m", "hack.benchkit.profiled_main", str(profile), *flags]
            path += [str(REPO)] if tree != REPO else []
        else:
            cmd = [sys.executable, "-m", "controller.main", *flags]
        self._log = open(log_path, "ab")
        self._offset = log_path.stat().st_size
        self._buf = b""
        self.lines: list[dict] = []
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            cmd, cwd=tree, stdout=self._log, stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(path)),
        )
        self.pid = self.proc.pid

    def poll_log(self) -> list[dict]:
        """New JSON lines since the last call (also appended to ``self.lines``)."""
        with open(self.log_path, "rb") as f:
            f.seek(self._offset)
            chunk = f.read()
        self._offset += len(chunk)
        data = self._buf + chunk
        end = data.rfind(b"\n") + 1
        self._buf = data[end:]
        new = []
        for line in data[:end].splitlines():
            try:
                new.append(json.loads(line))
            except ValueError:
                continue
        self.lines.extend(new)
        return new

    def wait_event(self, event: str, timeout: float, count: int = 1, on_line=None) -> dict:
        """Wait for the ``count``-th line with ``event`` (counting lines seen so far)."""
        deadline = time.monotonic() + timeout
        seen = [ln for ln in self.lines if ln.get("event") == event]
        while len(seen) < count:
            if self.proc.poll() is not None:
                raise RuntimeError(f"controller exited ({self.proc.returncode}); see {self.log_path}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {count}x {event!r} within {timeout}s; see {self.log_path}")
            for ln in self.poll_log():
                if on_line is not None:
                    on_line(ln)
                if ln.get("event") == event:
                    seen.append(ln)
            if len(seen) < count:
                time.sleep(0.02)
        return seen[count - 1]

    def metric(self, name: str) -> float | None:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        except OSError:
            return None
        total = None
        for line in text.splitlines():
            if line.startswith(name) and not line.startswith("#"):
                total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
        return total

    def metric_by_label(self, name: str) -> dict[str, float]:
        """``{labels: value}`` of every sample of ``name`` (``""`` for an unlabelled one)."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            head, _, value = line.rpartition(" ")
            metric, _, labels = head.partition("{")
            if metric == name:
                out[labels.rstrip("}")] = float(value)
        return out

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


def log_time(line: dict) -> _dt.datetime:
    return _dt.datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00"))


def teardown(ctl: Controller | None, admin: Any, cluster: LocalCluster) -> None:
    """End a run whatever state it reached: the controller (if started), the admin API
    client (if opened), then the bed."""
    if ctl is not None:
        ctl.stop()
    if admin is not None:
        admin.close()
    cluster.stop()


def steady_pass(r: dict[str, Any], ctl: Controller, cluster: LocalCluster, n: int,
                nb_txns: Callable[[Controller], float] | None = None) -> dict:
    """Wait for ``ctl``'s next periodic resync pass (its second ``resync complete``) and
    record it in ``r``: ``steady_cpu_s`` and ``steady_wall_s`` from its ``resync started``
    line, its API writes (``steady_writes``, ``steady_writes_by``), ``rss_steady_mib``, and
    ``steady_nb_txns`` when ``nb_txns`` reads the controller's NB transaction count.

    :returns: the pass's ``resync complete`` log line.
    :raises TimeoutError: as :meth:`Controller.wait_event`."""
    marker = mark(cluster)
    marks: dict[str, float] = {}

    def on_line(ln: dict) -> None:
        if ln.get("event") == "resync started" and "cpu" not in marks:
            marks["cpu"] = cpu_seconds(ctl.pid)
            marks["t"] = time.monotonic()
            if nb_txns is not None:
                marks["tx"] = nb_txns(ctl)

    ctl.wait_event("resync started", 90, on_line=on_line)
    second = ctl.wait_event("resync complete", max(120.0, n * 0.2), count=2, on_line=on_line)
    r["steady_cpu_s"] = cpu_seconds(ctl.pid) - marks["cpu"]
    r["steady_wall_s"] = time.monotonic() - marks["t"]
    if nb_txns is not None:
        r["steady_nb_txns"] = nb_txns(ctl) - marks["tx"]
    record_writes(r, "steady", cluster, marker)
    r["rss_steady_mib"] = rss_mib(ctl.pid)
    return second
