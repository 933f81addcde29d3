"""RFC 3339 times as Kubernetes and Kube-OVN write them: one parser, one formatter.

Every time the controller reads from an object (``deletionTimestamp``, a condition's
``lastTransitionTime``, ``status.gatewayFailingSince``, the prune timers of
``proxmox.cozystack.io/subnet-deleted-at``) goes through :func:`parse`, and every time it
writes through :func:`format_utc`, so a value the controller restarts a timer on is also one
``doctor`` calls unreadable (reference-behaviour.md §7.1; Go's ``time.RFC3339``).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any
import datetime as _dt
from collections.abc import Callable

# Go's time.Parse(time.RFC3339, s) grammar: four-digit year; two-digit month, day, minute
# and second; a one- or two-digit hour; an optional fraction after "." or ","; "Z" or a
# "+hh:mm"/"-hh:mm" offset. Upper-case "T" and "Z" only; nothing before or after.
_GRAMMAR = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{1,2}):([0-9]{2}):([0-9]{2})"
    r"(?:[.,][0-9]+)?(Z|([+-])([0-9]{2}):([0-9]{2}))"
)


def parse(text: Any) -> datetime | None:
    """Go's ``time.Parse(time.RFC3339, text)`` as an aware UTC datetime, truncated to the second.

    ``None`` for anything but a string Go accepts, and also when the instant lies outside
    what :class:`datetime` holds (before year 1 or after 9999 in UTC): Go would accept
    those, but they are earlier than Go's zero time or later than any ``now``, so every
    caller treats them as unreadable.

    ``"2026-10-07T10:00:00.9+02:00"`` -> ``datetime(2026, 10, 7, 8, 0, 0, tzinfo=UTC)``.
    """
    if not isinstance(text, str):
        return None
    m = _GRAMMAR.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
    if not (1 <= month <= 12 and 0 <= hour <= 23 and 0 <= minute <= 59 and 0 <= second <= 59):
        return None
    if not 1 <= day <= _days_in(year, month):
        return None
    offset = timedelta(0)
    if m.group(7) != "Z":
        off_h, off_m = int(m.group(9)), int(m.group(10))
        if off_h > 24 or off_m > 60:  # Go's limits for a numeric zone
            return None
        offset = timedelta(hours=off_h, minutes=off_m)
        if m.group(8) == "-":
            offset = -offset
    try:
        return datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc) - offset
    except (ValueError, OverflowError):
        return None


def format_utc(t: datetime) -> str:
    """RFC 3339 in UTC at second precision, as Go's ``Format(time.RFC3339)`` of a UTC time.

    ``datetime(2026, 10, 7, 10, 0, 30, 900000, tzinfo=+02:00)`` -> ``"2026-10-07T08:00:30Z"``
    (converted to UTC, the fraction dropped).

    :raises ValueError: ``t`` is naive (its zone would be a guess).
    """
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"a timezone-aware datetime is needed, got {t!r}")
    t = t.astimezone(timezone.utc)
    # By hand: strftime("%Y") does not zero-pad years below 1000 on every libc.
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}Z"


def _days_in(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


Clock = Callable[[], _dt.datetime]


def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)
