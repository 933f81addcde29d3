"""A node for the local test bed (issue 17 part 2): containerd, kubelet, kube-controller-manager, kube-scheduler.

Used by ``LocalCluster(with_node=True)`` (hack/bed/cluster.py; CLI ``start --node``), which
spawns and stops the processes with its own pid files; this module writes their
configuration, waits for them and cleans up after them. What each part needs here:

* **containerd** (Debian's, with Debian's runc) with a private root, state, socket and CNI
  directory under ``<bed>/node/`` (the socket under ``$TMPDIR/pnc-<hash>/`` when that path would
  pass the 104 bytes of a unix socket); ``restrict_oom_score_adj = true`` (without it runc fails
  to write the container's ``oom_score_adj`` on this machine); the cgroupfs driver; the
  sandbox image ``localhost/pnc-testbed/pause:1`` of hack/build-pause.sh, imported before
  the kubelet starts, with the busybox image the node's test pods run.
* **A bridge CNI network** (Debian's containernetworking-plugins: ``bridge`` +
  ``host-local``), so the runtime reports ``NetworkReady``. The bed makes the bridge
  ``pnc<hash>`` itself before containerd starts, with the gateway address of the bed's own
  pod subnet (``10.244.<n>.1/24``, ``<n>`` from the bed's hash, the next free one when
  another link has it: two beds never share a subnet); the plugin adopts it
  (``isGateway: true``: the pods' default route is that address). No masquerading and no
  forwarding: from a pod only the gateway address answers, and only on the forwarded ports.
  The kubelet reaches the pods (its HTTP probes) through the bridge's route. Deleted at stop.
* **Pod -> API server and NB** (issue 17 part 3): the bed's services stay on 127.0.0.1; a
  ``socat`` (Debian's) per service listens on the gateway address with the service's own
  port number and forwards each connection (``fork``) to 127.0.0.1; ``range=`` admits
  clients of the pod subnet only. A pod reaches the API server at
  ``https://<gateway>:<api port>`` (``KUBERNETES_SERVICE_HOST``/``_PORT`` in its
  environment, as on a cluster without kube-proxy; the serving certificate carries the
  gateway as a SAN) and the NB at ``tcp:<gateway>:<nb port>``. Chosen over iptables DNAT
  with ``route_localnet`` (kernel state that a killed run would leave behind, and rules
  beside whatever firewall the host has) and over kube-proxy (a build and a Service
  layer the controller does not need): the forwarders are processes of the bed with pid
  files like every component, and nothing of them outlives the bridge. No kube-proxy, so
  ``10.96.0.1`` (the ``kubernetes`` Service) still answers nothing.
* **kubelet**: ``failCgroupV1: false`` (this machine has cgroup v1, which kubelet >= 1.35
  refuses unless told), cgroupfs driver under a cgroup root of the bed's own
  (``/pnc-<hash>`` in every hierarchy, removed at stop), swap allowed, its own ports,
  root and log directories. It runs as user ``system:node:<name>`` (group ``system:nodes``,
  bound to the ``system:node`` ClusterRole). Its API (``kubectl logs``, ``exec``) takes
  only a client certificate of the bed's CA (the API server's
  ``--kubelet-client-certificate``) and then allows everything: a test bed's choice. Its
  node IP is this machine's own address (``PNC_NODE_IP`` to choose another): the kubelet
  refuses a loopback node IP; the API server prefers ``InternalIP`` and so reaches the
  kubelet on this machine, where it listens on that address only.
* **kube-controller-manager** as ``system:kube-controller-manager`` with
  ``--use-service-account-credentials`` (each controller its own service account, tokens
  signed with the bed's key), no serving port, no leader election; **kube-scheduler** as
  ``system:kube-scheduler``, the same.

With a node the API server runs the ServiceAccount admission plugin (hack/bed/control_plane.py): a
pod gets its service account's token, projected by the kubelet (TokenRequest, signed with
the bed's key) with ``kube-root-ca.crt`` (published in every namespace by the controller
manager's root-ca-cert-publisher from ``--root-ca-file``): in-cluster config works.

The node counts as started once its Node object is ``Ready`` (the kubelet registered it and
the runtime reports ``RuntimeReady`` and ``NetworkReady``) and untainted (the controller
manager's node lifecycle controller lifts ``node.kubernetes.io/not-ready`` once it has seen
it Ready; ``--node-monitor-period=1s`` instead of 5 s), so a pod can be scheduled at once. At stop the pods bound to the
node are deleted (the kubelet stops their sandboxes through the runtime: CNI teardown,
namespaces removed), then every process stops, and what is left in containerd is killed and
removed with ``ctr``, leftover shims of this containerd, processes left in the bed's cgroup
root (with their network namespaces) and children of its forwarders are ended, mounts under
the node's directory unmounted, the bridge (with its address and route)
deleted and the cgroup root removed. A bed whose Python process was killed with SIGKILL
leaves its containers running (their shims outlive it) and its bridge:
``hack/cluster.py stop --dir DIR`` or the next start in the same directory removes them all,
and a bed in another directory picks another subnet.

About 650 lines, past the ~600 of hack/: one class, the node's whole life from its files to
its cleanup, moved whole from hack/node.py, and :func:`container_pid` (a container's host pid
on this node, moved from the chaos harness so that the benchmarks need not import it);
LocalCluster's steps that run the node are in hack/bed/cluster.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import yaml

from hack.bed.builds import read_env, run_build

NODE_NAME = "pnc-node"
NODE_COMPONENTS = ("api-forward", "nb-forward", "containerd", "kube-controller-manager", "kube-scheduler", "kubelet")
# Forwarder component -> the bed's service it forwards to (the name of its port).
FORWARDS = {"api-forward": "apiserver", "nb-forward": "nb"}
POD_SUBNETS = "10.244.{}.0/24"  # one /24 per bed, <n> in 0..255
CNI_BIN_DIR = Path("/usr/lib/cni")
CGROUP_FS = Path("/sys/fs/cgroup")
# The users of the node's parts (tokens in the bed's tokens.csv). The bootstrap RBAC of the
# API server binds system:kube-scheduler and system:kube-controller-manager to their
# ClusterRoles; the bed binds the group system:nodes to ClusterRole system:node.
KUBELET_GROUPS = ("system:nodes", "system:authenticated")
SCHEDULER_USER = "system:kube-scheduler"
KCM_USER = "system:kube-controller-manager"


class NodeError(RuntimeError):
    """The node could not be set up or did not become Ready."""


def images_dir() -> Path:
    """Run hack/build-pause.sh (cached) and return its output directory (pause.tar, busybox.tar, refs.env).

    :raises NodeError: the build failed.
    """
    try:
        return run_build("build-pause.sh")
    except RuntimeError as e:
        raise NodeError(str(e)) from e


def image_refs(directory: Path) -> dict[str, str]:
    """refs.env of hack/build-pause.sh as {"PAUSE_IMAGE": ref, "BUSYBOX_IMAGE": ref}."""
    return read_env(directory / "refs.env")


def node_ip() -> str:
    """This machine's IPv4 address on the interface of its default route (``PNC_NODE_IP`` overrides).

    Raises NodeError if there is none. Read from ``ip -j``; nothing is sent anywhere.
    """
    env = os.environ.get("PNC_NODE_IP")
    if env:
        return env
    routes = json.loads(subprocess.run(["ip", "-j", "-4", "route", "show", "default"], capture_output=True,
                                       text=True, check=True).stdout or "[]")
    for route in routes:
        dev = route.get("dev")
        if not dev:
            continue
        addrs = json.loads(subprocess.run(["ip", "-j", "-4", "addr", "show", "dev", dev], capture_output=True,
                                          text=True, check=True).stdout or "[]")
        for link in addrs:
            for a in link.get("addr_info", []):
                if a.get("family") == "inet" and a.get("scope") == "global":
                    return a["local"]
    raise NodeError("no IPv4 address on a default route for the kubelet's node IP; set PNC_NODE_IP")


def addresses_in_use() -> dict[ipaddress.IPv4Network, str]:
    """Every IPv4 network configured on a link of this machine -> that link's name (``ip -j``)."""
    links = json.loads(subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True,
                                      check=True).stdout or "[]")
    out = {}
    for link in links:
        for a in link.get("addr_info", []):
            if a.get("family") == "inet":
                out[ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}").network] = link.get("ifname", "?")
    return out


