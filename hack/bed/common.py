"""The names every room of the bed shares: its users and their groups, its components in start
order, the peers' identities and what each logs once at work, the data plane's names, and the
bed's one error, :class:`ClusterError`."""

from __future__ import annotations

from hack.bed.node import NODE_COMPONENTS

CONTROLLER_NAMESPACE = "proxmox-network-system"
CONTROLLER_SA = "proxmox-network-controller"
CONTROLLER_USER = f"system:serviceaccount:{CONTROLLER_NAMESPACE}:{CONTROLLER_SA}"
CONTROLLER_GROUPS = (
    "system:serviceaccounts",
    f"system:serviceaccounts:{CONTROLLER_NAMESPACE}",
    "system:authenticated",
)
ADMIN_USER = "admin"
ADMIN_GROUPS = ("system:masters",)
ADMIN_TOKEN = "admin-token"
FIELD_MANAGER = "pnc-testbed"

# The real peers (with_peers): kube-ovn-controller and the in-cluster IPAM provider.
PEERS = ("kube-ovn-controller", "ipam-provider")
# Components in start order; stop goes in reverse (so the peers stop first, then the node's
# parts, the kubelet first and containerd last, and the SB and ovn-northd before the NB).
COMPONENTS = ("etcd", "ovsdb-nb", "ovsdb-sb", "ovn-northd", "kube-apiserver", *NODE_COMPONENTS, *PEERS)

# The peers' identities: the service-account users their own manifests bind their
# ClusterRoles to (Kube-OVN's chart: ServiceAccount kube-system/ovn -> system:ovn; the
# provider's kustomization: capi-ipam-in-cluster-system/…-controller-manager -> …-manager-role).
KUBE_OVN_NAMESPACE = "kube-system"
KUBE_OVN_SA = "ovn"
KUBE_OVN_ROLE = "system:ovn"
KUBE_OVN_POD = "kube-ovn-controller-0"
IPAM_NAMESPACE = "capi-ipam-in-cluster-system"
IPAM_SA = "capi-ipam-in-cluster-controller-manager"
IPAM_ROLE = "capi-ipam-in-cluster-manager-role"
# kube-ovn-controller logs an error every second without this ConfigMap (an image is all it reads).
VPC_NAT_CONFIG = "ovn-vpc-nat-config"
# The data plane's trunk (hack/bed/dataplane.py, issue 25): its ProviderNetwork (a name of at most
# 12 bytes, as the real CRD wants) and what Kube-OVN's node agent writes on a trunk Node.
DATAPLANE_PROVIDER = "pnc-trunk"
CHASSIS_ANNOTATION = "ovn.kubernetes.io/chassis"
# Kube-OVN v1.15's VpcEgressGateway, served from its real CRD in every bed (the controller's
# egress step reads it).
VPC_EGRESS_GATEWAY_CRD = "vpc-egress-gateways.kubeovn.io"
# What each peer logs once it is at work (searched in the part of its log written since its
# start): client-go's leader election for Kube-OVN and the last step of its start-up garbage
# collection (gcVPCDNS, after gcIP: a test's object made before it could be collected as
# leaked), which then also needs its default VPC and subnet Ready, see _kube_ovn_pending;
# controller-runtime's workers of each of the provider's three controllers (caches synced).
PEER_READY_LINES = {
    "kube-ovn-controller": ("successfully acquired lease", "start to gc vpc dns"),
    "ipam-provider": tuple(
        f'"Starting workers" controller="{c}"' for c in ("ipaddressclaim", "inclusterippool", "globalinclusterippool")
    ),
}


class ClusterError(RuntimeError):
    """A component failed to start or to answer."""
