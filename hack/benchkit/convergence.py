"""One size of hack/bench.py's main runs (:func:`run_size`): convergence of N networks, the
allocation check, restart recovery, the next periodic pass, memory, then the API floor."""

from __future__ import annotations

import collections
import json
import threading
import time
from pathlib import Path

from hack.bed import LocalCluster
from hack.benchkit.controller import Controller, cpu_seconds, log_time, rss_mib, steady_pass, teardown
from hack.benchkit.floor import run_floors
from hack.benchkit.load import (
    GROUP, LAYOUT_PER_ZONE, LAYOUT_SHARED, VERSION, in_threads, network_body, provider_names, setup_objects,
)
from hack.benchkit.writes import mark, record_writes, writes_by_resource
from hack.tools import audit


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
        record_writes(r, "converge", cluster, start_marker)
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
        first = ctl.wait_event("resync complete", max(120.0, n * 0.2))
        r["restart_s"] = time.monotonic() - t1
        r["restart_after_sync_s"] = (log_time(first) - log_time(synced)).total_seconds()
        r["restart_cpu_s"] = cpu_seconds(ctl.pid)
        r["restart_log_writes"] = first.get("writes")
        record_writes(r, "restart", cluster, m1)
        r["rss_restarted_mib"] = rss_mib(ctl.pid)
        log(f"[N={n}] restart: resync complete {r['restart_s']:.2f}s after exec "
            f"({r['restart_after_sync_s']:.2f}s after caches synced), {r['restart_writes']} writes")

        # -- steady state: the next periodic pass -------------------------------------
        r["steady_log_writes"] = steady_pass(r, ctl, cluster, n).get("writes")
        log(f"[N={n}] steady pass: {r['steady_cpu_s']:.2f} CPU-s, {r['steady_wall_s']:.2f}s wall, "
            f"{r['steady_writes']} writes; RSS {r['rss_steady_mib']:.1f} MiB")
        ctl.stop()
        ctl = None

        run_floors(r, cluster, n, threads, log)
        return r
    finally:
        teardown(ctl, admin, cluster)
