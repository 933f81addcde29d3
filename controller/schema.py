"""What the API server holds of a status the controller writes (field reports, fourth
round, field-reports.md S5): a ProxmoxNetwork or ProxmoxNetworkZone CRD older than the controller.

The API server prunes every field its CRD's schema does not name, on each write and on each
read from etcd. A CRD rolled back under a new controller image (a Helm rollback of
``proxmox-network-crds`` alone; Flux with ``crds: Skip``) therefore drops the status fields
added since: a planner that compared the status it wants with the stored one would find them
missing on every pass and write again, forever, a write that never converges.

So the write's own answer (the object after pruning) is its read-back. :func:`missing` names
the fields written but not returned; when one of them is new, one dry-run write of the
status with every field of this controller's schema filled in (:func:`full_shape`) names
all the fields the server lacks at once. :class:`PrunedFields` keeps them per CRD, the
planners compare only what the server can hold (:func:`differs`), so a field the server
cannot hold never makes a write, and one Warning Event ``SchemaOutdated`` names them
(``controller.apply.executor``). Each full resync (``Manager.enqueue_all``) sends that dry-run again
for a CRD known outdated (one request, nothing stored): once the CRDs of this version are
applied it keeps every field, and every object of the kind writes its full status at once.

Everything here but :class:`PrunedFields` is a pure function of its arguments.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from informers.resource import Resource

STATUS = "status"

# One value of each top-level status field of this version's CRDs, valid against their schema
# (tests/test_crds.py holds the keys to the CRD files; the rollback test sends them to a real
# API server): the dry-run probe's filler for the fields a written status lacks. ``conditions``
# is left out: every status written carries it.
FULL_STATUS: dict[str, dict[str, Any]] = {
    "proxmoxnetworks": {
        "observedGeneration": 1, "vlan": 1, "vlanName": "probe", "bridge": "probe", "mtu": 1500,
        "cidr": "192.0.2.0/24", "gateway": "192.0.2.1", "prefix": 24,
        "ipPool": {"total": 0, "used": 0, "free": 0},
        "gatewayMtu": 1500, "servingChassis": "probe", "gatewayFailingSince": "1970-01-01T00:00:00Z",
    },
    "proxmoxnetworkzones": {
        "observedGeneration": 1, "totalVLANs": 0, "allocatedVLANs": 0, "freeVLANs": 0, "networks": 0,
        "vlansHeldForReuse": [{"vlan": 1, "until": "1970-01-01T00:00:00Z"}],
    },
}


def crd_name(resource: Resource) -> str:
    """``<plural>.<group>``, the CRD's name."""
    return f"{resource.plural}.{resource.group}"


def _walk(value: Any, path: str, out: list[str], other: Any = None, compare: bool = False) -> None:
    if isinstance(value, Mapping):
        if compare and not isinstance(other, Mapping):
            return  # another type came back: not a pruned field
        for key, v in value.items():
            if v is None:
                continue  # a null is dropped for a non-nullable field: no schema gap
            p = f"{path}.{key}"
            if compare and key not in other:
                out.append(p)
                continue
            if not compare:
                out.append(p)
            _walk(v, p, out, other[key] if compare else None, compare)
    elif isinstance(value, list):
        if compare and not (isinstance(other, list) and len(other) == len(value)):
            return
        for i, v in enumerate(value):
            _walk(v, path + "[]", out, other[i] if compare else None, compare)


def _unique(paths: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(paths))


def paths(status: Mapping[str, Any] | None, prefix: str = STATUS) -> tuple[str, ...]:
    """Every field path of ``status`` (``status.ipPool.used``; ``[]`` for the items of a
    list: ``status.conditions[].reason``), nulls left out."""
    out: list[str] = []
    _walk(status or {}, prefix, out)
    return _unique(out)


def missing(written: Mapping[str, Any] | None, returned: Mapping[str, Any] | None,
            prefix: str = STATUS) -> tuple[str, ...]:
    """The field paths of ``written`` that ``returned`` (the API server's answer to the write)
    lacks: pruned by a schema that does not name them. A field whose value came back with
    another type, a list of another length and a null written are not counted."""
    out: list[str] = []
    _walk(written or {}, prefix, out, returned or {}, compare=True)
    return _unique(out)


