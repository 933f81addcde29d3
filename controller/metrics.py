"""Prometheus metrics of the controller (``reference-behaviour.md`` §13 and more).

One :class:`Metrics` object owns one :class:`prometheus_client.CollectorRegistry`,
so tests can build as many independent instances as they like, and the
controller serves exactly this registry on its metrics endpoint (:meth:`Metrics.serve`).

What is exported
================

The reference's series, names, types and labels verbatim (§13):

===================================================  =========  ==============================
name                                                 type       labels
===================================================  =========  ==============================
``cozy_proxmox_zone_vlans_total``                    gauge      zone
``cozy_proxmox_zone_vlans_allocated``                gauge      zone
``cozy_proxmox_zone_vlans_free``                     gauge      zone
``cozy_proxmox_zone_networks``                       gauge      zone
``cozy_proxmox_orphaned_vlans``                      gauge      zone
``cozy_proxmox_zone_vlans_outside_ranges``           gauge      zone (ours)
``cozy_proxmox_zone_vlans_held_for_reuse``           gauge      zone (ours)
``cozy_proxmox_network_foreign_subnets``             gauge      namespace, network (ours, field-reports.md R1)
``cozy_proxmox_network_ready``                       gauge      namespace, network, zone, vlan
``cozy_proxmox_network_ippool_addresses``            gauge      namespace, network, state
``cozy_proxmox_network_consumers``                   gauge      namespace, network
``cozy_proxmox_network_deleting``                    gauge      namespace, network
``cozy_proxmox_network_gateway_chassis``             gauge      namespace, network
``cozy_proxmox_network_gateway_ready``               gauge      namespace, network
``cozy_proxmox_gateway_groups_collected_total``      counter    (none)
``cozy_proxmox_gateway_nb_errors_total``             counter    (none)
``cozy_proxmox_vlan_allocations_total``              counter    zone, result
``cozy_proxmox_network_reconcile_errors_total``      counter    reason
``cozy_proxmox_network_reconcile_duration_seconds``  histogram  (none); Go's DefBuckets
===================================================  =========  ==============================

Ours on top of them:

* the work queue's, in client-go's naming (controller-runtime registers the
  same ones): ``workqueue_depth``, ``workqueue_adds_total``,
  ``workqueue_retries_total``, ``workqueue_queue_duration_seconds``,
  ``workqueue_work_duration_seconds`` (buckets 1e-8 .. 1e3 s, x10),
  ``workqueue_unfinished_work_seconds`` and
  ``workqueue_longest_running_processor_seconds``, all labelled ``name``: one
  ``name`` per controller's queue (``proxmox-network-networks``, ``-zones``, ``-pods``,
  ``-namespaces``; :meth:`Metrics.workqueue_hook_for`), each hook the ``metrics_hook``
  of its :class:`controller.runtime.workqueue.RateLimitingQueue`;
* the informers' (field-reports.md B11/B12), read from the informers at scrape time:
  ``cozy_proxmox_informer_last_event_age_seconds{resource}`` (gauge,
  ``informer.last_sync_age()``, ``+Inf`` before the first LIST),
  ``cozy_proxmox_informer_relists_total{resource}`` (``informer.relists``) and
  ``cozy_proxmox_informer_watch_restarts_total{resource,reason}``
  (``informer.watch_restarts``) and ``cozy_proxmox_informer_list_failing{resource}``
  (``informer.last_error`` set: field-reports.md R8); see :meth:`Metrics.register_informers`;
* ``cozy_proxmox_leader`` (gauge, no labels): 1 while this process leads (and
  always 1 with ``--leader-elect=false``), else 0 (field-reports.md B13);
* ``cozy_proxmox_network_vlan_changed_externally{namespace,network}`` (gauge): 1 while
  the network's Vlan carries another ID than the one allocated to it;
* ``cozy_proxmox_network_stuck_holders{namespace,network}`` (gauge): holders of a deleting
  network's pool with something odd about them, set on each finalize wait;
* the gateway as it serves (product-decisions.md §10), while the OVN SB is read:
  ``cozy_proxmox_network_gateway_bound{namespace,network}`` (gauge): 1 while a chassis of
  the network's group holds its router port's ``cr-`` binding, 0 when nothing does (after
  the settle time); absent while the SB is not known, or not read;
  ``cozy_proxmox_network_gateway_serving_chassis{namespace,network,chassis}`` (gauge, 1):
  the serving chassis, one series per network; and ``cozy_proxmox_gateway_sb_synced`` (gauge,
  no labels): 1 while the SB copy is synced, else 0;
* ``cozy_proxmox_status_writes_total{crd}`` (counter): status PUTs sent, and
  ``cozy_proxmox_crd_pruned_status_fields{crd}`` (gauge): status fields the API server prunes
  (a CRD older than the controller; ``controller.schema``), both by CRD name (field reports,
  fourth round, field-reports.md S5);
* ``cozy_proxmox_network_pool_overlaps{namespace,network}`` (gauge): other InClusterIPPools
  and GlobalInClusterIPPools sharing addresses with the network's pool, and
  ``cozy_proxmox_network_address_conflicts{namespace,network}`` (gauge): addresses of the
  pool that Kube-OVN IPs hold; both set on every non-deleting pass, 0 until the pool is
  checked.

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
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = [
    "GO_DEFAULT_BUCKETS",
    "IPPOOL_STATES",
    "Metrics",
    "NAMESPACE_WORKQUEUE_NAME",
    "NETWORK_WORKQUEUE_NAME",
    "POD_WORKQUEUE_NAME",
    "ZONE_WORKQUEUE_NAME",
    "VLAN_ALLOCATION_RESULTS",
    "WORKQUEUE_BUCKETS",
]

_log = logging.getLogger(__name__)

GO_DEFAULT_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""client_golang's ``prometheus.DefBuckets`` (prometheus-client's own default has
three more buckets, so it is spelled out)."""

