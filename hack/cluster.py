#!/usr/bin/env python3
"""Local test bed: etcd + kube-apiserver + OVN (NB and SB ovsdb-servers, ovn-northd), on loopback.

See product-decisions.md §5 and §7. Importable (``LocalCluster``) and a CLI::

    python hack/cluster.py start --dir DIR [--no-watch-cache] [--no-nb] [--no-sb] [--no-peers] [--node]
    python hack/cluster.py env   --dir DIR      # shell exports for a running bed
    python hack/cluster.py stop  --dir DIR      # works from any process (pid files)

Binaries come from hack/build-control-plane.sh (cached under ~/.cache); set
``PNC_CONTROL_PLANE_BIN`` to use another directory. Unless ``--no-peers`` (or ``--no-sb``) the bed also runs the
real kube-ovn-controller and in-cluster IPAM provider from hack/build-peers.sh (issue 13;
``PNC_PEERS_DIR`` for another build). Nothing listens on anything but 127.0.0.1 and unix
sockets inside the work directory, except what ``--node`` adds (hack/node.py, issue 17): the
kubelet listens on this machine's own address (a node IP cannot be a loopback one), and the
forwarders to the API server and the NB on the node's pod bridge (its gateway address, for
the pods of that bridge only).
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import functools
import ctypes
import datetime as _dt
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml

try:  # imported as hack.cluster (tests) or as cluster / run as a script (hack/ on sys.path)
    from hack.dataplane import DataPlane, DataPlaneError, cleanup_leftovers, missing_prerequisites
    from hack.node import FORWARDS, KCM_USER, KUBELET_GROUPS, NODE_COMPONENTS, SCHEDULER_USER, Node, NodeError
    from hack.procs import pid_alive, pid_state, terminate_pid, wait_dead
except ImportError:
    from procs import pid_alive, pid_state, terminate_pid, wait_dead  # type: ignore[no-redef]
    from dataplane import DataPlane, DataPlaneError, cleanup_leftovers, missing_prerequisites  # type: ignore[no-redef]
    from node import (  # type: ignore[no-redef]
        FORWARDS, KCM_USER, KUBELET_GROUPS, NODE_COMPONENTS, SCHEDULER_USER, Node, NodeError,
    )

REPO_ROOT = Path(__file__).resolve().parent.parent
HACK_DIR = REPO_ROOT / "hack"

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
# The data plane's trunk (hack/dataplane.py, issue 25): its ProviderNetwork (a name of at most
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


# --------------------------------------------------------------------------- helpers


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _tail(path: Path, lines: int = 40) -> str:
    try:
        data = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join(data[-lines:]) or f"(log {path} is empty)"


def _read_versions() -> dict[str, str]:
    """hack/versions.env as a dict; ``PNC_KUBE_OVN_VERSION`` switches Kube-OVN's version
    (issue 24: v1.13.0, the module proxy's, with Debian's OVN; out of CI)."""
    out: dict[str, str] = {}
    for line in (HACK_DIR / "versions.env").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        out[k.strip()] = v.strip().strip('"')
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


def die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort only
        pass


def _wait_state(pid: int, stopped: bool, timeout: float = 10.0) -> None:
    """Wait until ``pid`` is stopped (SIGSTOP delivered) or, with ``stopped=False``, running again."""
    deadline = time.monotonic() + timeout
    while (pid_state(pid) == "T") != stopped:
        if time.monotonic() > deadline:
            raise ClusterError(f"pid {pid} is not {'stopped' if stopped else 'running'} after {timeout:.0f}s")
        time.sleep(0.01)


def _pid_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


# --------------------------------------------------------------------------- certificates


def ovsdb_atom(value: Any) -> Any:
    """An ``ovn-nbctl``/``ovn-sbctl --format=json`` datum as Python: uuid -> str, set ->
    list, map -> dict (recursively)."""
    if isinstance(value, list) and len(value) == 2 and value[0] in ("uuid", "named-uuid"):
        return value[1]
    if isinstance(value, list) and len(value) == 2 and value[0] == "set":
        return [ovsdb_atom(v) for v in value[1]]
    if isinstance(value, list) and len(value) == 2 and value[0] == "map":
        return {ovsdb_atom(k): ovsdb_atom(v) for k, v in value[1]}
    return value


def ovsdb_set(value: Any) -> list:
    """A set column as a list (the tools print a one-element set as the bare element)."""
    return value if isinstance(value, list) else [value]


def ovsdb_rows(ctl: Any, table: str, *conditions: str, columns: str | None = None) -> list[dict[str, Any]]:
    """Rows of ``table`` through ``ctl`` (:meth:`LocalCluster.nbctl` or ``sbctl``): all of
    them, or those matching ``conditions`` (``find``); every column, or ``columns``
    (comma-separated), as :func:`ovsdb_atom` values."""
    verb = ("find", table, *conditions) if conditions else ("list", table)
    cols = (f"--columns={columns}",) if columns else ()
    out = json.loads(ctl("--format=json", *cols, *verb))
    return [dict(zip(out["headings"], map(ovsdb_atom, row))) for row in out["data"]]


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _make_pki(certs: Path, extra_ips: Sequence[str] = ()) -> dict[str, Path]:
    """A CA, a serving certificate for 127.0.0.1/localhost (and ``extra_ips``: the node's
    gateway, where its pods reach the API server), and the service-account keys."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    certs.mkdir(parents=True, exist_ok=True)
    now = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(minutes=5)
    later = now + _dt.timedelta(days=30)

    def pem_key(key) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pnc-testbed-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    srv_key = ec.generate_private_key(ec.SECP256R1())
    srv_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(srv_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(
            x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in extra_ips),
                x509.DNSName("localhost"),
                x509.DNSName("kubernetes.default.svc"),
            ]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    # The API server's client certificate towards kubelets (logs, exec): the only credential
    # the bed's kubelet accepts (hack/node.py).
    kc_key = ec.generate_private_key(ec.SECP256R1())
    kc_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
            x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver-kubelet-client"),
        ]))
        .issuer_name(ca_name)
        .public_key(kc_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    paths = {
        "ca": certs / "ca.crt",
        "ca_key": certs / "ca.key",
        "serving_cert": certs / "apiserver.crt",
        "serving_key": certs / "apiserver.key",
        "sa_key": certs / "sa.key",
        "sa_pub": certs / "sa.pub",
        "kubelet_client_cert": certs / "apiserver-kubelet-client.crt",
        "kubelet_client_key": certs / "apiserver-kubelet-client.key",
    }
    paths["kubelet_client_cert"].write_bytes(kc_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(paths["kubelet_client_key"], pem_key(kc_key))
    paths["ca"].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(paths["ca_key"], pem_key(ca_key))
    paths["serving_cert"].write_bytes(srv_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(paths["serving_key"], pem_key(srv_key))
    _write_private(paths["sa_key"], pem_key(sa_key))
    paths["sa_pub"].write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return paths


AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}


# --------------------------------------------------------------------------- the cluster


class LocalCluster:
    """etcd + kube-apiserver (+ OVN NB, SB and ovn-northd) on loopback, under ``workdir``.

    Attributes once started: ``server``, ``ca_file``, ``admin_token``, ``controller_token``,
    ``admin_kubeconfig``, ``controller_kubeconfig``, ``audit_log``, ``etcd_url``, ``kubectl``,
    ``bin_dir``, ``nb_unix``, ``nb_tcp`` (None without NB), ``sb_unix``, ``sb_tcp`` (None
    without SB), ``northd_ctl`` (ovn-northd's unixctl socket), ``controller_user``.

    ``with_sb`` (default: ``with_nb``) adds the OVN Southbound ovsdb-server and ``ovn-northd``
    (NB and SB over their unix sockets), so the SB shows what northd makes of the NB, e.g.
    the chassis-redirect binding ``cr-<router port>`` once a port has an HA chassis group.

    ``with_peers`` (needs the NB and SB) runs the real peers of hack/build-peers.sh (issue 13)
    as components: ``kube-ovn-controller`` and ``ipam-provider`` (the in-cluster IPAM
    provider), each as its own service-account user bound to the ClusterRole of its upstream
    manifests, with kubeconfig, pid file and log in the work directory. The NB and SB are
    then created from the schemas Kube-OVN embeds (Debian's are older), and the peers' real
    CRDs replace the trimmed fixtures of the same names (the capmox fixtures stay: capmox has
    no build here; Kube-OVN v1.15's real VpcEgressGateway CRD is served in every bed). The
    bed is started once Kube-OVN leads and its VPC ``ovn-cluster`` and Subnet
    ``ovn-default`` are Ready, and the provider runs its workers. A test faults a peer with
    :meth:`stop_peer`, :meth:`start_peer`, :meth:`kill_peer`, :meth:`pause_peer` and
    :meth:`resume_peer`. On by default whenever the bed has the NB and SB (``with_peers=None``);
    ``with_peers=False`` gives a bed where a test writes the peers' state by hand.

    ``with_node`` (issue 17 part 2) adds a node: containerd, a kubelet registering Node
    ``pnc-node``, kube-controller-manager and kube-scheduler (hack/node.py; binaries of
    ``hack/build-control-plane.sh --node``, images of hack/build-pause.sh; needs root). The
    bed is then started once that Node is ``Ready`` (``node_ready_seconds``: from the
    kubelet's spawn); ``node`` is the :class:`node.Node` with its ``name``, ``ip``,
    ``busybox_image``, ``pod_subnet``, ``gateway`` (where its pods reach the API server and
    the NB, on the same port numbers as on 127.0.0.1: ``forward_ports``) and ``ctr()``. With
    a controller manager, namespaces finish deleting and the garbage collector runs; the
    ServiceAccount admission plugin is then on (pods get their service account's token).
    hack/deploy.py runs the controller's Deployment on that node (issue 17 part 3).
    """

    def __init__(
        self,
        workdir: Path | str,
        watch_cache: bool = True,
        with_nb: bool = True,
        *,
        with_sb: bool | None = None,
        bin_dir: Path | str | None = None,
        manifest_dirs: Sequence[Path | str] | None = None,
        detach: bool = False,
        start_timeout: float = 90.0,
        with_peers: bool | None = None,
        peers_dir: Path | str | None = None,
        with_node: bool = False,
        node_images: Path | str | None = None,
        with_dataplane: bool | None = None,
        dataplane_chassis: int = 3,
        dataplane_provider: str = DATAPLANE_PROVIDER,
        dataplane_node_prefix: str = "trunk",
    ) -> None:
        self.workdir = Path(workdir).resolve()
        self.watch_cache = watch_cache
        self.with_nb = with_nb
        self.with_sb = with_nb if with_sb is None else (with_sb and with_nb)
        # The real peers need both OVN databases; a bed with them runs the peers unless told not to.
        self.with_peers = self.with_sb if with_peers is None else with_peers
        self.bin_dir = Path(bin_dir) if bin_dir else default_bin_dir()
        self.peers_dir = Path(peers_dir) if peers_dir else default_peers_dir()
        self.with_node = with_node
        self.node: Node | None = (
            Node(self.workdir, self.bin_dir, Path(node_images) if node_images else None) if with_node else None
        )
        self.node_ready_seconds: float | None = None
        # The data plane (issue 25): on by default in a bed with the peers, where this
        # process is root (network namespaces); anything else it needs missing is then an error.
        if with_dataplane is None:
            with_dataplane = bool(self.with_peers and OVN_PREFIX is not None and os.geteuid() == 0)
        self.with_dataplane = with_dataplane
        self.dataplane: DataPlane | None = (
            DataPlane(self.workdir, OVN_PREFIX, f"unix:{self.workdir / 'sb.sock'}", dataplane_provider,
                      dataplane_chassis, dataplane_node_prefix)
            if with_dataplane and OVN_PREFIX is not None else None
        )
        self.node_kubeconfigs = {
            name: self.workdir / f"{name}.kubeconfig" for name in ("kubelet", "kube-scheduler", "kube-controller-manager")
        }
        self._node_tokens: dict[str, str] = {}
        # The OVN build's schemas equal the ones Kube-OVN embeds (hack/build-ovn.sh checks it).
        # Under the v1.13 switch Kube-OVN maps columns Debian's schemas do not have: its own.
        legacy = OVN_PREFIX is None and self.with_peers
        self.nb_schema = self.peers_dir / "ovsdb" / "ovn-nb.ovsschema" if legacy else NB_SCHEMA
        self.sb_schema = self.peers_dir / "ovsdb" / "ovn-sb.ovsschema" if legacy else SB_SCHEMA
        self.manifest_dirs = (
            [Path(p) for p in manifest_dirs]
            if manifest_dirs is not None
            else [REPO_ROOT / "manifests" / "crds", REPO_ROOT / "manifests" / "rbac", REPO_ROOT / "tests" / "fixtures" / "crds"]
        )
        # detach=True: processes outlive this Python process (CLI "start").
        self.detach = detach
        self.start_timeout = start_timeout

        self.kubectl = self.bin_dir / "kubectl"
        self.admin_user = ADMIN_USER
        self.controller_user = CONTROLLER_USER
        self.controller_groups = CONTROLLER_GROUPS
        self.controller_namespace = CONTROLLER_NAMESPACE
        self.admin_token = ADMIN_TOKEN
        self.controller_token = ""
        self.server = ""
        self.etcd_url = ""
        self.nb_unix: str | None = None
        self.nb_tcp: str | None = None
        self.sb_unix: str | None = None
        self.sb_tcp: str | None = None
        self.northd_ctl: Path | None = None
        self.ca_file = self.workdir / "certs" / "ca.crt"
        self.audit_log = self.workdir / "audit.log"
        self.admin_kubeconfig = self.workdir / "admin.kubeconfig"
        self.controller_kubeconfig = self.workdir / "controller.kubeconfig"
        self.kube_ovn_user = f"system:serviceaccount:{KUBE_OVN_NAMESPACE}:{KUBE_OVN_SA}"
        self.ipam_user = f"system:serviceaccount:{IPAM_NAMESPACE}:{IPAM_SA}"
        self.peer_kubeconfigs = {name: self.workdir / f"{name}.kubeconfig" for name in PEERS}
        self._peer_tokens: dict[str, str] = {}
        self.kube_cache_dir = self.workdir / "kube-cache"
        self.start_seconds: float | None = None
        self._procs: dict[str, subprocess.Popen] = {}
        self._ports: dict[str, int] = {}
        self._started = False
        self._atexit_registered = False

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> "LocalCluster":
        t0 = time.monotonic()
        self._check_binaries()
        self.workdir.mkdir(parents=True, exist_ok=True)
        running = [c for c, pid in self._read_pids().items() if pid_alive(pid)]
        if running:
            raise ClusterError(
                f"{self.workdir} already has running components {running}; "
                f"run `python hack/cluster.py stop --dir {self.workdir}` first"
            )
        if not self._atexit_registered and not self.detach:
            atexit.register(self.stop)
            self._atexit_registered = True
        self._started = True
        try:
            self._prepare_files()
            # All ports at once, so no two components can be handed the same one.
            names = ("etcd", "etcd-peer", "apiserver", "nb", "sb", "kubelet", "kubelet-healthz")
            self._ports = dict(zip(names, free_ports(len(names))))
            self._start_etcd()
            if self.with_nb:
                self._start_nb()
            if self.with_sb:
                self._start_sb()
                self._start_northd()
            self._start_apiserver()
            self._wait_etcd()
            self._wait_apiserver()
            self._write_kubeconfigs()
            self._write_state()
            if self.with_node:
                self._spawn_node()  # the controller manager's ~5 s of set-up overlaps the bootstrap
            if self.with_nb:
                self._wait_nb()
            if self.with_sb:
                self._wait_sb()
                self._wait_northd()
            if self.dataplane is not None:
                try:
                    self.dataplane.start()
                except DataPlaneError as e:
                    raise ClusterError(f"data plane: {e}") from e
            self._bootstrap()
            if self.dataplane is not None:
                self._trunk_objects()  # before Kube-OVN starts: its chassis GC keeps only chassis of Nodes
            if self.with_node:
                self._start_node()
            if self.with_peers:
                self._start_peers()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        self._write_state()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every component (SIGTERM, SIGKILL after ``timeout``). Safe to call twice."""
        pids = self._read_pids()
        for name, proc in self._procs.items():
            pids.setdefault(name, proc.pid)
        node_running = self.node is not None and any(n in pids for n in NODE_COMPONENTS)
        if node_running:
            # No new pods (a ReplicaSet's replacements) while the node's pods are deleted.
            for name in ("kube-controller-manager", "kube-scheduler"):
                if name in pids:
                    self._stop_component(name, pids.pop(name), timeout)
            self._drain_node(pids)
        for name in reversed(COMPONENTS):
            if name == "containerd" and node_running:
                self.node.remove_containers()  # type: ignore[union-attr]
            pid = pids.get(name)
            if pid is not None:
                self._stop_component(name, pid, timeout)
        if self.node is not None:
            self.node.cleanup()
        cleanup_leftovers(self.workdir)  # the data plane's processes and namespaces, if any
        self._procs.clear()
        self._started = False

    def _stop_component(self, name: str, pid: int, timeout: float) -> None:
        """SIGTERM one component (SIGKILL after ``timeout``), a paused one too; drop its pid file."""
        proc = self._procs.pop(name, None)
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                os.kill(proc.pid, signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        elif pid_alive(pid) and self._looks_like(name, pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            terminate_pid(pid, timeout)
        (self.workdir / f"{name}.pid").unlink(missing_ok=True)

    def _looks_like(self, name: str, pid: int) -> bool:
        """Guard against pid reuse: the process must be the binary we started, in our dir."""
        cmd = _pid_cmdline(pid)
        binary = {
            "etcd": "etcd",
            "kube-apiserver": "kube-apiserver",
            "ovsdb-nb": "ovsdb-server",
            "ovsdb-sb": "ovsdb-server",
            "ovn-northd": "ovn-northd",
            "kube-ovn-controller": "kube-ovn-controller",
            "ipam-provider": "ipam-provider-in-cluster",
            "containerd": "containerd",
            "api-forward": "socat",
            "nb-forward": "socat",
            "kubelet": "kubelet",
            "kube-controller-manager": "kube-controller-manager",
            "kube-scheduler": "kube-scheduler",
        }[name]
        return binary in cmd and str(self.workdir) in cmd

    # ------------------------------------------------------------------ state / pids

    def _read_pids(self) -> dict[str, int]:
        out = {}
        for name in COMPONENTS:
            p = self.workdir / f"{name}.pid"
            try:
                out[name] = int(p.read_text().strip())
            except (OSError, ValueError):
                pass
        return out

    def state(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "ca_file": str(self.ca_file),
            "admin_token": self.admin_token,
            "admin_user": self.admin_user,
            "controller_token": self.controller_token,
            "controller_user": self.controller_user,
            "controller_namespace": self.controller_namespace,
            "admin_kubeconfig": str(self.admin_kubeconfig),
            "controller_kubeconfig": str(self.controller_kubeconfig),
            "audit_log": str(self.audit_log),
            "etcd_url": self.etcd_url,
            "kubectl": str(self.kubectl),
            "bin_dir": str(self.bin_dir),
            "nb_unix": self.nb_unix,
            "nb_tcp": self.nb_tcp,
            "sb_unix": self.sb_unix,
            "sb_tcp": self.sb_tcp,
            "northd_ctl": str(self.northd_ctl) if self.northd_ctl else None,
            "watch_cache": self.watch_cache,
            "with_nb": self.with_nb,
            "with_sb": self.with_sb,
            "with_peers": self.with_peers,
            "peers_dir": str(self.peers_dir),
            "with_node": self.with_node,
            "node_name": self.node.name if self.node else None,
            "node_ip": self.node.ip if self.node else None,
            "node_pod_subnet": str(self.node.pod_subnet) if self.node and self.node.pod_subnet else None,
            "node_gateway": self.node.gateway if self.node else None,
            "node_forward_ports": self.node.forward_ports if self.node else None,
            "node_ready_seconds": self.node_ready_seconds,
            "with_dataplane": self.dataplane is not None,
            "dataplane_chassis": len(self.dataplane.chassis) if self.dataplane else 0,
            "dataplane_provider": self.dataplane.provider if self.dataplane else None,
            "dataplane_node_prefix": self.dataplane.chassis[0].name.rsplit("-", 1)[0] if self.dataplane else None,
            "dataplane_seconds": self.dataplane.start_seconds if self.dataplane else None,
            "start_seconds": self.start_seconds,
        }

    def _write_state(self) -> None:
        (self.workdir / "state.json").write_text(json.dumps(self.state(), indent=2) + "\n")

    @classmethod
    def attach(cls, workdir: Path | str) -> "LocalCluster":
        """A handle on a bed started by another process (``hack/cluster.py start``).

        ``stop()`` on it stops that bed; the pytest fixture does not call it for attached beds.
        """
        workdir = Path(workdir).resolve()
        try:
            st = json.loads((workdir / "state.json").read_text())
        except OSError as e:
            raise ClusterError(f"no running bed in {workdir}: {e}") from e
        c = cls(
            workdir,
            watch_cache=st["watch_cache"],
            with_nb=st["with_nb"],
            with_sb=st.get("with_sb", False),
            bin_dir=st["bin_dir"],
            with_peers=st.get("with_peers", False),
            peers_dir=st.get("peers_dir"),
            with_node=st.get("with_node", False),
            with_dataplane=st.get("with_dataplane", False),
            dataplane_chassis=st.get("dataplane_chassis") or 3,
            dataplane_provider=st.get("dataplane_provider") or DATAPLANE_PROVIDER,
            dataplane_node_prefix=st.get("dataplane_node_prefix") or "trunk",
            detach=True,  # a peer it restarts belongs to the bed, not to this process
        )
        c.server = st["server"]
        c.controller_token = st["controller_token"]
        c.etcd_url = st["etcd_url"]
        c.nb_unix = st["nb_unix"]
        c.nb_tcp = st["nb_tcp"]
        c.sb_unix = st.get("sb_unix")
        c.sb_tcp = st.get("sb_tcp")
        c.northd_ctl = Path(st["northd_ctl"]) if st.get("northd_ctl") else None
        c.start_seconds = st.get("start_seconds")
        c.node_ready_seconds = st.get("node_ready_seconds")
        if c.node is not None:
            import ipaddress

            c.node.ip = st.get("node_ip") or ""
            c.node.gateway = st.get("node_gateway") or ""
            c.node.forward_ports = st.get("node_forward_ports") or {}
            if st.get("node_pod_subnet"):
                c.node.pod_subnet = ipaddress.ip_network(st["node_pod_subnet"])  # type: ignore[assignment]
        # A peer may be down on purpose (a test's fault); the bed itself must be up.
        dead = [n for n, pid in c._read_pids().items() if n not in PEERS and not pid_alive(pid)]
        if dead or not c._read_pids():
            raise ClusterError(f"bed in {workdir} is not running (dead: {dead or 'all'})")
        c._started = True
        return c

    # ------------------------------------------------------------------ setup

    def _check_binaries(self) -> None:
        missing = [b for b in ("etcd", "kube-apiserver", "kubectl") if not os.access(self.bin_dir / b, os.X_OK)]
        if missing:
            raise ClusterError(
                f"missing {missing} in {self.bin_dir}; run hack/install-deps.sh "
                "(or hack/build-control-plane.sh), or set PNC_CONTROL_PLANE_BIN"
            )
        if self.with_nb:
            if OVN_PREFIX is not None and not (OVN_PREFIX / ".complete").exists():
                raise ClusterError(f"Kube-OVN's OVS/OVN build is missing in {OVN_PREFIX}; run hack/install-deps.sh "
                                   "(or hack/build-ovn.sh)")
            for tool in ("ovsdb-server", "ovsdb-tool", "ovn-nbctl"):
                if shutil.which(tool) is None:
                    raise ClusterError(f"{tool} not found on PATH; run hack/install-deps.sh")
            if not NB_SCHEMA.exists():
                raise ClusterError(f"{NB_SCHEMA} missing; run hack/install-deps.sh")
        if self.with_sb:
            for tool in ("ovn-northd", "ovn-sbctl"):
                if shutil.which(tool) is None:
                    raise ClusterError(f"{tool} not found on PATH; run hack/install-deps.sh")
            if not SB_SCHEMA.exists():
                raise ClusterError(f"{SB_SCHEMA} missing; run hack/install-deps.sh")
        if self.with_peers:
            self._check_peers()
        if self.with_dataplane:
            if not self.with_sb or OVN_PREFIX is None:
                raise ClusterError("the data plane needs the SB and Kube-OVN's OVS/OVN build (not the v1.13 switch)")
            missing = missing_prerequisites()
            if missing:
                raise ClusterError(f"the data plane needs {', '.join(missing)} (hack/install-deps.sh; "
                                   "with_dataplane=False or --no-dataplane for a bed without it)")
        if self.node is not None:
            try:
                self.node.check()
            except NodeError as e:
                raise ClusterError(str(e)) from e

    def _peer_files(self) -> dict[str, Path]:
        """What a bed with peers reads from hack/build-peers.sh's output and its module copies."""
        d = self.peers_dir
        v = _read_versions()
        src = d.parent / "src"
        return {
            "kube-ovn-controller": d / "bin" / "kube-ovn-controller",
            "ipam-provider": d / "bin" / "ipam-provider-in-cluster",
            "nb-schema": self.nb_schema,
            "sb-schema": self.sb_schema,
            "crds": d / "crds",
            "kube-ovn-role": d / "rbac" / "kube-ovn" / "ovn-CR.yaml",
            "ipam-role": src / f"cluster-api-ipam-provider-in-cluster@{v['IPAM_PROVIDER_VERSION']}" / "config" / "rbac" / "role.yaml",
        }

    def _check_peers(self) -> None:
        if not self.with_sb:
            raise ClusterError("with_peers needs the OVN NB and SB (kube-ovn-controller talks to both)")
        missing = [str(p) for p in self._peer_files().values() if not p.exists()]
        if missing or not (self.peers_dir / ".complete").exists():
            raise ClusterError(
                f"the peers are not built in {self.peers_dir} (missing {missing or ['.complete']}); "
                "run hack/build-peers.sh (or set PNC_PEERS_DIR)"
            )

    def _prepare_files(self) -> None:
        w = self.workdir
        for stale in (
            "etcd-data", "nb.db", "nb.sock", "nb.ctl", "sb.db", "sb.sock", "sb.ctl",
            "ovn-northd.ctl", "ovn-northd.pidfile", "kube-cache",
        ):
            p = w / stale
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink(missing_ok=True)
        for log in ("etcd.log", "kube-apiserver.log", "ovsdb-nb.log", "ovsdb-sb.log", "ovn-northd.log", "audit.log",
                    *(f"{peer}.log" for peer in PEERS), *(f"{n}.log" for n in NODE_COMPONENTS),
                    *(f"{n}.console.log" for n in FORWARDS)):
            (w / log).unlink(missing_ok=True)
        self.kube_cache_dir.mkdir()
        extra_ips: list[str] = []
        if self.node is not None:
            try:
                extra_ips.append(self.node.choose_subnet())
            except NodeError as e:
                raise ClusterError(f"node: {e}") from e
        self.pki = _make_pki(w / "certs", extra_ips)
        self.ca_file = self.pki["ca"]
        self.controller_token = secrets.token_hex(24)
        tokens = [
            (self.admin_token, ADMIN_USER, "admin-uid", ADMIN_GROUPS),
            (self.controller_token, CONTROLLER_USER, "controller-uid", CONTROLLER_GROUPS),
        ]
        if self.with_peers:
            self._peer_tokens = {name: secrets.token_hex(24) for name in PEERS}
            for name, user, ns in (
                ("kube-ovn-controller", self.kube_ovn_user, KUBE_OVN_NAMESPACE),
                ("ipam-provider", self.ipam_user, IPAM_NAMESPACE),
            ):
                groups = ("system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated")
                tokens.append((self._peer_tokens[name], user, f"{name}-uid", groups))
        if self.node is not None:
            self._node_tokens = {name: secrets.token_hex(24) for name in self.node_kubeconfigs}
            for name, user, groups in (
                ("kubelet", f"system:node:{self.node.name}", KUBELET_GROUPS),
                ("kube-scheduler", SCHEDULER_USER, ("system:authenticated",)),
                ("kube-controller-manager", KCM_USER, ("system:authenticated",)),
            ):
                tokens.append((self._node_tokens[name], user, f"{name}-uid", groups))
        lines = [f'{tok},{user},{uid},"{",".join(groups)}"' for tok, user, uid, groups in tokens]
        _write_private(w / "tokens.csv", ("\n".join(lines) + "\n").encode())
        (w / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))

    def _spawn(
        self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        logf = open(log, "ab")
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=env,
                start_new_session=True,
                preexec_fn=None if self.detach else die_with_parent,
            )
        finally:
            logf.close()
        self._procs[name] = proc
        (self.workdir / f"{name}.pid").write_text(f"{proc.pid}\n")
        return proc

    def _fail(self, name: str, what: str, log: Path) -> ClusterError:
        proc = self._procs.get(name)
        state = ""
        if proc is not None and proc.poll() is not None:
            state = f" (exited with {proc.returncode})"
        return ClusterError(f"{name} {what}{state}; last lines of {log}:\n{_tail(log)}")

    def _check_alive(self, name: str, log: Path) -> None:
        proc = self._procs.get(name)
        if proc is not None and proc.poll() is not None:
            raise self._fail(name, "exited during start", log)

    # etcd ---------------------------------------------------------------

    def _start_etcd(self) -> None:
        client, peer = self._ports["etcd"], self._ports["etcd-peer"]
        self.etcd_url = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        self._spawn(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=testbed",
                f"--data-dir={self.workdir / 'etcd-data'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=testbed={peer_url}",
                "--initial-cluster-state=new",
                "--enable-grpc-gateway=true",
                "--unsafe-no-fsync=true",  # throwaway data; spares the disk
                "--log-level=warn",
                "--log-outputs=stderr",
            ],
            self.workdir / "etcd.log",
        )

    def _wait_etcd(self) -> None:
        log = self.workdir / "etcd.log"
        deadline = time.monotonic() + 30
        last = ""
        while time.monotonic() < deadline:
            self._check_alive("etcd", log)
            try:
                with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as r:
                    body = json.loads(r.read())
                    if body.get("health") == "true":
                        return
                    last = str(body)
            except (OSError, ValueError) as e:
                last = str(e)
            time.sleep(0.1)
        raise self._fail("etcd", f"not healthy after 30s ({last})", log)

    def _etcd_post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(
            f"{self.etcd_url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def etcd_revision(self) -> int:
        """etcd's current revision (from the header of a range request)."""
        resp = self._etcd_post("/v3/kv/range", {"key": base64.b64encode(b"/registry/").decode(), "limit": 1})
        return int(resp["header"]["revision"])

    def compact(self) -> int:
        """Compact etcd to its current revision (physical); returns that revision."""
        rev = self.etcd_revision()
        self._etcd_post("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        return rev

    # kube-apiserver -------------------------------------------------------

    def _start_apiserver(self) -> None:
        port = self._ports["apiserver"]
        self.server = f"https://127.0.0.1:{port}"
        w = self.workdir
        argv = [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={w / 'certs'}",
            f"--tls-cert-file={self.pki['serving_cert']}",
            f"--tls-private-key-file={self.pki['serving_key']}",
            f"--client-ca-file={self.pki['ca']}",
            f"--token-auth-file={w / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--anonymous-auth=false",
            f"--service-account-issuer={self.server}",
            f"--service-account-key-file={self.pki['sa_pub']}",
            f"--service-account-signing-key-file={self.pki['sa_key']}",
            "--service-cluster-ip-range=10.96.0.0/16",
            # To a kubelet (hack/node.py): its InternalIP (it listens there, not on a hostname),
            # with the one client certificate it accepts.
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--kubelet-client-certificate={self.pki['kubelet_client_cert']}",
            f"--kubelet-client-key={self.pki['kubelet_client_key']}",
            # Without a node there is no controller manager: no "default" ServiceAccount appears
            # in new namespaces, and the ServiceAccount admission plugin would refuse every Pod
            # (tests create Pods). With one, pods get their service account's token.
            *(() if self.node is not None else ("--disable-admission-plugins=ServiceAccount",)),
            # The endpoints reconciler would try to publish 127.0.0.1 for the kubernetes
            # Service, which Endpoints validation refuses (loopback); nothing needs it here.
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            f"--audit-policy-file={w / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--audit-log-maxsize=0",
            f"--watch-cache={'true' if self.watch_cache else 'false'}",
            "--profiling=false",
            "--v=1",
        ]
        self._spawn("kube-apiserver", argv, w / "kube-apiserver.log")

    def _ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _wait_apiserver(self) -> None:
        log = self.workdir / "kube-apiserver.log"
        ctx = self._ssl_context()
        deadline = time.monotonic() + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            self._check_alive("kube-apiserver", log)
            self._check_alive("etcd", self.workdir / "etcd.log")
            req = urllib.request.Request(
                f"{self.server}/readyz", headers={"Authorization": f"Bearer {self.admin_token}"}
            )
            try:
                with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
                    if r.status == 200:
                        return
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}: {e.read()[-500:].decode(errors='replace')}"
            except OSError as e:
                last = str(e)
            time.sleep(0.2)
        raise self._fail("kube-apiserver", f"not ready after {self.start_timeout:.0f}s ({last})", log)

    def _write_kubeconfigs(self) -> None:
        for path, user, token in (
            (self.admin_kubeconfig, "admin", self.admin_token),
            (self.controller_kubeconfig, "controller", self.controller_token),
            *((self.peer_kubeconfigs[name], name, tok) for name, tok in self._peer_tokens.items()),
            *((self.node_kubeconfigs[name], name, tok) for name, tok in self._node_tokens.items()),
        ):
            cfg = {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "testbed", "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)}}
                ],
                "users": [{"name": user, "user": {"token": token}}],
                "contexts": [{"name": user, "context": {"cluster": "testbed", "user": user}}],
                "current-context": user,
                "preferences": {},
            }
            _write_private(path, yaml.safe_dump(cfg, sort_keys=False).encode())

    # OVN NB ---------------------------------------------------------------

    def _start_nb(self) -> None:
        w = self.workdir
        sock = w / "nb.sock"
        if len(str(sock)) > 100:
            raise ClusterError(f"work directory path too long for a unix socket: {sock}")
        db = w / "nb.db"
        r = subprocess.run(
            ["ovsdb-tool", "create", str(db), str(self.nb_schema)], capture_output=True, text=True
        )
        if r.returncode != 0:
            raise ClusterError(f"ovsdb-tool create failed: {r.stderr.strip()}")
        port = self._ports["nb"]
        self.nb_unix = f"unix:{sock}"
        self.nb_tcp = f"tcp:127.0.0.1:{port}"
        self._spawn(
            "ovsdb-nb",
            [
                "ovsdb-server",
                str(db),
                f"--remote=punix:{sock}",
                f"--remote=ptcp:{port}:127.0.0.1",
                f"--unixctl={w / 'nb.ctl'}",
                f"--log-file={w / 'ovsdb-nb.log'}",
                "-vconsole:off",
                "-vfile:info",
            ],
            w / "ovsdb-nb.console.log",
        )

    def nbctl(self, *args: str, db: str | None = None, timeout: float = 10) -> str:
        """Run ovn-nbctl against the test NB (unix socket unless ``db`` is given)."""
        if not self.nb_unix:
            raise ClusterError("this bed runs without an NB (with_nb=False)")
        r = subprocess.run(
            ["ovn-nbctl", f"--db={db or self.nb_unix}", f"--timeout={int(timeout)}", *args],
            capture_output=True,
            text=True,
            timeout=timeout + 5,
        )
        if r.returncode != 0:
            raise ClusterError(f"ovn-nbctl {' '.join(args)} failed: {r.stderr.strip()}")
        return r.stdout

    def _wait_nb(self) -> None:
        log = self.workdir / "ovsdb-nb.log"
        deadline = time.monotonic() + 20
        last = ""
        while time.monotonic() < deadline:
            self._check_alive("ovsdb-nb", log)
            try:
                for db in (self.nb_unix, self.nb_tcp):
                    self.nbctl("show", db=db, timeout=2)
                return
            except (ClusterError, subprocess.TimeoutExpired) as e:
                last = str(e)
            time.sleep(0.1)
        raise self._fail("ovsdb-nb", f"does not answer ovn-nbctl show ({last})", log)

    # OVN SB and ovn-northd ----------------------------------------------------

    def _ovn_env(self) -> dict[str, str]:
        """Point every OVS/OVN default directory at the work directory (no /var/run writes)."""
        w = str(self.workdir)
        return dict(
            os.environ,
            OVN_RUNDIR=w, OVS_RUNDIR=w, OVN_LOGDIR=w, OVS_LOGDIR=w, OVN_DBDIR=w, OVS_DBDIR=w,
        )

    def _start_sb(self) -> None:
        w = self.workdir
        sock = w / "sb.sock"
        if len(str(sock)) > 100:
            raise ClusterError(f"work directory path too long for a unix socket: {sock}")
        db = w / "sb.db"
        r = subprocess.run(
            ["ovsdb-tool", "create", str(db), str(self.sb_schema)], capture_output=True, text=True
        )
        if r.returncode != 0:
            raise ClusterError(f"ovsdb-tool create (SB) failed: {r.stderr.strip()}")
        port = self._ports["sb"]
        self.sb_unix = f"unix:{sock}"
        self.sb_tcp = f"tcp:127.0.0.1:{port}"
        self._spawn(
            "ovsdb-sb",
            [
                "ovsdb-server",
                str(db),
                f"--remote=punix:{sock}",
                f"--remote=ptcp:{port}:127.0.0.1",
                f"--unixctl={w / 'sb.ctl'}",
                f"--log-file={w / 'ovsdb-sb.log'}",
                "-vconsole:off",
                "-vfile:info",
            ],
            w / "ovsdb-sb.console.log",
            env=self._ovn_env(),
        )

    def _start_northd(self) -> None:
        """ovn-northd between the NB and SB unix sockets; it retries until both answer."""
        w = self.workdir
        assert self.nb_unix and self.sb_unix
        self.northd_ctl = w / "ovn-northd.ctl"
        self._spawn(
            "ovn-northd",
            [
                "ovn-northd",
                f"--ovnnb-db={self.nb_unix}",
                f"--ovnsb-db={self.sb_unix}",
                f"--unixctl={self.northd_ctl}",
                f"--pidfile={w / 'ovn-northd.pidfile'}",
                f"--log-file={w / 'ovn-northd.log'}",
                "-vconsole:off",
                "-vfile:info",
            ],
            w / "ovn-northd.console.log",
            env=self._ovn_env(),
        )

    def sbctl(self, *args: str, db: str | None = None, timeout: float = 10) -> str:
        """Run ovn-sbctl against the test SB (unix socket unless ``db`` is given)."""
        if not self.sb_unix:
            raise ClusterError("this bed runs without an SB (with_sb=False)")
        r = subprocess.run(
            ["ovn-sbctl", f"--db={db or self.sb_unix}", f"--timeout={int(timeout)}", *args],
            capture_output=True,
            text=True,
            timeout=timeout + 5,
        )
        if r.returncode != 0:
            raise ClusterError(f"ovn-sbctl {' '.join(args)} failed: {r.stderr.strip()}")
        return r.stdout

    def gateway_chassis(self, router_port: str) -> str | None:
        """The SB chassis (its name) the gateway port ``cr-<router_port>`` is bound on, or
        None while it is unbound or absent."""
        rows = ovsdb_rows(self.sbctl, "Port_Binding", f"logical_port=cr-{router_port}")
        if not rows or not rows[0]["chassis"]:
            return None
        return next((c["name"] for c in ovsdb_rows(self.sbctl, "Chassis") if c["_uuid"] == rows[0]["chassis"]), None)

    def active_tunnels(self, chassis: str) -> set[str]:
        """The chassis (SB names) the data plane's chassis ``chassis`` (its SB name) counts as
        up: the far end of each ``br-int`` tunnel with BFD enabled and in state ``up``, as its
        ovn-controller computes them (OVN controller/bfd.c, bfd_calculate_active_tunnels). An
        HA chassis group's member claims the gateway port while no higher-priority member is
        among them (controller/ha-chassis.c).

        :raises ClusterError: no data plane, or no chassis of that name.
        """
        dp = self.dataplane
        ch = next((c for c in dp.chassis if c.system_id == chassis), None) if dp else None
        if dp is None or ch is None:
            raise ClusterError(f"no data-plane chassis {chassis!r}")
        ctl = functools.partial(dp.vsctl, ch.ns, ch.rundir)
        up = {i["name"] for i in ovsdb_rows(ctl, "Interface", columns="name,bfd,bfd_status")
              if i["bfd"].get("enable") == "true" and i["bfd_status"].get("state") == "up"}
        return {p["external_ids"]["ovn-chassis-id"].split("@")[0]
                for p in ovsdb_rows(ctl, "Port", columns="name,external_ids")
                if p["name"] in up and "ovn-chassis-id" in p["external_ids"]}

    def gateway_settled(self, router_port: str, members: Sequence[tuple[str, int]]) -> bool:
        """Whether OVN has settled the gateway port ``cr-<router_port>`` of an HA chassis group
        of ``members`` (``(SB chassis name, priority)``): every member's BFD sessions to the
        other members are up (:meth:`active_tunnels`), so no member can still claim it, and it
        is bound on the highest priority. Until then a new group's port can be claimed by a
        lower-priority member whose session to the highest is not up yet, and move."""
        names = {m[0] for m in members}
        if not names or self.gateway_chassis(router_port) != max(members, key=lambda m: int(m[1]))[0]:
            return False
        return all(names - {n} <= self.active_tunnels(n) for n in names)

    def _wait_sb(self) -> None:
        log = self.workdir / "ovsdb-sb.log"
        deadline = time.monotonic() + 20
        last = ""
        while time.monotonic() < deadline:
            self._check_alive("ovsdb-sb", log)
            try:
                for db in (self.sb_unix, self.sb_tcp):
                    self.sbctl("show", db=db, timeout=2)
                return
            except (ClusterError, subprocess.TimeoutExpired) as e:
                last = str(e)
            time.sleep(0.1)
        raise self._fail("ovsdb-sb", f"does not answer ovn-sbctl show ({last})", log)

    def _wait_northd(self) -> None:
        """Ready once an NB change has gone through northd into the SB (--wait=sb)."""
        log = self.workdir / "ovn-northd.log"
        deadline = time.monotonic() + 20
        last = ""
        while time.monotonic() < deadline:
            self._check_alive("ovn-northd", log)
            try:
                self.nbctl("--wait=sb", "sync", timeout=2)
                return
            except (ClusterError, subprocess.TimeoutExpired) as e:
                last = str(e)
            time.sleep(0.1)
        raise self._fail("ovn-northd", f"did not sync the NB into the SB ({last})", log)

    # kubectl and bootstrap ----------------------------------------------------

    def run_kubectl(
        self,
        *args: str,
        user: str = "admin",
        input: str | bytes | None = None,
        check: bool = True,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess:
        kubeconfig = self.admin_kubeconfig if user == "admin" else self.controller_kubeconfig
        env = dict(os.environ, KUBECONFIG=str(kubeconfig))
        r = subprocess.run(
            [str(self.kubectl), f"--cache-dir={self.kube_cache_dir}", *args],
            input=input.encode() if isinstance(input, str) else input,
            capture_output=True,
            env=env,
            timeout=timeout,
        )
        if check and r.returncode != 0:
            raise ClusterError(
                f"kubectl {' '.join(args)} failed ({r.returncode}):\n{r.stderr.decode(errors='replace').strip()}"
            )
        return r

    def _manifest_docs(self) -> list[tuple[Path, dict]]:
        """manifests/ and the fixtures, and Kube-OVN's real VpcEgressGateway CRD (no fixture
        of it since issue 24) in every bed that has the peers' build."""
        docs = self._load_docs(self.manifest_dirs)
        real = self.peers_dir / "crds" / "kube-ovn"
        if not self.with_peers and real.is_dir():
            docs += [(f, d) for f, d in self._load_docs([real])
                     if d["kind"] == "CustomResourceDefinition" and d["metadata"]["name"] == VPC_EGRESS_GATEWAY_CRD]
        return docs

    @staticmethod
    def _load_docs(dirs: Iterable[Path]) -> list[tuple[Path, dict]]:
        """Every Kubernetes object in the YAML files under ``dirs`` (Lists unpacked), with its file."""
        docs: list[tuple[Path, dict]] = []
        for d in dirs:
            if not d.is_dir():
                continue
            files = sorted(p for ext in ("*.yaml", "*.yml") for p in d.rglob(ext))
            for f in files:
                if f.name in ("kustomization.yaml", "kustomization.yml"):
                    continue
                try:
                    loaded = list(yaml.safe_load_all(f.read_text()))
                except yaml.YAMLError as e:
                    raise ClusterError(f"cannot parse {f}: {e}") from e
                for doc in loaded:
                    if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
                        continue
                    if doc["kind"].endswith("List") and "items" in doc:
                        docs.extend((f, item) for item in doc["items"])
                    else:
                        docs.append((f, doc))
        return docs

    def apply_docs(self, docs: Iterable[dict], what: str = "objects") -> None:
        docs = list(docs)
        if not docs:
            return
        stream = yaml.safe_dump_all(docs, sort_keys=False)
        try:
            self.run_kubectl(
                "apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}", "-f", "-",
                input=stream,
            )
        except ClusterError as e:
            raise ClusterError(f"applying {what} failed: {e}") from e

    def _bootstrap(self) -> None:
        docs = self._manifest_docs()
        if self.with_peers:
            docs = self._with_peer_crds(docs) + [(self.peers_dir, d) for d in self._peer_objects()]
        namespaces = {CONTROLLER_NAMESPACE}
        namespaces.update(d["metadata"]["namespace"] for _, d in docs if d.get("metadata", {}).get("namespace"))
        ns_docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in sorted(namespaces)]
        ns_docs += [d for _, d in docs if d["kind"] == "Namespace" and d["apiVersion"] == "v1"]
        crds = [d for _, d in docs if d["kind"] == "CustomResourceDefinition"]
        rest = [d for _, d in docs if d["kind"] not in ("CustomResourceDefinition", "Namespace")]
        self.apply_docs(ns_docs, "namespaces")
        self.apply_docs(crds, "CRDs")
        if crds:
            names = [f"crd/{d['metadata']['name']}" for d in crds]
            self.run_kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
        self.apply_docs(rest, "manifests")
        if self.node is not None:
            # Without the Node authorizer, RBAC's system:node ClusterRole is what a kubelet
            # may do; the API server binds it to no one by default.
            self.apply_docs([{
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "pnc-testbed-nodes"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}],
            }], "the nodes' ClusterRoleBinding")

    # the node (hack/node.py) ---------------------------------------------------------

    # containerd, the shims and runc need a PATH with Debian's binaries, and nothing else of ours.
    NODE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

    def _spawn_node(self) -> None:
        """The node's files; containerd, the controller manager and the scheduler (the API
        server is ready: their users' RBAC is the API server's own bootstrap policy)."""
        node = self.node
        assert node is not None
        try:
            node.prepare(
                ports=(self._ports["kubelet"], self._ports["kubelet-healthz"]),
                ca_file=self.ca_file,
                kubeconfigs=self.node_kubeconfigs,
                sa_key=self.pki["sa_key"],
                forward_ports={fwd: self._ports[service] for fwd, service in FORWARDS.items()
                               if service != "nb" or self.with_nb},
            )
        except NodeError as e:
            raise ClusterError(f"node: {e}") from e
        env = dict(self.NODE_ENV, HOME=str(self.workdir))
        for name in node.forward_ports:  # socat logs to <name>.log itself (-lf)
            self._spawn(name, node.command(name), self.workdir / f"{name}.console.log", env=env)
        for name in ("containerd", "kube-controller-manager", "kube-scheduler"):
            self._spawn(name, node.command(name), self.workdir / f"{name}.log", env=env)

    def _start_node(self) -> None:
        """After the bootstrap (the nodes' ClusterRoleBinding): containerd's images, then the
        kubelet; returns once the Node is Ready and schedulable."""
        node = self.node
        assert node is not None
        try:
            node.wait_forwarders(lambda name: self._check_alive(name, self.workdir / f"{name}.log"), 10)
        except NodeError as e:
            raise ClusterError(f"node: {e}") from e
        try:
            node.wait_containerd(lambda: self._check_alive("containerd", self.workdir / "containerd.log"),
                                 self.start_timeout)
            node.import_images()
        except NodeError as e:
            raise self._fail("containerd", str(e), self.workdir / "containerd.log") from e
        t0 = time.monotonic()
        env = dict(self.NODE_ENV, HOME=str(self.workdir))
        self._spawn("kubelet", node.command("kubelet"), self.workdir / "kubelet.log", env=env)
        deadline = t0 + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            for name in NODE_COMPONENTS:
                self._check_alive(name, self.workdir / f"{name}.log")
            try:
                last = node.ready_pending(self._api_get(f"/api/v1/nodes/{node.name}"))
            except (OSError, ValueError) as e:
                last = str(e)
            if not last:
                self.node_ready_seconds = time.monotonic() - t0
                return
            time.sleep(0.05)
        raise self._fail("kubelet", f"Node {node.name} not Ready after {self.start_timeout:.0f}s ({last})",
                         self.workdir / "kubelet.log")

    def _drain_node(self, pids: dict[str, int], timeout: float = 30.0) -> None:
        """Before the node stops: delete every pod bound to it and wait (up to ``timeout``)
        until the kubelet has stopped their sandboxes, so the runtime tears their networks
        and namespaces down itself. Best effort: the bed stops either way."""
        node = self.node
        assert node is not None
        if not all(n in pids and pid_alive(pids[n]) for n in ("kube-apiserver", "kubelet", "containerd")):
            return
        try:
            netns = node.sandbox_netns()
            self.run_kubectl("delete", "pods", "--all-namespaces", f"--field-selector=spec.nodeName={node.name}",
                             "--grace-period=0", "--force", "--wait=false", timeout=20)
        except (ClusterError, subprocess.TimeoutExpired):
            return
        # Done when no task runs and the sandboxes' network namespaces are gone (the runtime
        # removes them after it has killed the sandbox).
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if not node.running_tasks() and not any(os.path.exists(p) for p in netns):
                    return
            except subprocess.TimeoutExpired:
                return
            time.sleep(0.1)

    # the data plane's trunk (issue 25) ---------------------------------------------

    def _trunk_objects(self) -> None:
        """What Kube-OVN's node agent (kube-ovn-cni, which does not run here) writes for the
        data plane's trunk nodes, written by the bed: a Node per chassis with its chassis
        annotation and the provider's ready label, and the ProviderNetwork with its status
        (kube-ovn-controller then rewrites the status every 30 s from those labels)."""
        dp = self.dataplane
        assert dp is not None
        ready_label = f"{dp.provider}.provider-network.kubernetes.io/ready"
        docs: list[dict] = [{
            "apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork", "metadata": {"name": dp.provider},
            # Its own trunk nodes only: Kube-OVN counts every Node it does not exclude.
            "spec": {"defaultInterface": "uplink", "nodeSelector": {"matchLabels": {ready_label: "true"}}},
        }]
        docs += [{
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": ch.name, "labels": {ready_label: "true", "kubernetes.io/hostname": ch.name},
                         "annotations": {CHASSIS_ANNOTATION: ch.system_id}},
        } for ch in dp.chassis]
        self.apply_docs(docs, "the data plane's trunk Nodes and ProviderNetwork")
        status = {"status": {"ready": True, "readyNodes": [ch.name for ch in dp.chassis]}}
        self.run_kubectl("patch", "provider-networks.kubeovn.io", dp.provider, "--subresource=status",
                         "--type=merge", "-p", json.dumps(status))

    # the real peers -------------------------------------------------------------

    def _with_peer_crds(self, docs: list[tuple[Path, dict]]) -> list[tuple[Path, dict]]:
        """``docs`` with every CRD the peers define replaced by the peers' own (never both)."""
        peer = self._load_docs([self.peers_dir / "crds"])
        names = {d["metadata"]["name"] for _, d in peer if d["kind"] == "CustomResourceDefinition"}
        kept = [
            (f, d) for f, d in docs
            if not (d["kind"] == "CustomResourceDefinition" and d["metadata"]["name"] in names)
        ]
        return kept + peer

    def _peer_objects(self) -> list[dict]:
        """Each peer's upstream ClusterRole bound to its user, and Kube-OVN's NAT ConfigMap."""
        files = self._peer_files()
        out: list[dict] = []
        for peer, source, upstream_name, name, ns, sa in (
            ("kube-ovn-controller", files["kube-ovn-role"], KUBE_OVN_ROLE, KUBE_OVN_ROLE, KUBE_OVN_NAMESPACE, KUBE_OVN_SA),
            ("ipam-provider", files["ipam-role"], "manager-role", IPAM_ROLE, IPAM_NAMESPACE, IPAM_SA),
        ):
            roles = [
                d for d in yaml.safe_load_all(source.read_text())
                if isinstance(d, dict) and d.get("kind") == "ClusterRole" and d["metadata"]["name"] == upstream_name
            ]
            if len(roles) != 1:
                raise ClusterError(f"{source} has {len(roles)} ClusterRoles named {upstream_name!r}, expected one")
            role = roles[0]
            role["metadata"]["name"] = name
            out.append(role)
            out.append({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"pnc-testbed-{peer}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
            })
        out.append({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": VPC_NAT_CONFIG, "namespace": KUBE_OVN_NAMESPACE},
            "data": {"image": "kubeovn/vpc-nat-gateway:unused-in-the-test-bed"},
        })
        return out

    def _peer_command(self, name: str) -> tuple[list[str], dict[str, str]]:
        """argv and environment of one peer, as its own user."""
        kubeconfig = str(self.peer_kubeconfigs[name])
        binary = str(self._peer_files()[name])
        env = dict(os.environ, KUBECONFIG=kubeconfig)
        if name == "ipam-provider":
            # Leader election is off by default; port 0 turns the webhook, metrics and probes off.
            argv = [binary, f"--kubeconfig={kubeconfig}", "--webhook-port=0", "--metrics-bind-address=0",
                    "--health-probe-bind-address=0"]
            return argv, env
        # kube-ovn-controller exits at "start to sync ips" without KUBECONFIG in its environment.
        argv = [
            binary,
            f"--kubeconfig={kubeconfig}",
            f"--ovn-nb-addr={self.nb_tcp}",
            f"--ovn-sb-addr={self.sb_tcp}",
            "--enable-metrics=false",
            "--keep-vm-ip=false",
            "--service-cluster-ip-range=10.96.0.0/16",
        ]
        if OVN_PREFIX is None:  # the v1.13 switch
            env.update(KUBE_NAMESPACE=KUBE_OVN_NAMESPACE, POD_NAME=KUBE_OVN_POD, KUBE_NODE_NAME="testbed")
            return argv, env
        # v1.15 renamed the Pod's downward-API variables (without them it never takes its
        # Lease), and serves pprof's /healthz on 0.0.0.0:10660 even with metrics off unless
        # told to bind the Pod's own IP: here loopback, on a free port.
        env.update(POD_NAMESPACE=KUBE_OVN_NAMESPACE, POD_NAME=KUBE_OVN_POD, NODE_NAME="testbed",
                   ENABLE_BIND_LOCAL_IP="true", POD_IPS="127.0.0.1")
        argv.append(f"--pprof-port={free_ports(1)[0]}")
        # It creates /var/log/kube-ovn/kube-ovn-controller.log (a hard-coded path; exits 1
        # when it cannot): a private mount namespace shows it a /var/log of the work
        # directory, and the host's is never touched. `unshare` and `sh` exec in turn, so
        # the pid stays the controller's.
        logdir = self.workdir / "kube-ovn-var-log"
        (logdir / "kube-ovn").mkdir(parents=True, exist_ok=True)
        userns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
        wrapper = ["unshare", *userns, "--mount", "--propagation", "private", "--",
                   "sh", "-c", 'mount --bind "$0" /var/log && exec "$@"', str(logdir)]
        return wrapper + argv, env

    def _spawn_peer(self, name: str) -> int:
        """Start one peer; returns the size its log had, so the wait reads only this run's lines."""
        log = self.workdir / f"{name}.log"
        offset = log.stat().st_size if log.exists() else 0
        argv, env = self._peer_command(name)
        self._spawn(name, argv, log, env=env)
        return offset

    def _start_peers(self) -> None:
        """Both peers at once, then wait for each (their start-up work overlaps)."""
        offsets = {name: self._spawn_peer(name) for name in PEERS}
        for name in PEERS:
            self._wait_peer(name, offsets[name])

    def _api_get(self, path: str) -> dict | None:
        """GET ``path`` as the admin; None for 404."""
        req = urllib.request.Request(f"{self.server}{path}", headers={"Authorization": f"Bearer {self.admin_token}"})
        try:
            with urllib.request.urlopen(req, timeout=5, context=self._ssl_context()) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def _kube_ovn_pending(self) -> str:
        """What Kube-OVN's start still lacks ("" when done): VPC ovn-cluster up (``standby``,
        it has no conditions) with Subnet ovn-default, which is ``Ready``."""
        vpc = ((self._api_get("/apis/kubeovn.io/v1/vpcs/ovn-cluster") or {}).get("status")) or {}
        if not (vpc.get("standby") is True and "ovn-default" in (vpc.get("subnets") or [])):
            return f"Vpc ovn-cluster not up (status {vpc or 'absent'})"
        subnet = ((self._api_get("/apis/kubeovn.io/v1/subnets/ovn-default") or {}).get("status")) or {}
        if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in subnet.get("conditions") or []):
            return f"Subnet ovn-default not Ready (status {subnet or 'absent'})"
        return ""

    def _peer_pending(self, name: str, offset: int) -> str:
        """What one peer still lacks to be at work since its log stood at ``offset`` ("" when done)."""
        log = self.workdir / f"{name}.log"
        try:
            with open(log, "rb") as f:
                f.seek(offset)
                since = f.read().decode(errors="replace")
        except OSError as e:
            return str(e)
        missing = [line for line in PEER_READY_LINES[name] if line not in since]
        if missing:
            return f"no {missing} in its log yet"
        return self._kube_ovn_pending() if name == "kube-ovn-controller" else ""

    def _wait_peer(self, name: str, offset: int) -> None:
        log = self.workdir / f"{name}.log"
        deadline = time.monotonic() + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            self._check_alive(name, log)
            try:
                last = self._peer_pending(name, offset)
            except (OSError, ValueError) as e:
                last = str(e)
            if not last:
                return
            time.sleep(0.2)
        raise self._fail(name, f"not at work after {self.start_timeout:.0f}s ({last})", log)

    def _check_peer(self, name: str) -> None:
        if name not in PEERS:
            raise ClusterError(f"unknown peer {name!r}; the peers are {', '.join(PEERS)}")
        if not self.with_peers:
            raise ClusterError("this bed runs without peers (with_peers=False)")

    def peer_pid(self, name: str) -> int:
        """The pid of a running (or paused) peer; ClusterError if it is not running."""
        self._check_peer(name)
        proc = self._procs.get(name)
        pid = proc.pid if proc is not None else self._read_pids().get(name)
        if pid is None or not pid_alive(pid) or not self._looks_like(name, pid):
            raise ClusterError(f"{name} is not running")
        return pid

    def stop_peer(self, name: str, timeout: float = 10.0) -> None:
        """Stop a peer as a rollout would: SIGTERM (Kube-OVN releases its Lease), SIGKILL after ``timeout``."""
        self._stop_component(name, self.peer_pid(name), timeout)

    def start_peer(self, name: str) -> None:
        """Start a stopped or killed peer again; returns once it is at work (as at bed start)."""
        self._check_peer(name)
        pid = self._read_pids().get(name)
        if pid is not None and pid_alive(pid) and self._looks_like(name, pid):
            raise ClusterError(f"{name} is already running (pid {pid})")
        self._wait_peer(name, self._spawn_peer(name))

    def kill_peer(self, name: str) -> None:
        """SIGKILL a peer (a crash: no Lease release, nothing flushed); returns once it is gone."""
        pid = self.peer_pid(name)
        os.kill(pid, signal.SIGKILL)
        proc = self._procs.pop(name, None)
        if proc is not None:
            proc.wait(10)
        elif not wait_dead(pid, 10):
            raise ClusterError(f"{name} (pid {pid}) survived SIGKILL for 10s")
        (self.workdir / f"{name}.pid").unlink(missing_ok=True)

    def pause_peer(self, name: str) -> None:
        """SIGSTOP a peer: it keeps its connections and Lease but does nothing (a hung
        process); returns once the kernel shows it stopped."""
        pid = self.peer_pid(name)
        os.kill(pid, signal.SIGSTOP)
        _wait_state(pid, stopped=True)

    def resume_peer(self, name: str) -> None:
        """SIGCONT a paused peer; returns once it runs again."""
        pid = self.peer_pid(name)
        os.kill(pid, signal.SIGCONT)
        _wait_state(pid, stopped=False)

    # ------------------------------------------------------------------ clients

    def api_client(self, user: str = "admin", host: str | None = None):
        """A kubernetes.client.ApiClient for ``admin`` or ``controller`` (optionally via ``host``)."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = host or self.server
        cfg.ssl_ca_cert = str(self.ca_file)
        cfg.verify_ssl = True
        token = self.admin_token if user == "admin" else self.controller_token
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(cfg)

    def env(self) -> dict[str, str]:
        return {
            "PNC_CLUSTER_DIR": str(self.workdir),
            "PNC_SERVER": self.server,
            "PNC_CA_FILE": str(self.ca_file),
            "PNC_ADMIN_TOKEN": self.admin_token,
            "PNC_CONTROLLER_TOKEN": self.controller_token,
            "PNC_ADMIN_KUBECONFIG": str(self.admin_kubeconfig),
            "PNC_CONTROLLER_KUBECONFIG": str(self.controller_kubeconfig),
            "PNC_AUDIT_LOG": str(self.audit_log),
            "PNC_ETCD_URL": self.etcd_url,
            "PNC_KUBECTL": str(self.kubectl),
            "PNC_NB_UNIX": self.nb_unix or "",
            "PNC_NB_TCP": self.nb_tcp or "",
            "PNC_SB_UNIX": self.sb_unix or "",
            "PNC_SB_TCP": self.sb_tcp or "",
            "PNC_NODE_GATEWAY": self.node.gateway if self.node else "",
            "KUBECONFIG": str(self.admin_kubeconfig),
        }


# --------------------------------------------------------------------------- CLI


def _cmd_stop(workdir: Path) -> int:
    try:
        with_node = json.loads((Path(workdir) / "state.json").read_text()).get("with_node", False)
    except (OSError, ValueError):
        with_node = (Path(workdir) / "node").is_dir()
    c = LocalCluster(workdir, with_nb=False, with_node=with_node)
    pids = c._read_pids()
    if not pids:
        print(f"nothing running in {c.workdir}", file=sys.stderr)
        return 0
    c.stop()
    (c.workdir / "state.json").unlink(missing_ok=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start", help="start a bed in DIR and leave it running")
    s.add_argument("--dir", required=True, type=Path)
    s.add_argument("--no-watch-cache", action="store_true")
    s.add_argument("--no-nb", action="store_true")
    s.add_argument("--no-sb", action="store_true", help="no OVN SB ovsdb-server and no ovn-northd")
    s.add_argument(
        "--peers", action=argparse.BooleanOptionalAction, default=None,
        help="run the real kube-ovn-controller and IPAM provider (hack/build-peers.sh); "
        "default: on when the bed has the NB and SB",
    )
    s.add_argument("--node", action="store_true",
                   help="also a node: containerd, kubelet, kube-controller-manager, kube-scheduler (hack/node.py)")
    s.add_argument(
        "--dataplane", action=argparse.BooleanOptionalAction, default=None,
        help="real OVN chassis, a trunk and VMs in network namespaces (hack/dataplane.py); "
        "default: on with the peers, as root",
    )
    for name in ("stop", "env"):
        p = sub.add_parser(name)
        p.add_argument("--dir", required=True, type=Path)
    args = ap.parse_args(argv)

    if args.cmd == "start":
        c = LocalCluster(
            args.dir,
            watch_cache=not args.no_watch_cache,
            with_nb=not args.no_nb,
            with_sb=not args.no_sb,
            detach=True,
            with_peers=args.peers,
            with_node=args.node,
            with_dataplane=args.dataplane,
        )
        try:
            c.start()
        except ClusterError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(f"started in {c.start_seconds:.1f}s: {c.server} (state in {c.workdir / 'state.json'})", file=sys.stderr)
        if c.node is not None:
            print(f"node {c.node.name} ({c.node.ip}) Ready {c.node_ready_seconds:.1f}s after the kubelet's start",
                  file=sys.stderr)
        if c.dataplane is not None:
            print(f"data plane: {len(c.dataplane.chassis)} chassis registered by their own ovn-controller "
                  f"{c.dataplane.start_seconds:.1f}s after its start", file=sys.stderr)
        for k, v in c.env().items():
            print(f"export {k}={v}")
        return 0
    if args.cmd == "stop":
        return _cmd_stop(args.dir)
    if args.cmd == "env":
        try:
            c = LocalCluster.attach(args.dir)
        except ClusterError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        for k, v in c.env().items():
            print(f"export {k}={v}")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
