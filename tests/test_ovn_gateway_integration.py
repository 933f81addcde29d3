"""ovn.gateway.GatewayApplier against the real OVN NB ovsdb-server of the test bed.

Every case of reference-behaviour.md §9.4 and §9.6, each with the NB rows before and
after read back with ``ovn-nbctl`` (not through the applier's own cache). Priorities
and orders come from the spec's rendezvous vectors (§9.3): for ``vpc/vpc-x`` the scores
rank worker5 > worker4 > worker1 > worker2.
"""

from __future__ import annotations

import json
import secrets

import pytest

from ovn import nb_plan, planner
from ovn.gateway import GatewayApplier
from ovn.ovsdb import NBError, NBNotSynced

from tests.support.gateway import assigned
from tests.support.ovsdb import ha_chassis_groups
from hack.tools.wait import wait_for

pytestmark = pytest.mark.integration

VPC = "vpc-x"  # the spec's test-vector VPC; router ports are unique per test by subnet


def trunk(*workers: str) -> list[planner.TrunkNode]:
    return [planner.TrunkNode(w, f"ch-{w}") for w in workers]


class Bed:
    """One router port of VPC ``vpc-x`` and helpers to read/write NB rows by hand."""

    def __init__(self, cluster, applier: GatewayApplier) -> None:
        self.cluster = cluster
        self.applier = applier
        sfx = secrets.token_hex(3)
        self.subnet = f"s{sfx}"
        self.router = f"lr-{sfx}"
        self.lrp = planner.router_port_name(VPC, self.subnet)
        self.group = planner.group_name(VPC, self.subnet)
        self.key = f"ns-{sfx}/net-{sfx}"
        self.made_groups: list[str] = []

    def nbctl(self, *args: str) -> str:
        return self.cluster.nbctl(*args).strip()

    def add_port(self) -> None:
        self.nbctl("lr-add", self.router)
        self.nbctl("lrp-add", self.router, self.lrp, "00:00:00:00:cc:01", "10.77.0.1/24")

    def add_group(self, name: str, external_ids: dict[str, str] | None = None, chassis: dict[str, int] | None = None) -> str:
        self.nbctl("ha-chassis-group-add", name)
        self.made_groups.append(name)
        for k, v in (external_ids or {}).items():
            self.nbctl("set", "HA_Chassis_Group", name, f"external_ids:{k}={v}")
        for ch, prio in (chassis or {}).items():
            self.nbctl("ha-chassis-group-add-chassis", name, ch, str(prio))
        return self.uuid("HA_Chassis_Group", name)

    def with_group(self, *workers: str):
        """The router port, then our group over ``workers`` (through the applier)."""
        self.add_port()
        self.barrier()
        return ensure(self, *workers)

    def uuid(self, table: str, name: str) -> str:
        return self.nbctl("--bare", "--columns=_uuid", "find", table, f"name={name}")

    def barrier(self) -> None:
        """Wait until the applier's IDL has every NB change made so far (updates arrive in
        commit order, so seeing a marker row committed last is enough)."""
        marker = f"sync-{secrets.token_hex(4)}"
        self.nbctl("ha-chassis-group-add", marker)
        ix = self.applier.group_by_name
        wait_for(lambda: self.applier.nb.call(lambda idl: bool(ix.get(idl, marker))))
        self.nbctl("ha-chassis-group-del", marker)

    def rows(self) -> dict:
        """The port's pointer and gateway_chassis, and every HA_Chassis_Group of our name."""
        out: dict = {}
        port = json.loads(self.nbctl("--format=json", "--columns=ha_chassis_group,gateway_chassis",
                                     "find", "Logical_Router_Port", f"name={self.lrp}"))
        if port["data"]:
            hcg, gwc = port["data"][0]
            out["port_group"] = hcg[1] if hcg[0] == "uuid" else None
            out["port_gateway_chassis"] = len(gwc[1]) if gwc[0] == "set" else 1
        out["groups"] = ha_chassis_groups(self.nbctl, self.group)
        return out

    def cleanup(self) -> None:
        self.nbctl("--if-exists", "lr-del", self.router)
        for g in [self.group, *self.made_groups]:
            for u in self.nbctl("--bare", "--columns=_uuid", "find", "HA_Chassis_Group", f"name={g}").split():
                self.nbctl("--if-exists", "destroy", "HA_Chassis_Group", u)


