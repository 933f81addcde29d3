"""The action -> effect contract (``controller.plan.actions``, ``controller.apply.executor``):
the executor's dispatch covers exactly the :data:`Action` union, metric actions are calls of
``controller.metrics.Metrics`` methods, log lines carry a checked level, and results fill the
snapshot field an :class:`Into` names or fail naming it."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Mapping
from typing import Any

import attrs
import pytest

from controller.apply.executor import Executor, dispatch
from controller.metrics import Metrics
from controller.plan import actions
from controller.plan.actions import (
    Action,
    BaseAction,
    ForgetOverlay,
    Get,
    Into,
    Level,
    Log,
    Metric,
    SetStuckHolders,
    SetZone,
)

UNION = set(typing.get_args(Action))


@attrs.frozen
class Snap:
    one: Any = None
    many: Mapping[str, Any] = attrs.field(factory=dict)


def test_the_action_union_lists_every_action_class():
    defined = {c for _, c in inspect.getmembers(actions, inspect.isclass)
               if issubclass(c, BaseAction) and attrs.has(c)}
    assert defined == UNION
    assert all(issubclass(c, BaseAction) for c in UNION)


def test_the_executor_has_one_handler_per_action_class():
    assert set(Executor.HANDLERS) == UNION


def test_a_dispatch_without_a_handler_for_an_action_class_is_refused():
    handlers = dict(Executor.HANDLERS)
    del handlers[ForgetOverlay]
    with pytest.raises(TypeError, match=r"no handler for \['ForgetOverlay'\]"):
        dispatch(handlers)


def test_a_dispatch_with_a_handler_for_a_class_outside_the_union_is_refused():
    with pytest.raises(TypeError, match=r"outside the Action union: \['Snap'\]"):
        dispatch({**Executor.HANDLERS, Snap: lambda ex, a, s: None})


def sample(cls: type) -> Any:
    """An instance of metric class ``cls`` with a value of each field's type."""
    values = {"str": "x", "int": 1, "bool": True, "bool | None": True, "int | str | None": 101,
              "Mapping[str, int] | None": {"total": 3, "used": 1, "free": 2}}
    return cls(**{f.name: values[str(f.type)] for f in attrs.fields(cls)})


@pytest.mark.parametrize("cls", sorted((c for c in UNION if issubclass(c, Metric)), key=lambda c: c.__name__))
def test_each_metric_action_is_one_call_of_its_metrics_method(cls):
    method = "".join("_" + ch.lower() if ch.isupper() else ch for ch in cls.__name__).lstrip("_")
    calls: list[tuple[str, tuple[Any, ...]]] = []

    rec = Metrics()
    real = getattr(rec, method)
    setattr(rec, method, lambda *args: (calls.append((method, args)), real(*args)))
    a = sample(cls)
    assert Executor(None, None, metrics=rec)(a, "snapshot") == "snapshot"  # type: ignore[arg-type]
    assert calls == [(method, tuple(getattr(a, f.name) for f in attrs.fields(cls)))]


def test_metric_actions_set_the_series_they_name():
    m = Metrics()
    ex = Executor(None, None, metrics=m)  # type: ignore[arg-type]
    ex(SetZone("zone-a", 9, 2, 4, 4, 0), None)
    ex(SetStuckHolders("tenant-a", "net-a", 3), None)
    assert m.registry.get_sample_value("cozy_proxmox_zone_vlans_total", {"zone": "zone-a"}) == 9
    assert m.registry.get_sample_value("cozy_proxmox_network_stuck_holders",
                                       {"namespace": "tenant-a", "network": "net-a"}) == 3


def test_a_log_line_takes_a_level_not_a_name():
    assert Log(Level.WARNING, "e").level is Level.WARNING
    with pytest.raises(TypeError):
        Log("warning", "e")  # type: ignore[arg-type]


def test_into_fills_a_field_or_one_key_of_a_mapping_field():
    s = Snap(many={"a": 1})
    assert Into("one").fill(s, 5) == Snap(one=5, many={"a": 1})
    assert Into("many", "b").fill(s, 2) == Snap(many={"a": 1, "b": 2})
    assert s == Snap(many={"a": 1})  # the snapshot is a value: a copy is filled
    assert (str(Into("one")), str(Into("many", "b"))) == ("one", "many[b]")


def test_into_a_field_the_snapshot_lacks_fails_naming_it():
    with pytest.raises(TypeError, match=r"Snap has no field 'fresh' to fill \(into fresh\[v1\]\)"):
        Into("fresh", "v1").fill(Snap(), None)
    with pytest.raises(TypeError, match=r"Snap.one is not a mapping: cannot fill one\[k\]"):
        Into("one", "k").fill(Snap(), None)


def test_a_read_folds_its_result_into_its_field():
    class Reader:
        def get(self, resource, name, namespace):
            return {"metadata": {"name": name}}

    a = Get(None, "v1", None, Into("many", "v1"))  # type: ignore[arg-type]
    assert Executor(Reader(), None)(a, Snap()) == Snap(many={"v1": {"metadata": {"name": "v1"}}})  # type: ignore[arg-type]
