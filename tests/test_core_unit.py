"""Pure pieces of the reconcile: conditions (meta.SetStatusCondition, Ready of §5.8),
label selectors (§5.3) and the finalizer JSON patches (product-decisions.md §4.10)."""

from __future__ import annotations

import datetime as dt

import pytest

from controller.rules.conditions import compute_ready, find, set_condition
from controller.runtime.kube import finalizer_add_patch, finalizer_remove_patch
from controller.plan.network_status import set_not_ready
from controller.rules.selectors import InvalidSelector, matches

T0 = dt.datetime(2026, 10, 7, 8, 0, 0, 123456, tzinfo=dt.timezone.utc)
T1 = dt.datetime(2026, 10, 7, 9, 30, 0, tzinfo=dt.timezone.utc)


def test_transition_time_changes_only_with_status():
    conds: list = []
    set_condition(conds, "VLANAllocated", "False", "ZoneNotFound", "m1", 1, lambda: T0)
    assert conds[0]["lastTransitionTime"] == "2026-10-07T08:00:00Z"  # UTC, second precision
    set_condition(conds, "VLANAllocated", "False", "ZoneInvalid", "m2", 2, lambda: T1)
    assert conds[0] == {
        "type": "VLANAllocated", "status": "False", "reason": "ZoneInvalid", "message": "m2",
        "observedGeneration": 2, "lastTransitionTime": "2026-10-07T08:00:00Z",
    }
    set_condition(conds, "VLANAllocated", "True", "Allocated", "m3", 2, lambda: T1)
    assert conds[0]["lastTransitionTime"] == "2026-10-07T09:30:00Z"


def test_ready_missing_condition_is_pending():
    conds: list = []
    set_condition(conds, "VLANAllocated", "True", "Allocated", "VLAN 101 on bridge vmbr1", 1)
    compute_ready(conds, 1)
    r = find(conds, "Ready")
    assert (r["status"], r["reason"], r["message"]) == ("False", "Pending", "SubnetReady has not been evaluated")


def test_ready_takes_the_first_failing_required_condition():
    conds: list = []
    for t in ("VLANAllocated", "SubnetReady"):
        set_condition(conds, t, "True", "Ready", "ok", 1)
    set_condition(conds, "IPPoolReady", "False", "PoolNotFound", 'InClusterIPPool "p" does not exist in this namespace', 1)
    set_condition(conds, "GatewayReady", "False", "NoTrunkNodes", "x", 1)
    compute_ready(conds, 1)
    r = find(conds, "Ready")
    assert (r["status"], r["reason"]) == ("False", "PoolNotFound")


def test_ready_ignores_disabled_gateway_and_skips_nb_grace():
    conds: list = []
    for t in ("VLANAllocated", "SubnetReady", "IPPoolReady"):
        set_condition(conds, t, "True", "Ready", "ok", 1)
    set_condition(conds, "GatewayReady", "Unknown", "Disabled", "off", 1)
    compute_ready(conds, 1)
    assert find(conds, "Ready")["status"] == "True"
    assert find(conds, "Ready")["message"] == "the subnet is usable from Proxmox"
    set_condition(conds, "GatewayReady", "Unknown", "NBUnavailable", "grace", 1)
    compute_ready(conds, 1)
    assert find(conds, "Ready")["status"] == "True"
    set_condition(conds, "GatewayReady", "False", "NBUnavailable", "down", 1)
    compute_ready(conds, 1)
    assert find(conds, "Ready")["reason"] == "NBUnavailable"


@pytest.mark.parametrize("manage_gateway, expected", [(True, 3), (False, 2)])
def test_set_not_ready_cascade(manage_gateway, expected):
    conds: list = []
    set_not_ready(conds, "VLANAllocated", "ZoneExhausted", "full", 1, manage_gateway, lambda: T0)
    waiting = [c["type"] for c in conds if c["reason"] == "WaitingForVLAN"]
    assert len(waiting) == expected
    assert all(find(conds, t)["message"] == "waits for a VLAN to be allocated" for t in waiting)
    r = find(conds, "Ready")
    assert (r["status"], r["reason"], r["message"]) == ("False", "ZoneExhausted", "full")


def test_set_not_ready_leaves_a_disabled_gateway_alone():
    conds: list = []
    set_condition(conds, "GatewayReady", "Unknown", "Disabled", "off", 1)
    set_not_ready(conds, "VLANAllocated", "ZoneNotFound", "x", 1, True, lambda: T0)
    assert find(conds, "GatewayReady")["reason"] == "Disabled"