def choose_pod_subnet(tag: str, bridge: str) -> ipaddress.IPv4Network:
    """The bed's pod subnet: ``10.244.<n>.0/24`` with ``<n>`` from ``tag`` (hex), or the next
    one (mod 256) that no link but ``bridge`` overlaps. NodeError when all 256 are taken."""
    used = {net: link for net, link in addresses_in_use().items() if link != bridge}
    start = int(tag, 16) % 256
    for i in range(256):
        net = ipaddress.ip_network(POD_SUBNETS.format((start + i) % 256))
        if not any(net.overlaps(u) for u in used):
            return net  # type: ignore[return-value]
    raise NodeError(f"every subnet {POD_SUBNETS.format('<n>')} is in use on this machine ({sorted(set(used.values()))})")


def _missing_tools() -> list[str]:
    missing = [t for t in ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip", "socat")
               if shutil.which(t) is None]
    missing += [str(CNI_BIN_DIR / p) for p in ("bridge", "host-local", "loopback") if not (CNI_BIN_DIR / p).exists()]
    return missing


def container_pid(node: Any, container_id: str) -> int:
    """The host pid of a running container's main process (its task in the node's containerd,
    ``ctr task ls``), checked against ``/proc/<pid>/cgroup``, which names the container.

    Raises RuntimeError when the container has no running task."""
    for line in node.ctr("task", "ls").splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 3 and parts[0] == container_id and parts[2] == "RUNNING":
            pid = int(parts[1])
            if container_id not in Path(f"/proc/{pid}/cgroup").read_text():
                raise RuntimeError(f"pid {pid} is not in the cgroup of container {container_id[:12]}")
            return pid
    raise RuntimeError(f"container {container_id[:12]} has no running task")


