"""What kube-ovn-controller (v1.13) itself does with a Subnet's finalizers, where our
release order depends on it (docs/testing.md "What the real peers taught us").

Kube-OVN adds its finalizer ``kubeovn.io/kube-ovn-controller`` only to a Subnet that has
**no finalizer at all** (``handleSubnetFinalizer``: ``len(subnet.GetFinalizers()) == 0``),
and removes it from a deleting Subnet once it counts no IP of the Subnet in use. When our
``proxmox.cozystack.io/network`` lands first (a Subnet created before its Vlan: Kube-OVN
fails to format it until the Vlan exists and retries with backoff, while our pass adds the
finalizer as soon as the Vlan binds it), Kube-OVN never adds its own. Removing ours from
such a deleting Subnet would then delete it, and Kube-OVN would remove its logical switch,
while Kube-OVN still counts IPs in it. So ours stays on until Kube-OVN's count is zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# util.KubeOVNControllerFinalizer and the name it migrates from (util.DepreciatedFinalizerName).
KUBE_OVN_FINALIZERS = ("kubeovn.io/kube-ovn-controller", "kube-ovn-controller")


def _count(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def ips_in_use(subnet: Mapping[str, Any]) -> int:
    """IPs Kube-OVN counts in use in ``subnet`` by its own release rule: ``v6usingIPs`` for
    an IPv6 CIDR, else ``v4usingIPs``; a single IP that is the U2O interconnection IP does
    not count (Kube-OVN lets such a Subnet go)."""
    spec, st = subnet.get("spec") or {}, subnet.get("status") or {}
    cidr = str(spec.get("cidrBlock") or "")
    ipv6_only = ":" in cidr and "." not in cidr
    using = _count(st.get("v6usingIPs") if ipv6_only else st.get("v4usingIPs"))
    if using == 1 and st.get("u2oInterconnectionIP"):
        return 0
    return int(using)


def held_only_by_us(subnet: Mapping[str, Any]) -> int:
    """For a deleting Subnet: the number of IPs Kube-OVN still counts in it when Kube-OVN
    has no finalizer of its own on it (then ours is the only thing keeping the Subnet until
    they are released); 0 when Kube-OVN holds the Subnet itself or counts nothing."""
    finalizers = (subnet.get("metadata") or {}).get("finalizers") or []
    if any(f in finalizers for f in KUBE_OVN_FINALIZERS):
        return 0
    return ips_in_use(subnet)
