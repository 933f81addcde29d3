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

from controller.rules.pool_cidrs import POOL_CIDRS_MAX, pool_cidrs
from controller.rules.ranges import AddressError, check_pool_split, covered, parse_address_range, prefix_bits
from controller.rules.netip import go_quote

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


# -- the pool as CIDRs for admission (issue 15, item 6; docs/admission.md) ----------------------


@pytest.mark.parametrize("addresses, expected", [
    (["10.0.0.10-10.0.0.50"], "10.0.0.10/31,10.0.0.12/30,10.0.0.16/28,10.0.0.32/28,10.0.0.48/31,10.0.0.50/32"),
    (["10.0.0.0/24"], "10.0.0.0/24"),
    (["10.0.0.7/30"], "10.0.0.4/30"),                                  # a CIDR is masked (§5.6)
    (["10.0.0.4", "10.0.0.5-10.0.0.7"], "10.0.0.4/30"),                # adjacent entries merge
    (["10.0.0.1..10.0.0.1"], "10.0.0.1/32"),
    (["fd00::10-fd00::1f", "10.0.0.1"], "10.0.0.1/32,fd00::10/124"),   # IPv4 first
    (["fe80::1%eth0"], "fe80::1/128"),                                 # a prefix has no zone
    (["::fffe:ffff:ffff-::1:0:0:1"], "::fffe:ffff:ffff/128,::1:0:0:0/127"),  # ::ffff:0:0/96 left out
    (["::ffff:10.0.0.1"], None),                                       # CEL's cidr() refuses these
    (["garbage", "10.0.0.9-10.0.0.1"], None),                          # entries that do not parse
    ([], None),
])
def test_pool_cidrs(addresses, expected):
    assert pool_cidrs({"addresses": addresses}) == expected


def test_pool_cidrs_without_addresses_or_with_a_non_list():
    assert pool_cidrs({}) is None
    assert pool_cidrs({"addresses": "10.0.0.1"}) is None


def test_pool_cidrs_beyond_the_bound_are_left_off():
    # every other address: one /32 each, no merging
    many = [f"10.{i // 250}.{i % 250}.1" for i in range(POOL_CIDRS_MAX + 1)]
    assert pool_cidrs({"addresses": many[:POOL_CIDRS_MAX]}).count(",") == POOL_CIDRS_MAX - 1
    assert pool_cidrs({"addresses": many}) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 4096)), min_size=1, max_size=6))
def test_pool_cidrs_cover_exactly_the_pool(ranges):
    """Every address of the pool is in one of the CIDRs and no other address is."""
    entries, inside = [], set()
    for lo, n in ranges:
        hi = min(lo + n, 2**32 - 1)
        entries.append(f"{V4(lo)}-{V4(hi)}")
        inside.add((lo, hi))
    nets = [ipaddress.ip_network(c) for c in pool_cidrs({"addresses": entries}).split(",")]
    total = sum(n.num_addresses for n in nets)
    union = sorted(inside)
    merged: list[list[int]] = []
    for lo, hi in union:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    assert total == sum(hi - lo + 1 for lo, hi in merged)
    for lo, hi in merged:
        for a in (lo, hi):
            assert any(V4(a) in n for n in nets)
    assert all(any(lo <= int(n.network_address) and int(n.broadcast_address) <= hi for lo, hi in merged) for n in nets)


# -- issue 15, item 3: pool address sets, overlaps, the bucket index, address conflicts ------

from controller.rules.pool_conflicts import (
    AddressConflict,
    address_conflicts_message,
    find_address_conflicts,
    find_pool_overlaps,
    pool_overlaps_message,
)
from controller.rules.spans import MAX_BUCKETS, WIDE, pool_buckets, pool_spans, shared_spans, span_text


def v4(a: str) -> int:
    return int(V4(a))


def gpool(name, addresses, ns=None, excluded=(), gateway=None):
    meta = {"name": name}
    if ns:
        meta["namespace"] = ns
    spec = {"addresses": list(addresses), "prefix": 24}
    if excluded:
        spec["excludedAddresses"] = list(excluded)
    if gateway:
        spec["gateway"] = gateway
    return {"metadata": meta, "spec": spec}


