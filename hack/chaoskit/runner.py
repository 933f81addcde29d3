"""One chaos run, :func:`run`: the bed with the real peers, the load's world, the monitor, the
supervisors and the load; the faults on the schedule, each followed by a wait for
convergence; the teardown and what it must leave; every figure into a :class:`ChaosResult`."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import random
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from attrs import asdict as attrs_asdict
from kubernetes import client as k8s

from hack.bed import ClusterError, LocalCluster, _read_versions
from hack.chaoskit.audit import recheck_duplicates, recheck_open
from hack.chaoskit.common import PX, REPO, log, retry
from hack.chaoskit.config import POD_FAULT_KINDS, PEER_OF_FAULT, ChaosConfig, ChaosResult, FaultRecord
from hack.chaoskit.convergence import Checker, nb_groups_of_ours, nb_leftovers, wait_converged, wait_whole
from hack.chaoskit.faults import PeerSupervisor, restart_apiserver, restart_nb
from hack.chaoskit.garbage import GarbageCollector
from hack.chaoskit.load import (
    MAX_SLOTS, SHARED_PROVIDER, Loader, Slot, create_trunk_nodes, create_vpcs, register_chassis, vpc_of,
)
from hack.chaoskit.monitor import InvariantMonitor
from hack.chaoskit.pods import PodReplicas
from hack.chaoskit.replicas import Supervisor
from hack.chaoskit.wire_monitor import WireFigures, WireMonitor


def peer_versions() -> dict[str, str]:
    v = _read_versions()
    return {"kube-ovn-controller": v.get("KUBE_OVN_VERSION", "?"), "ipam-provider": v.get("IPAM_PROVIDER_VERSION", "?")}


def run(cfg: ChaosConfig, progress: Callable[[str], None] = log) -> ChaosResult:
    rng = random.Random(cfg.seed)
    t_start = time.monotonic()
    res = ChaosResult(config=asdict(cfg), cores=os.cpu_count() or 0,
                      machine=" ".join(filter(None, [platform.machine(), platform.processor(), f"{os.cpu_count()} cores"])),
                      started_utc=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    try:
        res.commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                    text=True, timeout=10).stdout.strip()
    except Exception:  # not a git checkout
        pass
    if cfg.slots > MAX_SLOTS:
        raise ValueError(f"at most {MAX_SLOTS} slots (their Subnets' CIDRs)")
    cfg.check()
    workdir = Path(cfg.workdir) if cfg.workdir else Path(tempfile.mkdtemp(prefix="chaos-", dir="/tmp"))
    workdir.mkdir(parents=True, exist_ok=True)
    logdir = workdir / "logs"
    logdir.mkdir(exist_ok=True)
    # The real kube-ovn-controller and IPAM provider run in the bed (with_peers: hack/build-peers.sh);
    # with --pods also the node the controller's Deployment runs on (hack/bed/node.py, root).
    cluster = LocalCluster(workdir / "bed", with_peers=True, with_node=cfg.pods,
                           with_dataplane=bool(cfg.wire and cfg.manage_gateway))
    sup = mon = loader = checker = gc = peers = reps = wire = None
    outages: list[tuple[float, float]] = []  # API server and NB outages and compactions, for the peers' exits
    try:
        try:
            cluster.start()
        except ClusterError as exc:
            if not cfg.pods:
                raise
            raise RuntimeError(f"no node for the controller's pods here ({str(exc).splitlines()[0]}); "
                               "without --pods the harness's supervisor plays the Deployment") from exc
        res.peers = peer_versions()
        progress(f"bed up in {cluster.start_seconds:.1f}s at {cluster.server} with the real peers "
                 f"({', '.join(f'{k} {v}' for k, v in res.peers.items())}; workdir {workdir})")
        from hack.tools.objects import Admin

        api = cluster.api_client("admin")
        admin = Admin(api)
        run_id = f"{cfg.seed:x}"
        providers = [f"chaos-pn{i}" for i in range(3 if cfg.shared_zones else 2)]
        for p in providers:
            admin.create_provider_network(p)
        create_trunk_nodes(admin, providers)  # their ready labels make the ProviderNetworks ready
        register_chassis(cluster)
        zones = []
        for z in range(cfg.zones):
            name = f"chaos-z{z}"
            lo = 100 + z * 200
            admin.create_zone(name, providers[z % 2], [f"{lo}-{lo + 149}"])
            zones.append(name)
        # Zones sharing one provider with the same range (issue 12): every allocation in them
        # competes for the same IDs; the monitor's duplicate check is per provider.
        for z in range(cfg.shared_zones):
            name = f"chaos-s{z}"
            admin.create_zone(name, SHARED_PROVIDER, [cfg.shared_range], bridge=f"vmbr{10 + z}")
            zones.append(name)
        namespaces = [f"chaos-{run_id}-ns{i}" for i in range(cfg.namespaces)]
        for ns in namespaces:
            admin.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
        vpcs = [vpc_of(ns) for ns in namespaces]
        create_vpcs(admin, vpcs)
        slots = [Slot(i, namespaces[i % len(namespaces)], zones[i % len(zones)], run_id) for i in range(cfg.slots)]

        mon = InvariantMonitor(cluster, set(namespaces), set(providers)).start()
        peers = PeerSupervisor(cluster, outages).start()
        gc = GarbageCollector(cluster, namespaces).start()
        if cfg.pods:
            reps = PodReplicas(cluster, cfg, outages).start()
            res.pod_memory_limit = reps.memory_limit
            progress(f"the Deployment rolled out in {reps.rolled_out_seconds:.1f}s: leader {reps.deploy.holder()}")
        else:
            sup = Supervisor(cluster, logdir, cfg).start()
            sup.leader(120)
        loader = Loader(cluster, slots, rng).start()
        checker = Checker(cluster, namespaces, set(providers))

        # Initial population.
        t0 = time.monotonic()
        for s in rng.sample(slots, min(cfg.initial_networks, len(slots))):
            loader.create(s)
            loader._count("create")
        at, pending = wait_converged(checker, loader, cfg.converge_timeout)
        if at is None:
            res.convergence_failures.append(f"initial: {pending[:5]}")
            raise RuntimeError(f"the initial networks did not converge: {pending[:5]}")
        res.initial_converge_seconds = round(at - t0, 2)
        progress(f"{cfg.initial_networks} initial networks Ready in {res.initial_converge_seconds}s")
        if cfg.wire and cfg.manage_gateway:
            if cluster.dataplane is None:
                raise RuntimeError("--wire needs the bed's data plane (root, network namespaces, /dev/net/tun)")
            wire = WireMonitor(cluster, admin, name=f"chaos-{run_id}-wire").start(cfg.converge_timeout)
            progress(f"wire: VM {wire.vm.address if wire.vm else '?'} answered by its gateway {wire.gateway}")

        for i, kind in enumerate(cfg.schedule(rng), 1):
            if cfg.duration and time.monotonic() - t_start > cfg.duration:
                progress(f"--duration {cfg.duration:.0f}s reached after {i - 1} faults")
                break
            loader.resume()
            time.sleep(rng.uniform(*cfg.load_window))  # load runs; the fault lands at a random point of it
            rec = FaultRecord(kind, time.monotonic(), ops_before=sum(loader.ops.values()))
            if kind == "kill":
                victim = sup.kill_leader()
                rec.at = time.monotonic()
                rec.detail = f"replica {victim.n}"
            elif kind == "api":
                rec.at = time.monotonic()
                # Open-ended while it lasts: an exit during the restart (a peer that relists
                # as soon as the API server serves, before /readyz says so) is caused by it.
                outages.append((rec.at, float("inf")))
                if sup is not None:
                    sup.outages.append((rec.at, float("inf")))
                restart_apiserver(cluster, cfg.api_down)
                outages[-1] = (rec.at, time.monotonic())
                if sup is not None:
                    sup.outages[-1] = outages[-1]
                rec.detail = f"down {time.monotonic() - rec.at:.1f}s"
            elif kind == "compact":
                rec.detail = f"revision {cluster.compact()}"
                rec.at = time.monotonic()
                outages.append((rec.at, rec.at))  # a watch resumed from before it relists (410)
            elif kind == "nb":
                rec.at = time.monotonic()
                outages.append((rec.at, float("inf")))
                restart_nb(cluster, cfg.nb_down)
                outages[-1] = (rec.at, time.monotonic())
                rec.detail = f"down {time.monotonic() - rec.at:.1f}s"
            elif kind in PEER_OF_FAULT:
                rec.at = time.monotonic()
                rec.detail = peers.fault(PEER_OF_FAULT[kind], cfg.peer_down)
            elif kind in POD_FAULT_KINDS:
                before = reps.identity()
                rec.at = time.monotonic()
                try:
                    rec.detail = reps.fault(kind)
                except RuntimeError as exc:
                    res.convergence_failures.append(f"{kind} #{i}: {exc}")
                    rec.detail = str(exc)
                # The load goes on until a pod leads again (a rollout under load), then pauses.
                # A rollout to a too-low limit stops at its first new pod (maxUnavailable 0):
                # the old leader keeps leading, so any Ready holder will do there.
                old = None if kind == "oom" else before
                led = ready = None
                end = rec.at + cfg.converge_timeout
                while time.monotonic() < end and ready is None:
                    led = reps.leader_after(rec.at, old)
                    ready = reps.ready_after(rec.at, old)
                    time.sleep(0.1)
                if ready is None:
                    res.convergence_failures.append(f"after {kind} #{i}: no new Ready leader within "
                                                    f"{cfg.converge_timeout:.0f}s ({reps.whole()})")
                rec.leader_seconds = round(led - rec.at, 2) if led is not None else None
                rec.ready_seconds = round(ready - rec.at, 2) if ready is not None else None
            loader.pause()
            at, pending = wait_converged(checker, loader, cfg.converge_timeout)
            if at is None:
                res.convergence_failures.append(f"after {kind} #{i}: {len(pending)} pending, e.g. {pending[:5]}")
            else:
                rec.converge_seconds = round(at - rec.at, 2)
            if reps is not None and at is not None:
                # The next fault finds the Deployment whole (the standby back: a container
                # restarted in place may wait out the kubelet's back-off).
                whole, why = wait_whole(reps, cfg.whole_timeout)
                if whole is None:
                    res.convergence_failures.append(f"after {kind} #{i}: the Deployment not whole within "
                                                    f"{cfg.whole_timeout:.0f}s ({why})")
                else:
                    rec.whole_seconds = round(whole - rec.at, 2)
                    rec.leaderless_seconds = round(reps.leaderless(rec.at, whole), 2)
            res.faults.append(rec)
            mon.judge()
            lead = (f"; new leader {rec.leader_seconds}s, Ready {rec.ready_seconds}s, whole {rec.whole_seconds}s, "
                    f"leaderless at most {rec.leaderless_seconds}s" if kind in POD_FAULT_KINDS else "")
            progress(f"fault {i} {kind} ({rec.detail}): converged in {rec.converge_seconds}s{lead}; "
                     f"violations {len(mon.violations)}; ops {sum(loader.ops.values())}")
            if at is None or (rec.kind in POD_FAULT_KINDS and rec.ready_seconds is None):
                break

        # Teardown: everything deleted through the controller, then nothing of ours may be left.
        t0 = time.monotonic()
        if wire is not None:
            res.wire = attrs_asdict(wire.stop())
            wire.teardown(cfg.converge_timeout)
        for s in slots:
            if s.live:
                loader.delete(s)
                loader._count("delete")
        at, pending = wait_converged(checker, loader, cfg.converge_timeout)
        if at is None:
            res.convergence_failures.append(f"teardown: {pending[:5]}")
        for z in zones:
            retry(lambda z=z: admin.co.delete_cluster_custom_object(*PX, "proxmoxnetworkzones", z), f"delete zone {z}",
                  ok_statuses=(404,))
        res.teardown_seconds = round(time.monotonic() - t0, 2)
        # Read once: a network goes only after its Vlan, its finalizers elsewhere and its HA
        # chassis groups have gone.
        res.teardown_leftovers = checker.leftovers(zones) + [f"HA_Chassis_Group {g}" for g in nb_groups_of_ours(cluster)]
        # What the load deleted is gone once Kube-OVN and the provider have let go of it (the
        # provider drops ProtectPool after the network is released: awaited, 60 s at most).
        # Kube-OVN deletes a Subnet's logical switch on its delete event: awaited too. So is
        # the namespace annotation (its last triple leaves in the namespace pass after).
        end = time.monotonic() + 60
        while True:
            left = checker.deleted_left(run_id)
            listed = checker.namespace_leftovers()
            ours, kube_ovns = nb_leftovers(cluster, vpcs, run_id)
            switches = [k for k in kube_ovns if k.startswith("logical switch")]
            if not (left or listed or ours or switches) or time.monotonic() > end:
                break
            time.sleep(0.5)
        res.teardown_leftovers += left + listed + ours
        res.kube_ovn_leftovers = kube_ovns
        api.close()
    finally:
        if wire is not None:
            try:  # the rest of the cleanup must run whatever this raises
                figures = wire.stop()
                if res.wire is None and figures is not None:
                    res.wire = attrs_asdict(figures)
            except Exception as exc:
                res.convergence_failures.append(f"wire: the figures could not be read: {exc!r}")
        if loader is not None:
            loader.stop()
            res.ops = dict(loader.ops)
            if loader.errors:
                res.convergence_failures += [f"loader: {e}" for e in loader.errors[:5]]
        if mon is not None:
            res.monitor_caught_up = mon.caught_up()
            res.vlan_deletions_checked = mon.judge()
            res.vlan_deletions_unjudgeable = mon.unjudgeable
            res.violations, res.refuted = recheck_duplicates(list(mon.violations), cluster.audit_log)
            res.uncertain, res.resolved, late = recheck_open(list(mon.uncertain), cluster.audit_log)
            res.violations += late
            res.vlan_events = mon.vlan_events
            res.monitor_relists = mon.relists
            res.vlans_by_provider = {p: {"vlans": len(n), "ids": len(i)}
                                     for p, (n, i) in sorted(mon.seen_by_provider.items())}
            mon.stop()
        if wire is not None and res.wire is not None:
            res.violations += [f"wire: {p}" for p in WireFigures(**res.wire).problems()]
        if sup is not None:
            sup.stop()
            res.replica_exits = sup.exits
        if reps is not None:
            reps.stop()
            res.replica_exits = reps.exits
            res.pod_working_set_max = reps.working_set_max
            res.pod_stop_seconds = list(reps.stop_seconds)
        if gc is not None:
            gc.stop()
            res.gc_collected = gc.collected
            res.ipam_orphans = list(gc.orphans)
        if peers is not None:
            peers.stop()
            res.peer_exits = peers.exits
        if checker is not None:
            checker.close()
        cluster.stop()
        res.wall_seconds = round(time.monotonic() - t_start, 1)
        if not cfg.keep_workdir and res.ok:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            progress(f"logs kept in {workdir}")
    return res
