"""A node in the bed (issue 17 part 2): containerd, kubelet, kube-controller-manager, kube-scheduler.

``LocalCluster(with_node=True)`` (hack/bed/cluster.py, hack/bed/node.py) registers Node ``pnc-node``;
the bed counts as started once it is Ready. Asserted here: the Node is Ready with its
InternalIP and containerd as its runtime; a pod the scheduler places on it runs, and its
logs are read through the API server (which reaches the kubelet on the node's InternalIP
with its client certificate); the controller manager runs a Deployment's ReplicaSet, which
replaces a deleted pod; the controller's image (hack/build-image.sh) runs its entrypoint
under the securityContext of manifests/deploy/ (marker ``image`` too); a pod reaches the API
server and the NB on the node's gateway (hack/bed/node.py's forwarders) and nothing else there;
the bed's stop leaves no process, shim, forwarder, mount, bridge, network namespace or cgroup
of the node behind, and neither does ``hack/cluster.py stop`` after the bed's process was
killed with SIGKILL while a pod ran.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent

from hack.bed import CGROUP_FS, NODE_COMPONENTS, LocalCluster, pid_alive  # noqa: E402
from hack.tools.wait import wait_for  # noqa: E402
from tests.support.nodebed import node_bed

pytestmark = [pytest.mark.integration, pytest.mark.node]


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from node_bed(tmp_path_factory.mktemp("node"), with_peers=False)


def kubectl(bed: LocalCluster, *args: str, input: str | None = None) -> str:
    return bed.run_kubectl(*args, input=input).stdout.decode()


def get(bed: LocalCluster, *args: str) -> dict:
    return json.loads(kubectl(bed, "get", "-o", "json", *args))


def run_pod(bed: LocalCluster, pod: dict, timeout: float = 60) -> tuple[dict, str]:
    """Create ``pod`` (restartPolicy Never) in its namespace, which is created first; wait
    until it Succeeded or Failed; return the pod and its logs (read through the API server)."""
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    kubectl(bed, "create", "namespace", ns)
    kubectl(bed, "apply", "-f", "-", input=json.dumps(pod))
    done = wait_for(
        lambda: (p := get(bed, "pod", "-n", ns, name))["status"].get("phase") in ("Succeeded", "Failed") and p,
        timeout=timeout, what=f"pod {ns}/{name} to finish",
    )
    return done, kubectl(bed, "logs", "-n", ns, name)


def test_a_pod_reaches_the_api_server_and_the_nb_on_the_gateway_and_nothing_else(bed: LocalCluster) -> None:
    """The forwarders (hack/bed/node.py): from a pod the gateway answers on the API server's and
    the NB's port numbers, and the serving certificate names the gateway; the kubernetes
    Service's address (no kube-proxy) and any other port of the gateway refuse or time out."""
    assert bed.node is not None
    gw, ports = bed.node.gateway, bed.node.forward_ports
    assert set(ports) == {"api-forward", "nb-forward"}
    # busybox nc: "-e true" closes the connection once made, so the exit status says "connected".
    script = "; ".join([
        f"nc -w 3 {gw} {ports['api-forward']} -e true 2>/dev/null && echo api-open",
        f"nc -w 3 {gw} {ports['nb-forward']} -e true 2>/dev/null && echo nb-open",
        f"nc -w 3 {gw} {bed.node.kubelet_port} -e true 2>/dev/null || echo kubelet-closed",
        "nc -w 3 10.96.0.1 443 -e true 2>/dev/null || echo service-closed",
    ])
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "reach", "namespace": "node-reach"},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "reach", "image": bed.node.busybox_image, "imagePullPolicy": "Never",
            "command": ["sh", "-c", script]}]},
    }
    done, logs = run_pod(bed, pod, timeout=90)
    assert done["status"]["phase"] == "Succeeded", (done["status"], logs)
    assert logs.split() == ["api-open", "nb-open", "kubelet-closed", "service-closed"]
    # The API server's certificate is valid for the gateway address, as an in-cluster client checks it.
    import socket
    import ssl

    ctx = ssl.create_default_context(cafile=str(bed.ca_file))
    with socket.create_connection((gw, ports["api-forward"]), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname=gw) as tls:
            assert tls.version()


