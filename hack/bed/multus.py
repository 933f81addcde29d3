"""Multus's thin plugin on a trunk kubelet's node, and the gateway image of a Kube-OVN
VpcEgressGateway (``LocalCluster(..., trunk_kubelets=N, multus=True)``).

Both come from hack/build-egress.sh (:func:`egress_dir`): ``bin/multus`` (Multus v4's
``cmd/multus``, MULTUS_VERSION of hack/versions.env) and ``egress.tar`` (the image
``localhost/pnc-testbed/kube-ovn-egress:<Kube-OVN version>``, named in ``refs.env``).

On the node, :func:`write_multus_config` adds to the CNI directories Kube-OVN's own
configuration is in (hack/bed/kube_ovn_cni.py):

* ``<bin>/multus``, a link to the build;
* ``<conf>/00-multus.conf`` (mode 0600), which sorts before ``01-kube-ovn.conflist``, so
  the runtime (containerd reads one file, the first) calls Multus. Its ``clusterNetwork``
  is the path of Kube-OVN's conflist: Multus delegates every pod's ``eth0`` to it, then
  adds one interface (``net1``, ...) per NetworkAttachmentDefinition the pod's
  ``k8s.v1.cni.cncf.io/networks`` annotation names, calling the plugin the attachment's
  configuration names (``kube-ovn``) from the same bin directory. Its state (``cniDir``)
  and log are in the node's own directory;
* its kubeconfig is that of the user :data:`MULTUS_USER` (a static token of the bed), who
  reaches the API server as the node's kubelet does (the node agent's forwarder on
  127.0.0.1). :func:`rbac_objects` binds it to what the thin plugin calls: get the pod,
  get the attachments, update the pod's status (the ``k8s.v1.cni.cncf.io/network-status``
  annotation) and write Events; Multus's own ClusterRole (deployments/multus-daemonset.yml
  of the module) grants these and more (every verb on ``k8s.cni.cncf.io``).

A NetworkAttachmentDefinition of type ``kube-ovn`` names the node agent's socket in its
configuration (``server_socket``) at a real node's path; each trunk node's ``kube-ovn``
plugin is a shim that hands the plugin that node's own socket instead
(:func:`~hack.bed.kube_ovn_cni.plugin_shim`), so the package's attachment serves every node.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hack.bed.builds import read_env, run_build

MULTUS_CONF_NAME = "00-multus.conf"
MULTUS_PLUGIN = "multus"
MULTUS_NAMESPACE = "kube-system"
MULTUS_SA = "multus"
MULTUS_USER = f"system:serviceaccount:{MULTUS_NAMESPACE}:{MULTUS_SA}"
MULTUS_GROUPS = ("system:serviceaccounts", f"system:serviceaccounts:{MULTUS_NAMESPACE}", "system:authenticated")
MULTUS_ROLE = "pnc-testbed:multus"
NAD_GROUP = "k8s.cni.cncf.io"
NAD_CRD = f"network-attachment-definitions.{NAD_GROUP}"
# The pod annotation Multus reads (nadv1.NetworkAttachmentAnnot).
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"


class MultusError(RuntimeError):
    """hack/build-egress.sh failed, or its output is incomplete."""


def egress_dir() -> Path:
    """Run hack/build-egress.sh (cached) and return its output directory (``bin/multus``,
    ``egress.tar``, ``refs.env``).

    :raises MultusError: the build failed (its last stderr lines in the message).
    """
    try:
        return run_build("build-egress.sh")
    except RuntimeError as e:
        raise MultusError(str(e)) from e


def egress_refs(directory: Path) -> dict[str, str]:
    """``refs.env`` of hack/build-egress.sh as {"MULTUS_BIN": path, "EGRESS_IMAGE": ref}.

    :raises MultusError: a key is missing.
    """
    refs = read_env(directory / "refs.env")
    missing = {"MULTUS_BIN", "EGRESS_IMAGE"} - set(refs)
    if missing:
        raise MultusError(f"{directory / 'refs.env'} lacks {sorted(missing)}")
    return refs


def multus_conf(cluster_network: Path, kubeconfig: Path, bin_dir: Path, state_dir: Path) -> dict[str, Any]:
    """Multus's thin-plugin configuration: ``cluster_network`` (a CNI configuration file) as
    every pod's default network, ``kubeconfig`` for the API server, plugins from ``bin_dir``,
    its delegate cache (``cniDir``), attachment files (``confDir``) and log under ``state_dir``."""
    return {
        "cniVersion": "0.3.1",
        "name": "multus-cni-network",
        "type": MULTUS_PLUGIN,
        "kubeconfig": str(kubeconfig),
        "clusterNetwork": str(cluster_network),
        "binDir": str(bin_dir),
        "cniDir": str(state_dir / "cache"),
        "confDir": str(state_dir / "net.d"),
        "logFile": str(state_dir / "multus.log"),
        "logLevel": "verbose",
    }


def write_multus_config(conf_dir: Path, bin_dir: Path, multus_binary: Path, kubeconfig: Path,
                        cluster_network: Path, state_dir: Path) -> Path:
    """Multus in a node's CNI directories (see the module docstring); returns the path of
    ``conf_dir/00-multus.conf`` (mode 0600).

    :raises FileNotFoundError: ``multus_binary`` or ``cluster_network`` is missing.
    """
    if not os.access(multus_binary, os.X_OK):
        raise FileNotFoundError(f"CNI plugin {MULTUS_PLUGIN}: {multus_binary} is missing or not executable")
    if not cluster_network.is_file():
        raise FileNotFoundError(f"Multus's cluster network {cluster_network} is missing")
    for d in (state_dir / "cache", state_dir / "net.d", bin_dir, conf_dir):
        d.mkdir(parents=True, exist_ok=True)
    link = bin_dir / MULTUS_PLUGIN
    link.unlink(missing_ok=True)
    link.symlink_to(multus_binary.resolve())
    path = conf_dir / MULTUS_CONF_NAME
    tmp = path.with_name(f".{MULTUS_CONF_NAME}.tmp")
    tmp.write_text(json.dumps(multus_conf(cluster_network, kubeconfig, bin_dir, state_dir), indent=2) + "\n")
    tmp.chmod(0o600)
    tmp.replace(path)
    return path


def rbac_objects() -> list[dict]:
    """The ServiceAccount :data:`MULTUS_USER` stands for, a ClusterRole with what the thin
    plugin calls, and its binding."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": MULTUS_SA, "namespace": MULTUS_NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": MULTUS_ROLE},
         "rules": [
             {"apiGroups": [NAD_GROUP], "resources": ["network-attachment-definitions"],
              "verbs": ["get", "list", "watch"]},
             {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
             {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["get", "update"]},
             {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": MULTUS_ROLE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": MULTUS_ROLE},
         "subjects": [{"kind": "ServiceAccount", "name": MULTUS_SA, "namespace": MULTUS_NAMESPACE}]},
    ]
