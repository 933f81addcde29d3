"""A kubelet on a trunk node: containerd and the kubelet inside the trunk node's network
namespace, with Kube-OVN's CNI (hack/bed/kube_ovn_cni.py) talking to that node's own
``kube-ovn-daemon`` (hack/bed/node_agent.py), so a Pod the scheduler places there gets its
port from the real agent and its address from the real kube-ovn-controller.

The node's files and processes are a :class:`~hack.bed.node.Node` in namespace mode (its own
containerd root, socket and cgroup root ``/pnc-<hash>-<node>``; node IP = the chassis'
underlay address; kubelet ports 10250/10248 inside the namespace). The bed's kube-scheduler
and kube-controller-manager (the bed's own node) serve it; the API server is reached at
``127.0.0.1:<port>`` inside the namespace through the node agent's forwarder, so the
kubelet's kubeconfig is the host's. It runs as ``system:node:<node>`` (its own static token).

The bed taints the Node ``pnc-testbed/trunk-node=true:NoSchedule`` (hack/bed/cluster.py), so
only pods that tolerate it land there: the controller's own Deployment keeps running on the
bed's node with its bridge network, which reaches the API server.

Each process has a pid file in ``<workdir>/dataplane/kubelet-<node>/`` (``kubelet.pid``,
``containerd.pid``), stopped by :func:`stop_all` (pods first, while the API server is up).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence

from hack.bed.dataplane import Chassis, DataPlane
from hack.bed.node import Node, NodeError
from hack.bed.procs import _tail, pid_alive, spawn, terminate_pid

# The taint that keeps every pod but the tests' own off a trunk node.
TRUNK_TAINT = {"key": "pnc-testbed/trunk-node", "value": "true", "effect": "NoSchedule"}
# What a pod that belongs on a trunk node (the tests' pods, the egress gateways) tolerates.
TRUNK_TOLERATION = {"key": TRUNK_TAINT["key"], "operator": "Exists", "effect": TRUNK_TAINT["effect"]}
KUBELET_PORTS = (10250, 10248)  # inside the node's own namespace
TRUNK_KUBELET_PROCS = ("kubelet", "containerd")  # stopped in this order
NODE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

_NETNS = re.compile(r"/var/run/netns/cni-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}")


class TrunkKubeletError(RuntimeError):
    """A trunk kubelet's process exited, or its Node did not become Ready."""


