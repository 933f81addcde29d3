"""ProxmoxNetworkZone reconcile: VLAN counts and ``Ready`` (reference-behaviour.md §8).

Counts come from the synced Vlan cache (indexes ``provider`` and ``zone``) instead of an
API list per pass (``product-decisions.md`` §4.4). Orphaned-Vlan collection arrives with
the lifecycle work.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Any

import structlog

from controller import allocator, names
from controller.conditions import FALSE, TRUE, Clock, set_condition, utc_now
from controller.kube import ApiError, KubeWriter
from controller.recent import RecentWrites
from controller.network import Listers, Result
from controller.vlans import VlanManager

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

    def __init__(self, listers: Listers, writer: KubeWriter, vlans: VlanManager, now: Clock = utc_now) -> None:
        self.l = listers
        self.writer = writer
        self.vlans = vlans
        self.now = now
        self.recent = RecentWrites(listers.zones)

    def reconcile(self, key: str) -> Result:
        zone = self.recent.get(key)
        if zone is None:
            return Result()
        gen = int(zone["metadata"].get("generation") or 0)
        old = zone.get("status") or {}
        status = copy.deepcopy(old)
        status["observedGeneration"] = gen
        conds: list[dict[str, Any]] = status.setdefault("conditions", [])
        self._fill(zone, status, conds, gen)
        if status != old:
            body = copy.deepcopy(zone)
            body["status"] = status
            try:
                self.recent.wrote(self.writer.update_status(names.PROXMOX_NETWORK_ZONES, body))
            except ApiError as err:
                if err.conflict:
                    self.recent.forget(key)
                raise
        return Result()

    def _fill(self, zone: dict[str, Any], status: dict[str, Any], conds: list[dict[str, Any]], gen: int) -> None:
        spec = zone.get("spec") or {}
        name = zone["metadata"]["name"]
        now = self.now
        try:
            cands = allocator.candidates(spec)
        except allocator.VLANRangeError as err:
            set_condition(conds, names.READY, FALSE, "ZoneInvalid", str(err), gen, now)
            return
        provider = str(spec.get("providerNetwork") or "")
        on_provider = self.vlans.vlans_on(provider)
        in_range = set(cands)
        static = {
            a["vlan"] for a in allocator.static_assignments(zone) if isinstance(a.get("vlan"), int)
        }
        labelled = self.l.vlans.by_index("zone", name)
        stranded = []
        for v in labelled:
            vid = allocator.vlan_id(v)
            if vid not in in_range and vid not in static:
                stranded.append(f"{vid} ({v['metadata']['name']})")
        used = allocator.used_vlans(on_provider, provider) | allocator.pinned_vlans(self.l.zones.list(), provider)
        free = sum(1 for c in cands if c not in used)
        status["totalVLANs"] = len(cands)
        status["allocatedVLANs"] = len(labelled)
        status["freeVLANs"] = free
        status["networks"] = len(self.l.networks.by_index("zone", name))

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
        # product-decisions.md §7: every duplicate ID on the provider is named, whatever Ready says.
        dups = duplicates_on(on_provider)
        if dups:
            msg += "; duplicate VLAN IDs on provider: " + ", ".join(
                f"{vid} ({', '.join(ns)})" for vid, ns in dups.items()
            )
        set_condition(conds, names.READY, ready, reason, msg, gen, now)
