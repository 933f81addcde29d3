"""The product's NB decision is the planner, and its plan is one guarded transaction.

Against a standalone OVN NB ``ovsdb-server`` (``tests.support.ovsdb.NBServer``): the
applier is given a wrapper around ``nb_plan.plan_ensure`` through its constructor
(``plan=``), which records each plan or edits the NB with ``ovn-nbctl`` between the plan
and the commit. Nothing in the product knows about either.
"""

from __future__ import annotations

import copy
import dataclasses
import secrets

import pytest

from ovn import nb_plan, planner
from ovn.gateway import GatewayApplier, NBChanged

from tests.support.ovsdb import NBServer
from hack.tools.wait import wait_for

pytestmark = pytest.mark.integration

VPC = "vpc-x"  # §9.3 vectors: worker5 > worker4 > worker1 > worker2
KEY = "tenant/net-a"
LRP, GROUP, CHASSIS = nb_plan.LRP_TABLE, nb_plan.GROUP_TABLE, nb_plan.CHASSIS_TABLE


def trunk(*workers: str) -> list[planner.TrunkNode]:
    return [planner.TrunkNode(w, f"ch-{w}") for w in workers]


@pytest.fixture
def server(tmp_path):
    s = NBServer(tmp_path / "nb").start()
    try:
        s.nbctl("lr-add", "r")
        s.nbctl("lrp-add", "r", f"{VPC}-a", "00:00:00:00:cd:01", "10.79.0.1/24")
        yield s
    finally:
        s.stop()


def start(server: NBServer, plan) -> GatewayApplier:
    a = GatewayApplier(server.remote, plan=plan).start()
    assert a.nb.wait_synced(15), a.nb.last_error
    return a


def barrier(server: NBServer, a: GatewayApplier) -> None:
    """Wait until the applier's IDL has every change committed so far (a marker row)."""
    marker = f"sync-{secrets.token_hex(4)}"
    server.nbctl("ha-chassis-group-add", marker)
    wait_for(lambda: a.nb.call(lambda idl: bool(a.group_by_name.get(idl, marker))))
    server.nbctl("ha-chassis-group-del", marker)
    wait_for(lambda: a.nb.call(lambda idl: not a.group_by_name.get(idl, marker)))


def group_uuid(server: NBServer, name: str) -> str:
    return server.nbctl("--bare", "--columns=_uuid", "find", "HA_Chassis_Group", f"name={name}").strip()


def simulate(snap: dict, plan: nb_plan.NBPlan) -> dict:
    """The snapshot with the plan's actions applied (test-side, on plain dicts)."""
    s = copy.deepcopy(snap)
    for a in plan.actions:
        if isinstance(a, nb_plan.InsertChassis):
            s[CHASSIS][a.ref] = {"chassis_name": a.chassis_name, "priority": a.priority}
        elif isinstance(a, nb_plan.SetPriority):
            s[CHASSIS][a.uuid]["priority"] = a.priority
        elif isinstance(a, nb_plan.InsertGroup):
            s[GROUP][a.ref] = {"name": a.name, "external_ids": dict(a.external_ids), "ha_chassis": list(a.ha_chassis)}
        elif isinstance(a, nb_plan.SetGroupChassis):
            s[GROUP][a.uuid]["ha_chassis"] = list(a.ha_chassis)
        elif isinstance(a, nb_plan.SetExternalIds):
            s[GROUP][a.uuid]["external_ids"] = dict(a.external_ids)
        elif isinstance(a, nb_plan.PointPort):
            s[LRP][a.uuid]["ha_chassis_group"] = [a.group]
        else:
            raise AssertionError(f"unexpected action {a!r}")
    return s


def resolved(snap: dict) -> tuple:
    """The NB by names, uuids resolved: ports -> (pointed group name, gateway_chassis),
    groups -> (external_ids, members); unreferenced HA_Chassis rows are gone (GC)."""
    gname = {u: r["name"] for u, r in snap[GROUP].items()}
    ports = sorted((r["name"], tuple(gname.get(g, g) for g in r["ha_chassis_group"]), len(r["gateway_chassis"]))
                   for r in snap[LRP].values())
    groups = sorted((r["name"], tuple(sorted(r["external_ids"].items())),
                     tuple(sorted((snap[CHASSIS][c]["chassis_name"], int(snap[CHASSIS][c]["priority"]))
                                  for c in r["ha_chassis"])))
                    for r in snap[GROUP].values())
    return ports, groups


