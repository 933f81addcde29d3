"""Queue keys and the mapping from watch events to them.

Each controller has its own queue of its own key type: :class:`NetworkKey`,
:class:`ZoneKey`, :class:`PodKey`, :class:`NamespaceKey`. The functions below are the
event handlers' whole logic: given the object of an event (and read-only lookups in the
listers), which keys of which kind must be reconciled. They decide nothing else; every
decision is taken in a reconcile pass from the caches, so any event, or a full resync,
leads to the same result.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from controller import names
from controller.rules.pool_conflicts import find_pool_overlaps, pool_name
from controller.rules.spans import IN_CLUSTER_IP_POOL, pool_spans
from controller.rules.consumers import machine_pool_refs
from controller.watch.indexes import overlap_candidates
from controller.watch.indexes import vlan_index_provider_id
from controller.rules.annotation import contribution
from controller.rules.vlan_claims import vlan_owner
from controller.rules import egress_reroute
from informers.resource import meta_namespace_key
from controller.rules.foreign import machine_devices, owner_machines
from controller.watch.indexes import BY_NAMESPACE, BY_PROVIDER, BY_PROVIDER_ID, BY_SUBNET, BY_VPC


@attrs.frozen(order=True)
class NetworkKey:
    """A ProxmoxNetwork, by namespace and name."""

    namespace: str
    name: str

    @classmethod
    def parse(cls, key: str) -> NetworkKey:
        """From the cache key ``<namespace>/<name>``."""
        ns, _, name = key.partition("/")
        return cls(ns, name)

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> NetworkKey:
        meta = obj.get("metadata") or {}
        return cls(str(meta.get("namespace") or ""), str(meta.get("name") or ""))

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@attrs.frozen(order=True)
class ZoneKey:
    """A ProxmoxNetworkZone (cluster-scoped), by name."""

    name: str

    def __str__(self) -> str:
        return self.name


@attrs.frozen(order=True)
class PodKey:
    """An egress-gateway Pod, by namespace and name."""

    namespace: str
    name: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> PodKey:
        meta = obj.get("metadata") or {}
        return cls(str(meta.get("namespace") or ""), str(meta.get("name") or ""))

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@attrs.frozen(order=True)
class NamespaceKey:
    """A Namespace whose annotation lists its networks' VLANs (§5.9)."""

    name: str

    def __str__(self) -> str:
        return self.name


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _networks(listers: Any, index: str, value: str) -> list[NetworkKey]:
    return [NetworkKey.parse(meta_namespace_key(n)) for n in listers.networks.by_index(index, value)]


def _zones_on(listers: Any, provider: Any) -> list[ZoneKey]:
    return [ZoneKey(_name(z)) for z in listers.zones.by_index(BY_PROVIDER, provider)] if provider else []


def _exhausted_on(listers: Any, provider: Any) -> list[NetworkKey]:
    """The networks waiting in ``ZoneExhausted`` on any zone of ``provider`` (index
    ``exhausted``): an ID that comes free there may be theirs, whichever zone freed it."""
    return [k for z in _zones_on(listers, provider) for k in _networks(listers, "exhausted", z.name)]


# -- one function per watched kind: (network keys, zone keys) ----------------------------------


def for_network(net: Mapping[str, Any], listers: Any) -> tuple[list[NetworkKey], list[ZoneKey]]:
    """A network changed: itself, every other network naming its Subnet (the oldest
    claimant wins), and its zone's counts."""
    spec = net.get("spec") or {}
    z, sub = spec.get("zone"), spec.get("subnet")
    own = NetworkKey.of(net)
    rivals = [k for k in _networks(listers, "subnet", sub) if k != own] if isinstance(sub, str) and sub else []
    return [own, *rivals], [ZoneKey(z)] if isinstance(z, str) and z else []


