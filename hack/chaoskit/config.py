"""The chaos harness's configuration and result: the fault kinds, :class:`ChaosConfig` (what a
run does, and its schedule of faults), :class:`FaultRecord` (one fault and what followed) and
:class:`ChaosResult` (a run's figures, ``ok`` and its summary)."""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field
from typing import Any


# Faults of the bed (either mode) and of the controller: ``kill`` SIGKILLs a supervised
# subprocess; the pod kinds (``--pods``) act on the Deployment's pods on the bed's node.
BED_FAULT_KINDS = ("api", "compact", "nb", "kubeovn", "ipam")
POD_FAULT_KINDS = ("poddelete", "podkill", "rollout", "oom")
FAULT_KINDS = ("kill", *BED_FAULT_KINDS, *POD_FAULT_KINDS)
# The peer each peer fault kills and starts again (hack.bed.PEERS).
PEER_OF_FAULT = {"kubeovn": "kube-ovn-controller", "ipam": "ipam-provider"}


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
    # The controller as the Deployment of manifests/ on the bed's node (hack/bed/deploy.py) instead
    # of supervised subprocesses; needs root and the node's binaries. The pod fault kinds:
    pods: bool = False
    pod_deletes: int = 0  # the leader's pod deleted (the ReplicaSet replaces it)
    pod_kills: int = 0  # the leader container's main process SIGKILLed from the host (restarted in place)
    rollouts: int = 0  # kubectl rollout restart, under load
    ooms: int = 0  # the Deployment's memory limit lowered to ``oom_limit`` until the kernel OOM-kills its pods, then restored
    oom_limit: str = "32Mi"  # below the controller's start-up working set (about 45 MiB)
    whole_timeout: float = 330.0  # for the Deployment to be whole again (the kubelet's back-off tops at 300 s)
    # A VM on the bed's data plane pings its gateway every 0.1 s through the whole run
    # (hack/chaoskit/wire_monitor.py): a lost reply is a violation. Needs the data plane (root).
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
