"""On the wire: N networks created at once on the data plane, the seconds from the burst's
start to the first answered ARP of each network's VM (hack/bench_wire.py: the command line
and its description)."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from kubernetes import client as k8s

from hack.bed import DATAPLANE_PROVIDER, LocalCluster, Prober
from hack.benchkit.controller import Controller
from hack.benchkit.document import write_block
from hack.tools.objects import Admin
from hack.tools.vms import vm_for_network

REPO = Path(__file__).resolve().parents[2]

BEGIN, END = "<!-- bench-wire:begin -->", "<!-- bench-wire:end -->"
PX = ("proxmox.cozystack.io", "v1alpha1")
NS = "bench-wire"


def create(admin: Admin, i: int, vpcs: int) -> None:
    """Network and Subnet ``wire-<i>`` (10.<100+i//250>.<i%250>.0/24) in VPC ``vpc-<i mod vpcs>``."""
    admin.create_proxmox_subnet(NS, f"wire-{i}", "bench", f"vpc-{i % vpcs}", f"10.{100 + i // 250}.{i % 250}")


def run(n: int, vpcs: int, workdir: Path, log=print) -> dict:
    cluster = LocalCluster(workdir, with_peers=True, with_dataplane=True)
    cluster.start()
    try:
        dp = cluster.dataplane
        assert dp is not None
        admin = Admin(cluster.api_client("admin"))
        co = admin.co
        admin.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NS)))
        admin.create_zone("bench", DATAPLANE_PROVIDER, ["2000-2999"])
        for v in range(vpcs):
            admin.create_vpc(f"vpc-{v}")
        ctl = Controller(cluster, workdir / "controller.log", nb=cluster.nb_tcp)
        ctl.wait_event("caches synced", timeout=120)
        t0 = time.monotonic()
        for i in range(n):
            create(admin, i, vpcs)
        created = time.monotonic() - t0
        probes: dict[int, Prober] = {}
        first: dict[int, float] = {}
        deadline = t0 + 600
        while len(first) < n and time.monotonic() < deadline:
            for i in range(n):
                if i not in probes:
                    st = co.get_namespaced_custom_object(*PX, NS, "proxmoxnetworks", f"wire-{i}").get("status") or {}
                    if st.get("vlan"):
                        vm = vm_for_network(dp, co, NS, f"wire-{i}", f"vm-{i}")
                        probes[i] = Prober(vm, "arping", vm.gateway, interval=0.1)
                elif i not in first and probes[i].replies:
                    first[i] = probes[i].replies[0] - t0
            time.sleep(0.05)
        for p in probes.values():
            p.stop()
        ctl.proc.terminate()
        ctl.proc.wait(30)
        if len(first) < n:
            raise SystemExit(f"only {len(first)} of {n} VMs answered within 600 s")
        times = sorted(first.values())
        return {"n": n, "vpcs": vpcs, "bed_start_s": round(cluster.start_seconds or 0, 1),
                "dataplane_start_s": round(dp.start_seconds or 0, 2), "create_s": round(created, 2),
                "p50_s": round(statistics.median(times), 2), "max_s": round(times[-1], 2),
                "min_s": round(times[0], 2)}
    finally:
        cluster.stop()


def tool_version(tool: str) -> str:
    return subprocess.run([tool, "--version"], capture_output=True, text=True).stdout.splitlines()[0]


def render(r: dict, meta: dict) -> str:
    return "\n".join([
        BEGIN,
        f"Run of {meta['when']} on {meta['machine']}; `{meta['command']}` at commit {meta['commit']}; "
        f"{meta['ovn']}, {meta['ovs']} (Kube-OVN's build, userspace datapath).",
        "",
        f"N={r['n']} networks created at once over {r['vpcs']} VPCs on the data plane's trunk (3 chassis); the bed "
        f"with the peers started in {r['bed_start_s']} s, its data plane in {r['dataplane_start_s']} s; the creates "
        f"took {r['create_s']} s.",
        "",
        "| Create -> first answered ARP of the network's VM | p50 (s) | max (s) | min (s) |",
        "|---|---|---|---|",
        f"| per network, from the burst's start | {r['p50_s']} | {r['max_s']} | {r['min_s']} |",
        END,
    ])


def command(args: argparse.Namespace) -> int:
    """The body of hack/bench_wire.py with its parsed arguments; the exit status."""
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-wire-"))
    r = run(args.n, args.vpcs, workdir)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    meta = {"when": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
            "command": f"python hack/bench_wire.py --n {args.n} --vpcs {args.vpcs}", "commit": commit,
            "ovn": tool_version("ovn-northd"), "ovs": tool_version("ovsdb-server")}
    print(json.dumps(r))
    write_block(args.out, render(r, meta), BEGIN, END, "On the wire: create to first answered ARP (issue 25)")
    return 0
