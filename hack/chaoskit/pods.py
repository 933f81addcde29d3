"""The controller as the Deployment of manifests/ on the bed's node (``--pods``): the pod faults
(delete, kill -9 from the host, rollout, OOM) and the sampler of :class:`PodReplicas` that
times each new Lease holder, Ready leader and whole Deployment, and judges every container
restart."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import signal
import threading
import time
from typing import Any

from kubernetes import client as k8s

from hack.bed import LocalCluster, container_pid
from hack.chaoskit.common import log
from hack.chaoskit.config import ChaosConfig


def lease_live(spec: Any) -> bool:
    """A Lease's holder still holds it: renewTime + leaseDurationSeconds not yet past
    (client-go's expiry rule; the bed's API server and this process share a clock)."""
    if spec is None or not spec.holder_identity or not spec.renew_time or not spec.lease_duration_seconds:
        return False
    expires = spec.renew_time + _dt.timedelta(seconds=spec.lease_duration_seconds)
    return expires > _dt.datetime.now(_dt.timezone.utc)


def longest_unheld(samples: list[tuple[float, str, bool, bool]], since: float, until: float) -> float:
    """The longest stretch (s) between ``since`` and ``until`` in which no holder held the
    Lease, from change samples ``(time, identity, ready, held)`` in time order: the state at
    ``since`` is the last sample at or before it. To the sampler's resolution."""
    state = [s for s in samples if s[0] <= since][-1:]
    later = [s for s in samples if since < s[0] <= until]
    longest, gap_from = 0.0, None
    for t, _, _, held in state + later:
        t = max(t, since)
        if not held and gap_from is None:
            gap_from = t
        elif held and gap_from is not None:
            longest, gap_from = max(longest, t - gap_from), None
    if gap_from is not None:
        longest = max(longest, until - gap_from)
    return longest


