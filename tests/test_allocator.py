"""Range parsing and allocation, with the values of reference-behaviour.md §4.1-§4.3."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.rules.allocator import (
    VLANRangeError,
    candidates,
    parse_vlan_ranges,
    pick_vlan,
    pinned_vlans,
    used_vlans,
)


def zone(name="z", provider="physnet1", ranges=("100-103",), reserved=(), static=(), mtu=None):
    spec = {"bridge": "vmbr1", "providerNetwork": provider, "vlanRanges": list(ranges)}
    if reserved:
        spec["reservedVLANs"] = list(reserved)
    if static:
        spec["staticAssignments"] = [{"namespace": ns, "name": n, "vlan": v} for ns, n, v in static]
    if mtu is not None:
        spec["mtu"] = mtu
    return {"metadata": {"name": name}, "spec": spec}


def vlan(name, vid, provider="physnet1", labels=None):
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"id": vid, "provider": provider}}


# -- §4.1 parsing -------------------------------------------------------------------


@pytest.mark.parametrize(
    "entries, expected",
    [
        (["120"], [120]),
        (["101-105"], [101, 102, 103, 104, 105]),
        ([" 7 - 8 "], [7, 8]),  # spaces tolerated by the parser
        (["1-5", "3-7"], [1, 2, 3, 4, 5, 6, 7]),  # overlaps merge
        (["10", "5-6", "10"], [5, 6, 10]),  # sorted, de-duplicated
        (["1", "4094"], [1, 4094]),
        ([], []),
    ],
)
def test_parse_ranges(entries, expected):
    assert parse_vlan_ranges(entries) == expected


@pytest.mark.parametrize(
    "entries, message",
    [
        (["abc"], 'vlan range "abc": "abc" is not a number'),
        ([""], 'vlan range "": "" is not a number'),
        (["-5"], 'vlan range "-5": "" is not a number'),
        (["5-"], 'vlan range "5-": "" is not a number'),
        (["5-x"], 'vlan range "5-x": "x" is not a number'),
        (["1_0"], 'vlan range "1_0": "1_0" is not a number'),
        (["0"], 'vlan range "0": 0 is outside 1-4094'),
        (["4095"], 'vlan range "4095": 4095 is outside 1-4094'),
        (["1-4095"], 'vlan range "1-4095": 4095 is outside 1-4094'),
        (["200-100"], 'vlan range "200-100" ends before it starts'),
        ([" 9 - 3 "], 'vlan range "9 - 3" ends before it starts'),  # entry is trimmed in the message
        (["10", "0", "abc"], 'vlan range "0": 0 is outside 1-4094'),  # first bad entry wins
    ],
)
def test_parse_errors(entries, message):
    with pytest.raises(VLANRangeError) as exc:
        parse_vlan_ranges(entries)
    assert str(exc.value) == message


def test_reserved_removed_and_outside_reserved_ignored():
    z = zone(ranges=["100-105"], reserved=[102, 104, 999])
    assert candidates(z["spec"]) == [100, 101, 103, 105]


# -- §4.2 used and pinned sets ----------------------------------------------------------


def test_used_counts_every_vlan_on_the_provider_whoever_owns_it():
    vlans = [
        vlan("legacy-db", 100),  # hand-made, no labels
        vlan("lab-x", 101, provider="physnet2"),  # other provider: not counted
        vlan("tenant-a", 102, labels={"proxmox.cozystack.io/zone": "z"}),
        {**vlan("dying", 103), "metadata": {"name": "dying", "deletionTimestamp": "2026-01-01T00:00:00Z"}},
    ]
    assert used_vlans(vlans, "physnet1") == {100, 102, 103}


def test_pins_of_every_zone_on_the_same_provider():
    zs = [
        zone("a", static=[("ns", "n1", 100)]),
        zone("b", static=[("ns", "n2", 101)]),
        zone("c", provider="physnet2", static=[("ns", "n3", 102)]),
    ]
    assert pinned_vlans(zs, "physnet1") == {100, 101}


# -- §4.3 picking -------------------------------------------------------------------------


def test_field_report_b01_used_ids_are_per_provider():
    # B01: range 100-103 on physnet1; legacy-db 100 (hand-made) and tenant-a 102 are used,
    # lab-x 101 lives on physnet2 and does not block 101.
    z = zone(ranges=["100-103"])
    used = used_vlans([vlan("legacy-db", 100), vlan("lab-x", 101, "physnet2"), vlan("tenant-a", 102)], "physnet1")
    assert pick_vlan(z, "ns", "tenant-b", used, [z]).vlan == 101


def test_lowest_free_skips_reserved_and_pins():
    z = zone(ranges=["100-110"], reserved=[101], static=[("other", "pinned", 102)])
    p = pick_vlan(z, "ns", "net", {100}, [z])
    assert p.ok and p.vlan == 103


def test_pins_of_a_sibling_zone_block_dynamic_allocation():
    a = zone("a", ranges=["100-110"])
    b = zone("b", ranges=["200-210"], static=[("x", "y", 100)])
    assert pick_vlan(a, "ns", "net", set(), [a, b]).vlan == 101


def test_static_assignment_outside_ranges_is_allowed():
    z = zone(ranges=["100-103"], static=[("ns", "net", 3000)])
    assert pick_vlan(z, "ns", "net", set(), [z]).vlan == 3000


def test_static_reserved():
    z = zone(ranges=["100-103"], reserved=[102], static=[("ns", "net", 102)])
    p = pick_vlan(z, "ns", "net", set(), [z])
    assert (p.reason, p.message, p.result) == (
        "StaticVLANReserved",
        'static VLAN 102 is reserved in zone "z"',
        "conflict",
    )


def test_static_in_use():
    z = zone(ranges=["100-103"], static=[("ns", "net", 101)])
    p = pick_vlan(z, "ns", "net", {101}, [z])
    assert (p.reason, p.message, p.result) == (
        "StaticVLANInUse",
        'static VLAN 101 is already used on provider "physnet1"',
        "conflict",
    )


def test_static_branch_ignores_other_pins():
    # Two statics with one VLAN: the pins are not consulted, the first to create wins.
    z = zone(ranges=["100-103"], static=[("ns", "a", 101), ("ns", "b", 101)])
    assert pick_vlan(z, "ns", "a", set(), [z]).vlan == 101
    assert pick_vlan(z, "ns", "b", {101}, [z]).reason == "StaticVLANInUse"


def test_exhausted_message_joins_the_ranges():
    z = zone(ranges=["100-101", "105"])
    p = pick_vlan(z, "ns", "net", {100, 101, 105}, [z])
    assert (p.reason, p.message, p.result) == (
        "ZoneExhausted",
        'zone "z" has no free VLAN in 100-101,105',
        "exhausted",
    )


def test_zone_invalid_carries_the_parse_error():
    z = zone(ranges=["200-100"])
    p = pick_vlan(z, "ns", "net", set(), [z])
    assert (p.reason, p.message) == ("ZoneInvalid", 'vlan range "200-100" ends before it starts')


def test_released_vlan_is_reused_at_once():
    z = zone(ranges=["101-105"])
    a = pick_vlan(z, "ns", "a", set(), [z]).vlan
    assert a == 101
    # A's Vlan is gone: B gets 101 again.
    assert pick_vlan(z, "ns", "b", set(), [z]).vlan == 101


# -- properties -----------------------------------------------------------------------------

ids = st.integers(min_value=1, max_value=60)


@given(
    ranges=st.lists(st.tuples(ids, ids).map(sorted), min_size=1, max_size=4),
    reserved=st.sets(ids, max_size=10),
    used=st.sets(ids, max_size=40),
    pins=st.sets(ids, max_size=5),
)
def test_pick_is_the_lowest_allowed_candidate(ranges, reserved, used, pins):
    entries = [f"{lo}-{hi}" for lo, hi in ranges]
    z = zone(ranges=entries, reserved=sorted(reserved), static=[("o", f"p{v}", v) for v in sorted(pins)])
    allowed = sorted({v for lo, hi in ranges for v in range(lo, hi + 1)} - reserved - used - pins)
    p = pick_vlan(z, "ns", "net", used, [z])
    if allowed:
        assert p.vlan == allowed[0]
    else:
        assert p.reason == "ZoneExhausted"


@given(n=st.integers(min_value=1, max_value=40), used=st.sets(ids, max_size=30))
def test_sequential_allocations_never_repeat_an_id(n, used):
    z = zone(ranges=["1-60"])
    taken = set(used)
    got = []
    for i in range(n):
        p = pick_vlan(z, "ns", f"n{i}", taken, [z])
        if not p.ok:
            assert len(taken & set(range(1, 61))) == 60
            break
        assert p.vlan not in taken
        taken.add(p.vlan)
        got.append(p.vlan)
    assert len(got) == len(set(got))
