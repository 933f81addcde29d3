"""SharedIndexInformer: one reflector + one store + any number of handlers."""

from __future__ import annotations

import math
import threading
import time
from typing import Callable

import attrs
import structlog

from .reflector import Reflector, ReflectorConfig
from .resource import Resource, meta_namespace_key
from .store import IndexFunc, StoreEvent, ThreadSafeStore
from .transport import Transport

log = structlog.get_logger("informers.informer")

AddFunc = Callable[[dict], None]
UpdateFunc = Callable[[dict, dict], None]
DeleteFunc = Callable[[dict], None]
TransformFunc = Callable[[dict], dict]
"""Applied to every object the reflector delivers (list items and watch events) before it
is cached or handed to a handler (client-go's ``SharedIndexInformer.SetTransform``)."""


def strip_managed_fields(obj: dict) -> dict:
    """``obj`` without ``metadata.managedFields``: server-side-apply bookkeeping that no
    reconcile reads, often the largest part of a small object (controller-runtime's
    ``cache.TransformStripManagedFields`` idea). Less memory per cached object, and less
    to copy and to serialise when a cached object is sent back: an update that carries no
    managedFields leaves the server's record as it is (the API server then keeps the live
    object's, so a client that does not know the field cannot clear it).

    Changes ``obj`` in place (a freshly decoded object the informer owns) and returns it."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


@attrs.define(eq=False)
class HandlerRegistration:
    """Returned by :meth:`SharedIndexInformer.add_event_handler`; pass it to
    :meth:`SharedIndexInformer.remove_event_handler`."""

    on_add: AddFunc | None
    on_update: UpdateFunc | None
    on_delete: DeleteFunc | None


class SharedIndexInformer:
    """A watched, indexed cache of one resource, shared by every handler.

    Usually obtained from :meth:`SharedInformerFactory.informer`, which makes
    sure one watch serves all users of the same resource + selectors.

    * ``store``: the :class:`ThreadSafeStore`, used as the lister. Objects are
      plain JSON dicts, read-only (deep-copy before changing).
    * Handlers run **on the informer's thread**, one event at a time, in watch
      order, while the store already shows the event. They must be quick and
      never block (enqueue a key to a workqueue); an exception in a handler is
      logged and does not affect other handlers or the informer.
    * ``on_delete`` gets the last known object: the object of the watch's
      DELETED event, or, for a delete synthesized by a relist (the object
      vanished while we were not watching, field-reports.md B12), the last cached version.
    * A relist delivers ``on_update(old, new)`` for every object that
      survived it (even unchanged), ``on_add`` for new ones, ``on_delete`` for
      vanished ones, like client-go.
    * ``transform`` (default :func:`strip_managed_fields`; None keeps objects as served)
      runs on each object before the store sees it.
    * ``watch_restarts`` (``dict[str, int]``, keys in
      ``reflector.RESTART_REASONS``) and ``relists`` (``int``) are counters
      for metrics.
    """

    def __init__(
        self,
        resource: Resource,
        transport: Transport,
        *,
        indexers: dict[str, IndexFunc] | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        namespace: str | None = None,
        config: ReflectorConfig | None = None,
        transform: TransformFunc | None = strip_managed_fields,
    ) -> None:
        self.resource = resource
        self._transform = transform or (lambda obj: obj)
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.store = ThreadSafeStore(indexers)
        self.name = self._describe()
        # Serialises store changes + handler calls with handler registration,
        # so a late handler sees each object exactly once (replay, then events).
        self._dispatch_lock = threading.RLock()
        self._handlers: list[HandlerRegistration] = []
        self._synced = threading.Event()
        self._reflector = Reflector(
            resource,
            transport,
            _Sink(self),
            config or ReflectorConfig(),
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            name=self.name,
        )
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._log = log.bind(informer=self.name)

    def _describe(self) -> str:
        parts = [str(self.resource)]
        if self.namespace:
            parts.append(f"ns={self.namespace}")
        if self.label_selector:
            parts.append(f"labels={self.label_selector}")
        if self.field_selector:
            parts.append(f"fields={self.field_selector}")
        return " ".join(parts)

    # -------------------------------------------------------------- handlers

    def add_event_handler(
        self,
        on_add: AddFunc | None = None,
        on_update: UpdateFunc | None = None,
        on_delete: DeleteFunc | None = None,
    ) -> HandlerRegistration:
        """Register callbacks: ``on_add(obj)``, ``on_update(old, new)``,
        ``on_delete(obj)``; any may be ``None``.

        Allowed before or after start. A handler added late first gets
        ``on_add`` for every object already cached (on the caller's thread,
        before this returns), then the live events; nothing is missed or
        doubled in between (client-go's late-handler replay). The replay
        holds the informer's dispatch lock, so do not call this while holding
        a lock that your handlers take.
        """
        reg = HandlerRegistration(on_add, on_update, on_delete)
        with self._dispatch_lock:
            if on_add is not None:
                for obj in self.store.list():
                    self._call(on_add, "on_add", obj)
            self._handlers.append(reg)
        return reg

    def remove_event_handler(self, registration: HandlerRegistration) -> None:
        """Stop calling a handler (no-op if already removed)."""
        with self._dispatch_lock:
            self._handlers = [h for h in self._handlers if h is not registration]

    def _call(self, fn: Callable, what: str, *args: dict) -> None:
        try:
            fn(*args)
        except Exception:
            # One bad handler must not starve the others or kill the watch.
            obj = args[-1]
            meta = obj.get("metadata", {}) if isinstance(obj, dict) else {}
            self._log.exception("event handler failed", handler=what,
                                name=meta.get("name"), namespace=meta.get("namespace"))

    def _dispatch(self, event: StoreEvent) -> None:
        for h in list(self._handlers):
            if event.type == "ADDED":
                if h.on_add is not None:
                    self._call(h.on_add, "on_add", event.new)
            elif event.type == "MODIFIED":
                if h.on_update is not None:
                    self._call(h.on_update, "on_update", event.old, event.new)
            elif h.on_delete is not None:
                self._call(h.on_delete, "on_delete", event.old)

    # ------------------------------------------------------- reflector sink

    def _on_list(self, objs: list[dict], resource_version: str) -> None:
        """Reflector callback: a full LIST result, already transformed page by page."""
        with self._dispatch_lock:
            events = self.store.replace(objs)
            for ev in events:
                self._dispatch(ev)
            # Synced only once handlers have seen the whole first list.
            self._synced.set()

    def _on_watch_event(self, event_type: str, obj: dict) -> None:
        """Reflector callback: one ADDED/MODIFIED/DELETED watch event."""
        obj = self._transform(obj)
        with self._dispatch_lock:
            if event_type == "DELETED":
                self.store.delete(obj)
                # The event's object is the final state: newer than the cache.
                key = self._key_or_none(obj)
                self._dispatch(StoreEvent("DELETED", key or "", obj, None))
            else:
                old = self.store.add(obj)
                key = self._key_or_none(obj)
                self._dispatch(StoreEvent("ADDED" if old is None else "MODIFIED", key or "", old, obj))

    @staticmethod
    def _key_or_none(obj: dict) -> str | None:
        try:
            return meta_namespace_key(obj)
        except Exception:
            return None

    # --------------------------------------------------------- state / counters

    def has_synced(self) -> bool:
        """True once the first LIST is in the store and every handler was
        notified of it; stays True afterwards (relists do not reset it)."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Block until :meth:`has_synced` or ``timeout`` seconds; returns it."""
        return self._synced.wait(timeout)

    def last_sync_age(self) -> float:
        """Seconds since the last sign of a live watch: successful LIST, watch
        (re)established or cleanly ended, any event or BOOKMARK. ``math.inf``
        before the first LIST. Readiness fails above ~2x the watch timeout (field-reports.md B11)."""
        t = self._reflector.last_sync_monotonic
        return math.inf if t is None else max(0.0, time.monotonic() - t)

    @property
    def watch_restarts(self) -> dict[str, int]:
        """Watch ends by reason (``expired``, ``dropped``, ``timeout``,
        ``closed``, ``error``); the live dict, do not modify."""
        return self._reflector.watch_restarts

    @property
    def watching(self) -> bool:
        """A watch stream is open now (inspection only, for tests and debugging)."""
        return self._reflector.watching

    @property
    def relists(self) -> int:
        """Full LISTs after the initial one."""
        return self._reflector.relists

    @property
    def last_error(self) -> str | None:
        """Why the last LIST or WATCH failed (``HTTP 500: <message>``, …), None once a LIST
        succeeded or a watch proved itself (delivered an event or stayed open
        ``ReflectorConfig.watch_proof`` seconds): the kind cannot be listed while it is set
        (field-reports.md R8)."""
        return self._reflector.last_error

    def failure(self) -> tuple[str, float] | None:
        """``(last error, seconds its run of failures has lasted)`` from one reading (the
        error and its start can change between two property reads), or None."""
        f = self._reflector.failure()
        return None if f is None else (f[0], max(0.0, time.monotonic() - f[1]))

    def failing_for(self) -> float:
        """Seconds since the LISTs and WATCHes began to fail; 0 while they succeed."""
        f = self.failure()
        return 0.0 if f is None else f[1]

    @property
    def last_resource_version(self) -> str | None:
        """Where the next watch would start (advanced by every event and BOOKMARK)."""
        return self._reflector.last_resource_version

    # --------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start the reflector thread (daemon). Idempotent."""
        with self._start_lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name=f"informer {self.name}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._reflector.run()
        except BaseException:  # pragma: no cover - run() catches everything
            self._log.exception("informer thread died")
            raise

    def stop(self) -> None:
        """Ask the thread to end; aborts the live watch. Does not wait."""
        self._reflector.stop()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; True if it has (or never started)."""
        t = self._thread
        if t is None:
            return True
        t.join(timeout)
        return not t.is_alive()

    def is_running(self) -> bool:
        """True while the reflector thread is alive. It only ends after
        :meth:`stop`; a False while the factory runs means a bug (field-reports.md B13: tie
        liveness/leadership to it)."""
        t = self._thread
        return t is not None and t.is_alive()

    @property
    def started(self) -> bool:
        return self._thread is not None

    def __repr__(self) -> str:
        return f"<SharedIndexInformer {self.name} synced={self.has_synced()}>"


class _Sink:
    """Adapts the informer to the reflector's :class:`~informers.reflector.Sink`."""

    def __init__(self, informer: SharedIndexInformer) -> None:
        self._informer = informer

    def project(self, objs: list[dict]) -> list[dict]:
        return [self._informer._transform(o) for o in objs]

    def replace(self, objs: list[dict], resource_version: str) -> None:
        self._informer._on_list(objs, resource_version)

    def apply(self, event_type: str, obj: dict) -> None:
        self._informer._on_watch_event(event_type, obj)