class Node:
    """The node's files and waits, under ``<bed>/node``; the bed spawns the processes.

    ``workdir``: the bed's directory. ``bin_dir``: where kubelet, kube-controller-manager and
    kube-scheduler are (hack/build-control-plane.sh --node). ``images``: hack/build-pause.sh's
    output directory (None: run it).
    """

    def __init__(self, workdir: Path, bin_dir: Path, images: Path | None = None, name: str = NODE_NAME,
                 netns: str = "", ip: str = "", subdir: str = "node") -> None:
        self.bed_dir = Path(workdir)
        self.dir = self.bed_dir / subdir
        self.bin_dir = Path(bin_dir)
        self.name = name
        # A node inside a network namespace (a trunk node, hack/bed/trunk_kubelet.py): containerd
        # and the kubelet run there with ``ip`` as the node IP; no bridge, no forwarders.
        self.netns = netns
        self._images = images
        tag = hashlib.sha256(str(self.bed_dir.resolve()).encode()).hexdigest()[:8]
        self.tag = tag
        self.bridge = "" if netns else f"pnc{tag}"  # <= 15 bytes, one per bed
        self.cgroup_root = f"/pnc-{tag}-{name}" if netns else f"/pnc-{tag}"
        self.pod_subnet: ipaddress.IPv4Network | None = None
        self.gateway = ""  # the bridge's address, pods' way to the bed's services
        self.forward_ports: dict[str, int] = {}  # forwarder component -> port (the same on 127.0.0.1)
        self.socket = self.dir / "containerd" / "containerd.sock"
        # containerd also listens on <socket>.ttrpc, and a unix socket path has at most 104
        # bytes: a deep work directory (pytest's numbered tmp dirs) gets a short one of its own.
        if len(f"{self.socket}.ttrpc") > 104:
            self.socket = Path(tempfile.gettempdir()) / f"pnc-{tag}{'-' + name if netns else ''}" / "containerd.sock"
        self.ip = ip
        self.kubelet_port = 0
        self.kubelet_healthz_port = 0

    # ------------------------------------------------------------------ checks and files

    def check(self) -> None:
        """NodeError naming what is missing (tools, binaries, root)."""
        missing = _missing_tools()
        missing += [str(self.bin_dir / b) for b in ("kubelet", "kube-controller-manager", "kube-scheduler")
                    if not os.access(self.bin_dir / b, os.X_OK)]
        if missing:
            raise NodeError(f"the node needs {missing}; run hack/install-deps.sh "
                            "(apt: containerd runc containernetworking-plugins; hack/build-control-plane.sh --node)")
        if os.geteuid() != 0:
            raise NodeError("the node (containerd, kubelet) needs root")
        if len(f"{self.socket}.ttrpc") > 104:
            raise NodeError(f"containerd's socket path is too long: {self.socket}.ttrpc (TMPDIR too deep)")

    def choose_subnet(self) -> str:
        """Pick the pod subnet (:func:`choose_pod_subnet`); returns the gateway address the
        API server's serving certificate must name. Called before :meth:`prepare`."""
        self.cleanup_bridge()  # a killed run's bridge of this same bed keeps nobody's subnet
        self.pod_subnet = choose_pod_subnet(self.tag, self.bridge)
        self.gateway = str(next(self.pod_subnet.hosts()))
        return self.gateway

    @property
    def images(self) -> Path:
        if self._images is None:
            self._images = images_dir()
        return self._images

    def prepare(self, *, ports: tuple[int, int], ca_file: Path, kubeconfigs: dict[str, Path],
                sa_key: Path, forward_ports: dict[str, int] | None = None,
                cni: Callable[[Path, Path], object] | None = None) -> None:
        """Write containerd's, the CNI's, the kubelet's and the scheduler's configuration and
        make the bridge with its gateway address (after :meth:`choose_subnet`).

        ``ports``: (kubelet API, kubelet healthz). ``kubeconfigs``: {"kubelet", "kube-scheduler",
        "kube-controller-manager"} -> kubeconfig path. ``sa_key``: the key the controller
        manager signs service-account tokens with. ``forward_ports``: forwarder component
        (:data:`FORWARDS`) -> the loopback port it forwards to; the gateway listens on the same.
        ``cni``: for a node in a network namespace, ``cni(conf_dir, bin_dir)`` writes the CNI
        configuration and the plugins (``<node>/cni/{net.d,bin}``; no bridge then).
        Raises NodeError if the bridge cannot be made.
        """
        if self.dir.exists():
            self.cleanup()
            shutil.rmtree(self.dir, ignore_errors=True)
        if not self.netns and self.pod_subnet is None:
            self.choose_subnet()
        self.kubelet_port, self.kubelet_healthz_port = ports
        self.forward_ports = dict(forward_ports or {})
        if not self.netns:
            self.ip = node_ip()
        self.ca_file = ca_file
        self.kubeconfigs = kubeconfigs
        self.sa_key = sa_key
        d = self.dir
        for sub in ("containerd/root", "containerd/state", "containerd/opt", "cni/net.d", "cni/ipam",
                    "kubelet/root", "kubelet/pki", "kubelet/pod-logs", "kubelet/volume-plugins"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        self.socket.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        cni_bin_dir = d / "cni" / "bin" if cni is not None else CNI_BIN_DIR
        if cni is not None:
            cni(d / "cni" / "net.d", cni_bin_dir)
        refs = image_refs(self.images)
        self.pause_image = refs["PAUSE_IMAGE"]
        self.busybox_image = refs["BUSYBOX_IMAGE"]
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        (d / "containerd" / "config.toml").write_text(f"""\
version = 2
root = "{d / 'containerd/root'}"
state = "{d / 'containerd/state'}"
oom_score = 0

[grpc]
  address = "{self.socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d / 'containerd/opt'}"

[{cri}]
  sandbox_image = "{self.pause_image}"
  # runc cannot write oom_score_adj below containerd's own here; clamp it instead.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false

[{cri}.cni]
  bin_dir = "{cni_bin_dir}"
  conf_dir = "{d / 'cni/net.d'}"
  max_conf_num = 1

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
""")
        if cni is None:
            self._write_bridge_conflist()
        kubelet = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # cgroup v1 on this machine: kubelet >= 1.35 refuses it unless told.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": self.ip,
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.kubelet_healthz_port,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(ca_file)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "podLogsDir": str(d / "kubelet" / "pod-logs"),
            "volumePluginDir": str(d / "kubelet" / "volume-plugins"),
            "imageGCHighThresholdPercent": 100,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "resolvConf": "/etc/resolv.conf",
            "registerNode": True,
            "serializeImagePulls": False,
        }
        (d / "kubelet" / "config.yaml").write_text(yaml.safe_dump(kubelet, sort_keys=False))
        scheduler = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfigs["kube-scheduler"])},
            "leaderElection": {"leaderElect": False},
        }
        (d / "kube-scheduler.yaml").write_text(yaml.safe_dump(scheduler, sort_keys=False))
        for hierarchy in self._cgroup_hierarchies():
            (hierarchy / self.cgroup_root.lstrip("/")).mkdir(exist_ok=True)
        if not self.netns:
            self._make_bridge()

    def _write_bridge_conflist(self) -> None:
        """The bridge CNI network on the bed's pod subnet (the node in the host's namespace)."""
        assert self.pod_subnet is not None
        conflist = {
            "cniVersion": "1.0.0",
            "name": "pnc-testbed",
            "plugins": [{
                "type": "bridge",
                "bridge": self.bridge,
                # The bridge made in _make_bridge, adopted with its address: the pods' default route.
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(self.dir / "cni" / "ipam"),
                    "ranges": [[{"subnet": str(self.pod_subnet), "gateway": self.gateway}]],
                },
            }],
        }
        (self.dir / "cni" / "net.d" / "10-pnc-testbed.conflist").write_text(json.dumps(conflist, indent=2) + "\n")

    def _make_bridge(self) -> None:
        """The CNI's bridge, up, with the gateway address, so the forwarders can listen on it
        before the first pod (the bridge plugin then finds it as it wants it)."""
        assert self.pod_subnet is not None
        prefix = self.pod_subnet.prefixlen
        for argv in (["ip", "link", "add", self.bridge, "type", "bridge"],
                     ["ip", "addr", "add", f"{self.gateway}/{prefix}", "dev", self.bridge],
                     ["ip", "link", "set", self.bridge, "up"]):
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            if proc.returncode != 0:
                raise NodeError(f"{' '.join(argv)} failed: {proc.stderr.strip()}")

    # ------------------------------------------------------------------ commands

    def command(self, component: str) -> list[str]:
        """argv of one of NODE_COMPONENTS (every one names a path in the bed's directory)."""
        d = self.dir
        # nsenter, not ``ip netns exec``: that remounts /sys for the namespace, hiding the
        # cgroup mounts the kubelet and runc need.
        inside = ["nsenter", f"--net=/var/run/netns/{self.netns}", "--"] if self.netns else []
        if component == "containerd":
            return [*inside, "containerd", "--config", str(d / "containerd" / "config.toml"), "--log-level", "warn"]
        if component in FORWARDS:
            port = self.forward_ports[component]
            return [
                "socat", "-d", "-lf", str(self.bed_dir / f"{component}.log"),
                # reuseaddr: a restarted bed binds again at once; fork: one child per connection.
                f"TCP4-LISTEN:{port},bind={self.gateway},reuseaddr,fork,range={self.pod_subnet}",
                f"TCP4:127.0.0.1:{port}",
            ]
        if component == "kubelet":
            return [
                *inside,
                str(self.bin_dir / "kubelet"),
                f"--config={d / 'kubelet' / 'config.yaml'}",
                f"--kubeconfig={self.kubeconfigs['kubelet']}",
                f"--root-dir={d / 'kubelet' / 'root'}",
                f"--cert-dir={d / 'kubelet' / 'pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.ip}",
                "--v=1",
            ]
        if component == "kube-controller-manager":
            return [
                str(self.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={self.kubeconfigs['kube-controller-manager']}",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.sa_key}",
                f"--root-ca-file={self.ca_file}",
                "--leader-elect=false",
                "--secure-port=0",
                "--controllers=*",
                # How often the node lifecycle controller looks at the Node (default 5 s): it
                # lifts the not-ready taint only then, and the bed waits for that.
                "--node-monitor-period=1s",
                "--v=1",
            ]
        if component == "kube-scheduler":
            return [
                str(self.bin_dir / "kube-scheduler"),
                f"--config={d / 'kube-scheduler.yaml'}",
                "--secure-port=0",
                "--v=1",
            ]
        raise ValueError(component)

    # ------------------------------------------------------------------ containerd

    def ctr(self, *args: str, check: bool = True, timeout: float = 60) -> str:
        """``ctr`` on this node's containerd, namespace k8s.io (the CRI's); stdout."""
        proc = subprocess.run(["ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args],
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise NodeError(f"ctr {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def wait_forwarders(self, alive: Any, timeout: float) -> None:
        """Until each forwarder accepts a connection on the gateway; ``alive()`` raises if one died."""
        import socket

        deadline = time.monotonic() + timeout
        for component, port in self.forward_ports.items():
            while True:
                alive(component)
                try:
                    with socket.create_connection((self.gateway, port), timeout=2):
                        break
                except OSError as e:
                    if time.monotonic() > deadline:
                        raise NodeError(f"{component} does not accept on {self.gateway}:{port} ({e})") from e
                time.sleep(0.05)

    def wait_containerd(self, alive: Any, timeout: float) -> None:
        """Until containerd answers on its socket; ``alive()`` raises if its process died."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            alive()
            if self.socket.exists():
                proc = subprocess.run(["ctr", "--address", str(self.socket), "version"], capture_output=True,
                                      text=True, timeout=10)
                if proc.returncode == 0:
                    return
                last = proc.stderr.strip()
            time.sleep(0.05)
        raise NodeError(f"containerd does not answer on {self.socket} after {timeout:.0f}s ({last})")

    def import_images(self, extra: Sequence[Path] = ()) -> None:
        """The sandbox (pause) image, the busybox image and the OCI archives ``extra`` into the
        CRI's namespace."""
        for tar in (self.images / "pause.tar", self.images / "busybox.tar", *extra):
            self.ctr("images", "import", "--no-unpack=false", str(tar))
        # Pinned: the kubelet's image garbage collection never removes the sandbox image.
        self.ctr("images", "label", self.pause_image, "io.cri-containerd.pinned=pinned")

    # ------------------------------------------------------------------ readiness

    def ready_pending(self, node: dict | None) -> str:
        """What the Node object still lacks to be Ready ("" when Ready)."""
        if node is None:
            return f"no Node {self.name} yet"
        conds = {c["type"]: c for c in node.get("status", {}).get("conditions") or []}
        ready = conds.get("Ready")
        if not ready or ready.get("status") != "True":
            return f"Ready is {ready.get('status')}: {ready.get('message')}" if ready else "no Ready condition yet"
        # The controller manager's node lifecycle controller lifts the not-ready taints it
        # finds once it has seen the node Ready; until then nothing can be scheduled.
        taints = [t["key"] for t in node.get("spec", {}).get("taints") or []
                  if t.get("effect") in ("NoSchedule", "NoExecute")]
        return f"Ready, but tainted {taints}" if taints else ""

    # ------------------------------------------------------------------ stop

    def cleanup(self) -> None:
        """After the processes stopped: what they leave behind (best effort, idempotent)."""
        self._end_shims()
        self._end_cgroup_procs()
        if not self.netns:  # the forwarders are the bed's node's, never a trunk node's
            self._end_forwarder_children()
        self._unmount_under(self.dir)
        if self.bridge:
            self.cleanup_bridge()
        self._remove_cgroup_root()
        if not self.socket.is_relative_to(self.dir):
            shutil.rmtree(self.socket.parent, ignore_errors=True)

    def _end_cgroup_procs(self, timeout: float = 10.0) -> None:
        """SIGKILL every process still in the bed's cgroup root and remove the network
        namespace files they were in. Nothing is left there after a clean stop; after the
        bed was killed (SIGKILL: no drain, containerd gone), the containers outlive their
        shims and run on, the controller's pods too."""
        procs: set[int] = set()
        for hierarchy in self._cgroup_hierarchies():
            root = hierarchy / self.cgroup_root.lstrip("/")
            for f in root.rglob("cgroup.procs") if root.is_dir() else ():
                with contextlib.suppress(OSError, ValueError):
                    procs.update(int(x) for x in f.read_text().split())
        if not procs:
            return
        own = os.stat("/proc/self/ns/net").st_ino
        inodes = set()
        for pid in procs:
            with contextlib.suppress(OSError):
                inodes.add(os.stat(f"/proc/{pid}/ns/net").st_ino)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while any(Path(f"/proc/{pid}").exists() for pid in procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        netns_dir = Path("/var/run/netns")
        files = set()
        for f in netns_dir.iterdir() if netns_dir.is_dir() else ():
            with contextlib.suppress(OSError):
                if f.stat().st_ino in inodes - {own}:
                    files.add(str(f))
        self.remove_netns(files)

    def cleanup_bridge(self) -> None:
        """Delete the bridge (its address and route go with it); nothing if there is none."""
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True, timeout=10)

    def running_tasks(self) -> list[str]:
        """Ids of the tasks (container processes, sandboxes included) containerd runs now."""
        lines = self.ctr("tasks", "ls", check=False, timeout=10).splitlines()[1:]  # TASK PID STATUS
        return [f[0] for f in (line.split() for line in lines) if len(f) >= 3 and f[2] == "RUNNING"]

    def sandbox_netns(self) -> set[str]:
        """The network namespace files (``/var/run/netns/cni-…``) of the containers in k8s.io."""
        paths: set[str] = set()
        for c in self.ctr("containers", "ls", "-q", check=False, timeout=20).split():
            try:
                spec = json.loads(self.ctr("containers", "info", c, check=False, timeout=20) or "{}").get("Spec") or {}
            except ValueError:
                continue
            for ns in (spec.get("linux") or {}).get("namespaces") or []:
                if ns.get("type") == "network" and ns.get("path"):
                    paths.add(ns["path"])
        return paths

    @staticmethod
    def remove_netns(paths: set[str]) -> None:
        """Unmount and delete network namespace files the runtime did not remove itself."""
        for p in paths:
            if os.path.exists(p):
                subprocess.run(["umount", p], capture_output=True)
                with contextlib.suppress(OSError):
                    os.unlink(p)

    def remove_containers(self) -> None:
        """With containerd up and the kubelet stopped: kill and remove what is left in k8s.io,
        and the network namespaces of its sandboxes."""
        if not self.socket.exists():
            return
        try:
            netns = self.sandbox_netns()
            tasks = [line.split()[0] for line in self.ctr("tasks", "ls", "-q", check=False, timeout=20).splitlines()
                     if line.strip()]
            for t in tasks:
                self.ctr("tasks", "kill", "--signal", "SIGKILL", t, check=False, timeout=20)
            for t in tasks:
                self.ctr("tasks", "delete", "--force", t, check=False, timeout=20)
            for c in self.ctr("containers", "ls", "-q", check=False, timeout=20).split():
                self.ctr("containers", "delete", c, check=False, timeout=20)
        except subprocess.TimeoutExpired:
            return
        self.remove_netns(netns)

    def _end_shims(self) -> None:
        """SIGKILL the containerd-shim-runc-v2 processes started by this node's containerd."""
        self._kill_matching(b"containerd-shim-runc-v2", str(self.socket).encode())

    def _end_forwarder_children(self) -> None:
        """SIGKILL what is left of the forwarders: socat's per-connection children outlive
        their parent until their connection closes."""
        for component in FORWARDS:
            self._kill_matching(b"socat", str(self.bed_dir / f"{component}.log").encode())

    @staticmethod
    def _kill_matching(binary: bytes, needle: bytes) -> None:
        """SIGKILL the processes whose argv[0] ends with ``binary`` and whose argv holds ``needle``."""
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit():
                continue
            try:
                cmd = (pid_dir / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(binary) and needle in cmd:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(pid_dir.name), signal.SIGKILL)

    @staticmethod
    def _unmount_under(directory: Path) -> None:
        prefix = str(directory.resolve())
        mounts = []
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/mountinfo").read_text().splitlines():
                point = line.split()[4].encode().decode("unicode_escape")
                if point == prefix or point.startswith(prefix + "/"):
                    mounts.append(point)
        for point in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True)

    @staticmethod
    def _cgroup_hierarchies() -> list[Path]:
        if (CGROUP_FS / "cgroup.controllers").exists():  # cgroup v2 only
            return [CGROUP_FS]
        return [p for p in sorted(CGROUP_FS.iterdir()) if p.is_dir() and not p.is_symlink() and os.path.ismount(p)]

    def _remove_cgroup_root(self) -> None:
        for hierarchy in self._cgroup_hierarchies():
            root = hierarchy / self.cgroup_root.lstrip("/")
            if not root.is_dir():
                continue
            for sub in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    sub.rmdir()
            with contextlib.suppress(OSError):
                root.rmdir()
