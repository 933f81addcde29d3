"""Kubernetes Events for the state changes an operator acts on (``product-decisions.md`` §4.1).

The reference emits none; we emit ``core/v1`` Events on the ProxmoxNetwork or
ProxmoxNetworkZone (cluster-scoped objects get theirs in ``default``, as client-go's
recorder does). Identical events (same object, type, reason and message) within
:data:`AGGREGATE_WINDOW` are aggregated into one Event whose ``count`` and
``lastTimestamp`` are patched, never a storm (client-go's EventCorrelator idea).

Posting happens on a background thread from a bounded queue: a slow or failing API
server delays Events, never a reconcile, and an Event that cannot be written is logged
and dropped (Events are best effort in Kubernetes too).
"""

from __future__ import annotations

import datetime as _dt
import os
import queue
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from controller.rfc3339 import utc_now
from controller.rfc3339 import format_utc
from controller.runtime.kube import ApiError, KubeWriter
from controller.runtime.result import LostLeadership
from informers.resource import Resource

log = structlog.get_logger(__name__)

EVENTS = Resource("", "v1", "events", namespaced=True, kind="Event")
COMPONENT = "proxmox-network-controller"
AGGREGATE_WINDOW = 600.0  # seconds an identical Event is counted instead of re-created
MAX_PENDING = 10000


def involved(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    ref = {
        "apiVersion": obj.get("apiVersion", ""),
        "kind": obj.get("kind", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    return ref


class EventRecorder:
    """Records Events asynchronously; :meth:`event` never blocks and never raises.

    :param writer: the API writer (its ``writes`` counter includes Event writes).
    :param now: wall clock for ``firstTimestamp``/``lastTimestamp``.
    """

    def __init__(
        self,
        writer: KubeWriter,
        now: Callable[[], _dt.datetime] = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.writer = writer
        self.now = now
        self.monotonic = monotonic
        self.instance = os.environ.get("POD_NAME") or os.uname().nodename
        self._q: queue.Queue[tuple[dict[str, Any], str, str, str] | None] = queue.Queue(MAX_PENDING)
        # (uid, type, reason, message) -> (namespace, event name, count, monotonic time of last post)
        self._seen: dict[tuple[str, str, str, str], tuple[str, str, int, float]] = {}
        self._thread: threading.Thread | None = None
        self.posted = 0
        self.dropped = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Post what is queued (up to ``timeout`` seconds), then stop."""
        if self._thread is None:
            return
        try:
            self._q.put(None, timeout=timeout)
        except queue.Full:
            pass
        self._thread.join(timeout)
        self._thread = None

    def event(self, obj: Mapping[str, Any], etype: str, reason: str, message: str) -> None:
        """Queue an Event about ``obj`` (a ProxmoxNetwork or ProxmoxNetworkZone dict)."""
        try:
            self._q.put_nowait((dict(obj), etype, reason, message))
        except queue.Full:
            self.dropped += 1
            log.info("event queue full; dropping event", reason=reason)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued Event is posted (tests and shutdown)."""
        deadline = self.monotonic() + timeout
        while self._q.unfinished_tasks and self.monotonic() < deadline:
            time.sleep(0.01)
        return not self._q.unfinished_tasks

    # -- posting -------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            item = self._q.get()
            try:
                if item is None:
                    return
                self._post(*item)
            except LostLeadership:
                # field-reports.md S3: an Event queued while leading is not posted once the Lease is lost.
                self.dropped += 1
                log.info("event not posted: leadership lost", reason=item[2] if item else "")
            except Exception:  # an Event is never worth a dead thread
                log.exception("could not record event")
            finally:
                self._q.task_done()

    def _post(self, obj: dict[str, Any], etype: str, reason: str, message: str) -> None:
        ref = involved(obj)
        ns = ref.get("namespace") or "default"
        key = (ref["uid"] or f"{ns}/{ref['name']}", etype, reason, message)
        ts = format_utc(self.now())
        seen = self._seen.get(key)
        if seen is not None and self.monotonic() - seen[3] < AGGREGATE_WINDOW:
            sns, name, count, _ = seen
            try:
                self.writer.merge_patch(EVENTS, name, {"count": count + 1, "lastTimestamp": ts}, sns)
                self._seen[key] = (sns, name, count + 1, self.monotonic())
                self.posted += 1
                return
            except ApiError as err:
                if not err.not_found:
                    log.info("could not update event", reason=reason, error=str(err))
                    return
        name = f"{ref['name']}.{secrets.token_hex(8)}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": ref,
            "type": etype,
            "reason": reason,
            "message": message[:1024],
            "count": 1,
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.instance,
        }
        try:
            self.writer.create(EVENTS, body, ns)
        except ApiError as err:
            log.info("could not record event", reason=reason, error=str(err))
            return
        self.posted += 1
        self._seen[key] = (ns, name, 1, self.monotonic())
        if len(self._seen) > 10 * MAX_PENDING:
            cutoff = self.monotonic() - AGGREGATE_WINDOW
            self._seen = {k: v for k, v in self._seen.items() if v[3] >= cutoff}
