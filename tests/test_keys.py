"""The event → key mapping of ``controller.watch.keys`` (architecture.md, "Manager": the event →
key table), against real stores with the manager's indexes; no server."""

from __future__ import annotations

from controller import names
from controller.watch import keys
from controller.watch.keys import NamespaceKey, NetworkKey, PodKey, ZoneKey
from controller.watch.indexes import subnet_index_vlan, zone_index_provider
from controller.watch.indexes import Listers, network_indexers
from controller.watch.indexes import vlan_index_provider, vlan_index_provider_id, vlan_index_zone
from informers import ThreadSafeStore


def listers(networks=(), zones=(), vlans=(), subnets=()) -> Listers:
    l = Listers(
        networks=ThreadSafeStore(network_indexers()),
        zones=ThreadSafeStore({"provider": zone_index_provider}),
        vlans=ThreadSafeStore({"provider": vlan_index_provider, "provider_id": vlan_index_provider_id,
                               "zone": vlan_index_zone}),
        namespaces=ThreadSafeStore(),
        provider_networks=ThreadSafeStore(),
        subnets=ThreadSafeStore({"vlan": subnet_index_vlan}),
    )
    for store, objs in ((l.networks, networks), (l.zones, zones), (l.vlans, vlans), (l.subnets, subnets)):
        for o in objs:
            store.add(o)
    return l


def net(ns, name, zone="z1", subnet=None, pool="p"):
    return {"metadata": {"namespace": ns, "name": name},
            "spec": {"zone": zone, "subnet": subnet or f"s-{name}", "ipPool": pool}}


def zone(name, provider="pn1"):
    return {"metadata": {"name": name}, "spec": {"providerNetwork": provider}}


def vlan(name, vid, provider="pn1", owner=("", ""), zone_label=None):
    labels = {names.LABEL_NETWORK_NAMESPACE: owner[0], names.LABEL_NETWORK_NAME: owner[1]}
    if zone_label:
        labels[names.LABEL_ZONE] = zone_label
    return {"metadata": {"name": name, "labels": labels}, "spec": {"id": vid, "provider": provider}}


def test_keys_print_as_cache_keys_and_parse_back():
    k = NetworkKey.parse("tenant/n1")
    assert k == NetworkKey("tenant", "n1") and str(k) == "tenant/n1"
    assert str(ZoneKey("z1")) == "z1" and str(NamespaceKey("tenant")) == "tenant"
    assert PodKey.of({"metadata": {"namespace": "kube-system", "name": "gw-0"}}) == PodKey("kube-system", "gw-0")
    # Keys of different kinds never collide, even with the same text.
    assert len({NetworkKey("a", "b"), PodKey("a", "b")}) == 2


def test_a_network_maps_to_itself_its_zone_and_every_network_naming_its_subnet():
    # Issue 15, item 7: the oldest claimant of a Subnet wins, so a rival's change is news.
    a, b, c = net("t", "n1", zone="z9", subnet="s1"), net("u", "n2", subnet="s1"), net("t", "n3", subnet="s2")
    l = listers(networks=[a, b, c])
    assert keys.for_network(a, l) == ([NetworkKey("t", "n1"), NetworkKey("u", "n2")], [ZoneKey("z9")])
    assert keys.for_network(c, l) == ([NetworkKey("t", "n3")], [ZoneKey("z1")])
    assert keys.for_network({"metadata": {"namespace": "t", "name": "n1"}, "spec": {}}, l) == ([NetworkKey("t", "n1")], [])


def test_a_zone_maps_to_its_networks_and_every_zone_on_its_provider():
    l = listers(networks=[net("t", "a", "z1"), net("u", "b", "z1"), net("t", "c", "z2")],
                zones=[zone("z1"), zone("z2"), zone("z3", provider="other")])
    nets, zones = keys.for_zone(zone("z1"), l)
    assert sorted(nets) == [NetworkKey("t", "a"), NetworkKey("u", "b")]
    assert sorted(set(zones)) == [ZoneKey("z1"), ZoneKey("z2")]


def test_a_vlan_maps_to_its_owner_the_zones_on_its_provider_and_its_zone_label():
    l = listers(zones=[zone("z1"), zone("z2"), zone("z3", provider="other")])
    nets, zones = keys.for_vlan(vlan("s-a", 100, owner=("t", "a"), zone_label="z3"), l)
    assert nets == [NetworkKey("t", "a")]
    assert sorted(set(zones)) == [ZoneKey("z1"), ZoneKey("z2"), ZoneKey("z3")]
    # An ownerless Vlan (orphan) reaches no network.
    assert keys.for_vlan(vlan("x", 7), l)[0] == []


