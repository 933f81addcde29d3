"""A standalone OVN NB ovsdb-server on loopback that a test may stop and restart (the
session bed's NB is shared and must stay up). Same database file and port across a
restart, so rows survive an outage as they do in a real NB.

Also: ``ha_chassis_groups`` reads groups back with ``ovn-nbctl``/``ovn-sbctl``;
``RowMonitor`` records every change the NB reports for a table's rows through an
independent ``ovsdb-client monitor`` (counting NB writes to a router port)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from hack.bed import NB_SCHEMA as _NB_SCHEMA, free_ports
from hack.tools.wait import wait_for

NB_SCHEMA = str(_NB_SCHEMA)  # the bed's OVN build (hack/build-ovn.sh), as every bed uses


def free_port() -> int:
    """A loopback port free now (for peers that cannot bind port 0 and report it)."""
    return free_ports(1)[0]


class NBServer:
    """``ovsdb-server`` of OVN_Northbound in ``workdir`` on ``tcp:`` (or ``ssl:`` with
    ``tls={"key": pem, "cert": pem, "ca": pem}``) and a unix socket for ``nbctl``."""

    def __init__(self, workdir: Path, tls: dict[str, bytes] | None = None) -> None:
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.db = self.dir / "nb.db"
        self.sock = self.dir / "nb.sock"
        self.tls = tls
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        subprocess.run(["ovsdb-tool", "create", str(self.db), NB_SCHEMA], check=True, capture_output=True)
        if tls:
            for name, data in tls.items():
                p = self.dir / f"{name}.pem"
                p.write_bytes(data)
                p.chmod(0o600)

    @property
    def remote(self) -> str:
        return f"{'ssl' if self.tls else 'tcp'}:127.0.0.1:{self.port}"

    @property
    def unix(self) -> str:
        return f"unix:{self.sock}"

    def start(self) -> "NBServer":
        kind = "pssl" if self.tls else "ptcp"
        argv = ["ovsdb-server", str(self.db), f"--remote=punix:{self.sock}", f"--remote={kind}:{self.port}:127.0.0.1",
                f"--unixctl={self.dir / 'ctl'}", f"--log-file={self.dir / 'ovsdb.log'}", "--no-chdir", "-vconsole:off"]
        if self.tls:
            argv += [f"--private-key={self.dir / 'key.pem'}", f"--certificate={self.dir / 'cert.pem'}",
                     f"--ca-cert={self.dir / 'ca.pem'}"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)

        def listening() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ovsdb-server exited: {(self.dir / 'ovsdb.log').read_text(errors='replace')[-1500:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return True
            except OSError:
                return False

        wait_for(listening, timeout=15, what=f"ovsdb-server on {self.port}")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: connections stay open, nothing is answered (a hung NB)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def nbctl(self, *args: str, timeout: float = 10) -> str:
        r = subprocess.run(["ovn-nbctl", f"--db={self.unix}", f"--timeout={int(timeout)}", *args],
                           capture_output=True, text=True, timeout=timeout + 5)
        if r.returncode != 0:
            raise RuntimeError(f"ovn-nbctl {' '.join(args)} failed: {r.stderr.strip()}")
        return r.stdout


def ha_chassis_groups(nbctl: Callable[..., str], name: str) -> list[dict]:
    """Every HA_Chassis_Group named ``name``, read back with ``ovn-nbctl``: ``uuid``,
    ``external_ids`` and ``chassis`` as {chassis_name: [priorities]} (a list, so duplicate
    rows for one chassis show)."""
    groups = json.loads(nbctl("--format=json", "--columns=_uuid,external_ids,ha_chassis", "find",
                              "HA_Chassis_Group", f"name={name}"))
    out = []
    for uuid, ids, chassis in groups["data"]:
        members = chassis[1] if chassis[0] == "set" else [chassis]
        prio: dict[str, list[int]] = {}
        for m in members:
            ch = json.loads(nbctl("--format=json", "--columns=chassis_name,priority", "list", "HA_Chassis", m[1]))
            for cname, p in ch["data"]:
                prio.setdefault(cname, []).append(p)
        out.append({"uuid": uuid[1], "external_ids": dict(ids[1]), "chassis": prio})
    return out




class RowMonitor:
    """Every change the NB itself reports for the rows of one table, as seen by an
    independent ``ovsdb-client monitor`` (not our python-ovs client): a row's insert,
    delete and each modification. A no-op update (a write of the value already there) is
    no change and does not show, so this counts what really changed in the database.

    ``with RowMonitor(remote, "Logical_Router_Port") as mon:``, then
    ``mon.changes(name, since)`` and ``mon.time_without(name, column, since)``.
    """

    def __init__(self, remote: str, table: str, db: str = "OVN_Northbound") -> None:
        self.remote, self.table, self.db = remote, table, db
        self._time = time.monotonic
        self._lock = threading.Lock()
        self._rows: dict[str, dict] = {}  # uuid -> current row (every column)
        self._initial: dict[str, dict] = {}  # uuid -> row when the monitor started
        # (monotonic time, action, uuid, name, changed columns, row after)
        self.events: list[tuple[float, str, str, str, tuple[str, ...], dict | None]] = []
        self._synced = threading.Event()
        self.proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "RowMonitor":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "RowMonitor":
        """Start the monitor; returns once it has the table's rows (the table must have at
        least one: ``ovsdb-client`` prints nothing for an empty one)."""
        self.proc = subprocess.Popen(
            ["ovsdb-client", "monitor", "--format=json", self.remote, self.db, self.table],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            start_new_session=True,
        )
        self._thread = threading.Thread(target=self._read, name=f"monitor {self.table}", daemon=True)
        self._thread.start()
        if not self._synced.wait(15):
            self.stop()
            raise RuntimeError(f"ovsdb-client monitor of {self.table} on {self.remote} sent no initial rows "
                               f"(an empty table, or the NB does not answer)")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._thread is not None:
            self._thread.join(5)

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            now = self._time()
            heads = doc.get("headings") or []
            rows = [dict(zip(heads, r)) for r in doc.get("data") or []]
            with self._lock:
                i = 0
                while i < len(rows):
                    r = rows[i]
                    uuid, action = r.pop("row"), r.pop("action")
                    r.pop("_version", None)
                    if action == "initial":
                        self._rows[uuid] = r
                        self._initial[uuid] = dict(r)
                    elif action == "insert":
                        self._rows[uuid] = r
                        self.events.append((now, "insert", uuid, _plain(r.get("name")), tuple(sorted(r)), dict(r)))
                    elif action == "delete":
                        old = self._rows.pop(uuid, r)
                        self.events.append((now, "delete", uuid, _plain(old.get("name")), (), None))
                    elif action == "old" and i + 1 < len(rows):
                        new = rows[i + 1]
                        new.pop("row"), new.pop("action"), new.pop("_version", None)
                        changed = tuple(sorted(k for k, v in r.items() if v is not None))
                        self._rows[uuid] = new
                        self.events.append((now, "modify", uuid, _plain(new.get("name")), changed, dict(new)))
                        i += 1
                    i += 1
            self._synced.set()

    def changes(self, name: str, since: float = 0.0) -> list[tuple[float, str, tuple[str, ...]]]:
        """(time, action, changed columns) of every change to the rows named ``name``."""
        with self._lock:
            return [(t, a, cols) for t, a, _, n, cols, _ in self.events if n == name and t >= since]

    def value(self, name: str, column: str):
        """The current value of ``column`` of the row named ``name`` (None without such a row)."""
        with self._lock:
            for r in self._rows.values():
                if _plain(r.get("name")) == name:
                    return r.get(column)
        return None

    def time_without(self, name: str, column: str, since: float, until: float | None = None) -> float:
        """Seconds within [since, until] during which no row named ``name`` had a non-empty
        ``column`` (no such row counts as without), replayed from the initial rows and
        every change since."""
        until = self._time() if until is None else until

        def has(row: dict | None) -> bool:
            return row is not None and row.get(column) not in (None, ["set", []], ["map", []], "")

        with self._lock:
            present = any(_plain(r.get("name")) == name and has(r) for r in self._initial.values())
            timeline = [(t, a != "delete" and has(r)) for t, a, _, n, _, r in self.events if n == name]
        without, t0 = 0.0, since
        for t, now_has in timeline:
            if t > until:
                break
            if t > since and not present:
                without += t - max(t0, since)
            present, t0 = now_has, t
        if not present:
            without += until - max(t0, since)
        return without


def _plain(v):
    return v if isinstance(v, str) else ""
