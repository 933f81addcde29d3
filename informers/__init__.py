"""The client-go informer model on the official ``kubernetes`` client.

A :class:`SharedInformerFactory` hands out one :class:`SharedIndexInformer`
per resource + selectors. Each runs a reflector thread (LIST, then WATCH from
the list's resourceVersion; relist on 410; client read timeouts) feeding a
:class:`ThreadSafeStore` with secondary indexes and calling event handlers.
Objects are plain JSON dicts, so CRDs need no model classes.
See product-decisions.md §3 and field-reports.md B11/field-reports.md B12.
"""

from .factory import SharedInformerFactory
from .informer import HandlerRegistration, SharedIndexInformer
from .reflector import RESTART_REASONS, ReflectorConfig
from .resource import Resource, meta_namespace_key, split_meta_namespace_key
from .store import StoreEvent, ThreadSafeStore

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
