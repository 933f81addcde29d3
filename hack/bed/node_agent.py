"""Kube-OVN's node agent (``kube-ovn-daemon`` of kube-ovn-cni, hack/build-peers.sh) on one
trunk node of a running bed with a data plane, by hand::

    python3 -m hack.bed.node_agent --dir DIR --node trunk-1     # runs until SIGTERM/SIGINT

It runs inside the chassis' network namespace against that chassis' own ovsdb-server, as the
ServiceAccount ``kube-system/kube-ovn-cni`` bound to the ClusterRole ``system:kube-ovn-cni``
of Kube-OVN's chart (``ovn-CR.yaml``/``ovn-CRB.yaml``), with the arguments and environment of
the chart's ``cni-server`` container. The agent then writes the Node's
``ovn.kubernetes.io/chassis`` annotation, the provider's ``ready``/``interface``/``mtu``
labels, the bridge mappings and chassis MAC of the provider, ``ovn-encap-ip``, ``ovn0`` on
the join subnet, and its iptables rules and ipsets (inside the namespace).

What cannot run here as on a node, and the smallest stand-in for each (the rest of the
chart's container runs as it is):

* the API server listens on the host's loopback, which a network namespace does not reach:
  two ``socat`` processes carry 127.0.0.1:<port> in the namespace over a unix socket of the
  work directory to the API server (the server's certificate names 127.0.0.1);
* hard-coded paths (``/etc/openvswitch/system-id.conf``, ``/run/openvswitch``, ``/run/ovn``,
  ``/var/log/kube-ovn``): a private mount namespace shows the chassis' run directory at
  ``/run/openvswitch`` and ``/run/ovn``, an overlay of ``/etc`` with the chassis'
  ``system-id.conf`` (which ``ovs-ctl --system-id=random`` writes in Kube-OVN's OVS
  container), and a ``/var/log`` of the work directory; the host's are never touched;
* ``ovs-appctl`` targets ``<component>.<pid>.ctl``; the bed names its control sockets
  ``<component>.ctl``, so a link of the first name points at the second;
* the provider bridge: with ``br-int`` on the userspace datapath the agent takes the node for
  an OVS-DPDK one. It creates ``br-<provider>`` with the system datapath (which needs the
  ``openvswitch`` kernel module: ovs-vswitchd logs "failed to open datapath of type system")
  and never adds the NIC to it. The stand-in makes ``br-<provider>`` itself, on the userspace
  datapath, with the trunk NIC ``uplink`` in it (what Kube-OVN's DPDK set-up does);
* a stale ``kube-ovn-daemon.sock`` is removed first, as ``start-cniserver.sh`` does.

Nothing here changes the bed's own playing of the agent for the other trunk nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from hack.bed.builds import OVN_PREFIX
from hack.bed.dataplane import PROVIDER_BRIDGE, Chassis, DataPlane

AGENT_NAMESPACE = "kube-system"
AGENT_SA = "kube-ovn-cni"
AGENT_ROLE = "system:kube-ovn-cni"
# The chart's Role for the IPsec CA secret the agent watches (ovn-CR.yaml).
AGENT_SECRET_ROLE = "secret-reader-ovn-ipsec"
# The bed's kube-ovn-controller is started with this service range (hack/bed/peers.py).
SERVICE_CIDR = "10.96.0.0/16"


def provider_bridge(provider: str) -> str:
    """Kube-OVN's name for a provider network's OVS bridge (pkg/util ExternalBridgeName)."""
    return f"br-{provider}"


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


# Run inside the chassis' network namespace: a private mount namespace with the paths the
# agent hard-codes, then exec the agent (so the pid stays the agent's).
_MOUNTS = r'''
W=$1 RD=$2; shift 2
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$W/etc-upper,workdir=$W/etc-work" /etc
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
    """kube-ovn-daemon on ``chassis`` of ``dp``, its files under ``<workdir>/node-agent/<node>``.

    :param server: the API server's ``https://127.0.0.1:<port>`` URL.
    :param ca_file: its CA.
    :param token: a token of ``kube-system/kube-ovn-cni``.
    """

    def __init__(self, dp: DataPlane, chassis: Chassis, daemon: Path, server: str, ca_file: str, token: str) -> None:
        self.dp, self.chassis, self.daemon = dp, chassis, daemon
        self.server, self.ca_file, self.token = server, ca_file, token
        self.dir = dp.workdir / "node-agent" / chassis.name
        self.procs: list[subprocess.Popen] = []

    def prepare(self) -> None:
        """The stand-ins of the module docstring, on the chassis (idempotent): the provider
        bridge ``br-<provider>`` on the userspace datapath with ``uplink`` (the bed's
        ``br-phys`` and the mappings it set go: the agent writes its own), the
        ``system-id.conf``, the ``<component>.<pid>.ctl`` links and the kubeconfig."""
        ch, dp = self.chassis, self.dp
        bridge = provider_bridge(dp.provider)
        dp.vsctl(ch.ns, ch.rundir, "--if-exists", "del-br", PROVIDER_BRIDGE)
        dp.vsctl(ch.ns, ch.rundir, "--may-exist", "add-br", bridge, "--", "set", "bridge", bridge,
                 "datapath_type=netdev", "--", "--may-exist", "add-port", bridge, "uplink")
        dp.vsctl(ch.ns, ch.rundir, "remove", "open_vswitch", ".", "external_ids", "ovn-bridge-mappings",
                 "ovn-chassis-mac-mappings")
        for d in ("etc-upper/openvswitch", "etc-work", "var-log/kube-ovn", "host-run"):
            (self.dir / d).mkdir(parents=True, exist_ok=True)
        (self.dir / "etc-upper/openvswitch/system-id.conf").write_text(ch.system_id)
        for component in ("ovs-vswitchd", "ovn-controller"):
            pid = (ch.rundir / f"{component}.pid").read_text().strip()
            link = ch.rundir / f"{component}.{pid}.ctl"
            if not link.exists():
                link.symlink_to(f"{component}.ctl")
        (ch.rundir / "kube-ovn-daemon.sock").unlink(missing_ok=True)
        port = self.server.rsplit(":", 1)[1]
        kubeconfig = {
            "apiVersion": "v1", "kind": "Config", "current-context": "bed",
            "clusters": [{"name": "bed", "cluster": {"server": self.server, "certificate-authority": self.ca_file}}],
            "users": [{"name": AGENT_SA, "user": {"token": self.token}}],
            "contexts": [{"name": "bed", "context": {"cluster": "bed", "user": AGENT_SA}}],
        }
        path = self.dir / "kubeconfig"
        path.write_text(json.dumps(kubeconfig))
        path.chmod(0o600)
        self.api_port = port

    def start(self) -> None:
        """The API forwarders, then the agent (its output in ``<dir>/kube-ovn-daemon.out``)."""
        sock = self.dir / "api.sock"
        sock.unlink(missing_ok=True)
        host = subprocess.Popen(["socat", f"UNIX-LISTEN:{sock},fork", f"TCP:127.0.0.1:{self.api_port}"])
        self.procs.append(host)
        deadline = time.monotonic() + 5
        while not sock.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"socat made no {sock}")
            time.sleep(0.02)
        self.procs.append(subprocess.Popen([
            "ip", "netns", "exec", self.chassis.ns, "socat",
            f"TCP-LISTEN:{self.api_port},bind=127.0.0.1,fork,reuseaddr", f"UNIX-CONNECT:{sock}"]))
        ch = self.chassis
        env = dict(self.dp.env, OVS_RUNDIR="/run/openvswitch", OVN_RUNDIR="/run/ovn",
                   KUBECONFIG=str(self.dir / "kubeconfig"), NODE_NAME=ch.name,
                   POD_NAME=f"kube-ovn-cni-{ch.name}", POD_NAMESPACE=AGENT_NAMESPACE,
                   POD_IP=ch.encap_ip, POD_IPS=ch.encap_ip, ENABLE_BIND_LOCAL_IP="true")
        argv = ["ip", "netns", "exec", ch.ns, "unshare", "--mount", "--propagation", "private", "--",
                "sh", "-ec", _MOUNTS, "sh", str(self.dir), str(ch.rundir),
                str(self.daemon), *agent_args(self.dir / "kubeconfig")]
        out = open(self.dir / "kube-ovn-daemon.out", "ab")
        self.procs.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT))

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        self.procs.clear()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, type=Path, help="the running bed's work directory")
    ap.add_argument("--node", required=True, help="the trunk Node (e.g. trunk-1)")
    args = ap.parse_args(argv)
    state = json.loads((args.dir / "state.json").read_text())
    if not state.get("with_dataplane") or OVN_PREFIX is None:
        print("the bed has no data plane on Kube-OVN's OVS/OVN build", file=sys.stderr)
        return 2
    dp = DataPlane(args.dir, OVN_PREFIX, state["sb_unix"], state["dataplane_provider"],
                   chassis=state["dataplane_chassis"], node_prefix=state["dataplane_node_prefix"])
    chassis = next((c for c in dp.chassis if c.name == args.node), None)
    if chassis is None:
        print(f"no trunk node {args.node} (have {[c.name for c in dp.chassis]})", file=sys.stderr)
        return 2
    peers = Path(state["peers_dir"])
    kubectl = [state["kubectl"], f"--kubeconfig={state['admin_kubeconfig']}"]
    manifest = "\n---\n".join(json.dumps(d) for d in rbac_objects(peers / "rbac/kube-ovn/ovn-CR.yaml"))
    subprocess.run([*kubectl, "apply", "-f", "-"], input=manifest, text=True, check=True, capture_output=True)
    token = subprocess.run([*kubectl, "-n", AGENT_NAMESPACE, "create", "token", AGENT_SA, "--duration=24h"],
                           text=True, check=True, capture_output=True).stdout.strip()
    agent = NodeAgent(dp, chassis, peers / "bin" / "kube-ovn-daemon", state["server"], state["ca_file"], token)
    agent.prepare()
    agent.start()
    print(f"kube-ovn-daemon on {chassis.name} ({chassis.ns}); log: {agent.dir / 'kube-ovn-daemon.out'}", flush=True)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    try:
        while not stopping and all(p.poll() is None for p in agent.procs):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
