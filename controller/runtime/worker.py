"""One controller per kind: its rate-limited queue, its workers and its reconcile.

A :class:`Controller` owns a ``RateLimitingQueue`` named after its kind (the ``name``
label of the ``workqueue_*`` series) holding keys of one type (``controller.watch.keys``).
Each worker takes a key, runs the reconcile, and on success forgets the key's backoff and
requeues it as the :class:`controller.runtime.result.Result` asks; on any failure the key is
retried with the queue's backoff (client-go's ``processNextWorkItem``), except when the
process is stopping or has lost the Lease (:class:`controller.runtime.result.Stopping`,
:class:`controller.runtime.result.LostLeadership`): the key is then dropped.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

import structlog
import urllib3

from controller.runtime.kube import ApiError
from controller.runtime.workqueue_metrics import WorkqueueMetrics
from controller.runtime.result import LostLeadership, Result, Stopping
from controller.runtime.workqueue import RateLimitingQueue

log = structlog.get_logger(__name__)

_pass_ids = itertools.count(1)  # one sequence for every controller's passes (next() is atomic)


class Controller:
    """Queue, workers and reconcile of one kind.

    :param name: the queue's name (the ``name`` label of the ``workqueue_*`` series).
    :param kind: the short kind name: thread names ``<kind>-worker-<i>``, the ``key`` log
        field ``<kind>:<key>``.
    :param reconcile: ``reconcile(key) -> Result | None``; raises to ask for a retry.
    :param workers: the number of worker threads.
    :param on_done: called with ``(controller, key)`` after every pass (the resync's tally).
    :param warm_up: called once on each worker thread before its first key (e.g. waiting,
        bounded and cancellable, for a peer's first sync): waits never run on the thread
        that starts the workers, which may be the leader elector's.
    """

    def __init__(
        self,
        name: str,
        kind: str,
        reconcile: Callable[[Any], Result | None],
        workers: int,
        queue_metrics: WorkqueueMetrics,
        on_done: Callable[[Controller, Hashable], None] | None = None,
        warm_up: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.kind = kind
        self.reconcile = reconcile
        self.workers = max(1, workers)
        self.queue = RateLimitingQueue(name=name, metrics_hook=queue_metrics.hook_for(name))
        self.on_done = on_done or (lambda c, k: None)
        self.warm_up = warm_up
        self.threads: list[threading.Thread] = []

    def add(self, key: Hashable) -> None:
        self.queue.add(key)

    def add_all(self, keys: Any) -> None:
        for k in keys:
            self.queue.add(k)

    def start(self) -> list[threading.Thread]:
        """Start the workers (on the leader only)."""
        for i in range(self.workers):
            t = threading.Thread(target=self._worker, name=f"{self.kind}-worker-{i}", daemon=True)
            t.start()
            self.threads.append(t)
        return list(self.threads)

    def shutdown(self) -> None:
        """Stop handing out keys; workers finish the pass in flight and return."""
        self.queue.shutdown()

    def _worker(self) -> None:
        if self.warm_up is not None:
            try:
                self.warm_up()
            except Exception:  # a failed wait only delays; the passes report the peer
                log.exception("warm-up failed; starting anyway", kind=self.kind)
        while True:
            key = self.queue.get()
            if key is None:
                return
            try:
                self.process(key)
            finally:
                self.queue.done(key)
                self.on_done(self, key)

    def process(self, key: Hashable) -> None:
        """One pass for ``key``: on success forget its backoff and requeue as asked; on any
        failure retry with backoff (a malformed object never kills a worker)."""
        label = f"{self.kind}:{key}"
        started = time.monotonic()
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(key=label, pass_id=f"{next(_pass_ids):x}")
        try:
            result = self.reconcile(key)
            if result is None:
                return
        except LostLeadership as why:
            # field-reports.md S3: the fence refused a write; nothing more is sent, the process exits. No
            # retry: a requeued key would only be refused again.
            log.warning("pass abandoned: leadership lost; the write was not sent", key=label, error=str(why))
            return
        except Stopping as why:
            log.info("pass abandoned: the controller is stopping", key=label, step=str(why))
            return
        except ApiError as err:
            if err.conflict:  # a guarded write met a concurrent change: re-read and retry
                log.info("reconcile conflict, retrying with backoff", key=label, status=err.status,
                         reason=err.reason, error=err.message)
            else:
                log.info("reconcile failed, retrying with backoff", key=label, status=err.status,
                         reason=err.reason, error=err.message)
            self.queue.add_rate_limited(key)
            return
        except (OSError, urllib3.exceptions.HTTPError) as err:
            # The API server is unreachable or the connection dropped: retry, it is not a bug.
            log.info("reconcile failed, retrying with backoff", key=label, error=repr(err))
            self.queue.add_rate_limited(key)
            return
        except Exception:  # never let a malformed object kill a worker
            log.exception("reconcile crashed, retrying with backoff", key=label)
            self.queue.add_rate_limited(key)
            return
        self.queue.forget(key)
        if result.requeue_after is not None:
            self.queue.add_after(key, result.requeue_after)
        log.debug("reconciled", key=label, seconds=round(time.monotonic() - started, 4))
