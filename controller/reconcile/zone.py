"""ProxmoxNetworkZone reconcile: observe, plan, apply (reference-behaviour.md §8).

A pass reads the zone, the Vlans of its provider and label, the networks and Subnets that
bear on orphan collection into a :class:`controller.plan.zone.ZoneSnapshot` (caches only)
and runs the pure planner :func:`controller.plan.zone.plan_zone` with the executor until
the plan settles.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

from controller import names, schema
from controller.rules import prune
from controller.apply.executor import Executor, run
from controller.rfc3339 import Clock, utc_now
from controller.runtime.events import EventRecorder
from controller.runtime.kube import KubeWriter
from controller.metrics import Metrics
from controller.watch.indexes import Listers
from controller.plan.zone import ZoneSnapshot, plan_zone
from controller.runtime.recent import RecentWrites
from controller.runtime.result import Result
from controller.apply.vlans import VlanManager
from controller.rules.vlan_claims import vlan_owner
from controller.watch.indexes import BY_VLAN, BY_ZONE


class ZoneReconciler:
    """Reconciles one ProxmoxNetworkZone key (its name) per call."""

    def __init__(
        self,
        listers: Listers,
        writer: KubeWriter,
        vlans: VlanManager,
        now: Clock = utc_now,
        events: EventRecorder | None = None,
        prune_timeout: float | None = None,
        metrics: Metrics | None = None,
        stopping: threading.Event | None = None,
        pruned: schema.PrunedFields | None = None,
    ) -> None:
        self.l = listers
        self.pruned = pruned
        self.vlans = vlans
        self.now = now
        self.prune_timeout = prune.prune_timeout(prune_timeout).total_seconds()  # §7: None/non-positive = 10 min
        self.recent = RecentWrites(listers.zones)
        self.metrics = metrics or Metrics()
        self.executor = Executor(writer, vlans, (names.PROXMOX_NETWORK_ZONES, self.recent), events, self.metrics,
                                 stopping=stopping, pruned=pruned)

    def reconcile(self, key: str) -> Result:
        """One pass over zone ``key``.

        :raises ApiError: when a read or write fails (the worker retries with backoff).
        """
        return run(plan_zone, self.observe(key), self.executor)

    def observe(self, key: str) -> ZoneSnapshot:
        """Everything a pass over zone ``key`` reads from the caches (no API call)."""
        zone = self.recent.get(key)
        pruned = self.pruned.of(names.PROXMOX_NETWORK_ZONES) if self.pruned is not None else frozenset()
        base = ZoneSnapshot(name=key, zone=zone, now=self.now(), prune_timeout=self.prune_timeout, pruned=pruned)
        if zone is None:
            return base
        provider = str((zone.get("spec") or {}).get("providerNetwork") or "")
        labelled = tuple(self.l.vlans.by_index(BY_ZONE, key))
        cached: set[str] = set()
        bound: dict[str, tuple[Any, ...]] = defaultdict(tuple)
        for v in labelled:
            ns, nname = vlan_owner(v)
            if ns and nname and self.l.networks.get(f"{ns}/{nname}") is not None:
                cached.add(f"{ns}/{nname}")
            vname = v["metadata"]["name"]
            if self.l.subnets is not None:
                bound[vname] = tuple(self.l.subnets.by_index(BY_VLAN, vname))
        return ZoneSnapshot(
            name=key, zone=zone, now=base.now, prune_timeout=self.prune_timeout,
            on_provider=tuple(self.vlans.vlans_on(provider)),
            labelled=labelled,
            zones=tuple(self.l.zones.list()),
            networks=len(self.l.networks.by_index(BY_ZONE, key)),
            provider_network=self.l.provider_networks.get(provider),
            cached_networks=frozenset(cached),
            bound=dict(bound),
            pruned=pruned,
        )
