"""A Prometheus registry whose exposition matches client_golang's: no ``*_created`` samples.

prometheus-client adds a ``_created`` series to counters and histograms unless disabled
process-wide; client_golang has none. Filtering in the registry keeps the exposition equal
to the Go reference's without touching global state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

_NO_CREATED_TYPES = frozenset({"counter", "histogram", "summary", "gaugehistogram"})


class NoCreatedRegistry(CollectorRegistry):
    """A :class:`CollectorRegistry` whose collections carry no ``*_created`` samples."""

    def collect(self) -> Iterator[Metric]:
        return _drop_created(super().collect())

    def restricted_registry(self, names: Iterable[str]) -> Any:
        # used by the HTTP handler for ?name[]=... queries
        return _DropCreated(super().restricted_registry(names))


class _DropCreated:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def collect(self) -> Iterator[Metric]:
        return _drop_created(self._inner.collect())


def _drop_created(families: Iterable[Metric]) -> Iterator[Metric]:
    for family in families:
        if family.type in _NO_CREATED_TYPES:
            kept = [s for s in family.samples if not s.name.endswith("_created")]
            if family.samples and not kept:
                continue  # a restricted query that asked only for *_created
            family.samples = kept
        yield family
