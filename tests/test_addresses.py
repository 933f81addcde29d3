"""Address ranges, coverage and the pool/subnet split, with the values of reference-behaviour.md §5.5-§5.6.1.

Expected Go texts (netip errors, %q quoting, prefix printing) were taken from Go 1.26's
``net/netip``, ``strconv.Quote`` and ``fmt`` on the same inputs.
"""

from __future__ import annotations

import ipaddress
from ipaddress import IPv4Address as V4
from ipaddress import IPv6Address as V6

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.addresses import (
    AddressError,
    check_pool_split,
    covered,
    go_quote,
    parse_address_range,
    prefix_bits,
)

# -- §5.6 address-range syntax -------------------------------------------------------------


@pytest.mark.parametrize(
    "text, first, last",
    [
        ("10.0.0.0/30", "10.0.0.0", "10.0.0.3"),
        ("10.0.0.7/30", "10.0.0.4", "10.0.0.7"),  # masked
        ("10.0.0.5", "10.0.0.5", "10.0.0.5"),
        ("10.0.0.10..10.0.0.20", "10.0.0.10", "10.0.0.20"),
        ("10.0.0.10-10.0.0.20", "10.0.0.10", "10.0.0.20"),
        ("fd00::1-fd00::ff", "fd00::1", "fd00::ff"),
        ("fd00::1..fd00::ff", "fd00::1", "fd00::ff"),
        ("fd00::7/126", "fd00::4", "fd00::7"),
        (" 10.0.0.1 .. 10.0.0.2 ", "10.0.0.1", "10.0.0.2"),
        ("\t10.0.0.1 - 10.0.0.2\n", "10.0.0.1", "10.0.0.2"),
        ("10.0.0.1-10.0.0.1", "10.0.0.1", "10.0.0.1"),  # one address as a range
        ("0.0.0.0/0", "0.0.0.0", "255.255.255.255"),
        ("::/0", "::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
        ("10.0.0.9/32", "10.0.0.9", "10.0.0.9"),
        ("::ffff:10.0.0.7/126", "::ffff:10.0.0.4", "::ffff:10.0.0.7"),
        ("\u00a010.0.0.1\u3000", "10.0.0.1", "10.0.0.1"),  # Go's TrimSpace set
    ],
)
def test_parse_address_range(text, first, last):
    assert parse_address_range(text) == (ipaddress.ip_address(first), ipaddress.ip_address(last))


def test_ipv6_range_returns_ipv6_addresses():
    lo, hi = parse_address_range("fd00::1-fd00::ff")
    assert isinstance(lo, V6) and isinstance(hi, V6)
    assert int(hi) - int(lo) == 0xFE


@pytest.mark.parametrize(
    "text, message",
    [
        ("", '"" is not an address, range or CIDR'),
        ("   ", '"" is not an address, range or CIDR'),  # the trimmed text is quoted
        ("nope", '"nope" is not an address, range or CIDR'),
        ("  nope  ", '"nope" is not an address, range or CIDR'),
        ("10.0.0.256", '"10.0.0.256" is not an address, range or CIDR'),
        ("10.0.0.1..x", '"10.0.0.1..x": bad end address'),
        ("x..10.0.0.1", '"x..10.0.0.1": bad start address'),
        ("-10.0.0.1", '"-10.0.0.1": bad start address'),
        ("10.0.0.1-", '"10.0.0.1-": bad end address'),
        (" 10.0.0.1 -  ", '"10.0.0.1 -": bad end address'),
        ("10.0.0.20-10.0.0.10", '"10.0.0.20-10.0.0.10" is not an ascending range of one family'),
        ("10.0.0.20..10.0.0.10", '"10.0.0.20..10.0.0.10" is not an ascending range of one family'),
        ("10.0.0.1-fd00::1", '"10.0.0.1-fd00::1" is not an ascending range of one family'),
        ("fd00::1-10.0.0.1", '"fd00::1-10.0.0.1" is not an ascending range of one family'),
        ("fd00::ff-fd00::1", '"fd00::ff-fd00::1" is not an ascending range of one family'),
        # IPv4-mapped IPv6 is IPv6 (netip Is4() is false), so it does not pair with IPv4.
        ("10.0.0.1-::ffff:10.0.0.5", '"10.0.0.1-::ffff:10.0.0.5" is not an ascending range of one family'),
        # Split at the first "..": the rest is the end.
        ("10.0.0.1..10.0.0.2..10.0.0.3", '"10.0.0.1..10.0.0.2..10.0.0.3": bad end address'),
        # ".." wins over "-".
        ("10.0.0.1..10.0.0.5-10.0.0.6", '"10.0.0.1..10.0.0.5-10.0.0.6": bad end address'),
        # Two "-": no split, so a single address, which fails.
        ("10.0.0.1-10.0.0.2-10.0.0.3", '"10.0.0.1-10.0.0.2-10.0.0.3" is not an address, range or CIDR'),
        ("fd00::1-fd00::2-", '"fd00::1-fd00::2-" is not an address, range or CIDR'),
        # Go %q quoting of the trimmed text.
        ('a"b\\c', '"a\\"b\\\\c" is not an address, range or CIDR'),
        ("10.0.0.1\t10.0.0.2", '"10.0.0.1\\t10.0.0.2" is not an address, range or CIDR'),
    ],
)
def test_parse_address_range_errors(text, message):
    with pytest.raises(AddressError) as err:
        parse_address_range(text)
    assert str(err.value) == message
    assert isinstance(err.value, ValueError)


# Go's netip, not Python's ipaddress, decides what parses (module docstring).


@pytest.mark.parametrize(
    "text",
    [
        "010.0.0.1",  # leading zero in an IPv4 field
        "10.0.0.0/024",  # leading zero in the prefix length: not a CIDR, nor an address
        "10.0.0.0/00",
        "10.0.0.0/+8",
        "10.0.0.0/255.255.255.0",  # netmask form (ipaddress accepts it)
        "10.0.0.0/0.0.0.255",  # hostmask form (ipaddress accepts it)
        "10.0.0.0/33",
        "fd00::/129",
        "1.2.3.4%eth0",  # zone on IPv4
        "fe80::1%",  # empty zone
        "\u0661.2.3.4",  # non-ASCII digit
        "\x1c10.0.0.1",  # \x1c is not Go whitespace (str.strip would remove it)
        "1:2:3:4:5:6:7:8::",  # "::" standing for nothing
        "fd00::00001",  # five hex digits
        "1:2:3:4:5:1.2.3.4",  # embedded IPv4 in the wrong place
    ],
)
def test_go_refuses(text):
    with pytest.raises(AddressError) as err:
        parse_address_range(text)
    assert str(err.value) == f"{go_quote(text.strip(' '))} is not an address, range or CIDR"


@pytest.mark.parametrize(
    "text, first, zone",
    [
        ("fe80::1%eth0", "fe80::1", "eth0"),
        ("fe80::1%a%b", "fe80::1", "a%b"),  # ipaddress refuses; netip takes the rest as zone
        # Not a CIDR (prefixes carry no zone), but an address whose zone is "eth0/64".
        ("fe80::%eth0/64", "fe80::", "eth0/64"),
    ],
)
def test_go_accepts_zones_on_single_addresses(text, first, zone):
    lo, hi = parse_address_range(text)
    assert lo == hi
    assert int(lo) == int(V6(first))
    assert lo.scope_id == zone


@pytest.mark.parametrize(
    "text, first, last",
    [
        ("1:2:3:4:5:6:7::", "1:2:3:4:5:6:7:0", "1:2:3:4:5:6:7:0"),
        ("::1.2.3.4", "::102:304", "::102:304"),
        ("::ffff:1.2.3.4", "::ffff:102:304", "::ffff:102:304"),
        ("FD00::A", "fd00::a", "fd00::a"),
        ("fd00::0001-fd00::0002", "fd00::1", "fd00::2"),
    ],
)
def test_go_accepts(text, first, last):
    assert parse_address_range(text) == (V6(first), V6(last))


def test_zones_order_like_netip_compare():
    # Compare: address first, then zone as a string; "fd00::1%b" is after "fd00::1%a".
    assert parse_address_range("fd00::1%a-fd00::1%b")[1].scope_id == "b"
    with pytest.raises(AddressError, match="ascending"):
        parse_address_range("fd00::1%b-fd00::1%a")
    with pytest.raises(AddressError, match="ascending"):
        parse_address_range("fd00::1%eth0-fd00::1")


@pytest.mark.parametrize(
    "text, quoted",
    [
        ('a"b\\c', '"a\\"b\\\\c"'),
        ("tab\there", '"tab\\there"'),
        ("\x00\x7f", '"\\x00\\x7f"'),
        ("\u00e9", '"\u00e9"'),
        ("\u2028", '"\\u2028"'),
        ("\U0001f600", '"\U0001f600"'),
        ("\u00a0", '"\\u00a0"'),
        ("\u200b", '"\\u200b"'),
        ("\a\b\f\n\r\v", '"\\a\\b\\f\\n\\r\\v"'),
        ("\U000e0001", '"\\U000e0001"'),
    ],
)
def test_go_quote(text, quoted):
    assert go_quote(text) == quoted


# -- §5.6 coverage -------------------------------------------------------------------------


def r(text):
    return parse_address_range(text)


def test_exact_range_is_covered():
    assert covered(*r("10.0.0.100-10.0.0.199"), [r("10.0.0.100-10.0.0.199")])


def test_adjacent_ranges_in_any_order_cover():
    ranges = [r("10.0.0.150..10.0.0.250"), r("10.0.0.90..10.0.0.149")]
    assert covered(*r("10.0.0.100-10.0.0.199"), ranges)
    assert covered(*r("10.0.0.100-10.0.0.199"), list(reversed(ranges)))


def test_long_chain_in_reverse_order_covers():
    ranges = [r(f"10.0.0.{i}") for i in range(100, 200)]
    assert covered(*r("10.0.0.100-10.0.0.199"), list(reversed(ranges)))
    assert not covered(*r("10.0.0.100-10.0.0.200"), list(reversed(ranges)))


def test_one_address_gap_is_not_covered():
    assert not covered(*r("10.0.0.100-10.0.0.199"), [r("10.0.0.100..10.0.0.150"), r("10.0.0.152..10.0.0.199")])


def test_nothing_covers_nothing():
    assert not covered(*r("10.0.0.100-10.0.0.199"), [])


def test_range_starting_before_any_exclude_is_not_covered():
    # No range contains the start: no progress.
    assert not covered(*r("10.0.0.99-10.0.0.199"), [r("10.0.0.100-10.0.0.255")])


def test_overlapping_ranges_cover():
    ranges = [r("10.0.0.128/26"), r("10.0.0.0-10.0.0.200"), r("10.0.0.100/25"), r("10.0.0.150/25")]
    assert covered(*r("10.0.0.0/24"), ranges)
    # 10.0.0.100/25 masks to .0-.127 and /26 to .128-.191: .201-.255 stay uncovered.
    assert not covered(*r("10.0.0.0/24"), [r("10.0.0.0-10.0.0.200"), r("10.0.0.100/25"), r("10.0.0.128/26")])


def test_range_ending_at_the_last_address_is_covered_without_overflow():
    assert covered(*r("255.255.255.250-255.255.255.255"), [r("255.255.255.0/24")])
    assert covered(*r("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff0-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), [r("::/0")])


def test_no_wrap_past_the_last_address():
    # The end sorts after the family's last address (its zone), so the walk would need an
    # address after ffff:...:ffff; there is none, and it must not wrap round to "::".
    last = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
    start, _ = r(f"{last[:-1]}e")
    end, _ = r(f"{last}%eth0")
    assert not covered(start, end, [r("::/1"), r("8000::/1")])
    start4, _ = r("255.255.255.254")
    assert not covered(start4, V6(0), [r("255.255.255.0/24"), r("::/0")])


def test_other_family_never_covers():
    assert not covered(*r("::ffff:10.0.0.1"), [r("10.0.0.0/24")])
    assert not covered(*r("10.0.0.1"), [r("::ffff:10.0.0.0/120")])


def test_ipv6_chain():
    assert covered(*r("fd00::1-fd00::ff"), [r("fd00::80/121"), r("fd00::..fd00::7f")])
    assert not covered(*r("fd00::1-fd00::100"), [r("fd00::80/121"), r("fd00::..fd00::7f")])


def test_zone_is_the_last_tie_break():
    # netip: fd00::ff%eth0 sorts after fd00::ff, the last address of fd00::/120.
    assert not covered(*r("fd00::ff%eth0"), [r("fd00::/120")])
    assert covered(*r("fd00::fe%eth0"), [r("fd00::/120")])


BASE = int(V4("10.0.0.0"))
offsets = st.integers(min_value=0, max_value=63)  # a /26
pairs = st.tuples(offsets, offsets).map(sorted)


@settings(max_examples=500, deadline=None)
@given(target=pairs, ranges=st.lists(pairs, max_size=8))
def test_coverage_agrees_with_a_set_check(target, ranges):
    union = set()
    for lo, hi in ranges:
        union.update(range(lo, hi + 1))
    expected = set(range(target[0], target[1] + 1)) <= union
    as_addr = [(V4(BASE + lo), V4(BASE + hi)) for lo, hi in ranges]
    assert covered(V4(BASE + target[0]), V4(BASE + target[1]), as_addr) is expected


TOP6 = (1 << 128) - 64


@settings(max_examples=300, deadline=None)
@given(target=pairs, ranges=st.lists(pairs, max_size=8))
def test_coverage_agrees_with_a_set_check_at_the_top_of_ipv6(target, ranges):
    union = set()
    for lo, hi in ranges:
        union.update(range(lo, hi + 1))
    expected = set(range(target[0], target[1] + 1)) <= union
    as_addr = [(V6(TOP6 + lo), V6(TOP6 + hi)) for lo, hi in ranges]
    assert covered(V6(TOP6 + target[0]), V6(TOP6 + target[1]), as_addr) is expected


@settings(max_examples=300, deadline=None)
@given(a=st.integers(0, 2**32 - 1), bits=st.integers(0, 32))
def test_cidr_range_matches_ipaddress(a, bits):
    net = ipaddress.ip_network(f"{V4(a)}/{bits}", strict=False)
    assert parse_address_range(f"{V4(a)}/{bits}") == (net.network_address, net.broadcast_address)


# -- §5.5 prefix bits ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "cidr, bits",
    [
        ("10.208.64.0/24", 24),
        ("10.208.64.7/24", 24),  # not masked first; the bits are the same
        ("fd00::/64", 64),
        ("0.0.0.0/0", 0),
        ("::ffff:10.0.0.0/120", 120),
        ("10.0.0.0/33", None),
        ("10.0.0.0/024", None),
        ("10.0.0.1", None),  # no "/"
        (" 10.0.0.0/24", None),  # not trimmed
        ("10.208.64.0/24,fd00::/64", None),  # dual-stack: the reference reads one CIDR
        ("", None),
    ],
)
def test_prefix_bits(cidr, bits):
    assert prefix_bits(cidr) == bits


# -- §5.6.1 checkPoolSplit ----------------------------------------------------------------

CIDR = "10.208.64.0/24"
GW = "10.208.64.1"
EXCL = ["10.208.64.100..10.208.64.199"]


def pool(*addresses, prefix=24, gateway=GW):
    return {"addresses": list(addresses), "prefix": prefix, "gateway": gateway}


def test_valid_split():
    assert check_pool_split(CIDR, GW, EXCL, pool("10.208.64.100-10.208.64.199")) is None
    spec = pool("10.208.64.100", "10.208.64.128/26", "10.208.64.192..10.208.64.199")
    assert check_pool_split(CIDR, GW, EXCL, spec) is None


@pytest.mark.parametrize(
    "spec, excl, reason, message",
    [
        (
            pool("10.208.64.100-10.208.64.200"),
            EXCL,
            "PoolOverlapsSubnet",
            'pool address "10.208.64.100-10.208.64.200" is not in the subnet\'s excludeIps, '
            "so Kube-OVN may hand it to a pod",
        ),
        (
            pool("10.208.65.10-10.208.65.20"),
            EXCL,
            "PoolOutsideSubnet",
            'pool address "10.208.65.10-10.208.65.20" is outside 10.208.64.0/24',
        ),
        (
            pool("10.208.64.250-10.208.65.5"),  # end outside
            EXCL,
            "PoolOutsideSubnet",
            'pool address "10.208.64.250-10.208.65.5" is outside 10.208.64.0/24',
        ),
        (
            pool("10.208.64.100", gateway="10.208.64.254"),
            EXCL,
            "PoolGatewayMismatch",
            'pool gateway "10.208.64.254" differs from subnet gateway "10.208.64.1"',
        ),
        (
            pool("10.208.64.100", prefix=25),
            EXCL,
            "PoolPrefixMismatch",
            "pool prefix /25 differs from subnet 10.208.64.0/24",
        ),
        (pool("ten"), EXCL, "PoolAddressInvalid", '"ten" is not an address, range or CIDR'),
        (pool(" ten "), EXCL, "PoolAddressInvalid", '"ten" is not an address, range or CIDR'),
        (pool("10.208.64.100"), ["10.208.64.1..x"], "SubnetExcludeIPsInvalid", '"10.208.64.1..x": bad end address'),
        (
            pool("10.208.64.100"),
            ["10.208.64.199-10.208.64.100"],
            "SubnetExcludeIPsInvalid",
            '"10.208.64.199-10.208.64.100" is not an ascending range of one family',
        ),
        (
            pool("fd00::1"),
            EXCL,
            "PoolOutsideSubnet",
            'pool address "fd00::1" is outside 10.208.64.0/24',
        ),
        (
            pool("::ffff:10.208.64.150"),  # IPv6 even though it maps an IPv4 address
            EXCL,
            "PoolOutsideSubnet",
            'pool address "::ffff:10.208.64.150" is outside 10.208.64.0/24',
        ),
    ],
)
def test_split_failures(spec, excl, reason, message):
    assert check_pool_split(CIDR, GW, excl, spec) == (reason, message)


@pytest.mark.parametrize(
    "cidr, tail",
    [
        ("10.0.0.0/33", "prefix length out of range"),
        ("10.0.0.0/024", 'bad bits after slash: "024"'),
        ("10.0.0.0/", 'bad bits after slash: ""'),
        ("10.0.0.0/+8", 'bad bits after slash: "+8"'),
        ("10.0.0.0/255.255.255.0", 'bad bits after slash: "255.255.255.0"'),
        ("10.0.0.0/99999999999999999999", 'bad bits after slash: "99999999999999999999"'),
        ("garbage", "no '/'"),
        ("", "no '/'"),
        ("10.0.0.1", "no '/'"),
        ("fd00::/129", "prefix length out of range"),
        ("fe80::%eth0/64", "IPv6 zones cannot be present in a prefix"),
        ("1.2.3.4/24/24", 'ParseAddr("1.2.3.4/24"): unexpected character (at "/24")'),
        ("10.208.64.0/24,fd00::/64", 'ParseAddr("10.208.64.0/24,fd00::"): unexpected character (at "/24,fd00::")'),
        (" 10.0.0.0/24", 'ParseAddr(" 10.0.0.0"): unexpected character (at " 10.0.0.0")'),
        # Every netip.ParseAddr error text, reached through the address part of the CIDR.
        ("10.0.0/24", 'ParseAddr("10.0.0"): IPv4 address too short'),
        ("10.0.0.0.0/24", 'ParseAddr("10.0.0.0.0"): IPv4 address too long'),
        ("010.0.0.0/24", 'ParseAddr("010.0.0.0"): IPv4 field has octet with leading zero'),
        ("10.0.0.256/24", 'ParseAddr("10.0.0.256"): IPv4 field has value >255'),
        ("1..2.3/24", 'ParseAddr("1..2.3"): IPv4 field must have at least one digit (at ".2.3")'),
        ("ten/24", 'ParseAddr("ten"): unable to parse IP'),
        ("%x/24", 'ParseAddr("%x"): missing IPv6 address'),
        ("fe80::1%/64", 'ParseAddr("fe80::1%"): zone must be a non-empty string'),
        ("fd00::00001/64", 'ParseAddr("fd00::00001"): each group must have 4 or less digits (at "00001")'),
        (
            "1:2:3:4:5:1.2.3.4/64",
            'ParseAddr("1:2:3:4:5:1.2.3.4"): '
            'embedded IPv4 address must replace the final 2 fields of the address (at "1.2.3.4")',
        ),
        (
            "1::2:3:4:5:6:7:1.2.3.4/64",
            'ParseAddr("1::2:3:4:5:6:7:1.2.3.4"): '
            'too many hex fields to fit an embedded IPv4 at the end of the address (at "1.2.3.4")',
        ),
        ("fd00:::1/64", 'ParseAddr("fd00:::1"): each colon-separated field must have at least one digit (at ":1")'),
        ("fd00::1::2/64", 'ParseAddr("fd00::1::2"): multiple :: in address (at ":2")'),
        ("fd00:/64", 'ParseAddr("fd00:"): colon must be followed by more characters (at ":")'),
        ("fd00:1/64", 'ParseAddr("fd00:1"): address string too short'),
        ("fd00:1x/64", 'ParseAddr("fd00:1x"): unexpected character, want colon (at "x")'),
        ("1:2:3:4:5:6:7:8::/64", 'ParseAddr("1:2:3:4:5:6:7:8::"): the :: must expand to at least one field of zeros'),
        ("::ffff:01.2.3.4/120", 'ParseAddr("::ffff:01.2.3.4"): IPv4 field has octet with leading zero'),
    ],
)
def test_subnet_cidr_invalid(cidr, tail):
    assert check_pool_split(cidr, GW, EXCL, pool("10.208.64.100")) == (
        "SubnetCIDRInvalid",
        f"subnet cidrBlock {go_quote(cidr)}: netip.ParsePrefix({go_quote(cidr)}): {tail}",
    )


def test_dual_stack_cidr_block_is_invalid_like_the_reference():
    cidr = "10.208.64.0/24,fd00::/64"
    assert check_pool_split(cidr, GW, EXCL, pool("10.208.64.100")) == (
        "SubnetCIDRInvalid",
        'subnet cidrBlock "10.208.64.0/24,fd00::/64": netip.ParsePrefix("10.208.64.0/24,fd00::/64"): '
        'ParseAddr("10.208.64.0/24,fd00::"): unexpected character (at "/24,fd00::")',
    )


def test_unmasked_cidr_is_masked_in_messages_and_range():
    assert check_pool_split("10.208.64.77/24", GW, EXCL, pool("10.208.64.100", prefix=25)) == (
        "PoolPrefixMismatch",
        "pool prefix /25 differs from subnet 10.208.64.0/24",
    )
    assert check_pool_split("10.208.64.77/24", GW, EXCL, pool("10.208.64.100")) is None


def test_ipv6_subnet():
    excl = ["fd00::100..fd00::1ff"]
    spec = {"addresses": ["fd00::100-fd00::1ff"], "prefix": 64, "gateway": "fd00::1"}
    assert check_pool_split("fd00::/64", "fd00::1", excl, spec) is None
    spec["addresses"] = ["fd00:0:0:1::5"]
    assert check_pool_split("fd00::5/64", "fd00::1", excl, spec) == (
        "PoolOutsideSubnet",
        'pool address "fd00:0:0:1::5" is outside fd00::/64',
    )
    spec["prefix"] = 48
    assert check_pool_split("fd00:0:0:0:1::/128", "", excl, spec) == (
        "PoolPrefixMismatch",
        "pool prefix /48 differs from subnet fd00::1:0:0:0/128",  # Go's RFC 5952 form
    )


def test_ipv4_mapped_prefix_printed_like_go():
    assert check_pool_split("::ffff:10.0.0.7/104", "", [], {"addresses": [], "prefix": 24}) == (
        "PoolPrefixMismatch",
        "pool prefix /24 differs from subnet ::ffff:10.0.0.0/104",
    )


def test_first_failure_wins():
    bad_everything = pool("ten", prefix=25, gateway="10.208.64.254")
    assert check_pool_split("nope", GW, ["x"], bad_everything)[0] == "SubnetCIDRInvalid"
    assert check_pool_split(CIDR, GW, ["x"], bad_everything)[0] == "PoolPrefixMismatch"
    assert check_pool_split(CIDR, GW, ["x"], pool("ten", gateway="10.208.64.254"))[0] == "PoolGatewayMismatch"
    # All excludeIps are parsed before any pool address, even a later bad one.
    assert check_pool_split(CIDR, GW, EXCL + ["x"], pool("ten")) == (
        "SubnetExcludeIPsInvalid",
        '"x" is not an address, range or CIDR',
    )
    # Pool addresses in order: the first failing entry decides.
    assert check_pool_split(CIDR, GW, EXCL, pool("10.208.64.100", "10.208.64.5", "ten"))[0] == "PoolOverlapsSubnet"
    assert check_pool_split(CIDR, GW, EXCL, pool("10.208.64.100", "ten", "10.208.64.5"))[0] == "PoolAddressInvalid"
    assert check_pool_split(CIDR, GW, EXCL, pool("10.208.64.100", "10.9.0.1", "ten"))[0] == "PoolOutsideSubnet"


def test_gateway_rules():
    # An empty subnet gateway skips the check; None counts as empty.
    assert check_pool_split(CIDR, "", EXCL, pool("10.208.64.100", gateway="anything")) is None
    assert check_pool_split(CIDR, None, EXCL, pool("10.208.64.100", gateway="anything")) is None
    # Plain string comparison: no parsing, no trimming.
    assert check_pool_split(CIDR, GW, EXCL, pool("10.208.64.100", gateway=" 10.208.64.1"))[0] == "PoolGatewayMismatch"
    spec = {"addresses": ["10.208.64.100"], "prefix": 24}  # no gateway in the pool
    assert check_pool_split(CIDR, GW, EXCL, spec) == (
        "PoolGatewayMismatch",
        'pool gateway "" differs from subnet gateway "10.208.64.1"',
    )


def test_missing_fields_take_go_zero_values():
    assert check_pool_split(CIDR, GW, EXCL, {"addresses": ["10.208.64.100"], "gateway": GW}) == (
        "PoolPrefixMismatch",
        "pool prefix /0 differs from subnet 10.208.64.0/24",
    )
    assert check_pool_split(CIDR, GW, EXCL, {"prefix": True, "gateway": GW})[0] == "PoolPrefixMismatch"
    # No addresses: nothing to check. No excludeIps: every address overlaps.
    assert check_pool_split(CIDR, GW, EXCL, {"prefix": 24, "gateway": GW}) is None
    assert check_pool_split(CIDR, GW, None, pool("10.208.64.100"))[0] == "PoolOverlapsSubnet"


def test_pool_entry_is_quoted_as_written():
    assert check_pool_split(CIDR, GW, EXCL, pool(" 10.208.64.5 ")) == (
        "PoolOverlapsSubnet",
        'pool address " 10.208.64.5 " is not in the subnet\'s excludeIps, so Kube-OVN may hand it to a pod',
    )


def test_gateway_network_and_broadcast_inside_the_pool_are_not_checked():
    excl = ["10.208.64.0/24"]
    assert check_pool_split(CIDR, GW, excl, pool("10.208.64.0/24")) is None


def test_excludes_chain_in_any_order_for_the_split():
    excl = ["10.208.64.150..10.208.64.199", "10.208.64.100-10.208.64.149"]
    assert check_pool_split(CIDR, GW, excl, pool("10.208.64.100-10.208.64.199")) is None
