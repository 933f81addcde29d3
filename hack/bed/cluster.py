"""LocalCluster: the bed composed of its rooms, each a mixin of its own file (components.py,
credentials.py, control_plane.py, ovn.py, peers.py) or a class it holds (node.py's
:class:`~hack.bed.node.Node`, dataplane.py's :class:`~hack.bed.dataplane.DataPlane`). This
file holds what joins them: the constructor, the order of start and stop, the state file and
``attach``, the checks before a start, the work directory's files and tokens, the steps that
run the node and write the trunk's objects (they need the API server), and ``env()``."""

from __future__ import annotations

import atexit
import functools
import json
import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Sequence

import yaml

from hack.bed.builds import NB_SCHEMA, OVN_PREFIX, REPO_ROOT, SB_SCHEMA, default_bin_dir, default_peers_dir
from hack.bed.common import (
    ADMIN_GROUPS, ADMIN_TOKEN, ADMIN_USER, COMPONENTS, CONTROLLER_GROUPS, CONTROLLER_NAMESPACE,
    CONTROLLER_USER, DATAPLANE_PROVIDER, IPAM_NAMESPACE, IPAM_SA, KUBE_OVN_NAMESPACE, KUBE_OVN_SA, PEERS,
    ClusterError,
)
from hack.bed.components import Components
from hack.bed.control_plane import AUDIT_POLICY, ControlPlane
from hack.bed.credentials import Kubeconfigs, _make_pki, _write_private
from hack.bed.dataplane import DataPlane, DataPlaneError, cleanup_leftovers, missing_prerequisites
from hack.bed.kube_ovn_cni import daemon_socket, write_cni_config
from hack.bed.multus import (
    MULTUS_GROUPS, MULTUS_USER, NAD_CRD, MultusError, egress_dir, egress_refs, write_multus_config,
)
from hack.bed.multus import rbac_objects as multus_rbac_objects
from hack.bed.node_agent import AGENT_USER, NodeAgent, NodeAgentError, rbac_objects, stop_all, wait_agents
from hack.bed.trunk_kubelet import TRUNK_TAINT, TrunkKubelet, TrunkKubeletError
from hack.bed.trunk_kubelet import stop_all as stop_trunk_kubelets
from hack.bed.node import FORWARDS, KCM_USER, KUBELET_GROUPS, NODE_COMPONENTS, SCHEDULER_USER, Node, NodeError
from hack.bed.ovn import OvnDatabases
from hack.bed.peers import Peers
from hack.bed.procs import free_ports, pid_alive


