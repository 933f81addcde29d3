"""Which chassis serves each router port: a read-only view of OVN's Southbound
(product-decisions.md §10, "Status tells what serves, not what was written").

ovn-northd makes a chassis-redirect Port_Binding ``cr-<router port>`` of every router port
with an HA chassis group; the ovn-controller of the chassis that is active for the group
claims it (sets ``chassis``), and releases it when it stops being active (its BFD sessions
or its datapath gone: OVN controller/ha-chassis.c, controller/binding.c). That binding,
not the group the controller wrote in the NB, is the gateway that answers the VMs' ARP.

``SBReader`` replicates only ``Port_Binding`` rows of type ``chassisredirect`` (a
``monitor_cond`` condition: a VM's or pod's port never reaches this process) with
``logical_port``, ``type`` and ``chassis``, and ``Chassis`` with ``name`` and
``hostname``, over the same python-ovs client as the NB (``ovn.nb.NBClient``: address
list, TLS with the NB's Secret, reconnects, never serving an unsynced cache). It never
writes: an SB outage or restart can change no group and no VLAN, only what status says.
"""

from __future__ import annotations

import datetime as _dt
import threading
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import ovs.db.idl
import structlog

from ovn.nb import NBClient
from ovn.ovsdb import RowIndex

log = structlog.get_logger("ovn-sb")

DATABASE = "OVN_Southbound"
#: The only tables and columns read (product-decisions.md §10).
TABLES: dict[str, list[str]] = {
    "Port_Binding": ["logical_port", "type", "chassis"],
    "Chassis": ["name", "hostname"],
}
CHASSIS_REDIRECT = "chassisredirect"
CONDITIONS = {"Port_Binding": [["type", "==", CHASSIS_REDIRECT]]}
CR_PREFIX = "cr-"


def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


@attrs.frozen
class Binding:
    """What the SB says of router port ``port``'s ``cr-`` binding, as of one read.

    :ivar known: the SB copy is synced; when False every other field but ``error`` and
        ``since`` (the start of the outage) means nothing.
    :ivar present: ovn-northd has made ``cr-<port>``.
    :ivar chassis: the SB ``Chassis.name`` (the OVS system-id, the name the NB group uses)
        of the chassis that holds it; "" when unbound.
    :ivar hostname: that chassis's ``hostname`` ("" when unbound).
    :ivar since: when this process first saw the current (present, chassis) pair, aware
        UTC; for an unknown binding, when the SB was lost.
    """

    known: bool
    present: bool = False
    chassis: str = ""
    hostname: str = ""
    since: _dt.datetime | None = None
    error: str = ""

    @property
    def bound(self) -> bool:
        return self.known and bool(self.chassis)


def _refs(row: ovs.db.idl.Row, column: str) -> list[Any]:
    v = getattr(row, column, None)
    if v is None:
        return []
    if isinstance(v, (list, tuple, set, frozenset)):
        return list(v)
    return [v]


def _port_of(row: ovs.db.idl.Row) -> str:
    name = str(getattr(row, "logical_port", "") or "")
    return name[len(CR_PREFIX):] if name.startswith(CR_PREFIX) else ""


