"""The planner of a deleting ProxmoxNetwork: the release order of reference-behaviour.md §6
as a state machine whose next step depends only on fresh reads. It asks for each read it
needs (``Get``, ``ListConsumers``, ``SplitListed``) and never lets the VLAN go while a
consumer, the Subnet, the NB or a Kube-OVN reference may still use it. Pure.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import attrs

from controller import names, reasons, schema
from controller.rules import allocator, kubeovn, release
from controller.plan.actions import (
    Event,
    ForgetNetwork,
    ForgetOverlay,
    Get,
    Into,
    Level,
    ListConsumers,
    Log,
    Plan,
    ReleaseGateway,
    ReleaseVlan,
    RemoveFinalizer,
    SetDeleting,
    SetPruneTimers,
    SetStuckHolders,
    SplitListed,
    WriteStatus,
    unread,
)
from controller.rules.conditions import FALSE, find, remove_condition, set_condition
from controller.names import NORMAL, WARNING
from controller.rules.prune import go_list
from controller.rfc3339 import format_utc, parse
from controller.rules.vlan_claims import taken_over, vlan_owner
from controller.plan.network_status import (
    GATEWAY_RELEASE_RETRY,
    IN_USE_RETRY,
    NetworkSnapshot,
    SUBNET_DELETING_RETRY,
    SUBNET_EXISTS_RETRY,
    SWITCH_DELETING_RETRY,
    VLAN_REFERENCED_RETRY,
    ready_event,
)


def plan_deletion(s: NetworkSnapshot) -> Plan:
    """The next step of a deleting network (§6), from fresh reads only.

    1. no consumer (the caches, then fresh LISTs: field-reports.md B15); 2. the Subnet gone (fresh GET; our
    Subnet finalizer goes once Kube-OVN deletes it); 3. the network's groups gone from the
    NB; 4. the Vlan released once Kube-OVN lists no subnet on it, or the newest prune timer
    ran out (:func:`controller.rules.release.release_step`); 5. our finalizer removed.
    """
    net: Mapping[str, Any] = s.network  # type: ignore[assignment]
    meta, spec = net["metadata"], net.get("spec") or {}
    if names.FINALIZER not in (meta.get("finalizers") or []):
        return Plan()
    ns, name = meta["namespace"], meta["name"]
    gen = int(meta.get("generation") or 0)
    old = net.get("status") or {}
    status = copy.deepcopy(dict(old))
    conds: list[dict[str, Any]] = status.setdefault("conditions", [])
    prev_switch = find(old.get("conditions"), names.SWITCH_DELETED)
    # (It comes back only while deleted subnets are listed, at its old place: an unchanged
    # wait must compare equal to the stored status and write nothing.)
    switch_at = next((i for i, c in enumerate(conds) if c.get("type") == names.SWITCH_DELETED), None)
    remove_condition(conds, names.SWITCH_DELETED)
    vid = int(status.get("vlan") or 0)
    pname = str(spec.get("ipPool") or "")
    sname = str(spec.get("subnet") or "")
    clock = lambda: s.now  # noqa: E731
    actions: list[Any] = []

    def need(*more: Any) -> Plan:
        return Plan(tuple(actions) + more, replan=True)

    def wait(reason: str, message: str, after: float, stuck: int = 0) -> Plan:
        set_condition(conds, names.READY, FALSE, reason, message, gen, clock)
        if schema.differs(status, old, s.pruned):
            actions.append(WriteStatus(names.PROXMOX_NETWORKS, net, status, Into("network"), ready_event(old, status)))
        actions.append(SetDeleting(ns, name, True))
        actions.append(SetStuckHolders(ns, name, stuck))
        return Plan(tuple(actions), requeue_after=after)

    # 1. Consumers.
    consumers = s.consumers
    if not consumers.busy:
        # The cache says free: confirm with a fresh read before anything is released (field-reports.md B15).
        if unread(s.fresh_consumers):
            return need(ListConsumers(ns, pname, Into("fresh_consumers")))
        consumers = s.fresh_consumers
    if consumers.busy:
        return wait(reasons.IN_USE, consumers.message(pname, vid, sname), IN_USE_RETRY, consumers.stuck)

    # 2. The Subnet (read from the API: a release is never decided on a lagging cache).
    if unread(s.fresh_subnet):
        return need(Get(names.SUBNETS, sname, None, Into("fresh_subnet")))
    sub = s.fresh_subnet
    if sub is not None:
        # The Subnet is back (or still here): a timer an earlier deletion of the same name
        # started must not shorten the wait of its next deletion (§7.1: a name no longer
        # gone is dropped).
        pending = _drop_live_timers(s, ns, name, sname, actions)
        if pending is not None:
            return pending
        if not (sub.get("metadata") or {}).get("deletionTimestamp"):
            return wait(reasons.SUBNET_STILL_EXISTS,
                        f'Subnet "{sname}" still exists; VLAN {vid} is released after it is deleted', SUBNET_EXISTS_RETRY)
        message = f'waiting for Kube-OVN to delete Subnet "{sname}" before VLAN {vid} is released'
        held = kubeovn.held_only_by_us(sub)
        if held:
            # Kube-OVN put no finalizer of its own on it (ours came first): ours keeps the
            # Subnet while Kube-OVN still counts IPs in it (docs/testing.md, "What the real
            # peers taught us").
            message += (f"; Kube-OVN counts {held} IP(s) in use in it and has no finalizer of its own on it, "
                        f"so the controller keeps its finalizer until they are released")
        elif names.FINALIZER in ((sub.get("metadata") or {}).get("finalizers") or []):
            actions.append(RemoveFinalizer(names.SUBNETS, sub))
        return wait(reasons.SUBNET_DELETING, message, SUBNET_DELETING_RETRY)

    # 3. Gateway release (holds the VLAN while the NB still points at it). Also when the
    # stored status never showed the VLAN but the NB has the network's group: the pass that
    # wrote the group can lose its status write (a 409, the leader killed in between).
    if s.manage_gateway and (vid or s.owns_group):
        if unread(s.gateway_release):
            return need(ReleaseGateway(s.key))
        if s.gateway_release:
            return wait(reasons.GATEWAY_RELEASE_PENDING,
                        f"could not delete the network's HA chassis group from OVN NB: {s.gateway_release}",
                        GATEWAY_RELEASE_RETRY)

    # 4. The Vlan.
    if unread(s.fresh_vlan):
        return need(Get(names.VLANS, sname, None, Into("fresh_vlan")))
    vlan = s.fresh_vlan
    if vlan is not None and vlan_owner(vlan) == (ns, name) and taken_over(vlan) and not s.released:
        # The release cannot be undone: act only for the very object the API server still
        # has, deleting and holding our finalizer (not a stale cache entry).
        if unread(s.fresh_network):
            return need(Get(names.PROXMOX_NETWORKS, name, ns, Into("fresh_network")))
        if not still_ours(net, s.fresh_network):
            return Plan(tuple(actions) + (ForgetOverlay(s.key),))
        if unread(s.listed):
            return need(SplitListed(vlan, Into("listed")))
        live, gone = s.listed
        step = release.release_step(vlan, live, gone, s.now, parse(meta.get("deletionTimestamp")), s.prune_timeout)
        if step.stores_timers:
            return need(SetPruneTimers(vlan, step.timers, Into("fresh_vlan")))
        if gone:
            ltt = (prev_switch.get("lastTransitionTime") if prev_switch and prev_switch.get("status") == FALSE
                   else format_utc(s.now))
            conds.insert(len(conds) if switch_at is None else switch_at, {
                "type": names.SWITCH_DELETED, "status": FALSE, "reason": reasons.LISTED_ON_VLAN,
                "message": f"Kube-OVN still lists deleted subnets {go_list(gone)} on the Vlan",
                "observedGeneration": gen, "lastTransitionTime": ltt,
            })
        vname = vlan["metadata"]["name"]
        released_id = allocator.vlan_id(vlan)
        # field-reports.md S5: Vlan.status.subnets is Kube-OVN's list, and a status
        # field: an older Vlan CRD prunes it, Kube-OVN down never writes it. A Subnet naming
        # the Vlan (spec.vlan, the cache) holds it too, listed or not (the zone's orphan
        # collection holds on the same two).
        naming = [n for n in s.strangers if n not in live]
        if naming and step.kind != release.WAIT_LIVE:
            step = attrs.evolve(step, kind=release.WAIT_LIVE)
        if step.kind == release.WAIT_LIVE:
            message = f'Kube-OVN still lists subnets {go_list(live)} on Vlan "{vname}"' if live else ""
            if naming:
                message += ("; " if message else "") + f'subnets {go_list(naming)} name Vlan "{vname}" in spec.vlan'
            others = sorted({n for n in live if n != sname} | set(naming))
            if others:
                # field-reports.md R1: another's Subnet on our Vlan is theirs to delete.
                message += (f"; {go_list(others)} are not this network's: the controller never deletes them, and "
                            f"VLAN {released_id} is released once they are gone")
            return wait(reasons.VLAN_STILL_REFERENCED, message, VLAN_REFERENCED_RETRY)
        if step.kind == release.WAIT_PRUNE:
            assert step.deadline is not None
            return wait(
                reasons.SWITCH_DELETING,
                f'Kube-OVN still lists deleted subnets {go_list(gone)} on Vlan "{vname}" until it has deleted '
                f"their logical switches; VLAN {released_id} is released then, or at "
                f"{format_utc(step.deadline)} at the latest",
                min((step.deadline - s.now).total_seconds(), SWITCH_DELETING_RETRY),
            )
        zone = (vlan["metadata"].get("labels") or {}).get(names.LABEL_ZONE, "")
        if step.timed_out:
            actions.append(Log(Level.INFO, "Kube-OVN did not prune deleted subnets from the Vlan in time; releasing the VLAN anyway",
                               {"vlan": released_id, "subnets": list(gone), "timeout": s.prune_timeout}))
            done = Event(net, WARNING, reasons.VLAN_RELEASED_AFTER_PRUNE_TIMEOUT,
                         f"released VLAN {released_id}: Kube-OVN still listed deleted subnets "
                         f"{go_list(gone)} after the prune timeout of {int(s.prune_timeout)}s")
        else:
            done = Event(net, NORMAL, reasons.VLAN_RELEASED, f'released VLAN {released_id} (Vlan "{vname}")')
        return need(ReleaseVlan(vlan, "released VLAN",
                                {"zone": zone, "vlan": released_id, "subnet": sname, "network": s.key}), done)

    # 5. Our finalizer.
    if unread(s.finalized):
        return Plan(tuple(actions) + (RemoveFinalizer(names.PROXMOX_NETWORKS, net, Into("finalized")),
                                      ForgetNetwork(ns, name)))
    return Plan(tuple(actions))


def _drop_live_timers(s: NetworkSnapshot, ns: str, name: str, sname: str, actions: list[Any]) -> Plan | None:
    """While the Subnet exists, drop the prune timers our Vlan keeps for it (§7.1)."""
    if unread(s.fresh_vlan):
        return Plan(tuple(actions) + (Get(names.VLANS, sname, None, Into("fresh_vlan")),), replan=True)
    vlan = s.fresh_vlan
    if vlan is None or vlan_owner(vlan) != (ns, name):
        return None
    if names.ANNOTATION_DELETED_SUBNETS not in ((vlan.get("metadata") or {}).get("annotations") or {}):
        return None
    if unread(s.listed):
        return Plan(tuple(actions) + (SplitListed(vlan, Into("listed")),), replan=True)
    _, gone = s.listed
    step = release.release_step(vlan, (), gone, s.now, None, s.prune_timeout)
    if step.stores_timers:
        return Plan(tuple(actions) + (SetPruneTimers(vlan, step.timers, Into("fresh_vlan")),), replan=True)
    return None


def still_ours(net: Mapping[str, Any], cur: Mapping[str, Any] | None) -> bool:
    """The API server's copy of ``net`` has the same UID, is deleting and carries our finalizer."""
    if cur is None:
        return False
    meta, cm = net["metadata"], cur.get("metadata") or {}
    return (
        cm.get("uid") == meta.get("uid")
        and bool(cm.get("deletionTimestamp"))
        and names.FINALIZER in (cm.get("finalizers") or [])
    )
