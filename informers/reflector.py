"""The reflector: LIST, then WATCH from the list's resourceVersion, forever.

Rules (client-go ``tools/cache/reflector.go`` model; field-reports.md B11, field-reports.md B12;
product-decisions §3):

* LIST is paginated (``limit=500`` + ``continue``). A 410 on a continue token
  (it expired, ~5-15 min) restarts the LIST from scratch, so the result is one
  consistent snapshot.
* Each page is handed to the sink's ``project`` as soon as it is decoded, so
  only one page of objects as served is alive at a time (50,000 IPs
  kept whole until the last page pinned twice the cache's memory).
* The store is replaced with the LIST result; the informer synthesizes
  deletes for vanished keys and adds for new ones.
* WATCH from the LIST's resourceVersion with ``allowWatchBookmarks=true``, a
  server ``timeoutSeconds`` drawn at random from ``watch_timeout_range`` (so
  many watches do not all expire at once) and a client read timeout of
  ``timeoutSeconds + read_timeout_margin``: a half-open connection that
  delivers nothing raises a read timeout instead of hanging forever (field-reports.md B11).
* The resourceVersion advances on every event, BOOKMARK included (field-reports.md B12), and
  only after the event was applied.
* Clean end, dropped connection, read timeout: watch again from the last
  resourceVersion (nothing is missed, nothing relisted).
* 410 Gone (HTTP status at watch start, ``ApiException``, or an ERROR event
  with code 410): full relist (field-reports.md B12).
* Anything else (5xx, 403, 404 for a CRD not installed yet, connection
  refused, a bug): log, wait with jittered exponential backoff, retry. The
  loop never dies on an exception; only ``stop`` ends it.
"""

from __future__ import annotations

import math
import random
import socket
import threading
import time
from typing import Callable, Protocol

import attrs
import structlog
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from .backoff import Backoff
from .resource import Resource
from .transport import Transport, WatchStream, api_error_text, retry_after_seconds, status_code_of
from .watchstream import WatchDecodeError, iter_events

log = structlog.get_logger("informers.reflector")

LIST_PAGE_SIZE = 500

PRODUCTIVE_WATCH = 1.0
"""Seconds a watch that delivered nothing must have lasted for no backoff to follow it."""

RESTART_REASONS = ("expired", "dropped", "timeout", "closed", "error")
"""Keys of ``watch_restarts``:

* ``expired``: 410 Gone; a full relist follows.
* ``dropped``: the connection broke (reset, EOF mid-stream).
* ``timeout``: the client read timeout fired (silent connection, field-reports.md B11).
* ``closed``: the server ended the watch cleanly (its ``timeoutSeconds``); normal.
* ``error``: any other failure (HTTP error, ERROR event, undecodable line,
  connect failure, unexpected exception); retried after backoff.
"""


@attrs.frozen
class ReflectorConfig:
    """Timing knobs, all in seconds.

    * ``watch_timeout_range``: bounds for the server-side ``timeoutSeconds``
      (integers; drawn uniformly per watch). Default 5-10 min (product-decisions §3).
    * ``read_timeout_margin``: the client read timeout is ``timeoutSeconds`` plus this.
    * ``connect_timeout``: TCP/TLS connect timeout of every request.
    * ``list_read_timeout``: per-read socket timeout of LIST requests.
    * ``relist_backoff``: (first, max) delay of the jittered exponential backoff.
    * ``relist_period``: if set, a full LIST at least this often, independent of
      the watch (field-reports.md B11's safety net); ``None`` = only on 410/errors.
    * ``watch_proof``: a watch open this long, even if quiet and not yet ended, shows
      the kind lists: it ends a run of failures (field-reports.md R8 readiness; a 429 at a watch's start
      while a new CRD's watch cache fills is not a kind that cannot be listed). Above a
      conversion webhook that answers within 10 s, so a watch that hangs less and then fails
      keeps the run. A watch that hangs 10 s or more before each ERROR event restarts the
      run each time and is not named (kube-apiserver waits up to 30 s for a webhook; with
      its watch cache on, the default, a failing conversion is a 429 at watch start instead).
    """

    watch_timeout_range: tuple[int, int] = (300, 600)
    read_timeout_margin: float = 30
    connect_timeout: float = 10
    list_read_timeout: float = 60
    relist_backoff: tuple[float, float] = (0.5, 30)
    relist_period: float | None = None
    watch_proof: float = 10.0

    def __attrs_post_init__(self) -> None:
        lo, hi = self.watch_timeout_range
        if not (1 <= lo <= hi):
            raise ValueError(f"watch_timeout_range must satisfy 1 <= lo <= hi: {self.watch_timeout_range}")
        b_lo, b_hi = self.relist_backoff
        if not (0 < b_lo <= b_hi):
            raise ValueError(f"relist_backoff must satisfy 0 < first <= max: {self.relist_backoff}")
        if self.read_timeout_margin < 0:
            raise ValueError("read_timeout_margin must be >= 0")
        if self.relist_period is not None and self.relist_period <= 0:
            raise ValueError("relist_period must be > 0 or None")
        if self.watch_proof <= 0:
            raise ValueError("watch_proof must be > 0")


