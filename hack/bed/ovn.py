"""The bed's OVN databases: the NB and SB ovsdb-servers and ovn-northd (start, wait,
``ovn-nbctl``/``ovn-sbctl``), where the SB binds a gateway port and whether OVN has settled
it (the :class:`OvnDatabases` mixin of :class:`~hack.bed.cluster.LocalCluster`), and the
tools' JSON rows as Python (:func:`ovsdb_rows`)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import time
from typing import Any, Sequence

from hack.bed.common import ClusterError


def ovsdb_atom(value: Any) -> Any:
    """An ``ovn-nbctl``/``ovn-sbctl --format=json`` datum as Python: uuid -> str, set ->
    list, map -> dict (recursively)."""
    if isinstance(value, list) and len(value) == 2 and value[0] in ("uuid", "named-uuid"):
        return value[1]
    if isinstance(value, list) and len(value) == 2 and value[0] == "set":
        return [ovsdb_atom(v) for v in value[1]]
    if isinstance(value, list) and len(value) == 2 and value[0] == "map":
        return {ovsdb_atom(k): ovsdb_atom(v) for k, v in value[1]}
    return value


def ovsdb_set(value: Any) -> list:
    """A set column as a list (the tools print a one-element set as the bare element)."""
    return value if isinstance(value, list) else [value]


def ovsdb_rows(ctl: Any, table: str, *conditions: str, columns: str | None = None) -> list[dict[str, Any]]:
    """Rows of ``table`` through ``ctl`` (:meth:`LocalCluster.nbctl` or ``sbctl``): all of
    them, or those matching ``conditions`` (``find``); every column, or ``columns``
    (comma-separated), as :func:`ovsdb_atom` values."""
    verb = ("find", table, *conditions) if conditions else ("list", table)
    cols = (f"--columns={columns}",) if columns else ()
    out = json.loads(ctl("--format=json", *cols, *verb))
    return [dict(zip(out["headings"], map(ovsdb_atom, row))) for row in out["data"]]


class OvnDatabases:
    """LocalCluster's OVN NB, SB and ovn-northd."""

    # OVN NB ---------------------------------------------------------------

    def _start_ovsdb(self, name: str, schema, env: dict[str, str] | None = None) -> tuple[str, str]:
        """An ``ovsdb-server`` for database ``name`` ("nb" or "sb") created from ``schema``,
        on a unix socket and a loopback TCP port; returns their ``unix:``/``tcp:`` addresses."""
        w = self.workdir
        sock = w / f"{name}.sock"
        if len(str(sock)) > 100:
            raise ClusterError(f"work directory path too long for a unix socket: {sock}")
        db = w / f"{name}.db"
        r = subprocess.run(["ovsdb-tool", "create", str(db), str(schema)], capture_output=True, text=True)
        if r.returncode != 0:
            raise ClusterError(f"ovsdb-tool create ({name.upper()}) failed: {r.stderr.strip()}")
        port = self._ports[name]
        self._spawn(
            f"ovsdb-{name}",
            [
                "ovsdb-server",
                str(db),
                f"--remote=punix:{sock}",
                f"--remote=ptcp:{port}:127.0.0.1",
                f"--unixctl={w / f'{name}.ctl'}",
                f"--log-file={w / f'ovsdb-{name}.log'}",
                "-vconsole:off",
                "-vfile:info",
            ],
            w / f"ovsdb-{name}.console.log",
            env=env,
        )
        return f"unix:{sock}", f"tcp:127.0.0.1:{port}"

    def _start_nb(self) -> None:
        self.nb_unix, self.nb_tcp = self._start_ovsdb("nb", self.nb_schema)

    def nbctl(self, *args: str, db: str | None = None, timeout: float = 10) -> str:
        """Run ovn-nbctl against the test NB (unix socket unless ``db`` is given)."""
        if not self.nb_unix:
            raise ClusterError("this bed runs without an NB (with_nb=False)")
        r = subprocess.run(
            ["ovn-nbctl", f"--db={db or self.nb_unix}", f"--timeout={int(timeout)}", *args],
            capture_output=True,
            text=True,
            timeout=timeout + 5,
        )
        if r.returncode != 0:
            raise ClusterError(f"ovn-nbctl {' '.join(args)} failed: {r.stderr.strip()}")
        return r.stdout

    def _wait_ovsdb(self, name: str, ctl, addresses: tuple[str, str]) -> None:
        """Until ``ovsdb-<name>`` answers ``<ctl> show`` on each of ``addresses`` (20 s)."""
        log = self.workdir / f"ovsdb-{name}.log"
        deadline = time.monotonic() + 20
        last = ""
        while time.monotonic() < deadline:
            self._check_alive(f"ovsdb-{name}", log)
            try:
                for db in addresses:
                    ctl("show", db=db, timeout=2)
                return
            except (ClusterError, subprocess.TimeoutExpired) as e:
                last = str(e)
            time.sleep(0.1)
        raise self._fail(f"ovsdb-{name}", f"does not answer ovn-{name}ctl show ({last})", log)

    def _wait_nb(self) -> None:
        self._wait_ovsdb("nb", self.nbctl, (self.nb_unix, self.nb_tcp))

    # OVN SB and ovn-northd ----------------------------------------------------

    def _ovn_env(self) -> dict[str, str]:
        """Point every OVS/OVN default directory at the work directory (no /var/run writes)."""
        w = str(self.workdir)
        return dict(
            os.environ,
            OVN_RUNDIR=w, OVS_RUNDIR=w, OVN_LOGDIR=w, OVS_LOGDIR=w, OVN_DBDIR=w, OVS_DBDIR=w,
        )

    def _start_sb(self) -> None:
        self.sb_unix, self.sb_tcp = self._start_ovsdb("sb", self.sb_schema, env=self._ovn_env())

    def _start_northd(self) -> None:
        """ovn-northd between the NB and SB unix sockets; it retries until both answer."""
        w = self.workdir
        assert self.nb_unix and self.sb_unix
        self.northd_ctl = w / "ovn-northd.ctl"
        self._spawn(
            "ovn-northd",
            [
                "ovn-northd",
                f"--ovnnb-db={self.nb_unix}",
                f"--ovnsb-db={self.sb_unix}",
                f"--unixctl={self.northd_ctl}",
                f"--pidfile={w / 'ovn-northd.pidfile'}",
                f"--log-file={w / 'ovn-northd.log'}",
                "-vconsole:off",
                "-vfile:info",
            ],
            w / "ovn-northd.console.log",
            env=self._ovn_env(),
        )

    def sbctl(self, *args: str, db: str | None = None, timeout: float = 10) -> str:
        """Run ovn-sbctl against the test SB (unix socket unless ``db`` is given)."""
        if not self.sb_unix:
            raise ClusterError("this bed runs without an SB (with_sb=False)")
        r = subprocess.run(
            ["ovn-sbctl", f"--db={db or self.sb_unix}", f"--timeout={int(timeout)}", *args],
            capture_output=True,
            text=True,
            timeout=timeout + 5,
        )
        if r.returncode != 0:
            raise ClusterError(f"ovn-sbctl {' '.join(args)} failed: {r.stderr.strip()}")
        return r.stdout

    def gateway_chassis(self, router_port: str) -> str | None:
        """The SB chassis (its name) the gateway port ``cr-<router_port>`` is bound on, or
        None while it is unbound or absent."""
        rows = ovsdb_rows(self.sbctl, "Port_Binding", f"logical_port=cr-{router_port}")
        if not rows or not rows[0]["chassis"]:
            return None
        return next((c["name"] for c in ovsdb_rows(self.sbctl, "Chassis") if c["_uuid"] == rows[0]["chassis"]), None)

    def active_tunnels(self, chassis: str) -> set[str]:
        """The chassis (SB names) the data plane's chassis ``chassis`` (its SB name) counts as
        up: the far end of each ``br-int`` tunnel with BFD enabled and in state ``up``, as its
        ovn-controller computes them (OVN controller/bfd.c, bfd_calculate_active_tunnels). An
        HA chassis group's member claims the gateway port while no higher-priority member is
        among them (controller/ha-chassis.c).

        :raises ClusterError: no data plane, or no chassis of that name.
        """
        dp = self.dataplane
        ch = next((c for c in dp.chassis if c.system_id == chassis), None) if dp else None
        if dp is None or ch is None:
            raise ClusterError(f"no data-plane chassis {chassis!r}")
        ctl = functools.partial(dp.vsctl, ch.ns, ch.rundir)
        up = {i["name"] for i in ovsdb_rows(ctl, "Interface", columns="name,bfd,bfd_status")
              if i["bfd"].get("enable") == "true" and i["bfd_status"].get("state") == "up"}
        return {p["external_ids"]["ovn-chassis-id"].split("@")[0]
                for p in ovsdb_rows(ctl, "Port", columns="name,external_ids")
                if p["name"] in up and "ovn-chassis-id" in p["external_ids"]}

    def gateway_settled(self, router_port: str, members: Sequence[tuple[str, int]]) -> bool:
        """Whether OVN has settled the gateway port ``cr-<router_port>`` of an HA chassis group
        of ``members`` (``(SB chassis name, priority)``): every member's BFD sessions to the
        other members are up (:meth:`active_tunnels`), so no member can still claim it, and it
        is bound on the highest priority. Until then a new group's port can be claimed by a
        lower-priority member whose session to the highest is not up yet, and move."""
        names = {m[0] for m in members}
        if not names or self.gateway_chassis(router_port) != max(members, key=lambda m: int(m[1]))[0]:
            return False
        return all(names - {n} <= self.active_tunnels(n) for n in names)

    def wait_hv(self, timeout: float = 30) -> None:
        """Block until every chassis' ovn-controller has applied what the NB holds now
        (``ovn-nbctl --wait=hv sync``): a test that changed the NB and then checks the wire
        for the change's effect waits here, since NB → northd → SB → ovn-controller → OVS
        flows lags the NB row by up to seconds.

        :raises ClusterError: a chassis did not catch up within ``timeout`` seconds."""
        self.nbctl("--wait=hv", "sync", timeout=timeout)

    def _wait_sb(self) -> None:
        self._wait_ovsdb("sb", self.sbctl, (self.sb_unix, self.sb_tcp))

    def _wait_northd(self) -> None:
        """Ready once an NB change has gone through northd into the SB (--wait=sb)."""
        log = self.workdir / "ovn-northd.log"
        deadline = time.monotonic() + 20
        last = ""
        while time.monotonic() < deadline:
            self._check_alive("ovn-northd", log)
            try:
                self.nbctl("--wait=sb", "sync", timeout=2)
                return
            except (ClusterError, subprocess.TimeoutExpired) as e:
                last = str(e)
            time.sleep(0.1)
        raise self._fail("ovn-northd", f"did not sync the NB into the SB ({last})", log)