def zone_inputs_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """A zone update others depend on: its spec, annotations (the reuse delay's record),
    labels or deletion changed; not a status-only update."""
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    return (old.get("spec") != new.get("spec") or om.get("annotations") != nm.get("annotations")
            or om.get("labels") != nm.get("labels") or om.get("deletionTimestamp") != nm.get("deletionTimestamp"))


def for_zone(zone: Mapping[str, Any], listers: Any) -> tuple[list[NetworkKey], list[ZoneKey]]:
    """A zone changed: itself, its networks, the other zones on its provider (pins of one
    zone change what the others may allocate), and the networks waiting in
    ``ZoneExhausted`` on those zones (a range widened, a pin dropped, an entry of the reuse
    delay's record lapsed: an ID may be free for them)."""
    zname = _name(zone)
    p = (zone.get("spec") or {}).get("providerNetwork")
    return _networks(listers, "zone", zname) + _exhausted_on(listers, p), [ZoneKey(zname), *_zones_on(listers, p)]


def for_vlan(vlan: Mapping[str, Any], listers: Any) -> tuple[list[NetworkKey], list[ZoneKey]]:
    """A Vlan changed: its owner, and the zones whose free counts (and duplicates) it touches."""
    ns, name = vlan_owner(vlan)
    nets = [NetworkKey(ns, name)] if ns and name else []
    zones = _zones_on(listers, (vlan.get("spec") or {}).get("provider"))
    zl = ((vlan.get("metadata") or {}).get("labels") or {}).get(names.LABEL_ZONE)
    if zl:
        zones.append(ZoneKey(zl))
    return nets, zones


def for_vlan_come_or_gone(vlan: Mapping[str, Any], listers: Any) -> tuple[list[NetworkKey], list[ZoneKey]]:
    """A Vlan appeared or went: as :func:`for_vlan`, plus the networks naming it (a network
    refused with VLANNameTaken/VLANProviderMismatch waits for the name), whatever its
    same-ID twins map to (their VLANConflict must be checked again), and the networks
    waiting in ``ZoneExhausted`` on its provider's zones (a Vlan gone frees its ID)."""
    nets, zones = for_vlan(vlan, listers)
    nets += _networks(listers, "subnet", _name(vlan))
    nets += _exhausted_on(listers, (vlan.get("spec") or {}).get("provider"))
    for key in vlan_index_provider_id(vlan):
        for other in listers.vlans.by_index(BY_PROVIDER_ID, key):
            if _name(other) != _name(vlan):
                n, z = for_vlan(other, listers)
                nets += n
                zones += z
    return nets, zones


def for_namespace_labels(old: Mapping[str, Any] | None, new: Mapping[str, Any], listers: Any) -> list[NetworkKey]:
    """A Namespace came or its labels changed: its networks (zone namespaceSelectors)."""
    if old is not None and (old.get("metadata") or {}).get("labels") == (new.get("metadata") or {}).get("labels"):
        return []
    return _networks(listers, "namespace", _name(new))


def for_provider_network(pn: Mapping[str, Any], listers: Any) -> list[ZoneKey]:
    """A ProviderNetwork changed: the zones on it (their Ready)."""
    return _zones_on(listers, _name(pn))


def for_subnet(subnet: Mapping[str, Any], listers: Any) -> tuple[list[NetworkKey], list[ZoneKey]]:
    """A Subnet changed: the networks naming it, the network whose Vlan it names (another's
    Subnet on that Vlan is its VLANConflict: field-reports.md R1), and the zone of the Vlan it
    binds (a Subnet bound to an orphaned Vlan holds it)."""
    v = (subnet.get("spec") or {}).get("vlan")
    vlan = listers.vlans.get(v) if isinstance(v, str) and v else None
    zl = (((vlan or {}).get("metadata") or {}).get("labels") or {}).get(names.LABEL_ZONE)
    nets = _networks(listers, "subnet", _name(subnet))
    if isinstance(v, str) and v and v != _name(subnet):
        nets += [k for k in _networks(listers, "subnet", v) if k not in nets]
    return nets, [ZoneKey(zl)] if zl else []


