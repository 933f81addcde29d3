"""Shared pytest fixtures: the local test bed (hack/cluster.py) and clients for it.

Fixtures
  cluster            session: a started LocalCluster (etcd + kube-apiserver + OVN NB and SB)
                     without the peers (with_peers=False): its tests write Kube-OVN's
                     and the IPAM provider's state by hand.
                     Set PNC_CLUSTER_DIR=<dir> to reuse a bed started with
                     `python hack/cluster.py start --dir <dir>` (it is left running).
  admin_client       kubernetes.client.ApiClient as the admin (system:masters).
  controller_client  kubernetes.client.ApiClient as the controller's service-account user.
  kubectl            kubectl(*args, input=None, user="admin", check=True) -> stdout (str);
                     raises KubectlError (with stderr) on a non-zero exit.
  unique_namespace   name of a fresh namespace; deleted (best effort) afterwards.
  peers_bed          module: a LocalCluster of the module's own with the real
                     kube-ovn-controller and IPAM provider (with_peers=True); a module
                     fixture, because its tests stop, kill and pause the peers.
  peers_admin        module: hack.tools.objects.Admin on peers_bed.
  peers_restored     function: whatever the test did to peers_bed's peers (stopped, killed,
                     paused), both run again afterwards.

Integration tests carry ``@pytest.mark.integration``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hack.bed import ClusterError, LocalCluster  # noqa: E402
from hack.tools.objects import Admin  # noqa: E402
from tests.support.beds import admin_of, running  # noqa: E402


class KubectlError(ClusterError):
    """kubectl exited non-zero; ``stderr`` holds its message."""

    def __init__(self, args: tuple[str, ...], returncode: int, stderr: str) -> None:
        super().__init__(f"kubectl {' '.join(args)} failed ({returncode}): {stderr.strip()}")
        self.args_ = args
        self.returncode = returncode
        self.stderr = stderr


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    attach = os.environ.get("PNC_CLUSTER_DIR")
    if attach:
        try:
            yield LocalCluster.attach(attach)
        except ClusterError as e:
            pytest.fail(f"PNC_CLUSTER_DIR={attach}: {e}", pytrace=False)
        return
    # No peers here: these tests write Kube-OVN's and the IPAM provider's state by hand.
    yield from running(LocalCluster(tmp_path_factory.mktemp("cluster"), with_peers=False), "test bed")


@pytest.fixture(scope="module")
def peers_bed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A bed with the real peers for the module; with the data plane (chassis, the trunk,
    Kube-OVN's node agents) only for a module that says ``BED_DATAPLANE = True``: the others
    make their trunk Nodes by hand and need none of its processes."""
    dataplane = bool(getattr(request.module, "BED_DATAPLANE", False))
    yield from running(LocalCluster(tmp_path_factory.mktemp("peers"), with_peers=True, with_dataplane=dataplane),
                       "test bed with peers")


@pytest.fixture(scope="module")
def peers_admin(peers_bed: LocalCluster) -> Iterator[Admin]:
    yield from admin_of(peers_bed)


@pytest.fixture
def peers_restored(peers_bed: LocalCluster) -> Iterator[None]:
    from tests.support.peers import restore_peers

    try:
        yield
    finally:
        restore_peers(peers_bed)


@pytest.fixture
def admin_client(cluster: LocalCluster):
    api = cluster.api_client("admin")
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def controller_client(cluster: LocalCluster):
    api = cluster.api_client("controller")
    try:
        yield api
    finally:
        api.close()


@pytest.fixture(scope="session")
def kubectl(cluster: LocalCluster) -> Callable[..., str]:
    def run(*args: str, input: str | bytes | None = None, user: str = "admin", check: bool = True,
            timeout: float = 120) -> str:
        r = cluster.run_kubectl(*args, user=user, input=input, check=False, timeout=timeout)
        if check and r.returncode != 0:
            raise KubectlError(args, r.returncode, r.stderr.decode(errors="replace"))
        return r.stdout.decode(errors="replace")

    return run


def _ns_name(nodename: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", nodename.lower()).strip("-")[:40].strip("-") or "t"
    return f"{base}-{secrets.token_hex(3)}"


@pytest.fixture
def unique_namespace(request: pytest.FixtureRequest, admin_client) -> Iterator[str]:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(admin_client)
    name = _ns_name(request.node.name)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        # No controller-manager: the namespace stays Terminating forever. That is fine.
        try:
            core.delete_namespace(name)
        except (ApiException, OSError):
            pass


# ------------------------------------------------------------------ where the suite's time goes
# Issue 28: every run prints the time each module took (setup, call and teardown of its
# tests, so a module's own bed counts to it) and how many tests it ran, largest first, so a
# slow or failing CI run names its largest shares without a second run. Under pytest-xdist
# the reports reach the controlling process, which adds them up the same way.
_MODULE_SECONDS: dict[str, list[float]] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--module-seconds-out", metavar="PATH", default=None,
                     help="write each module's seconds (setup + call + teardown) as JSON to PATH; "
                          "tests/module_seconds.json is the record the workers' order reads (tests/support/schedule.py)")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile``: whole modules per worker, the longest first (tests/support/schedule.py)."""
    if config.getoption("dist") != "loadfile":
        return None
    from tests.support.schedule import LongestModuleFirst

    return LongestModuleFirst(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report carries the beds started during it (``bed_starts``: their seconds),
    so the controlling process can count them per module, workers or not."""
    outcome = yield
    report = outcome.get_result()
    started = LocalCluster.starts[_beds_reported[0]:]
    _beds_reported[0] = len(LocalCluster.starts)
    if started:
        report.user_properties.append(("bed_starts", list(started)))


_beds_reported = [0]  # how many of this process' LocalCluster.starts a report has carried


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0]
    entry = _MODULE_SECONDS.setdefault(module, [0.0, 0, 0, 0.0])
    entry[0] += report.duration
    if report.when == "call":
        entry[1] += 1
    for name, value in report.user_properties:
        if name == "bed_starts":
            entry[2] += len(value)
            entry[3] += sum(value)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001 - pytest's signature
    if not _MODULE_SECONDS:
        return
    out = config.getoption("module_seconds_out")
    if out:
        Path(out).write_text(json.dumps({m: round(e[0], 1) for m, e in sorted(_MODULE_SECONDS.items())}, indent=1) + "\n")
    total = sum(e[0] for e in _MODULE_SECONDS.values())
    terminalreporter.section("time by module (setup + call + teardown; beds started and their start-up seconds)")
    for module, (seconds, tests, beds, bed_seconds) in sorted(_MODULE_SECONDS.items(), key=lambda kv: -kv[1][0])[:30]:
        terminalreporter.write_line(f"{seconds:8.1f}s {100 * seconds / total:5.1f}% {int(tests):5d} tests "
                                    f"{int(beds):3d} beds {bed_seconds:6.1f}s  {module}")
    beds = sum(int(e[2]) for e in _MODULE_SECONDS.values())
    terminalreporter.write_line(f"{total:8.1f}s in all, {len(_MODULE_SECONDS)} modules; {beds} beds started, "
                                f"{sum(e[3] for e in _MODULE_SECONDS.values()):.1f}s of start-up")