@pytest.mark.parametrize(
    "selector, labels, expected",
    [
        (None, {}, True),
        ({}, {"a": "b"}, True),
        ({"matchLabels": {"t": "y"}}, {"t": "y", "o": "1"}, True),
        ({"matchLabels": {"t": "y"}}, {"t": "n"}, False),
        ({"matchExpressions": [{"key": "t", "operator": "In", "values": ["a", "b"]}]}, {"t": "b"}, True),
        ({"matchExpressions": [{"key": "t", "operator": "In", "values": ["a"]}]}, {}, False),
        ({"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        ({"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["a"]}]}, {"t": "a"}, False),
        ({"matchExpressions": [{"key": "t", "operator": "Exists"}]}, {"t": ""}, True),
        ({"matchExpressions": [{"key": "t", "operator": "DoesNotExist"}]}, {"t": ""}, False),
    ],
)
def test_selector_matching(selector, labels, expected):
    assert matches(selector, labels) is expected


@pytest.mark.parametrize(
    "selector",
    [
        {"matchExpressions": [{"key": "t", "operator": "Equals", "values": ["a"]}]},
        {"matchExpressions": [{"key": "t", "operator": "In", "values": []}]},
        {"matchExpressions": [{"key": "t", "operator": "Exists", "values": ["a"]}]},
        {"matchLabels": ["not", "a", "map"]},
    ],
)
def test_selector_that_cannot_convert_is_refused(selector):
    with pytest.raises(InvalidSelector):
        matches(selector, {"t": "a"})


def test_finalizer_patches_never_rewrite_the_list():
    obj = {"metadata": {"name": "x", "resourceVersion": "42", "finalizers": ["other/a", "other/b"]}}
    # Guarded by the list as read, not by the resourceVersion: another field's write in between
    # (a peer's defaulting or status) does not refuse it.
    assert finalizer_add_patch(obj, "proxmox.cozystack.io/network") == [
        {"op": "test", "path": "/metadata/finalizers", "value": ["other/a", "other/b"]},
        {"op": "add", "path": "/metadata/finalizers/-", "value": "proxmox.cozystack.io/network"},
    ]
    # No list yet: adding one would replace one made meanwhile, so it is tested absent.
    bare = {"metadata": {"name": "x", "resourceVersion": "7"}}
    assert finalizer_add_patch(bare, "f") == [{"op": "test", "path": "/metadata/finalizers", "value": None},
                                              {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}]
    obj["metadata"]["finalizers"].insert(1, "proxmox.cozystack.io/network")
    assert finalizer_remove_patch(obj, "proxmox.cozystack.io/network") == [
        {"op": "test", "path": "/metadata/finalizers/1", "value": "proxmox.cozystack.io/network"},
        {"op": "remove", "path": "/metadata/finalizers/1"},
    ]
    assert finalizer_remove_patch(bare, "f") is None


@pytest.mark.parametrize(
    "machine",
    [
        {"spec": "string-spec"},
        "not-an-object",
        {"spec": {"network": ["a", "list"]}},
        {"spec": {"network": {"networkDevices": [None, 3, "x", {"ipPoolRef": None}]}}},
        {},
    ],
)
def test_malformed_machines_are_not_consumers_and_never_raise(machine):
    from controller.rules.consumers import count_consumers

    assert count_consumers(None, "p", [machine], [{"spec": 3}, "x"], [{}]).busy is False


def test_both_capmox_shapes_and_an_object_shaped_pool_list_are_consumers():
    from controller.rules.consumers import machine_uses_pool

    ref = {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "p"}
    assert machine_uses_pool({"spec": {"network": {"default": {"ipv6PoolRef": ref}}}}, "p")
    assert machine_uses_pool({"spec": {"network": {"additionalDevices": [{"name": "net1", "ipv4PoolRef": ref}]}}}, "p")
    assert machine_uses_pool({"spec": {"network": {"networkDevices": [{"name": "net0", "ipPoolRef": [ref]}]}}}, "p")
    assert machine_uses_pool({"spec": {"network": {"networkDevices": [{"name": "net0", "ipPoolRef": ref}]}}}, "p")
    assert not machine_uses_pool({"spec": {"network": {"networkDevices": [{"ipPoolRef": [{**ref, "kind": "GlobalInClusterIPPool"}]}]}}}, "p")


def test_doctor_shows_every_condition_that_carries_a_warning_true_or_not():
    # product-decisions.md §10; the failover notes are ovn.planner.failover_note's.
    from controller.rules.conditions import carries_warning
    from ovn.planner import failover_note

    assert carries_warning({"status": "False", "reason": "NoServingChassis"})
    assert carries_warning({"status": "Unknown", "reason": "SBUnavailable"})
    assert carries_warning({"status": "True", "reason": "ChassisAssigned", "message": "group" + failover_note(2)})
    assert carries_warning({"status": "True", "reason": "ChassisAssigned", "message": "group" + failover_note(1)})
    assert carries_warning({"status": "True", "reason": "AllocatedOutsideRanges", "message": "m"})
    assert carries_warning({"status": "True", "reason": "PoolExhausted", "message": "m"})
    assert not carries_warning({"status": "True", "reason": "ChassisAssigned", "message": "group" + failover_note(3)})
    assert not carries_warning({"status": "True", "reason": "Allocated", "message": "VLAN 100"})
