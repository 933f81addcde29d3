"""GatewayReady of a network pass, the NB failure grace, release and collection glue
(reference-behaviour.md §9.2, §9.5-§9.7; product-decisions.md §4.6-§4.8).

The NB work itself is ``ovn.gateway.GatewayApplier``; this module decides what a pass
does with its outcome. The start of an NB failure is kept in the object
(``status.gatewayFailingSince``, RFC 3339), not in memory, so a controller restart
neither extends nor restarts the 10 min grace (product-decisions.md §4.6).
"""

from __future__ import annotations

import datetime as _dt
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import structlog

from controller import names, reasons
from controller.plan.actions import Event, Log, Metric
from controller.rules.conditions import FALSE, TRUE, UNKNOWN, find, set_condition
from controller.rfc3339 import format_utc, parse
from controller.runtime.events import NORMAL, WARNING, EventRecorder
from controller.metrics import Metrics
from informers import ThreadSafeStore
from ovn import planner
from ovn.gateway import GatewayApplier

from ovn.nb import NBError

log = structlog.get_logger(__name__)

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
COLLECT_PERIOD = 300.0  # DefaultGatewayCollectPeriod (§9.6)
FAILING_SINCE = "gatewayFailingSince"  # status field holding the failure start


def node_index_provider(node: Mapping[str, Any]) -> list[str]:
    """Indexer ``provider``: provider networks whose ready label is ``true`` on the node."""
    labels = ((node.get("metadata") or {}).get("labels")) or {}
    out = []
    for k, v in labels.items():
        if isinstance(k, str) and k.endswith(planner.READY_LABEL_SUFFIX) and v == "true":
            p = k[: -len(planner.READY_LABEL_SUFFIX)]
            if p:
                out.append(p)
    return out


def node_providers(node: Mapping[str, Any] | None) -> set[str]:
    """Provider names of every ``*.provider-network.kubernetes.io/ready`` label, any value (§9.7)."""
    labels = (((node or {}).get("metadata") or {}).get("labels")) or {}
    out = set()
    for k in labels:
        if isinstance(k, str) and k.endswith(planner.READY_LABEL_SUFFIX) and len(k) > len(planner.READY_LABEL_SUFFIX):
            out.add(k[: -len(planner.READY_LABEL_SUFFIX)])
    return out


def gateway_key(node: Mapping[str, Any] | None) -> tuple[str, bool]:
    """§9.7 predicate key: sorted ``<ready label>=<value>`` list, ``|``, the chassis
    annotation; plus whether the node is deleting."""
    meta = (node or {}).get("metadata") or {}
    labels = meta.get("labels") or {}
    parts = sorted(f"{k}={v}" for k, v in labels.items() if isinstance(k, str) and k.endswith(planner.READY_LABEL_SUFFIX))
    chassis = (meta.get("annotations") or {}).get(planner.CHASSIS_ANNOTATION) or ""
    return ",".join(parts) + "|" + str(chassis), bool(meta.get("deletionTimestamp"))


def subnet_index_vpc(subnet: Mapping[str, Any]) -> list[str]:
    """Indexer ``vpc``: a Subnet's ``spec.vpc``."""
    v = (subnet.get("spec") or {}).get("vpc")
    return [v] if isinstance(v, str) and v else []


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
    state: planner.GatewayState,
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


