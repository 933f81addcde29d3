"""Unit tests of controller.runtime.workqueue (client-go workqueue semantics).

Time is a fake clock moved by hand; nothing here waits on real time for an
assertion. Thread tests only join with generous safety timeouts.
"""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from controller.runtime.workqueue import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimitingQueue,
    default_controller_rate_limiter,
)

from tests.support.clock import FakeClock
from hack.tools.wait import wait_for

JOIN = 30.0  # safety net for thread joins, never an expectation


class ZeroLimiter:
    """Rate limiter that never delays (keeps thread tests free of delays)."""

    def when(self, key):
        return 0.0

    def forget(self, key):
        pass

    def num_requeues(self, key):
        return 0


def drain(q: RateLimitingQueue) -> list:
    """Take and finish every ready key, in order (bounded: a broken queue fails, never hangs)."""
    out = []
    while (key := q.get(timeout=0)) is not None:
        out.append(key)
        q.done(key)
        assert len(out) < 1000, "queue never drains"
    return out


# -- plain queue --------------------------------------------------------------


def test_add_dedups_waiting_key():
    q = RateLimitingQueue(clock=FakeClock())
    for key in ["a", "b", "a", "a", "c", "b"]:
        q.add(key)
    assert len(q) == 3
    assert q.len() == 3
    assert [q.get(timeout=0), q.get(timeout=0), q.get(timeout=0)] == ["a", "b", "c"]
    assert q.get(timeout=0) is None
    assert not q.shutting_down()


def test_key_not_handed_out_while_processing_and_requeued_after_done():
    q = RateLimitingQueue(clock=FakeClock())
    q.add("a")
    assert q.get(timeout=0) == "a"
    q.add("a")  # added mid-pass
    q.add("a")  # still one extra pass
    assert len(q) == 0
    assert q.get(timeout=0) is None  # never to a second worker
    q.done("a")
    assert len(q) == 1
    assert q.get(timeout=0) == "a"  # processed once more
    q.done("a")
    assert q.get(timeout=0) is None


def test_done_without_add_does_not_requeue_and_unknown_done_is_ignored():
    q = RateLimitingQueue(clock=FakeClock())
    q.add("a")
    assert q.get(timeout=0) == "a"
    q.done("a")
    q.done("a")
    q.done("never-seen")
    assert len(q) == 0


def test_fifo_order_with_requeue_goes_to_the_back():
    q = RateLimitingQueue(clock=FakeClock())
    q.add("a")
    assert q.get(timeout=0) == "a"
    q.add("b")
    q.add("a")
    q.add("c")
    q.done("a")
    assert drain(q) == ["b", "c", "a"]


def test_shutdown_wakes_all_blocked_getters():
    q = RateLimitingQueue(clock=FakeClock())
    results: list = []
    lock = threading.Lock()

    def worker():
        key = q.get()
        with lock:
            results.append(key)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    wait_for(lambda: q.inspect().getters_waiting == 4, what="4 blocked getters")
    q.shutdown()
    for t in threads:
        t.join(JOIN)
        assert not t.is_alive()
    assert results == [None] * 4
    assert q.shutting_down()


def test_shutdown_hands_out_queued_keys_then_none_and_ignores_new_adds():
    q = RateLimitingQueue(clock=FakeClock())
    q.add("a")
    q.add_after("later", 5)
    q.shutdown()
    q.add("b")
    q.add_after("c", 1)
    assert q.get() == "a"
    assert q.get() is None
    q.done("a")
    assert q.get() is None


def test_shutdown_keeps_a_mid_pass_add():
    q = RateLimitingQueue(clock=FakeClock())
    q.add("a")
    assert q.get() == "a"
    q.add("a")
    q.shutdown()
    q.done("a")
    assert q.get() == "a"
    q.done("a")
    assert q.get() is None


def test_blocked_get_wakes_on_add():
    q = RateLimitingQueue(clock=FakeClock())
    got: list = []
    t = threading.Thread(target=lambda: got.append(q.get()))
    t.start()
    wait_for(lambda: q.inspect().getters_waiting == 1, what="a blocked getter")
    q.add("x")
    t.join(JOIN)
    assert got == ["x"]


def test_get_timeout_returns_none_without_shutdown():
    q = RateLimitingQueue(clock=FakeClock())
    assert q.get(timeout=0) is None
    assert q.get(timeout=0.001) is None
    assert not q.shutting_down()


# -- delaying queue -----------------------------------------------------------


