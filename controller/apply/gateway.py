"""The NB side of a network pass (reference-behaviour.md §9.2, §9.6-§9.7;
product-decisions.md §4.6-§4.8): :class:`GatewayStep` runs ``ovn.gateway.GatewayApplier``
for a pass and holds a trunk node that left the ready set down for
``--trunk-node-hold-down`` (:class:`TrunkHoldDown`, field-reports.md R12);
:class:`GatewayCollector` removes the groups of deleted networks. What a pass shows from
the outcome is :mod:`controller.plan.gateway`.
"""

from __future__ import annotations

import datetime as _dt
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from controller.runtime.events import EventRecorder
from controller.metrics import Metrics
from informers.store import ThreadSafeStore
from ovn import planner
from ovn.gateway import GatewayApplier

from ovn.ovsdb import NBError
from controller.plan.gateway import GatewayOutcome, NB_GRACE_PERIOD, SERVING_SETTLE, failure_class, settled_serving
from controller.watch.indexes import BY_PROVIDER
from controller.rules.egress_reroute import RouterPolicies

log = structlog.get_logger(__name__)

COLLECT_PERIOD = 300.0  # DefaultGatewayCollectPeriod (§9.6)


# field-reports.md R12: the default of --trunk-node-hold-down (seconds).
DEFAULT_TRUNK_HOLD_DOWN = 90.0


class TrunkHoldDown:
    """field-reports.md R12: a trunk node that leaves the provider's ready set stays in the
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
        ready = planner.trunk_nodes(self.nodes.by_index(BY_PROVIDER, provider), provider)
        return self.hold.apply(provider, ready, self.nodes.get)

    def binding(self, vpc: str, subnet: str) -> Any:
        """The ``cr-`` binding of the network's router port from the OVN SB
        (``ovn.sb.Binding``), or None when the SB is not read."""
        return self.sb.binding(planner.router_port_name(vpc, subnet)) if self.sb is not None else None

    def router_policies(self, vpc: str) -> RouterPolicies:
        """The priority-29100 policies of the VPC's router (named after the VPC) in the NB
        client's copy (``ovn.policies``); not known while the NB is not synced."""
        known, present, policies = self.applier.policies.router(vpc)
        if not known or not self.applier.synced():
            return RouterPolicies(False, error=self.applier.nb.last_error or "the OVN NB is not synced")
        return RouterPolicies(True, present, policies)

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


