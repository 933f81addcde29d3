"""The chaos harness (hack/chaos.py) in its short form, plus checks that its invariant
monitor does catch what it is meant to catch.

product-decisions.md §6: no VLAN is ever held by two networks of one provider, and no VLAN
is released while a consumer exists or while Kube-OVN still lists a live subnet on it —
under restarts, cache lag and kills. Field reports B01 (duplicates), B11/B12 (watches
through an API server restart and a compaction), B13 (a leader that dies is replaced).

The short form runs in a bed of its own (the API server is restarted): two controller
replicas with leader election next to the real kube-ovn-controller and IPAM provider, a load
of creates and deletes, and 5 leader kills, 1 API server restart, 1 etcd compaction, 1 NB
restart, 1 kill and restart of kube-ovn-controller and 1 of the IPAM provider. The long form
(``python hack/chaos.py --kills 50 ...``) writes the figures of docs/reliability.md.

The pods' short form is tests/test_chaos_pods_integration.py (a module of its own, so that
the two long runs go to two pytest-xdist workers).
"""

from __future__ import annotations

import json

import pytest

from hack.chaoskit import BED_FAULT_KINDS, POD_FAULT_KINDS, ChaosConfig, InvariantMonitor, longest_unheld, pool_refs
from tests.support.chaos import run_clean

pytestmark = pytest.mark.chaos


# --------------------------------------------------------------------------- the monitor itself


def vlan(name: str, vid: int, provider: str = "pn0", rv: int = 1, ns: str = "ns1", net: str = "n1",
         subnets: list[str] | None = None) -> dict:
    return {"metadata": {"name": name, "resourceVersion": str(rv),
                         "labels": {"proxmox.cozystack.io/network-namespace": ns,
                                    "proxmox.cozystack.io/network-name": net}},
            "spec": {"id": vid, "provider": provider}, "status": {"subnets": subnets or []}}


def network(ns: str, name: str, pool: str, rv: int) -> dict:
    return {"metadata": {"namespace": ns, "name": name, "resourceVersion": str(rv)},
            "spec": {"zone": "z", "subnet": name, "ipPool": pool}}


