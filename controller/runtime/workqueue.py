"""Rate-limited work queue with the semantics of client-go's ``util/workqueue``.

The controller's informers turn watch events into keys (``"namespace/name"``
strings, or any hashable) and hand them to a :class:`RateLimitingQueue`; the
reconcile workers take keys from it. The guarantees are those of client-go's
``k8s.io/client-go/util/workqueue`` (``Type``, ``delayingType`` and
``rateLimitingType``), which the rest of the controller relies on:

* **Fair and deduplicated.** Keys come out in FIFO order. A key that is
  already waiting to be processed is queued only once, however often it is
  added.
* **Never processed twice at once.** :meth:`RateLimitingQueue.get` marks a key
  as *processing*; until :meth:`RateLimitingQueue.done` is called for it, no
  other worker is handed that key.
* **Never lost.** A key added while it is being processed is remembered
  (*dirty*) and queued again by ``done``, so it is processed once more after
  the current pass: every add is followed by a pass that started after it.
* **Delayed adds keep the earliest deadline.** :meth:`RateLimitingQueue.add_after`
  schedules a key; while a key is scheduled, a later deadline for it does not
  postpone it and an earlier one brings it forward.
* **Rate-limited retries.** :meth:`RateLimitingQueue.add_rate_limited` delays a
  key by what the rate limiter says (by default the maximum of a per-key
  exponential backoff, 5 ms doubling up to 1000 s, and an overall 10 qps /
  100 burst token bucket, as client-go's ``DefaultControllerRateLimiter``);
  :meth:`RateLimitingQueue.forget` resets a key's backoff after a success.

A key's life: absent -> queued (dirty) -> processing -> absent, with the extra
state processing+dirty (added during the pass) that goes back to queued on
``done``. A key may additionally be *waiting* for a delayed add, in any state.

Time is read from an injectable ``clock`` (seconds, ``time.monotonic`` by
default) so that tests can drive delays with a fake clock. Delayed keys are
moved into the queue lazily by whoever looks at the queue (``get``, ``len``,
``wake``): there is no thread per item and no background thread at all; a
blocked ``get`` waits on the queue's condition with a timeout equal to the
time until the earliest deadline, and is woken early by any add or shutdown.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Protocol

from informers.backoff import exponential

__all__ = [
    "BucketRateLimiter",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "MetricsHook",
    "RateLimiter",
    "RateLimitingQueue",
    "default_controller_rate_limiter",
]

_log = logging.getLogger(__name__)

Clock = Callable[[], float]
"""A monotonic clock: returns seconds as a float."""

MetricsHook = Callable[[str, Hashable], None]
"""Called as ``hook(event, key)``; see :class:`RateLimitingQueue`."""


class RateLimiter(Protocol):
    """How long a key should wait before it is retried (client-go ``RateLimiter``)."""

    def when(self, key: Hashable) -> float:
        """Record one more failure of ``key``; return the delay in seconds (>= 0)."""
        ...

    def forget(self, key: Hashable) -> None:
        """Stop tracking ``key`` (its next ``when`` starts from scratch)."""
        ...

    def num_requeues(self, key: Hashable) -> int:
        """Failures recorded for ``key`` since it was last forgotten."""
        ...


class ItemExponentialFailureRateLimiter:
    """Per-key exponential backoff: ``base_delay * 2**failures``, capped at ``max_delay``.

    client-go ``ItemExponentialFailureRateLimiter``. The first ``when(key)``
    returns ``base_delay``, the next ``2 * base_delay``, and so on; the result
    never exceeds ``max_delay``. ``forget(key)`` resets the count. Delays are in
    seconds (floats). Thread-safe.
    """

    def __init__(self, base_delay: float, max_delay: float) -> None:
        if base_delay < 0 or max_delay < 0:
            raise ValueError("delays must not be negative")
        self._base = float(base_delay)
        self._max = float(max_delay)
        self._failures: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def when(self, key: Hashable) -> float:
        with self._lock:
            exp = self._failures.get(key, 0)
            self._failures[key] = exp + 1
        return exponential(self._base, exp, self._max)

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def num_requeues(self, key: Hashable) -> int:
        with self._lock:
            return self._failures.get(key, 0)


class BucketRateLimiter:
    """Overall token bucket: ``burst`` tokens, refilled at ``qps`` per second.

    client-go ``BucketRateLimiter`` over ``golang.org/x/time/rate``: every
    ``when`` reserves one token (shared by all keys) and returns how long the
    caller must wait for it, in seconds. The bucket starts full, so the first
    ``burst`` calls return 0 and, with no time passing, the following ones
    return ``1/qps``, ``2/qps``, ... Tokens may go negative (reservations
    against the future), exactly as ``rate.Limiter.Reserve``. ``forget`` is a
    no-op and ``num_requeues`` is always 0. Thread-safe.
    """

    def __init__(self, qps: float, burst: int, clock: Clock = time.monotonic) -> None:
        if qps <= 0:
            raise ValueError("qps must be positive")
        if burst < 1:
            raise ValueError("burst must be at least 1")
        self._qps = float(qps)
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._last: float | None = None
        self._lock = threading.Lock()

    def when(self, key: Hashable) -> float:
        with self._lock:
            now = self._clock()
            if self._last is not None and now > self._last:
                self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
            self._last = now
            self._tokens -= 1.0
            if self._tokens >= 0:
                return 0.0
            return -self._tokens / self._qps

    def forget(self, key: Hashable) -> None:
        return None

    def num_requeues(self, key: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    """The longest delay of several limiters (client-go ``MaxOfRateLimiter``).

    ``when`` asks every limiter (each records the attempt) and returns the
    maximum; ``forget`` forgets in all; ``num_requeues`` is the maximum.
    """

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("at least one rate limiter is needed")
        self._limiters = limiters

    def when(self, key: Hashable) -> float:
        return max(limiter.when(key) for limiter in self._limiters)

    def forget(self, key: Hashable) -> None:
        for limiter in self._limiters:
            limiter.forget(key)

    def num_requeues(self, key: Hashable) -> int:
        return max(limiter.num_requeues(key) for limiter in self._limiters)


def default_controller_rate_limiter(clock: Clock = time.monotonic) -> MaxOfRateLimiter:
    """client-go ``DefaultControllerRateLimiter``.

    Maximum of a per-key exponential backoff (5 ms doubling, capped at 1000 s)
    and an overall token bucket of 10 qps with a burst of 100.
    """
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(0.005, 1000.0),
        BucketRateLimiter(qps=10, burst=100, clock=clock),
    )


@dataclass(frozen=True)
class QueueState:
    """What a :class:`RateLimitingQueue` holds at one moment (:meth:`RateLimitingQueue.inspect`).

    Inspection only, for tests and debugging: a worker never decides on it, since it is
    stale as soon as it is returned.
    """

    queued: tuple[Hashable, ...]  # ready keys, in the order get() hands them out
    dirty: frozenset[Hashable]  # keys that need a pass: the queued ones and processing ones added again
    processing: frozenset[Hashable]  # keys handed out by get() and not yet done()
    waiting: Mapping[Hashable, float]  # delayed adds: key -> its deadline on the queue's clock
    delayed_entries: int  # entries of the delay heap, superseded ones not dropped yet included
    getters_waiting: int  # get() calls blocked for a key


class RateLimitingQueue:
    """Thread-safe, deduplicating, delaying, rate-limited work queue.

    Port of client-go's ``workqueue.NewRateLimitingQueue`` (see the module
    docstring for the guarantees). Keys are any hashable values; the
    controller uses ``"namespace/name"`` strings.

    Typical worker loop::

        while (key := queue.get()) is not None:
            try:
                reconcile(key)
            except Exception:
                queue.add_rate_limited(key)   # retry with backoff
            else:
                queue.forget(key)             # reset the backoff
            finally:
                queue.done(key)

    :param rate_limiter: delays for :meth:`add_rate_limited`; default
        :func:`default_controller_rate_limiter` on the same ``clock``.
    :param name: the queue's name (for logs and metrics).
    :param clock: seconds as a float, monotonic; drives the delayed adds.
    :param metrics_hook: optional ``hook(event, key)``, called with the queue's
        lock held (so it must be quick and must not call the queue) for these
        events: ``"add"`` when a key enters the ready queue, ``"get"`` when a
        worker takes it, ``"done"`` when the worker finishes it, ``"retry"``
        for each :meth:`add_rate_limited`. Exceptions from the hook are logged
        and swallowed. This is the attachment point for Prometheus metrics
        (depth, adds, latency, work duration, retries).
    """

    def __init__(
        self,
        rate_limiter: RateLimiter | None = None,
        name: str = "",
        *,
        clock: Clock = time.monotonic,
        metrics_hook: MetricsHook | None = None,
    ) -> None:
        self.name = name
        self._clock = clock
        self._limiter: RateLimiter = (
            rate_limiter if rate_limiter is not None else default_controller_rate_limiter(clock)
        )
        self._metrics_hook = metrics_hook
        self._cond = threading.Condition(threading.Lock())
        # Ready keys in FIFO order; every key in it is also in _dirty and never in _processing.
        self._queue: deque[Hashable] = deque()
        # Keys that need processing: the queued ones plus processing ones added again.
        self._dirty: set[Hashable] = set()
        # Keys handed out by get() and not yet done().
        self._processing: set[Hashable] = set()
        # Delayed adds: the pending (deadline, seq) per key, and a heap of
        # (deadline, seq, key) entries; heap entries whose (deadline, seq) is no
        # longer the key's pending one are stale and skipped.
        self._waiting: dict[Hashable, tuple[float, int]] = {}
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = itertools.count()
        self._shutting_down = False
        self._getters_waiting = 0

    # -- plain queue -------------------------------------------------------

    def add(self, key: Hashable) -> None:
        """Mark ``key`` as needing processing.

        Queued once however often it is added while waiting; if it is being
        processed, it is queued again when the worker calls :meth:`done`.
        Ignored after :meth:`shutdown`.
        """
        with self._cond:
            if self._shutting_down:
                return
            self._add_locked(key)

    def get(self, timeout: float | None = None) -> Hashable | None:
        """Take the next key and mark it processing; the caller must call :meth:`done`.

        Blocks until a key is ready. ``timeout`` (seconds of real time; ``None``
        waits for ever, ``0`` does not block) bounds the wait. Returns ``None``
        when the queue is shut down and empty, or when the timeout expires
        (tell the two apart with :meth:`shutting_down`). As in client-go, keys
        already queued when the queue is shut down are still handed out.
        """
        end = None if timeout is None else time.monotonic() + max(0.0, timeout)
        with self._cond:
            while True:
                self._promote_due_locked()
                if self._queue:
                    key = self._queue.popleft()
                    self._processing.add(key)
                    self._dirty.discard(key)
                    self._emit("get", key)
                    return key
                if self._shutting_down:
                    return None
                wait = self._until_next_deadline_locked()
                if end is not None:
                    remaining = end - time.monotonic()
                    if remaining <= 0:
                        return None
                    wait = remaining if wait is None else min(wait, remaining)
                if wait is not None:
                    wait = min(wait, threading.TIMEOUT_MAX)
                self._getters_waiting += 1
                try:
                    self._cond.wait(wait)
                finally:
                    self._getters_waiting -= 1

    def done(self, key: Hashable) -> None:
        """End the processing of ``key``; queue it again if it was added meanwhile.

        Calling it for a key that is not being processed does nothing.
        """
        with self._cond:
            if key not in self._processing:
                return
            self._processing.discard(key)
            self._emit("done", key)
            if key in self._dirty:
                self._queue.append(key)
                self._emit("add", key)
                self._cond.notify()

    def __len__(self) -> int:
        """Number of keys ready to be handed out (not processing, not delayed)."""
        with self._cond:
            self._promote_due_locked()
            return len(self._queue)

    def len(self) -> int:
        """Same as ``len(queue)``: keys ready to be handed out."""
        return len(self)

    def shutdown(self) -> None:
        """Stop accepting keys and wake every blocked :meth:`get`.

        Delayed keys are dropped. Keys already queued are still handed out;
        then ``get`` returns ``None``.
        """
        with self._cond:
            self._shutting_down = True
            self._waiting.clear()
            self._heap.clear()
            self._cond.notify_all()

    def shutting_down(self) -> bool:
        """Whether :meth:`shutdown` was called."""
        with self._cond:
            return self._shutting_down

    # -- delaying queue ----------------------------------------------------

    def add_after(self, key: Hashable, seconds: float) -> None:
        """Add ``key`` once ``seconds`` have passed on the queue's clock.

        ``seconds <= 0`` adds at once. While the key is waiting, only an
        earlier deadline replaces the pending one: a later ``add_after`` never
        postpones it. Ignored after :meth:`shutdown`.
        """
        with self._cond:
            if self._shutting_down:
                return
            if seconds <= 0:
                self._add_locked(key)
                return
            deadline = self._clock() + seconds
            pending = self._waiting.get(key)
            if pending is not None and pending[0] <= deadline:
                return
            seq = next(self._seq)
            self._waiting[key] = (deadline, seq)
            heapq.heappush(self._heap, (deadline, seq, key))
            # A blocked getter may be waiting for a later deadline: let it recompute.
            self._cond.notify_all()

    def wake(self) -> None:
        """Move due delayed keys into the queue and wake blocked getters.

        Only needed when the injected clock is moved by hand (tests): with a
        real clock blocked getters wake up at the earliest deadline by
        themselves.
        """
        with self._cond:
            self._promote_due_locked()
            self._cond.notify_all()

    # -- rate limiting -----------------------------------------------------

    def add_rate_limited(self, key: Hashable) -> None:
        """``add_after(key, rate_limiter.when(key))``: retry ``key`` with backoff."""
        delay = self._limiter.when(key)
        with self._cond:
            self._emit("retry", key)
        self.add_after(key, delay)

    def forget(self, key: Hashable) -> None:
        """Reset ``key``'s backoff (call after a successful pass). Does not dequeue it."""
        self._limiter.forget(key)

    def num_requeues(self, key: Hashable) -> int:
        """Rate-limited retries of ``key`` since it was last forgotten."""
        return self._limiter.num_requeues(key)

    # -- internals (lock held) ---------------------------------------------

    def inspect(self) -> QueueState:
        """A copy of the queue's state (:class:`QueueState`; inspection only)."""
        with self._cond:
            return QueueState(
                queued=tuple(self._queue), dirty=frozenset(self._dirty), processing=frozenset(self._processing),
                waiting={k: d for k, (d, _) in self._waiting.items()}, delayed_entries=len(self._heap),
                getters_waiting=self._getters_waiting,
            )

    def _add_locked(self, key: Hashable) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return
        self._queue.append(key)
        self._emit("add", key)
        self._cond.notify()

    def _promote_due_locked(self) -> None:
        if not self._heap:
            return
        now = self._clock()
        while self._heap and self._heap[0][0] <= now:
            deadline, seq, key = heapq.heappop(self._heap)
            if self._waiting.get(key) != (deadline, seq):
                continue  # superseded by an earlier deadline
            del self._waiting[key]
            self._add_locked(key)

    def _until_next_deadline_locked(self) -> float | None:
        while self._heap:
            deadline, seq, key = self._heap[0]
            if self._waiting.get(key) != (deadline, seq):
                heapq.heappop(self._heap)
                continue
            return max(0.0, deadline - self._clock())
        return None

    def _emit(self, event: str, key: Hashable) -> None:
        if self._metrics_hook is None:
            return
        try:
            self._metrics_hook(event, key)
        except Exception:  # a broken metrics hook must never break the queue
            _log.exception("workqueue %r: metrics hook failed on %s", self.name, event)
