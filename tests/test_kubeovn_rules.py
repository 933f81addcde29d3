"""``controller.rules.kubeovn``: Kube-OVN v1.13's own release rule for a deleting Subnet, which
our finalizer must not bypass (docs/testing.md "What the real peers taught us"). Upstream: kube-ovn v1.13.0
``pkg/controller/subnet.go`` ``handleSubnetFinalizer`` (its finalizer is added only to a
Subnet without finalizers and removed once ``usingIPs == 0``, or ``== 1`` with a U2O
interconnection IP; ``v6usingIPs`` for an IPv6 CIDR, ``v4usingIPs`` otherwise)."""

from __future__ import annotations

import pytest

from controller.rules.kubeovn import KUBE_OVN_FINALIZERS, held_only_by_us, ips_in_use


def subnet(cidr="10.0.0.0/24", finalizers=(), **status):
    return {"metadata": {"name": "s", "finalizers": list(finalizers), "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"cidrBlock": cidr}, "status": status}


@pytest.mark.parametrize("cidr,status,expected", [
    ("10.0.0.0/24", {}, 0),
    ("10.0.0.0/24", {"v4usingIPs": 3}, 3),
    ("10.0.0.0/24", {"v4usingIPs": 2.0, "v6usingIPs": 9}, 2),  # Kube-OVN writes float64
    ("fd00::/64", {"v4usingIPs": 5, "v6usingIPs": 1}, 1),
    ("10.0.0.0/24,fd00::/64", {"v4usingIPs": 4, "v6usingIPs": 7}, 4),  # dual stack counts v4
    ("10.0.0.0/24", {"v4usingIPs": 1, "u2oInterconnectionIP": "10.0.0.254"}, 0),  # only the U2O IP
    ("10.0.0.0/24", {"v4usingIPs": 2, "u2oInterconnectionIP": "10.0.0.254"}, 2),
    ("10.0.0.0/24", {"v4usingIPs": True}, 0),  # not a number
    ("10.0.0.0/24", {"v4usingIPs": "3"}, 0),
])
def test_ips_in_use_follows_kube_ovns_count(cidr, status, expected):
    assert ips_in_use(subnet(cidr, **status)) == expected


def test_only_a_subnet_without_kube_ovns_finalizer_is_held_by_ours():
    assert KUBE_OVN_FINALIZERS == ("kubeovn.io/kube-ovn-controller", "kube-ovn-controller")
    ours = "proxmox.cozystack.io/network"
    assert held_only_by_us(subnet(finalizers=[ours], v4usingIPs=2)) == 2
    assert held_only_by_us(subnet(finalizers=[], v4usingIPs=1)) == 1
    assert held_only_by_us(subnet(finalizers=[ours], v4usingIPs=0)) == 0
    for theirs in KUBE_OVN_FINALIZERS:  # Kube-OVN holds the Subnet itself: ours may go
        assert held_only_by_us(subnet(finalizers=[theirs, ours], v4usingIPs=2)) == 0
    assert held_only_by_us({"metadata": {}, "spec": {}}) == 0
    assert held_only_by_us({}) == 0


def test_a_failed_first_pass_is_not_kube_ovn_done_with_the_subnet():
    """Our Subnet finalizer waits for Kube-OVN's finalizer or Ready True: a Ready False that
    a failed pass wrote (the Vlan not there yet, field-reports.md S1) comes before Kube-OVN's
    finalizer, which its retry adds with an unguarded patch of the whole list."""
    from controller.rules.kubeovn import processed

    failed = {"metadata": {"finalizers": []}, "status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "ValidateSubnetVlanFailed"},
        {"type": "Validated", "status": "True", "reason": "ValidateSubnetVlanFailed"}]}}
    assert not processed(failed)
    done = {"metadata": {"finalizers": ["kubeovn.io/kube-ovn-controller"]}, "status": failed["status"]}
    assert processed(done)
    ready = {"metadata": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert processed(ready)