@pytest.fixture
def applier(cluster):
    enqueued: list[str] = []
    a = GatewayApplier(cluster.nb_tcp, enqueue=enqueued.append).start()
    a.enqueued = enqueued  # type: ignore[attr-defined]
    try:
        assert a.nb.wait_synced(15), a.nb.last_error
        yield a
    finally:
        a.stop()


@pytest.fixture
def bed(cluster, applier):
    b = Bed(cluster, applier)
    try:
        yield b
    finally:
        b.cleanup()


def ensure(bed: Bed, *workers: str, siblings=()):
    return bed.applier.ensure(bed.key, VPC, bed.subnet, trunk(*workers), siblings)


def ours(bed: Bed) -> dict[str, str]:
    return {"owner": "proxmox-network", "network": bed.key}


# --------------------------------------------------------------------------- §9.4 create / steady


def test_creates_the_group_points_the_port_and_then_writes_nothing(bed):
    bed.add_port()
    bed.barrier()
    assert bed.rows() == {"port_group": None, "port_gateway_chassis": 0, "groups": []}

    st = ensure(bed, "worker2", "worker1")
    assert st.reason == "ChassisAssigned" and st.chassis == 2 and st.created
    assert st.message == assigned(bed.lrp, bed.group, [("ch-worker1", 100), ("ch-worker2", 90)])
    after = bed.rows()
    assert len(after["groups"]) == 1
    g = after["groups"][0]
    assert g["external_ids"] == ours(bed)
    assert g["chassis"] == {"ch-worker1": [100], "ch-worker2": [90]}
    assert after["port_group"] == g["uuid"]

    n = bed.applier.transactions
    again = ensure(bed, "worker1", "worker2")
    assert again.reason == "ChassisAssigned" and not (again.created or again.adopted or again.updated)
    assert bed.applier.transactions == n  # steady state: no NB write
    assert bed.rows() == after


def test_no_router_port_writes_nothing(bed):
    st = ensure(bed, "worker1")
    assert (st.reason, st.message, st.chassis) == (
        "RouterPortMissing", f'OVN has no logical router port "{bed.lrp}" yet', 0)
    assert bed.rows() == {"groups": []}


def test_router_port_missing_even_with_our_group(bed):
    bed.add_group(bed.group, ours(bed), {"ch-worker1": 100})
    bed.barrier()
    before = bed.rows()
    st = ensure(bed, "worker1")
    assert (st.reason, st.chassis) == ("RouterPortMissing", 0)
    assert bed.rows() == before


# --------------------------------------------------------------------------- §9.4 foreign cases


def test_group_of_another_owner_is_left_alone(bed):
    bed.add_port()
    bed.add_group(bed.group, {"owner": "kube-ovn"}, {"ch-other": 5})
    bed.barrier()
    before = bed.rows()
    st = ensure(bed, "worker1")
    assert st.reason == "ForeignGroup"
    assert st.message == f'OVN HA_Chassis_Group "{bed.group}" belongs to "kube-ovn"; the controller leaves it alone'
    assert bed.rows() == before


def test_group_of_another_network_is_left_alone(bed):
    bed.add_group(bed.group, {"owner": "proxmox-network", "network": "other/net"}, {"ch-other": 5})
    bed.barrier()
    before = bed.rows()
    # Checked before the port exists (decision 1 precedes 2).
    st = ensure(bed, "worker1")
    assert st.reason == "ForeignGroup"
    assert st.message == (
        f'OVN HA_Chassis_Group "{bed.group}" belongs to network "other/net"; the controller leaves it alone')
    assert bed.rows() == before


def test_port_with_gateway_chassis_is_left_alone(bed):
    bed.add_port()
    bed.nbctl("lrp-set-gateway-chassis", bed.lrp, "ch-manual", "20")
    bed.barrier()
    before = bed.rows()
    assert before["port_gateway_chassis"] == 1
    st = ensure(bed, "worker1")
    assert st.reason == "ForeignGroup"
    assert st.message == f'router port "{bed.lrp}" has 1 gateway_chassis; the controller leaves it alone'
    assert bed.rows() == before


@pytest.mark.parametrize("owner", ["neutron", None])
def test_port_pointing_at_another_group_is_left_alone(bed, owner):
    bed.add_port()
    other = f"hand-{secrets.token_hex(3)}"
    uuid = bed.add_group(other, {"owner": owner} if owner else {}, {"ch-x": 1})
    bed.nbctl("set", "Logical_Router_Port", bed.lrp, f"ha_chassis_group={uuid}")
    bed.barrier()
    before = bed.rows()
    st = ensure(bed, "worker1")
    described = f'HA_Chassis_Group "{other}" of "{owner}"' if owner else f'HA_Chassis_Group "{other}"'
    assert st.reason == "ForeignGroup"
    assert st.message == f'router port "{bed.lrp}" already uses {described}; the controller leaves it alone'
    assert bed.rows() == before


