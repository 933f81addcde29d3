"""The wire monitor's judgement (hack/wire_monitor.py) and the probe's loss times
(hack/dataplane.Prober), without a data plane: what counts as the controller showing on the
wire, and when a lost echo reply was due."""

from __future__ import annotations

from hack.dataplane import Prober
from hack.wire_monitor import GAP_LIMIT, WireFigures


def figures(**kw) -> WireFigures:
    base = dict(replies=100, lost=0, lost_at=[], longest_gap=0.12, seconds=10.0, gateway_claims=1, group_kept=True)
    base.update(kw)
    return WireFigures(**base)


def test_a_steady_gateway_is_no_problem_even_with_an_isolated_lost_reply():
    assert figures().problems() == []
    assert figures(lost=2, lost_at=[3.1, 7.4], longest_gap=0.31).problems() == []


def test_the_gateway_moving_its_group_rewritten_or_a_second_without_replies_is_a_problem():
    assert figures(gateway_claims=2).problems() == ["the gateway port was claimed 2 times (moved)"]
    assert figures(gateway_claims=0).problems() == ["the gateway port was claimed 0 times (moved)"]
    assert figures(group_kept=False).problems() == ["the HA chassis group was rewritten"]
    assert figures(longest_gap=GAP_LIMIT).problems() == [f"no reply for {GAP_LIMIT:.2f}s"]
    assert figures(longest_gap=GAP_LIMIT - 0.01).problems() == []


def probe_with(replies: dict[int, float], interval: float = 0.1) -> Prober:
    p = Prober.__new__(Prober)  # no process: only the recorded replies matter here
    p.interval, p.reply_at, p.seqs = interval, dict(replies), set(replies)
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
