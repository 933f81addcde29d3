"""Prometheus metrics of the controller (``reference-behaviour.md`` §13 and more).

One :class:`Metrics` object owns one :class:`prometheus_client.CollectorRegistry`,
so tests can build as many independent instances as they like, and the
controller serves exactly this registry on its metrics endpoint (:meth:`Metrics.serve`).

What is exported
================

The reference's series, names, types and labels verbatim (``reference-behaviour.md`` §13),
and ours on top of them: the zone's kept VLANs, the network's foreign Subnets, pool overlaps
and address conflicts, stuck holders and changed VLANs, the gateway as the NB holds it and as
the SB shows it serving (product-decisions.md §10), status writes and pruned status fields
by CRD (``controller.schema``), the leader gauge, 401s on a token read from a file, the
informers' health (read from the informers at scrape time, :meth:`Metrics.register_informers`)
and client-go's work-queue series per queue (``controller.runtime.workqueue_metrics``).
``docs/metrics.md`` lists every series with its type, labels and lifecycle;
``tests/test_prometheus_integration.py`` holds this registry to that list on a real Prometheus.

Counters and histograms carry no ``*_created`` series, as with the Go client:
dashboards and alerts written for the reference see the same families.

Lifecycle (§13)
===============

* :meth:`Metrics.set_network` on every non-deleting pass: all
  ``network_ready`` series of (namespace, network) go, then one is set, with
  ``vlan`` the decimal status.vlan (``"0"`` before allocation). The pool
  series are set only when status.ipPool is there and are *not* removed when it
  goes away.
* :meth:`Metrics.forget_network` once the network is gone: ``network_ready``
  and ``network_ippool_addresses`` by partial match, ``network_consumers``,
  ``network_deleting``, ``network_vlan_changed_externally``, ``network_stuck_holders``,
  ``network_pool_overlaps``, ``network_address_conflicts``, ``network_gateway_chassis``
  and ``network_gateway_ready``.
* :meth:`Metrics.forget_zone` when the zone is NotFound.
* the gateway series: :meth:`Metrics.set_gateway_chassis`,
  :meth:`Metrics.set_gateway_ready`, :meth:`Metrics.forget_gateway` (GatewayReady
  absent or Disabled), :meth:`Metrics.gateway_group_collected`,
  :meth:`Metrics.gateway_nb_error`.

prometheus-client's ``remove`` needs every label value, and partial-match
removal is not in every supported version, so the label tuples set per
network are kept here and removed one by one.

All methods are thread-safe and quick (no I/O); the work-queue hook may be
called with the queue's lock held.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from controller.runtime.registry import NoCreatedRegistry
from controller.runtime.workqueue_metrics import WorkqueueMetrics

__all__ = [
    "GO_DEFAULT_BUCKETS",
    "IPPOOL_STATES",
    "Metrics",
    "NAMESPACE_WORKQUEUE_NAME",
    "NETWORK_WORKQUEUE_NAME",
    "POD_WORKQUEUE_NAME",
    "ZONE_WORKQUEUE_NAME",
    "VLAN_ALLOCATION_RESULTS",
]

_log = logging.getLogger(__name__)

GO_DEFAULT_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""client_golang's ``prometheus.DefBuckets`` (prometheus-client's own default has
three more buckets, so it is spelled out)."""

IPPOOL_STATES: tuple[str, ...] = ("total", "used", "free")
VLAN_ALLOCATION_RESULTS: tuple[str, ...] = ("allocated", "conflict", "exhausted")



NETWORK_WORKQUEUE_NAME = "proxmox-network-networks"
"""The network controller's queue (keys ``controller.watch.keys.NetworkKey``)."""

ZONE_WORKQUEUE_NAME = "proxmox-network-zones"
"""The zone controller's queue (keys ``controller.watch.keys.ZoneKey``)."""

POD_WORKQUEUE_NAME = "proxmox-network-pods"
"""The egress-gateway pod controller's queue (keys ``controller.watch.keys.PodKey``)."""

DEFAULT_WORKQUEUE_NAME = NETWORK_WORKQUEUE_NAME

NAMESPACE_WORKQUEUE_NAME = "proxmox-network-namespaces"
"""The namespace annotation's queue (:mod:`controller.reconcile.namespaces`; keys
``controller.watch.keys.NamespaceKey``)."""

