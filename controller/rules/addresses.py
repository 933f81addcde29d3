"""Address ranges of Kube-OVN ``excludeIps`` and in-cluster IPAM pools; the pool/subnet split check.

Pure functions of their arguments. Rules: ``reference-behaviour.md`` §5.5 (prefix bits of the
subnet's ``cidrBlock``), §5.6 (address-range syntax, coverage) and §5.6.1 (``checkPoolSplit``).

**Parser.** The reference parses with Go's ``net/netip`` (``ParseAddr``, ``ParsePrefix``), not with
``net.ParseIP``/``ParseCIDR``. This module carries its own port of the ``netip`` grammar, because
Python's :mod:`ipaddress` accepts and refuses different strings. Where they differ, Go wins:

* prefix lengths: ``10.0.0.0/024``, ``/00``, ``/+8`` and netmask forms (``/255.255.255.0``) are
  not CIDRs; a CIDR needs a ``/`` (``ipaddress`` reads ``10.0.0.1`` as ``/32``);
* IPv6 zones: ``fe80::1%eth0`` is a valid *address* (not a valid CIDR). Any non-empty zone is
  taken as written, so ``fe80::1%a%b`` is an address with zone ``a%b``, and ``fe80::%eth0/64``
  (no CIDR, since prefixes carry no zone) is the single address ``fe80::`` with zone ``eth0/64``.
  ``ipaddress`` refuses both; we build the scoped :class:`ipaddress.IPv6Address` ourselves.
  Order follows ``netip.Addr.Compare``: family, then address, then zone as a string, so
  ``fd00::ff%eth0`` sorts after ``fd00::ff``;
* IPv4 with leading zeros (``010.0.0.1``), zones on IPv4 (``1.2.3.4%eth0``) and non-ASCII digits
  are refused (as by ``ipaddress`` since 3.9.5, but with Go's error text);
* trimming uses Go's ``strings.TrimSpace`` set (``\\x1c``-``\\x1f`` are *not* trimmed, unlike
  :meth:`str.strip`);
* an IPv4-mapped IPv6 address (``::ffff:10.0.0.1``) is IPv6, never IPv4: it neither mixes with
  an IPv4 bound nor lies inside an IPv4 subnet; it is printed ``::ffff:10.0.0.1`` as Go does.

Quoted values in messages follow Go's ``%q`` (:func:`go_quote`).
"""

from __future__ import annotations

import bisect
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Union

import attrs

from controller import reasons
from controller.rules.listing import first_shown

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
AddressRange = tuple[IPAddress, IPAddress]

# Go's unicode.IsSpace, used by strings.TrimSpace.
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
_DIGITS = "0123456789"
_HEX = "0123456789abcdefABCDEF"
_INT64_MAX = (1 << 63) - 1



class AddressError(ValueError):
    """An address, range or CIDR that cannot be used; ``str(err)`` is the message of the spec."""


class _NetipError(ValueError):
    """A ``netip`` parse failure; ``str(err)`` is Go's error text."""


# -- Go formatting helpers -----------------------------------------------------------


def go_quote(s: str) -> str:
    """Quote ``s`` like Go's ``strconv.Quote`` (what ``fmt``'s ``%q`` prints for a string).

    Double quotes around; ``"`` and ``\\`` escaped; printable characters (letters, marks,
    numbers, punctuation, symbols and the ASCII space) kept as they are; ``\\a \\b \\f \\n
    \\r \\t \\v`` by name; other characters below U+0020 and U+007F as ``\\xNN``; any other
    non-printable character as ``\\uNNNN`` or ``\\UNNNNNNNN``. Python's
    :meth:`str.isprintable` uses the same categories as Go's ``unicode.IsPrint`` (only the
    Unicode versions may differ).
    """
    out = ['"']
    for ch in s:
        cp = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        elif ch in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[ch])
        elif cp < 0x20 or cp == 0x7F:
            out.append(f"\\x{cp:02x}")
        elif cp < 0x10000:
            out.append(f"\\u{cp:04x}")
        else:
            out.append(f"\\U{cp:08x}")
    out.append('"')
    return "".join(out)