def test_the_node_is_ready_with_its_internal_ip_on_containerd(bed: LocalCluster) -> None:
    assert bed.node is not None
    node = get(bed, "node", bed.node.name)
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert ready["Ready"] == "True", node["status"]["conditions"]
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == bed.node.ip
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.37.2"
    assert bed.node_ready_seconds is not None and bed.node_ready_seconds < 30


def test_a_scheduled_pod_runs_on_the_node_and_its_logs_are_readable(bed: LocalCluster) -> None:
    assert bed.node is not None
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "hello", "namespace": "node-logs"},
        "spec": {
            "restartPolicy": "Never",
            # no nodeName: the scheduler places it
            "containers": [{
                "name": "hello",
                "image": bed.node.busybox_image,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", "echo hello from $(hostname); echo on stderr >&2"],
            }],
        },
    }
    done, logs = run_pod(bed, pod)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["spec"]["nodeName"] == bed.node.name
    # from the bridge network's host-local range, the bed's own /24
    assert ipaddress.ip_address(done["status"]["podIP"]) in bed.node.pod_subnet
    # stdout and stderr are two pipes: their lines interleave in either order
    assert sorted(logs.splitlines()) == ["hello from hello", "on stderr"]


def test_the_controller_manager_replaces_a_deleted_pod_of_a_deployment(bed: LocalCluster) -> None:
    assert bed.node is not None
    kubectl(bed, "create", "namespace", "node-deploy")
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "sleeper", "namespace": "node-deploy"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "sleeper"}},
            "template": {
                "metadata": {"labels": {"app": "sleeper"}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "sleeper",
                        "image": bed.node.busybox_image,
                        "imagePullPolicy": "Never",
                        "command": ["sleep", "3600"],
                    }],
                },
            },
        },
    }
    kubectl(bed, "apply", "-f", "-", input=json.dumps(deploy))

    def running() -> list[str]:
        pods = get(bed, "pods", "-n", "node-deploy", "-l", "app=sleeper")["items"]
        return [p["metadata"]["name"] for p in pods
                if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]

    first = wait_for(running, timeout=60, what="the Deployment's pod to run")
    assert len(first) == 1
    kubectl(bed, "delete", "pod", "-n", "node-deploy", first[0], "--wait=false")
    second = wait_for(lambda: [n for n in running() if n != first[0]], timeout=60, what="a replacement pod")
    assert len(second) == 1
    # The kubelet stopped the deleted pod for real: its object goes once the container is gone.
    wait_for(lambda: first[0] not in [p["metadata"]["name"] for p in
                                      get(bed, "pods", "-n", "node-deploy")["items"]],
             timeout=60, what="the deleted pod to go")


@pytest.mark.image
@pytest.mark.timeout(900)
def test_the_controller_image_runs_with_the_shipped_security_context(bed: LocalCluster) -> None:
    """The image of hack/build-image.sh, imported into the node's containerd, runs its
    entrypoint under the pod and container securityContext of manifests/deploy/ (user
    65532, non-root, read-only root filesystem, no capabilities, RuntimeDefault seccomp)."""
    import yaml

    assert bed.node is not None
    proc = subprocess.run(["bash", str(ROOT / "hack" / "build-image.sh")], capture_output=True, text=True,
                          timeout=850)
    assert proc.returncode == 0, proc.stderr[-3000:]
    archive = Path(proc.stdout.strip().splitlines()[-1])
    ref = (archive.parent / "ref").read_text().strip()
    bed.node.ctr("images", "import", str(archive), timeout=300)
    deployment = next(d for d in yaml.safe_load_all((ROOT / "manifests" / "deploy" / "deployment.yaml").read_text())
                      if d and d.get("kind") == "Deployment")
    pod_spec = deployment["spec"]["template"]["spec"]
    shipped = pod_spec["containers"][0]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "controller-help", "namespace": "node-image"},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": pod_spec["securityContext"],
            "containers": [{
                "name": "controller",
                "image": ref,
                "imagePullPolicy": "Never",
                "args": ["--help"],
                "securityContext": shipped["securityContext"],
            }],
        },
    }
    assert pod["spec"]["securityContext"]["runAsUser"] == 65532
    assert pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    done, logs = run_pod(bed, pod, timeout=120)
    assert done["status"]["phase"] == "Succeeded", (done["status"], logs)
    assert logs.startswith("usage: proxmox-network-controller"), logs[:500]


