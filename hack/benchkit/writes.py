"""The controller's API writes in a window of the bed's audit log, between admin markers."""

from __future__ import annotations

import collections
from typing import Any

from hack.bed import LocalCluster
from hack.tools import audit


def mark(cluster: LocalCluster) -> str:
    """An audit-log marker written by the admin, once the audit log shows it."""
    m = audit.write_marker(cluster)
    audit.wait_for_marker(cluster, m)
    return m


def controller_writes_since(cluster: LocalCluster, marker: str) -> list:
    """The controller user's writes between ``marker`` and a new marker written now."""
    return audit.writes_before(cluster, cluster.controller_user, audit.write_marker(cluster), since_marker=marker,
                               timeout=60)


def writes_by_resource(writes) -> dict[str, int]:
    c = collections.Counter(f"{w.verb} {w.resource}{'/' + w.subresource if w.subresource else ''}" for w in writes)
    return dict(sorted(c.items()))


def record_writes(r: dict[str, Any], phase: str, cluster: LocalCluster, marker: str) -> None:
    """``r["<phase>_writes"]`` and ``r["<phase>_writes_by"]``: the controller user's API writes
    since the audit ``marker`` (all of them, and counted by verb and resource)."""
    w = controller_writes_since(cluster, marker)
    r[f"{phase}_writes"] = len(w)
    r[f"{phase}_writes_by"] = writes_by_resource(w)
