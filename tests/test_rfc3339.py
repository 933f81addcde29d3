"""controller/rfc3339.py: the one RFC 3339 parser and formatter (Go's time.RFC3339).

The controller, ``doctor`` and the gateway's failing clock read times through the same
parser, so a value the controller restarts a prune timer on is one ``doctor`` calls
unreadable (issue 14: ``doctor`` used to accept what Go refuses).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from controller.rfc3339 import format_utc, parse

UTC = timezone.utc


@pytest.mark.parametrize(
    "text, want",
    [
        ("2026-10-07T07:00:00Z", datetime(2026, 10, 7, 7, tzinfo=UTC)),
        ("2026-10-07T09:00:00+02:00", datetime(2026, 10, 7, 7, tzinfo=UTC)),
        ("2026-10-07T07:00:00.999Z", datetime(2026, 10, 7, 7, tzinfo=UTC)),  # fraction dropped
        ("2026-10-07T7:00:00Z", datetime(2026, 10, 7, 7, tzinfo=UTC)),  # Go reads a one-digit hour
    ],
)
def test_what_go_accepts(text, want):
    assert parse(text) == want


@pytest.mark.parametrize(
    "text",
    [
        # Python's datetime.fromisoformat accepts each of these; Go's time.Parse refuses them.
        "2026-10-07 07:00:00Z",
        "2026-10-07T07:00:00",
        "20261007T070000Z",
        "2026-10-07",
        "2026-10-07T07:00:00+0200",
        "2026-10-07t07:00:00z",
        # Refused by both.
        "2026-02-30T00:00:00Z",
        "2026-10-07T24:00:00Z",
        "",
    ],
)
def test_what_go_refuses(text):
    assert parse(text) is None


@pytest.mark.parametrize("value", [None, 0, 1.5, ["2026-10-07T07:00:00Z"], {"t": 1}])
def test_anything_but_a_string_is_unreadable(value):
    assert parse(value) is None


def test_format_utc():
    assert format_utc(datetime(2026, 10, 7, 8, 10, tzinfo=UTC)) == "2026-10-07T08:10:00Z"
    plus2 = timezone(timedelta(hours=2))
    assert format_utc(datetime(2026, 10, 7, 10, 0, 30, 900000, tzinfo=plus2)) == "2026-10-07T08:00:30Z"
    assert format_utc(datetime(999, 1, 2, 3, 4, 5, tzinfo=UTC)) == "0999-01-02T03:04:05Z"
    with pytest.raises(ValueError):
        format_utc(datetime(2026, 10, 7))


def test_a_formatted_time_parses_back_to_the_same_second():
    t = datetime(2026, 12, 2, 6, 30, 15, 700000, tzinfo=timezone(timedelta(hours=-5)))
    assert parse(format_utc(t)) == t.replace(microsecond=0)
