"""The controller as the Deployment of manifests/ on the bed's node (issue 17 part 3).

``kubectl apply -k hack/deploy-overlay`` (hack/bed/deploy.py) on ``LocalCluster(with_node=True,
with_peers=True)``: the shipped Deployment (replicas, strategy, probes, resources,
securityContext) and RBAC, with only the bed's changes of the overlay, runs the image of
hack/build-image.sh under the real kubelet, next to the real kube-ovn-controller and IPAM
provider. Asserted here:

* the Deployment's 2 pods run on the node, both Ready (readiness = serving, not leading:
  product-decisions §9) and one of them holds the Lease, and the live pod spec is the shipped one;
* each pod uses in-cluster config (its log says so and names the node's gateway) and its
  requests reach the API server as the service account with the kubelet's bound token
  (the audit log's ``authentication.kubernetes.io/pod-name``), none of them refused (RBAC);
* a network converges through the pod: Ready, with its HA chassis group in the NB that the
  pod reaches through the bed's forwarder;
* the root filesystem is read-only (a write from inside the container fails);
* the leader's pod deleted: the standby takes the Lease, the ReplicaSet starts a third pod,
  and the rollout is whole again (2 Running and Ready);
* ``kubectl rollout restart`` with the ordinary strategy (``maxSurge: 1``,
  ``maxUnavailable: 0``, a 600 s progress deadline): ``kubectl rollout status`` returns, the
  Deployment shows 2 of 2 available and ``NewReplicaSetAvailable``, a new pod leads; the
  longest time without a Lease holder is printed;
* nothing restarted, no liveness probe failed and each pod's memory is below its limit.

The figures (time to Ready, time to a new leader, memory) are printed, not asserted.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml
from kubernetes.utils import parse_quantity

from hack.bed import LocalCluster, ovsdb_rows
from hack.bed.deploy import NAMESPACE, ControllerDeployment, DeployError, ready, restarts
from hack.tools.audit import read_events
from hack.tools.objects import Admin, reason, unique, wait_condition
from hack.tools.wait import wait_for
from tests.support.beds import admin_of
from tests.support.nodebed import node_bed
from tests.support.peers import IPAM, KUBEOVN, POOL_V, Trunk, make_vpc

pytestmark = [pytest.mark.integration, pytest.mark.node, pytest.mark.image]

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = next(d for d in yaml.safe_load_all((ROOT / "manifests" / "deploy" / "deployment.yaml").read_text())
               if d and d.get("kind") == "Deployment")
SA_USER = "system:serviceaccount:proxmox-network-system:proxmox-network-controller"
VPC = "vpc-d"
WAIT = 90.0


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from node_bed(tmp_path_factory.mktemp("deploy"), with_peers=True)


@pytest.fixture(scope="module")
def deployed(bed: LocalCluster) -> ControllerDeployment:
    d = ControllerDeployment(bed)
    try:
        d.install()
        seconds = d.wait_rolled_out(timeout=180)
    except DeployError as e:
        pytest.fail(str(e), pytrace=False)
    print(f"\n[deploy] 2 pods Running, the leader Ready {seconds:.1f}s after kubectl apply -k")
    return d


@pytest.fixture(scope="module")
def admin(bed: LocalCluster) -> Iterator[Admin]:
    yield from admin_of(bed)


def container(spec: dict) -> dict:
    return spec["template"]["spec"]["containers"][0]


def contains(got: object, want: object) -> bool:
    """``want`` is ``got`` with only the API server's defaults added (e.g. ``scheme: HTTP``)."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and contains(got[k], v) for k, v in want.items())
    return got == want


def test_two_pods_run_on_the_node_both_ready_and_one_holds_the_lease(bed: LocalCluster,
                                                                     deployed: ControllerDeployment) -> None:
    assert bed.node is not None
    pods = deployed.pods()
    assert len(pods) == SHIPPED["spec"]["replicas"] == 2
    assert {p["spec"]["nodeName"] for p in pods} == {bed.node.name}
    assert all(p["status"]["phase"] == "Running" for p in pods)
    names = sorted(p["metadata"]["name"] for p in pods)
    wait_for(lambda: sorted(p["metadata"]["name"] for p in deployed.pods() if ready(p)) == names, timeout=WAIT,
             what="both pods Ready (readiness = serving)")
    assert deployed.holder() in names
    dep = wait_for(lambda: (d := deployed.deployment())["status"].get("availableReplicas") == 2 and d, timeout=WAIT,
                   what="2 of 2 available")
    assert dep["status"].get("readyReplicas") == 2
    # Every pod's IP is on the node's bridge network.
    assert all(p["status"]["podIP"].startswith(str(bed.node.pod_subnet).rsplit(".", 1)[0] + ".") for p in pods)


