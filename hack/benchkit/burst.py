"""Issue 12's burst, repeated: does one controller process give two Vlans the same ID
(hack/burst.py: the command line and its description)."""

from __future__ import annotations

import argparse
import collections
import datetime as _dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from hack.bed import LocalCluster
from hack.benchkit.controller import Controller, teardown
from hack.benchkit.load import GROUP, NAMESPACES, VERSION, in_threads, network_body

PROVIDER = "physnet1"
ZONES = 5


def start_controller(cluster: LocalCluster, log_path: Path, tree: Path) -> Controller:
    """A benchmark :class:`Controller` running ``python -m controller.main`` from ``tree`` (its cwd and
    PYTHONPATH), checked on the child's cwd."""
    ctl = Controller(cluster, log_path, tree=tree)
    cwd = Path(os.readlink(f"/proc/{ctl.pid}/cwd")).resolve()
    if cwd != tree:
        ctl.stop()
        raise RuntimeError(f"the controller runs from {cwd}, not {tree}")
    return ctl


def code_hash(tree: Path) -> str:
    """A short hash of the tree's controller/ and informers/ sources (a run's code)."""
    h = hashlib.sha256()
    for f in sorted([*(tree / "controller").glob("*.py"), *(tree / "informers").glob("*.py")]):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:10]


def setup_objects(cluster: LocalCluster) -> None:
    """Namespaces bench-0..9, ProviderNetwork physnet1 (ready), zones zone-0..4 on it."""
    from kubernetes import client

    api = cluster.api_client("admin")
    try:
        core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
        for i in range(NAMESPACES):
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=f"bench-{i}")))
        co.create_cluster_custom_object("kubeovn.io", "v1", "provider-networks", {
            "apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork",
            "metadata": {"name": PROVIDER}, "spec": {"defaultInterface": "eth1"},
        })
        co.patch_cluster_custom_object_status("kubeovn.io", "v1", "provider-networks", PROVIDER,
                                              {"status": {"ready": True, "readyNodes": ["pve-1", "pve-2"]}})
        for z in range(ZONES):
            co.create_cluster_custom_object(GROUP, VERSION, "proxmoxnetworkzones", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "ProxmoxNetworkZone",
                "metadata": {"name": f"zone-{z}"},
                "spec": {"bridge": "vmbr1", "providerNetwork": PROVIDER, "vlanRanges": ["1-4094"]},
            })
    finally:
        api.close()


def tally(co) -> collections.Counter:
    """Networks by VLANAllocated outcome: ``Allocated`` (True), ``VLANConflict``, ``pending``
    (no status for the current generation yet) or another reason."""
    out: collections.Counter = collections.Counter()
    for net in co.list_cluster_custom_object(GROUP, VERSION, "proxmoxnetworks")["items"]:
        st = net.get("status") or {}
        if st.get("observedGeneration") != net["metadata"].get("generation"):
            out["pending"] += 1
            continue
        c = next((c for c in st.get("conditions") or [] if c.get("type") == "VLANAllocated"), None)
        if c is None:
            out["pending"] += 1
        elif c.get("status") == "True":
            out["Allocated"] += 1
        else:
            out[c.get("reason") or "?"] += 1
    return out


def error_lines(ctl: Controller) -> list[str]:
    ctl.poll_log()
    return [ln.get("event", "?") for ln in ctl.lines if ln.get("level") in ("error", "critical")]