def test_no_trunk_nodes_leaves_the_group_and_the_port_alone(bed):
    bed.add_port()
    bed.add_group(bed.group, ours(bed), {"ch-worker1": 100, "ch-worker2": 90})
    bed.barrier()
    before = bed.rows()
    st = ensure(bed)
    assert (st.reason, st.chassis) == ("NoTrunkNodes", 2)
    assert st.message == "no node of the zone's provider network is ready with an OVN chassis"
    assert bed.rows() == before
    assert before["port_group"] is None  # an empty or stale group is never attached (B06)


# --------------------------------------------------------------------------- adopt / update


def test_unowned_group_is_adopted_in_place_keeping_other_keys(bed):
    bed.add_port()
    uuid = bed.add_group(bed.group, {"note": "made by hand"}, {"ch-worker2": 7, "ch-stale": 3})
    bed.barrier()
    st = ensure(bed, "worker1", "worker2")
    assert st.reason == "ChassisAssigned" and st.adopted and not st.created
    after = bed.rows()
    assert [g["uuid"] for g in after["groups"]] == [uuid]
    g = after["groups"][0]
    assert g["external_ids"] == {"note": "made by hand", **ours(bed)}
    assert g["chassis"] == {"ch-worker1": [100], "ch-worker2": [90]}  # stale member gone (B08)
    assert after["port_group"] == uuid


def test_duplicate_chassis_rows_are_dropped(bed):
    bed.add_port()
    uuid = bed.add_group(bed.group, ours(bed))
    # Two HA_Chassis rows naming the same chassis (ovn-nbctl refuses that, so by hand).
    for prio in (100, 55):
        bed.nbctl("--", "--id=@c", "create", "HA_Chassis", "chassis_name=ch-worker1", f"priority={prio}",
                  "--", "add", "HA_Chassis_Group", uuid, "ha_chassis", "@c")
    bed.barrier()
    assert sorted(bed.rows()["groups"][0]["chassis"]["ch-worker1"]) == [55, 100]
    st = ensure(bed, "worker1")
    assert st.reason == "ChassisAssigned"
    assert len(bed.rows()["groups"][0]["chassis"]["ch-worker1"]) == 1


def test_joining_node_keeps_the_active_chassis_and_leaving_active_moves_it(bed):
    bed.add_port()
    bed.barrier()
    assert ensure(bed, "worker1", "worker2").active == "ch-worker1"
    # worker5 has the best score for vpc/vpc-x, yet the active chassis stays (§4.7).
    st = ensure(bed, "worker1", "worker2", "worker5")
    assert st.active == "ch-worker1"
    assert bed.rows()["groups"][0]["chassis"] == {"ch-worker1": [100], "ch-worker5": [90], "ch-worker2": [80]}
    # The active node leaves: the rendezvous order decides again.
    st = ensure(bed, "worker2", "worker5")
    assert st.active == "ch-worker5"
    assert bed.rows()["groups"][0]["chassis"] == {"ch-worker5": [100], "ch-worker2": [90]}


def test_every_router_port_of_a_vpc_keeps_the_vpc_active_chassis(cluster, applier):
    a, b = Bed(cluster, applier), Bed(cluster, applier)
    try:
        a.add_port()
        b.add_port()
        a.barrier()
        assert ensure(a, "worker1", "worker2").active == "ch-worker1"
        # b is new, and worker5 would top the rendezvous order, but the VPC's active is worker1.
        st = ensure(b, "worker1", "worker2", "worker5", siblings=[a.subnet])
        assert st.active == "ch-worker1"
        # Without the sibling, the plain rendezvous order applies (control).
        c = Bed(cluster, applier)
        try:
            c.add_port()
            c.barrier()
            assert ensure(c, "worker1", "worker2", "worker5").active == "ch-worker5"
        finally:
            c.cleanup()
    finally:
        a.cleanup()
        b.cleanup()


# --------------------------------------------------------------------------- guard


class RacingApplier(GatewayApplier):
    """Edits the NB with ovn-nbctl after the decision and before the commit, on the owner
    thread, so the IDL's rows are stale at commit time: the planner it is given (the
    constructor's ``plan``) is the product's, followed by ``race`` once a plan writes."""

    race = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, plan=self._plan_then_race, **kwargs)

    def _plan_then_race(self, *args, **kwargs):
        plan = nb_plan.plan_ensure(*args, **kwargs)
        if plan.actions and self.race is not None:
            race, self.race = self.race, None
            race()
        return plan


