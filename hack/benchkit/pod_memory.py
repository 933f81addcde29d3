"""The controller's pod memory on the bed's node, by cgroup, through convergence, rest and a
rollout (hack/pod_memory.py: the command line and its description)."""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

from hack.bed import LocalCluster, container_pid
from hack.bed.deploy import NAME, NAMESPACE, ControllerDeployment, restarts
from hack.benchkit.convergence import converged_count
from hack.benchkit.gateway import create_router_ports, gateway_count, setup_gateway_objects
from hack.benchkit.load import in_threads, network_body, setup_objects
from hack.benchkit.scale import counts, populate, setup_networks


CGROUP = Path("/sys/fs/cgroup")


def cgroup_dirs(pid: int) -> dict[str, Path]:
    """The v1 hierarchies' directories of ``pid`` (``memory``, ``cpu``, ``cpuacct``)."""
    out = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(","):
            if c in ("memory", "cpu", "cpuacct"):
                out[c] = CGROUP / c / path.lstrip("/")
    return out


def read_kv(path: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (ln.split() for ln in path.read_text().splitlines() if ln.strip())}


def sample(dirs: dict[str, Path]) -> dict[str, int]:
    """One reading of a container's cgroups: bytes, nanoseconds, counts."""
    mem, cpu, acct = dirs["memory"], dirs["cpu"], dirs["cpuacct"]
    stat = read_kv(mem / "memory.stat")
    usage = int((mem / "memory.usage_in_bytes").read_text())
    throttle = read_kv(cpu / "cpu.stat")
    return {
        "usage": usage,
        "working_set": max(0, usage - stat.get("total_inactive_file", 0)),
        "rss": stat.get("total_rss", 0),
        "limit": int((mem / "memory.limit_in_bytes").read_text()),
        "failcnt": int((mem / "memory.failcnt").read_text()),
        "cpu_ns": int((acct / "cpuacct.usage").read_text()),
        "quota_us": int((cpu / "cpu.cfs_quota_us").read_text()),
        "period_us": int((cpu / "cpu.cfs_period_us").read_text()),
        "nr_periods": throttle.get("nr_periods", 0),
        "nr_throttled": throttle.get("nr_throttled", 0),
        "throttled_ns": throttle.get("throttled_time", 0),
    }


class Sampler:
    """Samples every running pod of the Deployment every ``interval`` s into ``samples``:
    ``(monotonic, phase, pod, holds the Lease?, sample())``."""

    def __init__(self, deploy: ControllerDeployment, interval: float) -> None:
        self.deploy = deploy
        self.interval = interval
        self.phase = "start"
        self.samples: list[tuple[float, str, str, bool, dict[str, int]]] = []
        self._dirs: dict[str, dict[str, Path]] = {}  # container id -> cgroup dirs
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                pods = self.deploy.pods()
                holder = self.deploy.holder()  # every replica is Ready (issue 27): the Lease says who leads
            except Exception:  # noqa: BLE001 - a slow API server: next round
                continue
            now = time.monotonic()
            for p in pods:
                cs = ((p.get("status") or {}).get("containerStatuses") or [{}])[0]
                cid = (cs.get("containerID") or "").removeprefix("containerd://")
                if not cid or "running" not in (cs.get("state") or {}):
                    continue
                try:
                    if cid not in self._dirs:
                        self._dirs[cid] = cgroup_dirs(container_pid(self.deploy.node, cid))
                    s = sample(self._dirs[cid])
                except (OSError, RuntimeError, ValueError):
                    continue  # the container just went
                self.samples.append((now, self.phase, p["metadata"]["name"], p["metadata"]["name"] == holder, s))


def summarize(samples: list, phase: str) -> list[str]:
    """Per pod of ``phase``: peak and last working set, RSS, CPU used and throttled."""
    lines = []
    pods = sorted({s[2] for s in samples if s[1] == phase})
    for pod in pods:
        ss = [s for s in samples if s[1] == phase and s[2] == pod]
        first, last = ss[0][4], ss[-1][4]
        peak = max(x[4]["working_set"] for x in ss)
        wall = ss[-1][0] - ss[0][0]
        cpu = (last["cpu_ns"] - first["cpu_ns"]) / 1e9
        periods = last["nr_periods"] - first["nr_periods"]
        throttled = last["nr_throttled"] - first["nr_throttled"]
        lines.append(
            f"{phase:9s} {pod[-5:]} {'leader ' if any(x[3] for x in ss) else 'standby'} "
            f"working set peak {peak / 2**20:.1f} MiB, last {last['working_set'] / 2**20:.1f} MiB "
            f"(RSS {last['rss'] / 2**20:.1f} MiB) of {last['limit'] / 2**20:.0f} MiB, failcnt {last['failcnt']}; "
            f"CPU {cpu:.1f} s in {wall:.0f} s ({cpu / wall * 1000 if wall else 0:.0f}m average, quota "
            f"{last['quota_us'] / last['period_us'] * 1000:.0f}m), throttled {throttled} of {periods} periods, "
            f"{(last['throttled_ns'] - first['throttled_ns']) / 1e9:.1f} s")
    return lines


