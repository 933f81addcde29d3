"""client-go's work-queue metrics (``workqueue_*``, labelled ``name``), fed by a queue's hook.

:class:`controller.runtime.workqueue.RateLimitingQueue` calls its ``metrics_hook(event, key)``
on ``add``, ``get``, ``done`` and ``retry``; :meth:`WorkqueueMetrics.hook_for` makes such a
hook for one queue name. The series and their meaning are client-go's
``defaultQueueMetrics`` (controller-runtime registers the same names).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

_log = logging.getLogger(__name__)

WORKQUEUE_BUCKETS: tuple[float, ...] = tuple(float(f"1e{exp}") for exp in range(-8, 4))
"""client-go's workqueue latency buckets: ``ExponentialBuckets(10e-9, 10, 12)``."""


class _QueueState:
    """Per-queue bookkeeping for the latency metrics (client-go ``defaultQueueMetrics``)."""

    __slots__ = ("added_at", "started_at")

    def __init__(self) -> None:
        self.added_at: dict[Hashable, float] = {}
        self.started_at: dict[Hashable, float] = {}



class WorkqueueMetrics:
    """The ``workqueue_*`` families on ``registry``; one set of series per queue name.

    :param clock: monotonic seconds, for the latencies.
    :param lock: the lock the owner's other metrics share (hooks may run with a queue's
        lock held: every method is quick and does no I/O).
    """

    def __init__(self, registry: Any, clock: Callable[[], float], lock: Any = None) -> None:
        self._clock = clock
        self._lock = lock if lock is not None else threading.RLock()
        self._queues: dict[str, _QueueState] = {}
        self.depth = Gauge(
            "workqueue_depth", "Keys waiting in the work queue, ready to be handed out", ["name"], registry=registry)
        self.adds = Counter(
            "workqueue_adds_total", "Keys put into the work queue's ready list", ["name"], registry=registry)
        self.retries = Counter(
            "workqueue_retries_total", "Rate-limited re-adds of keys to the work queue", ["name"], registry=registry)
        self.queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "Seconds a key waited in the work queue before a worker took it",
            ["name"], buckets=WORKQUEUE_BUCKETS, registry=registry)
        self.work_duration = Histogram(
            "workqueue_work_duration_seconds", "Seconds a worker spent on a key taken from the work queue",
            ["name"], buckets=WORKQUEUE_BUCKETS, registry=registry)
        self.unfinished_work = Gauge(
            "workqueue_unfinished_work_seconds",
            "Seconds spent so far on keys still being processed (not yet in work_duration); "
            "a value that keeps growing means a stuck worker",
            ["name"], registry=registry)
        self.longest_running = Gauge(
            "workqueue_longest_running_processor_seconds",
            "Seconds the longest-running worker has been on its current key",
            ["name"], registry=registry)


    def register(self, name: str) -> None:
        """Create the queue's series at zero (as client-go does when the queue is made)."""
        with self._lock:
            if name in self._queues:
                return
            self._queues[name] = _QueueState()
        self.depth.labels(name).set(0)
        self.adds.labels(name)
        self.retries.labels(name)
        self.queue_duration.labels(name)
        self.work_duration.labels(name)
        self.unfinished_work.labels(name).set_function(lambda: self._unfinished(name)[0])
        self.longest_running.labels(name).set_function(lambda: self._unfinished(name)[1])

    def hook_for(self, name: str) -> Callable[[str, Hashable], None]:
        """A ``metrics_hook(event, key)`` reporting under ``name``."""
        self.register(name)

        def hook(event: str, key: Hashable) -> None:
            self.event(name, event, key)

        return hook

    def event(self, name: str, event: str, key: Hashable) -> None:
        """One event of queue ``name``: ``add``, ``get``, ``done`` or ``retry`` of ``key``."""
        # client-go defaultQueueMetrics: add -> adds, depth+1, remember when;
        # get -> depth-1, queue latency, start of work; done -> work duration.
        if name not in self._queues:
            self.register(name)
        now = self._clock()
        with self._lock:
            state = self._queues[name]
            if event == "add":
                self.adds.labels(name).inc()
                self.depth.labels(name).inc()
                state.added_at.setdefault(key, now)
            elif event == "get":
                self.depth.labels(name).dec()
                added = state.added_at.pop(key, None)
                if added is not None:
                    self.queue_duration.labels(name).observe(max(0.0, now - added))
                state.started_at[key] = now
            elif event == "done":
                started = state.started_at.pop(key, None)
                if started is not None:
                    self.work_duration.labels(name).observe(max(0.0, now - started))
            elif event == "retry":
                self.retries.labels(name).inc()
            else:
                _log.debug("metrics: unknown workqueue event %r", event)

    def _unfinished(self, name: str) -> tuple[float, float]:
        """(sum, max) of the running times of keys being processed now."""
        now = self._clock()
        with self._lock:
            state = self._queues.get(name)
            starts = list(state.started_at.values()) if state else []
        if not starts:
            return 0.0, 0.0
        ages = [max(0.0, now - s) for s in starts]
        return sum(ages), max(ages)