def test_the_committed_transaction_is_what_the_planner_returned(server):
    # A hand-made group to adopt (a note, worker1 at a wrong priority, a stale member) and
    # a sibling group of the VPC, owned by another network, voting for worker2.
    server.nbctl("lrp-add", "r", f"{VPC}-b", "00:00:00:00:cd:02", "10.79.1.1/24")
    server.nbctl("ha-chassis-group-add", f"px-{VPC}-a")
    server.nbctl("set", "HA_Chassis_Group", f"px-{VPC}-a", "external_ids:note=by-hand")
    server.nbctl("ha-chassis-group-add-chassis", f"px-{VPC}-a", "ch-worker1", "7")
    server.nbctl("ha-chassis-group-add-chassis", f"px-{VPC}-a", "ch-stale", "3")
    server.nbctl("ha-chassis-group-add", f"px-{VPC}-b")
    server.nbctl("set", "HA_Chassis_Group", f"px-{VPC}-b", "external_ids:owner=proxmox-network",
                 "external_ids:network=tenant/net-b")
    server.nbctl("ha-chassis-group-add-chassis", f"px-{VPC}-b", "ch-worker2", "100")
    server.nbctl("ha-chassis-group-add-chassis", f"px-{VPC}-b", "ch-worker1", "90")

    plans: list[nb_plan.NBPlan] = []

    def recording(*args, **kwargs):
        plans.append(nb_plan.plan_ensure(*args, **kwargs))
        return plans[-1]

    a = start(server, recording)
    try:
        assert GatewayApplier.__init__.__kwdefaults__["plan"] is nb_plan.plan_ensure  # the product's default
        before = a.nb.snapshot()
        state = a.ensure(KEY, VPC, "a", trunk("worker1", "worker2", "worker5"), ["b"])
        assert len(plans) == 1
        plan = plans[0]
        # The product's plan (from its partial snapshot and its kept tally) is the planner's
        # answer for the whole NB with the sibling's group recounted.
        assert plan == nb_plan.plan_ensure(KEY, VPC, "a", trunk("worker1", "worker2", "worker5"), before, ["b"])
        assert state == plan.state and state.adopted and state.active == "ch-worker2"
        assert {type(x) for x in plan.actions} == {
            nb_plan.SetPriority, nb_plan.InsertChassis, nb_plan.SetGroupChassis, nb_plan.SetExternalIds,
            nb_plan.PointPort}
        assert a.transactions == 1
        # The NB changed exactly as the plan says, and in nothing else.
        barrier(server, a)
        assert resolved(a.nb.snapshot()) == resolved(simulate(before, plan))
        # Steady state: the planner plans nothing and nothing is written.
        again = a.ensure(KEY, VPC, "a", trunk("worker1", "worker2", "worker5"), ["b"])
        assert again == dataclasses.replace(plan.state, adopted=False, updated=False)
        assert plans[-1].actions == () and a.transactions == 1
    finally:
        a.stop()


def test_a_pointer_set_between_plan_and_commit_aborts_the_write(server):
    server.nbctl("ha-chassis-group-add", "hand")
    server.nbctl("set", "HA_Chassis_Group", "hand", "external_ids:owner=kube-ovn")
    hand = group_uuid(server, "hand")
    plans: list[nb_plan.NBPlan] = []

    def racing(*args, **kwargs):
        plan = nb_plan.plan_ensure(*args, **kwargs)
        if not plans:  # after the first decision: someone points the port meanwhile
            server.nbctl("set", "Logical_Router_Port", f"{VPC}-a", f"ha_chassis_group={hand}")
        plans.append(plan)
        return plan

    a = start(server, racing)
    try:
        state = a.ensure(KEY, VPC, "a", trunk("worker1", "worker2"))
        # The first plan would have created our group and pointed the port at it; the port
        # guard voided the whole transaction, and the second decision saw the new pointer.
        assert nb_plan.PointPort in {type(x) for x in plans[0].actions}
        assert len(plans) == 2 and plans[1].actions == ()
        assert state.reason == "ForeignGroup"
        assert state.message == (
            f'router port "{VPC}-a" already uses HA_Chassis_Group "hand" of "kube-ovn"; the controller leaves it alone')
        assert a.transactions == 0
        assert server.nbctl("--bare", "--columns=ha_chassis_group", "list", "Logical_Router_Port", f"{VPC}-a").strip() == hand
        assert group_uuid(server, f"px-{VPC}-a") == ""  # the group insert went with the abort
    finally:
        a.stop()


def test_a_pointer_changed_under_every_attempt_is_never_overwritten(server):
    """The port guard is on every write, not only the one that points the port: a
    priority repair of our group is voided when the pointer moves under it."""
    plain = start(server, nb_plan.plan_ensure)
    try:
        plain.ensure(KEY, VPC, "a", trunk("worker1", "worker2"))
    finally:
        plain.stop()
    ours = group_uuid(server, f"px-{VPC}-a")
    ch = server.nbctl("--bare", "--columns=_uuid", "find", "HA_Chassis", "chassis_name=ch-worker2").split()
    server.nbctl("set", "HA_Chassis", ch[0], "priority=55")  # something for the next pass to repair
    port = f"{VPC}-a"
    races = [lambda: server.nbctl("clear", "Logical_Router_Port", port, "ha_chassis_group"),
             lambda: server.nbctl("set", "Logical_Router_Port", port, f"ha_chassis_group={ours}")]
    plans: list[nb_plan.NBPlan] = []

    def racing(*args, **kwargs):
        plan = nb_plan.plan_ensure(*args, **kwargs)
        plans.append(plan)
        if races:
            races.pop(0)()
        return plan

    a = start(server, racing)
    try:
        with pytest.raises(NBChanged, match=f'OVN NB rows of router port "{port}" changed under the controller; '
                                            "the write was not applied"):
            a.ensure(KEY, VPC, "a", trunk("worker1", "worker2"))
        assert [type(x) for x in plans[0].actions] == [nb_plan.SetPriority]
        assert [type(x) for x in plans[1].actions] == [nb_plan.SetPriority, nb_plan.PointPort]
        assert a.transactions == 0
        assert server.nbctl("--bare", "--columns=priority", "list", "HA_Chassis", ch[0]).strip() == "55"
        assert server.nbctl("--bare", "--columns=ha_chassis_group", "list", "Logical_Router_Port", port).strip() == ours
        # Undisturbed, the next pass repairs it.
        assert a.ensure(KEY, VPC, "a", trunk("worker1", "worker2")).updated
        assert server.nbctl("--bare", "--columns=priority", "list", "HA_Chassis", ch[0]).strip() == "90"
    finally:
        a.stop()
