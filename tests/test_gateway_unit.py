"""The NB failure grace (reference-behaviour.md §9.5, start kept in the object per
product-decisions.md §4.6), the Node event predicate and mapping (§9.7), the requeue
table (§5.10)."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.plan.actions import Event
from controller.watch.indexes import gateway_key, networks_for_node, node_index_provider, node_providers
from controller.plan.gateway import NB_GRACE_PERIOD, GatewayOutcome, gateway_failed, gateway_status
from controller.plan.network_status import requeue_after
from ovn import nb_plan, planner
from tests.support.gateway import FAILOVER_NOTE

T0 = dt.datetime(2026, 10, 7, 8, 0, 0, tzinfo=dt.timezone.utc)
LRP = "vpc-x-sub"
GRACE = dt.timedelta(seconds=NB_GRACE_PERIOD)


def cond(status, reason, message="m", ltt="2026-10-07T07:00:00Z"):
    return {"type": "GatewayReady", "status": status, "reason": reason, "message": message,
            "lastTransitionTime": ltt}


READY_TRUE = {"type": "Ready", "status": "True", "reason": "Ready"}
READY_FALSE = {"type": "Ready", "status": "False", "reason": "Pending"}


def test_true_network_is_kept_exactly_within_the_grace():
    prev = cond("True", "ChassisAssigned", "router port has a group")
    f = gateway_failed(T0, prev, READY_TRUE, None, "connection refused", LRP)
    assert f.keep_previous and (f.status, f.reason, f.message) == ("True", "ChassisAssigned", "router port has a group")
    assert f.since == T0


def test_true_network_fails_at_the_deadline_of_the_recorded_start():
    prev = cond("True", "ChassisAssigned")
    since = T0 - GRACE
    f = gateway_failed(T0, prev, READY_TRUE, since, "connection refused", LRP)
    assert (f.status, f.reason) == ("False", "NBUnavailable")
    assert f.message == (
        f'could not bring the HA chassis group of router port "{LRP}" up to date in OVN NB since '
        "2026-10-07T07:50:00Z: connection refused")
    # One second earlier it was still kept (the recorded start decides, not this process).
    assert gateway_failed(T0 - dt.timedelta(seconds=1), prev, READY_TRUE, since, "x", LRP).keep_previous


def test_unknown_grace_is_timed_from_the_condition_transition():
    ltt = T0 - dt.timedelta(minutes=4)
    prev = cond("Unknown", "NBUnavailable", ltt=ltt.strftime("%Y-%m-%dT%H:%M:%SZ"))
    f = gateway_failed(T0, prev, READY_TRUE, None, "refused", LRP)
    deadline = ltt + GRACE
    assert (f.status, f.reason, f.since) == ("Unknown", "NBUnavailable", ltt)
    assert f.message == (
        f"OVN NB has not answered since {ltt.strftime('%Y-%m-%dT%H:%M:%SZ')}, so the HA chassis group of router "
        f'port "{LRP}" is not known; the network stays Ready until {deadline.strftime("%Y-%m-%dT%H:%M:%SZ")}: refused')
    f = gateway_failed(ltt + GRACE, prev, READY_TRUE, None, "refused", LRP)
    assert (f.status, f.reason) == ("False", "NBUnavailable")


def test_management_just_switched_on_counts_ready_as_up():
    for prev in (None, cond("Unknown", "Disabled")):
        up = gateway_failed(T0, prev, READY_TRUE, None, "e", LRP)
        assert (up.status, up.reason) == ("Unknown", "NBUnavailable")
        down = gateway_failed(T0, prev, READY_FALSE, None, "e", LRP)
        assert (down.status, down.reason) == ("False", "NBUnavailable")


def test_never_up_fails_at_once():
    for prev in (cond("False", "RouterPortMissing"), cond("False", "NBUnavailable"),
                 cond("Unknown", "SubnetUnavailable"), cond("Unknown", "WaitingForVLAN"),
                 cond("False", "ForeignGroup")):
        f = gateway_failed(T0, prev, READY_TRUE, None, "e", LRP)
        assert (f.status, f.reason, f.keep_previous) == ("False", "NBUnavailable", False)


@given(st.integers(min_value=0, max_value=3 * int(NB_GRACE_PERIOD)),
       st.integers(min_value=0, max_value=3 * int(NB_GRACE_PERIOD)))
def test_grace_never_extends_past_the_first_failure(first_offset, later):
    """Whatever pass happens when, a once-Ready network is down exactly from since+grace."""
    since = T0 + dt.timedelta(seconds=first_offset)
    now = since + dt.timedelta(seconds=later)
    f = gateway_failed(now, cond("True", "ChassisAssigned"), READY_TRUE, since, "e", LRP)
    assert f.keep_previous == (later < NB_GRACE_PERIOD)
    assert f.since == since


def node(labels=None, chassis=None, deleting=False):
    meta = {"name": "n1", "labels": labels or {}, "annotations": {}}
    if chassis is not None:
        meta["annotations"]["ovn.kubernetes.io/chassis"] = chassis
    if deleting:
        meta["deletionTimestamp"] = "2026-10-07T08:00:00Z"
    return {"metadata": meta}


READY = "physnet1.provider-network.kubernetes.io/ready"


def test_node_predicate_and_mapping():
    zones = [{"metadata": {"name": "z1"}, "spec": {"providerNetwork": "physnet1"}},
             {"metadata": {"name": "z2"}, "spec": {"providerNetwork": "other"}}]
    by_zone = {"z1": ["ns/a", "ns/b"], "z2": ["ns/c"]}
    m = lambda old, new: networks_for_node(old, new, zones, lambda z: by_zone[z])  # noqa: E731
    base = node({READY: "true", "team": "x"}, "ch1")
    assert m(None, base) == ["ns/a", "ns/b"]  # create
    assert m(base, None) == ["ns/a", "ns/b"]  # delete
    assert m(base, node({READY: "true", "team": "y"}, "ch1")) == []  # unrelated label
    assert m(base, node({READY: "false", "team": "x"}, "ch1")) == ["ns/a", "ns/b"]  # ready flipped
    assert m(base, node({"team": "x"}, "ch1")) == ["ns/a", "ns/b"]  # label removed: old still maps
    assert m(base, node({READY: "true", "team": "x"}, "ch2")) == ["ns/a", "ns/b"]  # chassis changed
    assert m(base, node({READY: "true", "team": "x"}, "ch1", deleting=True)) == ["ns/a", "ns/b"]
    assert m(None, node({"team": "x"}, "ch1")) == []  # not a trunk node of any provider
    assert gateway_key(base) == (f"{READY}=true|ch1", False)


def test_provider_index_only_counts_ready_true():
    assert node_index_provider(node({READY: "true"})) == ["physnet1"]
    assert node_index_provider(node({READY: "false"})) == []
    assert node_providers(node({READY: "false"})) == {"physnet1"}
    assert node_providers(node({".provider-network.kubernetes.io/ready": "true"})) == set()


def test_requeue_table():
    assert requeue_after(False, {}) == 600
    assert requeue_after(True, {"gatewayFailingSince": "2026-10-07T08:00:00Z"}) == 30
    for r in ("NBUnavailable", "RouterPortMissing"):
        assert requeue_after(True, {"conditions": [cond("False", r)]}) == 30
    assert requeue_after(True, {"conditions": [cond("True", "ChassisAssigned")]}) == 300
    assert requeue_after(True, {"conditions": [cond("False", "NoTrunkNodes")]}) == 300


NET = {"metadata": {"namespace": "tenant", "name": "net", "uid": "u"}}


@pytest.mark.parametrize("count, writes, warned", [
    (2, {"created": True}, True),
    (1, {"updated": True}, True),
    (2, {"adopted": True}, True),
    (3, {"created": True}, False),   # three chassis fail over
    (2, {}, False),                  # nothing written this pass: no new Event
])
def test_a_group_of_fewer_than_three_chassis_written_is_a_warning_event(count, writes, warned):
    """Issue 25: a group written with 1 or 2 chassis is a Warning ``GatewayWithoutFailover``
    (once per write, not per pass), its message the note of the ChassisAssigned message."""
    chassis = [(f"c{i}", 100 - 10 * i) for i in range(count)]
    msg = planner.assigned_message(LRP, f"px-{LRP}", chassis)
    state = nb_plan.GatewayState(nb_plan.CHASSIS_ASSIGNED, msg, count, **writes)
    out, _ = gateway_status(GatewayOutcome(state), NET, LRP, {}, [], {}, 3, T0)
    warnings = [a for a in out if isinstance(a, Event) and a.reason == "GatewayWithoutFailover"]
    if warned:
        assert [(w.type, w.message) for w in warnings] == [
            ("Warning", f'router port "{LRP}" has a gateway of {count} chassis{FAILOVER_NOTE[count]}')]
    else:
        assert warnings == []


# -- the gateway as it serves (product-decisions.md §10) ------------------------------------

from controller.rules.conditions import compute_ready  # noqa: E402
from controller.plan.gateway import SERVING_SETTLE, serving
from ovn.sb import Binding  # noqa: E402

MEMBERS = ("ch-a", "ch-b", "ch-c")
ASSIGNED = nb_plan.GatewayState(nb_plan.CHASSIS_ASSIGNED, "group msg", 3, members=MEMBERS)


def test_bound_to_a_member_serves_and_names_the_chassis_and_node():
    sv = serving(Binding(True, True, "ch-b", "pve-2", T0), ASSIGNED, LRP, None, T0)
    assert (sv.status, sv.reason, sv.chassis) == ("True", "ChassisAssigned", "ch-b")
    assert sv.message == 'group msg; chassis "ch-b" (node pve-2) serves it'


@pytest.mark.parametrize("binding,why", [
    (Binding(True, True, "", "", T0), "cr-vpc-x-sub is bound to no chassis"),
    (Binding(True, False, "", "", T0), "OVN SB has no chassis-redirect port cr-vpc-x-sub"),
    (Binding(True, True, "ch-z", "other", T0), 'bound to chassis "ch-z", which is not in HA chassis group'),
])
def test_nothing_serving_past_the_settle_is_false_with_its_own_reason(binding, why):
    now = T0 + dt.timedelta(seconds=SERVING_SETTLE)
    sv = serving(binding, ASSIGNED, LRP, cond("True", "ChassisAssigned"), now)
    assert (sv.status, sv.reason, sv.chassis, sv.keep_previous) == ("False", "NoServingChassis", "", False)
    assert sv.message.startswith(f'nothing serves router port "{LRP}" since 2026-10-07T08:00:00Z')
    assert why in sv.message


def test_a_failover_in_progress_keeps_a_serving_gateway_until_the_settle_ends():
    now = T0 + dt.timedelta(seconds=2)
    prev = cond("True", "ChassisAssigned", "was served")
    sv = serving(Binding(True, True, "", "", T0), ASSIGNED, LRP, prev, now)
    assert (sv.status, sv.reason, sv.message, sv.keep_previous) == ("True", "ChassisAssigned", "was served", True)
    assert sv.chassis == ""  # nothing recorded: status.servingChassis left as it is
    assert sv.recheck == pytest.approx(SERVING_SETTLE - 2)


def test_a_new_group_says_what_the_nb_holds_until_the_settle_ends():
    # A new group: northd has not made cr- yet; no Warning on every creation.
    sv = serving(Binding(True, False, "", "", T0), ASSIGNED, LRP, None, T0 + dt.timedelta(seconds=1))
    assert (sv.status, sv.reason, sv.message, sv.chassis) == ("True", "ChassisAssigned", "group msg", "")
    assert sv.recheck == pytest.approx(SERVING_SETTLE - 1)
    late = serving(Binding(True, False, "", "", T0), ASSIGNED, LRP, None, T0 + dt.timedelta(seconds=SERVING_SETTLE))
    assert (late.status, late.reason) == ("False", "NoServingChassis")


def test_a_member_that_just_left_still_holding_the_port_is_let_pass_from_the_group_write():
    # The group written without ch-z a second ago; OVN has not moved cr- yet.
    old_claim = T0 - dt.timedelta(days=2)
    written = T0 - dt.timedelta(seconds=1)
    prev = cond("True", "ChassisAssigned", "was served")
    sv = serving(Binding(True, True, "ch-z", "gone", old_claim), ASSIGNED, LRP, prev, T0, written_at=written)
    assert (sv.status, sv.keep_previous) == ("True", True)
    assert sv.recheck == pytest.approx(SERVING_SETTLE - 1)


def test_an_sb_outage_keeps_a_known_outage_false():
    # Ready must not turn True because the SB went away while nothing served.
    prev = cond("False", "NoServingChassis", "nothing serves")
    sv = serving(Binding(False, since=T0, error="lost"), ASSIGNED, LRP, prev, T0)
    assert (sv.status, sv.reason, sv.keep_previous) == ("False", "NoServingChassis", True)


def test_an_nb_failure_after_an_sb_outage_keeps_the_nb_grace():
    f = gateway_failed(T0, cond("Unknown", "SBUnavailable"), READY_TRUE, None, "boom", LRP)
    assert (f.status, f.reason) == ("Unknown", "NBUnavailable")


def test_the_outage_start_survives_a_restart():
    prev = cond("False", "NoServingChassis", ltt="2026-10-07T07:30:00Z")
    sv = serving(Binding(True, True, "", "", T0), ASSIGNED, LRP, prev, T0 + dt.timedelta(seconds=30))
    assert "since 2026-10-07T07:30:00Z" in sv.message


def test_an_unknown_sb_is_unknown_and_never_decides_ready():
    lost = T0 - dt.timedelta(seconds=40)
    sv = serving(Binding(False, since=lost, error="connection refused"), ASSIGNED, LRP, cond("True", "ChassisAssigned"), T0)
    assert (sv.status, sv.reason, sv.chassis) == ("Unknown", "SBUnavailable", "")
    assert "since 2026-10-07T07:59:20Z" in sv.message and sv.message.endswith("connection refused")
    conds = [{"type": t, "status": "True", "reason": "x"} for t in ("VLANAllocated", "SubnetReady", "IPPoolReady")]
    conds.append({"type": "GatewayReady", "status": "Unknown", "reason": "SBUnavailable"})
    compute_ready(conds, 1, lambda: T0)
    assert [c for c in conds if c["type"] == "Ready"][0]["status"] == "True"
    next(c for c in conds if c["type"] == "GatewayReady").update(
        status="False", reason="NoServingChassis", message="nothing serves")
    compute_ready(conds, 1, lambda: T0)
    ready = [c for c in conds if c["type"] == "Ready"][0]
    assert (ready["status"], ready["reason"]) == ("False", "NoServingChassis")


def test_gateway_status_writes_the_serving_chassis_and_a_moved_event():
    net = {"metadata": {"namespace": "ns", "name": "net", "uid": "u"}}
    status: dict = {}
    conds: list = []
    old = {"servingChassis": "ch-a", "conditions": [cond("True", "ChassisAssigned")]}
    out, recheck = gateway_status(GatewayOutcome(ASSIGNED), net, LRP, status, conds, old, 3, T0,
                                  binding=Binding(True, True, "ch-b", "pve-2", T0))
    assert status["servingChassis"] == "ch-b" and recheck is None
    assert [(e.type, e.reason) for e in out if isinstance(e, Event)] == [("Normal", "GatewayMoved")]
    conds = []
    out, _ = gateway_status(GatewayOutcome(ASSIGNED), net, LRP, {}, conds, old, 3, T0 + dt.timedelta(seconds=9),
                            binding=Binding(True, True, "", "", T0))
    assert [(c["status"], c["reason"]) for c in conds] == [("False", "NoServingChassis")]
    # The pass drops servingChassis then: tests/test_plan_network.py, the serving chassis tests.


def test_the_serving_series_follow_the_status_whatever_step_wrote_it():
    from controller.plan.network_status import serving_series

    assigned = {"type": "GatewayReady", "status": "True", "reason": "ChassisAssigned"}
    assert serving_series({"servingChassis": "ch-a"}, assigned) == (True, "ch-a")
    assert serving_series({}, assigned) == (None, "")  # the SB not read
    assert serving_series({}, {"status": "False", "reason": "NoServingChassis"}) == (False, "")
    for other in ("SBUnavailable", "WaitingForVLAN", "SubnetUnavailable", "NBUnavailable"):
        assert serving_series({"servingChassis": "ch-a"}, {"status": "Unknown", "reason": other}) == (None, "")


def test_a_holder_seen_within_the_settle_time_of_the_groups_write_is_left_out_until_it_ends():
    """OVN settles a group just written (its members claim cr- in turn until BFD is up): a
    holder seen then does not reorder the group; after the settle time it is kept on top."""
    from controller.plan.gateway import settled_serving

    t0 = dt.datetime(2026, 12, 6, 9, 0, tzinfo=dt.timezone.utc)
    assert settled_serving("ch-b", t0, t0 + dt.timedelta(seconds=1), 5.0) == ("", 4.0)
    assert settled_serving("ch-b", t0, t0 + dt.timedelta(seconds=5), 5.0) == ("ch-b", None)
    assert settled_serving("ch-b", None, t0, 5.0) == ("ch-b", None)  # never written by this process
    assert settled_serving("", t0, t0, 5.0) == ("", None)


def test_a_holder_left_out_for_the_settle_time_brings_the_pass_back_when_it_ends():
    """The holder OVN shows (ch-b) is not on top because the group was just written: the pass
    comes back when the settle time ends (``deferred``), so the holder is raised then."""
    net = {"metadata": {"namespace": "ns", "name": "net", "uid": "u"}}
    state = nb_plan.GatewayState("ChassisAssigned", "msg", 2, members=("ch-a", "ch-b"))
    old = {"conditions": [cond("True", "ChassisAssigned")]}
    b = Binding(True, True, "ch-b", "pve-2", T0)
    _, recheck = gateway_status(GatewayOutcome(state, deferred=3.5), net, LRP, {}, [], old, 3, T0, binding=b)
    assert recheck == 3.5
    # The holder already on top, or nothing deferred: no early pass.
    on_top = nb_plan.GatewayState("ChassisAssigned", "msg", 2, members=("ch-b", "ch-a"))
    assert gateway_status(GatewayOutcome(on_top, deferred=3.5), net, LRP, {}, [], old, 3, T0, binding=b)[1] is None
    assert gateway_status(GatewayOutcome(state), net, LRP, {}, [], old, 3, T0, binding=b)[1] is None


class _Applier:
    """The NB writer's surface GatewayStep.ensure uses, recording what it is asked."""

    def __init__(self, written_at):
        self.calls: list = []
        self._written_at = written_at

    def ensure(self, key, vpc, subnet, trunk, siblings, serving, mtu):
        self.calls.append((serving, mtu))
        return nb_plan.GatewayState("ChassisAssigned", "msg", 1, members=("ch-a",), mtu=mtu)

    def written_at(self, lrp):
        return self._written_at


