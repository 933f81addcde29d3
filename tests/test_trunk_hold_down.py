"""Field report R12: a trunk node that leaves the ready set stays in the groups for the
hold-down (controller.apply.gateway.TrunkHoldDown); back at once; gone at once when the node or its
chassis goes. And the pass comes back when the hold-down ends (plan_network requeue)."""

from __future__ import annotations

from controller.apply.gateway import TrunkHoldDown
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


# --------------------------------------------------------------------------- a state machine

from hypothesis import settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule  # noqa: E402

HOLD = 90.0
NAMES = ("node-a", "node-b", "node-c", "node-d")
node_name = st.sampled_from(NAMES)


class Flaps(RuleBasedStateMachine):
    """R12's rules as a model, against the real TrunkHoldDown: ready-label flaps, Node
    deletions and chassis replacements of four nodes, time passing; a pass (``apply``)
    after every event, as the controller makes one for every Node event. The model keeps,
    per node, when a pass last saw it ready and with which chassis; the issue's rules say
    which nodes are members: every ready node; a node out of the ready set while it has
    been out for less than the hold-down, still exists, is not deleting and has the chassis
    it had when last ready; nothing else."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.h = TrunkHoldDown(HOLD, self.clock)
        self.gen = 0
        self.cache: dict[str, dict] = {}
        self.ready: set[str] = set()
        self.last_ready: dict[str, tuple[float, str]] = {}  # name -> (time of the pass, chassis)
        self.members: list[TrunkNode] = []
        self.changes = 0  # membership changes, for the flap invariant
        for n in NAMES:
            self._make(n)
            self.ready.add(n)
        self._pass()

    def _make(self, name: str) -> None:
        self.gen += 1
        self.cache[name] = {"metadata": {"name": name, "annotations": {CHASSIS_ANNOTATION: f"ch-{name}-{self.gen}"}}}

    def _chassis(self, name: str) -> str | None:
        meta = (self.cache.get(name) or {}).get("metadata") or {}
        return (meta.get("annotations") or {}).get(CHASSIS_ANNOTATION)

    def _ready_nodes(self) -> list[TrunkNode]:
        return sorted((TrunkNode(n, self._chassis(n)) for n in self.ready
                       if n in self.cache and self._chassis(n) and not self.cache[n]["metadata"].get("deletionTimestamp")),
                      key=lambda t: t.name)

    def _expected(self, ready: list[TrunkNode]) -> list[TrunkNode]:
        now, names_ = self.clock(), {t.name for t in ready}
        held = []
        for name, (at, chassis) in list(self.last_ready.items()):
            if name in names_:
                continue
            meta = (self.cache.get(name) or {}).get("metadata")
            if now - at < HOLD and meta and not meta.get("deletionTimestamp") and self._chassis(name) == chassis:
                held.append(TrunkNode(name, chassis))
            else:
                del self.last_ready[name]  # gone: held again only after it is ready again
        return sorted(ready + held, key=lambda t: t.name)

    def _pass(self) -> None:
        ready = self._ready_nodes()
        got, recheck = self.h.apply("pn", ready, self.cache.get)
        for t in ready:
            self.last_ready[t.name] = (self.clock(), t.chassis)
        assert got == self._expected(ready)
        held = [t for t in got if t not in ready]
        assert (recheck is None) == (not held)  # a held node always brings the pass back
        if got != self.members:
            self.changes += 1
        self.members = got

    @rule(name=node_name)
    def ready_label_removed(self, name):  # kube-ovn-cni restarting on the node
        self.ready.discard(name)
        self._pass()

    @rule(name=node_name)
    def ready_label_set(self, name):
        self.ready.add(name)
        self._pass()

    @rule(name=node_name, deleting=st.booleans())
    def node_deleted(self, name, deleting):
        if name not in self.cache:
            return
        if deleting:
            self.cache[name]["metadata"]["deletionTimestamp"] = "2026-12-04T10:00:00Z"
        else:
            del self.cache[name]
        self._pass()

    @rule(name=node_name)
    def node_comes_back_or_its_chassis_is_replaced(self, name):
        self._make(name)
        self._pass()

    @rule(seconds=st.sampled_from([1.0, 30.0, 59.5, 89.9, 90.0, 120.0]))
    def time_passes(self, seconds):
        self.clock.t += seconds
        self._pass()

    @invariant()
    def every_ready_node_is_a_member_and_no_chassis_twice(self):
        assert set(self._ready_nodes()) <= set(self.members)
        chassis = [t.chassis for t in self.members]
        assert len(chassis) == len(set(chassis))


Flaps.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
TestFlaps = Flaps.TestCase


def test_flaps_shorter_than_the_hold_down_never_change_the_members():
    """The issue's measure (0 NB writes for flips shorter than the hold-down): any sequence
    of removals and re-additions of ready labels, each node out for less than the hold-down,
    leaves the membership (so the planned groups) as it was."""
    clock = Clock()
    h = TrunkHoldDown(HOLD, clock)
    cache = nodes(A, B, C)
    first, _ = h.apply("pn", [A, B, C], cache.get)
    for step in range(50):
        out = [A, B, C][step % 3]
        clock.t += 10
        assert h.apply("pn", [n for n in (A, B, C) if n != out], cache.get)[0] == first
        clock.t += 79  # out for 79 s < 90 s
        assert h.apply("pn", [A, B, C], cache.get)[0] == first
