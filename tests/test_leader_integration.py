"""Integration tests of controller.runtime.leader against the real kube-apiserver (hack/cluster.py).

Each replica is a :class:`LeaderElector` on its own ApiClient as the controller's
service-account user (RBAC: manifests/rbac/03-leader-election.yaml, Leases in
``kube-system``, the product's one place for them), each test on a Lease of its own. A sampler thread checks
every few milliseconds that the replicas never both believe they lead. Waits poll with
a deadline; nothing asserts how long a takeover took.
"""

from __future__ import annotations

import re
import secrets
import threading
from typing import Any, Iterator

import pytest

from controller.runtime.kube import ApiError, KubeWriter
from controller.runtime.leader import DEFAULT_LEASE_NAMESPACE, LeaderElector, lease_path
from hack.tools.wait import wait_for

pytestmark = pytest.mark.integration

NS = DEFAULT_LEASE_NAMESPACE  # kube-system: where the controller user may hold Leases (rbac/03-leader-election.yaml)
MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


class CuttableWriter(KubeWriter):
    """A KubeWriter whose requests can be cut off (a replica partitioned from the API
    server); counts the lease updates it sent."""

    def __init__(self, api_client) -> None:
        super().__init__(api_client)
        self.cut = False
        self.puts = 0

    def request(self, method, path, body=None, content_type="application/json", query=None,
                timeout=None) -> dict[str, Any]:
        if self.cut:
            raise ConnectionRefusedError("test: partitioned from the API server")
        out = super().request(method, path, body, content_type, query, timeout)
        if method == "PUT":
            self.puts += 1
        return out


class Replica:
    def __init__(self, cluster, lease: str, name: str, events: list[str], **durations) -> None:
        self.api = cluster.api_client("controller")
        self.writer = CuttableWriter(self.api)
        self.name = name
        self.events = events
        self.started = 0
        self.stopped = 0
        self.healthy = True
        self.elector = LeaderElector(
            self.writer, NS, lease, identity=f"{name}_{secrets.token_hex(4)}",
            on_started_leading=self._on_started, on_stopped_leading=self._on_stopped,
            healthy=lambda: self.healthy, **durations,
        )
        self.thread = threading.Thread(target=self.elector.run, name=f"elector-{name}", daemon=True)

    def _on_started(self) -> None:
        self.started += 1
        self.events.append(f"{self.name} started")

    def _on_stopped(self) -> None:
        self.stopped += 1
        self.events.append(f"{self.name} stopped")

    def start(self) -> "Replica":
        self.thread.start()
        return self

    def close(self) -> None:
        self.elector.stop(release=False)
        self.thread.join(30)
        self.api.close()


class Sampler:
    """Samples ``is_leader`` of all replicas until closed; records any instant at which
    more than one replica believed it led."""

    def __init__(self, replicas: list[Replica]) -> None:
        self.replicas = replicas
        self.violations: list[list[str]] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            leaders = [r.name for r in self.replicas if r.elector.is_leader]
            self.samples += 1
            if len(leaders) > 1:
                self.violations.append(leaders)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def lease_name(cluster) -> Iterator[str]:
    name = f"test-leader-{secrets.token_hex(4)}"
    yield name
    admin = cluster.api_client("admin")
    try:
        KubeWriter(admin).request("DELETE", lease_path(NS, name))
    except ApiError:
        pass
    finally:
        admin.close()


@pytest.fixture
def replicas(cluster, lease_name) -> Iterator[Any]:
    made: list[Replica] = []
    events: list[str] = []

    def make(name: str, **durations) -> Replica:
        r = Replica(cluster, lease_name, name, events, **durations)
        made.append(r)
        return r

    make.events = events  # type: ignore[attr-defined]
    yield make
    for r in made:
        r.close()


def read_lease(cluster, name: str) -> dict[str, Any]:
    admin = cluster.api_client("admin")
    try:
        return KubeWriter(admin).request("GET", lease_path(NS, name))
    finally:
        admin.close()


# Short enough for a test, long enough that a stall of the loaded API server (a renew taking
# a second or two) does not end a leadership the test did not mean to end.
SHORT = dict(lease_duration=8.0, renew_deadline=6.0, retry_period=1.0)