class LocalCluster(Components, Kubeconfigs, ControlPlane, OvnDatabases, Peers):
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
    ``pnc-node``, kube-controller-manager and kube-scheduler (hack/bed/node.py; binaries of
    ``hack/build-control-plane.sh --node``, images of hack/build-pause.sh; needs root). The
    bed is then started once that Node is ``Ready`` (``node_ready_seconds``: from the
    kubelet's spawn); ``node`` is the :class:`~hack.bed.node.Node` with its ``name``, ``ip``,
    ``busybox_image``, ``pod_subnet``, ``gateway`` (where its pods reach the API server and
    the NB, on the same port numbers as on 127.0.0.1: ``forward_ports``) and ``ctr()``. With
    a controller manager, namespaces finish deleting and the garbage collector runs; the
    ServiceAccount admission plugin is then on (pods get their service account's token).
    hack/bed/deploy.py runs the controller's Deployment on that node (issue 17 part 3).

    ``with_dataplane`` (needs the peers) adds the data plane (hack/bed/dataplane.py) and
    Kube-OVN's node agent on each of its trunk nodes (hack/bed/node_agent.py), as the user
    ``system:serviceaccount:kube-system:kube-ovn-cni``; the bed writes the trunk Nodes and the
    ProviderNetwork's spec only (it selects the Nodes labelled :data:`TRUNK_LABEL`). The bed
    is then started once each agent has written its Node's chassis annotation and the
    provider's ready label (its managed fields) and each chassis is in the SB with its encap
    (``agents_seconds``: from the agents' spawn); kube-ovn-controller writes the
    ProviderNetwork's status at its next 30 s resync.
    """

    #: The bed's own label on its trunk Nodes, which its ProviderNetwork selects (the agent
    #: writes the provider's ready label itself; selecting by it would count a node the agent
    #: labelled ready while it failed to set the node up).
    TRUNK_LABEL = "pnc-testbed/trunk-node"

    #: Seconds of every bed start in this process, in order (tests/conftest.py counts them per
    #: test module in the suite's time table, issue 28).
    starts: list[float] = []

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
        trunk_kubelets: int = 0,
        multus: bool = False,
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
        self.agents_seconds: float | None = None
        self.trunk_kubelets_seconds: float | None = None
        self.agent_kubeconfig = self.workdir / "kube-ovn-cni.kubeconfig"
        self._agent_token = ""
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
        # The last ``trunk_kubelets`` trunk nodes also run a kubelet with Kube-OVN's CNI
        # (hack/bed/trunk_kubelet.py); the bed's own node serves them its scheduler.
        if trunk_kubelets and (self.dataplane is None or not with_node):
            raise ClusterError("trunk kubelets need the data plane and the bed's node (with_node=True)")
        chassis = self.dataplane.chassis if self.dataplane is not None else []
        self.trunk_kubelets: dict[str, Any] = {}
        self.trunk_kubelet_kubeconfigs = {
            ch.name: self.workdir / f"kubelet-{ch.name}.kubeconfig" for ch in chassis[len(chassis) - trunk_kubelets:]
        } if trunk_kubelets else {}
        self._trunk_kubelet_tokens: dict[str, str] = {}
        if multus and not trunk_kubelets:
            raise ClusterError("multus needs trunk kubelets (trunk_kubelets > 0): Multus runs on their nodes")
        self.multus = multus
        self.multus_kubeconfig = self.workdir / "multus.kubeconfig"
        self._multus_token = ""
        self.egress_dir: Path | None = None
        self.egress_image = ""  # hack/build-egress.sh's gateway image, once started with multus
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
        if self.multus:
            self._build_egress()
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
                offsets = {name: self._spawn_peer(name) for name in PEERS}
                if self.dataplane is not None:
                    self._spawn_node_agents()  # they wait for kube-ovn-controller's join addresses
                for name in PEERS:
                    self._wait_peer(name, offsets[name])
            if self.dataplane is not None:
                self._wait_node_agents()
            if self.trunk_kubelet_kubeconfigs:
                self._start_trunk_kubelets()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        LocalCluster.starts.append(self.start_seconds)
        self._write_state()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every component (SIGTERM, SIGKILL after ``timeout``). Safe to call twice."""
        stop_trunk_kubelets(self.workdir, self.bin_dir, timeout)  # while their node agents run
        stop_all(self.workdir, timeout)  # the node agents first, while the API server is up
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

    # ------------------------------------------------------------------ state

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
            "agents_seconds": self.agents_seconds,
            "egress_image": self.egress_image,
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
        c.agents_seconds = st.get("agents_seconds")
        c.egress_image = st.get("egress_image") or ""
        if c.dataplane is not None:
            c._make_node_agents()
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
            if not self.with_peers:
                raise ClusterError("the data plane needs the peers (its node agents need kube-ovn-controller)")
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
        if self.dataplane is not None:
            self._agent_token = secrets.token_hex(24)
            groups = ("system:serviceaccounts", f"system:serviceaccounts:{KUBE_OVN_NAMESPACE}", "system:authenticated")
            tokens.append((self._agent_token, AGENT_USER, "kube-ovn-cni-uid", groups))
        if self.node is not None:
            self._node_tokens = {name: secrets.token_hex(24) for name in self.node_kubeconfigs}
            for name, user, groups in (
                ("kubelet", f"system:node:{self.node.name}", KUBELET_GROUPS),
                ("kube-scheduler", SCHEDULER_USER, ("system:authenticated",)),
                ("kube-controller-manager", KCM_USER, ("system:authenticated",)),
            ):
                tokens.append((self._node_tokens[name], user, f"{name}-uid", groups))
        self._trunk_kubelet_tokens = {name: secrets.token_hex(24) for name in self.trunk_kubelet_kubeconfigs}
        for name, tok in self._trunk_kubelet_tokens.items():
            tokens.append((tok, f"system:node:{name}", f"kubelet-{name}-uid", KUBELET_GROUPS))
        if self.multus:
            self._multus_token = secrets.token_hex(24)
            tokens.append((self._multus_token, MULTUS_USER, "multus-uid", MULTUS_GROUPS))
        lines = [f'{tok},{user},{uid},"{",".join(groups)}"' for tok, user, uid, groups in tokens]
        _write_private(w / "tokens.csv", ("\n".join(lines) + "\n").encode())
        (w / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))

    # the node (hack/bed/node.py) -----------------------------------------------------

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
        """The data plane's trunk Nodes (a Node per chassis, labelled :attr:`TRUNK_LABEL`), the
        ProviderNetwork's spec selecting them, and the node agents' identity (Kube-OVN's chart:
        :func:`~hack.bed.node_agent.rbac_objects`). Their labels, annotation and the
        ProviderNetwork's status are Kube-OVN's to write."""
        dp = self.dataplane
        assert dp is not None
        docs: list[dict] = [{
            "apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork", "metadata": {"name": dp.provider},
            # Its own trunk nodes only: Kube-OVN counts every Node it does not exclude.
            "spec": {"defaultInterface": "uplink", "nodeSelector": {"matchLabels": {self.TRUNK_LABEL: "true"}}},
        }]
        docs += [{
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": ch.name, "labels": {self.TRUNK_LABEL: "true", "kubernetes.io/hostname": ch.name}},
            # A trunk kubelet's node takes only the pods that tolerate it (hack/bed/trunk_kubelet.py).
            **({"spec": {"taints": [TRUNK_TAINT]}} if ch.name in self.trunk_kubelet_kubeconfigs else {}),
        } for ch in dp.chassis]
        docs += rbac_objects(self._peer_files()["kube-ovn-role"])
        if self.multus:
            docs += multus_rbac_objects()
        self.apply_docs(docs, "the data plane's trunk Nodes, ProviderNetwork and node agents' identity")
        if self.multus:
            self._ensure_nad_crd()

    def _make_node_agents(self) -> None:
        dp = self.dataplane
        assert dp is not None
        dp.agents = {ch.name: NodeAgent(dp, ch, self._peer_files()["kube-ovn-daemon"], self.agent_kubeconfig,
                                        self.server, detach=self.detach) for ch in dp.chassis}

    def _spawn_node_agents(self) -> None:
        self._make_node_agents()
        self._agents_t0 = time.monotonic()
        try:
            for agent in self.dataplane.agents.values():  # type: ignore[union-attr]
                agent.start()
        except NodeAgentError as e:
            raise ClusterError(f"node agent: {e}") from e

    def _wait_node_agents(self) -> None:
        """Each agent's Node written by it and each chassis in the SB. The ProviderNetwork's
        status is not waited for: kube-ovn-controller rewrites it every 30 s only, and what
        needs it (a zone's Ready) follows it."""
        dp = self.dataplane
        assert dp is not None
        ready_label = f"{dp.provider}.provider-network.kubernetes.io/ready"
        remaining = lambda: max(1.0, self._agents_t0 + self.start_timeout - time.monotonic())  # noqa: E731
        try:
            wait_agents(list(dp.agents.values()), lambda name: self._api_get(f"/api/v1/nodes/{name}"), ready_label,
                        self.start_timeout)
            dp.wait_registered(remaining())
        except (NodeAgentError, DataPlaneError) as e:
            raise ClusterError(f"node agent: {e}") from e
        self.agents_seconds = time.monotonic() - self._agents_t0

    def _start_trunk_kubelets(self) -> None:
        """containerd + kubelet on each trunk node that has one, with Kube-OVN's CNI; returns
        once each Node is Ready."""
        dp = self.dataplane
        assert dp is not None and self.node is not None
        cni_binary = self._peer_files()["kube-ovn-cni"]
        t0 = time.monotonic()
        try:
            for ch in dp.chassis:
                if ch.name not in self.trunk_kubelet_kubeconfigs:
                    continue
                cni = functools.partial(write_cni_config, daemon_socket=daemon_socket(ch), cni_binary=cni_binary)
                extra: tuple[Path, ...] = ()
                if self.multus:
                    assert self.egress_dir is not None
                    cni = functools.partial(self._multus_cni, cni)
                    extra = (self.egress_dir / "egress.tar",)
                tk = TrunkKubelet(dp, ch, self.bin_dir, self.node.images, self.trunk_kubelet_kubeconfigs[ch.name],
                                  self.ca_file, self.pki["sa_key"], cni, detach=self.detach, extra_images=extra)
                self.trunk_kubelets[ch.name] = tk
                tk.start(self.start_timeout)
            for tk in self.trunk_kubelets.values():
                tk.wait_ready(lambda name: self._api_get(f"/api/v1/nodes/{name}"),
                              max(1.0, t0 + self.start_timeout - time.monotonic()))
        except TrunkKubeletError as e:
            raise ClusterError(f"trunk kubelet: {e}") from e
        self.trunk_kubelets_seconds = time.monotonic() - t0

    # Multus on the trunk kubelets (hack/bed/multus.py) ------------------------------

    def _build_egress(self) -> None:
        """hack/build-egress.sh (cached): Multus's plugin and the egress gateway's image."""
        try:
            self.egress_dir = egress_dir()
            refs = egress_refs(self.egress_dir)
        except (MultusError, OSError) as e:
            raise ClusterError(f"multus: {e}") from e
        self.egress_image = refs["EGRESS_IMAGE"]
        self._multus_binary = Path(refs["MULTUS_BIN"])

    def _multus_cni(self, kube_ovn: Any, conf_dir: Path, bin_dir: Path) -> None:
        """A trunk node's CNI directories: Kube-OVN's (``kube_ovn(conf_dir, bin_dir)``), then
        Multus before it, delegating to its conflist; Multus's state in ``<node>/cni/multus``."""
        conflist = kube_ovn(conf_dir, bin_dir)
        write_multus_config(conf_dir, bin_dir, self._multus_binary, self.multus_kubeconfig, conflist,
                            conf_dir.parent / "multus")

    def _ensure_nad_crd(self) -> None:
        """The NetworkAttachmentDefinition CRD (the fixture of tests/fixtures/crds) served
        before kube-ovn-controller starts (it watches attachments only when served)."""
        if self._api_get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{NAD_CRD}") is not None:
            return
        crd = REPO_ROOT / "tests" / "fixtures" / "crds" / "multus-network-attachment-definition.yaml"
        self.apply_docs([d for d in yaml.safe_load_all(crd.read_text()) if d], "the NetworkAttachmentDefinition CRD")
        self.run_kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{NAD_CRD}")

    # ------------------------------------------------------------------ environment

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
