"""The controller as the Deployment of manifests/ on the bed's node (issue 17 part 3).

:class:`ControllerDeployment` puts the image of hack/build-image.sh into the node's
containerd, writes the ConfigMap ``proxmox-network-testbed`` (where a pod reaches the API
server and the NB: the node's gateway and the bed's ports, hack/bed/node.py) and runs
``kubectl apply -k hack/deploy-overlay`` (server-side, the bed's field manager): the
shipped manifests with only the bed's changes (hack/deploy-overlay/kustomization.yaml says
which). Its pods then run as the service account ``proxmox-network-controller`` with the
token the kubelet projects (in-cluster config), under the shipped securityContext, probes,
resources, replicas and strategy. Needs ``LocalCluster(with_node=True)``; the bed's stop
deletes the pods with the node.

Readiness is serving (controller/main.py: ``/readyz`` answers 200 on every replica whose
caches are synced and fresh; product-decisions §9), so "rolled out" here means: the
Deployment's pods all Running and Ready, and one of them holds the Lease.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from controller.runtime.leader import identity_host
from hack.bed.builds import HACK_DIR

OVERLAY = HACK_DIR / "deploy-overlay"
NAMESPACE = "proxmox-network-system"
NAME = "proxmox-network-controller"
SELECTOR = "app=proxmox-network-controller"
TESTBED_CONFIGMAP = "proxmox-network-testbed"
LEASE = "proxmox-network-controller.proxmox.cozystack.io"  # controller.runtime.leader.DEFAULT_LEASE_NAME
LEASE_NAMESPACE = "kube-system"  # controller.runtime.leader.DEFAULT_LEASE_NAMESPACE: one Lease per cluster
FIELD_MANAGER = "pnc-testbed"


class DeployError(RuntimeError):
    """The image could not be built or imported, or the Deployment did not roll out."""


def build_image(timeout: float = 1800) -> Path:
    """Run hack/build-image.sh (cached by content) and return the OCI archive's path.

    Raises DeployError with the end of its stderr when it fails.
    """
    proc = subprocess.run(["bash", str(HACK_DIR / "build-image.sh")], capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise DeployError(f"hack/build-image.sh failed:\n{proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def ready(pod: dict) -> bool:
    """Whether the pod's ``Ready`` condition is True."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def restarts(pod: dict) -> int:
    """The sum of the containers' ``restartCount``."""
    return sum(c.get("restartCount", 0) for c in (pod.get("status") or {}).get("containerStatuses") or [])


