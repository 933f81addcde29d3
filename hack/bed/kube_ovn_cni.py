"""Kube-OVN's CNI plugin on a trunk node of the bed's data plane: the configuration and bin
directory a container runtime on that node reads, and a CNI call made as the runtime makes it.

The plugin (``kube-ovn``, Kube-OVN's ``cmd/cni``, built by hack/build-peers.sh) does no
networking itself: it forwards each ADD/DEL to the node agent's CNI server socket
(hack/bed/node_agent.py), which makes the pod's veth, adds its host end to the node's
``br-int`` and configures the pod's side. What Kube-OVN's image installs on a node
(dist/images/install-cni.sh, the chart's ``install-cni`` container), and what
:func:`write_cni_config` writes instead:

* ``/etc/cni/net.d/01-kube-ovn.conflist``, mode 0600 (the agent's ``--install-cni-config``):
  the image's ``01-kube-ovn.conflist`` with the kube-ovn plugin's ``server_socket`` set to
  the node's agent socket as the runtime sees it. The agent binds
  ``/run/openvswitch/kube-ovn-daemon.sock`` in its own mount namespace, which is the
  chassis' run directory on the host (:func:`daemon_socket`): a runtime on the host's
  mounts (the bed's containerd) reaches it there, not at the image's path;
* ``/opt/cni/bin/{kube-ovn,loopback,portmap}``: the plugin, and of the reference plugins
  the ones the configuration chains (``portmap``) plus ``loopback``, which the runtime
  calls itself for the pod's ``lo`` (containerd's CRI). The reference plugins are links to
  Debian's containernetworking-plugins (:data:`CNI_PLUGINS`); ``kube-ovn`` is a shell shim
  in front of the build (:func:`plugin_shim`): configurations written for a real node (a
  NetworkAttachmentDefinition's ``server_socket``, as the package's transit network renders
  it) name :data:`NODE_SOCKET`, which is each node's own path on a real node but one path
  of the host for all the bed's nodes, so the shim rewrites that path in the configuration
  it passes on to this node's socket.

The runtime runs the plugins in the node's network namespace (the bed's kubelet node is
the trunk node's namespace: hack/bed/trunk_kubelet.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hack.bed.dataplane import Chassis

# The chart's name for the file (cni_conf.CNI_CONFIG_PRIORITY "01").
CNI_CONF_NAME = "01-kube-ovn.conflist"
# The plugin's name as the image installs it, and its ``type`` in the configuration.
CNI_PLUGIN = "kube-ovn"
# Debian's containernetworking-plugins (hack/install-deps.sh).
CNI_PLUGINS = Path("/usr/lib/cni")
# Called by the runtime whatever the configuration says (the pod's loopback).
RUNTIME_PLUGINS = ("loopback",)
# The agent's socket on a real node (Kube-OVN's image and the package's attachments name it).
NODE_SOCKET = "/run/openvswitch/kube-ovn-daemon.sock"


def plugin_shim(cni_binary: Path, socket: Path) -> str:
    """A ``sh`` script that runs ``cni_binary`` with its stdin (the network configuration)
    changed so that the plugin talks to ``socket``: the JSON string :data:`NODE_SOCKET`
    becomes ``socket``, and ``"type": "kube-ovn"`` gains ``"server_socket": <socket>`` right
    after it (a configuration without one, as Multus v4.2.3 hands the cluster network on a DEL
    of a sandbox whose ADD failed; with both, the one written later wins in Go's decoder, and a
    configuration's own comes after ``type`` as Kube-OVN's files write it). The exit status and
    output are the plugin's; the CNI environment passes through."""
    old = json.dumps(NODE_SOCKET).replace(".", "\\.")
    new = json.dumps(str(socket))
    return ("#!/bin/sh\n"
            "# The bed's nodes share one filesystem: the path a real node's agent listens on is\n"
            "# this node's socket here (hack/bed/kube_ovn_cni.py).\n"
            f"sed -e 's#{old}#{new}#g' -e 's#\"type\" *: *\"{CNI_PLUGIN}\"#\"type\":\"{CNI_PLUGIN}\",\"server_socket\":{new}#g'"
            f" | exec {cni_binary.resolve()}\n")


