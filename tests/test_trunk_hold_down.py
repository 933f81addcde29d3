"""Field report R12: a trunk node that leaves the ready set stays in the groups for the
hold-down (controller.gateway.TrunkHoldDown); back at once; gone at once when the node or its
chassis goes. And the pass comes back when the hold-down ends (plan_network requeue)."""

from __future__ import annotations

from controller.gateway import TrunkHoldDown
from ovn.planner import CHASSIS_ANNOTATION, TrunkNode

A, B, C = TrunkNode("node-a", "ch-a"), TrunkNode("node-b", "ch-b"), TrunkNode("node-c", "ch-c")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def nodes(*present: TrunkNode, deleting: str = "") -> dict:
    out = {}
    for n in present:
        meta = {"name": n.name, "annotations": {CHASSIS_ANNOTATION: n.chassis}}
        if n.name == deleting:
            meta["deletionTimestamp"] = "2026-12-04T10:00:00Z"
        out[n.name] = {"metadata": meta}
    return out


def test_a_flap_shorter_than_the_hold_down_changes_nothing():
    clock = Clock()
    h = TrunkHoldDown(90, clock)
    cache = nodes(A, B, C)
    assert h.apply("pn", [A, B, C], cache.get) == ([A, B, C], None)
    clock.t += 5  # kube-ovn-cni restarts on node-b: its ready label is removed
    assert h.apply("pn", [A, C], cache.get) == ([A, B, C], 85.0)
    clock.t += 30  # and set again: a member as before
    assert h.apply("pn", [A, B, C], cache.get) == ([A, B, C], None)


def test_a_node_not_ready_for_the_whole_hold_down_leaves_then():
    clock = Clock()
    h = TrunkHoldDown(90, clock)
    cache = nodes(A, B, C)
    h.apply("pn", [A, B, C], cache.get)
    clock.t += 89.5
    assert h.apply("pn", [A, C], cache.get) == ([A, B, C], 0.5)
    clock.t += 0.5
    assert h.apply("pn", [A, C], cache.get) == ([A, C], None)
    clock.t += 1  # and stays out until it is ready again
    assert h.apply("pn", [A, C], cache.get) == ([A, C], None)
    assert h.apply("pn", [A, B, C], cache.get) == ([A, B, C], None)


def test_a_deleted_or_deleting_node_or_a_changed_chassis_leaves_at_once():
    clock = Clock()
    h = TrunkHoldDown(90, clock)
    h.apply("pn", [A, B, C], nodes(A, B, C).get)
    clock.t += 1
    assert h.apply("pn", [A, C], nodes(A, C).get) == ([A, C], None)  # Node deleted
    h.apply("pn", [A, B, C], nodes(A, B, C).get)
    assert h.apply("pn", [A, C], nodes(A, B, C, deleting="node-b").get) == ([A, C], None)
    h.apply("pn", [A, B, C], nodes(A, B, C).get)
    moved = nodes(A, TrunkNode("node-b", "ch-b2"), C)  # its chassis was replaced
    assert h.apply("pn", [A, C], moved.get) == ([A, C], None)
    h.apply("pn", [A, B, C], nodes(A, B, C).get)
    gone = nodes(A, B, C)
    del gone["node-b"]["metadata"]["annotations"][CHASSIS_ANNOTATION]
    assert h.apply("pn", [A, C], gone.get) == ([A, C], None)


def test_providers_are_apart_and_zero_turns_it_off():
    clock = Clock()
    h = TrunkHoldDown(90, clock)
    cache = nodes(A, B)
    h.apply("pn1", [A, B], cache.get)
    assert h.apply("pn2", [A], cache.get) == ([A], None)  # node-b was never pn2's
    off = TrunkHoldDown(0, clock)
    off.apply("pn1", [A, B], cache.get)
    assert off.apply("pn1", [A], cache.get) == ([A], None)


def test_a_node_never_seen_ready_by_this_process_is_not_held():
    h = TrunkHoldDown(90, Clock())
    assert h.apply("pn", [A], nodes(A, B).get) == ([A], None)
