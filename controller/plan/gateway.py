"""GatewayReady of a network pass, pure (reference-behaviour.md §9.2, §9.5; product-decisions.md
§4.6-§4.8, §10): what a pass shows from the NB step's outcome (:class:`GatewayOutcome`) and
the OVN SB's binding, the NB failure grace, and the classes of an NB failure.

The start of an NB failure is kept in the object (``status.gatewayFailingSince``, RFC
3339), not in memory, so a controller restart neither extends nor restarts the 10 min
grace (product-decisions.md §4.6). The NB work itself is ``ovn.gateway.GatewayApplier``,
run by :mod:`controller.apply.gateway`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

import attrs

from controller import names, reasons
from controller.plan.actions import (
    Event,
    Level,
    Log,
    SetGatewayChassis,
)
from controller.rules.conditions import FALSE, TRUE, UNKNOWN, find, set_condition
from controller.rfc3339 import format_utc, parse
from controller.names import NORMAL, WARNING
from ovn import nb_plan, planner



NB_GRACE_PERIOD = 600.0  # gatewayNBGracePeriod, seconds (§9.5)


# Seconds a cr- binding may be missing before GatewayReady says nothing serves: OVN's own
# failover among three chassis leaves it unbound 2.3-2.7 s (docs/reliability.md), which is
# not an outage worth a Ready flap.
SERVING_SETTLE = 5.0


SERVING_CHASSIS = "servingChassis"  # status field: the SB chassis holding cr-<router port>


GATEWAY_MTU = "gatewayMtu"  # status field: the router port's options:gateway_mtu (product-decisions.md §10)


# GatewayReady reasons next to which the router port's group, and so its gateway_mtu, stands.
GROUP_STANDS = (reasons.CHASSIS_ASSIGNED, reasons.SB_UNAVAILABLE, reasons.NO_SERVING_CHASSIS, reasons.NB_UNAVAILABLE,
                reasons.NO_TRUNK_NODES)


FAILING_SINCE = "gatewayFailingSince"  # status field holding the failure start


@attrs.frozen
class Failure:
    """What §9.5 makes of a failed gateway pass."""

    status: str
    reason: str
    message: str
    keep_previous: bool  # prev True within the grace: the stored condition stays as it is
    since: _dt.datetime


def gateway_failed(
    now: _dt.datetime,
    prev_gateway: Mapping[str, Any] | None,
    prev_ready: Mapping[str, Any] | None,
    since: _dt.datetime | None,
    error: str,
    router_port: str,
    grace: float = NB_GRACE_PERIOD,
) -> Failure:
    """The NB failure grace of reference-behaviour.md §9.5, with the failure start kept in
    the object (product-decisions.md §4.6).

    :param prev_gateway: GatewayReady of the last written status (not the in-pass copy).
    :param prev_ready: Ready of the last written status.
    :param since: the stored failure start, or None on the first failure.
    """
    since = since or now
    reason = (prev_gateway or {}).get("reason")
    status = (prev_gateway or {}).get("status")
    if status == TRUE and reason == reasons.CHASSIS_ASSIGNED:
        was_up = True
    elif status == UNKNOWN and reason == reasons.NB_UNAVAILABLE:
        was_up = True
        t = parse((prev_gateway or {}).get("lastTransitionTime"))
        if t is not None and t < since:
            since = t
    elif prev_gateway is None or reason in (reasons.DISABLED, reasons.SB_UNAVAILABLE):
        was_up = (prev_ready or {}).get("status") == TRUE
    else:
        was_up = False
    deadline = since + _dt.timedelta(seconds=grace)
    if was_up and now < deadline:
        if status == TRUE:
            return Failure(TRUE, str(reason), str((prev_gateway or {}).get("message", "")), True, since)
        return Failure(
            UNKNOWN, reasons.NB_UNAVAILABLE,
            f'OVN NB has not answered since {format_utc(since)}, so the HA chassis group of router port '
            f'"{router_port}" is not known; the network stays Ready until {format_utc(deadline)}: {error}',
            False, since,
        )
    return Failure(
        FALSE, reasons.NB_UNAVAILABLE,
        f'could not bring the HA chassis group of router port "{router_port}" up to date in OVN NB since '
        f"{format_utc(since)}: {error}",
        False, since,
    )


@attrs.frozen
class Serving:
    """GatewayReady as the OVN SB shows it (product-decisions.md §10), from :func:`serving`.

    :ivar chassis: the serving chassis to record in ``status.servingChassis``; "" records
        nothing (the stored value stays unless GatewayReady's reason drops it:
        ``controller.plan.network``'s ``finish``).
    :ivar keep_previous: the stored GatewayReady stays as it is (a binding missing for less
        than the settle time, with the gateway served before).
    :ivar recheck: seconds until the pass must look again (the settle time left), or None.
    """

    status: str
    reason: str
    message: str
    chassis: str
    keep_previous: bool = False
    recheck: float | None = None


def serving(
    binding: Any,
    state: nb_plan.GatewayState,
    lrp: str,
    prev_gateway: Mapping[str, Any] | None,
    now: _dt.datetime,
    settle: float = SERVING_SETTLE,
    written_at: _dt.datetime | None = None,
) -> Serving:
    """GatewayReady of a network whose group the NB pass assigned (``state.assigned``), from
    the SB binding of ``cr-<lrp>`` (``ovn.sb.Binding``): product-decisions.md §10.

    * SB not known: Unknown ``SBUnavailable`` (never False on an SB outage alone; Ready is
      not decided by it, ``controller.rules.conditions.compute_ready``); an outage already known
      (False ``NoServingChassis``) stays as it was.
    * bound to a member of the group: True ``ChassisAssigned``, the NB message plus the
      serving chassis and its node.
    * otherwise (no ``cr-`` port, unbound, or bound to a chassis not in the group): False
      ``NoServingChassis`` saying since when, once that has lasted ``settle`` seconds from the
      later of the binding's change and the group's last write (``written_at``: a member
      that just left still holds the port until OVN moves it). Until then a True
      ChassisAssigned stays as it was (an OVN failover in progress), and another condition
      becomes True ``ChassisAssigned`` with the NB's message (a new group, not yet claimed).
    """
    prev = prev_gateway or {}
    known_outage = prev.get("status") == FALSE and prev.get("reason") == reasons.NO_SERVING_CHASSIS
    if not binding.known and known_outage:
        return Serving(FALSE, reasons.NO_SERVING_CHASSIS, str(prev.get("message", "")), "", True)
    if not binding.known:
        since = format_utc(binding.since) if binding.since is not None else "the controller's start"
        return Serving(UNKNOWN, reasons.SB_UNAVAILABLE,
                       f'OVN SB has not answered since {since}, so which chassis serves router port "{lrp}" is not '
                       f"known; the HA chassis group is left as it is: {binding.error}", "")
    if binding.chassis and binding.chassis in state.members:
        node = f" (node {binding.hostname})" if binding.hostname else ""
        return Serving(TRUE, reasons.CHASSIS_ASSIGNED,
                       f'{state.message}; chassis "{binding.chassis}"{node} serves it', binding.chassis)
    since = binding.since or now
    if known_outage:
        t = parse(prev.get("lastTransitionTime"))
        if t is not None and t < since:
            since = t  # the outage began before this process saw it (a restart)
    settle_from = max(since, written_at) if written_at is not None else since
    elapsed = (now - settle_from).total_seconds()
    if elapsed < settle and not known_outage:
        if prev.get("status") == TRUE and prev.get("reason") == reasons.CHASSIS_ASSIGNED:
            return Serving(TRUE, str(prev.get("reason")), str(prev.get("message", "")), "", True, settle - elapsed)
        return Serving(TRUE, reasons.CHASSIS_ASSIGNED, state.message, "", False, settle - elapsed)
    if not binding.present:
        why = f"OVN SB has no chassis-redirect port cr-{lrp} (ovn-northd has not made it)"
    elif binding.chassis:
        why = (f'cr-{lrp} is bound to chassis "{binding.chassis}", which is not in HA chassis group '
               f'"{planner.GROUP_PREFIX}{lrp}"')
    else:
        why = f"cr-{lrp} is bound to no chassis: no chassis of the group is active"
    return Serving(
        FALSE, reasons.NO_SERVING_CHASSIS,
        f'nothing serves router port "{lrp}" since {format_utc(since)}: {why}; '
        f"the group has {len(state.members)} chassis ({', '.join(state.members)})"
        f"{planner.failover_note(len(state.members))}",
        "",
    )


def _keep(conds: list[dict[str, Any]], prev: Mapping[str, Any]) -> None:
    """GatewayReady stays exactly as last written (status, reason, message, transition time)."""
    cur = find(conds, names.GATEWAY_READY)
    if cur is not None:
        cur.clear()
        cur.update(prev)
    else:
        conds.append(dict(prev))


def settled_serving(serving: str, written_at: _dt.datetime | None, now: _dt.datetime,
                    settle: float) -> tuple[str, float | None]:
    """The serving chassis the planner keeps on top, and the seconds until one left out
    counts (None: nothing left out). Within ``settle`` seconds of this process's last write
    of the group, OVN is still settling it: its members claim ``cr-`` in turn until BFD is up
    (measured on the bed: a lower member held it for about a second after a group was made),
    and raising each transient holder would start a claim war; the group's own order stands
    then (``ovn.planner.wanted_chassis``)."""
    if not serving or written_at is None:
        return serving, None
    left = settle - (now - written_at).total_seconds()
    return ("", left) if left > 0 else (serving, None)


# Classes of an NB failure (field-reports.md O6): an NBUnavailable Event is posted
# when a failure starts, and again for each class the outage had not shown yet (a certificate
# rotation turns a refused connection into a refused handshake), so the Event an operator reads
# names the current cause; a failure flipping between two classes posts no more.
TLS_FAILURE, CONNECTION_FAILURE, WRITE_FAILURE = "tls", "connection", "write"


FAILURE_TEXT = {TLS_FAILURE: "the TLS handshake or the TLS Secret fails",
                CONNECTION_FAILURE: "the connection fails", WRITE_FAILURE: "writes fail"}


_TLS_MARKS = ("TLS handshake", "OVN TLS secret", "TLS material")


_CONNECTION_MARKS = ("connect", "not synced", "timed out", "did not answer", "refused", "unreachable")


def failure_class(error: str) -> str:
    """The class of an NB error text (``ovn.tls``/``ovn.nb`` wording): ``tls`` (a handshake or
    the Secret's material), ``connection`` (no connection, not synced, timed out), else
    ``write`` (a transaction refused or aborted)."""
    if any(m in error for m in _TLS_MARKS):
        return TLS_FAILURE
    if any(m in error for m in _CONNECTION_MARKS):
        return CONNECTION_FAILURE
    return WRITE_FAILURE


@attrs.frozen
class GatewayOutcome:
    """What one NB ensure gave: the state, or the NB error text (never both)."""

    state: nb_plan.GatewayState | None = None
    error: str | None = None
    written_at: _dt.datetime | None = None  # the port's group last written by this process (aware UTC)
    deferred: float | None = None  # seconds until the serving chassis left out (settle) is kept on top
    # The classes of NB failure this process has seen for the network in the current outage
    # (None: none seen here yet); a class not among them is announced with an Event.
    announced: frozenset[str] | None = None


def gateway_status(
    outcome: GatewayOutcome,
    net: Mapping[str, Any],
    lrp: str,
    status: dict[str, Any],
    conds: list[dict[str, Any]],
    old_status: Mapping[str, Any],
    gen: int,
    now: _dt.datetime,
    grace: float = NB_GRACE_PERIOD,
    binding: Any = None,
    settle: float = SERVING_SETTLE,
) -> tuple[list[Any], float | None]:
    """GatewayReady, ``status.gatewayFailingSince``, ``status.gatewayMtu`` and ``status.servingChassis`` from an NB
    outcome (§9.2, the grace of §9.5) and, when the SB is read, the router port's ``cr-``
    binding (``binding``, an ``ovn.sb.Binding``; product-decisions.md §10, :func:`serving`),
    set in ``status``/``conds``; the requeue of §5.10 follows from them
    (``controller.plan.network_status.requeue_after``).

    :returns: the Events, log lines and metrics of the outcome, as plan actions; and the
        seconds after which the pass must look at the binding again (None: no need).
    """
    meta = net["metadata"]
    ns, name = meta["namespace"], meta["name"]
    clock = lambda: now  # noqa: E731
    old_conds = old_status.get("conditions") or []
    prev = find(old_conds, names.GATEWAY_READY)
    out: list[Any] = []
    if outcome.state is None:
        err = outcome.error or ""
        since = parse(old_status.get(FAILING_SINCE))
        f = gateway_failed(now, prev, find(old_conds, names.READY), since, err, lrp, grace)
        out.append(Log(Level.ERROR, "could not bring the OVN HA chassis group up to date", {
            "routerPort": lrp, "failingSince": format_utc(f.since),
            "keptUntil": format_utc(f.since + _dt.timedelta(seconds=grace)),
            "kept": f.keep_previous or f.status == UNKNOWN, "error": err,
        }))
        status[FAILING_SINCE] = format_utc(f.since)
        if f.keep_previous and prev is not None:
            _keep(conds, prev)
        else:
            set_condition(conds, names.GATEWAY_READY, f.status, f.reason, f.message, gen, clock)
        if since is None:
            out.append(Event(net, WARNING, reasons.NB_UNAVAILABLE, f"OVN NB unavailable for router port \"{lrp}\": {err}"))
        elif outcome.announced is not None and failure_class(err) not in outcome.announced:
            out.append(Event(net, WARNING, reasons.NB_UNAVAILABLE,
                             f'OVN NB still unavailable for router port "{lrp}", now {FAILURE_TEXT[failure_class(err)]}: '
                             f"{err}"))
        return out, None
    state = outcome.state
    recovered = FAILING_SINCE in old_status
    status.pop(FAILING_SINCE, None)
    if state.mtu > 0:
        status[GATEWAY_MTU] = state.mtu
    else:
        status.pop(GATEWAY_MTU, None)
    out.append(SetGatewayChassis(ns, name, state.chassis))
    recheck: float | None = None
    if state.assigned and binding is not None:
        sv = serving(binding, state, lrp, prev, now, settle, outcome.written_at)
        recheck = sv.recheck
        if outcome.deferred is not None and binding.chassis and binding.chassis != state.active:
            recheck = min(outcome.deferred, recheck) if recheck is not None else outcome.deferred
        if sv.keep_previous and prev is not None:
            _keep(conds, prev)
        else:
            set_condition(conds, names.GATEWAY_READY, sv.status, sv.reason, sv.message, gen, clock)
        was = old_status.get(SERVING_CHASSIS) or ""
        if sv.chassis:
            status[SERVING_CHASSIS] = sv.chassis
            if was and sv.chassis != was:
                out.append(Event(net, NORMAL, reasons.GATEWAY_MOVED,
                                 f'chassis "{sv.chassis}" serves router port "{lrp}" now, not "{was}"'))
    else:
        set_condition(conds, names.GATEWAY_READY, TRUE if state.assigned else FALSE, state.reason, state.message, gen,
                      clock)
    if recovered:
        out.append(Event(net, NORMAL, reasons.NB_RECOVERED, f'OVN NB answers again for router port "{lrp}"'))
    if state.created:
        out.append(Event(net, NORMAL, reasons.GATEWAY_GROUP_CREATED, state.message))
    elif state.adopted:
        out.append(Event(net, NORMAL, reasons.GATEWAY_GROUP_ADOPTED, state.message))
    elif state.updated:
        out.append(Event(net, NORMAL, reasons.GATEWAY_GROUP_UPDATED, state.message))
    if (state.created or state.adopted or state.updated) and state.assigned and 0 < state.chassis < planner.FAILOVER_CHASSIS:
        out.append(Event(net, WARNING, reasons.GATEWAY_WITHOUT_FAILOVER,
                         f'router port "{lrp}" has a gateway of {state.chassis} chassis' + planner.failover_note(state.chassis)))
    return out, recheck
