"""Prune timers (reference-behaviour.md §7, §6 step 4, §8.1) and the Go list format."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.rfc3339 import format_utc
from controller.rules.prune import (
    DEFAULT_SUBNET_PRUNE_TIMEOUT,
    TrackResult,
    deadline,
    go_list,
    prune_timeout,
    track_deleted_subnets,
)

UTC = timezone.utc
NOW = datetime(2026, 10, 7, 8, 0, 0, tzinfo=UTC)


def at(h, m=0, s=0, us=0, day=7):
    return datetime(2026, 10, day, h, m, s, us, tzinfo=UTC)


# -- §7.1: the reference's table, each followed by the same pass a minute later ----------


@pytest.mark.parametrize(
    "annotation, gone, not_before, want, newest",
    [
        pytest.param(
            None, ["b", "a"], None,
            '{"a":"2026-10-07T08:00:00Z","b":"2026-10-07T08:00:00Z"}', NOW,
            id="new names start now",
        ),
        pytest.param(
            '{"a":"2026-10-07T07:00:00Z"}', ["a", "b"], None,
            '{"a":"2026-10-07T07:00:00Z","b":"2026-10-07T08:00:00Z"}', NOW,
            id="tracked names keep their start, the newest one counts",
        ),
        pytest.param(
            '{"a":"2026-10-07T07:00:00Z","b":"2026-10-07T07:30:00Z"}', ["a"], None,
            '{"a":"2026-10-07T07:00:00Z"}', at(7),
            id="names no longer gone are dropped",
        ),
        pytest.param(
            '{"a":"2026-10-07T07:00:00Z"}', [], None, None, None,
            id="nothing gone removes the annotation",
        ),
        pytest.param(
            "not json", ["a"], None, '{"a":"2026-10-07T08:00:00Z"}', NOW,
            id="an unreadable value starts afresh",
        ),
        pytest.param(
            '{"a":"yesterday"}', ["a"], None, '{"a":"2026-10-07T08:00:00Z"}', NOW,
            id="an unreadable time starts afresh",
        ),
        pytest.param(
            '{"a":"2026-10-08T08:00:00Z"}', ["a"], None, '{"a":"2026-10-07T08:00:00Z"}', NOW,
            id="a time in the future starts now",
        ),
        pytest.param(
            '{"a":"2026-10-07T07:00:00Z","b":"2026-10-07T07:30:00Z"}', ["a", "b"],
            at(7, 30, 0, 500),  # truncated to 07:30:00
            '{"a":"2026-10-07T08:00:00Z","b":"2026-10-07T07:30:00Z"}', NOW,
            id="a time before notBefore starts now, one at the truncated second is kept",
        ),
    ],
)
def test_track_deleted_subnets(annotation, gone, not_before, want, newest):
    result = track_deleted_subnets(annotation, gone, NOW, not_before)
    assert result == TrackResult(desired=want, newest=newest, changed=want != annotation)

    again = track_deleted_subnets(result.desired, gone, NOW + timedelta(minutes=1), not_before)
    assert again.changed is False
    assert again.desired == result.desired
    assert again.newest == newest


def test_the_deletion_second_boundary():
    stored = '{"a":"2026-10-07T07:29:59Z","b":"2026-10-07T07:30:00Z","c":"2026-10-07T07:30:01Z"}'
    result = track_deleted_subnets(stored, ["a", "b", "c"], NOW, at(7, 30, 0, 999999))
    assert json.loads(result.desired) == {
        "a": "2026-10-07T08:00:00Z",  # one second before the deletion: not this network's
        "b": "2026-10-07T07:30:00Z",  # exactly at the truncated deletion second: kept
        "c": "2026-10-07T07:30:01Z",
    }


def test_now_is_truncated_and_converted_to_utc():
    now = datetime(2026, 10, 7, 10, 0, 0, 900000, tzinfo=timezone(timedelta(hours=2)))
    result = track_deleted_subnets(None, ["a"], now, None)
    assert result.desired == '{"a":"2026-10-07T08:00:00Z"}'
    assert result.newest == NOW
    assert result.newest.tzinfo == UTC


def test_an_entry_exactly_now_is_kept_one_second_later_restarts():
    assert track_deleted_subnets('{"a":"2026-10-07T08:00:00Z"}', ["a"], at(8, 0, 0, 999999), None).changed is False
    result = track_deleted_subnets('{"a":"2026-10-07T08:00:01Z"}', ["a"], at(8, 0, 0, 999999), None)
    assert result.desired == '{"a":"2026-10-07T08:00:00Z"}'


def test_a_clock_behind_the_deletion_restarts_the_timer_on_every_pass():
    # The controller's clock is behind the API server's deletionTimestamp: every start it
    # writes is "before notBefore" on the next pass, until the clock catches up (§6 step 4).
    deleted = NOW + timedelta(seconds=5)
    first = track_deleted_subnets(None, ["a"], NOW, deleted)
    assert first.desired == '{"a":"2026-10-07T08:00:00Z"}'
    second = track_deleted_subnets(first.desired, ["a"], NOW + timedelta(seconds=1), deleted)
    assert second == TrackResult('{"a":"2026-10-07T08:00:01Z"}', at(8, 0, 1), True)
    caught_up = track_deleted_subnets(None, ["a"], deleted, deleted)
    assert track_deleted_subnets(caught_up.desired, ["a"], deleted + timedelta(minutes=1), deleted).changed is False


def test_zero_not_before_keeps_every_valid_past_entry():
    # Orphan collection (§8.1): wall clock and no notBefore continue a network's timer.
    stored = '{"a":"2001-01-01T00:00:00Z","b":"0001-01-01T00:00:00Z"}'
    result = track_deleted_subnets(stored, ["a", "b"], NOW, None)
    assert result.desired == stored
    assert result.changed is False
    assert result.newest == datetime(2001, 1, 1, tzinfo=UTC)


def test_absent_stays_absent_when_nothing_is_gone():
    assert track_deleted_subnets(None, [], NOW, None) == TrackResult(None, None, False)


@pytest.mark.parametrize("stored", ["", "{}", "not json", '{"a":"2026-10-07T07:00:00Z"}'])
def test_present_annotation_is_deleted_when_nothing_is_gone(stored):
    assert track_deleted_subnets(stored, [], NOW, None) == TrackResult(None, None, True)


@pytest.mark.parametrize(
    "stored",
    [
        "",
        "null",
        "[1]",
        '"2026-10-07T07:00:00Z"',
        '{"a":"2026-10-07T07:00:00Z"} junk',
        # Any non-string value makes the whole value unreadable (§7.1 "any parse error").
        '{"a":"2026-10-07T07:00:00Z","b":5}',
        '{"a":"2026-10-07T07:00:00Z","b":null}',
        '{"a":"2026-10-07T07:00:00Z","b":{"c":"d"}}',
    ],
)
def test_anything_but_an_object_of_strings_counts_as_empty(stored):
    result = track_deleted_subnets(stored, ["a"], NOW, None)
    assert result.desired == '{"a":"2026-10-07T08:00:00Z"}'
    assert result.changed is True


def test_duplicate_keys_last_wins_like_go():
    stored = '{"a":"2026-10-07T06:00:00Z","a":"2026-10-07T07:00:00Z"}'
    assert track_deleted_subnets(stored, ["a"], NOW, None).desired == '{"a":"2026-10-07T07:00:00Z"}'


def test_compact_sorted_json_and_duplicate_gone_names():
    result = track_deleted_subnets(None, ["c", "a", "b", "a"], NOW, None)
    assert result.desired == '{"a":"2026-10-07T08:00:00Z","b":"2026-10-07T08:00:00Z","c":"2026-10-07T08:00:00Z"}'


def test_spaced_json_is_rewritten_compact():
    stored = '{ "a" : "2026-10-07T07:00:00Z" }'
    result = track_deleted_subnets(stored, ["a"], NOW, None)
    assert result == TrackResult('{"a":"2026-10-07T07:00:00Z"}', at(7), True)


@pytest.mark.parametrize(
    "entry, kept",
    [
        # Go's time.Parse(time.RFC3339, ...) accepts these; kept starts are written in UTC.
        ("2026-10-07T09:00:00+02:00", "2026-10-07T07:00:00Z"),
        ("2026-10-07T05:00:00-02:00", "2026-10-07T07:00:00Z"),
        ("2026-10-07T07:00:00+00:00", "2026-10-07T07:00:00Z"),
        ("2026-10-07T07:00:00-00:00", "2026-10-07T07:00:00Z"),
        ("2026-10-07T07:00:00.5Z", "2026-10-07T07:00:00Z"),
        ("2026-10-07T07:00:00,5Z", "2026-10-07T07:00:00Z"),
        ("2026-10-07T07:00:00.123456789123Z", "2026-10-07T07:00:00Z"),
        ("2026-10-07T7:00:00Z", "2026-10-07T07:00:00Z"),  # Go reads a one-digit hour
        ("2026-10-08T07:00:00+24:00", "2026-10-07T07:00:00Z"),
        ("2024-02-29T00:00:00Z", "2024-02-29T00:00:00Z"),
        # Restart at now: refused by Go, or outside what datetime holds (year 0 is before
        # Go's zero time, so it restarts there too).
        ("2026-10-07t07:00:00z", None),
        ("2026-10-07 07:00:00Z", None),
        ("2026-10-07T07:00:00", None),
        ("2026-10-07T07:00:00+0200", None),
        ("2026-10-07T07:00:00+25:00", None),
        ("2026-10-07T07:00:00+00:99", None),
        ("2026-10-07T07:00:00.Z", None),
        ("2026-10-07T07:0:00Z", None),
        ("2026-10-07T24:00:00Z", None),
        ("2026-10-07T23:59:60Z", None),
        ("2023-02-29T00:00:00Z", None),
        ("2026-00-07T07:00:00Z", None),
        ("2026-10-07T07:00:00Z ", None),
        ("0000-01-01T00:00:00Z", None),
        ("0001-01-01T00:00:00+01:00", None),
        ("\u0662026-10-07T07:00:00Z", None),
        ("", None),
    ],
)
def test_rfc3339_like_go(entry, kept):
    result = track_deleted_subnets(json.dumps({"a": entry}), ["a"], NOW, None)
    assert json.loads(result.desired) == {"a": kept or "2026-10-07T08:00:00Z"}


def test_normalised_entry_is_written_once():
    first = track_deleted_subnets('{"a":"2026-10-07T09:00:00+02:00"}', ["a"], NOW, None)
    assert first.changed is True
    assert track_deleted_subnets(first.desired, ["a"], NOW, None).changed is False


def test_names_are_encoded_like_go():
    result = track_deleted_subnets(None, ["a<b>&c", "d\u2028"], NOW, None)
    assert result.desired == '{"a\\u003cb\\u003e\\u0026c":"2026-10-07T08:00:00Z","d\\u2028":"2026-10-07T08:00:00Z"}'
    assert set(json.loads(result.desired)) == {"a<b>&c", "d\u2028"}


def test_naive_datetimes_are_refused():
    with pytest.raises(ValueError, match="timezone-aware"):
        track_deleted_subnets(None, ["a"], datetime(2026, 10, 7, 8), None)
    with pytest.raises(ValueError, match="timezone-aware"):
        track_deleted_subnets(None, ["a"], NOW, datetime(2026, 10, 7, 8))


# -- deadline and messages -------------------------------------------------------------


def test_deadline():
    assert deadline(NOW, None) == at(8, 10)
    assert deadline(NOW, 600.0) == at(8, 10)
    assert deadline(NOW, 30) == at(8, 0, 30)
    assert deadline(NOW, timedelta(minutes=1)) == at(8, 1)
    assert deadline(NOW, 0) == at(8, 10)  # non-positive: the default
    assert deadline(NOW, timedelta(seconds=-5)) == at(8, 10)


def test_prune_timeout():
    assert DEFAULT_SUBNET_PRUNE_TIMEOUT == timedelta(minutes=10)
    assert prune_timeout(None) == DEFAULT_SUBNET_PRUNE_TIMEOUT
    assert prune_timeout(-1.0) == DEFAULT_SUBNET_PRUNE_TIMEOUT
    assert prune_timeout(90) == timedelta(seconds=90)
    assert prune_timeout(timedelta(hours=1)) == timedelta(hours=1)


def test_a_subnet_deleted_later_gets_its_own_full_wait():
    # §7.2: the VLAN waits for the newest timer.
    result = track_deleted_subnets('{"a":"2026-10-07T07:00:00Z"}', ["a", "b"], NOW, None)
    assert format_utc(deadline(result.newest, None)) == "2026-10-07T08:10:00Z"


@pytest.mark.parametrize(
    "names, text",
    [(["a", "b"], "[a b]"), ([], "[]"), (["subnet-a"], "[subnet-a]"), (("x", "y", "z"), "[x y z]")],
)
def test_go_list(names, text):
    assert go_list(names) == text


# -- properties ------------------------------------------------------------------------

NAMES = st.sampled_from(["a", "b", "c", "subnet-a", "subnet-b"])
ZONES = [UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-5, minutes=-30))]
aware = st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.sampled_from(ZONES))
stamp = st.one_of(
    aware.map(lambda t: t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")),
    aware.map(lambda t: t.isoformat()),
    st.text(max_size=12),
)
annotations = st.one_of(
    st.none(),
    st.dictionaries(NAMES, stamp, max_size=5).map(json.dumps),
    st.text(max_size=20),
)


@settings(max_examples=400, deadline=None)
@given(annotation=annotations, gone=st.lists(NAMES, max_size=6), now=aware, not_before=st.one_of(st.none(), aware))
def test_tracking_is_idempotent_and_keeps_only_gone_names(annotation, gone, now, not_before):
    first = track_deleted_subnets(annotation, gone, now, not_before)
    assert first.changed == (first.desired != annotation)

    second = track_deleted_subnets(first.desired, gone, now, not_before)
    assert second == TrackResult(first.desired, first.newest, False)

    if not gone:
        assert first.desired is None and first.newest is None
        return
    timers = json.loads(first.desired)
    assert set(timers) == set(gone)
    now_s = now.astimezone(UTC).replace(microsecond=0)
    starts = [datetime.strptime(v, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) for v in timers.values()]
    assert first.newest == max(starts)
    for start in starts:
        assert start <= now_s
        # At or after the deletion second, unless the clock is behind it: then it restarts
        # at now on every pass until the clock catches up.
        if not_before is not None and start != now_s:
            assert start >= not_before.astimezone(UTC).replace(microsecond=0)


@settings(max_examples=200, deadline=None)
@given(gone=st.lists(NAMES, min_size=1, max_size=5), later=st.integers(0, 3600), now=aware)
def test_timers_survive_later_passes(gone, later, now):
    first = track_deleted_subnets(None, gone, now, None)
    again = track_deleted_subnets(first.desired, gone, now + timedelta(seconds=later), now)
    assert again.changed is False
    assert again.newest == first.newest
