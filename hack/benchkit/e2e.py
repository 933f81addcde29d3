"""End to end on the real peers: N networks from create to Ready and back, per phase in
wall time, CPU, API writes and NB transactions (hack/bench_e2e.py: the command line and its
description)."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hack.bed import LocalCluster
from hack.benchkit.controller import Controller, cpu_seconds, teardown
from hack.benchkit.document import write_block
from hack.benchkit.gateway import nb_total
from hack.benchkit.load import GROUP, NAMESPACES, VERSION, in_threads
from hack.benchkit.writes import mark, writes_by_resource
from hack.tools import audit

REPO = Path(__file__).resolve().parents[2]

KUBEOVN = ("kubeovn.io", "v1")
IPAM, POOL_V = "ipam.cluster.x-k8s.io", "v1alpha2"
TRUNK = ("pve-1", "pve-2", "pve-3")
BEGIN, END = "<!-- bench-e2e:begin -->", "<!-- bench-e2e:end -->"
KUBE_OVN, IPAM_PROVIDER = "kube-ovn-controller", "ipam-provider"


def provider(z: int) -> str:
    return f"e2e-pn-{z}"  # the real CRD allows at most 12 bytes


def names(i: int, vpcs: int) -> dict[str, str]:
    ns = f"bench-{i % NAMESPACES}"
    return {"ns": ns, "net": f"net-{i}", "sub": f"{ns}-net-{i}", "pool": f"pool-{i}", "vpc": f"vpc-{i % vpcs}",
            "prefix": f"10.{64 + i // 256}.{i % 256}"}


def setup(cluster: LocalCluster, zones: int, vpcs: int) -> None:
    from kubernetes import client

    api = cluster.api_client("admin")
    try:
        core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
        labels = {f"{provider(z)}.provider-network.kubernetes.io/ready": "true" for z in range(zones)}
        for k, node in enumerate(TRUNK):
            core.create_node({"metadata": {"name": node, "labels": labels,
                                           "annotations": {"ovn.kubernetes.io/chassis": f"ch-{node}"}}})
        for z in range(zones):
            co.create_cluster_custom_object(*KUBEOVN, "provider-networks", {
                "apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork", "metadata": {"name": provider(z)},
                "spec": {"defaultInterface": f"eth{z + 1}"}})
            co.create_cluster_custom_object(GROUP, VERSION, "proxmoxnetworkzones", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "ProxmoxNetworkZone", "metadata": {"name": f"e2e-z{z}"},
                "spec": {"bridge": f"vmbr{z}", "providerNetwork": provider(z), "vlanRanges": ["1-4094"]}})
        for v in range(vpcs):
            co.create_cluster_custom_object(*KUBEOVN, "vpcs", {
                "apiVersion": "kubeovn.io/v1", "kind": "Vpc", "metadata": {"name": f"vpc-{v}"}, "spec": {}})
        for j in range(NAMESPACES):
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=f"bench-{j}")))

        def up() -> bool:
            vs = co.list_cluster_custom_object(*KUBEOVN, "vpcs")["items"]
            pns = co.list_cluster_custom_object(*KUBEOVN, "provider-networks")["items"]
            return (sum(1 for v in vs if (v.get("status") or {}).get("standby")) >= vpcs + 1  # + ovn-cluster
                    and all((p.get("status") or {}).get("ready") for p in pns if p["metadata"]["name"].startswith("e2e-")))

        # Kube-OVN rebuilds ProviderNetwork status from the Node labels every 30 s.
        poll("VPCs up and ProviderNetworks ready", up, 90)
    finally:
        api.close()


def poll(what: str, fn, timeout: float, interval: float = 0.5, alive=None) -> float:
    t0 = time.monotonic()
    while not fn():
        if alive is not None:
            alive()
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(interval)
    return time.monotonic() - t0


def create_one(co, i: int, vpcs: int, zones: int) -> None:
    n = names(i, vpcs)
    p = n["prefix"]
    co.create_namespaced_custom_object(GROUP, VERSION, n["ns"], "proxmoxnetworks", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ProxmoxNetwork", "metadata": {"name": n["net"], "namespace": n["ns"]},
        "spec": {"zone": f"e2e-z{i % zones}", "subnet": n["sub"], "ipPool": n["pool"]}})
    co.create_cluster_custom_object(*KUBEOVN, "subnets", {
        "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": n["sub"]},
        "spec": {"vpc": n["vpc"], "vlan": n["sub"], "cidrBlock": f"{p}.0/24", "gateway": f"{p}.1", "protocol": "IPv4",
                 "logicalGateway": True, "excludeIps": [f"{p}.200..{p}.250"]}})
    co.create_namespaced_custom_object(IPAM, POOL_V, n["ns"], "inclusterippools", {
        "apiVersion": f"{IPAM}/{POOL_V}", "kind": "InClusterIPPool", "metadata": {"name": n["pool"], "namespace": n["ns"]},
        "spec": {"addresses": [f"{p}.200-{p}.250"], "prefix": 24, "gateway": f"{p}.1"}})


def delete_one(co, i: int, vpcs: int) -> None:
    n = names(i, vpcs)
    co.delete_namespaced_custom_object(GROUP, VERSION, n["ns"], "proxmoxnetworks", n["net"])
    co.delete_cluster_custom_object(*KUBEOVN, "subnets", n["sub"])
    co.delete_namespaced_custom_object(IPAM, POOL_V, n["ns"], "inclusterippools", n["pool"])


def ready_count(co) -> int:
    resp = co.list_cluster_custom_object(GROUP, VERSION, "proxmoxnetworks", _preload_content=False)
    done = 0
    for net in json.loads(resp.data)["items"]:
        st = net.get("status") or {}
        if st.get("observedGeneration") != net["metadata"].get("generation"):
            continue
        conds = {c.get("type"): c.get("status") for c in st.get("conditions") or []}
        if conds.get("Ready") == "True" and conds.get("GatewayReady") == "True":
            done += 1
    return done


def count(co, group: str, version: str, plural: str, prefix: str = "") -> int:
    resp = co.list_cluster_custom_object(group, version, plural, _preload_content=False)
    return sum(1 for o in json.loads(resp.data)["items"] if o["metadata"]["name"].startswith(prefix))


def groups_in_nb(cluster: LocalCluster) -> int:
    out = cluster.nbctl("--bare", "--columns=name", "list", "HA_Chassis_Group", timeout=60)
    return sum(1 for name in out.split() if name.startswith("px-"))


def router_ports(cluster: LocalCluster) -> int:
    out = cluster.nbctl("--bare", "--columns=name", "list", "Logical_Router_Port", timeout=60)
    return sum(1 for name in out.split() if name.startswith("vpc-"))


class Meter:
    """CPU seconds and API writes of the controller and both peers over one phase."""

    def __init__(self, cluster: LocalCluster, ctl: Controller) -> None:
        self.cluster, self.ctl = cluster, ctl
        self.users = {"controller": cluster.controller_user, KUBE_OVN: cluster.kube_ovn_user,
                      IPAM_PROVIDER: cluster.ipam_user, "admin (the load)": "admin"}

    def pids(self) -> dict[str, int]:
        return {"controller": self.ctl.pid, KUBE_OVN: self.cluster.peer_pid(KUBE_OVN),
                IPAM_PROVIDER: self.cluster.peer_pid(IPAM_PROVIDER)}

    def start(self) -> None:
        self.marker = mark(self.cluster)
        self.cpu0 = {k: cpu_seconds(p) for k, p in self.pids().items()}
        self.nb0 = nb_total(self.ctl)
        self.t0 = time.monotonic()

    def stop(self) -> dict:
        wall = time.monotonic() - self.t0
        cpu = {k: round(cpu_seconds(p) - self.cpu0[k], 2) for k, p in self.pids().items()}
        nb = nb_total(self.ctl) - self.nb0
        end = audit.write_marker(self.cluster)
        writes, by = {}, {}
        for who, user in self.users.items():
            w = audit.writes_before(self.cluster, user, end, since_marker=self.marker, timeout=60)
            writes[who] = len(w)
            by[who] = writes_by_resource(w)
        return {"wall_s": round(wall, 2), "cpu_s": cpu, "writes": writes, "writes_by": by, "controller_nb_txns": nb}


def run(n: int, vpcs: int, zones: int, threads: int, workdir: Path, log=print) -> dict:
    from kubernetes import client

    r: dict = {"n": n, "vpcs": vpcs, "zones": zones, "threads": threads}
    cluster = LocalCluster(workdir / "bed", with_peers=True)
    ctl = api = None
    try:
        cluster.start()
        r["bed_start_s"] = round(cluster.start_seconds, 1)
        setup(cluster, zones, vpcs)
        # The audit log names the admin by its user name; read it from a marker.
        m = audit.write_marker(cluster)
        admin_user = (audit.wait_for_marker(cluster, m).get("user") or {}).get("username", "admin")
        ctl = Controller(cluster, workdir / "controller.log", nb=cluster.nb_tcp)
        ctl.wait_event("caches synced", 120)
        meter = Meter(cluster, ctl)
        meter.users["admin (the load)"] = admin_user
        api = cluster.api_client("admin")
        co = client.CustomObjectsApi(api)

        def alive() -> None:
            if ctl.proc.poll() is not None:
                raise RuntimeError(f"controller exited; see {ctl.log_path}")
            for peer in (KUBE_OVN, IPAM_PROVIDER):
                cluster.peer_pid(peer)  # raises when the peer is gone

        log(f"[e2e N={n}] bed up in {r['bed_start_s']}s; creating {n} networks with Subnets and pools")
        meter.start()
        t0 = time.monotonic()
        in_threads(cluster, threads, n, lambda c, i: create_one(c, i, vpcs, zones))
        r["creates_s"] = round(time.monotonic() - t0, 2)
        poll("every network Ready with its gateway", lambda: ready_count(co) >= n, max(600.0, 2.0 * n),
             interval=1.0, alive=alive)
        poll("a group per network in the NB", lambda: groups_in_nb(cluster) >= n, 120, alive=alive)
        r["converge"] = meter.stop()
        r["router_ports"] = router_ports(cluster)
        r["groups"] = groups_in_nb(cluster)
        log(f"[e2e N={n}] Ready with groups in {r['converge']['wall_s']}s (creates {r['creates_s']}s); "
            f"CPU {r['converge']['cpu_s']}; writes {r['converge']['writes']}")

        meter.start()
        in_threads(cluster, threads, n, lambda c, i: delete_one(c, i, vpcs))
        poll("every network, Vlan and group gone",
             lambda: (count_networks(co) == 0 and count(co, *KUBEOVN, "vlans", "bench-") == 0
                      and groups_in_nb(cluster) == 0),
             max(600.0, 2.0 * n), interval=1.0, alive=alive)
        r["teardown"] = meter.stop()
        log(f"[e2e N={n}] teardown in {r['teardown']['wall_s']}s; CPU {r['teardown']['cpu_s']}; "
            f"writes {r['teardown']['writes']}")
        return r
    finally:
        teardown(ctl, api, cluster)


def count_networks(co) -> int:
    resp = co.list_cluster_custom_object(GROUP, VERSION, "proxmoxnetworks", _preload_content=False)
    return len(json.loads(resp.data)["items"])


def render(r: dict, meta: dict) -> str:
    who = ("controller", KUBE_OVN, IPAM_PROVIDER)
    lines = [
        BEGIN,
        f"Run of {meta['when']} on {meta['machine']}; `{meta['command']}` at commit {meta['commit']}.",
        "",
        f"N={r['n']} networks, each with its Subnet (VPC, VLAN, `logicalGateway`) and InClusterIPPool, "
        f"over {r['vpcs']} VPCs, {r['zones']} zones (one ProviderNetwork each), 10 namespaces, "
        f"{r['threads']} admin threads; the bed (peers included) started in {r['bed_start_s']} s.",
        "",
        "| Phase | Wall (s) | " + " | ".join(f"{w} CPU (s)" for w in who) + " | "
        + " | ".join(f"{w} API writes" for w in who) + " | controller NB txns | admin writes |",
        "|---|---|" + "---|" * (2 * len(who) + 2),
    ]
    for phase, title in (("converge", "create → Ready + group in the NB"), ("teardown", "delete → nothing left")):
        p = r[phase]
        admin = next(v for k, v in p["writes"].items() if k.startswith("admin"))
        lines.append(f"| {title} | {p['wall_s']} | " + " | ".join(str(p["cpu_s"][w]) for w in who) + " | "
                     + " | ".join(str(p["writes"][w]) for w in who) + f" | {p['controller_nb_txns']} | {admin} |")
    lines += ["", f"After convergence the NB held {r['router_ports']} router ports `vpc-*` (made by Kube-OVN) "
              f"and {r['groups']} HA_Chassis_Groups `px-*` (made by the controller). The admin's creates took "
              f"{r['creates_s']} s of the convergence time.", ""]
    for phase in ("converge", "teardown"):
        for w in who:
            by = r[phase]["writes_by"][w]
            if by:
                lines.append(f"* {phase}, {w}: " + ", ".join(f"{k} {v}" for k, v in by.items()))
    lines.append(END)
    return "\n".join(lines)


def command(args: argparse.Namespace, argv: list[str]) -> int:
    """The body of hack/bench_e2e.py with its parsed arguments (``argv``: as given, for the
    report's command); the exit status."""
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-e2e-", dir="/tmp"))
    workdir.mkdir(parents=True, exist_ok=True)
    ok = False
    try:
        r = run(args.n, args.vpcs, args.zones, args.threads, workdir)
        ok = True
    finally:
        if not args.keep and ok:
            shutil.rmtree(workdir, ignore_errors=True)
        elif not ok:
            print(f"logs kept in {workdir}", file=sys.stderr)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    meta = {"when": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()} {__import__('os').cpu_count()} cores", "commit": commit,
            "command": "python hack/bench_e2e.py " + " ".join(argv)}
    block = render(r, meta)
    print(block)
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "result": r}, indent=1))
    if args.out:
        write_block(args.out, block, BEGIN, END, "End to end on the real peers")
    return 0
