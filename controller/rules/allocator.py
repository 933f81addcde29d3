"""VLAN range parsing and allocation: the pure part of the allocator.

Everything here is a function of its arguments (zone spec, the Vlans on the provider, the
zones sharing the provider); the side that creates Vlans, holds the per-provider lock and
keeps the "assumed" set lives in :mod:`controller.apply.vlans`.

Rules: ``reference-behaviour.md`` §4 (parsing, used set, pins, static assignments, lowest
free ID, messages) and ``product-decisions.md`` §4.4 (cache + assumed set instead of an
API list per allocation).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from controller import reasons

VLAN_MIN = 1
VLAN_MAX = 4094

# Go's strconv.Atoi accepts an optional sign and decimal digits, nothing else
# (no underscores, no inner spaces) -- the reference parses with it.
_ATOI = re.compile(r"^[+-]?[0-9]+$")


class VLANRangeError(ValueError):
    """A ``vlanRanges`` entry that cannot be used; ``str(err)`` is the spec's message."""


def _atoi(entry: str, part: str) -> int:
    if not _ATOI.match(part):
        raise VLANRangeError(f'vlan range "{entry}": "{part}" is not a number')
    n = int(part)
    if n < VLAN_MIN or n > VLAN_MAX:
        raise VLANRangeError(f'vlan range "{entry}": {n} is outside {VLAN_MIN}-{VLAN_MAX}')
    return n


def parse_vlan_ranges(entries: Iterable[str]) -> list[int]:
    """Expand ``vlanRanges`` into a sorted, de-duplicated list of VLAN IDs.

    Each entry is trimmed and split at its first ``-``; both sides are trimmed and parsed
    as decimal integers (``" 7 - 8 "`` gives 7 and 8). Overlapping entries merge.

    :param entries: the zone's ``spec.vlanRanges`` (``"120"`` or ``"101-199"``).
    :returns: ascending list of IDs in 1..4094.
    :raises VLANRangeError: with the reference's message (§4.1): ``vlan range "<entry>":
        "<part>" is not a number``, ``vlan range "<entry>": <n> is outside 1-4094`` or
        ``vlan range "<entry>" ends before it starts``. The first bad entry wins.
    """
    ids: set[int] = set()
    for raw in entries:
        entry = raw.strip()
        lo_s, sep, hi_s = entry.partition("-")
        lo = _atoi(entry, lo_s.strip())
        hi = _atoi(entry, hi_s.strip()) if sep else lo
        if hi < lo:
            raise VLANRangeError(f'vlan range "{entry}" ends before it starts')
        ids.update(range(lo, hi + 1))
    return sorted(ids)


def candidates(zone_spec: Mapping[str, Any]) -> list[int]:
    """The zone's allocatable IDs: its ranges minus ``reservedVLANs`` (§4.1).

    Reserved IDs outside the ranges are ignored. Raises :class:`VLANRangeError`.
    """
    reserved = set(_int_list(zone_spec.get("reservedVLANs")))
    return [v for v in parse_vlan_ranges(zone_spec.get("vlanRanges") or []) if v not in reserved]


def _int_list(value: Any) -> list[int]:
    out: list[int] = []
    for item in value or []:
        if isinstance(item, int) and not isinstance(item, bool):
            out.append(item)
    return out


def vlan_id(vlan: Mapping[str, Any]) -> int | None:
    """``spec.id`` of a Kube-OVN Vlan, or None when absent or not an integer."""
    v = (vlan.get("spec") or {}).get("id")
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    return None


def vlan_provider(vlan: Mapping[str, Any]) -> str:
    return str((vlan.get("spec") or {}).get("provider") or "")