def test_stop_leaves_nothing_of_the_node_behind(bed: LocalCluster) -> None:
    node = bed.node
    assert node is not None
    pids = {n: p for n, p in bed._read_pids().items() if n in NODE_COMPONENTS}
    assert set(pids) == set(NODE_COMPONENTS)
    # A pod still running at stop: its sandbox's network namespace must go with it.
    sandboxes = node.ctr("containers", "ls", "-q").split()
    assert sandboxes, "the previous tests left a running pod"
    netns = set()
    for c in sandboxes:
        spec = json.loads(node.ctr("containers", "info", c))["Spec"]
        netns.update(ns["path"] for ns in spec["linux"]["namespaces"] if ns["type"] == "network" and ns.get("path"))
    assert netns

    bed.stop()

    assert not [n for n, p in pids.items() if pid_alive(p)]
    assert not any(
        b"containerd-shim" in (Path("/proc") / d / "cmdline").read_bytes()
        and str(node.socket).encode() in (Path("/proc") / d / "cmdline").read_bytes()
        for d in os.listdir("/proc") if d.isdigit() and (Path("/proc") / d / "cmdline").exists()
    )
    assert not [p for p in netns if os.path.exists(p)]
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(node.dir) not in mounts
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    assert node.bridge not in links
    # The forwarders and their per-connection children are gone, and so is the gateway address.
    assert not [d for d in os.listdir("/proc") if d.isdigit() and (Path("/proc") / d / "cmdline").exists()
                and b"socat" in (Path("/proc") / d / "cmdline").read_bytes()
                and str(bed.workdir).encode() in (Path("/proc") / d / "cmdline").read_bytes()]
    addrs = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True).stdout
    assert f" {node.gateway}/" not in addrs
    assert not list(CGROUP_FS.glob(f"*/{node.cgroup_root.lstrip('/')}"))


CHILD = """
import json, signal, sys
sys.path.insert(0, {root!r})
from hack.bed import LocalCluster
from hack.tools.wait import wait_for
c = LocalCluster({dir!r}, with_nb=False, with_peers=False, with_node=True)
c.start()
c.run_kubectl("create", "deployment", "sleeper", "--image=" + c.node.busybox_image, "--", "sleep", "3600")
c.run_kubectl("patch", "deployment", "sleeper", "-p",
              json.dumps({{"spec": {{"template": {{"spec": {{"containers": [{{"name": "busybox", "imagePullPolicy": "Never"}}]}}}}}}}}))
wait_for(lambda: b"Running" in c.run_kubectl("get", "pods", "-l", "app=sleeper", "--no-headers").stdout, timeout=60)
print("READY", flush=True)
signal.pause()
"""


def test_a_bed_killed_with_sigkill_is_cleaned_up_by_stop(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The bed's Python process SIGKILLed with a pod running: its components die with it
    (parent-death signal), the shim and the container run on; ``hack/cluster.py stop`` then
    leaves no shim, container process, network namespace, bridge, mount or cgroup."""
    from hack.bed import Node

    workdir = tmp_path_factory.mktemp("k")  # short: containerd's socket path is limited
    out = workdir.parent / "k-child.out"
    code = CHILD.format(root=str(ROOT), dir=str(workdir))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=open(out, "wb"), stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: b"READY" in out.read_bytes() or child.poll() is not None, timeout=120,
                 what="the child's bed with a running pod")
        assert child.poll() is None, out.read_text()[-3000:]
        node = Node(workdir, ROOT)  # the names only: bridge, cgroup root, socket
        procs = {int(p) for f in CGROUP_FS.glob(f"*/{node.cgroup_root.lstrip('/')}/**/cgroup.procs")
                 for p in f.read_text().split()}
        assert procs, "no container process in the bed's cgroup root"
        child.kill()
        child.wait(10)
        assert [p for p in procs if Path(f"/proc/{p}").exists()], "the containers died with the bed"
        proc = subprocess.run([sys.executable, str(ROOT / "hack" / "cluster.py"), "stop", "--dir", str(workdir)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    finally:
        if child.poll() is None:
            child.kill()
    assert not [p for p in procs if Path(f"/proc/{p}").exists()]
    assert not any(str(node.socket).encode() in (Path("/proc") / d / "cmdline").read_bytes()
                   for d in os.listdir("/proc") if d.isdigit() and (Path("/proc") / d / "cmdline").exists())
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    assert node.bridge not in links
    assert str(workdir) not in Path("/proc/self/mountinfo").read_text()
    assert not list(CGROUP_FS.glob(f"*/{node.cgroup_root.lstrip('/')}"))
