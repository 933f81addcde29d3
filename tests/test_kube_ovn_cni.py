"""hack/bed/kube_ovn_cni.py without a bed: a trunk node's Kube-OVN conflist and CNI bin
directory, and what a plugin of the list gets on stdin.

Expected values: Kube-OVN v1.15.24's dist/images/01-kube-ovn.conflist (below, as the image
ships it), its installer (dist/images/install-cni.sh: ``kube-ovn``, ``loopback``,
``portmap`` in the bin directory; the agent's ``--install-cni-config`` writes the file with
mode 0600) and the CNI specification (a list's plugin gets the list's ``name`` and
``cniVersion``).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from hack.bed import CNI_CONF_NAME, node_conflist, plugin_config, write_cni_config

UPSTREAM = {
    "name": "kube-ovn",
    "cniVersion": "0.3.1",
    "plugins": [
        {"type": "kube-ovn", "server_socket": "/run/openvswitch/kube-ovn-daemon.sock"},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def build(tmp_path: Path) -> Path:
    """hack/build-peers.sh's layout: bin/kube-ovn and cni/01-kube-ovn.conflist."""
    binary = executable(tmp_path / "peers" / "bin" / "kube-ovn")
    (tmp_path / "peers" / "cni").mkdir()
    (tmp_path / "peers" / "cni" / CNI_CONF_NAME).write_text(json.dumps(UPSTREAM))
    for name in ("loopback", "portmap"):
        executable(tmp_path / "plugins" / name)
    return binary


def test_the_node_conflist_points_the_kube_ovn_plugin_at_the_node_agents_socket_and_keeps_the_rest():
    conf = node_conflist(UPSTREAM, Path("/bed/dataplane/ch1/kube-ovn-daemon.sock"))
    assert conf == {**UPSTREAM, "plugins": [
        {"type": "kube-ovn", "server_socket": "/bed/dataplane/ch1/kube-ovn-daemon.sock"}, UPSTREAM["plugins"][1]]}
    assert UPSTREAM["plugins"][0]["server_socket"] == "/run/openvswitch/kube-ovn-daemon.sock"  # not changed in place


def test_a_conflist_without_the_kube_ovn_plugin_is_refused():
    with pytest.raises(ValueError, match="kube-ovn"):
        node_conflist({**UPSTREAM, "plugins": UPSTREAM["plugins"][1:]}, Path("/x.sock"))


def test_a_plugin_of_the_list_gets_its_own_keys_with_the_lists_name_and_version():
    assert plugin_config(UPSTREAM) == {"cniVersion": "0.3.1", "name": "kube-ovn", "type": "kube-ovn",
                                       "server_socket": "/run/openvswitch/kube-ovn-daemon.sock"}
    with pytest.raises(ValueError):
        plugin_config(UPSTREAM, "bridge")


def test_write_cni_config_installs_the_conflist_0600_and_the_plugins_a_runtime_calls(tmp_path, build):
    sock = tmp_path / "ch1" / "kube-ovn-daemon.sock"
    path = write_cni_config(tmp_path / "net.d", tmp_path / "bin", sock, build, plugins_dir=tmp_path / "plugins")
    assert path == tmp_path / "net.d" / CNI_CONF_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == node_conflist(UPSTREAM, sock)
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == ["kube-ovn", "loopback", "portmap"]
    assert (tmp_path / "bin" / "portmap").resolve() == (tmp_path / "plugins" / "portmap").resolve()
    # Written again (a bed restarted on the same directories): the same result.
    assert write_cni_config(tmp_path / "net.d", tmp_path / "bin", sock, build, plugins_dir=tmp_path / "plugins") == path


def test_the_kube_ovn_plugin_gets_the_nodes_socket_where_an_attachment_names_a_real_nodes(tmp_path, build):
    """A NetworkAttachmentDefinition's configuration (admission-and-packaging.md (e): the
    transit network's) names ``/run/openvswitch/kube-ovn-daemon.sock``; the plugin on this node
    is handed the node's socket instead, with the CNI environment and its exit status."""
    build.write_text("#!/bin/sh\ncat\necho \"$CNI_COMMAND\" >&2\nexit 3\n")
    sock = tmp_path / "ch2" / "kube-ovn-daemon.sock"
    write_cni_config(tmp_path / "net.d", tmp_path / "bin", sock, build, plugins_dir=tmp_path / "plugins")
    nad = {"cniVersion": "0.3.0", "type": "kube-ovn", "server_socket": "/run/openvswitch/kube-ovn-daemon.sock",
           "provider": "px-transit.cozy-proxmox.ovn"}
    r = subprocess.run([tmp_path / "bin" / "kube-ovn"], input=json.dumps(nad), capture_output=True, text=True,
                       env={**os.environ, "CNI_COMMAND": "ADD"})
    assert r.returncode == 3 and r.stderr.strip() == "ADD"
    assert json.loads(r.stdout) == {**nad, "server_socket": str(sock)}
    # A configuration without a socket (Multus's cluster network on a DEL after a failed ADD).
    bare = {"cniVersion": "0.3.1", "name": "kube-ovn", "type": "kube-ovn"}
    r = subprocess.run([tmp_path / "bin" / "kube-ovn"], input=json.dumps(bare), capture_output=True, text=True,
                       env={**os.environ, "CNI_COMMAND": "DEL"})
    assert json.loads(r.stdout) == {**bare, "server_socket": str(sock)}


def test_a_missing_plugin_is_named_before_anything_is_written(tmp_path, build):
    (tmp_path / "plugins" / "portmap").unlink()
    with pytest.raises(FileNotFoundError, match="portmap"):
        write_cni_config(tmp_path / "net.d", tmp_path / "bin", tmp_path / "s.sock", build,
                         plugins_dir=tmp_path / "plugins")
    assert not (tmp_path / "net.d").exists() and not (tmp_path / "bin").exists()