# Classes of an NB failure (field reports, fourth round, O6): an NBUnavailable Event is posted
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

    state: planner.GatewayState | None = None
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
    (``controller.plan.network.requeue_after``).

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
        out.append(Log("error", "could not bring the OVN HA chassis group up to date", {
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
    out.append(Metric("set_gateway_chassis", (ns, name, state.chassis)))
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


# Field report R12: the default of --trunk-node-hold-down (seconds).
DEFAULT_TRUNK_HOLD_DOWN = 90.0


class TrunkHoldDown:
    """Field report R12: a trunk node that leaves the provider's ready set stays in the
    groups for ``hold_down`` seconds. kube-ovn-cni removes a node's
    ``<provider>.provider-network.kubernetes.io/ready`` label at each of its starts and sets
    it again once the bridge is up (pkg/daemon/controller.go, initProviderNetwork), so a
    restart of it is a flap; rewriting the groups for it moves the active chassis, which
    costs traffic that OVN's own BFD failover would not (a dead node keeps its label: BFD
    moves the gateway off it). A node that comes back is a member again at once; a node
    deleted (or deleting), or whose chassis annotation changed or went, leaves at once.

    Memory is this process's: a node not ready when the controller starts leaves at once.
    Thread-safe (the workers share it). ``clock``: monotonic seconds.
    """

    def __init__(self, hold_down: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.hold_down = hold_down
        self.clock = clock
        self._seen: dict[tuple[str, str], tuple[str, float]] = {}  # (provider, node) -> (chassis, last ready)
        self._lock = threading.Lock()

    def apply(self, provider: str, ready: list[planner.TrunkNode],
              node: Callable[[str], Mapping[str, Any] | None]) -> tuple[list[planner.TrunkNode], float | None]:
        """The trunk of ``provider``: ``ready`` (:func:`ovn.planner.trunk_nodes`) plus the
        nodes held down, by name; and the seconds until the first held one leaves (None:
        none held). ``node`` looks a Node up by name in the cache."""
        if self.hold_down <= 0:
            return ready, None
        now = self.clock()
        held: list[planner.TrunkNode] = []
        recheck: float | None = None
        with self._lock:
            for n in ready:
                self._seen[(provider, n.name)] = (n.chassis, now)
            names_ = {n.name for n in ready}
            taken = {n.chassis for n in ready}
            for (p, name), (chassis, at) in list(self._seen.items()):
                if p != provider or name in names_:
                    continue
                left = self.hold_down - (now - at)
                meta = ((node(name) or {}).get("metadata") or {})
                now_chassis = ((meta.get("annotations") or {}).get(planner.CHASSIS_ANNOTATION) or "").strip()
                if left <= 0 or not meta or meta.get("deletionTimestamp") or now_chassis != chassis or chassis in taken:
                    del self._seen[(p, name)]
                    continue
                held.append(planner.TrunkNode(name, chassis))
                taken.add(chassis)
                recheck = left if recheck is None else min(recheck, left)
        return sorted(ready + held, key=lambda n: n.name), recheck


class GatewayStep:
    """The NB side of a network pass (§9.2) and of its release (§6 step 3): the caches it
    reads and the NB writer it calls; what a pass makes of the outcome is
    :func:`gateway_status`.

    :param applier: the NB writer.
    :param nodes: Node cache with the ``provider`` index (``node_index_provider``).
    :param subnets: Subnet cache with the ``vpc`` index (``subnet_index_vpc``).
    :param sb: the OVN SB reader (``ovn.sb.SBReader``), or None: GatewayReady then says what
        the NB holds only.
    :param failback: with the SB read, let the preferred chassis take a gateway back after
        a failover (``--gateway-failback``); off, the serving chassis stays on top.
    :param overlay_mtu: the MTU Kube-OVN gives the VPC's pods (``--overlay-mtu``), the bound of
        each router port's ``options:gateway_mtu`` (``ovn.planner.gateway_mtu``; 0: the
        option is left alone).
    """

    def __init__(
        self,
        applier: GatewayApplier,
        nodes: ThreadSafeStore,
        subnets: ThreadSafeStore | None,
        metrics: Metrics,
        events: EventRecorder | None = None,
        grace: float = NB_GRACE_PERIOD,
        hold_down: float = 0.0,
        sb: Any = None,
        settle: float = SERVING_SETTLE,
        failback: bool = False,
        overlay_mtu: int = planner.KUBE_OVN_OVERLAY_MTU,
    ) -> None:
        self.applier = applier
        self.overlay_mtu = overlay_mtu
        self._failures: dict[str, frozenset[str]] = {}  # network key -> NB failure classes of its outage
        self.sb = sb
        self.failback = failback
        self.settle = settle
        self.nodes = nodes
        self.subnets = subnets
        self.metrics = metrics
        self.events = events
        self.grace = grace
        self.hold = TrunkHoldDown(hold_down)

    def trunk(self, provider: str) -> tuple[list[planner.TrunkNode], float | None]:
        """The trunk nodes of ``provider`` from the Node cache (§9.3) with those held down
        (:class:`TrunkHoldDown`), and the seconds until a held one leaves (None: none)."""
        if not provider:
            return [], None
        ready = planner.trunk_nodes(self.nodes.by_index("provider", provider), provider)
        return self.hold.apply(provider, ready, self.nodes.get)

    def binding(self, vpc: str, subnet: str) -> Any:
        """The ``cr-`` binding of the network's router port from the OVN SB
        (``ovn.sb.Binding``), or None when the SB is not read."""
        return self.sb.binding(planner.router_port_name(vpc, subnet)) if self.sb is not None else None

    def siblings(self, vpc: str) -> frozenset[str]:
        """Names of the VPC's subnets (whose groups vote on the active chassis, §9.4)."""
        return self.subnets.index_key_set("vpc", vpc) if self.subnets else frozenset()

    def ensure(self, key: str, vpc: str, subnet: str, trunk: Iterable[planner.TrunkNode],
               siblings: Iterable[str], serving: str = "", zone_mtu: int | None = None) -> GatewayOutcome:
        """One NB ensure; NB trouble becomes an outcome with the error (never raises for it).
        ``serving`` (the chassis holding ``cr-``) is kept on top unless failback is on;
        ``zone_mtu`` (the zone's ``mtu``, None unset) bounds the port's ``gateway_mtu``."""
        lrp = planner.router_port_name(vpc, subnet)
        serving, deferred = ("", None) if self.failback else settled_serving(
            serving, self.applier.written_at(lrp), _dt.datetime.now(_dt.timezone.utc), self.settle)
        try:
            state = self.applier.ensure(key, vpc, subnet, list(trunk), siblings, serving,
                                        planner.gateway_mtu(zone_mtu, self.overlay_mtu))
        except NBError as err:
            self.metrics.gateway_nb_error()
            text = str(err)
            seen = self._failures.get(key)
            self._failures[key] = (seen or frozenset()) | {failure_class(text)}
            return GatewayOutcome(error=text, announced=seen)
        self._failures.pop(key, None)
        return GatewayOutcome(state=state, written_at=self.applier.written_at(lrp), deferred=deferred)

    def owns(self, key: str) -> bool:
        """The NB cache holds a group owned by network ``key`` (no NB round trip; False
        before the first sync, when the collector is the backstop: §9.6)."""
        return self.applier.owns(key)

    def release(self, key: str) -> str:
        """§6 step 3 / §9.6: delete the network's groups. ``""`` when gone, else the error."""
        try:
            self.applier.release(key)
        except NBError as err:
            self.metrics.gateway_nb_error()
            return str(err) or type(err).__name__
        self._failures.pop(key, None)
        return ""


class GatewayCollector:
    """Deletes owned groups whose network is gone: at start, then every ``period``
    seconds, only while leading (§9.6). Errors are logged and retried next period."""

    def __init__(
        self,
        applier: GatewayApplier,
        network_exists: Callable[[str, str], bool],
        metrics: Metrics,
        period: float = COLLECT_PERIOD,
    ) -> None:
        self.applier = applier
        self.network_exists = network_exists
        self.metrics = metrics
        self.period = period if period > 0 else COLLECT_PERIOD
        self.runs = 0
        self.log = structlog.get_logger("gateway-collector")

    def collect_once(self, stop: threading.Event | None = None) -> int:
        """One collection; waits up to 10 s for the NB's first sync, less when ``stop`` is
        set meanwhile. Returns the number of groups deleted."""
        deleted = 0
        try:
            if not self.applier.nb.wait_synced(10, cancel=stop):
                raise NBError(f"OVN NB IDL is not synced: {self.applier.nb.last_error}")
            deleted = self.applier.collect(self.network_exists, cancel=stop)
        except Exception as err:  # noqa: BLE001 - logged; the next period retries
            self.log.error("collect OVN HA chassis groups of deleted networks", deleted=deleted, error=str(err))
        if deleted:
            self.metrics.gateway_group_collected(deleted)
        self.runs += 1
        return deleted

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.collect_once(stop)
            if stop.wait(self.period):
                return


def networks_for_node(
    old: Mapping[str, Any] | None, new: Mapping[str, Any] | None, zones: Iterable[Mapping[str, Any]],
    networks_of_zone: Callable[[str], Iterable[str]],
) -> list[str]:
    """§9.7: network keys a Node event concerns (old and new both mapped); [] when the
    update does not change the gateway key or the deleting flag."""
    if old is not None and new is not None and gateway_key(old) == gateway_key(new):
        return []
    providers = node_providers(old) | node_providers(new)
    if not providers:
        return []
    out: list[str] = []
    for z in zones:
        if (z.get("spec") or {}).get("providerNetwork") in providers:
            out.extend(networks_of_zone(z["metadata"]["name"]))
    return out