def one_run(k: int, n: int, threads: int, tree: Path, workdir: Path, timeout: float, say) -> dict:
    from kubernetes import client

    r: dict = {"run": k, "n": n, "tree": str(tree), "code": code_hash(tree)}
    cluster = LocalCluster(workdir, with_nb=False)
    ctl: Controller | None = None
    admin = None
    try:
        cluster.start()
        say(f"[run {k}] bed up in {cluster.start_seconds:.1f}s")
        setup_objects(cluster)
        admin = cluster.api_client("admin")
        co = client.CustomObjectsApi(admin)
        ctl = start_controller(cluster, workdir / "controller.log", tree)
        ctl.wait_event("caches synced", 120)
        ctl.wait_event("resync complete", 120)

        def create(c, i: int) -> None:
            ns, body = network_body("net", i, f"zone-{i % ZONES}")
            c.create_namespaced_custom_object(GROUP, VERSION, ns, "proxmoxnetworks", body)

        failed: list[BaseException] = []

        def creator() -> None:
            try:
                in_threads(cluster, threads, n, create)
            except BaseException as err:  # reported after the wait
                failed.append(err)

        t0 = time.monotonic()
        th = threading.Thread(target=creator, name="creator")
        th.start()
        deadline = t0 + timeout
        while True:
            if not th.is_alive():
                r.setdefault("create_s", round(time.monotonic() - t0, 1))
            t = tally(co)
            if not th.is_alive() and t["Allocated"] + t["VLANConflict"] >= n:
                r["converge_s"] = round(time.monotonic() - t0, 1)
                break
            if time.monotonic() > deadline:
                r["converge_s"] = None
                r["timeout"] = f"{dict(t)} after {timeout:.0f}s"
                break
            if ctl.proc.poll() is not None:
                raise RuntimeError(f"controller exited ({ctl.proc.returncode}); see {ctl.log_path}")
            time.sleep(0.5)
        th.join()
        if failed:
            raise failed[0]

        vlans = [v for v in co.list_cluster_custom_object("kubeovn.io", "v1", "vlans")["items"]
                 if (v.get("spec") or {}).get("provider") == PROVIDER]
        ids = collections.Counter(v["spec"]["id"] for v in vlans)
        dups = sorted(vid for vid, c in ids.items() if c > 1)
        t = tally(co)
        r.update(
            vlans=len(vlans), distinct=len(ids), duplicates=len(dups), duplicate_ids=dups[:20],
            extra_holders=sum(c - 1 for c in ids.values() if c > 1),
            lowest=sorted(ids) == list(range(1, len(ids) + 1)) and len(ids) == n,
            allocated=t["Allocated"], conflict=t["VLANConflict"],
            other={k_: v for k_, v in t.items() if k_ not in ("Allocated", "VLANConflict")},
            log_errors=collections.Counter(error_lines(ctl)),
        )
        return r
    finally:
        teardown(ctl, admin, cluster)


def line(r: dict) -> str:
    if "error" in r:
        return f"run {r['run']:>2}: FAILED: {r['error']}"
    conv = f"{r['converge_s']:.1f}s" if r.get("converge_s") is not None else f"not converged ({r['timeout']})"
    s = (f"run {r['run']:>2} [{r['code']}]: vlans={r['vlans']} distinct={r['distinct']} duplicates={r['duplicates']}"
         f" allocated={r['allocated']} conflict={r['conflict']} lowest-1..N={'yes' if r['lowest'] else 'no'}"
         f" converge={conv}")
    if r["duplicates"]:
        s += f" dup-ids={r['duplicate_ids']}"
    if r["other"]:
        s += f" other={r['other']}"
    if r["log_errors"]:
        s += f" log-errors={dict(r['log_errors'])}"
    return s


def summary(results: list[dict], tree: Path) -> str:
    ok = [r for r in results if "error" not in r]
    dups = [r["duplicates"] for r in ok]
    conv = [r["converge_s"] for r in ok if r.get("converge_s") is not None]
    parts = [
        f"tree {tree}: {len(results)} runs, {len(results) - len(ok)} failed to run",
        f"runs with a duplicate {sum(1 for d in dups if d)}/{len(ok)}",
        f"duplicates per run {dups}",
    ]
    if conv:
        parts.append(f"convergence s min/median/max {min(conv):.1f}/{sorted(conv)[len(conv) // 2]:.1f}/{max(conv):.1f}")
    return "; ".join(parts)


def _git(tree: Path, *a: str) -> str:
    return subprocess.run(["git", *a], cwd=tree, capture_output=True, text=True).stdout


def command(args: argparse.Namespace, tree: Path) -> int:
    """The body of hack/burst.py with its parsed arguments, the controller run from ``tree``;
    the exit status."""
    timeout = args.timeout or max(300.0, args.networks * 0.3)
    base = args.workdir or Path(tempfile.mkdtemp(prefix="pnc-burst-"))
    base.mkdir(parents=True, exist_ok=True)
    dirty = _git(tree, "status", "--porcelain", "--", "controller", "informers")
    meta = {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "tree": str(tree), "commit": _git(tree, "rev-parse", "--short", "HEAD").strip(),
            "dirty": ", ".join(ln[3:] for ln in dirty.splitlines())}
    print(f"{meta['date']}: controller from {tree} at {meta['commit']}"
          f"{' + uncommitted ' + meta['dirty'] if meta['dirty'] else ''}; {args.runs} runs of N={args.networks}",
          flush=True)
    results: list[dict] = []
    say = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    try:
        for k in range(1, args.runs + 1):
            wd = base / f"run-{k}"
            try:
                r = one_run(k, args.networks, args.threads, tree, wd, timeout, say)
            except Exception as err:  # a bed that did not start, a controller that died
                r = {"run": k, "error": f"{type(err).__name__}: {err}"}
            results.append(r)
            print(line(r), flush=True)
            if not args.keep:
                shutil.rmtree(wd, ignore_errors=True)
            if args.json:
                args.json.write_text(json.dumps({"meta": meta, "runs": results}, indent=1, default=dict))
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    print(summary(results, tree), flush=True)
    return 0