def for_pool_user(kind: str, obj: Mapping[str, Any], listers: Any) -> list[NetworkKey]:
    """A pool (``pools``), an address or claim (``addresses``, ``claims``: by ``spec.poolRef``)
    or a machine (``machines``: by its pool references) changed: the networks of those pools.

    field-reports.md S4: a claim or address of a machine is also one of the networks its NICs are
    on (:func:`for_machine`), whichever pool it names: an address of another pool on the
    network's VLAN is reported on the network (``controller.rules.foreign``)."""
    ns = str((obj.get("metadata") or {}).get("namespace") or "")
    if kind == "machines":
        return for_machine(obj, listers)
    if kind == "pools":
        pools: Iterable[str] = [_name(obj)]
    else:
        spec = obj.get("spec")
        ref = spec.get("poolRef") if isinstance(spec, Mapping) else None
        pools = [str(ref["name"])] if isinstance(ref, Mapping) and ref.get("name") else []
    out = [k for p in pools for k in _networks(listers, "ippool", f"{ns}/{p}")]
    if kind in ("claims", "addresses"):
        for machine in _machines_of(kind, obj, ns, listers):
            out += [k for k in for_machine(machine, listers) if k not in out]
    return out


def for_machine(machine: Mapping[str, Any], listers: Any) -> list[NetworkKey]:
    """A ProxmoxMachine changed: the networks of the pools it references, and the networks of
    its namespace whose bridge and VLAN one of its NICs is on (field-reports.md S4)."""
    ns = str((machine.get("metadata") or {}).get("namespace") or "")
    pools = [str(r["name"]) for r in machine_pool_refs(machine) if r.get("name")]
    out: list[NetworkKey] = []
    for p in pools:
        out += [k for k in _networks(listers, "ippool", f"{ns}/{p}") if k not in out]
    tagged = {(d.bridge, d.vlan) for d in machine_devices(machine) if d.bridge and d.vlan is not None}
    if tagged and ns:
        for net in listers.networks.by_index(BY_NAMESPACE, ns):
            st = net.get("status") if isinstance(net.get("status"), Mapping) else {}
            key = NetworkKey.of(net)
            if (st.get("bridge"), st.get("vlan")) in tagged and key not in out:
                out.append(key)
    return out


def _machines_of(kind: str, obj: Mapping[str, Any], ns: str, listers: Any) -> list[Mapping[str, Any]]:
    """The cached machines owning a claim, or the claim an address names (``spec.claimRef``)."""
    if listers.machines is None or not ns:
        return []
    claim: Mapping[str, Any] | None = obj
    if kind == "addresses":
        spec = obj.get("spec")
        ref = spec.get("claimRef") if isinstance(spec, Mapping) else None
        name = ref.get("name") if isinstance(ref, Mapping) else None
        claim = listers.claims.get(f"{ns}/{name}") if name and listers.claims is not None else None
    if claim is None:
        return []
    found = (listers.machines.get(f"{ns}/{m}") for m in owner_machines(claim))
    return [m for m in found if m is not None]


def for_pool_overlap(kind: str, pool: Mapping[str, Any], listers: Any) -> list[NetworkKey]:
    """A pool came, changed or went (``kind``: ``InClusterIPPool`` or
    ``GlobalInClusterIPPool``): the networks whose pools share an address with it (their
    ``PoolOverlapsPool`` may start or clear). Call it with the old and the new object of an
    update, so both ranges count. The pools come from the overlap index
    (``controller.watch.indexes.overlap_candidates``): O(pools in its buckets), not O(pools)."""
    spans = pool_spans(pool.get("spec") if isinstance(pool, Mapping) else None)
    if not spans:
        return []
    me = (kind, pool_name(kind, pool))
    found = find_pool_overlaps(me, spans, overlap_candidates(listers.pools, listers.global_pools, spans))
    return [k for o in found if o.kind == IN_CLUSTER_IP_POOL for k in _networks(listers, "ippool", o.name)]


