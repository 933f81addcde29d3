"""Pools that overlap the network's pool and addresses other objects hold in it (product-decisions.md §8).

Pure functions. ``PoolOverlapsPool`` when another InClusterIPPool or GlobalInClusterIPPool
overlaps the network's pool; ``AddressConflict`` when a Kube-OVN IP holds an address of the VM
pool; duplicate ``IPAddress`` objects of one address. The IPAM provider checks addresses only
within one pool (cluster-api-ipam-provider-in-cluster #272, capmox #763), and Kube-OVN admits a
pod with a fixed ``ovn.kubernetes.io/ip_address`` inside excludeIps (kube-ovn #2653).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from controller.rules.listing import first_shown
from controller.rules.netip import IPAddress, NetipError, addr_string, parse_addr
from controller.rules.ranges import text_of
from controller.rules.spans import (
    GLOBAL_IN_CLUSTER_IP_POOL,
    IN_CLUSTER_IP_POOL,
    KIND_ORDER,
    Span,
    pool_spans,
    shared_spans,
    span_text,
    spans_contain,
)

"""``(family, first, last)``: family 4 or 6, first and last address as integers, inclusive.
Zones are not part of a span: two ranges holding the same address number overlap."""


# -- the bucket index -------------------------------------------------------------------

"""A bucket is 256 consecutive addresses: an IPv4 /24, an IPv6 /120."""
"""A pool whose addresses touch more buckets than this (4,096 addresses in one range) is
indexed under :data:`WIDE` only."""


# -- PoolOverlapsPool -------------------------------------------------------------------


@attrs.frozen
class PoolOverlap:
    """Another pool sharing addresses with the network's: ``kind`` (``InClusterIPPool``,
    ``GlobalInClusterIPPool``), ``name`` (``<namespace>/<name>``, or ``<name>`` for a global
    pool) and the addresses both hold (``shared``, sorted spans)."""

    kind: str
    name: str
    shared: tuple[Span, ...]
    created: str = ""  # the other pool's metadata.creationTimestamp (RFC 3339, "" unknown)

    def __str__(self) -> str:
        more = f" and {len(self.shared) - 1} more range(s)" if len(self.shared) > 1 else ""
        return f"{self.kind} {self.name} ({span_text(self.shared[0])}{more})"


def pool_name(kind: str, pool: Mapping[str, Any]) -> str:
    """``<namespace>/<name>`` of an InClusterIPPool, ``<name>`` of a GlobalInClusterIPPool."""
    meta = pool.get("metadata") or {}
    name = text_of(meta.get("name"))
    ns = text_of(meta.get("namespace"))
    return f"{ns}/{name}" if ns and kind != GLOBAL_IN_CLUSTER_IP_POOL else name


def find_pool_overlaps(
    own: tuple[str, str], spans: Sequence[Span], others: Iterable[tuple[str, Mapping[str, Any]]]
) -> list[PoolOverlap]:
    """The pools of ``others`` that share an address with ``spans``.

    :param own: ``(kind, name as pool_name gives it)`` of the network's pool; it is never
        its own overlap.
    :param spans: the network's pool, as :func:`pool_spans` returns.
    :param others: ``(kind, pool object)`` pairs, any order, duplicates allowed (the
        observer passes the index's candidates; this is the exact check).
    :returns: the overlaps, InClusterIPPools first, then by name.
    """
    found: dict[tuple[str, str], PoolOverlap] = {}
    for kind, obj in others:
        if not isinstance(obj, Mapping):
            continue
        name = pool_name(kind, obj)
        if (kind, name) == own or (kind, name) in found:
            continue
        shared = shared_spans(spans, pool_spans(obj.get("spec")))
        if shared:
            created = text_of((obj.get("metadata") or {}).get("creationTimestamp"))
            found[(kind, name)] = PoolOverlap(kind, name, tuple(shared), created)
    return sorted(found.values(), key=overlap_order)


def overlap_order(o: PoolOverlap) -> tuple[int, str, str]:
    """InClusterIPPools first, then by kind and name (the order messages name them in)."""
    return (KIND_ORDER.get(o.kind, 9), o.kind, o.name)


def split_overlaps(
    overlaps: Iterable[PoolOverlap],
    own: tuple[str, str],
    own_vpc: str,
    pool_vpcs: Mapping[str, frozenset[str]],
) -> tuple[list[PoolOverlap], list[PoolOverlap]]:
    """Of :func:`find_pool_overlaps`' result, ``(carried, later)``: the overlaps the network's
    own pool carries as ``PoolOverlapsPool`` (False: the network is not Ready), and the later
    pools of no network it only warns of (True: it stays Ready). product-decisions.md §10,
    "Addresses are unique per VPC"; a pool's age is ``(creationTimestamp, name)``:

    * a pool of another network whose VPCs (``pool_vpcs[name]``) are all other than
      ``own_vpc``: neither (VPCs are separate address spaces);
    * a pool of another network in the same VPC (or of unknown VPC): carried when the own pool
      came later, else nothing (the later network carries it);
    * a pool of no network (a plain InClusterIPPool, a GlobalInClusterIPPool): carried when
      the own pool came later (in a later second), else a warning (machines of the VPC may
      draw from it, and a Ready network is never taken down by someone else's later choice).

    :param own: ``(creationTimestamp, <namespace>/<name>)`` of the network's pool.
    :param own_vpc: the VPC of the network's Subnet ("" unknown: the VPC rule is skipped).
    :param pool_vpcs: ``<namespace>/<name>`` of an InClusterIPPool that networks use -> their
        VPCs; a pool absent from it belongs to no network.
    """
    carried: list[PoolOverlap] = []
    later: list[PoolOverlap] = []
    for o in overlaps:
        vpcs = pool_vpcs.get(o.name) if o.kind == IN_CLUSTER_IP_POOL else None
        if vpcs is not None and own_vpc and vpcs and own_vpc not in vpcs:
            continue
        if vpcs is None:
            # A pool of no network made in the same second counts as later: a Ready network
            # is not taken down on a tie (creationTimestamp has whole seconds).
            (carried if o.created < own[0] else later).append(o)
        elif (o.created, o.name) < own:
            carried.append(o)
    return carried, later


def pool_overlaps_message(pool: str, overlaps: Sequence[PoolOverlap], later: bool = False) -> str:
    """The ``PoolOverlapsPool`` message: the overlapping pools, first five then a count,
    each with the first range both hold (``later``: made or changed after this one was Ready,
    which stays Ready), and what to fix."""
    after = " (made after it: the network stays Ready)" if later else ""
    return (
        f'addresses of InClusterIPPool "{pool}" are also in {first_shown(overlaps)}{after}; the IPAM provider '
        "checks addresses only within one pool, so two machines can be given the same address: "
        "take the shared addresses out of one of the pools (spec.addresses or spec.excludedAddresses)"
    )


# -- AddressConflict ------------------------------------------------------------------------


@attrs.frozen(order=True)
class AddressConflict:
    """An address of the network's pool that a Kube-OVN IP holds: the address (``family``,
    ``value``, ``text``), the IP's name, its pod (``<namespace>/<name>``, ``""`` when the IP
    names none) and the IPAddresses of the pool that hold the same address (sorted
    ``<namespace>/<name>``)."""

    family: int
    value: int
    ip: str
    text: str = attrs.field(order=False)
    pod: str = attrs.field(order=False)
    addresses: tuple[str, ...] = attrs.field(order=False, default=())

    def __str__(self) -> str:
        parts = ([f"pod {self.pod}"] if self.pod else []) + [f"Kube-OVN IP {self.ip}"]
        parts += [f"IPAddress {a}" for a in self.addresses]
        return f"{self.text} ({', '.join(parts)})"


def kube_ovn_ip_addresses(ip: Mapping[str, Any]) -> list[IPAddress]:
    """The addresses a Kube-OVN IP (``kubeovn.io/v1`` IP) holds: ``spec.v4IpAddress``,
    ``spec.v6IpAddress`` and ``spec.ipAddress`` (``"v4,v6"`` when dual-stack), each once;
    values that do not parse are skipped."""
    spec = ip.get("spec") if isinstance(ip, Mapping) else None
    if not isinstance(spec, Mapping):
        return []
    seen: dict[tuple[int, int], IPAddress] = {}
    for field in ("v4IpAddress", "v6IpAddress", "ipAddress"):
        for text in text_of(spec.get(field)).split(","):
            text = text.strip()
            if not text:
                continue
            try:
                addr = parse_addr(text)
            except NetipError:
                continue
            seen.setdefault((addr.version, int(addr)), addr)
    return list(seen.values())


def find_address_conflicts(
    spans: Sequence[Span], ips: Iterable[Mapping[str, Any]], addresses: Iterable[Mapping[str, Any]] = ()
) -> list[AddressConflict]:
    """The addresses of ``spans`` that Kube-OVN IPs hold.

    :param spans: the network's pool (:func:`pool_spans`).
    :param ips: Kube-OVN IPs (the observer passes those of the network's Subnet: another
        VPC may use the same addresses).
    :param addresses: CAPI IPAddresses of the pool (``spec.address``), to name the machine
        side of a conflict.
    :returns: the conflicts, by address then IP name.
    """
    spans = list(spans)
    holders = ipaddress_holders(addresses)
    out: list[AddressConflict] = []
    for ip in ips:
        if not isinstance(ip, Mapping):
            continue
        spec = ip.get("spec") if isinstance(ip.get("spec"), Mapping) else {}
        pod_name, pod_ns = text_of(spec.get("podName")), text_of(spec.get("namespace"))
        pod = f"{pod_ns}/{pod_name}" if pod_name else ""
        ip_name = text_of((ip.get("metadata") or {}).get("name"))
        for addr in kube_ovn_ip_addresses(ip):
            key = (addr.version, int(addr))
            if spans_contain(spans, *key):
                out.append(AddressConflict(addr.version, int(addr), ip_name, addr_string(addr), pod,
                                           tuple(sorted(holders.get(key, ("", []))[1]))))
    return sorted(out)


def ipaddress_holders(addresses: Iterable[Mapping[str, Any]]) -> dict[tuple[int, int], tuple[str, list[str]]]:
    """CAPI IPAddresses by the address they hold (``spec.address``; unreadable ones are
    skipped): ``(family, value)`` -> (the address as text, ``<namespace>/<name>`` of each
    IPAddress, one entry per object)."""
    out: dict[tuple[int, int], tuple[str, list[str]]] = {}
    for a in addresses:
        spec = a.get("spec") if isinstance(a, Mapping) else None
        if not isinstance(spec, Mapping):
            continue
        try:
            addr = parse_addr(text_of(spec.get("address")).strip())
        except NetipError:
            continue
        meta = a.get("metadata") or {}
        out.setdefault((addr.version, int(addr)), (addr_string(addr), []))[1].append(
            f"{text_of(meta.get('namespace'))}/{text_of(meta.get('name'))}")
    return out


@attrs.frozen(order=True)
class DuplicateAddress:
    """One address of the pool that two or more IPAddresses hold (field-reports.md R6: the IPAM
    provider can hand an address to two claims under cache lag): the address (``family``,
    ``value``, ``text``) and the IPAddresses (sorted ``<namespace>/<name>``)."""

    family: int
    value: int
    text: str = attrs.field(order=False)
    addresses: tuple[str, ...] = attrs.field(order=False)

    def __str__(self) -> str:
        return f"{self.text} (IPAddress {', IPAddress '.join(self.addresses)})"


def find_duplicate_addresses(addresses: Iterable[Mapping[str, Any]]) -> list[DuplicateAddress]:
    """The addresses held by more than one of ``addresses`` (IPAddresses of one pool), by
    address. Each IPAddress is its own holder: nothing is merged by address (a VM per
    object)."""
    return sorted(DuplicateAddress(k[0], k[1], text, tuple(sorted(names_)))
                  for k, (text, names_) in ipaddress_holders(addresses).items() if len(names_) > 1)


def duplicate_addresses_message(pool: str, dups: Sequence[DuplicateAddress]) -> str:
    """The ``AddressConflict`` message for addresses the pool handed out twice (field-reports.md R6)."""
    return (
        f'InClusterIPPool "{pool}" gave one address to several IPAddresses: {first_shown(dups)}; their VMs would '
        "answer for one address: delete the IPAddressClaim of the VM that is to get another address (the "
        "provider then gives it a free one), the controller deletes nothing"
    )


def address_conflicts_message(pool: str, conflicts: Sequence[AddressConflict]) -> str:
    """The ``AddressConflict`` message: the addresses with their pod, Kube-OVN IP and
    IPAddress, first five then a count, and what to fix (the controller deletes nothing)."""
    return (
        f'Kube-OVN has given addresses of InClusterIPPool "{pool}" to pods: {first_shown(conflicts)}; a machine '
        "given one of them clashes with the pod: give the pod another address, or take the address out of "
        "the pool (spec.excludedAddresses)"
    )


# -- the pool as CIDRs, for admission ------------------------------

