"""An in-test plan driver for the pure planners (``plan_network``, ``plan_zone``), no server.

:func:`drive` runs a pass with the product's loop, ``controller.apply.executor.run``, and the
product's folding (each action's ``fold``); only the world is canned: :func:`answer` stands
in for the executor's handlers and gives the result each action would get. A requested read
is answered from a dict of canned fresh values keyed by the action's ``into`` as written
(``fresh_vlan``, ``owners[v1]``), a write by the object it would leave. What a kind's own
actions answer is that test file's ``answer``, passed in (falling back to :func:`answer`).
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
from controller.apply.executor import run

S = TypeVar("S")

# (action, snapshot, canned) -> the action's result
Answer = Callable[[Any, Any, Mapping[str, Any]], Any]


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


def answer(a, s, canned: Mapping[str, Any]) -> Any:
    """What the executor's handler would return for an action every planner plans (reads
    from ``canned``); None for any other action."""
    if isinstance(a, (Get, SplitListed)):
        return canned[str(a.into)]
    if isinstance(a, SetPruneTimers):
        return with_annotation(a.vlan, names.ANNOTATION_DELETED_SUBNETS, a.value)
    if isinstance(a, SetPoolCidrs):
        return with_annotation(a.vlan, names.ANNOTATION_POOL_CIDRS, a.value)
    if isinstance(a, ReleaseVlan):
        return True
    if isinstance(a, PruneReleasedVlans):
        return with_annotation(a.zone, names.ANNOTATION_RELEASED_VLANS, a.value)
    if isinstance(a, WriteStatus):
        return {**copy.deepcopy(dict(a.obj)), "status": copy.deepcopy(dict(a.status))}
    return None


def drive(
    planner: Callable[[S], Plan],
    s: S,
    canned: Mapping[str, Any] | None = None,
    *,
    answer: Answer = answer,
    result: type[Pass[Any]] = Pass,
) -> Any:
    """A pass over ``s`` as ``controller.apply.executor.run`` runs it, each action's result
    given by ``answer`` and folded by the action; the pass as a ``result`` (:class:`Pass`
    or a kind's subclass of it)."""
    canned = canned or {}
    plans: list[Plan] = []
    applied: list[Any] = []
    last = [s]

    def planning(snapshot: S) -> Plan:
        plans.append(planner(snapshot))
        return plans[-1]

    def apply(a: Any, snapshot: S) -> S:
        applied.append(a)
        last[0] = a.fold(snapshot, answer(a, snapshot, canned))
        return last[0]

    run(planning, s, apply)
    return result(last[0], tuple(plans), tuple(applied))
