"""Cluster scale: the controller at rest and converging in a cluster of the population's
size (hack/bench_scale.py: the command line and its description); the population's
creation, shared with hack/benchkit/vlan_space.py and hack/benchkit/pod_memory.py."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from controller.runtime.kube import ApiError, KubeWriter
from hack.bed import LocalCluster
from hack.benchkit import population as pop
from hack.benchkit.controller import Controller, cpu_seconds, rss_mib, teardown
from hack.benchkit.convergence import allocation_failures, check_allocation, converged_count
from hack.benchkit.document import write_block
from hack.benchkit.load import GROUP, VERSION, in_threads
from hack.benchkit.writes import mark, record_writes


POPULATION = {"namespaces": 5000, "nodes": 500, "subnets": 2000, "ips": 50000, "addresses": 20000, "machines": 5000}
PROVIDERS = ("scale-pn-0", "scale-pn-1")
ZONES = ("scale-z0", "scale-z1")
VPCS = 200
NETWORKS_PER_NAMESPACE = 10
IPAM = pop.IPAM
CAPMOX = "infrastructure.cluster.x-k8s.io"
BEGIN, END = "<!-- scale:begin -->", "<!-- scale:end -->"
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")


def creatable(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``obj`` without the fields the server sets, and its status (written separately: a
    create ignores it where the kind has a status subresource)."""
    obj = dict(obj)
    obj["metadata"] = {k: v for k, v in obj["metadata"].items() if k not in SERVER_SET}
    return obj, obj.pop("status", None)


def post(w: KubeWriter, collection: str, obj: dict[str, Any]) -> None:
    """Create ``obj`` in ``collection`` (an API path) and write its status; an object that
    exists already (a rerun on the same work directory) is left as it is."""
    body, status = creatable(obj)
    try:
        w.request("POST", collection, body)
    except ApiError as err:
        if err.status != 409:
            raise
        return
    if status is not None:
        w.request("PATCH", f"{collection}/{body['metadata']['name']}/status", {"status": status},
                  "application/merge-patch+json")


def counts(scale: float) -> dict[str, int]:
    return {k: max(1, round(v * scale)) for k, v in POPULATION.items()}


def populate(cluster: LocalCluster, n: dict[str, int], threads: int, log: Callable[[str], None]) -> dict[str, float]:
    """Create the population of ``n`` (see the module docstring); seconds per kind."""
    ns = [f"tenant-{i:05d}" for i in range(n["namespaces"])]

    def subnet_namespace(s: int) -> str:
        return ns[s % len(ns)]

    kinds: list[tuple[str, int, Callable[[KubeWriter, int], None]]] = [
        ("namespaces", n["namespaces"], lambda w, i: post(w, "/api/v1/namespaces", pop.namespace(i))),
        ("nodes", n["nodes"], lambda w, i: post(w, "/api/v1/nodes", pop.node(i, list(PROVIDERS)))),
        ("subnets", n["subnets"], lambda w, i: post(
            w, "/apis/kubeovn.io/v1/subnets", pop.kube_ovn_subnet(i, f"vpc-{i % VPCS:03d}", [subnet_namespace(i)]))),
        ("ips", n["ips"], lambda w, i: post(w, "/apis/kubeovn.io/v1/ips", pop.kube_ovn_ip(
            i, f"subnet-{i % n['subnets']:05d}", subnet_namespace(i % n["subnets"]), f"worker-{i % n['nodes']:04d}"))),
        ("addresses", n["addresses"], lambda w, i: (
            post(w, f"/apis/{IPAM}/v1beta1/namespaces/{ns[i % len(ns)]}/ipaddressclaims",
                 pop.ip_address_claim(i, ns[i % len(ns)], f"pool-{i % 100}")),
            post(w, f"/apis/{IPAM}/v1beta1/namespaces/{ns[i % len(ns)]}/ipaddresses",
                 pop.ip_address(i, ns[i % len(ns)], f"pool-{i % 100}")))),
        ("machines", n["machines"], lambda w, i: post(
            w, f"/apis/{CAPMOX}/{'v1alpha1' if i % 2 else 'v1alpha2'}/namespaces/{ns[i % len(ns)]}/proxmoxmachines",
            pop.proxmox_machine(i, ns[i % len(ns)], f"pool-{i % 100}", "v1alpha1" if i % 2 else "v1alpha2"))),
    ]
    took: dict[str, float] = {}
    for kind, count, make in kinds:
        t0 = time.monotonic()
        in_threads(cluster, threads, count, lambda co, i, make=make: make(KubeWriter(co.api_client), i))
        took[kind] = time.monotonic() - t0
        log(f"[scale] {count} {kind} in {took[kind]:.1f}s ({count / took[kind]:.0f}/s)")
    return took


def network_namespace(i: int) -> str:
    return f"tenant-{i // NETWORKS_PER_NAMESPACE:05d}"


