"""What kube-ovn-controller itself does with a Subnet's finalizers and a duplicated Vlan,
where our decisions depend on it (docs/testing.md "What the real peers taught us").

Finalizers. Kube-OVN removes its finalizer ``kubeovn.io/kube-ovn-controller`` from a
deleting Subnet once it counts no IP of the Subnet in use. v1.15 (``handleSubnetFinalizer``,
pkg/controller/subnet.go) adds it to every live Subnet it has validated, next to ours.
v1.13 added it only to a Subnet with **no finalizer at all**
(``len(subnet.GetFinalizers()) == 0``): when our ``proxmox.cozystack.io/network`` landed
first, Kube-OVN never added its own. Removing ours from such a deleting Subnet would then
delete it, and Kube-OVN would remove its logical switch, while Kube-OVN still counts IPs in
it. So ours stays on until Kube-OVN's count is zero whenever Kube-OVN holds none: the rule
holds for both versions.

Duplicates. v1.14+ sets ``Vlan.status.conflict`` on a Vlan when, at its check of that Vlan
(``checkVlanConflict``, pkg/controller/vlan.go: on the Vlan's add, any update, its retries),
another Vlan has the same provider and ID; a Subnet on a flagged Vlan gets ``Ready=False``
with reason ``ValidateSubnetVlanFailed`` and is not configured further.

The default VPC. A Subnet without ``spec.vpc`` is put into ``ovn-cluster``
(:data:`DEFAULT_VPC`), the cluster's own router.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

from controller.rfc3339 import parse

# Kube-OVN's default VPC (util.DefaultVpc, the default of kube-ovn-controller's
# --cluster-router): ``formatSubnet`` writes it into a Subnet without ``spec.vpc``, and with
# ``logicalGateway`` its router port ``ovn-cluster-<subnet>`` is on the cluster's own router
# (field-reports.md R2, kubeovn/kube-ovn#5530).
DEFAULT_VPC = "ovn-cluster"

# util.KubeOVNControllerFinalizer and the name it migrates from (util.DepreciatedFinalizerName).
KUBE_OVN_FINALIZERS = ("kubeovn.io/kube-ovn-controller", "kube-ovn-controller")


# The reason of a Subnet's Ready=False when its Vlan is missing or flagged (validateSubnetVlan).
SUBNET_VLAN_INVALID = "ValidateSubnetVlanFailed"


# field-reports.md S1: how long a Subnet may keep ValidateSubnetVlanFailed after its Vlan exists
# before the controller calls Kube-OVN's state stale (one Kube-OVN pass takes well under this).
KUBE_OVN_STALE_AFTER = 120.0
# How the stale state's message begins: a network whose SubnetReady begins so has said it.
STALE_PREFIX = "Kube-OVN has not re-validated Subnet"


def stale_vlan_validation(subnet: Mapping[str, Any], vlan: Mapping[str, Any] | None, now: _dt.datetime,
                          after: float = KUBE_OVN_STALE_AFTER, shown: bool = False) -> tuple[str, float | None]:
    """field-reports.md S1 (kubeovn/kube-ovn#6352, fixed in v1.15.5): before v1.15.5 a Subnet
    made before its Vlan keeps ``Ready=False ValidateSubnetVlanFailed`` after the Vlan
    exists, until kube-ovn-controller restarts (its handler dropped the key and the Vlan's
    add does not re-enqueue the Subnet). ``validateSubnetVlan`` fails only on a missing or a
    conflict-flagged Vlan, so that reason on a Subnet whose Vlan exists, is not flagged, and
    has been there (and the condition unchanged) for ``after`` seconds is Kube-OVN's stale
    state, not the tenant's mistake.

    :param vlan: the network's own Vlan (the caller checks it is ours), None when absent.
    :param shown: the network already says so: it keeps saying it while the state holds (a
        copy of the Vlan without its creationTimestamp, just written, must not flip it back).
    :returns: ``(message, None)`` when stale; ``("", seconds)`` until it would be called
        stale (the pass to come back then); ``("", None)`` when not in that state.
    """
    if vlan is None or flags_conflict(vlan):
        return "", None
    status = subnet.get("status")
    conds = status.get("conditions") if isinstance(status, Mapping) else None
    ready = next((c for c in conds or [] if isinstance(c, Mapping) and c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "False" or ready.get("reason") != SUBNET_VLAN_INVALID:
        return "", None
    # A Vlan this process has just created and the watch has not brought back may carry no
    # creationTimestamp yet: it was made now, and the pass comes back when the grace ends.
    sname = str((subnet.get("metadata") or {}).get("name") or "")
    vname = str((vlan.get("metadata") or {}).get("name") or "")
    message = (f'{STALE_PREFIX} "{sname}" since Vlan "{vname}" was created; '
               "kube-ovn-controller before v1.15.5 needs a restart (kube-ovn#6352)")
    if shown:
        return message, None
    made = parse((vlan.get("metadata") or {}).get("creationTimestamp")) or now
    since = max([made] + [t for t in (parse(ready.get("lastUpdateTime")), parse(ready.get("lastTransitionTime")))
                          if t is not None])
    left = after - (now - since).total_seconds()
    if left > 0:
        return "", left
    return message, None


def flags_conflict(vlan: Mapping[str, Any]) -> bool:
    """Kube-OVN has set ``status.conflict`` on ``vlan`` (another Vlan with its provider and
    ID existed at Kube-OVN's last check of it)."""
    return (vlan.get("status") or {}).get("conflict") is True


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


def processed(subnet: Mapping[str, Any]) -> bool:
    """Kube-OVN has handled the Subnet through a whole pass: its finalizer is on (v1.15) or its
    ``Ready`` condition is True (versions without the finalizer; v1.15 adds the finalizer
    before it sets ``Ready`` True). Our finalizer waits for that: v1.15 adds its own with an
    unguarded merge patch of the whole list from its cache, which would drop an entry added
    before it, and its first writes (defaulting, status, finalizer) come within a second of
    the create, when a guarded patch of ours would be refused. A ``Ready`` that is False does
    not count: a pass that failed (``ValidateSubnetVlanFailed`` while the Vlan is not there
    yet, field-reports.md S1) writes it before the finalizer, and Kube-OVN's retry then adds
    the finalizer under our patch."""
    meta = subnet.get("metadata") or {}
    status = subnet.get("status")
    conds = status.get("conditions") if isinstance(status, Mapping) else None
    return (any(f in (meta.get("finalizers") or []) for f in KUBE_OVN_FINALIZERS)
            or any(isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (conds or [])))


def subnet_vpc(subnet: Mapping[str, Any]) -> str:
    """The VPC a Subnet is in, once Kube-OVN has defaulted it: ``spec.vpc``, or
    :data:`DEFAULT_VPC` when empty."""
    spec = subnet.get("spec")
    return str((spec.get("vpc") if isinstance(spec, Mapping) else "") or DEFAULT_VPC)


def in_default_vpc(subnet: Mapping[str, Any]) -> bool:
    """The Subnet is, or will be once Kube-OVN has defaulted it, in the default VPC: its
    ``spec.vpc`` is empty or :data:`DEFAULT_VPC`."""
    return subnet_vpc(subnet) == DEFAULT_VPC


def foreign_vpc_note(subnet: Mapping[str, Any], vpc: Mapping[str, Any] | None, namespace: str) -> str:
    """field-reports.md R2, report only: the Subnet's VPC is another namespace's. A VPC's
    namespaces are Kube-OVN's ``Vpc.spec.namespaces`` (the namespaces whose pods it serves);
    a VPC that lists none, or that is not found, says nothing either way and is not
    reported. "" when nothing is to be said."""
    if vpc is None:
        return ""
    listed = (vpc.get("spec") or {}).get("namespaces")
    if not isinstance(listed, list) or not listed or namespace in listed:
        return ""
    name = str((vpc.get("metadata") or {}).get("name") or "")
    sub = str((subnet.get("metadata") or {}).get("name") or "")
    return (f'Subnet "{sub}" is in VPC "{name}", whose spec.namespaces lists {", ".join(map(str, listed))} '
            f'and not "{namespace}": another tenant\'s VPC? Its VMs would reach that VPC\'s router and subnets')


def default_vpc_message(subnet: Mapping[str, Any]) -> str:
    """SubnetInvalid's message for a Subnet in the default VPC (field-reports.md R2)."""
    name = str((subnet.get("metadata") or {}).get("name") or "")
    where = (f'has no spec.vpc, so Kube-OVN puts it in the default VPC "{DEFAULT_VPC}"'
             if not (subnet.get("spec") or {}).get("vpc") else f'is in the default VPC "{DEFAULT_VPC}"')
    return (f'Subnet "{name}" {where}; a Proxmox network needs a tenant VPC: the default VPC\'s router is the '
            "cluster's, so the controller never makes it the gateway of a VLAN. Recreate the Subnet with spec.vpc "
            "set to the tenant's VPC (the VLAN stays allocated meanwhile)")
