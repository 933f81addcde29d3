"""Count API writes per user from the test bed's audit log (product-decisions.md §7).

The bed's audit policy logs every request at level Metadata, stages ResponseStarted and
ResponseComplete, as JSON lines in ``cluster.audit_log``. A "write" is a create, update,
patch, delete or deletecollection request that completed (stage ResponseComplete), on any
resource except ``leases`` (leader election renews constantly and is not counted).

Closing the window deterministically::

    before = write_marker(cluster)            # optional lower bound
    ... let the controller finish its pass ...
    marker = write_marker(cluster)
    writes = writes_before(cluster, cluster.controller_user, marker, since_marker=before)
    assert writes == [], format_writes(writes)

Markers are ConfigMaps created by the admin; the window is defined by the time the API
server *received* each request (``requestReceivedTimestamp``), not by line order, so a
write that finished just after the marker's line but was received before it still counts.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
EXCLUDED_RESOURCES = frozenset({"leases"})
MARKER_NAMESPACE = "default"
MARKER_PREFIX = "audit-marker-"


@dataclass(frozen=True)
class AuditWrite:
    verb: str
    resource: str
    subresource: str
    api_group: str
    api_version: str
    namespace: str
    name: str
    code: int
    user: str
    received: _dt.datetime
    audit_id: str
    request_uri: str
    user_agent: str

    def __str__(self) -> str:
        obj = f"{self.namespace}/{self.name}" if self.namespace else self.name
        sub = f"/{self.subresource}" if self.subresource else ""
        group = f".{self.api_group}" if self.api_group else ""
        return f"{self.verb} {self.resource}{group}{sub} {obj} -> {self.code}"


def _parse_ts(ts: str) -> _dt.datetime:
    # e.g. 2026-11-29T20:50:00.123456Z
    return _dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))


def _audit_path(cluster_or_path: Any) -> Path:
    if isinstance(cluster_or_path, (str, Path)):
        return Path(cluster_or_path)
    return Path(cluster_or_path.audit_log)


# path -> (first line, bytes consumed, parsed events). The log only grows (no rotation),
# so each call parses just the new complete lines. The first line (it carries a unique
# auditID) tells a recreated file at the same path from the old one.
_cache: dict[Path, tuple[bytes, int, list[dict]]] = {}
_cache_lock = threading.Lock()


def read_events(cluster_or_path: Any) -> list[dict]:
    """Every complete JSON line of the audit log so far (a partly written last line waits)."""
    path = _audit_path(cluster_or_path)
    with _cache_lock:
        return _read_events_locked(path)


def _read_events_locked(path: Path) -> list[dict]:
    try:
        with open(path, "rb") as f:
            first = f.readline()
            if not first.endswith(b"\n"):
                return []
            size = os.fstat(f.fileno()).st_size
            ident, offset, events = _cache.get(path, (first, 0, []))
            if ident != first or size < offset:
                offset, events = 0, []
            f.seek(offset)
            chunk = f.read(size - offset)
    except FileNotFoundError:
        return []
    end = chunk.rfind(b"\n") + 1  # only whole lines
    for line in chunk[:end].splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    _cache[path] = (first, offset + end, events)
    return list(events)


def _to_write(ev: dict) -> AuditWrite:
    ref = ev.get("objectRef") or {}
    return AuditWrite(
        verb=ev.get("verb", ""),
        resource=ref.get("resource", ""),
        subresource=ref.get("subresource", ""),
        api_group=ref.get("apiGroup", ""),
        api_version=ref.get("apiVersion", ""),
        namespace=ref.get("namespace", ""),
        name=ref.get("name", ""),
        code=int((ev.get("responseStatus") or {}).get("code", 0)),
        user=(ev.get("user") or {}).get("username", ""),
        received=_parse_ts(ev["requestReceivedTimestamp"]),
        audit_id=ev.get("auditID", ""),
        request_uri=ev.get("requestURI", ""),
        user_agent=ev.get("userAgent", ""),
    )


def _is_write(ev: dict, exclude: Iterable[str]) -> bool:
    if ev.get("stage") != "ResponseComplete" or ev.get("verb") not in WRITE_VERBS:
        return False
    ref = ev.get("objectRef")
    if not ref:
        return False
    return ref.get("resource") not in set(exclude)


def _marker_event(events: list[dict], marker: str) -> dict | None:
    for ev in events:
        ref = ev.get("objectRef") or {}
        if (
            ev.get("stage") == "ResponseComplete"
            and ev.get("verb") == "create"
            and ref.get("resource") == "configmaps"
            and ref.get("namespace") == MARKER_NAMESPACE
            and ref.get("name") == marker
        ):
            return ev
    return None


def audit_writes(
    cluster: Any,
    user: str,
    since_marker: str | None = None,
    until_marker: str | None = None,
    exclude_resources: Iterable[str] = EXCLUDED_RESOURCES,
) -> list[AuditWrite]:
    """Writes by ``user`` (every resource but ``exclude_resources``), oldest first.

    With ``since_marker`` only requests received after that marker's create; with
    ``until_marker`` only those received before it. Markers must already be in the log
    (see :func:`wait_for_marker`); a missing marker raises LookupError.
    """
    events = read_events(cluster)
    lo = hi = None
    if since_marker is not None:
        ev = _marker_event(events, since_marker)
        if ev is None:
            raise LookupError(f"marker {since_marker!r} is not in the audit log")
        lo = _parse_ts(ev["requestReceivedTimestamp"])
    if until_marker is not None:
        ev = _marker_event(events, until_marker)
        if ev is None:
            raise LookupError(f"marker {until_marker!r} is not in the audit log")
        hi = _parse_ts(ev["requestReceivedTimestamp"])
    out = []
    for ev in events:
        if not _is_write(ev, exclude_resources):
            continue
        if (ev.get("user") or {}).get("username") != user:
            continue
        w = _to_write(ev)
        if lo is not None and w.received <= lo:
            continue
        if hi is not None and w.received >= hi:
            continue
        if w.resource == "configmaps" and w.name.startswith(MARKER_PREFIX):
            continue
        out.append(w)
    out.sort(key=lambda w: w.received)
    return out


def write_marker(cluster: Any) -> str:
    """Create a marker ConfigMap as admin (in ``default``); returns its name."""
    from kubernetes import client

    name = f"{MARKER_PREFIX}{secrets.token_hex(6)}"
    api = cluster.api_client("admin")
    try:
        client.CoreV1Api(api).create_namespaced_config_map(
            MARKER_NAMESPACE,
            client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels={"pnc.test/audit-marker": "true"})),
        )
    finally:
        api.close()
    return name


def wait_for_marker(cluster: Any, marker: str, timeout: float = 30.0) -> dict:
    """Wait until the marker's create is in the audit log; returns its event."""
    deadline = time.monotonic() + timeout
    while True:
        ev = _marker_event(read_events(cluster), marker)
        if ev is not None:
            return ev
        if time.monotonic() > deadline:
            raise TimeoutError(f"audit marker {marker!r} did not appear in {_audit_path(cluster)} within {timeout}s")
        time.sleep(0.05)


def writes_before(
    cluster: Any,
    user: str,
    marker: str,
    since_marker: str | None = None,
    timeout: float = 30.0,
    exclude_resources: Iterable[str] = EXCLUDED_RESOURCES,
) -> list[AuditWrite]:
    """Wait for ``marker`` in the audit log, then return ``user``'s writes received before it
    (and after ``since_marker`` when given)."""
    wait_for_marker(cluster, marker, timeout)
    return audit_writes(cluster, user, since_marker=since_marker, until_marker=marker,
                        exclude_resources=exclude_resources)


def writes_until_now(
    cluster: Any,
    user: str,
    since_marker: str | None = None,
    timeout: float = 30.0,
    exclude_resources: Iterable[str] = EXCLUDED_RESOURCES,
) -> tuple[list[AuditWrite], str]:
    """Write a fresh marker and return (``user``'s writes before it, the marker's name)."""
    marker = write_marker(cluster)
    return writes_before(cluster, user, marker, since_marker, timeout, exclude_resources), marker


def format_writes(writes: Iterable[AuditWrite]) -> str:
    return "\n".join(str(w) for w in writes) or "(no writes)"