@pytest.fixture
def racing(cluster):
    """A RacingApplier and a bed with its router port."""
    a = RacingApplier(cluster.nb_tcp).start()
    bed = Bed(cluster, a)
    try:
        assert a.nb.wait_synced(15), a.nb.last_error
        bed.add_port()
        bed.barrier()
        yield a, bed
    finally:
        a.stop()
        bed.cleanup()


def test_a_concurrent_edit_aborts_the_whole_write(racing):
    a, bed = racing
    a.race = lambda: bed.nbctl("lrp-set-gateway-chassis", bed.lrp, "ch-manual", "20")
    st = ensure(bed, "worker1", "worker2")
    # The first write (group insert + port pointer) was refused as a whole; the retry
    # saw the gateway port and left it alone.
    assert st.reason == "ForeignGroup"
    assert st.message == f'router port "{bed.lrp}" has 1 gateway_chassis; the controller leaves it alone'
    assert bed.rows() == {"port_group": None, "port_gateway_chassis": 1, "groups": []}
    assert a.transactions == 0


def test_a_concurrent_priority_edit_is_not_overwritten_blindly(racing):
    a, bed = racing
    ensure(bed, "worker1", "worker2")
    g = bed.uuid("HA_Chassis_Group", bed.group)

    def race():
        # Someone drops worker2's row while we add worker5.
        ch = bed.nbctl("--bare", "--columns=_uuid", "find", "HA_Chassis", "chassis_name=ch-worker2")
        for u in ch.split():
            bed.nbctl("remove", "HA_Chassis_Group", g, "ha_chassis", u)

    a.race = race
    st = ensure(bed, "worker1", "worker2", "worker5")
    assert st.reason == "ChassisAssigned"
    # The retry decided from the new rows: every wanted chassis is there exactly once.
    assert bed.rows()["groups"][0]["chassis"] == {"ch-worker1": [100], "ch-worker5": [90], "ch-worker2": [80]}


# --------------------------------------------------------------------------- drift / events


def test_cleared_pointer_enqueues_the_network_and_the_next_pass_repairs_it(bed):
    bed.with_group("worker1")
    uuid = bed.rows()["groups"][0]["uuid"]
    bed.applier.enqueued.clear()
    bed.nbctl("clear", "Logical_Router_Port", bed.lrp, "ha_chassis_group")
    wait_for(lambda: bed.key in bed.applier.enqueued)
    st = ensure(bed, "worker1")
    assert st.reason == "ChassisAssigned"
    assert bed.rows()["port_group"] == uuid  # the same group is reused


def test_edit_of_our_chassis_row_enqueues_the_network(bed):
    bed.add_port()
    bed.barrier()
    ensure(bed, "worker1", "worker2")
    bed.applier.enqueued.clear()
    ch = bed.nbctl("--bare", "--columns=_uuid", "find", "HA_Chassis", "chassis_name=ch-worker2").split()
    bed.nbctl("set", "HA_Chassis", ch[-1], "priority=1")
    wait_for(lambda: bed.key in bed.applier.enqueued)


def test_unrelated_rows_enqueue_nothing(bed):
    bed.with_group("worker1")
    bed.applier.enqueued.clear()
    other = Bed(bed.cluster, bed.applier)
    try:
        other.add_port()
        other.add_group(f"hand-{secrets.token_hex(3)}", {"owner": "neutron"}, {"ch-x": 1})
        other.barrier()
        assert bed.applier.enqueued == []
    finally:
        other.cleanup()


# --------------------------------------------------------------------------- §9.6 release / collect


def test_release_clears_the_pointer_and_deletes_only_our_groups(bed, cluster, applier):
    bed.with_group("worker1")
    neighbour = Bed(cluster, applier)
    try:
        neighbour.with_group("worker1")
        foreign = bed.add_group(f"hand-{secrets.token_hex(3)}", {"owner": "proxmox-network"})  # no network key
        bed.barrier()
        assert applier.release(bed.key) == 1
        assert bed.rows() == {"port_group": None, "port_gateway_chassis": 0, "groups": []}
        assert len(neighbour.rows()["groups"]) == 1 and neighbour.rows()["port_group"]
        assert bed.nbctl("--bare", "--columns=_uuid", "list", "HA_Chassis_Group", foreign) == foreign
        assert applier.release(bed.key) == 0  # idempotent
    finally:
        neighbour.cleanup()