def test_the_live_deployment_is_the_shipped_one_but_for_the_overlay(deployed: ControllerDeployment) -> None:
    live = deployed.deployment()["spec"]
    shipped = SHIPPED["spec"]
    assert live["replicas"] == shipped["replicas"]
    assert live["strategy"] == shipped["strategy"]
    pod, want = live["template"]["spec"], shipped["template"]["spec"]
    assert pod["serviceAccountName"] == want["serviceAccountName"]
    assert contains(pod["securityContext"], want["securityContext"])
    got, ship = container(live), container(shipped)
    for key in ("securityContext", "resources", "readinessProbe", "livenessProbe", "ports", "volumeMounts"):
        if isinstance(ship[key], list):
            assert len(got[key]) == len(ship[key]) and all(map(contains, got[key], ship[key])), key
        else:
            assert contains(got[key], ship[key]), (key, got[key], ship[key])
    # The overlay only appends the NB address; the shipped args come first, unchanged.
    assert got["args"][:len(ship["args"])] == ship["args"]
    assert got["args"][len(ship["args"]):] == ["--ovn-nb-address=$(PNC_TESTBED_OVN_NB_ADDRESS)", "--ovn-sb-address="]
    assert got["image"] == deployed.image and got["imagePullPolicy"] == "Never"


def test_each_pod_uses_its_service_accounts_token_and_is_refused_nothing(bed: LocalCluster,
                                                                         deployed: ControllerDeployment) -> None:
    assert bed.node is not None
    server = f"https://{bed.node.gateway}:{bed.node.forward_ports['api-forward']}"
    names = [p["metadata"]["name"] for p in deployed.pods()]
    for name in names:
        lines = [json.loads(line) for line in deployed.logs(name).splitlines() if line.startswith("{")]
        configured = [e for e in lines if e.get("event") == "kubernetes client configured"]
        assert configured and configured[0]["source"] == "in-cluster" and configured[0]["server"] == server, lines[:5]
    # The kubelet's projected token is bound to the pod: the API server says which one.
    by_pod: dict[str, int] = {}
    refused = []
    for ev in read_events(bed):
        user = ev.get("user") or {}
        if user.get("username") != SA_USER or ev.get("stage") != "ResponseComplete":
            continue
        for pod in (user.get("extra") or {}).get("authentication.kubernetes.io/pod-name") or []:
            by_pod[pod] = by_pod.get(pod, 0) + 1
        if (ev.get("responseStatus") or {}).get("code") == 403:
            refused.append(f"{ev.get('verb')} {ev.get('requestURI')}")
    assert set(names) <= set(by_pod), by_pod
    assert refused == []


def test_the_root_filesystem_is_read_only(deployed: ControllerDeployment) -> None:
    pod = deployed.pods()[0]["metadata"]["name"]
    r = deployed.cluster.run_kubectl(
        "exec", "-n", NAMESPACE, pod, "-c", "controller", "--", "python3", "-c",
        "import os\n"
        "try:\n    open('/probe-write', 'w')\nexcept OSError as e:\n    print('refused', e.strerror)\n"
        "else:\n    print('written')\n"
        "print('uid', os.getuid(), os.getgid())",
        check=False,
    )
    out = r.stdout.decode()
    assert r.returncode == 0, r.stderr.decode()
    assert "refused Read-only file system" in out, out
    assert "uid 65532 65532" in out, out


def test_a_network_converges_through_the_pod(bed: LocalCluster, deployed: ControllerDeployment, admin: Admin) -> None:
    """Zone, network, a VPC Subnet with ``logicalGateway`` (Kube-OVN makes its router
    port) and a pool: Ready, with the HA chassis group the pod wrote over the forwarded NB."""
    trunk = Trunk(admin, (("dworker1", "ch-dworker1"), ("dworker2", "ch-dworker2")))
    make_vpc(admin, VPC)
    zone, ns, sub = unique("zone"), unique("tenant"), unique("ds")
    admin.create_zone(zone, trunk.provider, ["3100-3199"])
    admin.core.create_namespace({"metadata": {"name": ns}})
    admin.create_network(ns, "net", zone, sub, "pool")
    admin.co.create_cluster_custom_object(*KUBEOVN, "subnets", {
        "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": sub},
        "spec": {"vpc": VPC, "vlan": sub, "cidrBlock": "10.77.0.0/24", "gateway": "10.77.0.1", "protocol": "IPv4",
                 "logicalGateway": True, "excludeIps": ["10.77.0.200..10.77.0.250"]}})
    admin.co.create_namespaced_custom_object(IPAM, POOL_V, ns, "inclusterippools", {
        "apiVersion": f"{IPAM}/{POOL_V}", "kind": "InClusterIPPool", "metadata": {"name": "pool"},
        "spec": {"addresses": ["10.77.0.200-10.77.0.250"], "prefix": 24, "gateway": "10.77.0.1"}})
    obj = wait_condition(admin, ns, "net", "Ready", "Ready", timeout=WAIT)
    assert reason(obj, "GatewayReady")[:2] == ("True", "ChassisAssigned")
    assert obj["status"]["vlan"] == 3100
    group = f"px-{VPC}-{sub}"
    groups = ovsdb_rows(bed.nbctl, "HA_Chassis_Group", f"name={group}")
    assert len(groups) == 1


