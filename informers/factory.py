"""SharedInformerFactory: one informer (one watch) per resource + selectors."""

from __future__ import annotations

import threading
import time

import structlog

from .informer import SharedIndexInformer, TransformFunc, strip_managed_fields
from .reflector import ReflectorConfig
from .resource import Resource
from .store import IndexFunc
from .transport import ApiClientTransport, Transport

log = structlog.get_logger("informers.factory")


class SharedInformerFactory:
    """Hands out shared informers and starts/stops them together.

    ``api_client`` is a ``kubernetes.client.ApiClient``. Keyword options
    (seconds):

    * ``watch_timeout_range=(300, 600)``: server ``timeoutSeconds`` per watch,
      random within (product-decisions §3: 5-10 min).
    * ``read_timeout_margin=30``: client read timeout = that + this (field-reports.md B11).
    * ``relist_backoff=(0.5, 30)``: first and max delay after a failure.
    * ``connect_timeout=10``: TCP/TLS connect timeout.
    * ``relist_period=None``: if set, also relist this often regardless of
      the watch (field-reports.md B11's independent full relist); also acts as a resync,
      delivering ``on_update`` for every object.
    * ``transport``: replaces the HTTP layer (tests); default wraps ``api_client``.

    Informers requested after :meth:`start` start immediately.
    """

    def __init__(
        self,
        api_client=None,
        *,
        watch_timeout_range: tuple[int, int] = (300, 600),
        read_timeout_margin: float = 30,
        relist_backoff: tuple[float, float] = (0.5, 30),
        connect_timeout: float = 10,
        relist_period: float | None = None,
        transport: Transport | None = None,
    ) -> None:
        if transport is None:
            if api_client is None:
                raise ValueError("api_client or transport is required")
            transport = ApiClientTransport(api_client)
        self._transport = transport
        self._config = ReflectorConfig(
            watch_timeout_range=(int(watch_timeout_range[0]), int(watch_timeout_range[1])),
            read_timeout_margin=read_timeout_margin,
            connect_timeout=connect_timeout,
            relist_backoff=(float(relist_backoff[0]), float(relist_backoff[1])),
            relist_period=relist_period,
        )
        self._lock = threading.Lock()
        self._informers: dict[tuple, SharedIndexInformer] = {}
        self._started = False
        self._stopped = False

    def informer(
        self,
        resource: Resource,
        indexers: dict[str, IndexFunc] | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        *,
        namespace: str | None = None,
        transform: TransformFunc | None = None,
    ) -> SharedIndexInformer:
        """The shared informer for ``resource`` with these selectors (and
        optional ``namespace``; ``None`` = all namespaces). The same arguments
        return the same informer, so one watch serves everyone; ``indexers``
        from later callers are added to its store (``ValueError`` if a name is
        reused with a different function). ``transform`` (default
        :func:`strip_managed_fields`) is the first caller's: one cache holds one
        shape of object."""
        key = (resource, namespace or None, label_selector or None, field_selector or None)
        with self._lock:
            if self._stopped:
                raise RuntimeError("factory is stopped")
            inf = self._informers.get(key)
            if inf is None:
                inf = SharedIndexInformer(
                    resource,
                    self._transport,
                    indexers=indexers,
                    label_selector=key[2],
                    field_selector=key[3],
                    namespace=key[1],
                    config=self._config,
                    transform=transform or strip_managed_fields,
                )
                self._informers[key] = inf
                if self._started:
                    inf.start()
            elif indexers:
                inf.store.add_indexers(indexers)
            return inf

    def remove(self, informer: SharedIndexInformer) -> None:
        """Stop ``informer`` and forget it (its successor serves another version of the
        kind, field-reports.md R8). Does not wait for its thread."""
        with self._lock:
            for key, inf in list(self._informers.items()):
                if inf is informer:
                    del self._informers[key]
        informer.stop()

    def informers(self) -> list[SharedIndexInformer]:
        """All informers handed out so far."""
        with self._lock:
            return list(self._informers.values())

    def start(self) -> None:
        """Start every informer not yet running (each on its own daemon thread)."""
        with self._lock:
            if self._stopped:
                raise RuntimeError("factory is stopped")
            self._started = True
            informers = list(self._informers.values())
        for inf in informers:
            inf.start()

    def has_synced(self) -> bool:
        """True when every informer handed out has synced (False if none)."""
        infs = self.informers()
        return bool(infs) and all(i.has_synced() for i in infs)

    def wait_for_cache_sync(self, timeout: float) -> bool:
        """Block until every informer has synced, at most ``timeout`` seconds.
        Returns :meth:`has_synced` (so False on timeout, e.g. while a CRD is
        missing). Call only after :meth:`start`."""
        deadline = time.monotonic() + timeout
        for inf in self.informers():
            if not inf.wait_for_sync(max(0.0, deadline - time.monotonic())):
                return False
        return self.has_synced()

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop all informers: abort live watches, end the threads, wait up to
        ``timeout`` seconds in total. Returns True if all threads ended (they
        are daemons, so a straggler stuck in a connect cannot block exit)."""
        with self._lock:
            self._stopped = True
            informers = list(self._informers.values())
        for inf in informers:
            inf.stop()
        deadline = time.monotonic() + timeout
        ok = True
        for inf in informers:
            if not inf.join(max(0.0, deadline - time.monotonic())):
                ok = False
                log.warning("informer thread did not stop in time", informer=inf.name)
        return ok
