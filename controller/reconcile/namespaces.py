"""The namespace annotation ``proxmox.cozystack.io/networks`` (reference-behaviour.md §5.9):
a reconciler of its own, keyed by namespace.

One job: keep each namespace's annotation equal to the §5.9 full sync, i.e. the sorted
``<bridge>/<vlan>/<ipPool>`` triples of its networks with a VLAN and a bridge (Terminating
networks without our finalizer left out, duplicates kept, the key deleted when the list is
empty), plus the triples network passes have asked for and not yet written to their status
(the *pending adds*).

Why the pending adds: admission policies read the annotation, so a network's
``status.vlan``/``status.bridge`` must never be visible before its triple is listed (§5.9
"add", step 8, before the status write). A network pass whose triple is missing asks for it
here (:meth:`NamespaceReconciler.want`), does not write its status, and is queued again once
a namespace pass has written the annotation with it. Between the ask and the status write
only the pending add keeps the triple in the desired value; once the network's own status
(read through its read-your-writes overlay) shows the triple, the pending add is dropped.

Why a queue of its own: the queue hands a namespace key to one worker at a time, so two
read-modify-write patches of one annotation never race (no locks), and a burst of networks
in one namespace shares a few patches: every ask only queues the namespace, and a namespace
is passed at most once per ``write_window`` seconds (the first pass after a quiet spell at
once; a pass asked for sooner waits for the window's end, so what arrives meanwhile is
handled by one pass and written in one patch, and a waiting pass costs nothing).

Which namespaces are ours: a namespace with a network in the cache, a pending add, a
network that has just gone (:meth:`NamespaceReconciler.network_gone`: the pass then reads
the Namespace from the API server, so the removal of the last triple is never skipped on a
stale copy), or an annotation that lists a triple on the bridge of a zone (a leftover of
ours: the network went while no leader was there to pass its namespace, e.g. the leader
was killed between the network's NotFound pass and the namespace pass; the next leader
never sees that network, and admission would keep honouring the triple, so the memory of
a departure cannot be what decides; product-decisions.md §5 item 6, chaos short form).
Any other namespace's annotation is left alone.

Without a queue (``enqueue=None``, as when a :class:`controller.reconcile.network.NetworkReconciler`
is used on its own) an ask runs the namespace pass at once on the caller's thread, which is
the reference's synchronous "add"; those passes are serialised by one lock, because there is
no queue to hand out one namespace at a time.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from controller import names
from controller.runtime.kube import ApiError, KubeWriter
from controller.runtime.recent import RecentWrites
from controller.runtime.result import Result
from informers.resource import meta_namespace_key
from informers.store import ThreadSafeStore
from controller.rules.annotation import desired_value, lists_zone_bridge, open_pending
from controller.watch.indexes import BY_NAMESPACE

log = structlog.get_logger(__name__)

NAMESPACE_SYNC_PERIOD = 600.0  # a hand-edited annotation is repaired within this (also by its watch event)
NAMESPACE_WRITE_WINDOW = 1.0  # at most one pass (so one patch) per namespace per this many seconds


# -- pure pieces ------------------------------------------------------------------------------


# -- the reconciler ---------------------------------------------------------------------------


class NamespaceReconciler:
    """Reconciles one namespace key (the namespace's name) per call; see the module docstring.

    :param networks: the ProxmoxNetwork cache (index ``namespace``).
    :param namespaces: the Namespace cache.
    :param network_overlay: the network reconciler's read-your-writes overlay, so a status
        just written counts before the watch brings it back.
    :param enqueue: queues a namespace key (``None``: run the pass at once, see above).
    :param enqueue_network: queues a network key ``<ns>/<name>`` whose pending add has been
        written (it then writes its status).
    :param write_window: minimum seconds between two full passes (so two patches) of one
        namespace; a pass asked for sooner runs at the window's end.
    :param monotonic: the clock of ``write_window``.
    :param zones: the ProxmoxNetworkZone cache, whose bridges tell a leftover triple of ours
        in a namespace without networks (None: no such namespace is ours).
    """

    def __init__(
        self,
        networks: ThreadSafeStore,
        namespaces: ThreadSafeStore,
        writer: KubeWriter,
        network_overlay: RecentWrites | None = None,
        *,
        enqueue: Callable[[str], None] | None = None,
        enqueue_network: Callable[[str], None] | None = None,
        write_window: float = 0.0,
        monotonic: Callable[[], float] = time.monotonic,
        zones: ThreadSafeStore | None = None,
    ) -> None:
        self.networks = networks
        self.zones = zones
        self.writer = writer
        self.network_overlay = network_overlay or RecentWrites(networks)
        # Read-your-writes for our own patches of Namespaces.
        self.recent = RecentWrites(namespaces)
        self.enqueue = enqueue
        self.enqueue_network = enqueue_network or (lambda key: None)
        self.write_window = write_window
        self.monotonic = monotonic
        # The only shared state, under one short lock (never held across I/O):
        # namespace -> {network key: (triple, the network was told it is written)}.
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, tuple[str, bool]]] = {}
        # Namespaces a network left (the next pass reads fresh), with a count of the
        # departures, so a pass clears only the marks it has read.
        self._gone: dict[str, int] = {}
        self._passed_at: dict[str, float] = {}  # last full pass per namespace (for write_window)
        self._inline = threading.Lock()  # only without a queue

    # -- what network passes call -------------------------------------------------------
    def value(self, ns: str) -> str | None:
        """The annotation as last seen (our own last patch included); None when the Namespace
        is not in the cache (not yet seen, or gone): then no triple is listed and no status
        shows one (``controller.plan.network_status.listed``)."""
        obj = self.recent.get(ns)
        if obj is None:
            return None
        return ((obj.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_NAMESPACE_NETWORKS, "")

    def want(self, ns: str, key: str, triple: str) -> None:
        """Network ``key`` needs ``triple`` in the annotation before it writes its status."""
        with self._lock:
            # (Re)set untold: this network waits now, so the next pass that covers the
            # triple queues it again.
            self._pending.setdefault(ns, {})[key] = (triple, False)
        self._request(ns)

    def network_gone(self, ns: str, key: str) -> None:
        """Network ``key`` is gone from the cache (its NotFound pass): its triple leaves."""
        with self._lock:
            per = self._pending.get(ns)
            if per is not None:
                per.pop(key, None)
                if not per:
                    del self._pending[ns]
            self._gone[ns] = self._gone.get(ns, 0) + 1
        self._request(ns)

    def _request(self, ns: str) -> None:
        if self.enqueue is not None:
            self.enqueue(ns)
            return
        with self._inline:
            self.reconcile(ns)

    # -- the pass -------------------------------------------------------------------------
    def reconcile(self, ns: str) -> Result:
        """One pass over namespace ``ns``.

        :raises ApiError: when the read or the patch fails (the worker retries with backoff;
            the pending adds stay).
        """
        with self._lock:
            departed = self._gone.get(ns, 0)
        wait = self._passed_at.get(ns, -math.inf) + self.write_window - self.monotonic()
        if wait > 0 and not departed:
            # Coalesce: one full pass per window; asks and status events arriving meanwhile
            # are handled together at the window's end, in one patch. A departure is not
            # held back: the mark lives in this process only, and a leader that stops inside
            # the window would leave the gone network's triple listed for good (the next
            # leader never sees that network; chaos short form).
            return Result(wait)
        nets = {}
        for n in self.networks.by_index(BY_NAMESPACE, ns):
            key = meta_namespace_key(n)
            nets[key] = self.network_overlay.get(key) or n
        with self._lock:
            pending = {k: t for k, (t, _) in self._pending.get(ns, {}).items()}
            fresh = self._gone.get(ns, 0)
        needed = open_pending(nets, pending)
        leftover = False
        if not nets and not needed and not fresh:
            leftover = self._leftover(ns)
            if not leftover:
                self._settle(ns, pending, needed, fresh=0)
                return Result()  # not ours: a namespace without networks keeps its annotation
        obj, value = self._read(ns, fresh or leftover)
        if obj is None:
            # Not in the cache yet (created just before its networks: its add event queues
            # this key again) or gone (its networks are on their way out). Nothing to write
            # to, and no network is told: its status waits for its triple (§5.9 step 8;
            # ``controller.plan.network_status.listed``). The asks are kept for the pass the add event queues:
            # one made again while this pass ran looks like the one it read.
            with self._lock:
                self._read_departures(ns, fresh)
            return Result()
        self._passed_at[ns] = self.monotonic()
        desired = desired_value(nets.values(), needed.values())
        if desired != value:
            self._patch(ns, desired or None)
        self._settle(ns, pending, needed, fresh)
        return Result(NAMESPACE_SYNC_PERIOD if nets else None)

    def _settle(self, ns: str, seen: Mapping[str, str], needed: Mapping[str, str], fresh: int) -> None:
        """After a pass that read the pending adds ``seen``: drop those it found no longer
        needed, tell the networks whose triple is now written (once each), and clear the
        fresh-read mark. An ask made while the pass ran is left to the next pass (the ask
        queued it)."""
        tell = []
        with self._lock:
            per = self._pending.get(ns, {})
            for key in list(per):
                triple, told = per[key]
                if seen.get(key) != triple:
                    continue  # asked after this pass read the map
                if key not in needed:
                    del per[key]  # its status shows it, or the network is gone
                    continue
                if not told:
                    per[key] = (triple, True)
                    tell.append(key)
            if not per:
                self._pending.pop(ns, None)
            self._read_departures(ns, fresh)
            if ns not in self._pending and not self.networks.by_index(BY_NAMESPACE, ns):
                self._passed_at.pop(ns, None)
        for key in tell:
            self.enqueue_network(key)

    def _read_departures(self, ns: str, fresh: int) -> None:
        """Clear the fresh-read mark of ``ns`` if a pass read all ``fresh`` departures it
        counts (one made since keeps it). The caller holds ``_lock``."""
        if fresh and self._gone.get(ns) == fresh:
            del self._gone[ns]

    def _leftover(self, ns: str) -> bool:
        """Whether the cached annotation of ``ns`` lists a triple on a zone's bridge."""
        if self.zones is None:
            return False
        bridges = [str((z.get("spec") or {}).get("bridge") or "") for z in self.zones.list()]
        return lists_zone_bridge(self.value(ns), [b for b in bridges if b])

    def _read(self, ns: str, fresh: int | bool) -> tuple[dict[str, Any] | None, str]:
        obj = self.writer.get_or_none(names.NAMESPACES, ns) if fresh else self.recent.get(ns)
        if obj is None:
            return None, ""
        return obj, ((obj.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_NAMESPACE_NETWORKS, "")

    def _patch(self, ns: str, value: str | None) -> None:
        patch = {"metadata": {"annotations": {names.ANNOTATION_NAMESPACE_NETWORKS: value}}}
        try:
            written = self.writer.merge_patch(names.NAMESPACES, ns, patch)
        except ApiError as err:
            if err.not_found:
                return
            raise
        self.recent.wrote(written)