_NAMED_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def _go_trim(s: str) -> str:
    return s.strip(_GO_SPACE)


# -- netip port ----------------------------------------------------------------------


def _addr_error(text: str, msg: str, at: str = "") -> _NetipError:
    if at:
        return _NetipError(f"ParseAddr({go_quote(text)}): {msg} (at {go_quote(at)})")
    return _NetipError(f"ParseAddr({go_quote(text)}): {msg}")


def _ipv4_fields(text: str, start: int, end: int) -> list[int]:
    """The four octets of ``text[start:end]``, Go's ``parseIPv4Fields``; errors quote ``text``."""
    s = text[start:end]
    fields: list[int] = []
    val = 0
    digits = 0
    for i, ch in enumerate(s):
        if "0" <= ch <= "9":
            if digits == 1 and val == 0:
                raise _addr_error(text, "IPv4 field has octet with leading zero")
            val = val * 10 + ord(ch) - 48
            digits += 1
            if val > 255:
                raise _addr_error(text, "IPv4 field has value >255")
        elif ch == ".":
            if i == 0 or i == len(s) - 1 or s[i - 1] == ".":
                raise _addr_error(text, "IPv4 field must have at least one digit", s[i:])
            if len(fields) == 3:
                raise _addr_error(text, "IPv4 address too long")
            fields.append(val)
            val = 0
            digits = 0
        else:
            raise _addr_error(text, "unexpected character", s[i:])
    if len(fields) < 3:
        raise _addr_error(text, "IPv4 address too short")
    fields.append(val)
    return fields


def _parse_ipv6(text: str) -> tuple[int, str]:
    """``(value, zone)`` of an IPv6 address, Go's ``parseIPv6``."""
    s = text
    zone = ""
    pct = s.find("%")
    if pct != -1:
        s, zone = s[:pct], s[pct + 1 :]
        if not zone:
            raise _addr_error(text, "zone must be a non-empty string")
    ip = [0] * 16
    ellipsis = -1
    if len(s) >= 2 and s[0] == ":" and s[1] == ":":
        ellipsis = 0
        s = s[2:]
        if not s:
            return 0, zone
    i = 0
    while i < 16:
        off = 0
        acc = 0
        while off < len(s) and s[off] in _HEX:
            acc = (acc << 4) + int(s[off], 16)
            if off > 3:
                raise _addr_error(text, "each group must have 4 or less digits", s)
            off += 1
        if off == 0:
            raise _addr_error(text, "each colon-separated field must have at least one digit", s)
        if off < len(s) and s[off] == ".":
            if ellipsis < 0 and i != 12:
                raise _addr_error(text, "embedded IPv4 address must replace the final 2 fields of the address", s)
            if i + 4 > 16:
                raise _addr_error(text, "too many hex fields to fit an embedded IPv4 at the end of the address", s)
            end = len(text) - (len(zone) + 1 if zone else 0)
            ip[i : i + 4] = _ipv4_fields(text, end - len(s), end)
            s = ""
            i += 4
            break
        ip[i] = acc >> 8
        ip[i + 1] = acc & 0xFF
        i += 2
        s = s[off:]
        if not s:
            break
        if s[0] != ":":
            raise _addr_error(text, "unexpected character, want colon", s)
        if len(s) == 1:
            raise _addr_error(text, "colon must be followed by more characters", s)
        s = s[1:]
        if s[0] == ":":
            if ellipsis >= 0:
                raise _addr_error(text, "multiple :: in address", s)
            ellipsis = i
            s = s[1:]
            if not s:
                break
    if s:
        raise _addr_error(text, "trailing garbage after address", s)
    if i < 16:
        if ellipsis < 0:
            raise _addr_error(text, "address string too short")
        n = 16 - i
        ip[ellipsis + n : 16] = ip[ellipsis:i]
        ip[ellipsis : ellipsis + n] = [0] * n
    elif ellipsis >= 0:
        raise _addr_error(text, "the :: must expand to at least one field of zeros")
    return int.from_bytes(bytes(ip), "big"), zone


