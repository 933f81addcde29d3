"""The vocabulary of plans: what a planner may ask the executor to read or write.

A planner (``controller.plan.network``, ``controller.plan.zone``) is a pure function from
a snapshot to a :class:`Plan`. The executor (``controller.apply.executor``) applies a plan's actions
in order, stops at the first failure (the error propagates to the worker, which retries
with backoff), and folds what each action returned into the snapshot under the field the
action names (``into``). A plan with ``replan`` set needs those results before it can
decide further: the runner calls the planner again on the evolved snapshot. An action is a
value: one the runner has applied in this pass is not applied again when a later plan of
the same pass repeats it (``controller.apply.executor.run``).

A field that a read has not filled yet holds :data:`UNREAD`; a read that found nothing
fills ``None``. ``into`` names a snapshot field, or one key of a mapping field as
``field[key]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

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


# -- reads (fresh, from the API server: §6 decides a release on fresh reads only) ----------


@attrs.frozen
class Get:
    """GET one object; NotFound fills ``None``. Another API error raises, unless
    ``tolerate`` is set: then it fills :data:`FAILED` (the planner treats the object as
    possibly there, never as gone)."""

    resource: Resource
    name: str
    namespace: str | None
    into: str
    tolerate: bool = False


@attrs.frozen
class ListConsumers:
    """Count the consumers of pool ``pool`` in ``namespace`` from fresh LISTs (field report
    field-reports.md B15): fills a :class:`controller.rules.consumers.Consumers`."""

    namespace: str
    pool: str
    into: str


@attrs.frozen
class SplitListed:
    """Split a Vlan's ``status.subnets`` into live and gone names by a GET of each (§6 step
    4): fills ``(live, gone)``, two tuples of names."""

    vlan: Mapping[str, Any]
    into: str


# -- API writes ----------------------------------------------------------------------------


@attrs.frozen
class AddFinalizer:
    """Add our finalizer (JSON patch guarded by a ``test`` op); fills the patched object."""

    resource: Resource
    obj: Mapping[str, Any]
    into: str | None = None


@attrs.frozen
class RemoveFinalizer:
    """Remove our finalizer; NotFound is ignored. Fills the patched object (``None`` when
    the object is gone)."""

    resource: Resource
    obj: Mapping[str, Any]
    into: str | None = None


@attrs.frozen
class AllocateVlan:
    """Pick the lowest eligible ID and create the network's Vlan, under the provider's lock
    (reference-behaviour.md §4.3, product-decisions.md §8). Fills ``vlan`` (the created or
    concurrently found Vlan), ``refusal`` (``(reason, message)`` when no ID can be given)
    and ``allocated_now``. ``annotations`` (``(key, value)`` pairs) go on the Vlan as it is
    created, so a value known at allocation costs no second write."""

    network: Mapping[str, Any]
    zone: Mapping[str, Any]
    annotations: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class AdoptVlan:
    """Make an owned Vlan ours again (§7.3): one guarded patch; fills ``vlan``."""

    vlan: Mapping[str, Any]


@attrs.frozen
class SetPruneTimers:
    """Store the ``deleted-subnets`` prune timers on a Vlan (§7.1); ``value`` None removes
    the annotation. Fills the patched Vlan."""

    vlan: Mapping[str, Any]
    value: str | None
    into: str


@attrs.frozen
class SetPoolCidrs:
    """Write the ``pool-cidrs`` annotation on the network's own Vlan (the pool's addresses
    as CIDRs, for admission; ``value`` None removes it): one JSON patch guarded by
    resourceVersion. Fills ``vlan`` with the patched Vlan."""

    vlan: Mapping[str, Any]
    value: str | None
    into: str = "vlan"


@attrs.frozen
class PruneReleasedVlans:
    """Write the zone's ``released-vlans`` annotation without its expired entries
    (controller.rules.reuse; ``value`` None removes it). Fills the patched zone."""

    zone: Mapping[str, Any]
    value: str | None
    into: str = "zone"


@attrs.frozen
class ReleaseVlan:
    """Remove our finalizer from the Vlan and delete it (NotFound ignored); fills
    ``released`` with True. ``log`` is the info line that records why."""

    vlan: Mapping[str, Any]
    log: str
    fields: Mapping[str, Any] = attrs.field(factory=dict)
    into: str = "released"


@attrs.frozen
class EventSpec:
    """A Kubernetes Event to post about the object a write returns."""

    type: str
    reason: str
    message: str


@attrs.frozen
class WriteStatus:
    """PUT the status subresource; fills the written object. ``event`` (the Ready
    transition, product-decisions.md §4.1) is posted about the written object."""

    resource: Resource
    obj: Mapping[str, Any]
    status: Mapping[str, Any]
    into: str
    event: EventSpec | None = None


@attrs.frozen
class Event:
    """Post a Kubernetes Event about ``obj``."""

    obj: Mapping[str, Any]
    type: str
    reason: str
    message: str


@attrs.frozen
class ReportOnce:
    """Warnings posted once each while they hold (field-reports.md S4): of ``events``, ``(key,
    Event)`` pairs, the executor posts the Events whose key it has not posted for network
    ``network`` (its key; ``uid`` tells a network made again under that name from the old one)
    since the key was last missing from a report, and forgets the keys missing from this one.
    The memory is the process's: after a restart or a leader change each is posted once more."""

    network: str
    uid: str
    events: tuple[tuple[str, Event], ...] = ()


@attrs.frozen
class RequestTriple:
    """Ask the namespace annotation's reconciler for ``triple`` (§5.9 step 8); fills
    ``annotation`` with the annotation's value after asking, and ``requested``."""

    namespace: str
    key: str
    triple: str


@attrs.frozen
class NetworkGone:
    """The network is NotFound: drop its series, its NB mapping and its triple (§5.9)."""

    key: str


@attrs.frozen
class ForgetOverlay:
    """Drop the read-your-writes copy of ``key``: the API server has moved on."""

    key: str


# -- OVN NB (the NB writer, ovn.gateway.GatewayApplier) -------------------------------------


@attrs.frozen
class EnsureGateway:
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


@attrs.frozen
class ReleaseGateway:
    """Delete the network's groups (§6 step 3, §9.6): fills ``gateway_release`` with ``""``
    when they are gone, else the NB error text."""

    key: str


# -- observability -------------------------------------------------------------------------


@attrs.frozen
class Metric:
    """Call ``controller.metrics.Metrics.<method>(*args)``."""

    method: str
    args: tuple[Any, ...] = ()


@attrs.frozen
class Log:
    """One structured log line (``level`` is a structlog method name)."""

    level: str
    event: str
    fields: Mapping[str, Any] = attrs.field(factory=dict)


Action = (
    Get | ListConsumers | SplitListed | AddFinalizer | RemoveFinalizer | AllocateVlan | AdoptVlan
    | SetPruneTimers | SetPoolCidrs | ReleaseVlan | WriteStatus | Event | ReportOnce | RequestTriple | NetworkGone
    | ForgetOverlay | EnsureGateway | ReleaseGateway | Metric | Log
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
