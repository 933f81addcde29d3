"""A full VLAN space: one provider's range taken whole by networks, the next network
refused, some released and taken again after the reuse delay (hack/bench_scale.py
``--vlan-space``: the command line and its description)."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from controller.runtime.kube import KubeWriter
from hack.bed import LocalCluster
from hack.benchkit.controller import Controller, rss_mib, teardown
from hack.benchkit.convergence import allocation_failures, check_allocation
from hack.benchkit.document import write_block
from hack.benchkit.load import GROUP, VERSION, in_threads
from hack.benchkit.scale import NETWORKS_PER_NAMESPACE, figure, network_namespace, post, wait_converged

SPACE_BEGIN, SPACE_END = "<!-- vlan-space:begin -->", "<!-- vlan-space:end -->"


VLAN_SPACE = 4094
SPACE_PROVIDER, SPACE_ZONE = "space-pn", "space-z"


def network_condition(co, ns: str, name: str, ctype: str = "VLANAllocated") -> dict[str, Any]:
    net = co.get_namespaced_custom_object(GROUP, VERSION, ns, "proxmoxnetworks", name)
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
    ctl: Controller | None = None
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
        post(w, f"/apis/{GROUP}/{VERSION}/proxmoxnetworkzones", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ProxmoxNetworkZone",
            "metadata": {"name": SPACE_ZONE},
            "spec": {"bridge": "vmbr1", "providerNetwork": SPACE_PROVIDER, "vlanRanges": [f"1-{space}"]}})
        w.api.close()
        admin = cluster.api_client("admin")
        co = client.CustomObjectsApi(admin)

        def create(prefix: str, first: int, count: int) -> None:
            def one(c, k: int) -> None:
                i = first + k
                ns = network_namespace(i)
                post(KubeWriter(c.api_client), f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/proxmoxnetworks", {
                    "apiVersion": f"{GROUP}/{VERSION}", "kind": "ProxmoxNetwork",
                    "metadata": {"name": f"{prefix}-{i}", "namespace": ns},
                    "spec": {"zone": SPACE_ZONE, "subnet": f"{ns}-{prefix}-{i}", "ipPool": "pool"}})
            in_threads(cluster, threads, count, one)

        ctl = Controller(cluster, workdir / "controller-space.log", tree=tree,
                               args=[f"--vlan-reuse-delay={reuse_delay:g}s"])
        ctl.wait_event("caches synced", 120)
        t0 = time.monotonic()
        create("net", 0, space)
        ok, done, why = wait_converged(co, space, ctl, timeout=1800)
        if not ok:
            r["failures"].append(f"not converged: {why}")
            return r
        r["converge_s"] = time.monotonic() - t0
        r["rss_mib"] = rss_mib(ctl.pid)
        check = check_allocation(co, space)
        r["distinct_ids"], r["duplicated_ids"] = check["distinct_ids"], check["duplicated_ids"]
        r["failures"] += allocation_failures(check)
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
            net = co.get_namespaced_custom_object(GROUP, VERSION, ns, "proxmoxnetworks", name)
            released_ids.add(net["status"]["vlan"])
        t_delete = time.monotonic()
        for ns, name in victims:
            co.delete_namespaced_custom_object(GROUP, VERSION, ns, "proxmoxnetworks", name)
        gone: dict[str, float] = {}
        taken: dict[str, tuple[float, int]] = {}
        deadline = t_delete + reuse_delay + 600
        while len(taken) < release and time.monotonic() < deadline:
            items = co.list_cluster_custom_object(GROUP, VERSION, "proxmoxnetworks")["items"]
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
        final = check_allocation(co, space, prefix="")
        r["final_distinct_ids"], r["final_duplicated_ids"] = final["distinct_ids"], final["duplicated_ids"]
        r["failures"] += allocation_failures(final)
        r["final_rss_mib"] = rss_mib(ctl.pid)
        log(f"[space] released {release}: gone {figure(r['released_gone_s'])}s after the delete; taken by the waiting "
            f"{figure(r.get('first_taken_after_delete_s'))}-{figure(r.get('last_taken_after_delete_s'))}s after it "
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
        f"| {r['networks']} | {figure(r.get('converge_s'))} | {r.get('distinct_ids', '—')} / {r.get('duplicated_ids', '—')} | "
        f"{figure(r.get('rss_mib'))} | {ex.get('status', '—')} {ex.get('reason', '')} | {r['released']} | "
        f"{figure(r.get('released_gone_s'))} | {figure(r.get('first_taken_after_delete_s'))}–"
        f"{figure(r.get('last_taken_after_delete_s'))} | {r['reuse_delay_s']:g} | {r.get('taken_ids_are_released_ids', '—')} | "
        f"{r.get('final_distinct_ids', '—')} / {r.get('final_duplicated_ids', '—')} | "
        f"{'FAILED: ' + '; '.join(r['failures']) if r['failures'] else 'ok'} |",
        "", f"The message of network {r['networks'] + 1}: `{ex.get('message', '—')}`", "", SPACE_END])


def command(args: argparse.Namespace) -> int:
    """The body of hack/bench_scale.py --vlan-space with its parsed arguments; the exit status."""
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="pnc-scale-"))
    try:
        r = run_vlan_space(workdir, args.controller_tree, args.reuse_delay, args.release, args.threads, args.space)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.out is not None:
        write_block(args.out, render_space(r), SPACE_BEGIN, SPACE_END, "A full VLAN space (hack/bench_scale.py --vlan-space)")
    if args.json is not None:
        args.json.write_text(json.dumps(r, indent=1))
    print(render_space(r))
    return 1 if r["failures"] else 0