def machine(ns: str, name: str, pool: str, rv: int) -> dict:
    ref = {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": pool}
    return {"metadata": {"namespace": ns, "name": name, "resourceVersion": str(rv)},
            "spec": {"network": {"networkDevices": [{"name": "net1", "ipPoolRef": [ref]}]}}}


def monitor() -> InvariantMonitor:
    return InvariantMonitor(cluster=None, namespaces={"ns1"}, providers={"pn0", "pn1"})  # type: ignore[arg-type]


def test_monitor_flags_two_vlans_with_one_id_on_one_provider_only():
    m = monitor()
    m._event("vlans", "ADDED", vlan("a", 100, "pn0", 1), 1, False)
    m._event("vlans", "ADDED", vlan("b", 100, "pn1", 2), 2, False)  # other provider: fine
    assert m.violations == []
    m._event("vlans", "ADDED", vlan("c", 100, "pn0", 3), 3, False)
    assert m.violations == ["duplicate VLAN 100 on provider pn0: ['a', 'c'] (rv 3)"]


def test_monitor_flags_a_release_while_a_machine_holds_the_pool():
    m = monitor()
    m._event("networks", "ADDED", network("ns1", "n1", "p1", 1), 1, False)
    m._event("vlans", "ADDED", vlan("s1", 100, rv=2), 2, False)
    m._event("machines", "ADDED", machine("ns1", "vm1", "p1", 3), 3, False)
    m._event("vlans", "DELETED", vlan("s1", 100, rv=5), 5, False)
    m._event("machines", "DELETED", machine("ns1", "vm1", "p1", 6), 6, False)  # gone only after
    assert m.judge() == 1
    assert m.violations == ["Vlan s1 (VLAN 100) deleted at rv 5 (watch) while machine ns1/vm1 referenced pool ns1/p1"]


def test_monitor_accepts_a_release_after_the_last_consumer_and_subnet_are_gone():
    m = monitor()
    m._event("networks", "ADDED", network("ns1", "n1", "p1", 1), 1, False)
    m._event("subnets", "ADDED", {"metadata": {"name": "s1", "resourceVersion": "2"}}, 2, False)
    m._event("machines", "ADDED", machine("ns1", "vm1", "p1", 3), 3, False)
    m._event("machines", "DELETED", machine("ns1", "vm1", "p1", 4), 4, False)
    m._event("subnets", "DELETED", {"metadata": {"name": "s1", "resourceVersion": "5"}}, 5, False)
    m._event("vlans", "DELETED", vlan("s1", 100, rv=6, subnets=["s1"]), 6, False)
    m.judge()
    assert m.violations == []


def test_monitor_flags_a_release_while_the_vlan_lists_a_live_subnet():
    m = monitor()
    m._event("subnets", "ADDED", {"metadata": {"name": "s1", "resourceVersion": "2"}}, 2, False)
    m._event("vlans", "DELETED", vlan("s1", 100, rv=6, subnets=["s1", "gone"]), 6, False)
    m.judge()
    assert m.violations == ["Vlan s1 deleted at rv 6 (watch) while it listed live Subnet s1"]


def test_pool_refs_reads_both_capmox_shapes_and_ipam_objects():
    ref = {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "p"}
    assert pool_refs({"spec": {"poolRef": ref}}) == ["p"]
    assert pool_refs({"spec": {"network": {"additionalDevices": [{"ipv4PoolRef": ref}]}}}) == ["p"]
    assert pool_refs({"spec": {"network": {"networkDevices": [{"name": "net0"}, {"ipPoolRef": [ref]}]}}}) == ["p"]


# --------------------------------------------------------------------------- the short form


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_chaos_short_form(tmp_path):
    # About 3 minutes on 2 cores, most of it the 15 s lease a standby waits out after each kill.
    cfg = ChaosConfig(kills=5, api_restarts=1, compactions=1, nb_restarts=1, kubeovn_restarts=1, ipam_restarts=1,
                      slots=20, initial_networks=10,
                      namespaces=3, zones=4, seed=7, workdir=str(tmp_path / "chaos"), load_window=(0.5, 2.5),
                      api_down=2.0, converge_timeout=150.0)
    res = run_clean(cfg)
    assert {k: res.survived(k) for k in ("kill", *BED_FAULT_KINDS, *POD_FAULT_KINDS)} == {
        "kill": 5, "api": 1, "compact": 1, "nb": 1, "kubeovn": 1, "ipam": 1,
        "poddelete": 0, "podkill": 0, "rollout": 0, "oom": 0}
    killed = [e for e in res.replica_exits if e["killed"]]
    assert len(killed) == 5  # every kill hit a live leader, and it was replaced
    assert res.wire is not None and res.wire["replies"] > 0, res.wire  # its problems are violations (run_clean)
    # The monitor did watch releases happen (it is not vacuously clean).
    assert res.vlan_deletions_checked >= 10
    assert res.ops.get("delete", 0) >= 10 and res.ops.get("consumer", 0) >= 1


def test_monitor_leaves_a_judgement_open_when_a_relist_hides_when_the_consumer_went():
    """After an API server restart the kinds relist at different resourceVersions: a
    machine whose delete is only seen by a later relist may have gone before the Vlan did.
    That is not counted as a violation (nor as clean): it is reported as open."""
    m = monitor()
    m._event("networks", "ADDED", network("ns1", "n1", "p1", 1), 1, False)
    m._event("machines", "ADDED", machine("ns1", "vm1", "p1", 3), 3, False)
    m._event("vlans", "DELETED", vlan("s1", 100, rv=8), 8, False)
    m._event("machines", "DELETED", machine("ns1", "vm1", "p1", 3), 10, True)  # relist at rv 10
    m.judge()
    assert m.violations == []
    assert m.uncertain == ["Vlan s1 (VLAN 100) deleted at rv 8 (watch) while machine ns1/vm1 referenced pool ns1/p1"]


def test_monitor_leaves_a_judgement_open_when_relists_hide_both_the_vlans_and_the_subnets_delete():
    """Found by the chaos short form on Kube-OVN v1.15: the Vlan's delete and its Subnet's
    delete both seen only by relists; the Subnet may have gone before the Vlan (the audit
    log showed it had), so the release is reported as open, not as a violation."""
    m = monitor()
    m._event("subnets", "ADDED", {"metadata": {"name": "s1", "resourceVersion": "2"}}, 2, False)
    m._event("vlans", "ADDED", vlan("s1", 100, rv=3, subnets=["s1"]), 3, False)
    m._event("vlans", "DELETED", vlan("s1", 100, rv=3, subnets=["s1"]), 9, True)  # relist at rv 9
    m._event("subnets", "DELETED", {"metadata": {"name": "s1", "resourceVersion": "2"}}, 11, True)  # relist at rv 11
    m.judge()
    assert m.violations == []
    assert m.uncertain == ["Vlan s1 deleted at rv 9 (relist) while it listed live Subnet s1"]


def test_audit_log_recheck_confirms_overlapping_lifetimes_and_refutes_the_rest(tmp_path):
    """A duplicate flagged by the monitor is checked against the API server's audit log:
    confirmed when both Vlans existed at once, refuted when one was gone before the other
    was created (a watch that missed a delete around an API server restart)."""
    from hack.chaoskit import recheck_duplicates

    def ev(verb, name, t):
        return json.dumps({"stage": "ResponseComplete", "verb": verb, "stageTimestamp": f"2026-01-01T00:00:{t:02d}Z",
                           "objectRef": {"resource": "vlans", "name": name}, "responseStatus": {"code": 201 if verb == "create" else 200}})
    log = tmp_path / "audit.log"
    log.write_text("\n".join([ev("create", "a", 1), ev("delete", "a", 5), ev("create", "b", 6),
                              ev("create", "c", 7), ev("create", "d", 8), ev("delete", "c", 9)]) + "\n")
    flags = ["duplicate VLAN 7 on provider p: ['a', 'b'] (rv 10)", "duplicate VLAN 8 on provider p: ['c', 'd'] (rv 11)",
             "Vlan x deleted at rv 3 (watch) while it listed live Subnet x"]
    confirmed, refuted = recheck_duplicates(flags, log)
    assert confirmed == flags[1:]
    assert len(refuted) == 1 and refuted[0].startswith(flags[0] + ": refuted by the audit log")


def test_a_relist_that_sees_a_delete_and_a_reuse_flags_no_duplicate():
    """Review finding: the relist applied adds before deletes, so a Vlan deleted and its ID
    reused while the watch was down looked like two Vlans holding one ID."""
    m = monitor()
    m.synced["vlans"] = True
    m._snapshot("vlans", [vlan("x", 104, rv=3)], 3)
    m._snapshot("vlans", [vlan("y", 104, rv=9)], 10)  # x gone, y created meanwhile
    assert m.violations == [] and m.duplicates == []
    m._snapshot("vlans", [vlan("y", 104, rv=9), vlan("z", 104, rv=11)], 12)  # a real twin
    assert m.duplicates == ["duplicate VLAN 104 on provider pn0: ['y', 'z'] (rv 11)"]


def test_a_release_seen_only_by_a_relist_is_judged_over_its_whole_window():
    """Review finding: a synthesized delete was judged at the list's resourceVersion only,
    so a consumer deleted in between made a real violation look clean."""
    m = monitor()
    m._event("networks", "ADDED", network("ns1", "n1", "p1", 1), 1, False)
    m._event("machines", "ADDED", machine("ns1", "vm1", "p1", 2), 2, False)
    m._event("machines", "ADDED", machine("ns1", "vm2", "p1", 3), 3, False)
    m._event("vlans", "ADDED", vlan("s1", 100, rv=4), 4, False)
    m._event("machines", "DELETED", machine("ns1", "vm1", "p1", 2), 25, False)  # vm1 went at 25
    m._event("vlans", "DELETED", vlan("s1", 100, rv=4), 30, True)  # the Vlan went in (4, 30]
    m.judge()
    # vm2 held the pool over the whole window: certain; vm1 only for part of it: open.
    assert m.violations == ["Vlan s1 (VLAN 100) deleted at rv 30 (relist) while machine ns1/vm2 referenced pool ns1/p1"]
    assert m.uncertain == ["Vlan s1 (VLAN 100) deleted at rv 30 (relist) while machine ns1/vm1 referenced pool ns1/p1"]


def test_a_consumer_event_that_arrives_after_the_judgement_still_counts():
    """Review finding: a deletion was judged once; a consumer whose ADDED event (older
    resourceVersion) arrived later was never considered. judge() now re-judges it all."""
    m = monitor()
    m._event("networks", "ADDED", network("ns1", "n1", "p1", 1), 1, False)
    m._event("vlans", "DELETED", vlan("s1", 100, rv=8), 8, False)
    m.judge()
    assert m.violations == []
    m._event("machines", "ADDED", machine("ns1", "vm1", "p1", 5), 5, False)  # late, but older than 8
    m.judge()
    assert m.violations == ["Vlan s1 (VLAN 100) deleted at rv 8 (watch) while machine ns1/vm1 referenced pool ns1/p1"]


def test_a_vlan_of_a_network_never_seen_is_counted_as_unjudgeable():
    m = monitor()
    m._event("vlans", "DELETED", vlan("s9", 100, rv=8, ns="ns1", net="unknown"), 8, False)
    assert m.judge() == 0 and m.unjudgeable == 1


def test_audit_recheck_looks_at_every_pair_of_a_three_way_flag(tmp_path):
    from hack.chaoskit import recheck_duplicates

    def ev(verb, name, t):
        return json.dumps({"stage": "ResponseComplete", "verb": verb, "stageTimestamp": f"2026-01-01T00:00:{t:02d}Z",
                           "objectRef": {"resource": "vlans", "name": name}, "responseStatus": {"code": 200}})
    log = tmp_path / "audit.log"
    # a is gone before b and c exist; b and c overlap: a real duplicate.
    log.write_text("\n".join([ev("create", "a", 1), ev("delete", "a", 2), ev("create", "b", 3),
                              ev("create", "c", 4)]) + "\n")
    flag = "duplicate VLAN 7 on provider p: ['a', 'b', 'c'] (rv 10)"
    assert recheck_duplicates([flag], log) == ([flag], [])


def test_audit_log_settles_open_judgements_by_when_each_object_was_removed(tmp_path):
    """A judgement a relist gap left open is settled by the audit log: the request that
    removed each object (its last write after its DELETE: the finalizer coming off, or the
    DELETE itself). Clean when the consumer was gone before the Vlan's removal was received,
    a violation when the consumer's removal began after the Vlan's completed, open when
    they overlap."""
    from hack.chaoskit import recheck_open

    def ev(verb, resource, name, received, done, ns=None, sub=None):
        ref = {"resource": resource, "name": name, **({"namespace": ns} if ns else {}),
               **({"subresource": sub} if sub else {})}
        return json.dumps({"stage": "ResponseComplete", "verb": verb, "objectRef": ref, "responseStatus": {"code": 200},
                           "requestReceivedTimestamp": f"2026-01-01T00:00:{received:09.6f}Z",
                           "stageTimestamp": f"2026-01-01T00:00:{done:09.6f}Z"})
    log = tmp_path / "audit.log"
    log.write_text("\n".join([
        # Vlan a: DELETE at 10, our finalizer off (PATCH) 20.0-20.1; a status write after is not a removal.
        ev("create", "vlans", "a", 1, 1.1), ev("delete", "vlans", "a", 10, 10.1), ev("patch", "vlans", "a", 20, 20.1),
        ev("patch", "vlans", "a", 19, 19.1, sub="status"),
        ev("create", "proxmoxmachines", "m-early", 2, 2.1, ns="ns1"), ev("delete", "proxmoxmachines", "m-early", 15, 15.2, ns="ns1"),
        ev("create", "proxmoxmachines", "m-late", 2, 2.1, ns="ns1"), ev("delete", "proxmoxmachines", "m-late", 21, 21.1, ns="ns1"),
        ev("create", "proxmoxmachines", "m-both", 2, 2.1, ns="ns1"), ev("delete", "proxmoxmachines", "m-both", 19.9, 20.05, ns="ns1"),
        # Subnet s: DELETE at 5 under Kube-OVN's finalizer, which goes at 8.
        ev("create", "subnets", "s", 1, 1.1), ev("delete", "subnets", "s", 5, 5.1), ev("patch", "subnets", "s", 8, 8.1),
    ]) + "\n")
    msg = "Vlan a (VLAN 7) deleted at rv 30 (relist) while machine ns1/{} referenced pool ns1/p"
    opened = [msg.format("m-early"), msg.format("m-late"), msg.format("m-both"), msg.format("m-unknown"),
              "Vlan a deleted at rv 30 (relist) while it listed live Subnet s"]
    still, clean, bad = recheck_open(opened, log)
    assert [c.split(":")[0] for c in clean] == [opened[0], opened[4]]
    assert [b.split(":")[0] for b in bad] == [opened[1]]
    assert still == [opened[2], opened[3]]


def test_longest_unheld_is_the_longest_stretch_without_a_live_holder_in_the_window():
    """A rollout's Lease: held by a, released at 10 (empty holder), b holds it at 11.5; later
    a SIGKILLed holder's Lease runs out at 30 and c takes it at 33. Within [5, 40] the longest
    stretch without a holder is 3 s; a window that starts inside a gap counts from its start,
    one that ends inside a gap counts to its end."""
    samples = [(0.0, "a", True, True), (10.0, "", False, False), (11.5, "b", False, True), (12.0, "b", True, True),
               (30.0, "b", True, False), (33.0, "c", True, True)]
    assert longest_unheld(samples, 5.0, 40.0) == 3.0
    assert longest_unheld(samples, 10.5, 20.0) == 1.0
    assert longest_unheld(samples, 12.0, 31.0) == 1.0
    assert longest_unheld(samples, 13.0, 29.0) == 0.0
    assert longest_unheld([], 0.0, 5.0) == 0.0


def test_recheck_names_a_missing_or_foreign_file_instead_of_a_traceback(tmp_path, capfd):
    from hack.chaoskit.cli import main

    log = tmp_path / "audit.log"
    log.write_text("")
    (tmp_path / "other.json").write_text("{}")
    for args, message in (([str(tmp_path / "absent.json"), str(log)], "is not a result of --json (FileNotFoundError"),
                          ([str(tmp_path / "other.json"), str(log)], "is not a result of --json (KeyError: 'faults')"),
                          ([str(tmp_path / "other.json"), str(tmp_path / "no.log")], "--recheck: no audit log at")):
        with pytest.raises(SystemExit) as e:
            main(["--recheck", *args, "--report", ""])
        assert e.value.code == 2 and message in capfd.readouterr().err
