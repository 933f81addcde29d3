"""The controller is invisible on the wire (issue 25): a VM pings its gateway every 100 ms
while the controller's leader pod is killed ten times (SIGKILL of its container, as a crash)
and the Deployment is rolled out; the gateway is OVN's, the controller only wrote the group,
so no reply may be lost. The controller runs as the shipped Deployment on the bed's node
(hack/deploy.py), the VM on the bed's data plane (hack/dataplane.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from hack.cluster import LocalCluster
from hack.dataplane import Prober
from hack.deploy import NAMESPACE, ControllerDeployment, DeployError
from hack.objects import Admin
from hack.wait import wait_for
from tests.support.nodebed import node_bed
from tests.test_wire_integration import Tenant, reaches

pytestmark = pytest.mark.integration

WAIT = 120.0
KILLS = 10


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from node_bed(tmp_path_factory.mktemp("wire-restarts"), with_peers=True)


@pytest.fixture(scope="module")
def admin(bed: LocalCluster) -> Iterator[Admin]:
    api = bed.api_client("admin")
    try:
        yield Admin(api)
    finally:
        api.close()


@pytest.fixture(scope="module")
def deployed(bed: LocalCluster) -> ControllerDeployment:
    d = ControllerDeployment(bed)
    try:
        d.install()
        d.wait_rolled_out(timeout=180)
    except DeployError as e:
        pytest.fail(str(e), pytrace=False)
    return d


def kill_leader(bed: LocalCluster, deployed: ControllerDeployment) -> tuple[str, str]:
    """SIGKILL the leader pod's container (a crash: no Lease release); returns the old and
    the new Lease holder once another pod holds it and both pods run again."""
    old = deployed.leader()
    pod = next(p for p in deployed.pods() if p["metadata"]["name"] == old)
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    assert bed.node is not None
    bed.node.ctr("tasks", "kill", "-s", "SIGKILL", cid)
    new = wait_for(lambda: (h := deployed.holder()) and h != old and h, timeout=WAIT, interval=0.1,
                   what="another pod holding the Lease")
    deployed.wait_rolled_out(timeout=WAIT)
    return old, new


def test_a_vm_loses_no_ping_to_its_gateway_through_ten_leader_kills_and_a_rollout(bed, admin, deployed):
    dp = bed.dataplane
    if dp is None:
        pytest.fail("the bed has no data plane", pytrace=False)
    n = Tenant(admin, 3400).subnet(85)
    n.wait("GatewayReady", "ChassisAssigned")
    n.wait("Ready", "Ready")
    vm = n.vm(dp, "vm-steady")
    assert reaches(vm, n.gateway)
    ping = Prober(vm, "ping", n.gateway, interval=0.1)
    try:
        wait_for(lambda: ping.replies, timeout=30, what="the first reply")
        start = time.monotonic()
        takeovers = [kill_leader(bed, deployed) for _ in range(KILLS)]
        before = {p["metadata"]["name"] for p in deployed.pods()}
        deployed.kubectl("rollout", "restart", "deployment/proxmox-network-controller", "-n", NAMESPACE)
        wait_for(lambda: not ({p["metadata"]["name"] for p in deployed.pods()} & before) and not deployed.pending(),
                 timeout=WAIT, interval=0.2, what="the rollout done")
        end = time.monotonic()
        wait_for(lambda: ping.replies[-1] > end, timeout=10, what="a reply after the rollout")
    finally:
        ping.stop()
    gap, lost = ping.longest_gap(start, end), ping.lost()
    print(f"\n[wire] {KILLS} leader kills and a rollout in {end - start:.1f}s: {len(ping.seqs)} replies, {lost} lost, "
          f"longest gap {gap:.2f}s; Lease holders {[new for _, new in takeovers]}")
    assert len({old for old, _ in takeovers}) >= 2  # the kills hit different pods
    assert lost == 0, f"{lost} echo replies lost, longest gap {gap:.2f}s"
    assert n.network()["status"]["vlan"] == vm.vlan
