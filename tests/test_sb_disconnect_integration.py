"""Field reports, fourth round, S8: OVN SB outages never move a group, on the real peers
(``peers_bed``: kube-apiserver, the OVN NB and SB ovsdb-servers with ovn-northd between them,
the real kube-ovn-controller and IPAM provider; a bed of this module's own, since it stops
the SB).

Kube-OVN v1.15.13, the last release whose ``gcChassis`` dereferenced the nil result of a
failed ``ListChassis`` (kubeovn/kube-ovn#6835, fixed in v1.15.14), is not in this bed: it runs
v1.15.24 (hack/versions.env), whose ``gcChassis`` logs the error and returns it
(pkg/controller/gc.go), so here kube-ovn-controller must ride the outages out too; the test
checks that it did (same pid), and the field report's crash loop is not reproduced.

Without a data plane no ovn-controller claims the chassis-redirect bindings: the test plays
that part (``tests.support.sbclaim``: SB chassis rows for the trunk nodes, ``cr-<port>`` bound
to its group's top chassis). Several networks are served (``GatewayReady=True``, the
serving chassis in status). The SB ovsdb-server is then taken away three times: SIGSTOP (a
hung or partitioned server: the controller's 5 s inactivity probe finds it in about 10 s),
kill and restart (a pod restart: connection refused), SIGSTOP again; each outage lasts at
least 12 s and until every network says so (13-21 s measured; the second also until the
deletion below is done). During the second a network is created and another one
deleted with its Subnet; as the third ends a trunk node's chassis row is registered again
(a new row UUID for the same system-id). Checked, from the NB itself (``ovn-nbctl`` and an
independent ``ovsdb-client monitor`` of HA_Chassis_Group and HA_Chassis) and the status:

* across every outage each group keeps its rows, members and priorities; the only NB changes
  of the whole run are the new network's group (created while the SB was down: the NB
  answers) and the deleted network's (deleted with it); never an emptied group;
* while the SB is away GatewayReady is ``Unknown/SBUnavailable`` naming the SB error and
  Ready stays as it was (product-decisions.md §10), ``status.servingChassis`` keeps the last
  chassis seen;
* the deleted network's VLAN is released while the SB is still down (the release reads the
  API server and the NB, never the SB);
* after each outage every network says it is served again (the new one too) within 10 s
  (the SB's re-sync queues every managed network: before, a binding that had not changed
  waited for the 30 s retry), and
  the controller's NB transactions after the recovery and a full resync are zero: at most
  one per group, as the report asks;
* the controller's work loop never died, kube-ovn-controller never restarted.
"""

from __future__ import annotations

import itertools
import signal
import time
from typing import Any

import pytest

from hack.bed import LocalCluster
from hack.chaoskit import start_ovsdb, stop_ovsdb
from hack.tools.objects import PX, Admin, reason, unique
from hack.tools.wait import wait_for
from tests.support.ovsdb import RowMonitor, ha_chassis_groups
from tests.support.peers import KUBE_OVN, KUBEOVN, Ctl, Trunk, kube_get, make_vpc
from tests.support.sbclaim import Claimer

pytestmark = pytest.mark.integration

VPC = "vpc-x"
TRUNK = (("worker1", "ch-worker1"), ("worker2", "ch-worker2"))
WAIT = 60.0
PRUNE = 10.0  # --subnet-prune-timeout, seconds
OUTAGE = 12.0  # seconds each outage lasts at least
RECOVERED = 10.0  # seconds within which every network says it is served again after the SB is back


@pytest.fixture(scope="module")
def bed(peers_bed: LocalCluster) -> LocalCluster:
    return peers_bed


@pytest.fixture(scope="module")
def admin(peers_admin: Admin) -> Admin:
    return peers_admin


