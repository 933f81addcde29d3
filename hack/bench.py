#!/usr/bin/env python3
"""Performance benchmark: convergence, its API floor, restart recovery, steady state, memory.

    python hack/bench.py [--sizes 100,500,2000] [--zones 5] [--out docs/performance.md]
                         [--profile-size 500] [--workdir DIR] [--threads 4]
                         [--shared-provider] [--controller-tree DIR] [--label TEXT]

For each size N, on a fresh LocalCluster (etcd + kube-apiserver on loopback, no OVN NB):

1. ``zones`` ProxmoxNetworkZones, each with range 1-4094: by default each on its own
   ProviderNetwork (status ready); with ``--shared-provider`` all of them on ONE
   ProviderNetwork, so their ranges overlap completely and every allocation competes for the
   same IDs (the layout of issue 12).
2. The controller, a separate process as the controller user, waits with empty caches.
   ``--controller-tree DIR`` runs the controller from another checkout (e.g. a worktree of
   an earlier commit); the bed, the CRDs and this harness stay those of this tree.
3. Convergence: N ProxmoxNetworks (over 10 namespaces, round-robin over the zones) are
   created by ``threads`` admin threads; timed from the first create until every network has
   VLANAllocated=True/Allocated and status.observedGeneration == metadata.generation.
   (Ready stays False: there are no Subnets. That is expected.) When the count stops moving
   for 30 s after the creates are done (e.g. networks held in VLANConflict), the run is not
   converged: it is reported as a failure.
3b. Allocation check, after convergence: the Vlans of the bench networks per provider, the
   distinct IDs on each provider, every ID held by two Vlans of one provider, and the
   networks with VLANAllocated=True. A duplicate, a missing Vlan or a network not allocated
   fails the run: it is printed as FAILED, marked in the tables, and the exit status is 1.
   A failed run skips steps 4-6 (the floor, 7, is still measured).
4. Restart recovery: SIGTERM, start again with --resync-period=30s; time until the
   "resync complete" line of the start pass; controller writes in that window (audit log).
5. Steady state: the next periodic resync pass; its writes and controller CPU (utime+stime).
6. Memory: VmRSS after convergence and after the restart pass.
7. Floor (controller stopped): the same client library doing the same API work with no
   controller logic: per network create it, create its Vlan, add the finalizer (JSON patch),
   PUT the status; ``threads`` threads.

One size (``--profile-size``) runs the converging controller under yappi (hack/bench/
profiled_main.py; all threads, CPU clock) and the report lists the top functions.

Gateway runs (``--gateway 250x10,1000x1``: N networks spread over VPCS VPCs), each on a fresh
LocalCluster with an OVN NB (no SB/northd) and gateway management on; see ``run_gateway``:
start → every network RouterPortMissing; all router ports made in one NB transaction → time
until every network is GatewayReady=True, NB write transactions (the controller's
``cozy_proxmox_gateway_nb_transactions_total``), CPU, API writes; then a restart pass and a
periodic pass (NB transactions, API writes, CPU). ``--gateway-profile NxV`` runs one more
restart of that run under yappi.

    python hack/bench.py --sizes 100,500,2000 --profile-size 2000 \
        --gateway 250x10,500x10,1000x10,250x1,500x1,1000x1 --gateway-profile 1000x1 \
        --out docs/performance.md --json results.json
    python hack/bench.py --sizes '' --gateway 1000x1 --merge-json results.json --out ...  # redo a part
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
from typing import Sequence

REPO = Path(__file__).resolve().parent.parent
# The checkout the controller runs from (``--controller-tree``); the bed and CRDs are this tree's.
CONTROLLER_TREE = REPO
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack"))

from hack.bed import LocalCluster, free_ports  # noqa: E402
from hack.tools import audit  # noqa: E402

GROUP, VERSION = "proxmox.cozystack.io", "v1alpha1"
FINALIZER = "proxmox.cozystack.io/network"
NAMESPACES = 10
LAYOUT_PER_ZONE = "per-zone"  # one ProviderNetwork per zone (the figures before issue 12)
LAYOUT_SHARED = "shared"  # every zone on one ProviderNetwork, ranges overlapping (issue 12)
LAYOUT_TEXT = {LAYOUT_PER_ZONE: "1 provider per zone", LAYOUT_SHARED: "all zones on 1 provider"}
CLK_TCK = os.sysconf("SC_CLK_TCK")
ANALYSIS_MARKER = "<!-- analysis: kept by hack/bench.py -->"


# --------------------------------------------------------------------------- process probes


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
            cmd, cwd=tree, stdout=self._log, stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=str(tree)),
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


# --------------------------------------------------------------------------- objects


def zone_provider(z: int, shared_provider: bool = False) -> str:
    """The ProviderNetwork of zone ``z``: its own, or the one every zone shares."""
    return "bench-pn-0" if shared_provider else f"bench-pn-{z}"


def provider_names(zones: int, shared_provider: bool = False) -> list[str]:
    return sorted({zone_provider(z, shared_provider) for z in range(zones)})


def setup_objects(cluster: LocalCluster, zones: int, shared_provider: bool = False) -> None:
    """Namespaces, ProviderNetworks (ready) and ``zones`` zones with range 1-4094, each on
    its own provider, or with ``shared_provider`` all on one (overlapping ranges)."""
    from kubernetes import client

    api = cluster.api_client("admin")
    try:
        core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
        for i in range(NAMESPACES):
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=f"bench-{i}")))
        for k, pn in enumerate(provider_names(zones, shared_provider)):
            co.create_cluster_custom_object("kubeovn.io", "v1", "provider-networks", {
                "apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork",
                "metadata": {"name": pn}, "spec": {"defaultInterface": f"eth{k + 1}"},
            })
            co.patch_cluster_custom_object_status("kubeovn.io", "v1", "provider-networks", pn,
                                                  {"status": {"ready": True, "readyNodes": ["pve-1", "pve-2"]}})
        for z in range(zones):
            co.create_cluster_custom_object(GROUP, VERSION, "proxmoxnetworkzones", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "ProxmoxNetworkZone",
                "metadata": {"name": f"bench-z{z}"},
                "spec": {"bridge": f"vmbr{z}", "providerNetwork": zone_provider(z, shared_provider),
                         "vlanRanges": ["1-4094"]},
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


def check_allocation(co, n_expected: int, prefix: str = "net-") -> dict:
    """What the converged bed holds, read as admin: the bench networks' Vlans per provider,
    distinct IDs per provider, every ID two Vlans of one provider hold, and the networks
    with VLANAllocated=True (and whose ``status.vlan`` is their Vlan's ID)."""
    def raw(group: str, version: str, plural: str) -> list[dict]:
        resp = co.list_cluster_custom_object(group, version, plural, _preload_content=False)
        return json.loads(resp.data)["items"]

    vlans = [v for v in raw("kubeovn.io", "v1", "vlans")
             if ((v["metadata"].get("labels") or {}).get("proxmox.cozystack.io/network-name") or "").startswith(prefix)]
    holders: dict[str, dict[int, list[str]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    by_name = {}
    for v in vlans:
        spec = v.get("spec") or {}
        holders[spec.get("provider") or ""][spec.get("id")].append(v["metadata"]["name"])
        by_name[v["metadata"]["name"]] = v
    nets = [x for x in raw(GROUP, VERSION, "proxmoxnetworks") if x["metadata"]["name"].startswith(prefix)]
    allocated = mismatched = 0
    not_allocated: collections.Counter = collections.Counter()
    examples: list[str] = []
    for net in nets:
        st = net.get("status") or {}
        cond = next((c for c in st.get("conditions") or [] if c.get("type") == "VLANAllocated"), {})
        if cond.get("status") == "True":
            allocated += 1
            v = by_name.get(net["spec"]["subnet"])
            if v is None or (v.get("spec") or {}).get("id") != st.get("vlan"):
                mismatched += 1
        else:
            not_allocated[f"{cond.get('status')}/{cond.get('reason')}"] += 1
            if len(examples) < 5:
                examples.append(f"{net['metadata']['namespace']}/{net['metadata']['name']}: "
                                f"{cond.get('reason')}: {cond.get('message')}")
    duplicates = [{"provider": p, "id": vid, "vlans": sorted(names)}
                  for p, ids in sorted(holders.items()) for vid, names in sorted(ids.items(), key=lambda x: str(x[0]))
                  if len(names) > 1]
    return {
        "networks_expected": n_expected,
        "networks": len(nets),
        "vlans": len(vlans),
        "providers": {p: {"vlans": sum(len(x) for x in ids.values()), "distinct_ids": len(ids)}
                      for p, ids in sorted(holders.items())},
        "distinct_ids": sum(len(ids) for ids in holders.values()),
        "duplicated_ids": len(duplicates),
        "duplicates": duplicates[:50],
        "allocated": allocated,
        "allocated_status_mismatch": mismatched,
        "not_allocated_by_reason": dict(sorted(not_allocated.items())),
        "not_allocated_examples": examples,
    }


def allocation_failures(check: dict) -> list[str]:
    """Why an allocation check fails (empty: it passed)."""
    n = check["networks_expected"]
    out = []
    if check["duplicated_ids"]:
        out.append(f"{check['duplicated_ids']} VLAN ID(s) held by two or more Vlans of one provider, e.g. "
                   + "; ".join(f"{d['id']} on {d['provider']}: {d['vlans']}" for d in check["duplicates"][:3]))
    if check["networks"] != n:
        out.append(f"{check['networks']} networks exist, {n} expected")
    if check["vlans"] != n:
        out.append(f"{check['vlans']} Vlans for {n} networks")
    if check["distinct_ids"] != n:
        out.append(f"{check['distinct_ids']} distinct (provider, ID) pairs for {n} networks")
    if check["allocated"] != n:
        out.append(f"{check['allocated']}/{n} networks VLANAllocated=True; the others: "
                   f"{check['not_allocated_by_reason']}, e.g. {check['not_allocated_examples'][:2]}")
    if check["allocated_status_mismatch"]:
        out.append(f"{check['allocated_status_mismatch']} allocated networks whose status.vlan is not their Vlan's ID")
    return out


def mark(cluster: LocalCluster) -> str:
    """An audit-log marker written by the admin, once the audit log shows it."""
    m = audit.write_marker(cluster)
    audit.wait_for_marker(cluster, m)
    return m


def controller_writes_since(cluster: LocalCluster, marker: str) -> list:
    """The controller user's writes between ``marker`` and a new marker written now."""
    return audit.writes_before(cluster, cluster.controller_user, audit.write_marker(cluster), since_marker=marker,
                               timeout=60)

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


def run_size(n: int, zones: int, threads: int, workdir: Path, profile: Path | None, log=print,
             shared_provider: bool = False, settle: float = 30.0) -> dict:
    """One size: convergence, allocation check, restart, steady pass, floor (see the module
    docstring). ``r["failures"]`` lists what the allocation check found wrong (empty: passed);
    a failed run stops after the check."""
    from kubernetes import client

    layout = LAYOUT_SHARED if shared_provider else LAYOUT_PER_ZONE
    r: dict = {"n": n, "layout": layout, "zones": zones, "providers": len(provider_names(zones, shared_provider))}
    cluster = LocalCluster(workdir, with_nb=False)
    ctl: Controller | None = None
    admin = None
    try:
        cluster.start()
        log(f"[N={n} {layout}] cluster up in {cluster.start_seconds:.1f}s")
        setup_objects(cluster, zones, shared_provider)
        admin = cluster.api_client("admin")
        co = client.CustomObjectsApi(admin)

        # -- convergence ------------------------------------------------------------
        ctl = Controller(cluster, workdir / "controller-1.log", profile=profile)
        ctl.wait_event("caches synced", 120)
        ctl.wait_event("resync complete", 120)
        cpu0 = cpu_seconds(ctl.pid)
        start_marker = mark(cluster)

        t0 = time.monotonic()
        creator = threading.Thread(target=in_threads, args=(cluster, threads, n, lambda c, i: c.create_namespaced_custom_object(
            GROUP, VERSION, network_body("net", i, f"bench-z{i % zones}")[0], "proxmoxnetworks",
            network_body("net", i, f"bench-z{i % zones}")[1])))
        creator.start()
        deadline = t0 + max(180.0, n * 0.5)
        done, last_change, last_done = 0, time.monotonic(), -1
        stuck = ""
        while True:
            if not creator.is_alive():
                r.setdefault("create_s", time.monotonic() - t0)
            done = converged_count(co, n)
            now = time.monotonic()
            if done != last_done:
                last_done, last_change = done, now
            if done >= n:
                break
            if now > deadline:
                stuck = f"only {done}/{n} networks converged within {deadline - t0:.0f}s"
                break
            if not creator.is_alive() and now - last_change > settle:
                stuck = f"stuck at {done}/{n} networks converged: no progress for {settle:.0f}s after the creates"
                break
            if ctl.proc.poll() is not None:
                raise RuntimeError(f"controller exited; see {ctl.log_path}")
            time.sleep(0.25)
        r["converged"] = not stuck
        r["converged_count"] = done
        r["last_progress_s"] = last_change - t0  # when the converged count last moved
        r["converge_s"] = None if stuck else time.monotonic() - t0
        creator.join()
        r.setdefault("create_s", time.monotonic() - t0)
        r["converge_cpu_s"] = cpu_seconds(ctl.pid) - cpu0
        time.sleep(2)  # let trailing passes (events, namespace annotations) land
        w = controller_writes_since(cluster, start_marker)
        r["converge_writes"] = len(w)
        r["converge_writes_by"] = writes_by_resource(w)
        r["rss_converged_mib"] = rss_mib(ctl.pid)
        if stuck:
            log(f"[N={n} {layout}] NOT CONVERGED: {stuck}; see {ctl.log_path}")
        else:
            log(f"[N={n} {layout}] converged in {r['converge_s']:.2f}s (creates done in {r['create_s']:.2f}s), "
                f"{r['converge_writes']} writes, RSS {r['rss_converged_mib']:.1f} MiB")

        # -- allocation check --------------------------------------------------------
        r["check"] = check_allocation(co, n)
        r["failures"] = ([f"not converged: {stuck}"] if stuck else []) + allocation_failures(r["check"])
        c = r["check"]
        log(f"[N={n} {layout}] check: {c['vlans']} Vlans, distinct IDs per provider "
            f"{ {p: x['distinct_ids'] for p, x in c['providers'].items()} }, {c['duplicated_ids']} duplicated IDs, "
            f"{c['allocated']}/{n} VLANAllocated=True")
        if r["failures"]:
            for f in r["failures"]:
                log(f"[N={n} {layout}] FAILED: {f}")
            # Restart and steady state would measure a broken state; the floor (controller
            # stopped) is still measured, to compare the convergence figures with.
            ctl.stop()
            ctl = None
            run_floors(r, cluster, n, threads, log)
            return r

        # -- restart recovery -------------------------------------------------------
        m0 = mark(cluster)
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
        w = controller_writes_since(cluster, m1)
        r["restart_writes"] = len(w)
        r["restart_writes_by"] = writes_by_resource(w)
        r["rss_restarted_mib"] = rss_mib(ctl.pid)
        log(f"[N={n}] restart: resync complete {r['restart_s']:.2f}s after exec "
            f"({r['restart_after_sync_s']:.2f}s after caches synced), {r['restart_writes']} writes")
        del t_synced

        # -- steady state: the next periodic pass -------------------------------------
        m2 = mark(cluster)
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
        w = controller_writes_since(cluster, m2)
        r["steady_writes"] = len(w)
        r["steady_writes_by"] = writes_by_resource(w)
        r["rss_steady_mib"] = rss_mib(ctl.pid)
        log(f"[N={n}] steady pass: {r['steady_cpu_s']:.2f} CPU-s, {r['steady_wall_s']:.2f}s wall, "
            f"{r['steady_writes']} writes; RSS {r['rss_steady_mib']:.1f} MiB")
        ctl.stop()
        ctl = None

        run_floors(r, cluster, n, threads, log)
        return r
    finally:
        if ctl is not None:
            ctl.stop()
        if admin is not None:
            admin.close()
        cluster.stop()


def run_floors(r: dict, cluster: LocalCluster, n: int, threads: int, log=print) -> None:
    """The plain floor and floor+ (controller stopped), and convergence/floor when converged."""
    r["floor_s"] = run_floor(cluster, n, threads)
    r["floor_full_s"] = run_floor(cluster, n, threads, prefix="floorfull", full=True)
    if r.get("converge_s") is not None:
        r["ratio"] = r["converge_s"] / r["floor_s"]
        r["ratio_full"] = r["converge_s"] / r["floor_full_s"]
    log(f"[N={n}] floor {r['floor_s']:.2f}s; controller/floor = {_f(r, 'ratio')}; "
        f"floor with events+namespace patch {r['floor_full_s']:.2f}s, ratio {_f(r, 'ratio_full')}")


def _ts(line: dict) -> _dt.datetime:
    return _dt.datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00"))


# --------------------------------------------------------------------------- gateway


NB_TXN = "cozy_proxmox_gateway_nb_transactions_total"
TRUNK_NODES = 3
CHASSIS_ANNOTATION = "ovn.kubernetes.io/chassis"


def nb_txns(ctl: Controller) -> dict[str, float]:
    """NB write transactions the controller committed so far, by op (the metric)."""
    out: dict[str, float] = {}
    for labels, v in ctl.metric_by_label(NB_TXN).items():
        op = labels.partition('op="')[2].partition('"')[0] or labels
        out[op] = out.get(op, 0.0) + v
    return out


def nb_total(ctl: Controller) -> int:
    return int(sum(nb_txns(ctl).values()))


def gw_subnet(i: int) -> str:
    return network_body("net", i, "")[1]["spec"]["subnet"]


def gw_vpc(i: int, vpcs: int) -> str:
    return f"vpc-{i % vpcs}"


def setup_gateway_objects(cluster: LocalCluster, n: int, zones: int, vpcs: int, threads: int) -> None:
    """Trunk nodes, one pool per namespace, N bound Ready Subnets in ``vpcs`` VPCs, N networks,
    one logical router per VPC in the NB (router ports come later)."""
    from kubernetes import client

    api = cluster.api_client("admin")
    try:
        core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
        labels = {f"bench-pn-{z}.provider-network.kubernetes.io/ready": "true" for z in range(zones)}
        for k in range(TRUNK_NODES):
            core.create_node({"metadata": {"name": f"bench-node-{k}", "labels": labels,
                                           "annotations": {CHASSIS_ANNOTATION: f"ch-bench-{k}"}}})
        for j in range(NAMESPACES):
            ns = f"bench-{j}"
            co.create_namespaced_custom_object("ipam.cluster.x-k8s.io", "v1alpha2", ns, "inclusterippools", {
                "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
                "metadata": {"name": "pool", "namespace": ns},
                # A range per namespace: pools of one range in two namespaces are PoolOverlapsPool.
                "spec": {"addresses": [f"10.20.{j}.200-10.20.{j}.250"], "prefix": 24, "gateway": f"10.20.{j}.1"}})
            co.patch_namespaced_custom_object_status("ipam.cluster.x-k8s.io", "v1alpha2", ns, "inclusterippools", "pool",
                                                     {"status": {"ipAddresses": {"total": 51, "used": 0, "free": 51}}})
    finally:
        api.close()
    conds = {"status": {"conditions": [
        {"type": t, "status": "True", "reason": "Bench", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        for t in ("Validated", "Ready")]}}

    def one(co, i: int) -> None:
        sub = gw_subnet(i)
        p = f"10.20.{i % NAMESPACES}"  # the range of its namespace's pool (network_body)
        co.create_cluster_custom_object("kubeovn.io", "v1", "subnets", {
            "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": sub},
            "spec": {"vlan": sub, "cidrBlock": f"{p}.0/24", "gateway": f"{p}.1",
                     "excludeIps": [f"{p}.1", f"{p}.200..{p}.250"], "vpc": gw_vpc(i, vpcs)}})
        co.patch_cluster_custom_object_status("kubeovn.io", "v1", "subnets", sub, conds)
        ns, body = network_body("net", i, f"bench-z{i % zones}")
        co.create_namespaced_custom_object(GROUP, VERSION, ns, "proxmoxnetworks", body)

    in_threads(cluster, threads, n, one)
    args: list[str] = []
    for v in range(vpcs):
        args += ["--", "lr-add", f"vpc-{v}"]
    cluster.nbctl(*args[1:], timeout=60)


def create_router_ports(cluster: LocalCluster, n: int, vpcs: int) -> None:
    """Every network's router port ``<vpc>-<subnet>`` in one NB transaction (one ovn-nbctl run)."""
    args: list[str] = []
    for i in range(n):
        vpc = gw_vpc(i, vpcs)
        mac = f"00:00:00:{(i >> 16) & 255:02x}:{(i >> 8) & 255:02x}:{i & 255:02x}"
        args += ["--", "lrp-add", vpc, f"{vpc}-{gw_subnet(i)}", mac, f"10.{(i >> 8) & 255}.{i & 255}.1/24"]
    cluster.nbctl(*args[1:], timeout=120)


def gateway_count(co, n: int) -> tuple[int, int]:
    """(GatewayReady True/ChassisAssigned, GatewayReady False/RouterPortMissing) among the
    ``net-*`` networks, current generation only. Raw JSON: cheaper than the client's models."""
    resp = co.list_cluster_custom_object(GROUP, VERSION, "proxmoxnetworks", _preload_content=False)
    items = json.loads(resp.data)["items"]
    ready = missing = 0
    for net in items:
        st = net.get("status") or {}
        if st.get("observedGeneration") != net["metadata"].get("generation"):
            continue
        for c in st.get("conditions") or []:
            if c.get("type") == "GatewayReady":
                if c.get("status") == "True" and c.get("reason") == "ChassisAssigned":
                    ready += 1
                elif c.get("reason") == "RouterPortMissing":
                    missing += 1
                break
    return ready, missing


def nb_group_count(cluster: LocalCluster) -> int:
    out = cluster.nbctl("--bare", "--columns=_uuid", "list", "HA_Chassis_Group", timeout=60)
    return len(out.split())


def wait_until(what: str, fn, timeout: float, ctl: Controller, interval: float = 0.5) -> float:
    t0 = time.monotonic()
    while not fn():
        if ctl.proc.poll() is not None:
            raise RuntimeError(f"controller exited; see {ctl.log_path}")
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{what} not within {timeout}s; see {ctl.log_path}")
        time.sleep(interval)
    return time.monotonic() - t0


def run_gateway(n: int, vpcs: int, zones: int, threads: int, workdir: Path, profile: Path | None,
                log=print, profile_phase: str = "restart") -> dict:
    """Gateway management on, OVN NB on loopback (no SB/northd).

    1. Objects: trunk nodes, pools, N Ready Subnets in ``vpcs`` VPCs, N networks; no router ports.
    2. Controller start: every network reaches GatewayReady=False/RouterPortMissing.
    3. All router ports appear in one NB transaction; time until GatewayReady=True for all,
       NB write transactions (metric), controller CPU, API writes.
    4. Restart (resync 30s): the start pass and the next periodic pass: NB transactions,
       API writes, CPU and wall per pass.
    5. ``profile``: one more restart under yappi (start pass + one periodic pass); with
       ``profile_phase="converge"`` the first controller (steps 2-3) runs under yappi instead
       (its figures are then slowed by the profiler).
    """
    from kubernetes import client

    tag = f"N={n} vpcs={vpcs}"
    r: dict = {"n": n, "vpcs": vpcs, "per_vpc": n // vpcs, "trunk_nodes": TRUNK_NODES}
    cluster = LocalCluster(workdir, with_nb=True, with_sb=False)
    ctl: Controller | None = None
    admin = None
    try:
        cluster.start()
        setup_objects(cluster, zones)
        t = time.monotonic()
        setup_gateway_objects(cluster, n, zones, vpcs, threads)
        log(f"[gw {tag}] cluster up in {cluster.start_seconds:.1f}s, objects in {time.monotonic() - t:.1f}s")
        admin = cluster.api_client("admin")
        co = client.CustomObjectsApi(admin)
        nb = cluster.nb_tcp

        # -- first start: everything but the router ports ---------------------------------
        m0 = mark(cluster)
        ctl = Controller(cluster, workdir / "controller-1.log", nb=nb,
                         profile=profile if profile_phase == "converge" else None)
        r["first_s"] = wait_until("RouterPortMissing everywhere", lambda: gateway_count(co, n)[1] >= n,
                                  max(300.0, n * 0.5), ctl)
        ctl.wait_event("resync complete", 120)
        time.sleep(1)
        r["first_nb_txns"] = nb_total(ctl)
        w = controller_writes_since(cluster, m0)
        r["first_writes"] = len(w)
        r["first_writes_by"] = writes_by_resource(w)
        r["rss_first_mib"] = rss_mib(ctl.pid)
        log(f"[gw {tag}] start → RouterPortMissing for all: {r['first_s']:.1f}s, {r['first_writes']} API writes, "
            f"{r['first_nb_txns']} NB txns")

        # -- router ports appear: the groups converge -----------------------------------
        m1 = mark(cluster)
        tx0, cpu0 = nb_total(ctl), cpu_seconds(ctl.pid)
        nbpid = cluster._read_pids().get("ovsdb-nb")
        nbcpu0 = cpu_seconds(nbpid) if nbpid else 0.0
        t0 = time.monotonic()
        create_router_ports(cluster, n, vpcs)
        r["ports_create_s"] = time.monotonic() - t0
        r["gw_converge_s"] = wait_until("GatewayReady everywhere", lambda: gateway_count(co, n)[0] >= n,
                                        max(300.0, n * 0.5), ctl) + r["ports_create_s"]
        r["gw_converge_cpu_s"] = cpu_seconds(ctl.pid) - cpu0
        r["gw_converge_nb_txns"] = nb_total(ctl) - tx0
        r["gw_converge_nb_cpu_s"] = (cpu_seconds(nbpid) - nbcpu0) if nbpid else None
        time.sleep(2)  # trailing Events
        r["gw_converge_nb_txns_2s_later"] = nb_total(ctl) - tx0
        w = controller_writes_since(cluster, m1)
        r["gw_converge_writes"] = len(w)
        r["gw_converge_writes_by"] = writes_by_resource(w)
        r["groups_in_nb"] = nb_group_count(cluster)
        r["rss_converged_mib"] = rss_mib(ctl.pid)
        log(f"[gw {tag}] ports → GatewayReady for all: {r['gw_converge_s']:.2f}s, {r['gw_converge_nb_txns']} NB txns, "
            f"{r['gw_converge_cpu_s']:.2f} CPU-s, {r['gw_converge_writes']} API writes, {r['groups_in_nb']} groups")

        # -- restart: start pass and the next periodic pass ------------------------------
        ctl.stop()
        m2 = mark(cluster)
        ctl = Controller(cluster, workdir / "controller-2.log", resync="30s", nb=nb)
        synced = ctl.wait_event("caches synced", 120)
        first = ctl.wait_event("resync complete", max(120.0, n * 0.2))
        r["restart_s"] = time.monotonic() - ctl.started
        r["restart_after_sync_s"] = (_ts(first) - _ts(synced)).total_seconds()
        r["restart_cpu_s"] = cpu_seconds(ctl.pid)
        time.sleep(1)
        r["restart_nb_txns"] = nb_total(ctl)
        w = controller_writes_since(cluster, m2)
        r["restart_writes"] = len(w)
        r["restart_writes_by"] = writes_by_resource(w)
        r["rss_restarted_mib"] = rss_mib(ctl.pid)
        ctl.poll_log()
        r["restart_nb_not_synced"] = sum(1 for ln in ctl.lines if "not synced" in str(ln.get("error", "")))
        log(f"[gw {tag}] restart pass {r['restart_after_sync_s']:.2f}s after caches synced, "
            f"{r['restart_nb_txns']} NB txns, {r['restart_writes']} API writes")

        m3 = mark(cluster)
        marks: dict[str, float] = {}

        def on_line(ln: dict) -> None:
            if ln.get("event") == "resync started" and "cpu" not in marks:
                marks["cpu"] = cpu_seconds(ctl.pid)
                marks["t"] = time.monotonic()
                marks["tx"] = nb_total(ctl)

        ctl.wait_event("resync started", 90, on_line=on_line)
        second = ctl.wait_event("resync complete", max(120.0, n * 0.2), count=2, on_line=on_line)
        r["steady_cpu_s"] = cpu_seconds(ctl.pid) - marks["cpu"]
        r["steady_wall_s"] = time.monotonic() - marks["t"]
        r["steady_pass_log_s"] = (_ts(second) - _ts(next(ln for ln in ctl.lines if ln.get("event") == "resync started"))).total_seconds()
        r["steady_nb_txns"] = nb_total(ctl) - marks["tx"]
        w = controller_writes_since(cluster, m3)
        r["steady_writes"] = len(w)
        r["steady_writes_by"] = writes_by_resource(w)
        r["rss_steady_mib"] = rss_mib(ctl.pid)
        log(f"[gw {tag}] periodic pass: {r['steady_cpu_s']:.2f} CPU-s, {r['steady_pass_log_s']:.2f}s, "
            f"{r['steady_nb_txns']} NB txns, {r['steady_writes']} API writes; RSS {r['rss_steady_mib']:.1f} MiB")
        ctl.stop()
        ctl = None

        if profile is not None and profile_phase == "restart":
            ctl = Controller(cluster, workdir / "controller-3.log", resync="20s", nb=nb, profile=profile)
            ctl.wait_event("resync complete", max(180.0, n * 0.5))
            ctl.wait_event("resync complete", max(180.0, n * 0.5), count=2)
            ctl.stop()
            ctl = None
        return r
    finally:
        if ctl is not None:
            ctl.stop()
        if admin is not None:
            admin.close()
        cluster.stop()


# --------------------------------------------------------------------------- report


def profile_top(path: Path, limit: int = 25) -> str:
    out = io.StringIO()
    st = pstats.Stats(str(path), stream=out)
    st.sort_stats("tottime").print_stats(limit)
    out.write("\n")
    st.sort_stats("cumulative").print_stats(limit)
    return out.getvalue()


def _f(r: dict, key: str, fmt: str = ".2f") -> str:
    """A figure of a run, or "–" when the run has none (a failed run stops early)."""
    v = r.get(key)
    return "–" if v is None else format(v, fmt)


def code_of(r: dict) -> str:
    """The controller code of a run: commit, ``+wt`` with uncommitted changes, and its label."""
    code = f"{r.get('commit') or '?'}{'+wt' if r.get('dirty') else ''}"
    return f"{code} ({r['label']})" if r.get("label") else code


def run_of(r: dict) -> str:
    """N, layout and code of a run, for the first cell of a row."""
    return f"{r['n']} | {LAYOUT_TEXT[r.get('layout', LAYOUT_PER_ZONE)]} | {code_of(r)}"


def convergence_cell(r: dict) -> str:
    if r.get("converged", True):
        return _f(r, "converge_s")
    last = r.get("last_progress_s")
    return (f"**not converged** ({r.get('converged_count')}/{r['n']}"
            + (f", last one at {last:.2f} s" if last is not None else "") + ")")


def verdict(r: dict) -> str:
    if "check" not in r:
        return "not checked (run before the check existed)"
    return "**FAILED**: " + "; ".join(r["failures"]) if r.get("failures") else "ok"


def main_order(r: dict) -> tuple:
    return (r["n"], r.get("label", ""), r.get("layout", LAYOUT_PER_ZONE) != LAYOUT_PER_ZONE, r.get("date", ""))


def render_main(results: list[dict], zones: int, threads: int, profile_n: int | None, profile_text: str | None) -> list[str]:
    results = sorted(results, key=main_order)
    L = [
        "## Convergence, restart, steady state, memory (gateway management off)", "",
        f"{zones} zones, {threads} creating threads, controller with 4 workers, no OVN NB. Layout: *1 provider per "
        "zone* (each zone on its own ProviderNetwork, range 1-4094) or *all zones on 1 provider* (`--shared-provider`: "
        "every zone on one ProviderNetwork, every range 1-4094, so all allocations compete for the same IDs). Code: the "
        "controller's commit, `+wt` with the uncommitted changes of its tree (listed in the JSON as `dirty`), and the "
        "run's label.", "",
        "| N | layout | code | create N (admin) s | convergence s | floor s | controller/floor | floor+events+ns s | controller/floor+ | controller CPU during convergence s |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        conv = convergence_cell(r)
        L.append(f"| {run_of(r)} | {_f(r, 'create_s')} | {conv} | {_f(r, 'floor_s')} | {_f(r, 'ratio')} | "
                 f"{_f(r, 'floor_full_s')} | {_f(r, 'ratio_full')} | {_f(r, 'converge_cpu_s')} |")
    L += ["", "Allocation check after convergence (admin reads of the Vlans and networks; a duplicate or a network "
          "not allocated fails the run and the benchmark exits 1):", "",
          "| N | layout | code | date | convergence s | controller writes | Vlans | distinct IDs per provider | "
          "duplicated IDs | VLANAllocated=True | verdict |",
          "|---:|---|---|---|---:|---:|---:|---|---:|---:|---|"]
    for r in results:
        c = r.get("check")
        conv = convergence_cell(r)
        head = f"| {run_of(r)} | {r.get('date', '')} | {conv} | {r.get('converge_writes', '–')} |"
        if c is None:
            L.append(f"{head} – | – | – | – | {verdict(r)} |")
            continue
        per = ", ".join(f"{p}: {x['distinct_ids']}" for p, x in c["providers"].items())
        L.append(f"{head} {c['vlans']} | {per} | {c['duplicated_ids']} | "
                 f"{c['allocated']}/{c['networks_expected']} | {verdict(r)} |")
    L += ["", "| N | layout | code | old process: SIGTERM→exit s (writes) | restart: exec→resync complete s | caches synced→resync complete s | "
          "writes by restarted controller | steady pass CPU s | steady pass wall s | writes per resync |",
          "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if r.get("restart_s") is None:
            L.append(f"| {run_of(r)} | – | – | – | – | – | – | – |")
            continue
        L.append(f"| {run_of(r)} | {r['stop_s']:.1f} ({r['shutdown_writes']}) | {r['restart_s']:.2f} | {r['restart_after_sync_s']:.2f} | "
                 f"{r['restart_writes']} | {r['steady_cpu_s']:.2f} | {r['steady_wall_s']:.2f} | {r['steady_writes']} |")
    L += ["", "| N | layout | code | RSS after convergence MiB | RSS after restart pass MiB | RSS after steady pass MiB | controller writes during convergence |",
          "|---:|---|---|---:|---:|---:|---|"]
    for r in results:
        by = ", ".join(f"{k}: {v}" for k, v in r["converge_writes_by"].items())
        L.append(f"| {run_of(r)} | {_f(r, 'rss_converged_mib', '.1f')} | {_f(r, 'rss_restarted_mib', '.1f')} | "
                 f"{_f(r, 'rss_steady_mib', '.1f')} | {r['converge_writes']} ({by}) |")
    L.append("")
    if profile_text:
        L += [f"### Profile (N={profile_n}, converging controller (create → converge → SIGTERM) under yappi, CPU clock, all threads)", "",
              "```", profile_text.strip(), "```", ""]
    return L


def render_gateway(results: list[dict], zones: int, profile_tag: str | None, profile_text: str | None,
                   converge_tag: str | None = None, converge_text: str | None = None) -> list[str]:
    L = [
        "## Gateway (HA_Chassis_Group per network in OVN NB)", "",
        f"Gateway management on (`--manage-gateway-chassis=true`, NB over tcp on loopback, no SB/northd), {zones} zones, "
        f"{TRUNK_NODES} trunk nodes, controller with 4 workers. NB transactions from the controller's "
        f"`{NB_TXN}` metric; API writes from the audit log.", "",
        "| N | VPCs | networks per VPC | start → all RouterPortMissing s | router ports → all GatewayReady s | NB txns | "
        "NB txns per network | controller CPU s | CPU ms per network | ovsdb-server CPU s | API writes | groups in NB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in results:
        by = ", ".join(f"{k}: {v}" for k, v in r["gw_converge_writes_by"].items())
        nbcpu = r.get("gw_converge_nb_cpu_s")
        L.append(f"| {r['n']} | {r['vpcs']} | {r['per_vpc']} | {r['first_s']:.1f} | {r['gw_converge_s']:.2f} | "
                 f"{r['gw_converge_nb_txns']} | {r['gw_converge_nb_txns'] / r['n']:.2f} | {r['gw_converge_cpu_s']:.2f} | "
                 f"{1000 * r['gw_converge_cpu_s'] / r['n']:.1f} | {'' if nbcpu is None else f'{nbcpu:.2f}'} | "
                 f"{r['gw_converge_writes']} ({by}) | {r['groups_in_nb']} |")
    L += ["", "| N | VPCs | restart: caches synced→resync complete s | restart pass NB txns | restart pass API writes | "
          "periodic pass s | periodic pass CPU s | CPU ms per network | periodic pass NB txns | periodic pass API writes | "
          "RSS converged MiB | RSS after periodic pass MiB |",
          "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        L.append(f"| {r['n']} | {r['vpcs']} | {r['restart_after_sync_s']:.2f} | {r['restart_nb_txns']} | {r['restart_writes']} | "
                 f"{r['steady_pass_log_s']:.2f} | {r['steady_cpu_s']:.2f} | {1000 * r['steady_cpu_s'] / r['n']:.2f} | "
                 f"{r['steady_nb_txns']} | {r['steady_writes']} | {r['rss_converged_mib']:.1f} | {r['rss_steady_mib']:.1f} |")
    L.append("")
    if profile_text:
        L += [f"### Profile ({profile_tag}: a restarted controller's start pass and one periodic pass under yappi, "
              "CPU clock, all threads)", "", "```", profile_text.strip(), "```", ""]
    if converge_text:
        L += [f"### Profile ({converge_tag}: the first controller, start → RouterPortMissing → router ports → "
              "GatewayReady, under yappi, CPU clock, all threads)", "", "```", converge_text.strip(), "```", ""]
    return L


def render(data: dict) -> str:
    runs = data.get("main", []) + data.get("gateway", [])
    dates = sorted(r["date"] for r in runs if r.get("date")) or [data["meta"]["date"]]
    codes = sorted({f"{r['commit']}{' + uncommitted changes in ' + r['dirty'] if r.get('dirty') else ''}"
                    for r in runs if r.get("commit")}) or [data["meta"]["commit"]]
    when = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    L = [
        "# Performance", "",
        f"Measured {when} on a machine with `nproc` = {data['meta']['nproc']}, by `python hack/bench.py` "
        f"(code at {'; '.join(codes)}: each row of the main tables names its code; "
        "all on loopback). The machine was shared with other engineers' test runs, so single figures "
        "vary by ±30%: compare ratios within one table rather than absolute seconds, and rows of one date with each other. "
        "The targets, the reading of the profiles and the findings are under [Reading](#reading) below.", "",
    ]
    if data.get("main"):
        L += render_main(data["main"], data["meta"]["zones"], data["meta"]["threads"], data.get("main_profile_n"),
                         data.get("main_profile"))
    if data.get("gateway"):
        L += render_gateway(data["gateway"], data["meta"]["zones"], data.get("gateway_profile_tag"),
                            data.get("gateway_profile"), data.get("gateway_converge_profile_tag"),
                            data.get("gateway_converge_profile"))
    slim = {k: v for k, v in data.items() if not k.endswith("_profile")}
    L += ["<details><summary>Raw results (JSON)</summary>", "", "```json", json.dumps(slim, indent=1), "```", "",
          "</details>", ""]
    return "\n".join(L)


def parse_gateway(spec: str) -> list[tuple[int, int]]:
    out = []
    for part in spec.split(","):
        if part:
            n, _, v = part.partition("x")
            out.append((int(n), int(v or 10)))
    return out


def _meta(args) -> dict:
    """Date, machine and the controller tree's commit (and its uncommitted product files)."""
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=CONTROLLER_TREE, capture_output=True, text=True).stdout

    dirty = git("status", "--porcelain", "--", "controller", "ovn", "informers")
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(), "zones": args.zones, "threads": args.threads,
        "commit": git("rev-parse", "--short", "HEAD").strip(),
        "dirty": ", ".join(line[3:] for line in dirty.splitlines()),
    }


def main_key(r: dict) -> tuple:
    return (r["n"], r.get("layout", LAYOUT_PER_ZONE), r.get("label", ""))


def gateway_key(r: dict) -> tuple:
    return (r["n"], r["vpcs"])


def _merge_runs(old: list[dict], new: list[dict], key) -> list[dict]:
    out = {key(x): x for x in old}
    out.update({key(x): x for x in new})
    return list(out.values())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,500", help="main benchmark sizes ('' to skip)")
    ap.add_argument("--zones", type=int, default=5)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--shared-provider", action="store_true",
                    help="main runs: every zone on ONE ProviderNetwork with overlapping ranges (1-4094 each); "
                         "default: one ProviderNetwork per zone")
    ap.add_argument("--controller-tree", type=Path, default=None,
                    help="run the controller from this checkout (e.g. a git worktree of an earlier commit); "
                         "main runs only")
    ap.add_argument("--label", default=None,
                    help="name of this code in the tables (default: none for this tree, the commit for "
                         "--controller-tree); a run replaces an earlier one with the same N, layout and label")
    ap.add_argument("--gateway", default="", help="gateway runs as NxVPCS,... e.g. 250x10,500x10,1000x10,1000x1")
    ap.add_argument("--gateway-profile", default="", help="one gateway run (NxVPCS) profiled with yappi")
    ap.add_argument("--gateway-profile-phase", choices=("restart", "converge"), default="restart",
                    help="restart: one more restart (start pass + a periodic pass) under yappi; "
                         "converge: the first controller (start, router ports → GatewayReady) under yappi")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown tables here")
    ap.add_argument("--json", type=Path, default=None, help="also write raw results here")
    ap.add_argument("--merge-json", type=Path, action="append", default=[],
                    help="start from the results in this JSON file (runs of this invocation replace its sections)")
    ap.add_argument("--profile-size", type=int, default=None,
                    help="run this N's converging controller under yappi (its figures are then slowed by the profiler)")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, audit)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    gw_runs = parse_gateway(args.gateway)
    if gw_runs and (args.shared_provider or args.controller_tree or args.label):
        ap.error("--shared-provider, --controller-tree and --label apply to main runs only (the gateway tables "
                 "do not tell layouts or trees apart): run them without --gateway")
    global CONTROLLER_TREE
    if args.controller_tree is not None:
        CONTROLLER_TREE = args.controller_tree.resolve()
        if not (CONTROLLER_TREE / "controller" / "main.py").exists():
            ap.error(f"--controller-tree {CONTROLLER_TREE}: no controller/main.py there")
    label = args.label if args.label is not None else (
        "" if CONTROLLER_TREE == REPO else _meta(args)["commit"])
    layout = LAYOUT_SHARED if args.shared_provider else LAYOUT_PER_ZONE
    failed: list[str] = []
    base = args.workdir or Path(tempfile.mkdtemp(prefix="pnc-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    data: dict = {}
    for path in args.merge_json:
        loaded = json.loads(path.read_text())
        if isinstance(loaded, dict):
            # Runs of an earlier results file keep the code they were measured with.
            old = loaded.get("meta") or {}
            for key in ("main", "gateway"):
                for x in loaded.get(key) or []:
                    x.setdefault("commit", old.get("commit"))
                    x.setdefault("dirty", old.get("dirty", ""))
        loaded = loaded if isinstance(loaded, dict) else {"main": loaded}
        # Several files: their runs add up (a later run with the same key replaces an earlier one).
        merged = {key: _merge_runs(data.get(key, []), loaded.get(key, []), fn)
                  for key, fn in (("main", main_key), ("gateway", gateway_key)) if key in data or key in loaded}
        data.update(loaded)
        data.update(merged)
    data["meta"] = {**data.get("meta", {}), **_meta(args)}
    say = lambda s: print(f"[{time.strftime('%H:%M:%S')}] {s}", file=sys.stderr, flush=True)  # noqa: E731

    def save() -> None:
        if args.json:
            args.json.write_text(json.dumps(data, indent=1))

    try:
        if sizes:
            for n in sizes:
                prof = base / f"profile-{n}.pstat" if args.profile_size == n else None
                r = run_size(n, args.zones, args.threads, base / f"n{n}-{layout}", prof, log=say,
                             shared_provider=args.shared_provider)
                meta = _meta(args)
                r.update(date=meta["date"], commit=meta["commit"], dirty=meta["dirty"], label=label,
                         tree=str(CONTROLLER_TREE))
                if r.get("failures"):
                    failed.append(f"N={n}, {LAYOUT_TEXT[layout]}, code {code_of(r)}: " + "; ".join(r["failures"]))

                data["main"] = sorted(_merge_runs(data.get("main", []), [r], main_key), key=main_order)
                if prof is not None and prof.exists():
                    data["main_profile"], data["main_profile_n"] = profile_top(prof), n
                save()
        if gw_runs:
            for n, vpcs in gw_runs:
                tag = f"{n}x{vpcs}"
                prof = base / f"gw-profile-{tag}.pstat" if args.gateway_profile == tag else None
                r = run_gateway(n, vpcs, args.zones, args.threads, base / f"g{tag}", prof, log=say,
                                profile_phase=args.gateway_profile_phase)
                r["date"] = _meta(args)["date"]
                if prof is not None and prof.exists():
                    key = "gateway_profile" if args.gateway_profile_phase == "restart" else "gateway_converge_profile"
                    data[key] = profile_top(prof)
                    data[key + "_tag"] = f"N={n}, {vpcs} VPC{'s' if vpcs != 1 else ''}"
                if prof is not None and args.gateway_profile_phase == "converge":
                    # Slowed by the profiler: kept apart from the tables.
                    data["gateway_converge_profiled_run"] = r
                else:
                    data["gateway"] = sorted(
                        [x for x in data.get("gateway", []) if (x["n"], x["vpcs"]) != (n, vpcs)] + [r],
                        key=lambda x: (-x["vpcs"], x["n"]))
                save()
    finally:
        save()
        if not args.keep and args.workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    text = render(data)
    if args.out:
        # Hand-written text after the marker survives a re-run.
        keep = ""
        if args.out.exists():
            old = args.out.read_text()
            if ANALYSIS_MARKER in old:
                keep = old[old.index(ANALYSIS_MARKER):]
        args.out.write_text(text + ("\n" + keep if keep else ""))
    print(text)
    if failed:
        say("\n" + "=" * 72 + "\nBENCHMARK FAILED: the allocation check found a broken state\n"
            + "\n".join(f"  * {f}" for f in failed) + "\n" + "=" * 72)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


def write_block(path: Path, block: str, begin: str, end: str, heading: str) -> None:
    """Replace the figures between the markers ``begin`` and ``end`` in ``path`` with
    ``block`` (which carries both markers); without the markers, append ``heading`` and it."""
    text = path.read_text() if path.exists() else ""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n## {heading}\n\n" + block + "\n"
    path.write_text(text)
