"""The vocabulary of plans: what a planner may ask the executor to read or write.

A planner (``controller.plan.network``, ``controller.plan.zone``) is a pure function from
a snapshot to a :class:`Plan`. The executor (``controller.apply.executor``) applies a plan's actions
in order, stops at the first failure (the error propagates to the worker, which retries
with backoff), and folds what each action returned into the snapshot with the action's
:meth:`~BaseAction.fold`: an action with an ``into`` (an :class:`Into`) fills that snapshot
field, or one key of a mapping field; the few actions whose result spans several fields
name them in their own ``fold``. A plan with ``replan`` set needs those results before it
can decide further: the runner calls the planner again on the evolved snapshot. An action
is a value: one the runner has applied in this pass is not applied again when a later plan
of the same pass repeats it (``controller.apply.executor.run``).

A field that a read has not filled yet holds :data:`UNREAD`; a read that found nothing
fills ``None``. :data:`Action` is the union of every action class; the executor's dispatch
is checked against it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import attrs

from informers.resource import Resource


class _Unread:
    """The type of :data:`UNREAD` (a singleton; falsy, so it reads like "not there")."""

    _instance: _Unread | None = None

    def __new__(cls) -> _Unread:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "UNREAD"


UNREAD: Any = _Unread()


class _Failed:
    """The type of :data:`FAILED`."""

    def __repr__(self) -> str:
        return "FAILED"


FAILED: Any = _Failed()


def unread(value: Any) -> bool:
    """True while a snapshot field has not been filled by its read."""
    return value is UNREAD


S = TypeVar("S")


@attrs.frozen
class Into:
    """Where an action's result goes: the snapshot field ``field``, or key ``key`` of that
    field when it is a mapping. Reads as ``field`` or ``field[key]`` (``str``)."""

    field: str
    key: str | None = None

    def __str__(self) -> str:
        return self.field if self.key is None else f"{self.field}[{self.key}]"

    def fill(self, snapshot: S, value: Any) -> S:
        """``snapshot`` (an attrs instance) with this field, or this key of it, set to ``value``.

        :raises TypeError: the snapshot's class has no such field, or ``key`` is given and
            the field does not hold a mapping.
        """
        kind = type(snapshot)
        if not attrs.has(kind) or self.field not in attrs.fields_dict(kind):
            raise TypeError(f"{kind.__name__} has no field {self.field!r} to fill (into {self})")
        if self.key is None:
            return attrs.evolve(snapshot, **{self.field: value})  # type: ignore[misc]
        current = getattr(snapshot, self.field)
        if not isinstance(current, Mapping):
            raise TypeError(f"{kind.__name__}.{self.field} is not a mapping: cannot fill {self}")
        return attrs.evolve(snapshot, **{self.field: {**current, self.key: value}})  # type: ignore[misc]


class BaseAction:
    """What every action class derives from. :meth:`fold` puts the result the executor got
    for the action into the snapshot; here: an action whose result the pass does not keep."""

    __slots__ = ()

    def fold(self, snapshot: S, result: Any) -> S:
        return snapshot


class _Fills(BaseAction):
    """An action whose result fills its ``into`` (None: kept nowhere)."""

    __slots__ = ()
    into: Into | None

    def fold(self, snapshot: S, result: Any) -> S:
        return snapshot if self.into is None else self.into.fill(snapshot, result)


# -- reads (fresh, from the API server: §6 decides a release on fresh reads only) ----------


@attrs.frozen
class Get(_Fills):
    """GET one object; NotFound fills ``None``. Another API error raises, unless
    ``tolerate`` is set: then it fills :data:`FAILED` (the planner treats the object as
    possibly there, never as gone)."""

    resource: Resource
    name: str
    namespace: str | None
    into: Into
    tolerate: bool = False


@attrs.frozen
class ListConsumers(_Fills):
    """Count the consumers of pool ``pool`` in ``namespace`` from fresh LISTs (field report
    field-reports.md B15): fills a :class:`controller.rules.consumers.Consumers`."""

    namespace: str
    pool: str
    into: Into


@attrs.frozen
class SplitListed(_Fills):
    """Split a Vlan's ``status.subnets`` into live and gone names by a GET of each (§6 step
    4): fills ``(live, gone)``, two tuples of names."""

    vlan: Mapping[str, Any]
    into: Into


# -- API writes ----------------------------------------------------------------------------


@attrs.frozen
class AddFinalizer(_Fills):
    """Add our finalizer (JSON patch guarded by a ``test`` op); fills the patched object."""

    resource: Resource
    obj: Mapping[str, Any]
    into: Into | None = None


@attrs.frozen
class RemoveFinalizer(_Fills):
    """Remove our finalizer; NotFound is ignored. Fills the patched object (``None`` when
    the object is gone)."""

    resource: Resource
    obj: Mapping[str, Any]
    into: Into | None = None


@attrs.frozen
class Holding:
    """The network's Vlan and every Vlan on its provider holding the same ID (what
    :class:`AllocateVlan` and :class:`AdoptVlan` fill); ``allocated_now``: created by this
    allocation."""

    vlan: Mapping[str, Any]
    holders: tuple[Mapping[str, Any], ...]
    allocated_now: bool = False


@attrs.frozen
class AllocateVlan(BaseAction):
    """Pick the lowest eligible ID and create the network's Vlan, under the provider's lock
    (reference-behaviour.md §4.3, product-decisions.md §8). Its result is a :class:`Holding`
    (the created or concurrently found Vlan), folded into ``vlan``, ``holders`` and
    ``allocated_now``, or ``(reason, message)`` when no ID can be given, folded into
    ``refusal``. ``annotations`` (``(key, value)`` pairs) go on the Vlan as it is created, so
    a value known at allocation costs no second write."""

    network: Mapping[str, Any]
    zone: Mapping[str, Any]
    annotations: tuple[tuple[str, str], ...] = ()

    def fold(self, snapshot: S, result: Holding | tuple[str, str]) -> S:
        if isinstance(result, Holding):
            return attrs.evolve(snapshot, vlan=result.vlan, holders=result.holders,  # type: ignore[misc]
                                allocated_now=result.allocated_now)
        return attrs.evolve(snapshot, refusal=result)  # type: ignore[misc]


@attrs.frozen
class AdoptVlan(BaseAction):
    """Make an owned Vlan ours again (§7.3): one guarded patch. Its result is a
    :class:`Holding`, folded into ``vlan`` and ``holders``."""

    vlan: Mapping[str, Any]

    def fold(self, snapshot: S, result: Holding) -> S:
        return attrs.evolve(snapshot, vlan=result.vlan, holders=result.holders)  # type: ignore[misc]


@attrs.frozen
class SetPruneTimers(_Fills):
    """Store the ``deleted-subnets`` prune timers on a Vlan (§7.1); ``value`` None removes
    the annotation. Fills the patched Vlan."""

    vlan: Mapping[str, Any]
    value: str | None
    into: Into


@attrs.frozen
class SetPoolCidrs(_Fills):
    """Write the ``pool-cidrs`` annotation on the network's own Vlan (the pool's addresses
    as CIDRs, for admission; ``value`` None removes it): one JSON patch guarded by
    resourceVersion. Fills ``vlan`` with the patched Vlan."""

    vlan: Mapping[str, Any]
    value: str | None
    into: Into = Into("vlan")


@attrs.frozen
class PruneReleasedVlans(_Fills):
    """Write the zone's ``released-vlans`` annotation without its expired entries
    (controller.rules.reuse; ``value`` None removes it). Fills the patched zone."""

    zone: Mapping[str, Any]
    value: str | None
    into: Into = Into("zone")


@attrs.frozen
class ReleaseVlan(_Fills):
    """Remove our finalizer from the Vlan and delete it (NotFound ignored); fills
    ``released`` with True. ``log`` is the info line that records why."""

    vlan: Mapping[str, Any]
    log: str
    fields: Mapping[str, Any] = attrs.field(factory=dict)
    into: Into = Into("released")


@attrs.frozen
class EventSpec:
    """A Kubernetes Event to post about the object a write returns."""

    type: str
    reason: str
    message: str


@attrs.frozen
class WriteStatus(_Fills):
    """PUT the status subresource; fills the written object. ``event`` (the Ready
    transition, product-decisions.md §4.1) is posted about the written object."""

    resource: Resource
    obj: Mapping[str, Any]
    status: Mapping[str, Any]
    into: Into
    event: EventSpec | None = None


@attrs.frozen
class Event(BaseAction):
    """Post a Kubernetes Event about ``obj``."""

    obj: Mapping[str, Any]
    type: str
    reason: str
    message: str


@attrs.frozen
class ReportOnce(BaseAction):
    """Warnings posted once each while they hold (field-reports.md S4): of ``events``, ``(key,
    Event)`` pairs, the executor posts the Events whose key it has not posted for network
    ``network`` (its key; ``uid`` tells a network made again under that name from the old one)
    and ``topic`` (each topic has a memory of its own) since the key was last missing from a
    report, and forgets the keys missing from this one. Of ``ended``, ``(key, Event)`` pairs
    for things that stopped holding, it posts those whose key it had posted (the recovery).
    The memory is the process's: after a restart or a leader change each is posted once more,
    and a recovery that happens meanwhile is not posted."""

    network: str
    uid: str
    events: tuple[tuple[str, Event], ...] = ()
    topic: str = ""
    ended: tuple[tuple[str, Event], ...] = ()


@attrs.frozen
class RequestTriple(BaseAction):
    """Ask the namespace annotation's reconciler for ``triple`` (§5.9 step 8). Its result, the
    annotation's value after asking, fills ``annotation``; ``requested`` becomes True."""

    namespace: str
    key: str
    triple: str

    def fold(self, snapshot: S, result: str | None) -> S:
        return attrs.evolve(snapshot, annotation=result, requested=True)  # type: ignore[misc]


