"""Field report R12 on the real peers: a trunk node's ready label flaps (kube-ovn-cni removes
it at each of its starts and sets it again once the bridge is up) while kube-ovn-controller
restarts and rewrites the ProviderNetwork's status from the labels. With a hold-down
(``--trunk-node-hold-down``) a flap shorter than it writes nothing to the OVN NB; a node gone
for longer leaves every group in one transaction per group.

The bed is this module's own (conftest ``peers_bed``): the real kube-ovn-controller v1.15.24
makes the router ports our groups go on; three trunk Nodes carry the provider.
"""

from __future__ import annotations

from typing import Iterator

import pytest
from kubernetes import client as k8s
from prometheus_client.parser import text_string_to_metric_families

from hack.bed import ClusterError, LocalCluster
from hack.tools.objects import Admin, reason, unique
from hack.tools.wait import wait_for
from tests.support.ovsdb import ha_chassis_groups
from tests.support.peers import KUBE_OVN, WAIT, Ctl, Trunk, make_vpc

pytestmark = pytest.mark.integration

HOLD = 8.0  # --trunk-node-hold-down here, seconds
NODES = (("flap-a", "ch-flap-a"), ("flap-b", "ch-flap-b"), ("flap-c", "ch-flap-c"))


@pytest.fixture(scope="module")
def admin(peers_admin: Admin) -> Admin:
    return peers_admin


@pytest.fixture
def kube_ovn_back(peers_bed: LocalCluster) -> Iterator[None]:
    try:
        yield
    finally:
        try:
            peers_bed.peer_pid(KUBE_OVN)
        except ClusterError:
            peers_bed.start_peer(KUBE_OVN)


def nb_writes(ctl: Ctl) -> dict[str, float]:
    """The controller's NB transactions by operation (its own counter)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(ctl.mgr.metrics.exposition().decode()):
        for s in fam.samples:
            if s.name == "cozy_proxmox_gateway_nb_transactions_total":
                out[s.labels["op"]] = s.value
    return out


def members(peers_bed: LocalCluster, group: str) -> set[str]:
    (g,) = ha_chassis_groups(peers_bed.nbctl, group)
    return set(g["chassis"])


def test_a_flap_shorter_than_the_hold_down_writes_nothing_and_a_longer_one_one_transaction_per_group(
        peers_bed, admin, kube_ovn_back):
    trunk = Trunk(admin, NODES)
    label = trunk.ready_label(trunk.provider)
    ns, vpc, zone = unique("flap"), unique("flap-vpc"), unique("flap-zone")
    admin.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    make_vpc(admin, vpc)
    admin.create_zone(zone, trunk.provider, ["3100-3109"])
    nets = [admin.create_proxmox_subnet(ns, f"flap-{i}", zone, vpc, f"10.93.{i}") for i in range(2)]
    everyone = {ch for _, ch in NODES}
    ctl = Ctl(peers_bed, manage_gateway=True, ovn_nb_address=peers_bed.nb_tcp, trunk_hold_down=HOLD)
    ctl.start()
    try:
        for n in nets:
            wait_for(lambda n=n: reason(admin.network(ns, n["subnet"]), "Ready")[0] == "True", timeout=WAIT,
                     what=f"{n['subnet']} Ready")
            wait_for(lambda n=n: members(peers_bed, n["group"]) == everyone, timeout=WAIT,
                     what=f"group {n['group']} on the three trunk chassis")
        ctl.resync()
        before = nb_writes(ctl)

        # kube-ovn-cni restarts on flap-b (label removed), kube-ovn-controller restarts too and
        # rewrites the ProviderNetwork's status from the labels; then the label is back.
        admin.core.patch_node("flap-b", {"metadata": {"labels": {label: None}}})
        peers_bed.kill_peer(KUBE_OVN)
        peers_bed.start_peer(KUBE_OVN)
        wait_for(lambda: "flap-b" not in (admin.co.get_cluster_custom_object(
            "kubeovn.io", "v1", "provider-networks", trunk.provider).get("status") or {}).get("readyNodes", []),
            timeout=WAIT, what="kube-ovn-controller seeing flap-b not ready")
        ctl.resync()  # every network evaluated with flap-b out of the ready set
        assert {n["group"]: members(peers_bed, n["group"]) for n in nets} == {n["group"]: everyone for n in nets}
        admin.core.patch_node("flap-b", {"metadata": {"labels": {label: "true"}}})
        ctl.resync()
        assert nb_writes(ctl) == before  # 0 NB writes for a flap shorter than the hold-down

        # Gone for longer than the hold-down: out of every group, one transaction per group.
        admin.core.patch_node("flap-b", {"metadata": {"labels": {label: None}}})
        ctl.resync()
        assert all(members(peers_bed, n["group"]) == everyone for n in nets)  # held for now
        for n in nets:
            wait_for(lambda n=n: members(peers_bed, n["group"]) == everyone - {"ch-flap-b"}, timeout=HOLD + WAIT,
                     what=f"flap-b out of {n['group']} after the hold-down")
        ctl.resync()
        after = nb_writes(ctl)
        assert {op: after.get(op, 0) - before.get(op, 0) for op in after if after.get(op, 0) != before.get(op, 0)} \
            == {"ensure": len(nets)}
    finally:
        ctl.stop()
