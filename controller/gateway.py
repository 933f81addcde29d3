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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import structlog

from controller import names
from controller.conditions import FALSE, TRUE, UNKNOWN, Clock, find, set_condition
from controller.rfc3339 import format_utc, parse
from controller.events import NORMAL, WARNING, EventRecorder
from controller.metrics import Metrics
from informers import ThreadSafeStore
from ovn import planner
from ovn.gateway import NB_UNAVAILABLE, GatewayApplier
from ovn.planner import CHASSIS_ASSIGNED, ROUTER_PORT_MISSING
from ovn.nb import NBError

log = structlog.get_logger(__name__)

NB_GRACE_PERIOD = 600.0  # gatewayNBGracePeriod, seconds (§9.5)
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
    if status == TRUE and reason == CHASSIS_ASSIGNED:
        was_up = True
    elif status == UNKNOWN and reason == NB_UNAVAILABLE:
        was_up = True
        t = parse((prev_gateway or {}).get("lastTransitionTime"))
        if t is not None and t < since:
            since = t
    elif prev_gateway is None or reason == "Disabled":
        was_up = (prev_ready or {}).get("status") == TRUE
    else:
        was_up = False
    deadline = since + _dt.timedelta(seconds=grace)
    if was_up and now < deadline:
        if status == TRUE:
            return Failure(TRUE, str(reason), str((prev_gateway or {}).get("message", "")), True, since)
        return Failure(
            UNKNOWN, NB_UNAVAILABLE,
            f'OVN NB has not answered since {format_utc(since)}, so the HA chassis group of router port '
            f'"{router_port}" is not known; the network stays Ready until {format_utc(deadline)}: {error}',
            False, since,
        )
    return Failure(
        FALSE, NB_UNAVAILABLE,
        f'could not bring the HA chassis group of router port "{router_port}" up to date in OVN NB since '
        f"{format_utc(since)}: {error}",
        False, since,
    )


class GatewayStep:
    """The gateway step of a network pass (§9.2) and the release hook of §6 step 3.

    :param applier: the NB side.
    :param nodes: Node cache with the ``provider`` index (``node_index_provider``).
    :param subnets: Subnet cache with the ``vpc`` index (``subnet_index_vpc``).
    """

    def __init__(
        self,
        applier: GatewayApplier,
        nodes: ThreadSafeStore,
        subnets: ThreadSafeStore | None,
        metrics: Metrics,
        events: EventRecorder | None = None,
        grace: float = NB_GRACE_PERIOD,
    ) -> None:
        self.applier = applier
        self.nodes = nodes
        self.subnets = subnets
        self.metrics = metrics
        self.events = events
        self.grace = grace

    def _event(self, obj: Mapping[str, Any], etype: str, reason: str, message: str) -> None:
        if self.events is not None:
            self.events.event(obj, etype, reason, message)

    def evaluate(
        self,
        net: Mapping[str, Any],
        zone: Mapping[str, Any],
        subnet: Mapping[str, Any],
        status: dict[str, Any],
        conds: list[dict[str, Any]],
        old_status: Mapping[str, Any],
        gen: int,
        now: Clock,
    ) -> None:
        """Set GatewayReady (and ``status.gatewayFailingSince``; the requeue of §5.10 is
        derived from them by ``controller.network.requeue_after``). Never raises for NB
        trouble: that is the grace's business."""
        meta = net["metadata"]
        ns, name = meta["namespace"], meta["name"]
        key = f"{ns}/{name}"
        sname = str((subnet.get("metadata") or {}).get("name") or "")
        vpc = str((subnet.get("spec") or {}).get("vpc") or "")
        if not vpc:
            status.pop(FAILING_SINCE, None)
            set_condition(conds, names.GATEWAY_READY, FALSE, ROUTER_PORT_MISSING,
                          f'Subnet "{sname}" has no spec.vpc yet, so its router port is unknown', gen, now)
            self.metrics.set_gateway_chassis(ns, name, 0)
            return
        provider = str((zone.get("spec") or {}).get("providerNetwork") or "")
        trunk = planner.trunk_nodes(self.nodes.by_index("provider", provider), provider) if provider else []
        siblings = self.subnets.index_key_set("vpc", vpc) if self.subnets else frozenset()
        lrp = planner.router_port_name(vpc, sname)
        old_conds = old_status.get("conditions") or []
        prev = find(old_conds, names.GATEWAY_READY)
        try:
            state = self.applier.ensure(key, vpc, sname, trunk, siblings)
        except NBError as err:
            self.metrics.gateway_nb_error()
            since = parse(old_status.get(FAILING_SINCE))
            f = gateway_failed(now(), prev, find(old_conds, names.READY), since, str(err), lrp, self.grace)
            log.error("could not bring the OVN HA chassis group up to date", routerPort=lrp,
                      failingSince=format_utc(f.since),
                      keptUntil=format_utc(f.since + _dt.timedelta(seconds=self.grace)),
                      kept=f.keep_previous or f.status == UNKNOWN, error=str(err))
            status[FAILING_SINCE] = format_utc(f.since)
            if f.keep_previous and prev is not None:
                cur = find(conds, names.GATEWAY_READY)
                if cur is not None:
                    cur.clear()
                    cur.update(prev)
                else:
                    conds.append(dict(prev))
            else:
                set_condition(conds, names.GATEWAY_READY, f.status, f.reason, f.message, gen, now)
            if since is None:
                self._event(net, WARNING, "NBUnavailable", f"OVN NB unavailable for router port \"{lrp}\": {err}")
            return
        recovered = FAILING_SINCE in old_status
        status.pop(FAILING_SINCE, None)
        self.metrics.set_gateway_chassis(ns, name, state.chassis)
        set_condition(conds, names.GATEWAY_READY, TRUE if state.assigned else FALSE, state.reason, state.message, gen, now)
        if recovered:
            self._event(net, NORMAL, "NBRecovered", f'OVN NB answers again for router port "{lrp}"')
        if state.created:
            self._event(net, NORMAL, "GatewayGroupCreated", state.message)
        elif state.adopted:
            self._event(net, NORMAL, "GatewayGroupAdopted", state.message)
        elif state.updated:
            self._event(net, NORMAL, "GatewayGroupUpdated", state.message)

    def release(self, net: Mapping[str, Any]) -> str | None:
        """§6 step 3 / §9.6: delete the network's groups. None when gone, else the error."""
        meta = net["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        try:
            self.applier.release(key)
        except NBError as err:
            self.metrics.gateway_nb_error()
            return str(err)
        return None


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

    def collect_once(self) -> int:
        deleted = 0
        try:
            if not self.applier.nb.wait_synced(10):
                raise NBError(f"OVN NB IDL is not synced: {self.applier.nb.last_error}")
            deleted = self.applier.collect(self.network_exists)
        except Exception as err:  # noqa: BLE001 - logged; the next period retries
            self.log.error("collect OVN HA chassis groups of deleted networks", deleted=deleted, error=str(err))
        if deleted:
            self.metrics.gateway_group_collected(deleted)
        self.runs += 1
        return deleted

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.collect_once()
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
