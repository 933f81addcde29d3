"""The local test bed (product-decisions.md §5 and §7): etcd + kube-apiserver, OVN NB/SB and
ovn-northd, the real peers, optionally a node and a data plane, on loopback. This package's
names are the one place tests, the harnesses and the scripts import the bed from
(``from hack.bed import LocalCluster``); its command line is ``python3 hack/cluster.py``.

One job a file (docs/testing.md, "The hack/ layout"):

* ``cluster.py``: :class:`LocalCluster`, which composes the rooms below (start and stop
  order, state file and ``attach``, checks, the work directory's files and tokens, ``env()``);
* ``control_plane.py``: etcd, kube-apiserver, kubectl, the bootstrap, the API clients;
* ``ovn.py``: the NB and SB ovsdb-servers, ovn-northd, ``ovsdb_rows``;
* ``peers.py``: kube-ovn-controller and the IPAM provider, and their faults;
* ``node.py``: the node (containerd, kubelet, controller manager, scheduler, forwarders);
* ``dataplane.py``: real OVN chassis, the Proxmox trunk and VMs in network namespaces;
* ``node_agent.py``: Kube-OVN's node agent on each trunk node of the data plane;
* ``kube_ovn_cni.py``: Kube-OVN's CNI plugin on a trunk node (its conflist, bin directory, a call);
* ``trunk_kubelet.py``: containerd and a kubelet on a trunk node, with that CNI;
* ``multus.py``: Multus's thin plugin before that CNI, its RBAC, the egress gateway's image;
* ``world.py``: the far side of a transit network (the transit router, a server, the API server);
* ``deploy.py``: the controller as the Deployment of manifests/ on the node;
* ``credentials.py``: the PKI and the users' kubeconfigs;
* ``components.py``: a component as a process (spawn, pid file, stop);
* ``procs.py``: pid helpers, free ports, the parent-death signal;
* ``builds.py``: versions.env and where the builds are (Kube-OVN's OVS/OVN put on PATH);
* ``common.py``: the names every room shares, and :class:`ClusterError`;
* ``cli.py``: ``start`` / ``env`` / ``stop`` (run by hack/cluster.py).

The bed imports nothing from the rest of hack/ (the shared tools of hack/tools/, the chaos
harness, the benchmarks): they import it.
"""

from hack.bed.builds import (
    HACK_DIR, NB_SCHEMA, OVN_PREFIX, REPO_ROOT, SB_SCHEMA, _read_versions, default_bin_dir, default_ovn_prefix,
    default_peers_dir, kube_ovn_legacy,
)
from hack.bed.cluster import LocalCluster
from hack.bed.common import (
    ADMIN_GROUPS, ADMIN_TOKEN, ADMIN_USER, CHASSIS_ANNOTATION, COMPONENTS, CONTROLLER_GROUPS, CONTROLLER_NAMESPACE,
    CONTROLLER_SA, CONTROLLER_USER, DATAPLANE_PROVIDER, FIELD_MANAGER, IPAM_NAMESPACE, IPAM_ROLE, IPAM_SA,
    KUBE_OVN_NAMESPACE, KUBE_OVN_POD, KUBE_OVN_ROLE, KUBE_OVN_SA, PEER_READY_LINES, PEERS, VPC_EGRESS_GATEWAY_CRD,
    VPC_NAT_CONFIG, ClusterError,
)
from hack.bed.control_plane import AUDIT_POLICY
from hack.bed.dataplane import Chassis, DataPlane, DataPlaneError, Prober, Vm, cleanup_leftovers, missing_prerequisites
from hack.bed.kube_ovn_cni import (
    CNI_CONF_NAME, CNI_PLUGIN, daemon_socket, node_conflist, plugin_config, write_cni_config,
)
from hack.bed.multus import MULTUS_CONF_NAME, MULTUS_USER, NAD_CRD, NETWORKS_ANNOTATION, MultusError
from hack.bed.node import CGROUP_FS, FORWARDS, NODE_COMPONENTS, NODE_NAME, Node, NodeError, container_pid
from hack.bed.ovn import ovsdb_atom, ovsdb_rows, ovsdb_set
from hack.bed.procs import die_with_parent, free_ports, pid_alive, pid_state, terminate_pid, wait_dead

__all__ = [
    # builds
    "HACK_DIR", "NB_SCHEMA", "OVN_PREFIX", "REPO_ROOT", "SB_SCHEMA", "_read_versions", "default_bin_dir",
    "default_ovn_prefix", "default_peers_dir", "kube_ovn_legacy",
    # the bed
    "LocalCluster", "ClusterError", "AUDIT_POLICY",
    # names
    "ADMIN_GROUPS", "ADMIN_TOKEN", "ADMIN_USER", "CHASSIS_ANNOTATION", "COMPONENTS", "CONTROLLER_GROUPS",
    "CONTROLLER_NAMESPACE", "CONTROLLER_SA", "CONTROLLER_USER", "DATAPLANE_PROVIDER", "FIELD_MANAGER",
    "IPAM_NAMESPACE", "IPAM_ROLE", "IPAM_SA", "KUBE_OVN_NAMESPACE", "KUBE_OVN_POD", "KUBE_OVN_ROLE", "KUBE_OVN_SA",
    "PEER_READY_LINES", "PEERS", "VPC_EGRESS_GATEWAY_CRD", "VPC_NAT_CONFIG",
    # the data plane
    "Chassis", "DataPlane", "DataPlaneError", "Prober", "Vm", "cleanup_leftovers", "missing_prerequisites",
    # Kube-OVN's CNI on a trunk node
    "CNI_CONF_NAME", "CNI_PLUGIN", "daemon_socket", "node_conflist", "plugin_config", "write_cni_config",
    # Multus on the trunk kubelets
    "MULTUS_CONF_NAME", "MULTUS_USER", "NAD_CRD", "NETWORKS_ANNOTATION", "MultusError",
    # the node
    "CGROUP_FS", "FORWARDS", "NODE_COMPONENTS", "NODE_NAME", "Node", "NodeError", "container_pid",
    # OVN rows
    "ovsdb_atom", "ovsdb_rows", "ovsdb_set",
    # processes
    "die_with_parent", "free_ports", "pid_alive", "pid_state", "terminate_pid", "wait_dead",
]
