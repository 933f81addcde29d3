"""A port of Go's ``net/netip`` grammar and the bits of Go's formatting the messages use.

The reference parses with Go's ``net/netip`` (``ParseAddr``, ``ParsePrefix``), not with
``net.ParseIP``/``ParseCIDR``. Python's :mod:`ipaddress` accepts and refuses different strings,
so this module carries its own port of the grammar. Where they differ, Go wins:
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

Quoted values in messages follow Go's ``%q`` (:func:`go_quote`). Pure functions.
"""

from __future__ import annotations

import ipaddress
from typing import Union

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]


# Go's unicode.IsSpace, used by strings.TrimSpace.
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"


_DIGITS = "0123456789"


_HEX = "0123456789abcdefABCDEF"


_INT64_MAX = (1 << 63) - 1


class NetipError(ValueError):
    """A ``netip`` parse failure; ``str(err)`` is Go's error text."""


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


def go_trim(s: str) -> str:
    return s.strip(_GO_SPACE)


def _addr_error(text: str, msg: str, at: str = "") -> NetipError:
    if at:
        return NetipError(f"ParseAddr({go_quote(text)}): {msg} (at {go_quote(at)})")
    return NetipError(f"ParseAddr({go_quote(text)}): {msg}")


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


def parse_addr(text: str) -> IPAddress:
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


def parse_prefix(text: str) -> tuple[IPAddress, int]:
    """Go's ``netip.ParsePrefix``: ``(address as written, prefix bits)``; not masked."""

    def fail(msg: str) -> NetipError:
        return NetipError(f"netip.ParsePrefix({go_quote(text)}): {msg}")

    slash = text.rfind("/")
    if slash < 0:
        raise fail("no '/'")
    try:
        addr = parse_addr(text[:slash])
    except NetipError as err:
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


def addr_key(addr: IPAddress) -> tuple[int, int, str]:
    """Sort key of ``netip.Addr.Compare``: family (bit length), address, zone."""
    return addr.max_prefixlen, int(addr), _zone(addr)


def masked_value(addr: IPAddress, bits: int) -> tuple[int, int]:
    """First and last address (as integers) of the prefix ``addr/bits``."""
    host = (1 << (addr.max_prefixlen - bits)) - 1
    first = int(addr) & ~host
    return first, first | host


def addr_string(addr: IPAddress) -> str:
    """``netip.Addr.String``: IPv4-mapped IPv6 in dotted form (``::ffff:10.0.0.1``)."""
    if addr.version == 6 and int(addr) >> 32 == 0xFFFF:
        text = "::ffff:" + str(ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF))
    else:
        text = str(same_family(int(addr), addr))  # RFC 5952 for IPv6, as Go prints it
    zone = _zone(addr)
    return f"{text}%{zone}" if zone else text


def same_family(value: int, like: IPAddress) -> IPAddress:
    return ipaddress.IPv4Address(value) if like.version == 4 else ipaddress.IPv6Address(value)
