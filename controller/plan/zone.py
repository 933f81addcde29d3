"""The ProxmoxNetworkZone planner: VLAN counts, ``Ready`` and orphan collection
(reference-behaviour.md §8, §8.1), a pure function of a :class:`ZoneSnapshot`.

Counts come from the synced Vlan cache (indexes ``provider`` and ``zone``) instead of an
API list per pass (product-decisions.md §4.4). An orphaned Vlan (no owner label, or the
owning network NotFound in the cache and then on the API server) is collected by the same
release rule a network deletion uses (:func:`controller.rules.release.release_step`), decided on
fresh reads, and only when it carries our finalizer: an orphan without it was never made or
adopted by a network and is named in ``Ready``'s message and counted as an orphan, never
deleted (product-decisions.md §8).
"""

from __future__ import annotations

import copy
import datetime as _dt
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import attrs

from controller import names, reasons, schema
from controller.rules import allocator, kubeovn, release, reuse
from controller.plan.actions import (
    Event,
    EventSpec,
    ForgetZone,
    Get,
    Into,
    Level,
    Log,
    Plan,
    PruneReleasedVlans,
    ReleaseVlan,
    RemoveFinalizer,
    SetPruneTimers,
    SetZone,
    SetZoneKept,
    SplitListed,
    WriteStatus,
)
from controller.rules.conditions import FALSE, TRUE, set_condition, transition
from controller.names import NORMAL, WARNING
from controller.rules.prune import go_list
from controller.rfc3339 import format_utc
from controller.rules.vlan_claims import taken_over, vlan_owner

ZONE_RESYNC = 600.0  # §8 step 11


@attrs.frozen
class ZoneSnapshot:
    """What one pass over a zone has observed so far.

    :ivar zone: the zone (cache with our writes overlaid), None when NotFound.
    :ivar on_provider: every Vlan on the zone's provider (cache plus assumed set).
    :ivar labelled: the Vlans labelled with this zone (cache).
    :ivar zones: every zone (pins of zones sharing the provider).
    :ivar networks: the number of networks naming the zone.
    :ivar provider_network: the Kube-OVN ProviderNetwork, or None.
    :ivar cached_networks: keys ``<ns>/<name>`` of the owners the network cache holds.
    :ivar bound: Vlan name -> the cached Subnets whose ``spec.vlan`` names it.
    :ivar owners, fresh, listed, released: pass fields per Vlan name (fresh GET of the
        owning network, fresh GET of the Vlan, its ``status.subnets`` split, released).
    :ivar pruned: the status fields the API server prunes for zones (``controller.schema``).
    """

    name: str
    zone: Mapping[str, Any] | None
    now: _dt.datetime
    prune_timeout: float = 600.0
    on_provider: tuple[Mapping[str, Any], ...] = ()
    labelled: tuple[Mapping[str, Any], ...] = ()
    zones: tuple[Mapping[str, Any], ...] = ()
    networks: int = 0
    provider_network: Mapping[str, Any] | None = None
    cached_networks: frozenset[str] = frozenset()
    bound: Mapping[str, tuple[Mapping[str, Any], ...]] = attrs.field(factory=dict)
    owners: Mapping[str, Any] = attrs.field(factory=dict)
    fresh: Mapping[str, Any] = attrs.field(factory=dict)
    listed: Mapping[str, Any] = attrs.field(factory=dict)
    released: Mapping[str, bool] = attrs.field(factory=dict)
    pruned: frozenset[str] = frozenset()


def duplicates_on(vlans: Any) -> dict[int, list[str]]:
    """ID -> sorted Vlan names, for every ID held by more than one of ``vlans``."""
    by_id: dict[int, list[str]] = defaultdict(list)
    for v in vlans:
        vid = allocator.vlan_id(v)
        if vid is not None:
            by_id[vid].append(v["metadata"]["name"])
    return {vid: sorted(ns) for vid, ns in sorted(by_id.items()) if len(ns) > 1}


class _NeedsRead(Exception):
    """Raised inside the planner when a fresh read is missing (carries the actions)."""

    def __init__(self, actions: tuple[Any, ...]) -> None:
        self.actions = actions


