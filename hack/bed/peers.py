"""The bed's real peers, kube-ovn-controller and the in-cluster IPAM provider of
hack/build-peers.sh: their files, RBAC, commands, start and readiness, and the faults a test
makes with them (stop, start, kill, pause, resume): the :class:`Peers` mixin of
:class:`~hack.bed.cluster.LocalCluster`."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import yaml

from hack.bed.builds import OVN_PREFIX, _read_versions
from hack.bed.common import (
    IPAM_NAMESPACE, IPAM_ROLE, IPAM_SA, KUBE_OVN_NAMESPACE, KUBE_OVN_POD, KUBE_OVN_ROLE, KUBE_OVN_SA,
    PEER_READY_LINES, PEERS, VPC_NAT_CONFIG, ClusterError,
)
from hack.bed.procs import free_ports, pid_alive, pid_state, wait_dead


def _wait_state(pid: int, stopped: bool, timeout: float = 10.0) -> None:
    """Wait until ``pid`` is stopped (SIGSTOP delivered) or, with ``stopped=False``, running again."""
    deadline = time.monotonic() + timeout
    while (pid_state(pid) == "T") != stopped:
        if time.monotonic() > deadline:
            raise ClusterError(f"pid {pid} is not {'stopped' if stopped else 'running'} after {timeout:.0f}s")
        time.sleep(0.01)


class Peers:
    """LocalCluster's kube-ovn-controller and IPAM provider."""

    def _peer_files(self) -> dict[str, Path]:
        """What a bed with peers reads from hack/build-peers.sh's output and its module copies."""
        d = self.peers_dir
        v = _read_versions()
        src = d.parent / "src"
        return {
            "kube-ovn-controller": d / "bin" / "kube-ovn-controller",
            "kube-ovn-daemon": d / "bin" / "kube-ovn-daemon",
            # Kube-OVN's CNI plugin (cmd/cni), for a kubelet node of the data plane (hack/bed/kube_ovn_cni.py).
            "kube-ovn-cni": d / "bin" / "kube-ovn",
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
        if self.egress_image:  # the VpcEgressGateway pods' image when a gateway names none
            argv.append(f"--image={self.egress_image}")
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
