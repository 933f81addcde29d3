"""The one small writer (and uncached reader) the reconcilers talk to the API server through.

Requests go through the official client's :class:`kubernetes.client.ApiClient` (auth,
TLS, connection pool) with plain JSON bodies, so CRDs and third-party kinds need no
generated models. Every write the controller makes passes through :class:`KubeWriter`,
which is what makes "a pass that changes nothing writes nothing" checkable.

Finalizers are changed with RFC 6902 JSON patches whose ``test`` operations pin the
list position and value, never by a merge patch of the whole list
(``product-decisions.md`` §4.10, field-reports.md B14).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from kubernetes import client as k8s

from controller.credentials import RotatingTokenApiClient
from informers.resource import Resource

log = structlog.get_logger(__name__)

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
# A write that hangs must not hold a worker (and the provider lock) forever.
REQUEST_TIMEOUT = (5, 30)


class ApiError(Exception):
    """A non-2xx answer: ``status`` (HTTP code), ``reason`` (Status.reason), ``message``."""

    def __init__(self, status: int, reason: str, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.details = dict(details or {})

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def invalid(self) -> bool:
        # 422 from a failed JSON-patch ``test`` op or validation.
        return self.status == 422

    @property
    def test_failed(self) -> bool:
        """A JSON patch did not apply to the object as it is now (a ``test`` op found
        another value, or a path it names is gone): the object changed since it was read,
        a conflict, not bad input. Raised by :meth:`KubeWriter.json_patch` with status 409
        and reason ``PatchTestFailed``."""
        return self.status == 409 and self.reason == PATCH_TEST_FAILED


# kube-apiserver answers a JSON patch that does not apply with 422 "Invalid", the generic
# "the server rejected our request due to an error in our request" and no details (seen on
# v1.37: k8s.io/apiserver's patcher wraps the json-patch error that way), while a patched
# object that fails validation gets details.causes naming the field.
PATCH_TEST_FAILED = "PatchTestFailed"


def object_path(resource: Resource, name: str, namespace: str | None = None, subresource: str = "") -> str:
    path = f"{resource.path(namespace)}/{name}"
    return f"{path}/{subresource}" if subresource else path


def finalizer_add_patch(obj: Mapping[str, Any], finalizer: str) -> list[dict[str, Any]]:
    """JSON patch adding ``finalizer`` without touching anyone else's entries.

    Guarded by the list as read (field-reports.md B14: never re-add a list we read stale): appended after a
    ``test`` of the whole list, or, with no list yet, made after a ``test`` that there is none
    (an ``add`` of the list would replace one made meanwhile). A write of other fields in
    between (a peer's defaulting, its status) does not refuse it: a guard on the whole object
    was refused with a 422 whenever a peer had just written it. A failed test is a 409 to the
    caller, which re-reads.
    """
    fins = (obj.get("metadata") or {}).get("finalizers")
    if fins:
        return [{"op": "test", "path": "/metadata/finalizers", "value": list(fins)},
                {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}]
    # A test for null passes only while there is no list (the API server's RFC 6902 test of a
    # missing member against null), so a list made meanwhile is never replaced.
    return [{"op": "test", "path": "/metadata/finalizers", "value": None},
            {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}]


def finalizer_remove_patch(obj: Mapping[str, Any], finalizer: str) -> list[dict[str, Any]] | None:
    """JSON patch removing our ``finalizer`` at its index, guarded by a ``test`` of that
    index's value, or None when it is not present. A concurrent edit that moved the entry
    makes the ``test`` fail (422), never removes someone else's finalizer."""
    fins = list((obj.get("metadata") or {}).get("finalizers") or [])
    if finalizer not in fins:
        return None
    i = fins.index(finalizer)
    return [
        {"op": "test", "path": f"/metadata/finalizers/{i}", "value": finalizer},
        {"op": "remove", "path": f"/metadata/finalizers/{i}"},
    ]


def annotation_patch(obj: Mapping[str, Any], key: str, value: str | None) -> list[dict[str, Any]]:
    """JSON patch setting (or removing, for None) one annotation, guarded by resourceVersion."""
    meta = obj.get("metadata") or {}
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion", "")}
    ]
    path = "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")
    annotations = meta.get("annotations")
    if value is None:
        ops.append({"op": "remove", "path": path})
    elif not annotations:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {key: value}})
    else:
        ops.append({"op": "add", "path": path, "value": value})
    return ops


