"""The composition root: builds the shared informers, one controller per kind (networks,
zones, egress-gateway pods, the namespace annotation), each with its own rate-limited
queue of typed keys and its workers, and the reconcilers they run (``product-decisions.md`` §3);
then runs and stops them.

Which passes an event concerns is ``controller.routes``; which kinds of other projects are
watched, and in which version, is ``controller.watch.kinds``.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import attrs
import structlog
import urllib3
from kubernetes import client as k8s

from controller import names, schema
from controller.apply.gateway import COLLECT_PERIOD, GatewayCollector, GatewayStep
from controller.apply.vlans import VlanManager
from controller.metrics import (
    NAMESPACE_WORKQUEUE_NAME,
    NETWORK_WORKQUEUE_NAME,
    POD_WORKQUEUE_NAME,
    ZONE_WORKQUEUE_NAME,
    Metrics,
)
from controller.plan.gateway import NB_GRACE_PERIOD, SERVING_SETTLE
from controller.reconcile.egress import LABEL_GATEWAY, PODS, EgressGatewayPodReconciler
from controller.reconcile.namespaces import NAMESPACE_WRITE_WINDOW, NamespaceReconciler
from controller.reconcile.network import NetworkReconciler
from controller.reconcile.zone import ZoneReconciler
from controller.routes import NAMESPACE_COALESCE, Routes
from controller.rules.kubeovn import KUBE_OVN_STALE_AFTER
from controller.rules.prune import DEFAULT_SUBNET_PRUNE_TIMEOUT
from controller.runtime.events import EventRecorder
from controller.runtime.kube import ApiError, KubeWriter
from controller.runtime.recent import RecentWrites
from controller.runtime.signals import wait
from controller.runtime.worker import Controller
from controller.watch.indexes import (
    Listers,
    index_namespace,
    network_indexers,
    node_index_provider,
    subnet_index_vlan,
    subnet_index_vpc,
    vlan_indexers,
    zone_index_provider,
)
from controller.watch import keys
from controller.watch.keys import NamespaceKey, NetworkKey, PodKey, ZoneKey
from controller.watch.kinds import (
    ALL_KINDS,
    OPTIONAL_INDEXERS,
    OPTIONAL_KINDS,
    UNLISTABLE_GRACE,
    failing_past,
    listable_version,
    projected,
    resource_of,
    served_versions,
)
from controller.watch.indexes import BY_NAMESPACE, BY_PROVIDER, BY_VLAN, BY_VPC
from informers import SharedInformerFactory
from informers.backoff import Backoff
from ovn.gateway import GatewayApplier
from ovn.planner import KUBE_OVN_OVERLAY_MTU
from ovn.sb import SBReader
from ovn.tls import DEFAULT_SECRET, TLSSource

log = structlog.get_logger(__name__)

STOP_TIMEOUT = 1.2  # seconds for Manager.stop, within main's EXIT_BUDGET (exit within 2 s of SIGTERM)
DISCOVERY_RETRY_FIRST = 1.0  # seconds before the first retry of a failed API discovery
DISCOVERY_RETRY_MAX = 30.0  # cap of the discovery retry backoff


@attrs.define
class Options:
    """Run-time settings from the command line (reference-behaviour.md §14)."""

    manage_gateway: bool = True
    workers: int = 4
    resync_period: float = 600.0
    cache_sync_timeout: float = 120.0
    subnet_prune_timeout: float = DEFAULT_SUBNET_PRUNE_TIMEOUT.total_seconds()
    vlan_reuse_delay: float = 0.0  # seconds; the CLI's default is 10m (controller.rules.reuse)
    events: bool = True
    # OVN NB (used only with manage_gateway): remotes; "" runs without the NB step.
    ovn_nb_address: str = ""
    # OVN SB (read-only, product-decisions.md §10): remotes; "" leaves it unread and
    # GatewayReady says what the NB holds only.
    ovn_sb_address: str = ""
    serving_settle: float = SERVING_SETTLE  # seconds a missing cr- binding is let pass
    gateway_failback: bool = False  # the preferred chassis takes the gateway back (off: the server stays)
    # The pods' MTU, bound of each router port's options:gateway_mtu (0: left alone).
    overlay_mtu: int = KUBE_OVN_OVERLAY_MTU
    ovn_tls_secret: str = DEFAULT_SECRET
    ovn_tls_dir: str = ""  # private directory for the TLS files; "" = a fresh temporary one
    nb_grace_period: float = NB_GRACE_PERIOD
    # field-reports.md R12: seconds a trunk node that left the ready set stays in the groups; the CLI's
    # default is 90 s (controller.apply.gateway.DEFAULT_TRUNK_HOLD_DOWN), 0 here and for tests.
    trunk_hold_down: float = 0.0
    gateway_collect_period: float = COLLECT_PERIOD
    # field-reports.md S1: seconds a Subnet may keep ValidateSubnetVlanFailed after its Vlan exists.
    kube_ovn_stale_after: float = KUBE_OVN_STALE_AFTER
    nb_first_sync_timeout: float = 10.0  # seconds the first workers wait for the NB's first sync


class Manager:
    """Builds the informers, the controllers and the reconcilers; :meth:`run` blocks until stop.

    The constructor talks to no server: API discovery of the optional kinds runs in
    :meth:`start_informers` (and at every resync, for kinds installed later).

    :param fence: the leader fence (field-reports.md S3; ``controller.main``): checked just
        before every write the controller sends, to the API server (its Events included)
        and to OVN NB; it raises ``controller.runtime.result.LostLeadership`` once this process no
        longer holds the Lease. None: no leader election, every write is sent.
    """

    def __init__(self, api_client: k8s.ApiClient, options: Options, metrics: Metrics | None = None,
                 fence: Callable[[], None] | None = None) -> None:
        self.options = options
        self.metrics = metrics or Metrics()
        self.fence = fence
        self.writer = KubeWriter(api_client, fence=fence)
        self._stop = threading.Event()  # set first thing in stop(): passes end at their next action
        self.factory = SharedInformerFactory(api_client)
        f = self.factory
        self.networks = f.informer(
            names.PROXMOX_NETWORKS,
            indexers=network_indexers(),
        )
        self.zones = f.informer(names.PROXMOX_NETWORK_ZONES, indexers={BY_PROVIDER: zone_index_provider})
        self.vlan_informer = f.informer(names.VLANS, indexers=vlan_indexers())
        self.namespaces = f.informer(names.NAMESPACES, transform=projected(names.NAMESPACES))
        self.provider_networks = f.informer(names.PROVIDER_NETWORKS)
        self.subnets = f.informer(names.SUBNETS, indexers={BY_VLAN: subnet_index_vlan, BY_VPC: subnet_index_vpc})
        # Only egress-gateway pods are cached (§12).
        self.pods = f.informer(PODS, label_selector=LABEL_GATEWAY)
        self.optional: dict[str, Any] = {}
        self.listers = Listers(
            networks=self.networks.store,
            zones=self.zones.store,
            vlans=self.vlan_informer.store,
            namespaces=self.namespaces.store,
            provider_networks=self.provider_networks.store,
            subnets=self.subnets.store,
        )
        self.events = EventRecorder(self.writer) if options.events else None
        workers = max(1, options.workers)
        self.network_controller = Controller(NETWORK_WORKQUEUE_NAME, "network", self._reconcile_network, workers,
                                             self.metrics.workqueue, self._resync_done)
        self.zone_controller = Controller(ZONE_WORKQUEUE_NAME, "zone", lambda k: self.zone_reconciler.reconcile(k.name),
                                          max(1, workers // 2), self.metrics.workqueue, self._resync_done)
        self.pod_controller = Controller(POD_WORKQUEUE_NAME, "pod", lambda k: self.pod_reconciler.reconcile(str(k)),
                                         1, self.metrics.workqueue, self._resync_done)
        self.namespace_controller = Controller(
            NAMESPACE_WORKQUEUE_NAME, "namespace", lambda k: self.namespace_reconciler.reconcile(k.name),
            self.namespace_workers(), self.metrics.workqueue, self._resync_done)
        self.controllers = [self.network_controller, self.zone_controller, self.pod_controller, self.namespace_controller]
        self.gateway = self._gateway(options)
        if self.gateway is not None:
            self.network_controller.warm_up = self._await_nb
        self.vlans = VlanManager(self.listers.vlans, self.listers.zones, self.writer,
                                 on_allocation=self.metrics.vlan_allocation, networks=self.networks.store,
                                 reuse_delay=options.vlan_reuse_delay)
        network_overlay = RecentWrites(self.networks.store)
        self.namespace_reconciler = NamespaceReconciler(
            self.networks.store, self.namespaces.store, self.writer, network_overlay,
            enqueue=lambda ns: self.namespace_controller.queue.add_after(NamespaceKey(ns), NAMESPACE_COALESCE),
            enqueue_network=lambda key: self.network_controller.add(NetworkKey.parse(key)),
            write_window=NAMESPACE_WRITE_WINDOW, zones=self.listers.zones,
        )
        # field-reports.md S5: the status fields an older CRD prunes (controller.schema).
        self.pruned = schema.PrunedFields(on_cleared=self._status_fields_held)
        for res in (names.PROXMOX_NETWORKS, names.PROXMOX_NETWORK_ZONES):
            self.metrics.set_status_fields_pruned(schema.crd_name(res), 0)
        self.network_reconciler = NetworkReconciler(
            self.listers, self.writer, self.vlans, options.manage_gateway,
            events=self.events, prune_timeout=options.subnet_prune_timeout, metrics=self.metrics,
            gateway=self.gateway, namespaces=self.namespace_reconciler, recent=network_overlay,
            stopping=self._stop, kube_ovn_stale_after=options.kube_ovn_stale_after, pruned=self.pruned,
        )
        self.pod_reconciler = EgressGatewayPodReconciler(self.pods.store, self.writer, self.events)
        self.zone_reconciler = ZoneReconciler(
            self.listers, self.writer, self.vlans, events=self.events, metrics=self.metrics,
            prune_timeout=options.subnet_prune_timeout, stopping=self._stop, pruned=self.pruned,
        )
        self._threads: list[threading.Thread] = []
        self._discovery_started = False
        self._resync_lock = threading.Lock()
        self._resync_pending: set[tuple[str, Any]] = set()
        self._writes_at_resync = 0
        self._nb_wait_logged = False
        self.resyncs_completed = 0
        self.routes = Routes(self)
        self.routes.wire()
        self.metrics.register_informers({str(inf.resource): inf for inf in self.factory.informers()})

    def _gateway(self, options: Options) -> GatewayStep | None:
        """The OVN side (§9; only with management on and an NB address): a Node cache,
        the NB applier (its row changes enqueue networks) and the collector."""
        self.nodes = None
        self.collector = None
        if not (options.manage_gateway and options.ovn_nb_address):
            return None
        self.nodes = self.factory.informer(names.NODES, indexers={BY_PROVIDER: node_index_provider},
                                           transform=projected(names.NODES))
        tls_source = None
        if "ssl:" in options.ovn_nb_address or "ssl:" in options.ovn_sb_address:
            tls_dir = options.ovn_tls_dir or tempfile.mkdtemp(prefix="pnc-ovn-tls-")
            tls_source = TLSSource(
                lambda ns, name: self.writer.get(names.SECRETS, name, ns), options.ovn_tls_secret, tls_dir
            )
        nets = self.network_controller
        applier = GatewayApplier(
            options.ovn_nb_address, enqueue=lambda key: nets.add(NetworkKey.parse(key)), tls_source=tls_source,
            on_commit=self.metrics.gateway_nb_transaction,
            enqueue_after=lambda key, delay: nets.queue.add_after(NetworkKey.parse(key), delay),
            clear_mtu=options.overlay_mtu > 0, fence=self.fence,
        )
        # A router's egress reroutes changed: the networks of that VPC look again.
        applier.policies.on_router = lambda vpc: nets.add_all(keys.for_vpc_name(vpc, self.listers))
        self.collector = GatewayCollector(applier, self._network_exists, self.metrics, options.gateway_collect_period)
        sb = None
        if options.ovn_sb_address:
            was_lost = threading.Event()

            def lost() -> None:
                self.metrics.set_gateway_sb_synced(False)
                was_lost.set()
                applier.recheck_later()  # each network then says its gateway is not known

            def synced() -> None:
                self.metrics.set_gateway_sb_synced(True)
                if was_lost.is_set():
                    # Back after an outage (field-reports.md S8): every network says
                    # what the SB shows now, not at its 30 s retry; a binding that did not change
                    # queues nobody by itself. A pass that finds its group in shape writes nothing.
                    was_lost.clear()
                    applier.recheck_now()

            sb = SBReader(
                options.ovn_sb_address, tls_source=tls_source, on_port=applier.enqueue_ports,
                on_sync=synced, on_lost=lost,
            )
        return GatewayStep(applier, self.nodes.store, self.subnets.store, self.metrics, self.events,
                           grace=options.nb_grace_period, hold_down=options.trunk_hold_down, sb=sb,
                           settle=options.serving_settle, failback=options.gateway_failback,
                           overlay_mtu=options.overlay_mtu)

    def recheck_status_fields(self) -> None:
        """field-reports.md S5: for each CRD known to prune status fields, one
        dry-run status write of a cached object with every field (nothing is stored; no
        status write while the CRD stays outdated). Once it holds them all, every object of
        the kind is queued and writes its full status (:meth:`_status_fields_held`)."""
        for resource in self.pruned.outdated():
            if resource == names.PROXMOX_NETWORKS:
                store, executor = self.listers.networks, self.network_reconciler.executor
            elif resource == names.PROXMOX_NETWORK_ZONES:
                store, executor = self.listers.zones, self.zone_reconciler.executor
            else:
                continue
            obj = next((o for o in store.list() if not (o.get("metadata") or {}).get("deletionTimestamp")), None)
            if obj is None:
                continue
            try:
                executor.probe_schema(resource, obj)
            except Exception as err:  # noqa: BLE001 - the next resync probes again
                log.info("could not recheck the CRD's status fields", crd=schema.crd_name(resource), error=repr(err))

    def _status_fields_held(self, resource: Any) -> None:
        """The CRD holds every status field again (an operator applied this version's CRDs):
        every object of the kind writes its full status at its next pass, which is now."""
        if resource == names.PROXMOX_NETWORKS:
            self.network_controller.add_all([NetworkKey.of(n) for n in self.listers.networks.list()])
        elif resource == names.PROXMOX_NETWORK_ZONES:
            self.zone_controller.add_all([ZoneKey(z["metadata"]["name"]) for z in self.listers.zones.list()])

    def _network_exists(self, ns: str, name: str) -> bool:
        """Fresh API Get for the collector (§9.6): NotFound -> False, other errors raise."""
        return self.writer.get_or_none(names.PROXMOX_NETWORKS, name, ns) is not None

    def _reconcile_network(self, key: NetworkKey) -> Any:
        started = time.monotonic()
        try:
            return self.network_reconciler.reconcile(str(key))
        except Exception:
            # §13 reason="error": a pass that failed (reading, computing or writing).
            self.metrics.reconcile_error("error")
            raise
        finally:
            self.metrics.observe_reconcile(time.monotonic() - started)

    def discover_late_kinds(self) -> list[str]:
        """Start informers for optional kinds the API server serves and we do not watch yet
        (at start, and at every resync for kinds installed later).

        Until such an informer has synced its cache reads count nothing; a release still
        waits for the fresh API read of §6 step 1, which includes the new kind at once.
        """
        missing = {k: v for k, v in ALL_KINDS.items() if k not in self.optional}
        if not missing:
            return []
        added = self._optional_informers(missing)
        for key, inf in added.items():
            self._use_optional(key, inf)
            self.routes.wire_optional(key, inf)
        if added:
            self.metrics.register_informers({str(inf.resource): inf for inf in self.factory.informers()})
        return list(added)

    def _optional_informers(self, wanted: dict[str, tuple[str, str, tuple[str, ...], str]]) -> dict[str, Any]:
        """Informers for kinds another project serves (CAPI IPAM, capmox, Kube-OVN's IP):
        the newest served version, or none when the group is not installed (then nothing
        uses it)."""
        out: dict[str, Any] = {}
        for key, (group, plural, versions, kind) in wanted.items():
            served = served_versions(self.writer, group, plural, versions)
            if not served:
                log.info("kind not served; treated as having no objects", group=group, resource=plural)
                continue
            # The newest version that lists; if none does, the newest (its informer says why).
            version = listable_version(self.writer, resource_of(key), served) or served[0]
            log.info("watching", group=group, version=version, resource=plural)
            out[key] = self._optional_informer(key, version)
        return out

    def _optional_informer(self, key: str, version: str) -> Any:
        """The (shared) informer of optional kind ``key`` in ``version``: its indexes, its
        projection (controller/watch/projection.py)."""
        resource = resource_of(key)(version)
        return self.factory.informer(resource, indexers=OPTIONAL_INDEXERS.get(key, {BY_NAMESPACE: index_namespace}),
                                     transform=projected(resource))

    def move_failing_kinds(self, sync_timeout: float = 60.0, grace: float = UNLISTABLE_GRACE) -> list[str]:
        """field-reports.md R8: an optional kind whose informer cannot list moves to another
        served version that lists, found by discovery. "Cannot list" is /readyz's rule
        (:func:`failing_past`): its LISTs and WATCHes have failed for ``grace`` seconds, read
        as one run however the failures come (a watch that hangs before each ERROR too).
        The new informer replaces the old one once its cache has synced; until then the old
        cache and the fresh reads before a release stand.

        :returns: the ``"<old resource> -> <new resource>"`` moves made.
        """
        moved = []
        for key, inf in list(self.optional.items()):
            if failing_past(inf, grace) is None:
                continue
            group, plural, versions, _ = ALL_KINDS[key]
            served = served_versions(self.writer, group, plural, versions)
            version = listable_version(self.writer, resource_of(key), served)
            if version is None or version == inf.resource.version:
                continue
            new = self._optional_informer(key, version)
            self.routes.wire_optional(key, new)
            new.start()
            if not new.wait_for_sync(sync_timeout) or self._stop.is_set():
                log.warning("moving to another version: its cache did not sync; keeping the old one",
                            old=str(inf.resource), new=str(new.resource))
                self.factory.remove(new)
                continue
            self._use_optional(key, new)
            self.factory.remove(inf)
            self.metrics.unregister_informer(str(inf.resource))
            self.metrics.register_informers({str(new.resource): new})
            log.warning("kind cannot be listed in its version; moved to another served version",
                        old=str(inf.resource), new=str(new.resource), error=inf.last_error)
            moved.append(f"{inf.resource} -> {new.resource}")
        if moved:
            self.enqueue_all()  # what the old cache missed: every network looks again
        return moved

    def _use_optional(self, key: str, inf: Any) -> None:
        """``inf`` serves ``key`` from now on: the listers, the fresh reads of a release."""
        self.optional[key] = inf
        if key in OPTIONAL_KINDS:
            self.network_reconciler.consumer_resources[key] = inf.resource
        setattr(self.listers, key, inf.store)

    def unlistable(self, grace: float = UNLISTABLE_GRACE) -> list[str]:
        """``"<resource>: <error>"`` of each informer whose LISTs and WATCHes have failed for
        at least ``grace`` seconds (``/readyz`` names them; field-reports.md R8)."""
        failures = ((inf.resource, failing_past(inf, grace)) for inf in self.factory.informers())
        return [f"{resource}: {error}" for resource, error in failures if error is not None]

    # -- running ------------------------------------------------------------------
    def start(self) -> None:
        """Start the informers, wait for every cache, then the workers (single replica)."""
        self.start_informers()
        self.start_workers()

    def start_informers(self, cancel: threading.Event | None = None) -> bool:
        """Discover the optional kinds, start the informers and wait for every cache.
        Standby replicas do this too, so a takeover does not wait for a full list.

        While the API server cannot answer discovery this retries with backoff (1 s
        doubling to 30 s, one log line per attempt), never in a tight loop.

        :param cancel: when set (SIGTERM) the waits end at once.
        :returns: True once every cache has synced; False when ``cancel`` was set first.
        :raises RuntimeError: when the caches do not sync within ``cache_sync_timeout``.
        """
        cancel = cancel or threading.Event()
        backoff = Backoff(DISCOVERY_RETRY_FIRST, DISCOVERY_RETRY_MAX)
        while True:
            try:
                self.discover_late_kinds()
                break
            except (ApiError, OSError, urllib3.exceptions.HTTPError) as err:
                delay = backoff.next_delay()
                log.error("API discovery failed; retrying", error=str(err) or repr(err), retry_in=round(delay, 1))
                if wait(cancel, delay):  # the main thread's wait: controller.runtime.signals says why
                    return False
        if self.events is not None:
            self.events.start()
        if self.gateway is not None:
            self.gateway.applier.start()  # standbys keep a warm NB cache too
            if self.gateway.sb is not None:
                self.gateway.sb.start()
        self.factory.start()
        deadline = time.monotonic() + self.options.cache_sync_timeout
        while not self.factory.wait_for_cache_sync(min(0.2, max(0.0, deadline - time.monotonic()))):
            if cancel.is_set():
                return False
            if time.monotonic() >= deadline:
                raise RuntimeError("informer caches did not sync in time")
        log.info("caches synced", networks=len(self.listers.networks.keys()), vlans=len(self.listers.vlans.keys()))
        if not self._discovery_started:
            # Every replica, leading or not: a standby's caches must follow a kind that
            # moves to another version too, or it stays not Ready through the outage (field-reports.md R8).
            self._discovery_started = True
            t = threading.Thread(target=self._discovery_loop, name="discovery", daemon=True)
            t.start()
            self._threads.append(t)
        return True

    def start_workers(self) -> None:
        """Start workers and the periodic resync (only while leading). No allocation before
        every cache has synced: product-decisions.md §4.4, field-reports.md B01."""
        if not self.factory.has_synced():
            raise RuntimeError("workers must not start before the caches have synced")
        for c in self.controllers:
            self._threads += c.start()
        t = threading.Thread(target=self._resync_loop, name="resync", daemon=True)
        t.start()
        self._threads.append(t)
        if self.collector is not None:
            # Leader only (workers start only while leading), at start and every period.
            t = threading.Thread(target=self.collector.run, args=(self._stop,), name="gateway-collector", daemon=True)
            t.start()
            self._threads.append(t)
        self.enqueue_all()

    def _await_nb(self) -> None:
        """Network workers' warm-up: wait up to ``nb_first_sync_timeout`` for the NB's first
        full copy. Passes before it would count as NB failures (a status write and an Event
        per network on every restart); past this bound the NB is really unreachable and the
        grace of §9.5 takes over. Runs on the workers, never on the elector's thread: a wait
        there made a leader miss its renew deadline."""
        assert self.gateway is not None
        nb = self.gateway.applier.nb
        deadline = time.monotonic() + self.options.nb_first_sync_timeout
        ok = nb.wait_synced(self.options.nb_first_sync_timeout, cancel=self._stop)
        if ok and self.gateway.sb is not None:
            # A pass before the SB's first copy would write GatewayReady Unknown on a restart.
            self.gateway.sb.wait_synced(max(0.0, deadline - time.monotonic()), cancel=self._stop)
        if ok or self._stop.is_set():
            return
        with self._resync_lock:
            first, self._nb_wait_logged = not self._nb_wait_logged, True
        if first:
            log.info("OVN NB not synced yet; starting network passes anyway", error=nb.last_error)

    def namespace_workers(self) -> int:
        """Workers of the namespace queue: half of ``--workers``, at least one (a namespace
        pass is one cache walk and at most one patch)."""
        return max(1, self.options.workers // 2)

    def healthy(self) -> bool:
        """The work loop is alive: every worker and the resync thread run (field-reports.md B13: a leader
        whose work loop died must not keep its lease)."""
        if self._stop.is_set():
            return True
        return all(t.is_alive() for t in self._threads)

    def caches_fresh(self, max_age: float = 1200.0) -> bool:
        """Every cache synced and heard from within ``max_age`` seconds (2x the longest watch
        timeout: field-reports.md B11)."""
        if not self.factory.has_synced():
            return False
        return all(inf.last_sync_age() <= max_age for inf in self.factory.informers())

    def stop(self, timeout: float = STOP_TIMEOUT) -> bool:
        """Stop workers first (a network or zone pass in flight ends before its next action:
        ``controller.runtime.result.Stopping``), then the informers, the NB client
        and Events, all within ``timeout`` seconds together (threads still running then are
        daemons and logged; a SIGTERM with a peer down exits in < 2 s).

        The namespace controller stops after the others, so the namespace passes that their
        last passes asked for (a network gone, a triple to list) still run.

        :returns: True when every worker thread has stopped (no pass can write any more):
            only then may the Lease be released (``controller.main``)."""
        deadline = time.monotonic() + timeout

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        self._stop.set()
        last = self.namespace_controller
        for c in self.controllers:
            if c is not last:
                c.shutdown()
        stopped = self._join([t for t in self._threads if t not in last.threads], deadline)
        last.shutdown()
        stopped = self._join(last.threads, deadline) and stopped
        self.factory.stop(left())
        if self.gateway is not None:
            self.gateway.applier.stop(left())
            if self.gateway.sb is not None:
                self.gateway.sb.stop(left())
        if self.events is not None:
            self.events.stop(left())
        return stopped

    @staticmethod
    def _join(threads: list[threading.Thread], deadline: float) -> bool:
        """Join each thread until ``deadline``; False when one is still running (logged)."""
        done = True
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                done = False
                frame = sys._current_frames().get(t.ident or 0)
                stack = "".join(traceback.format_stack(frame)) if frame else ""
                log.error("thread did not stop", thread=t.name, stack=stack)
        return done

    # -- periodic full resync ---------------------------------------------------------
    def enqueue_all(self) -> int:
        """Queue every network, zone and pod key, and every namespace that has a network;
        returns how many. Logs ``resync complete`` once all of them have been processed
        (tests wait for it). A CRD known to prune status fields is probed again first
        (:meth:`recheck_status_fields`)."""
        self.recheck_status_fields()
        nets = self.listers.networks.list()
        todo: list[tuple[Controller, Any]] = [(self.network_controller, NetworkKey.of(n)) for n in nets]
        todo += [(self.zone_controller, ZoneKey(z["metadata"]["name"])) for z in self.listers.zones.list()]
        todo += [(self.pod_controller, PodKey.of(p)) for p in self.pods.store.list()]
        namespaces = sorted({n["metadata"].get("namespace", "") for n in nets} - {""})
        todo += [(self.namespace_controller, NamespaceKey(ns)) for ns in namespaces]
        with self._resync_lock:
            self._resync_pending = {(c.name, k) for c, k in todo}
        for c, k in todo:
            c.add(k)
        if not todo:
            self._resync_finished()
        return len(todo)

    def _resync_done(self, controller: Controller, key: Any) -> None:
        with self._resync_lock:
            if (controller.name, key) not in self._resync_pending:
                return
            self._resync_pending.discard((controller.name, key))
            if self._resync_pending:
                return
        self._resync_finished()

    def _resync_finished(self) -> None:
        self.resyncs_completed += 1
        with self._resync_lock:
            writes, self._writes_at_resync = self.writer.writes - self._writes_at_resync, self.writer.writes
        log.info("resync complete", resyncs=self.resyncs_completed, writes=writes)

    def _discovery_loop(self) -> None:
        """On every replica: every ``resync_period`` kinds served late get their informers;
        every ``min(resync_period, UNLISTABLE_GRACE)`` kinds that cannot be listed (as
        /readyz names them) move to a version that lists (field-reports.md R8)."""
        period = self.options.resync_period
        step = min(period, UNLISTABLE_GRACE)  # a kind /readyz names moves within one grace
        last_discovery = time.monotonic()
        while not self._stop.wait(step):
            try:
                if time.monotonic() - last_discovery >= period:
                    last_discovery = time.monotonic()
                    self.discover_late_kinds()
                self.move_failing_kinds()
            except Exception as err:  # discovery is retried at the next period
                log.info("discovery failed", error=repr(err))

    def _resync_loop(self) -> None:
        while not self._stop.wait(self.options.resync_period):
            n = self.enqueue_all()
            log.info("resync started", keys=n)
