"""ProxmoxNetwork reconcile (reference-behaviour.md §5 and §6).

One pass reads the network and everything it depends on from the caches, adopts or
creates the Vlan, and derives the whole status again; the status is written only when it
differs from the stored one, so a converged network costs no write
(``product-decisions.md`` §6). A deleting network walks the release order of §6 and never
lets the VLAN go while a consumer, the Subnet, or a Kube-OVN reference may still use it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import structlog

from controller import allocator, kubeovn, names, prune
from controller.addresses import check_pool_split, prefix_bits
from controller.conditions import (
    FALSE,
    TRUE,
    UNKNOWN,
    Clock,
    compute_ready,
    find,
    remove_condition,
    set_condition,
    transition,
    utc_now,
)
from controller.rfc3339 import format_utc, parse
from controller.consumers import Consumers, count_consumers
from controller.events import NORMAL, WARNING, EventRecorder
from controller.kube import ApiError, KubeWriter
from controller.metrics import Metrics
from controller.prune import go_list
from controller.namespaces import NamespaceReconciler, namespace_triple
from controller.recent import RecentWrites
from controller.result import Result
from controller.selectors import InvalidSelector, matches
from controller.vlans import VlanManager, gives_back_duplicate, vlan_owner
from informers import Resource, ThreadSafeStore

log = structlog.get_logger(__name__)

GATEWAY_DISABLED_MESSAGE = (
    "the controller does not manage the router port's HA chassis group (--manage-gateway-chassis=false)"
)
WAITING_FOR_VLAN = "waits for a VLAN to be allocated"
RESYNC_PERIOD = 600.0  # §5.10 with management off
GATEWAY_RETRY = 30.0  # gatewayRetryPeriod (§5.10)
GATEWAY_RESYNC = 300.0  # gatewayResyncPeriod (§5.10)
IN_USE_RETRY = 30.0
SUBNET_EXISTS_RETRY = 30.0
SUBNET_DELETING_RETRY = 10.0
GATEWAY_RELEASE_RETRY = 30.0
VLAN_REFERENCED_RETRY = 10.0
SWITCH_DELETING_RETRY = 10.0

# Ready reasons an operator only needs to know about, not act on: their Events are Normal.
NORMAL_REASONS = frozenset(
    {"Ready", "Pending", "InUse", "SubnetStillExists", "SubnetDeleting", "VLANStillReferenced", "SwitchDeleting",
     "SubnetNotReady"}
)


@attrs.define
class Listers:
    """The shared caches one pass reads (all synced before any worker starts).

    ``machines``, ``addresses`` and ``claims`` are None when the API server does not
    serve those kinds (capmox or CAPI IPAM not installed): they then hold nothing.
    """

    networks: ThreadSafeStore
    zones: ThreadSafeStore
    vlans: ThreadSafeStore
    namespaces: ThreadSafeStore
    provider_networks: ThreadSafeStore
    subnets: ThreadSafeStore | None = None
    pools: ThreadSafeStore | None = None
    machines: ThreadSafeStore | None = None
    addresses: ThreadSafeStore | None = None
    claims: ThreadSafeStore | None = None


def in_namespace(store: ThreadSafeStore | None, ns: str) -> list[dict[str, Any]]:
    """Objects of a namespaced store in ``ns`` (index ``namespace``)."""
    return [] if store is None else store.by_index("namespace", ns)


def index_namespace(obj: Mapping[str, Any]) -> list[str]:
    """Indexer ``namespace``."""
    ns = (obj.get("metadata") or {}).get("namespace")
    return [ns] if ns else []


def network_index_zone(net: Mapping[str, Any]) -> list[str]:
    """Indexer ``zone``: ``spec.zone`` of a ProxmoxNetwork."""
    z = (net.get("spec") or {}).get("zone")
    return [z] if isinstance(z, str) and z else []


def network_index_subnet(net: Mapping[str, Any]) -> list[str]:
    """Indexer ``subnet``: ``spec.subnet`` of a ProxmoxNetwork."""
    s = (net.get("spec") or {}).get("subnet")
    return [s] if isinstance(s, str) and s else []


def network_index_pool(net: Mapping[str, Any]) -> list[str]:
    """Indexer ``ippool``: ``<namespace>/<spec.ipPool>``."""
    p = (net.get("spec") or {}).get("ipPool")
    ns = (net.get("metadata") or {}).get("namespace")
    return [f"{ns}/{p}"] if isinstance(p, str) and p and ns else []


def requeue_after(manage_gateway: bool, status: Mapping[str, Any]) -> float:
    """§5.10: 10 min with management off; 30 s while an NB failure is recorded or
    GatewayReady waits for the NB or the router port; 5 min otherwise."""
    if not manage_gateway:
        return RESYNC_PERIOD
    if status.get("gatewayFailingSince"):
        return GATEWAY_RETRY
    gw = find(status.get("conditions"), names.GATEWAY_READY)
    if gw is not None and gw.get("reason") in ("NBUnavailable", "RouterPortMissing"):
        return GATEWAY_RETRY
    return GATEWAY_RESYNC


def set_not_ready(
    conds: list[dict[str, Any]], ctype: str, reason: str, message: str, gen: int, manage_gateway: bool, now: Clock
) -> None:
    """``setNotReady`` of §5.4: the condition False, and when it is VLANAllocated the
    conditions that depend on a VLAN become Unknown/``WaitingForVLAN``."""
    set_condition(conds, ctype, FALSE, reason, message, gen, now)
    if ctype == names.VLAN_ALLOCATED:
        deps = [names.SUBNET_READY, names.IPPOOL_READY]
        gw = find(conds, names.GATEWAY_READY)
        if manage_gateway and (gw is None or gw.get("reason") != "Disabled"):
            deps.append(names.GATEWAY_READY)
        for dep in deps:
            set_condition(conds, dep, UNKNOWN, "WaitingForVLAN", WAITING_FOR_VLAN, gen, now)
    compute_ready(conds, gen, now)


def duplicate_holders(vlan: Mapping[str, Any], on_provider: list[dict[str, Any]]) -> list[str]:
    """Names of the other Vlans on the same provider holding the same ID (sorted)."""
    vid = allocator.vlan_id(vlan)
    me = vlan["metadata"]["name"]
    return sorted(
        v["metadata"]["name"]
        for v in on_provider
        if v["metadata"]["name"] != me and allocator.vlan_id(v) == vid
    )


def subnet_conditions(subnet: Mapping[str, Any]) -> tuple[str, str, str]:
    """SubnetReady (status, reason, message) from Kube-OVN's conditions (§5.5)."""
    conds = (subnet.get("status") or {}).get("conditions") or []
    ready = find(conds, "Ready")
    if ready is not None and ready.get("status") == TRUE:
        return TRUE, "Ready", "Kube-OVN reports the subnet Ready"
    reason = "SubnetNotReady"
    message = (ready or {}).get("message") or "Kube-OVN has not reported the subnet Ready yet"
    validated = find(conds, "Validated")
    if validated is not None and validated.get("status") == FALSE:
        reason, message = "SubnetInvalid", validated.get("message") or ""
    return FALSE, reason, message


