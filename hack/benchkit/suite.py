"""hack/bench.py's body (:func:`run`): the main runs per size and the gateway runs, merged
with earlier results, rendered and written between the markers of ``out``."""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hack.benchkit import controller
from hack.benchkit.convergence import run_size
from hack.benchkit.document import write_block
from hack.benchkit.gateway import run_gateway
from hack.benchkit.load import LAYOUT_PER_ZONE, LAYOUT_SHARED, LAYOUT_TEXT
from hack.benchkit.report import BEGIN, END, code_of, main_order, profile_top, render

HEADING = "Convergence, restart, steady state, memory; gateway (hack/bench.py)"


def parse_gateway(spec: str) -> list[tuple[int, int]]:
    out = []
    for part in spec.split(","):
        if part:
            n, _, v = part.partition("x")
            out.append((int(n), int(v or 10)))
    return out


def meta(zones: int, threads: int) -> dict:
    """Date, machine and the controller tree's commit (and its uncommitted product files)."""
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=controller.CONTROLLER_TREE, capture_output=True, text=True).stdout

    dirty = git("status", "--porcelain", "--", "controller", "ovn", "informers")
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(), "zones": zones, "threads": threads,
        "commit": git("rev-parse", "--short", "HEAD").strip(),
        "dirty": ", ".join(line[3:] for line in dirty.splitlines()),
    }


def main_key(r: dict) -> tuple:
    return (r["n"], r.get("layout", LAYOUT_PER_ZONE), r.get("label", ""))


def gateway_key(r: dict) -> tuple:
    return (r["n"], r["vpcs"])


def merge_runs(old: list[dict], new: list[dict], key) -> list[dict]:
    out = {key(x): x for x in old}
    out.update({key(x): x for x in new})
    return list(out.values())


def run(*, sizes: list[int], gw_runs: list[tuple[int, int]], zones: int, threads: int, shared_provider: bool,
        label: str | None, gateway_profile: str, gateway_profile_phase: str, out: Path | None, json_out: Path | None,
        merge_json: list[Path], profile_size: int | None, workdir: Path | None, keep: bool) -> int:
    """Run, render and write; the exit status (1: an allocation check failed). The controller
    runs from :data:`hack.benchkit.controller.CONTROLLER_TREE`."""
    tree = controller.CONTROLLER_TREE
    if label is None:
        label = "" if tree == controller.REPO else meta(zones, threads)["commit"]
    layout = LAYOUT_SHARED if shared_provider else LAYOUT_PER_ZONE
    failed: list[str] = []
    base = workdir or Path(tempfile.mkdtemp(prefix="pnc-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    data: dict = {}
    for path in merge_json:
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
        merged = {key: merge_runs(data.get(key, []), loaded.get(key, []), fn)
                  for key, fn in (("main", main_key), ("gateway", gateway_key)) if key in data or key in loaded}
        data.update(loaded)
        data.update(merged)
    data["meta"] = {**data.get("meta", {}), **meta(zones, threads)}
    say = lambda s: print(f"[{time.strftime('%H:%M:%S')}] {s}", file=sys.stderr, flush=True)  # noqa: E731

    def save() -> None:
        if json_out:
            json_out.write_text(json.dumps(data, indent=1))

    try:
        for n in sizes:
            prof = base / f"profile-{n}.pstat" if profile_size == n else None
            r = run_size(n, zones, threads, base / f"n{n}-{layout}", prof, log=say, shared_provider=shared_provider)
            now = meta(zones, threads)
            r.update(date=now["date"], commit=now["commit"], dirty=now["dirty"], label=label, tree=str(tree))
            if r.get("failures"):
                failed.append(f"N={n}, {LAYOUT_TEXT[layout]}, code {code_of(r)}: " + "; ".join(r["failures"]))

            data["main"] = sorted(merge_runs(data.get("main", []), [r], main_key), key=main_order)
            if prof is not None and prof.exists():
                data["main_profile"], data["main_profile_n"] = profile_top(prof), n
            save()
        for n, vpcs in gw_runs:
            tag = f"{n}x{vpcs}"
            prof = base / f"gw-profile-{tag}.pstat" if gateway_profile == tag else None
            r = run_gateway(n, vpcs, zones, threads, base / f"g{tag}", prof, log=say,
                            profile_phase=gateway_profile_phase)
            r["date"] = meta(zones, threads)["date"]
            if prof is not None and prof.exists():
                key = "gateway_profile" if gateway_profile_phase == "restart" else "gateway_converge_profile"
                data[key] = profile_top(prof)
                data[key + "_tag"] = f"N={n}, {vpcs} VPC{'s' if vpcs != 1 else ''}"
            if prof is not None and gateway_profile_phase == "converge":
                # Slowed by the profiler: kept apart from the tables.
                data["gateway_converge_profiled_run"] = r
            else:
                data["gateway"] = sorted(
                    [x for x in data.get("gateway", []) if (x["n"], x["vpcs"]) != (n, vpcs)] + [r],
                    key=lambda x: (-x["vpcs"], x["n"]))
            save()
    finally:
        save()
        if not keep and workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    block = render(data)
    if out:
        write_block(out, block, BEGIN, END, HEADING)
    print(block)
    if failed:
        say("\n" + "=" * 72 + "\nBENCHMARK FAILED: the allocation check found a broken state\n"
            + "\n".join(f"  * {f}" for f in failed) + "\n" + "=" * 72)
        return 1
    return 0
