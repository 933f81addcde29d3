"""Address ranges of Kube-OVN ``excludeIps`` and in-cluster IPAM pools; the pool/subnet split check.

Pure functions of their arguments. Rules: ``reference-behaviour.md`` §5.5 (prefix bits of the
subnet's ``cidrBlock``), §5.6 (address-range syntax, coverage) and §5.6.1 (``checkPoolSplit``).
Addresses are parsed as Go's ``net/netip`` does (:mod:`controller.rules.netip`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from controller import reasons
from controller.rules.netip import (
    IPAddress,
    NetipError,
    addr_key,
    addr_string,
    go_quote,
    go_trim,
    masked_value,
    parse_addr,
    parse_prefix,
    same_family,
)

AddressRange = tuple[IPAddress, IPAddress]


class AddressError(ValueError):
    """An address, range or CIDR that cannot be used; ``str(err)`` is the message of the spec."""


def parse_address_range(s: str) -> AddressRange:
    """Parse one ``excludeIps`` or pool ``addresses`` entry into an inclusive range (§5.6).

    Syntax, in this order, after trimming ``s`` (Go ``strings.TrimSpace``):

    1. a CIDR (``netip.ParsePrefix``), masked: ``10.0.0.7/30`` -> 10.0.0.4 .. 10.0.0.7;
    2. if it contains ``..``: split at the first ``..`` (``10.0.0.10..10.0.0.20``);
    3. if it contains exactly one ``-``: split there (``fd00::1-fd00::ff``);
    4. otherwise a single address (``10.0.0.5`` -> 10.0.0.5 .. 10.0.0.5).

    Each side of a range is trimmed again and parsed as one address (``netip.ParseAddr``; an
    IPv6 side may carry a zone, see the module docstring).

    :param s: the entry as stored in the object.
    :returns: ``(first, last)`` :mod:`ipaddress` addresses of one family, ``first <= last``.
    :raises AddressError: ``str(err)`` is one of (``<s>`` is the **trimmed** entry in Go
        ``%q`` quoting, as the reference trims before it formats):
        ``"<s>" is not an address, range or CIDR`` (empty, garbage, a bad single address),
        ``"<s>": bad start address``, ``"<s>": bad end address``,
        ``"<s>" is not an ascending range of one family`` (end before start, IPv4 with IPv6).
    """
    s = go_trim(s)
    try:
        addr, bits = parse_prefix(s)
    except NetipError:
        pass
    else:
        first, last = masked_value(addr, bits)
        return same_family(first, addr), same_family(last, addr)

    if ".." in s:
        lo_text, _, hi_text = s.partition("..")
    elif s.count("-") == 1:
        lo_text, _, hi_text = s.partition("-")
    else:
        try:
            one = parse_addr(s)
        except NetipError:
            raise AddressError(f"{go_quote(s)} is not an address, range or CIDR") from None
        return one, one
    try:
        lo = parse_addr(go_trim(lo_text))
    except NetipError:
        raise AddressError(f"{go_quote(s)}: bad start address") from None
    try:
        hi = parse_addr(go_trim(hi_text))
    except NetipError:
        raise AddressError(f"{go_quote(s)}: bad end address") from None
    if lo.version != hi.version or addr_key(hi) < addr_key(lo):
        raise AddressError(f"{go_quote(s)} is not an ascending range of one family")
    return lo, hi


def covered(start: IPAddress, end: IPAddress, ranges: Iterable[AddressRange]) -> bool:
    """Whether every address of ``start .. end`` (inclusive) lies in the union of ``ranges`` (§5.6).

    The reference's walk: a cursor starts at ``start``; each sweep over ``ranges`` (in the
    given order) takes any range containing the cursor and either finishes (its last address
    is at or past ``end``) or moves the cursor one past its last address. A sweep that moves
    nothing ends the walk as *not covered*; so does a range ending at the family's last
    address (``255.255.255.255``, ``ffff:...:ffff``) when ``end`` is still ahead, since
    there is no address after it. Ranges may come in any order and chain when adjacent; a
    range of the other family never contains the cursor. Comparisons follow
    ``netip.Addr.Compare`` (zone as the last tie-break).

    :param start: first address of the range to check.
    :param end: last address, same family, ``end >= start``.
    :param ranges: ``(first, last)`` pairs as returned by :func:`parse_address_range`.
    :returns: ``True`` if covered.
    """
    keyed = [(addr_key(lo), addr_key(hi)) for lo, hi in ranges]
    cursor = addr_key(start)
    last = addr_key(end)
    while True:
        advanced = False
        for lo, hi in keyed:
            if lo <= cursor <= hi:
                if last <= hi:
                    return True
                bits, value, zone = hi
                if (value + 1) >> bits:  # past the family's last address
                    return False
                cursor = (bits, value + 1, zone)
                advanced = True
        if not advanced:
            return False


def prefix_bits(cidr: str) -> int | None:
    """Prefix length of a Subnet ``cidrBlock`` for ``status.prefix`` (§5.5).

    :param cidr: the CIDR as stored (not trimmed), parsed like ``netip.ParsePrefix``.
    :returns: the bits after the slash (``"10.0.0.7/24"`` -> 24), or ``None`` when it does not
        parse; the caller then leaves ``status.prefix`` unchanged. A dual-stack value
        ``"10.0.0.0/24,fd00::/64"`` does not parse (the reference reads one CIDR).
    """
    try:
        return parse_prefix(cidr)[1]
    except NetipError:
        return None


def parse_address(text: str) -> tuple[int, int, str] | None:
    """``(family, value, text as Go prints it)`` of one address (``netip.ParseAddr`` after
    Go's ``strings.TrimSpace``), or None when it does not parse."""
    try:
        addr = parse_addr(go_trim(text_of(text)))
    except NetipError:
        return None
    return addr.version, int(addr), addr_string(addr)


def in_cidr_block(cidr_block: str, family: int, value: int) -> bool | None:
    """Whether the address ``(family, value)`` lies in a Kube-OVN ``cidrBlock`` (one CIDR, or
    a dual-stack ``"<v4 CIDR>,<v6 CIDR>"``; each parsed like ``netip.ParsePrefix``); None when
    no CIDR of it parses (nothing can be said)."""
    parsed = False
    for part in text_of(cidr_block).split(","):
        try:
            addr, bits = parse_prefix(go_trim(part))
        except NetipError:
            continue
        parsed = True
        first, last = masked_value(addr, bits)
        if addr.version == family and first <= value <= last:
            return True
    return False if parsed else None


def check_pool_split(
    subnet_cidr: str,
    subnet_gateway: str,
    exclude_ips: Sequence[str] | None,
    pool_spec: Mapping[str, Any],
) -> tuple[str, str] | None:
    """Check that the InClusterIPPool lies inside the Subnet's ``excludeIps`` (§5.6.1).

    Steps, first failure wins:

    1. ``subnet_cidr`` must parse as one CIDR (``netip.ParsePrefix``, not trimmed). A
       Kube-OVN dual-stack ``cidrBlock`` (``"v4cidr,v6cidr"``) does not, as in the reference.
       -> ``SubnetCIDRInvalid``, ``subnet cidrBlock "<cidr>": <error>`` where ``<error>`` is
       Go's text, e.g. ``netip.ParsePrefix("10.0.0.0/33"): prefix length out of range`` or
       ``netip.ParsePrefix("garbage"): no '/'``. The CIDR is masked; the subnet range is its
       network address .. last address.
    2. ``pool_spec["prefix"]`` must equal the prefix bits -> ``PoolPrefixMismatch``,
       ``pool prefix /<p> differs from subnet <masked prefix>`` (``/25 differs from subnet
       10.208.64.0/24``). A missing or non-integer prefix counts as 0 (Go's zero value).
    3. If ``subnet_gateway`` is non-empty, ``pool_spec["gateway"]`` must equal it as a string
       (no parsing, no trimming) -> ``PoolGatewayMismatch``,
       ``pool gateway "<pg>" differs from subnet gateway "<g>"``.
    4. Every ``exclude_ips`` entry must parse (:func:`parse_address_range`), all of them
       before any pool address -> ``SubnetExcludeIPsInvalid`` with the parse error text.
    5. For each ``pool_spec["addresses"]`` entry in order: parse failure ->
       ``PoolAddressInvalid`` (parse error text); first or last address outside the subnet
       range -> ``PoolOutsideSubnet``, ``pool address "<a>" is outside <masked prefix>``; not
       covered by the union of ``excludeIps`` (:func:`covered`) -> ``PoolOverlapsSubnet``,
       ``pool address "<a>" is not in the subnet's excludeIps, so Kube-OVN may hand it to a
       pod``. ``<a>`` is the entry as written (untrimmed), Go-quoted.

    Not checked (as in the reference): gateway, network or broadcast address inside the pool;
    the pool's ``excludedAddresses``.

    :param subnet_cidr: Subnet ``spec.cidrBlock``.
    :param subnet_gateway: Subnet ``spec.gateway`` (``""``/``None`` skips step 3).
    :param exclude_ips: Subnet ``spec.excludeIps`` (``None`` = none).
    :param pool_spec: InClusterIPPool ``spec``: ``addresses`` (list of str), ``prefix`` (int),
        ``gateway`` (str).
    :returns: ``None`` when the split is sound, else ``(reason, message)``.
    """
    try:
        addr, bits = parse_prefix(subnet_cidr)
    except NetipError as err:
        return reasons.SUBNET_CIDR_INVALID, f"subnet cidrBlock {go_quote(subnet_cidr)}: {err}"
    first, last = masked_value(addr, bits)
    network = same_family(first, addr)
    prefix_text = f"{addr_string(network)}/{bits}"
    subnet_lo, subnet_hi = addr_key(network), addr_key(same_family(last, addr))

    pool_prefix = pool_spec.get("prefix")
    if not isinstance(pool_prefix, int) or isinstance(pool_prefix, bool):
        pool_prefix = 0
    if pool_prefix != bits:
        return reasons.POOL_PREFIX_MISMATCH, f"pool prefix /{pool_prefix} differs from subnet {prefix_text}"

    pool_gateway = text_of(pool_spec.get("gateway"))
    gateway = text_of(subnet_gateway)
    if gateway and pool_gateway != gateway:
        return (
            reasons.POOL_GATEWAY_MISMATCH,
            f"pool gateway {go_quote(pool_gateway)} differs from subnet gateway {go_quote(gateway)}",
        )

    excluded: list[AddressRange] = []
    for entry in exclude_ips or []:
        try:
            excluded.append(parse_address_range(text_of(entry)))
        except AddressError as err:
            return reasons.SUBNET_EXCLUDE_IPS_INVALID, str(err)

    for entry in pool_spec.get("addresses") or []:
        entry = text_of(entry)
        try:
            lo, hi = parse_address_range(entry)
        except AddressError as err:
            return reasons.POOL_ADDRESS_INVALID, str(err)
        if not (subnet_lo <= addr_key(lo) <= subnet_hi and subnet_lo <= addr_key(hi) <= subnet_hi):
            return reasons.POOL_OUTSIDE_SUBNET, f"pool address {go_quote(entry)} is outside {prefix_text}"
        if not covered(lo, hi, excluded):
            return (
                reasons.POOL_OVERLAPS_SUBNET,
                f"pool address {go_quote(entry)} is not in the subnet's excludeIps, "
                "so Kube-OVN may hand it to a pod",
            )
    return None


def text_of(value: Any) -> str:
    """A string field read from an unstructured object: ``None`` is ``""``, others ``str()``."""
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)