def _drop(value: Any, parts: list[str]) -> None:
    head, rest = parts[0], parts[1:]
    items = head.endswith("[]")
    key = head[:-2] if items else head
    if not isinstance(value, dict) or key not in value:
        return
    if not rest and not items:
        del value[key]
        return
    targets = value[key] if items and isinstance(value[key], list) else [value[key]]
    if not rest:
        return  # "a[]" alone names no field
    for t in targets:
        _drop(t, rest)


def held(status: Mapping[str, Any] | None, pruned: Iterable[str], prefix: str = STATUS) -> dict[str, Any]:
    """``status`` without the ``pruned`` paths: what the API server can hold of it."""
    out = copy.deepcopy(dict(status or {}))
    for p in pruned:
        if not p.startswith(prefix + "."):
            continue
        _drop(out, p[len(prefix) + 1:].split("."))
    return out


def differs(desired: Mapping[str, Any] | None, stored: Mapping[str, Any] | None, pruned: Iterable[str] = ()) -> bool:
    """The one decision of every status write: ``desired`` differs from ``stored`` in what the
    API server can hold (the ``pruned`` paths left out of both). A field the CRD cannot hold
    never makes a write."""
    pruned = tuple(pruned)
    if not pruned:
        return dict(desired or {}) != dict(stored or {})
    return held(desired, pruned) != held(stored, pruned)


def full_shape(plural: str, status: Mapping[str, Any] | None) -> dict[str, Any]:
    """``status`` with every top-level field of this version's schema it lacks filled in from
    :data:`FULL_STATUS` (for a dry-run write only: nothing of it is stored)."""
    out = dict(status or {})
    for key, value in FULL_STATUS.get(plural, {}).items():
        if out.get(key) is None:
            out[key] = copy.deepcopy(value)
    return out


def outdated_message(resource: Resource, fields: Iterable[str]) -> str:
    """The SchemaOutdated Event's message."""
    names = sorted(fields)
    verb, pronoun = ("is", "it") if len(names) == 1 else ("are", "them")
    return (f"{', '.join(names)} {verb} not in CRD {crd_name(resource)}; the server prunes {pronoun}: "
            "apply the CRDs of this controller's version")


@attrs.frozen
class Learned:
    """What one read-back taught :class:`PrunedFields`.

    :ivar new: pruned fields not known before (to be announced).
    :ivar fields: every field known pruned now, sorted.
    :ivar cleared: fields were known pruned before, none is now (the CRD was fixed).
    """

    new: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    cleared: bool = False


class PrunedFields:
    """The status fields each CRD's API server prunes, as its read-backs showed (thread-safe;
    memory is this process's: a new process learns again from its first writes).

    :param on_cleared: called with the resource when every field once pruned is held again.
    """

    def __init__(self, on_cleared: Callable[[Resource], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._known: dict[Resource, frozenset[str]] = {}
        self.on_cleared = on_cleared

    def of(self, resource: Resource) -> frozenset[str]:
        """The fields known pruned, which the planners leave out of the comparison."""
        with self._lock:
            return self._known.get(resource, frozenset())

    def outdated(self) -> list[Resource]:
        """The resources with fields known pruned (a resync probes them again)."""
        with self._lock:
            return [r for r, f in self._known.items() if f]

    def learn(self, resource: Resource, sent: Iterable[str], pruned: Iterable[str]) -> Learned:
        """Fold in one read-back: ``sent`` the paths written, ``pruned`` those missing from the
        answer. A path sent and returned is held (no longer pruned)."""
        sent_set, pruned_set = set(sent), set(pruned)
        with self._lock:
            before = self._known.get(resource, frozenset())
            now = frozenset((before - sent_set) | pruned_set)
            self._known[resource] = now
        learned = Learned(tuple(sorted(pruned_set - before)), tuple(sorted(now)), bool(before) and not now)
        if learned.cleared and self.on_cleared is not None:
            self.on_cleared(resource)
        return learned
