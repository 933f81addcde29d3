"""ProxmoxNetworkZone reconcile: VLAN counts and ``Ready`` (reference-behaviour.md §8).

Counts come from the synced Vlan cache (indexes ``provider`` and ``zone``) instead of an
API list per pass (``product-decisions.md`` §4.4). Orphaned-Vlan collection arrives with
the lifecycle work.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import structlog

from controller import allocator, kubeovn, names, prune
from controller.conditions import FALSE, TRUE, Clock, set_condition, transition, utc_now
from controller.events import NORMAL, WARNING, EventRecorder
from controller.kube import ApiError, KubeWriter
from controller.metrics import Metrics
from controller.recent import RecentWrites
from controller.network import Listers, Result
from controller.prune import go_list
from controller.vlans import VlanManager, vlan_owner

ZONE_RESYNC = 600.0  # §8 step 11

log = structlog.get_logger(__name__)


def duplicates_on(vlans: list[dict[str, Any]]) -> dict[int, list[str]]:
    """ID -> sorted Vlan names, for every ID held by more than one of ``vlans``."""
    by_id: dict[int, list[str]] = defaultdict(list)
    for v in vlans:
        vid = allocator.vlan_id(v)
        if vid is not None:
            by_id[vid].append(v["metadata"]["name"])
    return {vid: sorted(ns) for vid, ns in sorted(by_id.items()) if len(ns) > 1}


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
    ) -> None:
        self.l = listers
        self.writer = writer
        self.vlans = vlans
        self.now = now
        self.events = events
        self.prune_timeout = prune.prune_timeout(prune_timeout).total_seconds()  # §7: None/non-positive = 10 min
        self.recent = RecentWrites(listers.zones)
        self.metrics = metrics or Metrics()

    def reconcile(self, key: str) -> Result:
        zone = self.recent.get(key)
        if zone is None:
            self.metrics.forget_zone(key)
            return Result()
        gen = int(zone["metadata"].get("generation") or 0)
        old = zone.get("status") or {}
        status = copy.deepcopy(old)
        status["observedGeneration"] = gen
        conds: list[dict[str, Any]] = status.setdefault("conditions", [])
        requeue = self._fill(zone, status, conds, gen)
        if status != old:
            body = copy.deepcopy(zone)
            body["status"] = status
            try:
                self.recent.wrote(self.writer.update_status(names.PROXMOX_NETWORK_ZONES, body))
            except ApiError as err:
                if err.conflict:
                    self.recent.forget(key)
                raise
            after = transition(old.get("conditions"), conds, names.READY)
            if self.events is not None and after is not None:
                self.events.event(zone, NORMAL if after.get("status") == TRUE else WARNING,
                                  after.get("reason", ""), after.get("message", ""))
        return Result(requeue)

    def _fill(self, zone: dict[str, Any], status: dict[str, Any], conds: list[dict[str, Any]], gen: int) -> float | None:
        """Fill the zone status; returns the requeue delay (10 min, or an orphan's recheck)."""
        spec = zone.get("spec") or {}
        name = zone["metadata"]["name"]
        now = self.now
        try:
            cands = allocator.candidates(spec)
        except allocator.VLANRangeError as err:
            set_condition(conds, names.READY, FALSE, "ZoneInvalid", str(err), gen, now)
            return None
        provider = str(spec.get("providerNetwork") or "")
        on_provider = self.vlans.vlans_on(provider)
        in_range = set(cands)
        static = {
            a["vlan"] for a in allocator.static_assignments(zone) if isinstance(a.get("vlan"), int)
        }
        labelled = self.l.vlans.by_index("zone", name)
        stranded = []
        allocated = 0
        orphans = 0
        requeue = ZONE_RESYNC
        for v in labelled:
            allocated += 1
            vid = allocator.vlan_id(v)
            if vid not in in_range and vid not in static:
                stranded.append(f"{vid} ({v['metadata']['name']})")
            if not self._is_orphan(v):
                continue
            collected, recheck = self._collect_orphan(zone, v)
            if collected:
                allocated -= 1
                continue
            if recheck is not None:
                requeue = min(requeue, recheck)
            if self._is_orphan(v):
                orphans += 1
        used = allocator.used_vlans(on_provider, provider) | allocator.pinned_vlans(self.l.zones.list(), provider)
        free = sum(1 for c in cands if c not in used)
        status["totalVLANs"] = len(cands)
        status["allocatedVLANs"] = allocated
        status["freeVLANs"] = free
        status["networks"] = len(self.l.networks.by_index("zone", name))
        self.metrics.set_zone(name, len(cands), allocated, free, status["networks"], orphans)

        pn = self.l.provider_networks.get(provider)
        if pn is None:
            ready, reason, msg = FALSE, "ProviderNetworkNotFound", f'Kube-OVN ProviderNetwork "{provider}" does not exist'
        elif (pn.get("status") or {}).get("ready") is not True:
            ready, reason = FALSE, "ProviderNetworkNotReady"
            msg = f'Kube-OVN ProviderNetwork "{provider}" is not ready on every node it should be'
        else:
            nodes = (pn.get("status") or {}).get("readyNodes") or []
            ready, reason = TRUE, "Ready"
            msg = f"{free} of {len(cands)} VLANs free; trunk ready on {len(nodes)} node(s)"
            if stranded:
                msg += "; allocated outside the current ranges: " + ", ".join(sorted(stranded))
            if orphans:
                msg += f"; {orphans} orphaned Vlan(s) still referenced by a subnet"
        # product-decisions.md §7: every duplicate ID on the provider is named, whatever Ready says.
        dups = duplicates_on(on_provider)
        if dups:
            msg += "; duplicate VLAN IDs on provider: " + ", ".join(
                f"{vid} ({', '.join(ns)})" for vid, ns in dups.items()
            )
        set_condition(conds, names.READY, ready, reason, msg, gen, now)
        return requeue

    # -- orphaned Vlans (§8.1) ---------------------------------------------------------
    def _is_orphan(self, vlan: Mapping[str, Any]) -> bool:
        """Labelled with an empty owner, or the owning network is NotFound in the cache
        and then on the API server (never decided on the cache alone)."""
        ns, nname = vlan_owner(vlan)
        if not ns or not nname:
            return True
        if self.l.networks.get(f"{ns}/{nname}") is not None:
            return False
        try:
            self.writer.get(names.PROXMOX_NETWORKS, nname, ns)
        except ApiError as err:
            return err.not_found
        return False

    def _collect_orphan(self, zone: Mapping[str, Any], vlan: dict[str, Any]) -> tuple[bool, float | None]:
        """Delete an orphaned Vlan once nothing references it.

        :returns: (collected, seconds until a prune timer runs out or None).
        """
        try:
            vlan = self.writer.get(names.VLANS, vlan["metadata"]["name"])
        except ApiError as err:
            if err.not_found:
                return True, None
            raise
        vname = vlan["metadata"]["name"]
        # No network holds this Vlan any more: our finalizer must not keep a deleting Subnet.
        for sub in self.l.subnets.by_index("vlan", vname) if self.l.subnets is not None else []:
            smeta = sub.get("metadata") or {}
            if (smeta.get("deletionTimestamp") and names.FINALIZER in (smeta.get("finalizers") or [])
                    and not kubeovn.held_only_by_us(sub)):
                # (Kept while Kube-OVN, without a finalizer of its own, counts IPs in it.)
                try:
                    self.writer.remove_finalizer(names.SUBNETS, sub, names.FINALIZER)
                except ApiError as err:
                    if not err.not_found:
                        raise
        live, gone = self.vlans.split_listed_subnets(vlan)
        now = self.now()
        vlan, newest = self.vlans.track_timers(vlan, gone, now, None)
        if live:
            return False, None
        if self.l.subnets is not None and self.l.subnets.by_index("vlan", vname):
            return False, None
        timed_out = False
        if gone and newest is not None:
            left = (prune.deadline(newest, self.prune_timeout) - now).total_seconds()
            if left > 0:
                return False, left
            timed_out = True
            log.info("Kube-OVN did not prune deleted subnets from the orphaned Vlan in time; collecting it anyway",
                     vlan=allocator.vlan_id(vlan), name=vname, subnets=gone, timeout=self.prune_timeout)
        self.vlans.release(vlan)
        log.info("collected orphaned VLAN", vlan=allocator.vlan_id(vlan), name=vname)
        if self.events is not None:
            msg = f'collected orphaned Vlan "{vname}" (VLAN {allocator.vlan_id(vlan)})'
            if timed_out:
                msg += f"; Kube-OVN still listed deleted subnets {go_list(gone)} after the prune timeout"
            self.events.event(zone, NORMAL, "OrphanedVLANCollected", msg)
        return True, None