def _parse_addr(text: str) -> IPAddress:
    """Go's ``netip.ParseAddr``: the first ``.``, ``:`` or ``%`` decides the family."""
    for ch in text:
        if ch == ".":
            return ipaddress.IPv4Address(bytes(_ipv4_fields(text, 0, len(text))))
        if ch == ":":
            value, zone = _parse_ipv6(text)
            return _ipv6(value, zone)
        if ch == "%":
            raise _addr_error(text, "missing IPv6 address")
    raise _addr_error(text, "unable to parse IP")


def _ipv6(value: int, zone: str) -> ipaddress.IPv6Address:
    addr = ipaddress.IPv6Address(value)
    if zone:
        # ipaddress builds scoped addresses only from text and refuses zones that netip
        # accepts ("a%b", "eth0/64"); set the scope it stores directly.
        addr._scope_id = zone  # noqa: SLF001
    return addr


def _parse_prefix(text: str) -> tuple[IPAddress, int]:
    """Go's ``netip.ParsePrefix``: ``(address as written, prefix bits)``; not masked."""

    def fail(msg: str) -> _NetipError:
        return _NetipError(f"netip.ParsePrefix({go_quote(text)}): {msg}")

    slash = text.rfind("/")
    if slash < 0:
        raise fail("no '/'")
    try:
        addr = _parse_addr(text[:slash])
    except _NetipError as err:
        raise fail(str(err)) from None
    if _zone(addr):
        raise fail("IPv6 zones cannot be present in a prefix")
    bits_text = text[slash + 1 :]
    bad_bits = fail("bad bits after slash: " + go_quote(bits_text))
    if len(bits_text) > 1 and not ("1" <= bits_text[0] <= "9"):
        raise bad_bits
    # strconv.Atoi: an optional sign (only reachable for one-character strings, which a
    # sign alone fails) and ASCII digits, within int64.
    if not bits_text or any(c not in _DIGITS for c in bits_text):
        raise bad_bits
    bits = int(bits_text)
    if bits > _INT64_MAX:
        raise bad_bits
    if bits > addr.max_prefixlen:
        raise fail("prefix length out of range")
    return addr, bits


def _zone(addr: IPAddress) -> str:
    return getattr(addr, "scope_id", None) or ""


def _key(addr: IPAddress) -> tuple[int, int, str]:
    """Sort key of ``netip.Addr.Compare``: family (bit length), address, zone."""
    return addr.max_prefixlen, int(addr), _zone(addr)


def _masked(addr: IPAddress, bits: int) -> tuple[int, int]:
    """First and last address (as integers) of the prefix ``addr/bits``."""
    host = (1 << (addr.max_prefixlen - bits)) - 1
    first = int(addr) & ~host
    return first, first | host


def _go_addr_string(addr: IPAddress) -> str:
    """``netip.Addr.String``: IPv4-mapped IPv6 in dotted form (``::ffff:10.0.0.1``)."""
    if addr.version == 6 and int(addr) >> 32 == 0xFFFF:
        text = "::ffff:" + str(ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF))
    else:
        text = str(_same_family(int(addr), addr))  # RFC 5952 for IPv6, as Go prints it
    zone = _zone(addr)
    return f"{text}%{zone}" if zone else text


def _same_family(value: int, like: IPAddress) -> IPAddress:
    return ipaddress.IPv4Address(value) if like.version == 4 else ipaddress.IPv6Address(value)


