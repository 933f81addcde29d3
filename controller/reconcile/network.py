"""ProxmoxNetwork reconcile: observe, plan, apply (reference-behaviour.md §5 and §6).

A pass reads the network and everything it depends on from the caches into a
:class:`controller.plan.network_status.NetworkSnapshot`, and runs the pure planner
(:func:`controller.plan.network.plan_network`) with the executor
(``controller.apply.executor.Executor``) until the plan settles. This module holds the listers,
their index functions and the observer; the rules live in the planner.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import structlog

from controller import names, schema
from controller.rules import kubeovn, prune
from controller.rules.pool_conflicts import pool_name
from controller.rules.spans import (
    IN_CLUSTER_IP_POOL,
    pool_spans,
)
from controller.apply.executor import Executor, run
from controller.rfc3339 import Clock, utc_now
from controller.rules.consumers import count_consumers
from controller.runtime.events import EventRecorder
from controller.plan.gateway import SERVING_SETTLE
from controller.runtime.kube import KubeWriter
from controller.rules import allocator
from controller.metrics import Metrics
from controller.reconcile.namespaces import NamespaceReconciler
from controller.plan.network import plan_network
from controller.plan.network_status import NetworkSnapshot
from controller.runtime.recent import RecentWrites
from controller.runtime.result import Result
from controller.apply.vlans import VlanManager
from informers.resource import Resource
from controller.watch.indexes import Listers, in_namespace, overlap_candidates
from controller.watch.indexes import BY_IPPOOL, BY_MACHINE, BY_NETWORK_DEVICE, BY_SUBNET, BY_VLAN, BY_VPC

log = structlog.get_logger(__name__)


class NetworkReconciler:
    """Reconciles one ProxmoxNetwork key ``<namespace>/<name>`` per call.

    :param gateway: the NB side (``controller.apply.gateway.GatewayStep``), or None: GatewayReady
        is then not evaluated past the subnet check, and deletion holds nothing for the NB.
    :param namespaces: the namespace annotation's reconciler (§5.9); a pass whose triple is
        not in the annotation yet asks it for the triple and writes its status only once
        the annotation lists it. Without one (no namespace queue), the annotation is written
        within the pass, as the reference does.
    :param recent: the read-your-writes overlay of networks (shared with ``namespaces``).
    :param consumer_resources: served versions of pools, machines, addresses and claims for
        the fresh consumer read of a release (field-reports.md B15); the manager adds kinds that
        appear later to this very mapping.
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
        consumer_resources: Mapping[str, Resource] | None = None,
        metrics: Metrics | None = None,
        gateway: Any = None,
        namespaces: NamespaceReconciler | None = None,
        recent: RecentWrites | None = None,
        stopping: threading.Event | None = None,
        kube_ovn_stale_after: float = kubeovn.KUBE_OVN_STALE_AFTER,
        pruned: schema.PrunedFields | None = None,
    ) -> None:
        self.l = listers
        self.kube_ovn_stale_after = kube_ovn_stale_after
        self.pruned = pruned
        self.vlans = vlans
        self.manage_gateway = manage_gateway
        self.now = now
        self.prune_timeout = prune.prune_timeout(prune_timeout).total_seconds()  # §7: None/non-positive = 10 min
        self.gateway = gateway
        self.consumer_resources: dict[str, Resource] = dict(consumer_resources or {})
        self.metrics = metrics or Metrics()
        self.recent = recent or RecentWrites(listers.networks)
        self.namespaces = namespaces or NamespaceReconciler(listers.networks, listers.namespaces, writer, self.recent)
        self.recent_namespaces = self.namespaces.recent
        # Our finalizer on a Subnet: the next pass reads it back, not the cache's older copy.
        self.recent_subnets = RecentWrites(listers.subnets) if listers.subnets is not None else None
        self.executor = Executor(
            writer, vlans, (names.PROXMOX_NETWORKS, self.recent), events, self.metrics,
            self.consumer_resources, self.namespaces, gateway, stopping,
            overlays={names.SUBNETS: self.recent_subnets} if self.recent_subnets is not None else None,
            pruned=pruned,
        )

    def reconcile(self, key: str) -> Result:
        """One pass over network ``key``.

        :raises ApiError: when a read or write fails; nothing of the pass is written
            after the failing step, and the worker retries with backoff.
        """
        return run(plan_network, self.observe(key), self.executor)

    def pool_vpcs(self, others: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, frozenset[str]]:
        """``<namespace>/<name>`` of each InClusterIPPool of ``others`` that networks use ->
        the VPCs of those networks' Subnets (a network whose Subnet is not cached adds none)."""
        out: dict[str, frozenset[str]] = {}
        for kind, pool in others:
            if kind != IN_CLUSTER_IP_POOL or not isinstance(pool, Mapping):
                continue
            name = pool_name(kind, pool)
            if name in out:
                continue
            vpcs: set[str] = set()
            users = self.l.networks.by_index(BY_IPPOOL, name)
            for net in users:
                sname = (net.get("spec") or {}).get("subnet")
                sub = self.l.subnets.get(sname) if isinstance(sname, str) and sname and self.l.subnets else None
                if sub is not None:
                    vpcs.add(kubeovn.subnet_vpc(sub))
            if users:
                out[name] = frozenset(vpcs)
        return out

    def subnets_on(self, vlans: Any, own: str) -> dict[str, tuple[str, ...]]:
        """Vlan name -> the cached Subnets naming it, for the Vlans other than ``own``."""
        if self.l.subnets is None:
            return {}
        out: dict[str, tuple[str, ...]] = {}
        for v in vlans:
            vname = str(v["metadata"]["name"])
            if vname != own:
                out[vname] = tuple(sorted(str(o["metadata"]["name"]) for o in self.l.subnets.by_index(BY_VLAN, vname)))
        return out

    def on_network(self, ns: str, pool: str, bridge: str, vid: int | None) -> tuple[
            tuple[dict[str, Any], ...], tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]:
        """The machines of ``ns`` with a NIC that references ``pool`` or is on ``bridge`` with
        VLAN ``vid``, the claims they own and the IPAddresses of those claims (field-reports.md S4;
        indexes ``network_device`` and ``machine``, no namespace scan)."""
        if self.l.machines is None:
            return (), (), ()
        wanted = [f"{ns}/pool/{pool}"] if pool else []
        if bridge and vid is not None:
            wanted.append(f"{ns}/vlan/{bridge}/{vid}")
        machines: dict[str, dict[str, Any]] = {}
        for value in wanted:
            for m in self.l.machines.by_index(BY_NETWORK_DEVICE, value):
                machines.setdefault(str(m["metadata"]["name"]), m)
        if not machines or self.l.claims is None:
            return tuple(machines.values()), (), ()
        claims = [c for m in machines for c in self.l.claims.by_index(BY_MACHINE, f"{ns}/{m}")]
        addresses: list[dict[str, Any]] = []
        if self.l.addresses is not None:
            for c in claims:
                ref = (c.get("status") or {}).get("addressRef") if isinstance(c.get("status"), Mapping) else None
                name = (ref.get("name") if isinstance(ref, Mapping) else None) or c["metadata"]["name"]
                a = self.l.addresses.get(f"{ns}/{name}")
                if a is not None:
                    addresses.append(a)
        return tuple(machines.values()), tuple(claims), tuple(addresses)

    def observe(self, key: str) -> NetworkSnapshot:
        """Everything a pass over ``key`` reads from the caches (no API call)."""
        net = self.recent.get(key)
        base = NetworkSnapshot(
            key=key, network=net, now=self.now(), manage_gateway=self.manage_gateway,
            gateway_enabled=self.gateway is not None, prune_timeout=self.prune_timeout,
            grace=getattr(self.gateway, "grace", 600.0), kube_ovn_stale_after=self.kube_ovn_stale_after,
            pruned=self.pruned.of(names.PROXMOX_NETWORKS) if self.pruned is not None else frozenset(),
        )
        if net is None:
            return base
        meta, spec = net["metadata"], net.get("spec") or {}
        ns = meta["namespace"]
        pname = str(spec.get("ipPool") or "")
        pool = self.l.pools.get(f"{ns}/{pname}") if self.l.pools is not None else None
        if meta.get("deletionTimestamp"):
            consumers = count_consumers(
                pool, pname,
                in_namespace(self.l.machines, ns), in_namespace(self.l.addresses, ns), in_namespace(self.l.claims, ns),
            )
            owns = self.gateway is not None and self.gateway.owns(key)
            sname = str(spec.get("subnet") or "")
            on_vlan = self.l.subnets.by_index(BY_VLAN, sname) if sname and self.l.subnets is not None else []
            return attrs.evolve(base, consumers=consumers, owns_group=owns, strangers=tuple(sorted(
                str(o["metadata"]["name"]) for o in on_vlan if o["metadata"]["name"] != sname)))
        zone = self.l.zones.get(str(spec.get("zone") or ""))
        sname = str(spec.get("subnet") or "")
        vlan = self.vlans.lookup(sname)
        provider = str(((zone or {}).get("spec") or {}).get("providerNetwork") or "")
        subnet = self.recent_subnets.get(sname) if self.recent_subnets is not None and sname else None
        trunk: tuple[Any, ...] = ()
        trunk_recheck: float | None = None
        siblings: frozenset[str] = frozenset()
        binding = None
        egress_gateways, router_policies = None, None
        if self.gateway is not None and subnet is not None:
            vpc = str((subnet.get("spec") or {}).get("vpc") or "")
            nodes, trunk_recheck = self.gateway.trunk(provider)
            trunk = tuple(nodes)
            siblings = self.gateway.siblings(vpc) if vpc else frozenset()
            binding = self.gateway.binding(vpc, sname) if vpc else None
            if self.l.egress_gateways is not None:
                in_vpc = kubeovn.subnet_vpc(subnet)
                egress_gateways = tuple(self.l.egress_gateways.by_index(BY_VPC, in_vpc))
                router_policies = self.gateway.router_policies(in_vpc)
        own = pool_spans(pool.get("spec")) if pool is not None else ()
        others = tuple(overlap_candidates(self.l.pools, self.l.global_pools, own))
        on_vlan = self.l.subnets.by_index(BY_VLAN, sname) if sname and self.l.subnets is not None else []
        holders = self.vlans.holders_of(vlan, zone)
        machines, claims, addresses = self.on_network(
            ns, pname, str(((zone or {}).get("spec") or {}).get("bridge") or ""),
            allocator.vlan_id(vlan) if vlan is not None else None)
        return attrs.evolve(
            base,
            zone=zone,
            namespace=self.l.namespaces.get(ns),
            vlan=vlan,
            holders=holders,
            holder_subnets=self.subnets_on(holders, sname),
            rivals=tuple(self.l.networks.by_index(BY_SUBNET, sname)) if sname else (),
            subnet=subnet,
            subnet_vpc=(self.l.vpcs.get(str((subnet.get("spec") or {}).get("vpc") or ""))
                        if subnet is not None and self.l.vpcs is not None else None),
            subnet_bound=bool(on_vlan),
            strangers=tuple(sorted(str(o["metadata"]["name"]) for o in on_vlan if o["metadata"]["name"] != sname)),
            pool=pool,
            other_pools=others,
            pool_vpcs=self.pool_vpcs(others),
            kube_ovn_ips=(tuple(self.l.kube_ovn_ips.by_index(BY_SUBNET, sname))
                          if own and sname and self.l.kube_ovn_ips is not None else ()),
            pool_addresses=(tuple(self.l.addresses.by_index(BY_IPPOOL, f"{ns}/{pname}"))
                            if own and self.l.addresses is not None else ()),
            machines=machines,
            machine_claims=claims,
            machine_addresses=addresses,
            annotation=self.namespaces.value(ns),
            trunk=trunk,
            trunk_recheck=trunk_recheck,
            siblings=siblings,
            sb_binding=binding,
            egress_gateways=egress_gateways,
            router_policies=router_policies,
            serving_settle=getattr(self.gateway, "settle", SERVING_SETTLE),
        )
