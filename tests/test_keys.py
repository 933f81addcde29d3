"""The event → key mapping of ``controller.keys`` (architecture.md, "Manager": the event →
key table), against real stores with the manager's indexes; no server."""

from __future__ import annotations

from controller import keys, names
from controller.keys import NamespaceKey, NetworkKey, PodKey, ZoneKey
from controller.manager import subnet_index_vlan, zone_index_provider
from controller.network import Listers, index_namespace, network_index_pool, network_index_subnet, network_index_zone
from controller.vlans import vlan_index_provider, vlan_index_provider_id, vlan_index_zone
from informers import ThreadSafeStore


def listers(networks=(), zones=(), vlans=(), subnets=()) -> Listers:
    l = Listers(
        networks=ThreadSafeStore({"zone": network_index_zone, "subnet": network_index_subnet,
                                  "ippool": network_index_pool, "namespace": index_namespace}),
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


def test_a_network_maps_to_itself_and_its_zone():
    assert keys.for_network(net("t", "n1", zone="z9")) == ([NetworkKey("t", "n1")], [ZoneKey("z9")])
    assert keys.for_network({"metadata": {"namespace": "t", "name": "n1"}, "spec": {}}) == ([NetworkKey("t", "n1")], [])


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


def test_pool_users_map_to_the_networks_of_their_pools_in_their_namespace():
    l = listers(networks=[net("t", "a", pool="p1"), net("u", "b", pool="p1"), net("t", "c", pool="p2")])
    assert keys.for_pool_user("pools", {"metadata": {"namespace": "t", "name": "p1"}}, l) == [NetworkKey("t", "a")]
    claim = {"metadata": {"namespace": "t", "name": "c1"}, "spec": {"poolRef": {"name": "p2"}}}
    assert keys.for_pool_user("claims", claim, l) == [NetworkKey("t", "c")]
    assert keys.for_pool_user("addresses", {"metadata": {"namespace": "t", "name": "x"}, "spec": "bad"}, l) == []
    machine = {"metadata": {"namespace": "t", "name": "m"},
               "spec": {"network": {"default": {"ipv4PoolRef": {"kind": "InClusterIPPool", "name": "p1"}}}}}
    assert keys.for_pool_user("machines", machine, l) == [NetworkKey("t", "a")]