def setup_networks(cluster: LocalCluster, networks: int, threads: int) -> None:
    """The providers (ready), a zone on each (1-4094) and ``networks`` networks."""
    w = KubeWriter(cluster.api_client("admin"))
    for k, (pn, zone) in enumerate(zip(PROVIDERS, ZONES)):
        post(w, "/apis/kubeovn.io/v1/provider-networks", {
            "apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork", "metadata": {"name": pn},
            "spec": {"defaultInterface": f"eth{k + 1}"}, "status": {"ready": True, "readyNodes": ["worker-0000"]}})
        post(w, f"/apis/{GROUP}/{VERSION}/proxmoxnetworkzones", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ProxmoxNetworkZone", "metadata": {"name": zone},
            "spec": {"bridge": f"vmbr{k + 1}", "providerNetwork": pn, "vlanRanges": ["1-4094"]}})
    w.api.close()

    def one(co, i: int) -> None:
        ns = network_namespace(i)
        post(KubeWriter(co.api_client), f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/proxmoxnetworks", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ProxmoxNetwork",
            "metadata": {"name": f"net-{i}", "namespace": ns},
            "spec": {"zone": ZONES[i % len(ZONES)], "subnet": f"{ns}-net-{i}", "ipPool": "pool"}})

    in_threads(cluster, threads, networks, one)


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set (``VmHWM``), MiB."""
    return rss_mib(pid, "VmHWM")


class RssSampler:
    """VmRSS of ``pid`` every ``period`` seconds on a thread, until :meth:`stop`."""

    def __init__(self, pid: int, period: float = 0.5) -> None:
        self.pid, self.period = pid, period
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic(), rss_mib(self.pid)))
            except OSError:
                return
            self._stop.wait(self.period)

    def stop(self) -> None:
        self._stop.set()
        self._t.join()


def wait_converged(co, n: int, ctl: Controller, timeout: float, settle: float = 60.0) -> tuple[bool, int, str]:
    """Poll until ``n`` networks converged; (converged, count, why not)."""
    deadline = time.monotonic() + timeout
    done, last, last_change = 0, -1, time.monotonic()
    while True:
        done = converged_count(co, n)
        now = time.monotonic()
        if done != last:
            last, last_change = done, now
        if done >= n:
            return True, done, ""
        if ctl.proc.poll() is not None:
            return False, done, f"controller exited ({ctl.proc.returncode}); see {ctl.log_path}"
        if now > deadline:
            return False, done, f"only {done}/{n} converged within {timeout:.0f}s"
        if now - last_change > settle and done > 0:
            return False, done, f"stuck at {done}/{n}: no progress for {settle:.0f}s"
        time.sleep(2.0)  # each poll LISTs every network: not more often, it competes for the 2 cores


def run(scale: float, networks: int, rest: float, threads: int, workdir: Path, tree: Path | None,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    """One run (see the module docstring); the figures as a dict (``failures`` empty: passed)."""
    from kubernetes import client

    n = counts(scale)
    assert networks <= n["namespaces"] * NETWORKS_PER_NAMESPACE, "not enough namespaces for the networks"
    r: dict[str, Any] = {"scale": scale, "population": n, "networks": networks, "rest_s": rest, "failures": []}
    cluster = LocalCluster(workdir, with_nb=False)
    ctl: Controller | None = None
    admin = None
    try:
        cluster.start()
        log(f"[scale] cluster up in {cluster.start_seconds:.1f}s")
        r["populate_s"] = populate(cluster, n, threads, log)
        t0 = time.monotonic()
        setup_networks(cluster, networks, threads)
        log(f"[scale] {networks} networks created in {time.monotonic() - t0:.1f}s")
        admin = cluster.api_client("admin")
        co = client.CustomObjectsApi(admin)

        # -- start: synced, converged, start pass done --------------------------------
        marker = mark(cluster)
        ctl = Controller(cluster, workdir / "controller-1.log", tree=tree)
        rss = RssSampler(ctl.pid)
        ctl.wait_event("caches synced", 900)
        r["synced_s"] = time.monotonic() - ctl.started
        ok, done, why = wait_converged(co, networks, ctl, timeout=max(900.0, networks * 0.5))
        r["converged_count"] = done
        r["converge_s"] = time.monotonic() - ctl.started if ok else None
        if not ok:
            r["failures"].append(f"not converged: {why}")
            log(f"[scale] NOT CONVERGED: {why}")
            return r
        ctl.wait_event("resync complete", 900)
        r["start_pass_s"] = time.monotonic() - ctl.started
        r["start_cpu_s"] = cpu_seconds(ctl.pid)
        record_writes(r, "start", cluster, marker)
        log(f"[scale] synced {r['synced_s']:.1f}s, converged {r['converge_s']:.1f}s, start pass "
            f"{r['start_pass_s']:.1f}s after exec; {r['start_cpu_s']:.1f} CPU-s, {r['start_writes']} writes")
        log("[scale] settling 60 s before reading the settled RSS")
        time.sleep(60)  # settled: what the caches and the runtime keep once the start pass is over
        r["settled_rss_mib"] = rss_mib(ctl.pid)

        # -- rest ----------------------------------------------------------------------
        marker = mark(cluster)
        cpu0, t_rest = cpu_seconds(ctl.pid), time.monotonic()
        time.sleep(rest)
        r["rest_cpu_s"] = cpu_seconds(ctl.pid) - cpu0
        r["rest_wall_s"] = time.monotonic() - t_rest
        record_writes(r, "rest", cluster, marker)
        r["rest_rss_mib"] = rss_mib(ctl.pid)
        r["peak_rss_mib"] = peak_rss_mib(ctl.pid)
        rss.stop()
        r["rss_samples_max_mib"] = max(v for _, v in rss.samples)
        log(f"[scale] rest {r['rest_wall_s']:.0f}s: {r['rest_cpu_s']:.1f} CPU-s, {r['rest_writes']} writes; "
            f"RSS peak {r['peak_rss_mib']:.1f} MiB, settled {r['settled_rss_mib']:.1f}, after rest "
            f"{r['rest_rss_mib']:.1f}")

        # -- restart -------------------------------------------------------------------
        t_stop = time.monotonic()
        ctl.stop()
        r["stop_s"] = time.monotonic() - t_stop
        ctl = None
        marker = mark(cluster)
        ctl = Controller(cluster, workdir / "controller-2.log", tree=tree)
        ctl.wait_event("caches synced", 900)
        r["restart_synced_s"] = time.monotonic() - ctl.started
        ctl.wait_event("resync complete", 900)
        r["restart_pass_s"] = time.monotonic() - ctl.started
        r["restart_cpu_s"] = cpu_seconds(ctl.pid)
        record_writes(r, "restart", cluster, marker)
        r["restart_peak_rss_mib"] = peak_rss_mib(ctl.pid)
        log(f"[scale] restart: exit {r['stop_s']:.1f}s; synced {r['restart_synced_s']:.1f}s, pass done "
            f"{r['restart_pass_s']:.1f}s after exec; {r['restart_writes']} writes; peak RSS "
            f"{r['restart_peak_rss_mib']:.1f} MiB")

        # -- allocation check ---------------------------------------------------------
        r["check"] = check_allocation(co, networks)
        r["failures"] += allocation_failures(r["check"])
        for f in r["failures"]:
            log(f"[scale] FAILED: {f}")
        return r
    finally:
        teardown(ctl, admin, cluster)


def figure(v: Any, fmt: str = ".1f") -> str:
    return "—" if v is None else format(v, fmt)


def render(runs: list[dict[str, Any]]) -> str:
    """The scale table (one row per run) between the markers, markdown."""
    lines = [BEGIN, "",
             "| run | population (IP / Subnet / NS / Node / address+claim pairs / machines) | networks | "
             "synced s | converged s | start pass s | start writes | peak RSS MiB | settled RSS MiB | "
             "rest CPU s / writes | restart synced s / pass s / writes | restart peak RSS MiB | check |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---|"]
    for r in runs:
        p = r["population"]
        lines.append(
            f"| {r.get('label', '')} | {p['ips']} / {p['subnets']} / {p['namespaces']} / {p['nodes']} / "
            f"{p['addresses']} / {p['machines']} | {r['networks']} | {figure(r.get('synced_s'))} | "
            f"{figure(r.get('converge_s'))} | {figure(r.get('start_pass_s'))} | {r.get('start_writes', '—')} | "
            f"{figure(r.get('peak_rss_mib'))} | {figure(r.get('settled_rss_mib'))} | "
            f"{figure(r.get('rest_cpu_s'))} in {figure(r.get('rest_wall_s'), '.0f')} s / {r.get('rest_writes', '—')} | "
            f"{figure(r.get('restart_synced_s'))} / {figure(r.get('restart_pass_s'))} / {r.get('restart_writes', '—')} | "
            f"{figure(r.get('restart_peak_rss_mib'))} | {'FAILED: ' + '; '.join(r['failures']) if r['failures'] else 'ok'} |")
    lines += ["", END]
    return "\n".join(lines)


def command(args: argparse.Namespace) -> int:
    """The body of hack/bench_scale.py (without ``--vlan-space``) with its parsed arguments; the
    exit status."""
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="pnc-scale-"))
    try:
        r = run(args.scale, args.networks, args.rest, args.threads, workdir, args.controller_tree)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    r["label"] = args.label
    runs = [r]
    if args.json is not None:
        old = json.loads(args.json.read_text()) if args.json.exists() else []
        runs = [x for x in old if x.get("label") != args.label] + [r]
        args.json.write_text(json.dumps(runs, indent=1))
    if args.out is not None:
        write_block(args.out, render(runs), BEGIN, END, "Cluster scale (hack/bench_scale.py)")
    print(render(runs))
    return 1 if r["failures"] else 0
