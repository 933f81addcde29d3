"""The chaos run's report: :func:`render_markdown` (the figures block of docs/reliability.md,
one for the subprocess runs and one for ``--pods``) and :func:`write_figures`, which replaces
that block in the document."""

from __future__ import annotations

import statistics
from pathlib import Path

from hack.chaoskit.config import BED_FAULT_KINDS, POD_FAULT_KINDS, ChaosResult
from hack.chaoskit.load import SHARED_PROVIDER


def render_markdown(res: ChaosResult) -> str:
    def stats(kind: str) -> tuple[int, int, str, str]:
        times = [f.converge_seconds for f in res.faults if f.kind == kind and f.converge_seconds is not None]
        total = sum(1 for f in res.faults if f.kind == kind)
        med = f"{statistics.median(times):.1f}" if times else "–"
        mx = f"{max(times):.1f}" if times else "–"
        return len(times), total, med, mx

    def spread(kind: str, attr: str) -> str:
        got = [getattr(f, attr) for f in res.faults if f.kind == kind and getattr(f, attr) is not None]
        return f"{statistics.median(got):.1f} / {max(got):.1f}" if got else "–"

    cfg = res.config
    pods = bool(cfg.get("pods"))
    rows = []
    labels = {"kill": "SIGKILL of the leader", "api": "kube-apiserver killed and restarted",
              "compact": "etcd compaction", "nb": "OVN NB ovsdb-server stopped and restarted",
              "kubeovn": "kube-ovn-controller SIGKILLed and restarted", "ipam": "IPAM provider SIGKILLed and restarted",
              "poddelete": "the leader's pod deleted", "podkill": "`kill -9` of the leader container's process",
              "rollout": "`kubectl rollout restart` under load",
              "oom": f"memory limit lowered to {cfg.get('oom_limit')} (OOM kill), then restored"}
    for kind in (*BED_FAULT_KINDS, *POD_FAULT_KINDS) if pods else ("kill", *BED_FAULT_KINDS):
        ok, total, med, mx = stats(kind)
        if pods:
            rows.append(f"| {labels[kind]} (`{kind}`) | {total} | {ok} | {spread(kind, 'leader_seconds')} | "
                        f"{spread(kind, 'ready_seconds')} | {spread(kind, 'leaderless_seconds')} | {med} | {mx} | "
                        f"{spread(kind, 'whole_seconds')} |")
        else:
            rows.append(f"| {labels[kind]} (`{kind}`) | {total} | {ok} | {med} | {mx} |")
    exits = res.replica_exits
    killed = sum(1 for e in exits if e["killed"])
    lost = sum(1 for e in exits if e["expected"] and not e["killed"])
    if pods:
        ooms = sum(1 for e in exits if e.get("oom") and e["expected"])
        stops = res.pod_stop_seconds
        exits_line = (f"* Container restarts (the kubelet's, in place): {len(exits)} — {killed} SIGKILLed by the harness, "
                      f"{ooms} OOM-killed at the lowered limit, {lost - ooms} exit 1 after losing the lease during an "
                      f"outage (as designed), **{len([e for e in exits if not e['expected']])}** unexpected (a crash, a "
                      f"liveness kill, an OOM kill at the shipped limit). Deleted pods: {len(stops)}, gone "
                      f"{statistics.median(stops) if stops else 0:.1f} s (median) / {max(stops) if stops else 0:.1f} s "
                      f"(max) after their deletion. Largest working set of a controller pod (kubelet summary API, "
                      f"every 5 s): {res.pod_working_set_max / 2**20:.0f} MiB of its {res.pod_memory_limit} limit.")
    else:
        exits_line = (f"* Replica exits: {len(exits)} — {killed} SIGKILLed by the harness, {lost} after losing the lease "
                      f"during an API outage (exit 1, as designed), "
                      f"**{len([e for e in exits if not e['expected']])}** unexpected.")
    pexits = res.peer_exits
    peers = res.peers or {}
    reasons: dict[tuple[str, bool, str], int] = {}
    for e in pexits:
        k = (e["peer"], bool(e["expected"]), e["why"])
        reasons[k] = reasons.get(k, 0) + 1
    peer_line = (f"* Peers: the real kube-ovn-controller {peers.get('kube-ovn-controller', '?')} and in-cluster IPAM "
                 f"provider {peers.get('ipam-provider', '?')}. Their own exits (not the harness's kills): {len(pexits)} — "
                 f"{sum(1 for e in pexits if e['expected'])} within a minute of an API server or NB outage or an etcd "
                 f"compaction (started again), **{sum(1 for e in pexits if not e['expected'])}** unexpected."
                 + "".join(f"\n  * {n} × {peer} {'after an outage' if exp else 'UNEXPECTEDLY'}: `{why}`"
                           for (peer, exp, why), n in reasons.items()))
    peer_line += (f"\n* Kube-OVN's own NB leftovers for the load's Subnets after teardown (not ours, not failed): "
                  f"{len(res.kube_ovn_leftovers)}"
                  + (f" ({', '.join(res.kube_ovn_leftovers[:3])}{', …' if len(res.kube_ovn_leftovers) > 3 else ''})"
                     if res.kube_ovn_leftovers else "")
                  + f". Claim-owned IPAddresses whose claim was gone, deleted by the harness's garbage collector: "
                  f"{res.gc_collected}"
                  + (" (the node bed's kube-controller-manager collects too)" if cfg.get("pods") else "")
                  + f"; addresses the provider had made for a claim the API server deleted under its new finalizer "
                  f"(kubernetes/kubernetes#77988), kept by its ProtectAddress finalizer until the harness removed it: "
                  f"{len(res.ipam_orphans)}.")
    pod_flags = (f"--pods --pod-deletes {cfg.get('pod_deletes', 0)} --pod-kills {cfg.get('pod_kills', 0)} "
                 f"--rollouts {cfg.get('rollouts', 0)} --ooms {cfg.get('ooms', 0)} " if pods else f"--kills {cfg['kills']} ")
    header = (["| Fault | Injected | Survived (converged) | New Lease holder (s, median / max) | Leader Ready (s) | "
               "Longest without a leader (s) | Converge median (s) | Converge max (s) | Deployment whole (s) |",
               "|---|---|---|---|---|---|---|---|---|"]
              if pods else ["| Fault | Injected | Survived (converged) | Converge median (s) | Converge max (s) |",
                            "|---|---|---|---|---|"])
    return "\n".join([
        f"Run of {res.started_utc} on {res.machine}; `python hack/chaos.py "
        f"{pod_flags}--api-restarts {cfg['api_restarts']} --compactions {cfg['compactions']} "
        f"--nb-restarts {cfg['nb_restarts']} --kubeovn-restarts {cfg.get('kubeovn_restarts', 0)} "
        f"--ipam-restarts {cfg.get('ipam_restarts', 0)} --slots {cfg['slots']} --initial-networks {cfg['initial_networks']} "
        f"--namespaces {cfg['namespaces']} --zones {cfg['zones']} --shared-zones {cfg.get('shared_zones', 0)} "
        f"--seed {cfg['seed']} "
        f"--manage-gateway {'true' if cfg.get('manage_gateway', True) else 'false'}"
        f"{'' if cfg.get('wire', True) else ' --wire false'}`"
        f"{f' at commit {res.commit}' if res.commit else ''}, wall time {res.wall_seconds / 60:.1f} min.",
        "",
        *header,
        *rows,
        "",
        f"* Invariant violations: **{len(res.violations)}** (duplicate VLAN on a provider; Vlan deleted while its "
        f"pool had a consumer or it listed a live Subnet). Vlan deletions judged: {res.vlan_deletions_checked} "
        f"(plus {res.vlan_deletions_unjudgeable} of networks the monitor never saw, for their Subnets only; final "
        f"judgement {'after the watches caught up with a fresh list' if res.monitor_caught_up else 'WITHOUT a confirmed catch-up'}); "
        f"Vlan watch events seen: {res.vlan_events}; monitor relists: {res.monitor_relists}; judgements a relist "
        f"gap left open (a consumer whose delete was only seen by a later relist) and not settled by the API "
        f"server's audit log: {len(res.uncertain)} ({len(res.resolved)} more settled clean by it); "
        f"monitor flags refuted by the API server's audit log: {len(res.refuted)}."
        + "".join(f"\n  * {r}" for r in res.refuted),
        f"* Convergence failures: **{len(res.convergence_failures)}**; teardown leftovers (Vlans, "
        f"`proxmox.cozystack.io/` finalizers, namespace annotations, HA_Chassis_Groups `px-*`, router ports still "
        f"pointing at a group; Subnets, pools, claims, addresses, machines the load deleted): "
        f"**{len(res.teardown_leftovers)}**.",
        exits_line,
        peer_line,
        *([f"* On the wire (hack/chaoskit/wire_monitor.py): a VM on the data plane pinged its gateway every 0.1 s through "
           f"the run: {res.wire['replies']} replies in {res.wire['seconds']:.0f} s, {res.wire['lost']} lost (due at, "
           f"s from the first reply: "
           f"{', '.join(str(t) for t in res.wire['lost_at'][:12]) or 'none'}"
           f"{', …' if len(res.wire['lost_at']) > 12 else ''}), longest gap between two replies "
           f"**{res.wire['longest_gap']:.2f} s**; the gateway port "
           f"{'moved: ' + ', '.join(res.wire['gateway_moves']) if res.wire['gateway_moves'] else 'never moved'}, "
           f"its HA chassis group {'never rewritten' if res.wire['group_kept'] else 'REWRITTEN'}."]
          if res.wire else []),
        f"* Load: {sum(res.ops.values())} operations ({', '.join(f'{k} {v}' for k, v in sorted(res.ops.items()))}) over "
        f"{cfg['slots']} network slots, {cfg['zones']} zones on 2 provider networks"
        + (f" and {cfg['shared_zones']} zones sharing a third one (`{SHARED_PROVIDER}`, every one with range "
           f"{cfg.get('shared_range')})" if cfg.get("shared_zones") else "")
        + f", {cfg['namespaces']} namespaces; "
        f"initial {cfg['initial_networks']} networks Ready in {res.initial_converge_seconds}s; teardown "
        f"{res.teardown_seconds}s."
        + (" Vlans the monitor saw per provider (distinct IDs they held): " + ", ".join(
            f"{p} {x['vlans']} ({x['ids']})" for p, x in res.vlans_by_provider.items()) + "."
           if res.vlans_by_provider else ""),
    ])


FIGURES_BEGIN = "<!-- chaos-figures:begin -->"
FIGURES_END = "<!-- chaos-figures:end -->"
# The runs with --pods have a block of their own (docs/reliability.md "Chaos on the pods").
POD_FIGURES_BEGIN = "<!-- chaos-pod-figures:begin -->"
POD_FIGURES_END = "<!-- chaos-pod-figures:end -->"


def write_figures(doc: Path, res: ChaosResult) -> None:
    """Replace the figures block of ``doc`` (the pods' block for a ``--pods`` run; appended
    when missing) with :func:`render_markdown`."""
    begin, end = (POD_FIGURES_BEGIN, POD_FIGURES_END) if res.config.get("pods") else (FIGURES_BEGIN, FIGURES_END)
    text = doc.read_text() if doc.exists() else f"# Reliability\n\n{begin}\n{end}\n"
    if begin not in text:
        text += f"\n{begin}\n{end}\n"
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(f"{head}{begin}\n{render_markdown(res)}\n{end}{tail}")