@pytest.mark.parametrize("written_ago, failback, serving", [
    (60.0, False, "ch-b"),  # written long ago: the holder is kept on top
    (1.0, False, ""),  # written a second ago: OVN still settles it
    (60.0, True, ""),  # failback: never kept
])
def test_the_gateway_step_hands_the_writer_the_settled_holder_and_the_bounded_mtu(written_ago, failback, serving):
    from controller.apply.gateway import GatewayStep

    written = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=written_ago)
    applier = _Applier(written)
    step = GatewayStep(applier, None, None, None, failback=failback, overlay_mtu=1400)  # type: ignore[arg-type]
    outcome = step.ensure("ns/net", "vpc", "sub", [], frozenset(), "ch-b", 1450)
    assert applier.calls == [(serving, 1400)]
    assert outcome.state.mtu == 1400
    assert (outcome.deferred is not None) == (written_ago < 5.0 and not failback)
    step.ensure("ns/net", "vpc", "sub", [], frozenset(), "ch-b", None)
    assert applier.calls[-1][1] == 1400  # no zone mtu: min(1500, 1400)


@pytest.mark.parametrize("text, want", [
    ("OVN NB IDL is not synced: tcp:10.0.0.1:6641: connect: Connection refused", "connection"),
    ("ssl:10.0.0.1:6641: TLS handshake: [SSL: TLSV1_ALERT_UNKNOWN_CA] tlsv1 alert unknown ca", "tls"),
    ('OVN TLS secret cozy-kubeovn/kube-ovn-tls has no "cacert" key', "tls"),
    ("OVN NB IDL is not synced: ssl:10.0.0.1:6641: TLS handshake: OVN NB certificate: unable to get local issuer certificate", "tls"),
    ("ovsdb transact: constraint violation", "write"),
])
def test_nb_failures_have_a_class(text, want):
    from controller.plan.gateway import failure_class

    assert failure_class(text) == want


