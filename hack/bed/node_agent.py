"""Kube-OVN's node agent (``kube-ovn-daemon`` of kube-ovn-cni v1.15.24, hack/build-peers.sh) on
each trunk node of a bed with a data plane, a component of the bed (hack/bed/cluster.py).

It runs inside the chassis' network namespace against that chassis' own ovsdb-server, as the
ServiceAccount ``kube-system/kube-ovn-cni`` (a static token of the bed's token file, as the
other peers) bound to the ClusterRole ``system:kube-ovn-cni`` of Kube-OVN's chart
(``ovn-CR.yaml``/``ovn-CRB.yaml``), with the arguments and environment of the chart's
``cni-server`` container. The agent writes the Node's ``ovn.kubernetes.io/chassis``
annotation, the provider's ``ready``/``interface``/``mtu`` labels, the bridge mappings and
chassis MAC of the provider, ``ovn-encap-ip``, ``ovn0`` on the join subnet, and its iptables
rules and ipsets (inside the namespace); kube-ovn-controller then writes the
ProviderNetwork's status from those labels.

What cannot run here as on a node, and the smallest stand-in for each (the rest of the
chart's container runs as it is):

* the API server listens on the host's loopback, which a network namespace does not reach:
  two ``socat`` processes carry 127.0.0.1:<port> in the namespace over a unix socket of the
  work directory to the API server (the server's certificate names 127.0.0.1);
* hard-coded paths (``/etc/openvswitch/system-id.conf``, ``/run/openvswitch``, ``/run/ovn``,
  ``/var/log/kube-ovn``): a private mount namespace shows the chassis' run directory at
  ``/run/openvswitch`` and ``/run/ovn``, an overlay of ``/etc`` with the chassis'
  ``system-id.conf`` (the data plane writes it, as ``ovs-ctl --system-id=random`` does in
  Kube-OVN's OVS container), and a ``/var/log`` of the work directory; the host's are never
  touched;
* ``ovs-appctl`` targets ``<component>.<pid>.ctl``: the data plane links those names to its
  control sockets (hack/bed/dataplane.py);
* the provider bridge ``br-<provider>`` with the trunk NIC ``uplink``: the data plane makes
  it on the userspace datapath (see hack/bed/dataplane.py for what the agent does instead);
* a stale ``kube-ovn-daemon.sock`` is removed first, as ``start-cniserver.sh`` does.

Each process has a pid file in ``<workdir>/dataplane/agent-<node>/`` (``kube-ovn-daemon.pid``,
``api-forward-host.pid``, ``api-forward-ns.pid``), so ``hack/cluster.py stop`` and
:func:`~hack.bed.dataplane.cleanup_leftovers` reach them; the agent's output goes to
``kube-ovn-daemon.log`` there.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Callable

import yaml

from hack.bed.dataplane import Chassis, DataPlane
from hack.bed.procs import _tail, spawn, stop_pidfiles

AGENT_NAMESPACE = "kube-system"
AGENT_SA = "kube-ovn-cni"
AGENT_USER = f"system:serviceaccount:{AGENT_NAMESPACE}:{AGENT_SA}"
AGENT_ROLE = "system:kube-ovn-cni"
# The field manager of the agent's writes (client-go's default: the binary's name).
AGENT_MANAGER = "kube-ovn-daemon"
# The chart's Role for the IPsec CA secret the agent watches (ovn-CR.yaml).
AGENT_SECRET_ROLE = "secret-reader-ovn-ipsec"
# The bed's kube-ovn-controller is started with this service range (hack/bed/peers.py).
SERVICE_CIDR = "10.96.0.0/16"
# The agent's processes, each with its pid file in the agent's directory, stopped in this order.
AGENT_PROCS = ("kube-ovn-daemon", "api-forward-ns", "api-forward-host")


class NodeAgentError(RuntimeError):
    """A node agent's process exited or failed to start."""


def rbac_objects(role_file: Path) -> list[dict]:
    """The agent's identity as Kube-OVN's chart gives it: its ServiceAccount, the chart's
    ClusterRole ``system:kube-ovn-cni`` and Role ``secret-reader-ovn-ipsec`` from the
    rendered ``ovn-CR.yaml`` (``role_file``) and their bindings (``ovn-CRB.yaml``).

    :raises ValueError: ``role_file`` lacks one of the two roles.
    """
    docs = [d for d in yaml.safe_load_all(role_file.read_text()) if isinstance(d, dict)]
    out: list[dict] = [{"apiVersion": "v1", "kind": "ServiceAccount",
                        "metadata": {"name": AGENT_SA, "namespace": AGENT_NAMESPACE}}]
    for kind, name in (("ClusterRole", AGENT_ROLE), ("Role", AGENT_SECRET_ROLE)):
        found = [d for d in docs if d.get("kind") == kind and d["metadata"]["name"] == name]
        if len(found) != 1:
            raise ValueError(f"{role_file} has {len(found)} {kind}s named {name!r}, expected one")
        if kind == "Role":
            found[0]["metadata"]["namespace"] = AGENT_NAMESPACE
        out.append(found[0])
    subject = [{"kind": "ServiceAccount", "name": AGENT_SA, "namespace": AGENT_NAMESPACE}]
    out.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": AGENT_SA},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": AGENT_ROLE},
                "subjects": subject})
    for name, role in ((AGENT_SA, "extension-apiserver-authentication-reader"),
                       (f"{AGENT_SA}-secret-reader", AGENT_SECRET_ROLE)):
        out.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": name, "namespace": AGENT_NAMESPACE},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                    "subjects": subject})
    return out