def test_a_vlan_that_comes_or_goes_also_wakes_the_networks_waiting_for_its_name_and_its_twins_owners():
    twin = vlan("s-b", 100, owner=("t", "b"))
    l = listers(networks=[net("t", "waiting", subnet="s-a")], zones=[zone("z1")], vlans=[twin])
    nets, _ = keys.for_vlan_come_or_gone(vlan("s-a", 100, owner=("t", "a")), l)
    assert set(nets) == {NetworkKey("t", "a"), NetworkKey("t", "waiting"), NetworkKey("t", "b")}


def test_a_namespace_maps_to_its_networks_only_when_it_is_new_or_its_labels_changed():
    l = listers(networks=[net("t", "a"), net("t", "b"), net("u", "c")])
    ns_old = {"metadata": {"name": "t", "labels": {"a": "1"}}}
    ns_new = {"metadata": {"name": "t", "labels": {"a": "2"}}}
    assert sorted(keys.for_namespace_labels(None, ns_old, l)) == [NetworkKey("t", "a"), NetworkKey("t", "b")]
    assert sorted(keys.for_namespace_labels(ns_old, ns_new, l)) == [NetworkKey("t", "a"), NetworkKey("t", "b")]
    assert keys.for_namespace_labels(ns_old, ns_old, l) == []


def test_a_provider_network_maps_to_its_zones():
    l = listers(zones=[zone("z1"), zone("z2", provider="other")])
    assert keys.for_provider_network({"metadata": {"name": "pn1"}}, l) == [ZoneKey("z1")]


def test_a_subnet_maps_to_the_networks_naming_it_and_the_zone_of_the_vlan_it_binds():
    l = listers(networks=[net("t", "a", subnet="s1")], vlans=[vlan("v1", 5, zone_label="z7")])
    sub = {"metadata": {"name": "s1"}, "spec": {"vlan": "v1"}}
    assert keys.for_subnet(sub, l) == ([NetworkKey("t", "a")], [ZoneKey("z7")])
    assert keys.for_subnet({"metadata": {"name": "s1"}, "spec": {}}, l) == ([NetworkKey("t", "a")], [])


def test_a_subnet_on_another_networks_vlan_maps_to_that_network_too():
    # Field report R1: a stranger's Subnet naming our Vlan (named after our Subnet) queues
    # our network, whose VLANConflict names it.
    l = listers(networks=[net("t", "ours", subnet="s1"), net("u", "theirs", subnet="s2")],
                vlans=[vlan("s1", 5, zone_label="z7")])
    stranger = {"metadata": {"name": "s2"}, "spec": {"vlan": "s1"}}
    assert keys.for_subnet(stranger, l) == ([NetworkKey("u", "theirs"), NetworkKey("t", "ours")], [ZoneKey("z7")])


def test_pool_users_map_to_the_networks_of_their_pools_in_their_namespace():
    l = listers(networks=[net("t", "a", pool="p1"), net("u", "b", pool="p1"), net("t", "c", pool="p2")])
    assert keys.for_pool_user("pools", {"metadata": {"namespace": "t", "name": "p1"}}, l) == [NetworkKey("t", "a")]
    claim = {"metadata": {"namespace": "t", "name": "c1"}, "spec": {"poolRef": {"name": "p2"}}}
    assert keys.for_pool_user("claims", claim, l) == [NetworkKey("t", "c")]
    assert keys.for_pool_user("addresses", {"metadata": {"namespace": "t", "name": "x"}, "spec": "bad"}, l) == []
    machine = {"metadata": {"namespace": "t", "name": "m"},
               "spec": {"network": {"default": {"ipv4PoolRef": {"kind": "InClusterIPPool", "name": "p1"}}}}}
    assert keys.for_pool_user("machines", machine, l) == [NetworkKey("t", "a")]


def test_only_a_zone_change_others_read_is_news():
    z = {"metadata": {"name": "z1", "annotations": {"a": "1"}}, "spec": {"providerNetwork": "pn1"}, "status": {"freeVLANs": 3}}
    status_only = {**z, "status": {"freeVLANs": 2}}
    assert not keys.zone_inputs_changed(z, status_only)
    assert keys.zone_inputs_changed(z, {**z, "spec": {"providerNetwork": "pn2"}})
    assert keys.zone_inputs_changed(z, {**z, "metadata": {"name": "z1", "annotations": {"a": "2"}}})
    assert keys.zone_inputs_changed(z, {**z, "metadata": {**z["metadata"], "deletionTimestamp": "2026-10-07T08:00:00Z"}})


def exhausted(ns, name, zone_="z1"):
    n = net(ns, name, zone_)
    n["status"] = {"conditions": [{"type": "VLANAllocated", "status": "False", "reason": "ZoneExhausted"}]}
    return n