def oom_kills(deploy: ControllerDeployment, samples: list) -> str:
    """The pods' restarts and last termination reasons, and the highest cgroup ``failcnt``
    sampled (times the usage hit the limit), as one line."""
    pods = deploy.pods()
    reasons = [((c.get("lastState") or {}).get("terminated") or {}).get("reason")
               for p in pods for c in (p.get("status") or {}).get("containerStatuses") or []]
    return (f"OOM kills: {sum(r == 'OOMKilled' for r in reasons)} (restarts "
            f"{[restarts(p) for p in pods]}, last terminations {[r for r in reasons if r]}); "
            f"cgroup failcnt max {max((x[4]['failcnt'] for x in samples), default=0)}")


def pin_to_node(deploy: ControllerDeployment) -> None:
    """Schedule the Deployment's pods on the bed's node only (the populated Nodes have no
    kubelet); waits for the rollout this patch starts."""
    deploy.kubectl("patch", "deployment", NAME, "-n", NAMESPACE, "--type=merge", "-p", json.dumps(
        {"spec": {"template": {"spec": {"nodeSelector": {"kubernetes.io/hostname": deploy.node.name}}}}}))
    deploy.wait_rolled_out(240)


def kubelet_view(deploy: ControllerDeployment) -> str:
    return ", ".join(f"{k[-5:]} {v / 2**20:.1f} MiB" for k, v in sorted(deploy.memory().items()))


def command(args: argparse.Namespace) -> int:
    """The body of hack/pod_memory.py with its parsed arguments; the exit status."""
    from kubernetes import client

    cluster = LocalCluster(args.workdir, with_nb=True, with_sb=False, with_peers=False, with_node=True)
    sampler = None
    try:
        print(f"starting a bed with a node in {args.workdir} (about a minute)", flush=True)
        cluster.start()
        print(f"bed up in {cluster.start_seconds:.1f}s; installing the controller's Deployment", flush=True)
        if not args.population:
            # With a population, bench_scale's zones come after it: the Deployment's
            # admission policy refuses a machine on a zone's bridge that its namespace lacks.
            setup_objects(cluster, args.zones)
        deploy = ControllerDeployment(cluster).install(
            extra_args=[] if args.gateway else ["--manage-gateway-chassis=false"])
        print(f"rolled out in {deploy.wait_rolled_out(240):.1f}s", flush=True)
        if args.population:
            pin_to_node(deploy)
        sampler = Sampler(deploy, args.interval).start()
        admin = cluster.api_client("admin")
        co = client.CustomObjectsApi(admin)

        if args.population:
            sampler.phase = "populate"
            took = populate(cluster, counts(args.population), args.threads, lambda m: print(m, flush=True))
            print(f"population made in {sum(took.values()):.1f}s; kubelet: {kubelet_view(deploy)}", flush=True)
        sampler.phase = "converge"
        t0 = time.monotonic()
        if args.population:
            setup_networks(cluster, args.n, args.threads)
        elif args.gateway:
            setup_gateway_objects(cluster, args.n, args.zones, args.gateway, args.threads)
            create_router_ports(cluster, args.n, args.gateway)
        else:
            in_threads(cluster, args.threads, args.n, lambda c, i: c.create_namespaced_custom_object(
                "proxmox.cozystack.io", "v1alpha1", network_body("net", i, f"bench-z{i % args.zones}")[0],
                "proxmoxnetworks", network_body("net", i, f"bench-z{i % args.zones}")[1]))
        created = time.monotonic() - t0
        deadline = t0 + max(300.0, args.n * 0.5)
        while (done := (gateway_count(co, args.n)[0] if args.gateway else converged_count(co, args.n))) < args.n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {done}/{args.n} converged")
            time.sleep(0.5)
        print(f"N={args.n}: created in {created:.1f}s, converged in {time.monotonic() - t0:.1f}s; "
              f"kubelet: {kubelet_view(deploy)}", flush=True)

        sampler.phase = "settled"
        time.sleep(args.settle)  # a duration to sample over, not a condition
        print(f"settled: kubelet: {kubelet_view(deploy)}", flush=True)

        sampler.phase = "rollout"
        before = {p["metadata"]["name"] for p in deploy.pods()}
        t1 = time.monotonic()
        deploy.kubectl("rollout", "restart", f"deployment/{NAME}", "-n", NAMESPACE)
        while ({p["metadata"]["name"] for p in deploy.pods()} & before) or deploy.pending():
            if time.monotonic() - t1 > 300:
                raise RuntimeError(f"the rollout at N={args.n} did not finish: {deploy.pending()}")
            time.sleep(0.25)
        print(f"rollout at N={args.n}: a new leader Ready after {time.monotonic() - t1:.1f}s", flush=True)
        time.sleep(args.settle)
        print(f"after the rollout: kubelet: {kubelet_view(deploy)}; restarts "
              f"{[p['status']['containerStatuses'][0]['restartCount'] for p in deploy.pods()]}", flush=True)
        sampler.stop()
        for phase in ("populate", "converge", "settled", "rollout"):
            for line in summarize(sampler.samples, phase):
                print(line, flush=True)
        print(oom_kills(deploy, sampler.samples), flush=True)
        if args.json:
            args.json.write_text(json.dumps([{"t": t, "phase": ph, "pod": pod, "leader": ld, **s}
                                             for t, ph, pod, ld, s in sampler.samples]))
        admin.close()
        return 0
    finally:
        if sampler is not None:
            sampler.stop()
        cluster.stop()
