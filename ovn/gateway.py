"""HA_Chassis_Group of each network's router port in OVN NB (reference-behaviour.md §9.4, §9.6).

``GatewayApplier`` observes the rows of one router port (``ovn.nb.NBClient``, never
before the IDL has synced: field-reports.md B10) as a plain snapshot, hands it to the pure
§9.4 decision (``nb_plan.plan_ensure``, which builds on ``planner.plan_group``) and
applies the plan it returns with ``apply_plan``: one transaction per network, the
plan's guards as OVSDB ``wait`` operations (python-ovs ``Row.verify``: the port's
``ha_chassis_group`` and ``gateway_chassis``, and every other column written from a
value read), then its actions in order, the first failure aborting the whole
transaction. A concurrent change voids the write; the next attempt decides on the new
rows. A pass whose rows already match writes nothing. Observe, plan and apply run in
one job on the IDL's owner thread.

Also here: release of a network's groups before its VLAN goes (§9.6), collection of
owned groups whose network is gone (§9.6), and mapping NB row changes to the networks
they concern (product-decisions.md §4.8).
"""

from __future__ import annotations

import datetime as _dt
import threading
import uuid as _uuidlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import ovs.db.idl
import structlog

from ovn import nb_plan, planner, policies
from ovn.nb import ABORTED, ERROR, SUCCESS, TABLES, TIMED_OUT, TRY_AGAIN, UNCHANGED, NBClient
from ovn.ovsdb import NBError, RowIndex, row_dict
from ovn.nb_plan import GatewayState

log = structlog.get_logger(__name__)

LRP = nb_plan.LRP_TABLE
GROUP = nb_plan.GROUP_TABLE
CHASSIS = nb_plan.CHASSIS_TABLE

PASS_TIMEOUT = 5.0  # seconds, gatewayPassTimeout (§9.2); also bounds a release (§17)
LOST_DELAY = 10.0  # seconds after losing the NB before every managed network re-checks



class NBChanged(NBError):
    """A guarded transaction was aborted because the rows changed under it."""


def _ids(row: ovs.db.idl.Row) -> dict[str, str]:
    v = getattr(row, "external_ids", None)
    return dict(v) if isinstance(v, Mapping) else {}


def _refs(row: ovs.db.idl.Row, column: str) -> list[ovs.db.idl.Row]:
    v = getattr(row, column, None)
    if v is None:
        return []
    if isinstance(v, (list, tuple, set, frozenset)):
        return list(v)
    return [v]


def _old_value(old: ovs.db.idl.Row | None, column: str) -> str:
    """A changed column's old value (python-ovs passes a row of only the changed columns)."""
    datum = ((old._data if old is not None else None) or {}).get(column)
    if datum is None:
        return ""
    v = datum.to_python(lambda atom, base=None: str(atom))
    return v if isinstance(v, str) else ""


def _owned_network(row: ovs.db.idl.Row) -> list[str]:
    ids = _ids(row)
    return [ids.get(planner.NETWORK_KEY, "")] if ids.get(planner.OWNER_KEY) == planner.OWNER else []


def _uuid(row: Any) -> str:
    return str(getattr(row, "uuid", row))