def used_vlans(vlans: Iterable[Mapping[str, Any]], provider: str | None) -> set[int]:
    """IDs held by any Vlan on ``provider``, whoever owns it, Terminating included (§4.2).

    ``provider=None``: every Vlan given is on the provider already (an index lookup), so
    only the IDs are read. Inlined rather than :func:`vlan_id`/:func:`vlan_provider` per
    Vlan: this runs on every allocation over every Vlan of the provider, under its lock."""
    used: set[int] = set()
    for vlan in vlans:
        spec = vlan.get("spec") or {}
        if provider is not None and str(spec.get("provider") or "") != provider:
            continue
        vid = spec.get("id")
        if isinstance(vid, int) and not isinstance(vid, bool):
            used.add(vid)
    return used


def static_assignments(zone: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [a for a in ((zone.get("spec") or {}).get("staticAssignments") or []) if isinstance(a, Mapping)]


def pinned_vlans(zones: Iterable[Mapping[str, Any]], provider: str) -> set[int]:
    """Static VLANs of every zone on ``provider`` (the zone itself included), §4.2.

    Pins count whether or not the pinned network exists.
    """
    pinned: set[int] = set()
    for zone in zones:
        if str((zone.get("spec") or {}).get("providerNetwork") or "") != provider:
            continue
        for a in static_assignments(zone):
            v = a.get("vlan")
            if isinstance(v, int) and not isinstance(v, bool):
                pinned.add(v)
    return pinned


def static_assignment_for(zone: Mapping[str, Any], namespace: str, name: str) -> int | None:
    """The VLAN a zone pins to network ``namespace/name``, or None."""
    for a in static_assignments(zone):
        if a.get("namespace") == namespace and a.get("name") == name:
            v = a.get("vlan")
            if isinstance(v, int) and not isinstance(v, bool):
                return v
    return None


@attrs.frozen
class Pick:
    """Outcome of :func:`pick_vlan`: ``vlan`` set on success, else ``reason``/``message``.

    ``result`` is the ``cozy_proxmox_vlan_allocations_total`` result label to count on a
    refusal (``conflict`` or ``exhausted``), or ``""`` when nothing is counted.
    """

    vlan: int | None = None
    reason: str = ""
    message: str = ""
    result: str = ""

    @property
    def ok(self) -> bool:
        return self.vlan is not None


def pick_vlan(
    zone: Mapping[str, Any],
    namespace: str,
    name: str,
    used: set[int],
    all_zones: Iterable[Mapping[str, Any]],
) -> Pick:
    """Choose the VLAN for a network that has no Vlan yet (§4.3 steps 2, 4, 5).

    :param zone: the ProxmoxNetworkZone object.
    :param namespace: the network's namespace; ``name`` its name.
    :param used: IDs already held on the zone's provider (cache + assumed set).
    :param all_zones: every zone, for the pins of zones sharing the provider.
    :returns: a :class:`Pick`; refusals carry the reasons ``ZoneInvalid``,
        ``StaticVLANReserved``, ``StaticVLANInUse`` or ``ZoneExhausted`` with the
        reference's messages.
    """
    spec = zone.get("spec") or {}
    zname = (zone.get("metadata") or {}).get("name", "")
    provider = str(spec.get("providerNetwork") or "")
    try:
        cands = candidates(spec)
    except VLANRangeError as err:
        return Pick(reason=reasons.ZONE_INVALID, message=str(err))
    static = static_assignment_for(zone, namespace, name)
    if static is not None:
        if static in set(_int_list(spec.get("reservedVLANs"))):
            return Pick(
                reason=reasons.STATIC_VLAN_RESERVED,
                message=f'static VLAN {static} is reserved in zone "{zname}"',
                result="conflict",
            )
        if static in used:
            return Pick(
                reason=reasons.STATIC_VLAN_IN_USE,
                message=f'static VLAN {static} is already used on provider "{provider}"',
                result="conflict",
            )
        return Pick(vlan=static)
    taken = used | pinned_vlans(all_zones, provider)
    for v in cands:
        if v not in taken:
            return Pick(vlan=v)
    ranges = ",".join(spec.get("vlanRanges") or [])
    return Pick(
        reason=reasons.ZONE_EXHAUSTED,
        message=f'zone "{zname}" has no free VLAN in {ranges}',
        result="exhausted",
    )