def test_an_id_coming_free_reaches_the_networks_waiting_in_zone_exhausted_on_every_zone_of_the_provider():
    """A Vlan gone (its ID free) or a zone changed (a range widened, a reuse-delay entry
    lapsed) on provider pn1 queues the ZoneExhausted networks of every zone on pn1, not
    those of another provider and not the networks that are not waiting."""
    l = listers(networks=[exhausted("t", "w1", "z1"), exhausted("u", "w2", "z2"), exhausted("t", "w3", "z3"),
                          net("t", "fine", "z2")],
                zones=[zone("z1"), zone("z2"), zone("z3", provider="other")])
    nets, _ = keys.for_vlan_come_or_gone(vlan("s-gone", 100, owner=("t", "gone")), l)
    assert sorted(set(nets)) == [NetworkKey("t", "gone"), NetworkKey("t", "w1"), NetworkKey("u", "w2")]
    nets, _ = keys.for_zone(zone("z1"), l)
    assert sorted(set(nets)) == [NetworkKey("t", "w1"), NetworkKey("u", "w2")]
    # Allocated: it leaves the index and is no longer queued by such events.
    l.networks.update(net("u", "w2", "z2"))
    assert sorted(set(keys.for_zone(zone("z1"), l)[0])) == [NetworkKey("t", "w1")]


# -- issue 15, item 3: pool overlaps and Kube-OVN IPs -----------------------------------------


def pool_obj(name, addresses, ns=None):
    return {"metadata": {"name": name, **({"namespace": ns} if ns else {})}, "spec": {"addresses": list(addresses)}}


def with_pools(l: Listers, pools=(), global_pools=()) -> Listers:
    from controller.watch.indexes import POOL_INDEXERS

    l.pools, l.global_pools = ThreadSafeStore(POOL_INDEXERS), ThreadSafeStore(POOL_INDEXERS)
    for p in pools:
        l.pools.add(p)
    for p in global_pools:
        l.global_pools.add(p)
    return l


def test_a_pool_change_maps_to_the_networks_whose_pools_overlap_its_old_or_new_range():
    l = with_pools(
        listers(networks=[net("t", "a", pool="pa"), net("u", "b", pool="pb"), net("t", "c", pool="pc"),
                          net("t", "w", pool="wide")]),
        pools=[pool_obj("pa", ["10.0.0.10-10.0.0.20"], "t"), pool_obj("pb", ["10.0.0.30-10.0.0.40"], "u"),
               pool_obj("pc", ["10.0.5.1"], "t"), pool_obj("wide", ["10.0.0.0/16"], "t")],
    )
    old = pool_obj("g", ["10.0.0.15"])
    new = pool_obj("g", ["10.0.0.35"])
    # The handler calls it with old and new: both ranges' networks, and the wide pool's.
    assert sorted(keys.for_pool_overlap("GlobalInClusterIPPool", old, l)) == [NetworkKey("t", "a"), NetworkKey("t", "w")]
    assert sorted(keys.for_pool_overlap("GlobalInClusterIPPool", new, l)) == [NetworkKey("t", "w"), NetworkKey("u", "b")]
    # An InClusterIPPool is not its own overlap (its own networks come from for_pool_user).
    pa = pool_obj("pa", ["10.0.0.10-10.0.0.20"], "t")
    assert keys.for_pool_overlap("InClusterIPPool", pa, l) == [NetworkKey("t", "w")]
    # A pool without a usable address reaches nobody; garbage does not raise.
    assert keys.for_pool_overlap("GlobalInClusterIPPool", pool_obj("x", ["garbage"]), l) == []
    assert keys.for_pool_overlap("GlobalInClusterIPPool", {"metadata": {"name": "y"}, "spec": "bad"}, l) == []


def test_a_wide_pool_change_reaches_every_overlapping_network():
    l = with_pools(listers(networks=[net("t", "a", pool="pa"), net("t", "b", pool="pb")]),
                   pools=[pool_obj("pa", ["10.1.0.5"], "t"), pool_obj("pb", ["192.168.0.5"], "t")])
    assert keys.for_pool_overlap("GlobalInClusterIPPool", pool_obj("all", ["10.0.0.0/8"]), l) == [NetworkKey("t", "a")]


def test_a_kube_ovn_ip_maps_to_the_networks_naming_its_subnet():
    l = listers(networks=[net("t", "a", subnet="s1"), net("t", "b", subnet="s2")])
    ip = {"metadata": {"name": "web.t"}, "spec": {"subnet": "s1", "v4IpAddress": "10.0.0.9"}}
    assert keys.for_kube_ovn_ip(ip, l) == [NetworkKey("t", "a")]
    assert keys.for_kube_ovn_ip({"metadata": {"name": "x"}, "spec": {}}, l) == []
    assert keys.for_kube_ovn_ip({"metadata": {"name": "x"}, "spec": None}, l) == []
