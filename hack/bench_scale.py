#!/usr/bin/env python3
"""Cluster-scale benchmark (issue 29 item 1): the controller in a cluster that is large in
the kinds it caches without owning them, not only in its networks.

    python hack/bench_scale.py [--scale 1.0] [--networks 4000] [--rest 600] [--threads 4]
                               [--controller-tree DIR] [--label TEXT] [--out docs/performance.md]
                               [--json FILE] [--workdir DIR] [--keep]
    python hack/bench_scale.py --vlan-space [--reuse-delay 60] [--release 100] [--out ...]

``--vlan-space`` is issue 29 item 3 instead (:func:`run_vlan_space`): one provider, one zone
over 1-4094, 4,094 networks, the 4,095th ``ZoneExhausted``, releases reused after the delay.

On a fresh LocalCluster (etcd + kube-apiserver on loopback, no OVN), through the API as the
admin, ``--threads`` threads:

1. The population, shaped by hack/population.py (at ``--scale 1``): 5,000 Namespaces,
   500 Nodes (labels of both providers, Kube-OVN annotations, kubelet status), 2,000
   Kube-OVN Subnets over 200 VPCs, 50,000 Kube-OVN ``IP`` objects spread over them,
   20,000 ``IPAddress``/``IPAddressClaim`` pairs and 5,000 ``ProxmoxMachine`` (half created
   as v1alpha1, half as v1alpha2). Object counts scale with ``--scale``.
2. Two ProviderNetworks (ready), one zone on each with range 1-4094, and ``--networks``
   ProxmoxNetworks (10 per namespace, alternating zones; no Subnets of their own, so they
   converge at VLANAllocated=True/Allocated, as in hack/bench.py).
3. The controller starts (a process, ``--leader-elect=false``, no gateway): seconds from
   exec to ``caches synced``, to every network converged (VLANAllocated=True/Allocated at
   the current generation) and to the start pass's ``resync complete``; its CPU seconds.
   RSS is sampled every 0.5 s (peak: the kernel's ``VmHWM``); settled RSS 60 s after the
   start pass.
4. Rest: ``--rest`` seconds (600 for the issue's figure) with nothing changing: CPU seconds
   and the controller user's API writes (audit log).
5. One restart: SIGTERM (seconds to exit), a new process: seconds to ``caches synced`` and to
   ``resync complete``, its writes (audit log), its peak RSS.
6. The allocation check of hack/bench.py: distinct IDs per provider, no ID twice on one
   provider, every network allocated. A failure is printed and the exit status is 1.

The pod's view (cgroup memory against the chart's limit) is hack/pod_memory.py's job; this
measures the process, which is what the limit has to hold.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack"))

import bench  # noqa: E402
from hack.bed import LocalCluster  # noqa: E402
from controller.runtime.kube import ApiError, KubeWriter  # noqa: E402
from hack import population as pop  # noqa: E402

POPULATION = {"namespaces": 5000, "nodes": 500, "subnets": 2000, "ips": 50000, "addresses": 20000, "machines": 5000}
PROVIDERS = ("scale-pn-0", "scale-pn-1")
ZONES = ("scale-z0", "scale-z1")
VPCS = 200
NETWORKS_PER_NAMESPACE = 10
IPAM = pop.IPAM
CAPMOX = "infrastructure.cluster.x-k8s.io"
BEGIN, END = "<!-- scale:begin -->", "<!-- scale:end -->"
SPACE_BEGIN, SPACE_END = "<!-- vlan-space:begin -->", "<!-- vlan-space:end -->"
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
        bench.in_threads(cluster, threads, count, lambda co, i, make=make: make(KubeWriter(co.api_client), i))
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
        post(w, f"/apis/{bench.GROUP}/{bench.VERSION}/proxmoxnetworkzones", {
            "apiVersion": f"{bench.GROUP}/{bench.VERSION}", "kind": "ProxmoxNetworkZone", "metadata": {"name": zone},
            "spec": {"bridge": f"vmbr{k + 1}", "providerNetwork": pn, "vlanRanges": ["1-4094"]}})
    w.api.close()

    def one(co, i: int) -> None:
        ns = network_namespace(i)
        post(KubeWriter(co.api_client), f"/apis/{bench.GROUP}/{bench.VERSION}/namespaces/{ns}/proxmoxnetworks", {
            "apiVersion": f"{bench.GROUP}/{bench.VERSION}", "kind": "ProxmoxNetwork",
            "metadata": {"name": f"net-{i}", "namespace": ns},
            "spec": {"zone": ZONES[i % len(ZONES)], "subnet": f"{ns}-net-{i}", "ipPool": "pool"}})

    bench.in_threads(cluster, threads, networks, one)


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set (``VmHWM``), MiB."""
    return bench.rss_mib(pid, "VmHWM")


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
                self.samples.append((time.monotonic(), bench.rss_mib(self.pid)))
            except OSError:
                return
            self._stop.wait(self.period)

    def stop(self) -> None:
        self._stop.set()
        self._t.join()