class GatewayApplier:
    """Ensures, releases and collects our HA_Chassis_Groups over one ``NBClient``.

    :param addresses: NB remotes (``ssl:``/``tcp:``/``unix:``, §10).
    :param enqueue: called with a network key ``<namespace>/<name>`` when an NB row of
        that network changes (drift repair within seconds, product-decisions.md §4.8).
    :param enqueue_after: ``(key, seconds)``; every managed network is re-checked
        ``lost_delay`` seconds after the NB connection is lost.
    :param on_commit: called with ``ensure``/``release``/``collect`` per committed write.
    :param plan: the §9.4 decision, ``nb_plan.plan_ensure``; a test passes a wrapper
        around it (to record its plans, or to edit the NB between plan and commit).
    :param clear_mtu: a released group takes its ports' ``options:gateway_mtu`` with it (off
        when the controller leaves the option alone: ``--overlay-mtu=0``).
    :param fence: checked right before each write transaction is sent (``ovn.nb.NBClient``):
        the leader fence of field-reports.md S3. What it raises (``LostLeadership``) comes out
        of :meth:`ensure`, :meth:`release` and :meth:`collect` as is, not as an
        :class:`NBError`: losing the lease is not an NB failure.
    """

    def __init__(
        self,
        addresses: str | Iterable[str],
        *,
        enqueue: Callable[[str], None] | None = None,
        tls_source: Any = None,
        leader_only: bool = True,
        pass_timeout: float = PASS_TIMEOUT,
        on_commit: Callable[[str], None] | None = None,
        enqueue_after: Callable[[str, float], None] | None = None,
        lost_delay: float = LOST_DELAY,
        plan: Callable[..., nb_plan.NBPlan] = nb_plan.plan_ensure,
        clear_mtu: bool = True,
        fence: Callable[[], None] | None = None,
    ) -> None:
        self.plan = plan
        self.clear_mtu = clear_mtu
        self.enqueue = enqueue or (lambda key: None)
        self.enqueue_after = enqueue_after
        self.lost_delay = lost_delay
        self.on_commit = on_commit or (lambda op: None)
        self.pass_timeout = pass_timeout
        self.lrp_by_name = RowIndex(LRP, lambda r: [r.name])
        self.lrp_by_group = RowIndex(LRP, lambda r: [_uuid(g) for g in _refs(r, "ha_chassis_group")])
        self.group_by_name = RowIndex(GROUP, lambda r: [r.name])
        self.group_by_network = RowIndex(GROUP, _owned_network)
        self.group_by_chassis = RowIndex(GROUP, lambda r: [_uuid(c) for c in _refs(r, "ha_chassis")])
        # Router port name -> networks that manage it (filled by ensure), for LRP events.
        self._port_networks: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        # Per-VPC votes for the active chassis, kept up to date row by row on the owner
        # thread: recounting every group of a VPC on each pass (or after each group
        # insert) would make convergence and resyncs quadratic in the VPC's size.
        self._votes: dict[str, _VpcVotes] = {}
        self._group_vpcs: dict[str, set[str]] = {}  # group name -> VPCs whose tally has it
        self.transactions = 0  # write transactions committed (benchmarks, tests)
        self._written: dict[str, _dt.datetime] = {}  # router port -> its group's last write (aware UTC)
        # The egress reroutes of each router (read only); its owner sets ``on_router``.
        self.policies = policies.RouterPolicyView()
        self.nb = NBClient(
            addresses,
            leader_only=leader_only,
            on_row=self._on_row,
            on_sync=self._on_sync,
            on_lost=self._on_lost,
            indexes=[self.lrp_by_name, self.lrp_by_group, self.group_by_name, self.group_by_network,
                     self.group_by_chassis],
            tls_source=tls_source,
            fence=fence,
            tables={**TABLES, **policies.TABLES},
            conditions=policies.CONDITIONS,
        )

    def _committed(self, op: str) -> None:
        self.transactions += 1
        self.on_commit(op)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> "GatewayApplier":
        self.nb.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.nb.stop(timeout)

    def synced(self) -> bool:
        return self.nb.synced()

    # -- NB events -> networks (owner thread) -------------------------------------------
    def networks_of_ports(self, *ports: str) -> set[str]:
        """Networks managing any of these router ports (as ``ensure`` recorded them)."""
        with self._lock:
            return set().union(*(self._port_networks.get(p, ()) for p in ports))

    def managed_networks(self) -> set[str]:
        with self._lock:
            return set().union(*self._port_networks.values())

    def _networks_of_group(self, row: ovs.db.idl.Row, old_name: str = "") -> set[str]:
        """The owner named in the group, and the networks of the router port its name (or
        its old name) belongs to."""
        names = [n for n in (str(getattr(row, "name", "")), old_name) if n]
        keys = set(_owned_network(row)) | self.networks_of_ports(*(n[len(planner.GROUP_PREFIX):] for n in names))
        return {k for k in keys if k}

    def _recount(self, idl: ovs.db.idl.Idl, group_name: str) -> None:
        """Refresh one group's vote in every VPC tally that holds it (owner thread)."""
        for vpc in self._group_vpcs.get(group_name, ()):
            st = self._votes.get(vpc)
            if st is not None:
                st.set(group_name, self._vote(idl, group_name))

    def _vote(self, idl: ovs.db.idl.Idl, group_name: str) -> str | None:
        rows = self.group_by_name.get(idl, group_name)
        view = planner.groups_from_snapshot(observe([], rows)).get(group_name)
        return planner.group_vote(view) if view is not None else None

    def _on_row(self, event: str, row: ovs.db.idl.Row, old: ovs.db.idl.Row | None = None) -> None:
        table = row._table.name
        keys: set[str] = set()
        if table in policies.TABLES:
            self.policies.on_row(event, row, old)
            return
        if table == LRP:
            # A renamed port concerns the network of its old name too.
            keys = self.networks_of_ports(str(getattr(row, "name", "")), _old_value(old, "name"))
        elif table == GROUP:
            old_name = _old_value(old, "name")
            for name in {str(getattr(row, "name", "")), old_name} - {""}:
                self._recount(row._idl, name)
            keys = self._networks_of_group(row, old_name)
        elif table == CHASSIS:
            idl = row._idl
            for g in self.group_by_chassis.get(idl, str(row.uuid)):
                self._recount(idl, str(g.name))
                keys |= self._networks_of_group(g)
        for key in sorted(keys):
            self.enqueue(key)

    def _on_sync(self) -> None:
        self.policies.on_sync(self.nb._idl)
        self._votes.clear()
        self._group_vpcs.clear()
        # After a (re)connect every network we manage re-checks its rows: anything may
        # have changed while we were away.
        for key in sorted(self.managed_networks()):
            self.enqueue(key)

    def _on_lost(self) -> None:
        # The NB went away: a pass of every network we manage records the failure start
        # soon after (the grace is timed from the outage, not from the next resync); the
        # delay lets a short blip (a leader change) pass without a status write.
        self.policies.on_lost()
        self.recheck_later()

    def recheck_later(self) -> None:
        """Queue every managed network ``lost_delay`` seconds from now (after a peer was lost:
        the NB here, the SB for ``ovn.sb.SBReader``'s owner)."""
        if self.enqueue_after is None:
            return
        for key in sorted(self.managed_networks()):
            self.enqueue_after(key, self.lost_delay)

    def recheck_now(self) -> None:
        """Queue every managed network now (a peer is back: the SB for ``ovn.sb.SBReader``'s
        owner, whose unchanged bindings queue nobody by themselves)."""
        for key in sorted(self.managed_networks()):
            self.enqueue(key)

    def enqueue_ports(self, *ports: str) -> None:
        """Queue the networks that manage any of these router ports."""
        for key in sorted(self.networks_of_ports(*ports)):
            self.enqueue(key)

    def written_at(self, router_port: str) -> _dt.datetime | None:
        """When this process last wrote the port's group (aware UTC), or None."""
        with self._lock:
            return self._written.get(router_port)

    def owns(self, network_key: str) -> bool:
        """The IDL's copy holds a group owned by ``network_key`` (any thread: one dict
        lookup; an entry a cache clear left behind answers True until the next sync)."""
        return self.group_by_network.has(network_key)

    def forget(self, network_key: str) -> None:
        """Stop mapping NB events to a network that is gone."""
        with self._lock:
            for port in [p for p, ks in self._port_networks.items() if network_key in ks]:
                ks = self._port_networks[port]
                ks.discard(network_key)
                if not ks:
                    del self._port_networks[port]

    # -- ensure (§9.4) --------------------------------------------------------------------
    def ensure(
        self,
        network_key: str,
        vpc: str,
        subnet: str,
        trunk: Sequence[planner.TrunkNode],
        vpc_subnets: Iterable[str] = (),
        serving: str = "",
        mtu: int = 0,
    ) -> GatewayState:
        """Bring the group of router port ``<vpc>-<subnet>`` up to date.

        :param trunk: eligible trunk nodes (``planner.trunk_nodes``), any order.
        :param vpc_subnets: names of the VPC's other subnets: their groups decide the
            VPC's current active chassis (sticky, product-decisions.md §4.7).
        :param serving: the chassis that holds the port's ``cr-`` binding in the OVN SB ("":
            not known or not read); kept on top of the group (product-decisions.md §10).
        :param mtu: the port's ``options:gateway_mtu`` (``planner.gateway_mtu``; 0: left alone).
        :returns: the GatewayReady outcome (ChassisAssigned, RouterPortMissing,
            NoTrunkNodes, ForeignGroup).
        :raises NBError: NB not synced, transaction failed or timed out, or the rows
            changed under the write twice in a row.
        """
        lrp = planner.router_port_name(vpc, subnet)
        with self._lock:
            self._port_networks.setdefault(lrp, set()).add(network_key)
        trunk = list(trunk)
        subnets = frozenset(vpc_subnets) | {subnet}
        last: NBError | None = None
        for _ in range(2):  # once more after a guard abort: the IDL has the new rows then
            res = self.nb.transact(
                lambda txn, idl: self._ensure_job(txn, idl, network_key, vpc, subnet, trunk, subnets, serving, mtu),
                timeout=self.pass_timeout,
            )
            state = res.value.state
            if res.status in (SUCCESS, UNCHANGED):
                if res.status == SUCCESS:
                    self._committed("ensure")
                if res.status == SUCCESS and (state.created or state.adopted or state.updated):
                    with self._lock:
                        self._written[lrp] = _dt.datetime.now(_dt.timezone.utc)
                    log.info("updated OVN HA chassis group", group=planner.group_name(vpc, subnet),
                             routerPort=lrp, chassis=state.message, created=state.created, adopted=state.adopted)
                return state
            if res.status == TRY_AGAIN:
                last = NBChanged(
                    f'OVN NB rows of router port "{lrp}" changed under the controller; the write was not applied'
                )
                continue
            raise _txn_error(res.status, res.error)
        assert last is not None
        raise last

    def _ensure_job(
        self,
        txn: ovs.db.idl.Transaction,
        idl: ovs.db.idl.Idl,
        network_key: str,
        vpc: str,
        subnet: str,
        trunk: list[planner.TrunkNode],
        subnets: frozenset[str],
        serving: str = "",
        mtu: int = 0,
    ) -> nb_plan.NBPlan:
        """Observe the port's rows, plan (``self.plan``), apply the plan to ``txn``."""
        ports = self.lrp_by_name.get(idl, planner.router_port_name(vpc, subnet))
        groups = self.group_by_name.get(idl, planner.group_name(vpc, subnet))
        pointed = [g for p in ports for g in _refs(p, "ha_chassis_group")]
        snap = observe(ports, groups + pointed)
        plan = self.plan(network_key, vpc, subnet, trunk, snap, votes=self._vpc_votes(idl, vpc, subnets),
                         serving=serving, mtu=mtu)
        apply_plan(txn, idl, plan)
        return plan

    def _vpc_votes(self, idl, vpc: str, subnets: frozenset[str]) -> Mapping[str, int]:
        """The VPC's tally, brought to the current set of subnets (only the difference is
        looked at; row changes keep it current in between)."""
        st = self._votes.get(vpc)
        if st is None:
            st = self._votes[vpc] = _VpcVotes(frozenset())
        if st.subnets != subnets:
            for s in st.subnets - subnets:
                g = planner.group_name(vpc, s)
                st.remove(g)
                vpcs = self._group_vpcs.get(g)
                if vpcs is not None:
                    vpcs.discard(vpc)
                    if not vpcs:
                        del self._group_vpcs[g]
            for s in subnets - st.subnets:
                g = planner.group_name(vpc, s)
                self._group_vpcs.setdefault(g, set()).add(vpc)
                st.set(g, self._vote(idl, g))
            st.subnets = subnets
        return st.counts

    # -- release and collection (§9.6) -----------------------------------------------------
    def release(self, network_key: str) -> int:
        """Delete every group owned by ``network_key`` (its router ports' pointers cleared
        in the same transaction). Other networks' and unowned groups are untouched.

        :returns: the number of groups deleted.
        :raises NBError: NB not synced or a transaction failed (the first error aborts).
        """
        deleted = 0
        for _ in range(100):  # one group per transaction; bounded against a flapping NB
            res = self.nb.transact(lambda txn, idl: self._delete_first_txn(txn, idl, network_key),
                                   timeout=self.pass_timeout)
            if res.status == SUCCESS:
                self._committed("release")
                deleted += 1
                name, ports = res.value
                log.info("deleted OVN HA chassis group", group=name, network=network_key, clearedRouterPorts=ports)
                continue
            if res.status == UNCHANGED:
                self.forget(network_key)
                return deleted
            if res.status == TRY_AGAIN:
                continue
            raise _txn_error(res.status, res.error)
        raise NBError(f"OVN HA chassis groups of network {network_key} keep changing; not released yet")

    def _delete_first_txn(self, txn, idl, network_key: str) -> tuple[str, list[str]] | None:
        groups = self.group_by_network.get(idl, network_key)
        if not groups:
            return None
        return self._delete_group(txn, idl, groups[0])

    def _delete_group(self, txn, idl, group: ovs.db.idl.Row) -> tuple[str, list[str]]:
        ports = self.lrp_by_group.get(idl, str(group.uuid))
        done = str(group.name), sorted(str(p.name) for p in ports)  # read before the delete
        apply_plan(txn, idl, nb_plan.plan_delete(observe(ports, [group]), str(group.uuid), self.clear_mtu))
        return done

    def owned_groups(self) -> list[tuple[str, str, str]]:
        """(uuid, name, network id) of every group we own."""

        def take(idl):
            out = []
            for key in self.group_by_network.all_keys():
                for g in self.group_by_network.get(idl, key):
                    out.append((str(g.uuid), str(g.name), key))
            return out

        return self.nb.call(take)

    def collect(self, network_exists: Callable[[str, str], bool], cancel: threading.Event | None = None) -> int:
        """Delete owned groups whose network is gone (§9.6 ``collect``).

        :param network_exists: ``(namespace, name)`` -> bool from a fresh API Get
            (Terminating counts as existing); any exception stops the collection and
            is raised (nothing more is collected on a guess).
        :param cancel: once set, no further group is looked at (the process is stopping).
        :returns: the number of groups deleted.
        :raises NBError: NB not synced or a delete failed.
        """
        deleted = 0
        for uuid, name, network in self.owned_groups():
            if cancel is not None and cancel.is_set():
                break
            ns, sep, net = network.partition("/")
            if not sep or not ns or not net:
                log.info("skipping an owned OVN HA chassis group without a valid network", group=name, network=network)
                continue
            if network_exists(ns, net):
                continue

            def txn_fn(txn, idl, uuid=uuid, network=network):
                for g in self.group_by_network.get(idl, network):
                    if str(g.uuid) == uuid:
                        return self._delete_group(txn, idl, g)
                return None

            res = self.nb.transact(txn_fn, timeout=self.pass_timeout)
            if res.status == SUCCESS:
                self._committed("collect")
                deleted += 1
                log.info("deleted OVN HA chassis group", group=name, network=network,
                         clearedRouterPorts=(res.value or ("", []))[1])
            elif res.status not in (UNCHANGED, TRY_AGAIN):
                raise _txn_error(res.status, res.error)
        return deleted