def test_collect_deletes_groups_of_missing_networks_only(bed, cluster, applier):
    bed.with_group("worker1")
    kept = Bed(cluster, applier)
    bad = f"hand-{secrets.token_hex(3)}"
    try:
        kept.with_group("worker1")
        bed.add_group(bad, {"owner": "proxmox-network", "network": "no-slash"})
        bed.barrier()
        live = {tuple(kept.key.split("/"))}
        asked = []

        def exists(ns, name):
            asked.append((ns, name))
            return (ns, name) in live

        deleted = applier.collect(exists)
        assert deleted >= 1
        assert bed.rows() == {"port_group": None, "port_gateway_chassis": 0, "groups": []}
        assert len(kept.rows()["groups"]) == 1
        assert bed.uuid("HA_Chassis_Group", bad)  # an invalid network id is kept, never guessed
        assert ("no-slash", "") not in asked
    finally:
        kept.cleanup()


def test_collect_stops_at_the_first_api_error(bed, applier):
    bed.with_group("worker1")

    def failing(ns, name):
        raise RuntimeError("apiserver unavailable")

    with pytest.raises(RuntimeError):
        applier.collect(failing)
    assert len(bed.rows()["groups"]) == 1


# --------------------------------------------------------------------------- not synced


def test_an_unreachable_nb_is_an_error_not_an_empty_database(cluster):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    a = GatewayApplier(f"tcp:127.0.0.1:{port}").start()
    try:
        with pytest.raises(NBNotSynced):
            a.ensure("ns/n", VPC, "s", trunk("worker1"))
        with pytest.raises(NBError):
            a.release("ns/n")
    finally:
        a.stop()


def test_renamed_router_port_enqueues_its_network(bed):
    """Field review: a port renamed away must bring its network back at once (§4.8)."""
    bed.with_group("worker1")
    bed.applier.enqueued.clear()
    bed.nbctl("set", "Logical_Router_Port", bed.lrp, "name=renamed-by-hand")
    wait_for(lambda: bed.key in bed.applier.enqueued)
    assert ensure(bed, "worker1").reason == "RouterPortMissing"


def test_a_hand_raised_priority_in_one_group_does_not_move_the_vpc(cluster, applier):
    """Field review: one stray priority (200) in one group of a two-group VPC."""
    a, b = Bed(cluster, applier), Bed(cluster, applier)
    try:
        a.with_group("worker1", "worker2")
        b.add_port()
        b.barrier()
        ensure(b, "worker1", "worker2", siblings=[a.subnet])
        uuid = b.uuid("HA_Chassis_Group", b.group)
        ch = b.nbctl("--bare", "--columns=_uuid", "find", "HA_Chassis", "chassis_name=ch-worker2").split()
        members = set(b.nbctl("--bare", "--columns=ha_chassis", "list", "HA_Chassis_Group", uuid).split())
        b.nbctl("set", "HA_Chassis", next(u for u in ch if u in members), "priority=200")
        b.barrier()
        st = ensure(b, "worker1", "worker2", siblings=[a.subnet])
        assert st.active == "ch-worker1"
        assert b.rows()["groups"][0]["chassis"] == {"ch-worker1": [100], "ch-worker2": [90]}
        assert ensure(a, "worker1", "worker2", siblings=[b.subnet]).active == "ch-worker1"
    finally:
        a.cleanup()
        b.cleanup()


def test_losing_the_nb_rechecks_every_managed_network_after_a_delay(tmp_path):
    """Field review: the failure start is recorded soon after the outage, not at the
    next 5 min pass (the delay lets a short blip pass without writes)."""
    from tests.support.ovsdb import NBServer

    server = NBServer(tmp_path / "nb").start()
    later: list[tuple[str, float]] = []
    a = GatewayApplier(server.remote, enqueue_after=lambda key, d: later.append((key, d))).start()
    try:
        assert a.nb.wait_synced(15), a.nb.last_error
        server.nbctl("lr-add", "r")
        server.nbctl("lrp-add", "r", f"{VPC}-s1", "00:00:00:00:cc:09", "10.78.0.1/24")
        wait_for(lambda: a.nb.call(lambda idl: bool(a.lrp_by_name.get(idl, f"{VPC}-s1"))))
        assert a.ensure("ns/n1", VPC, "s1", trunk("worker1")).reason == "ChassisAssigned"
        server.stop()
        wait_for(lambda: ("ns/n1", 10.0) in later, timeout=20)
    finally:
        a.stop()
        server.stop()