@attrs.frozen
class NetworkGone(BaseAction):
    """The network is NotFound: drop its series, its NB mapping and its triple (§5.9)."""

    key: str


@attrs.frozen
class ForgetOverlay(BaseAction):
    """Drop the read-your-writes copy of ``key``: the API server has moved on."""

    key: str


# -- OVN NB (the NB writer, ovn.gateway.GatewayApplier) -------------------------------------


@attrs.frozen
class EnsureGateway(BaseAction):
    """Bring the network's HA_Chassis_Group up to date (§9.2; the decision is
    ``ovn.nb_plan.plan_ensure`` on the NB side): fills ``gateway`` with a
    :class:`controller.plan.gateway.GatewayOutcome`."""

    key: str
    vpc: str
    subnet: str
    trunk: Sequence[Any]
    siblings: frozenset[str]
    serving: str = ""  # the chassis holding cr- in the OVN SB, kept on top (product-decisions.md §10)
    zone_mtu: int | None = None  # the zone's mtu (None: unset), a bound of the port's gateway_mtu

    def fold(self, snapshot: S, result: Any) -> S:
        return attrs.evolve(snapshot, gateway=result)  # type: ignore[misc]


@attrs.frozen
class ReleaseGateway(BaseAction):
    """Delete the network's groups (§6 step 3, §9.6): fills ``gateway_release`` with ``""``
    when they are gone, else the NB error text."""

    key: str

    def fold(self, snapshot: S, result: str) -> S:
        return attrs.evolve(snapshot, gateway_release=result)  # type: ignore[misc]


