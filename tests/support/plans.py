"""An in-test plan driver for the pure planners (``plan_network``, ``plan_zone``), no server.

:func:`drive` stands in for ``controller.apply.executor.run`` and :func:`fold` for its
``controller.apply.executor.Executor``: a requested read is answered from a dict of canned fresh
values keyed by the action's ``into``, a write's result is folded into the snapshot with
``controller.apply.executor.fill``, and an action already applied in the pass is not applied again.
The driver is generic over the snapshot type; what a kind's own actions fold to is that
test file's ``fold``, passed in (falling back to :func:`fold`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import attrs

from controller import names
from controller.plan.actions import (
    Get,
    Plan,
    PruneReleasedVlans,
    ReleaseVlan,
    SetPoolCidrs,
    SetPruneTimers,
    SplitListed,
    WriteStatus,
)
from controller.apply.executor import fill

S = TypeVar("S")

Fold = Callable[[Any, Any, Mapping[str, Any]], Any]


@attrs.frozen
class Pass(Generic[S]):
    """What one driven pass left: the last snapshot, every plan, every action applied."""

    snapshot: S
    plans: tuple[Plan, ...]
    applied: tuple[Any, ...]

    @property
    def last(self) -> Plan:
        return self.plans[-1]

    def of(self, kind):
        return [a for a in self.applied if isinstance(a, kind)]

    @property
    def status(self) -> dict[str, Any]:
        """The status the pass wrote (the last WriteStatus)."""
        writes = self.of(WriteStatus)
        assert writes, "the pass wrote no status"
        return writes[-1].status

    def cond(self, ctype):
        return next((c for c in self.status.get("conditions") or [] if c["type"] == ctype), None)

    def crm(self, ctype):
        c = self.cond(ctype)
        assert c is not None, f"no {ctype} condition"
        return c["status"], c["reason"], c["message"]

    def index(self, pred) -> int:
        return next(i for i, a in enumerate(self.applied) if pred(a))


def with_annotation(obj, key, value):
    """A copy of ``obj`` with annotation ``key`` set to ``value`` (removed when None)."""
    out = copy.deepcopy(dict(obj))
    ann = dict(out["metadata"].get("annotations") or {})
    if value is None:
        ann.pop(key, None)
    else:
        ann[key] = value
    out["metadata"]["annotations"] = ann
    return out


def fold(s, a, canned: Mapping[str, Any]):
    """What the executor would fill for an action every planner plans (reads from ``canned``);
    any other action leaves ``s`` as it is."""
    if isinstance(a, (Get, SplitListed)):
        return fill(s, a.into, canned[a.into])
    if isinstance(a, SetPruneTimers):
        return fill(s, a.into, with_annotation(a.vlan, names.ANNOTATION_DELETED_SUBNETS, a.value))
    if isinstance(a, SetPoolCidrs):
        return fill(s, a.into, with_annotation(a.vlan, names.ANNOTATION_POOL_CIDRS, a.value))
    if isinstance(a, ReleaseVlan):
        return fill(s, a.into, True)
    if isinstance(a, PruneReleasedVlans):
        return fill(s, a.into, with_annotation(a.zone, names.ANNOTATION_RELEASED_VLANS, a.value))
    if isinstance(a, WriteStatus):
        return fill(s, a.into, {**copy.deepcopy(dict(a.obj)), "status": copy.deepcopy(dict(a.status))})
    return s


def drive(
    planner: Callable[[S], Plan],
    s: S,
    canned: Mapping[str, Any] | None = None,
    *,
    fold: Fold = fold,
    result: type[Pass[Any]] = Pass,
    limit: int = 40,
) -> Any:
    """Plan ``s``, fold each new action with ``fold``, and plan again until a plan does not
    ask to replan; the pass as a ``result`` (:class:`Pass` or a kind's subclass of it)."""
    canned = canned or {}
    applied: list[Any] = []
    plans: list[Plan] = []
    for _ in range(limit):
        plan = planner(s)
        plans.append(plan)
        for a in plan.actions:
            if a in applied:
                continue
            applied.append(a)
            s = fold(s, a, canned)
        if not plan.replan:
            return result(s, tuple(plans), tuple(applied))
    raise AssertionError(f"no settled plan after {limit} plans")