def test_an_nb_failure_that_changes_class_is_posted_again_naming_the_current_cause():
    """Field reports, fourth round, O6: NB refused while down, then back and refusing the
    rotated client certificate: a second NBUnavailable Event names the TLS cause; a class the
    outage already showed posts nothing (the Events stand)."""
    net = {"metadata": {"namespace": "ns", "name": "net", "uid": "u"}}
    old = {"gatewayFailingSince": "2026-12-06T08:59:00Z", "conditions": [cond("True", "ChassisAssigned")]}
    tls = "OVN NB IDL is not synced: ssl:nb:6641: TLS handshake: tlsv1 alert unknown ca"
    out, _ = gateway_status(GatewayOutcome(error=tls, announced=frozenset({"connection"})), net, LRP, {}, [], old, 3, T0)
    (e,) = [e for e in out if isinstance(e, Event)]
    assert (e.type, e.reason) == ("Warning", "NBUnavailable")
    assert e.message == f'OVN NB still unavailable for router port "{LRP}", now the TLS handshake or the TLS Secret fails: {tls}'
    again, _ = gateway_status(GatewayOutcome(error=tls, announced=frozenset({"tls"})), net, LRP, {}, [], old, 3, T0)
    assert [e for e in again if isinstance(e, Event)] == []
    # Flipping back to a class the outage already showed posts nothing more (no storm).
    back, _ = gateway_status(GatewayOutcome(error="OVN NB IDL is not synced: tcp:nb:6641: connect: Connection refused",
                                            announced=frozenset({"connection", "tls"})), net, LRP, {}, [], old, 3, T0)
    assert [e for e in back if isinstance(e, Event)] == []
    # The process's first failing pass (a restart in the outage): no class known, nothing new.
    first, _ = gateway_status(GatewayOutcome(error=tls), net, LRP, {}, [], old, 3, T0)
    assert [e for e in first if isinstance(e, Event)] == []


def test_the_gateway_step_remembers_the_class_of_the_last_failure_until_a_success():
    from controller.apply.gateway import GatewayStep
    from ovn.ovsdb import NBError

    class Failing(_Applier):
        errors = ["tcp:nb:6641: connect: Connection refused", "ssl:nb:6641: TLS handshake: alert unknown ca", None,
                  "tcp:nb:6641: connect: Connection refused"]

        def ensure(self, *args):
            error = self.errors.pop(0) if self.errors else None
            if error is not None:
                raise NBError(error)
            return super().ensure(*args)

    class _Metrics:
        def gateway_nb_error(self):
            pass

    step = GatewayStep(Failing(None), None, None, _Metrics())  # type: ignore[arg-type]
    a = step.ensure("ns/net", "vpc", "sub", [], frozenset())
    b = step.ensure("ns/net", "vpc", "sub", [], frozenset())
    assert (a.announced, b.announced) == (None, frozenset({"connection"}))
    assert step.ensure("ns/net", "vpc", "sub", [], frozenset()).state is not None
    # A success ends the failure: the next one is a new start (no class to compare).
    assert step.ensure("ns/net", "vpc", "sub", [], frozenset()).announced is None
