"""The watch caches' secondary indexes and the listers a pass reads (client-go's
``cache.Indexers`` and listers): one home for each index function and its name.

Every function here maps one cached object to the index keys it is found under; the
informers are built with them (``controller.manager``) and the observers and the event
routes (``controller.watch.keys``) read the indexes by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from controller import names, reasons
from controller.rules import allocator, conditions, egress_reroute
from controller.rules.foreign import machine_index_keys, owner_machines
from controller.rules.spans import (
    GLOBAL_IN_CLUSTER_IP_POOL,
    IN_CLUSTER_IP_POOL,
    WIDE,
    Span,
    pool_buckets,
    pool_spans,
)
from controller.rules.vlan_claims import edited
from informers.store import ThreadSafeStore
from ovn import planner


# Index names (client-go's cache.Indexers keys): the one home of each; every store that
# carries an index of this name maps its objects with the function given here.
BY_NAMESPACE = "namespace"
BY_PROVIDER = "provider"
BY_PROVIDER_ID = "provider_id"
BY_ZONE = "zone"
BY_EDITED = "edited"
BY_EXHAUSTED = "exhausted"
BY_SUBNET = "subnet"
BY_IPPOOL = "ippool"
BY_BUCKETS = "buckets"
BY_NETWORK_DEVICE = "network_device"
BY_MACHINE = "machine"
BY_VLAN = "vlan"
BY_VPC = "vpc"


def node_index_provider(node: Mapping[str, Any]) -> list[str]:
    """Indexer ``provider``: provider networks whose ready label is ``true`` on the node."""
    labels = ((node.get("metadata") or {}).get("labels")) or {}
    out = []
    for k, v in labels.items():
        if isinstance(k, str) and k.endswith(planner.READY_LABEL_SUFFIX) and v == "true":
            p = k[: -len(planner.READY_LABEL_SUFFIX)]
            if p:
                out.append(p)
    return out


def node_providers(node: Mapping[str, Any] | None) -> set[str]:
    """Provider names of every ``*.provider-network.kubernetes.io/ready`` label, any value (§9.7)."""
    labels = (((node or {}).get("metadata") or {}).get("labels")) or {}
    out = set()
    for k in labels:
        if isinstance(k, str) and k.endswith(planner.READY_LABEL_SUFFIX) and len(k) > len(planner.READY_LABEL_SUFFIX):
            out.add(k[: -len(planner.READY_LABEL_SUFFIX)])
    return out


def gateway_key(node: Mapping[str, Any] | None) -> tuple[str, bool]:
    """§9.7 predicate key: sorted ``<ready label>=<value>`` list, ``|``, the chassis
    annotation; plus whether the node is deleting."""
    meta = (node or {}).get("metadata") or {}
    labels = meta.get("labels") or {}
    parts = sorted(f"{k}={v}" for k, v in labels.items() if isinstance(k, str) and k.endswith(planner.READY_LABEL_SUFFIX))
    chassis = (meta.get("annotations") or {}).get(planner.CHASSIS_ANNOTATION) or ""
    return ",".join(parts) + "|" + str(chassis), bool(meta.get("deletionTimestamp"))


def subnet_index_vpc(subnet: Mapping[str, Any]) -> list[str]:
    """Indexer ``vpc``: a Subnet's ``spec.vpc``."""
    v = (subnet.get("spec") or {}).get("vpc")
    return [v] if isinstance(v, str) and v else []


def egress_gateway_index_vpc(gw: Mapping[str, Any]) -> list[str]:
    """Indexer ``vpc``: the VPC of a VpcEgressGateway (``spec.vpc``, else Kube-OVN's default)."""
    return [egress_reroute.gateway_vpc(gw)]


def networks_for_node(
    old: Mapping[str, Any] | None, new: Mapping[str, Any] | None, zones: Iterable[Mapping[str, Any]],
    networks_of_zone: Callable[[str], Iterable[str]],
) -> list[str]:
    """§9.7: network keys a Node event concerns (old and new both mapped); [] when the
    update does not change the gateway key or the deleting flag."""
    if old is not None and new is not None and gateway_key(old) == gateway_key(new):
        return []
    providers = node_providers(old) | node_providers(new)
    if not providers:
        return []
    out: list[str] = []
    for z in zones:
        if (z.get("spec") or {}).get("providerNetwork") in providers:
            out.extend(networks_of_zone(z["metadata"]["name"]))
    return out


def vlan_index_provider(vlan: Mapping[str, Any]) -> list[str]:
    """Indexer ``provider``: the Vlan's ``spec.provider``."""
    return [allocator.vlan_provider(vlan)]


def vlan_index_provider_id(vlan: Mapping[str, Any]) -> list[str]:
    """Indexer ``provider_id``: ``<spec.provider>/<spec.id>`` (duplicate detection without
    a scan of the provider)."""
    vid = allocator.vlan_id(vlan)
    return [f"{allocator.vlan_provider(vlan)}/{vid}"] if vid is not None else []


def vlan_index_edited(vlan: Mapping[str, Any]) -> list[str]:
    """Indexer ``edited``: the provider of an :func:`edited` Vlan, the only Vlans whose
    owner's record can name another ID: the used set looks these up, not every Vlan."""
    return [allocator.vlan_provider(vlan)] if edited(vlan) else []