def plan_zone(s: ZoneSnapshot) -> Plan:
    """The next plan of a pass over zone ``s.name`` (see the module docstring)."""
    zone = s.zone
    if zone is None:
        return Plan((ForgetZone(s.name),))
    gen = int(zone["metadata"].get("generation") or 0)
    old = zone.get("status") or {}
    status = copy.deepcopy(dict(old))
    status["observedGeneration"] = gen
    conds: list[dict[str, Any]] = status.setdefault("conditions", [])
    actions: list[Any] = []
    # The reuse delay's expired entries go first (its own write; the status is then
    # written over the patched object).
    left = reuse.pruned(zone, s.now)
    if left is not False:
        return Plan((PruneReleasedVlans(zone, left),), replan=True)
    try:
        requeue = _fill(s, status, conds, gen, actions)
    except _NeedsRead as need:
        return Plan(tuple(actions) + need.actions, replan=True)
    if schema.differs(status, old, s.pruned):
        after = transition(old.get("conditions"), conds, names.READY)
        event = None if after is None else EventSpec(
            NORMAL if after.get("status") == TRUE else WARNING, after.get("reason", ""), after.get("message", ""))
        actions.append(WriteStatus(names.PROXMOX_NETWORK_ZONES, zone, status, Into("zone"), event))
    return Plan(tuple(actions), requeue_after=requeue)


def _fill(s: ZoneSnapshot, status: dict[str, Any], conds: list[dict[str, Any]], gen: int,
          actions: list[Any]) -> float | None:
    """Fill the zone status; returns the requeue delay (10 min, or an orphan's recheck)."""
    zone: Mapping[str, Any] = s.zone  # type: ignore[assignment]
    spec = zone.get("spec") or {}
    clock = lambda: s.now  # noqa: E731
    try:
        cands = allocator.candidates(spec)
    except allocator.VLANRangeError as err:
        set_condition(conds, names.READY, FALSE, reasons.ZONE_INVALID, str(err), gen, clock)
        return None
    provider = str(spec.get("providerNetwork") or "")
    in_range = set(cands)
    static = {a["vlan"] for a in allocator.static_assignments(zone) if isinstance(a.get("vlan"), int)}
    stranded = []
    allocated = 0
    orphans = 0
    unowned = []  # labelled as ours, never made or adopted by a network: reported, never deleted
    requeue = ZONE_RESYNC
    for v in s.labelled:
        allocated += 1
        vid = allocator.vlan_id(v)
        if vid not in in_range and vid not in static:
            stranded.append(f"{vid} ({v['metadata']['name']})")
        if not _is_orphan(s, v):
            continue
        if not taken_over(v):
            # product-decisions.md §8, "we delete only what we own": our finalizer is the proof
            # (written in the create call that makes the Vlan, or on adoption). Labels alone
            # are anyone's to write.
            if not (v.get("metadata") or {}).get("deletionTimestamp"):
                unowned.append(f'"{v["metadata"]["name"]}" (VLAN {vid})')
            continue
        collected, recheck = _collect_orphan(s, zone, v, actions)
        if collected:
            allocated -= 1
            continue
        if recheck is not None:
            requeue = min(requeue, recheck)
        orphans += 1
    held = reuse.held(s.zones, provider, s.now)
    used = allocator.used_vlans(s.on_provider, provider) | allocator.pinned_vlans(s.zones, provider) | set(held)
    free = sum(1 for c in cands if c not in used)
    # The IDs this zone's record holds back, and when each is free again.
    mine = {v: u for v, u in reuse.entries_of(zone).items() if u > s.now}
    if mine:
        status["vlansHeldForReuse"] = [{"vlan": v, "until": format_utc(u)} for v, u in sorted(mine.items())]
        requeue = min(requeue, max(1.0, (min(mine.values()) - s.now).total_seconds()))
    else:
        status.pop("vlansHeldForReuse", None)
    status["totalVLANs"] = len(cands)
    status["allocatedVLANs"] = allocated
    status["freeVLANs"] = free
    status["networks"] = s.networks
    # The gauge counts both kinds of orphan; the message names them apart.
    actions.append(SetZone(s.name, len(cands), allocated, free, s.networks, orphans + len(unowned)))
    actions.append(SetZoneKept(s.name, len(stranded), len(mine)))

    pn = s.provider_network
    if pn is None:
        ready, reason, msg = FALSE, reasons.PROVIDER_NETWORK_NOT_FOUND, f'Kube-OVN ProviderNetwork "{provider}" does not exist'
    elif (pn.get("status") or {}).get("ready") is not True:
        ready, reason = FALSE, reasons.PROVIDER_NETWORK_NOT_READY
        msg = f'Kube-OVN ProviderNetwork "{provider}" is not ready on every node it should be'
    else:
        nodes = (pn.get("status") or {}).get("readyNodes") or []
        ready, reason = TRUE, reasons.READY
        msg = f"{free} of {len(cands)} VLANs free; trunk ready on {len(nodes)} node(s)"
        delayed = reuse.free_again(held, cands)
        if delayed:
            msg += delayed
        if stranded:
            msg += "; allocated outside the current ranges: " + ", ".join(sorted(stranded))
        if orphans:
            msg += f"; {orphans} orphaned Vlan(s) still referenced by a subnet"
    if unowned:
        msg += (f"; Vlan(s) labelled as this zone's whose network does not exist, without the finalizer "
                f"{names.FINALIZER} (never made or adopted by the controller), left alone: {', '.join(sorted(unowned))}")
    # product-decisions.md §7: every duplicate ID on the provider is named, whatever Ready says.
    dups = duplicates_on(s.on_provider)
    if dups:
        msg += "; duplicate VLAN IDs on provider: " + ", ".join(f"{vid} ({', '.join(ns)})" for vid, ns in dups.items())
    set_condition(conds, names.READY, ready, reason, msg, gen, clock)
    return requeue


