"""A Ready VpcEgressGateway whose reroute policies are gone from its VPC's router: which
networks say so (``controller.rules.egress_reroute``), and what a network pass does about it
(Warning ``EgressRerouteMissing``, Normal ``EgressRerouteRestored``, the gauge).

Expected values come from what kube-ovn-controller v1.15.24 writes
(pkg/controller/vpc_egress_gateway.go ``reconcileVpcEgressGatewayOVNRoutes``): per family
with next hops, on router ``<spec.vpc>``, a ``Logical_Router_Policy`` of priority 29100,
action ``reroute``, match ``ip<af>.src == $VEG.<first 12 hex of sha256("<ns>/<name>")>.ipv<af>``;
the gateway is Ready when ``status.ready`` and its ``Ready`` condition is True for its
generation. The hashes below are ``sha256sum`` of ``egress/gw-a`` and ``egress/gw-b``.
"""

from __future__ import annotations


from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from controller import reasons
from controller.apply.executor import Executor
from controller.metrics import Metrics
from controller.plan.actions import Event, NetworkGone, ReportOnce, SetEgressRerouteMissing
from controller.plan.network import EGRESS_TOPIC
from controller.rules.egress_reroute import RouterPolicies, gateway_ready, reroute_report, source_families
from tests.test_plan_network import KEY, NAME, NS, SUBNET, VPC, drive, live, subnet

GW_NS = "egress"
AS_A4 = "VEG.0fb58f08e30b.ipv4"
AS_A6 = "VEG.0fb58f08e30b.ipv6"
AS_B4 = "VEG.387d46d7dce3.ipv4"


def gateway(name="gw-a", *, vpc=VPC, ready=True, cond="True", observed=2, generation=2,
            policies=({"snat": False, "subnets": [SUBNET]},), internal=("10.255.0.5",)) -> dict[str, Any]:
    status: dict[str, Any] = {"ready": ready, "phase": "Completed", "internalIPs": list(internal),
                              "conditions": [{"type": "Ready", "status": cond, "reason": "ReconcileSuccess",
                                              "observedGeneration": observed}]}
    spec: dict[str, Any] = {"externalSubnet": "ext", "policies": list(policies)}
    if vpc is not None:
        spec["vpc"] = vpc
    return {"metadata": {"name": name, "namespace": GW_NS, "generation": generation}, "spec": spec,
            "status": status}


def reroute(address_set: str, af: int = 4, priority: int = 29100, action: str = "reroute"):
    return (priority, action, f"ip{af}.src == ${address_set}")


def router(*policies, known=True, present=True) -> RouterPolicies:
    return RouterPolicies(known, present, frozenset(policies))


# -- the rule -----------------------------------------------------------------------------------


def test_a_ready_gateway_without_its_address_set_reroute_is_missing_for_a_subnet_it_names():
    # Only the port-group policy is left: the address set's (the VMs' sources) is gone.
    rp = router((29100, "reroute", "ip4.src == $VEG.0fb58f08e30b_ip4"))
    r = reroute_report([gateway()], SUBNET, "10.0.0.0/24", VPC, rp)
    assert [(m.gateway, m.router, m.families, m.matches) for m in r.missing] == [
        (f"{GW_NS}/gw-a", VPC, (4,), (f"ip4.src == ${AS_A4}",))]
    assert r.standing == ()


def test_the_reroute_on_the_router_is_standing():
    r = reroute_report([gateway()], SUBNET, "10.0.0.0/24", VPC, router(reroute(AS_A4)))
    assert r.missing == () and r.standing == (f"{GW_NS}/gw-a",)


def test_a_node_local_policy_or_another_action_does_not_stand_for_the_reroute():
    rp = router(reroute(AS_A4, priority=29150), reroute(AS_A4, action="drop"), reroute(AS_B4))
    assert [m.gateway for m in reroute_report([gateway()], SUBNET, "10.0.0.0/24", VPC, rp).missing] == [
        f"{GW_NS}/gw-a"]


def test_unknown_nb_is_not_missing():
    assert reroute_report([gateway()], SUBNET, "10.0.0.0/24", VPC, RouterPolicies(False, error="x")) is None


def test_an_absent_router_holds_no_reroute():
    r = reroute_report([gateway()], SUBNET, "10.0.0.0/24", VPC, router(present=False))
    assert [m.gateway for m in r.missing] == [f"{GW_NS}/gw-a"]


def test_a_gateway_that_is_not_ready_is_not_reported():
    for gw in (gateway(ready=False), gateway(cond="False"), gateway(observed=1, generation=2),
               gateway(cond="Unknown"), {**gateway(), "status": {"ready": True}}):
        assert reroute_report([gw], SUBNET, "10.0.0.0/24", VPC, router()) == reroute_report(
            [], SUBNET, "10.0.0.0/24", VPC, router())
        assert not gateway_ready(gw)


