"""The executor: applies a plan's actions in order and folds their results into the
snapshot (see ``controller.plan.actions``).

Each action class has one handler (:data:`Handler`: the action's effect, returning its
result); the table of handlers is checked against the :data:`~controller.plan.actions.Action`
union when this module is imported (:func:`dispatch`), and the action's own ``fold`` puts
the result into the snapshot. Metric actions are calls of ``controller.metrics.Metrics``
methods, one per class.

One executor per reconciler kind writes to the API server (through ``KubeWriter``; writes
of the reconciler's own kind go through its read-your-writes overlay) and hands NB work to
the NB writer (``controller.apply.gateway.GatewayStep`` over ``ovn.gateway.GatewayApplier``).
Allocation runs under the provider's lock inside ``VlanManager.allocate``. The first action
that raises stops the pass: nothing after it is applied, and the worker retries the key
with backoff. Once the process is stopping (``stopping`` set) the next action raises
:class:`Stopping` instead: the pass ends there, as if the leader had been killed at that
point, so the Lease can be released at once (``controller.main``).
"""

from __future__ import annotations

import copy
import threading
import typing
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import attrs
import structlog

from controller import names
from controller.plan.actions import (
    FAILED,
    Action,
    AddFinalizer,
    AdoptVlan,
    AllocateVlan,
    EnsureGateway,
    Event,
    ForgetGateway,
    ForgetNetwork,
    ForgetOverlay,
    ForgetZone,
    Get,
    Holding,
    Level,
    ListConsumers,
    Log,
    NetworkGone,
    Plan,
    PruneReleasedVlans,
    ReconcileError,
    ReleaseGateway,
    ReleaseVlan,
    RemoveFinalizer,
    ReportOnce,
    RequestTriple,
    SetDeleting,
    SetForeignSubnets,
    SetEgressRerouteMissing,
    SetGatewayChassis,
    SetGatewayReady,
    SetGatewayServing,
    SetNetwork,
    SetPoolConflicts,
    SetPoolCidrs,
    SetPruneTimers,
    SetStuckHolders,
    SetVlanChanged,
    SetZone,
    SetZoneKept,
    SplitListed,
    WriteStatus,
)
from controller import reasons, schema
from controller.rules.consumers import Consumers, count_consumers
from controller.runtime.events import EventRecorder
from controller.names import WARNING
from controller.runtime.kube import ApiError, KubeWriter, annotation_patch
from controller.metrics import Metrics
from controller.runtime.recent import RecentWrites
from controller.runtime.result import Result, Stopping
from controller.apply.vlans import VlanManager
from informers.resource import Resource, meta_namespace_key

log = structlog.get_logger(__name__)

# A pass that has not settled after this many plans is a planner bug, not a slow cluster.
MAX_PLANS = 64

# (executor, action, snapshot) -> the action's result, folded by ``action.fold``.
Handler = Callable[["Executor", Any, Any], Any]


class PlanDidNotSettle(RuntimeError):
    """The planner asked for results more than :data:`MAX_PLANS` times in one pass."""


def dispatch(handlers: Mapping[type, Handler]) -> dict[type, Handler]:
    """``handlers`` (action class -> :data:`Handler`) once it has one handler for each class
    of the :data:`~controller.plan.actions.Action` union and nothing else.

    :raises TypeError: naming the action classes without a handler and the handled classes
        that are not actions.
    """
    actions = set(typing.get_args(Action))
    missing = sorted(c.__name__ for c in actions - handlers.keys())
    extra = sorted(c.__name__ for c in handlers.keys() - actions)
    if missing or extra:
        raise TypeError(f"executor dispatch: no handler for {missing or 'none'}; "
                        f"handlers for classes outside the Action union: {extra or 'none'}")
    return dict(handlers)


