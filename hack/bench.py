#!/usr/bin/env python3
"""Performance benchmark: convergence, its API floor, restart recovery, steady state, memory.

    python hack/bench.py [--sizes 100,500,2000] [--zones 5] [--out docs/performance.md]
                         [--profile-size 500] [--workdir DIR] [--threads 4]

For each size N, on a fresh LocalCluster (etcd + kube-apiserver on loopback, no OVN NB):

1. ``zones`` ProviderNetworks (status ready) and one ProxmoxNetworkZone on each, range 1-4094.
2. The controller, a separate process as the controller user, waits with empty caches.
3. Convergence: N ProxmoxNetworks (over 10 namespaces, round-robin over the zones) are
   created by ``threads`` admin threads; timed from the first create until every network has
   VLANAllocated=True/Allocated and status.observedGeneration == metadata.generation.
   (Ready stays False: there are no Subnets. That is expected.)
4. Restart recovery: SIGTERM, start again with --resync-period=30s; time until the
   "resync complete" line of the start pass; controller writes in that window (audit log).
5. Steady state: the next periodic resync pass; its writes and controller CPU (utime+stime).
6. Memory: VmRSS after convergence and after the restart pass.
7. Floor (controller stopped): the same client library doing the same API work with no
   controller logic: per network create it, create its Vlan, add the finalizer (JSON patch),
   PUT the status; ``threads`` threads.

One size (``--profile-size``) runs the converging controller under yappi (hack/bench/
profiled_main.py; all threads, CPU clock) and the report lists the top functions.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import datetime as _dt
import io
import json
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack"))

from cluster import LocalCluster, _free_ports  # noqa: E402
from tests.support import audit  # noqa: E402

GROUP, VERSION = "proxmox.cozystack.io", "v1alpha1"
FINALIZER = "proxmox.cozystack.io/network"
NAMESPACES = 10
CLK_TCK = os.sysconf("SC_CLK_TCK")
ANALYSIS_MARKER = "<!-- analysis: kept by hack/bench.py -->"


# --------------------------------------------------------------------------- process probes


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Controller:
    """The controller as a child process with a JSON log we tail."""

    def __init__(self, cluster: LocalCluster, log_path: Path, resync: str = "10m", profile: Path | None = None):
        self.log_path = log_path
        self.metrics_port = _free_ports(1)[0]
        flags = [
            f"--kubeconfig={cluster.controller_kubeconfig}",
            "--manage-gateway-chassis=false",
            "--leader-elect=false",
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            "--health-probe-bind-address=0",
            "--log-format=json",
            f"--resync-period={resync}",
        ]
        if profile is not None:
            cmd = [sys.executable, str(REPO / "hack" / "bench" / "profiled_main.py"), str(profile), *flags]
        else:
            cmd = [sys.executable, "-m", "controller.main", *flags]
        self._log = open(log_path, "ab")
        self._offset = log_path.stat().st_size
        self._buf = b""
        self.lines: list[dict] = []
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
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

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


# --------------------------------------------------------------------------- objects


def setup_objects(cluster: LocalCluster, zones: int) -> None:
    from kubernetes import client

    api = cluster.api_client("admin")
    try:
        core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
        for i in range(NAMESPACES):
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=f"bench-{i}")))
        for z in range(zones):
            co.create_cluster_custom_object("kubeovn.io", "v1", "provider-networks", {
                "apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork",
                "metadata": {"name": f"bench-pn-{z}"}, "spec": {"defaultInterface": f"eth{z + 1}"},
            })
            co.patch_cluster_custom_object_status("kubeovn.io", "v1", "provider-networks", f"bench-pn-{z}",
                                                  {"status": {"ready": True, "readyNodes": ["pve-1", "pve-2"]}})
            co.create_cluster_custom_object(GROUP, VERSION, "proxmoxnetworkzones", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "ProxmoxNetworkZone",
                "metadata": {"name": f"bench-z{z}"},
                "spec": {"bridge": f"vmbr{z}", "providerNetwork": f"bench-pn-{z}", "vlanRanges": ["1-4094"]},
            })
    finally:
        api.close()


def network_body(prefix: str, i: int, zone: str) -> tuple[str, dict]:
    ns = f"bench-{i % NAMESPACES}"
    return ns, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ProxmoxNetwork",
        "metadata": {"name": f"{prefix}-{i}", "namespace": ns},
        "spec": {"zone": zone, "subnet": f"{ns}-{prefix}-{i}", "ipPool": "pool"},
    }


def in_threads(cluster: LocalCluster, threads: int, n: int, fn) -> None:
    """fn(co, i) for i in range(n) on ``threads`` threads, one ApiClient per thread."""
    from kubernetes import client

    local = threading.local()
    clients = []
    lock = threading.Lock()

    def work(i: int) -> None:
        co = getattr(local, "co", None)
        if co is None:
            api = cluster.api_client("admin")
            with lock:
                clients.append(api)
            co = local.co = client.CustomObjectsApi(api)
        fn(co, i)

    try:
        with cf.ThreadPoolExecutor(threads) as ex:
            for f in [ex.submit(work, i) for i in range(n)]:
                f.result()
    finally:
        for api in clients:
            api.close()


def converged_count(co, n_expected: int) -> int:
    items = co.list_cluster_custom_object(GROUP, VERSION, "proxmoxnetworks")["items"]
    done = 0
    for net in items:
        if not net["metadata"]["name"].startswith("net-"):
            continue
        st = net.get("status") or {}
        if st.get("observedGeneration") != net["metadata"].get("generation"):
            continue
        for c in st.get("conditions") or []:
            if c.get("type") == "VLANAllocated" and c.get("status") == "True" and c.get("reason") == "Allocated":
                done += 1
                break
    return done


def writes_by_resource(writes) -> dict[str, int]:
    c = collections.Counter(f"{w.verb} {w.resource}{'/' + w.subresource if w.subresource else ''}" for w in writes)
    return dict(sorted(c.items()))


def run_floor(cluster: LocalCluster, n: int, threads: int, prefix: str = "floor", full: bool = False) -> float:
    """Same client library, same API work, no controller logic. Returns seconds.

    ``full`` adds the controller's other writes per network: two Events and a merge patch
    of the namespace annotation."""
    from kubernetes import client

    def one(co, i: int) -> None:
        ns, body = network_body(prefix, i, "floor-none")
        name = body["metadata"]["name"]
        net = co.create_namespaced_custom_object(GROUP, VERSION, ns, "proxmoxnetworks", body)
        co.create_cluster_custom_object("kubeovn.io", "v1", "vlans", {
            "apiVersion": "kubeovn.io/v1", "kind": "Vlan",
            "metadata": {"name": body["spec"]["subnet"], "finalizers": [FINALIZER], "labels": {
                "proxmox.cozystack.io/zone": "floor-none",
                "proxmox.cozystack.io/network-namespace": ns,
                "proxmox.cozystack.io/network-name": name}},
            "spec": {"id": 1 + i % 4094, "provider": "floor-pn"},
        })
        net = co.patch_namespaced_custom_object(
            GROUP, VERSION, ns, "proxmoxnetworks", name,
            [{"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}],
            _content_type="application/json-patch+json",
        )
        now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        net["status"] = {
            "observedGeneration": net["metadata"]["generation"], "vlan": 1 + i % 4094, "bridge": "vmbr0",
            "conditions": [{"type": "VLANAllocated", "status": "True", "reason": "Allocated", "message": "floor",
                            "observedGeneration": net["metadata"]["generation"], "lastTransitionTime": now}],
        }
        co.replace_namespaced_custom_object_status(GROUP, VERSION, ns, "proxmoxnetworks", name, net)
        if full:
            core = client.CoreV1Api(co.api_client)
            for reason in ("VLANAllocated", "SubnetNotFound"):
                core.create_namespaced_event(ns, {
                    "apiVersion": "v1", "kind": "Event",
                    "metadata": {"generateName": f"{name}.", "namespace": ns},
                    "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ProxmoxNetwork",
                                       "name": name, "namespace": ns, "uid": net["metadata"]["uid"]},
                    "reason": reason, "message": "floor", "type": "Normal",
                    "source": {"component": "proxmox-network-controller"},
                    "firstTimestamp": now, "lastTimestamp": now, "count": 1,
                })
            core.patch_namespace(ns, {"metadata": {"annotations": {f"bench.pnc/{prefix}-{i % 50}": f"vmbr0/{1 + i % 4094}/pool"}}})

    t0 = time.monotonic()
    in_threads(cluster, threads, n, one)
    return time.monotonic() - t0


# --------------------------------------------------------------------------- one size


def run_size(n: int, zones: int, threads: int, workdir: Path, profile: Path | None, log=print) -> dict:
    from kubernetes import client

    r: dict = {"n": n}
    cluster = LocalCluster(workdir, with_nb=False)
    ctl: Controller | None = None
    admin = None
    try:
        cluster.start()
        log(f"[N={n}] cluster up in {cluster.start_seconds:.1f}s")
        setup_objects(cluster, zones)
        admin = cluster.api_client("admin")
        co = client.CustomObjectsApi(admin)

        # -- convergence ------------------------------------------------------------
        ctl = Controller(cluster, workdir / "controller-1.log", profile=profile)
        ctl.wait_event("caches synced", 120)
        ctl.wait_event("resync complete", 120)
        cpu0 = cpu_seconds(ctl.pid)
        start_marker = audit.write_marker(cluster)
        audit.wait_for_marker(cluster, start_marker)

        t0 = time.monotonic()
        creator = threading.Thread(target=in_threads, args=(cluster, threads, n, lambda c, i: c.create_namespaced_custom_object(
            GROUP, VERSION, network_body("net", i, f"bench-z{i % zones}")[0], "proxmoxnetworks",
            network_body("net", i, f"bench-z{i % zones}")[1])))
        creator.start()
        deadline = t0 + max(180.0, n * 0.5)
        done = 0
        while True:
            if not creator.is_alive():
                r.setdefault("create_s", time.monotonic() - t0)
            done = converged_count(co, n)
            if done >= n:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {done}/{n} networks converged; see {ctl.log_path}")
            if ctl.proc.poll() is not None:
                raise RuntimeError(f"controller exited; see {ctl.log_path}")
            time.sleep(0.25)
        r["converge_s"] = time.monotonic() - t0
        creator.join()
        r.setdefault("create_s", r["converge_s"])
        r["converge_cpu_s"] = cpu_seconds(ctl.pid) - cpu0
        time.sleep(2)  # let trailing passes (events, namespace annotations) land
        w = audit.writes_before(cluster, cluster.controller_user, audit.write_marker(cluster), since_marker=start_marker, timeout=60)
        r["converge_writes"] = len(w)
        r["converge_writes_by"] = writes_by_resource(w)
        r["rss_converged_mib"] = rss_mib(ctl.pid)
        log(f"[N={n}] converged in {r['converge_s']:.2f}s (creates done in {r['create_s']:.2f}s), "
            f"{r['converge_writes']} writes, RSS {r['rss_converged_mib']:.1f} MiB")

        # -- restart recovery -------------------------------------------------------
        m0 = audit.write_marker(cluster)
        audit.wait_for_marker(cluster, m0)
        t_stop = time.monotonic()
        ctl.stop()
        r["stop_s"] = time.monotonic() - t_stop
        # What the old process still wrote between SIGTERM and exit (its Event backlog).
        m1 = audit.write_marker(cluster)
        w = audit.writes_before(cluster, cluster.controller_user, m1, since_marker=m0, timeout=60)
        r["shutdown_writes"] = len(w)
        r["shutdown_writes_by"] = writes_by_resource(w)
        ctl = Controller(cluster, workdir / "controller-2.log", resync="30s")
        t1 = ctl.started
        synced = ctl.wait_event("caches synced", 120)
        t_synced = time.monotonic()
        first = ctl.wait_event("resync complete", max(120.0, n * 0.2))
        r["restart_s"] = time.monotonic() - t1
        r["restart_after_sync_s"] = (_ts(first) - _ts(synced)).total_seconds()
        r["restart_cpu_s"] = cpu_seconds(ctl.pid)
        r["restart_log_writes"] = first.get("writes")
        w = audit.writes_before(cluster, cluster.controller_user, audit.write_marker(cluster), since_marker=m1, timeout=60)
        r["restart_writes"] = len(w)
        r["restart_writes_by"] = writes_by_resource(w)
        r["rss_restarted_mib"] = rss_mib(ctl.pid)
        log(f"[N={n}] restart: resync complete {r['restart_s']:.2f}s after exec "
            f"({r['restart_after_sync_s']:.2f}s after caches synced), {r['restart_writes']} writes")
        del t_synced

        # -- steady state: the next periodic pass -------------------------------------
        m2 = audit.write_marker(cluster)
        audit.wait_for_marker(cluster, m2)
        marks: dict[str, float] = {}

        def on_line(ln: dict) -> None:
            if ln.get("event") == "resync started" and "cpu" not in marks:
                marks["cpu"] = cpu_seconds(ctl.pid)
                marks["t"] = time.monotonic()

        ctl.wait_event("resync started", 90, on_line=on_line)
        second = ctl.wait_event("resync complete", max(120.0, n * 0.2), count=2, on_line=on_line)
        r["steady_cpu_s"] = cpu_seconds(ctl.pid) - marks["cpu"]
        r["steady_wall_s"] = time.monotonic() - marks["t"]
        r["steady_log_writes"] = second.get("writes")
        w = audit.writes_before(cluster, cluster.controller_user, audit.write_marker(cluster), since_marker=m2, timeout=60)
        r["steady_writes"] = len(w)
        r["steady_writes_by"] = writes_by_resource(w)
        r["rss_steady_mib"] = rss_mib(ctl.pid)
        log(f"[N={n}] steady pass: {r['steady_cpu_s']:.2f} CPU-s, {r['steady_wall_s']:.2f}s wall, "
            f"{r['steady_writes']} writes; RSS {r['rss_steady_mib']:.1f} MiB")
        ctl.stop()
        ctl = None

        # -- floor ----------------------------------------------------------------------
        r["floor_s"] = run_floor(cluster, n, threads)
        r["ratio"] = r["converge_s"] / r["floor_s"]
        r["floor_full_s"] = run_floor(cluster, n, threads, prefix="floorfull", full=True)
        r["ratio_full"] = r["converge_s"] / r["floor_full_s"]
        log(f"[N={n}] floor {r['floor_s']:.2f}s; controller/floor = {r['ratio']:.2f}; "
            f"floor with events+namespace patch {r['floor_full_s']:.2f}s, ratio {r['ratio_full']:.2f}")
        return r
    finally:
        if ctl is not None:
            ctl.stop()
        if admin is not None:
            admin.close()
        cluster.stop()


def _ts(line: dict) -> _dt.datetime:
    return _dt.datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00"))


# --------------------------------------------------------------------------- report


def profile_top(path: Path, limit: int = 25) -> str:
    out = io.StringIO()
    st = pstats.Stats(str(path), stream=out)
    st.sort_stats("tottime").print_stats(limit)
    out.write("\n")
    st.sort_stats("cumulative").print_stats(limit)
    return out.getvalue()


def render(results: list[dict], zones: int, threads: int, profile_n: int | None, profile_text: str | None) -> str:
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    L = [
        "# Performance", "",
        f"Measured {now} on a machine with `nproc` = {os.cpu_count()}, by `python hack/bench.py` "
        f"({zones} zones, {threads} creating threads, controller with 4 workers, all on loopback; "
        "other work was running on the same machine, so treat single figures as ±30%).", "",
        "| N | create N (admin) s | convergence s | floor s | controller/floor | floor+events+ns s | controller/floor+ | controller CPU during convergence s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        L.append(f"| {r['n']} | {r['create_s']:.2f} | {r['converge_s']:.2f} | {r['floor_s']:.2f} | {r['ratio']:.2f} | "
                 f"{r['floor_full_s']:.2f} | {r['ratio_full']:.2f} | {r['converge_cpu_s']:.2f} |")
    L += ["", "| N | old process: SIGTERM→exit s (writes) | restart: exec→resync complete s | caches synced→resync complete s | "
          "writes by restarted controller | steady pass CPU s | steady pass wall s | writes per resync |",
          "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        L.append(f"| {r['n']} | {r['stop_s']:.1f} ({r['shutdown_writes']}) | {r['restart_s']:.2f} | {r['restart_after_sync_s']:.2f} | "
                 f"{r['restart_writes']} | {r['steady_cpu_s']:.2f} | {r['steady_wall_s']:.2f} | {r['steady_writes']} |")
    L += ["", "| N | RSS after convergence MiB | RSS after restart pass MiB | RSS after steady pass MiB | controller writes during convergence |",
          "|---:|---:|---:|---:|---|"]
    for r in results:
        by = ", ".join(f"{k}: {v}" for k, v in r["converge_writes_by"].items())
        L.append(f"| {r['n']} | {r['rss_converged_mib']:.1f} | {r['rss_restarted_mib']:.1f} | {r['rss_steady_mib']:.1f} | {r['converge_writes']} ({by}) |")
    L += ["", "Raw results (JSON):", "", "```json", json.dumps(results, indent=1), "```", ""]
    if profile_text:
        L += [f"## Profile (N={profile_n}, converging controller (create → converge → SIGTERM) under yappi, CPU clock, all threads)", "",
              "```", profile_text.strip(), "```", ""]
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,500")
    ap.add_argument("--zones", type=int, default=5)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None, help="write the markdown tables here")
    ap.add_argument("--json", type=Path, default=None, help="also write raw results here")
    ap.add_argument("--profile-size", type=int, default=None,
                    help="run this N's converging controller under yappi (its figures are then slowed by the profiler)")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, audit)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    base = args.workdir or Path(tempfile.mkdtemp(prefix="pnc-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    results, prof_text = [], None
    try:
        for n in sizes:
            prof = base / f"profile-{n}.pstat" if args.profile_size == n else None
            results.append(run_size(n, args.zones, args.threads, base / f"n{n}", prof,
                                    log=lambda s: print(s, file=sys.stderr, flush=True)))
            if prof is not None and prof.exists():
                prof_text = profile_top(prof)
            if args.json:
                args.json.write_text(json.dumps(results, indent=1))
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    text = render(results, args.zones, args.threads, args.profile_size, prof_text)
    if args.out:
        # Hand-written text after the marker survives a re-run.
        keep = ""
        if args.out.exists():
            old = args.out.read_text()
            if ANALYSIS_MARKER in old:
                keep = old[old.index(ANALYSIS_MARKER):]
        args.out.write_text(text + ("\n" + keep if keep else ""))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
