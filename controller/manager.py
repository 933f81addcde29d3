"""The controller's run loop: shared informers feed rate-limited workqueues; workers
run the network, zone and pod reconcilers and the namespace annotation's reconciler
(``product-decisions.md`` §3).

Keys of the main queue are ``network:<namespace>/<name>``, ``zone:<name>`` and
``pod:<namespace>/<name>``; the namespace queue's keys are namespace names. Event
handlers only map objects to keys; every decision is taken in a reconcile pass from the
caches, so any event (or a full resync) leads to the same result.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping
from typing import Any

import attrs
import structlog
import urllib3
from kubernetes import client as k8s

from controller import names
from controller.consumers import machine_pool_refs
from controller.egress import LABEL_GATEWAY, PODS, EgressGatewayPodReconciler
from controller.events import EventRecorder
from controller.gateway import (
    COLLECT_PERIOD,
    NB_GRACE_PERIOD,
    GatewayCollector,
    GatewayStep,
    networks_for_node,
    node_index_provider,
    subnet_index_vpc,
)
from controller.kube import ApiError, KubeWriter
from controller.metrics import NAMESPACE_WORKQUEUE_NAME, Metrics
from controller.namespaces import NAMESPACE_WRITE_WINDOW, NamespaceReconciler, keys_for_namespace, keys_for_network
from controller.prune import DEFAULT_SUBNET_PRUNE_TIMEOUT
from controller.recent import RecentWrites
from controller.network import (
    Listers,
    NetworkReconciler,
    index_namespace,
    network_index_pool,
    network_index_subnet,
    network_index_zone,
)
from controller.vlans import VlanManager, vlan_index_provider, vlan_index_provider_id, vlan_index_zone, vlan_owner
from controller.workqueue import RateLimitingQueue
from controller.zone import ZoneReconciler
from informers import Resource, SharedInformerFactory, meta_namespace_key
from ovn.gateway import GatewayApplier
from ovn.tls import TLSSource

log = structlog.get_logger(__name__)

NETWORK = "network:"
ZONE = "zone:"
POD = "pod:"
NAMESPACE = "namespace:"  # only in logs and the resync set: the namespace queue's keys are bare names


def zone_index_provider(zone: Mapping[str, Any]) -> list[str]:
    """Indexer ``provider``: a zone's ``spec.providerNetwork``."""
    p = (zone.get("spec") or {}).get("providerNetwork")
    return [p] if isinstance(p, str) and p else []


@attrs.define
class Options:
    """Run-time settings from the command line (reference-behaviour.md §14)."""

    manage_gateway: bool = True
    workers: int = 4
    resync_period: float = 600.0
    cache_sync_timeout: float = 120.0
    subnet_prune_timeout: float = DEFAULT_SUBNET_PRUNE_TIMEOUT.total_seconds()
    events: bool = True
    # OVN NB (used only with manage_gateway): remotes; "" runs without the NB step.
    ovn_nb_address: str = ""
    ovn_tls_secret: str = "cozy-kubeovn/kube-ovn-tls"
    ovn_tls_dir: str = ""  # private directory for the TLS files; "" = a fresh temporary one
    nb_grace_period: float = NB_GRACE_PERIOD
    gateway_collect_period: float = COLLECT_PERIOD
    nb_first_sync_timeout: float = 10.0  # seconds the first workers wait for the NB's first sync


def subnet_index_vlan(subnet: Mapping[str, Any]) -> list[str]:
    """Indexer ``vlan``: a Subnet's ``spec.vlan``."""
    v = (subnet.get("spec") or {}).get("vlan")
    return [v] if isinstance(v, str) and v else []


# Consumers and pools, newest served version first (product-decisions.md §4.2).
MACHINE_VERSIONS = ("v1alpha2", "v1alpha1")
ADDRESS_VERSIONS = ("v1beta2", "v1beta1", "v1alpha1")
POOL_VERSIONS = ("v1alpha2", "v1alpha1")


