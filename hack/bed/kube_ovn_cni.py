"""Kube-OVN's CNI on a trunk node: the ``kube-ovn`` plugin (``cmd/cni`` of v1.15.24,
hack/build-peers.sh) configured as Kube-OVN's image installs it (``01-kube-ovn.conflist``,
``install-cni.sh``), with the node's own ``kube-ovn-daemon`` socket."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

# Debian's containernetworking-plugins, as Kube-OVN's image ships loopback and portmap.
SYSTEM_CNI_DIR = Path("/usr/lib/cni")


def write_cni_config(conf_dir: Path, bin_dir: Path, daemon_socket: Path, cni_binary: Path) -> Path:
    """Write ``01-kube-ovn.conflist`` into ``conf_dir`` (the ``kube-ovn`` plugin with
    ``server_socket`` = ``daemon_socket``, then ``portmap``) and fill ``bin_dir`` with
    ``kube-ovn`` (``cni_binary``), ``loopback`` and ``portmap``; returns ``bin_dir``.

    :raises FileNotFoundError: ``cni_binary`` or a system plugin is missing.
    """
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, src in (("kube-ovn", cni_binary), ("loopback", SYSTEM_CNI_DIR / "loopback"),
                      ("portmap", SYSTEM_CNI_DIR / "portmap")):
        if not src.exists():
            raise FileNotFoundError(src)
        shutil.copy2(src, bin_dir / name)
    conflist = {
        "name": "kube-ovn",
        "cniVersion": "0.3.1",
        "plugins": [
            {"type": "kube-ovn", "server_socket": str(daemon_socket)},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    path = Path(conf_dir) / "01-kube-ovn.conflist"
    path.write_text(json.dumps(conflist, indent=2) + "\n")
    return bin_dir
