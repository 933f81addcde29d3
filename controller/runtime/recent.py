"""Read-your-writes over a lagging informer cache.

After the controller writes an object, the watch brings the new version back a moment
later; a pass in between would read the old version, recompute a status that is already
stored, and fail with 409 Conflict (a wasted write and a backoff). :class:`RecentWrites`
keeps the object the API server returned for our last write of each key until the cache
holds that resourceVersion or a newer one, the key sees a Conflict, or ``ttl`` seconds pass.

"Newer" is decided as client-go's mutation cache does (``etcdObjectVersioner``): when both
resourceVersions are decimal integers (every etcd3-backed API server), the larger one is
newer; otherwise only equality counts. Equality alone is not enough: after a relist (410
Gone, field-reports.md B12) the watch never delivers the version we wrote, only a later one,
and a pass reading our stale copy would not see, for example, a deletion that came after
it (found by hack/chaos.py: a network deleted just after our status write, then an API
server restart, stayed "live" until the next full resync).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from informers.resource import meta_namespace_key
from informers.store import ThreadSafeStore


class RecentWrites:
    """Overlay of our own recent writes on a store (client-go's "mutation cache" idea)."""

    def __init__(self, store: ThreadSafeStore, ttl: float = 30.0, monotonic: Callable[[], float] = time.monotonic):
        self.store = store
        self.ttl = ttl
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self._objs: dict[str, tuple[dict[str, Any], float]] = {}

    def get(self, key: str) -> dict[str, Any] | None:
        """The object as we last wrote it if the cache has not caught up, else the cache's."""
        with self._lock:
            entry = self._objs.get(key)
            if entry is not None and self.monotonic() - entry[1] > self.ttl:
                del self._objs[key]
                entry = None
        cached = self.store.get(key)
        if entry is None or cached is None:
            return cached
        # A different object under the same key (deleted and created again): ours is stale.
        if (cached.get("metadata") or {}).get("uid") != (entry[0].get("metadata") or {}).get("uid"):
            self.forget(key)
            return cached
        # The cache already holds our write or something written after it.
        if _not_older(cached, entry[0]):
            with self._lock:
                if self._objs.get(key) is entry:
                    del self._objs[key]
            return cached
        return entry[0]

    def wrote(self, obj: Mapping[str, Any]) -> None:
        """Record the object the API server returned for our write (entries older than
        ``ttl`` go then: a key never read again does not stay)."""
        now = self.monotonic()
        with self._lock:
            for key in [k for k, (_, at) in self._objs.items() if now - at > self.ttl]:
                del self._objs[key]
            self._objs[meta_namespace_key(dict(obj))] = (dict(obj), now)

    def forget(self, key: str) -> None:
        with self._lock:
            self._objs.pop(key, None)

    def observe(self, obj: Mapping[str, Any]) -> None:
        """Informer event: the cache now holds ``obj``; drop our copy once it is ours."""
        key = meta_namespace_key(dict(obj))
        with self._lock:
            entry = self._objs.get(key)
            if entry is not None and _not_older(obj, entry[0]):
                del self._objs[key]


def _not_older(cached: Mapping[str, Any], ours: Mapping[str, Any]) -> bool:
    """True when ``cached`` is our written version or a later one (see the module docstring)."""
    a = (cached.get("metadata") or {}).get("resourceVersion")
    b = (ours.get("metadata") or {}).get("resourceVersion")
    if a == b:
        return True
    if isinstance(a, str) and isinstance(b, str) and a.isdigit() and b.isdigit():
        return int(a) > int(b)
    return False
