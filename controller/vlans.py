"""The allocator's side effects: look up, adopt or create the Kube-OVN Vlan of a network.

Used set = the synced Vlan cache plus the Vlans this process created and the watch has not
brought back yet (the "assumed" set), so no allocation needs an API list
(``product-decisions.md`` §4.4). Pick, assume and create run under one lock per provider
network (§7 "Allocation concurrency"); other work runs outside it.

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

from controller import allocator, names
from controller.kube import ApiError, KubeWriter, annotation_patch, finalizer_add_patch
from controller.prune import track_deleted_subnets
from informers import ThreadSafeStore

log = structlog.get_logger(__name__)

# An assumed Vlan the cache has not shown after this long is checked with one API GET.
ASSUME_VERIFY_AFTER = 60.0


@attrs.frozen
class VlanOutcome:
    """Result of :meth:`VlanManager.ensure`: ``vlan`` (the Vlan object) or a refusal
    ``reason``/``message`` for ``VLANAllocated=False``. ``allocated`` is True when this
    call created the Vlan; ``result`` is the allocation-counter label of a refusal."""

    vlan: dict[str, Any] | None = None
    reason: str = ""
    message: str = ""
    allocated: bool = False
    result: str = ""


def vlan_owner(vlan: Mapping[str, Any]) -> tuple[str, str]:
    labels = (vlan.get("metadata") or {}).get("labels") or {}
    return labels.get(names.LABEL_NETWORK_NAMESPACE, ""), labels.get(names.LABEL_NETWORK_NAME, "")


def desired_vlan(name: str, vid: int, provider: str, zone: str, namespace: str, network: str) -> dict[str, Any]:
    """The Vlan the controller creates (reference-behaviour.md §4.3 step 6)."""
    return {
        "apiVersion": "kubeovn.io/v1",
        "kind": "Vlan",
        "metadata": {
            "name": name,
            "labels": {
                names.LABEL_ZONE: zone,
                names.LABEL_NETWORK_NAMESPACE: namespace,
                names.LABEL_NETWORK_NAME: network,
            },
            "finalizers": [names.FINALIZER],
        },
        "spec": {"id": vid, "provider": provider},
    }


def vlan_index_provider(vlan: Mapping[str, Any]) -> list[str]:
    """Indexer ``provider``: the Vlan's ``spec.provider``."""
    return [allocator.vlan_provider(vlan)]


def vlan_index_provider_id(vlan: Mapping[str, Any]) -> list[str]:
    """Indexer ``provider_id``: ``<spec.provider>/<spec.id>`` (duplicate detection without
    a scan of the provider)."""
    vid = allocator.vlan_id(vlan)
    return [f"{allocator.vlan_provider(vlan)}/{vid}"] if vid is not None else []


def vlan_index_zone(vlan: Mapping[str, Any]) -> list[str]:
    """Indexer ``zone``: the ``proxmox.cozystack.io/zone`` label, when set."""
    z = ((vlan.get("metadata") or {}).get("labels") or {}).get(names.LABEL_ZONE)
    return [z] if z else []


@attrs.define
class _Assumed:
    vlan: dict[str, Any]
    since: float