def for_network_overlap(net: Mapping[str, Any], listers: Any) -> list[NetworkKey]:
    """A network came, went or changed its spec: the networks whose pools share an address
    with its pool (whether a pool belongs to a network, and in which VPC, decides who carries
    ``PoolOverlapsPool``: product-decisions.md §10)."""
    ns = str((net.get("metadata") or {}).get("namespace") or "")
    p = (net.get("spec") or {}).get("ipPool")
    pool = listers.pools.get(f"{ns}/{p}") if isinstance(p, str) and p and ns and listers.pools is not None else None
    own = NetworkKey.of(net)
    return [k for k in for_pool_overlap(IN_CLUSTER_IP_POOL, pool, listers) if k != own] if pool else []


def for_subnet_overlap(subnet: Mapping[str, Any], listers: Any) -> list[NetworkKey]:
    """A Subnet came, went or moved to another VPC: for each network naming it,
    :func:`for_network_overlap`."""
    out: list[NetworkKey] = []
    for net in listers.networks.by_index(BY_SUBNET, _name(subnet)):
        out += [k for k in for_network_overlap(net, listers) if k not in out]
    return out


def for_vpc(vpc: Mapping[str, Any], listers: Any) -> list[NetworkKey]:
    """A Kube-OVN Vpc changed (its ``spec.namespaces``): the networks whose Subnet is in it
    (their foreign-VPC report, field-reports.md R2)."""
    subnets = listers.subnets.by_index(BY_VPC, _name(vpc)) if listers.subnets is not None else []
    out: list[NetworkKey] = []
    for sub in subnets:
        out += [k for k in _networks(listers, "subnet", _name(sub)) if k not in out]
    return out


def for_vpc_name(vpc: str, listers: Any) -> list[NetworkKey]:
    """The networks whose Subnet is in VPC ``vpc`` (its router's egress reroutes changed)."""
    subnets = listers.subnets.by_index(BY_VPC, vpc) if listers.subnets is not None and vpc else []
    out: list[NetworkKey] = []
    for sub in subnets:
        out += [k for k in _networks(listers, "subnet", _name(sub)) if k not in out]
    return out


def for_egress_gateway(gw: Mapping[str, Any], listers: Any) -> list[NetworkKey]:
    """A VpcEgressGateway changed (its readiness, its policies): the networks of its VPC
    (controller.rules.egress_reroute)."""
    return for_vpc_name(egress_reroute.gateway_vpc(gw), listers)


def for_kube_ovn_ip(ip: Mapping[str, Any], listers: Any) -> list[NetworkKey]:
    """A Kube-OVN IP changed: the networks naming its Subnet (their ``AddressConflict``)."""
    sub = (ip.get("spec") or {}).get("subnet") if isinstance(ip.get("spec"), Mapping) else None
    return _networks(listers, "subnet", sub) if isinstance(sub, str) and sub else []


def keys_for_network(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[str]:
    """Namespace keys a ProxmoxNetwork event asks for (``old`` None: added, ``new`` None:
    deleted): its namespace when what it contributes to the annotation changed."""
    obj = new if new is not None else old
    if obj is None:
        return []
    ns = (obj.get("metadata") or {}).get("namespace")
    if not ns:
        return []
    before = contribution(old) if old is not None else None
    after = contribution(new) if new is not None else None
    return [ns] if before != after else []


def keys_for_namespace(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[str]:
    """Namespace keys a Namespace event asks for: an added namespace, and one whose
    annotation changed (a hand edit is repaired at once). A deletion asks for nothing."""
    if new is None:
        return []
    name = (new.get("metadata") or {}).get("name")
    if not name:
        return []
    if old is None:
        return [name]

    def value(o: Mapping[str, Any]) -> Any:
        return ((o.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_NAMESPACE_NETWORKS)

    return [name] if value(old) != value(new) else []