# -- public API ----------------------------------------------------------------------


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
    s = _go_trim(s)
    try:
        addr, bits = _parse_prefix(s)
    except _NetipError:
        pass
    else:
        first, last = _masked(addr, bits)
        return _same_family(first, addr), _same_family(last, addr)

    if ".." in s:
        lo_text, _, hi_text = s.partition("..")
    elif s.count("-") == 1:
        lo_text, _, hi_text = s.partition("-")
    else:
        try:
            one = _parse_addr(s)
        except _NetipError:
            raise AddressError(f"{go_quote(s)} is not an address, range or CIDR") from None
        return one, one
    try:
        lo = _parse_addr(_go_trim(lo_text))
    except _NetipError:
        raise AddressError(f"{go_quote(s)}: bad start address") from None
    try:
        hi = _parse_addr(_go_trim(hi_text))
    except _NetipError:
        raise AddressError(f"{go_quote(s)}: bad end address") from None
    if lo.version != hi.version or _key(hi) < _key(lo):
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
    keyed = [(_key(lo), _key(hi)) for lo, hi in ranges]
    cursor = _key(start)
    last = _key(end)
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
        return _parse_prefix(cidr)[1]
    except _NetipError:
        return None


def parse_address(text: str) -> tuple[int, int, str] | None:
    """``(family, value, text as Go prints it)`` of one address (``netip.ParseAddr`` after
    Go's ``strings.TrimSpace``), or None when it does not parse."""
    try:
        addr = _parse_addr(_go_trim(_text(text)))
    except _NetipError:
        return None
    return addr.version, int(addr), _go_addr_string(addr)


def in_cidr_block(cidr_block: str, family: int, value: int) -> bool | None:
    """Whether the address ``(family, value)`` lies in a Kube-OVN ``cidrBlock`` (one CIDR, or
    a dual-stack ``"<v4 CIDR>,<v6 CIDR>"``; each parsed like ``netip.ParsePrefix``); None when
    no CIDR of it parses (nothing can be said)."""
    parsed = False
    for part in _text(cidr_block).split(","):
        try:
            addr, bits = _parse_prefix(_go_trim(part))
        except _NetipError:
            continue
        parsed = True
        first, last = _masked(addr, bits)
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
        addr, bits = _parse_prefix(subnet_cidr)
    except _NetipError as err:
        return reasons.SUBNET_CIDR_INVALID, f"subnet cidrBlock {go_quote(subnet_cidr)}: {err}"
    first, last = _masked(addr, bits)
    network = _same_family(first, addr)
    prefix_text = f"{_go_addr_string(network)}/{bits}"
    subnet_lo, subnet_hi = _key(network), _key(_same_family(last, addr))

    pool_prefix = pool_spec.get("prefix")
    if not isinstance(pool_prefix, int) or isinstance(pool_prefix, bool):
        pool_prefix = 0
    if pool_prefix != bits:
        return reasons.POOL_PREFIX_MISMATCH, f"pool prefix /{pool_prefix} differs from subnet {prefix_text}"

    pool_gateway = _text(pool_spec.get("gateway"))
    gateway = _text(subnet_gateway)
    if gateway and pool_gateway != gateway:
        return (
            reasons.POOL_GATEWAY_MISMATCH,
            f"pool gateway {go_quote(pool_gateway)} differs from subnet gateway {go_quote(gateway)}",
        )

    excluded: list[AddressRange] = []
    for entry in exclude_ips or []:
        try:
            excluded.append(parse_address_range(_text(entry)))
        except AddressError as err:
            return reasons.SUBNET_EXCLUDE_IPS_INVALID, str(err)

    for entry in pool_spec.get("addresses") or []:
        entry = _text(entry)
        try:
            lo, hi = parse_address_range(entry)
        except AddressError as err:
            return reasons.POOL_ADDRESS_INVALID, str(err)
        if not (subnet_lo <= _key(lo) <= subnet_hi and subnet_lo <= _key(hi) <= subnet_hi):
            return reasons.POOL_OUTSIDE_SUBNET, f"pool address {go_quote(entry)} is outside {prefix_text}"
        if not covered(lo, hi, excluded):
            return (
                reasons.POOL_OVERLAPS_SUBNET,
                f"pool address {go_quote(entry)} is not in the subnet's excludeIps, "
                "so Kube-OVN may hand it to a pod",
            )
    return None


def _text(value: Any) -> str:
    """A string field read from an unstructured object: ``None`` is ``""``, others ``str()``."""
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


