"""Egress-gateway pods of a cozystack VPC get OVN port security turned off
(reference-behaviour.md §12).

A VPC egress gateway forwards traffic for addresses that are not its own, which OVN port
security drops. Turning it off is only safe for pods that really are such a gateway, so the
annotation is written only at the end of a fully verified ownership chain, read from the
API server (not a cache): Pod -controller-> ReplicaSet -controller-> Deployment -owner->
VpcEgressGateway (UIDs matching at every step) whose ``cozystack.io/vpcId`` label equals its
``spec.vpc``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from controller.runtime.events import EventRecorder
from controller.names import NORMAL
from controller.runtime.kube import ApiError, KubeWriter
from controller.reconcile.network import Result
from informers.resource import Resource
from informers.store import ThreadSafeStore

log = structlog.get_logger(__name__)

LABEL_GATEWAY = "ovn.kubernetes.io/vpc-egress-gateway"
ANNOTATION_PORT_SECURITY = "ovn.kubernetes.io/port_security"
LABEL_VPC_ID = "cozystack.io/vpcId"

PODS = Resource("", "v1", "pods", namespaced=True, kind="Pod")
REPLICASETS = Resource("apps", "v1", "replicasets", namespaced=True, kind="ReplicaSet")
DEPLOYMENTS = Resource("apps", "v1", "deployments", namespaced=True, kind="Deployment")
VPC_EGRESS_GATEWAYS = Resource("kubeovn.io", "v1", "vpc-egress-gateways", namespaced=True, kind="VpcEgressGateway")


def controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


class EgressGatewayPodReconciler:
    """Reconciles one gateway Pod key ``<namespace>/<name>``.

    :param pods: the Pod store (only pods carrying the gateway label are cached).
    """

    def __init__(self, pods: ThreadSafeStore, writer: KubeWriter, events: EventRecorder | None = None) -> None:
        self.pods = pods
        self.writer = writer
        self.events = events

    def reconcile(self, key: str) -> Result:
        pod = self.pods.get(key)
        if pod is None:
            return Result()
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return Result()
        if (meta.get("annotations") or {}).get(ANNOTATION_PORT_SECURITY) == "false":
            return Result()
        why = self.not_ours(pod)
        if why is not None:
            log.debug("not an egress gateway pod of a cozystack VPC", pod=key, reason=why)
            return Result()
        patch = {"metadata": {"annotations": {ANNOTATION_PORT_SECURITY: "false"}}}
        try:
            self.writer.merge_patch(PODS, meta["name"], patch, meta["namespace"])
        except ApiError as err:
            if err.not_found:
                return Result()
            raise
        log.info("turned port security off on egress gateway pod", pod=key)
        if self.events is not None:
            self.events.event(pod, NORMAL, "PortSecurityDisabled",
                              "turned OVN port security off: the pod is an egress gateway of its VPC")
        return Result()

    def _controller(
        self, obj: Mapping[str, Any], res: Resource, ns: str, wrong_kind: str
    ) -> tuple[dict[str, Any] | None, str]:
        """The ``res``-kind (apps/v1) controller of ``obj``, read from the API with its UID
        checked; else (None, why): ``wrong_kind`` for another controller, "" when missing."""
        ref = controller_ref(obj)
        if not ref or ref.get("kind") != res.kind or ref.get("apiVersion") != "apps/v1":
            return None, wrong_kind
        owner = self.writer.get_or_none(res, ref.get("name", ""), ns)
        if owner is None or owner["metadata"].get("uid") != ref.get("uid"):
            return None, ""
        return owner, ""

    def not_ours(self, pod: Mapping[str, Any]) -> str | None:
        """None when the ownership chain holds, else why not ("" when a link is missing).

        :raises ApiError: for API failures other than NotFound (retried with backoff).
        """
        meta = pod.get("metadata") or {}
        ns = meta["namespace"]
        gw_name = (meta.get("labels") or {}).get(LABEL_GATEWAY, "")
        rs, why = self._controller(pod, REPLICASETS, ns, "pod is not controlled by a ReplicaSet")
        if rs is None:
            return why
        dep, why = self._controller(rs, DEPLOYMENTS, ns, "ReplicaSet is not controlled by a Deployment")
        if dep is None:
            return why
        owner = None
        for r in dep["metadata"].get("ownerReferences") or []:
            if r.get("kind") == "VpcEgressGateway" and r.get("apiVersion") == "kubeovn.io/v1" and r.get("name") == gw_name:
                owner = r
                break
        if owner is None:
            return f'Deployment is not owned by VpcEgressGateway "{gw_name}"'
        gw = self.writer.get_or_none(VPC_EGRESS_GATEWAYS, gw_name, ns)
        if gw is None or gw["metadata"].get("uid") != owner.get("uid"):
            return ""
        vpc_id = (gw["metadata"].get("labels") or {}).get(LABEL_VPC_ID, "")
        if not vpc_id or vpc_id != (gw.get("spec") or {}).get("vpc"):
            return "VpcEgressGateway was not rendered by the vpc chart for its own VPC"
        return None