def record_writes(r: dict[str, Any], phase: str, cluster: LocalCluster, marker: str) -> None:
    """``r["<phase>_writes"]`` and ``r["<phase>_writes_by"]``: the controller user's API writes
    since the audit ``marker`` (all of them, and counted by verb and resource)."""
    w = bench.controller_writes_since(cluster, marker)
    r[f"{phase}_writes"] = len(w)
    r[f"{phase}_writes_by"] = bench.writes_by_resource(w)


def teardown(ctl: bench.Controller | None, admin: Any, cluster: LocalCluster) -> None:
    """The end of a run: the controller stopped, the admin client closed, the bed stopped."""
    if ctl is not None:
        ctl.stop()
    if admin is not None:
        admin.close()
    cluster.stop()


def wait_converged(co, n: int, ctl: bench.Controller, timeout: float, settle: float = 60.0) -> tuple[bool, int, str]:
    """Poll until ``n`` networks converged; (converged, count, why not)."""
    deadline = time.monotonic() + timeout
    done, last, last_change = 0, -1, time.monotonic()
    while True:
        done = bench.converged_count(co, n)
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
    ctl: bench.Controller | None = None
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
        marker = bench.mark(cluster)
        ctl = bench.Controller(cluster, workdir / "controller-1.log", tree=tree)
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
        r["start_cpu_s"] = bench.cpu_seconds(ctl.pid)
        record_writes(r, "start", cluster, marker)
        log(f"[scale] synced {r['synced_s']:.1f}s, converged {r['converge_s']:.1f}s, start pass "
            f"{r['start_pass_s']:.1f}s after exec; {r['start_cpu_s']:.1f} CPU-s, {r['start_writes']} writes")
        log("[scale] settling 60 s before reading the settled RSS")
        time.sleep(60)  # settled: what the caches and the runtime keep once the start pass is over
        r["settled_rss_mib"] = bench.rss_mib(ctl.pid)

        # -- rest ----------------------------------------------------------------------
        marker = bench.mark(cluster)
        cpu0, t_rest = bench.cpu_seconds(ctl.pid), time.monotonic()
        time.sleep(rest)
        r["rest_cpu_s"] = bench.cpu_seconds(ctl.pid) - cpu0
        r["rest_wall_s"] = time.monotonic() - t_rest
        record_writes(r, "rest", cluster, marker)
        r["rest_rss_mib"] = bench.rss_mib(ctl.pid)
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
        marker = bench.mark(cluster)
        ctl = bench.Controller(cluster, workdir / "controller-2.log", tree=tree)
        ctl.wait_event("caches synced", 900)
        r["restart_synced_s"] = time.monotonic() - ctl.started
        ctl.wait_event("resync complete", 900)
        r["restart_pass_s"] = time.monotonic() - ctl.started
        r["restart_cpu_s"] = bench.cpu_seconds(ctl.pid)
        record_writes(r, "restart", cluster, marker)
        r["restart_peak_rss_mib"] = peak_rss_mib(ctl.pid)
        log(f"[scale] restart: exit {r['stop_s']:.1f}s; synced {r['restart_synced_s']:.1f}s, pass done "
            f"{r['restart_pass_s']:.1f}s after exec; {r['restart_writes']} writes; peak RSS "
            f"{r['restart_peak_rss_mib']:.1f} MiB")

        # -- allocation check ---------------------------------------------------------
        r["check"] = bench.check_allocation(co, networks)
        r["failures"] += bench.allocation_failures(r["check"])
        for f in r["failures"]:
            log(f"[scale] FAILED: {f}")
        return r
    finally:
        teardown(ctl, admin, cluster)