class ControllerDeployment:
    """The Deployment on ``cluster`` (a started ``LocalCluster(with_node=True)``)."""

    def __init__(self, cluster: Any) -> None:
        if cluster.node is None:
            raise DeployError("the controller's Deployment needs the bed's node (LocalCluster(with_node=True))")
        self.cluster = cluster
        self.node = cluster.node
        self.image = ""
        self.applied_at: float | None = None  # time.monotonic() of the apply

    # ------------------------------------------------------------------ kubectl

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 120) -> str:
        return self.cluster.run_kubectl(*args, input=input, timeout=timeout).stdout.decode()

    def get(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", "-o", "json", *args))

    # ------------------------------------------------------------------ install

    def rendered(self) -> list[dict]:
        """The overlay as ``kubectl kustomize`` renders it."""
        return [d for d in yaml.safe_load_all(self.kubectl("kustomize", str(OVERLAY))) if d]

    def shipped_image(self) -> str:
        """The image the overlay's Deployment runs."""
        dep = next(d for d in self.rendered() if d["kind"] == "Deployment" and d["metadata"]["name"] == NAME)
        return dep["spec"]["template"]["spec"]["containers"][0]["image"]

    def import_image(self, archive: Path) -> str:
        """Import the OCI ``archive`` (with its ``ref`` file beside it) into the node's
        containerd; returns its reference. DeployError if the overlay names another image
        (a version bumped in pyproject.toml and not in manifests/, or the reverse)."""
        ref = (archive.parent / "ref").read_text().strip()
        wanted = self.shipped_image()
        if ref != wanted:
            raise DeployError(f"hack/build-image.sh built {ref}, the overlay runs {wanted}: "
                              "the image tag in manifests/deploy/deployment.yaml and pyproject's version differ")
        self.node.ctr("images", "import", str(archive), timeout=300)
        self.image = ref
        return ref

    def testbed_config(self) -> dict[str, str]:
        """The ConfigMap's data: the API server and the NB as a pod on the node reaches them."""
        node, c = self.node, self.cluster
        if not node.gateway or "api-forward" not in node.forward_ports:
            raise DeployError("the bed's node has no gateway or no forwarder to the API server")
        data = {
            "KUBERNETES_SERVICE_HOST": node.gateway,
            "KUBERNETES_SERVICE_PORT": str(node.forward_ports["api-forward"]),
        }
        if "nb-forward" in node.forward_ports:
            data["OVN_NB_ADDRESS"] = f"tcp:{node.gateway}:{node.forward_ports['nb-forward']}"
        elif c.with_nb:
            raise DeployError("the bed has an NB but no forwarder to it")
        return data

    def apply(self, extra_args: list[str] | None = None) -> None:
        """The ConfigMap, then ``kubectl apply -k hack/deploy-overlay`` (server-side).

        ``extra_args`` are appended to the container's args (argparse keeps the last of a
        flag, so they override the shipped ones), e.g. the chaos harness's shorter prune
        timeout; the overlay is then rendered with ``kubectl kustomize`` and applied from
        stdin, the same objects otherwise."""
        self.cluster.apply_docs([{
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": TESTBED_CONFIGMAP, "namespace": NAMESPACE},
            "data": self.testbed_config(),
        }], "the test bed's ConfigMap")
        self.applied_at = time.monotonic()
        apply = ("apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}")
        if not extra_args:
            self.kubectl(*apply, "-k", str(OVERLAY))
            return
        docs = self.rendered()
        for d in docs:
            if d["kind"] == "Deployment" and d["metadata"]["name"] == NAME:
                d["spec"]["template"]["spec"]["containers"][0]["args"] += list(extra_args)
        self.kubectl(*apply, "-f", "-", input=yaml.safe_dump_all(docs))

    def install(self, archive: Path | None = None, extra_args: list[str] | None = None) -> "ControllerDeployment":
        """Build (cached) and import the image, then :meth:`apply` (with ``extra_args``). Returns self."""
        self.import_image(archive or build_image())
        self.apply(extra_args)
        return self

    # ------------------------------------------------------------------ reading

    def deployment(self) -> dict:
        return self.get("deployment", "-n", NAMESPACE, NAME)

    def pods(self) -> list[dict]:
        """The Deployment's pods that are not being deleted, oldest first."""
        items = self.get("pods", "-n", NAMESPACE, "-l", SELECTOR)["items"]
        live = [p for p in items if not p["metadata"].get("deletionTimestamp")]
        return sorted(live, key=lambda p: p["metadata"]["creationTimestamp"])

    def holder(self) -> str:
        """The pod that holds the Lease ("" when nobody does): holderIdentity is
        ``<namespace>/<hostname>_<uuid>`` (controller.runtime.leader.default_identity) and a pod's
        hostname is its name."""
        try:
            lease = self.get("lease", "-n", LEASE_NAMESPACE, LEASE)
        except Exception:  # noqa: BLE001 - not created yet
            return ""
        identity = (lease.get("spec") or {}).get("holderIdentity") or ""
        return identity_host(identity) if identity else ""

    def pending(self, replicas: int | None = None) -> str:
        """What the rollout still lacks ("" when done): ``replicas`` (default: the
        Deployment's) pods Running and Ready, and one of them holds the Lease."""
        want = replicas if replicas is not None else self.deployment()["spec"]["replicas"]
        pods = self.pods()
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        if len(running) != want or len(pods) != want:
            phases = {p["metadata"]["name"]: (p.get("status") or {}).get("phase") for p in pods}
            return f"{len(running)} of {want} pods Running ({phases})"
        ready_pods = [p["metadata"]["name"] for p in running if ready(p)]
        if len(ready_pods) != want:
            return f"{len(ready_pods)} of {want} pods Ready: {ready_pods}"
        holder = self.holder()
        if holder not in ready_pods:
            return f"the Lease is held by {holder or 'nobody'}, not by one of the Ready pods {ready_pods}"
        return ""

    def wait_rolled_out(self, timeout: float = 180, replicas: int | None = None) -> float:
        """Until :meth:`pending` is ""; returns the seconds waited. DeployError on timeout,
        with the pods' states and the end of each one's log."""
        t0 = time.monotonic()
        last = ""
        while time.monotonic() - t0 < timeout:
            try:
                last = self.pending(replicas)
            except Exception as e:  # noqa: BLE001 - the Deployment not there yet
                last = str(e)
            if not last:
                return time.monotonic() - t0
            time.sleep(0.2)
        raise DeployError(f"the controller's Deployment did not roll out in {timeout:.0f}s ({last})\n"
                          + self.describe())

    def leader(self) -> str:
        """The name of the Ready pod holding the Lease; DeployError if there is none."""
        why = self.pending()
        if why:
            raise DeployError(f"no single leader: {why}")
        return self.holder()

    def logs(self, pod: str, previous: bool = False) -> str:
        args = ["logs", "-n", NAMESPACE, pod] + (["--previous"] if previous else [])
        return self.kubectl(*args)

    def describe(self) -> str:
        """The pods' phases, restarts, waiting reasons and log tails (for error messages)."""
        out = []
        try:
            pods = self.get("pods", "-n", NAMESPACE, "-l", SELECTOR)["items"]
        except Exception as e:  # noqa: BLE001
            return f"(cannot list the pods: {e})"
        for p in pods:
            name = p["metadata"]["name"]
            states = [(c.get("state") or {}) for c in (p.get("status") or {}).get("containerStatuses") or []]
            out.append(f"pod {name}: phase {(p.get('status') or {}).get('phase')}, ready {ready(p)}, "
                       f"restarts {restarts(p)}, state {states}")
            try:
                out.append("\n".join(self.logs(name).splitlines()[-15:]))
            except Exception as e:  # noqa: BLE001 - no container yet
                out.append(f"  (no logs: {e})")
        return "\n".join(out)

    def memory(self) -> dict[str, int]:
        """Each pod's memory working set in bytes, from the kubelet's summary API (through
        the API server's node proxy): pod name -> bytes."""
        raw = self.kubectl("get", "--raw", f"/api/v1/nodes/{self.node.name}/proxy/stats/summary")
        out = {}
        for pod in json.loads(raw).get("pods") or []:
            ref = pod.get("podRef") or {}
            if ref.get("namespace") == NAMESPACE:
                out[ref["name"]] = int((pod.get("memory") or {}).get("workingSetBytes") or 0)
        return out