def test_the_leaders_pod_deleted_a_standby_takes_over_and_the_replicaset_replaces_it(
        deployed: ControllerDeployment) -> None:
    old = deployed.leader()
    before = {p["metadata"]["name"] for p in deployed.pods()}
    t0 = time.monotonic()
    deployed.kubectl("delete", "pod", "-n", NAMESPACE, old, "--wait=false")
    new = wait_for(lambda: (h := deployed.holder()) and h != old and h, timeout=WAIT,
                   interval=0.1, what="a new Lease holder")
    took_lease = time.monotonic() - t0
    # Either may win: the standby tries every 2-4.4 s (jittered), the ReplicaSet's new pod
    # as soon as its caches have synced.
    who = "the standby" if new in before else "the replacement"
    rolled = deployed.wait_rolled_out(timeout=WAIT)
    whole = time.monotonic() - t0
    names = {p["metadata"]["name"] for p in deployed.pods()}
    assert old not in names and len(names - before) == 1, (before, names)
    assert deployed.leader() == new
    print(f"\n[deploy] leader pod deleted: {who} {new} held the Lease after {took_lease:.1f}s, Ready with the "
          f"ReplicaSet's replacement Running after {whole:.1f}s ({rolled:.1f}s after the takeover)")


def test_a_rollout_is_an_ordinary_one_and_completes(deployed: ControllerDeployment) -> None:
    """``kubectl rollout restart`` with the shipped strategy (``maxSurge: 1``,
    ``maxUnavailable: 0``, ``progressDeadlineSeconds: 600``): every warm replica is Ready, so
    ``kubectl rollout status`` returns and the Deployment shows 2 of 2 available with
    ``NewReplicaSetAvailable``; a new pod holds the Lease. The Lease holder is sampled every
    0.1 s through the rollout: the longest time with no holder among the Running pods and the
    handovers are printed (figures, not assertions)."""
    import threading

    before = {p["metadata"]["name"] for p in deployed.pods()}
    samples: list[tuple[float, str]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.1):
            try:
                samples.append((time.monotonic(), deployed.holder()))
            except Exception:  # noqa: BLE001 - the API answered nothing this time
                samples.append((time.monotonic(), ""))

    threading.Thread(target=sample, daemon=True).start()
    t0 = time.monotonic()
    try:
        deployed.kubectl("rollout", "restart", "deployment/proxmox-network-controller", "-n", NAMESPACE)
        out = deployed.kubectl("rollout", "status", "deployment/proxmox-network-controller", "-n", NAMESPACE,
                               "--timeout=300s", timeout=320)
        took = time.monotonic() - t0
        wait_for(lambda: not ({p["metadata"]["name"] for p in deployed.pods()} & before) and not deployed.pending(),
                 timeout=WAIT, interval=0.1, what="two new pods, Ready, one of them leading")
    finally:
        done.set()
    samples.append((time.monotonic(), deployed.holder()))  # the end: a gap still open closes here
    assert "successfully rolled out" in out, out
    dep = wait_for(lambda: (d := deployed.deployment())["status"].get("availableReplicas") == 2
                   and d["status"].get("updatedReplicas") == 2 and d, timeout=WAIT, what="2 of 2 available")
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert dep["spec"]["progressDeadlineSeconds"] == 600
    conditions = {c["type"]: c for c in dep["status"].get("conditions") or []}
    assert (conditions["Progressing"]["status"], conditions["Progressing"]["reason"]) == ("True", "NewReplicaSetAvailable")
    assert conditions["Available"]["status"] == "True"
    assert deployed.holder() not in before
    holders = [h for _, h in samples]
    handovers = [f"{a or '-'} -> {b or '-'}" for a, b in zip(holders, holders[1:]) if a != b]
    gap, since = 0.0, None
    for t, h in samples:
        if not h:
            since = t if since is None else since
        elif since is not None:
            gap, since = max(gap, t - since), None
    print(f"\n[deploy] rollout restart (maxSurge 1, maxUnavailable 0): rollout status returned after {took:.1f}s; "
          f"Lease handovers {handovers}; longest time with no holder {gap:.1f}s")


def test_nothing_restarted_and_no_liveness_probe_failed(bed: LocalCluster, deployed: ControllerDeployment) -> None:
    pods = deployed.pods()
    assert [restarts(p) for p in pods] == [0] * len(pods), deployed.describe()
    events = json.loads(deployed.kubectl("get", "events", "-n", NAMESPACE, "-o", "json"))["items"]
    bad = [f"{e['involvedObject']['name']}: {e['reason']}: {e.get('message')}" for e in events
           if e["reason"] in ("BackOff", "OOMKilling", "Failed", "FailedMount", "FailedCreatePodSandBox")
           or (e["reason"] == "Unhealthy" and "Liveness" in (e.get("message") or ""))]
    assert bad == []
    limit = container(SHIPPED["spec"])["resources"]["limits"]["memory"]
    limit_bytes = int(parse_quantity(limit))
    memory = wait_for(lambda: (m := deployed.memory()) and len(m) >= len(pods) and all(m.values()) and m,
                      timeout=WAIT, what="the kubelet's memory figures for the pods")
    for name, used in sorted(memory.items()):
        print(f"\n[deploy] pod {name}: working set {used / 2**20:.0f} MiB of its {limit} limit")
        assert used < limit_bytes
