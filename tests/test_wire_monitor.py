"""The wire monitor's judgement (hack/chaoskit/wire_monitor.py) and the probe's loss times
(hack.bed.Prober, hack/bed/dataplane.py), without a data plane: what counts as the controller showing on the
wire, and when a lost echo reply was due."""

from __future__ import annotations

import datetime as dt

from hack.bed import Prober
from hack.chaoskit.wire_monitor import GAP_LIMIT, WireFigures, binding_events, moves_after


def figures(**kw) -> WireFigures:
    base = dict(replies=100, lost=0, lost_at=[], longest_gap=0.12, seconds=10.0, gateway_moves=[], group_kept=True)
    base.update(kw)
    return WireFigures(**base)


def test_a_steady_gateway_is_no_problem_even_with_an_isolated_lost_reply():
    assert figures().problems() == []
    assert figures(lost=2, lost_at=[3.1, 7.4], longest_gap=0.31).problems() == []


def test_the_gateway_moving_its_group_rewritten_or_a_second_without_replies_is_a_problem():
    moves = ["+12.3s released by ch1", "+12.5s claimed by ch2"]
    assert figures(gateway_moves=moves).problems() == [
        "the gateway port moved: +12.3s released by ch1, +12.5s claimed by ch2"]
    assert figures(group_kept=False).problems() == ["the HA chassis group was rewritten"]
    assert figures(longest_gap=GAP_LIMIT).problems() == [f"no reply for {GAP_LIMIT:.2f}s"]
    assert figures(longest_gap=GAP_LIMIT - 0.01).problems() == []


def probe_with(replies: dict[int, float], interval: float = 0.1) -> Prober:
    p = Prober.__new__(Prober)  # no process: only the recorded replies matter here
    p.kind, p.interval, p.reply_at, p.seqs = "ping", interval, dict(replies), set(replies)
    p.replies = sorted(replies.values())
    return p


def test_a_lost_reply_is_due_an_interval_per_request_after_the_last_answered_one():
    p = probe_with({1: 10.0, 2: 10.1, 5: 10.4, 6: 10.5})
    assert p.lost() == 2
    assert [round(t, 2) for t in p.lost_at()] == [10.2, 10.3]


def test_no_loss_no_times():
    p = probe_with({1: 1.0, 2: 1.1, 3: 1.2})
    assert (p.lost(), p.lost_at()) == (0, [])
    # Requests before the first reply wait for the VM's ARP resolution: not lost.
    p = probe_with({4: 1.0, 5: 1.1, 6: 1.2})
    assert (p.lost(), p.lost_at()) == (0, [])
    assert (probe_with({}).lost(), probe_with({}).lost_at()) == (0, [])


def test_a_ping_gap_counts_only_where_a_request_went_unanswered():
    # Issue 28: under load a 1.2 s stretch between two consecutive replies (seq 3 -> 4), every
    # request answered: the pinger was not scheduled, the gateway was there.
    p = probe_with({1: 10.0, 2: 10.1, 3: 10.2, 4: 11.4, 5: 11.5})
    assert round(p.longest_gap(9.95, 11.55), 2) == 0.05
    # Requests 4-14 unanswered between 10.2 and 11.5: the gateway was gone for 1.3 s.
    p = probe_with({1: 10.0, 2: 10.1, 3: 10.2, 15: 11.5, 16: 11.6})
    assert round(p.longest_gap(9.95, 11.65), 2) == 1.3
    # Nothing since the last reply counts up to the end; no reply at all is the whole window.
    p = probe_with({1: 10.0, 2: 10.1})
    assert round(p.longest_gap(9.95, 12.0), 2) == 1.9
    assert probe_with({}).longest_gap(10.0, 12.0) == 2.0


def test_an_arping_gap_is_every_stretch_between_replies():
    p = probe_with({1: 10.0, 2: 10.1, 3: 11.4})
    p.kind = "arping"
    assert round(p.longest_gap(9.95, 11.45), 2) == 1.3


# ovn-controller's binding.c messages, in its default log format.
LOG = """\
2026-12-04T13:26:30.533Z|00045|binding|INFO|Claiming lport cr-v-s for this chassis.
2026-12-04T13:26:30.533Z|00046|binding|INFO|cr-v-s: Claiming 00:00:00:aa:bb:cc 10.0.0.1/24
2026-12-04T13:26:30.600Z|00047|binding|INFO|Claiming lport cr-v-s2 for this chassis.
2026-12-04T13:26:31.000Z|00048|binding|INFO|Releasing lport cr-v-s from this chassis (sb_readonly=0)
2026-12-04T13:26:32.250Z|00049|binding|INFO|Changing chassis for lport cr-v-s from ch2 to ch1.
2026-12-04T13:26:33.000Z|00050|binding|INFO|Releasing lport cr-v-s from this additional chassis.
"""


def test_binding_events_are_the_ports_claims_and_releases_with_their_utc_times():
    t0 = dt.datetime(2026, 12, 4, 13, 26, 30, 533000, tzinfo=dt.timezone.utc).timestamp()
    events = binding_events(LOG, "cr-v-s", "ch1")
    assert [(round(at - t0, 3), verb, ch) for at, verb, ch in events] == [
        (0.0, "claimed", "ch1"), (0.467, "released", "ch1"), (1.717, "claimed", "ch1")]


def test_only_a_release_or_another_chassis_claiming_after_the_first_reply_is_a_move():
    start = [(100.0, "claimed", "ch2"), (100.2, "released", "ch2"), (100.5, "claimed", "ch1")]
    # Before the first reply (at 101.0) the port settling on its chassis is not counted;
    # ch1 logging its claim again (a retried transaction) is not a move either.
    assert moves_after(101.0, start + [(150.0, "claimed", "ch1")]) == []
    # Failover and failback: each release and each claim by a new holder, in time order.
    assert moves_after(101.0, start + [(140.5, "claimed", "ch3"), (140.0, "released", "ch1"),
                                       (160.0, "claimed", "ch1")]) == [
        "+39.0s released by ch1", "+39.5s claimed by ch3", "+59.0s claimed by ch1"]
    # A chassis the holder never was releasing it ("Releasing lport" for another kind) is not one.
    assert moves_after(101.0, start + [(120.0, "released", "ch3")]) == []


def test_the_judged_run_starts_at_the_first_of_ten_requests_in_a_row_answered_after_the_settle():
    from hack.chaoskit.wire_monitor import STEADY_REPLIES

    assert STEADY_REPLIES == 10
    # Issue 28: a reply just after the settle, then 14 requests unanswered for 1.06 s (the
    # chassis' flows and the trunk's learning catching up), then a steady wire.
    replies = {1: 9.9, 2: 10.0, **{q: 11.06 + 0.1 * (q - 17) for q in range(17, 40)}}
    assert round(probe_with(replies).steady_after(9.95, STEADY_REPLIES), 2) == 11.06
    assert probe_with({q: 10.0 + 0.1 * q for q in range(1, 10)}).steady_after(9.0, STEADY_REPLIES) is None  # nine in a row
    assert probe_with({q: 10.0 + 0.1 * q for q in range(1, 11)}).steady_after(10.15, STEADY_REPLIES) is None  # seq 1 was before