def daemon_socket(chassis: Chassis) -> Path:
    """The node agent's CNI server socket of ``chassis`` as the host sees it (its
    ``--bind-socket=/run/openvswitch/kube-ovn-daemon.sock`` in the agent's mounts)."""
    return chassis.rundir / "kube-ovn-daemon.sock"


def node_conflist(upstream: dict[str, Any], socket: Path) -> dict[str, Any]:
    """Kube-OVN's conflist ``upstream`` with each ``kube-ovn`` plugin's ``server_socket`` set
    to ``socket`` (everything else as it is).

    :raises ValueError: ``upstream`` has no ``kube-ovn`` plugin.
    """
    conf = json.loads(json.dumps(upstream))
    plugins = [p for p in conf.get("plugins") or [] if p.get("type") == CNI_PLUGIN]
    if not plugins:
        raise ValueError(f"the conflist has no {CNI_PLUGIN!r} plugin: {upstream}")
    for p in plugins:
        p["server_socket"] = str(socket)
    return conf


def plugin_config(conflist: dict[str, Any], plugin_type: str = CNI_PLUGIN) -> dict[str, Any]:
    """What a runtime gives one plugin of ``conflist`` on stdin (the CNI spec's network
    configuration of a list's plugin): the plugin's own keys plus the list's ``name`` and
    ``cniVersion``. The first plugin of the chain, so no ``prevResult``.

    :raises ValueError: no plugin of that type.
    """
    for p in conflist.get("plugins") or []:
        if p.get("type") == plugin_type:
            return {"cniVersion": conflist["cniVersion"], "name": conflist["name"], **p}
    raise ValueError(f"the conflist has no {plugin_type!r} plugin")


def write_cni_config(conf_dir: Path, bin_dir: Path, daemon_socket: Path, cni_binary: Path,
                     upstream: Path | None = None, plugins_dir: Path = CNI_PLUGINS) -> Path:
    """A node's CNI configuration directory and bin directory for Kube-OVN (see the module
    docstring); returns the conflist's path (``conf_dir/01-kube-ovn.conflist``, mode 0600).

    :param daemon_socket: the node agent's socket as the runtime sees it (:func:`daemon_socket`).
    :param cni_binary: the ``kube-ovn`` plugin (hack/build-peers.sh's ``bin/kube-ovn``).
    :param upstream: Kube-OVN's conflist; default ``cni/01-kube-ovn.conflist`` next to the
        build's ``bin/`` (where hack/build-peers.sh stages it).
    :param plugins_dir: where the reference plugins the chain and the runtime call are.
    :raises FileNotFoundError: the plugin, the conflist or a reference plugin is missing.
    """
    upstream = upstream or cni_binary.parent.parent / "cni" / CNI_CONF_NAME
    conf = node_conflist(json.loads(upstream.read_text()), daemon_socket)
    bins = {CNI_PLUGIN: cni_binary}
    for name in (*RUNTIME_PLUGINS, *(p["type"] for p in conf["plugins"] if p["type"] != CNI_PLUGIN)):
        bins[name] = plugins_dir / name
    for name, source in bins.items():
        if not os.access(source, os.X_OK):
            raise FileNotFoundError(f"CNI plugin {name}: {source} is missing or not executable")
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, source in bins.items():
        link = bin_dir / name
        link.unlink(missing_ok=True)
        if name == CNI_PLUGIN:
            link.write_text(plugin_shim(source, daemon_socket))
            link.chmod(0o755)
        else:
            link.symlink_to(source.resolve())
    conf_dir.mkdir(parents=True, exist_ok=True)
    path = conf_dir / CNI_CONF_NAME
    tmp = path.with_name(f".{CNI_CONF_NAME}.tmp")
    tmp.write_text(json.dumps(conf, indent=2) + "\n")
    tmp.chmod(0o600)
    tmp.replace(path)
    return path
