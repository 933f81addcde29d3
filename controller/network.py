"""ProxmoxNetwork reconcile: observe, plan, apply (reference-behaviour.md §5 and §6).

A pass reads the network and everything it depends on from the caches into a
:class:`controller.plan_network.NetworkSnapshot`, and runs the pure planner
(:func:`controller.plan_network.plan_network`) with the executor
(``controller.apply.Executor``) until the plan settles. This module holds the listers,
their index functions and the observer; the rules live in the planner.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import structlog

from controller import conditions, kubeovn, names, prune, reasons, schema
from controller.addresses import (
    GLOBAL_IN_CLUSTER_IP_POOL,
    IN_CLUSTER_IP_POOL,
    WIDE,
    Span,
    pool_buckets,
    pool_name,
    pool_spans,
)
from controller.apply import Executor, run
from controller.conditions import Clock, utc_now
from controller.consumers import count_consumers
from controller.events import EventRecorder
from controller.gateway import SERVING_SETTLE
from controller.kube import KubeWriter
from controller.metrics import Metrics
from controller.namespaces import NamespaceReconciler
from controller.plan_network import NetworkSnapshot, plan_network
from controller.recent import RecentWrites
from controller.result import Result
from controller.vlans import VlanManager
from informers import Resource, ThreadSafeStore

log = structlog.get_logger(__name__)

@attrs.define
class Listers:
    """The shared caches one pass reads (all synced before any worker starts).

    ``machines``, ``addresses`` and ``claims`` are None when the API server does not
    serve those kinds (capmox or CAPI IPAM not installed): they then hold nothing. So are
    ``global_pools`` (GlobalInClusterIPPool: its CRD comes with the IPAM provider) and
    ``kube_ovn_ips`` (Kube-OVN ``IP``, ``ips.kubeovn.io``) and ``vpcs`` (Kube-OVN ``Vpc``).

    Indexes read here besides ``namespace``: ``buckets`` on both pool stores
    (:func:`pool_index_buckets`), ``subnet`` on ``kube_ovn_ips`` (:func:`ip_index_subnet`),
    ``ippool`` on ``addresses`` (:func:`address_index_pool`).
    """

    networks: ThreadSafeStore
    zones: ThreadSafeStore
    vlans: ThreadSafeStore
    namespaces: ThreadSafeStore
    provider_networks: ThreadSafeStore
    subnets: ThreadSafeStore | None = None
    pools: ThreadSafeStore | None = None
    machines: ThreadSafeStore | None = None
    addresses: ThreadSafeStore | None = None
    claims: ThreadSafeStore | None = None
    global_pools: ThreadSafeStore | None = None
    kube_ovn_ips: ThreadSafeStore | None = None
    vpcs: ThreadSafeStore | None = None


def in_namespace(store: ThreadSafeStore | None, ns: str) -> list[dict[str, Any]]:
    """Objects of a namespaced store in ``ns`` (index ``namespace``)."""
    return [] if store is None else store.by_index("namespace", ns)


def index_namespace(obj: Mapping[str, Any]) -> list[str]:
    """Indexer ``namespace``."""
    ns = (obj.get("metadata") or {}).get("namespace")
    return [ns] if ns else []


def network_index_zone(net: Mapping[str, Any]) -> list[str]:
    """Indexer ``zone``: ``spec.zone`` of a ProxmoxNetwork."""
    z = (net.get("spec") or {}).get("zone")
    return [z] if isinstance(z, str) and z else []


def network_index_exhausted(net: Mapping[str, Any]) -> list[str]:
    """Indexer ``exhausted``: ``spec.zone`` of a network whose ``VLANAllocated`` reason is
    ``ZoneExhausted`` (it waits for an ID to come free on the zone's provider; keys.py
    queues these, and only these, when one does)."""
    cond = conditions.find((net.get("status") or {}).get("conditions"), names.VLAN_ALLOCATED)
    if cond is None or cond.get("reason") != reasons.ZONE_EXHAUSTED:
        return []
    return network_index_zone(net)


def network_index_subnet(net: Mapping[str, Any]) -> list[str]:
    """Indexer ``subnet``: ``spec.subnet`` of a ProxmoxNetwork."""
    s = (net.get("spec") or {}).get("subnet")
    return [s] if isinstance(s, str) and s else []


def network_index_pool(net: Mapping[str, Any]) -> list[str]:
    """Indexer ``ippool``: ``<namespace>/<spec.ipPool>``."""
    p = (net.get("spec") or {}).get("ipPool")
    ns = (net.get("metadata") or {}).get("namespace")
    return [f"{ns}/{p}"] if isinstance(p, str) and p and ns else []


def network_indexers() -> dict[str, Any]:
    """The indexes of the ProxmoxNetwork cache, by name (the manager's informer and any
    store standing in for it)."""
    return {"zone": network_index_zone, "exhausted": network_index_exhausted, "subnet": network_index_subnet,
            "ippool": network_index_pool, "namespace": index_namespace}


def pool_index_buckets(pool: Mapping[str, Any]) -> list[str]:
    """Indexer ``buckets`` of InClusterIPPools and GlobalInClusterIPPools: the 256-address
    buckets their addresses touch, or ``wide`` (:func:`controller.addresses.pool_buckets`
    explains the index and its cost)."""
    return pool_buckets(pool_spans(pool.get("spec")))


def ip_index_subnet(ip: Mapping[str, Any]) -> list[str]:
    """Indexer ``subnet`` of Kube-OVN IPs: ``spec.subnet`` (none for a malformed spec)."""
    spec = ip.get("spec")
    s = spec.get("subnet") if isinstance(spec, Mapping) else None
    return [s] if isinstance(s, str) and s else []


def address_index_pool(obj: Mapping[str, Any]) -> list[str]:
    """Indexer ``ippool`` of IPAddresses: ``<namespace>/<spec.poolRef.name>`` for a poolRef
    of kind InClusterIPPool (the key of ``network_index_pool``)."""
    ns = (obj.get("metadata") or {}).get("namespace")
    spec = obj.get("spec")
    ref = spec.get("poolRef") if isinstance(spec, Mapping) else None
    if not (ns and isinstance(ref, Mapping) and ref.get("kind") == IN_CLUSTER_IP_POOL):
        return []
    name = ref.get("name")
    return [f"{ns}/{name}"] if isinstance(name, str) and name else []


POOL_INDEXERS = {"namespace": index_namespace, "buckets": pool_index_buckets}
"""Indexers of the InClusterIPPool and GlobalInClusterIPPool stores."""
ADDRESS_INDEXERS = {"namespace": index_namespace, "ippool": address_index_pool}
"""Indexers of the IPAddress store."""
IP_INDEXERS = {"subnet": ip_index_subnet}
"""Indexers of the Kube-OVN IP store."""


def overlap_candidates(
    pools: ThreadSafeStore | None, global_pools: ThreadSafeStore | None, spans: Sequence[Span]
) -> list[tuple[str, dict[str, Any]]]:
    """``(kind, pool)`` of every pool that may share an address with ``spans``: those in
    the same buckets and the wide ones, from the ``buckets`` index of both stores (every
    pool when ``spans`` is itself wide). The exact check is
    :func:`controller.addresses.find_pool_overlaps`; a pool may be listed twice."""
    values = pool_buckets(spans)
    out: list[tuple[str, dict[str, Any]]] = []
    for kind, store in ((IN_CLUSTER_IP_POOL, pools), (GLOBAL_IN_CLUSTER_IP_POOL, global_pools)):
        if store is None or not values:
            continue
        if values == [WIDE]:
            out += [(kind, p) for p in store.list()]
            continue
        for v in (*values, WIDE):
            out += [(kind, p) for p in store.by_index("buckets", v)]
    return out


class NetworkReconciler:
    """Reconciles one ProxmoxNetwork key ``<namespace>/<name>`` per call.

    :param gateway: the NB side (``controller.gateway.GatewayStep``), or None: GatewayReady
        is then not evaluated past the subnet check, and deletion holds nothing for the NB.
    :param namespaces: the namespace annotation's reconciler (§5.9); a pass whose triple is
        not in the annotation yet asks it for the triple and writes its status only once
        the annotation lists it. Without one (no namespace queue), the annotation is written
        within the pass, as the reference does.
    :param recent: the read-your-writes overlay of networks (shared with ``namespaces``).
    :param consumer_resources: served versions of pools, machines, addresses and claims for
        the fresh consumer read of a release (field report B15); the manager adds kinds that
        appear later to this very mapping.
    """

    def __init__(
        self,
        listers: Listers,
        writer: KubeWriter,
        vlans: VlanManager,
        manage_gateway: bool,
        now: Clock = utc_now,
        events: EventRecorder | None = None,
        prune_timeout: float | None = None,
        consumer_resources: Mapping[str, Resource] | None = None,
        metrics: Metrics | None = None,
        gateway: Any = None,
        namespaces: NamespaceReconciler | None = None,
        recent: RecentWrites | None = None,
        stopping: threading.Event | None = None,
        pruned: schema.PrunedFields | None = None,
    ) -> None:
        self.l = listers
        self.pruned = pruned
        self.vlans = vlans
        self.manage_gateway = manage_gateway
        self.now = now
        self.prune_timeout = prune.prune_timeout(prune_timeout).total_seconds()  # §7: None/non-positive = 10 min
        self.gateway = gateway
        self.consumer_resources: dict[str, Resource] = dict(consumer_resources or {})
        self.metrics = metrics or Metrics()
        self.recent = recent or RecentWrites(listers.networks)
        self.namespaces = namespaces or NamespaceReconciler(listers.networks, listers.namespaces, writer, self.recent)
        self.recent_namespaces = self.namespaces.recent
        # Our finalizer on a Subnet: the next pass reads it back, not the cache's older copy.
        self.recent_subnets = RecentWrites(listers.subnets) if listers.subnets is not None else None
        self.executor = Executor(
            writer, vlans, (names.PROXMOX_NETWORKS, self.recent), events, self.metrics,
            self.consumer_resources, self.namespaces, gateway, stopping,
            overlays={names.SUBNETS: self.recent_subnets} if self.recent_subnets is not None else None,
            pruned=pruned,
        )

    def reconcile(self, key: str) -> Result:
        """One pass over network ``key``.

        :raises ApiError: when a read or write fails; nothing of the pass is written
            after the failing step, and the worker retries with backoff.
        """
        return run(plan_network, self.observe(key), self.executor)

    def pool_vpcs(self, others: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, frozenset[str]]:
        """``<namespace>/<name>`` of each InClusterIPPool of ``others`` that networks use ->
        the VPCs of those networks' Subnets (a network whose Subnet is not cached adds none)."""
        out: dict[str, frozenset[str]] = {}
        for kind, pool in others:
            if kind != IN_CLUSTER_IP_POOL or not isinstance(pool, Mapping):
                continue
            name = pool_name(kind, pool)
            if name in out:
                continue
            vpcs: set[str] = set()
            users = self.l.networks.by_index("ippool", name)
            for net in users:
                sname = (net.get("spec") or {}).get("subnet")
                sub = self.l.subnets.get(sname) if isinstance(sname, str) and sname and self.l.subnets else None
                if sub is not None:
                    vpcs.add(kubeovn.subnet_vpc(sub))
            if users:
                out[name] = frozenset(vpcs)
        return out

    def observe(self, key: str) -> NetworkSnapshot:
        """Everything a pass over ``key`` reads from the caches (no API call)."""
        net = self.recent.get(key)
        base = NetworkSnapshot(
            key=key, network=net, now=self.now(), manage_gateway=self.manage_gateway,
            gateway_enabled=self.gateway is not None, prune_timeout=self.prune_timeout,
            grace=getattr(self.gateway, "grace", 600.0),
            pruned=self.pruned.of(names.PROXMOX_NETWORKS) if self.pruned is not None else frozenset(),
        )
        if net is None:
            return base
        meta, spec = net["metadata"], net.get("spec") or {}
        ns = meta["namespace"]
        pname = str(spec.get("ipPool") or "")
        pool = self.l.pools.get(f"{ns}/{pname}") if self.l.pools is not None else None
        if meta.get("deletionTimestamp"):
            consumers = count_consumers(
                pool, pname,
                in_namespace(self.l.machines, ns), in_namespace(self.l.addresses, ns), in_namespace(self.l.claims, ns),
            )
            owns = self.gateway is not None and self.gateway.owns(key)
            sname = str(spec.get("subnet") or "")
            on_vlan = self.l.subnets.by_index("vlan", sname) if sname and self.l.subnets is not None else []
            return attrs.evolve(base, consumers=consumers, owns_group=owns, strangers=tuple(sorted(
                str(o["metadata"]["name"]) for o in on_vlan if o["metadata"]["name"] != sname)))
        zone = self.l.zones.get(str(spec.get("zone") or ""))
        sname = str(spec.get("subnet") or "")
        vlan = self.vlans.lookup(sname)
        provider = str(((zone or {}).get("spec") or {}).get("providerNetwork") or "")
        subnet = self.recent_subnets.get(sname) if self.recent_subnets is not None and sname else None
        trunk: tuple[Any, ...] = ()
        trunk_recheck: float | None = None
        siblings: frozenset[str] = frozenset()
        binding = None
        if self.gateway is not None and subnet is not None:
            vpc = str((subnet.get("spec") or {}).get("vpc") or "")
            nodes, trunk_recheck = self.gateway.trunk(provider)
            trunk = tuple(nodes)
            siblings = self.gateway.siblings(vpc) if vpc else frozenset()
            binding = self.gateway.binding(vpc, sname) if vpc else None
        own = pool_spans(pool.get("spec")) if pool is not None else ()
        others = tuple(overlap_candidates(self.l.pools, self.l.global_pools, own))
        on_vlan = self.l.subnets.by_index("vlan", sname) if sname and self.l.subnets is not None else []
        return attrs.evolve(
            base,
            zone=zone,
            namespace=self.l.namespaces.get(ns),
            vlan=vlan,
            holders=self.vlans.holders_of(vlan, zone),
            rivals=tuple(self.l.networks.by_index("subnet", sname)) if sname else (),
            subnet=subnet,
            subnet_vpc=(self.l.vpcs.get(str((subnet.get("spec") or {}).get("vpc") or ""))
                        if subnet is not None and self.l.vpcs is not None else None),
            subnet_bound=bool(on_vlan),
            strangers=tuple(sorted(str(o["metadata"]["name"]) for o in on_vlan if o["metadata"]["name"] != sname)),
            pool=pool,
            other_pools=others,
            pool_vpcs=self.pool_vpcs(others),
            kube_ovn_ips=(tuple(self.l.kube_ovn_ips.by_index("subnet", sname))
                          if own and sname and self.l.kube_ovn_ips is not None else ()),
            pool_addresses=(tuple(self.l.addresses.by_index("ippool", f"{ns}/{pname}"))
                            if own and self.l.addresses is not None else ()),
            annotation=self.namespaces.value(ns),
            trunk=trunk,
            trunk_recheck=trunk_recheck,
            siblings=siblings,
            sb_binding=binding,
            serving_settle=getattr(self.gateway, "settle", SERVING_SETTLE),
        )
