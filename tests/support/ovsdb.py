"""A standalone OVN NB ovsdb-server on loopback that a test may stop and restart (the
session bed's NB is shared and must stay up). Same database file and port across a
restart, so rows survive an outage as they do in a real NB."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.support.wait import wait_for

NB_SCHEMA = "/usr/share/ovn/ovn-nb.ovsschema"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
