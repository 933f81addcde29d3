"""OVN Northbound client over the python-ovs IDL.

* One thread (``NBClient`` owner thread) owns the ``ovs.db.idl.Idl``; everyone
  else talks to it through ``snapshot()``, ``transact()`` and ``call()``, which
  queue work for the owner thread and wait for its answer (the IDL is not
  thread-safe).
* The schema is fetched from the server at connect (``get_schema``), and only
  the tables/columns we use are registered (product decisions §4.8, §7), so a
  newer or older NB schema does not break us.
* Addresses (``tcp:``, ``ssl:``, ``unix:``; comma separated or a list, parsed by
  ``ovn.ovsdb.parse_addresses``) are tried in the given order, starting over from the first
  after a full round fails.
* ``synced()`` is true only while connected and after the IDL has applied the
  full monitor reply of the current connection; before that the (possibly
  empty or stale) cache is never served as "no rows" (field-reports.md B10):
  ``snapshot()`` and ``transact()`` raise ``NBNotSynced``.

* ``ovn.ovsdb.RowIndex`` keeps a key -> rows map of one table up to date from the IDL's
  row notifications (rebuilt from the tables at every sync, because python-ovs
  clears its cache on reconnect without notifying), so lookups by name or by
  owner are O(1) instead of a table scan per network.

TLS (``ssl:``): python-ovs takes process-wide file paths; ``ovn.tls.set_tls_material``
writes the material to a private directory and points python-ovs at it
(python-ovs verifies the server against the CA, TLS >= 1.2, no host-name
check). With a ``tls_source`` (``ovn.tls.TLSSource``) the Secret is read before
every connect round (one API Get), the first ``ssl:`` address is probed with our
own handshake so a bad certificate gets the clear message of
reference-behaviour.md §11, and while python-ovs is reconnecting on its own the
Secret is re-read at most every ``BACKOFF_MAX`` seconds, so a rotated Secret is
picked up without a restart.

Writes and leadership (field-reports.md S3): with a ``fence`` every transaction that would
change something is checked with it on the owner thread right before ``commit()`` hands it
to the socket; a refusal aborts it unsent. Every connection of the IDL is closed abortively
(``SO_LINGER`` 0, :func:`abortive_close`): when the process dies (or python-ovs drops a
connection) a transaction still in the kernel's send queue is dropped, not retransmitted to
a server that comes back later. A transaction the server's kernel already holds is beyond
recall: a stopped ``ovsdb-server`` (SIGSTOP) commits it when it resumes, whether the client
closed, reset or died meanwhile (seen with this build's ``ovsdb-server``; python-ovs says as
much of ``Transaction.abort``). It arrived before anything a later leader sends, and that
leader plans on top of it (its writes are guarded by ``wait`` operations).
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import ovs.db.data
import ovs.db.idl
import ovs.json
import ovs.jsonrpc
import ovs.poller
import ovs.stream
import ovs.timeval
import ovs.util
import structlog

from informers.backoff import Backoff
from ovn import tls
from ovn.ovsdb import DATABASE, DIAL_TIMEOUT, NBClosed, NBError, NBNotSynced, RowIndex, abortive_close, fetch_schema, parse_addresses, row_dict, schema_helper


#: The only tables and columns we replicate (§9.1).
TABLES: dict[str, list[str]] = {
    "Logical_Router_Port": ["name", "ha_chassis_group", "gateway_chassis", "options"],
    "HA_Chassis_Group": ["name", "external_ids", "ha_chassis"],
    "HA_Chassis": ["chassis_name", "priority"],
}

TXN_TIMEOUT = 10.0  # seconds
BACKOFF_MIN = 1.0
BACKOFF_MAX = 15.0
PROBE_INTERVAL_MS = 5000  # inactivity probe: detects a half-open TCP connection

# Transaction statuses (python-ovs values) plus our timeout.
SUCCESS = ovs.db.idl.Transaction.SUCCESS
UNCHANGED = ovs.db.idl.Transaction.UNCHANGED
TRY_AGAIN = ovs.db.idl.Transaction.TRY_AGAIN
ERROR = ovs.db.idl.Transaction.ERROR
NOT_LOCKED = ovs.db.idl.Transaction.NOT_LOCKED
ABORTED = ovs.db.idl.Transaction.ABORTED
TIMED_OUT = "timed out"


"""``SO_LINGER`` on, zero timeout (as ``controller.config.ABORTIVE_CLOSE`` for the API):
closing resets the connection and drops what the kernel has not delivered."""


@dataclass
class TxnResult:
    status: str
    error: str = ""
    value: Any = None  # what fn returned
    inserted: dict[str, str] = field(default_factory=dict)  # temporary uuid -> permanent uuid

    @property
    def ok(self) -> bool:
        return self.status in (SUCCESS, UNCHANGED)

    def uuid_of(self, row: Any) -> str:
        """Permanent uuid of a row inserted by the transaction."""
        return self.inserted[str(getattr(row, "uuid", row))]


class _Idl(ovs.db.idl.Idl):
    """Idl that keeps the row indexes and forwards row events (on the owner thread)."""

    on_row: Callable[[str, ovs.db.idl.Row, ovs.db.idl.Row | None], None] | None = None
    row_indexes: Sequence[RowIndex] = ()

    def notify(self, event, row, updates=None):  # noqa: D401 - python-ovs hook
        table = row._table.name
        for ix in self.row_indexes:
            if ix.table == table:
                # A deleted row is unfiled; listeners still see its last values.
                ix.update(row.uuid, None if event == ovs.db.idl.ROW_DELETE else row)
        if self.on_row is not None:
            try:
                self.on_row(event, row, updates)
            except Exception:  # a callback must never kill the owner thread
                pass


log = structlog.get_logger("ovn-nb")


def server_refusal(idl: Any, leader_only: bool, database: str = DATABASE) -> str:
    """Why python-ovs's IDL refuses the server it reached, or "" (the
    condition read ``OVN NB IDL is not synced: `` with nothing after it). The IDL checks the
    server's ``_Server.Database`` row (``Idl.__check_server_db``) and, on a refusal, tries the
    next remote, saying why only through OVS's own vlog, which this process does not show.
    Mirrors its rules: a relay is never a leader; a cluster member must be connected to its
    cluster and, with ``leader_only``, be the leader."""
    tables = getattr(idl, "server_tables", None)
    table = tables.get("Database") if isinstance(tables, dict) else None
    if table is None:
        return ""
    for row in list(table.rows.values()):
        if getattr(row, "name", None) != database:
            continue
        model = getattr(row, "model", "")
        if model == "relay" and leader_only:
            return ("is an OVSDB relay, and the controller writes to the NB cluster's leader only (a relay is never "
                    "the leader): give --ovn-nb-address the addresses of the NB cluster's members")
        if model == "clustered" and not getattr(row, "connected", True):
            return "is a cluster member that is disconnected from its cluster"
        if model == "clustered" and leader_only and not getattr(row, "leader", True):
            return ("is an NB cluster member that is not the leader (the controller writes to the leader only): give "
                    "--ovn-nb-address every member's address, it finds the leader among them")
    return ""


class NBClient:
    """python-ovs IDL of OVN_Northbound (or, with ``database``/``tables``/``label``, of
    another OVSDB database such as OVN_Southbound: ``ovn.sb``), owned by one thread."""

    def __init__(
        self,
        addresses: str | Iterable[str],
        *,
        leader_only: bool = True,
        probe_interval_ms: int = PROBE_INTERVAL_MS,
        dial_timeout: float = DIAL_TIMEOUT,
        on_row: Callable[[str, ovs.db.idl.Row, ovs.db.idl.Row | None], None] | None = None,
        on_lost: Callable[[], None] | None = None,
        on_sync: Callable[[], None] | None = None,
        indexes: Iterable[RowIndex] = (),
        tls_source: Any = None,
        database: str = DATABASE,
        tables: Mapping[str, list[str]] | None = None,
        label: str = "OVN NB",
        conditions: Mapping[str, list] | None = None,
        tls_recheck: float = BACKOFF_MAX,
        fence: Callable[[], None] | None = None,
    ) -> None:
        """
        :param fence: called on the owner thread just before a transaction is committed
            (handed to the socket); it raises to refuse it, and the transaction is aborted
            unsent and the error raised from :meth:`transact`. ``controller.main`` gives the
            leader fence (``controller.runtime.leader.LeaderElector.fence``, field-reports.md S3).
        :param database: the OVSDB database monitored; ``tables`` its tables and columns
            (default: the NB's ``TABLES``); ``label`` names it in errors and the thread.
        :param conditions: ``{table: OVSDB condition}`` monitored with ``monitor_cond``
            (python-ovs ``Idl.cond_change``): only the matching rows are replicated.
        :param tls_recheck: seconds between re-reads of the Secret and probes while python-ovs
            reconnects on its own (``_refresh_tls_while_down``).
        :param addresses: ``tcp:``/``ssl:``/``unix:`` remotes (reference-behaviour.md §10),
            tried in order. :raises NBError: on a malformed list (§10 messages).
        :param on_row: ``(event, row, old)`` per row change, on the owner thread (the IDL
            row, and for an update a row holding the old values of the changed columns;
            read them, never keep them).
        :param on_lost: called on the owner thread when a synced IDL loses its connection.
        :param on_sync: called on the owner thread each time the IDL (re)synced.
        :param indexes: ``RowIndex`` objects kept up to date on the owner thread.
        :param tls_source: ``ovn.tls.TLSSource``; required for ``ssl:`` remotes unless
            the material was set process-wide with ``ovn.tls.set_tls_material``.
        """
        self.addresses = parse_addresses(addresses)
        self.database = database
        self.tables = dict(TABLES if tables is None else tables)
        self.label = label
        self.conditions = dict(conditions or {})
        self.on_row = on_row
        self.on_lost = on_lost
        self.on_sync = on_sync
        self.indexes = list(indexes)
        self.tls_source = tls_source
        self._tls_checked_at = 0.0
        self.tls_recheck = tls_recheck
        self._server_absent = False  # the last probe could not even connect
        self.leader_only = leader_only
        self.fence = fence
        self._abortive: Any = None  # the socket last set to close abortively
        self.probe_interval_ms = probe_interval_ms
        self.dial_timeout = dial_timeout
        self._queue: list[tuple[Callable[[], Any], concurrent.futures.Future]] = []
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        self._thread: threading.Thread | None = None
        self._idl: _Idl | None = None
        self.last_error = ""
        self.remote = ""  # the address the IDL is (or was last) connected to
        self.sync_count = 0  # number of (re)syncs seen

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "NBClient":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.label.lower().replace(" ", "-") + "-idl", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout)
        self._fail_pending(NBClosed(f"{self.label} client stopped"))
        for fd in (self._rfd, self._wfd):
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> "NBClient":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ state

    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float | None = None, cancel: threading.Event | None = None) -> bool:
        """Wait up to ``timeout`` seconds (None: no bound) for the first full copy of the NB.

        Returns True once synced; False on timeout, when ``cancel`` is set or when the
        client is stopped (a shutdown never waits behind an unreachable NB)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._synced.is_set():
            if self._stop.is_set() or (cancel is not None and cancel.is_set()):
                return False
            left = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if left <= 0:
                return False
            self._synced.wait(left)
        return True

    # ------------------------------------------------------------------ API

    def call(self, fn: Callable[[ovs.db.idl.Idl], Any], timeout: float | None = TXN_TIMEOUT + 5) -> Any:
        """Run ``fn(idl)`` on the owner thread and return its result (or raise its error)."""
        if self._stop.is_set():
            raise NBClosed(f"{self.label} client stopped")
        if self._idl is None:
            # Still dialling (or backing off between rounds): nothing could answer; say why
            # now instead of queueing behind a connect loop.
            raise NBNotSynced(f"{self.label} IDL is not synced" + (f": {self.last_error}" if self.last_error else ""))
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            self._queue.append((lambda: fn(self._require_synced()), fut))
        self._wake()
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise NBError(f"{self.label} owner thread did not answer in time") from None

    def snapshot(self, tables: Iterable[str] | None = None) -> dict[str, dict[str, dict[str, Any]]]:
        """Plain-dict copy of the replicated rows: ``{table: {uuid: {column: value}}}``."""
        names = list(tables) if tables is not None else list(self.tables)

        def take(idl: ovs.db.idl.Idl) -> dict[str, dict[str, dict[str, Any]]]:
            return {
                t: {str(u): row_dict(r, self.tables[t]) for u, r in idl.tables[t].rows.items()} for t in names
            }

        return self.call(take)

    def transact(
        self,
        fn: Callable[[ovs.db.idl.Transaction, ovs.db.idl.Idl], Any],
        timeout: float = TXN_TIMEOUT,
    ) -> TxnResult:
        """Build a transaction with ``fn(txn, idl)`` on the owner thread and commit it.

        Returns the commit status; ``TRY_AGAIN``/``ERROR``/``NOT_LOCKED``/``TIMED_OUT``
        mean "nothing known to be applied": resync and redo the whole step.

        ``timeout`` counts from this call, not from when the owner thread gets to the
        transaction: a pass queued behind a hung one ends at its own deadline (three
        passes queued behind a hung transaction must not end past their own 5 s bound), and a
        transaction whose deadline passed in the queue is not sent at all.

        With a ``fence`` (constructor), it is called right before the commit; what it
        raises is raised here and nothing was sent. A transaction that was sent and timed
        out is aborted here but may still be carried out by the server (python-ovs
        ``Transaction.abort``): its outcome is unknown, as for ``TRY_AGAIN``.
        """
        deadline = time.monotonic() + timeout

        def run(idl: ovs.db.idl.Idl) -> TxnResult:
            txn = ovs.db.idl.Transaction(idl)
            try:
                value = fn(txn, idl)
            except BaseException:
                txn.abort()
                raise
            if time.monotonic() >= deadline:
                txn.abort()
                return TxnResult(TIMED_OUT, f"no commit reply within {timeout:g}s (queued behind another "
                                 "transaction; not sent)", value)
            if self.fence is not None:
                try:
                    self.fence()  # field-reports.md S3: the last moment before the transaction leaves the process
                except BaseException:
                    txn.abort()
                    raise
            self._abortive = abortive_close(idl, self._abortive)
            status = txn.commit()
            while status == ovs.db.idl.Transaction.INCOMPLETE:
                left = deadline - time.monotonic()
                if left <= 0:
                    txn.abort()
                    return TxnResult(TIMED_OUT, f"no commit reply within {timeout:g}s", value)
                idl.run()
                self._publish(idl)
                poller = ovs.poller.Poller()
                idl.wait(poller)
                txn.wait(poller)
                poller.timer_wait(int(left * 1000) + 1)
                poller.block()
                status = txn.commit()
            inserted: dict[str, str] = {}
            if status == SUCCESS:
                for tmp in list(getattr(txn, "_inserted_rows", {})):
                    real = txn.get_insert_uuid(tmp)
                    if real is not None:
                        inserted[str(tmp)] = str(real)
            err = txn.get_error() if status == ERROR else ""
            return TxnResult(status, err, value, inserted)

        return self.call(run, timeout + 5)

    # ------------------------------------------------------------------ owner thread

    def _require_synced(self) -> ovs.db.idl.Idl:
        idl = self._idl
        if idl is None or not self._is_synced(idl):
            raise NBNotSynced(f"{self.label} IDL is not synced" + (f": {self.last_error}" if self.last_error else ""))
        return idl

    @staticmethod
    def _is_synced(idl: ovs.db.idl.Idl) -> bool:
        return (
            idl._session.is_connected()
            and idl.state == ovs.db.idl.Idl.IDL_S_MONITORING
            and idl.has_ever_connected()
        )

    def _publish(self, idl: ovs.db.idl.Idl) -> None:
        if self._is_synced(idl):
            if not self._synced.is_set():
                for ix in self.indexes:
                    ix.rebuild(idl)
                self.sync_count += 1
                self.remote = idl._session.get_name() or self.remote
                self.last_error = ""
                self._server_absent = False
                self._synced.set()
                if self.on_sync is not None:
                    try:
                        self.on_sync()
                    except Exception:  # never kill the owner thread
                        pass
        else:
            if self._synced.is_set():
                self.last_error = self.last_error or f"lost the connection to {self.remote}"
                self._tls_checked_at = 0.0  # probe at once: name a handshake failure (item 7)
                self._synced.clear()
                if self.on_lost is not None:
                    try:
                        self.on_lost()
                    except Exception:  # never kill the owner thread
                        pass
            why = server_refusal(idl, self.leader_only, self.database)
            if why:
                message = f"{self.label} {idl._session.get_name() or self.remote} {why}"
                if message != self.last_error:
                    log.warning("OVSDB server refused", database=self.database, error=message)
                self.last_error = message
            self._refresh_tls_while_down()

    def _refresh_tls_while_down(self) -> None:
        """While python-ovs reconnects on its own, re-read the Secret now and then so a
        rotated one is used by the next attempt (python-ovs reads the files per connect),
        and probe the remote with it as a fresh dial does (:func:`ovn.tls.probe`): python-ovs
        says nothing of a failed handshake, so without the probe a certificate from another
        CA read as "lost the connection" for as long as it lasted. At once
        after the connection is lost, then every ``tls_recheck`` seconds (``BACKOFF_MAX``), and
        every ``BACKOFF_MIN`` while the last probe could not connect at all: a server that
        comes back refusing the handshake (a certificate rotated to another CA, then the NB
        restarted) is named within a second, not at the next long recheck."""
        ssl = [a for a in self.addresses if a.startswith("ssl:")]
        if self.tls_source is None or not ssl:
            return
        now = time.monotonic()
        if now - self._tls_checked_at < (BACKOFF_MIN if self._server_absent else self.tls_recheck):
            return
        self._tls_checked_at = now
        remote = self.remote if self.remote.startswith("ssl:") else ssl[0]
        if self._server_absent and not tls.reachable(remote, self.dial_timeout):
            return  # still not listening: a TCP connect a second, no Secret read
        self._server_absent = False
        try:
            tls.probe(remote, self.tls_source.material(), self.dial_timeout)
        except tls.ConnectFailed as e:
            self._server_absent = True
            self.last_error = str(e)
        except Exception as e:  # noqa: BLE001 - reported through last_error
            self.last_error = str(e)

    def _dial(self, remote: str) -> dict:
        """TLS material and probe for ``ssl:``, then the schema (§10 dial, §11)."""
        if remote.startswith("ssl:") and self.tls_source is not None:

            self._tls_checked_at = time.monotonic()
            paths = self.tls_source.material()
            try:
                tls.probe(remote, paths, self.dial_timeout)
            except Exception:
                self.tls_source.invalidate()
                raise
        return fetch_schema(remote, self.dial_timeout, self.database)

    def _wake(self) -> None:
        try:
            os.write(self._wfd, b"x")
        except OSError:
            pass

    def _drain_wake(self) -> None:
        try:
            while os.read(self._rfd, 4096):
                pass
        except OSError:
            pass

    def _fail_pending(self, err: Exception) -> None:
        with self._lock:
            pending, self._queue = self._queue, []
        for _, fut in pending:
            if fut.set_running_or_notify_cancel():
                fut.set_exception(err)

    def _run_pending(self) -> None:
        with self._lock:
            pending, self._queue = self._queue, []
        for job, fut in pending:
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(job())
            except BaseException as e:  # handed to the caller
                fut.set_exception(e)

    def _connect(self) -> _Idl | None:
        """Fetch the schema (addresses in order) and build the IDL; None when stopped."""
        backoff = Backoff(BACKOFF_MIN, BACKOFF_MAX, jitter=False)
        while not self._stop.is_set():
            errors = []
            for i, remote in enumerate(self.addresses):
                try:
                    schema = self._dial(remote)
                except Exception as e:  # noqa: BLE001 - collected into last_error
                    errors.append(str(e))
                    continue
                idl = _Idl(
                    ",".join(self.addresses),
                    schema_helper(schema, self.tables),
                    probe_interval=self.probe_interval_ms,
                    leader_only=self.leader_only,
                )
                idl.on_row = self.on_row
                idl.row_indexes = self.indexes
                for table, cond in self.conditions.items():
                    idl.cond_change(table, cond)
                # python-ovs shuffles the remotes; we want the given order, starting at the
                # one that answered.
                sess = idl._session
                sess.remotes = self.addresses[i:] + self.addresses[:i]
                sess.next_remote = 0
                sess.pick_remote()
                self.remote = remote
                self.last_error = ""
                return idl
            self.last_error = f"connect to {self.label}: " + "; ".join(errors)
            self._fail_pending(NBNotSynced(self.last_error))
            if self._stop.wait(backoff.next_delay()):
                break
        return None

    def _run(self) -> None:
        idl = self._connect()
        if idl is None:
            return
        self._idl = idl
        try:
            while not self._stop.is_set():
                idl.run()
                self._abortive = abortive_close(idl, self._abortive)
                self._publish(idl)
                self._drain_wake()
                self._run_pending()
                poller = ovs.poller.Poller()
                idl.wait(poller)
                poller.fd_wait(self._rfd, ovs.poller.POLLIN)
                poller.timer_wait(1000)
                poller.block()
        finally:
            self._synced.clear()
            self._fail_pending(NBClosed(f"{self.label} client stopped"))
            idl.close()