WORKQUEUE_BUCKETS: tuple[float, ...] = tuple(float(f"1e{exp}") for exp in range(-8, 4))
"""client-go's workqueue latency buckets: ``ExponentialBuckets(10e-9, 10, 12)``."""

IPPOOL_STATES: tuple[str, ...] = ("total", "used", "free")
VLAN_ALLOCATION_RESULTS: tuple[str, ...] = ("allocated", "conflict", "exhausted")

WORKQUEUE_EVENTS: tuple[str, ...] = ("add", "get", "done", "retry")

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

_NO_CREATED_TYPES = frozenset({"counter", "histogram", "summary", "gaugehistogram"})


class _Registry(CollectorRegistry):
    """A registry whose exposition has no ``*_created`` samples.

    prometheus-client adds a ``_created`` series to counters and histograms
    unless disabled process-wide; client_golang has none. Filtering here keeps
    the exposition equal to the reference's without touching global state.
    """

    def collect(self) -> Iterator[Metric]:
        return _drop_created(super().collect())

    def restricted_registry(self, names: Iterable[str]) -> Any:
        # used by the HTTP handler for ?name[]=... queries
        return _DropCreated(super().restricted_registry(names))


class _DropCreated:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def collect(self) -> Iterator[Metric]:
        return _drop_created(self._inner.collect())


def _drop_created(families: Iterable[Metric]) -> Iterator[Metric]:
    for family in families:
        if family.type in _NO_CREATED_TYPES:
            kept = [s for s in family.samples if not s.name.endswith("_created")]
            if family.samples and not kept:
                continue  # a restricted query that asked only for *_created
            family.samples = kept
        yield family


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


class _QueueState:
    """Per-queue bookkeeping for the latency metrics (client-go ``defaultQueueMetrics``)."""

    __slots__ = ("added_at", "started_at")

    def __init__(self) -> None:
        self.added_at: dict[Hashable, float] = {}
        self.started_at: dict[Hashable, float] = {}