class _VpcVotes:
    """One VPC's tally: each group's vote and the count per chassis."""

    def __init__(self, subnets: frozenset[str]) -> None:
        self.subnets = subnets
        self.by_group: dict[str, str | None] = {}
        self.counts: dict[str, int] = {}

    def set(self, group: str, vote: str | None) -> None:
        old = self.by_group.get(group)
        self.by_group[group] = vote
        if old == vote:
            return
        if old is not None:
            self.counts[old] -= 1
            if not self.counts[old]:
                del self.counts[old]
        if vote is not None:
            self.counts[vote] = self.counts.get(vote, 0) + 1

    def remove(self, group: str) -> None:
        self.set(group, None)
        self.by_group.pop(group, None)


def observe(ports: Iterable[ovs.db.idl.Row], groups: Iterable[ovs.db.idl.Row]) -> dict[str, dict[str, dict[str, Any]]]:
    """The rows a plan reads, in the shape of ``NBClient.snapshot()``: the router ports,
    the groups and every HA_Chassis row the groups reference (owner thread)."""
    snap: dict[str, dict[str, dict[str, Any]]] = {LRP: {}, GROUP: {}, CHASSIS: {}}
    for p in ports:
        snap[LRP][str(p.uuid)] = row_dict(p, TABLES[LRP])
    for g in groups:
        snap[GROUP][str(g.uuid)] = row_dict(g, TABLES[GROUP])
        for ch in _refs(g, "ha_chassis"):
            snap[CHASSIS][str(ch.uuid)] = row_dict(ch, TABLES[CHASSIS])
    return snap


