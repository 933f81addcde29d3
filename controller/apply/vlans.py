"""The allocator's side effects: look up, adopt or create the Kube-OVN Vlan of a network
(:class:`VlanManager`; the claim rules are :mod:`controller.rules.vlan_claims`).

Used set = the synced Vlan cache plus the Vlans this process created and the watch has not
brought back yet (the "assumed" set), so no allocation needs an API list
(``product-decisions.md`` §4.4). Pick, assume and create run under one lock per provider
network (§7 "Allocation concurrency"); other work runs outside it.

A create whose answer never came (the connection dropped, the server died, a 5xx) may have
landed: its ID stays used (the "unsettled" set) until the cache shows a Vlan of that name with
that ID or, after :data:`ASSUME_VERIFY_AFTER`, one read says whether it exists. Only a 4xx answer proves
that nothing was written.

Safety does not rest on the cache alone: Vlan names are deterministic (= the Subnet
name), so a second create for one network fails with AlreadyExists and adopts the
existing Vlan; a hand-made Vlan racing us on the same ID is reported as ``VLANConflict``
by the network pass, never shared silently.
"""

from __future__ import annotations

import datetime as _dt
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import structlog

from controller import names, reasons
from controller.rules import allocator, reuse
from controller.rfc3339 import utc_now
from controller.runtime.kube import ApiError, KubeWriter, annotation_patch, finalizer_add_patch
from informers.store import ThreadSafeStore
from controller.rules.vlan_claims import VlanOutcome, desired_vlan, edited, recorded_id, shows_at_least, vlan_owner
from controller.watch.indexes import BY_EDITED, BY_PROVIDER, BY_PROVIDER_ID

log = structlog.get_logger(__name__)

# An assumed Vlan the cache has not shown after this long is checked with one API GET.
ASSUME_VERIFY_AFTER = 60.0


@attrs.define
class _Assumed:
    vlan: dict[str, Any]
    since: float


@attrs.frozen
class _Unsettled:
    """A create of ``name`` with ``vid`` on ``provider`` whose answer was lost at ``since``."""
    name: str
    provider: str
    vid: int
    since: float


def refused_for_sure(err: BaseException) -> bool:
    """Whether a failed write is known not to have happened: only a 4xx answer says so
    (kube-apiserver refuses before it writes). A dropped connection, a timeout or a 5xx
    (a 504 says "the request may still be processed") leaves the outcome unknown."""
    return isinstance(err, ApiError) and 400 <= err.status < 500