class Tenant:
    def __init__(self, bed: LocalCluster, admin: Admin, provider: str, claimer: Claimer) -> None:
        self.bed, self.a, self.claimer = bed, admin, claimer
        self.zone, self.ns = unique("zone"), unique("tenant")
        admin.create_zone(self.zone, provider, ["2500-2599"])
        admin.core.create_namespace({"metadata": {"name": self.ns}})
        self.nets: dict[str, dict[str, str]] = {}
        self._octets = itertools.count(90)

    def network(self, name: str) -> dict[str, str]:
        made = self.a.create_proxmox_subnet(self.ns, name, self.zone, VPC, f"10.{next(self._octets)}.0")
        self.nets[name] = made
        return made

    def get(self, name: str) -> dict:
        return self.a.network(self.ns, name)

    def gone(self, name: str) -> bool:
        try:
            self.get(name)
        except Exception as exc:  # noqa: BLE001 - the client's 404
            return getattr(exc, "status", None) == 404
        return False

    def served(self, name: str) -> dict | None:
        """The network once Ready and served by the top chassis of its group (claimed here)."""
        self.claimer.claim(self.nets[name]["router_port"])
        obj = self.get(name)
        gw = reason(obj, "GatewayReady") or ("", "", "")
        ready = reason(obj, "Ready") or ("", "", "")
        return obj if ready[0] == "True" and gw[:2] == ("True", "ChassisAssigned") and "serves it" in gw[2] else None

    def groups(self, names: Any = None) -> dict[str, list[dict]]:
        return {n: ha_chassis_groups(self.bed.nbctl, m["group"]) for n, m in self.nets.items()
                if names is None or n in names}


def sb_down(bed: LocalCluster, how: str) -> None:
    if how == "pause":
        bed._procs["ovsdb-sb"].send_signal(signal.SIGSTOP)
    else:
        stop_ovsdb(bed, "sb")


def sb_up(bed: LocalCluster, how: str) -> None:
    if how == "pause":
        bed._procs["ovsdb-sb"].send_signal(signal.SIGCONT)
    else:
        start_ovsdb(bed, "sb")  # on this thread: the bed's processes die with their thread