VLAN_SPACE = 4094
SPACE_PROVIDER, SPACE_ZONE = "space-pn", "space-z"


def network_condition(co, ns: str, name: str, ctype: str = "VLANAllocated") -> dict[str, Any]:
    net = co.get_namespaced_custom_object(bench.GROUP, bench.VERSION, ns, "proxmoxnetworks", name)
    return next((c for c in (net.get("status") or {}).get("conditions") or [] if c.get("type") == ctype), {})


def run_vlan_space(workdir: Path, tree: Path | None, reuse_delay: float, release: int, threads: int,
                   space: int = VLAN_SPACE, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Issue 29 item 3: one provider, one zone over 1-4094, 4,094 networks allocated; one
    more says ``ZoneExhausted``; ``release`` more wait; ``release`` allocated networks
    deleted: the waiting ones take the released IDs, none before ``reuse_delay`` seconds
    (``--vlan-reuse-delay``) after its release. ``space`` < 4094 narrows the zone to
    1-``space`` (a quick try of the harness). The figures as a dict."""
    from kubernetes import client

    r: dict[str, Any] = {"networks": space, "reuse_delay_s": reuse_delay, "released": release, "failures": []}
    cluster = LocalCluster(workdir, with_nb=False)
    ctl: bench.Controller | None = None
    admin = None
    try:
        cluster.start()
        w = KubeWriter(cluster.api_client("admin"))
        for i in range((space + release) // NETWORKS_PER_NAMESPACE + 1):
            post(w, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": network_namespace(i * NETWORKS_PER_NAMESPACE)}})
        post(w, "/apis/kubeovn.io/v1/provider-networks", {
            "apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork", "metadata": {"name": SPACE_PROVIDER},
            "spec": {"defaultInterface": "eth1"}, "status": {"ready": True, "readyNodes": ["pve-1"]}})
        post(w, f"/apis/{bench.GROUP}/{bench.VERSION}/proxmoxnetworkzones", {
            "apiVersion": f"{bench.GROUP}/{bench.VERSION}", "kind": "ProxmoxNetworkZone",
            "metadata": {"name": SPACE_ZONE},
            "spec": {"bridge": "vmbr1", "providerNetwork": SPACE_PROVIDER, "vlanRanges": [f"1-{space}"]}})
        w.api.close()
        admin = cluster.api_client("admin")
        co = client.CustomObjectsApi(admin)

        def create(prefix: str, first: int, count: int) -> None:
            def one(c, k: int) -> None:
                i = first + k
                ns = network_namespace(i)
                post(KubeWriter(c.api_client), f"/apis/{bench.GROUP}/{bench.VERSION}/namespaces/{ns}/proxmoxnetworks", {
                    "apiVersion": f"{bench.GROUP}/{bench.VERSION}", "kind": "ProxmoxNetwork",
                    "metadata": {"name": f"{prefix}-{i}", "namespace": ns},
                    "spec": {"zone": SPACE_ZONE, "subnet": f"{ns}-{prefix}-{i}", "ipPool": "pool"}})
            bench.in_threads(cluster, threads, count, one)

        ctl = bench.Controller(cluster, workdir / "controller-space.log", tree=tree,
                               args=[f"--vlan-reuse-delay={reuse_delay:g}s"])
        ctl.wait_event("caches synced", 120)
        t0 = time.monotonic()
        create("net", 0, space)
        ok, done, why = wait_converged(co, space, ctl, timeout=1800)
        if not ok:
            r["failures"].append(f"not converged: {why}")
            return r
        r["converge_s"] = time.monotonic() - t0
        r["rss_mib"] = bench.rss_mib(ctl.pid)
        check = bench.check_allocation(co, space)
        r["distinct_ids"], r["duplicated_ids"] = check["distinct_ids"], check["duplicated_ids"]
        r["failures"] += bench.allocation_failures(check)
        log(f"[space] {space} networks converged in {r['converge_s']:.1f}s; {check['distinct_ids']} distinct IDs, "
            f"{check['duplicated_ids']} duplicated; RSS {r['rss_mib']:.1f} MiB")

        # One more: the zone is full. Then more waiting, as many as will be released.
        create("wait", space, release)
        waiting = [(network_namespace(space + k), f"wait-{space + k}") for k in range(release)]

        def exhausted() -> bool:
            return all(network_condition(co, ns, name).get("reason") == "ZoneExhausted" for ns, name in waiting)

        deadline = time.monotonic() + 300
        while not exhausted():
            if time.monotonic() > deadline:
                r["failures"].append("the waiting networks did not all say ZoneExhausted within 300s")
                return r
            time.sleep(1.0)
        cond = network_condition(co, *waiting[0])
        r["exhausted"] = {"status": cond.get("status"), "reason": cond.get("reason"), "message": cond.get("message")}
        log(f"[space] network {space + 1}: {cond.get('status')} {cond.get('reason')}: {cond.get('message')}")

        # Release: delete ``release`` allocated networks; their IDs, and when each was gone.
        victims = [(network_namespace(i), f"net-{i}") for i in range(release)]
        released_ids = set()
        for ns, name in victims:
            net = co.get_namespaced_custom_object(bench.GROUP, bench.VERSION, ns, "proxmoxnetworks", name)
            released_ids.add(net["status"]["vlan"])
        t_delete = time.monotonic()
        for ns, name in victims:
            co.delete_namespaced_custom_object(bench.GROUP, bench.VERSION, ns, "proxmoxnetworks", name)
        gone: dict[str, float] = {}
        taken: dict[str, tuple[float, int]] = {}
        deadline = t_delete + reuse_delay + 600
        while len(taken) < release and time.monotonic() < deadline:
            items = co.list_cluster_custom_object(bench.GROUP, bench.VERSION, "proxmoxnetworks")["items"]
            now = time.monotonic()
            names = {x["metadata"]["name"] for x in items}
            for _, name in victims:
                if name not in names:
                    gone.setdefault(name, now)
            for x in items:
                name = x["metadata"]["name"]
                if name.startswith("wait-") and name not in taken:
                    c = next((c for c in (x.get("status") or {}).get("conditions") or []
                              if c.get("type") == "VLANAllocated"), {})
                    if c.get("status") == "True":
                        taken[name] = (now, x["status"]["vlan"])
            time.sleep(0.5)
        r["released_gone_s"] = max(gone.values()) - t_delete if len(gone) == release else None
        r["taken"] = len(taken)
        if taken:
            r["first_taken_after_delete_s"] = min(t for t, _ in taken.values()) - t_delete
            r["last_taken_after_delete_s"] = max(t for t, _ in taken.values()) - t_delete
        r["taken_ids_are_released_ids"] = {v for _, v in taken.values()} == released_ids
        if len(taken) < release:
            r["failures"].append(f"only {len(taken)}/{release} waiting networks took a released ID")
        if taken and len(gone) == release and r["first_taken_after_delete_s"] < reuse_delay:
            r["failures"].append(f"a released ID was taken {r['first_taken_after_delete_s']:.1f}s after the delete, "
                                 f"before the {reuse_delay:g}s reuse delay")
        if not r["taken_ids_are_released_ids"]:
            r["failures"].append("the waiting networks did not take exactly the released IDs")
        final = bench.check_allocation(co, space, prefix="")
        r["final_distinct_ids"], r["final_duplicated_ids"] = final["distinct_ids"], final["duplicated_ids"]
        r["failures"] += bench.allocation_failures(final)
        r["final_rss_mib"] = bench.rss_mib(ctl.pid)
        log(f"[space] released {release}: gone {_f(r['released_gone_s'])}s after the delete; taken by the waiting "
            f"{_f(r.get('first_taken_after_delete_s'))}-{_f(r.get('last_taken_after_delete_s'))}s after it "
            f"(delay {reuse_delay:g}s); the same IDs: {r['taken_ids_are_released_ids']}; final: "
            f"{final['distinct_ids']} distinct, {final['duplicated_ids']} duplicated")
        for f in r["failures"]:
            log(f"[space] FAILED: {f}")
        return r
    finally:
        teardown(ctl, admin, cluster)


def render_space(r: dict[str, Any]) -> str:
    ex = r.get("exhausted") or {}
    return "\n".join([
        SPACE_BEGIN, "",
        "| networks | converged s | distinct IDs / duplicated | RSS MiB | one network more | released | gone s | "
        "taken by the waiting, s after the delete | reuse delay s | same IDs | final distinct / duplicated | check |",
        "|---:|---:|---|---:|---|---:|---:|---|---:|---|---|---|",
        f"| {r['networks']} | {_f(r.get('converge_s'))} | {r.get('distinct_ids', '—')} / {r.get('duplicated_ids', '—')} | "
        f"{_f(r.get('rss_mib'))} | {ex.get('status', '—')} {ex.get('reason', '')} | {r['released']} | "
        f"{_f(r.get('released_gone_s'))} | {_f(r.get('first_taken_after_delete_s'))}–"
        f"{_f(r.get('last_taken_after_delete_s'))} | {r['reuse_delay_s']:g} | {r.get('taken_ids_are_released_ids', '—')} | "
        f"{r.get('final_distinct_ids', '—')} / {r.get('final_duplicated_ids', '—')} | "
        f"{'FAILED: ' + '; '.join(r['failures']) if r['failures'] else 'ok'} |",
        "", f"The message of network {r['networks'] + 1}: `{ex.get('message', '—')}`", "", SPACE_END])


def _f(v: Any, fmt: str = ".1f") -> str:
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
            f"{p['addresses']} / {p['machines']} | {r['networks']} | {_f(r.get('synced_s'))} | "
            f"{_f(r.get('converge_s'))} | {_f(r.get('start_pass_s'))} | {r.get('start_writes', '—')} | "
            f"{_f(r.get('peak_rss_mib'))} | {_f(r.get('settled_rss_mib'))} | "
            f"{_f(r.get('rest_cpu_s'))} in {_f(r.get('rest_wall_s'), '.0f')} s / {r.get('rest_writes', '—')} | "
            f"{_f(r.get('restart_synced_s'))} / {_f(r.get('restart_pass_s'))} / {r.get('restart_writes', '—')} | "
            f"{_f(r.get('restart_peak_rss_mib'))} | {'FAILED: ' + '; '.join(r['failures']) if r['failures'] else 'ok'} |")
    lines += ["", END]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="population as a fraction of the issue's (1 = full)")
    ap.add_argument("--networks", type=int, default=4000)
    ap.add_argument("--rest", type=float, default=600.0, help="seconds of rest measured")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--controller-tree", type=Path, default=None, help="run the controller from this checkout")
    ap.add_argument("--label", default="this tree")
    ap.add_argument("--out", type=Path, default=None, help="write the table here (between the scale markers)")
    ap.add_argument("--json", type=Path, default=None, help="append the run's figures to this JSON list")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, audit)")
    ap.add_argument("--vlan-space", action="store_true",
                    help="the full-VLAN-space run instead (issue 29 item 3): 4,094 networks on one provider, then more")
    ap.add_argument("--reuse-delay", type=float, default=60.0, help="--vlan-reuse-delay of the VLAN-space run, seconds")
    ap.add_argument("--release", type=int, default=100, help="networks released (and waiting) in the VLAN-space run")
    ap.add_argument("--space", type=int, default=VLAN_SPACE, help="the VLAN-space run's zone range 1-SPACE (4094: all)")
    args = ap.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="pnc-scale-"))
    if args.vlan_space:
        try:
            r = run_vlan_space(workdir, args.controller_tree, args.reuse_delay, args.release, args.threads, args.space)
        finally:
            if not args.keep:
                shutil.rmtree(workdir, ignore_errors=True)
        if args.out is not None:
            bench.write_block(args.out, render_space(r), SPACE_BEGIN, SPACE_END, "A full VLAN space (hack/bench_scale.py --vlan-space)")
        if args.json is not None:
            args.json.write_text(json.dumps(r, indent=1))
        print(render_space(r))
        return 1 if r["failures"] else 0
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
        bench.write_block(args.out, render(runs), BEGIN, END, "Cluster scale (hack/bench_scale.py)")
    print(render(runs))
    return 1 if r["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