def test_a_gateway_of_another_vpc_or_of_the_default_vpc_is_not_the_networks():
    r = reroute_report([gateway(vpc="vpc-other"), gateway("gw-b", vpc=None)], SUBNET, "10.0.0.0/24", VPC, router())
    assert r.missing == () and r.standing == ()
    # Without spec.vpc a gateway is the default VPC's (ovn-cluster).
    r = reroute_report([gateway("gw-b", vpc=None)], SUBNET, "10.0.0.0/24", "ovn-cluster", router())
    assert [m.gateway for m in r.missing] == [f"{GW_NS}/gw-b"]


def test_sources_by_name_and_by_ip_blocks():
    by_block = gateway(policies=({"snat": True, "ipBlocks": ["10.0.0.0/16"]},))
    assert source_families(by_block, SUBNET, "10.0.0.0/24") == {4}
    assert source_families(by_block, SUBNET, "10.1.0.0/24") == set()  # outside the block
    assert source_families(gateway(policies=({"ipBlocks": ["10.0.0.0/25"]},)), SUBNET, "10.0.0.0/24") == set()
    assert source_families(gateway(policies=({"subnets": ["other"]},)), SUBNET, "10.0.0.0/24") == set()
    assert source_families(gateway(), SUBNET, "10.0.0.0/24,fd00::/120") == {4, 6}


def test_only_the_families_with_next_hops_are_expected():
    dual = "10.0.0.0/24,fd00::/120"
    # IPv4 next hops only: no IPv6 policy is made, none is missing.
    assert [m.families for m in reroute_report([gateway()], SUBNET, dual, VPC, router()).missing] == [(4,)]
    both = gateway(internal=("10.255.0.5,fd00:ff::5",))
    r = reroute_report([both], SUBNET, dual, VPC, router(reroute(AS_A4)))
    assert [(m.families, m.matches) for m in r.missing] == [((6,), (f"ip6.src == ${AS_A6}",))]
    # No next hops at all (no pods, or malformed): no policy is expected.
    assert reroute_report([gateway(internal=())], SUBNET, dual, VPC, router()).missing == ()
    assert reroute_report([gateway(internal=("nope",))], SUBNET, dual, VPC, router()).missing == ()


def test_malformed_gateways_never_crash_and_count_for_nothing():
    odd: list[Any] = [
        {}, {"metadata": None}, {"metadata": {"name": "x"}}, "not a dict", None,
        {**gateway(), "spec": None}, {**gateway(), "spec": {"vpc": VPC, "policies": "all"}},
        {**gateway(), "spec": {"vpc": VPC, "policies": [None, 3, {"subnets": None, "ipBlocks": [1, "bad", "10.0.0.0/8"]}]}},
        {**gateway(), "status": {"ready": True, "conditions": "yes", "internalIPs": 5}},
        {**gateway(), "metadata": {"name": "x", "namespace": GW_NS, "generation": "2"}},
    ]
    r = reroute_report(odd, SUBNET, "10.0.0.0/24", VPC, router())
    # The one with a usable ipBlock (10.0.0.0/8), and the one whose generation is not a number
    # (read as 0: its condition is for it), are Ready sources.
    assert [m.gateway for m in r.missing] == [f"{GW_NS}/gw-a", f"{GW_NS}/x"]
    assert reroute_report([gateway()], SUBNET, "garbage", VPC, router()).missing == ()


_GW = st.builds(
    lambda name, ready, named, block, v4: gateway(
        name, ready=ready,
        policies=([{"subnets": [SUBNET]}] if named else []) + ([{"ipBlocks": [block]}] if block else []),
        internal=("10.255.0.5",) if v4 else ("fd00:ff::5",)),
    st.sampled_from(["gw-a", "gw-b", "gw-c"]), st.booleans(), st.booleans(),
    st.sampled_from([None, "10.0.0.0/8", "10.0.0.0/24", "10.0.0.0/25", "192.168.0.0/16"]), st.booleans())


@given(st.lists(_GW, max_size=4), st.sets(st.sampled_from([AS_A4, AS_B4, "VEG.000000000000.ipv4"])))
def test_property_a_gateway_is_missing_or_standing_never_both_and_adding_its_reroute_clears_it(gws, sets):
    rp = router(*(reroute(a) for a in sets))
    r = reroute_report(gws, SUBNET, "10.0.0.0/24", VPC, rp)
    missing = {m.gateway for m in r.missing}
    assert not missing & set(r.standing)
    # Each reported one is Ready, a source, and has IPv4 next hops; putting every expected
    # reroute back leaves nothing missing and nothing that stood falls.
    for m in r.missing:
        assert m.families == (4,)
    every = router(*(rp.policies | {(29100, "reroute", x) for m in r.missing for x in m.matches}))
    after = reroute_report(gws, SUBNET, "10.0.0.0/24", VPC, every)
    assert after.missing == () and set(after.standing) == missing | set(r.standing)


# -- a network pass -----------------------------------------------------------------------------


def egress_pass(gws, rp, **kw):
    return drive(live(manage_gateway=False, egress_gateways=tuple(gws), router_policies=rp, **kw))


