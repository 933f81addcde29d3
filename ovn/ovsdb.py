"""Reaching an OVSDB server and keeping rows of its tables: what the NB client and the SB reader share.

Remotes as OVS spells them (``tcp:``, ``ssl:``, ``unix:``), one-shot JSON-RPC calls
(``get_schema``, ``list_dbs``) over python-ovs streams, the schema helper that registers only
the columns we read, rows as plain dicts, a key -> rows index kept by row notifications, and
the abortive close every connection gets. The OVSDB protocol itself is python-ovs's.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from typing import Any, Callable, Iterable, Mapping, Sequence

import ovs.db.data
import ovs.db.idl
import ovs.json
import ovs.jsonrpc
import ovs.poller
import ovs.stream
import ovs.timeval
import ovs.util

DATABASE = "OVN_Northbound"


DIAL_TIMEOUT = 3.0  # seconds, per address, for the schema fetch


ABORTIVE_CLOSE = (socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def abortive_close(idl: ovs.db.idl.Idl, last: Any = None) -> Any:
    """Set :data:`ABORTIVE_CLOSE` on the socket of ``idl``'s current connection (or of the
    one it is opening) unless it is ``last`` (the socket this returned the time before, so
    each socket is set once). python-ovs opens a new socket at each reconnect, so this runs
    after every ``Idl.run`` and before every commit. Returns the socket looked at."""
    sess = getattr(idl, "_session", None)
    stream = getattr(getattr(sess, "rpc", None), "stream", None) or getattr(sess, "stream", None)
    sock = getattr(stream, "socket", None)
    if sock is None:
        return last
    if sock is not last:
        try:
            sock.setsockopt(*ABORTIVE_CLOSE)
        except (OSError, AttributeError):
            pass  # a socket already closed, or a kind without the option
    return sock


class NBError(Exception):
    pass


class NBNotSynced(NBError):
    """The IDL has not applied a full update on the current connection."""


class NBClosed(NBError):
    pass


def _check_host_port(address: str, kind: str, rest: str) -> None:
    """``<host>:<port>`` of a tcp/ssl remote, an IPv6 host in brackets (OVS' own syntax,
    ovsdb-server(1) "Active Database Connection Methods"); the errors name what to fix."""
    if rest.startswith("["):
        host, sep, tail = rest[1:].partition("]")
        if not sep or not host:
            raise NBError(f'OVSDB address "{address}": missing "]" after the IPv6 host')
        if not tail.startswith(":") or not tail[1:]:
            raise NBError(f'OVSDB address "{address}": missing port in address')
        port = tail[1:]
    else:
        if ":" not in rest:
            raise NBError(f'OVSDB address "{address}": missing port in address')
        host, port = rest.rsplit(":", 1)
        if ":" in host:
            raise NBError(f'OVSDB address "{address}": an IPv6 host must be in brackets, '
                          f'as in {kind}:[{host}]:{port}')
        if not host:
            raise NBError(f'OVSDB address "{address}": missing host in address')
    if not port.isdigit():
        raise NBError(f'OVSDB address "{address}": port "{port}" is not a number')
    if not 0 < int(port) < 65536:
        raise NBError(f'OVSDB address "{address}": port {int(port)} is out of range (1-65535)')


def parse_addresses(addresses: str | Iterable[str]) -> list[str]:
    """Comma-separated (or listed) OVSDB remotes, trimmed, empties skipped."""
    if isinstance(addresses, str):
        items = addresses.split(",")
    else:
        items = [a for part in addresses for a in part.split(",")]
    out: list[str] = []
    for a in (i.strip() for i in items):
        if not a:
            continue
        kind, _, rest = a.partition(":")
        if kind not in ("tcp", "ssl", "unix") or not rest:
            raise NBError(f'OVSDB address "{a}": want ssl:<host>:<port>, tcp:<host>:<port> or unix:<path>')
        if kind in ("tcp", "ssl"):
            _check_host_port(a, kind, rest)
        out.append(a)
    if not out:
        raise NBError("no OVSDB address given")
    return out


def jsonrpc_call(remote: str, method: str, params: list, timeout: float = DIAL_TIMEOUT) -> Any:
    """One JSON-RPC request to ``remote`` on a fresh python-ovs stream (for ``ssl:`` with
    python-ovs' process-wide TLS settings), bounded by ``timeout`` seconds; its result.

    :raises NBError: ``<remote>: connect: <err>`` when the stream does not open;
        ``<remote>: <method>: <error | timed out | connection closed | os error>``.
    """
    deadline = ovs.timeval.msec() + int(timeout * 1000)
    err, stream = ovs.stream.Stream.open_block(ovs.stream.Stream.open(remote), int(timeout * 1000))
    if err:
        raise NBError(f"{remote}: connect: {os.strerror(err)}")
    rpc = ovs.jsonrpc.Connection(stream)
    try:
        req = ovs.jsonrpc.Message.create_request(method, params)
        err = rpc.send(req)
        while not err:
            rpc.run()
            err, msg = rpc.recv()
            if err == 0 and msg is not None:
                if msg.id != req.id:
                    continue
                if msg.type == ovs.jsonrpc.Message.T_ERROR or msg.error is not None:
                    raise NBError(f"{remote}: {method}: {ovs.json.to_string(msg.error)}")
                return msg.result
            if err and err != errno.EAGAIN:
                break
            err = 0
            now = ovs.timeval.msec()
            if now >= deadline:
                raise NBError(f"{remote}: {method}: timed out")
            poller = ovs.poller.Poller()
            rpc.wait(poller)
            rpc.recv_wait(poller)
            poller.timer_wait_until(deadline)
            poller.block()
        reason = "connection closed" if err == ovs.util.EOF else os.strerror(err)
        raise NBError(f"{remote}: {method}: {reason}")
    finally:
        rpc.close()


def fetch_schema(remote: str, timeout: float = DIAL_TIMEOUT, database: str = DATABASE) -> dict:
    """``get_schema`` of ``database`` from one remote, bounded by ``timeout`` seconds.

    :raises NBError: as ``jsonrpc_call``.
    """
    return jsonrpc_call(remote, "get_schema", [database], timeout)


def schema_helper(schema_json: dict, tables: Mapping[str, list[str]]) -> ovs.db.idl.SchemaHelper:
    """The server's schema with only ``tables`` (table -> columns) registered."""
    helper = ovs.db.idl.SchemaHelper(schema_json=schema_json)
    for table, columns in tables.items():
        helper.register_columns(table, columns)
    return helper


def _atom_str(atom: Any, _base: Any = None) -> str:
    return str(atom)


def row_dict(row: ovs.db.idl.Row, columns: Sequence[str]) -> dict[str, Any]:
    """A plain dict of a row: uuids as strings, sets as lists, maps as dicts."""
    out: dict[str, Any] = {"_uuid": str(row.uuid)}
    data = row._data or {}
    for col in columns:
        datum = data.get(col)
        if datum is None:  # a column at its default value may be absent from the cache
            column = row._table.columns.get(col)
            if column is None:
                continue
            datum = ovs.db.data.Datum.default(column.type)
        out[col] = datum.to_python(_atom_str)
    return out


class RowIndex:
    """key -> rows of one replicated table, kept on the owner thread.

    ``keys(row)`` returns the keys a row is filed under (e.g. its ``name``).
    ``get`` re-checks each hit against the live table, so an entry left behind
    by a cache clear is never returned.
    """

    def __init__(self, table: str, keys: Callable[[ovs.db.idl.Row], Iterable[str]]) -> None:
        self.table = table
        self.keys = keys
        self._by_key: dict[str, set[Any]] = {}
        self._keys_of: dict[Any, tuple[str, ...]] = {}

    def _unfile(self, uuid: Any) -> None:
        for k in self._keys_of.pop(uuid, ()):
            bucket = self._by_key.get(k)
            if bucket is not None:
                bucket.discard(uuid)
                if not bucket:
                    del self._by_key[k]

    def _keys(self, row: ovs.db.idl.Row) -> tuple[str, ...]:
        try:
            return tuple(self.keys(row))
        except Exception:  # a malformed row is simply not indexed
            return ()

    def update(self, uuid: Any, row: ovs.db.idl.Row | None) -> None:
        self._unfile(uuid)
        if row is None:
            return
        ks = self._keys(row)
        if ks:
            self._keys_of[uuid] = ks
            for k in ks:
                self._by_key.setdefault(k, set()).add(uuid)

    def rebuild(self, idl: ovs.db.idl.Idl) -> None:
        self._by_key.clear()
        self._keys_of.clear()
        for uuid, row in idl.tables[self.table].rows.items():
            self.update(uuid, row)

    def get(self, idl: ovs.db.idl.Idl, key: str) -> list[ovs.db.idl.Row]:
        """Rows filed under ``key`` (uuid order), checked against the live table."""
        rows = idl.tables[self.table].rows
        out = []
        for uuid in sorted(self._by_key.get(key, ()), key=str):
            row = rows.get(uuid)
            if row is not None and key in self._keys(row):
                out.append(row)
        return out

    def has(self, key: str) -> bool:
        """Some row is filed under ``key`` (no live-table check: callable off the owner thread)."""
        return bool(self._by_key.get(key))

    def all_keys(self) -> list[str]:
        return sorted(self._by_key)