def test_add_after_fires_at_deadline_on_the_injected_clock():
    clock = FakeClock()
    q = RateLimitingQueue(clock=clock)
    q.add_after("a", 10)
    assert len(q) == 0
    clock.advance(9.999)
    assert q.get(timeout=0) is None
    clock.advance(0.001)
    assert q.get(timeout=0) == "a"
    q.done("a")
    clock.advance(100)
    assert q.get(timeout=0) is None  # fired once


def test_add_after_keeps_the_earliest_deadline():
    clock = FakeClock()
    q = RateLimitingQueue(clock=clock)
    q.add_after("a", 5)
    q.add_after("a", 60)  # does not postpone
    clock.advance(5)
    assert q.get(timeout=0) == "a"
    q.done("a")
    clock.advance(100)
    assert q.get(timeout=0) is None  # the later request was not kept either


def test_add_after_earlier_deadline_brings_it_forward_once():
    clock = FakeClock()
    q = RateLimitingQueue(clock=clock)
    q.add_after("a", 60)
    q.add_after("a", 1)
    clock.advance(1)
    assert q.get(timeout=0) == "a"
    q.done("a")
    clock.advance(120)
    assert q.get(timeout=0) is None  # the superseded 60 s entry is stale
    assert q.inspect().delayed_entries == 0


def test_add_after_nonpositive_adds_now_and_delayed_order_is_by_deadline():
    clock = FakeClock()
    q = RateLimitingQueue(clock=clock)
    q.add_after("now", 0)
    q.add_after("neg", -3)
    q.add_after("late", 3)
    q.add_after("early", 1)
    q.add_after("mid", 2)
    assert len(q) == 2
    clock.advance(5)
    assert drain(q) == ["now", "neg", "early", "mid", "late"]


def test_delayed_key_that_is_queued_is_not_duplicated():
    clock = FakeClock()
    q = RateLimitingQueue(clock=clock)
    q.add("a")
    q.add_after("a", 1)
    clock.advance(1)
    assert len(q) == 1
    assert drain(q) == ["a"]


def test_delayed_key_firing_while_processing_waits_for_done():
    clock = FakeClock()
    q = RateLimitingQueue(clock=clock)
    q.add("a")
    assert q.get(timeout=0) == "a"
    q.add_after("a", 1)
    clock.advance(1)
    assert q.get(timeout=0) is None
    q.done("a")
    assert q.get(timeout=0) == "a"


def test_blocked_get_picks_up_delayed_key_after_wake():
    clock = FakeClock()
    q = RateLimitingQueue(clock=clock)
    q.add_after("a", 3600)  # the getter's real-time wait would be an hour
    got: list = []
    t = threading.Thread(target=lambda: got.append(q.get()))
    t.start()
    wait_for(lambda: q.inspect().getters_waiting == 1, what="a blocked getter")
    clock.advance(3600)
    q.wake()
    t.join(JOIN)
    assert got == ["a"]


def test_blocked_get_recomputes_its_wait_on_an_earlier_add_after():
    clock = FakeClock()
    q = RateLimitingQueue(clock=clock)
    q.add_after("late", 3600)
    got: list = []
    t = threading.Thread(target=lambda: got.append(q.get()))
    t.start()
    wait_for(lambda: q.inspect().getters_waiting == 1, what="a blocked getter")
    q.add_after("soon", 0)
    t.join(JOIN)
    assert got == ["soon"]


# -- rate limiters ------------------------------------------------------------


def test_item_exponential_backoff_values_and_cap():
    lim = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    got = [lim.when("k") for _ in range(25)]
    expected = [min(0.005 * 2**n, 1000.0) for n in range(25)]
    assert got == pytest.approx(expected)
    assert got[:4] == pytest.approx([0.005, 0.010, 0.020, 0.040])
    assert got[17] == pytest.approx(655.36)
    assert got[18:] == [1000.0] * 7
    assert lim.num_requeues("k") == 25
    assert lim.when("other") == pytest.approx(0.005)  # per key


def test_item_exponential_huge_failure_count_stays_capped():
    lim = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    for _ in range(5000):
        lim.when("k")
    assert lim.num_requeues("k") == 5000 and lim.when("k") == 1000.0


def test_item_exponential_forget_resets():
    lim = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    for _ in range(5):
        lim.when("k")
    lim.forget("k")
    assert lim.num_requeues("k") == 0
    assert lim.when("k") == pytest.approx(0.005)


