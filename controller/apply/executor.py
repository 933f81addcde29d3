"""The executor: applies a plan's actions in order and folds their results into the
snapshot (see ``controller.plan.actions``).

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
import re
import threading
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import attrs
import structlog

from controller import names
from controller.plan.actions import (
    FAILED,
    AddFinalizer,
    AdoptVlan,
    AllocateVlan,
    EnsureGateway,
    Event,
    ForgetOverlay,
    Get,
    ListConsumers,
    Log,
    Metric,
    NetworkGone,
    Plan,
    PruneReleasedVlans,
    ReleaseGateway,
    ReleaseVlan,
    RemoveFinalizer,
    ReportOnce,
    RequestTriple,
    SetPoolCidrs,
    SetPruneTimers,
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

_ITEM = re.compile(r"^(\w+)\[(.*)\]$")


class PlanDidNotSettle(RuntimeError):
    """The planner asked for results more than :data:`MAX_PLANS` times in one pass."""


def fill(snapshot: Any, into: str | None, value: Any) -> Any:
    """``snapshot`` with field ``into`` (or key ``k`` of mapping field ``f``, as ``f[k]``)
    set to ``value``; unchanged when ``into`` is None."""
    if into is None:
        return snapshot
    m = _ITEM.match(into)
    if m is None:
        return attrs.evolve(snapshot, **{into: value})
    field, key = m.groups()
    mapping = dict(getattr(snapshot, field))
    mapping[key] = value
    return attrs.evolve(snapshot, **{field: mapping})


def run(planner: Callable[[Any], Plan], snapshot: Any, apply: Callable[[Any, Any], Any]) -> Result:
    """Plan, apply, and plan again while the plan asks for its results.

    An action equal to one applied earlier in this pass is not applied again (a later plan
    repeats the prefix it already asked for).

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
        # ReportOnce: network key -> (its UID, the keys posted and still reported).
        self._reported: dict[str, tuple[str, frozenset[str]]] = {}
        self._reported_lock = threading.Lock()

    def __call__(self, action: Any, s: Any) -> Any:
        if self.stopping is not None and self.stopping.is_set():
            raise Stopping(f"stopping before {type(action).__name__}")
        method = getattr(self, "_" + type(action).__name__)
        return method(action, s)

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
    def _Get(self, a: Get, s: Any) -> Any:
        try:
            obj = self.writer.get(a.resource, a.name, a.namespace)
        except ApiError as err:
            if err.not_found:
                obj = None
            elif a.tolerate:
                obj = FAILED
            else:
                raise
        return fill(s, a.into, obj)

    def _ListConsumers(self, a: ListConsumers, s: Any) -> Any:
        return fill(s, a.into, self.fresh_consumers(a.namespace, a.pool))

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
            try:
                pool = self.writer.get(res, pname, ns)
            except ApiError as err:
                if not err.not_found:
                    raise
        counted = count_consumers(pool, pname, items("machines"), items("addresses"), items("claims"))
        return attrs.evolve(counted, unlisted=tuple(unlisted)) if unlisted else counted

    def _SplitListed(self, a: SplitListed, s: Any) -> Any:
        live, gone = self.vlans.split_listed_subnets(a.vlan)
        return fill(s, a.into, (tuple(live), tuple(gone)))

    # -- API writes -------------------------------------------------------------------------
    def _AddFinalizer(self, a: AddFinalizer, s: Any) -> Any:
        obj = self._guarded(a.resource, a.obj, lambda: self.writer.add_finalizer(a.resource, a.obj, names.FINALIZER))
        return fill(s, a.into, obj)

    def _RemoveFinalizer(self, a: RemoveFinalizer, s: Any) -> Any:
        try:
            obj = self._guarded(a.resource, a.obj,
                                lambda: self.writer.remove_finalizer(a.resource, a.obj, names.FINALIZER))
        except ApiError as err:
            if not err.not_found:
                raise
            obj = None
        return fill(s, a.into, obj)

    def _AllocateVlan(self, a: AllocateVlan, s: Any) -> Any:
        out = self.vlans.allocate(a.network, a.zone, dict(a.annotations))
        if out.vlan is None:
            return attrs.evolve(s, refusal=(out.reason, out.message))
        return attrs.evolve(s, vlan=out.vlan, allocated_now=out.allocated, holders=self.vlans.holders_of(out.vlan, a.zone))

    def _AdoptVlan(self, a: AdoptVlan, s: Any) -> Any:
        vlan = self.vlans.adopt(copy.deepcopy(dict(a.vlan)))
        return attrs.evolve(s, vlan=vlan, holders=self.vlans.holders_of(vlan, s.zone))

    def _SetPruneTimers(self, a: SetPruneTimers, s: Any) -> Any:
        vlan = self.writer.json_patch(names.VLANS, a.vlan["metadata"]["name"],
                                      annotation_patch(a.vlan, names.ANNOTATION_DELETED_SUBNETS, a.value))
        self.vlans.wrote(vlan)
        return fill(s, a.into, vlan)

    def _SetPoolCidrs(self, a: SetPoolCidrs, s: Any) -> Any:
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
        return fill(s, a.into, vlan)

    def _PruneReleasedVlans(self, a: PruneReleasedVlans, s: Any) -> Any:
        name = a.zone["metadata"]["name"]
        ops = annotation_patch(a.zone, names.ANNOTATION_RELEASED_VLANS, a.value)
        zone = self._guarded(names.PROXMOX_NETWORK_ZONES, a.zone,
                             lambda: self.writer.json_patch(names.PROXMOX_NETWORK_ZONES, name, ops))
        return fill(s, a.into, zone)

    def _ReleaseVlan(self, a: ReleaseVlan, s: Any) -> Any:
        self.vlans.release(copy.deepcopy(dict(a.vlan)))
        if a.log:
            log.info(a.log, **dict(a.fields))
        return fill(s, a.into, True)

    def _WriteStatus(self, a: WriteStatus, s: Any) -> Any:
        # A shallow body: the writer only serialises it, and the status is the plan's own.
        # No managedFields (an overlay copy may carry them): the server keeps its record.
        meta = {k: v for k, v in (a.obj.get("metadata") or {}).items() if k != "managedFields"}
        body = {**a.obj, "metadata": meta, "status": a.status}
        written = self._guarded(a.resource, a.obj, lambda: self.writer.update_status(a.resource, body))
        self.metrics.status_write(schema.crd_name(a.resource))
        self.read_back(a.resource, a.status, written)
        if a.event is not None and self.events is not None:
            self.events.event(written, a.event.type, a.event.reason, a.event.message)
        return fill(s, a.into, written)

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

    def _Event(self, a: Event, s: Any) -> Any:
        if self.events is not None:
            self.events.event(a.obj, a.type, a.reason, a.message)
        return s

    def _ReportOnce(self, a: ReportOnce, s: Any) -> Any:
        keys = frozenset(k for k, _ in a.events)
        with self._reported_lock:
            uid, before = self._reported.get(a.network, ("", frozenset()))
            if uid != a.uid:
                before = frozenset()
            if keys:
                self._reported[a.network] = (a.uid, keys)
            else:
                self._reported.pop(a.network, None)
        for key, event in a.events:
            if key not in before:
                self._Event(event, s)
        return s

    def _RequestTriple(self, a: RequestTriple, s: Any) -> Any:
        self.namespaces.want(a.namespace, a.key, a.triple)
        return attrs.evolve(s, annotation=self.namespaces.value(a.namespace), requested=True)

    def _NetworkGone(self, a: NetworkGone, s: Any) -> Any:
        with self._reported_lock:
            self._reported.pop(a.key, None)
        if self.gateway is not None:
            self.gateway.applier.forget(a.key)
        if self.namespaces is not None:
            self.namespaces.network_gone(a.key.partition("/")[0], a.key)
        return s

    def _ForgetOverlay(self, a: ForgetOverlay, s: Any) -> Any:
        if self.own is not None:
            self.own[1].forget(a.key)
        return s

    # -- NB -------------------------------------------------------------------------------
    def _EnsureGateway(self, a: EnsureGateway, s: Any) -> Any:
        outcome = self.gateway.ensure(a.key, a.vpc, a.subnet, a.trunk, a.siblings, a.serving, a.zone_mtu)
        return attrs.evolve(s, gateway=outcome)

    def _ReleaseGateway(self, a: ReleaseGateway, s: Any) -> Any:
        return attrs.evolve(s, gateway_release=self.gateway.release(a.key) if self.gateway is not None else "")

    # -- observability ------------------------------------------------------------------------
    def _Metric(self, a: Metric, s: Any) -> Any:
        getattr(self.metrics, a.method)(*a.args)
        return s

    def _Log(self, a: Log, s: Any) -> Any:
        getattr(log, a.level)(a.event, **dict(a.fields))
        return s