# -- observability -------------------------------------------------------------------------


class Metric(BaseAction):
    """A metric a pass sets: one class below per ``controller.metrics.Metrics`` method the
    planners call, named after it, with its parameters as fields. The executor makes the
    call (``controller.apply.executor``); the series are reference-behaviour.md §13's."""

    __slots__ = ()


@attrs.frozen
class SetZone(Metric):
    """``Metrics.set_zone``: the zone's VLAN counts."""

    zone: str
    total: int
    allocated: int
    free: int
    networks: int
    orphans: int


@attrs.frozen
class SetZoneKept(Metric):
    """``Metrics.set_zone_kept``: the IDs a zone keeps out of its free count."""

    zone: str
    outside_ranges: int
    held_for_reuse: int


@attrs.frozen
class ForgetZone(Metric):
    """``Metrics.forget_zone``: drop the zone's series."""

    zone: str


@attrs.frozen
class SetNetwork(Metric):
    """``Metrics.set_network``: one network pass (``vlan`` 0: none; ``ippool`` the status's
    ``ipPool`` counts, None: absent)."""

    namespace: str
    name: str
    zone: str
    vlan: int | str | None
    ready: bool
    ippool: Mapping[str, int] | None
    deleting: bool


@attrs.frozen
class SetForeignSubnets(Metric):
    """``Metrics.set_foreign_subnets``: other Subnets naming the network's Vlan."""

    namespace: str
    name: str
    count: int