def test_bucket_burst_then_qps_spacing():
    clock = FakeClock()
    lim = BucketRateLimiter(qps=10, burst=100, clock=clock)
    assert [lim.when(i) for i in range(100)] == [0.0] * 100
    assert [lim.when(i) for i in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    clock.advance(0.3)  # the three reservations are paid off
    assert lim.when("x") == pytest.approx(0.1)
    clock.advance(1000)  # refills only up to the burst
    assert [lim.when(i) for i in range(100)] == [0.0] * 100
    assert lim.when("y") == pytest.approx(0.1)
    lim.forget("y")
    assert lim.num_requeues("y") == 0


def test_bucket_refill_rate():
    clock = FakeClock()
    lim = BucketRateLimiter(qps=10, burst=100, clock=clock)
    for i in range(100):
        lim.when(i)
    clock.advance(0.5)  # five tokens back
    assert [lim.when(i) for i in range(6)] == pytest.approx([0, 0, 0, 0, 0, 0.1])


def test_max_of_takes_the_longest_and_forgets_in_all():
    clock = FakeClock()
    lim = default_controller_rate_limiter(clock)
    assert isinstance(lim, MaxOfRateLimiter)
    # Per-key backoff dominates while the bucket has tokens.
    assert [lim.when("k") for _ in range(3)] == pytest.approx([0.005, 0.01, 0.02])
    # Exhaust the bucket with other keys: now the bucket dominates a fresh key.
    for i in range(97):
        lim.when(f"o{i}")
    assert lim.when("fresh") == pytest.approx(0.1)
    assert lim.num_requeues("k") == 3
    lim.forget("k")
    assert lim.num_requeues("k") == 0


def test_max_of_calls_every_limiter():
    a = ItemExponentialFailureRateLimiter(1, 100)
    b = ItemExponentialFailureRateLimiter(0.5, 100)
    lim = MaxOfRateLimiter(a, b)
    assert lim.when("k") == 1
    assert lim.when("k") == 2
    assert (a.num_requeues("k"), b.num_requeues("k")) == (2, 2)
    lim.forget("k")
    assert (a.num_requeues("k"), b.num_requeues("k")) == (0, 0)


def test_add_rate_limited_uses_backoff_and_forget_resets():
    clock = FakeClock()
    q = RateLimitingQueue(clock=clock)  # default limiter on the fake clock
    q.add_rate_limited("k")
    assert q.num_requeues("k") == 1
    assert q.get(timeout=0) is None
    clock.advance(0.005)
    assert q.get(timeout=0) == "k"
    q.add_rate_limited("k")  # 10 ms
    q.done("k")
    clock.advance(0.009)
    assert q.get(timeout=0) is None
    clock.advance(0.001)
    assert q.get(timeout=0) == "k"
    q.done("k")
    assert q.num_requeues("k") == 2
    q.forget("k")
    assert q.num_requeues("k") == 0
    q.add_rate_limited("k")
    clock.advance(0.005)
    assert q.get(timeout=0) == "k"


def test_metrics_hook_sees_add_get_done_retry_and_cannot_break_the_queue():
    events: list = []
    q = RateLimitingQueue(ZeroLimiter(), "q", clock=FakeClock(), metrics_hook=lambda e, k: events.append((e, k)))
    q.add("a")
    q.add("a")
    key = q.get(timeout=0)
    q.add("a")
    q.done(key)
    q.add_rate_limited("b")
    assert events == [("add", "a"), ("get", "a"), ("done", "a"), ("add", "a"), ("retry", "b"), ("add", "b")]

    def broken(event, key):
        raise RuntimeError("boom")

    q2 = RateLimitingQueue(clock=FakeClock(), metrics_hook=broken)
    q2.add("a")
    assert q2.get(timeout=0) == "a"
    q2.done("a")


# -- concurrency ---------------------------------------------------------------


def test_threads_never_process_one_key_twice_at_once_and_every_add_is_processed():
    q = RateLimitingQueue(ZeroLimiter(), clock=FakeClock())
    keys = [f"k{i}" for i in range(8)]
    lock = threading.Lock()
    ticket = iter(range(10**9))
    active: set = set()
    violations: list = []
    last_add: dict = {}
    last_start: dict = {}
    passes = [0]

    def producer(seed: int):
        for n in range(2000):
            key = keys[(n * 7 + seed) % len(keys)]
            with lock:
                last_add[key] = max(last_add.get(key, -1), next(ticket))
            if n % 5 == 0:
                q.add_rate_limited(key)
            else:
                q.add(key)

    def worker():
        while (key := q.get()) is not None:
            with lock:
                last_start[key] = next(ticket)
                if key in active:
                    violations.append(key)
                active.add(key)
                passes[0] += 1
                runaway = passes[0] > 3 * 2000
            time.sleep(0)  # yield to other threads mid-pass
            with lock:
                active.discard(key)
            q.done(key)
            if runaway:  # a broken queue must fail the test, not hang it
                return

    workers = [threading.Thread(target=worker) for _ in range(4)]
    producers = [threading.Thread(target=producer, args=(s,)) for s in range(3)]
    for t in workers + producers:
        t.start()
    for t in producers:
        t.join(JOIN)
        assert not t.is_alive()
    q.shutdown()  # queued and mid-pass-added keys are still handed out
    for t in workers:
        t.join(JOIN)
        assert not t.is_alive()
    assert violations == []
    state = q.inspect()
    assert state.processing == set() and state.dirty == set() and state.queued == ()
    for key, added in last_add.items():
        assert last_start[key] > added, key
    assert passes[0] <= 3 * 2000


# -- stateful model of the protocol --------------------------------------------

KEYS = st.sampled_from(["a", "b", "c", "d"])


class QueueProtocol(RuleBasedStateMachine):
    """Model: each key is absent, queued, processing or processing+dirty (and
    maybe waiting for a delayed add); ready keys leave in FIFO order; every
    add is followed by a get of that key."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.q = RateLimitingQueue(ZeroLimiter(), clock=self.clock)
        self.queued: list = []
        self.processing: set = set()
        self.dirty: set = set()  # processing keys added meanwhile
        self.waiting: dict = {}  # key -> (deadline, seq)
        self.seq = 0
        self.owed: set = set()  # keys added and not taken by a get since

    # model helpers
    def _add(self, key) -> None:
        self.owed.add(key)
        if key in self.processing:
            self.dirty.add(key)
        elif key not in self.queued:
            self.queued.append(key)

    def _promote(self) -> None:
        due = sorted((d, s, k) for k, (d, s) in self.waiting.items() if d <= self.clock.now)
        for _, _, key in due:
            del self.waiting[key]
            self._add(key)

    @rule(key=KEYS)
    def add(self, key):
        self.q.add(key)
        self._add(key)

    @rule(key=KEYS, delay=st.integers(min_value=-1, max_value=20))
    def add_after(self, key, delay):
        self.q.add_after(key, delay)
        if delay <= 0:
            self._add(key)
            return
        deadline = self.clock.now + delay
        pending = self.waiting.get(key)
        if pending is None or deadline < pending[0]:
            self.waiting[key] = (deadline, self.seq)
            self.seq += 1
        # An accepted deadline is pending until it fires; nothing owed until then.

    @rule(seconds=st.integers(min_value=0, max_value=25))
    def advance(self, seconds):
        self.clock.advance(seconds)

    @rule()
    def get(self):
        key = self.q.get(timeout=0)
        self._promote()
        if not self.queued:
            assert key is None
            return
        expected = self.queued.pop(0)
        assert key == expected
        assert key not in self.processing
        self.processing.add(key)
        self.owed.discard(key)

    @precondition(lambda self: self.processing)
    @rule(data=st.data())
    def done(self, data):
        key = data.draw(st.sampled_from(sorted(self.processing)))
        self.q.done(key)
        self.processing.discard(key)
        if key in self.dirty:
            self.dirty.discard(key)
            self.queued.append(key)

    @rule()
    def length(self):
        n = len(self.q)  # promotes due delayed keys, like get
        self._promote()
        assert n == len(self.queued)

    @invariant()
    def states_agree(self):
        state = self.q.inspect()
        queue = list(state.queued)
        # Structure: a key is queued at most once, never while processing,
        # and exactly the dirty keys that are not processing are queued.
        assert len(queue) == len(set(queue))
        assert not set(queue) & state.processing
        assert state.dirty - state.processing == set(queue)
        # Same state as the model, FIFO order included.
        assert queue == self.queued
        assert state.processing == self.processing
        assert state.dirty & state.processing == self.dirty
        assert dict(state.waiting) == {k: d for k, (d, _) in self.waiting.items()}
        for key in ["a", "b", "c", "d"]:
            queued = key in self.queued
            processing = key in self.processing and key not in self.dirty
            processing_dirty = key in self.dirty
            assert queued + processing + processing_dirty <= 1
            assert not processing_dirty or key in self.processing

    def teardown(self):
        # Everything owed (and everything still waiting) gets processed.
        self.clock.advance(10**6)
        self._promote()
        for key in list(self.processing):
            self.q.done(key)
            if key in self.dirty:
                self.queued.append(key)
        self.processing.clear()
        self.dirty.clear()
        seen = set(drain(self.q))
        assert self.owed <= seen
        assert set(self.queued) == seen


QueueProtocol.TestCase.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)
test_queue_protocol = QueueProtocol.TestCase
