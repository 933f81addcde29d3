"""hack/bench.py's figures as markdown: the main tables, the gateway tables, the profiles'
top functions and the raw JSON."""

from __future__ import annotations

import io
import json
import pstats
from pathlib import Path

from hack.benchkit.gateway import NB_TXN, TRUNK_NODES
from hack.benchkit.load import LAYOUT_PER_ZONE, LAYOUT_TEXT

# The block of docs/performance.md this report replaces on a re-run; the text around it is kept.
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def profile_top(path: Path, limit: int = 25) -> str:
    out = io.StringIO()
    st = pstats.Stats(str(path), stream=out)
    st.sort_stats("tottime").print_stats(limit)
    out.write("\n")
    st.sort_stats("cumulative").print_stats(limit)
    return out.getvalue()


def figure(r: dict, key: str, fmt: str = ".2f") -> str:
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
        return figure(r, "converge_s")
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
        L.append(f"| {run_of(r)} | {figure(r, 'create_s')} | {conv} | {figure(r, 'floor_s')} | {figure(r, 'ratio')} | "
                 f"{figure(r, 'floor_full_s')} | {figure(r, 'ratio_full')} | {figure(r, 'converge_cpu_s')} |")
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
        L.append(f"| {run_of(r)} | {figure(r, 'rss_converged_mib', '.1f')} | {figure(r, 'rss_restarted_mib', '.1f')} | "
                 f"{figure(r, 'rss_steady_mib', '.1f')} | {r['converge_writes']} ({by}) |")
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
    """The whole block, its markers included."""
    runs = data.get("main", []) + data.get("gateway", [])
    dates = sorted(r["date"] for r in runs if r.get("date")) or [data["meta"]["date"]]
    codes = sorted({f"{r['commit']}{' + uncommitted changes in ' + r['dirty'] if r.get('dirty') else ''}"
                    for r in runs if r.get("commit")}) or [data["meta"]["commit"]]
    when = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    L = [
        BEGIN,
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
          "</details>", END]
    return "\n".join(L)