def agent_args(kubeconfig: Path) -> list[str]:
    """The chart's ``cni-server`` arguments (ovncni-ds.yaml, default values), with the
    bed's service range and the kubeconfig of the agent's identity."""
    return [
        f"--kubeconfig={kubeconfig}", "--ovs-socket=/run/openvswitch/db.sock",
        "--bind-socket=/run/openvswitch/kube-ovn-daemon.sock", "--enable-mirror=false",
        "--mirror-iface=mirror0", "--node-switch=join", "--encap-checksum=true",
        f"--service-cluster-ip-range={SERVICE_CIDR}", "--iface=", "--dpdk-tunnel-iface=br-phy",
        "--network-type=geneve", "--default-interface-name=", "--logtostderr=false",
        "--alsologtostderr=true", "--log_file=/var/log/kube-ovn/kube-ovn-cni.log", "--log_file_max_size=200",
        "--enable-metrics=true", "--kubelet-dir=/var/lib/kubelet", "--enable-tproxy=false",
        "--ovs-vsctl-concurrency=100", "--secure-serving=false", "--enable-ovn-ipsec=false",
        "--set-vxlan-tx-off=false", "--non-primary-cni-mode=false",
    ]


# Run inside the chassis' network namespace: a mount namespace with the paths the agent
# hard-codes, then exec the agent (so the pid stays the agent's). Slave propagation: the
# pods' network namespaces, bound under the host's /run/netns after the agent started, must
# show there too (a private copy shows the bare file: "unknown FS magic"); nothing of the
# agent's mounts goes back to the host.
_MOUNTS = r'''
W=$1 RD=$2; shift 2
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$W/etc-upper,workdir=$W/etc-work" /etc
mkdir -p /etc/openvswitch
touch /etc/openvswitch/system-id.conf
mount --bind "$RD/system-id.conf" /etc/openvswitch/system-id.conf
mount --rbind /run "$W/host-run"
mount -t tmpfs tmpfs /run
mkdir -p /run/openvswitch /run/ovn /run/netns
mount --bind "$RD" /run/openvswitch
mount --bind "$RD" /run/ovn
mount --rbind "$W/host-run/netns" /run/netns
touch /run/xtables.lock
mount --bind "$W/var-log" /var/log
exec "$@"
'''