class PlanRowGone(NBError):
    """A row the plan names is no longer in the IDL: nothing of the plan is applied."""


def apply_plan(txn: ovs.db.idl.Transaction, idl: ovs.db.idl.Idl, plan: nb_plan.NBPlan) -> None:
    """The NB executor: add ``plan`` to ``txn`` on the owner thread, the guards first
    (python-ovs only verifies a column not yet written in the transaction), then the
    actions in order. The first action that cannot be applied raises, and
    ``NBClient.transact`` aborts the transaction, so a plan lands whole or not at all."""
    made: dict[str, ovs.db.idl.Row] = {}

    def row(table: str, ref: str) -> ovs.db.idl.Row:
        r = made.get(ref)
        if r is None:
            try:
                r = idl.tables[table].rows.get(_uuidlib.UUID(ref))
            except ValueError:
                r = None
        if r is None:
            raise PlanRowGone(f"OVN NB {table} row {ref} is gone; the write was not applied")
        return r

    for g in plan.guards:
        r = row(g.table, g.uuid)
        for column in g.columns:
            r.verify(column)
        # python-ovs (4.0) sends a verified column as a ``wait`` only for rows that are part
        # of the transaction, and verify() does not add the row: a guard on a row the plan
        # does not write (the port, while only a priority is repaired) would silently be
        # no guard. Listed with no change, the row gets its wait and no update op.
        txn._txn_rows[r.uuid] = r
    for a in plan.actions:
        if isinstance(a, nb_plan.InsertChassis):
            new = made[a.ref] = txn.insert(idl.tables[CHASSIS])
            new.chassis_name = a.chassis_name
            new.priority = a.priority
        elif isinstance(a, nb_plan.SetPriority):
            row(CHASSIS, a.uuid).priority = a.priority
        elif isinstance(a, nb_plan.InsertGroup):
            new = made[a.ref] = txn.insert(idl.tables[GROUP])
            new.name = a.name
            new.external_ids = dict(a.external_ids)
            new.ha_chassis = [row(CHASSIS, c) for c in a.ha_chassis]
        elif isinstance(a, nb_plan.SetGroupChassis):
            row(GROUP, a.uuid).ha_chassis = [row(CHASSIS, c) for c in a.ha_chassis]
        elif isinstance(a, nb_plan.SetExternalIds):
            row(GROUP, a.uuid).external_ids = dict(a.external_ids)
        elif isinstance(a, nb_plan.PointPort):
            row(LRP, a.uuid).ha_chassis_group = [row(GROUP, a.group)]
        elif isinstance(a, nb_plan.ClearPointer):
            row(LRP, a.uuid).ha_chassis_group = []
        elif isinstance(a, nb_plan.DeleteGroup):
            row(GROUP, a.uuid).delete()
        elif isinstance(a, nb_plan.SetPortOption):
            row(LRP, a.uuid).setkey("options", a.key, a.value)
        elif isinstance(a, nb_plan.DeletePortOption):
            row(LRP, a.uuid).delkey("options", a.key)
        else:  # pragma: no cover - a new action without an executor branch
            raise NBError(f"OVN NB plan: unknown action {a!r}")


def _txn_error(status: str, error: str) -> NBError:
    if status == TIMED_OUT:
        return NBError(f"ovsdb transact: {error or 'timed out'}")
    if status == ABORTED:
        return NBError("ovsdb transact: aborted")
    if status == ERROR:
        return NBError(f"ovsdb transact: {error}")
    return NBError(f"ovsdb transact: {status}{': ' + error if error else ''}")