def _is_orphan(s: ZoneSnapshot, vlan: Mapping[str, Any]) -> bool:
    """Labelled with an empty owner, or the owning network is NotFound in the cache and
    then on the API server (never decided on the cache alone; a failed read is not
    NotFound)."""
    ns, nname = vlan_owner(vlan)
    if not ns or not nname:
        return True
    if f"{ns}/{nname}" in s.cached_networks:
        return False
    vname = vlan["metadata"]["name"]
    if vname not in s.owners:
        raise _NeedsRead((Get(names.PROXMOX_NETWORKS, nname, ns, Into("owners", vname), tolerate=True),))
    return s.owners[vname] is None


def _collect_orphan(s: ZoneSnapshot, zone: Mapping[str, Any], vlan: Mapping[str, Any],
                    actions: list[Any]) -> tuple[bool, float | None]:
    """Collect an orphaned Vlan once nothing references it (§8.1).

    :returns: (collected, seconds until a prune timer runs out or None).
    """
    vname = vlan["metadata"]["name"]
    if vname not in s.fresh:
        raise _NeedsRead((Get(names.VLANS, vname, None, Into("fresh", vname)),))
    fresh = s.fresh[vname]
    if fresh is None:
        return True, None
    if s.released.get(vname):
        return True, None
    # No network holds this Vlan any more: our finalizer must not keep a deleting Subnet
    # (kept while Kube-OVN, without a finalizer of its own, counts IPs in it).
    for sub in s.bound.get(vname, ()):
        smeta = sub.get("metadata") or {}
        if (smeta.get("deletionTimestamp") and names.FINALIZER in (smeta.get("finalizers") or [])
                and not kubeovn.held_only_by_us(sub)):
            actions.append(RemoveFinalizer(names.SUBNETS, sub))
    if vname not in s.listed:
        raise _NeedsRead((SplitListed(fresh, Into("listed", vname)),))
    live, gone = s.listed[vname]
    step = release.release_step(fresh, live, gone, s.now, None, s.prune_timeout)
    if step.stores_timers:
        raise _NeedsRead((SetPruneTimers(fresh, step.timers, Into("fresh", vname)),))
    if step.kind == release.WAIT_LIVE or s.bound.get(vname):
        return False, None
    if step.kind == release.WAIT_PRUNE:
        assert step.deadline is not None
        return False, (step.deadline - s.now).total_seconds()
    vid = allocator.vlan_id(fresh)
    if step.timed_out:
        actions.append(Log(Level.INFO, "Kube-OVN did not prune deleted subnets from the orphaned Vlan in time; collecting it anyway",
                           {"vlan": vid, "name": vname, "subnets": list(gone), "timeout": s.prune_timeout}))
    msg = f'collected orphaned Vlan "{vname}" (VLAN {vid})'
    if step.timed_out:
        msg += f"; Kube-OVN still listed deleted subnets {go_list(gone)} after the prune timeout"
    raise _NeedsRead((ReleaseVlan(fresh, "collected orphaned VLAN", {"vlan": vid, "name": vname},
                                  into=Into("released", vname)),
                      Event(zone, NORMAL, reasons.ORPHANED_VLAN_COLLECTED, msg)))
