"""The pool's addresses as CIDRs, the value the fixed-address admission policy tests (docs/admission.md).

Pure functions.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from controller.rules.spans import spans_of

# Bound on the CIDRs of one pool's annotation: far above any real pool (one IPv4 range needs
# at most 62, one IPv6 range at most 254), and it keeps the annotation and the admission
# policy's per-Vlan work small.
POOL_CIDRS_MAX = 1024


_IPV4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")


def pool_cidrs(pool_spec: Mapping[str, Any]) -> str | None:
    """The addresses of an InClusterIPPool as the smallest list of CIDRs that covers exactly
    them: the value of the Vlan annotation ``proxmox.cozystack.io/pool-cidrs`` that the
    admission policy ``proxmox-network-fixed-addresses`` tests with CEL's
    ``cidr(c).containsIP(a)`` (docs/admission.md; CEL has no ordering of IP addresses, so a
    range ``a-b`` cannot be tested as a range).

    Each ``spec.addresses`` entry is parsed as the reference does (:func:`parse_address_range`:
    a CIDR, ``a..b``, ``a-b`` or one address); an entry that does not parse is left out (the
    network's ``IPPoolReady`` reports it as ``PoolAddressInvalid``). Ranges are merged per
    family and split into CIDRs; an IPv6 zone is dropped (a prefix carries none) and
    IPv4-mapped IPv6 addresses (``::ffff:a.b.c.d``, which CEL's ``cidr()`` refuses) are left
    out. ``excludedAddresses`` are not subtracted: an address the pool skips is still one of
    its own addresses to everyone else.

    :param pool_spec: the pool's ``spec`` (``addresses``: list of str).
    :returns: comma-separated CIDRs in canonical form, IPv4 first, each family ascending
        (``"10.0.0.10-10.0.0.13"`` -> ``"10.0.0.10/31,10.0.0.12/31"``); None when no address
        is left, or when more than :data:`POOL_CIDRS_MAX` CIDRs would be needed.
    """
    v4: list[ipaddress.IPv4Network] = []
    v6: list[ipaddress.IPv6Network] = []
    entries = pool_spec.get("addresses")
    for fam, lo, hi in spans_of(entries):
        if fam == 4:
            v4 += ipaddress.summarize_address_range(ipaddress.IPv4Address(lo), ipaddress.IPv4Address(hi))
        else:
            nets = ipaddress.summarize_address_range(ipaddress.IPv6Address(lo), ipaddress.IPv6Address(hi))
            v6 += [part for n in nets for part in _without_ipv4_mapped(n)]
    nets = [*ipaddress.collapse_addresses(v4), *ipaddress.collapse_addresses(v6)]
    if not nets or len(nets) > POOL_CIDRS_MAX:
        return None
    return ",".join(str(n) for n in nets)


def _without_ipv4_mapped(net: ipaddress.IPv6Network) -> list[ipaddress.IPv6Network]:
    """``net`` minus ``::ffff:0:0/96`` (as CIDRs)."""
    if not net.overlaps(_IPV4_MAPPED):
        return [net]
    if net.subnet_of(_IPV4_MAPPED):
        return []
    return list(net.address_exclude(_IPV4_MAPPED))
