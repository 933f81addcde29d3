"""Prune timers of deleted subnets on a Vlan, and the Go formatting used in their messages.

Kube-OVN lists a subnet in ``Vlan.status.subnets`` until it has deleted the subnet's logical
switch. A listed subnet that no longer exists ("gone") holds the VLAN until Kube-OVN prunes the
name or, per name, until the prune timeout has run from when the controller first saw it gone.
The timers live on the Vlan in the annotation ``proxmox.cozystack.io/deleted-subnets``, a JSON
object from subnet name to RFC 3339 start time, so they survive restarts and carry over from a
deleting network to the zone's orphan collection.

Pure functions; the caller reads the Vlan, patches it (locked merge patch) when
:attr:`TrackResult.changed`, and decides whether to wait. Rules: ``reference-behaviour.md``
§7 (§7.1 ``trackDeletedSubnets``, §7.2), §6 step 4 (deadline, ``SwitchDeleting`` message),
§8.1 (orphan collection: wall clock and no ``notBefore``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone

import attrs

from controller import rfc3339

# §7: DefaultSubnetPruneTimeout, overridden by --subnet-prune-timeout.
DEFAULT_SUBNET_PRUNE_TIMEOUT = timedelta(minutes=10)

_SURROGATE = re.compile("[\ud800-\udfff]")
# encoding/json escapes these even inside strings (HTML safety and JavaScript line ends).
_GO_JSON_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


@attrs.frozen
class TrackResult:
    """Outcome of :func:`track_deleted_subnets`.

    :ivar desired: the annotation value to store (compact JSON), or ``None`` for "absent".
    :ivar newest: latest start among the gone names (aware UTC, whole second), ``None`` when
        nothing is gone.
    :ivar changed: ``desired`` differs from the stored value or presence, i.e. the Vlan needs
        a write (set the value, or delete the key when ``desired`` is ``None``).
    """

    desired: str | None
    newest: datetime | None
    changed: bool


def track_deleted_subnets(
    annotation_value: str | None,
    gone: Iterable[str],
    now: datetime,
    not_before: datetime | None,
) -> TrackResult:
    """Keep one prune timer per gone subnet (§7.1).

    * The stored value is read as a JSON object of strings. Anything else (invalid JSON,
      another JSON type, any non-string value) counts as no timers at all.
    * ``now`` and ``not_before`` are converted to UTC and truncated to whole seconds.
    * Each gone name keeps the start stored for it, parsed like Go's
      ``time.Parse(time.RFC3339, ...)``. It restarts at ``now`` when the entry is missing,
      unreadable, later than ``now``, or earlier than ``not_before``. An entry exactly at the
      truncated ``not_before`` second is kept (§7.2). ``not_before=None`` is Go's zero time
      and keeps every valid past entry (zone orphan collection, §8.1).
    * Names not in ``gone`` are dropped, so a name gone again later starts afresh.
    * Kept starts are written back in UTC at second precision (``2026-10-07T07:00:00Z``).
      An entry written by hand with an offset or a fraction is normalised, which is one
      write; the start instant is unchanged, apart from the dropped fraction.
    * ``desired`` is Go's ``encoding/json`` of the map: sorted keys, no spaces
      (``{"a":"2026-10-07T07:00:00Z","b":"2026-10-07T08:00:00Z"}``); ``None`` when nothing
      is gone.

    :param annotation_value: the Vlan's ``proxmox.cozystack.io/deleted-subnets`` value,
        ``None`` when the key is absent.
    :param gone: names Kube-OVN still lists on the Vlan whose Subnet is NotFound (duplicates
        allowed).
    :param now: the controller clock; must be timezone-aware.
    :param not_before: the deleting network's ``deletionTimestamp``, or ``None``; must be
        timezone-aware when given.
    :returns: :class:`TrackResult`. Applying the result and calling again with the same
        arguments yields ``changed=False``.
    :raises ValueError: ``now`` or ``not_before`` is a naive datetime.
    """
    now_s = _utc_second(now, "now")
    floor = _utc_second(not_before, "not_before") if not_before is not None else None
    stored = _stored_timers(annotation_value)

    starts: dict[str, datetime] = {}
    for name in gone:
        start = rfc3339.parse(stored[name]) if name in stored else None
        if start is None or start > now_s or (floor is not None and start < floor):
            start = now_s
        starts[name] = start

    if not starts:
        return TrackResult(desired=None, newest=None, changed=annotation_value is not None)
    desired = _go_json({name: rfc3339.format_utc(t) for name, t in starts.items()})
    return TrackResult(desired=desired, newest=max(starts.values()), changed=desired != annotation_value)


def prune_timeout(value: timedelta | float | None) -> timedelta:
    """The prune timeout in effect (§7): ``value``, or 10 minutes when it is ``None`` or not positive.

    :param value: ``--subnet-prune-timeout`` as a :class:`~datetime.timedelta` or in seconds.
    """
    if value is None:
        return DEFAULT_SUBNET_PRUNE_TIMEOUT
    timeout = value if isinstance(value, timedelta) else timedelta(seconds=value)
    return timeout if timeout > timedelta(0) else DEFAULT_SUBNET_PRUNE_TIMEOUT


def deadline(newest: datetime, timeout: timedelta | float | None) -> datetime:
    """When the VLAN may be released although Kube-OVN still lists gone subnets (§6 step 4.5, §8.1).

    :param newest: :attr:`TrackResult.newest` (the newest timer, so a subnet deleted later
        gets its own full wait).
    :param timeout: the prune timeout, see :func:`prune_timeout` (seconds or timedelta;
        ``None``/non-positive = 10 minutes).
    :returns: ``newest + timeout``; release once ``now >= deadline`` (the wait lasts while
        ``deadline - now > 0``).
    """
    return newest + prune_timeout(timeout)


def go_list(names: Iterable[str]) -> str:
    """Go's ``%v`` of a ``[]string``: ``["a", "b"]`` -> ``"[a b]"``, empty -> ``"[]"``.

    Used in ``Kube-OVN still lists subnets <list> ...`` and the ``SwitchDeleted`` /
    ``SwitchDeleting`` messages (§6). Names are printed as they are, in the given order.
    """
    return "[" + " ".join(names) + "]"


# -- helpers -------------------------------------------------------------------------


def _utc_second(t: datetime, what: str) -> datetime:
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got {t!r}")
    return t.astimezone(timezone.utc).replace(microsecond=0)


def _stored_timers(value: str | None) -> dict[str, str]:
    if value is None:
        return {}
    try:
        data = json.loads(value)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        return {}
    return data


def _go_json(timers: dict[str, str]) -> str:
    """``encoding/json`` of a ``map[string]string``: sorted keys, compact, Go's escaping."""
    text = json.dumps(timers, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return _SURROGATE.sub("\\\\ufffd", text.translate(_GO_JSON_ESCAPES))
