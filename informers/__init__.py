"""The client-go informer model on the official ``kubernetes`` client.

A :class:`SharedInformerFactory` hands out one :class:`SharedIndexInformer`
per resource + selectors. Each runs a reflector thread (LIST, then WATCH from
the list's resourceVersion; relist on 410; client read timeouts) feeding a
:class:`ThreadSafeStore` with secondary indexes and calling event handlers.
Objects are plain JSON dicts, so CRDs need no model classes.
See product-decisions.md §3 and field-reports.md B11/field-reports.md B12.
"""

import importlib
from typing import Any

# Names resolve on first use (PEP 562), so importing one light module of the package (the
# planners need ``informers.resource``) does not load the client, urllib3 and the threads.
_HOMES = {
    "SharedInformerFactory": "factory",
    "HandlerRegistration": "informer",
    "SharedIndexInformer": "informer",
    "RESTART_REASONS": "reflector",
    "ReflectorConfig": "reflector",
    "Resource": "resource",
    "meta_namespace_key": "resource",
    "split_meta_namespace_key": "resource",
    "StoreEvent": "store",
    "ThreadSafeStore": "store",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{home}", __name__), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))

__all__ = [
    "HandlerRegistration",
    "RESTART_REASONS",
    "ReflectorConfig",
    "Resource",
    "SharedIndexInformer",
    "SharedInformerFactory",
    "StoreEvent",
    "ThreadSafeStore",
    "meta_namespace_key",
    "split_meta_namespace_key",
]
