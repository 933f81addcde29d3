"""What the controller keeps of each cached kind that grows with the cluster:
the informer transform of client-go's ``SetTransform`` idea, one keep-list per kind.

Every Kube-OVN ``IP`` (one per pod and VM NIC in the cluster), every Node and Namespace, and
every CAPI ``IPAddress``/``IPAddressClaim`` and capmox ``ProxmoxMachine`` is cached, and the
controller reads a few fields of each (docs/architecture.md, "What the caches keep"). The
keep-lists below are what the readers named there read; everything else (Node status and
images, a machine's VM template, an IP's MAC and container ID, other controllers' labels and
annotations, managedFields) is dropped before the object reaches the store or a handler.

Not projected, on purpose: the kinds the controller writes from its cache (ProxmoxNetwork,
ProxmoxNetworkZone, Vlan, Subnet): their whole status is copied and compared, and the
finalizer and annotation patches (controller/runtime/kube.py) take their shape from the cached
lists, which must therefore be complete. Pools (their whole spec is compared), ProviderNetworks,
Vpcs and egress-gateway Pods are few. Fresh reads (before a release, doctor) are never
projected: they go to the API server.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Union

import attrs

from controller import names
from controller.rules.consumers import PAUSED
from ovn.planner import CHASSIS_ANNOTATION, READY_LABEL_SUFFIX


@attrs.frozen
class Keys:
    """Keep the entries of a mapping whose key passes ``test`` (labels, annotations)."""

    test: Callable[[str], bool]


Keep = Mapping[str, Union[bool, "Keep", Keys]]
"""``key -> True`` (the whole value), a nested keep-list (for a mapping value) or
:class:`Keys`. A value of another type than the keep-list expects is kept whole, so a
malformed object reaches its readers as served and gets their error, not ours."""


def project(obj: Mapping[str, Any], keep: Keep) -> dict[str, Any]:
    """A new dict with only what ``keep`` names of ``obj``; values are shared, not copied
    (the informer owns the freshly decoded object)."""
    out: dict[str, Any] = {}
    for key, rule in keep.items():
        if key not in obj:
            continue
        value = obj[key]
        if rule is True or not isinstance(value, Mapping):
            out[key] = value
        elif isinstance(rule, Keys):
            out[key] = {k: v for k, v in value.items() if isinstance(k, str) and rule.test(k)}
        else:
            out[key] = project(value, rule)
    return out


# Every projected kind: the cache key, the Event reference, the watch's resourceVersion and
# the deletion state (docs/architecture.md, "What the caches keep").
_METADATA: dict[str, Any] = {"name": True, "namespace": True, "uid": True, "resourceVersion": True,
                             "deletionTimestamp": True}


def _kind(metadata: Mapping[str, Any] | None = None, **rest: Any) -> Keep:
    return {"apiVersion": True, "kind": True, "metadata": {**_METADATA, **(metadata or {})}, **rest}


KEEP: dict[tuple[str, str], Keep] = {
    # pool_conflicts.find_address_conflicts, indexes.ip_index_subnet, keys.for_kube_ovn_ip
    ("kubeovn.io", "ips"): _kind(spec={"subnet": True, "ipAddress": True, "v4IpAddress": True,
                                       "v6IpAddress": True, "podName": True, "namespace": True}),
    # indexes.node_index_provider / node_providers / gateway_key, ovn.planner.trunk_nodes
    ("", "nodes"): _kind({"labels": Keys(lambda k: k.endswith(READY_LABEL_SUFFIX)),
                          "annotations": Keys(lambda k: k == CHASSIS_ANNOTATION)}),
    # network_status.namespace_allowed (any label a zone selector names), reconcile/namespaces.py
    ("", "namespaces"): _kind({"labels": True,
                               "annotations": Keys(lambda k: k == names.ANNOTATION_NAMESPACE_NETWORKS)}),
    # consumers.holders_of / count_consumers, pool_conflicts.ipaddress_holders, indexes.address_index_pool,
    # foreign.find_foreign_addresses
    ("ipam.cluster.x-k8s.io", "ipaddresses"): _kind({"finalizers": True, "annotations": Keys(lambda k: k == PAUSED)},
                                                     spec={"address": True, "poolRef": True, "claimRef": True}),
    # consumers.holders_of / count_consumers, keys.for_pool_user, indexes.claim_index_machine,
    # foreign.find_foreign_addresses
    ("ipam.cluster.x-k8s.io", "ipaddressclaims"): _kind({"finalizers": True, "ownerReferences": True,
                                                         "annotations": Keys(lambda k: k == PAUSED)},
                                                        spec={"poolRef": True}, status={"addressRef": True}),
    # consumers.machine_pool_refs (both capmox shapes) and _failed, keys.for_pool_user,
    # foreign.machine_devices / machine_index_keys / find_foreign_addresses
    ("infrastructure.cluster.x-k8s.io", "proxmoxmachines"): _kind(
        {"finalizers": True, "annotations": Keys(lambda k: k == PAUSED)},
        spec={"network": True},
        status={"conditions": True, "deprecated": {"v1beta1": {"conditions": True}}}),
}


def transform_for(group: str, plural: str) -> Callable[[dict], dict] | None:
    """The informer transform of ``group``/``plural`` (core kinds: group ``""``), or None
    for a kind that is cached whole (less managedFields: the informer's default)."""
    keep = KEEP.get((group, plural))
    if keep is None:
        return None
    return lambda obj: project(obj, keep)
