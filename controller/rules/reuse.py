"""The VLAN reuse delay (product-decisions.md §8): a released ID is not
handed out again before ``--vlan-reuse-delay`` has passed.

capmox can finalize a ProxmoxMachine whose VM still runs (capmox #742): that VM keeps
sending frames tagged with the old ID, and a network given the ID at once would share an
L2 with it. The record lives in the cluster, on the zone the released Vlan was labelled
with, as the annotation ``proxmox.cozystack.io/released-vlans``: comma-separated
``<id>@<until>`` entries, ``<until>`` an RFC 3339 UTC time (the release plus the delay at the
time of the release). A restart reads it back, so it neither drops nor extends a delay;
changing the flag affects later releases only. Every zone on the provider counts, since
zones sharing a provider share its IDs.

Pure functions over plain values; the writer is ``controller.apply.vlans.VlanManager.release``
(adds an entry before the Vlan goes) and the zone planner (drops expired entries).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping
from typing import Any

from controller import names
from controller.rfc3339 import format_utc, parse

DEFAULT_VLAN_REUSE_DELAY = 600.0  # seconds: --vlan-reuse-delay=10m


def release_until(now: _dt.datetime, delay: float) -> _dt.datetime:
    """When an ID released at ``now`` is free again: ``now + delay`` seconds rounded **up**
    to the whole second. The record on the zone has second resolution (:func:`format_utc`
    drops the fraction); rounding up never shortens the delay and makes the releasing
    process's own hold end at the very instant the record does. (A hold that outlived the
    record by a fraction of a second refused the waiting networks that the record's prune
    had just woken, and nothing woke them again before their 10-minute requeue.)"""
    until = now + _dt.timedelta(seconds=delay)
    if until.microsecond:
        until = until.replace(microsecond=0) + _dt.timedelta(seconds=1)
    return until


def parse_entries(value: str | None) -> dict[int, _dt.datetime]:
    """``"102@2026-12-02T10:00:00Z,105@..."`` -> ``{102: datetime, ...}`` (aware UTC).

    An entry that does not read (no ``@``, an ID outside 1..4094, a time the strict parser
    refuses) is skipped: it cannot name an ID, so it holds none."""
    out: dict[int, _dt.datetime] = {}
    for item in (value or "").split(","):
        vid_text, sep, when = item.strip().partition("@")
        if not sep or not vid_text.isdigit():
            continue
        vid, until = int(vid_text), parse(when)
        if not 1 <= vid <= 4094 or until is None:
            continue
        if vid not in out or until > out[vid]:
            out[vid] = until
    return out


def format_entries(entries: Mapping[int, _dt.datetime]) -> str:
    """The annotation value for ``entries``, by ID (a stable text: no write when unchanged)."""
    return ",".join(f"{vid}@{format_utc(until)}" for vid, until in sorted(entries.items()))


def entries_of(zone: Mapping[str, Any]) -> dict[int, _dt.datetime]:
    """The entries a zone carries (expired ones included)."""
    return parse_entries(((zone.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_RELEASED_VLANS))


def held(zones: Iterable[Mapping[str, Any]], provider: str, now: _dt.datetime) -> dict[int, _dt.datetime]:
    """IDs held back on ``provider`` at ``now``: the unexpired entries of every zone on it,
    each with its latest ``until``."""
    out: dict[int, _dt.datetime] = {}
    for z in zones:
        if str((z.get("spec") or {}).get("providerNetwork") or "") != provider:
            continue
        for vid, until in entries_of(z).items():
            if until > now and (vid not in out or until > out[vid]):
                out[vid] = until
    return out


def with_release(zone: Mapping[str, Any], vid: int, until: _dt.datetime, now: _dt.datetime) -> str:
    """The zone's annotation value after releasing ``vid`` (held until ``until``), with the
    entries expired at ``now`` dropped."""
    entries = {v: u for v, u in entries_of(zone).items() if u > now}
    entries[vid] = max(until, entries.get(vid, until))
    return format_entries(entries)


def pruned(zone: Mapping[str, Any], now: _dt.datetime) -> str | None | bool:
    """The annotation value with the entries expired at ``now`` dropped: False when nothing
    expired (no write), None when nothing is left (remove the annotation)."""
    raw = ((zone.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_RELEASED_VLANS)
    if raw is None:
        return False
    entries = entries_of(zone)
    left = {v: u for v, u in entries.items() if u > now}
    if left == entries and raw == format_entries(entries):
        return False
    return format_entries(left) if left else None


def free_again(held_ids: Mapping[int, _dt.datetime], candidates: Iterable[int]) -> str:
    """The ``ZoneExhausted`` suffix naming the zone's candidates held by the delay, and when
    the first is free again; "" when none is."""
    mine = sorted(u for v, u in held_ids.items() if v in set(candidates))
    if not mine:
        return ""
    return f"; {len(mine)} released ID(s) held by the VLAN reuse delay, free again from {format_utc(mine[0])}"
