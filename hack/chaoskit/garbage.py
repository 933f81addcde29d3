"""The harness's :class:`GarbageCollector`: kube-controller-manager's collection of claim-owned
IPAddresses whose claim is gone (the subprocess bed runs none), and the operator's removal of
the provider's ProtectAddress finalizer from an address made for a claim kube-apiserver
deleted under it (kubernetes/kubernetes#77988)."""

from __future__ import annotations

import threading

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from hack.bed import LocalCluster
from hack.chaoskit.common import IPAM_ADDR, log


PROTECT_ADDRESS = "ipam.cluster.x-k8s.io/ProtectAddress"  # the IPAM provider's finalizer on its addresses


class GarbageCollector:
    """What the bed lacks around IPAddresses whose owning IPAddressClaim is gone (by UID).

    * kube-controller-manager's garbage collector (the bed runs none): such an address in
      our namespaces is deleted (``collected``).
    * An operator's cleanup after a race of kube-apiserver's (kubernetes/kubernetes#77988,
      unfixed: its fix was reverted): a DELETE received before the provider's PATCH that adds
      its ReleaseAddress finalizer to a new claim, and completed after it, removes the claim
      anyway; the provider, from its cache, then makes the claim's address, with its
      ProtectAddress finalizer, which only its handling of the deleting claim would remove —
      and the claim is gone. In a cluster that address (rightly) holds its network InUse
      until someone removes the finalizer. Here: an address that is being deleted, carries
      ProtectAddress, and whose claim is gone on two sweeps in a row, has ProtectAddress
      removed (``orphans_released``, with the address names in ``orphans``).

    With the real provider nothing else leaves such addresses: it deletes a claim's address
    before its ReleaseAddress finalizer lets the claim go. The provider makes an address with
    two owners, its claim and its pool; where kube-controller-manager runs (the node bed of
    ``--pods``) its garbage collector drops the dangling claim reference and keeps the
    address (the pool still owns it), so an address with ProtectAddress and no claim owner is
    judged by the claim its ``spec.claimRef`` names. (This class was first written for
    the IPAM emulator, which had no such finalizer.)
    """

    def __init__(self, cluster: LocalCluster, namespaces: list[str]) -> None:
        self.api = cluster.api_client("admin")
        self.co = k8s.CustomObjectsApi(self.api)
        self.namespaces = set(namespaces)
        self.collected = 0
        self.orphans_released = 0
        self.orphans: list[str] = []
        self._suspects: set[str] = set()  # deleting orphans seen on the previous sweep (uids)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gc", daemon=True)

    def start(self) -> "GarbageCollector":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.api.close()

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.sweep()
            except Exception:  # noqa: BLE001 - API server down: next round
                pass

    def sweep(self) -> None:
        kw = {"_request_timeout": (5, 30)}
        # Addresses first: an address's owner claim was created before it, so a claim list
        # taken afterwards holds every owner still alive.
        addrs = self.co.list_cluster_custom_object(*IPAM_ADDR, "ipaddresses", **kw)["items"]
        listed = self.co.list_cluster_custom_object(*IPAM_ADDR, "ipaddressclaims", **kw)["items"]
        claims = {c["metadata"]["uid"] for c in listed}
        claim_names = {(c["metadata"]["namespace"], c["metadata"]["name"]) for c in listed}
        suspects: set[str] = set()
        for a in addrs:
            m = a["metadata"]
            if m.get("namespace") not in self.namespaces:
                continue
            owners = [o for o in m.get("ownerReferences") or [] if o.get("kind") == "IPAddressClaim"]
            claim_ref = ((a.get("spec") or {}).get("claimRef") or {}).get("name")
            if owners:
                if any(o.get("uid") in claims for o in owners):
                    continue
            elif not (PROTECT_ADDRESS in (m.get("finalizers") or []) and claim_ref
                      and (m["namespace"], claim_ref) not in claim_names):
                # Hand-written addresses (no finalizer of the provider's) are the load's own.
                # A provider-made one without a claim owner: kube-controller-manager's garbage
                # collector (the node bed runs it) dropped the dangling claim reference and
                # kept the pool's, so only spec.claimRef still names the claim.
                continue
            try:
                if not m.get("deletionTimestamp"):
                    self.co.delete_namespaced_custom_object(*IPAM_ADDR, m["namespace"], "ipaddresses", m["name"], **kw)
                    self.collected += 1
                    continue
                fins = m.get("finalizers") or []
                if PROTECT_ADDRESS not in fins:
                    continue
                if m["uid"] not in self._suspects:
                    suspects.add(m["uid"])  # again on the next sweep before it counts
                    continue
                # JSON patch guarded by a test of the list: only the provider's finalizer goes.
                ops = [{"op": "test", "path": "/metadata/finalizers", "value": fins},
                       {"op": "replace", "path": "/metadata/finalizers", "value": [f for f in fins if f != PROTECT_ADDRESS]}]
                self.co.patch_namespaced_custom_object(*IPAM_ADDR, m["namespace"], "ipaddresses", m["name"], ops,
                                                       _content_type="application/json-patch+json", **kw)
                self.orphans_released += 1
                self.orphans.append(f"{m['namespace']}/{m['name']}")
                log(f"IPAddress {m['namespace']}/{m['name']}: its claim is gone (kubernetes#77988 race), "
                    f"{PROTECT_ADDRESS} removed")
            except ApiException as exc:
                if exc.status not in (404, 409, 422):
                    raise
        self._suspects = suspects
