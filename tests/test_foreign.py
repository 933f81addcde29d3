"""Field report S4 (capmox#868), pure: an address a machine's NIC on a network holds from
another pool, outside the network's subnet (``controller.rules.foreign``), the planner's report of
it (``ReportOnce`` of a ``ForeignAddressOnNetwork`` Warning, Ready unchanged), the executor's
once-per-address posting, and the watch events that bring the network back.

Scenario (../shared/cases/field-reports.md, S4): network ``tenant-a/net-s4`` on VLAN 301 of
bridge ``vmbr1``, Subnet 10.72.0.0/24, pool ``pool-s4``; machine ``m-s4`` (capmox v1alpha2)
whose net0 names ``pool-s4`` and carries ``defaultIPv4: true`` as capmox v0.8 writes it back;
claims ``m-s4-net0-00-inet`` (cluster pool ``cl-v4-icip``, 10.0.50.0/24) and
``m-s4-net0-01-inet`` (``pool-s4``), named as capmox-and-ipam.md says.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from controller.watch import keys
from controller.plan.actions import Event, NetworkGone, ReportOnce, WriteStatus
from controller.rules.pool_conflicts import find_address_conflicts, find_duplicate_addresses
from controller.rules.spans import pool_spans
from controller.rules.ranges import in_cidr_block
from controller.apply.executor import Executor
from controller.rules.consumers import count_consumers
from controller.rules.foreign import (
    ForeignAddress,
    claim_device,
    find_foreign_addresses,
    foreign_address_message,
    machine_devices,
    machine_index_keys,
)
from controller.watch.keys import NetworkKey
from controller.watch.indexes import CLAIM_INDEXERS, MACHINE_INDEXERS, claim_index_machine
from controller.plan.network_status import NetworkSnapshot
from informers import ThreadSafeStore
from tests import test_plan_network as tp

NS = "tenant-a"
NET, POOL, CLUSTER_POOL = "net-s4", "pool-s4", "cl-v4-icip"
BRIDGE, VID, CIDR = "vmbr1", 301, "10.72.0.0/24"
IPAM = "ipam.cluster.x-k8s.io"
CAPMOX = "infrastructure.cluster.x-k8s.io/v1alpha2"


def ref(name: str, kind: str = "InClusterIPPool") -> dict[str, str]:
    return {"apiGroup": IPAM, "kind": kind, "name": name}


def machine(name: str = "m-s4", *devices: dict[str, Any], ns: str = NS) -> dict[str, Any]:
    devs = list(devices) or [{"name": "net0", "bridge": BRIDGE, "vlan": VID, "ipPoolRef": [ref(POOL)],
                              "defaultIPv4": True}]
    return {"apiVersion": CAPMOX, "kind": "ProxmoxMachine",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"},
            "spec": {"network": {"networkDevices": devs}}}


def claim(name: str, pool: str, owner: str | None = "m-s4", kind: str = "InClusterIPPool",
          address_ref: str | None = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": CAPMOX, "kind": "ProxmoxMachine", "name": owner,
                                    "uid": f"uid-{owner}", "controller": True}]
    out: dict[str, Any] = {"metadata": meta, "spec": {"poolRef": ref(pool, kind)}}
    if address_ref is not None:
        out["status"] = {"addressRef": {"name": address_ref or name}}
    return out


def address(name: str, addr: str, pool: str, kind: str = "InClusterIPPool") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS},
            "spec": {"address": addr, "prefix": 24, "poolRef": ref(pool, kind), "claimRef": {"name": name}}}


CLAIMS = (claim("m-s4-net0-00-inet", CLUSTER_POOL), claim("m-s4-net0-01-inet", POOL))
ADDRESSES = (address("m-s4-net0-00-inet", "10.0.50.3", CLUSTER_POOL),
             address("m-s4-net0-01-inet", "10.72.0.200", POOL))
FOUND = ForeignAddress("m-s4", "net0", "10.0.50.3", "InClusterIPPool", CLUSTER_POOL, "m-s4-net0-00-inet")


def find(machines=(machine(),), claims=CLAIMS, addresses=ADDRESSES, pool=POOL, cidr=CIDR, bridge=BRIDGE, vlan=VID):
    return find_foreign_addresses(pool, cidr, bridge, vlan, machines, claims, addresses)


# -- the detection ---------------------------------------------------------------------------


def test_the_s4_scenario_finds_the_cluster_pool_address_of_net0_only():
    assert find() == (FOUND,)


def test_the_message_names_machine_nic_network_address_pool_and_capmox_868():
    assert foreign_address_message(NET, VID, CIDR, FOUND) == (
        'machine "m-s4" net0 is on network "net-s4" (VLAN 301) but also holds 10.0.50.3 from InClusterIPPool '
        '"cl-v4-icip" (IPAddress "m-s4-net0-00-inet"), an address outside the network\'s subnet 10.72.0.0/24 on '
        "its VLAN; a default pool: capmox v0.8+ sets defaultIPv4/defaultIPv6 on net0 again although the machine "
        "says false (cluster-api-provider-proxmox#868). The address does not hold the network and the controller "
        "deletes nothing: see ForeignAddressOnNetwork in docs/runbook.md")


def test_only_what_names_the_networks_pool_holds_it_and_the_cluster_pool_address_is_no_conflict():
    """The holders are keyed by pool: the claim and IPAddress of pool-s4 (and the machine that
    names it), never those of cl-v4-icip; AddressConflict and R6 look at the pool's own
    addresses only."""
    pool_obj = {"metadata": {"name": POOL, "namespace": NS},
                "spec": {"addresses": ["10.72.0.200-10.72.0.250"], "prefix": 24, "gateway": "10.72.0.1"},
                "status": {"ipAddresses": {"total": 51, "used": 1, "free": 50}}}
    c = count_consumers(pool_obj, POOL, [machine()], ADDRESSES, CLAIMS)
    assert (c.used, c.machines, c.claims, c.addresses) == (1, 1, 1, 1)
    assert [str(h) for h in c.holders] == ["ProxmoxMachine m-s4", "IPAddressClaim m-s4-net0-01-inet",
                                           "IPAddress m-s4-net0-01-inet"]
    of_pool = [a for a in ADDRESSES if a["spec"]["poolRef"]["name"] == POOL]
    assert find_address_conflicts(pool_spans(pool_obj["spec"]), [], of_pool) == []
    assert find_duplicate_addresses(of_pool) == []


@pytest.mark.parametrize("addr", ["10.72.0.9", "10.72.0.255"])
def test_an_address_of_another_pool_inside_the_subnet_is_not_foreign(addr):
    assert find(addresses=(address("m-s4-net0-00-inet", addr, CLUSTER_POOL), ADDRESSES[1])) == ()


def test_an_ipv6_address_on_an_ipv4_subnet_is_outside_it_and_a_dual_stack_block_holds_both_families():
    v6 = (address("m-s4-net0-00-inet", "fd00:50::3", "cl-v6-icip"), ADDRESSES[1])
    claims = (claim("m-s4-net0-00-inet", "cl-v6-icip"), CLAIMS[1])
    assert [f.address for f in find(claims=claims, addresses=v6)] == ["fd00:50::3"]
    assert find(claims=claims, addresses=v6, cidr="10.72.0.0/24,fd00:50::/64") == ()


def test_nothing_is_judged_without_a_subnet_cidr_that_parses():
    assert find(cidr="") == () and find(cidr="10.72.0.0") == ()


def test_a_nic_is_on_the_network_by_its_pool_or_by_bridge_and_vlan():
    # net0 names no pool but is on the network's bridge and VLAN (v1alpha1: the default device).
    v1 = {"metadata": {"name": "m-s4", "namespace": NS},
          "spec": {"network": {"default": {"bridge": BRIDGE, "vlan": VID}}}}
    legacy = (claim("m-s4-net0-inet", CLUSTER_POOL),)
    assert find(machines=(v1,), claims=legacy, addresses=(address("m-s4-net0-inet", "10.0.50.4", CLUSTER_POOL),)) \
        == (ForeignAddress("m-s4", "net0", "10.0.50.4", "InClusterIPPool", CLUSTER_POOL, "m-s4-net0-inet"),)
    # The same NIC on another VLAN, naming no pool of the network: not the network's business.
    elsewhere = machine("m-s4", {"name": "net0", "bridge": BRIDGE, "vlan": 302, "defaultIPv4": True})
    assert find(machines=(elsewhere,)) == ()
    # The network's pool named on net1, the cluster pool on net0 elsewhere: net0 is not looked at.
    split = machine("m-s4", {"name": "net0", "bridge": "vmbr0", "defaultIPv4": True},
                    {"name": "net1", "bridge": BRIDGE, "vlan": VID, "ipPoolRef": [ref(POOL)]})
    assert find(machines=(split,)) == ()
    assert find(machines=(split,), claims=(claim("m-s4-net1-00-inet", CLUSTER_POOL), CLAIMS[1]),
                addresses=(address("m-s4-net1-00-inet", "10.0.50.5", CLUSTER_POOL), ADDRESSES[1]))[0].device == "net1"


def test_a_claim_is_a_machines_only_through_an_owner_reference_and_a_name_of_its_nic():
    assert find(claims=(claim("m-s4-net0-00-inet", CLUSTER_POOL, owner=None), CLAIMS[1])) == ()
    assert find(claims=(claim("m-s4-net0-00-inet", CLUSTER_POOL, owner="m-other"), CLAIMS[1])) == ()
    renamed = (claim("vm-extra", CLUSTER_POOL), CLAIMS[1])
    assert find(claims=renamed, addresses=(address("vm-extra", "10.0.50.3", CLUSTER_POOL), ADDRESSES[1])) == ()


def test_a_claim_without_its_address_yet_or_an_address_that_does_not_parse_reports_nothing():
    assert find(addresses=(ADDRESSES[1],)) == ()
    assert find(addresses=(address("m-s4-net0-00-inet", "10.0.50.x", CLUSTER_POOL), ADDRESSES[1])) == ()


def test_the_address_is_the_one_the_claims_address_ref_names():
    claims = (claim("m-s4-net0-00-inet", CLUSTER_POOL, address_ref="other-name"), CLAIMS[1])
    found = find(claims=claims, addresses=(address("other-name", "10.0.50.7", CLUSTER_POOL), ADDRESSES[1]))
    assert [(f.address, f.ipaddress) for f in found] == [("10.0.50.7", "other-name")]
    # No status yet: the address named like the claim (CAIP names it so).
    no_status = (claim("m-s4-net0-00-inet", CLUSTER_POOL, address_ref=None), CLAIMS[1])
    assert find(claims=no_status) == (FOUND,)


def test_a_global_pool_of_the_same_name_is_another_pool_and_an_explicit_second_pool_is_asked_for():
    g = (claim("m-s4-net0-00-inet", POOL, kind="GlobalInClusterIPPool"), CLAIMS[1])
    ga = (address("m-s4-net0-00-inet", "10.0.50.3", POOL, kind="GlobalInClusterIPPool"), ADDRESSES[1])
    assert [(f.pool_kind, f.pool, f.asked) for f in find(claims=g, addresses=ga)] == \
        [("GlobalInClusterIPPool", POOL, False)]
    two = machine("m-s4", {"name": "net0", "bridge": BRIDGE, "vlan": VID, "ipPoolRef": [ref(POOL), ref("extra")]})
    claims = (claim("m-s4-net0-00-inet", POOL), claim("m-s4-net0-01-inet", "extra"))
    addresses = (address("m-s4-net0-00-inet", "10.72.0.200", POOL), address("m-s4-net0-01-inet", "10.9.0.2", "extra"))
    (f,) = find(machines=(two,), claims=claims, addresses=addresses)
    assert f.asked and f.pool == "extra"
    assert "; the machine's own pool references name InClusterIPPool \"extra\". " in \
        foreign_address_message(NET, VID, CIDR, f)


def test_several_machines_and_families_each_once_sorted():
    m2 = machine("m-b")
    claims = CLAIMS + (claim("m-b-net0-00-inet", CLUSTER_POOL, owner="m-b"),
                       claim("m-b-net0-01-inet", "cl-v6-icip", owner="m-b"))
    addresses = ADDRESSES + (address("m-b-net0-00-inet", "10.0.50.9", CLUSTER_POOL),
                             address("m-b-net0-01-inet", "fd00::9", "cl-v6-icip"))
    found = find(machines=(machine(), m2, machine()), claims=claims + claims, addresses=addresses)
    assert [(f.machine, f.address) for f in found] == [("m-b", "10.0.50.9"), ("m-b", "fd00::9"), ("m-s4", "10.0.50.3")]


@pytest.mark.parametrize("claim_name, devices, want", [
    ("m-s4-net0-00-inet", ["net0"], "net0"),       # v0.8, the default pool
    ("m-s4-net0-01-inet", ["net0"], "net0"),       # v0.8, the first explicit pool
    ("m-s4-net1-02-inet", ["net0", "net1"], "net1"),
    ("m-s4-net0-inet", ["net0"], "net0"),          # v0.7
    ("m-s4-net0-inet6", ["net0"], "net0"),
    ("m-s4-lan-10-inet", ["lan-10"], "lan-10"),    # a v0.7 device name ending in -NN
    ("m-s4-net0-00-inet", ["net1"], None),
    ("m-s4-net0-00", ["net0"], None),
    ("m-s40-net0-00-inet", ["net0"], None),
    ("other-net0-00-inet", ["net0"], None),
])
def test_the_nic_of_a_claim_is_read_from_its_name(claim_name, devices, want):
    assert claim_device("m-s4", claim_name, devices) == want


def test_devices_of_both_shapes_and_the_index_keys():
    v1 = {"metadata": {"name": "m", "namespace": NS},
          "spec": {"network": {"default": {"bridge": BRIDGE, "vlan": VID, "ipv4PoolRef": ref(POOL)},
                               "additionalDevices": [{"name": "net1", "bridge": "vmbr2"}, {"bridge": "nameless"}]}}}
    assert [(d.name, d.bridge, d.vlan, d.pools) for d in machine_devices(v1)] == [
        ("net0", BRIDGE, VID, (("InClusterIPPool", POOL),)), ("net1", "vmbr2", None, ())]
    nameless = machine("m", {"bridge": BRIDGE, "vlan": VID,
                             "ipPoolRef": [ref(POOL), ref("g", "GlobalInClusterIPPool")]})
    assert [d.name for d in machine_devices(nameless)] == ["net0"]  # the CRD's default name
    assert machine_index_keys(nameless) == [f"{NS}/pool/{POOL}", f"{NS}/vlan/{BRIDGE}/{VID}"]
    assert machine_index_keys({"metadata": {"name": "x"}, "spec": {}}) == []
    assert claim_index_machine(CLAIMS[0]) == [f"{NS}/m-s4"]
    assert claim_index_machine(claim("x", POOL, owner=None)) == []


def test_in_cidr_block():
    assert in_cidr_block("10.72.0.0/24", 4, int.from_bytes(bytes([10, 72, 0, 7]), "big")) is True
    assert in_cidr_block("10.72.0.0/24", 4, int.from_bytes(bytes([10, 0, 50, 3]), "big")) is False
    assert in_cidr_block("10.72.0.0/24", 6, 7) is False
    assert in_cidr_block("bad", 4, 7) is None and in_cidr_block("", 4, 7) is None


# -- the planner: a report of values, Ready unchanged ------------------------------------------


def s4_live(**kw: Any) -> NetworkSnapshot:
    """tests.test_plan_network's Ready network (bridge vmbr70, VLAN 101, Subnet 10.0.0.0/24,
    pool pool-a) with machine m-s4 on it and the two claims of capmox v0.8."""
    m = machine("m-s4", {"name": "net0", "bridge": tp.BRIDGE, "vlan": tp.VID, "ipPoolRef": [ref(tp.POOL)],
                         "defaultIPv4": True}, ns=tp.NS)
    claims = (claim("m-s4-net0-00-inet", CLUSTER_POOL), claim("m-s4-net0-01-inet", tp.POOL))
    addresses = (address("m-s4-net0-00-inet", "10.0.50.3", CLUSTER_POOL),
                 address("m-s4-net0-01-inet", "10.0.0.20", tp.POOL))
    base = dict(machines=(m,), machine_claims=claims, machine_addresses=addresses,
                pool_addresses=(addresses[1],))
    base.update(kw)
    return tp.live(**base)


def reports(p: Any) -> list[ReportOnce]:
    return [a for a in p.applied if isinstance(a, ReportOnce)]


def test_the_plan_reports_the_address_once_per_key_and_changes_no_condition():
    p = tp.drive(s4_live())
    plain = tp.drive(tp.live())
    assert p.status == plain.status  # Ready, IPPoolReady (no AddressConflict): all as without it
    assert p.crm("Ready")[:2] == ("True", "Ready") and p.crm("IPPoolReady")[:2] == ("True", "Ready")
    (r,) = reports(p)
    net = s4_live().network
    found = ForeignAddress("m-s4", "net0", "10.0.50.3", "InClusterIPPool", CLUSTER_POOL, "m-s4-net0-00-inet")
    assert r == ReportOnce(tp.KEY, "uid-net", ((found.key, Event(
        net, "Warning", "ForeignAddressOnNetwork", foreign_address_message(tp.NAME, tp.VID, "10.0.0.0/24", found))),))
    assert not [a for a in p.applied if isinstance(a, Event)]  # posted by the executor, not as an Event
    # A converged pass writes nothing and reports the same value again (the executor posts once).
    again = tp.drive(attrs.evolve(s4_live(), network=tp.network(p.status)))
    assert not [a for a in again.applied if isinstance(a, WriteStatus)]
    assert [(k, e.message) for k, e in reports(again)[0].events] == [(k, e.message) for k, e in r.events]


def test_the_plan_reports_an_empty_set_when_the_address_is_gone_and_nothing_before_the_subnet_is_bound():
    gone = tp.drive(s4_live(machine_claims=(claim("m-s4-net0-01-inet", tp.POOL),)))
    assert reports(gone) == [ReportOnce(tp.KEY, "uid-net", ())]
    unbound = tp.drive(s4_live(subnet=tp.subnet(bound_to="other")))
    assert reports(unbound) == []
    assert reports(tp.drive(s4_live(subnet=tp.subnet(cidr="10.0.50.0/24")))) == [ReportOnce(tp.KEY, "uid-net", ())]


# -- the executor: once per key ----------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str]] = []

    def event(self, obj: Any, etype: str, reason: str, message: str) -> None:
        self.posted.append((etype, reason, message))


def test_the_executor_posts_each_key_once_while_it_is_reported():
    rec = Recorder()
    ex = Executor(writer=None, vlans=None, events=rec)  # type: ignore[arg-type]
    ev = lambda m: Event({"metadata": {"name": NET}}, "Warning", "ForeignAddressOnNetwork", m)  # noqa: E731
    a = ReportOnce(f"{NS}/{NET}", "u1", (("k1", ev("one")),))
    for _ in range(3):
        ex(a, None)
    assert rec.posted == [("Warning", "ForeignAddressOnNetwork", "one")]
    ex(ReportOnce(f"{NS}/{NET}", "u1", (("k1", ev("one")), ("k2", ev("two")))), None)
    assert [m for _, _, m in rec.posted] == ["one", "two"]
    ex(ReportOnce(f"{NS}/{NET}", "u1", (("k2", ev("two")),)), None)  # k1 gone: forgotten
    ex(ReportOnce(f"{NS}/{NET}", "u1", (("k1", ev("one")), ("k2", ev("two")))), None)
    assert [m for _, _, m in rec.posted] == ["one", "two", "one"]
    ex(ReportOnce(f"{NS}/{NET}", "u2", (("k2", ev("two")),)), None)  # the network made again
    assert [m for _, _, m in rec.posted][-1] == "two" and len(rec.posted) == 4
    ex(NetworkGone(f"{NS}/{NET}"), None)
    ex(ReportOnce(f"{NS}/{NET}", "u2", (("k2", ev("two")),)), None)
    assert len(rec.posted) == 5


# -- the watch events that bring the network back ------------------------------------------------


def test_a_cluster_pool_claim_or_address_of_a_machine_on_the_network_queues_the_network():
    l = tp_listers()
    cl_claim, cl_addr = CLAIMS[0], ADDRESSES[0]
    assert keys.for_pool_user("claims", cl_claim, l) == [NetworkKey(NS, NET)]
    assert keys.for_pool_user("addresses", cl_addr, l) == [NetworkKey(NS, NET)]
    # A machine on the network's bridge and VLAN without its pool: by the network's status.
    tagged = machine("m-t", {"name": "net0", "bridge": BRIDGE, "vlan": VID})
    assert keys.for_pool_user("machines", tagged, l) == [NetworkKey(NS, NET)]
    assert keys.for_pool_user("machines", machine("m-u", {"name": "net0", "bridge": BRIDGE, "vlan": 7}), l) == []
    # An address whose claim is not cached, a claim of no machine: only their own pool's networks.
    assert keys.for_pool_user("addresses", address("x", "10.0.50.8", CLUSTER_POOL), l) == []
    assert keys.for_pool_user("claims", claim("y", POOL, owner=None), l) == [NetworkKey(NS, NET)]


def tp_listers():
    from tests.test_keys import listers

    l = listers(networks=[{"metadata": {"namespace": NS, "name": NET},
                           "spec": {"zone": "z1", "subnet": "s4", "ipPool": POOL},
                           "status": {"vlan": VID, "bridge": BRIDGE}}])
    l = attrs.evolve(l, machines=ThreadSafeStore(MACHINE_INDEXERS), claims=ThreadSafeStore(CLAIM_INDEXERS))
    l.machines.add(machine())
    for c in CLAIMS:
        l.claims.add(c)
    return l
