"""The egress reroute policies of each logical router, as the NB client's copy holds them.

Kube-OVN puts a VpcEgressGateway's reroutes on its VPC's ``Logical_Router`` as
``Logical_Router_Policy`` rows of priority 29100 (``controller.rules.egress_reroute``). The NB
client replicates only those rows (a ``monitor_cond`` condition on ``priority``: the many
other policies Kube-OVN keeps never reach this process) with ``priority``, ``action`` and
``match``, and of ``Logical_Router`` only ``name`` and ``policies``.

:class:`RouterPolicyView` keeps ``router name -> {(priority, action, match)}`` up to date on
the IDL's owner thread (rebuilt at every sync, one router at a time on its row changes,
every router on a policy row change: routers are one per VPC) and answers from any thread
without a round trip. It never writes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import ovs.db.idl

ROUTER = "Logical_Router"
POLICY = "Logical_Router_Policy"
#: The columns read (the gateway applier's NB client registers them beside ``ovn.nb.TABLES``).
TABLES: dict[str, list[str]] = {
    ROUTER: ["name", "policies"],
    POLICY: ["priority", "action", "match"],
}
#: Kube-OVN's util.EgressGatewayPolicyPriority: the only policies replicated.
REROUTE_PRIORITY = 29100
CONDITIONS = {POLICY: [["priority", "==", REROUTE_PRIORITY]]}

Policy = tuple[int, str, str]


def _fold(match: Any) -> str:
    return " ".join(str(match or "").split())


def _policies(row: ovs.db.idl.Row) -> frozenset[Policy]:
    out = set()
    refs = getattr(row, "policies", None) or []
    for p in refs if isinstance(refs, (list, tuple, set, frozenset)) else [refs]:
        try:
            priority = int(getattr(p, "priority", -1))
        except (TypeError, ValueError):
            continue
        if priority == REROUTE_PRIORITY:
            out.add((priority, str(getattr(p, "action", "") or ""), _fold(getattr(p, "match", ""))))
    return frozenset(out)


class RouterPolicyView:
    """``router name -> its priority-29100 policies``, readable from any thread.

    :param on_router: called on the owner thread with a router's name when its policies (or
        its existence) change after the first sync: the networks of that VPC look again.
    """

    def __init__(self, on_router: Callable[[str], None] | None = None) -> None:
        self.on_router = on_router or (lambda name: None)
        self._lock = threading.Lock()
        self._routers: dict[str, frozenset[Policy]] = {}
        self._ready = threading.Event()

    # -- reads (any thread) ----------------------------------------------------------
    def router(self, name: str) -> tuple[bool, bool, frozenset[Policy]]:
        """``(known, present, policies)`` of router ``name``; known False until the first
        sync and while the NB is lost."""
        with self._lock:
            if not self._ready.is_set():
                return (False, False, frozenset())
            if name not in self._routers:
                return (True, False, frozenset())
            return (True, True, self._routers[name])

    # -- owner thread ----------------------------------------------------------------
    def _read(self, idl: ovs.db.idl.Idl) -> dict[str, frozenset[Policy]]:
        out: dict[str, frozenset[Policy]] = {}
        table = idl.tables.get(ROUTER) if idl is not None else None
        for row in (table.rows.values() if table is not None else ()):
            name = str(getattr(row, "name", "") or "")
            if name:
                out[name] = out.get(name, frozenset()) | _policies(row)
        return out

    def _replace(self, seen: dict[str, frozenset[Policy]]) -> list[str]:
        """Install ``seen``; the names whose entry changed."""
        with self._lock:
            changed = sorted(n for n in set(self._routers) | set(seen) if self._routers.get(n) != seen.get(n))
            self._routers = seen
        return changed

    def on_row(self, event: str, row: ovs.db.idl.Row, old: ovs.db.idl.Row | None = None) -> None:
        if not self._ready.is_set():
            return  # the sync that follows reads every router
        for name in self._replace(self._read(row._idl)):
            self.on_router(name)

    def on_sync(self, idl: ovs.db.idl.Idl | None) -> None:
        changed = self._replace(self._read(idl))
        was_ready = self._ready.is_set()
        self._ready.set()
        if was_ready:
            for name in changed:
                self.on_router(name)

    def on_lost(self) -> None:
        self._ready.clear()