def test_pool_set_is_addresses_minus_excluded_minus_gateway():
    # capmox-and-ipam.md: the provider hands out addresses minus excludedAddresses, never the gateway.
    spans = pool_spans({"addresses": ["10.0.0.0/28", "10.0.0.16-10.0.0.20", "10.0.0.30"],
                        "excludedAddresses": ["10.0.0.5..10.0.0.6", "10.0.0.18"], "gateway": "10.0.0.1"})
    assert [span_text(s) for s in spans] == [
        "10.0.0.0", "10.0.0.2-10.0.0.4", "10.0.0.7-10.0.0.17", "10.0.0.19-10.0.0.20", "10.0.0.30"]


def test_pool_set_skips_garbage_and_never_raises():
    assert pool_spans({"addresses": ["not-an-ip", 7, None, "10.0.0.9"], "excludedAddresses": ["x"],
                       "gateway": "nonsense"}) == ((4, v4("10.0.0.9"), v4("10.0.0.9")),)
    for bad in (None, "spec", [], {"addresses": "10.0.0.1"}, {"addresses": None}):
        assert pool_spans(bad) == ()


def test_pool_set_keeps_families_apart():
    spans = pool_spans({"addresses": ["fd00::1-fd00::3", "10.0.0.1"], "excludedAddresses": ["fd00::2"]})
    assert [span_text(s) for s in spans] == ["10.0.0.1", "fd00::1", "fd00::3"]


def test_shared_spans():
    a = pool_spans({"addresses": ["10.0.0.10-10.0.0.20", "10.0.0.40-10.0.0.50"]})
    b = pool_spans({"addresses": ["10.0.0.15-10.0.0.45"]})
    assert [span_text(s) for s in shared_spans(a, b)] == ["10.0.0.15-10.0.0.20", "10.0.0.40-10.0.0.45"]
    assert shared_spans(a, pool_spans({"addresses": ["10.0.0.21-10.0.0.39"]})) == []
    # Same numbers, other family: no overlap.
    assert shared_spans(pool_spans({"addresses": ["::10"]}), pool_spans({"addresses": ["0.0.0.16"]})) == []


def test_overlaps_name_kind_and_the_first_shared_range_in_a_stable_order():
    own = pool_spans({"addresses": ["10.0.0.10-10.0.0.50"]})
    others = [
        ("GlobalInClusterIPPool", gpool("shared", ["10.0.0.45"])),
        ("InClusterIPPool", gpool("b", ["10.0.0.40-10.0.0.60", "10.0.0.12"], ns="tenant-b")),
        ("InClusterIPPool", gpool("p", ["10.0.0.10-10.0.0.50"], ns="tenant-a")),  # the network's own
        ("InClusterIPPool", gpool("far", ["10.0.1.10-10.0.1.50"], ns="tenant-a")),
        ("InClusterIPPool", gpool("a", ["10.0.0.50"], ns="tenant-c")),
        ("InClusterIPPool", gpool("b", ["10.0.0.40-10.0.0.60", "10.0.0.12"], ns="tenant-b")),  # listed twice
        ("GlobalInClusterIPPool", gpool("p", ["10.0.0.10"])),  # same name as ours, other kind
    ]
    found = find_pool_overlaps(("InClusterIPPool", "tenant-a/p"), own, others)
    assert [str(o) for o in found] == [
        "InClusterIPPool tenant-b/b (10.0.0.12 and 1 more range(s))",
        "InClusterIPPool tenant-c/a (10.0.0.50)",
        "GlobalInClusterIPPool p (10.0.0.10)",
        "GlobalInClusterIPPool shared (10.0.0.45)",
    ]


def test_excluded_addresses_end_an_overlap():
    own = pool_spans({"addresses": ["10.0.0.10-10.0.0.50"]})
    other = gpool("o", ["10.0.0.40-10.0.0.60"], ns="t", excluded=["10.0.0.40-10.0.0.50"])
    assert find_pool_overlaps(("InClusterIPPool", "t/p"), own, [("InClusterIPPool", other)]) == []


