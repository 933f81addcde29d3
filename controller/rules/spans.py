"""A pool's addresses as spans of integers, and the bucket index that finds overlapping pools.

Pure functions. A span is ``(family, first, last)``, inclusive; the set algebra (merge,
subtract, share) and the buckets serve ``PoolOverlapsPool`` and ``AddressConflict``
(:mod:`controller.rules.pool_conflicts`, product-decisions.md §8) and the admission CIDRs
(:mod:`controller.rules.pool_cidrs`).
"""

from __future__ import annotations

import bisect
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from controller.rules.netip import NetipError, addr_string, parse_addr
from controller.rules.ranges import AddressError, parse_address_range, text_of

Span = tuple[int, int, int]


IN_CLUSTER_IP_POOL = "InClusterIPPool"


GLOBAL_IN_CLUSTER_IP_POOL = "GlobalInClusterIPPool"


KIND_ORDER = {IN_CLUSTER_IP_POOL: 0, GLOBAL_IN_CLUSTER_IP_POOL: 1}


def _merge(spans: Iterable[Span]) -> list[Span]:
    """Sorted, with overlapping and adjacent spans of one family joined."""
    out: list[Span] = []
    for fam, lo, hi in sorted(spans):
        if out and out[-1][0] == fam and lo <= out[-1][2] + 1:
            if hi > out[-1][2]:
                out[-1] = (fam, out[-1][1], hi)
        else:
            out.append((fam, lo, hi))
    return out


def _subtract(spans: list[Span], holes: list[Span]) -> list[Span]:
    """``spans`` minus ``holes`` (both merged and sorted); the result is merged and sorted."""
    out: list[Span] = []
    j = 0
    for fam, lo, hi in spans:
        while j < len(holes) and (holes[j][0], holes[j][2]) < (fam, lo):
            j += 1  # holes wholly before this span
        k = j
        cur = lo
        while k < len(holes) and holes[k][0] == fam and holes[k][1] <= hi:
            _, hlo, hhi = holes[k]
            if hlo > cur:
                out.append((fam, cur, hlo - 1))
            cur = max(cur, hhi + 1)
            k += 1
        if cur <= hi:
            out.append((fam, cur, hi))
    return out


def spans_of(entries: Any) -> list[Span]:
    """Spans of a list of address entries; entries that do not parse are skipped."""
    out: list[Span] = []
    for entry in entries if isinstance(entries, list) else []:
        try:
            lo, hi = parse_address_range(text_of(entry))
        except AddressError:
            continue
        out.append((lo.version, int(lo), int(hi)))
    return out


def pool_spans(pool_spec: Any) -> tuple[Span, ...]:
    """The addresses the IPAM provider may hand out from a pool: ``spec.addresses`` minus
    ``spec.excludedAddresses`` minus ``spec.gateway`` (capmox-and-ipam.md, "In-cluster IPAM
    provider"), merged and sorted.

    Bad input never raises: an entry that does not parse (:func:`parse_address_range`) is
    skipped, in both lists, and a gateway that is not one address removes nothing. When in
    doubt an address counts as the pool's, so an overlap is reported rather than missed. The
    network's own pool has been checked by :func:`check_pool_split` first, so its garbage is
    ``PoolAddressInvalid`` before any overlap is looked at. The network and broadcast
    addresses are not taken out (they are shared, if at all, by pools of one prefix, which
    overlap elsewhere too).

    :param pool_spec: an InClusterIPPool or GlobalInClusterIPPool ``spec`` (anything else
        gives no spans).
    :returns: :data:`Span` tuples, sorted, disjoint and not adjacent.
    """
    if not isinstance(pool_spec, Mapping):
        return ()
    spans = _merge(spans_of(pool_spec.get("addresses")))
    holes = spans_of(pool_spec.get("excludedAddresses"))
    gateway = text_of(pool_spec.get("gateway")).strip()
    if gateway:
        try:
            gw = parse_addr(gateway)
        except NetipError:
            pass
        else:
            holes.append((gw.version, int(gw), int(gw)))
    return tuple(_subtract(spans, _merge(holes)))


def shared_spans(a: Sequence[Span], b: Sequence[Span]) -> list[Span]:
    """The addresses in both ``a`` and ``b`` (each as :func:`pool_spans` returns), sorted:
    one walk over both lists, O(len(a) + len(b))."""
    out: list[Span] = []
    i = j = 0
    while i < len(a) and j < len(b):
        fa, la, ha = a[i]
        fb, lb, hb = b[j]
        if fa != fb:
            if fa < fb:
                i += 1
            else:
                j += 1
            continue
        lo, hi = max(la, lb), min(ha, hb)
        if lo <= hi:
            out.append((fa, lo, hi))
        if ha < hb:
            i += 1
        else:
            j += 1
    return out


def span_text(span: Span) -> str:
    """``10.0.0.5`` for one address, ``10.0.0.40-10.0.0.50`` for a range (IPv6 as Go prints
    it, RFC 5952)."""
    fam, lo, hi = span
    make = ipaddress.IPv4Address if fam == 4 else ipaddress.IPv6Address
    first = addr_string(make(lo))
    return first if lo == hi else f"{first}-{addr_string(make(hi))}"


def spans_contain(spans: Sequence[Span], fam: int, value: int) -> bool:
    i = bisect.bisect_right(spans, (fam, value, _MAX_INT)) - 1
    return i >= 0 and spans[i][0] == fam and spans[i][1] <= value <= spans[i][2]


_MAX_INT = (1 << 128) + 1


BUCKET_BITS = 8


MAX_BUCKETS = 16


WIDE = "wide"


def pool_buckets(spans: Sequence[Span]) -> list[str]:
    """Index values of a pool for the overlap index (``controller.watch.indexes.pool_index_buckets``).

    Overlap is looked up, not computed pairwise: every pool (InClusterIPPool in any
    namespace, and GlobalInClusterIPPool) is indexed in its informer's store under the
    buckets its addresses touch, ``"<family>/<address >> 8 in hex>"`` (``"4/a0a01"`` is
    10.10.1.0/24). Two pools can share an address only if they share a bucket, so a pass
    reads the pools of its own pool's buckets (at most :data:`MAX_BUCKETS` lookups) plus the
    pools indexed :data:`WIDE`, and checks those exactly (:func:`shared_spans`). Cost per
    pass: O(buckets + pools in them + wide pools), not O(pools); at N=2000 networks of one
    VPC with one /24-sized pool each, a pass reads one bucket holding its own pool. A pool
    over more than :data:`MAX_BUCKETS` buckets (a /20 or wider range, rare for VM pools) is
    indexed only under :data:`WIDE`, so an index entry never grows with a pool's size; a
    pass over a network whose *own* pool is wide reads every pool (O(pools)), which only
    such networks pay.

    :param spans: as :func:`pool_spans` returns.
    :returns: the bucket values, or ``[WIDE]``; ``[]`` for a pool without addresses.
    """
    out: list[str] = []
    for fam, lo, hi in spans:
        first, last = lo >> BUCKET_BITS, hi >> BUCKET_BITS
        if last - first + 1 + len(out) > MAX_BUCKETS:
            return [WIDE]
        out.extend(f"{fam}/{b:x}" for b in range(first, last + 1))
    return sorted(set(out))