class VlanManager:
    """Owns the assumed set and the per-provider locks.

    :param vlans: the synced Vlan store, with indexes ``provider`` and ``zone``.
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
    ) -> None:
        self.vlans = vlans
        self.zones = zones
        self.writer = writer
        self.on_allocation = on_allocation or (lambda zone, result: None)
        self.monotonic = monotonic
        self._assumed: dict[str, _Assumed] = {}
        self._assumed_lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    # -- assumed set -------------------------------------------------------------
    def observe(self, vlan: Mapping[str, Any]) -> None:
        """Vlan informer event: the cache now shows this Vlan, stop assuming it."""
        name = (vlan.get("metadata") or {}).get("name")
        with self._assumed_lock:
            self._assumed.pop(name, None)

    def assumed_count(self) -> int:
        with self._assumed_lock:
            return len(self._assumed)

    def lookup(self, name: str) -> dict[str, Any] | None:
        """The Vlan named ``name`` from the cache, else from the assumed set."""
        vlan = self.vlans.get(name)
        if vlan is not None:
            return vlan
        with self._assumed_lock:
            a = self._assumed.get(name)
            return a.vlan if a else None

    def vlans_on(self, provider: str) -> list[dict[str, Any]]:
        """Every Vlan on ``provider``: cache plus assumed ones the cache lacks."""
        out = list(self.vlans.by_index("provider", provider))
        with self._assumed_lock:
            extra = [a.vlan for n, a in self._assumed.items() if allocator.vlan_provider(a.vlan) == provider]
        return out + [v for v in extra if self.vlans.get(v["metadata"]["name"]) is None]

    def holders(self, provider: str, vid: int) -> list[dict[str, Any]]:
        """Every Vlan on ``provider`` with ID ``vid``: cache (index ``provider_id``) plus
        assumed ones the cache lacks."""
        out = list(self.vlans.by_index("provider_id", f"{provider}/{vid}"))
        with self._assumed_lock:
            extra = [a.vlan for a in self._assumed.values()
                     if allocator.vlan_provider(a.vlan) == provider and allocator.vlan_id(a.vlan) == vid]
        return out + [v for v in extra if self.vlans.get(v["metadata"]["name"]) is None]

    def _verify_stale_assumptions(self, provider: str) -> None:
        # An assumed Vlan deleted before the watch showed it would block its ID forever;
        # after a grace period ask the API server once.
        now = self.monotonic()
        with self._assumed_lock:
            stale = [
                n
                for n, a in self._assumed.items()
                if now - a.since > ASSUME_VERIFY_AFTER and allocator.vlan_provider(a.vlan) == provider
            ]
        for name in stale:
            try:
                self.writer.get(names.VLANS, name)
            except ApiError as err:
                if err.not_found:
                    with self._assumed_lock:
                        self._assumed.pop(name, None)
                continue
            with self._assumed_lock:
                if name in self._assumed:
                    self._assumed[name].since = now

    def _provider_lock(self, provider: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(provider, threading.Lock())

    # -- ensure ------------------------------------------------------------------
    def ensure(self, network: Mapping[str, Any], zone: Mapping[str, Any]) -> VlanOutcome:
        """Find, adopt or create the network's Vlan (reference-behaviour.md §4.3).

        :returns: a :class:`VlanOutcome`; refusals use the reasons ``VLANNameTaken``,
            ``VLANProviderMismatch``, ``ZoneInvalid``, ``StaticVLANReserved``,
            ``StaticVLANInUse`` and ``ZoneExhausted``.
        :raises ApiError: on API failures other than the AlreadyExists race (the pass
            fails and is retried with backoff).
        """
        meta = network["metadata"]
        ns, nname = meta["namespace"], meta["name"]
        name = str((network.get("spec") or {}).get("subnet") or "")
        zspec = zone.get("spec") or {}
        zname = zone["metadata"]["name"]
        provider = str(zspec.get("providerNetwork") or "")

        existing = self.lookup(name)
        if existing is not None:
            return self._claim(existing, ns, nname, zname, provider)

        with self._provider_lock(provider):
            existing = self.lookup(name)
            if existing is not None:
                return self._claim(existing, ns, nname, zname, provider)
            self._verify_stale_assumptions(provider)
            used = allocator.used_vlans(self.vlans_on(provider), provider)
            pick = allocator.pick_vlan(zone, ns, nname, used, self.zones.list())
            if not pick.ok:
                if pick.result:
                    self.on_allocation(zname, pick.result)
                return VlanOutcome(reason=pick.reason, message=pick.message, result=pick.result)
            body = desired_vlan(name, pick.vlan, provider, zname, ns, nname)
            try:
                created = self.writer.create(names.VLANS, body)
            except ApiError as err:
                if not err.already_exists:
                    raise
                # Someone (our earlier self, or a person) created it meanwhile: judge it.
                current = self.writer.get(names.VLANS, name)
                return self._claim(current, ns, nname, zname, provider)
            with self._assumed_lock:
                if self.vlans.get(name) is None:
                    self._assumed[name] = _Assumed(created, self.monotonic())
        self.on_allocation(zname, "allocated")
        log.info("allocated VLAN", zone=zname, vlan=pick.vlan, subnet=name, network=f"{ns}/{nname}")
        return VlanOutcome(vlan=created, allocated=True)

    def _claim(
        self, vlan: dict[str, Any], ns: str, nname: str, zname: str, provider: str
    ) -> VlanOutcome:
        owner = vlan_owner(vlan)
        vname = vlan["metadata"]["name"]
        if owner != (ns, nname):
            return VlanOutcome(
                reason="VLANNameTaken",
                message=f'Kube-OVN Vlan "{vname}" exists and belongs to {owner[0]}/{owner[1]}',
            )
        vprov = allocator.vlan_provider(vlan)
        if vprov != provider:
            return VlanOutcome(
                reason="VLANProviderMismatch",
                message=f'Vlan "{vname}" uses provider "{vprov}", zone "{zname}" uses "{provider}"',
            )
        return VlanOutcome(vlan=self.adopt(vlan))

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
        return self.writer.json_patch(names.VLANS, meta["name"], ops)

    # -- release (network deletion §6 step 4, orphan collection §8.1) ---------------------
    def split_listed_subnets(self, vlan: Mapping[str, Any]) -> tuple[list[str], list[str]]:
        """``status.subnets`` of a Vlan split into live (Get succeeds, Terminating
        included) and gone (NotFound) names, from the API."""
        live, gone = [], []
        for s in (vlan.get("status") or {}).get("subnets") or []:
            if not isinstance(s, str) or not s:
                continue
            try:
                self.writer.get(names.SUBNETS, s)
            except ApiError as err:
                if not err.not_found:
                    raise
                gone.append(s)
                continue
            live.append(s)
        return live, gone

    def track_timers(
        self, vlan: dict[str, Any], gone: list[str], now: _dt.datetime, not_before: _dt.datetime | None
    ) -> tuple[dict[str, Any], _dt.datetime | None]:
        """Update the ``deleted-subnets`` prune timers on the Vlan (§7.1); returns the
        (possibly patched) Vlan and the newest timer start."""
        stored = ((vlan.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_DELETED_SUBNETS)
        res = track_deleted_subnets(stored, gone, now, not_before)
        if res.changed:
            vlan = self.writer.json_patch(
                names.VLANS, vlan["metadata"]["name"],
                annotation_patch(vlan, names.ANNOTATION_DELETED_SUBNETS, res.desired),
            )
        return vlan, res.newest

    def release(self, vlan: dict[str, Any]) -> None:
        """Remove our finalizer from the Vlan and delete it (NotFound ignored)."""
        try:
            self.writer.remove_finalizer(names.VLANS, vlan, names.FINALIZER)
        except ApiError as err:
            if not err.not_found:
                raise
        try:
            self.writer.delete(names.VLANS, vlan["metadata"]["name"])
        except ApiError as err:
            if not err.not_found:
                raise