def test_pool_overlaps_message_first_five_then_a_count():
    own = pool_spans({"addresses": ["10.0.0.0/24"]})
    others = [("InClusterIPPool", gpool(f"o{i}", [f"10.0.0.{i}"], ns="t")) for i in range(2, 9)]
    found = find_pool_overlaps(("InClusterIPPool", "t/p"), own, others)
    assert pool_overlaps_message("p", found) == (
        'addresses of InClusterIPPool "p" are also in InClusterIPPool t/o2 (10.0.0.2), InClusterIPPool t/o3 '
        "(10.0.0.3), InClusterIPPool t/o4 (10.0.0.4), InClusterIPPool t/o5 (10.0.0.5), InClusterIPPool t/o6 "
        "(10.0.0.6) and 2 more; the IPAM provider checks addresses only within one pool, so two machines can be "
        "given the same address: take the shared addresses out of one of the pools (spec.addresses or "
        "spec.excludedAddresses)")


def test_buckets():
    assert pool_buckets(pool_spans({"addresses": ["10.10.1.5-10.10.2.3"]})) == ["4/a0a01", "4/a0a02"]
    assert pool_buckets(pool_spans({"addresses": ["fd00::10-fd00::ff"]})) == ["6/fd00" + "0" * 26]  # fd00::/120
    assert pool_buckets(pool_spans({"addresses": ["10.0.0.0/20"]})) == [f"4/{0x0a0000 + i:x}" for i in range(16)]
    assert pool_buckets(pool_spans({"addresses": ["10.0.0.0/19"]})) == [WIDE]
    assert pool_buckets(pool_spans({"addresses": ["0.0.0.0/0"]})) == [WIDE]
    # Many small ranges: the total counts.
    many = [f"10.0.{i}.1" for i in range(MAX_BUCKETS + 1)]
    assert pool_buckets(pool_spans({"addresses": many})) == [WIDE]
    assert pool_buckets(()) == []


_octet = st.integers(0, 40)


@st.composite
def _pool_specs(draw):
    """Small IPv4 pools in 10.0.0.0/18 (so buckets are shared and some ranges are wide)."""
    entries = []
    for _ in range(draw(st.integers(0, 3))):
        lo = draw(st.integers(0, 16_000))
        size = draw(st.sampled_from([0, 1, 5, 200, 300, 5000]))
        entries.append(f"{V4(v4('10.0.0.0') + lo)}-{V4(v4('10.0.0.0') + min(lo + size, 16_383))}")
    excluded = [f"{V4(v4('10.0.0.0') + draw(st.integers(0, 16_383)))}" for _ in range(draw(st.integers(0, 2)))]
    return {"addresses": entries, "excludedAddresses": excluded}


@settings(max_examples=150, deadline=None)
@given(st.lists(_pool_specs(), min_size=1, max_size=12), st.data())
def test_index_finds_exactly_the_pairwise_overlaps(specs, data):
    """The bucket index (candidates from shared buckets and wide pools, then the exact check)
    agrees with a brute-force pairwise check of address sets."""
    from controller.watch.indexes import POOL_INDEXERS, overlap_candidates
    from informers import ThreadSafeStore

    pools, globals_ = ThreadSafeStore(POOL_INDEXERS), ThreadSafeStore(POOL_INDEXERS)
    objs = []
    for i, spec in enumerate(specs):
        glob = data.draw(st.booleans())
        obj = {"metadata": {"name": f"p{i}", **({} if glob else {"namespace": "t"})}, "spec": spec}
        (globals_ if glob else pools).add(obj)
        objs.append(("GlobalInClusterIPPool" if glob else "InClusterIPPool", obj))

    def addresses(spec):
        return {(f, a) for f, lo, hi in pool_spans(spec) for a in range(lo, hi + 1)}

    for kind, obj in objs:
        if kind != "InClusterIPPool":
            continue
        own = pool_spans(obj["spec"])
        name = f"t/{obj['metadata']['name']}"
        found = find_pool_overlaps((kind, name), own, overlap_candidates(pools, globals_, own))
        mine = addresses(obj["spec"])
        expected = sorted(
            (k, o["metadata"]["name"]) for k, o in objs
            if (k, o["metadata"]["name"]) != (kind, obj["metadata"]["name"]) and mine & addresses(o["spec"]))
        assert sorted((o.kind, o.name.rpartition("/")[2]) for o in found) == expected


