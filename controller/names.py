"""Interface names of the product, verbatim from the reference (``reference-behaviour.md`` §1-§3).

Charts, alerts and runbooks written for the reference rely on these strings; never
rename them (``product-decisions.md`` §1).
"""

from __future__ import annotations

from informers.resource import Resource

GROUP = "proxmox.cozystack.io"
VERSION = "v1alpha1"

# §2.1: one key serves as finalizer on the ProxmoxNetwork, the Subnet and the Vlan.
FINALIZER = "proxmox.cozystack.io/network"
LABEL_ZONE = "proxmox.cozystack.io/zone"
LABEL_NETWORK_NAMESPACE = "proxmox.cozystack.io/network-namespace"
LABEL_NETWORK_NAME = "proxmox.cozystack.io/network-name"
ANNOTATION_NAMESPACE_NETWORKS = "proxmox.cozystack.io/networks"
ANNOTATION_DELETED_SUBNETS = "proxmox.cozystack.io/deleted-subnets"
# On a ProxmoxNetworkZone: released IDs held back by the VLAN reuse delay (controller.rules.reuse).
ANNOTATION_RELEASED_VLANS = "proxmox.cozystack.io/released-vlans"
# On a Vlan the controller owns: its network's pool addresses as CIDRs, which the admission
# policies proxmox-network-{pod,ip}-addresses read (docs/admission.md).
ANNOTATION_POOL_CIDRS = "proxmox.cozystack.io/pool-cidrs"
# On a ProxmoxNetwork: the operator accepts a Vlan ID changed by hand.
ANNOTATION_ACCEPT_VLAN_ID = "proxmox.cozystack.io/accept-vlan-id"

# Condition types (§1.3).
VLAN_ALLOCATED = "VLANAllocated"
SUBNET_READY = "SubnetReady"
IPPOOL_READY = "IPPoolReady"
GATEWAY_READY = "GatewayReady"
READY = "Ready"
SWITCH_DELETED = "SwitchDeleted"

# Resources read and written (§3).
PROXMOX_NETWORKS = Resource(GROUP, VERSION, "proxmoxnetworks", namespaced=True, kind="ProxmoxNetwork")
PROXMOX_NETWORK_ZONES = Resource(GROUP, VERSION, "proxmoxnetworkzones", namespaced=False, kind="ProxmoxNetworkZone")
VLANS = Resource("kubeovn.io", "v1", "vlans", namespaced=False, kind="Vlan")
SUBNETS = Resource("kubeovn.io", "v1", "subnets", namespaced=False, kind="Subnet")
PROVIDER_NETWORKS = Resource("kubeovn.io", "v1", "provider-networks", namespaced=False, kind="ProviderNetwork")
# Metadata only: their readers read labels and annotations (docs/architecture.md, "What the
# caches keep"); a Node's status is most of its size and changes on every status report.
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False, kind="Namespace", metadata_only=True)
NODES = Resource("", "v1", "nodes", namespaced=False, kind="Node", metadata_only=True)
SECRETS = Resource("", "v1", "secrets", namespaced=True, kind="Secret")


NORMAL, WARNING = "Normal", "Warning"