class _InformerCollector:
    """Reads the registered informers' counters at scrape time."""

    def __init__(self, owner: Metrics) -> None:
        self._owner = owner

    def describe(self) -> list[Metric]:
        return self._families()

    def collect(self) -> list[Metric]:
        families = self._families()
        age, relists, restarts, failing = families
        for resource, informer in self._owner._informers_snapshot():
            try:
                value = float(informer.last_sync_age())
            except Exception:
                _log.exception("metrics: last_sync_age of informer %r failed", resource)
            else:
                age.add_metric([resource], value)
            try:
                relists.add_metric([resource], float(informer.relists))
            except Exception:
                _log.exception("metrics: relists of informer %r failed", resource)
            try:
                counts = list(dict(informer.watch_restarts).items())
            except Exception:
                _log.exception("metrics: watch_restarts of informer %r failed", resource)
            else:
                for reason, count in sorted(counts):
                    restarts.add_metric([resource, str(reason)], float(count))
            failing.add_metric([resource], 1.0 if getattr(informer, "last_error", None) else 0.0)
        return families

    @staticmethod
    def _families() -> list[Metric]:
        return [
            GaugeMetricFamily(
                "cozy_proxmox_informer_last_event_age_seconds",
                "Seconds since the informer last saw its watch alive (LIST, watch start or end, "
                "event or BOOKMARK); +Inf before the first LIST.",
                labels=["resource"],
            ),
            CounterMetricFamily(
                "cozy_proxmox_informer_relists_total",
                "Full LISTs of the resource after the initial one (410 Gone, errors, periodic relist).",
                labels=["resource"],
            ),
            CounterMetricFamily(
                "cozy_proxmox_informer_watch_restarts_total",
                "Watches of the resource that ended, by reason (expired, dropped, timeout, closed, error).",
                labels=["resource", "reason"],
            ),
            GaugeMetricFamily(
                "cozy_proxmox_informer_list_failing",
                "1 while the last LIST or WATCH of the resource failed (e.g. a conversion webhook "
                "that answers 500), else 0.",
                labels=["resource"],
            ),
        ]