# Kinds other projects serve, by the key the listers use: (group, plural, versions, kind).
OPTIONAL_KINDS = {
    "pools": ("ipam.cluster.x-k8s.io", "inclusterippools", POOL_VERSIONS, "InClusterIPPool"),
    "addresses": ("ipam.cluster.x-k8s.io", "ipaddresses", ADDRESS_VERSIONS, "IPAddress"),
    "claims": ("ipam.cluster.x-k8s.io", "ipaddressclaims", ADDRESS_VERSIONS, "IPAddressClaim"),
    "machines": ("infrastructure.cluster.x-k8s.io", "proxmoxmachines", MACHINE_VERSIONS, "ProxmoxMachine"),
}


def discover(writer: KubeWriter, group: str, plural: str, versions: tuple[str, ...]) -> str | None:
    """The first of ``versions`` in which the API server serves ``group``/``plural``, or None.

    :raises ApiError: for discovery failures other than 404 (the group is not served).
    """
    for version in versions:
        try:
            doc = writer.request("GET", f"/apis/{group}/{version}")
        except ApiError as err:
            if err.not_found:
                continue
            raise
        if any(r.get("name") == plural for r in doc.get("resources") or []):
            return version
    return None


class Manager:
    """Builds the informers, the queue and the reconcilers; :meth:`run` blocks until stop."""

    def __init__(self, api_client: k8s.ApiClient, options: Options, metrics: Metrics | None = None) -> None:
        self.options = options
        self.metrics = metrics or Metrics()
        self.writer = KubeWriter(api_client)
        self.factory = SharedInformerFactory(api_client)
        self.queue = RateLimitingQueue(name="proxmox-network-controller", metrics_hook=self.metrics.workqueue_hook)
        f = self.factory
        self.networks = f.informer(
            names.PROXMOX_NETWORKS,
            indexers={
                "zone": network_index_zone,
                "subnet": network_index_subnet,
                "ippool": network_index_pool,
                "namespace": index_namespace,
            },
        )
        self.zones = f.informer(names.PROXMOX_NETWORK_ZONES, indexers={"provider": zone_index_provider})
        self.vlan_informer = f.informer(names.VLANS, indexers={"provider": vlan_index_provider, "provider_id": vlan_index_provider_id,
                                                          "zone": vlan_index_zone})
        self.namespaces = f.informer(names.NAMESPACES)
        self.provider_networks = f.informer(names.PROVIDER_NETWORKS)
        self.subnets = f.informer(names.SUBNETS, indexers={"vlan": subnet_index_vlan, "vpc": subnet_index_vpc})
        # Only egress-gateway pods are cached (§12).
        self.pods = f.informer(PODS, label_selector=LABEL_GATEWAY)
        self.optional = self._optional_informers()
        self.listers = Listers(
            networks=self.networks.store,
            zones=self.zones.store,
            vlans=self.vlan_informer.store,
            namespaces=self.namespaces.store,
            provider_networks=self.provider_networks.store,
            subnets=self.subnets.store,
            pools=self.optional["pools"].store if "pools" in self.optional else None,
            machines=self.optional["machines"].store if "machines" in self.optional else None,
            addresses=self.optional["addresses"].store if "addresses" in self.optional else None,
            claims=self.optional["claims"].store if "claims" in self.optional else None,
        )
        self.events = EventRecorder(self.writer) if options.events else None
        self.gateway = self._gateway(options)
        self.vlans = VlanManager(self.listers.vlans, self.listers.zones, self.writer,
                                 on_allocation=self.metrics.vlan_allocation)
        # The namespace annotation (§5.9): its own queue, keyed by namespace name.
        self.namespace_queue = RateLimitingQueue(
            name=NAMESPACE_WORKQUEUE_NAME, metrics_hook=self.metrics.workqueue_hook_for(NAMESPACE_WORKQUEUE_NAME))
        network_overlay = RecentWrites(self.networks.store)
        self.namespace_reconciler = NamespaceReconciler(
            self.networks.store, self.namespaces.store, self.writer, network_overlay,
            enqueue=self.namespace_queue.add, enqueue_network=lambda key: self.queue.add(NETWORK + key),
            write_window=NAMESPACE_WRITE_WINDOW,
        )
        self.network_reconciler = NetworkReconciler(
            self.listers, self.writer, self.vlans, options.manage_gateway,
            events=self.events, prune_timeout=options.subnet_prune_timeout, metrics=self.metrics,
            consumer_resources={k: inf.resource for k, inf in self.optional.items()},
            gateway=self.gateway, namespaces=self.namespace_reconciler, recent=network_overlay,
        )
        self.pod_reconciler = EgressGatewayPodReconciler(self.pods.store, self.writer, self.events)
        self.zone_reconciler = ZoneReconciler(
            self.listers, self.writer, self.vlans, events=self.events, metrics=self.metrics,
            prune_timeout=options.subnet_prune_timeout,
        )
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._resync_lock = threading.Lock()
        self._resync_pending: set[str] = set()
        self._writes_at_resync = 0
        self._pass_ids = itertools.count(1)  # next() on a count is atomic under the GIL
        self.resyncs_completed = 0
        self._wire_handlers()
        self.metrics.register_informers({str(inf.resource): inf for inf in self.factory.informers()})

    def _gateway(self, options: Options) -> GatewayStep | None:
        """The OVN side (§9; only with management on and an NB address): a Node cache,
        the NB applier (its row changes enqueue networks) and the collector."""
        self.nodes = None
        self.collector = None
        if not (options.manage_gateway and options.ovn_nb_address):
            return None
        self.nodes = self.factory.informer(names.NODES, indexers={"provider": node_index_provider})
        tls_source = None
        if "ssl:" in options.ovn_nb_address:
            tls_dir = options.ovn_tls_dir or tempfile.mkdtemp(prefix="pnc-ovn-tls-")
            tls_source = TLSSource(
                lambda ns, name: self.writer.get(names.SECRETS, name, ns), options.ovn_tls_secret, tls_dir
            )
        applier = GatewayApplier(
            options.ovn_nb_address, enqueue=lambda key: self.queue.add(NETWORK + key), tls_source=tls_source,
            on_commit=self.metrics.gateway_nb_transaction,
            enqueue_after=lambda key, delay: self.queue.add_after(NETWORK + key, delay),
        )
        self.collector = GatewayCollector(applier, self._network_exists, self.metrics, options.gateway_collect_period)
        return GatewayStep(applier, self.nodes.store, self.subnets.store, self.metrics, self.events,
                           grace=options.nb_grace_period)

    def _network_exists(self, ns: str, name: str) -> bool:
        """Fresh API Get for the collector (§9.6): NotFound -> False, other errors raise."""
        try:
            self.writer.get(names.PROXMOX_NETWORKS, name, ns)
        except ApiError as err:
            if err.not_found:
                return False
            raise
        return True

    def discover_late_kinds(self) -> list[str]:
        """Start informers for optional kinds installed after start (checked every resync).

        Until such an informer has synced its cache reads count nothing; a release still
        waits for the fresh API read of §6 step 1, which includes the new kind at once.
        """
        missing = {k: v for k, v in OPTIONAL_KINDS.items() if k not in self.optional}
        if not missing:
            return []
        added = self._optional_informers(missing)
        for key, inf in added.items():
            self.optional[key] = inf
            self.network_reconciler.consumer_resources[key] = inf.resource
            setattr(self.listers, key, inf.store)
            self._wire_optional(key, inf)
        if added:
            self.metrics.register_informers({str(inf.resource): inf for inf in self.factory.informers()})
        return list(added)

    def _optional_informers(self, wanted: dict[str, tuple[str, str, tuple[str, ...], str]] | None = None) -> dict[str, Any]:
        """Informers for kinds another project serves (CAPI IPAM, capmox): the newest
        served version, or none when the group is not installed (then nothing uses it)."""
        out: dict[str, Any] = {}
        for key, (group, plural, versions, kind) in (wanted or OPTIONAL_KINDS).items():
            version = discover(self.writer, group, plural, versions)
            if version is None:
                log.info("kind not served; treated as having no objects", group=group, resource=plural)
                continue
            log.info("watching", group=group, version=version, resource=plural)
            out[key] = self.factory.informer(
                Resource(group, version, plural, namespaced=True, kind=kind), indexers={"namespace": index_namespace}
            )
        return out

    # -- event -> key mapping -------------------------------------------------------
    def _wire_handlers(self) -> None:
        q = self.queue
        nsq = self.namespace_queue

        def on_network(obj: Mapping[str, Any]) -> None:
            self.network_reconciler.recent.observe(obj)
            q.add(NETWORK + meta_namespace_key(obj))
            z = (obj.get("spec") or {}).get("zone")
            if z:
                q.add(ZONE + z)

        def namespaces_of(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
            for ns in keys_for_network(old, new):
                nsq.add(ns)

        self.networks.add_event_handler(
            on_add=lambda o: (on_network(o), namespaces_of(None, o)),
            on_update=lambda old, new: (on_network(old), on_network(new), namespaces_of(old, new)),
            on_delete=lambda o: (on_network(o), namespaces_of(o, None)),
        )

        def networks_of_zone(zname: str) -> None:
            for net in self.listers.networks.by_index("zone", zname):
                q.add(NETWORK + meta_namespace_key(net))

        def on_zone(obj: Mapping[str, Any]) -> None:
            zname = obj["metadata"]["name"]
            self.zone_reconciler.recent.observe(obj)
            q.add(ZONE + zname)
            networks_of_zone(zname)
            # Pins of one zone change what the other zones on the provider may allocate.
            p = (obj.get("spec") or {}).get("providerNetwork")
            for other in self.listers.zones.by_index("provider", p) if p else []:
                q.add(ZONE + other["metadata"]["name"])

        self.zones.add_event_handler(
            on_add=on_zone, on_update=lambda old, new: (on_zone(old), on_zone(new)), on_delete=on_zone
        )

        def on_vlan(obj: Mapping[str, Any]) -> None:
            ns, name = vlan_owner(obj)
            if ns and name:
                q.add(f"{NETWORK}{ns}/{name}")
            # Any Vlan on a provider changes free counts (and duplicates) of its zones.
            p = (obj.get("spec") or {}).get("provider")
            for z in self.listers.zones.by_index("provider", p) if p else []:
                q.add(ZONE + z["metadata"]["name"])
            zl = ((obj.get("metadata") or {}).get("labels") or {}).get(names.LABEL_ZONE)
            if zl:
                q.add(ZONE + zl)

        def on_vlan_delete(obj: Mapping[str, Any]) -> None:
            on_vlan(obj)
            # A network refused with VLANNameTaken/VLANProviderMismatch waits for this name.
            for net in self.listers.networks.by_index("subnet", obj["metadata"]["name"]):
                q.add(NETWORK + meta_namespace_key(net))
            # A duplicate may have gone (or come): its twins must re-check their VLANConflict.
            for key in vlan_index_provider_id(obj):
                for other in self.listers.vlans.by_index("provider_id", key):
                    if other["metadata"]["name"] != obj["metadata"]["name"]:
                        on_vlan(other)

        # The assumed set learns of every event first (the store already shows it).
        self.vlan_informer.add_event_handler(
            on_add=lambda o: (self.vlans.observe(o), on_vlan_delete(o)),
            on_update=lambda old, new: (self.vlans.observe(new), on_vlan(old), on_vlan(new)),
            on_delete=lambda o: (self.vlans.observe(o, deleted=True), on_vlan_delete(o)),
        )

        def on_namespace(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> None:
            self.network_reconciler.recent_namespaces.observe(new)
            if old is not None and (old.get("metadata") or {}).get("labels") == (new.get("metadata") or {}).get(
                "labels"
            ):
                return
            ns = new["metadata"]["name"]
            for net in self.listers.networks.list():
                if net["metadata"].get("namespace") == ns:
                    q.add(NETWORK + meta_namespace_key(net))

        def annotation_of(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
            for ns in keys_for_namespace(old, new):
                nsq.add(ns)

        self.namespaces.add_event_handler(
            on_add=lambda o: (on_namespace(None, o), annotation_of(None, o)),
            on_update=lambda old, new: (on_namespace(old, new), annotation_of(old, new)),
            on_delete=lambda o: (on_namespace(None, o), annotation_of(o, None)),
        )

        def on_provider_network(obj: Mapping[str, Any]) -> None:
            for z in self.listers.zones.by_index("provider", obj["metadata"]["name"]):
                q.add(ZONE + z["metadata"]["name"])

        self.provider_networks.add_event_handler(
            on_add=on_provider_network,
            on_update=lambda old, new: on_provider_network(new),
            on_delete=on_provider_network,
        )

        def on_subnet(obj: Mapping[str, Any]) -> None:
            for net in self.listers.networks.by_index("subnet", obj["metadata"]["name"]):
                q.add(NETWORK + meta_namespace_key(net))
            # A Subnet bound to an orphaned Vlan holds it: its zone re-checks.
            v = (obj.get("spec") or {}).get("vlan")
            vlan = self.listers.vlans.get(v) if v else None
            zl = ((vlan or {}).get("metadata", {}).get("labels") or {}).get(names.LABEL_ZONE)
            if zl:
                q.add(ZONE + zl)

        self.subnets.add_event_handler(
            on_add=on_subnet, on_update=lambda old, new: (on_subnet(old), on_subnet(new)), on_delete=on_subnet
        )

        def networks_of_pool(ns: str, pool: str) -> None:
            for net in self.listers.networks.by_index("ippool", f"{ns}/{pool}"):
                q.add(NETWORK + meta_namespace_key(net))

        def on_pool(obj: Mapping[str, Any]) -> None:
            networks_of_pool(obj["metadata"].get("namespace", ""), obj["metadata"]["name"])

        def on_pool_ref(obj: Mapping[str, Any]) -> None:
            spec = obj.get("spec")
            ref = spec.get("poolRef") if isinstance(spec, Mapping) else None
            if isinstance(ref, Mapping) and ref.get("name"):
                networks_of_pool(obj["metadata"].get("namespace", ""), str(ref["name"]))

        def on_machine(obj: Mapping[str, Any]) -> None:
            for ref in machine_pool_refs(obj):
                if ref.get("name"):
                    networks_of_pool(obj["metadata"].get("namespace", ""), str(ref["name"]))

        if self.nodes is not None:
            def on_node(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
                keys = networks_for_node(
                    old, new, self.listers.zones.list(),
                    lambda z: [meta_namespace_key(n) for n in self.listers.networks.by_index("zone", z)],
                )
                for k in keys:
                    q.add(NETWORK + k)

            self.nodes.add_event_handler(
                on_add=lambda o: on_node(None, o), on_update=on_node, on_delete=lambda o: on_node(o, None)
            )

        self.pods.add_event_handler(
            on_add=lambda o: q.add(POD + meta_namespace_key(o)),
            on_update=lambda old, new: q.add(POD + meta_namespace_key(new)),
            on_delete=lambda o: None,
        )

        self._optional_handlers = {"pools": on_pool, "addresses": on_pool_ref, "claims": on_pool_ref,
                                   "machines": on_machine}
        for key, inf in self.optional.items():
            self._wire_optional(key, inf)

    def _wire_optional(self, key: str, inf: Any) -> None:
        handler = self._optional_handlers[key]
        inf.add_event_handler(
            on_add=handler,
            on_update=lambda old, new, h=handler: (h(old), h(new)),
            on_delete=handler,
        )

    # -- running ------------------------------------------------------------------
    def start(self) -> None:
        """Start the informers, wait for every cache, then the workers (single replica)."""
        self.start_informers()
        self.start_workers()

    def start_informers(self) -> None:
        """Start the informers and wait for every cache. Standby replicas do this too, so a
        takeover does not wait for a full list. Raises RuntimeError on timeout."""
        if self.events is not None:
            self.events.start()
        if self.gateway is not None:
            self.gateway.applier.start()  # standbys keep a warm NB cache too
        self.factory.start()
        if not self.factory.wait_for_cache_sync(self.options.cache_sync_timeout):
            raise RuntimeError("informer caches did not sync in time")
        log.info("caches synced", networks=len(self.listers.networks.keys()), vlans=len(self.listers.vlans.keys()))

    def start_workers(self) -> None:
        """Start workers and the periodic resync (only while leading). No allocation before
        every cache has synced: product-decisions.md §4.4, field report B01."""
        if not self.factory.has_synced():
            raise RuntimeError("workers must not start before the caches have synced")
        if self.gateway is not None and not self.gateway.applier.nb.wait_synced(self.options.nb_first_sync_timeout):
            # Passes before the NB's first full copy would count as NB failures (a status
            # write and an Event per network on every restart); past this bound the NB
            # is really unreachable and the grace of §9.5 takes over.
            log.info("OVN NB not synced yet; starting workers anyway", error=self.gateway.applier.nb.last_error)
        for i in range(max(1, self.options.workers)):
            t = threading.Thread(target=self._worker, args=(self.queue, self._process), name=f"worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        for i in range(self.namespace_workers()):
            t = threading.Thread(target=self._worker, args=(self.namespace_queue, self._process_namespace),
                                 name=f"namespace-worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        t = threading.Thread(target=self._resync_loop, name="resync", daemon=True)
        t.start()
        self._threads.append(t)
        if self.collector is not None:
            # Leader only (workers start only while leading), at start and every period.
            t = threading.Thread(target=self.collector.run, args=(self._stop,), name="gateway-collector", daemon=True)
            t.start()
            self._threads.append(t)
        self.enqueue_all()

    def namespace_workers(self) -> int:
        """Workers of the namespace queue: half of ``--workers``, at least one (a namespace
        pass is one cache walk and at most one patch)."""
        return max(1, self.options.workers // 2)

    def healthy(self) -> bool:
        """The work loop is alive: every worker and the resync thread run (B13: a leader
        whose work loop died must not keep its lease)."""
        if self._stop.is_set():
            return True
        return all(t.is_alive() for t in self._threads)

    def caches_fresh(self, max_age: float = 1200.0) -> bool:
        """Every cache synced and heard from within ``max_age`` seconds (2x the longest watch
        timeout: field report B11)."""
        if not self.factory.has_synced():
            return False
        return all(inf.last_sync_age() <= max_age for inf in self.factory.informers())

    def stop(self) -> None:
        """Stop workers first (a pass in flight finishes), then the informers and Events.

        The namespace queue is shut down after the network workers have stopped, so the
        namespace passes that their last passes asked for (a network gone, a triple to
        list) still run."""
        self._stop.set()
        self.queue.shutdown()
        namespace_workers = [t for t in self._threads if t.name.startswith("namespace-worker-")]
        others = [t for t in self._threads if t not in namespace_workers]
        self._join(others)
        self.namespace_queue.shutdown()
        self._join(namespace_workers)
        self.factory.stop()
        if self.gateway is not None:
            self.gateway.applier.stop()
        if self.events is not None:
            self.events.stop()

    @staticmethod
    def _join(threads: list[threading.Thread]) -> None:
        for t in threads:
            t.join(timeout=5)
            if t.is_alive():
                frame = sys._current_frames().get(t.ident or 0)
                stack = "".join(traceback.format_stack(frame)) if frame else ""
                log.error("thread did not stop", thread=t.name, stack=stack)

    def wait(self) -> None:
        self._stop.wait()

    def _worker(self, queue: RateLimitingQueue, process: Any) -> None:
        while True:
            key = queue.get()
            if key is None:
                return
            try:
                process(key)
            finally:
                queue.done(key)
                self._resync_done(key if queue is self.queue else NAMESPACE + key)

    def _process_namespace(self, ns: str) -> None:
        self._run(self.namespace_queue, ns, NAMESPACE + ns, lambda: self.namespace_reconciler.reconcile(ns))

    def _process(self, key: str) -> None:
        self._run(self.queue, key, key, lambda: self._dispatch(key))

    def _dispatch(self, key: str) -> Any:
        kind, _, obj = key.partition(":")
        started = time.monotonic()
        if kind == "network":
            try:
                return self.network_reconciler.reconcile(obj)
            except Exception:
                # §13 reason="error": a pass that failed (reading, computing or writing).
                self.metrics.reconcile_error("error")
                raise
            finally:
                self.metrics.observe_reconcile(time.monotonic() - started)
        if kind == "zone":
            return self.zone_reconciler.reconcile(obj)
        if kind == "pod":
            return self.pod_reconciler.reconcile(obj)
        log.error("unknown queue key", key=key)
        return None

    def _run(self, queue: RateLimitingQueue, key: str, label: str, fn: Any) -> None:
        """One pass of ``fn`` for ``key`` of ``queue`` (``label`` in the logs): on success
        forget the backoff and requeue as asked; on any failure retry with backoff."""
        started = time.monotonic()
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(key=label, pass_id=f"{next(self._pass_ids):x}")
        try:
            result = fn()
            if result is None:
                return
        except ApiError as err:
            log.info("reconcile failed, retrying with backoff", key=label, status=err.status, reason=err.reason, error=err.message)
            queue.add_rate_limited(key)
            return
        except (OSError, urllib3.exceptions.HTTPError) as err:
            # The API server is unreachable or the connection dropped: retry, it is not a bug.
            log.info("reconcile failed, retrying with backoff", key=label, error=repr(err))
            queue.add_rate_limited(key)
            return
        except Exception:  # never let a malformed object kill a worker
            log.exception("reconcile crashed, retrying with backoff", key=label)
            queue.add_rate_limited(key)
            return
        queue.forget(key)
        if result.requeue_after is not None:
            queue.add_after(key, result.requeue_after)
        log.debug("reconciled", key=label, seconds=round(time.monotonic() - started, 4))

    # -- periodic full resync ---------------------------------------------------------
    def enqueue_all(self) -> int:
        """Queue every network, zone and pod key, and every namespace that has a network;
        returns how many. Logs ``resync complete`` once all of them have been processed
        (tests wait for it)."""
        nets = self.listers.networks.list()
        keys = [NETWORK + meta_namespace_key(n) for n in nets]
        keys += [ZONE + z["metadata"]["name"] for z in self.listers.zones.list()]
        keys += [POD + meta_namespace_key(p) for p in self.pods.store.list()]
        namespaces = sorted({n["metadata"].get("namespace", "") for n in nets} - {""})
        with self._resync_lock:
            self._resync_pending = set(keys) | {NAMESPACE + ns for ns in namespaces}
        for k in keys:
            self.queue.add(k)
        for ns in namespaces:
            self.namespace_queue.add(ns)
        keys += namespaces
        if not keys:
            self._resync_finished()
        return len(keys)

    def _resync_done(self, key: str) -> None:
        with self._resync_lock:
            if key not in self._resync_pending:
                return
            self._resync_pending.discard(key)
            if self._resync_pending:
                return
        self._resync_finished()

    def _resync_finished(self) -> None:
        self.resyncs_completed += 1
        with self._resync_lock:
            writes, self._writes_at_resync = self.writer.writes - self._writes_at_resync, self.writer.writes
        log.info("resync complete", resyncs=self.resyncs_completed, writes=writes)

    def _resync_loop(self) -> None:
        while not self._stop.wait(self.options.resync_period):
            try:
                self.discover_late_kinds()
            except Exception as err:  # discovery is retried at the next resync
                log.info("discovery failed", error=repr(err))
            n = self.enqueue_all()
            log.info("resync started", keys=n)
