#!/usr/bin/env python3
"""Chaos harness: two controller replicas under load while the bed is broken on purpose.

product-decisions.md §6 ("no VLAN is ever held by two networks of one provider, and no VLAN
is released while a consumer exists or while Kube-OVN still lists a live subnet on it —
under restarts, cache lag and kills") and field reports B01, B11, B12, B13.

What runs (all on loopback, in a bed of its own, because the API server is restarted):

* a :class:`~hack.cluster.LocalCluster` (etcd + kube-apiserver + OVN NB/SB + ovn-northd)
  with the real peers (``with_peers``, hack/build-peers.sh): kube-ovn-controller v1.13.0
  and the in-cluster IPAM provider v1.0.3. Kube-OVN makes the logical switches, localnet and
  router ports, ``Vlan.status.subnets`` (pruned on a Subnet's delete event) and its own
  Subnet finalizer; the provider fulfils IPAddressClaims (``v1beta1``, the newest version
  cluster-api v1.10 serves), counts pools and holds them with ``ProtectPool``. The harness
  makes what they need: a Kube-OVN ``Vpc`` per namespace (each Subnet is a VLAN Subnet of
  its namespace's VPC with ``logicalGateway: true``, so Kube-OVN makes the router port our
  HA chassis group goes on), ProviderNetworks (``spec.defaultInterface``, names ≤ 12 bytes),
  and three trunk Nodes carrying every provider network (the ready label Kube-OVN's node
  agent would set, from which kube-ovn-controller writes the ProviderNetworks' status, and
  an OVN chassis). A :class:`PeerSupervisor` keeps the peers running: a peer that exits
  without the harness killing it is started again and reported (expected within a minute of
  an API server or NB outage or an etcd compaction, unexpected otherwise);
* two controller replicas as subprocesses (``python -m controller.main --leader-elect=true
  --manage-gateway-chassis=true --ovn-nb-address=<the bed's NB>``; ``--manage-gateway
  false`` turns gateway management off), kept alive by a :class:`Supervisor` the way a
  Deployment keeps its pods: a replica that exits (SIGKILL, or "leadership lost" after an
  API outage) is started again. With ``--pods`` (``ChaosConfig.pods``; root) the bed has its
  node (hack/node.py) and the controller is the Deployment of manifests/ instead
  (:class:`PodReplicas`, hack/deploy.py): its ReplicaSet and the kubelet keep the pods
  running, and the faults include the pod kinds below; the supervisor stays for where the
  node cannot start;
* a :class:`GarbageCollector` standing in for kube-controller-manager's (claim-owned
  IPAddresses whose claim is gone are deleted) and for the operator who removes the
  provider's ProtectAddress finalizer from such an address: kube-apiserver can delete a new
  claim under the provider's just-added finalizer (kubernetes/kubernetes#77988), and the
  provider then makes an address for a claim that is gone and never lets go of it;
* a :class:`Loader` that creates and deletes networks (with their Subnet and pool),
  ProxmoxMachines (both capmox versions), IPAddressClaims and IPAddresses across several
  namespaces and two kinds of zones: ``zones`` zones alternating over two provider networks
  with disjoint ranges, and ``shared_zones`` zones all on a third provider network with one
  and the same range (the layout of issue 12: zones that share a provider compete for the
  same IDs, so only the per-provider lock and the assumed set keep them apart);
* an :class:`InvariantMonitor` with its own watches (not the product's informers) on Vlans,
  Subnets, networks, machines, addresses and claims. It checks, on every Vlan event, that no
  two Vlans share an ID on one provider (whatever their zones: the check is keyed by
  ``spec.provider`` and ``spec.id`` only), and records every Vlan deletion with its
  resourceVersion; a deletion is judged against the history of the other kinds at that
  resourceVersion (a consumer of the network's pool, or a subnet listed in the deleted
  Vlan's ``status.subnets`` that still existed, is a violation).

* with the bed's data plane (root; ``--wire``, on by default with gateway management): a
  :class:`~hack.wire_monitor.WireMonitor`, a tenant of its own whose VM pings its gateway
  every 0.1 s from before the first fault until the teardown; the gateway is OVN's and the
  controller only writes the group, so a lost echo reply is a violation.

Faults, injected at random points of the load: ``kill`` (SIGKILL of the leader), ``api``
(kube-apiserver killed and started again on the same port; the peers stay up and
reconnect), ``compact`` (etcd compaction to the current revision), ``nb`` (the NB
ovsdb-server stopped and started again with its database), ``kubeovn`` (kube-ovn-controller
SIGKILLed, started again after ``peer_down`` seconds) and ``ipam`` (the same for the IPAM
provider); with ``--pods``: ``poddelete`` (the leader's pod deleted), ``podkill`` (``kill -9``
of the leader container's process, found from the host), ``rollout`` (``kubectl rollout
restart``, the load going on until a new pod leads) and ``oom`` (the Deployment's memory
limit lowered until the kernel OOM-kills its pods, then restored); for each, the time to a
new Lease holder, to a Ready one and to a whole Deployment. After each fault the loader pauses (it finishes the step it is in) and the time
until every network has converged is measured: a live network Ready with its VLAN, a deleted
one gone together with its Vlan. After the last fault everything is torn down and the bed
must hold no Vlan, no ``proxmox.cozystack.io/`` finalizer, no HA_Chassis_Group of ours and
no router port pointing at one, and nothing the load deleted (Subnets, pools, claims,
addresses, machines: a deletion stuck on Kube-OVN's or the provider's finalizer); what
Kube-OVN itself leaves in the NB for the load's Subnets is reported, not failed.

Long form (figures into docs/reliability.md)::

    python hack/chaos.py --kills 50 --api-restarts 5 --compactions 5 --nb-restarts 5 \\
        --kubeovn-restarts 5 --ipam-restarts 5

On the Deployment's pods (figures into the pods' block of docs/reliability.md)::

    python hack/chaos.py --pods --pod-deletes 15 --pod-kills 15 --rollouts 10 --ooms 5 \
        --api-restarts 2 --compactions 2 --nb-restarts 2 --kubeovn-restarts 1 --ipam-restarts 1

Short forms: ``tests/test_chaos_integration.py`` (marker ``chaos``; the pods' one also
``node`` and ``image``) calls :func:`run` with a small :class:`ChaosConfig`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kubernetes import client as k8s  # noqa: E402
from kubernetes import watch as k8s_watch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from hack.bed import (  # noqa: E402
    PEERS,
    ClusterError,
    LocalCluster,
    _read_versions,
    ovsdb_rows,
    ovsdb_set,
)
from hack.controller_process import ControllerProcess  # noqa: E402
from hack.wire_monitor import WireFigures, WireMonitor  # noqa: E402
from attrs import asdict as attrs_asdict  # noqa: E402

OUR_PREFIX = "proxmox.cozystack.io/"
PX = ("proxmox.cozystack.io", "v1alpha1")
KUBEOVN = ("kubeovn.io", "v1")
IPAM_POOL = ("ipam.cluster.x-k8s.io", "v1alpha2")
# IPAddress / IPAddressClaim: cluster-api v1.10 (the IPAM provider's) serves v1alpha1 and v1beta1 only.
IPAM_ADDR = ("ipam.cluster.x-k8s.io", "v1beta1")
CAPMOX = "infrastructure.cluster.x-k8s.io"
LABEL_NS = "proxmox.cozystack.io/network-namespace"
LABEL_NAME = "proxmox.cozystack.io/network-name"
LABEL_ZONE = "proxmox.cozystack.io/zone"

# Faults of the bed (either mode) and of the controller: ``kill`` SIGKILLs a supervised
# subprocess; the pod kinds (``--pods``) act on the Deployment's pods on the bed's node.
BED_FAULT_KINDS = ("api", "compact", "nb", "kubeovn", "ipam")
POD_FAULT_KINDS = ("poddelete", "podkill", "rollout", "oom")
FAULT_KINDS = ("kill", *BED_FAULT_KINDS, *POD_FAULT_KINDS)
# The peer each peer fault kills and starts again (hack.cluster.PEERS).
PEER_OF_FAULT = {"kubeovn": "kube-ovn-controller", "ipam": "ipam-provider"}


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def api_status(exc: BaseException) -> int | None:
    return getattr(exc, "status", None) if isinstance(exc, ApiException) else None


def retry(fn: Callable[[], Any], what: str, deadline: float = 120.0, ok_statuses: tuple[int, ...] = ()) -> Any:
    """Call ``fn`` until it succeeds (the API server may be down for a while).

    A status in ``ok_statuses`` (409 AlreadyExists on a create, 404 on a delete) counts as
    done, since an earlier attempt may have gone through before the connection broke.
    """
    end = time.monotonic() + deadline
    delay = 0.2
    while True:
        try:
            return fn()
        except ApiException as exc:
            if exc.status in ok_statuses:
                return None
            if exc.status is not None and 400 <= exc.status < 500 and exc.status not in (429, 409):
                raise
            err: BaseException = exc
        except Exception as exc:  # connection refused / reset while the API server restarts
            err = exc
        if time.monotonic() > end:
            raise RuntimeError(f"{what}: still failing after {deadline:.0f}s: {err!r}")
        time.sleep(delay)
        delay = min(delay * 2, 2.0)


# --------------------------------------------------------------------------- configuration


@dataclass
class ChaosConfig:
    kills: int = 5
    api_restarts: int = 1
    compactions: int = 1
    nb_restarts: int = 1
    kubeovn_restarts: int = 1  # kube-ovn-controller SIGKILLed, started again after ``peer_down``
    ipam_restarts: int = 1  # the IPAM provider SIGKILLed, started again after ``peer_down``
    namespaces: int = 3
    zones: int = 4  # over two provider networks, disjoint ranges
    shared_zones: int = 3  # on a third provider network, every one with the range ``shared_range``
    shared_range: str = "1000-1039"
    slots: int = 20  # networks that can exist at once (each slot is reused with fresh names)
    initial_networks: int = 12
    load_window: tuple[float, float] = (1.0, 4.0)  # seconds of load before a fault, drawn uniformly
    api_down: float = 3.0  # seconds the API server stays down
    nb_down: float = 2.0
    peer_down: float = 2.0  # seconds a killed peer stays down before it is started again
    converge_timeout: float = 150.0
    seed: int = 0
    workdir: str | None = None
    keep_workdir: bool = False
    subnet_prune_timeout: str = "30s"
    # Short enough for the churn of a run (slots recycle IDs of a 40-ID shared range within
    # minutes); the product default of 10m would exhaust the shared zones.
    vlan_reuse_delay: str = "20s"
    resync_period: str = "10m"
    duration: float = 0.0  # stop injecting faults after this many seconds (0: inject them all)
    manage_gateway: bool = True  # HA chassis groups in the NB (the NB restart fault then matters)
    # The controller as the Deployment of manifests/ on the bed's node (hack/deploy.py) instead
    # of supervised subprocesses; needs root and the node's binaries. The pod fault kinds:
    pods: bool = False
    pod_deletes: int = 0  # the leader's pod deleted (the ReplicaSet replaces it)
    pod_kills: int = 0  # the leader container's main process SIGKILLed from the host (restarted in place)
    rollouts: int = 0  # kubectl rollout restart, under load
    ooms: int = 0  # the Deployment's memory limit lowered to ``oom_limit`` until the kernel OOM-kills its pods, then restored
    oom_limit: str = "32Mi"  # below the controller's start-up working set (about 45 MiB)
    whole_timeout: float = 330.0  # for the Deployment to be whole again (the kubelet's back-off tops at 300 s)
    # A VM on the bed's data plane pings its gateway every 0.1 s through the whole run
    # (hack/wire_monitor.py): a lost reply is a violation. Needs the data plane (root).
    wire: bool = True

    def schedule(self, rng: random.Random) -> list[str]:
        faults = ["kill"] * self.kills + ["api"] * self.api_restarts + ["compact"] * self.compactions + \
            ["nb"] * self.nb_restarts + ["kubeovn"] * self.kubeovn_restarts + ["ipam"] * self.ipam_restarts + \
            ["poddelete"] * self.pod_deletes + ["podkill"] * self.pod_kills + ["rollout"] * self.rollouts + \
            ["oom"] * self.ooms
        rng.shuffle(faults)
        return faults

    def check(self) -> None:
        """ValueError for a fault the mode cannot make: ``kill`` needs the supervised
        subprocesses, the pod kinds need ``pods``."""
        if self.pods and self.kills:
            raise ValueError("kill SIGKILLs a supervised subprocess; with pods use pod_kills (--pod-kills)")
        if not self.pods and (self.pod_deletes or self.pod_kills or self.rollouts or self.ooms):
            raise ValueError("the pod faults need the controller's Deployment (pods=True, --pods)")


@dataclass
class FaultRecord:
    kind: str
    at: float  # monotonic, when the fault was injected
    converge_seconds: float | None = None
    detail: str = ""
    ops_before: int = 0
    # --pods: seconds from the fault until another identity held the Lease, until the Lease's
    # holder was a Ready pod, and until the Deployment was whole (every pod's container running)
    leader_seconds: float | None = None
    ready_seconds: float | None = None
    whole_seconds: float | None = None
    # --pods: the longest stretch between the fault and the Deployment whole in which nobody
    # held the Lease (issue 27: a rollout never leaves the cluster leaderless longer than a lease)
    leaderless_seconds: float | None = None


@dataclass
class ChaosResult:
    config: dict[str, Any]
    faults: list[FaultRecord] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    convergence_failures: list[str] = field(default_factory=list)
    teardown_leftovers: list[str] = field(default_factory=list)
    replica_exits: list[dict[str, Any]] = field(default_factory=list)
    # exits of a real peer the harness did not cause (it starts the peer again): expected
    # within a minute of an API server or NB outage or a compaction, unexpected otherwise
    peer_exits: list[dict[str, Any]] = field(default_factory=list)
    peers: dict[str, str] = field(default_factory=dict)  # peer -> version
    # what Kube-OVN itself left in the NB for our Subnets (not ours: reported, not failed),
    # e.g. the router port its start-up gc keeps after a Subnet delete it missed while down
    kube_ovn_leftovers: list[str] = field(default_factory=list)
    gc_collected: int = 0  # claim-owned IPAddresses the harness's garbage collector deleted
    # addresses the provider made for a claim kube-apiserver had deleted under its finalizer
    # (kubernetes#77988), whose ProtectAddress the harness removed (GarbageCollector)
    ipam_orphans: list[str] = field(default_factory=list)
    ops: dict[str, int] = field(default_factory=dict)
    vlan_deletions_checked: int = 0
    uncertain: list[str] = field(default_factory=list)  # judgements a relist gap left open
    refuted: list[str] = field(default_factory=list)  # monitor flags the audit log disproves
    resolved: list[str] = field(default_factory=list)  # open judgements the audit log shows clean
    vlan_events: int = 0
    monitor_relists: int = 0
    wall_seconds: float = 0.0
    started_utc: str = ""
    cores: int = 0
    machine: str = ""
    initial_converge_seconds: float | None = None
    teardown_seconds: float | None = None
    vlan_deletions_unjudgeable: int = 0  # deletions of Vlans whose network the monitor never saw
    monitor_caught_up: bool = False  # the final judgement saw every event (watches = a fresh list)
    # provider -> {"vlans": Vlans the monitor saw on it, "ids": distinct IDs they held}: shows
    # that the shared provider was contended (many Vlans over few IDs)
    vlans_by_provider: dict[str, dict[str, int]] = field(default_factory=dict)
    commit: str = ""
    # --pods: the largest working set (bytes) the kubelet reported for a controller pod during
    # the run, its memory limit, and the seconds each deleted pod took from deletion to gone
    pod_working_set_max: int = 0
    pod_memory_limit: str = ""
    pod_stop_seconds: list[float] = field(default_factory=list)
    # wire: the VM's echo replies, lost ones, the longest gap (s) and the seconds probed
    # (hack/wire_monitor.WireFigures); None without the data plane or ``wire``
    wire: dict[str, Any] | None = None

    def survived(self, kind: str) -> int:
        return sum(1 for f in self.faults if f.kind == kind and f.converge_seconds is not None)

    def unexpected_exits(self) -> list[dict[str, Any]]:
        """Unexpected exits of a controller replica or of a real peer."""
        return [e for e in self.replica_exits + self.peer_exits if not e["expected"]]

    @property
    def ok(self) -> bool:
        return not (self.violations or self.convergence_failures or self.teardown_leftovers or self.unexpected_exits())

    def summary(self) -> str:
        lines = [f"wall {self.wall_seconds:.0f}s, ops {sum(self.ops.values())} {self.ops}"]
        for kind in FAULT_KINDS:
            times = [f.converge_seconds for f in self.faults if f.kind == kind and f.converge_seconds is not None]
            total = sum(1 for f in self.faults if f.kind == kind)
            if total:
                line = (f"{kind}: {len(times)}/{total} survived, converge median "
                        f"{statistics.median(times) if times else float('nan'):.1f}s max "
                        f"{max(times) if times else float('nan'):.1f}s")
                for what, attr in (("new leader", "leader_seconds"), ("Ready", "ready_seconds")):
                    got = [getattr(f, attr) for f in self.faults if f.kind == kind and getattr(f, attr) is not None]
                    if got:
                        line += f", {what} median {statistics.median(got):.1f}s max {max(got):.1f}s"
                lines.append(line)
        lines.append(f"violations {len(self.violations)}, convergence failures {len(self.convergence_failures)}, "
                     f"teardown leftovers {len(self.teardown_leftovers)}, replica exits {len(self.replica_exits)}, "
                     f"peer exits {len(self.peer_exits)} (unexpected {len(self.unexpected_exits())}), "
                     f"Vlan deletions checked {self.vlan_deletions_checked}, "
                     f"left open by a relist gap {len(self.uncertain)} (settled clean by the audit log "
                     f"{len(self.resolved)}), Kube-OVN's own NB leftovers "
                     f"{len(self.kube_ovn_leftovers)}, addresses garbage-collected {self.gc_collected}, "
                     f"provider orphans released {len(self.ipam_orphans)}")
        if self.pod_memory_limit:
            stops = self.pod_stop_seconds
            lines.append(f"pods: working set max {self.pod_working_set_max / 2**20:.0f} MiB of {self.pod_memory_limit}, "
                         f"{len(stops)} deleted pods gone in max {max(stops) if stops else 0:.1f}s")
        if self.wire is not None:
            w = self.wire
            lines.append(f"wire: a VM pinging its gateway: {w['replies']} replies in {w['seconds']:.0f}s, "
                         f"{w['lost']} lost (due at {w['lost_at']} s), longest gap {w['longest_gap']:.2f}s, "
                         f"gateway moves {w['gateway_moves'] or 'none'}, group kept {w['group_kept']}")
        if self.vlans_by_provider:
            lines.append("Vlans seen per provider (distinct IDs): " + ", ".join(
                f"{p} {x['vlans']} ({x['ids']})" for p, x in self.vlans_by_provider.items()))
        for v in self.violations + self.convergence_failures + self.teardown_leftovers:
            lines.append(f"  ! {v}")
        for v in self.refuted:
            lines.append(f"  (monitor flag refuted) {v}")
        for e in self.unexpected_exits():
            lines.append(f"  ! {'peer' if 'peer' in e else 'replica'} exit {e}")
        for e in self.peer_exits:
            if e["expected"]:
                lines.append(f"  (peer exit after an outage, restarted) {e['peer']} rc={e['rc']}: {e['why']}")
        for v in self.kube_ovn_leftovers:
            lines.append(f"  (Kube-OVN's own) {v}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- replicas


class Replica(ControllerProcess):
    """One controller process, as the controller's service-account user."""

    def __init__(self, cluster: LocalCluster, logdir: Path, n: int, cfg: ChaosConfig) -> None:
        self.n = n
        self.killed = False
        self.started = time.monotonic()
        super().__init__([f"--kubeconfig={cluster.controller_kubeconfig}", "--leader-elect=true",
                          *gateway_flags(cluster, cfg), f"--subnet-prune-timeout={cfg.subnet_prune_timeout}",
                          f"--resync-period={cfg.resync_period}", f"--vlan-reuse-delay={cfg.vlan_reuse_delay}",
                          "--log-format=console"], logdir / f"replica-{n}.log")

    def tail(self, n: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


class Supervisor:
    """Keeps ``count`` replicas running, like a Deployment; records every exit.

    An exit is *expected* when we SIGKILLed the process, or when it exited with 1 after
    logging "leadership lost" within ``outage_grace`` seconds of an API server outage (the
    leader cannot renew while the API server is down: product-decisions.md §4.5).
    """

    def __init__(self, cluster: LocalCluster, logdir: Path, cfg: ChaosConfig, count: int = 2,
                 restart_delay: float = 1.0, outage_grace: float = 60.0) -> None:
        self.cluster = cluster
        self.logdir = logdir
        self.cfg = cfg
        self.count = count
        self.restart_delay = restart_delay
        self.outage_grace = outage_grace
        self.replicas: list[Replica] = []
        self.exits: list[dict[str, Any]] = []
        self.outages: list[tuple[float, float]] = []  # (start, end) of API outages
        self._n = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)

    def start(self) -> "Supervisor":
        with self._lock:
            for _ in range(self.count):
                self._spawn()
        self._thread.start()
        return self

    def _spawn(self) -> Replica:
        self._n += 1
        r = Replica(self.cluster, self.logdir, self._n, self.cfg)
        self.replicas.append(r)
        return r

    def _expected(self, r: Replica, rc: int, at: float) -> bool:
        if r.killed:
            return True
        if rc == 1:
            text = r.log.read_text(errors="replace") if r.log.exists() else ""
            near_outage = any(s - 5 <= at <= e + self.outage_grace for s, e in self.outages)
            return near_outage and ("leadership lost" in text or "unable to start manager" in text)
        return False

    def _loop(self) -> None:
        pending: list[float] = []
        while not self._stop.is_set():
            with self._lock:
                for r in list(self.replicas):
                    rc = r.proc.poll()
                    if rc is None:
                        continue
                    now = time.monotonic()
                    self.replicas.remove(r)
                    exp = self._expected(r, rc, now)
                    self.exits.append({"replica": r.n, "rc": rc, "killed": r.killed, "expected": exp,
                                       "uptime": round(now - r.started, 1), "tail": "" if exp else r.tail()})
                    if not exp:
                        log(f"replica {r.n} exited unexpectedly rc={rc}:\n{r.tail()}")
                    pending.append(now + self.restart_delay)
                due = [p for p in pending if p <= time.monotonic()]
                for p in due:
                    pending.remove(p)
                    self._spawn()
            self._stop.wait(0.1)
        # Stopped from this thread: the replicas it spawned carry PR_SET_PDEATHSIG, which
        # fires when the *thread* that forked them ends, so they are stopped before it does.
        self._stop_replicas()

    def leader(self, timeout: float = 90.0) -> Replica:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._lock:
                current = list(self.replicas)
            leading = [r for r in current if r.leads()]
            if len(leading) == 1:
                return leading[0]
            time.sleep(0.1)
        raise RuntimeError(f"no single ready leader within {timeout}s")

    def kill_leader(self, timeout: float = 90.0) -> Replica:
        r = self.leader(timeout)
        r.killed = True
        r.proc.send_signal(signal.SIGKILL)
        return r

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)

    def _stop_replicas(self) -> None:
        with self._lock:
            for r in self.replicas:
                r.stop()
                rc = r.proc.returncode
                if rc not in (0,):
                    self.exits.append({"replica": r.n, "rc": rc, "killed": False, "expected": False,
                                       "uptime": round(time.monotonic() - r.started, 1),
                                       "tail": r.tail() + "\n(clean stop did not exit 0)"})