def kube_ovn_ip(name, subnet="sub-a", pod=None, ns="tenant-a", **addresses):
    spec = {"subnet": subnet, "namespace": ns, "podName": pod if pod is not None else name.split(".")[0]}
    spec.update(addresses)
    return {"metadata": {"name": name}, "spec": spec}


def capi_address(name, address, ns="tenant-a"):
    return {"metadata": {"name": name, "namespace": ns},
            "spec": {"address": address, "poolRef": {"kind": "InClusterIPPool", "name": "p"}}}


def test_address_conflicts_name_the_pod_the_ip_and_the_ipaddress():
    own = pool_spans({"addresses": ["10.0.0.10-10.0.0.50", "fd00::10-fd00::20"], "gateway": "10.0.0.1"})
    ips = [
        kube_ovn_ip("web-2.tenant-a", v4IpAddress="10.0.0.30"),
        kube_ovn_ip("web-1.tenant-a", v4IpAddress="10.0.0.20", v6IpAddress="fd00::15", ipAddress="10.0.0.20,fd00::15"),
        kube_ovn_ip("outside.tenant-a", v4IpAddress="10.0.0.60"),
        kube_ovn_ip("garbage.tenant-a", v4IpAddress="10.0.0.x", ipAddress=""),
        kube_ovn_ip("leaked", pod="", v4IpAddress="10.0.0.11"),
    ]
    found = find_address_conflicts(own, ips, [capi_address("vm1-inet", "10.0.0.20"), capi_address("x", "bad")])
    assert [str(c) for c in found] == [
        "10.0.0.11 (Kube-OVN IP leaked)",
        "10.0.0.20 (pod tenant-a/web-1, Kube-OVN IP web-1.tenant-a, IPAddress tenant-a/vm1-inet)",
        "10.0.0.30 (pod tenant-a/web-2, Kube-OVN IP web-2.tenant-a)",
        "fd00::15 (pod tenant-a/web-1, Kube-OVN IP web-1.tenant-a)",
    ]
    assert all(isinstance(c, AddressConflict) for c in found)
    # The gateway is not the pool's.
    assert find_address_conflicts(own, [kube_ovn_ip("gw", v4IpAddress="10.0.0.1")]) == []
    assert find_address_conflicts(own, [{"spec": None}, "nonsense", {}]) == []


def test_address_conflicts_message():
    own = pool_spans({"addresses": ["10.0.0.0/24"]})
    ips = [kube_ovn_ip(f"pod{i}.t", ns="t", v4IpAddress=f"10.0.0.{i}") for i in range(1, 8)]
    msg = address_conflicts_message("p", find_address_conflicts(own, ips))
    assert msg == (
        'Kube-OVN has given addresses of InClusterIPPool "p" to pods: 10.0.0.1 (pod t/pod1, Kube-OVN IP pod1.t), '
        "10.0.0.2 (pod t/pod2, Kube-OVN IP pod2.t), 10.0.0.3 (pod t/pod3, Kube-OVN IP pod3.t), 10.0.0.4 (pod "
        "t/pod4, Kube-OVN IP pod4.t), 10.0.0.5 (pod t/pod5, Kube-OVN IP pod5.t) and 2 more; a machine given one "
        "of them clashes with the pod: give the pod another address, or take the address out of the pool "
        "(spec.excludedAddresses)")