class SBReader:
    """The ``cr-`` bindings of the SB, readable from any thread without a round trip.

    :param addresses: SB remotes (``ssl:``/``tcp:``/``unix:``, as the NB's), any member of
        a cluster or a relay (reads only).
    :param on_port: called with a router port name when its binding changes (owner thread):
        the networks of that port re-check their status within a second.
    :param on_sync: called after each (re)sync; ``on_lost`` when a synced copy is lost.
    :param clock: aware-UTC now.
    """

    def __init__(
        self,
        addresses: str | Iterable[str],
        *,
        tls_source: Any = None,
        on_port: Callable[[str], None] | None = None,
        on_sync: Callable[[], None] | None = None,
        on_lost: Callable[[], None] | None = None,
        clock: Callable[[], _dt.datetime] = utc_now,
    ) -> None:
        self.on_port = on_port or (lambda port: None)
        self._on_sync_cb = on_sync
        self._on_lost_cb = on_lost
        self.clock = clock
        self._lock = threading.Lock()
        self._state: dict[str, tuple[bool, str, str]] = {}  # port -> (present, chassis, hostname)
        self._since: dict[str, _dt.datetime] = {}
        self._lost_since: _dt.datetime | None = None
        # Set at the end of a (re)sync, once the bindings are read: the client's own synced
        # flag is up before on_sync runs.
        self._ready = threading.Event()
        self.by_chassis = RowIndex("Port_Binding", lambda r: [str(c.uuid) for c in _refs(r, "chassis")])
        self.client = NBClient(
            addresses, leader_only=False, database=DATABASE, tables=TABLES, label="OVN SB",
            conditions=CONDITIONS, on_row=self._on_row, on_sync=self._on_sync, on_lost=self._on_lost,
            indexes=[self.by_chassis], tls_source=tls_source,
        )

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> "SBReader":
        self.client.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.client.stop(timeout)

    def synced(self) -> bool:
        return self._ready.is_set() and self.client.synced()

    def wait_synced(self, timeout: float | None = None, cancel: threading.Event | None = None) -> bool:
        """Up to ``timeout`` seconds for the first copy with its bindings read (False on
        timeout, when ``cancel`` is set or the reader stopped)."""
        if not self.client.wait_synced(timeout, cancel):
            return False
        return self._ready.wait(1.0) or self._ready.is_set()

    # -- reads (any thread) ----------------------------------------------------------
    def binding(self, port: str) -> Binding:
        """The binding of router port ``port`` (``<vpc>-<subnet>``) as last seen."""
        with self._lock:
            if not (self._ready.is_set() and self.client.synced()):
                return Binding(False, since=self._lost_since, error=self.client.last_error or "not synced yet")
            present, chassis, hostname = self._state.get(port, (False, "", ""))
            since = self._since.get(port)
            if since is None:
                since = self._since[port] = self.clock()
        return Binding(True, present, chassis, hostname, since)

    # -- owner thread ----------------------------------------------------------------
    @staticmethod
    def _read(row: ovs.db.idl.Row | None) -> tuple[bool, str, str]:
        if row is None:
            return (False, "", "")
        ch = _refs(row, "chassis")
        if not ch:
            return (True, "", "")
        return (True, str(getattr(ch[0], "name", "") or ""), str(getattr(ch[0], "hostname", "") or ""))

    def _set(self, port: str, value: tuple[bool, str, str]) -> bool:
        """Record a port's binding; True when it changed (its ``since`` restarts)."""
        with self._lock:
            if self._state.get(port, (False, "", "")) == value and port in self._since:
                return False
            if value == (False, "", ""):
                self._state.pop(port, None)
            else:
                self._state[port] = value
            self._since[port] = self.clock()
        return True

    def _on_row(self, event: str, row: ovs.db.idl.Row, old: ovs.db.idl.Row | None = None) -> None:
        table = row._table.name
        if table == "Port_Binding":
            port = _port_of(row)
            if not port:
                return
            value = (False, "", "") if event == ovs.db.idl.ROW_DELETE else self._read(row)
            ports = {port: value}
        elif table == "Chassis":
            # The bindings that name this chassis, read again (its name or hostname changed).
            ports = {_port_of(r): self._read(r) for r in self.by_chassis.get(row._idl, str(row.uuid)) if _port_of(r)}
        else:
            return
        if not self._ready.is_set():
            return  # the sync that follows reads every port
        for port, value in ports.items():
            if self._set(port, value):
                log.info("gateway binding changed", routerPort=port, present=value[0], chassis=value[1])
                self.on_port(port)

    def _on_sync(self) -> None:
        idl = self.client._idl
        seen: dict[str, tuple[bool, str, str]] = {}
        if idl is not None:
            for row in idl.tables["Port_Binding"].rows.values():
                port = _port_of(row)
                if port:
                    seen[port] = self._read(row)
        with self._lock:
            ports = set(self._state) | set(seen)
            self._lost_since = None
        changed = [port for port in sorted(ports) if self._set(port, seen.get(port, (False, "", "")))]
        self._ready.set()
        for port in changed:
            self.on_port(port)
        if self._on_sync_cb is not None:
            self._on_sync_cb()

    def _on_lost(self) -> None:
        with self._lock:
            self._ready.clear()
            self._lost_since = self.clock()
        if self._on_lost_cb is not None:
            self._on_lost_cb()
