"""ProxmoxNetwork reconcile (reference-behaviour.md §5, first part: finalizer, zone,
namespace, VLAN).

One pass reads the network and its zone from the caches, adopts or creates the Vlan, and
derives the whole status again; the status is written only when it differs from the
stored one, so a converged network costs no write (``product-decisions.md`` §6).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import structlog

from controller import allocator, names
from controller.conditions import FALSE, TRUE, UNKNOWN, Clock, compute_ready, find, remove_condition, set_condition, utc_now
from controller.kube import ApiError, KubeWriter
from controller.recent import RecentWrites
from controller.selectors import InvalidSelector, matches
from controller.vlans import VlanManager
from informers import ThreadSafeStore

log = structlog.get_logger(__name__)

GATEWAY_DISABLED_MESSAGE = (
    "the controller does not manage the router port's HA chassis group (--manage-gateway-chassis=false)"
)
WAITING_FOR_VLAN = "waits for a VLAN to be allocated"


@attrs.frozen
class Result:
    """What the worker does after a pass: requeue after ``requeue_after`` seconds, or not."""

    requeue_after: float | None = None


@attrs.define
class Listers:
    """The shared caches one pass reads (all synced before any worker starts)."""

    networks: ThreadSafeStore
    zones: ThreadSafeStore
    vlans: ThreadSafeStore
    namespaces: ThreadSafeStore
    provider_networks: ThreadSafeStore


def network_index_zone(net: Mapping[str, Any]) -> list[str]:
    """Indexer ``zone``: ``spec.zone`` of a ProxmoxNetwork."""
    z = (net.get("spec") or {}).get("zone")
    return [z] if isinstance(z, str) and z else []


def network_index_subnet(net: Mapping[str, Any]) -> list[str]:
    """Indexer ``subnet``: ``spec.subnet`` of a ProxmoxNetwork."""
    s = (net.get("spec") or {}).get("subnet")
    return [s] if isinstance(s, str) and s else []


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


class NetworkReconciler:
    """Reconciles one ProxmoxNetwork key ``<namespace>/<name>`` per call."""

    def __init__(
        self,
        listers: Listers,
        writer: KubeWriter,
        vlans: VlanManager,
        manage_gateway: bool,
        now: Clock = utc_now,
        on_status: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.l = listers
        self.writer = writer
        self.vlans = vlans
        self.manage_gateway = manage_gateway
        self.now = now
        self.on_status = on_status or (lambda net: None)
        # Read-your-writes for our own finalizer and status writes (see controller.recent).
        self.recent = RecentWrites(listers.networks)

    def reconcile(self, key: str) -> Result:
        """One pass over network ``key``.

        :raises ApiError: when a read or write fails; nothing of the pass is written
            after the failing step, and the worker retries with backoff.
        """
        net = self.recent.get(key)
        if net is None:
            return Result()
        meta = net["metadata"]
        if meta.get("deletionTimestamp"):
            # Deletion (consumers, subnet, prune timers, release) comes with the lifecycle
            # work; until then a deleting network keeps everything it holds.
            return Result()
        if names.FINALIZER not in (meta.get("finalizers") or []):
            net = self._write(key, lambda: self.writer.add_finalizer(names.PROXMOX_NETWORKS, net, names.FINALIZER))
            meta = net["metadata"]

        gen = int(meta.get("generation") or 0)
        old_status = net.get("status") or {}
        status = copy.deepcopy(old_status)
        status["observedGeneration"] = gen
        conds: list[dict[str, Any]] = status.setdefault("conditions", [])
        self._fill(net, status, conds, gen)
        if not conds:
            status.pop("conditions")

        if status != old_status:
            body = copy.deepcopy(net)
            body["status"] = status
            net = self._write(key, lambda: self.writer.update_status(names.PROXMOX_NETWORKS, body))
        self.on_status(net)
        return Result()

    def _write(self, key: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        try:
            obj = fn()
        except ApiError as err:
            if err.conflict or err.invalid:
                self.recent.forget(key)
            raise
        self.recent.wrote(obj)
        return obj

    # -- the functional part ---------------------------------------------------------
    def _fill(self, net: dict[str, Any], status: dict[str, Any], conds: list[dict[str, Any]], gen: int) -> None:
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
        status["vlan"] = vid if vid is not None else 0
        status["vlanName"] = vlan["metadata"]["name"]
        status["bridge"] = bridge
        mtu = zspec.get("mtu")
        if isinstance(mtu, int) and not isinstance(mtu, bool):
            status["mtu"] = mtu
        else:
            status.pop("mtu", None)
        provider = str(zspec.get("providerNetwork") or "")
        if (vlan.get("status") or {}).get("conflict") is True:
            not_ready(
                "VLANConflict",
                f'Kube-OVN reports VLAN {vid} on provider "{provider}" as conflicting with another Vlan',
            )
            return
        others = duplicate_holders(vlan, self.vlans.vlans_on(provider))
        if others:
            held = ", ".join(f'"{o}"' for o in others)
            not_ready("VLANConflict", f'VLAN {vid} on provider "{provider}" is also held by Vlan {held}')
            return
        msg = f"VLAN {vid} on bridge {bridge}"
        static = allocator.static_assignment_for(zone, ns, name)
        if static is not None and static != vid:
            msg += f"; the static assignment asks for VLAN {static}, which applies only when the network is recreated"
        set_condition(conds, names.VLAN_ALLOCATED, TRUE, "Allocated", msg, gen, now)
        # Subnet, pool and gateway steps arrive with the lifecycle and OVN work; a
        # dependent still Unknown/WaitingForVLAN from an earlier pass no longer applies.
        for dep in (names.SUBNET_READY, names.IPPOOL_READY, names.GATEWAY_READY):
            c = find(conds, dep)
            if c is not None and c.get("reason") == "WaitingForVLAN":
                remove_condition(conds, dep)
        compute_ready(conds, gen, now)

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
