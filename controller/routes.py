"""The event routes: which passes each watch event concerns (``product-decisions.md`` §3).

A handler maps the object of an event to typed keys (the mapping rules live in
``controller.watch.keys``) and queues them on the controller of their kind; it decides
nothing else. Every decision is taken in a pass from the caches, so any event, or a full
resync, leads to the same result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.rules import kubeovn
from controller.rules.spans import GLOBAL_IN_CLUSTER_IP_POOL, IN_CLUSTER_IP_POOL
from controller.watch import keys
from controller.watch.indexes import networks_for_node
from controller.watch.keys import NamespaceKey, NetworkKey, PodKey, ZoneKey, keys_for_namespace, keys_for_network
from controller.watch.indexes import BY_ZONE
from informers import meta_namespace_key

# seconds a namespace annotation pass waits after a network asks for it: a pass walks every
# network of the namespace, so a burst of 200 networks in one namespace is a few passes, not
# one per network (each network's status waits for it: §5.9, so keep it short).
NAMESPACE_COALESCE = 0.2
ZONE_COUNTS_DELAY = 5.0  # seconds a zone pass waits after another kind's event (Manager._route); its counts lag by at most this


class Routes:
    """The event handlers of every informer of one :class:`controller.manager.Manager`.

    :param m: the manager whose informers, listers, controllers and read-your-writes
        overlays the handlers use (its attributes are read when an event arrives).
    """

    def __init__(self, m: Any) -> None:
        self.m = m

    def route(self, keys: tuple[list[NetworkKey], list[ZoneKey]]) -> None:
        """Networks at once; zones after ``ZONE_COUNTS_DELAY``: what another kind's event
        changes on a zone is its counts, and a burst of 2,000 allocations is one zone pass
        per zone every few seconds instead of a status write per allocation (a later add
        never postpones a waiting key, so counts lag by at most the delay)."""
        self.m.network_controller.add_all(keys[0])
        for k in keys[1]:
            self.m.zone_controller.queue.add_after(k, ZONE_COUNTS_DELAY)

    def wire(self) -> None:
        l = self.m.listers
        nets, nsq = self.m.network_controller, self.m.namespace_controller

        def on_network(obj: Mapping[str, Any]) -> None:
            self.m.network_reconciler.recent.observe(obj)
            self.route(keys.for_network(obj, l))

        def annotations_of(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
            for ns in keys_for_network(old, new):  # coalesced: one pass walks the whole namespace
                nsq.queue.add_after(NamespaceKey(ns), NAMESPACE_COALESCE)

        def overlaps_of(*objs: Mapping[str, Any]) -> None:
            for o in objs:
                nets.add_all(keys.for_network_overlap(o, l))

        self.m.networks.add_event_handler(
            on_add=lambda o: (on_network(o), annotations_of(None, o), overlaps_of(o)),
            on_update=lambda old, new: (on_network(old), on_network(new), annotations_of(old, new),
                                        old.get("spec") != new.get("spec") and overlaps_of(old, new)),
            on_delete=lambda o: (on_network(o), annotations_of(o, None), overlaps_of(o)),
        )

        def on_zone(obj: Mapping[str, Any]) -> None:
            self.m.zone_reconciler.recent.observe(obj)
            own = ZoneKey(obj["metadata"]["name"])
            nets, zones = keys.for_zone(obj, l)
            self.route((nets, [z for z in zones if z != own]))  # the others' counts: coalesced
            self.m.zone_controller.add(own)  # its own change: at once, and once

        def on_zone_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
            if not keys.zone_inputs_changed(old, new):
                # Its status only (our own write): nothing reads a zone's status.
                self.m.zone_reconciler.recent.observe(new)
                return
            on_zone(old)
            on_zone(new)

        self.m.zones.add_event_handler(on_add=on_zone, on_update=on_zone_update, on_delete=on_zone)

        # The assumed set learns of every event first (the store already shows it).
        self.m.vlan_informer.add_event_handler(
            on_add=lambda o: (self.m.vlans.observe(o), self.route(keys.for_vlan_come_or_gone(o, l))),
            on_update=lambda old, new: (self.m.vlans.observe(new), self.route(keys.for_vlan(old, l)),
                                        self.route(keys.for_vlan(new, l))),
            on_delete=lambda o: (self.m.vlans.observe(o, deleted=True), self.route(keys.for_vlan_come_or_gone(o, l))),
        )

        def on_namespace(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> None:
            self.m.network_reconciler.recent_namespaces.observe(new)
            nets.add_all(keys.for_namespace_labels(old, new, l))

        def namespace_annotation(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
            nsq.add_all(NamespaceKey(ns) for ns in keys_for_namespace(old, new))

        self.m.namespaces.add_event_handler(
            on_add=lambda o: (on_namespace(None, o), namespace_annotation(None, o)),
            on_update=lambda old, new: (on_namespace(old, new), namespace_annotation(old, new)),
            on_delete=lambda o: (on_namespace(None, o), namespace_annotation(o, None)),
        )

        self.m.provider_networks.add_event_handler(
            on_add=lambda o: self.m.zone_controller.add_all(keys.for_provider_network(o, l)),
            on_update=lambda old, new: self.m.zone_controller.add_all(keys.for_provider_network(new, l)),
            on_delete=lambda o: self.m.zone_controller.add_all(keys.for_provider_network(o, l)),
        )

        def subnet_vpc_of(*subs: Mapping[str, Any]) -> None:
            for o in subs:
                nets.add_all(keys.for_subnet_overlap(o, l))

        self.m.subnets.add_event_handler(
            on_add=lambda o: (self.route(keys.for_subnet(o, l)), subnet_vpc_of(o)),
            on_update=lambda old, new: (self.route(keys.for_subnet(old, l)), self.route(keys.for_subnet(new, l)),
                                        kubeovn.subnet_vpc(old) != kubeovn.subnet_vpc(new) and subnet_vpc_of(old, new)),
            on_delete=lambda o: (self.route(keys.for_subnet(o, l)), subnet_vpc_of(o)),
        )

        if self.m.nodes is not None:
            def on_node(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
                found = networks_for_node(
                    old, new, l.zones.list(),
                    lambda z: [meta_namespace_key(n) for n in l.networks.by_index(BY_ZONE, z)],
                )
                nets.add_all(NetworkKey.parse(k) for k in found)

            self.m.nodes.add_event_handler(
                on_add=lambda o: on_node(None, o), on_update=on_node, on_delete=lambda o: on_node(o, None)
            )

        pods = self.m.pod_controller
        self.m.pods.add_event_handler(
            on_add=lambda o: pods.add(PodKey.of(o)),
            on_update=lambda old, new: pods.add(PodKey.of(new)),
            on_delete=lambda o: None,
        )

    def wire_optional(self, key: str, inf: Any) -> None:
        l, nets = self.m.listers, self.m.network_controller

        pool_kind = {"pools": IN_CLUSTER_IP_POOL, "global_pools": GLOBAL_IN_CLUSTER_IP_POOL}.get(key)

        def handler(obj: Mapping[str, Any], overlaps: bool = True) -> None:
            if key == "kube_ovn_ips":
                nets.add_all(keys.for_kube_ovn_ip(obj, l))
                return
            if key == "vpcs":
                nets.add_all(keys.for_vpc(obj, l))
                return
            if key == "egress_gateways":
                nets.add_all(keys.for_egress_gateway(obj, l))
                return
            if key != "global_pools":
                nets.add_all(keys.for_pool_user(key, obj, l))
            if pool_kind is not None and overlaps:
                nets.add_all(keys.for_pool_overlap(pool_kind, obj, l))

        def on_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
            # A pool's status (its counts, rewritten on every allocation) moves no range.
            moved = old.get("spec") != new.get("spec")
            handler(old, moved)
            handler(new, moved)

        inf.add_event_handler(on_add=handler, on_update=on_update, on_delete=handler)
