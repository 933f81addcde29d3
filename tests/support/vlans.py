"""Drive ``VlanManager`` the way a network pass does: look up, claim or adopt, else
allocate (the composition ``controller.plan.network`` plans as ``AllocateVlan`` and
``AdoptVlan``), for tests of the allocator's concurrency without a whole reconciler."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.apply.vlans import VlanManager
from controller.rules.vlan_claims import VlanOutcome, claim_refusal, needs_adoption


def ensure(mgr: VlanManager, network: Mapping[str, Any], zone: Mapping[str, Any]) -> VlanOutcome:
    """The network's Vlan: found (and adopted), refused, or allocated."""
    meta = network["metadata"]
    name = str((network.get("spec") or {}).get("subnet") or "")
    provider = str((zone.get("spec") or {}).get("providerNetwork") or "")
    found = mgr.lookup(name)
    allocated = None
    if found is None:
        allocated = mgr.allocate(network, zone)
        if allocated.vlan is None or allocated.allocated:
            return allocated
        found = allocated.vlan
    refusal = claim_refusal(found, meta["namespace"], meta["name"], zone["metadata"]["name"], provider)
    if refusal is not None:
        return VlanOutcome(reason=refusal[0], message=refusal[1])
    return VlanOutcome(vlan=mgr.adopt(dict(found)) if needs_adoption(found) else found)
