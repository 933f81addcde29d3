"""metav1.Condition helpers with the semantics of apimachinery's ``meta.SetStatusCondition``.

Conditions are plain dicts ``{"type", "status", "reason", "message",
"observedGeneration", "lastTransitionTime"}`` in a list. ``lastTransitionTime`` changes
only when ``status`` changes (reference-behaviour.md §5.8); reason, message and
observedGeneration are overwritten.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from controller import names
from controller.rfc3339 import format_utc
from ovn.planner import failover_note
from controller.rfc3339 import Clock, utc_now

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"


def find(conditions: Sequence[dict[str, Any]] | None, ctype: str) -> dict[str, Any] | None:
    for c in conditions or []:
        if c.get("type") == ctype:
            return c
    return None


def set_condition(
    conditions: list[dict[str, Any]],
    ctype: str,
    status: str,
    reason: str,
    message: str,
    generation: int,
    now: Clock = utc_now,
) -> None:
    """Insert or update condition ``ctype`` in place (``meta.SetStatusCondition``)."""
    existing = find(conditions, ctype)
    if existing is None:
        conditions.append(
            {
                "type": ctype,
                "status": status,
                "observedGeneration": generation,
                "lastTransitionTime": format_utc(now()),
                "reason": reason,
                "message": message,
            }
        )
        return
    if existing.get("status") != status:
        existing["status"] = status
        existing["lastTransitionTime"] = format_utc(now())
    existing["reason"] = reason
    existing["message"] = message
    existing["observedGeneration"] = generation


def remove_condition(conditions: list[dict[str, Any]], ctype: str) -> None:
    conditions[:] = [c for c in conditions if c.get("type") != ctype]


# GatewayReady reasons of a peer outage: Unknown with one of these does not decide Ready.
OUTAGE_REASONS = frozenset({"NBUnavailable", "SBUnavailable"})


# True reasons that still carry a warning an operator should read (doctor prints them).
WARNING_TRUE_REASONS = frozenset({"AllocatedOutsideRanges", "PoolExhausted", "PoolOverlapsPool"})
# Notes of a True condition's message that warn: a gateway of fewer than three chassis
# cannot fail over (ovn.planner.failover_note, appended to ChassisAssigned's message).
WARNING_NOTES = (failover_note(1), failover_note(2))


def carries_warning(c: Mapping[str, Any]) -> bool:
    """A condition an operator should read (product-decisions.md §10: doctor prints every
    condition that carries a warning, True or not): not True, a True reason of
    :data:`WARNING_TRUE_REASONS`, or a True message with one of :data:`WARNING_NOTES`."""
    if c.get("status") != TRUE:
        return True
    message = str(c.get("message") or "")
    return c.get("reason") in WARNING_TRUE_REASONS or any(n in message for n in WARNING_NOTES)


def compute_ready(conditions: list[dict[str, Any]], generation: int, now: Clock = utc_now) -> None:
    """Set ``Ready`` from the required conditions (reference-behaviour.md §5.8).

    Required, in order: VLANAllocated, SubnetReady, IPPoolReady, and GatewayReady unless
    its reason is ``Disabled``; a GatewayReady that is Unknown/``NBUnavailable`` (the NB
    grace) or Unknown/``SBUnavailable`` (product-decisions.md §10: an SB outage alone never
    turns a network not Ready) is skipped. The first missing (reason ``Pending``, message ``<type> has not been
    evaluated``) or not-True condition gives Ready False with its reason and message.
    """
    required = [names.VLAN_ALLOCATED, names.SUBNET_READY, names.IPPOOL_READY]
    gw = find(conditions, names.GATEWAY_READY)
    if gw is None or gw.get("reason") != "Disabled":
        required.append(names.GATEWAY_READY)
    for ctype in required:
        c = find(conditions, ctype)
        if c is None:
            set_condition(conditions, names.READY, FALSE, "Pending", f"{ctype} has not been evaluated", generation, now)
            return
        if ctype == names.GATEWAY_READY and c.get("status") == UNKNOWN and c.get("reason") in OUTAGE_REASONS:
            continue
        if c.get("status") != TRUE:
            set_condition(
                conditions, names.READY, FALSE, c.get("reason", ""), c.get("message", ""), generation, now
            )
            return
    set_condition(conditions, names.READY, TRUE, "Ready", "the subnet is usable from Proxmox", generation, now)


def transition(old: Sequence[dict[str, Any]] | None, new: Sequence[dict[str, Any]] | None, ctype: str) -> dict[str, Any] | None:
    """Condition ``ctype`` of ``new`` when its (status, reason) differs from ``old``'s, else
    None: the changes worth an Event (product-decisions.md §4.1)."""
    after = find(new, ctype)
    if after is None:
        return None
    before = find(old, ctype)
    if before is not None and (before.get("status"), before.get("reason")) == (after.get("status"), after.get("reason")):
        return None
    return after
