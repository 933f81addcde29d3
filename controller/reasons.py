"""Every condition and Event reason the controller writes, by name (reference-behaviour.md
§5, §6, §8, §9; product-decisions.md §7). Operators' runbook (docs/runbook.md) is
keyed by these strings; they are API: never rename one.

The NB planner's reasons (``ChassisAssigned``, ``RouterPortMissing``, ``NoTrunkNodes``,
``ForeignGroup``) are defined with it in ``ovn.planner`` and re-exported here.
"""

from __future__ import annotations

from ovn.nb_plan import CHASSIS_ASSIGNED, FOREIGN_GROUP, NO_TRUNK_NODES, ROUTER_PORT_MISSING

# -- shared -------------------------------------------------------------------------------------
READY = "Ready"
PENDING = "Pending"  # a required condition has not been evaluated (§5.8)

# -- VLANAllocated (§5.3, §5.4) -----------------------------------------------------------------
ALLOCATED = "Allocated"
# True: the VLAN is kept, but the zone's ranges (or reserved IDs) changed and no longer hold
# it.
ALLOCATED_OUTSIDE_RANGES = "AllocatedOutsideRanges"
ZONE_NOT_FOUND = "ZoneNotFound"
NAMESPACE_NOT_ALLOWED = "NamespaceNotAllowed"
ZONE_INVALID = "ZoneInvalid"
ZONE_EXHAUSTED = "ZoneExhausted"
STATIC_VLAN_RESERVED = "StaticVLANReserved"
STATIC_VLAN_IN_USE = "StaticVLANInUse"
VLAN_NAME_TAKEN = "VLANNameTaken"
VLAN_PROVIDER_MISMATCH = "VLANProviderMismatch"
VLAN_CONFLICT = "VLANConflict"
VLAN_CHANGED_EXTERNALLY = "VLANChangedExternally"  # a Vlan's spec.id edited by hand
SUBNET_NAME_INVALID = "SubnetNameInvalid"  # spec.subnet cannot name a Vlan
WAITING_FOR_VLAN = "WaitingForVLAN"  # the dependents of a VLANAllocated that is not True

# -- SubnetReady (§5.5) ----------------------------------------------------------------------------
SUBNET_NOT_FOUND = "SubnetNotFound"
SUBNET_NOT_BOUND = "SubnetNotBound"
SUBNET_NOT_READY = "SubnetNotReady"
SUBNET_INVALID = "SubnetInvalid"

# -- IPPoolReady (§5.6) ----------------------------------------------------------------------------
POOL_NOT_FOUND = "PoolNotFound"
POOL_EXHAUSTED = "PoolExhausted"
SUBNET_UNAVAILABLE = "SubnetUnavailable"  # IPPoolReady and GatewayReady before the subnet is bound
SUBNET_CIDR_INVALID = "SubnetCIDRInvalid"
POOL_PREFIX_MISMATCH = "PoolPrefixMismatch"
POOL_GATEWAY_MISMATCH = "PoolGatewayMismatch"
SUBNET_EXCLUDE_IPS_INVALID = "SubnetExcludeIPsInvalid"
POOL_ADDRESS_INVALID = "PoolAddressInvalid"
POOL_OUTSIDE_SUBNET = "PoolOutsideSubnet"
POOL_OVERLAPS_SUBNET = "PoolOverlapsSubnet"
POOL_OVERLAPS_POOL = "PoolOverlapsPool"  # another pool holds addresses of this one
ADDRESS_CONFLICT = "AddressConflict"  # a Kube-OVN IP holds an address of the pool

# -- GatewayReady (§9) -----------------------------------------------------------------------------
DISABLED = "Disabled"
NB_UNAVAILABLE = "NBUnavailable"
# product-decisions.md §10: the group exists but no chassis of it holds the router port's
# cr- binding in the OVN SB (False, and Ready with it); the SB is unreachable (Unknown).
NO_SERVING_CHASSIS = "NoServingChassis"
SB_UNAVAILABLE = "SBUnavailable"

# -- Ready of a deleting network (§6) --------------------------------------------------------------
IN_USE = "InUse"
SUBNET_STILL_EXISTS = "SubnetStillExists"
SUBNET_DELETING = "SubnetDeleting"
GATEWAY_RELEASE_PENDING = "GatewayReleasePending"
VLAN_STILL_REFERENCED = "VLANStillReferenced"
SWITCH_DELETING = "SwitchDeleting"
LISTED_ON_VLAN = "ListedOnVlan"  # SwitchDeleted=False

# -- zone Ready (§8) -------------------------------------------------------------------------------
PROVIDER_NETWORK_NOT_FOUND = "ProviderNetworkNotFound"
PROVIDER_NETWORK_NOT_READY = "ProviderNetworkNotReady"

# -- Events only -----------------------------------------------------------------------------------
EVENT_VLAN_ALLOCATED = "VLANAllocated"
VLAN_RELEASED = "VLANReleased"
VLAN_RELEASED_AFTER_PRUNE_TIMEOUT = "VLANReleasedAfterPruneTimeout"
VLAN_DUPLICATE_REPAIRED = "VLANDuplicateRepaired"
LEADER_LOCK_HELD_ELSEWHERE = "LeaderLockHeldElsewhere"  # on the Lease: another release's replica leads
KUBE_OVN_STALE = "KubeOVNStale"  # field-reports.md S1, Event only: Kube-OVN kept a Vlan validation failure after the Vlan came
SUBNET_IN_FOREIGN_VPC = "SubnetInForeignVPC"  # field-reports.md R2, report only: the Subnet's VPC lists other namespaces
ORPHANED_VLAN_COLLECTED = "OrphanedVLANCollected"
NB_RECOVERED = "NBRecovered"
GATEWAY_GROUP_CREATED = "GatewayGroupCreated"
GATEWAY_GROUP_ADOPTED = "GatewayGroupAdopted"
GATEWAY_GROUP_UPDATED = "GatewayGroupUpdated"
# Warning on a group write of fewer than three chassis (ovn.planner.failover_note).
GATEWAY_WITHOUT_FAILOVER = "GatewayWithoutFailover"
# Normal, when the chassis that serves a network's router port changes (an OVN failover).
GATEWAY_MOVED = "GatewayMoved"
# Warning, once per machine, NIC and address: a NIC on the network holds an address of another
# pool outside the network's subnet (field-reports.md S4, capmox#868; controller.rules.foreign).
FOREIGN_ADDRESS_ON_NETWORK = "ForeignAddressOnNetwork"
# Warning, once per gateway while it holds: a Ready VpcEgressGateway the network's Subnet is a
# source of has lost its reroute policy from the VPC's router in the OVN NB
# (controller.rules.egress_reroute); Normal when it is back.
EGRESS_REROUTE_MISSING = "EgressRerouteMissing"
EGRESS_REROUTE_RESTORED = "EgressRerouteRestored"
# Warning, once per CRD and set of fields: the API server prunes status fields this controller
# writes (a CRD older than the controller; field-reports.md S5; controller.schema).
SCHEMA_OUTDATED = "SchemaOutdated"

__all__ = [n for n in dir() if n.isupper()] + [
    "CHASSIS_ASSIGNED", "FOREIGN_GROUP", "NO_TRUNK_NODES", "ROUTER_PORT_MISSING",
]