def reports(p) -> list[ReportOnce]:
    return [o for o in p.of(ReportOnce) if o.topic == EGRESS_TOPIC]


def test_a_pass_reports_the_missing_reroute_and_sets_the_gauge():
    p = egress_pass([gateway()], router())
    (once,) = reports(p)
    assert once.topic == EGRESS_TOPIC and once.network == KEY
    ((key, ev),) = once.events
    assert key == f"{GW_NS}/gw-a" and ev.type == "Warning" and ev.reason == reasons.EGRESS_REROUTE_MISSING
    assert f'"{GW_NS}/gw-a"' in ev.message and f"ip4.src == ${AS_A4}" in ev.message and VPC in ev.message
    assert p.of(SetEgressRerouteMissing) == [SetEgressRerouteMissing(NS, NAME, True)]


def test_a_pass_with_the_reroute_standing_offers_the_recovery_event_and_zeroes_the_gauge():
    p = egress_pass([gateway()], router(reroute(AS_A4)))
    (once,) = reports(p)
    assert once.events == ()
    ((key, ev),) = once.ended
    assert key == f"{GW_NS}/gw-a" and ev.type == "Normal" and ev.reason == reasons.EGRESS_REROUTE_RESTORED
    assert p.of(SetEgressRerouteMissing) == [SetEgressRerouteMissing(NS, NAME, False)]


def test_a_pass_without_the_nb_known_reports_nothing_and_leaves_the_gauge():
    p = egress_pass([gateway()], RouterPolicies(False, error="connection refused"))
    assert reports(p) == []
    assert p.of(SetEgressRerouteMissing) == []


def test_without_the_nb_or_the_kind_the_feature_does_nothing():
    for kw in ({"egress_gateways": None, "router_policies": router()},
               {"egress_gateways": (gateway(),), "router_policies": None}):
        p = drive(live(manage_gateway=False, **kw))
        assert reports(p) == []
        assert p.of(SetEgressRerouteMissing) == []


def test_an_unbound_subnet_forgets_the_report_without_a_recovery_event():
    p = egress_pass([gateway()], router(), subnet=subnet(bound_to="other"))
    (once,) = reports(p)
    assert once.events == () and once.ended == ()
    assert p.of(SetEgressRerouteMissing) == [SetEgressRerouteMissing(NS, NAME, False)]


# -- the executor: once while missing, the recovery once -----------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str]] = []

    def event(self, obj: Any, etype: str, reason: str, message: str) -> None:
        self.posted.append((etype, reason))


def test_the_executor_posts_the_warning_once_and_the_recovery_once_and_keeps_topics_apart():
    rec, metrics = Recorder(), Metrics()
    ex = Executor(writer=None, vlans=None, events=rec, metrics=metrics)  # type: ignore[arg-type]
    net = {"metadata": {"name": NAME, "namespace": NS}}
    warn = ("egress/gw-a", Event(net, "Warning", reasons.EGRESS_REROUTE_MISSING, "gone"))
    back = ("egress/gw-a", Event(net, "Normal", reasons.EGRESS_REROUTE_RESTORED, "back"))
    other = ReportOnce(KEY, "u1", (("k", Event(net, "Warning", reasons.FOREIGN_ADDRESS_ON_NETWORK, "f")),))
    ex(ReportOnce(KEY, "u1", (), topic=EGRESS_TOPIC, ended=(back,)), None)  # never missing: no recovery
    assert rec.posted == []
    for _ in range(3):
        ex(ReportOnce(KEY, "u1", (warn,), topic=EGRESS_TOPIC), None)
        ex(other, None)  # another topic's report does not forget this one's
    assert rec.posted == [("Warning", reasons.EGRESS_REROUTE_MISSING), ("Warning", reasons.FOREIGN_ADDRESS_ON_NETWORK)]
    ex(SetEgressRerouteMissing(NS, NAME, True), None)
    assert metrics.registry.get_sample_value("cozy_proxmox_network_egress_reroute_missing",
                                             {"namespace": NS, "network": NAME}) == 1
    ex(ReportOnce(KEY, "u1", (), topic=EGRESS_TOPIC, ended=(back,)), None)
    ex(ReportOnce(KEY, "u1", (), topic=EGRESS_TOPIC, ended=(back,)), None)
    assert rec.posted[-1] == ("Normal", reasons.EGRESS_REROUTE_RESTORED) and len(rec.posted) == 3
    ex(SetEgressRerouteMissing(NS, NAME, False), None)
    assert metrics.registry.get_sample_value("cozy_proxmox_network_egress_reroute_missing",
                                             {"namespace": NS, "network": NAME}) == 0
    ex(ReportOnce(KEY, "u1", (warn,), topic=EGRESS_TOPIC), None)
    ex(NetworkGone(KEY), None)  # a network gone forgets every topic
    ex(ReportOnce(KEY, "u1", (warn,), topic=EGRESS_TOPIC), None)
    assert [r for _, r in rec.posted].count(reasons.EGRESS_REROUTE_MISSING) == 3