class KubeWriter:
    """Typed helpers over one :class:`ApiClient`. Raises :class:`ApiError` on non-2xx.

    ``writes`` counts the write requests sent (create/update/patch/delete), for logs and
    the steady-state checks.

    :param fence: called just before every write request is handed to the HTTP client (and
        before the one retry after a 401); it raises to refuse the write, which is then not
        sent at all. ``controller.main`` passes the leader fence
        (:meth:`controller.runtime.leader.LeaderElector.fence`, field-reports.md S3): once the renew
        deadline has passed, no create, update, patch or delete leaves the process. Reads
        are never fenced. None: every write is sent (no leader election, tests).
    """

    def __init__(self, api_client: k8s.ApiClient, fence: Callable[[], None] | None = None) -> None:
        self.api = api_client
        self.fence = fence
        self.writes = 0

    # -- transport ---------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        query: list[tuple[str, str]] | None = None,
        timeout: tuple[float, float] | None = None,
    ) -> dict[str, Any]:
        """One request. ``timeout``: (connect, read) seconds, :data:`REQUEST_TIMEOUT` when
        None (the leader elector bounds its own by the renew deadline).

        :raises controller.runtime.result.LostLeadership: (or whatever the fence raises) for a write
            the fence refused; nothing was sent.
        """
        write = method != "GET"
        try:
            m, url, headers, body_out, post = self.api.param_serialize(
                method=method,
                resource_path=path,
                query_params=query or [],
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
            )
            fence = self.fence if write else None
            if fence is not None:
                fence()  # field-reports.md S3: the last moment before the request leaves the process
            if write:
                self.writes += 1
            retry_fenced = fence is not None and isinstance(self.api, RotatingTokenApiClient)
            extra = {"before_retry": fence} if retry_fenced else {}
            resp = self.api.call_api(m, url, header_params=headers, body=body_out, post_params=post,
                                     _request_timeout=timeout or REQUEST_TIMEOUT, **extra)
            data = resp.read()
        except k8s.ApiException as exc:
            raise _api_error(exc) from None
        if not 200 <= resp.status <= 299:
            raise _api_error(k8s.ApiException(status=resp.status, reason=resp.reason, body=data))
        return json.loads(data) if data else {}

    # -- reads (uncached) ----------------------------------------------------------
    def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self.request("GET", object_path(resource, name, namespace))

    def get_or_none(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object as the API server has it now, or None when it answers 404.

        :raises ApiError: any other error (a 404 of the resource type itself, a CRD not
            installed, is also None: the object cannot exist)."""
        try:
            return self.get(resource, name, namespace)
        except ApiError as err:
            if err.not_found:
                return None
            raise

    # -- writes ------------------------------------------------------------------
    def create(self, resource: Resource, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        return self.request("POST", resource.path(namespace), obj)

    def json_patch(
        self, resource: Resource, name: str, ops: list[dict[str, Any]], namespace: str | None = None
    ) -> dict[str, Any]:
        """Apply RFC 6902 ``ops``.

        :raises ApiError: status 409, reason ``PatchTestFailed`` when the patch does not
            apply to the object as it is now (a failed ``test`` op: it changed since it was
            read; re-read and retry); any other error as the API server gave it."""
        try:
            return self.request("PATCH", object_path(resource, name, namespace), ops, JSON_PATCH)
        except ApiError as err:
            if err.status == 422 and not err.details.get("causes") and not err.details.get("name"):
                raise ApiError(409, PATCH_TEST_FAILED,
                               f"the JSON patch did not apply: the object changed since it was read ({err.message})",
                               err.details) from None
            raise

    def merge_patch(
        self, resource: Resource, name: str, patch: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        return self.request("PATCH", object_path(resource, name, namespace), patch, MERGE_PATCH)

    def update_status(self, resource: Resource, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        """PUT the status subresource; the object's resourceVersion makes a stale write 409.
        The answer is the object as stored (after the CRD's pruning): the write's read-back.
        ``dry_run``: validated, pruned and answered, never stored."""
        meta = obj["metadata"]
        path = object_path(resource, meta["name"], meta.get("namespace"), "status")
        return self.request("PUT", path, obj, query=[("dryRun", "All")] if dry_run else None)

    def delete(self, resource: Resource, name: str, namespace: str | None = None,
               uid: str | None = None) -> dict[str, Any]:
        """DELETE; with ``uid``, only that very object (``preconditions.uid``: a 409 when the
        name now belongs to another). Returns the object, Terminating, while finalizers hold
        it, else the API server's Status."""
        body = {"preconditions": {"uid": uid}} if uid else None
        return self.request("DELETE", object_path(resource, name, namespace), body)

    def add_finalizer(self, resource: Resource, obj: Mapping[str, Any], finalizer: str) -> dict[str, Any]:
        """Append ``finalizer`` (:func:`finalizer_add_patch`).

        :raises ApiError: 409 ``PatchTestFailed`` when the object changed since it was read,
            including when it started deleting meanwhile (the API server refuses a new
            finalizer on a deleting object with a 422: a re-read sees the deletion)."""
        meta = obj["metadata"]
        try:
            return self.json_patch(resource, meta["name"], finalizer_add_patch(obj, finalizer), meta.get("namespace"))
        except ApiError as err:
            if err.invalid and "being deleted" in err.message:
                raise ApiError(409, PATCH_TEST_FAILED, f"the object started deleting since it was read ({err.message})",
                               err.details) from None
            raise

    def remove_finalizer(self, resource: Resource, obj: Mapping[str, Any], finalizer: str) -> dict[str, Any] | None:
        ops = finalizer_remove_patch(obj, finalizer)
        if ops is None:
            return None
        meta = obj["metadata"]
        return self.json_patch(resource, meta["name"], ops, meta.get("namespace"))


def _api_error(exc: k8s.ApiException) -> ApiError:
    reason, message, details = exc.reason or "", "", {}
    try:
        status = json.loads(exc.body or b"{}")
        reason = status.get("reason") or reason
        message = status.get("message") or ""
        details = status.get("details") if isinstance(status.get("details"), dict) else {}
    except (ValueError, TypeError, AttributeError):
        message = str(exc.body or "")[:500]
    return ApiError(int(exc.status or 0), str(reason), str(message), details)
