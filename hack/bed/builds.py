"""Where the bed's binaries come from: hack/versions.env, the build cache, Kube-OVN's OVS/OVN
build (importing this module puts it first on this process's PATH), and the directories of
the control plane's and the peers' builds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
HACK_DIR = REPO_ROOT / "hack"


def read_env(path: Path) -> dict[str, str]:
    """A shell ``KEY=value`` file (hack/versions.env, a build's ``refs.env``) as a dict: blank
    and ``#`` lines skipped, keys and values stripped, a value's double quotes dropped."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        out[k.strip()] = v.strip().strip('"')
    return out


def run_build(script: str) -> Path:
    """Run ``hack/<script>`` (a build cached by content) and return the output directory it
    prints last on stdout.

    :raises RuntimeError: the build failed (its last stderr lines in the message).
    """
    proc = subprocess.run(["bash", str(HACK_DIR / script)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"hack/{script} failed:\n{proc.stderr[-2000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def _read_versions() -> dict[str, str]:
    """hack/versions.env as a dict; ``PNC_KUBE_OVN_VERSION`` switches Kube-OVN's version
    (issue 24: v1.13.0, the module proxy's, with Debian's OVN; out of CI)."""
    out = read_env(HACK_DIR / "versions.env")
    out["KUBE_OVN_VERSION"] = os.environ.get("PNC_KUBE_OVN_VERSION") or out["KUBE_OVN_VERSION"]
    return out


def _cache_dir() -> Path:
    return Path(os.environ.get("PNC_CACHE_DIR", Path.home() / ".cache" / "proxmox-network-controller"))


def kube_ovn_legacy() -> bool:
    """True when the bed runs Kube-OVN v1.13.0 (the version switch), False for v1.15."""
    v = _read_versions()
    return v["KUBE_OVN_VERSION"] == v["KUBE_OVN_LEGACY_VERSION"]


def default_ovn_prefix() -> Path | None:
    """Kube-OVN's own OVS and OVN, built by hack/build-ovn.sh (same key as the script), or
    None under the v1.13 switch, whose bed runs Debian's OVN from PATH."""
    if kube_ovn_legacy():
        return None
    v = _read_versions()
    return _cache_dir() / "ovn" / (
        f"kube-ovn-{v['KUBE_OVN_VERSION']}-ovs-{v['OVS_COMMIT'][:12]}-ovn-{v['OVN_COMMIT'][:12]}"
    )


OVN_PREFIX = default_ovn_prefix()
# The OVN databases' schemas: the OVN build's, which hack/build-ovn.sh checked to equal the
# ones Kube-OVN embeds; Debian's under the v1.13 switch.
_SCHEMA_DIR = OVN_PREFIX / "share" / "ovn" if OVN_PREFIX else Path("/usr/share/ovn")
NB_SCHEMA = _SCHEMA_DIR / "ovn-nb.ovsschema"
SB_SCHEMA = _SCHEMA_DIR / "ovn-sb.ovsschema"
if OVN_PREFIX is not None:
    # Every OVS/OVN tool the bed, its tests and its scripts call by name (ovsdb-server,
    # ovsdb-tool, ovn-northd, ovn-nbctl, ovn-sbctl, ovsdb-client) is the Kube-OVN build's:
    # importing the bed puts that build first on this process's PATH, so children inherit it.
    _ovn_path = f"{OVN_PREFIX / 'bin'}{os.pathsep}{OVN_PREFIX / 'sbin'}"
    if not os.environ.get("PATH", "").startswith(_ovn_path):
        os.environ["PATH"] = _ovn_path + os.pathsep + os.environ.get("PATH", "")


def default_bin_dir() -> Path:
    """Where hack/build-control-plane.sh puts its binaries (same key as the script)."""
    env = os.environ.get("PNC_CONTROL_PLANE_BIN")
    if env:
        return Path(env)
    v = _read_versions()
    return _cache_dir() / "control-plane" / f"k8s-{v['KUBERNETES_VERSION']}-etcd-{v['ETCD_VERSION']}" / "bin"


def default_peers_dir() -> Path:
    """Where hack/build-peers.sh puts the peers (same key as the script; bin/, crds/, ovsdb/)."""
    env = os.environ.get("PNC_PEERS_DIR")
    if env:
        return Path(env)
    v = _read_versions()
    return _cache_dir() / "peers" / (
        f"ipam-{v['IPAM_PROVIDER_VERSION']}-capi-{v['CLUSTER_API_VERSION']}-kube-ovn-{v['KUBE_OVN_VERSION']}"
    )