class NetworkReconciler:
    """Reconciles one ProxmoxNetwork key ``<namespace>/<name>`` per call.

    :param gateway_release: called during deletion (§6 step 3) with the network; returns
        None when the network's HA chassis group is gone, else the error text. The OVN
        work plugs in here; without it nothing is held.
    :param namespaces: the namespace annotation's reconciler (§5.9); a pass whose triple is
        not in the annotation yet asks it for the triple and writes its status only once
        the annotation lists it.
    :param recent: the read-your-writes overlay of networks (shared with ``namespaces``).
    """

    def __init__(
        self,
        listers: Listers,
        writer: KubeWriter,
        vlans: VlanManager,
        manage_gateway: bool,
        now: Clock = utc_now,
        events: EventRecorder | None = None,
        prune_timeout: float | None = None,
        gateway_release: Callable[[Mapping[str, Any]], str | None] | None = None,
        consumer_resources: Mapping[str, Resource] | None = None,
        metrics: Metrics | None = None,
        gateway: Any = None,
        namespaces: NamespaceReconciler | None = None,
        recent: RecentWrites | None = None,
    ) -> None:
        self.l = listers
        self.writer = writer
        self.vlans = vlans
        self.manage_gateway = manage_gateway
        self.now = now
        self.events = events
        self.prune_timeout = prune.prune_timeout(prune_timeout).total_seconds()  # §7: None/non-positive = 10 min
        # controller.gateway.GatewayStep (None: GatewayReady is not evaluated past the
        # subnet check, and deletion holds nothing for the NB).
        self.gateway = gateway
        self.gateway_release = gateway_release or (gateway.release if gateway is not None else (lambda net: None))
        # Served versions of pools, machines, addresses and claims, for the fresh LIST that
        # confirms "no consumer" before a release (field report B15).
        self.consumer_resources = dict(consumer_resources or {})
        self.metrics = metrics or Metrics()
        # Read-your-writes for our own writes (see controller.recent).
        self.recent = recent or RecentWrites(listers.networks)
        # The namespace annotation (§5.9) is its own reconciler; without one handed in (no
        # namespace queue), the annotation is written within this pass, as the reference does.
        self.namespaces = namespaces or NamespaceReconciler(
            listers.networks, listers.namespaces, writer, self.recent)
        self.recent_namespaces = self.namespaces.recent

    def _event(self, obj: Mapping[str, Any], etype: str, reason: str, message: str) -> None:
        if self.events is not None:
            self.events.event(obj, etype, reason, message)

    # -- entry -----------------------------------------------------------------------
    def reconcile(self, key: str) -> Result:
        """One pass over network ``key``.

        :raises ApiError: when a read or write fails; nothing of the pass is written
            after the failing step, and the worker retries with backoff.
        """
        net = self.recent.get(key)
        if net is None:
            ns, _, name = key.partition("/")
            self.metrics.forget_network(ns, name)
            if self.gateway is not None:
                self.gateway.applier.forget(key)
            self.namespaces.network_gone(ns, key)  # §5.9: the NotFound pass removes its triple
            return Result()
        meta = net["metadata"]
        if meta.get("deletionTimestamp"):
            return self._finalize(key, net)
        if names.FINALIZER not in (meta.get("finalizers") or []):
            net = self._write(key, lambda: self.writer.add_finalizer(names.PROXMOX_NETWORKS, net, names.FINALIZER))
            meta = net["metadata"]

        gen = int(meta.get("generation") or 0)
        old_status = net.get("status") or {}
        status, waits = self._compute(net, gen, old_status)

        # §5.9 step 8: the triple is in the annotation before any status shows it. A pass
        # whose status waits skipped the gateway step (the group follows the status); asking
        # makes the namespace pass queue it again.
        triple = namespace_triple({"spec": net.get("spec"), "status": status})
        ns = meta["namespace"]
        if triple and (waits or not self.namespaces.listed(ns, triple)):
            self.namespaces.want(ns, key, triple)
            if waits and self.namespaces.listed(ns, triple):  # listed at once (inline namespace pass)
                status, waits = self._compute(net, gen, old_status)
        ready = find(status["conditions"], names.READY)
        if ready is not None and ready.get("status") != TRUE:
            self.metrics.reconcile_error(ready.get("reason", ""))
        if waits or self._status_waits(net, status):
            return Result(requeue_after(self.manage_gateway, status))
        net = self._write_status(key, net, old_status, status)
        self._record_metrics(net, status)
        return Result(requeue_after(self.manage_gateway, status))

    def _compute(self, net: dict[str, Any], gen: int, old_status: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """The pass's status (a copy of ``old_status`` brought up to date) and whether it
        waits for the namespace annotation (see :meth:`_fill`)."""
        status = copy.deepcopy(dict(old_status))
        status["observedGeneration"] = gen
        conds: list[dict[str, Any]] = status.setdefault("conditions", [])
        return status, bool(self._fill(net, status, conds, gen, old_status))

    def _status_waits(self, net: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
        """This pass's status shows a triple the namespace annotation does not list yet, and
        the stored status does not show it either (§5.9 step 8): it is not written now."""
        triple = namespace_triple({"spec": net.get("spec"), "status": status})
        return bool(triple) and namespace_triple(net) != triple and not self.namespaces.listed(
            net["metadata"]["namespace"], triple)

    def _record_metrics(self, net: Mapping[str, Any], status: Mapping[str, Any]) -> None:
        """Network series of reference-behaviour.md §13 from the status just computed."""
        meta, spec = net["metadata"], net.get("spec") or {}
        ns, name = meta["namespace"], meta["name"]
        ready = find(status.get("conditions"), names.READY)
        self.metrics.set_network(
            ns, name, str(spec.get("zone") or ""), status.get("vlan") or 0,
            ready is not None and ready.get("status") == TRUE, status.get("ipPool"), False,
        )
        gw = find(status.get("conditions"), names.GATEWAY_READY)
        if gw is None or gw.get("reason") == "Disabled":
            self.metrics.forget_gateway(ns, name)
        else:
            self.metrics.set_gateway_ready(ns, name, gw.get("status") == TRUE)

    def _write(self, key: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        try:
            obj = fn()
        except ApiError as err:
            if err.conflict or err.invalid:
                self.recent.forget(key)
            raise
        self.recent.wrote(obj)
        return obj

    def _write_status(self, key: str, net: dict[str, Any], old: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        if status == old:
            return net
        body = copy.deepcopy(net)
        body["status"] = status
        written = self._write(key, lambda: self.writer.update_status(names.PROXMOX_NETWORKS, body))
        after = transition(old.get("conditions"), status.get("conditions"), names.READY)
        if after is not None:
            etype = NORMAL if after.get("reason") in NORMAL_REASONS else WARNING
            self._event(written, etype, after.get("reason", ""), after.get("message", ""))
        return written

    # -- the non-deleting pass (§5.2-§5.8) ---------------------------------------------
    def _fill(
        self, net: dict[str, Any], status: dict[str, Any], conds: list[dict[str, Any]], gen: int,
        old_status: Mapping[str, Any] | None = None,
    ) -> bool:
        """Compute the status of a non-deleting pass into ``status``/``conds``.

        :returns: True when the status waits for the namespace annotation (see
            :meth:`_status_waits`); the gateway step was then skipped.
        """
        meta, spec = net["metadata"], net.get("spec") or {}
        ns, name = meta["namespace"], meta["name"]
        now = self.now

        def not_ready(reason: str, message: str) -> None:
            set_not_ready(conds, names.VLAN_ALLOCATED, reason, message, gen, self.manage_gateway, now)

        # §5.2 gateway pre-step.
        gw = find(conds, names.GATEWAY_READY)
        if not self.manage_gateway:
            set_condition(conds, names.GATEWAY_READY, UNKNOWN, "Disabled", GATEWAY_DISABLED_MESSAGE, gen, now)
        elif gw is not None and gw.get("reason") == "Disabled":
            remove_condition(conds, names.GATEWAY_READY)

        # §5.3 zone and namespace.
        zname = str(spec.get("zone") or "")
        zone = self.l.zones.get(zname)
        if zone is None:
            not_ready("ZoneNotFound", f'ProxmoxNetworkZone "{zname}" does not exist')
            return
        zspec = zone.get("spec") or {}
        if not self._namespace_allowed(ns, zspec.get("namespaceSelector")):
            not_ready("NamespaceNotAllowed", f'namespace "{ns}" does not match the namespaceSelector of zone "{zname}"')
            return

        # §5.4 VLAN.
        out = self.vlans.ensure(net, zone)
        if out.vlan is None:
            not_ready(out.reason, out.message)
            return
        vlan = out.vlan
        vid = allocator.vlan_id(vlan)
        bridge = str(zspec.get("bridge") or "")
        provider = str(zspec.get("providerNetwork") or "")
        if out.allocated:
            self._event(net, NORMAL, "VLANAllocated", f'allocated VLAN {vid} on provider "{provider}" (Vlan "{vlan["metadata"]["name"]}")')
        status["vlan"] = vid if vid is not None else 0
        status["vlanName"] = vlan["metadata"]["name"]
        status["bridge"] = bridge
        mtu = zspec.get("mtu")
        if isinstance(mtu, int) and not isinstance(mtu, bool):
            status["mtu"] = mtu
        else:
            status.pop("mtu", None)
        if (vlan.get("status") or {}).get("conflict") is True:
            not_ready(
                "VLANConflict",
                f'Kube-OVN reports VLAN {vid} on provider "{provider}" as conflicting with another Vlan',
            )
            return
        holders = self.vlans.holders(provider, vid) if vid is not None else []
        others = duplicate_holders(vlan, holders)
        if others:
            held = ", ".join(f'"{o}"' for o in others)
            msg = f'VLAN {vid} on provider "{provider}" is also held by Vlan {held}'
            twins = [v for v in holders if v["metadata"]["name"] != vlan["metadata"]["name"]]
            if gives_back_duplicate(vlan, twins) and self._give_back_unbound(net, vlan):
                self._event(net, WARNING, "VLANDuplicateRepaired",
                            f'{msg}; gave back Vlan "{vlan["metadata"]["name"]}" (made by this controller, '
                            f'not bound yet) and allocating again')
                msg += "; this network's Vlan was given back and is allocated again"
            not_ready("VLANConflict", msg)
            return
        msg = f"VLAN {vid} on bridge {bridge}"
        static = allocator.static_assignment_for(zone, ns, name)
        if static is not None and static != vid:
            msg += f"; the static assignment asks for VLAN {static}, which applies only when the network is recreated"
        set_condition(conds, names.VLAN_ALLOCATED, TRUE, "Allocated", msg, gen, now)

        subnet = self._subnet_step(net, status, conds, gen, status["vlanName"])
        self._pool_step(net, status, conds, gen, subnet)
        if self.manage_gateway:
            if subnet is None:
                set_condition(conds, names.GATEWAY_READY, UNKNOWN, "SubnetUnavailable",
                              "the router port is looked up once the subnet is bound", gen, now)
            elif self.gateway is not None:
                if self._status_waits(net, status):
                    # The group follows the status: while the status waits for the namespace
                    # annotation no group is written, so a network whose status never showed
                    # a VLAN never wrote one (§6 step 3 releases only with status.vlan set).
                    return True
                self.gateway.evaluate(net, zone, subnet, status, conds, old_status or {}, gen, now)
            else:
                c = find(conds, names.GATEWAY_READY)
                if c is not None and c.get("reason") in ("SubnetUnavailable", "WaitingForVLAN"):
                    remove_condition(conds, names.GATEWAY_READY)
        compute_ready(conds, gen, now)
        return False

    def _subnet_step(
        self, net: dict[str, Any], status: dict[str, Any], conds: list[dict[str, Any]], gen: int, vlan_name: str
    ) -> dict[str, Any] | None:
        """§5.5; returns the Subnet when it is bound to our Vlan, else None."""
        sname = str((net.get("spec") or {}).get("subnet") or "")
        sub = self.l.subnets.get(sname) if self.l.subnets is not None else None
        if sub is None:
            set_condition(conds, names.SUBNET_READY, FALSE, "SubnetNotFound",
                          f'Kube-OVN Subnet "{sname}" does not exist', gen, self.now)
            return None
        sspec = sub.get("spec") or {}
        actual = sspec.get("vlan") or ""
        if actual != vlan_name:
            set_condition(conds, names.SUBNET_READY, FALSE, "SubnetNotBound",
                          f'Subnet "{sname}" has spec.vlan "{actual}", expected "{vlan_name}"', gen, self.now)
            return None
        smeta = sub.get("metadata") or {}
        if not smeta.get("deletionTimestamp") and names.FINALIZER not in (smeta.get("finalizers") or []):
            sub = self.writer.add_finalizer(names.SUBNETS, sub, names.FINALIZER)
        cidr = str(sspec.get("cidrBlock") or "")
        status["cidr"] = cidr
        gateway = sspec.get("gateway")
        if gateway:
            status["gateway"] = gateway
        else:
            status.pop("gateway", None)
        bits = prefix_bits(cidr)
        if bits is not None:
            status["prefix"] = bits
        st, reason, message = subnet_conditions(sub)
        set_condition(conds, names.SUBNET_READY, st, reason, message, gen, self.now)
        return sub

    def _pool_step(
        self, net: dict[str, Any], status: dict[str, Any], conds: list[dict[str, Any]], gen: int,
        subnet: dict[str, Any] | None,
    ) -> None:
        """§5.6."""
        ns = net["metadata"]["namespace"]
        pname = str((net.get("spec") or {}).get("ipPool") or "")
        pool = self.l.pools.get(f"{ns}/{pname}") if self.l.pools is not None else None
        now = self.now
        if pool is None:
            status.pop("ipPool", None)
            set_condition(conds, names.IPPOOL_READY, FALSE, "PoolNotFound",
                          f'InClusterIPPool "{pname}" does not exist in this namespace', gen, now)
            return
        ip = (pool.get("status") or {}).get("ipAddresses")
        if isinstance(ip, Mapping):
            status["ipPool"] = {k: ip.get(k) if isinstance(ip.get(k), int) else 0 for k in ("total", "used", "free")}
        if subnet is None:
            set_condition(conds, names.IPPOOL_READY, UNKNOWN, "SubnetUnavailable",
                          "the pool is checked against the subnet once the subnet is bound", gen, now)
            return
        sspec = subnet.get("spec") or {}
        excludes = sspec.get("excludeIps") or []
        failure = check_pool_split(
            str(sspec.get("cidrBlock") or ""),
            str(sspec.get("gateway") or ""),
            [str(e) for e in excludes] if isinstance(excludes, list) else [],
            pool.get("spec") or {},
        )
        if failure is not None:
            set_condition(conds, names.IPPOOL_READY, FALSE, failure[0], failure[1], gen, now)
            return
        usage = status.get("ipPool")
        if usage and usage.get("total", 0) > 0 and usage.get("free", 0) == 0:
            set_condition(conds, names.IPPOOL_READY, TRUE, "PoolExhausted",
                          f"all {usage['total']} addresses of the pool are allocated; new machines will wait", gen, now)
            return
        set_condition(conds, names.IPPOOL_READY, TRUE, "Ready", "pool lies inside the subnet's excludeIps", gen, now)

    def _namespace_allowed(self, ns: str, selector: Any) -> bool:
        if selector is None:
            return True
        nsobj = self.l.namespaces.get(ns)
        if nsobj is None:
            return False
        labels = (nsobj.get("metadata") or {}).get("labels") or {}
        try:
            return matches(selector, labels)
        except InvalidSelector:
            return False

    # -- deletion (§6) -------------------------------------------------------------------
    def _finalize(self, key: str, net: dict[str, Any]) -> Result:
        meta, spec = net["metadata"], net.get("spec") or {}
        if names.FINALIZER not in (meta.get("finalizers") or []):
            return Result()
        ns, name = meta["namespace"], meta["name"]
        gen = int(meta.get("generation") or 0)
        old = net.get("status") or {}
        status = copy.deepcopy(old)
        conds: list[dict[str, Any]] = status.setdefault("conditions", [])
        prev_switch = find(old.get("conditions"), names.SWITCH_DELETED)
        remove_condition(conds, names.SWITCH_DELETED)
        vid = int(status.get("vlan") or 0)
        pname = str(spec.get("ipPool") or "")
        sname = str(spec.get("subnet") or "")

        def wait(reason: str, message: str, after: float) -> Result:
            set_condition(conds, names.READY, FALSE, reason, message, gen, self.now)
            self._write_status(key, net, old, status)
            self.metrics.set_deleting(ns, name, True)
            return Result(after)

        # 1. Consumers.
        pool = self.l.pools.get(f"{ns}/{pname}") if self.l.pools is not None else None
        consumers = count_consumers(
            pool, pname,
            in_namespace(self.l.machines, ns), in_namespace(self.l.addresses, ns), in_namespace(self.l.claims, ns),
        )
        if not consumers.busy:
            # The cache says free: confirm with a fresh read before anything is released (B15).
            consumers = self._fresh_consumers(ns, pname)
        if consumers.busy:
            return wait("InUse", consumers.message(pname, vid, sname), IN_USE_RETRY)

        # 2. The Subnet (read from the API: a release is never decided on a lagging cache).
        try:
            sub = self.writer.get(names.SUBNETS, sname)
        except ApiError as err:
            if not err.not_found:
                raise
            sub = None
        if sub is not None:
            # The Subnet is back (or still here): a timer an earlier deletion of the same
            # name started must not shorten the wait of its next deletion (§7.1: a name no
            # longer gone is dropped).
            self._drop_live_timers(sname, ns, name)
            if not (sub.get("metadata") or {}).get("deletionTimestamp"):
                return wait("SubnetStillExists",
                            f'Subnet "{sname}" still exists; VLAN {vid} is released after it is deleted', SUBNET_EXISTS_RETRY)
            message = f'waiting for Kube-OVN to delete Subnet "{sname}" before VLAN {vid} is released'
            held = kubeovn.held_only_by_us(sub)
            if held:
                # Kube-OVN put no finalizer of its own on it (ours came first): ours keeps
                # the Subnet while Kube-OVN still counts IPs in it (docs/testing.md, "What
                # the real peers taught us").
                message += (f"; Kube-OVN counts {held} IP(s) in use in it and has no finalizer of its own on it, "
                            f"so the controller keeps its finalizer until they are released")
            else:
                try:
                    self.writer.remove_finalizer(names.SUBNETS, sub, names.FINALIZER)
                except ApiError as err:
                    if not err.not_found:
                        raise
            return wait("SubnetDeleting", message, SUBNET_DELETING_RETRY)

        # 3. Gateway release (holds the VLAN while the NB still points at it).
        if self.manage_gateway and vid:
            err_text = self.gateway_release(net)
            if err_text:
                return wait("GatewayReleasePending",
                            f"could not delete the network's HA chassis group from OVN NB: {err_text}",
                            GATEWAY_RELEASE_RETRY)

        # 4. The Vlan.
        try:
            vlan = self.writer.get(names.VLANS, sname)
        except ApiError as err:
            if not err.not_found:
                raise
            vlan = None
        if vlan is not None and vlan_owner(vlan) == (ns, name):
            # The release cannot be undone: act only for the very object the API server
            # still has, deleting and holding our finalizer (not a stale cache entry).
            if not self._still_ours(net):
                self.recent.forget(key)
                return Result()
            live, gone = self.vlans.split_listed_subnets(vlan)
            now = self.now()
            not_before = parse(meta.get("deletionTimestamp"))
            vlan, newest = self.vlans.track_timers(vlan, gone, now, not_before)
            if gone:
                ltt = prev_switch.get("lastTransitionTime") if prev_switch and prev_switch.get("status") == FALSE else format_utc(now)
                conds.append({
                    "type": names.SWITCH_DELETED, "status": FALSE, "reason": "ListedOnVlan",
                    "message": f"Kube-OVN still lists deleted subnets {go_list(gone)} on the Vlan",
                    "observedGeneration": gen, "lastTransitionTime": ltt,
                })
            vname = vlan["metadata"]["name"]
            if live:
                return wait("VLANStillReferenced",
                            f'Kube-OVN still lists subnets {go_list(live)} on Vlan "{vname}"', VLAN_REFERENCED_RETRY)
            timed_out = False
            if gone and newest is not None:
                deadline = prune.deadline(newest, self.prune_timeout)
                remaining = (deadline - now).total_seconds()
                if remaining > 0:
                    return wait(
                        "SwitchDeleting",
                        f'Kube-OVN still lists deleted subnets {go_list(gone)} on Vlan "{vname}" until it has deleted '
                        f"their logical switches; VLAN {allocator.vlan_id(vlan)} is released then, or at "
                        f"{format_utc(deadline)} at the latest",
                        min(remaining, SWITCH_DELETING_RETRY),
                    )
                timed_out = True
                log.info("Kube-OVN did not prune deleted subnets from the Vlan in time; releasing the VLAN anyway",
                         vlan=allocator.vlan_id(vlan), subnets=gone, timeout=self.prune_timeout)
            self.vlans.release(vlan)
            zone = (vlan["metadata"].get("labels") or {}).get(names.LABEL_ZONE, "")
            log.info("released VLAN", zone=zone, vlan=allocator.vlan_id(vlan), subnet=sname, network=key)
            if timed_out:
                self._event(net, WARNING, "VLANReleasedAfterPruneTimeout",
                            f"released VLAN {allocator.vlan_id(vlan)}: Kube-OVN still listed deleted subnets "
                            f"{go_list(gone)} after the prune timeout of {int(self.prune_timeout)}s")
            else:
                self._event(net, NORMAL, "VLANReleased", f'released VLAN {allocator.vlan_id(vlan)} (Vlan "{vname}")')

        # 5. Our finalizer.
        try:
            removed = self.writer.remove_finalizer(names.PROXMOX_NETWORKS, net, names.FINALIZER)
        except ApiError as err:
            if err.conflict or err.invalid:
                self.recent.forget(key)
            if not err.not_found:
                raise
            removed = None
        if removed is not None:
            self.recent.wrote(removed)
        self.metrics.forget_network(ns, name)
        return Result()

    def _still_ours(self, net: Mapping[str, Any]) -> bool:
        """The API server's copy of ``net`` has the same UID, is deleting and carries our finalizer."""
        meta = net["metadata"]
        try:
            cur = self.writer.get(names.PROXMOX_NETWORKS, meta["name"], meta["namespace"])
        except ApiError as err:
            if err.not_found:
                return False
            raise
        cm = cur.get("metadata") or {}
        return (
            cm.get("uid") == meta.get("uid")
            and bool(cm.get("deletionTimestamp"))
            and names.FINALIZER in (cm.get("finalizers") or [])
        )

    def _give_back_unbound(self, net: Mapping[str, Any], vlan: Mapping[str, Any]) -> bool:
        """Delete the network's Vlan of a self-made duplicate when fresh reads show that
        nothing has bound it: the Vlan is still the same object, not Terminating, lists no
        Subnet; no Subnet is named after it or names it; no consumer holds the network's
        pool (field report B15: a release is decided on fresh reads only). Returns True when
        the Vlan was given back."""
        name = vlan["metadata"]["name"]
        try:
            fresh = self.writer.get(names.VLANS, name)
        except ApiError as err:
            if err.not_found:
                return False
            raise
        fm = fresh.get("metadata") or {}
        if (fm.get("uid") != vlan["metadata"].get("uid") or fm.get("deletionTimestamp")
                or allocator.vlan_id(fresh) != allocator.vlan_id(vlan)
                or (fresh.get("status") or {}).get("subnets")):
            return False
        if self.l.subnets is not None and self.l.subnets.by_index("vlan", name):
            return False
        try:
            self.writer.get(names.SUBNETS, name)
            return False
        except ApiError as err:
            if not err.not_found:
                raise
        meta, spec = net["metadata"], net.get("spec") or {}
        if self._fresh_consumers(meta["namespace"], str(spec.get("ipPool") or "")).busy:
            return False
        log.warning("giving back a duplicate VLAN this controller made", vlan=name,
                    id=allocator.vlan_id(fresh), network=f'{meta["namespace"]}/{meta["name"]}')
        self.vlans.release(fresh)
        return True

    def _fresh_consumers(self, ns: str, pname: str) -> Consumers:
        """:func:`count_consumers` over objects read from the API server, not the cache."""
        def items(key: str) -> list[dict[str, Any]]:
            res = self.consumer_resources.get(key)
            if res is None:
                return []
            try:
                return self.writer.request("GET", res.path(ns)).get("items") or []
            except ApiError as err:
                if err.not_found:
                    return []
                raise

        pool = None
        res = self.consumer_resources.get("pools")
        if res is not None:
            try:
                pool = self.writer.get(res, pname, ns)
            except ApiError as err:
                if not err.not_found:
                    raise
        return count_consumers(pool, pname, items("machines"), items("addresses"), items("claims"))

    def _drop_live_timers(self, vlan_name: str, ns: str, name: str) -> None:
        try:
            vlan = self.writer.get(names.VLANS, vlan_name)
        except ApiError as err:
            if err.not_found:
                return
            raise
        if vlan_owner(vlan) != (ns, name):
            return
        if names.ANNOTATION_DELETED_SUBNETS not in ((vlan.get("metadata") or {}).get("annotations") or {}):
            return
        _, gone = self.vlans.split_listed_subnets(vlan)
        self.vlans.track_timers(vlan, gone, self.now(), None)
