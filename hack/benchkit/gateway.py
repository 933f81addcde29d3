"""hack/bench.py's gateway runs (:func:`run_gateway`): gateway management on, OVN NB on
loopback; start → RouterPortMissing, router ports → GatewayReady, a restart and a periodic
pass, in NB transactions, API writes, CPU and memory."""

from __future__ import annotations

import json
import time
from pathlib import Path

from hack.bed import LocalCluster
from hack.benchkit.controller import Controller, cpu_seconds, log_time, rss_mib, steady_pass, teardown
from hack.benchkit.load import GROUP, NAMESPACES, VERSION, in_threads, network_body, setup_objects
from hack.benchkit.writes import mark, record_writes

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
        record_writes(r, "first", cluster, m0)
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
        record_writes(r, "gw_converge", cluster, m1)
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
        r["restart_after_sync_s"] = (log_time(first) - log_time(synced)).total_seconds()
        r["restart_cpu_s"] = cpu_seconds(ctl.pid)
        time.sleep(1)
        r["restart_nb_txns"] = nb_total(ctl)
        record_writes(r, "restart", cluster, m2)
        r["rss_restarted_mib"] = rss_mib(ctl.pid)
        ctl.poll_log()
        r["restart_nb_not_synced"] = sum(1 for ln in ctl.lines if "not synced" in str(ln.get("error", "")))
        log(f"[gw {tag}] restart pass {r['restart_after_sync_s']:.2f}s after caches synced, "
            f"{r['restart_nb_txns']} NB txns, {r['restart_writes']} API writes")

        second = steady_pass(r, ctl, cluster, n, nb_txns=nb_total)
        started = next(ln for ln in ctl.lines if ln.get("event") == "resync started")
        r["steady_pass_log_s"] = (log_time(second) - log_time(started)).total_seconds()
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
        teardown(ctl, admin, cluster)
