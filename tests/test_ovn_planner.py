"""Pure tests of ovn.planner (reference §9.1, §9.3; product decision §4.7)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ovn import nb_plan, planner
from ovn.planner import (
    GroupView,
    TrunkNode,
    claim,
    fnv1a64,
    plan_group,
    priorities,
    rendezvous_order,
    score,
    trunk_nodes,
    wanted_chassis,
)
from tests.support.gateway import FAILOVER_NOTE, assigned

NET = "tenant/net-a"


def node(name, chassis=None, provider="physnet1", ready="true", deleting=False, extra_labels=None):
    labels = dict(extra_labels or {})
    if ready is not None:
        labels[f"{provider}.provider-network.kubernetes.io/ready"] = ready
    meta = {"name": name, "labels": labels, "annotations": {}}
    if chassis is not None:
        meta["annotations"]["ovn.kubernetes.io/chassis"] = chassis
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


def owned(name, network, chassis, **extra):
    return GroupView(name, {"owner": "proxmox-network", "network": network, **extra}, chassis)


# --------------------------------------------------------------------------- vectors


def test_fnv1a_check_value():
    assert fnv1a64(b"a") == 0xAF63DC4C8601EC8C


@pytest.mark.parametrize(
    "key,name,want",
    [
        ("vpc/vpc-x", "worker1", 0x461F6640410EBC5C),
        ("vpc/vpc-x", "worker2", 0x2C905B6A8F8699B2),
        ("vpc/vpc-x", "worker4", 0x7BA78E93AF43FD23),
        ("vpc/vpc-x", "worker5", 0xE46AC79F7B81C120),
        ("t/net", "n-a", 0x06F66DAE162B9514),
        ("t/net", "n-b", 0x36BE50CC1EE78EA3),
        ("t/net", "n-c", 0x8380179CF8355276),
        ("t/net", "n-d", 0xCB9C950C2134758F),
    ],
)
def test_score_vectors(key, name, want):
    assert score(key, name) == want


def test_order_vectors():
    order = rendezvous_order("vpc/vpc-x", ["worker2", "worker1"])
    assert list(zip(order, priorities(len(order)))) == [("worker1", 100), ("worker2", 90)]
    order = rendezvous_order("t/net", ["n-a", "n-c", "n-b", "n-d"])
    assert list(zip(order, priorities(4))) == [("n-d", 100), ("n-c", 90), ("n-b", 80), ("n-a", 70)]


def test_order_accepts_trunk_nodes():
    nodes = [TrunkNode("n-a", "ca"), TrunkNode("n-d", "cd")]
    assert [n.chassis for n in rendezvous_order("t/net", nodes)] == ["cd", "ca"]


def test_order_tie_by_name(monkeypatch):
    monkeypatch.setattr(planner, "score", lambda key, n: 7)
    assert rendezvous_order("k", ["b", "c", "a"]) == ["a", "b", "c"]


def test_wanted_chassis_for_vpc_uses_vpc_key():
    trunk = [TrunkNode("worker2", "c2"), TrunkNode("worker1", "c1")]
    assert wanted_chassis("vpc-x", trunk) == [("c1", 100), ("c2", 90)]


# --------------------------------------------------------------------------- priorities


@pytest.mark.parametrize(
    "n,want",
    [
        (0, []),
        (-1, []),
        (1, [100]),
        (3, [100, 90, 80]),
        (10, [100, 90, 80, 70, 60, 50, 40, 30, 20, 10]),
        (11, [110, 100, 90, 80, 70, 60, 50, 40, 30, 20, 10]),
    ],
)
def test_priorities(n, want):
    assert priorities(n) == want


@given(st.integers(min_value=1, max_value=300))
def test_priorities_distinct_positive(n):
    p = priorities(n)
    assert len(p) == n and len(set(p)) == n and min(p) > 0
    assert p[0] == max(100, 10 * n)
    assert all(a - b == 10 for a, b in zip(p, p[1:]))


# --------------------------------------------------------------------------- trunk nodes


def test_trunk_nodes_selection():
    nodes = [
        node("w3", "ch3"),
        node("w1", " ch1 "),  # trimmed
        node("w2", "   "),  # empty after trim
        node("w4", "ch4", ready="false"),
        node("w5", "ch5", provider="other"),
        node("w6", None),
        node("w7", "ch7", deleting=True),
        node("w8", "ch8", ready=None),
    ]
    assert trunk_nodes(nodes, "physnet1") == [TrunkNode("w1", "ch1"), TrunkNode("w3", "ch3")]


def test_trunk_nodes_chassis_dedup_by_name_order_not_list_order():
    a = [node("node-b", "dup"), node("node-a", "dup"), node("node-c", "c")]
    b = list(reversed(a))
    want = [TrunkNode("node-a", "dup"), TrunkNode("node-c", "c")]
    assert trunk_nodes(a, "physnet1") == want
    assert trunk_nodes(b, "physnet1") == want


def test_trunk_nodes_deleting_node_does_not_take_chassis():
    nodes = [node("node-a", "dup", deleting=True), node("node-b", "dup")]
    assert trunk_nodes(nodes, "physnet1") == [TrunkNode("node-b", "dup")]


def test_trunk_nodes_plain_metadata_dicts():
    n = node("w1", "c1")["metadata"]
    assert trunk_nodes([n], "physnet1") == [TrunkNode("w1", "c1")]


# --------------------------------------------------------------------------- naming, claim


def test_names():
    assert planner.router_port_name("vpc1", "sub1") == "vpc1-sub1"
    assert planner.group_name("vpc1", "sub1") == "px-vpc1-sub1"
    assert planner.group_external_ids(NET) == {"owner": "proxmox-network", "network": NET}


def test_claim_rule():
    assert claim(None, NET) == planner.Claim(True)
    assert claim(GroupView("px-v-s", {"note": "x"}), NET) == planner.Claim(True, adopt=True)
    assert claim(GroupView("px-v-s", {"owner": ""}), NET).adopt
    assert claim(owned("px-v-s", NET, []), NET) == planner.Claim(True)
    c = claim(GroupView("px-v-s", {"owner": "neutron"}), NET)
    assert not c.allowed
    assert c.reason == 'OVN HA_Chassis_Group "px-v-s" belongs to "neutron"'
    c = claim(owned("px-v-s", "other/net", []), NET)
    assert not c.allowed
    assert c.reason == 'OVN HA_Chassis_Group "px-v-s" belongs to network "other/net"'
    assert planner.foreign_message(c.reason) == (
        'OVN HA_Chassis_Group "px-v-s" belongs to network "other/net"; the controller leaves it alone'
    )


def test_plan_group_fresh():
    trunk = [TrunkNode("n-a", "ca"), TrunkNode("n-b", "cb"), TrunkNode("n-c", "cc"), TrunkNode("n-d", "cd")]
    p = plan_group(NET, "net", "sub", trunk, [])
    assert p.name == "px-net-sub"
    assert p.external_ids == {"owner": "proxmox-network", "network": NET}
    # key is vpc/net, not t/net: just check it follows the rendezvous order of vpc/net
    order = [t.chassis for t in rendezvous_order("vpc/net", trunk)]
    assert p.chassis == list(zip(order, [100, 90, 80, 70]))
    assert p.allowed and p.message == ""


def test_plan_group_adoption_keeps_other_keys():
    existing = GroupView("px-v-s", {"note": "hand-made", "owner": ""}, [("c1", 5)])
    p = plan_group(NET, "v", "s", ["c1", "c2"], [existing])
    assert p.claim.adopt
    assert p.external_ids == {"note": "hand-made", "owner": "proxmox-network", "network": NET}
    assert p.chassis == [("c1", 100), ("c2", 90)]


def test_plan_group_foreign_messages():
    p = plan_group(NET, "v", "s", ["c1"], [{"name": "px-v-s", "external_ids": {"owner": "someone"}}])
    assert not p.allowed
    assert p.message == 'OVN HA_Chassis_Group "px-v-s" belongs to "someone"; the controller leaves it alone'
    p = plan_group(NET, "v", "s", ["c1"], [owned("px-v-s", "x/y", [])])
    assert p.message == 'OVN HA_Chassis_Group "px-v-s" belongs to network "x/y"; the controller leaves it alone'


def test_plan_group_prioritised_input_passes_through():
    p = plan_group(NET, "v", "s", [("c2", 100), ("c1", 90)], [])
    assert p.chassis == [("c2", 100), ("c1", 90)]


def test_assigned_message():
    assert planner.assigned_message("v-s", "px-v-s", [("c1", 100), ("c2", 90), ("c3", 80)]) == (
        'router port "v-s" has HA chassis group "px-v-s" with 3 chassis (c1=100, c2=90, c3=80); '
        "the highest priority is active"
    )


@pytest.mark.parametrize("chassis", [[("c1", 100)], [("c1", 100), ("c2", 90)]])
def test_assigned_message_of_fewer_than_three_chassis_says_the_gateway_does_not_fail_over(chassis):
    """Issue 25: a survivor of two with no BFD session left stays passive (OVN's
    ha_chassis_group_is_active); one chassis has nobody to fail over to."""
    assert planner.assigned_message("v-s", "px-v-s", chassis) == assigned("v-s", "px-v-s", chassis)
    assert planner.assigned_message("v-s", "px-v-s", chassis).endswith(FAILOVER_NOTE[len(chassis)])


# --------------------------------------------------------------------------- sticky active


def _trunk(*names):
    return [TrunkNode(n, f"ch-{n}") for n in names]


def test_sticky_active_survives_a_join():
    # vpc-x: worker1 beats worker2; worker5 beats both (0xe46a... is the highest score).
    before = wanted_chassis("vpc-x", _trunk("worker1", "worker2"))
    assert before[0] == ("ch-worker1", 100)
    groups = [owned("px-vpc-x-a", "ns/a", before), owned("px-vpc-x-b", "ns/b", before)]
    plain = wanted_chassis("vpc-x", _trunk("worker1", "worker2", "worker5"))
    assert plain[0][0] == "ch-worker5"  # a naive re-hash would move the gateway
    sticky = wanted_chassis("vpc-x", _trunk("worker1", "worker2", "worker5"), groups)
    assert sticky == [("ch-worker1", 100), ("ch-worker5", 90), ("ch-worker2", 80)]


def test_sticky_active_released_when_ineligible():
    groups = [owned("px-vpc-x-a", "ns/a", [("ch-worker1", 100), ("ch-worker2", 90)])]
    got = wanted_chassis("vpc-x", _trunk("worker2", "worker5"), groups)
    assert got == list(zip([c.chassis for c in rendezvous_order("vpc/vpc-x", _trunk("worker2", "worker5"))], [100, 90]))


def test_sticky_active_shared_by_every_port_of_the_vpc():
    groups = [owned("px-vpc-x-a", "ns/a", [("ch-worker2", 100), ("ch-worker1", 90)])]
    trunk = _trunk("worker1", "worker2", "worker4")
    a = plan_group("ns/a", "vpc-x", "a", trunk, groups)
    b = plan_group("ns/b", "vpc-x", "b", trunk, groups)  # a new network of the same VPC
    assert a.chassis[0][0] == b.chassis[0][0] == "ch-worker2"
    assert a.chassis == b.chassis


def test_sticky_ignores_groups_not_ours():
    groups = [GroupView("px-vpc-x-a", {"owner": "neutron"}, [("ch-worker2", 100)]),
              GroupView("px-vpc-x-b", {}, [("ch-worker2", 100)])]
    got = wanted_chassis("vpc-x", _trunk("worker1", "worker2"), groups)
    assert got[0][0] == "ch-worker1"


def test_sticky_majority_then_rendezvous_rank():
    # vpc/vpc-x ranks worker4 above worker1 above worker2 (§9.3 vectors).
    groups = [
        owned("g1", "ns/1", [("ch-worker2", 100)]),
        owned("g2", "ns/2", [("ch-worker2", 100)]),
        owned("g3", "ns/3", [("ch-worker4", 100)]),
    ]
    assert wanted_chassis("vpc-x", _trunk("worker1", "worker2", "worker4"), groups)[0][0] == "ch-worker2"
    groups = [owned("g1", "ns/1", [("ch-worker2", 100)]), owned("g3", "ns/3", [("ch-worker1", 100)])]
    assert wanted_chassis("vpc-x", _trunk("worker1", "worker2", "worker4"), groups)[0][0] == "ch-worker1"


def test_a_hand_edited_group_does_not_vote():
    """A member raised by hand (field review: one stray priority moved a whole VPC)."""
    legit = [("ch-worker1", 100), ("ch-worker2", 90)]
    groups = [owned("px-vpc-x-a", "ns/a", legit),
              owned("px-vpc-x-b", "ns/b", [("ch-worker2", 200), ("ch-worker1", 100)])]
    for _ in range(2):  # whichever group is repaired, the VPC keeps worker1
        assert wanted_chassis("vpc-x", _trunk("worker1", "worker2", "worker5"), groups)[0][0] == "ch-worker1"
        groups.reverse()
    # Alone, a tampered group gives no vote: the rendezvous order decides.
    alone = [owned("px-vpc-x-b", "ns/b", [("ch-worker2", 200), ("ch-worker1", 100)])]
    assert wanted_chassis("vpc-x", _trunk("worker1", "worker2"), alone)[0][0] == "ch-worker1"
    assert planner.group_vote(owned("g", "ns/g", [("c1", 100), ("c2", 90), ("c3", 80)])) == "c1"
    assert planner.group_vote(owned("g", "ns/g", [("c1", 100), ("c2", 100)])) is None


def test_empty_trunk_wants_nothing_even_with_groups():
    groups = [owned("px-v-s", NET, [("c1", 100)])]
    assert wanted_chassis("v", [], groups) == []
    assert plan_group(NET, "v", "s", [], groups).chassis == []


def test_groups_from_snapshot_drops_dangling_and_duplicates():
    snap = {
        "HA_Chassis_Group": {
            "g-1": {"_uuid": "g-1", "name": "px-v-s", "external_ids": {"owner": "proxmox-network", "network": NET},
                    "ha_chassis": ["c-2", "c-1", "c-3", "c-missing"]},
        },
        "HA_Chassis": {
            "c-1": {"_uuid": "c-1", "chassis_name": "ch-a", "priority": 100},
            "c-2": {"_uuid": "c-2", "chassis_name": "ch-a", "priority": 10},
            "c-3": {"_uuid": "c-3", "chassis_name": "ch-b", "priority": 90},
        },
        "Logical_Router_Port": {},
    }
    g = planner.groups_from_snapshot(snap)["px-v-s"]
    assert g.uuid == "g-1"
    assert list(g.chassis) == [("ch-a", 100), ("ch-b", 90)]
    assert g.top() == ("ch-a", 100)


# --------------------------------------------------------------------------- properties

node_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-.", min_size=1, max_size=12)


@settings(max_examples=300)
@given(st.text(max_size=20), st.lists(node_names, unique=True, max_size=12), node_names)
def test_order_is_permutation_and_join_keeps_relative_order(key, names, newcomer):
    order = rendezvous_order(key, names)
    assert sorted(order) == sorted(names)
    if newcomer in names:
        return
    grown = rendezvous_order(key, names + [newcomer])
    assert [n for n in grown if n != newcomer] == order
    # independent of input order
    assert rendezvous_order(key, list(reversed(names))) == order


@settings(max_examples=200)
@given(
    st.lists(st.tuples(node_names, st.sampled_from(["c1", "c2", "c3", "c4", " ", ""])), max_size=8),
    st.randoms(use_true_random=False),
)
def test_trunk_nodes_independent_of_list_order(pairs, rnd):
    nodes = [node(n, c) for n, c in dict(pairs).items()]
    got = trunk_nodes(nodes, "physnet1")
    rnd.shuffle(nodes)
    assert trunk_nodes(nodes, "physnet1") == got
    chassis = [t.chassis for t in got]
    assert len(chassis) == len(set(chassis)) and all(chassis)
    assert [t.name for t in got] == sorted(t.name for t in got)


@settings(max_examples=200)
@given(st.lists(node_names, unique=True, min_size=1, max_size=10), node_names)
def test_sticky_join_never_moves_active(names, newcomer):
    trunk = [TrunkNode(n, f"ch-{n}") for n in names]
    first = wanted_chassis("vpc-p", trunk)
    groups = [owned("px-vpc-p-s", "ns/s", first)]
    if newcomer in names:
        return
    after = wanted_chassis("vpc-p", trunk + [TrunkNode(newcomer, f"ch-{newcomer}")], groups)
    assert after[0][0] == first[0][0]
    assert {c for c, _ in after} == {c for c, _ in first} | {f"ch-{newcomer}"}
    assert [p for _, p in after] == priorities(len(after))


# --------------------------------------------------------------------------- §9.4 decision (plan_ensure)

LRP_T, GROUP_T, CH_T = "Logical_Router_Port", "HA_Chassis_Group", "HA_Chassis"
OURS = {"owner": "proxmox-network", "network": NET}


def snap_of(ports=(), groups=(), chassis=()):
    """A snapshot in NBClient.snapshot() shape: ports (uuid, name, group uuid|None, n gateway
    chassis), groups (uuid, name, ids, [chassis uuids]), chassis (uuid, name, priority)."""
    return {
        LRP_T: {u: {"_uuid": u, "name": n, "ha_chassis_group": [g] if g else [], "gateway_chassis": [f"gw{i}" for i in range(k)]}
                for u, n, g, k in ports},
        GROUP_T: {u: {"_uuid": u, "name": n, "external_ids": dict(ids), "ha_chassis": list(cs)} for u, n, ids, cs in groups},
        CH_T: {u: {"_uuid": u, "chassis_name": n, "priority": p} for u, n, p in chassis},
    }


def ensure_plan(snap, *workers, vpc_subnets=(), votes=None):
    return nb_plan.plan_ensure(NET, "v", "s", [TrunkNode(w, f"ch-{w}") for w in workers], snap, vpc_subnets, votes)


def test_plan_ensure_foreign_group_is_checked_before_the_port():
    p = ensure_plan(snap_of(groups=[("g1", "px-v-s", {"owner": "kube-ovn"}, [])]), "w1")
    assert (p.state.reason, p.state.message, p.actions, p.guards) == (
        "ForeignGroup", 'OVN HA_Chassis_Group "px-v-s" belongs to "kube-ovn"; the controller leaves it alone', (), ())


def test_plan_ensure_router_port_missing_even_with_our_group():
    p = ensure_plan(snap_of(groups=[("g1", "px-v-s", OURS, ["c1"])], chassis=[("c1", "ch-w1", 100)]), "w1")
    assert (p.state.reason, p.state.message, p.state.chassis, p.actions) == (
        "RouterPortMissing", 'OVN has no logical router port "v-s" yet', 0, ())


def test_plan_ensure_gateway_chassis_port_is_foreign():
    p = ensure_plan(snap_of(ports=[("p1", "v-s", None, 2)]), "w1")
    assert (p.state.reason, p.state.message, p.actions) == (
        "ForeignGroup", 'router port "v-s" has 2 gateway_chassis; the controller leaves it alone', ())


@pytest.mark.parametrize("ids,name,described", [
    ({"owner": "neutron"}, "hand", 'HA_Chassis_Group "hand" of "neutron"'),
    ({}, "hand", 'HA_Chassis_Group "hand"'),
    ({}, "", "HA_Chassis_Group g9"),
])
def test_plan_ensure_port_pointing_elsewhere_is_foreign(ids, name, described):
    p = ensure_plan(snap_of(ports=[("p1", "v-s", "g9", 0)], groups=[("g9", name, ids, [])]), "w1")
    assert (p.state.reason, p.actions) == ("ForeignGroup", ())
    assert p.state.message == f'router port "v-s" already uses {described}; the controller leaves it alone'


def test_plan_ensure_pointer_to_a_group_not_in_the_snapshot_names_its_uuid():
    p = ensure_plan(snap_of(ports=[("p1", "v-s", "g-gone", 0)]), "w1")
    assert p.state.message == 'router port "v-s" already uses HA_Chassis_Group g-gone; the controller leaves it alone'


def test_plan_ensure_no_trunk_nodes_counts_the_group_and_writes_nothing():
    s = snap_of(ports=[("p1", "v-s", None, 0)], groups=[("g1", "px-v-s", OURS, ["c1", "c2"])],
                chassis=[("c1", "ch-w1", 100), ("c2", "ch-w2", 90)])
    p = ensure_plan(s)
    assert (p.state.reason, p.state.chassis, p.actions, p.guards) == ("NoTrunkNodes", 2, (), ())
    assert p.state.message == "no node of the zone's provider network is ready with an OVN chassis"


def test_plan_ensure_fresh_group_uses_the_spec_named_uuids_and_guards_the_port():
    p = ensure_plan(snap_of(ports=[("p1", "v-s", None, 0)]), "w1", "w2")
    c = p.group.chassis
    assert p.actions == (
        nb_plan.InsertChassis("pxchassis0", c[0][0], c[0][1]),
        nb_plan.InsertChassis("pxchassis1", c[1][0], c[1][1]),
        nb_plan.InsertGroup("pxgroup", "px-v-s", OURS, ("pxchassis0", "pxchassis1")),
        nb_plan.PointPort("p1", "pxgroup"),
    )
    assert p.guards == (nb_plan.Verify(LRP_T, "p1", ("ha_chassis_group", "gateway_chassis")),)
    assert p.state.reason == "ChassisAssigned" and p.state.created and not p.state.updated
    assert p.state.message == planner.assigned_message("v-s", "px-v-s", c) and p.state.chassis == 2


def test_plan_ensure_steady_state_plans_nothing():
    first = ensure_plan(snap_of(ports=[("p1", "v-s", None, 0)]), "w1", "w2").group.chassis
    s = snap_of(ports=[("p1", "v-s", "g1", 0)], groups=[("g1", "px-v-s", OURS, ["c1", "c2"])],
                chassis=[("c1", first[0][0], first[0][1]), ("c2", first[1][0], first[1][1])])
    p = ensure_plan(s, "w1", "w2")
    assert (p.actions, p.guards, p.state.reason) == ((), (), "ChassisAssigned")
    assert not (p.state.created or p.state.adopted or p.state.updated)


def test_plan_ensure_adoption_repairs_members_in_place():
    # Unowned group with a note, ch-w1 twice (c1 kept: first in uuid order), a stale member.
    s = snap_of(ports=[("p1", "v-s", "g1", 0)],
                groups=[("g1", "px-v-s", {"note": "by hand"}, ["c3", "c1", "c2"])],
                chassis=[("c1", "ch-w1", 7), ("c2", "ch-w1", 100), ("c3", "ch-stale", 5)])
    p = ensure_plan(s, "w1")
    assert p.actions == (
        nb_plan.SetPriority("c1", 100),
        nb_plan.SetGroupChassis("g1", ("c1",)),
        nb_plan.SetExternalIds("g1", {"note": "by hand", **OURS}),
    )
    assert p.guards == (
        nb_plan.Verify(LRP_T, "p1", ("ha_chassis_group", "gateway_chassis")),
        nb_plan.Verify(CH_T, "c1", ("priority",)),
        nb_plan.Verify(GROUP_T, "g1", ("ha_chassis",)),
        nb_plan.Verify(GROUP_T, "g1", ("external_ids",)),
    )
    assert p.state.adopted and p.state.updated and not p.state.created


def test_plan_ensure_a_kept_tally_decides_like_the_siblings_groups():
    sib = wanted_chassis("v", _trunk("worker2", "worker1"), [owned("g", "ns/b", [("ch-worker2", 100)])])
    s = snap_of(ports=[("p1", "v-s", None, 0)], groups=[("g2", "px-v-b", {"owner": "proxmox-network", "network": "ns/b"},
                                                         [f"c{i}" for i in range(len(sib))])],
                chassis=[(f"c{i}", ch, p) for i, (ch, p) in enumerate(sib)])
    by_groups = ensure_plan(s, "worker1", "worker2", "worker5", vpc_subnets=["b"])
    by_votes = ensure_plan(s, "worker1", "worker2", "worker5", votes={"ch-worker2": 1})
    assert by_groups == by_votes and by_groups.state.active == "ch-worker2"
    assert ensure_plan(s, "worker1", "worker2", "worker5").state.active == "ch-worker5"  # no sibling: the hash


def test_plan_delete_clears_every_pointer_then_deletes():
    s = snap_of(ports=[("p2", "x", "g1", 0), ("p1", "y", "g1", 0), ("p3", "z", "g2", 0)],
                groups=[("g1", "px-v-s", OURS, [])])
    p = nb_plan.plan_delete(s, "g1")
    assert p.actions == (nb_plan.ClearPointer("p1"), nb_plan.ClearPointer("p2"), nb_plan.DeleteGroup("g1"))
    assert p.guards == (nb_plan.Verify(LRP_T, "p1", ("ha_chassis_group",)), nb_plan.Verify(LRP_T, "p2", ("ha_chassis_group",)),
                        nb_plan.Verify(GROUP_T, "g1", ("external_ids",)))


# -- the serving chassis stays on top (product-decisions.md §10) ---------------------------

def _nodes(*chassis: str) -> list[planner.TrunkNode]:
    return [planner.TrunkNode(f"node-{c}", c) for c in chassis]


def test_the_serving_chassis_is_on_top_whatever_the_order_and_votes_say():
    trunk = _nodes("ch-a", "ch-b", "ch-c")
    plain = planner.wanted_chassis("vpc1", trunk, votes={})
    for serving in ("ch-a", "ch-b", "ch-c"):
        got = planner.wanted_chassis("vpc1", trunk, votes={plain[0][0]: 5}, serving=serving)
        assert got[0] == (serving, 100)
        assert sorted(c for c, _ in got) == ["ch-a", "ch-b", "ch-c"]
        assert [p for _, p in got] == planner.priorities(3)


def test_a_serving_chassis_that_left_the_trunk_does_not_stay():
    trunk = _nodes("ch-a", "ch-b")
    assert planner.wanted_chassis("vpc1", trunk, votes={}, serving="ch-gone") == \
        planner.wanted_chassis("vpc1", trunk, votes={})


def test_a_node_joining_or_returning_never_moves_the_serving_gateway():
    # Field report R7: a re-provisioned node (new chassis ID) comes back; the failover's
    # survivor keeps the gateway.
    before = _nodes("ch-a", "ch-b", "ch-c")
    plain = [c for c, _ in planner.wanted_chassis("vpc1", before, votes={})]
    survivor = plain[1]
    after = _nodes(*[c for c in plain if c != plain[0]], "ch-new")
    got = planner.wanted_chassis("vpc1", after, votes={plain[0]: 1}, serving=survivor)
    assert got[0] == (survivor, 100)


# -- the path MTU (product-decisions.md §10) -------------------------------------------------

@pytest.mark.parametrize("zone, overlay, want", [
    (None, 1400, 1400),  # no zone MTU: the VM NIC's default, 1500, bounds it
    (None, 8900, 1500),  # jumbo overlay, no zone MTU: the VMs still send 1500
    (1450, 1400, 1400),  # the sample zone: the Geneve tunnel carries less than the VLAN
    (1300, 1400, 1300),  # a small VLAN: packets to the VMs are bounded by it
    (9000, 8900, 8900),  # jumbo underlay
    (1450, 0, 0),  # --overlay-mtu=0: the option is left alone
    (True, 1400, 1400),  # a boolean is no MTU
])
def test_gateway_mtu_is_the_smaller_of_the_vlan_and_the_overlay(zone, overlay, want):
    assert planner.gateway_mtu(zone, overlay) == want


def _with_options(snap, uuid, options):
    snap[LRP_T][uuid]["options"] = dict(options)
    return snap


def test_plan_ensure_writes_gateway_mtu_with_the_group_as_a_map_key():
    p = nb_plan.plan_ensure(NET, "v", "s", [TrunkNode("w1", "ch-w1")],
                            _with_options(snap_of(ports=[("p1", "v-s", None, 0)]), "p1", {"ipv6_prefix": "x"}), mtu=1400)
    assert p.actions[-1] == nb_plan.SetPortOption("p1", "gateway_mtu", "1400")
    assert p.state.mtu == 1400


def test_plan_ensure_steady_state_with_the_mtu_in_place_plans_nothing_and_a_changed_one_is_repaired():
    first = ensure_plan(snap_of(ports=[("p1", "v-s", None, 0)]), "w1").group.chassis

    def steady(options):
        return _with_options(snap_of(ports=[("p1", "v-s", "g1", 0)], groups=[("g1", "px-v-s", OURS, ["c1"])],
                                     chassis=[("c1", first[0][0], first[0][1])]), "p1", options)

    same = nb_plan.plan_ensure(NET, "v", "s", [TrunkNode("w1", "ch-w1")], steady({"gateway_mtu": "1400"}), mtu=1400)
    assert (same.actions, same.guards, same.state.mtu) == ((), (), 1400)
    for options in ({}, {"gateway_mtu": "1500"}, {"gateway_mtu": "junk"}):
        p = nb_plan.plan_ensure(NET, "v", "s", [TrunkNode("w1", "ch-w1")], steady(options), mtu=1400)
        assert p.actions == (nb_plan.SetPortOption("p1", "gateway_mtu", "1400"),)
        # The option alone is no group update (no Event, no new settle time).
        assert not p.state.updated and p.state.mtu == 1400
    # mtu 0: whatever the port carries is left alone and not reported as the controller's.
    left = nb_plan.plan_ensure(NET, "v", "s", [TrunkNode("w1", "ch-w1")], steady({"gateway_mtu": "1442"}), mtu=0)
    assert (left.actions, left.state.mtu) == ((), 0)
    # No trunk node left: the group and its option stay on the port, and the MTU is reported.
    gone = nb_plan.plan_ensure(NET, "v", "s", [], steady({"gateway_mtu": "1400"}), mtu=1400)
    assert (gone.state.reason, gone.actions, gone.state.mtu) == ("NoTrunkNodes", (), 1400)


def test_no_gateway_mtu_is_written_where_no_group_is():
    for s in (snap_of(), _with_options(snap_of(ports=[("p1", "v-s", None, 2)]), "p1", {})):
        p = nb_plan.plan_ensure(NET, "v", "s", [TrunkNode("w1", "ch-w1")], s, mtu=1400)
        assert p.actions == () and p.state.mtu == 0
    none = nb_plan.plan_ensure(NET, "v", "s", [], _with_options(snap_of(ports=[("p1", "v-s", None, 0)]), "p1", {}),
                               mtu=1400)
    assert none.actions == () and none.state.reason == "NoTrunkNodes"


def test_plan_delete_takes_the_gateway_mtu_off_with_the_pointer():
    s = _with_options(snap_of(ports=[("p1", "y", "g1", 0), ("p2", "x", "g1", 0)], groups=[("g1", "px-v-s", OURS, [])]),
                      "p1", {"gateway_mtu": "1400", "other": "kept"})
    p = nb_plan.plan_delete(s, "g1")
    assert p.actions == (nb_plan.ClearPointer("p1"), nb_plan.DeletePortOption("p1", "gateway_mtu"),
                         nb_plan.ClearPointer("p2"), nb_plan.DeleteGroup("g1"))
    # --overlay-mtu=0: the option is the operator's, and stays.
    kept = nb_plan.plan_delete(s, "g1", clear_mtu=False)
    assert kept.actions == (nb_plan.ClearPointer("p1"), nb_plan.ClearPointer("p2"), nb_plan.DeleteGroup("g1"))


def test_r7_the_failed_over_successor_stays_on_top_while_the_returning_node_has_a_new_chassis_id():
    """Field report R7 with the binding not known (the SB shows no holder yet): the group's
    active chassis left the trunk (its node is back under a new chassis ID, which the
    rendezvous order ranks first); the group's next member, the one OVN fails over to, goes on
    top, and the returning node joins below it."""
    trunk = _nodes("ch-a", "ch-b", "ch-c")
    plain = [c for c, _ in planner.wanted_chassis("vpc1", trunk, votes={})]
    first, second, third = plain
    group = owned(planner.group_name("vpc1", "s"), NET, list(zip(plain, planner.priorities(3))))
    back = [planner.TrunkNode(f"node-{first}", f"{first}-new")] + [t for t in trunk if t.chassis != first]
    got = planner.plan_group(NET, "vpc1", "s", back, [group]).chassis
    assert got[0] == (second, 100)
    assert {c for c, _ in got} == {f"{first}-new", second, third}
    # Without a group of its own (a new network of the VPC) the rendezvous order decides.
    assert planner.plan_group(NET, "vpc1", "s", back, []).chassis == planner.wanted_chassis("vpc1", back, votes={})