@pytest.mark.parametrize("layout", ["one-namespace-a-24-each", "one-vpc-packed"])
def test_overlap_lookups_do_not_grow_with_the_number_of_pools(layout):
    """The shapes users have at N=2000 (one big namespace, one big VPC, many pools): a pass
    reads the pools of its own buckets and the wide ones, never all 2000 (counted, not timed)."""
    from controller.watch.indexes import POOL_INDEXERS, overlap_candidates
    from informers import ThreadSafeStore

    n, pools, globals_ = 2000, ThreadSafeStore(POOL_INDEXERS), ThreadSafeStore(POOL_INDEXERS)
    base = v4("10.0.0.0")
    for i in range(n):
        if layout == "one-namespace-a-24-each":
            first, size = base + 256 * i + 100, 51  # 10.x.y.100-150, a /24 each
        else:
            first, size = base + 24 * i, 24  # packed back to back in 10.0.0.0/16
        pools.add({"metadata": {"name": f"p{i}", "namespace": "big"},
                   "spec": {"addresses": [f"{V4(first)}-{V4(first + size - 1)}"]}})
    for j in range(3):  # a few wide shared pools elsewhere
        globals_.add({"metadata": {"name": f"wide-{j}"}, "spec": {"addresses": [f"172.{16 + j}.0.0/16"]}})
    # Packed: a pool touches at most 2 buckets, a bucket holds at most ceil(256 / 24) + 1 pools.
    bound = 1 if layout == "one-namespace-a-24-each" else 2 * 12
    worst = 0
    for obj in pools.list():
        own = pool_spans(obj["spec"])
        found = overlap_candidates(pools, globals_, own)
        worst = max(worst, len(found))
        assert find_pool_overlaps(("InClusterIPPool", f"big/{obj['metadata']['name']}"), own, found) == []
    assert worst <= bound + 3


# -- addresses are unique per VPC (product-decisions.md §10) ---------------------------------

def _ov(name, created, kind="InClusterIPPool"):
    from controller.rules.pool_conflicts import PoolOverlap

    return PoolOverlap(kind, name, ((4, 1, 2),), created)


def test_an_overlap_with_another_vpcs_network_never_counts_and_within_one_vpc_only_the_later_pool_carries_it():
    from controller.rules.pool_conflicts import split_overlaps

    own = ("2026-12-06T10:00:00Z", "a/pool")
    older, newer = _ov("b/pool", "2026-12-06T09:00:00Z"), _ov("c/pool", "2026-12-06T11:00:00Z")
    # Another VPC's network: not an overlap at all, however old.
    assert split_overlaps([older, newer], own, "vpc-a", {"b/pool": frozenset({"vpc-b"}),
                                                        "c/pool": frozenset({"vpc-c"})}) == ([], [])
    # The same VPC: the later pool carries it; an older one keeps its network Ready, no warning
    # (the later network shows it).
    same = {"b/pool": frozenset({"vpc-a"}), "c/pool": frozenset({"vpc-a"})}
    assert split_overlaps([older, newer], own, "vpc-a", same) == ([older], [])
    # Same second: the smaller name is the earlier.
    tie = _ov("0/pool", own[0])
    assert split_overlaps([tie], own, "vpc-a", {"0/pool": frozenset({"vpc-a"})}) == ([tie], [])
    assert split_overlaps([_ov("z/pool", own[0])], own, "vpc-a", {"z/pool": frozenset({"vpc-a"})}) == ([], [])
    # A network whose Subnet is not known yet (no VPC): the age rule alone.
    assert split_overlaps([older, newer], own, "vpc-a", {"b/pool": frozenset(), "c/pool": frozenset()}) == ([older], [])
    # Our own VPC not known: the age rule alone too.
    assert split_overlaps([older, newer], own, "", {"b/pool": frozenset({"vpc-b"}),
                                                   "c/pool": frozenset({"vpc-b"})}) == ([older], [])


def test_a_pool_of_no_network_is_carried_when_older_and_only_a_warning_when_later():
    from controller.rules.pool_conflicts import split_overlaps

    own = ("2026-12-06T10:00:00Z", "a/pool")
    old_plain, new_plain = _ov("b/twin", "2026-12-06T09:00:00Z"), _ov("b/late", "2026-12-06T11:00:00Z")
    glob = _ov("shared", "2026-12-06T11:00:00Z", "GlobalInClusterIPPool")
    # Made in the same second: later (creationTimestamp has whole seconds; a tie takes no network down).
    tie = _ov("b/tie", own[0])
    assert split_overlaps([tie], own, "vpc-a", {}) == ([], [tie])
    # A global pool named like a network's pool is still a pool of no network.
    assert split_overlaps([old_plain, new_plain, glob], own, "vpc-a", {"shared": frozenset({"vpc-b"})}) == \
        ([old_plain], [new_plain, glob])
