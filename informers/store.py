"""ThreadSafeStore: the informer cache, with secondary indexes (client-go's
``thread_safe_store.go`` + ``index.go`` model)."""

from __future__ import annotations

import threading
from typing import Callable, Iterable, Literal

import attrs
import structlog

from .resource import meta_namespace_key

log = structlog.get_logger("informers.store")

IndexFunc = Callable[[dict], "list[str]"]
"""An index function maps an object to the index values it should be found
under (zero, one or many). Example: ``lambda o: [o["spec"]["provider"]]``."""

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@attrs.frozen
class StoreEvent:
    """One change a store mutation made, for the informer to hand to handlers.

    * ``ADDED``: ``old`` is ``None``, ``new`` is the object.
    * ``MODIFIED``: both set (``old`` is the previously cached object).
    * ``DELETED``: ``old`` is the last known object, ``new`` is ``None``.
    """

    type: EventType
    key: str
    old: dict | None
    new: dict | None


class ThreadSafeStore:
    """A key -> object map guarded by an ``RLock``, with secondary indexes.

    * Keys come from ``key_func`` (default :func:`meta_namespace_key`).
    * ``indexers`` maps an index name to an :data:`IndexFunc`; every
      ``add``/``update``/``delete``/``replace`` keeps all indexes exact,
      including when an object's index values change.
    * Reads return the **stored dicts themselves**, not copies (client-go
      convention: copying every read would cost more than the cache saves).
      Callers must treat them as read-only and ``copy.deepcopy`` before
      changing anything; mutating one corrupts the cache and its indexes.
    * An index function that raises is logged and the object is indexed under
      no value for that index; the object itself is still stored, because a
      bad indexer must not make the cache lose objects.

    The mutating methods are for the informer; controllers only read.
    """

    def __init__(
        self,
        indexers: dict[str, IndexFunc] | None = None,
        key_func: Callable[[dict], str] = meta_namespace_key,
    ) -> None:
        self._lock = threading.RLock()
        self._key_func = key_func
        self._items: dict[str, dict] = {}
        self._indexers: dict[str, IndexFunc] = {}
        # index name -> index value -> set of keys
        self._indices: dict[str, dict[str, set[str]]] = {}
        # index name -> key -> the values it was indexed under. Removal uses
        # this, not a re-run of the index function, so the index stays exact
        # even if a caller mutated a cached dict against the rules.
        self._values_of: dict[str, dict[str, frozenset[str]]] = {}
        if indexers:
            self.add_indexers(indexers)

    # ----------------------------------------------------------------- reads

    def get(self, key: str) -> dict | None:
        """The object stored under ``key`` (``"ns/name"`` or ``"name"``), or ``None``."""
        with self._lock:
            return self._items.get(key)

    def list(self) -> list[dict]:
        """All cached objects (a new list; the dicts are the stored ones)."""
        with self._lock:
            return list(self._items.values())

    def keys(self) -> list[str]:
        """All cached keys (a new list)."""
        with self._lock:
            return list(self._items.keys())

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def by_index(self, index_name: str, value: str, ordered: bool = True) -> list[dict]:
        """Objects whose ``index_name`` function returned ``value``, in key order
        (``ordered=False``: in no particular order, without the per-call sort, for callers
        that only aggregate, e.g. a set of IDs).

        Raises ``KeyError`` if no index of that name exists (a typo must not
        look like "no objects").
        """
        with self._lock:
            keys = self._index(index_name).get(value, ())
            return [self._items[k] for k in (sorted(keys) if ordered else keys)]

    def index_keys(self, index_name: str, value: str) -> list[str]:
        """Keys of the objects :meth:`by_index` would return (sorted)."""
        with self._lock:
            return sorted(self._index(index_name).get(value, ()))

    def index_key_set(self, index_name: str, value: str) -> frozenset[str]:
        """Keys of the objects :meth:`by_index` would return, unsorted (no per-call sort
        for callers that only test membership or compare sets)."""
        with self._lock:
            return frozenset(self._index(index_name).get(value, ()))

    def list_index_values(self, index_name: str) -> list[str]:
        """Every value that currently has at least one object in the index."""
        with self._lock:
            return [v for v, keys in self._index(index_name).items() if keys]

    def indexers(self) -> dict[str, IndexFunc]:
        """A copy of the registered index functions."""
        with self._lock:
            return dict(self._indexers)

    # ------------------------------------------------------------- mutations

    def add_indexers(self, indexers: dict[str, IndexFunc]) -> None:
        """Register more indexes and build them over the current contents.

        Re-registering the same function under the same name is a no-op; a
        different function under an existing name raises ``ValueError``.
        """
        with self._lock:
            for name, fn in indexers.items():
                existing = self._indexers.get(name)
                if existing is not None and existing is not fn:
                    raise ValueError(f"indexer {name!r} already registered with a different function")
            for name, fn in indexers.items():
                if name in self._indexers:
                    continue
                self._indexers[name] = fn
                self._build_index(name, fn)

    def add(self, obj: dict) -> dict | None:
        """Insert or replace ``obj``; returns the previously stored object or ``None``."""
        key = self._key_func(obj)
        with self._lock:
            old = self._items.get(key)
            self._items[key] = obj
            self._reindex(key, old, obj)
            return old

    update = add
    """Same as :meth:`add` (an upsert): the store does not care which it was."""

    def delete(self, obj_or_key: dict | str) -> dict | None:
        """Remove by object or key; returns the removed (last stored) object or ``None``."""
        key = obj_or_key if isinstance(obj_or_key, str) else self._key_func(obj_or_key)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._reindex(key, old, None)
            return old

    def replace(self, objs: Iterable[dict]) -> list[StoreEvent]:
        """Make the store hold exactly ``objs`` (a full LIST result), atomically.

        Returns the events that turn the old contents into the new, in this
        order: ``DELETED`` (with the last cached object) for keys that
        vanished, then ``ADDED`` for new keys and ``MODIFIED`` for keys present
        before and after (even if unchanged: client-go delivers a relist as
        updates so handlers re-evaluate, field-reports.md B12). If ``objs``
        contains a key twice, the last one wins.
        """
        new_items: dict[str, dict] = {}
        for obj in objs:
            new_items[self._key_func(obj)] = obj
        events: list[StoreEvent] = []
        with self._lock:
            old_items = self._items
            for key in sorted(old_items.keys() - new_items.keys()):
                events.append(StoreEvent("DELETED", key, old_items[key], None))
            for key, obj in new_items.items():
                old = old_items.get(key)
                events.append(StoreEvent("ADDED" if old is None else "MODIFIED", key, old, obj))
            self._items = new_items
            self._rebuild_indices()
        return events

    # -------------------------------------------------------------- internal

    def _index(self, index_name: str) -> dict[str, set[str]]:
        try:
            return self._indices[index_name]
        except KeyError:
            raise KeyError(f"no index named {index_name!r}") from None

    def _index_values(self, name: str, fn: IndexFunc, obj: dict) -> list[str]:
        try:
            values = fn(obj)
            # A str is iterable: ["a","b"] expected, "ab" would index "a" and "b".
            if isinstance(values, str):
                return [values]
            return list(values or ())
        except Exception:
            log.exception("index function failed; object not indexed", index=name, key=self._safe_key(obj))
            return []

    def _safe_key(self, obj: dict) -> str:
        try:
            return self._key_func(obj)
        except Exception:
            return "<no key>"

    def _reindex(self, key: str, old: dict | None, new: dict | None) -> None:
        for name, fn in self._indexers.items():
            index = self._indices[name]
            values_of = self._values_of[name]
            old_values = values_of.pop(key, frozenset())
            new_values = frozenset(self._index_values(name, fn, new)) if new is not None else frozenset()
            if new_values:
                values_of[key] = new_values
            for value in old_values - new_values:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        # Drop empty sets so list_index_values stays exact and memory bounded.
                        del index[value]
            for value in new_values - old_values:
                index.setdefault(value, set()).add(key)

    def _rebuild_indices(self) -> None:
        for name, fn in self._indexers.items():
            self._build_index(name, fn)

    def _build_index(self, name: str, fn: IndexFunc) -> None:
        index: dict[str, set[str]] = {}
        values_of: dict[str, frozenset[str]] = {}
        for key, obj in self._items.items():
            values = frozenset(self._index_values(name, fn, obj))
            if values:
                values_of[key] = values
            for value in values:
                index.setdefault(value, set()).add(key)
        self._indices[name] = index
        self._values_of[name] = values_of