@pytest.mark.parametrize("how", ["partitioned", "unhealthy"])
def test_standby_takes_over_when_the_leader_stops_renewing(cluster, lease_name, replicas, how):
    r1 = replicas("r1", **SHORT).start()
    wait_for(lambda: r1.elector.is_leader, timeout=30, what="r1 leads")
    r2 = replicas("r2", **SHORT).start()
    sampler = Sampler([r1, r2])
    try:
        wait_for(lambda: r2.elector.observed_holder == r1.elector.identity, timeout=30, what="r2 sees r1 lead")
        puts = r1.writer.puts
        wait_for(lambda: r1.writer.puts >= puts + 3, timeout=30, what="r1 renews")
        assert not r2.elector.is_leader and r2.started == 0

        spec = read_lease(cluster, lease_name)["spec"]
        assert spec["holderIdentity"] == r1.elector.identity
        assert spec["leaseDurationSeconds"] == SHORT["lease_duration"]
        assert spec["leaseTransitions"] == 0
        assert MICRO.match(spec["renewTime"]) and MICRO.match(spec["acquireTime"])

        replicas.events.append("renewals stop")
        if how == "partitioned":
            r1.writer.cut = True  # r1 cannot reach the API server: its renews fail
        else:
            r1.healthy = False  # B13: r1's work loop died; it must stop renewing

        # The callbacks, not only the flags: is_leader turns true (and finished, for r1)
        # just before the elector's thread calls on_started_leading (on_stopped_leading).
        wait_for(lambda: r2.elector.is_leader and r2.started == 1, timeout=60, what="r2 takes over")
        wait_for(lambda: r1.elector.finished and r1.stopped == 1, timeout=30, what="r1 done")
    finally:
        sampler.close()

    assert sampler.violations == [], f"both led at some instant ({sampler.samples} samples)"
    assert sampler.samples > 100
    assert r1.stopped == 1 and r1.started == 1 and r2.started == 1 and r2.stopped == 0
    assert r1.elector.lost_reason == ("renew deadline exceeded" if how == "partitioned" else "work loop not healthy")
    # r2 started only after r1's renewals stopped (which instant r1's callback ran at is
    # not asserted: the sampler checked that their beliefs never overlapped)
    ev = replicas.events
    assert sorted(ev) == ["r1 started", "r1 stopped", "r2 started", "renewals stop"]
    assert ev.index("r1 started") < ev.index("renewals stop") < min(ev.index("r1 stopped"), ev.index("r2 started"))
    spec = read_lease(cluster, lease_name)["spec"]
    assert spec["holderIdentity"] == r2.elector.identity
    assert spec["leaseTransitions"] == 1


def test_release_on_stop_hands_over_without_waiting_for_expiry(cluster, lease_name, replicas):
    # A lease far longer than the wait below: r2 can only lead in time because r1 released.
    long = dict(lease_duration=120.0, renew_deadline=60.0, retry_period=0.5)
    r1 = replicas("r1", **long).start()
    wait_for(lambda: r1.elector.is_leader, timeout=30, what="r1 leads")
    r2 = replicas("r2", **long).start()
    sampler = Sampler([r1, r2])
    try:
        wait_for(lambda: r2.elector.observed_holder == r1.elector.identity, timeout=30, what="r2 sees r1 lead")
        r1.elector.stop()  # release (SIGTERM path)
        r1.thread.join(30)
        assert not r1.thread.is_alive()
        assert r1.stopped == 1 and r1.elector.lost_reason == "stopped"
        wait_for(lambda: r2.elector.is_leader and r2.started == 1, timeout=30,
                 what="r2 takes over the released lease")
    finally:
        sampler.close()
    assert sampler.violations == []
    # the release is written before r1's callback runs (the callback exits the process),
    # so r2 may start before or after it
    assert replicas.events[0] == "r1 started"
    assert sorted(replicas.events) == ["r1 started", "r1 stopped", "r2 started"]
    spec = read_lease(cluster, lease_name)["spec"]
    assert spec["holderIdentity"] == r2.elector.identity
    assert spec["leaseTransitions"] == 1
    assert spec["leaseDurationSeconds"] == 120


def test_replicas_starting_together_elect_exactly_one(cluster, lease_name, replicas):
    rs = [replicas(f"r{i}", **SHORT) for i in range(3)]
    sampler = Sampler(rs)
    try:
        for r in rs:
            r.start()
        leader = wait_for(lambda: next((r for r in rs if r.elector.is_leader), None), timeout=30, what="a leader")
        others = [r for r in rs if r is not leader]
        wait_for(lambda: all(r.elector.observed_holder == leader.elector.identity for r in others),
                 timeout=30, what="standbys see the leader")
        puts = leader.writer.puts
        wait_for(lambda: leader.writer.puts >= puts + 4, timeout=30, what="leader renews")
    finally:
        sampler.close()
    assert sampler.violations == []
    assert leader.elector.is_leader
    assert [r.started for r in rs].count(1) == 1 and all(r.stopped == 0 for r in rs)
    assert read_lease(cluster, lease_name)["spec"]["holderIdentity"] == leader.elector.identity


def test_controller_user_may_not_touch_leases_elsewhere(cluster, lease_name):
    # The Role is namespaced: the elector works only in the controller's namespace.
    api = cluster.api_client("controller")
    try:
        with pytest.raises(ApiError) as err:
            KubeWriter(api).request("GET", lease_path("default", lease_name))
        assert err.value.status == 403
    finally:
        api.close()