@attrs.frozen
class SetEgressRerouteMissing(Metric):
    """``Metrics.set_egress_reroute_missing``: a Ready egress gateway of the network's VPC
    has lost its reroute for the network from the router."""

    namespace: str
    name: str
    missing: bool


@attrs.frozen
class SetVlanChanged(Metric):
    """``Metrics.set_vlan_changed``: the Vlan's ID was changed outside the controller."""

    namespace: str
    name: str
    changed: bool


@attrs.frozen
class SetStuckHolders(Metric):
    """``Metrics.set_stuck_holders``: consumers holding a deleting network's pool."""

    namespace: str
    name: str
    count: int


@attrs.frozen
class SetPoolConflicts(Metric):
    """``Metrics.set_pool_conflicts``: pools overlapping the network's, and conflicting ones."""

    namespace: str
    name: str
    overlaps: int
    conflicts: int


@attrs.frozen
class SetDeleting(Metric):
    """``Metrics.set_deleting``: the network is being deleted."""

    namespace: str
    name: str
    deleting: bool


@attrs.frozen
class ForgetNetwork(Metric):
    """``Metrics.forget_network``: drop the network's series."""

    namespace: str
    name: str


@attrs.frozen
class SetGatewayChassis(Metric):
    """``Metrics.set_gateway_chassis``: chassis in the network's HA chassis group."""

    namespace: str
    name: str
    count: int


@attrs.frozen
class SetGatewayReady(Metric):
    """``Metrics.set_gateway_ready``: GatewayReady is True."""

    namespace: str
    name: str
    ready: bool


@attrs.frozen
class ForgetGateway(Metric):
    """``Metrics.forget_gateway``: drop the network's gateway series (gateway disabled)."""

    namespace: str
    name: str


@attrs.frozen
class SetGatewayServing(Metric):
    """``Metrics.set_gateway_serving``: the serving chassis (``bound`` None: not known)."""

    namespace: str
    name: str
    bound: bool | None
    chassis: str


@attrs.frozen
class ReconcileError(Metric):
    """``Metrics.reconcile_error``: a pass that left Ready not True, by its reason."""

    reason: str


class Level(enum.Enum):
    """The level of a :class:`Log` line."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@attrs.frozen
class Log(BaseAction):
    """One structured log line at ``level``."""

    level: Level = attrs.field(validator=attrs.validators.instance_of(Level))
    event: str
    fields: Mapping[str, Any] = attrs.field(factory=dict)


Action = (
    Get | ListConsumers | SplitListed | AddFinalizer | RemoveFinalizer | AllocateVlan | AdoptVlan
    | SetPruneTimers | SetPoolCidrs | PruneReleasedVlans | ReleaseVlan | WriteStatus | Event | ReportOnce
    | RequestTriple | NetworkGone | ForgetOverlay | EnsureGateway | ReleaseGateway
    | SetZone | SetZoneKept | ForgetZone | SetNetwork | SetForeignSubnets | SetEgressRerouteMissing | SetVlanChanged
    | SetStuckHolders
    | SetPoolConflicts | SetDeleting | ForgetNetwork | SetGatewayChassis | SetGatewayReady | ForgetGateway
    | SetGatewayServing | ReconcileError | Log
)


@attrs.frozen
class Plan:
    """A planner's answer: actions in order; ``replan`` when the planner needs their results
    to go on; ``requeue_after`` (seconds, or None) of the pass once it settles."""

    actions: tuple[Action, ...] = ()
    replan: bool = False
    requeue_after: float | None = None

    @property
    def writes(self) -> tuple[Any, ...]:
        """The actions that change the cluster or the NB (not reads, Events, metrics, logs)."""
        return tuple(a for a in self.actions
                     if not isinstance(a, (Get, ListConsumers, SplitListed, Event, ReportOnce, Metric, Log)))