# --------------------------------------------------------------------------- the Deployment's pods (--pods)


def container_pid(node: Any, container_id: str) -> int:
    """The host pid of a running container's main process (its task in the node's containerd,
    ``ctr task ls``), checked against ``/proc/<pid>/cgroup``, which names the container.

    Raises RuntimeError when the container has no running task."""
    for line in node.ctr("task", "ls").splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 3 and parts[0] == container_id and parts[2] == "RUNNING":
            pid = int(parts[1])
            if container_id not in Path(f"/proc/{pid}/cgroup").read_text():
                raise RuntimeError(f"pid {pid} is not in the cgroup of container {container_id[:12]}")
            return pid
    raise RuntimeError(f"container {container_id[:12]} has no running task")


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

    :meth:`start` installs it (hack/deploy.py: the image, ``kubectl apply -k
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
        from hack.deploy import ControllerDeployment

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
        from controller.leader import identity_host
        from hack.deploy import LEASE, LEASE_NAMESPACE, NAMESPACE, SELECTOR, ready

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
        its container running, and the Lease held by a Ready one (hack/deploy.py pending)."""
        pods = self.deploy.pods()
        want = self.deploy.deployment()["spec"]["replicas"]
        running = [p for p in pods if all("running" in (cs.get("state") or {})
                                          for cs in (p.get("status") or {}).get("containerStatuses") or [{}])]
        if len(running) != want or len(pods) != want:
            return f"{len(running)} of {want} pods with their container running"
        return self.deploy.pending(want)

    # -- faults ---------------------------------------------------------------------------
    def _leader_pod(self, timeout: float = 120.0) -> dict:
        from controller.leader import identity_host
        from hack.deploy import ready

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
        from hack.deploy import NAMESPACE

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
        from hack.deploy import NAME, NAMESPACE

        self.deploy.kubectl("rollout", "restart", f"deployment/{NAME}", "-n", NAMESPACE)
        return "rollout restart"

    def _set_memory(self, request: str, limit: str) -> None:
        from hack.deploy import NAME, NAMESPACE

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


# --------------------------------------------------------------------------- bed faults


def restart_apiserver(cluster: LocalCluster, down: float) -> None:
    """Kill kube-apiserver (SIGKILL: a crash, no graceful drain), keep it down for ``down``
    seconds, start it again with the same flags and port, wait for /readyz.

    Uses LocalCluster's process handles: ``_procs`` and the ``_start_apiserver`` /
    ``_wait_apiserver`` steps of its own start (hack/cluster.py is not changed for this).
    """
    proc = cluster._procs["kube-apiserver"]
    proc.kill()
    proc.wait(10)
    time.sleep(down)  # the outage itself: a duration, not a condition to await
    cluster._start_apiserver()
    cluster._wait_apiserver()


def gateway_flags(cluster: LocalCluster, cfg: ChaosConfig) -> list[str]:
    if not cfg.manage_gateway:
        return ["--manage-gateway-chassis=false"]
    return ["--manage-gateway-chassis=true", f"--ovn-nb-address={cluster.nb_tcp}"]


TRUNK_NODES = ("chaos-node-a", "chaos-node-b", "chaos-node-c")
SHARED_PROVIDER = "chaos-pn2"  # the provider network of the ``shared_zones``


def create_trunk_nodes(admin: Any, providers: list[str]) -> None:
    """Nodes that carry every provider network, each with its OVN chassis (Kube-OVN's label
    and annotation), so every network's router port gets an HA chassis group. The ready
    label is what Kube-OVN's node agent sets (it does not run here); kube-ovn-controller
    rewrites every ProviderNetwork's status from these labels every 30 s, and a Node without
    them would make the ProviderNetwork not ready."""
    for n in TRUNK_NODES:
        admin.core.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(
            name=n,
            labels={f"{p}.provider-network.kubernetes.io/ready": "true" for p in providers},
            annotations={"ovn.kubernetes.io/chassis": f"{n}-chassis"},
        )))


def register_chassis(cluster: LocalCluster) -> None:
    """Each trunk Node's chassis in the SB, as ovn-controller on that node would register it
    (kube-ovn-controller looks a Node's chassis up there and retries the Node until it is;
    its chassis gc deletes a chassis whose ``hostname`` names no Node, so the hostname is set
    in the same transaction)."""
    for i, n in enumerate(TRUNK_NODES, start=11):
        cluster.sbctl("--may-exist", "chassis-add", f"{n}-chassis", "geneve", f"127.0.0.{i}",
                      "--", "set", "Chassis", f"{n}-chassis", f"hostname={n}")


def restart_nb(cluster: LocalCluster, down: float) -> None:
    """Stop the NB ovsdb-server, keep it down for ``down`` seconds, start it again on the
    same socket and port with the same database file."""
    proc = cluster._procs["ovsdb-nb"]
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    time.sleep(down)
    w = cluster.workdir
    port = cluster._ports["nb"]
    cluster._spawn(
        "ovsdb-nb",
        ["ovsdb-server", str(w / "nb.db"), f"--remote=punix:{w / 'nb.sock'}", f"--remote=ptcp:{port}:127.0.0.1",
         f"--unixctl={w / 'nb.ctl'}", f"--log-file={w / 'ovsdb-nb.log'}", "-vconsole:off", "-vfile:info"],
        w / "ovsdb-nb.console.log",
    )
    cluster._wait_nb()


class PeerSupervisor:
    """The real peers (kube-ovn-controller, the IPAM provider), kept running as their
    Deployments would keep them: a peer that exits without the harness killing it is started
    again (``LocalCluster.start_peer``, which returns once it is at work) and the exit is
    recorded. An exit within ``grace`` seconds of an API server or NB outage or an etcd
    compaction is *expected* (caused by it: kube-ovn-controller exits when it cannot renew its
    lease, as our replicas do, and v1.13.0 panics on the tombstone a relist hands its Subnet
    delete handler); any other is unexpected and fails the run.

    :meth:`fault` is the ``kubeovn`` / ``ipam`` fault: SIGKILL, ``down`` seconds, start again.
    A peer this supervisor (re)starts lives as long as the thread that started it (the bed's
    processes carry PR_SET_PDEATHSIG): the main thread for a fault, the supervisor's thread
    for a restart after an exit; both outlive the run's load.
    """

    def __init__(self, cluster: LocalCluster, outages: list[tuple[float, float]], grace: float = 60.0,
                 start_deadline: float = 240.0) -> None:
        self.cluster = cluster
        self.outages = outages  # (start, end) of API server and NB outages, appended by the run
        self.grace = grace
        self.start_deadline = start_deadline
        self.exits: list[dict[str, Any]] = []
        self.kills: dict[str, int] = {name: 0 for name in PEERS}
        self.restart_seconds: list[float] = []  # start_peer until at work, after each fault
        self._started = {name: time.monotonic() for name in PEERS}
        self._offsets = {name: self._log_size(name) for name in PEERS}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="peer-supervisor", daemon=True)

    def start(self) -> "PeerSupervisor":
        for name in PEERS:
            self.cluster.peer_pid(name)  # both run (the bed waited for them), or ClusterError
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.start_deadline + 30)

    def _log(self, name: str) -> Path:
        return self.cluster.workdir / f"{name}.log"

    def _log_size(self, name: str) -> int:
        try:
            return self._log(name).stat().st_size
        except OSError:
            return 0

    def _log_since_start(self, name: str) -> str:
        try:
            with open(self._log(name), "rb") as f:
                f.seek(self._offsets[name])
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _running(self, name: str) -> bool:
        try:
            self.cluster.peer_pid(name)
            return True
        except ClusterError:
            return False

    def _restart(self, name: str) -> float:
        """Start ``name`` until it is at work (retrying while the API server is away); returns
        how long that took."""
        t0 = time.monotonic()
        end = t0 + self.start_deadline
        while True:
            self._offsets[name] = self._log_size(name)
            try:
                self.cluster.start_peer(name)
                self._started[name] = time.monotonic()
                return time.monotonic() - t0
            except ClusterError as exc:
                if time.monotonic() > end:
                    raise RuntimeError(f"{name} did not come back within {self.start_deadline:.0f}s: {exc}") from exc
                log(f"{name} did not start ({str(exc).splitlines()[0]}); again")
                with contextlib.suppress(ClusterError):
                    self.cluster.kill_peer(name)  # one that hangs in its start
                self._stop.wait(1.0)

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                for name in PEERS:
                    if self._running(name):
                        continue
                    now = time.monotonic()
                    proc = self.cluster._procs.get(name)
                    rc = proc.poll() if proc is not None else None
                    near = any(s - 5 <= now <= e + self.grace for s, e in self.outages)
                    since = self._log_since_start(name)
                    why = exit_reason(since)
                    tail = "\n".join(since.splitlines()[-12:])
                    exit_ = {"peer": name, "rc": rc, "expected": near, "uptime": round(now - self._started[name], 1),
                             "why": why[-300:], "tail": "" if near else tail}
                    self.exits.append(exit_)
                    log(f"peer {name} exited (rc {rc}, {'after an outage' if near else 'UNEXPECTED'}): {why[-300:]}")
                    try:
                        exit_["restart_seconds"] = round(self._restart(name), 1)
                    except RuntimeError as exc:
                        exit_["expected"] = False
                        exit_["tail"] = f"{tail}\n{exc}"
                        log(str(exc))

    def fault(self, name: str, down: float) -> str:
        """SIGKILL ``name`` (a crash: no Lease release), keep it down ``down`` seconds, start
        it again; returns once it is at work, with a detail for the fault record."""
        with self._lock:
            self.cluster.kill_peer(name)
            self.kills[name] += 1
            time.sleep(down)  # the outage itself: a duration, not a condition to await
            took = self._restart(name)
            self.restart_seconds.append(took)
            return f"down {down:.1f}s, at work again {took:.1f}s after its start"


def exit_reason(text: str) -> str:
    """The line of a peer's log (since its start) that says why it exited: the first Go
    panic, else the last fatal line (klog's ``F<mmdd> …``, or ``leaderelection lost``), else
    the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    panic = next((ln for ln in lines if ln.startswith("panic:") or ln.startswith("fatal error:")), None)
    if panic:
        return panic
    for ln in reversed(lines):
        if re.match(r"F\d{4} ", ln) or "leaderelection lost" in ln:
            return ln
    return lines[-1] if lines else ""


def create_vpcs(admin: Any, names: list[str], timeout: float = 60.0) -> None:
    """Kube-OVN Vpcs (a Subnet with ``spec.vpc`` needs its Vpc: its router port goes on the
    router Kube-OVN makes for it); returns once Kube-OVN reports each one up (``standby``)."""
    for n in names:
        admin.co.create_cluster_custom_object(*KUBEOVN, "vpcs", {
            "apiVersion": "kubeovn.io/v1", "kind": "Vpc", "metadata": {"name": n}, "spec": {}})
    end = time.monotonic() + timeout
    for n in names:
        while not (admin.co.get_cluster_custom_object(*KUBEOVN, "vpcs", n).get("status") or {}).get("standby"):
            if time.monotonic() > end:
                raise RuntimeError(f"Kube-OVN did not bring Vpc {n} up within {timeout:.0f}s")
            time.sleep(0.2)


def peer_versions() -> dict[str, str]:
    v = _read_versions()
    return {"kube-ovn-controller": v.get("KUBE_OVN_VERSION", "?"), "ipam-provider": v.get("IPAM_PROVIDER_VERSION", "?")}


# --------------------------------------------------------------------------- monitor


KINDS: dict[str, tuple[str, str, str]] = {
    "vlans": ("kubeovn.io", "v1", "vlans"),
    "subnets": ("kubeovn.io", "v1", "subnets"),
    "networks": ("proxmox.cozystack.io", "v1alpha1", "proxmoxnetworks"),
    "machines": (CAPMOX, "v1alpha2", "proxmoxmachines"),
    "addresses": (*IPAM_ADDR, "ipaddresses"),
    "claims": (*IPAM_ADDR, "ipaddressclaims"),
    "pools": ("ipam.cluster.x-k8s.io", "v1alpha2", "inclusterippools"),
}


def obj_key(obj: dict) -> str:
    m = obj.get("metadata") or {}
    return f"{m['namespace']}/{m['name']}" if m.get("namespace") else m["name"]


def rv_of(obj: dict) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def pool_refs(obj: dict) -> list[str]:
    """Pool names a consumer references, read independently of controller.consumers from the
    shapes this harness writes (capmox v1alpha1/v1alpha2 machines, poolRef of IPAM objects)."""
    spec = obj.get("spec") or {}
    out = []
    ref = spec.get("poolRef")
    if isinstance(ref, dict):
        out.append(ref.get("name"))
    netw = spec.get("network") or {}
    for dev in (netw.get("additionalDevices") or []) + (netw.get("networkDevices") or []):
        if isinstance(dev.get("ipv4PoolRef"), dict):
            out.append(dev["ipv4PoolRef"].get("name"))
        for r in dev.get("ipPoolRef") or []:
            out.append(r.get("name"))
    return [p for p in out if p]


@dataclass
class Deletion:
    rv: int
    vlan: dict
    synthesized: bool  # seen by a relist (after a 410 or a broken watch), not a DELETED event
    judged: bool = False


class InvariantMonitor:
    """Independent watches on the kinds that matter, with per-object history by resourceVersion."""

    def __init__(self, cluster: LocalCluster, namespaces: set[str], providers: set[str]) -> None:
        self.cluster = cluster
        self.namespaces = namespaces
        self.providers = providers
        self.lock = threading.Lock()
        self.current: dict[str, dict[str, dict]] = {k: {} for k in KINDS}
        # key -> [(resourceVersion, object or None for deleted, synthesized by a relist)]
        self.history: dict[str, dict[str, list[tuple[int, dict | None, bool]]]] = {k: {} for k in KINDS}
        self.uncertain: list[str] = []
        self.duplicates: list[str] = []  # duplicate-ID flags (kept; judge() adds release judgements)
        self.unjudgeable = 0  # deletions of Vlans whose network the monitor never saw
        self.net_specs: dict[str, dict] = {}  # last known spec of every network key, kept after delete
        self.deletions: list[Deletion] = []
        self.violations: list[str] = []
        self.vlan_events = 0
        self.relists = 0
        self.synced: dict[str, bool] = {k: False for k in KINDS}
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(k,), name=f"monitor-{k}", daemon=True)
                         for k in KINDS]
        self._seen_dups: set[tuple] = set()
        self.seen_by_provider: dict[str, tuple[set[str], set[Any]]] = {}  # provider -> (Vlan names, IDs)

    def start(self, timeout: float = 60.0) -> "InvariantMonitor":
        for t in self._threads:
            t.start()
        end = time.monotonic() + timeout
        while not all(self.synced.values()):
            if time.monotonic() > end:
                raise RuntimeError(f"monitor did not sync: {self.synced}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(50)

    def relevant(self, kind: str, obj: dict) -> bool:
        m = obj.get("metadata") or {}
        if kind == "vlans":
            return (obj.get("spec") or {}).get("provider") in self.providers
        if kind == "subnets":
            return True
        return m.get("namespace") in self.namespaces

    # -- watch loop ------------------------------------------------------------------
    def _run(self, kind: str) -> None:
        group, version, plural = KINDS[kind]
        api = self.cluster.api_client("admin")
        co = k8s.CustomObjectsApi(api)
        rv = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    lst = co.list_cluster_custom_object(group, version, plural, _request_timeout=(5, 60))
                    rv = lst["metadata"]["resourceVersion"]
                    self._snapshot(kind, lst["items"], int(rv))
                    self.synced[kind] = True
                w = k8s_watch.Watch()
                for ev in w.stream(co.list_cluster_custom_object, group, version, plural, resource_version=rv,
                                   timeout_seconds=20, allow_watch_bookmarks=True, _request_timeout=(5, 30)):
                    if self._stop.is_set():
                        w.stop()
                        break
                    etype, obj = ev["type"], ev["object"]
                    if etype == "ERROR":
                        if (obj or {}).get("code") == 410:
                            rv = None
                            break
                        continue
                    if etype == "BOOKMARK":
                        rv = obj["metadata"]["resourceVersion"]
                        continue
                    rv = obj["metadata"]["resourceVersion"]
                    self._event(kind, etype, obj, int(rv), synthesized=False)
            except ApiException as exc:
                if exc.status == 410:
                    rv = None
                else:
                    self._stop.wait(0.3)
            except Exception:  # connection refused / reset while the API server restarts
                self._stop.wait(0.3)
        api.close()

    def _snapshot(self, kind: str, items: list[dict], rv: int) -> None:
        with self.lock:
            if self.synced[kind]:
                self.relists += 1
            fresh = {obj_key(o): o for o in items if self.relevant(kind, o)}
            # Deletes first: a Vlan deleted and another created with its ID while the watch
            # was down must not look like two Vlans holding the ID at once.
            for key in list(self.current[kind]):
                if key not in fresh:
                    self._apply(kind, "DELETED", self.current[kind][key], rv, True)
            for key, obj in fresh.items():
                old = self.current[kind].get(key)
                if old is None or rv_of(old) != rv_of(obj):
                    self._apply(kind, "MODIFIED" if old else "ADDED", obj, rv_of(obj), True)

    def _event(self, kind: str, etype: str, obj: dict, rv: int, synthesized: bool) -> None:
        if not self.relevant(kind, obj):
            return
        with self.lock:
            self._apply(kind, etype, obj, rv, synthesized)

    def _apply(self, kind: str, etype: str, obj: dict, rv: int, synthesized: bool) -> None:
        key = obj_key(obj)
        hist = self.history[kind].setdefault(key, [])
        if etype == "DELETED":
            self.current[kind].pop(key, None)
            hist.append((rv, None, synthesized))
        else:
            self.current[kind][key] = obj
            hist.append((rv, obj, synthesized))
        if kind == "networks" and etype != "DELETED":
            self.net_specs[key] = obj.get("spec") or {}
        if kind != "vlans":
            return
        self.vlan_events += 1
        if etype == "DELETED":
            self.deletions.append(Deletion(rv, obj, synthesized))
            return
        # B01: never two Vlans with one ID on one provider, at any resourceVersion we see.
        spec = obj.get("spec") or {}
        names, ids = self.seen_by_provider.setdefault(spec.get("provider"), (set(), set()))
        names.add((obj.get("metadata") or {}).get("uid") or key)
        ids.add(spec.get("id"))
        same = sorted(k for k, v in self.current["vlans"].items()
                      if (v.get("spec") or {}).get("provider") == spec.get("provider")
                      and (v.get("spec") or {}).get("id") == spec.get("id"))
        if len(same) > 1:
            sig = (spec.get("provider"), spec.get("id"), tuple(same))
            if sig not in self._seen_dups:
                self._seen_dups.add(sig)
                flag = f"duplicate VLAN {spec.get('id')} on provider {spec.get('provider')}: {same} (rv {rv})"
                self.duplicates.append(flag)
                self.violations.append(flag)

    # -- judging deletions ---------------------------------------------------------------
    def _present_at(self, kind: str, key: str, rv: int) -> tuple[dict | None, bool]:
        """The object as of resourceVersion ``rv`` (None: absent) and whether that is certain.

        Entries from a relist carry the object's own resourceVersion (it existed at least
        since then); a delete synthesized by a relist carries the list's resourceVersion,
        but the object may have gone at any point since its previous entry. So an object
        present at ``rv`` whose next entry is such a synthesized delete may already have
        been gone at ``rv``: uncertain (after an API server restart the kinds relist at
        different resourceVersions)."""
        entries = sorted(self.history[kind].get(key, []), key=lambda e: e[0])
        best = None
        nxt = None
        for e in entries:
            if e[0] <= rv:
                best = e
            elif nxt is None:
                nxt = e
        if best is None or best[1] is None:
            return None, True
        certain = not (nxt is not None and nxt[1] is None and nxt[2])
        return best[1], certain

    def _referencing(self, kind: str, key: str, pool: str, lo: int, hi: int) -> tuple[bool, bool, bool]:
        """Whether ``key`` referenced ``pool`` at ``lo``, at ``hi``, and at any entry in between."""
        at_lo, _ = self._present_at(kind, key, lo)
        at_hi, _ = self._present_at(kind, key, hi)
        between = any(o is not None and pool in pool_refs(o)
                      for r, o, _ in self.history[kind].get(key, []) if lo < r <= hi)
        ref = (lambda o: o is not None and pool in pool_refs(o))
        return ref(at_lo), ref(at_hi), between

    def _deleted_since(self, d: Deletion) -> int:
        """For a delete seen only by a relist: the Vlan's previous entry (it went at some
        point after that); for a watched delete, the delete's own resourceVersion."""
        if not d.synthesized:
            return d.rv
        prior = [r for r, o, _ in self.history["vlans"].get(obj_key(d.vlan), []) if r < d.rv and o is not None]
        return max(prior) if prior else d.rv

    def judge(self) -> int:
        """Judge every Vlan deletion again from the history seen so far (a consumer's event
        that arrived late counts); returns how many deletions could be judged. Call after
        the watches have caught up (``caught_up``) for the final word.

        A delete seen only by a relist happened somewhere in (previous entry, list rv]: a
        consumer present at both ends is a violation, one present at some point in between
        only is reported as open (``uncertain``)."""
        violations: list[str] = []
        uncertain: list[str] = []
        judged = unjudgeable = 0
        with self.lock:
            for d in self.deletions:
                d.judged = True
                name = d.vlan["metadata"]["name"]
                labels = d.vlan["metadata"].get("labels") or {}
                how = "relist" if d.synthesized else "watch"
                ns, net = labels.get(LABEL_NS, ""), labels.get(LABEL_NAME, "")
                pool = (self.net_specs.get(f"{ns}/{net}") or {}).get("ipPool")
                lo = self._deleted_since(d)
                if ns and pool:
                    judged += 1
                else:
                    unjudgeable += 1  # its consumers cannot be judged; its listed Subnets still are
                for kind in ("machines", "addresses", "claims") if ns and pool else ():
                    for key in self.history[kind]:
                        if not key.startswith(ns + "/"):
                            continue
                        msg = (f"Vlan {name} (VLAN {(d.vlan.get('spec') or {}).get('id')}) deleted at rv {d.rv} "
                               f"({how}) while {kind[:-1]} {key} referenced pool {ns}/{pool}")
                        if d.synthesized:
                            at_lo, at_hi, between = self._referencing(kind, key, pool, lo, d.rv)
                            if at_lo and at_hi:
                                violations.append(msg)
                            elif at_lo or at_hi or between:
                                uncertain.append(msg)
                            continue
                        obj, certain = self._present_at(kind, key, d.rv)
                        if obj is not None and pool in pool_refs(obj):
                            (violations if certain else uncertain).append(msg)
                for sub in (d.vlan.get("status") or {}).get("subnets") or []:
                    msg = f"Vlan {name} deleted at rv {d.rv} ({how}) while it listed live Subnet {sub}"
                    at_hi, certain = self._present_at("subnets", sub, d.rv)
                    if d.synthesized:
                        # Both ends of the gap must be certain: a Subnet whose own delete a
                        # relist synthesized may have gone before the Vlan did (the audit log
                        # then settles it, recheck_open).
                        at_lo, _ = self._present_at("subnets", sub, lo)
                        if at_lo is not None and at_hi is not None and certain:
                            violations.append(msg)
                        elif at_lo is not None or at_hi is not None:
                            uncertain.append(msg)
                    elif at_hi is not None:
                        (violations if certain else uncertain).append(msg)
            self.violations = self.duplicates + violations
            self.uncertain = uncertain
            self.unjudgeable = unjudgeable
        return judged

    def caught_up(self, timeout: float = 30.0) -> bool:
        """Wait until every watched kind holds exactly what a fresh list returns (same keys,
        same resourceVersions): only then is a final ``judge`` based on all the events."""
        api = self.cluster.api_client("admin")
        co = k8s.CustomObjectsApi(api)
        end = time.monotonic() + timeout
        try:
            while time.monotonic() < end:
                behind = False
                for kind, (group, version, plural) in KINDS.items():
                    lst = co.list_cluster_custom_object(group, version, plural, _request_timeout=(5, 30))
                    want = {obj_key(o): rv_of(o) for o in lst["items"] if self.relevant(kind, o)}
                    with self.lock:
                        have = {k: rv_of(o) for k, o in self.current[kind].items()}
                    if want != have:
                        behind = True
                        break
                if not behind:
                    return True
                time.sleep(0.2)
        except Exception:  # the bed is going down: judge what we have
            return False
        finally:
            api.close()
        return False


# --------------------------------------------------------------------------- load


MAX_SLOTS = 150  # Slot.net24 has 10.100-10.249 for them


def vpc_of(ns: str) -> str:
    return f"vpc-{ns}"


@dataclass
class Slot:
    idx: int
    ns: str
    zone: str
    run_id: str = "0"
    gen: int = 0
    live: bool = False
    consumers: list[tuple[str, str]] = field(default_factory=list)  # (kind, name)

    @property
    def net(self) -> str:
        return f"net{self.idx:03d}-g{self.gen}"

    @property
    def subnet(self) -> str:
        return f"cs{self.idx:03d}g{self.gen}-{self.run_id}"

    @property
    def pool(self) -> str:
        return f"pool{self.idx:03d}-g{self.gen}"

    @property
    def vpc(self) -> str:
        return vpc_of(self.ns)

    @property
    def net24(self) -> str:
        """The /24 of this generation: a fresh one per generation, so a new Subnet never
        overlaps its slot's previous one in the same VPC while Kube-OVN is still deleting it."""
        return f"10.{100 + self.idx}.{self.gen % 256}"


class Loader:
    """Creates and deletes networks, machines and addresses at random; pausable between steps."""

    def __init__(self, cluster: LocalCluster, slots: list[Slot], rng: random.Random) -> None:
        self.api = cluster.api_client("admin")
        self.co = k8s.CustomObjectsApi(self.api)
        self.slots = slots
        self.rng = rng
        self.ops: dict[str, int] = {}
        self.gone: list[tuple[str, str, str]] = []  # (ns, network, subnet) deleted
        self._run = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._stop = threading.Event()
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._loop, name="loader", daemon=True)

    def start(self) -> "Loader":
        self._thread.start()
        return self

    def resume(self) -> None:
        self._idle.clear()
        self._run.set()

    def pause(self, timeout: float = 300.0) -> None:
        self._run.clear()
        if not self._idle.wait(timeout):
            raise RuntimeError("loader did not pause")

    def stop(self) -> None:
        self._stop.set()
        self._run.set()
        self._thread.join(30)
        self.api.close()

    def _count(self, op: str) -> None:
        self.ops[op] = self.ops.get(op, 0) + 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self._run.is_set():
                self._idle.set()
                self._run.wait(0.5)
                continue
            self._idle.clear()
            try:
                self.step()
            except Exception as exc:  # noqa: BLE001 - recorded, the load goes on
                self.errors.append(f"{type(exc).__name__}: {exc}")
                log(f"loader step failed: {exc!r}")
            if not self._run.is_set():
                self._idle.set()

    # -- operations ---------------------------------------------------------------------
    def step(self) -> None:
        live = [s for s in self.slots if s.live]
        free = [s for s in self.slots if not s.live]
        choices = []
        if free:
            choices += ["create"] * 3
        if live:
            choices += ["delete"] * 2 + ["consumer"] * 2
        if any(s.consumers for s in live):
            choices += ["unconsume"] * 2
        op = self.rng.choice(choices)
        if op == "create":
            self.create(self.rng.choice(free))
        elif op == "delete":
            self.delete(self.rng.choice(live))
        elif op == "consumer":
            self.add_consumer(self.rng.choice(live))
        else:
            self.remove_consumer(self.rng.choice([s for s in live if s.consumers]))
        self._count(op)

    def create(self, s: Slot) -> None:
        s.gen += 1
        s.consumers = []
        n = s.net24
        # logicalGateway: Kube-OVN makes the VPC router port <vpc>-<subnet> (which gets our HA
        # chassis group) for a VLAN Subnet only with it.
        subnet = {"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": s.subnet},
                  "spec": {"vlan": s.subnet, "vpc": s.vpc, "cidrBlock": f"{n}.0/24", "gateway": f"{n}.1",
                           "protocol": "IPv4", "logicalGateway": True, "excludeIps": [f"{n}.100..{n}.150"]}}
        pool = {"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
                "metadata": {"name": s.pool, "namespace": s.ns},
                "spec": {"addresses": [f"{n}.100-{n}.150"], "prefix": 24, "gateway": f"{n}.1"}}
        net = {"apiVersion": "proxmox.cozystack.io/v1alpha1", "kind": "ProxmoxNetwork",
               "metadata": {"name": s.net, "namespace": s.ns}, "spec": {"zone": s.zone, "subnet": s.subnet, "ipPool": s.pool}}
        steps = [
            lambda: self.co.create_cluster_custom_object(*KUBEOVN, "subnets", subnet),
            lambda: self.co.create_namespaced_custom_object(*IPAM_POOL, s.ns, "inclusterippools", pool),
            lambda: self.co.create_namespaced_custom_object(*PX, s.ns, "proxmoxnetworks", net),
        ]
        self.rng.shuffle(steps)
        s.live = True
        for fn in steps:
            retry(fn, f"create {s.ns}/{s.net}", ok_statuses=(409,))

    def add_consumer(self, s: Slot) -> None:
        kind = self.rng.choice(["machine1", "machine2", "claim", "address"])
        name = f"{s.net}-{kind}-{len(s.consumers)}-{self.rng.randrange(1 << 20):05x}"
        ref = {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": s.pool}
        if kind == "machine1":
            body = {"apiVersion": f"{CAPMOX}/v1alpha1", "kind": "ProxmoxMachine", "metadata": {"name": name, "namespace": s.ns},
                    "spec": {"network": {"default": {"bridge": "vmbr0"}, "additionalDevices": [
                        {"name": "net1", "bridge": "vmbr1", "ipv4PoolRef": ref}]}}}
            fn = lambda: self.co.create_namespaced_custom_object(CAPMOX, "v1alpha1", s.ns, "proxmoxmachines", body)  # noqa: E731
        elif kind == "machine2":
            body = {"apiVersion": f"{CAPMOX}/v1alpha2", "kind": "ProxmoxMachine", "metadata": {"name": name, "namespace": s.ns},
                    "spec": {"network": {"networkDevices": [{"name": "net0", "bridge": "vmbr0"},
                                                            {"name": "net1", "bridge": "vmbr1", "ipPoolRef": [ref]}]}}}
            fn = lambda: self.co.create_namespaced_custom_object(CAPMOX, "v1alpha2", s.ns, "proxmoxmachines", body)  # noqa: E731
        elif kind == "claim":
            body = {"apiVersion": "/".join(IPAM_ADDR), "kind": "IPAddressClaim",
                    "metadata": {"name": name, "namespace": s.ns}, "spec": {"poolRef": ref}}
            fn = lambda: self.co.create_namespaced_custom_object(*IPAM_ADDR, s.ns, "ipaddressclaims", body)  # noqa: E731
        else:
            body = {"apiVersion": "/".join(IPAM_ADDR), "kind": "IPAddress",
                    "metadata": {"name": name, "namespace": s.ns},
                    "spec": {"address": f"{s.net24}.{140 + len(s.consumers) % 10}", "prefix": 24,
                             "gateway": f"{s.net24}.1", "claimRef": {"name": name}, "poolRef": ref}}
            fn = lambda: self.co.create_namespaced_custom_object(*IPAM_ADDR, s.ns, "ipaddresses", body)  # noqa: E731
        s.consumers.append((kind, name))
        retry(fn, f"create {kind} {s.ns}/{name}", ok_statuses=(409,))

    def _delete_consumer(self, s: Slot, kind: str, name: str) -> None:
        if kind.startswith("machine"):
            fn = lambda: self.co.delete_namespaced_custom_object(CAPMOX, "v1alpha2", s.ns, "proxmoxmachines", name)  # noqa: E731
        elif kind == "claim":
            fn = lambda: self.co.delete_namespaced_custom_object(*IPAM_ADDR, s.ns, "ipaddressclaims", name)  # noqa: E731
        else:
            fn = lambda: self.co.delete_namespaced_custom_object(*IPAM_ADDR, s.ns, "ipaddresses", name)  # noqa: E731
        retry(fn, f"delete {kind} {s.ns}/{name}", ok_statuses=(404,))

    def remove_consumer(self, s: Slot) -> None:
        kind, name = s.consumers.pop(self.rng.randrange(len(s.consumers)))
        self._delete_consumer(s, kind, name)

    def delete(self, s: Slot) -> None:
        """Delete the network and everything it uses, in a random order (a network deleted
        first waits InUse / SubnetStillExists until the rest follows)."""
        steps: list[Callable[[], Any]] = [
            lambda: self.co.delete_namespaced_custom_object(*PX, s.ns, "proxmoxnetworks", s.net),
            lambda: self.co.delete_cluster_custom_object(*KUBEOVN, "subnets", s.subnet),
            lambda: self.co.delete_namespaced_custom_object(*IPAM_POOL, s.ns, "inclusterippools", s.pool),
        ]
        consumers = list(s.consumers)
        steps += [lambda k=k, n=n: self._delete_consumer(s, k, n) for k, n in consumers]
        self.rng.shuffle(steps)
        s.live = False
        s.consumers = []
        self.gone.append((s.ns, s.net, s.subnet))
        for fn in steps:
            retry(fn, f"delete {s.ns}/{s.net}", ok_statuses=(404,))


# --------------------------------------------------------------------------- garbage collector


PROTECT_ADDRESS = "ipam.cluster.x-k8s.io/ProtectAddress"  # the IPAM provider's finalizer on its addresses


class GarbageCollector:
    """What the bed lacks around IPAddresses whose owning IPAddressClaim is gone (by UID).

    * kube-controller-manager's garbage collector (the bed runs none): such an address in
      our namespaces is deleted (``collected``).
    * An operator's cleanup after a race of kube-apiserver's (kubernetes/kubernetes#77988,
      unfixed: its fix was reverted): a DELETE received before the provider's PATCH that adds
      its ReleaseAddress finalizer to a new claim, and completed after it, removes the claim
      anyway; the provider, from its cache, then makes the claim's address, with its
      ProtectAddress finalizer, which only its handling of the deleting claim would remove —
      and the claim is gone. In a cluster that address (rightly) holds its network InUse
      until someone removes the finalizer. Here: an address that is being deleted, carries
      ProtectAddress, and whose claim is gone on two sweeps in a row, has ProtectAddress
      removed (``orphans_released``, with the address names in ``orphans``).

    With the real provider nothing else leaves such addresses: it deletes a claim's address
    before its ReleaseAddress finalizer lets the claim go. The provider makes an address with
    two owners, its claim and its pool; where kube-controller-manager runs (the node bed of
    ``--pods``) its garbage collector drops the dangling claim reference and keeps the
    address (the pool still owns it), so an address with ProtectAddress and no claim owner is
    judged by the claim its ``spec.claimRef`` names. (This class was first written for
    the IPAM emulator, which had no such finalizer.)
    """

    def __init__(self, cluster: LocalCluster, namespaces: list[str]) -> None:
        self.api = cluster.api_client("admin")
        self.co = k8s.CustomObjectsApi(self.api)
        self.namespaces = set(namespaces)
        self.collected = 0
        self.orphans_released = 0
        self.orphans: list[str] = []
        self._suspects: set[str] = set()  # deleting orphans seen on the previous sweep (uids)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gc", daemon=True)

    def start(self) -> "GarbageCollector":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.api.close()

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.sweep()
            except Exception:  # noqa: BLE001 - API server down: next round
                pass

    def sweep(self) -> None:
        kw = {"_request_timeout": (5, 30)}
        # Addresses first: an address's owner claim was created before it, so a claim list
        # taken afterwards holds every owner still alive.
        addrs = self.co.list_cluster_custom_object(*IPAM_ADDR, "ipaddresses", **kw)["items"]
        listed = self.co.list_cluster_custom_object(*IPAM_ADDR, "ipaddressclaims", **kw)["items"]
        claims = {c["metadata"]["uid"] for c in listed}
        claim_names = {(c["metadata"]["namespace"], c["metadata"]["name"]) for c in listed}
        suspects: set[str] = set()
        for a in addrs:
            m = a["metadata"]
            if m.get("namespace") not in self.namespaces:
                continue
            owners = [o for o in m.get("ownerReferences") or [] if o.get("kind") == "IPAddressClaim"]
            claim_ref = ((a.get("spec") or {}).get("claimRef") or {}).get("name")
            if owners:
                if any(o.get("uid") in claims for o in owners):
                    continue
            elif not (PROTECT_ADDRESS in (m.get("finalizers") or []) and claim_ref
                      and (m["namespace"], claim_ref) not in claim_names):
                # Hand-written addresses (no finalizer of the provider's) are the load's own.
                # A provider-made one without a claim owner: kube-controller-manager's garbage
                # collector (the node bed runs it) dropped the dangling claim reference and
                # kept the pool's, so only spec.claimRef still names the claim.
                continue
            try:
                if not m.get("deletionTimestamp"):
                    self.co.delete_namespaced_custom_object(*IPAM_ADDR, m["namespace"], "ipaddresses", m["name"], **kw)
                    self.collected += 1
                    continue
                fins = m.get("finalizers") or []
                if PROTECT_ADDRESS not in fins:
                    continue
                if m["uid"] not in self._suspects:
                    suspects.add(m["uid"])  # again on the next sweep before it counts
                    continue
                # JSON patch guarded by a test of the list: only the provider's finalizer goes.
                ops = [{"op": "test", "path": "/metadata/finalizers", "value": fins},
                       {"op": "replace", "path": "/metadata/finalizers", "value": [f for f in fins if f != PROTECT_ADDRESS]}]
                self.co.patch_namespaced_custom_object(*IPAM_ADDR, m["namespace"], "ipaddresses", m["name"], ops,
                                                       _content_type="application/json-patch+json", **kw)
                self.orphans_released += 1
                self.orphans.append(f"{m['namespace']}/{m['name']}")
                log(f"IPAddress {m['namespace']}/{m['name']}: its claim is gone (kubernetes#77988 race), "
                    f"{PROTECT_ADDRESS} removed")
            except ApiException as exc:
                if exc.status not in (404, 409, 422):
                    raise
        self._suspects = suspects


# --------------------------------------------------------------------------- convergence


def condition(obj: dict, ctype: str) -> dict:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return {}


class Checker:
    """Reads the API (admin) and says what has not converged yet."""

    def __init__(self, cluster: LocalCluster, namespaces: list[str], providers: set[str]) -> None:
        self.api = cluster.api_client("admin")
        self.co = k8s.CustomObjectsApi(self.api)
        self.namespaces = namespaces
        self.providers = providers

    def close(self) -> None:
        self.api.close()

    def deleted_left(self, run_id: str) -> list[str]:
        """After teardown: what the load deleted and is still there: a Subnet of the load's
        (``cs…-<run_id>``), or a pool, claim, address or machine in our namespaces — a
        deletion stuck on a finalizer (Kube-OVN's on a Subnet, the IPAM provider's
        ``ProtectPool`` / ``ReleaseAddress`` / ``ProtectAddress``)."""
        out = []
        for kind in ("subnets", "pools", "claims", "addresses", "machines"):
            g, ver, plural = KINDS[kind]
            for o in self.co.list_cluster_custom_object(g, ver, plural, _request_timeout=(5, 30))["items"]:
                m = o["metadata"]
                if kind == "subnets":
                    if not (m["name"].startswith("cs") and m["name"].endswith(f"-{run_id}")):
                        continue
                elif m.get("namespace") not in self.namespaces:
                    continue
                what = {"addresses": "IPAddress", "claims": "IPAddressClaim", "pools": "InClusterIPPool",
                        "machines": "ProxmoxMachine", "subnets": "Subnet"}[kind]
                out.append(f"{what} {obj_key(o)} left (finalizers {m.get('finalizers') or []})")
        return out

    def pending(self, slots: list[Slot], gone: list[tuple[str, str, str]]) -> list[str]:
        nets = {}
        for n in self.co.list_cluster_custom_object(*PX, "proxmoxnetworks", _request_timeout=(5, 30))["items"]:
            if n["metadata"]["namespace"] in self.namespaces:
                nets[(n["metadata"]["namespace"], n["metadata"]["name"])] = n
        vlans = {v["metadata"]["name"]: v
                 for v in self.co.list_cluster_custom_object(*KUBEOVN, "vlans", _request_timeout=(5, 30))["items"]
                 if (v.get("spec") or {}).get("provider") in self.providers}
        out = []
        live_subnets = set()
        for s in slots:
            if not s.live:
                continue
            live_subnets.add(s.subnet)
            n = nets.get((s.ns, s.net))
            if n is None:
                out.append(f"{s.ns}/{s.net}: missing")
                continue
            ready = condition(n, "Ready")
            vid = (n.get("status") or {}).get("vlan")
            v = vlans.get(s.subnet)
            if ready.get("status") != "True" or ready.get("reason") != "Ready":
                out.append(f"{s.ns}/{s.net}: Ready={ready.get('status')}/{ready.get('reason')}: {ready.get('message')}")
            elif v is None or (v.get("spec") or {}).get("id") != vid:
                out.append(f"{s.ns}/{s.net}: status.vlan {vid} but Vlan {s.subnet} is {v and v.get('spec')}")
        for ns, net, sub in gone:
            if (ns, net) in nets:
                ready = condition(nets[(ns, net)], "Ready")
                out.append(f"{ns}/{net}: deleting, Ready={ready.get('reason')}: {ready.get('message')}")
            elif sub in vlans:
                out.append(f"Vlan {sub} of deleted {ns}/{net} still exists")
        for name in vlans:
            if name not in live_subnets and not any(name == g[2] for g in gone):
                out.append(f"stray Vlan {name}")
        return out

    def leftovers(self, zones: list[str]) -> list[str]:
        """After teardown: no Vlan on our providers, no finalizer of ours anywhere we wrote."""
        out = []
        for v in self.co.list_cluster_custom_object(*KUBEOVN, "vlans")["items"]:
            if (v.get("spec") or {}).get("provider") in self.providers:
                out.append(f"Vlan {v['metadata']['name']} (VLAN {v['spec'].get('id')}) left")
        for kind, (g, ver, plural) in KINDS.items():
            for o in self.co.list_cluster_custom_object(g, ver, plural)["items"]:
                m = o["metadata"]
                if kind != "vlans" and kind != "subnets" and m.get("namespace") not in self.namespaces:
                    continue
                if kind == "subnets" and not m["name"].startswith("cs"):
                    continue
                ours = [f for f in m.get("finalizers") or [] if f.startswith(OUR_PREFIX)]
                if ours:
                    out.append(f"{kind} {obj_key(o)} keeps finalizer(s) {ours}")
                elif kind in ("networks",):
                    out.append(f"{kind} {obj_key(o)} left")
        for z in zones:
            try:
                zobj = self.co.get_cluster_custom_object(*PX, "proxmoxnetworkzones", z)
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise
            ours = [f for f in zobj["metadata"].get("finalizers") or [] if f.startswith(OUR_PREFIX)]
            if ours:
                out.append(f"zone {z} keeps finalizer(s) {ours}")
        return out

    def namespace_leftovers(self) -> list[str]:
        """After teardown: no namespace annotation still listing a network. Awaited, not read
        once: the namespace pass that drops the last triple follows the network's departure
        (coalesced for ``NAMESPACE_COALESCE``, 0.2 s), so it may land just after the network
        has gone."""
        out = []
        core = k8s.CoreV1Api(self.api)
        for ns in self.namespaces:
            ann = (core.read_namespace(ns).metadata.annotations or {}).get("proxmox.cozystack.io/networks")
            if ann:
                out.append(f"namespace {ns} still lists networks {ann!r}")
        return out


def wait_converged(checker: Checker, loader: Loader, timeout: float) -> tuple[float | None, list[str]]:
    """Poll until nothing is pending; returns (monotonic time of convergence or None, last pending)."""
    end = time.monotonic() + timeout
    last: list[str] = []
    while time.monotonic() < end:
        try:
            last = checker.pending(loader.slots, loader.gone)
        except Exception as exc:  # API server still coming back
            last = [f"check failed: {exc!r}"]
        else:
            if not last:
                return time.monotonic(), []
        time.sleep(0.25)
    return None, last


def wait_whole(reps: PodReplicas, timeout: float) -> tuple[float | None, str]:
    """Poll until the Deployment is whole (:meth:`PodReplicas.whole`); returns (monotonic time
    or None, what it lacked last)."""
    end = time.monotonic() + timeout
    last = ""
    while time.monotonic() < end:
        try:
            last = reps.whole()
        except Exception as exc:  # noqa: BLE001 - the API server still coming back
            last = f"check failed: {exc!r}"
        else:
            if not last:
                return time.monotonic(), ""
        time.sleep(0.25)
    return None, last


# --------------------------------------------------------------------------- the run


def nb_groups_of_ours(cluster: LocalCluster) -> list[str]:
    out = cluster.nbctl("--bare", "--columns=name", "list", "HA_Chassis_Group")
    return [n for n in out.split() if n.startswith("px-")]


def nb_leftovers(cluster: LocalCluster, vpcs: list[str], run_id: str) -> tuple[list[str], list[str]]:
    """After teardown, what the NB still holds for the load's Subnets: (ours, Kube-OVN's own).

    Ours: a router port on one of the load's VPC routers that still points at an HA chassis
    group. Kube-OVN's own (reported, not a failure): its logical switches ``cs…-<run_id>``
    and router ports ``<vpc>-cs…`` (Kube-OVN's start-up gc keeps the router port of a
    Subnet whose delete it missed while it was down, docs/real-peers.md row 12)."""
    ours, kube_ovns = [], []
    for row in ovsdb_rows(cluster.nbctl, "Logical_Router_Port", columns="name,ha_chassis_group"):
        name = row["name"]
        if not any(name.startswith(f"{v}-cs") for v in vpcs):
            continue
        if ovsdb_set(row["ha_chassis_group"]):
            ours.append(f"router port {name} still has an HA_Chassis_Group")
        else:
            kube_ovns.append(f"router port {name}")
    for row in ovsdb_rows(cluster.nbctl, "Logical_Switch", columns="name"):
        if row["name"].startswith("cs") and row["name"].endswith(f"-{run_id}"):
            kube_ovns.append(f"logical switch {row['name']}")
    return ours, kube_ovns


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
    # with --pods also the node the controller's Deployment runs on (hack/node.py, root).
    cluster = LocalCluster(workdir / "bed", with_peers=True, with_node=cfg.pods)
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
        from hack.objects import Admin

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


# --------------------------------------------------------------------------- audit cross-check


def vlan_lifetimes(audit_log: Path) -> dict[str, list[tuple[str, str]]]:
    """Vlan name -> [(created, deleted)] from the API server's audit log (the times the
    create and the delete completed; "~" when not deleted). The audit log is written by the
    API server itself, in blocking mode, so it does not miss what a watch may miss around
    an API server restart."""
    spans: dict[str, list[list[str]]] = {}
    for e in _completed_object_requests(audit_log, {"vlans"}):
        ref = e.get("objectRef") or {}
        name, t = ref.get("name") or (e.get("responseObject") or {}).get("metadata", {}).get("name"), e["stageTimestamp"]
        if e["verb"] == "create":
            name = name or ""
            spans.setdefault(name, []).append([t, "~"])
        elif e["verb"] == "delete" and name in spans and spans[name][-1][1] == "~":
            spans[name][-1][1] = t
    return {k: [tuple(x) for x in v] for k, v in spans.items()}  # type: ignore[misc]


def _completed_object_requests(audit_log: Path, plurals: set[str]):
    """The audit log's successful (2xx), completed requests on objects (not subresources) of
    ``plurals``, in log order. Lines that cannot name one of them are skipped unparsed."""
    with open(audit_log, errors="replace") as f:
        for line in f:
            if '"ResponseComplete"' not in line or not any(f'"{pl}"' in line for pl in plurals):
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue
            ref = e.get("objectRef") or {}
            code = (e.get("responseStatus") or {}).get("code", 0)
            if e.get("stage") != "ResponseComplete" or ref.get("resource") not in plurals or ref.get("subresource") \
                    or not 200 <= code < 300:
                continue
            yield e


def recheck_duplicates(violations: list[str], audit_log: Path) -> tuple[list[str], list[str]]:
    """Split duplicate-VLAN flags into (confirmed, refuted) with the audit log: two Vlans
    held one ID together only if their lifetimes overlap. Other violations pass through."""
    import ast

    if not audit_log.exists():
        return violations, []
    life = vlan_lifetimes(audit_log)
    confirmed, refuted = [], []
    for v in violations:
        m = re.match(r"duplicate VLAN \S+ on provider \S+: (\[.*\]) \(rv \d+\)$", v)
        if not m:
            confirmed.append(v)
            continue
        names = ast.literal_eval(m.group(1))
        spans = [life.get(n) for n in names]
        if any(not sp for sp in spans):
            confirmed.append(v)
            continue
        def overlaps(x, y) -> bool:
            return any(a0 < (b1 if b1 != "~" else "9") and b0 < (a1 if a1 != "~" else "9")
                       for (a0, a1) in x for (b0, b1) in y)

        overlap = any(overlaps(spans[i], spans[j]) for i in range(len(spans)) for j in range(i + 1, len(spans)))
        if overlap:
            confirmed.append(v)
        else:
            refuted.append(f"{v}: refuted by the audit log, "
                           + "; ".join(f"{n} existed {' and '.join(f'{a}..{b}' for a, b in sp)}" for n, sp in zip(names, spans)))
    return confirmed, refuted


AUDIT_PLURALS = {"machine": "proxmoxmachines", "addresse": "ipaddresses", "claim": "ipaddressclaims",
                 "Subnet": "subnets", "Vlan": "vlans"}


def removal_times(audit_log: Path, plurals: set[str]) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(plural, namespace, name) -> (received, completed) of the request that removed the
    object from the API, from the audit log: its last successful write (a PATCH or PUT that
    took the last finalizer off; nothing can write an object once it is gone) at or after its
    successful DELETE, or that DELETE itself (no finalizer). Objects never deleted are absent.
    Subresource writes (status) never remove an object and are skipped."""
    out: dict[tuple[str, str, str], tuple[str, str]] = {}
    deleted: set[tuple[str, str, str]] = set()
    for e in _completed_object_requests(audit_log, plurals):
        ref = e.get("objectRef") or {}
        key = (ref["resource"], ref.get("namespace") or "", ref.get("name") or "")
        span = (e["requestReceivedTimestamp"], e["stageTimestamp"])
        if e["verb"] == "create":
            deleted.discard(key)
            out.pop(key, None)
        elif e["verb"] == "delete":
            deleted.add(key)
            out[key] = span
        elif e["verb"] in ("patch", "update") and key in deleted:
            out[key] = span
    return out


def recheck_open(uncertain: list[str], audit_log: Path) -> tuple[list[str], list[str], list[str]]:
    """Settle the judgements a relist gap left open with the API server's audit log:
    (still open, clean, violations). A judgement is about a Vlan that went while a consumer
    of its pool, or a Subnet it listed, may still have existed. Clean when the consumer's (or
    Subnet's) removal completed before the request removing the Vlan was even received; a
    violation when the consumer's removal was received after the Vlan's completed; open when
    the two requests overlap or one of them is not in the log. Names are unique per run (fresh names
    per slot generation), so (kind, namespace, name) identifies one object."""
    if not uncertain or not audit_log.exists():
        return uncertain, [], []
    pat_consumer = re.compile(r"Vlan (\S+) \(VLAN \S+\) deleted at rv \d+ \(\w+\) while (\w+) (\S+)/(\S+) referenced pool")
    pat_subnet = re.compile(r"Vlan (\S+) deleted at rv \d+ \(\w+\) while it listed live Subnet (\S+)$")
    gone = removal_times(audit_log, set(AUDIT_PLURALS.values()))
    still, clean, bad = [], [], []
    for u in uncertain:
        if m := pat_consumer.match(u):
            vlan, other = m.group(1), (AUDIT_PLURALS.get(m.group(2), ""), m.group(3), m.group(4))
        elif m := pat_subnet.match(u):
            vlan, other = m.group(1), ("subnets", "", m.group(2))
        else:
            still.append(u)
            continue
        v, o = gone.get(("vlans", "", vlan)), gone.get(other)
        if v is None:
            still.append(u)
        elif o is not None and o[1] < v[0]:
            clean.append(f"{u}: clean by the audit log, the {other[0][:-1]} was removed by {o[1]}, the Vlan from {v[0]}")
        elif o is not None and o[0] > v[1]:
            bad.append(f"{u}: confirmed by the audit log, the Vlan was removed by {v[1]}, the {other[0][:-1]} from {o[0]}")
        else:
            still.append(u)
    return still, clean, bad


# --------------------------------------------------------------------------- report


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
        *([f"* On the wire (hack/wire_monitor.py): a VM on the data plane pinged its gateway every 0.1 s through "
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


def main(argv: list[str] | None = None) -> int:
    import faulthandler

    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid>: every thread's stack on stderr
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", action="store_true",
                    help="run the controller as the Deployment of manifests/ on the bed's node (root; hack/deploy.py) "
                         "instead of supervised subprocesses, and make the pod faults")
    ap.add_argument("--kills", type=int, default=None,
                    help="SIGKILL of the leader subprocess (default 50; not with --pods: see --pod-kills)")
    ap.add_argument("--pod-deletes", type=int, default=None, help="the leader's pod deleted (--pods; default 15)")
    ap.add_argument("--pod-kills", type=int, default=None,
                    help="kill -9 of the leader container's process from the host (--pods; default 15)")
    ap.add_argument("--rollouts", type=int, default=None, help="kubectl rollout restart under load (--pods; default 10)")
    ap.add_argument("--ooms", type=int, default=None,
                    help="the memory limit lowered until the pods are OOM-killed, then restored (--pods; default 5)")
    ap.add_argument("--oom-limit", default=ChaosConfig.oom_limit, help="the lowered memory limit of the oom fault")
    ap.add_argument("--api-restarts", type=int, default=5)
    ap.add_argument("--compactions", type=int, default=5)
    ap.add_argument("--nb-restarts", type=int, default=5)
    ap.add_argument("--kubeovn-restarts", type=int, default=5,
                    help="kube-ovn-controller SIGKILLed and started again (the `kubeovn` fault)")
    ap.add_argument("--ipam-restarts", type=int, default=5,
                    help="the IPAM provider SIGKILLed and started again (the `ipam` fault)")
    ap.add_argument("--peer-down", type=float, default=ChaosConfig.peer_down,
                    help="seconds a killed peer stays down")
    ap.add_argument("--slots", type=int, default=30)
    ap.add_argument("--initial-networks", type=int, default=20)
    ap.add_argument("--namespaces", type=int, default=4)
    ap.add_argument("--zones", type=int, default=4, help="zones over two provider networks, disjoint ranges")
    ap.add_argument("--shared-zones", type=int, default=ChaosConfig.shared_zones,
                    help=f"zones all on a third provider network ({SHARED_PROVIDER}) with one and the same range "
                         "(issue 12's layout; 0: none)")
    ap.add_argument("--shared-range", default=ChaosConfig.shared_range, help="the range of every shared zone")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--duration", type=float, default=0.0,
                    help="stop injecting faults after this many seconds (0: inject them all)")
    ap.add_argument("--converge-timeout", type=float, default=180.0)
    from controller.config import parse_bool

    ap.add_argument("--manage-gateway", type=parse_bool, default=True,
                    help="run the replicas with HA chassis group management on (default true)")
    ap.add_argument("--wire", type=parse_bool, default=True,
                    help="a VM on the bed's data plane pings its gateway through the run; a lost reply is a "
                         "violation (default true; needs root and gateway management)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs) even on success")
    ap.add_argument("--report", default=str(REPO / "docs" / "reliability.md"),
                    help="markdown file whose figures block is replaced ('' to skip)")
    ap.add_argument("--json", default="", help="also write the raw result as JSON here")
    ap.add_argument("--recheck", nargs=2, metavar=("RESULT_JSON", "AUDIT_LOG"),
                    help="re-judge a finished run's duplicate flags against its audit log and write its figures")
    args = ap.parse_args(argv)
    if args.recheck:
        raw = json.loads(Path(args.recheck[0]).read_text())
        raw["faults"] = [FaultRecord(**f) for f in raw["faults"]]
        res = ChaosResult(**{k: v for k, v in raw.items() if k in ChaosResult.__dataclass_fields__})
        res.violations, refuted = recheck_duplicates(res.violations, Path(args.recheck[1]))
        res.refuted += refuted
        res.uncertain, resolved, late = recheck_open(res.uncertain, Path(args.recheck[1]))
        res.resolved += resolved
        res.violations += late
        print(res.summary())
        if args.report:
            write_figures(Path(args.report), res)
        return 0 if res.ok else 1
    def pick(value: int | None, with_pods: int, without: int) -> int:
        return value if value is not None else (with_pods if args.pods else without)

    cfg = ChaosConfig(kills=pick(args.kills, 0, 50), api_restarts=args.api_restarts, compactions=args.compactions,
                      nb_restarts=args.nb_restarts, kubeovn_restarts=args.kubeovn_restarts,
                      ipam_restarts=args.ipam_restarts, peer_down=args.peer_down, slots=args.slots, initial_networks=args.initial_networks,
                      namespaces=args.namespaces, zones=args.zones, shared_zones=args.shared_zones,
                      shared_range=args.shared_range, seed=args.seed,
                      converge_timeout=args.converge_timeout, workdir=args.workdir, keep_workdir=args.keep)
    cfg.duration = args.duration
    cfg.manage_gateway = args.manage_gateway
    cfg.wire = args.wire and args.manage_gateway  # without the group the VM gets no answer at all (the seed's bug)
    cfg.pods = args.pods
    cfg.pod_deletes, cfg.pod_kills = pick(args.pod_deletes, 15, 0), pick(args.pod_kills, 15, 0)
    cfg.rollouts, cfg.ooms = pick(args.rollouts, 10, 0), pick(args.ooms, 5, 0)
    cfg.oom_limit = args.oom_limit
    try:
        cfg.check()
    except ValueError as exc:
        ap.error(str(exc))
    try:
        res = run(cfg)
    except Exception:
        traceback.print_exc()
        return 1
    print(res.summary())
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(res), indent=2, default=str))
    if args.report:
        write_figures(Path(args.report), res)
        print(f"figures written to {args.report}")
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