class VlanManager:
    """Owns the assumed set and the per-provider locks.

    Invariant (product-decisions.md §8 "Safety by construction"): from the
    moment a create returns until the cache shows that Vlan (same UID, a version at least
    as new), the Vlan is in the assumed set, and every reader of the used set reads the
    assumed set *before* the cache. The informer updates its store before it calls
    :meth:`observe`, so a Vlan leaving the assumed set is already in the store that the
    reader looks at next: no ID can look free in between.

    :param vlans: the synced Vlan store, with indexes ``provider``, ``provider_id``
        and ``zone``.
    :param zones: the zone store (pins of zones sharing a provider).
    :param writer: the API writer.
    :param on_allocation: called with ``(zone, result)`` for each allocation outcome that
        the ``cozy_proxmox_vlan_allocations_total`` counter records.
    """

    def __init__(
        self,
        vlans: ThreadSafeStore,
        zones: ThreadSafeStore,
        writer: KubeWriter,
        on_allocation: Callable[[str, str], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        networks: ThreadSafeStore | None = None,
        reuse_delay: float = 0.0,
        now: Callable[[], _dt.datetime] = utc_now,
    ) -> None:
        self.vlans = vlans
        self.networks = networks
        self.reuse_delay = max(0.0, reuse_delay)
        self.now = now
        # IDs this process held back, until the zone cache shows the annotation (the Vlan
        # delete and the zone patch reach us on two watches, in either order).
        self._held: dict[str, dict[int, _dt.datetime]] = {}
        self.zones = zones
        self.writer = writer
        self.on_allocation = on_allocation or (lambda zone, result: None)
        self.monotonic = monotonic
        self._assumed: dict[str, _Assumed] = {}
        self._unsettled: set[_Unsettled] = set()
        self._assumed_lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    # -- assumed set -------------------------------------------------------------
    def observe(self, vlan: Mapping[str, Any], deleted: bool = False) -> None:
        """Vlan informer event (called after the store shows it): stop assuming the Vlan
        once the cache shows our object at a version at least as new, or its deletion.
        An event of an earlier object of the same name (another UID) changes nothing."""
        name = (vlan.get("metadata") or {}).get("name")
        with self._assumed_lock:
            a = self._assumed.get(name)
            if a is None:
                return
            same_uid = (vlan.get("metadata") or {}).get("uid") == (a.vlan.get("metadata") or {}).get("uid")
            if (deleted and same_uid) or shows_at_least(vlan, a.vlan):
                del self._assumed[name]

    def _assume(self, vlan: dict[str, Any]) -> None:
        """Record a Vlan this process created or read fresh, unless the cache already
        shows it at least as new."""
        name = vlan["metadata"]["name"]
        with self._assumed_lock:
            cached = self.vlans.get(name)
            if cached is not None and shows_at_least(cached, vlan):
                return
            self._assumed[name] = _Assumed(vlan, self.monotonic())

    def _assumed_on(self, provider: str) -> list[dict[str, Any]]:
        with self._assumed_lock:
            return [a.vlan for a in self._assumed.values() if allocator.vlan_provider(a.vlan) == provider]

    def lookup(self, name: str) -> dict[str, Any] | None:
        """The Vlan named ``name``: the assumed one while the cache lacks it or shows an older
        version of it (our own patch not delivered yet: a pass must not patch again from the
        older copy), else the cache's. The assumed set is read first, so a Vlan moving from
        one to the other is seen in one of them."""
        with self._assumed_lock:
            a = self._assumed.get(name)
        vlan = self.vlans.get(name)
        if vlan is not None:
            same = (vlan.get("metadata") or {}).get("uid") == ((a.vlan.get("metadata") or {}).get("uid") if a else None)
            return a.vlan if a is not None and same and not shows_at_least(vlan, a.vlan) else vlan
        return a.vlan if a else None

    def wrote(self, vlan: Mapping[str, Any]) -> None:
        """Record the Vlan the API server returned for our patch, so lookups see it before the
        cache does (read-your-writes, as for a Vlan we create): only while the cache or the
        assumed set holds that same Vlan (its UID), so a deletion delivered meanwhile is not
        undone."""
        name = (vlan.get("metadata") or {}).get("name")
        uid = (vlan.get("metadata") or {}).get("uid")
        with self._assumed_lock:
            a = self._assumed.get(name)
        cached = self.vlans.get(name)
        known = [o for o in (cached, a.vlan if a else None) if o is not None]
        if any((o.get("metadata") or {}).get("uid") == uid for o in known):
            self._assume(dict(vlan))

    def vlans_on(self, provider: str) -> list[dict[str, Any]]:
        """Every Vlan on ``provider``: the cache plus the assumed ones it lacks by name.

        The assumed set is read before the cache (see the class invariant)."""
        assumed = self._assumed_on(provider)
        out = list(self.vlans.by_index(BY_PROVIDER, provider))
        cached = {v["metadata"]["name"] for v in out}
        return out + [v for v in assumed if v["metadata"]["name"] not in cached]

    def used_ids(self, provider: str, for_name: str = "") -> set[int]:
        """IDs held on ``provider`` (§4.2): every ID of the assumed set and every ID of
        the cache, the IDs held by the reuse delay (:meth:`held_ids`), the IDs of unsettled
        creates (but ``for_name``'s own: its retry may take the ID again, the deterministic
        name makes a second landing impossible), and the ``status.vlan`` of each such Vlan's
        owner network. An assumed Vlan whose cached copy is older counts with both IDs: too
        many used IDs delay an allocation, too few duplicate one."""
        assumed = self._assumed_on(provider)
        with self._assumed_lock:
            unsettled = {u.vid for u in self._unsettled if u.provider == provider and u.name != for_name}
        cached = self.vlans.by_index(BY_PROVIDER, provider, ordered=False)
        used = allocator.used_vlans(assumed, provider) | allocator.used_vlans(cached, None) | unsettled
        used |= set(self.held_ids(provider))
        if self.networks is not None:
            # The owners' records too: a Vlan whose ID was changed by hand leaves its VMs on
            # the allocated ID, which stays used until the operator resolves it.
            # Only an edited Vlan (index ``edited``) can have a record naming another ID.
            for v in (*assumed, *self.vlans.by_index(BY_EDITED, provider)):
                rid = self._recorded(v)
                if rid:
                    used.add(rid)
        return used

    def _recorded(self, vlan: Mapping[str, Any]) -> int:
        """The ``status.vlan`` of the Vlan's owner network: from the cache, or, for a Vlan
        whose spec was edited (generation above 1: the controller never writes a spec), read
        fresh, so a network cache lagging the Vlan cache cannot hide the allocated ID.

        :raises ApiError: when that read fails (the allocation is retried, never guessed)."""
        ns, name = vlan_owner(vlan)
        if not name:
            return 0
        if edited(vlan):
            network = self.writer.get_or_none(names.PROXMOX_NETWORKS, name, ns)
            return 0 if network is None else recorded_id(network)
        return recorded_id(self.networks.get(f"{ns}/{name}")) if self.networks is not None else 0

    def held_ids(self, provider: str) -> dict[int, _dt.datetime]:
        """IDs on ``provider`` the reuse delay holds back now, with their end: the zones'
        records (cache) and this process's own releases not yet seen in the cache."""
        now = self.now()
        out = reuse.held(self.zones.list(), provider, now)
        with self._assumed_lock:
            mine = self._held.get(provider, {})
            for vid, until in list(mine.items()):
                if until <= now:
                    del mine[vid]
                elif vid not in out or until > out[vid]:
                    out[vid] = until
        return out

    def holders(self, provider: str, vid: int) -> list[dict[str, Any]]:
        """Every Vlan on ``provider`` with ID ``vid``: the assumed ones (read first), then
        the cache (index ``provider_id``) for the names the assumed set lacks."""
        assumed = [v for v in self._assumed_on(provider) if allocator.vlan_id(v) == vid]
        cached = list(self.vlans.by_index(BY_PROVIDER_ID, f"{provider}/{vid}"))
        names_ = {v["metadata"]["name"] for v in assumed}
        return assumed + [v for v in cached if v["metadata"]["name"] not in names_]

    def holders_of(self, vlan: Mapping[str, Any] | None, zone: Mapping[str, Any] | None) -> tuple[dict[str, Any], ...]:
        """Every Vlan holding ``vlan``'s ID on ``zone``'s provider (:meth:`holders`); () when
        there is no Vlan or it carries no valid ID."""
        vid = allocator.vlan_id(vlan) if vlan is not None else None
        if vid is None:
            return ()
        provider = str(((zone or {}).get("spec") or {}).get("providerNetwork") or "")
        return tuple(self.holders(provider, vid))

    def _verify_stale_assumptions(self, provider: str) -> None:
        # An assumed Vlan deleted before the watch showed it would block its ID forever;
        # after a grace period ask the API server once. Found: keep assuming it until the
        # cache shows it (or the fresher copy just read).
        now = self.monotonic()
        with self._assumed_lock:
            stale = [
                n
                for n, a in self._assumed.items()
                if now - a.since > ASSUME_VERIFY_AFTER and allocator.vlan_provider(a.vlan) == provider
            ]
        for name in stale:
            try:
                fresh = self.writer.get(names.VLANS, name)
            except ApiError as err:
                if err.not_found:
                    with self._assumed_lock:
                        self._assumed.pop(name, None)
                continue
            with self._assumed_lock:
                a = self._assumed.get(name)
                if a is None:
                    continue
                cached = self.vlans.get(name)
                if cached is not None and shows_at_least(cached, fresh):
                    del self._assumed[name]
                else:
                    self._assumed[name] = _Assumed(fresh, now)

    def _settle(self, provider: str) -> None:
        # An unsettled create is settled by a Vlan of its name with its ID in the cache or
        # the assumed set (counted there from now on), else, once the request can no longer
        # be in flight, by one read: found (assumed until the cache shows it) or not.
        now = self.monotonic()
        with self._assumed_lock:
            mine = [u for u in self._unsettled if u.provider == provider]
        for u in mine:
            known = self.lookup(u.name)
            if known is not None and allocator.vlan_id(known) == u.vid:
                self._drop_unsettled(u)
                continue
            if now - u.since <= ASSUME_VERIFY_AFTER:
                continue
            try:
                fresh = self.writer.get_or_none(names.VLANS, u.name)
            except Exception:  # still unknown: keep the ID used, try at the next allocation
                continue
            if fresh is not None:
                self._assume(fresh)
            self._drop_unsettled(u)

    def _drop_unsettled(self, u: _Unsettled) -> None:
        with self._assumed_lock:
            self._unsettled.discard(u)

    def _provider_lock(self, provider: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(provider, threading.Lock())

    # -- allocate ----------------------------------------------------------------
    def allocate(self, network: Mapping[str, Any], zone: Mapping[str, Any],
                 annotations: Mapping[str, str] | None = None) -> VlanOutcome:
        """Create the network's Vlan with the lowest eligible ID, under the provider's lock
        (reference-behaviour.md §4.3; product-decisions.md §8), carrying ``annotations``.

        :returns: a :class:`VlanOutcome`: the created Vlan (``allocated``); a Vlan of that
            name found meanwhile (under the lock, or by the AlreadyExists race), which the
            caller judges with :func:`claim_refusal`; or a refusal with the reasons
            ``ZoneInvalid``, ``StaticVLANReserved``, ``StaticVLANInUse``, ``ZoneExhausted``.
        :raises ApiError: on API failures other than the AlreadyExists race (the pass
            fails and is retried with backoff).
        """
        meta = network["metadata"]
        ns, nname = meta["namespace"], meta["name"]
        name = str((network.get("spec") or {}).get("subnet") or "")
        zname = zone["metadata"]["name"]
        provider = str((zone.get("spec") or {}).get("providerNetwork") or "")
        with self._provider_lock(provider):
            existing = self.lookup(name)
            if existing is not None:
                return VlanOutcome(vlan=existing)
            self._verify_stale_assumptions(provider)
            self._settle(provider)
            used = self.used_ids(provider, for_name=name)
            pick = allocator.pick_vlan(zone, ns, nname, used, self.zones.list())
            if not pick.ok:
                if pick.result:
                    self.on_allocation(zname, pick.result)
                message = pick.message
                if pick.reason == reasons.ZONE_EXHAUSTED:
                    try:
                        cands = allocator.candidates(zone.get("spec") or {})
                    except allocator.VLANRangeError:
                        cands = []
                    message += reuse.free_again(self.held_ids(provider), cands)
                return VlanOutcome(reason=pick.reason, message=message, result=pick.result)
            body = desired_vlan(name, pick.vlan, provider, zname, ns, nname, annotations)
            try:
                created = self.writer.create(names.VLANS, body)
            except Exception as err:
                if not (isinstance(err, ApiError) and err.already_exists):
                    if not refused_for_sure(err):
                        with self._assumed_lock:
                            self._unsettled.add(_Unsettled(name, provider, pick.vlan, self.monotonic()))
                        log.info("VLAN create answer lost; the ID stays used until it is settled",
                                 vlan=pick.vlan, provider=provider, subnet=name, error=repr(err))
                    raise
                # Someone (our earlier self, or a person) created it meanwhile: the caller
                # judges it; count its ID until the cache shows it.
                current = self.writer.get(names.VLANS, name)
                self._assume(current)
                return VlanOutcome(vlan=current)
            # Still under the provider lock: the next pick sees this ID.
            self._assume(created)
        self.on_allocation(zname, "allocated")
        log.info("allocated VLAN", zone=zname, vlan=pick.vlan, subnet=name, network=f"{ns}/{nname}")
        return VlanOutcome(vlan=created, allocated=True)

    def hold_for_reuse(self, vlan: Mapping[str, Any]) -> None:
        """Record the Vlan's ID on its zone as held until now + ``reuse_delay`` (controller.rules.reuse).

        The zone is the Vlan's zone label, else the first zone (by name) on its provider;
        none: nothing can allocate from the provider, nothing to record. A guarded JSON
        patch of the zone's annotation, re-read and retried on a conflict."""
        vid = allocator.vlan_id(vlan)
        if self.reuse_delay <= 0 or vid is None:
            return
        provider = allocator.vlan_provider(vlan)
        zname = ((vlan.get("metadata") or {}).get("labels") or {}).get(names.LABEL_ZONE) or ""
        if not zname:
            on = sorted(str(z["metadata"]["name"]) for z in self.zones.list()
                        if str((z.get("spec") or {}).get("providerNetwork") or "") == provider)
            zname = on[0] if on else ""
        if not zname:
            return
        now = self.now()
        until = reuse.release_until(now, self.reuse_delay)  # the record's own instant
        for _ in range(5):
            zone = self.writer.get_or_none(names.PROXMOX_NETWORK_ZONES, zname)
            if zone is None:
                return
            value = reuse.with_release(zone, vid, until, now)
            try:
                self.writer.json_patch(names.PROXMOX_NETWORK_ZONES, zname,
                                       annotation_patch(zone, names.ANNOTATION_RELEASED_VLANS, value))
                break
            except ApiError as err:
                if not err.conflict:
                    raise
        else:
            raise ApiError(409, "Conflict", f'could not record VLAN {vid} on zone "{zname}" for the reuse delay')
        with self._assumed_lock:
            self._held.setdefault(provider, {})[vid] = until
        log.info("VLAN held for the reuse delay", vlan=vid, provider=provider, zone=zname, until=reuse.format_utc(until))

    def adopt(self, vlan: dict[str, Any]) -> dict[str, Any]:
        """Make an owned Vlan ours again (reference-behaviour.md §7.3).

        Adds our finalizer when missing (not on a Terminating Vlan) and drops the
        ``deleted-subnets`` prune timers of an earlier same-named network, in one JSON
        patch guarded by resourceVersion. No write when neither is needed.
        """
        meta = vlan.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        terminating = bool(meta.get("deletionTimestamp"))
        fins = meta.get("finalizers") or []
        need_fin = names.FINALIZER not in fins and not terminating
        need_ann = names.ANNOTATION_DELETED_SUBNETS in annotations
        if not need_fin and not need_ann:
            return vlan
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion", "")}
        ]
        # One guarded patch: the resourceVersion test, then each change without its own test.
        if need_fin:
            ops += finalizer_add_patch(vlan, names.FINALIZER)[1:]
        if need_ann:
            ops += annotation_patch(vlan, names.ANNOTATION_DELETED_SUBNETS, None)[1:]
        out = self.writer.json_patch(names.VLANS, meta["name"], ops)
        self.wrote(out)
        return out

    # -- release (network deletion §6 step 4, orphan collection §8.1) ---------------------
    def split_listed_subnets(self, vlan: Mapping[str, Any]) -> tuple[list[str], list[str]]:
        """``status.subnets`` of a Vlan split into live (Get succeeds, Terminating
        included) and gone (NotFound) names, from the API."""
        live, gone = [], []
        for s in (vlan.get("status") or {}).get("subnets") or []:
            if not isinstance(s, str) or not s:
                continue
            (live if self.writer.get_or_none(names.SUBNETS, s) is not None else gone).append(s)
        return live, gone

    def release(self, vlan: dict[str, Any]) -> None:
        """Delete the Vlan (that very object: its UID), then remove our finalizer (NotFound
        ignored at each step).

        In this order a crash in between leaves the Vlan Terminating with our finalizer, so
        the next pass (the network's, or the zone's orphan collection) still knows it as
        ours and finishes; the other order left a labelled Vlan without our finalizer, which
        is no proof of ownership (product-decisions.md §8; found by the pods chaos run, a
        leader SIGKILLed in between). With a reuse delay the ID is first recorded on the
        Vlan's zone (:meth:`hold_for_reuse`): recorded before the Vlan goes, so no crash in
        between frees it early.

        :raises ApiError: when the record or the release cannot be written (the pass is
            retried; the Vlan still holds its ID)."""
        self.hold_for_reuse(vlan)
        meta = vlan.get("metadata") or {}
        try:
            out = self.writer.delete(names.VLANS, meta["name"], uid=meta.get("uid") or None)
        except ApiError as err:
            if err.not_found:
                return
            raise
        if not ((out or {}).get("metadata") or {}).get("deletionTimestamp"):
            return  # a Status: gone already (no finalizer held it)
        try:
            self.writer.remove_finalizer(names.VLANS, out, names.FINALIZER)
        except ApiError as err:
            if not err.not_found:
                raise