def vlan_indexers() -> dict[str, Callable[[Mapping[str, Any]], list[str]]]:
    """The indexes of the Vlan cache, by name (the manager's informer and any store
    standing in for it): :meth:`VlanManager.used_ids` reads ``provider`` and ``edited``."""
    return {BY_PROVIDER: vlan_index_provider, BY_PROVIDER_ID: vlan_index_provider_id,
            BY_ZONE: vlan_index_zone, BY_EDITED: vlan_index_edited}


def vlan_index_zone(vlan: Mapping[str, Any]) -> list[str]:
    """Indexer ``zone``: the ``proxmox.cozystack.io/zone`` label, when set."""
    z = ((vlan.get("metadata") or {}).get("labels") or {}).get(names.LABEL_ZONE)
    return [z] if z else []


@attrs.define
class Listers:
    """The shared caches one pass reads (all synced before any worker starts).

    ``machines``, ``addresses`` and ``claims`` are None when the API server does not
    serve those kinds (capmox or CAPI IPAM not installed): they then hold nothing. So are
    ``global_pools`` (GlobalInClusterIPPool: its CRD comes with the IPAM provider) and
    ``kube_ovn_ips`` (Kube-OVN ``IP``, ``ips.kubeovn.io``), ``vpcs`` (Kube-OVN ``Vpc``) and
    ``egress_gateways`` (Kube-OVN ``VpcEgressGateway``, index ``vpc``).

    Indexes read here besides ``namespace``: ``buckets`` on both pool stores
    (:func:`pool_index_buckets`), ``subnet`` on ``kube_ovn_ips`` (:func:`ip_index_subnet`),
    ``ippool`` on ``addresses`` (:func:`address_index_pool`), ``network_device`` on
    ``machines`` (:func:`controller.rules.foreign.machine_index_keys`), ``machine`` on ``claims``
    (:func:`claim_index_machine`).
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
    egress_gateways: ThreadSafeStore | None = None


def in_namespace(store: ThreadSafeStore | None, ns: str) -> list[dict[str, Any]]:
    """Objects of a namespaced store in ``ns`` (index ``namespace``)."""
    return [] if store is None else store.by_index(BY_NAMESPACE, ns)


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
    return {BY_ZONE: network_index_zone, BY_EXHAUSTED: network_index_exhausted, BY_SUBNET: network_index_subnet,
            BY_IPPOOL: network_index_pool, BY_NAMESPACE: index_namespace}


def pool_index_buckets(pool: Mapping[str, Any]) -> list[str]:
    """Indexer ``buckets`` of InClusterIPPools and GlobalInClusterIPPools: the 256-address
    buckets their addresses touch, or ``wide`` (:func:`controller.rules.spans.pool_buckets`
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


def claim_index_machine(claim: Mapping[str, Any]) -> list[str]:
    """Indexer ``machine`` of IPAddressClaims: ``<namespace>/<machine>`` for each
    ProxmoxMachine an ownerReference names (capmox owns the claims it makes)."""
    ns = (claim.get("metadata") or {}).get("namespace")
    return [f"{ns}/{m}" for m in owner_machines(claim)] if ns else []


POOL_INDEXERS = {BY_NAMESPACE: index_namespace, BY_BUCKETS: pool_index_buckets}
"""Indexers of the InClusterIPPool and GlobalInClusterIPPool stores."""


ADDRESS_INDEXERS = {BY_NAMESPACE: index_namespace, BY_IPPOOL: address_index_pool}
"""Indexers of the IPAddress store."""


IP_INDEXERS = {BY_SUBNET: ip_index_subnet}
"""Indexers of the Kube-OVN IP store."""
EGRESS_GATEWAY_INDEXERS = {BY_NAMESPACE: index_namespace, BY_VPC: egress_gateway_index_vpc}
"""Indexers of the VpcEgressGateway store."""
MACHINE_INDEXERS = {BY_NAMESPACE: index_namespace, BY_NETWORK_DEVICE: machine_index_keys}
"""Indexers of the ProxmoxMachine store."""
CLAIM_INDEXERS = {BY_NAMESPACE: index_namespace, BY_MACHINE: claim_index_machine}
"""Indexers of the IPAddressClaim store."""


def overlap_candidates(
    pools: ThreadSafeStore | None, global_pools: ThreadSafeStore | None, spans: Sequence[Span]
) -> list[tuple[str, dict[str, Any]]]:
    """``(kind, pool)`` of every pool that may share an address with ``spans``: those in
    the same buckets and the wide ones, from the ``buckets`` index of both stores (every
    pool when ``spans`` is itself wide). The exact check is
    :func:`controller.rules.pool_conflicts.find_pool_overlaps`; a pool may be listed twice."""
    values = pool_buckets(spans)
    out: list[tuple[str, dict[str, Any]]] = []
    for kind, store in ((IN_CLUSTER_IP_POOL, pools), (GLOBAL_IN_CLUSTER_IP_POOL, global_pools)):
        if store is None or not values:
            continue
        if values == [WIDE]:
            out += [(kind, p) for p in store.list()]
            continue
        for v in (*values, WIDE):
            out += [(kind, p) for p in store.by_index(BY_BUCKETS, v)]
    return out


def zone_index_provider(zone: Mapping[str, Any]) -> list[str]:
    """Indexer ``provider``: a zone's ``spec.providerNetwork``."""
    p = (zone.get("spec") or {}).get("providerNetwork")
    return [p] if isinstance(p, str) and p else []


def subnet_index_vlan(subnet: Mapping[str, Any]) -> list[str]:
    """Indexer ``vlan``: a Subnet's ``spec.vlan``."""
    v = (subnet.get("spec") or {}).get("vlan")
    return [v] if isinstance(v, str) and v else []
