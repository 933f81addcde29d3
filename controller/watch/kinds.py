"""The kinds other projects serve that the controller watches, and how their versions are found.

Consumers and pools (CAPI IPAM, capmox) and Kube-OVN's ``IP`` and ``Vpc`` may be installed
before or after the controller, in several versions; API discovery picks the newest served
version whose LIST answers (product-decisions.md §4.2). :func:`failing_past` is the one rule
for "this kind cannot be listed", shared by ``/readyz`` and the move to another version.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from controller.runtime.kube import ApiError, KubeWriter
from controller.watch.indexes import (
    ADDRESS_INDEXERS,
    CLAIM_INDEXERS,
    EGRESS_GATEWAY_INDEXERS,
    IP_INDEXERS,
    MACHINE_INDEXERS,
    POOL_INDEXERS,
)
from controller.watch.projection import transform_for
from informers import Resource

log = structlog.get_logger(__name__)


UNLISTABLE_GRACE = 30.0  # seconds a kind's LISTs fail before /readyz names it (field-reports.md R8); a blip is not named


def failing_past(inf: Any, grace: float) -> str | None:
    """The error of ``inf``'s run of LIST/WATCH failures once it has lasted ``grace``
    seconds, else None: the one rule behind /readyz and the move to another version (field-reports.md R8)."""
    f = inf.failure()
    return f[0] if f is not None and f[1] >= grace else None


# Consumers and pools, newest served version first (product-decisions.md §4.2).
MACHINE_VERSIONS = ("v1alpha2", "v1alpha1")


ADDRESS_VERSIONS = ("v1beta2", "v1beta1", "v1alpha1")


POOL_VERSIONS = ("v1alpha2", "v1alpha1")


# Kinds other projects serve, by the key the listers use: (group, plural, versions, kind).
# Namespaced; the consumers of a pool (and the pools), read fresh before a release too.
OPTIONAL_KINDS = {
    "pools": ("ipam.cluster.x-k8s.io", "inclusterippools", POOL_VERSIONS, "InClusterIPPool"),
    "addresses": ("ipam.cluster.x-k8s.io", "ipaddresses", ADDRESS_VERSIONS, "IPAddress"),
    "claims": ("ipam.cluster.x-k8s.io", "ipaddressclaims", ADDRESS_VERSIONS, "IPAddressClaim"),
    "machines": ("infrastructure.cluster.x-k8s.io", "proxmoxmachines", MACHINE_VERSIONS, "ProxmoxMachine"),
}


# Cluster-scoped kinds of other projects, read for the pool clashes:
# GlobalInClusterIPPool comes with the IPAM provider, IP with Kube-OVN. Not consumers.
CLUSTER_KINDS = {
    "global_pools": ("ipam.cluster.x-k8s.io", "globalinclusterippools", POOL_VERSIONS, "GlobalInClusterIPPool"),
    "kube_ovn_ips": ("kubeovn.io", "ips", ("v1",), "IP"),
    # Which namespaces a VPC is for (spec.namespaces): a Subnet in another's VPC is reported (field-reports.md R2).
    "vpcs": ("kubeovn.io", "vpcs", ("v1",), "Vpc"),
}


# Namespaced kinds of other projects that are neither consumers nor pools: a Ready
# VpcEgressGateway whose reroutes are missing from its VPC's router is reported on the
# networks it serves (controller.rules.egress_reroute).
OTHER_KINDS = {
    "egress_gateways": ("kubeovn.io", "vpc-egress-gateways", ("v1",), "VpcEgressGateway"),
}


# Every optional kind, by key.
ALL_KINDS = OPTIONAL_KINDS | CLUSTER_KINDS | OTHER_KINDS


# Indexes of the optional kinds' stores (controller.watch.indexes.Listers); others: "namespace".
OPTIONAL_INDEXERS = {
    "pools": POOL_INDEXERS,
    "addresses": ADDRESS_INDEXERS,
    "machines": MACHINE_INDEXERS,
    "claims": CLAIM_INDEXERS,
    "global_pools": POOL_INDEXERS,
    "kube_ovn_ips": IP_INDEXERS,
    "egress_gateways": EGRESS_GATEWAY_INDEXERS,
}


def served_versions(writer: KubeWriter, group: str, plural: str, versions: tuple[str, ...]) -> list[str]:
    """Those of ``versions`` in which the API server serves ``group``/``plural``, in order.

    :raises ApiError: for discovery failures other than 404 (the group is not served).
    """
    out = []
    for version in versions:
        try:
            doc = writer.request("GET", f"/apis/{group}/{version}")
        except ApiError as err:
            if err.not_found:
                continue
            raise
        if any(r.get("name") == plural for r in doc.get("resources") or []):
            out.append(version)
    return out


def discover(writer: KubeWriter, group: str, plural: str, versions: tuple[str, ...]) -> str | None:
    """The first of ``versions`` in which the API server serves ``group``/``plural``, or None.

    :raises ApiError: for discovery failures other than 404 (the group is not served).
    """
    return next(iter(served_versions(writer, group, plural, versions)), None)


def listable_version(writer: KubeWriter, resource: Callable[[str], Resource], served: list[str]) -> str | None:
    """The first of the ``served`` versions whose LIST answers (``limit=1``, all
    namespaces), or None. A version can be served and still not list: capmox converts its
    stored version through a conversion webhook, and while that webhook fails every LIST and
    WATCH of another version fails whole (field-reports.md R8), while the stored one lists.

    :raises ApiError: only for failures of the API server itself (5xx of every version is
        "none lists", not an error).
    """
    for version in served:
        try:
            writer.request("GET", resource(version).path(None), query=[("limit", "1")])
            return version
        except ApiError as err:
            log.info("served version does not list", resource=str(resource(version)), error=str(err))
    return None


def projected(resource: Resource) -> Any:
    """The informer transform of ``resource``'s kind (controller/watch/projection.py), or None:
    cached whole less managedFields."""
    return transform_for(resource.group, resource.plural)


def resource_of(key: str) -> Callable[[str], Resource]:
    """version -> the :class:`Resource` of optional kind ``key`` (a key of
    :data:`ALL_KINDS`) in that version.

    :raises KeyError: ``key`` is not an optional kind.
    """
    group, plural, _, kind = ALL_KINDS[key]
    return lambda version: Resource(group, version, plural, namespaced=key not in CLUSTER_KINDS, kind=kind)