def run(planner: Callable[[Any], Plan], snapshot: Any, apply: Callable[[Any, Any], Any]) -> Result:
    """Plan, apply, and plan again while the plan asks for its results.

    ``apply(action, snapshot)`` returns the snapshot with the action's result folded in
    (an :class:`Executor`; the plan tests give a canned one). An action equal to one
    applied earlier in this pass is not applied again (a later plan repeats the prefix it
    already asked for).

    :raises PlanDidNotSettle: after :data:`MAX_PLANS` plans.
    :raises ApiError: from the first action that fails.
    """
    applied: list[Any] = []
    for _ in range(MAX_PLANS):
        plan = planner(snapshot)
        for action in plan.actions:
            if action in applied:
                continue
            snapshot = apply(action, snapshot)
            applied.append(action)
        if not plan.replan:
            return Result(plan.requeue_after)
    raise PlanDidNotSettle(f"no settled plan after {MAX_PLANS} plans")


class Executor:
    """Applies actions for one reconciler (see the module docstring).

    :param own: the reconciler's own kind and its read-your-writes overlay.
    :param overlays: read-your-writes overlays of other kinds it writes (a Subnet's finalizer:
        the next pass must not read the cache's copy from before it and patch again).
    :param consumer_resources: served versions of pools, machines, addresses and claims
        (``pools``, ``machines``, ``addresses``, ``claims``), for the fresh consumer count;
        the manager adds kinds that appear later, so it is kept by reference.
    :param namespaces: the namespace annotation's reconciler (``RequestTriple``, ``NetworkGone``).
    :param gateway: the NB side (``controller.apply.gateway.GatewayStep``), or None.
    :param stopping: set when the process stops; every action after that raises
        :class:`Stopping`.
    :param pruned: the status fields each CRD's API server prunes (``controller.schema``),
        learned from the read-back of each status write; None: not tracked.
    """

    def __init__(
        self,
        writer: KubeWriter,
        vlans: VlanManager,
        own: tuple[Resource, RecentWrites] | None = None,
        events: EventRecorder | None = None,
        metrics: Metrics | None = None,
        consumer_resources: MutableMapping[str, Resource] | None = None,
        namespaces: Any = None,
        gateway: Any = None,
        stopping: threading.Event | None = None,
        overlays: Mapping[Resource, RecentWrites] | None = None,
        pruned: schema.PrunedFields | None = None,
    ) -> None:
        self.stopping = stopping
        self.pruned = pruned
        self.overlays = dict(overlays or {})
        if own is not None:
            self.overlays[own[0]] = own[1]
        self.writer = writer
        self.vlans = vlans
        self.own = own
        self.events = events
        self.metrics = metrics or Metrics()
        self.consumer_resources = consumer_resources if consumer_resources is not None else {}
        self.namespaces = namespaces
        self.gateway = gateway
        # ReportOnce: (network key, topic) -> (its UID, the keys posted and still reported).
        self._reported: dict[tuple[str, str], tuple[str, frozenset[str]]] = {}
        self._reported_lock = threading.Lock()

    def __call__(self, action: Action, s: Any) -> Any:
        """Apply ``action``: ``s`` with its result folded in (``action.fold``)."""
        if self.stopping is not None and self.stopping.is_set():
            raise Stopping(f"stopping before {type(action).__name__}")
        return action.fold(s, self.HANDLERS[type(action)](self, action, s))

    # -- writes of the own kind go through the overlay ------------------------------------
    def _guarded(self, resource: Resource, obj: Mapping[str, Any], fn: Callable[[], Any]) -> Any:
        """``fn()``; for a kind with an overlay, record the written object in it, and drop the
        overlay's copy when the API server refused the write as stale or invalid."""
        overlay = self.overlays.get(resource)
        try:
            out = fn()
        except ApiError as err:
            if overlay is not None and (err.conflict or err.invalid):
                overlay.forget(meta_namespace_key(dict(obj)))
            raise
        if overlay is not None and out is not None:
            overlay.wrote(out)
        return out

    # -- reads ------------------------------------------------------------------------------
    def _get(self, a: Get, s: Any) -> Any:
        try:
            return self.writer.get(a.resource, a.name, a.namespace)
        except ApiError as err:
            if err.not_found:
                return None
            if a.tolerate:
                return FAILED
            raise

    def _list_consumers(self, a: ListConsumers, s: Any) -> Consumers:
        return self.fresh_consumers(a.namespace, a.pool)

    def fresh_consumers(self, ns: str, pname: str) -> Consumers:
        """:func:`count_consumers` over objects read from the API server, not the cache.

        A kind the API server answers with an error other than 404 (a conversion webhook
        that fails every LIST of a version, field-reports.md R8) is named in ``Consumers.unlisted``, which
        keeps the network ``InUse``: an object that cannot be read may hold the pool.
        Connection failures raise (the pass is retried)."""
        unlisted: list[str] = []

        def items(key: str) -> list[dict[str, Any]]:
            res = self.consumer_resources.get(key)
            if res is None:
                return []
            try:
                return self.writer.request("GET", res.path(ns)).get("items") or []
            except ApiError as err:
                if err.not_found:
                    return []
                unlisted.append(f"{res.plural}.{res.group}/{res.version} (HTTP {err})")
                return []

        pool = None
        res = self.consumer_resources.get("pools")
        if res is not None:
            pool = self.writer.get_or_none(res, pname, ns)
        counted = count_consumers(pool, pname, items("machines"), items("addresses"), items("claims"))
        return attrs.evolve(counted, unlisted=tuple(unlisted)) if unlisted else counted

    def _split_listed(self, a: SplitListed, s: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
        live, gone = self.vlans.split_listed_subnets(a.vlan)
        return tuple(live), tuple(gone)

    # -- API writes -------------------------------------------------------------------------
    def _add_finalizer(self, a: AddFinalizer, s: Any) -> Any:
        return self._guarded(a.resource, a.obj, lambda: self.writer.add_finalizer(a.resource, a.obj, names.FINALIZER))

    def _remove_finalizer(self, a: RemoveFinalizer, s: Any) -> Any:
        try:
            return self._guarded(a.resource, a.obj,
                                 lambda: self.writer.remove_finalizer(a.resource, a.obj, names.FINALIZER))
        except ApiError as err:
            if not err.not_found:
                raise
            return None

    def _allocate_vlan(self, a: AllocateVlan, s: Any) -> Holding | tuple[str, str]:
        out = self.vlans.allocate(a.network, a.zone, dict(a.annotations))
        if out.vlan is None:
            return out.reason, out.message
        return Holding(out.vlan, self.vlans.holders_of(out.vlan, a.zone), out.allocated)

    def _adopt_vlan(self, a: AdoptVlan, s: Any) -> Holding:
        vlan = self.vlans.adopt(copy.deepcopy(dict(a.vlan)))
        return Holding(vlan, self.vlans.holders_of(vlan, s.zone))

    def _set_prune_timers(self, a: SetPruneTimers, s: Any) -> Any:
        vlan = self.writer.json_patch(names.VLANS, a.vlan["metadata"]["name"],
                                      annotation_patch(a.vlan, names.ANNOTATION_DELETED_SUBNETS, a.value))
        self.vlans.wrote(vlan)
        return vlan

    def _set_pool_cidrs(self, a: SetPoolCidrs, s: Any) -> Any:
        # One annotation of ours, derived from the pool and not from the Vlan: a merge patch of
        # that key alone, held to the same object by its uid (a uid that does not match is
        # refused). A resourceVersion guard was refused whenever Kube-OVN had just updated
        # the Vlan it saw created (a refused write on the normal path of a burst).
        meta = a.vlan["metadata"]
        name = meta["name"]
        held = {"uid": meta["uid"]} if meta.get("uid") else {}
        vlan = self.writer.merge_patch(names.VLANS, name, {"metadata": {
            **held, "annotations": {names.ANNOTATION_POOL_CIDRS: a.value}}})
        self.vlans.wrote(vlan)
        return vlan

    def _prune_released_vlans(self, a: PruneReleasedVlans, s: Any) -> Any:
        name = a.zone["metadata"]["name"]
        ops = annotation_patch(a.zone, names.ANNOTATION_RELEASED_VLANS, a.value)
        return self._guarded(names.PROXMOX_NETWORK_ZONES, a.zone,
                             lambda: self.writer.json_patch(names.PROXMOX_NETWORK_ZONES, name, ops))

    def _release_vlan(self, a: ReleaseVlan, s: Any) -> bool:
        self.vlans.release(copy.deepcopy(dict(a.vlan)))
        if a.log:
            log.info(a.log, **dict(a.fields))
        return True

    def _write_status(self, a: WriteStatus, s: Any) -> Any:
        # A shallow body: the writer only serialises it, and the status is the plan's own.
        # No managedFields (an overlay copy may carry them): the server keeps its record.
        meta = {k: v for k, v in (a.obj.get("metadata") or {}).items() if k != "managedFields"}
        body = {**a.obj, "metadata": meta, "status": a.status}
        written = self._guarded(a.resource, a.obj, lambda: self.writer.update_status(a.resource, body))
        self.metrics.status_write(schema.crd_name(a.resource))
        self.read_back(a.resource, a.status, written)
        if a.event is not None and self.events is not None:
            self.events.event(written, a.event.type, a.event.reason, a.event.message)
        return written

    def read_back(self, resource: Resource, status: Mapping[str, Any], written: Mapping[str, Any]) -> None:
        """The write's answer is its read-back (field-reports.md S5): the fields
        written and not returned are pruned by the CRD. A field not known pruned before asks
        once for the whole picture (:meth:`probe_schema`)."""
        if self.pruned is None or not isinstance(written, Mapping):
            return
        sent, pruned = set(schema.paths(status)), set(schema.missing(status, written.get("status") or {}))
        if pruned - self.pruned.of(resource):
            self.probe_schema(resource, written, sent, pruned)
            return
        self._learned(resource, written, self.pruned.learn(resource, sent, pruned))

    def probe_schema(self, resource: Resource, obj: Mapping[str, Any], sent: set[str] | None = None,
                     pruned: set[str] | None = None) -> None:
        """A dry-run status write of ``obj`` with every field of this version's schema filled
        in (``controller.schema.full_shape``; nothing is stored): the fields its answer lacks
        are all the fields the CRD prunes. Also the resync's recheck of a CRD known outdated
        (``Manager.enqueue_all``). ``sent``/``pruned``: what a write just showed, folded in."""
        if self.pruned is None:
            return
        sent, pruned = set(sent or ()), set(pruned or ())
        shape = schema.full_shape(resource.plural, obj.get("status") or {})
        meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
        try:
            echo = self.writer.update_status(resource, {**obj, "metadata": meta, "status": shape}, dry_run=True)
        except ApiError as err:
            log.info("could not probe which status fields the CRD holds", crd=schema.crd_name(resource),
                     error=str(err))
        else:
            sent |= set(schema.paths(shape))
            pruned |= set(schema.missing(shape, echo.get("status") or {}))
        if sent:
            self._learned(resource, obj, self.pruned.learn(resource, sent, pruned))

    def _learned(self, resource: Resource, obj: Mapping[str, Any], learned: schema.Learned) -> None:
        crd = schema.crd_name(resource)
        self.metrics.set_status_fields_pruned(crd, len(learned.fields))
        if learned.new:
            log.warning("the API server prunes status fields this controller writes; not writing them again until "
                        "a resync finds them held", crd=crd, fields=list(learned.fields))
            if self.events is not None:
                self.events.event(obj, WARNING, reasons.SCHEMA_OUTDATED, schema.outdated_message(resource, learned.fields))
        elif learned.cleared:
            log.info("the CRD holds every status field this controller writes again; writing them", crd=crd)

    def _event(self, a: Event, s: Any) -> None:
        if self.events is not None:
            self.events.event(a.obj, a.type, a.reason, a.message)

    def _report_once(self, a: ReportOnce, s: Any) -> None:
        keys = frozenset(k for k, _ in a.events)
        memo = (a.network, a.topic)
        with self._reported_lock:
            uid, before = self._reported.get(memo, ("", frozenset()))
            if uid != a.uid:
                before = frozenset()
            if keys:
                self._reported[memo] = (a.uid, keys)
            else:
                self._reported.pop(memo, None)
        for key, event in a.events:
            if key not in before:
                self._event(event, s)
        for key, event in a.ended:
            if key in before and key not in keys:
                self._event(event, s)

    def _request_triple(self, a: RequestTriple, s: Any) -> str | None:
        self.namespaces.want(a.namespace, a.key, a.triple)
        return self.namespaces.value(a.namespace)

    def _network_gone(self, a: NetworkGone, s: Any) -> None:
        with self._reported_lock:
            for memo in [m for m in self._reported if m[0] == a.key]:
                del self._reported[memo]
        if self.gateway is not None:
            self.gateway.applier.forget(a.key)
        if self.namespaces is not None:
            self.namespaces.network_gone(a.key.partition("/")[0], a.key)

    def _forget_overlay(self, a: ForgetOverlay, s: Any) -> None:
        if self.own is not None:
            self.own[1].forget(a.key)

    # -- NB -------------------------------------------------------------------------------
    def _ensure_gateway(self, a: EnsureGateway, s: Any) -> Any:
        return self.gateway.ensure(a.key, a.vpc, a.subnet, a.trunk, a.siblings, a.serving, a.zone_mtu)

    def _release_gateway(self, a: ReleaseGateway, s: Any) -> str:
        return self.gateway.release(a.key) if self.gateway is not None else ""

    # -- observability ------------------------------------------------------------------------
    def _log(self, a: Log, s: Any) -> None:
        emit = {Level.INFO: log.info, Level.WARNING: log.warning, Level.ERROR: log.error}[a.level]
        emit(a.event, **dict(a.fields))

    HANDLERS: typing.ClassVar[dict[type, Handler]] = dispatch({
        Get: _get,
        ListConsumers: _list_consumers,
        SplitListed: _split_listed,
        AddFinalizer: _add_finalizer,
        RemoveFinalizer: _remove_finalizer,
        AllocateVlan: _allocate_vlan,
        AdoptVlan: _adopt_vlan,
        SetPruneTimers: _set_prune_timers,
        SetPoolCidrs: _set_pool_cidrs,
        PruneReleasedVlans: _prune_released_vlans,
        ReleaseVlan: _release_vlan,
        WriteStatus: _write_status,
        Event: _event,
        ReportOnce: _report_once,
        RequestTriple: _request_triple,
        NetworkGone: _network_gone,
        ForgetOverlay: _forget_overlay,
        EnsureGateway: _ensure_gateway,
        ReleaseGateway: _release_gateway,
        Log: _log,
        # Metrics: each class is one call of its Metrics method.
        SetZone: lambda ex, a, s: ex.metrics.set_zone(a.zone, a.total, a.allocated, a.free, a.networks, a.orphans),
        SetZoneKept: lambda ex, a, s: ex.metrics.set_zone_kept(a.zone, a.outside_ranges, a.held_for_reuse),
        ForgetZone: lambda ex, a, s: ex.metrics.forget_zone(a.zone),
        SetNetwork: lambda ex, a, s: ex.metrics.set_network(a.namespace, a.name, a.zone, a.vlan, a.ready, a.ippool,
                                                            a.deleting),
        SetForeignSubnets: lambda ex, a, s: ex.metrics.set_foreign_subnets(a.namespace, a.name, a.count),
        SetEgressRerouteMissing: lambda ex, a, s: ex.metrics.set_egress_reroute_missing(a.namespace, a.name, a.missing),
        SetVlanChanged: lambda ex, a, s: ex.metrics.set_vlan_changed(a.namespace, a.name, a.changed),
        SetStuckHolders: lambda ex, a, s: ex.metrics.set_stuck_holders(a.namespace, a.name, a.count),
        SetPoolConflicts: lambda ex, a, s: ex.metrics.set_pool_conflicts(a.namespace, a.name, a.overlaps, a.conflicts),
        SetDeleting: lambda ex, a, s: ex.metrics.set_deleting(a.namespace, a.name, a.deleting),
        ForgetNetwork: lambda ex, a, s: ex.metrics.forget_network(a.namespace, a.name),
        SetGatewayChassis: lambda ex, a, s: ex.metrics.set_gateway_chassis(a.namespace, a.name, a.count),
        SetGatewayReady: lambda ex, a, s: ex.metrics.set_gateway_ready(a.namespace, a.name, a.ready),
        ForgetGateway: lambda ex, a, s: ex.metrics.forget_gateway(a.namespace, a.name),
        SetGatewayServing: lambda ex, a, s: ex.metrics.set_gateway_serving(a.namespace, a.name, a.bound, a.chassis),
        ReconcileError: lambda ex, a, s: ex.metrics.reconcile_error(a.reason),
    })