class Sink(Protocol):
    """Where the reflector delivers (the informer)."""

    def project(self, objs: list[dict]) -> list[dict]:
        """What the store keeps of one LIST page's objects (as served, apiVersion and kind
        filled); called once per page, before the next page is read."""
        ...

    def replace(self, objs: list[dict], resource_version: str) -> None:
        """The whole LIST, each page already through :meth:`project`."""
        ...

    def apply(self, event_type: str, obj: dict) -> None: ...


class _Expired(Exception):
    """410 Gone: the resourceVersion is too old; relist."""


class _WatchErrorEvent(Exception):
    def __init__(self, status: dict) -> None:
        super().__init__(f"watch ERROR event: {status.get('code')} {status.get('reason')}: {status.get('message')}")
        self.status = status


# Errors meaning "the connection is gone"; the read timeout is checked first.
_DROPPED = (
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.IncompleteRead,
    ConnectionError,
    OSError,
)
_TIMEOUT = (urllib3.exceptions.ReadTimeoutError, socket.timeout, TimeoutError)


class Reflector:
    """Runs the LIST/WATCH loop for one resource (+ namespace + selectors) on
    the calling thread until :meth:`stop`. Public counters (read by metrics):

    * ``watch_restarts``: ``dict[str, int]`` keyed by :data:`RESTART_REASONS`.
    * ``relists``: LISTs after the first one (410s, errors, ``relist_period``).
    * ``last_resource_version``: where the next watch starts.
    * ``last_sync_monotonic``: ``time.monotonic()`` of the last sign of
      life: a successful LIST, a watch (re)established or cleanly ended, or any
      event or BOOKMARK. ``None`` until the first LIST.
    """

    def __init__(
        self,
        resource: Resource,
        transport: Transport,
        sink: Sink,
        config: ReflectorConfig,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        name: str = "",
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.config = config
        self._transport = transport
        self._sink = sink
        self._rng = rng or random.Random()
        self._clock = clock
        self._path = resource.path(namespace)
        self._stop = threading.Event()
        self._live_lock = threading.Lock()
        self._live: WatchStream | None = None
        self._backoff = Backoff(*config.relist_backoff, rng=self._rng)
        self._log = log.bind(informer=name or str(resource))

        self.watch_restarts: dict[str, int] = {r: 0 for r in RESTART_REASONS}
        self.relists = 0
        self.lists_completed = 0
        self.last_resource_version: str | None = None
        self.last_sync_monotonic: float | None = None
        # The failure of the last LIST or WATCH and since when they fail (monotonic), None
        # once one succeeds: a kind that cannot be listed (field-reports.md R8) says so.
        self._last_error: str | None = None
        self._failing_since: float | None = None
        self._open_since: float | None = None  # when the live watch started, while it is open
        # Whether a quiet open watch proves the kind lists: not after a watch that ended in an
        # ERROR event having delivered nothing (a conversion webhook that hangs, then fails),
        # until an event, a LIST or a clean end proves it again.
        self._open_proves = True
        self._next_relist_at = math.inf

    # ------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        """Ask the loop to end and abort the live watch so it ends promptly."""
        self._stop.set()
        with self._live_lock:
            live = self._live
        if live is not None:
            live.abort()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @property
    def watching(self) -> bool:
        """A watch stream is open now (inspection only: it may end at any moment)."""
        with self._live_lock:
            return self._live is not None

    def run(self) -> None:
        """The loop. Returns only after :meth:`stop`."""
        need_list = True
        expired_streak = 0  # 410s with no successful watch in between
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list_and_replace()
                    need_list = False
                    self._backoff.reset()
                    self._succeeded()
                    continue
                reason, productive = self._watch_once()
                if reason == "stopped":
                    break
                self.watch_restarts[reason] += 1
                if reason == "closed":
                    self._mark_sync()
                if self._clock() >= self._next_relist_at:
                    need_list = True
                if productive:  # backoff only: _watch_once decides whether failures end
                    self._backoff.reset()
                    expired_streak = 0
                else:
                    # A watch that ended within a second having delivered
                    # nothing: wait, or a broken server/proxy becomes a hot loop.
                    self._log.info("watch ended immediately; backing off", reason=reason)
                    self._sleep_backoff()
            except _Expired as e:
                # 410: our resourceVersion is compacted away; only a relist helps (field-reports.md B12).
                self.watch_restarts["expired"] += 1
                self._log.info("resourceVersion expired; relisting", rv=self.last_resource_version, detail=str(e))
                need_list = True
                expired_streak += 1
                if expired_streak > 1:
                    # A fresh list's resourceVersion already too old again:
                    # do not hammer the server with LISTs.
                    self._sleep_backoff()
            except _WatchErrorEvent as e:
                # e.g. a 500 inside the stream. The resourceVersion is still
                # ours; if the server cannot serve it, it will say 410.
                self.watch_restarts["error"] += 1
                self._failed(str(e))
                self._log.warning("watch ERROR event; rewatching after backoff", detail=str(e))
                self._sleep_backoff()
            except ApiException as e:
                self.watch_restarts["error"] += 1
                self._failed(api_error_text(e))
                code = status_code_of(e)
                retry_after = retry_after_seconds(e)
                if code == 404:
                    # Typically a CRD not installed yet: keep retrying, quietly.
                    self._log.warning("resource not found (CRD not installed?); retrying", status=code)
                elif code == 429:
                    # e.g. "storage is (re)initializing" right after a CRD appears.
                    self._log.info("API server asks to retry later", status=code, retry_after=retry_after,
                                   message=(e.body or "")[:300])
                else:
                    self._log.warning("API error; retrying after backoff", status=code, reason=e.reason,
                                      body=(e.body or "")[:500], relisting=need_list)
                self._sleep_backoff(at_least=retry_after)
            except (urllib3.exceptions.HTTPError, OSError) as e:
                # Server unreachable, connect/TLS timeout, connection reset
                # during a LIST: expected while the API server is away.
                self.watch_restarts["error"] += 1
                self._failed(f"API server unreachable: {e!r}")
                if not self._stop.is_set():
                    self._log.warning("API server unreachable; retrying after backoff", detail=repr(e),
                                      relisting=need_list)
                self._sleep_backoff()
            except Exception:
                # A bug or a surprise: keep the thread alive (field-reports.md B12/B13), loudly,
                # and relist, since the cache may have missed what failed.
                need_list = True
                self.watch_restarts["error"] += 1
                self._failed("list/watch failed (see the log)")
                if not self._stop.is_set():
                    self._log.exception("list/watch failed; retrying after backoff", relisting=need_list)
                self._sleep_backoff()
        self._log.debug("reflector stopped")

    # --------------------------------------------------------------- pieces

    def _sleep_backoff(self, at_least: float = 0.0) -> None:
        # Honour a server's Retry-After, but never beyond our backoff cap.
        delay = max(self._backoff.next_delay(), min(at_least, self.config.relist_backoff[1]))
        self._stop.wait(delay)

    def _mark_sync(self) -> None:
        self.last_sync_monotonic = self._clock()

    @property
    def last_error(self) -> str | None:
        """Why the last LIST or WATCH failed; None once a LIST succeeded or a watch proved
        itself (delivered an event, or has been open ``config.watch_proof`` seconds, even
        if it has not ended yet: a watch may stay open and quiet for minutes)."""
        f = self.failure()
        return None if f is None else f[0]

    def _watch_proven(self) -> bool:
        since = self._open_since
        return self._open_proves and since is not None and self._clock() - since >= self.config.watch_proof

    def failure(self) -> tuple[str, float] | None:
        """``(last error, monotonic time the run of failures began)`` from one call, or
        None. Never an error without its start ("cannot list X: None"); the two are read
        without a lock, so a failure recorded between the reads can pair the previous error
        with the new start."""
        if self._watch_proven():
            return None
        error, since = self._last_error, self._failing_since
        return (error, since) if error is not None and since is not None else None

    def _failed(self, text: str) -> None:
        self._last_error = text
        if self._failing_since is None:
            self._failing_since = self._clock()

    def _succeeded(self) -> None:
        self._last_error = self._failing_since = None
        self._open_proves = True

    def _selectors(self) -> list[tuple[str, str]]:
        q = []
        if self.label_selector:
            q.append(("labelSelector", self.label_selector))
        if self.field_selector:
            q.append(("fieldSelector", self.field_selector))
        return q

    def _list_and_replace(self) -> None:
        items, rv = self._list_all()
        if self._stop.is_set():
            return
        self._sink.replace(items, rv)
        self.last_resource_version = rv
        if self.lists_completed:
            self.relists += 1
        self.lists_completed += 1
        self._mark_sync()
        if self.config.relist_period is not None:
            self._next_relist_at = self._clock() + self.config.relist_period
        self._log.debug("listed", count=len(items), rv=rv)

    def _list_all(self) -> tuple[list[dict], str]:
        """All pages of one consistent LIST; restarts on an expired continue token."""
        timeout = (self.config.connect_timeout, self.config.list_read_timeout)
        while True:
            items: list[dict] = []
            cont: str | None = None
            rv = ""
            try:
                while True:
                    query = [("limit", str(LIST_PAGE_SIZE)), *self._selectors()]
                    if cont:
                        query.append(("continue", cont))
                    page = self._transport.list(self._path, query, timeout,
                                                metadata_only=self.resource.metadata_only)
                    meta = page.get("metadata") or {}
                    rv = meta.get("resourceVersion") or rv
                    cont = meta.get("continue")
                    items.extend(self._sink.project(self._complete_items(page)))
                    del page  # the page as served goes before the next one is read
                    if not cont or self._stop.is_set():
                        return items, rv
            except ApiException as e:
                # Only a continue token can expire mid-list; a fresh LIST fixes it.
                if cont and status_code_of(e) == 410:
                    self._log.info("list continue token expired; restarting list")
                    continue
                raise

    def _complete_items(self, page: dict) -> list[dict]:
        # List items come without apiVersion/kind; fill them so handlers see
        # the same shape as from watch events.
        kind = self.resource.kind
        if not kind:
            list_kind = page.get("kind") or ""
            kind = list_kind[:-4] if list_kind.endswith("List") else ""
        api_version = page.get("apiVersion") or self.resource.api_version
        items = page.get("items") or []
        if self.resource.metadata_only:
            for item in items:
                self._as_resource(item)
            return items
        for item in items:
            if kind:
                item.setdefault("kind", kind)
            item.setdefault("apiVersion", api_version)
        return items

    def _as_resource(self, obj: dict) -> None:
        # A PartialObjectMetadata is given the kind it stands for (Resource.metadata_only).
        obj["kind"] = self.resource.kind
        obj["apiVersion"] = self.resource.api_version

    def _watch_timeout(self) -> int:
        lo, hi = self.config.watch_timeout_range
        t = self._rng.randint(int(lo), int(hi))
        if self._next_relist_at != math.inf:
            # End the watch when the periodic relist is due.
            t = max(1, min(t, math.ceil(self._next_relist_at - self._clock())))
        return t

    def _watch_once(self) -> tuple[str, bool]:
        """One watch request. Returns ``(reason, productive)``: how it ended
        (``closed``/``dropped``/``timeout``/``error``/``stopped``) and whether
        it delivered anything or lasted at least a second. Raises ``_Expired``
        on 410 and ``ApiException`` if the watch could not start."""
        timeout_s = self._watch_timeout()
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_s)),
            *self._selectors(),
        ]
        if self.last_resource_version:
            query.append(("resourceVersion", self.last_resource_version))
        started = self._clock()
        try:
            stream = self._transport.watch(
                self._path, query, (self.config.connect_timeout, timeout_s + self.config.read_timeout_margin),
                metadata_only=self.resource.metadata_only,
            )
        except ApiException as e:
            if status_code_of(e) == 410:
                raise _Expired(f"HTTP {e.status} at watch start") from e
            raise
        except _TIMEOUT as e:
            # No response headers within the read timeout: silent connection.
            if self._stop.is_set():
                return "stopped", True
            self._log.info("watch request timed out; rewatching", detail=str(e))
            return "timeout", True
        with self._live_lock:
            self._live = stream
        if self._stop.is_set():  # stop() ran before we published the stream
            stream.abort()
        self._mark_sync()  # a (re)established watch counts as renewal (field-reports.md B11 readiness)
        self._open_since = self._clock()
        received = 0
        reason = "closed"
        errored = False
        try:
            for event in iter_events(stream.chunks()):
                if self._stop.is_set():
                    break
                self._handle_event(event)  # an ERROR event raises: it is not "received"
                received += 1
        except _WatchErrorEvent:
            errored = True
            raise
        except _TIMEOUT as e:
            reason = "timeout"
            if not self._stop.is_set():
                self._log.info("watch read timed out; rewatching", rv=self.last_resource_version, detail=str(e))
        except _Expired:
            raise
        except WatchDecodeError as e:
            reason = "error"
            if not self._stop.is_set():
                self._log.warning("bad watch stream; rewatching", detail=str(e))
        except _DROPPED as e:
            reason = "dropped"
            if not self._stop.is_set():
                self._log.info("watch connection dropped; rewatching", rv=self.last_resource_version, detail=repr(e))
        finally:
            with self._live_lock:
                self._live = None
            stream.close()
            if received > 0 or self._watch_proven():
                # Proven before it ended: an ERROR event now starts a new run of failures.
                self._succeeded()
            if errored and received == 0:
                self._open_proves = False  # the next quiet watch proves nothing by lasting
            elif reason == "closed" and self._clock() - (self._open_since or self._clock()) >= self.config.watch_proof:
                self._succeeded()  # a watch that lasted and ended as the server ends it
            self._open_since = None
        if self._stop.is_set():
            return "stopped", True
        productive = received > 0 or (self._clock() - started) >= PRODUCTIVE_WATCH
        return reason, productive

    def _handle_event(self, event: dict) -> None:
        etype = event["type"]
        obj = event.get("object")
        if etype == "ERROR":
            status = obj if isinstance(obj, dict) else {}
            if status.get("code") == 410:
                raise _Expired(f"ERROR event: {status.get('reason')}: {status.get('message')}")
            raise _WatchErrorEvent(status)
        if not isinstance(obj, dict):
            raise WatchDecodeError(f"{etype} event without an object")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if etype in ("ADDED", "MODIFIED", "DELETED"):
            if self.resource.metadata_only:
                self._as_resource(obj)
            self._sink.apply(etype, obj)
        elif etype != "BOOKMARK":
            self._log.warning("unknown watch event type ignored", type=etype)
            return
        # Advance after applying, on every event incl. BOOKMARK (field-reports.md B12): a
        # restart then resumes exactly after the last event we acted on.
        if rv:
            self.last_resource_version = rv
        self._mark_sync()