@pytest.mark.timeout(900)
def test_three_sb_outages_move_no_group_and_the_release_does_not_wait_for_the_sb(bed, admin):
    trunk = Trunk(admin, TRUNK)
    make_vpc(admin, VPC)
    claimer = Claimer(bed, {ch: node for node, ch in TRUNK})
    claimer.register()
    t = Tenant(bed, admin, trunk.provider, claimer)
    ctl = Ctl(bed, manage_gateway=True, ovn_nb_address=bed.nb_tcp, ovn_sb_address=bed.sb_tcp,
              subnet_prune_timeout=PRUNE)
    kube_ovn_pid = bed.peer_pid(KUBE_OVN)
    kube_ovn_log = bed.workdir / f"{KUBE_OVN}.log"
    offset = kube_ovn_log.stat().st_size
    ctl.start()
    down: str | None = None
    try:
        for name in ("s8a", "s8b", "s8c", "s8old"):
            t.network(name)
        for name in list(t.nets):
            wait_for(lambda n=name: t.served(n), timeout=2 * WAIT, what=f"{name} Ready and served")
        ctl.resync()
        mgr, applier = ctl.mgr, ctl.mgr.gateway.applier
        before = t.groups()
        assert all(len(g) == 1 and g[0]["chassis"] == {"ch-worker1": [100], "ch-worker2": [90]}
                   for g in before.values()), before
        old_vlan = t.nets["s8old"]["subnet"]
        want = dict(before)  # network -> its group's rows, as they must stay
        with RowMonitor(bed.nb_tcp, "HA_Chassis_Group") as mon_g, RowMonitor(bed.nb_tcp, "HA_Chassis") as mon_c:
            t_start = time.monotonic()
            for i, how in enumerate(("pause", "kill", "pause"), start=1):
                existing = list(want)
                served = {n: t.get(n)["status"]["servingChassis"] for n in existing}
                sb_down(bed, down := how)
                lost_at = time.monotonic()
                wait_for(lambda: not mgr.gateway.sb.synced(), timeout=WAIT, what=f"outage {i}: the SB lost")

                def unknown(n: str) -> dict | None:
                    o = t.get(n)
                    gw = reason(o, "GatewayReady") or ("", "", "")
                    return o if gw[:2] == ("Unknown", "SBUnavailable") else None

                for n in existing:
                    o = wait_for(lambda n=n: unknown(n), timeout=WAIT, what=f"outage {i}: {n} SBUnavailable")
                    assert "OVN SB has not answered since" in reason(o, "GatewayReady")[2]
                    assert reason(o, "Ready")[:2] == ("True", "Ready"), (i, n, reason(o, "Ready"))
                    assert o["status"]["servingChassis"] == served[n]  # the last one seen, kept
                if i == 2:
                    # A network made and another deleted while the SB is away.
                    t.network("s8")
                    admin.co.delete_namespaced_custom_object(*PX, t.ns, "proxmoxnetworks", "s8old")
                    admin.co.delete_cluster_custom_object(*KUBEOVN, "subnets", old_vlan)
                    wait_for(lambda: t.gone("s8old") and kube_get(admin, "vlans", old_vlan) is None,
                             timeout=WAIT, what="s8old gone, its VLAN released")
                    assert not mgr.gateway.sb.synced(), "released while the SB was still down"
                    made = wait_for(lambda: ha_chassis_groups(bed.nbctl, t.nets["s8"]["group"]), timeout=WAIT,
                                    what="s8's group made while the SB is down")
                    assert [g["chassis"] for g in made] == [{"ch-worker1": [100], "ch-worker2": [90]}]
                    del want["s8old"]
                    s8 = t.get("s8")
                    print(f"\noutage 2: s8 made while the SB is down: Ready {reason(s8, 'Ready')[:2]}, "
                          f"GatewayReady {reason(s8, 'GatewayReady')[:2]}")
                assert t.groups(want) == want, f"outage {i}: a group moved"
                time.sleep(max(0.0, OUTAGE - (time.monotonic() - lost_at)))  # the outage's length, not a check
                assert t.groups(want) == want, f"outage {i}: a group moved"
                sb_up(bed, how)
                down = None
                back_at = time.monotonic()
                if i == 3:
                    claimer.reregister("ch-worker2")  # a trunk node's chassis row made again as the SB returns
                tx = applier.transactions
                wait_for(mgr.gateway.sb.synced, timeout=WAIT, what=f"outage {i}: the SB synced again")
                if i == 2:
                    want["s8"] = made  # served once the SB is back (its cr- is claimed then)
                for n in want:
                    wait_for(lambda n=n: t.served(n), timeout=WAIT, what=f"after outage {i}: {n} served again")
                took = time.monotonic() - back_at
                ctl.resync()
                print(f"outage {i} ({how}): {back_at - lost_at:.1f}s; every network served again "
                      f"{took:.1f}s after the SB was back; NB transactions of ours after it: {applier.transactions - tx}")
                assert applier.transactions == tx, f"after outage {i}: an NB write of ours"
                assert took < RECOVERED, f"after outage {i}: {took:.1f}s to say every network is served"
                assert t.groups(want) == want, f"after outage {i}: a group moved"
                assert mgr.healthy()
            t_end = time.monotonic()
            # The NB's own account of the whole run: s8's group and its two chassis came, s8old's went.
            ours = [(a, n) for _, a, _, n, _, _ in mon_g.events if n.startswith("px-")]
            assert sorted(ours) == sorted([("insert", t.nets["s8"]["group"]), ("delete", t.nets["s8old"]["group"])]), \
                ours
            rows = [(a, (r or {}).get("chassis_name")) for tm, a, _, _, _, r in mon_c.events if t_start <= tm <= t_end]
            assert sorted(a for a, _ in rows) == ["delete", "delete", "insert", "insert"], rows
        # kube-ovn-controller v1.15.24 saw the outages (its database health check, every 15 s,
        # exits after 11 failures in a row: pkg/controller/controller.go dbStatus) and lived on.
        with open(kube_ovn_log, "rb") as f:
            f.seek(offset)
            seen = [ln for ln in f.read().decode(errors="replace").splitlines()
                    if "OVN database" in ln or "failed to get all chassis" in ln]
        print(f"kube-ovn-controller on the outages ({len(seen)} lines):\n" + "\n".join(ln[:220] for ln in seen[:12]))
        assert bed.peer_pid(KUBE_OVN) == kube_ovn_pid, "kube-ovn-controller restarted"
    finally:
        if down is not None:
            sb_up(bed, down)
        ctl.stop()