# -- pool address sets, pool overlaps and address conflicts ---------
#
# product-decisions.md §8: ``PoolOverlapsPool`` when another InClusterIPPool or
# GlobalInClusterIPPool overlaps the network's pool; ``AddressConflict`` when a Kube-OVN IP
# holds an address of the VM pool. The IPAM provider checks addresses only within one pool
# (cluster-api-ipam-provider-in-cluster #272, capmox #763), and Kube-OVN admits a pod with a
# fixed ``ovn.kubernetes.io/ip_address`` inside excludeIps (kube-ovn #2653).

Span = tuple[int, int, int]
"""``(family, first, last)``: family 4 or 6, first and last address as integers, inclusive.
Zones are not part of a span: two ranges holding the same address number overlap."""

IN_CLUSTER_IP_POOL = "InClusterIPPool"
GLOBAL_IN_CLUSTER_IP_POOL = "GlobalInClusterIPPool"
_KIND_ORDER = {IN_CLUSTER_IP_POOL: 0, GLOBAL_IN_CLUSTER_IP_POOL: 1}


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


def _spans_of(entries: Any) -> list[Span]:
    """Spans of a list of address entries; entries that do not parse are skipped."""
    out: list[Span] = []
    for entry in entries if isinstance(entries, list) else []:
        try:
            lo, hi = parse_address_range(_text(entry))
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
    spans = _merge(_spans_of(pool_spec.get("addresses")))
    holes = _spans_of(pool_spec.get("excludedAddresses"))
    gateway = _text(pool_spec.get("gateway")).strip()
    if gateway:
        try:
            gw = _parse_addr(gateway)
        except _NetipError:
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
    first = _go_addr_string(make(lo))
    return first if lo == hi else f"{first}-{_go_addr_string(make(hi))}"


def _contains(spans: Sequence[Span], fam: int, value: int) -> bool:
    i = bisect.bisect_right(spans, (fam, value, _MAX_INT)) - 1
    return i >= 0 and spans[i][0] == fam and spans[i][1] <= value <= spans[i][2]


_MAX_INT = (1 << 128) + 1


# -- the bucket index -------------------------------------------------------------------

BUCKET_BITS = 8
"""A bucket is 256 consecutive addresses: an IPv4 /24, an IPv6 /120."""
MAX_BUCKETS = 16
"""A pool whose addresses touch more buckets than this (4,096 addresses in one range) is
indexed under :data:`WIDE` only."""
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
    name = _text(meta.get("name"))
    ns = _text(meta.get("namespace"))
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
            created = _text((obj.get("metadata") or {}).get("creationTimestamp"))
            found[(kind, name)] = PoolOverlap(kind, name, tuple(shared), created)
    return sorted(found.values(), key=overlap_order)


def overlap_order(o: PoolOverlap) -> tuple[int, str, str]:
    """InClusterIPPools first, then by kind and name (the order messages name them in)."""
    return (_KIND_ORDER.get(o.kind, 9), o.kind, o.name)


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
        for text in _text(spec.get(field)).split(","):
            text = text.strip()
            if not text:
                continue
            try:
                addr = _parse_addr(text)
            except _NetipError:
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
        pod_name, pod_ns = _text(spec.get("podName")), _text(spec.get("namespace"))
        pod = f"{pod_ns}/{pod_name}" if pod_name else ""
        ip_name = _text((ip.get("metadata") or {}).get("name"))
        for addr in kube_ovn_ip_addresses(ip):
            key = (addr.version, int(addr))
            if _contains(spans, *key):
                out.append(AddressConflict(addr.version, int(addr), ip_name, _go_addr_string(addr), pod,
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
            addr = _parse_addr(_text(spec.get("address")).strip())
        except _NetipError:
            continue
        meta = a.get("metadata") or {}
        out.setdefault((addr.version, int(addr)), (_go_addr_string(addr), []))[1].append(
            f"{_text(meta.get('namespace'))}/{_text(meta.get('name'))}")
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
    for fam, lo, hi in _spans_of(entries):
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