class Metrics:
    """The controller's metrics on a registry of their own.

    :param clock: monotonic seconds, for the work-queue latencies (tests inject a fake one).
    :param workqueue_name: the ``name`` label :meth:`workqueue_hook` reports under.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        workqueue_name: str = DEFAULT_WORKQUEUE_NAME,
    ) -> None:
        self.registry: CollectorRegistry = _Registry(auto_describe=True)
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

        # -- work queue (client-go names) -----------------------------------
        self.workqueue_depth = Gauge(
            "workqueue_depth", "Keys waiting in the work queue, ready to be handed out", ["name"], registry=reg)
        self.workqueue_adds = Counter(
            "workqueue_adds_total", "Keys put into the work queue's ready list", ["name"], registry=reg)
        self.workqueue_retries = Counter(
            "workqueue_retries_total", "Rate-limited re-adds of keys to the work queue", ["name"], registry=reg)
        self.workqueue_queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "Seconds a key waited in the work queue before a worker took it",
            ["name"], buckets=WORKQUEUE_BUCKETS, registry=reg)
        self.workqueue_work_duration = Histogram(
            "workqueue_work_duration_seconds", "Seconds a worker spent on a key taken from the work queue",
            ["name"], buckets=WORKQUEUE_BUCKETS, registry=reg)
        self.workqueue_unfinished_work = Gauge(
            "workqueue_unfinished_work_seconds",
            "Seconds spent so far on keys still being processed (not yet in work_duration); "
            "a value that keeps growing means a stuck worker",
            ["name"], registry=reg)
        self.workqueue_longest_running = Gauge(
            "workqueue_longest_running_processor_seconds",
            "Seconds the longest-running worker has been on its current key",
            ["name"], registry=reg)

        # -- informers (field-reports.md B11/B12) ---------------------------------------------
        self._informers: dict[str, Any] = {}
        reg.register(_InformerCollector(self))

        # Label tuples set per network, for partial-match removal.
        self._ready_series: dict[tuple[str, str], set[tuple[str, str]]] = {}
        self._pool_series: set[tuple[str, str]] = set()
        self._serving: dict[tuple[str, str], str] = {}  # network -> its serving-chassis series
        self._queues: dict[str, _QueueState] = {}
        self._workqueue_name = workqueue_name
        self._server: Any = None
        self._server_thread: threading.Thread | None = None

        self.leader.set(0)
        self.register_workqueue(workqueue_name)

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
                      self.network_gateway_chassis, self.network_gateway_ready, self.network_foreign_subnets):
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

    # ------------------------------------------------------------- work queue

    def register_workqueue(self, name: str) -> None:
        """Create the queue's series at zero (as client-go does when the queue is made)."""
        with self._lock:
            if name in self._queues:
                return
            self._queues[name] = _QueueState()
        self.workqueue_depth.labels(name).set(0)
        self.workqueue_adds.labels(name)
        self.workqueue_retries.labels(name)
        self.workqueue_queue_duration.labels(name)
        self.workqueue_work_duration.labels(name)
        self.workqueue_unfinished_work.labels(name).set_function(lambda: self._unfinished(name)[0])
        self.workqueue_longest_running.labels(name).set_function(lambda: self._unfinished(name)[1])

    def workqueue_hook(self, event: str, key: Hashable) -> None:
        """``metrics_hook`` for the controller's queue (``name`` = ``workqueue_name``).

        Pass it as ``RateLimitingQueue(..., metrics_hook=metrics.workqueue_hook)``;
        for another queue use :meth:`workqueue_hook_for`.
        """
        self._queue_event(self._workqueue_name, event, key)

    def workqueue_hook_for(self, name: str) -> Callable[[str, Hashable], None]:
        """A ``metrics_hook(event, key)`` reporting under ``name``."""
        self.register_workqueue(name)

        def hook(event: str, key: Hashable) -> None:
            self._queue_event(name, event, key)

        return hook

    def _queue_event(self, name: str, event: str, key: Hashable) -> None:
        # client-go defaultQueueMetrics: add -> adds, depth+1, remember when;
        # get -> depth-1, queue latency, start of work; done -> work duration.
        if name not in self._queues:
            self.register_workqueue(name)
        now = self._clock()
        with self._lock:
            state = self._queues[name]
            if event == "add":
                self.workqueue_adds.labels(name).inc()
                self.workqueue_depth.labels(name).inc()
                state.added_at.setdefault(key, now)
            elif event == "get":
                self.workqueue_depth.labels(name).dec()
                added = state.added_at.pop(key, None)
                if added is not None:
                    self.workqueue_queue_duration.labels(name).observe(max(0.0, now - added))
                state.started_at[key] = now
            elif event == "done":
                started = state.started_at.pop(key, None)
                if started is not None:
                    self.workqueue_work_duration.labels(name).observe(max(0.0, now - started))
            elif event == "retry":
                self.workqueue_retries.labels(name).inc()
            else:
                _log.debug("metrics: unknown workqueue event %r", event)

    def _unfinished(self, name: str) -> tuple[float, float]:
        """(sum, max) of the running times of keys being processed now."""
        now = self._clock()
        with self._lock:
            state = self._queues.get(name)
            starts = list(state.started_at.values()) if state else []
        if not starts:
            return 0.0, 0.0
        ages = [max(0.0, now - s) for s in starts]
        return sum(ages), max(ages)

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