class TrunkKubelet:
    """containerd + kubelet of ``chassis``, files under ``<workdir>/node-<node>``, pid files
    under ``<workdir>/dataplane/kubelet-<node>``.

    :param bin_dir: where ``kubelet`` is (hack/build-control-plane.sh --node).
    :param images: hack/build-pause.sh's output directory (None: run it).
    :param kubeconfig: the kubeconfig of ``system:node:<node>``.
    :param cni: ``cni(conf_dir, bin_dir)`` writes the CNI configuration and the plugins
        (:meth:`~hack.bed.node.Node.prepare`; hack/bed/kube_ovn_cni.py).
    :param extra_images: OCI archives imported after the node's own images (the egress
        gateway's of hack/build-egress.sh when the bed runs Multus).
    """

    def __init__(self, dp: DataPlane, chassis: Chassis, bin_dir: Path, images: Path | None, kubeconfig: Path,
                 ca_file: Path, sa_key: Path, cni: Callable[[Path, Path], object], detach: bool = False,
                 extra_images: Sequence[Path] = ()) -> None:
        self.dp, self.chassis = dp, chassis
        self.node = Node(dp.workdir, bin_dir, images, name=chassis.name, netns=chassis.ns, ip=chassis.encap_ip,
                         subdir=f"node-{chassis.name}")
        self.kubeconfig, self.ca_file, self.sa_key, self.cni = kubeconfig, ca_file, sa_key, cni
        self.detach = detach
        self.extra_images = tuple(extra_images)
        self.dir = dp.dir / f"kubelet-{chassis.name}"
        self._procs: dict[str, subprocess.Popen] = {}
        self.ready_seconds: float | None = None

    def _spawn(self, name: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._procs[name] = spawn(self.node.command(name), self.dir / f"{name}.log", self.dir / f"{name}.pid",
                                  detach=self.detach, env=dict(NODE_ENV, HOME=str(self.dp.workdir)))

    def check_alive(self) -> None:
        """:raises TrunkKubeletError: containerd or the kubelet has exited."""
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                raise TrunkKubeletError(f"{name} of {self.chassis.name} exited with {proc.returncode}; last lines "
                                        f"of {self.dir / (name + '.log')}:\n{_tail(self.dir / (name + '.log'))}")

    def start(self, timeout: float) -> None:
        """The node's files, containerd (with the pause and busybox images and
        ``extra_images``), then the kubelet; returns once spawned.

        :raises TrunkKubeletError: containerd did not answer within ``timeout`` or an image
            import failed.
        """
        try:
            self.node.prepare(ports=KUBELET_PORTS, ca_file=self.ca_file,
                              kubeconfigs={"kubelet": self.kubeconfig, "kube-scheduler": self.kubeconfig,
                                           "kube-controller-manager": self.kubeconfig},
                              sa_key=self.sa_key, cni=self.cni)
            self._spawn("containerd")
            self.node.wait_containerd(self.check_alive, timeout)
            self.node.import_images(self.extra_images)
        except NodeError as e:
            raise TrunkKubeletError(f"{self.chassis.name}: {e}") from e
        self._t0 = time.monotonic()
        self._spawn("kubelet")

    def wait_ready(self, get_node: Callable[[str], dict | None], timeout: float) -> None:
        """Until the Node is Ready (the kubelet's status; the bed's own taint stays).

        :raises TrunkKubeletError: a process exited, or ``timeout`` seconds passed."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            self.check_alive()
            node = get_node(self.chassis.name)
            conds = {c["type"]: c for c in ((node or {}).get("status") or {}).get("conditions") or []}
            ready = conds.get("Ready") or {}
            taints = [t["key"] for t in ((node or {}).get("spec") or {}).get("taints") or []
                      if t.get("key") != TRUNK_TAINT["key"] and t.get("effect") in ("NoSchedule", "NoExecute")]
            if ready.get("status") == "True" and not taints:
                self.ready_seconds = time.monotonic() - self._t0
                return
            last = f"Ready {ready.get('status')!r} ({ready.get('message')}), taints {taints}"
            time.sleep(0.1)
        raise TrunkKubeletError(f"Node {self.chassis.name} not Ready after {timeout:.0f}s: {last}; "
                                f"log {self.dir / 'kubelet.log'}")

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the kubelet, remove the containers left (their CNI DEL runs while the agent
        is up), stop containerd, then clean the node's leftovers."""
        stop_kubelet_dir(self.dir, self.node, timeout)
        self._procs.clear()


def stop_kubelet_dir(d: Path, node: Node | None, timeout: float = 10.0) -> None:
    """Stop the trunk kubelet whose pid files are in ``d``; with ``node``, its containers and
    leftovers too (cgroup root, shims, mounts)."""
    for name in TRUNK_KUBELET_PROCS:
        pidfile = d / f"{name}.pid"
        if name == "containerd" and node is not None:
            node.remove_containers()
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            continue
        if pid_alive(pid):
            terminate_pid(pid, timeout)
        pidfile.unlink(missing_ok=True)
    if node is not None:
        node.cleanup()
        # A sandbox whose network teardown failed (a CNI DEL refused) loses its container
        # record but keeps its namespace file; this node's runtime and agent logged each one.
        node.remove_netns(logged_netns(d, d.parent / f"agent-{d.name.removeprefix('kubelet-')}"))


def logged_netns(*dirs: Path) -> set[str]:
    """The sandbox network namespace files (``/var/run/netns/cni-<uuid>``) named in the logs
    under ``dirs``: the trunk kubelet's (containerd's, with its CNI plugins' output) and the
    node agent's (every port request names its sandbox)."""
    found: set[str] = set()
    for d in dirs:
        for log in d.rglob("*.log"):
            with contextlib.suppress(OSError):
                found.update(_NETNS.findall(log.read_text(errors="replace")))
    return found


def stop_all(workdir: Path, bin_dir: Path, timeout: float = 10.0) -> None:
    """Stop every trunk kubelet of the bed in ``workdir`` (by their pid files), with their
    containers and leftovers."""
    dp_dir = Path(workdir).resolve() / "dataplane"
    for d in sorted(dp_dir.glob("kubelet-*")):
        name = d.name.removeprefix("kubelet-")
        # Any namespace name: cleaning up needs only the node's paths, socket and cgroup root.
        node = Node(Path(workdir).resolve(), bin_dir, None, name=name, netns="-", subdir=f"node-{name}")
        stop_kubelet_dir(d, node, timeout)