class NodeAgent:
    """kube-ovn-daemon on ``chassis`` of ``dp``, its files under ``<workdir>/dataplane/agent-<node>``.

    :param daemon: the ``kube-ovn-daemon`` binary.
    :param kubeconfig: the kubeconfig of ``kube-system/kube-ovn-cni`` (server ``https://127.0.0.1:<port>``).
    :param server: the API server's URL (its port is forwarded into the namespace).
    :param detach: the processes outlive this Python process (else they die with it).
    """

    def __init__(self, dp: DataPlane, chassis: Chassis, daemon: Path, kubeconfig: Path, server: str,
                 detach: bool = False) -> None:
        self.dp, self.chassis, self.daemon, self.kubeconfig = dp, chassis, daemon, kubeconfig
        self.api_port = server.rsplit(":", 1)[1]
        self.detach = detach
        self.dir = dp.dir / f"agent-{chassis.name}"
        self.log = self.dir / "kube-ovn-daemon.log"
        self._procs: dict[str, subprocess.Popen] = {}

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        proc = spawn(argv, self.dir / f"{name}.log", self.dir / f"{name}.pid", detach=self.detach, env=env)
        self._procs[name] = proc
        return proc

    def start(self) -> None:
        """The API forwarders, then the agent (its output in :attr:`log`); returns once spawned.

        :raises NodeAgentError: the host-side forwarder made no socket within 5 s.
        """
        ch = self.chassis
        for d in ("etc-upper", "etc-work", "var-log/kube-ovn", "host-run"):
            (self.dir / d).mkdir(parents=True, exist_ok=True)
        (ch.rundir / "kube-ovn-daemon.sock").unlink(missing_ok=True)
        sock = self.dir / "api.sock"
        sock.unlink(missing_ok=True)
        host, inside = api_forwarders(sock, self.api_port, ch.ns, "127.0.0.1", self.api_port)
        self._spawn("api-forward-host", host)
        deadline = time.monotonic() + 5
        while not sock.exists():
            if time.monotonic() > deadline:
                raise NodeAgentError(f"socat made no {sock}")
            time.sleep(0.02)
        self._spawn("api-forward-ns", inside)
        env = dict(self.dp.env, OVS_RUNDIR="/run/openvswitch", OVN_RUNDIR="/run/ovn",
                   KUBECONFIG=str(self.kubeconfig), NODE_NAME=ch.name,
                   POD_NAME=f"kube-ovn-cni-{ch.name}", POD_NAMESPACE=AGENT_NAMESPACE,
                   POD_IP=ch.encap_ip, POD_IPS=ch.encap_ip, ENABLE_BIND_LOCAL_IP="true")
        argv = ["ip", "netns", "exec", ch.ns, "unshare", "--mount", "--propagation", "slave", "--",
                "sh", "-ec", _MOUNTS, "sh", str(self.dir), str(ch.rundir),
                str(self.daemon), *agent_args(self.kubeconfig)]
        self._spawn("kube-ovn-daemon", argv, env=env)

    def check_alive(self) -> None:
        """:raises NodeAgentError: one of the agent's processes has exited."""
        for name, proc in self._procs.items():
            if proc.poll() is not None:
                raise NodeAgentError(f"{name} of {self.chassis.name} exited with {proc.returncode}; last lines of "
                                     f"{self.dir / (name + '.log')}:\n{_tail(self.dir / (name + '.log'))}")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM each process (SIGKILL after ``timeout``), by pid file too (another process's
        agent); removes the pid files."""
        stop_agent_dir(self.dir, timeout, self._procs)
        self._procs.clear()


def api_forwarders(sock: Path, api_port: str | int, ns: str, address: str,
                   port: str | int) -> tuple[list[str], list[str]]:
    """The two ``socat`` processes that put the host's API server (``127.0.0.1:<api_port>``)
    on ``address:port`` inside network namespace ``ns`` through the Unix socket ``sock`` (a
    Unix socket crosses namespaces): the host side, which makes ``sock``, then the side in the
    namespace, started once ``sock`` exists. Their argv, in that order."""
    host = ["socat", f"UNIX-LISTEN:{sock},fork", f"TCP:127.0.0.1:{api_port}"]
    inside = ["ip", "netns", "exec", ns, "socat", f"TCP-LISTEN:{port},bind={address},fork,reuseaddr",
              f"UNIX-CONNECT:{sock}"]
    return host, inside


def stop_agent_dir(d: Path, timeout: float = 10.0, procs: dict[str, subprocess.Popen] | None = None) -> None:
    """Stop the agent processes whose pid files are in ``d`` (in :data:`AGENT_PROCS` order)."""
    stop_pidfiles(d, AGENT_PROCS, timeout, procs)


def stop_all(workdir: Path, timeout: float = 10.0) -> None:
    """Stop every node agent of the bed in ``workdir`` (by their pid files)."""
    for d in sorted((Path(workdir).resolve() / "dataplane").glob("agent-*")):
        stop_agent_dir(d, timeout)


def managed_by_agent(node: dict, field: tuple[str, ...]) -> bool:
    """Whether ``field`` of the Node (``f:metadata`` path below it, e.g.
    ``("f:annotations", "f:ovn.kubernetes.io/chassis")``) is in the managed fields of
    :data:`AGENT_MANAGER`."""
    for entry in (node.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") != AGENT_MANAGER:
            continue
        fields = ((entry.get("fieldsV1") or {}).get("f:metadata")) or {}
        for part in field:
            fields = fields.get(part) if isinstance(fields, dict) else None
        if fields is not None:
            return True
    return False


def agent_pending(node: dict | None, system_id: str, ready_label: str) -> str:
    """What the agent has still to write on its Node ("" when done): the chassis annotation
    ``system_id`` and ``ready_label`` ``"true"``, both in its managed fields."""
    if node is None:
        return "no Node"
    meta = node.get("metadata") or {}
    annotation = (meta.get("annotations") or {}).get("ovn.kubernetes.io/chassis")
    if annotation != system_id:
        return f"chassis annotation {annotation!r}, not {system_id!r}"
    if (meta.get("labels") or {}).get(ready_label) != "true":
        return f"no {ready_label}=true"
    for field in (("f:annotations", "f:ovn.kubernetes.io/chassis"), ("f:labels", f"f:{ready_label}")):
        if not managed_by_agent(node, field):
            return f"{field[-1][2:]} not managed by {AGENT_MANAGER}"
    return ""


def wait_agents(agents: list[NodeAgent], get_node: Callable[[str], dict | None], ready_label: str,
                timeout: float) -> None:
    """Wait until each agent's Node has the chassis annotation and ``ready_label`` written by
    the agent (:func:`agent_pending`).

    :raises NodeAgentError: an agent exited, or ``timeout`` seconds passed (with what is missing).
    """
    deadline = time.monotonic() + timeout
    pending = {a.chassis.name: "not read yet" for a in agents}
    while time.monotonic() < deadline:
        for a in agents:
            a.check_alive()
            if pending.get(a.chassis.name):
                pending[a.chassis.name] = agent_pending(get_node(a.chassis.name), a.chassis.system_id, ready_label)
        pending = {k: v for k, v in pending.items() if v}
        if not pending:
            return
        time.sleep(0.2)
    raise NodeAgentError(f"node agents not done after {timeout:.0f}s: {pending} "
                         f"(logs: {agents[0].dp.dir}/agent-*/kube-ovn-daemon.log)")