class Metrics:
    """The controller's metrics on a registry of their own.

    :param clock: monotonic seconds, for the work-queue latencies (tests inject a fake one).
    :param workqueue_name: a queue whose series exist from the start, at zero (as client-go makes
        them with the queue); other queues get theirs from :meth:`WorkqueueMetrics.hook_for`.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        workqueue_name: str = DEFAULT_WORKQUEUE_NAME,
    ) -> None:
        self.registry: CollectorRegistry = NoCreatedRegistry(auto_describe=True)
        self._clock = clock
        self._lock = threading.RLock()
        reg = self.registry

        # -- zones ------------------------------------------------------------
        self.zone_vlans_total = Gauge(
            "cozy_proxmox_zone_vlans_total", "VLANs the zone can hand out (its ranges minus reserved IDs).",
            ["zone"], registry=reg)
        self.zone_vlans_allocated = Gauge(
            "cozy_proxmox_zone_vlans_allocated", "VLANs of the zone held by networks.", ["zone"], registry=reg)
        self.zone_vlans_free = Gauge(
            "cozy_proxmox_zone_vlans_free", "VLANs of the zone still free to allocate.", ["zone"], registry=reg)
        self.zone_networks = Gauge(
            "cozy_proxmox_zone_networks", "ProxmoxNetworks that use the zone.", ["zone"], registry=reg)
        self.orphaned_vlans = Gauge(
            "cozy_proxmox_orphaned_vlans",
            "Kube-OVN Vlans of the zone whose ProxmoxNetwork is gone, still held after collection.",
            ["zone"], registry=reg)
        self.zone_vlans_outside_ranges = Gauge(
            "cozy_proxmox_zone_vlans_outside_ranges",
            "Vlans of the zone whose ID is outside its current ranges (or reserved) and not a static VLAN: kept "
            "until their networks go.", ["zone"], registry=reg)
        self.zone_vlans_held_for_reuse = Gauge(
            "cozy_proxmox_zone_vlans_held_for_reuse",
            "Released IDs of the zone not handed out again before the reuse delay ends (status.vlansHeldForReuse).",
            ["zone"], registry=reg)

        # -- networks ---------------------------------------------------------
        self.network_ready = Gauge(
            "cozy_proxmox_network_ready", "1 while the ProxmoxNetwork is Ready, else 0.",
            ["namespace", "network", "zone", "vlan"], registry=reg)
        self.network_ippool_addresses = Gauge(
            "cozy_proxmox_network_ippool_addresses", "Addresses of the network's IP pool, by state.",
            ["namespace", "network", "state"], registry=reg)
        self.network_consumers = Gauge(
            "cozy_proxmox_network_consumers", "Addresses of the network handed out to VMs.",
            ["namespace", "network"], registry=reg)
        self.network_vlan_changed = Gauge(
            "cozy_proxmox_network_vlan_changed_externally",
            "1 while the network's Vlan carries another ID than the one allocated to it "
            "(VLANChangedExternally), else 0.",
            ["namespace", "network"], registry=reg)
        self.network_foreign_subnets = Gauge(
            "cozy_proxmox_network_foreign_subnets",
            "Subnets other than the network's own that name its Vlan (VLANAllocated=VLANConflict: their L2 "
            "segments are joined to the network's), else 0.",
            ["namespace", "network"], registry=reg)
        self.network_egress_reroute_missing = Gauge(
            "cozy_proxmox_network_egress_reroute_missing",
            "1 while a Ready VpcEgressGateway the network's Subnet is a source of has lost its reroute policy "
            "from the VPC's router in the OVN NB (EgressRerouteMissing), else 0; unchanged while the NB is not known.",
            ["namespace", "network"], registry=reg)
        self.network_stuck_holders = Gauge(
            "cozy_proxmox_network_stuck_holders",
            "Holders of a deleting network's pool with something odd about them (deleting on a finalizer, "
            "owner not found, an address without its claim, a claim without an address).",
            ["namespace", "network"], registry=reg)
        self.network_pool_overlaps = Gauge(
            "cozy_proxmox_network_pool_overlaps",
            "Other InClusterIPPools and GlobalInClusterIPPools sharing addresses with the network's pool "
            "(IPPoolReady=PoolOverlapsPool), else 0.",
            ["namespace", "network"], registry=reg)
        self.network_address_conflicts = Gauge(
            "cozy_proxmox_network_address_conflicts",
            "Addresses of the network's pool held by Kube-OVN IPs (IPPoolReady=AddressConflict), else 0.",
            ["namespace", "network"], registry=reg)
        self.network_deleting = Gauge(
            "cozy_proxmox_network_deleting", "1 while a deleted network waits for its last consumer, else 0.",
            ["namespace", "network"], registry=reg)

        # -- OVN gateway ------------------------------------------------------
        self.network_gateway_chassis = Gauge(
            "cozy_proxmox_network_gateway_chassis",
            "Chassis in the HA chassis group of the network's router port, as of the last pass "
            "that reached the OVN NB.",
            ["namespace", "network"], registry=reg)
        self.network_gateway_ready = Gauge(
            "cozy_proxmox_network_gateway_ready",
            "1 while the network's GatewayReady condition is True, else 0; absent when gateways are not managed.",
            ["namespace", "network"], registry=reg)
        self.network_gateway_bound = Gauge(
            "cozy_proxmox_network_gateway_bound",
            "1 while a chassis of the network's HA chassis group holds its router port's cr- binding in the OVN SB, "
            "0 when none does; absent while the SB is unknown or not read.",
            ["namespace", "network"], registry=reg)
        self.network_gateway_serving_chassis = Gauge(
            "cozy_proxmox_network_gateway_serving_chassis",
            "1 for the chassis that serves the network's router port (OVN SB cr- binding); one series per network.",
            ["namespace", "network", "chassis"], registry=reg)
        self.gateway_sb_synced = Gauge(
            "cozy_proxmox_gateway_sb_synced",
            "1 while the controller's copy of the OVN SB (cr- bindings, chassis) is synced, else 0.",
            registry=reg)
        self.gateway_groups_collected = Counter(
            "cozy_proxmox_gateway_groups_collected_total",
            "HA chassis groups deleted because their ProxmoxNetwork was gone.", registry=reg)
        self.gateway_nb_errors = Counter(
            "cozy_proxmox_gateway_nb_errors_total",
            "Gateway ensures and releases that could not reach or update the OVN NB.", registry=reg)
        # Ours, beyond the reference (field-reports.md B07 asks for NB write counts): zero in
        # a steady state.
        self.gateway_nb_transactions = Counter(
            "cozy_proxmox_gateway_nb_transactions_total",
            "OVN NB write transactions committed by the controller, by operation (ensure, release, collect).",
            ["op"], registry=reg)

        # -- status writes (field-reports.md S5) --------------------
        self.status_writes = Counter(
            "cozy_proxmox_status_writes_total",
            "Status writes (PUT of the status subresource) the controller sent, by CRD.",
            ["crd"], registry=reg)
        self.status_fields_pruned = Gauge(
            "cozy_proxmox_crd_pruned_status_fields",
            "Status fields this controller writes that the API server prunes (its CRD is older than the "
            "controller), by CRD; 0 while the CRD holds every one.",
            ["crd"], registry=reg)

        # -- reconcile --------------------------------------------------------
        self.vlan_allocations = Counter(
            "cozy_proxmox_vlan_allocations_total", "VLAN allocation attempts, by result.",
            ["zone", "result"], registry=reg)
        self.reconcile_errors = Counter(
            "cozy_proxmox_network_reconcile_errors_total",
            "Network passes that failed (reason error) or left the network not Ready (Ready's reason).",
            ["reason"], registry=reg)
        self.reconcile_duration = Histogram(
            "cozy_proxmox_network_reconcile_duration_seconds", "Duration of one ProxmoxNetwork reconcile pass.",
            buckets=GO_DEFAULT_BUCKETS, registry=reg)

        # -- leader election (field-reports.md B13) ------------------------------------------
        self.leader = Gauge(
            "cozy_proxmox_leader", "1 while this process holds the leader lease (or runs without election).",
            registry=reg)

        # -- API credentials (field-reports.md R11) -----------------------------------------
        self.api_unauthorized = Counter(
            "cozy_proxmox_api_unauthorized_total",
            "401 answers from the API server to a request sent with a token read from a file "
            "(in-cluster or a kubeconfig tokenFile); each makes the file be re-read.", registry=reg)

        self.workqueue = WorkqueueMetrics(reg, clock, self._lock)

        # -- informers (field-reports.md B11/B12) ---------------------------------------------
        self._informers: dict[str, Any] = {}
        reg.register(_InformerCollector(self))

        # Label tuples set per network, for partial-match removal.
        self._ready_series: dict[tuple[str, str], set[tuple[str, str]]] = {}
        self._pool_series: set[tuple[str, str]] = set()
        self._serving: dict[tuple[str, str], str] = {}  # network -> its serving-chassis series
        self._server: Any = None
        self._server_thread: threading.Thread | None = None

        self.leader.set(0)
        self.workqueue.register(workqueue_name)

    # ------------------------------------------------------------------ zones

    def set_zone(self, zone: str, total: int, allocated: int, free: int, networks: int, orphans: int) -> None:
        """One zone pass past range parsing: the five zone gauges."""
        self.zone_vlans_total.labels(zone).set(total)
        self.zone_vlans_allocated.labels(zone).set(allocated)
        self.zone_vlans_free.labels(zone).set(free)
        self.zone_networks.labels(zone).set(networks)
        self.orphaned_vlans.labels(zone).set(orphans)

    def set_zone_kept(self, zone: str, outside_ranges: int, held_for_reuse: int) -> None:
        """The IDs a zone keeps out of its free count for a while: Vlans
        outside its current ranges, IDs held for reuse."""
        self.zone_vlans_outside_ranges.labels(zone).set(outside_ranges)
        self.zone_vlans_held_for_reuse.labels(zone).set(held_for_reuse)

    def forget_zone(self, zone: str) -> None:
        """The zone is gone (NotFound): drop its series."""
        for gauge in (self.zone_vlans_total, self.zone_vlans_allocated, self.zone_vlans_free,
                      self.zone_networks, self.orphaned_vlans, self.zone_vlans_outside_ranges,
                      self.zone_vlans_held_for_reuse):
            gauge.remove(zone)

    # --------------------------------------------------------------- networks

    def set_network(
        self,
        namespace: str,
        name: str,
        zone: str,
        vlan: int | str | None,
        ready: bool,
        ippool: Mapping[str, int] | None,
        deleting: bool,
    ) -> None:
        """Record one network pass.

        Every ``network_ready`` series of (namespace, name) is removed and one
        is set (1 when Ready is True) with ``vlan`` the decimal VLAN ID, ``"0"``
        when none is allocated yet. With ``ippool`` (status.ipPool: ``total``,
        ``used``, ``free``) the three pool series and ``consumers`` (= used) are
        set; without it they keep their last values (§13). ``deleting`` sets
        ``network_deleting`` (0 on every non-deleting pass).
        """
        key = (namespace, name)
        labels = (str(zone or ""), _vlan_label(vlan))
        with self._lock:
            for old in self._ready_series.pop(key, set()):
                self.network_ready.remove(namespace, name, *old)
            self.network_ready.labels(namespace, name, *labels).set(1 if ready else 0)
            self._ready_series[key] = {labels}
            if ippool is not None:
                for state in IPPOOL_STATES:
                    self.network_ippool_addresses.labels(namespace, name, state).set(int(ippool.get(state) or 0))
                self.network_consumers.labels(namespace, name).set(int(ippool.get("used") or 0))
                self._pool_series.add(key)
        self.set_deleting(namespace, name, deleting)

    def set_foreign_subnets(self, namespace: str, name: str, count: int) -> None:
        """``network_foreign_subnets``: the Subnets of someone else naming the network's Vlan
        (field-reports.md R1), set on each non-deleting pass that reaches its end."""
        self.network_foreign_subnets.labels(namespace, name).set(count)

    def set_egress_reroute_missing(self, namespace: str, name: str, missing: bool) -> None:
        """``network_egress_reroute_missing``: 1 while a Ready egress gateway the network is a
        source of lacks its reroute on the VPC's router, else 0; set at the end of each
        non-deleting pass that knows the NB (``controller.rules.egress_reroute``)."""
        self.network_egress_reroute_missing.labels(namespace, name).set(1 if missing else 0)

    def set_vlan_changed(self, namespace: str, name: str, changed: bool) -> None:
        """``network_vlan_changed_externally``: 1 while VLANAllocated is VLANChangedExternally."""
        self.network_vlan_changed.labels(namespace, name).set(1 if changed else 0)

    def set_stuck_holders(self, namespace: str, name: str, count: int) -> None:
        """``network_stuck_holders``: 0 on each non-deleting pass; on each finalize wait the
        odd holders (0 past the consumers step)."""
        self.network_stuck_holders.labels(namespace, name).set(count)

    def set_pool_conflicts(self, namespace: str, name: str, overlaps: int, conflicts: int) -> None:
        """``network_pool_overlaps`` and ``network_address_conflicts`` of one pass (0 and 0
        until the pool is checked)."""
        self.network_pool_overlaps.labels(namespace, name).set(overlaps)
        self.network_address_conflicts.labels(namespace, name).set(conflicts)

    def set_deleting(self, namespace: str, name: str, deleting: bool | int) -> None:
        """``network_deleting``: 1 on each finalize wait, 0 on each non-deleting pass."""
        self.network_deleting.labels(namespace, name).set(1 if deleting else 0)

    def forget_network(self, namespace: str, name: str) -> None:
        """The network is gone: remove every per-network series (§13 ``forgetNetwork``)."""
        key = (namespace, name)
        with self._lock:
            for old in self._ready_series.pop(key, set()):
                self.network_ready.remove(namespace, name, *old)
            self._pool_series.discard(key)
            for state in IPPOOL_STATES:
                self.network_ippool_addresses.remove(namespace, name, state)
        for gauge in (self.network_consumers, self.network_deleting, self.network_vlan_changed,
                      self.network_stuck_holders, self.network_pool_overlaps, self.network_address_conflicts,
                      self.network_gateway_chassis, self.network_gateway_ready, self.network_foreign_subnets,
                      self.network_egress_reroute_missing):
            gauge.remove(namespace, name)
        self.set_gateway_serving(namespace, name, None, "")

    # ---------------------------------------------------------------- gateway

    def set_gateway_chassis(self, namespace: str, name: str, count: int) -> None:
        """Chassis count from the gateway step (0 for no VPC, RouterPortMissing or
        ForeignGroup; the existing count for NoTrunkNodes; the wanted count on
        success). Not called on an NB failure, so the last value stays."""
        self.network_gateway_chassis.labels(namespace, name).set(count)

    def set_gateway_ready(self, namespace: str, name: str, ready: bool) -> None:
        """1 when GatewayReady is True, 0 for False or Unknown."""
        self.network_gateway_ready.labels(namespace, name).set(1 if ready else 0)

    def forget_gateway(self, namespace: str, name: str) -> None:
        """GatewayReady is absent or Disabled: drop both gateway series."""
        self.network_gateway_chassis.remove(namespace, name)
        self.network_gateway_ready.remove(namespace, name)
        self.set_gateway_serving(namespace, name, None, "")

    def set_gateway_serving(self, namespace: str, name: str, bound: bool | None, chassis: str) -> None:
        """``network_gateway_bound`` (removed when ``bound`` is None: the SB is unknown or not
        read) and the one ``network_gateway_serving_chassis`` series of the network (removed
        when ``chassis`` is "" or ``bound`` is None)."""
        key = (namespace, name)
        if bound is None:
            self.network_gateway_bound.remove(namespace, name)
            chassis = ""
        else:
            self.network_gateway_bound.labels(namespace, name).set(1 if bound else 0)
        with self._lock:
            old = self._serving.pop(key, "")
            if old and old != chassis:
                self.network_gateway_serving_chassis.remove(namespace, name, old)
            if chassis:
                self._serving[key] = chassis
                self.network_gateway_serving_chassis.labels(namespace, name, chassis).set(1)

    def set_gateway_sb_synced(self, synced: bool) -> None:
        """``gateway_sb_synced``: the SB reader's copy is synced (1) or lost (0)."""
        self.gateway_sb_synced.set(1 if synced else 0)

    def gateway_group_collected(self, count: int = 1) -> None:
        """HA chassis groups deleted by collection."""
        if count:
            self.gateway_groups_collected.inc(count)

    def gateway_nb_transaction(self, op: str) -> None:
        """One committed NB write transaction of ``op`` (``ensure``/``release``/``collect``)."""
        self.gateway_nb_transactions.labels(op).inc()

    def gateway_nb_error(self) -> None:
        """One failed ensure or release (not collection errors)."""
        self.gateway_nb_errors.inc()

    # -------------------------------------------------------------- status writes

    def status_write(self, crd: str) -> None:
        """One status PUT sent for an object of ``crd`` (``<plural>.<group>``)."""
        self.status_writes.labels(crd).inc()

    def set_status_fields_pruned(self, crd: str, count: int) -> None:
        """How many status fields the API server prunes for ``crd`` (controller.schema)."""
        self.status_fields_pruned.labels(crd).set(count)

    # -------------------------------------------------------------- reconcile

    def vlan_allocation(self, zone: str, result: str) -> None:
        """One allocation attempt of §4.3: ``allocated``, ``conflict`` or ``exhausted``."""
        if result not in VLAN_ALLOCATION_RESULTS:
            raise ValueError(f"unknown VLAN allocation result {result!r}; expected one of {VLAN_ALLOCATION_RESULTS}")
        self.vlan_allocations.labels(zone, result).inc()

    def reconcile_error(self, reason: str) -> None:
        """``error`` for a failed pass, else Ready's reason when Ready is not True."""
        self.reconcile_errors.labels(reason).inc()

    def observe_reconcile(self, seconds: float) -> None:
        """Duration of one network Reconcile call."""
        self.reconcile_duration.observe(seconds)

    # ----------------------------------------------------------------- leader

    def set_leader(self, leading: bool) -> None:
        """``cozy_proxmox_leader``: 1 while leading (or with election off), else 0."""
        self.leader.set(1 if leading else 0)

    # -------------------------------------------------------------- informers

    def register_informers(self, informers: Mapping[str, Any]) -> None:
        """Export the informers' state, keyed by resource name (the ``resource`` label).

        Each informer needs ``last_sync_age()`` (seconds), ``relists`` (int) and
        ``watch_restarts`` (``dict[reason, int]``); they are read at scrape
        time. Registering a resource again replaces its informer.
        """
        with self._lock:
            self._informers.update(informers)

    def unregister_informer(self, resource: str) -> None:
        """Stop exporting the informer of ``resource`` (replaced by one of another version)."""
        with self._lock:
            self._informers.pop(resource, None)

    def _informers_snapshot(self) -> list[tuple[str, Any]]:
        with self._lock:
            return sorted(self._informers.items(), key=lambda item: item[0])

    # ---------------------------------------------------------------- serving

    def exposition(self) -> bytes:
        """The text exposition of this registry (what a scrape returns)."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

    def serve(self, host: str, port: int) -> tuple[str, int]:
        """Serve ``/metrics`` of this registry on a daemon thread; returns the bound (host, port).

        An empty ``host`` listens on all IPv4 addresses; ``port`` 0 picks a free port.
        """
        from prometheus_client import start_http_server

        if self._server is not None:
            raise RuntimeError("metrics endpoint already served")
        server, thread = start_http_server(port, addr=host or "0.0.0.0", registry=self.registry)
        self._server, self._server_thread = server, thread
        bound = server.server_address
        return str(bound[0]), int(bound[1])

    def shutdown(self) -> None:
        """Stop the endpoint started by :meth:`serve` (no-op if none)."""
        server, thread = self._server, self._server_thread
        self._server = self._server_thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)


def _vlan_label(vlan: int | str | None) -> str:
    if vlan is None or vlan == "":
        return "0"
    try:
        return str(int(vlan))
    except (TypeError, ValueError):
        return str(vlan)

