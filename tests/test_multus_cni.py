"""hack/bed/multus.py without a bed: Multus on a trunk node's CNI directories, its RBAC, a
Kube-OVN NetworkAttachmentDefinition's configuration, and the bed's flag.

Expected values: the CNI runtime reads the configuration file that sorts first (containerd's
``max_conf_num = 1``), so Multus's must sort before Kube-OVN's ``01-kube-ovn.conflist``;
Multus's configuration reference (docs/configuration.md of the module: ``clusterNetwork`` as
an absolute file path, ``kubeconfig``, ``binDir``, ``cniDir``); what Multus thin calls
(pods get, pods/status update, network-attachment-definitions get); Kube-OVN v1.15.24's
attachment (type ``kube-ovn``, provider ``<nad>.<namespace>.ovn``, ``server_socket``).
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from hack.bed import CNI_CONF_NAME, MULTUS_CONF_NAME, MULTUS_USER, ClusterError, LocalCluster
from hack.bed.multus import rbac_objects, write_multus_config


def test_multus_conf_sorts_first_and_delegates_to_kube_ovns_conflist(tmp_path: Path):
    conf_dir, bin_dir, state = tmp_path / "net.d", tmp_path / "bin", tmp_path / "multus"
    conf_dir.mkdir()
    conflist = conf_dir / CNI_CONF_NAME
    conflist.write_text("{}")
    binary = tmp_path / "build" / "multus"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    kubeconfig = tmp_path / "multus.kubeconfig"

    path = write_multus_config(conf_dir, bin_dir, binary, kubeconfig, conflist, state)

    assert sorted(p.name for p in conf_dir.iterdir())[0] == MULTUS_CONF_NAME == path.name
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    conf = json.loads(path.read_text())
    assert conf["type"] == "multus"
    assert conf["clusterNetwork"] == str(conflist)
    assert conf["kubeconfig"] == str(kubeconfig)
    assert conf["binDir"] == str(bin_dir)
    assert Path(conf["cniDir"]).is_relative_to(state)
    assert (bin_dir / "multus").resolve() == binary.resolve()


def test_multus_conf_needs_the_plugin_and_the_cluster_network(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        write_multus_config(tmp_path / "net.d", tmp_path / "bin", tmp_path / "none", tmp_path / "k",
                            tmp_path / CNI_CONF_NAME, tmp_path / "multus")


def test_multus_user_may_do_what_the_thin_plugin_calls():
    docs = {d["kind"]: d for d in rbac_objects()}
    allowed = {(g, r, v) for rule in docs["ClusterRole"]["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    for need in (("", "pods", "get"), ("", "pods/status", "update"),
                 ("k8s.cni.cncf.io", "network-attachment-definitions", "get")):
        assert need in allowed
    sa = docs["ServiceAccount"]["metadata"]
    assert MULTUS_USER == f"system:serviceaccount:{sa['namespace']}:{sa['name']}"
    assert docs["ClusterRoleBinding"]["roleRef"]["name"] == docs["ClusterRole"]["metadata"]["name"]


def test_multus_needs_trunk_kubelets(tmp_path: Path):
    with pytest.raises(ClusterError, match="trunk_kubelets"):
        LocalCluster(tmp_path, multus=True)