class PodReplicas:
    """The controller as the Deployment of manifests/ on the bed's node (``--pods``): what
    :class:`Supervisor` plays for subprocesses, done by the ReplicaSet and the kubelet.

    :meth:`start` installs it (hack/bed/deploy.py: the image, ``kubectl apply -k
    hack/deploy-overlay``, with the harness's flags appended to the shipped args) and returns
    once it is rolled out. A sampler thread reads the Lease and the pods every ``interval``
    seconds and records each change of the Lease's holder (``holderIdentity``
    ``<pod>_<uuid>``: a container restarted in place has a new one) with whether that pod was
    Ready; every container restart (``restartCount`` going up) with its last termination; the
    seconds a deleted pod took to go; and the kubelet's working set of each pod (summary API,
    every 5 s). A restart is *expected* when the harness caused it: a container it SIGKILLed
    (:meth:`kill_leader`), an OOM kill of a pod running with ``cfg.oom_limit`` (:meth:`oom`),
    or exit 1 after "leadership lost" (or "unable to start manager") within ``outage_grace``
    seconds of an outage in ``outages``; anything else (a liveness kill, a crash, an OOM kill
    at the shipped limit) is unexpected and fails the run, and so is a deleted pod that took
    ``slow_stop`` seconds or more to go (the kubelet SIGKILLs it at the end of its grace
    period, 30 s; the controller exits within 2 s of SIGTERM).
    """

    def __init__(self, cluster: LocalCluster, cfg: ChaosConfig, outages: list[tuple[float, float]],
                 interval: float = 0.2, outage_grace: float = 60.0, slow_stop: float = 20.0) -> None:
        from hack.bed.deploy import ControllerDeployment

        self.cluster = cluster
        self.cfg = cfg
        self.deploy = ControllerDeployment(cluster)
        self.outages = outages
        self.interval = interval
        self.outage_grace = outage_grace
        self.slow_stop = slow_stop
        self.exits: list[dict[str, Any]] = []
        # (monotonic, holder identity, its pod Ready, held: a holder whose renewTime +
        # leaseDurationSeconds is not past), on change
        self.samples: list[tuple[float, str, bool, bool]] = []
        self.killed: set[str] = set()  # container IDs the harness SIGKILLed
        self.stop_seconds: list[float] = []  # deletion to gone, per deleted pod
        self.working_set_max = 0
        self.memory_limit = ""
        self.rolled_out_seconds = 0.0
        self._restarts: dict[str, int] = {}  # pod uid -> restartCount seen
        self._deleting: dict[str, float] = {}  # pod uid -> when first seen deleting
        self._seen: dict[str, str] = {}  # pod uid -> name, live in the last list
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pod-sampler", daemon=True)

    def flags(self) -> list[str]:
        """The harness's flags, appended to the shipped args (the last of a flag wins)."""
        cfg = self.cfg
        return [f"--subnet-prune-timeout={cfg.subnet_prune_timeout}", f"--resync-period={cfg.resync_period}",
                f"--vlan-reuse-delay={cfg.vlan_reuse_delay}",
                *(() if cfg.manage_gateway else ("--manage-gateway-chassis=false",))]

    def start(self, timeout: float = 240.0) -> "PodReplicas":
        self.deploy.install(extra_args=self.flags())
        # The load writes what the shipped admission policies refuse (machines without the
        # VLAN on their NIC, IPAddresses by hand; docs/admission.md) and the subprocess mode's
        # bed has none: their bindings go, the policies stay (tests/test_admission_integration.py).
        bindings = [d["metadata"]["name"] for d in self.deploy.rendered()
                    if d["kind"] == "ValidatingAdmissionPolicyBinding"]
        if bindings:
            self.deploy.kubectl("delete", "validatingadmissionpolicybinding", *bindings)
        self.rolled_out_seconds = self.deploy.wait_rolled_out(timeout)
        self.memory_limit = self._container(self.deploy.deployment()["spec"]["template"])["resources"]["limits"]["memory"]
        self._api = self.cluster.api_client("admin")
        self._core = k8s.CoreV1Api(self._api)
        self._coord = k8s.CoordinationV1Api(self._api)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        with contextlib.suppress(Exception):
            self._api.close()

    @staticmethod
    def _container(template: dict) -> dict:
        return template["spec"]["containers"][0]

    # -- sampling ---------------------------------------------------------------------
    def _loop(self) -> None:
        from controller.runtime.leader import identity_host
        from hack.bed.deploy import LEASE, LEASE_NAMESPACE, NAMESPACE, SELECTOR, ready

        next_memory = 0.0
        while not self._stop.wait(self.interval):
            try:
                lease = self._coord.read_namespaced_lease(LEASE, LEASE_NAMESPACE, _request_timeout=(2, 5))
                identity = (lease.spec.holder_identity or "") if lease.spec else ""
                pods = self._api.sanitize_for_serialization(
                    self._core.list_namespaced_pod(NAMESPACE, label_selector=SELECTOR, _request_timeout=(2, 5)))["items"]
            except Exception:  # noqa: BLE001 - the API server is away: next round
                continue
            now = time.monotonic()
            holder = identity_host(identity) if identity else ""
            is_ready = any(p["metadata"]["name"] == holder and not p["metadata"].get("deletionTimestamp") and ready(p)
                           for p in pods)
            held = bool(identity) and lease_live(lease.spec)
            with self._lock:
                if not self.samples or self.samples[-1][1:] != (identity, is_ready, held):
                    self.samples.append((now, identity, is_ready, held))
                self._pods(pods, now)
            if now >= next_memory:
                next_memory = now + 5.0
                with contextlib.suppress(Exception):
                    self.working_set_max = max([self.working_set_max, *self.deploy.memory().values()])
            self._keep_logs()

    def _keep_logs(self) -> None:
        """Append what each controller container's log gained since the last sample to
        ``<workdir>/logs/pods/``: the kubelet removes a pod's logs with the pod, and an old
        leader's last lines (did it release the Lease? did a worker not stop?) are what a slow
        takeover is read from. Only the new bytes are copied (this runs every sample); a log
        that shrank (rotated) is copied again from its start."""
        node = self.cluster.node
        if node is None:
            return
        into = node.bed_dir.parent / "logs" / "pods"  # <workdir>/bed is the bed
        for f in (node.dir / "kubelet" / "pod-logs").glob("*/controller/*.log"):
            with contextlib.suppress(OSError):
                dest = into / f"{f.parent.parent.name.split('_')[1]}-{f.stem}.log"
                kept = dest.stat().st_size if dest.exists() else 0
                size = f.stat().st_size
                if size == kept:
                    continue
                into.mkdir(parents=True, exist_ok=True)
                with f.open("rb") as src, dest.open("ab" if size > kept else "wb") as out:
                    if size > kept:
                        src.seek(kept)
                    shutil.copyfileobj(src, out)

    def _pods(self, pods: list[dict], now: float) -> None:
        live = {}
        for p in pods:
            m = p["metadata"]
            live[m["uid"]] = m["name"]
            if m.get("deletionTimestamp"):
                self._deleting.setdefault(m["uid"], now)
            for cs in (p.get("status") or {}).get("containerStatuses") or []:
                count = cs.get("restartCount") or 0
                seen = self._restarts.get(m["uid"], 0)
                if count > seen:
                    self._restarts[m["uid"]] = count
                    self._exit(p, cs, count - seen, now)
        for uid, name in self._seen.items():
            if uid not in live and uid in self._deleting:
                took = round(now - self._deleting.pop(uid), 1)
                self.stop_seconds.append(took)
                if took >= self.slow_stop:
                    # The controller exits within 2 s of SIGTERM; this one waited for the
                    # kubelet's SIGKILL at the end of the grace period (30 s).
                    log(f"pod {name} took {took:.0f}s to stop after its deletion")
                    self.exits.append({"pod": name, "container": "", "rc": None, "reason": "slow stop", "restarts": 0,
                                       "killed": False, "oom": False, "expected": False,
                                       "why": f"{took:.0f}s from its deletion until it was gone", "tail": ""})
        self._seen = live

    def _exit(self, pod: dict, cs: dict, count: int, now: float) -> None:
        term = (cs.get("lastState") or {}).get("terminated") or {}
        cid = (term.get("containerID") or "").removeprefix("containerd://")
        rc, reason = term.get("exitCode"), term.get("reason") or ""
        limit = ((self._container(pod).get("resources") or {}).get("limits") or {}).get("memory")
        name = pod["metadata"]["name"]
        why, tail = "", ""
        if cid in self.killed:
            why = "SIGKILLed by the harness"
        elif reason == "OOMKilled" and limit == self.cfg.oom_limit:
            why = f"OOM-killed at the lowered limit {limit}"
        elif rc == 1 and any(s - 5 <= now <= e + self.outage_grace for s, e in self.outages):
            with contextlib.suppress(Exception):
                tail = self.deploy.logs(name, previous=True)
            if "leadership lost" in tail or "unable to start manager" in tail:
                why = "exit 1 after an outage (leadership lost)"
        if not why:
            with contextlib.suppress(Exception):
                tail = tail or self.deploy.logs(name, previous=True)
            log(f"pod {name}: container restarted unexpectedly (exit {rc}, {reason or 'no reason'}, "
                f"limit {limit}):\n" + "\n".join(tail.splitlines()[-15:]))
        self.exits.append({"pod": name, "container": cid[:12], "rc": rc, "reason": reason, "restarts": count,
                           "killed": cid in self.killed, "oom": reason == "OOMKilled", "expected": bool(why),
                           "why": why, "tail": "" if why else "\n".join(tail.splitlines()[-15:])})

    # -- reading the samples ------------------------------------------------------------
    def identity(self) -> str:
        """The Lease's holder identity as last sampled ("" when none)."""
        with self._lock:
            return self.samples[-1][1] if self.samples else ""

    def _first(self, since: float, old: str | None, need_ready: bool) -> float | None:
        with self._lock:
            state = [s for s in self.samples if s[0] <= since][-1:]
            later = [s for s in self.samples if s[0] > since]
        for t, ident, rdy, _ in state + later:
            if ident and ident != old and (rdy or not need_ready):
                return max(t, since)
        return None

    def leaderless(self, since: float, until: float) -> float:
        """:func:`longest_unheld` of the samples between ``since`` and ``until``."""
        with self._lock:
            samples = list(self.samples)
        return longest_unheld(samples, since, until)

    def leader_after(self, since: float, old: str | None) -> float | None:
        """When (monotonic) an identity other than ``old`` (None: any) first held the Lease at
        or after ``since``; None if not yet."""
        return self._first(since, old, False)

    def ready_after(self, since: float, old: str | None) -> float | None:
        """When a holder other than ``old`` whose pod was Ready was first sampled."""
        return self._first(since, old, True)

    def whole(self) -> str:
        """What the Deployment lacks ("" when whole): every one of its replicas' pods with
        its container running, and the Lease held by a Ready one (hack/bed/deploy.py pending)."""
        pods = self.deploy.pods()
        want = self.deploy.deployment()["spec"]["replicas"]
        running = [p for p in pods if all("running" in (cs.get("state") or {})
                                          for cs in (p.get("status") or {}).get("containerStatuses") or [{}])]
        if len(running) != want or len(pods) != want:
            return f"{len(running)} of {want} pods with their container running"
        return self.deploy.pending(want)

    # -- faults ---------------------------------------------------------------------------
    def _leader_pod(self, timeout: float = 120.0) -> dict:
        from controller.runtime.leader import identity_host
        from hack.bed.deploy import ready

        def find() -> dict | None:
            ident = self.identity()
            holder = identity_host(ident) if ident else ""
            return next((p for p in self.deploy.pods() if p["metadata"]["name"] == holder and ready(p)), None)

        end = time.monotonic() + timeout
        while (pod := find()) is None:
            if time.monotonic() > end:
                raise RuntimeError(f"no Ready pod holding the Lease within {timeout:.0f}s: {self.whole()}")
            time.sleep(0.1)
        return pod

    def delete_leader(self) -> str:
        """``kubectl delete pod`` of the leader's pod (the default grace: SIGTERM, the Lease
        released); the ReplicaSet makes another."""
        from hack.bed.deploy import NAMESPACE

        name = self._leader_pod()["metadata"]["name"]
        self.deploy.kubectl("delete", "pod", "-n", NAMESPACE, name, "--wait=false")
        return f"pod {name} deleted"

    def kill_leader(self) -> str:
        """SIGKILL of the leader container's main process, found from the host (its task in
        the node's containerd); the kubelet restarts the container in the same pod."""
        pod = self._leader_pod()
        cid = ((pod["status"].get("containerStatuses") or [{}])[0].get("containerID") or "").removeprefix("containerd://")
        pid = container_pid(self.cluster.node, cid)
        with self._lock:
            self.killed.add(cid)
        os.kill(pid, signal.SIGKILL)
        return f"pod {pod['metadata']['name']} container {cid[:12]} pid {pid} SIGKILLed"

    def rollout(self) -> str:
        """``kubectl rollout restart``: the shipped strategy replaces both pods at once."""
        from hack.bed.deploy import NAME, NAMESPACE

        self.deploy.kubectl("rollout", "restart", f"deployment/{NAME}", "-n", NAMESPACE)
        return "rollout restart"

    def _set_memory(self, request: str, limit: str) -> None:
        from hack.bed.deploy import NAME, NAMESPACE

        path = "/spec/template/spec/containers/0/resources"
        ops = [{"op": "replace", "path": f"{path}/requests/memory", "value": request},
               {"op": "replace", "path": f"{path}/limits/memory", "value": limit}]
        self.deploy.kubectl("patch", "deployment", "-n", NAMESPACE, NAME, "--type=json", "-p", json.dumps(ops))

    def oom(self, timeout: float = 90.0) -> str:
        """The Deployment's memory limit (and request, which may not exceed it) lowered to
        ``cfg.oom_limit``: a rollout to pods the kernel's memory cgroup OOM-kills while they
        start (the kubelet reports ``OOMKilled``, then ``CrashLoopBackOff``). Once every new
        pod was OOM-killed (or ``timeout``), the shipped values are put back, a rollout to
        the previous ReplicaSet. RuntimeError (after the restore) if no OOM kill was seen."""
        live = self._container(self.deploy.deployment()["spec"]["template"])["resources"]
        shipped = (live["requests"]["memory"], live["limits"]["memory"])
        t0 = time.monotonic()
        with self._lock:
            before = len(self.exits)
        self._set_memory(self.cfg.oom_limit, self.cfg.oom_limit)
        # The pods the rollout starts at the lowered limit: maxSurge + maxUnavailable of them
        # (1 with the shipped 1/0: the old pods stay until a new one is Ready, which it never is).
        spec = self.deploy.deployment()["spec"]
        rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
        surge, unavailable = rolling.get("maxSurge", 1), rolling.get("maxUnavailable", 0)
        want = (min(spec["replicas"], surge + unavailable) if isinstance(surge, int) and isinstance(unavailable, int)
                else spec["replicas"])
        end = t0 + timeout
        while True:
            with self._lock:
                killed = {e["pod"] for e in self.exits[before:] if e["oom"] and e["expected"]}
            if len(killed) >= want or time.monotonic() > end:
                break
            time.sleep(0.2)
        seen = time.monotonic() - t0
        self._set_memory(*shipped)
        detail = (f"limit {self.cfg.oom_limit}: {len(killed)} pods OOM-killed within {seen:.1f}s, "
                  f"{shipped[1]} restored at +{time.monotonic() - t0:.1f}s")
        if not killed:
            raise RuntimeError(f"no pod was OOM-killed at {self.cfg.oom_limit} within {timeout:.0f}s")
        return detail

    def fault(self, kind: str) -> str:
        """Inject pod fault ``kind`` (POD_FAULT_KINDS); returns a detail for the record."""
        return {"poddelete": self.delete_leader, "podkill": self.kill_leader, "rollout": self.rollout,
                "oom": self.oom}[kind]()
