"""Unit tests of controller.runtime.leader (client-go leaderelection semantics on a Lease).

The Lease API is an in-memory fake that honours resourceVersion (409 on a stale update,
AlreadyExists on a second create); time is a fake clock moved by hand. Only the two
``run()`` thread tests use real time, with generous safety timeouts and no timed
assertions.
"""

from __future__ import annotations

import copy
import math
import random
import socket
import re
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from controller.runtime.kube import ApiError
from controller.runtime.leader import (
    DEFAULT_LEASE_NAME,
    EXIT_LEASE_EXPIRED,
    HardDeadline,
    LeaderElector,
    LeaseRecord,
    DEFAULT_LEASE_NAMESPACE,
    default_identity,
    identity_host,
    identity_namespace,
    format_micro_time,
    lease_path,
)
from controller.runtime.result import LostLeadership, Stopping
from tests.support.clock import FakeClock
from hack.tools.wait import wait_for

NS = "proxmox-network-system"
PATH = lease_path(NS, DEFAULT_LEASE_NAME)
MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


class FakeWall:
    """Wall clock deliberately unrelated to the monotonic clock (skewed, frozen)."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 29, 21, 0, 0, 123456, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        self.now += timedelta(microseconds=1)
        return self.now


class FakeLeaseApi:
    """In-memory Lease store: get / create / update; an update with a stale
    resourceVersion is a 409 Conflict, a second create a 409 AlreadyExists."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict] = {}
        self.rv = 0
        self.writes: list[tuple[str, dict]] = []

    def _bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    def get(self, namespace: str, name: str) -> dict:
        try:
            return copy.deepcopy(self.objects[(namespace, name)])
        except KeyError:
            raise ApiError(404, "NotFound", f'leases "{name}" not found') from None

    def create(self, namespace: str, obj: dict) -> dict:
        name = obj["metadata"]["name"]
        if (namespace, name) in self.objects:
            raise ApiError(409, "AlreadyExists", f'leases "{name}" already exists')
        stored = copy.deepcopy(obj)
        stored["metadata"].update(namespace=namespace, resourceVersion=self._bump())
        self.objects[(namespace, name)] = stored
        self.writes.append(("create", copy.deepcopy(stored)))
        return copy.deepcopy(stored)

    def update(self, namespace: str, name: str, obj: dict) -> dict:
        current = self.get(namespace, name)
        rv = obj["metadata"].get("resourceVersion")
        # Like the API server: no resourceVersion is an unconditional update (Leases allow it).
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified; please apply your changes to the latest version")
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = self._bump()
        self.objects[(namespace, name)] = stored
        self.writes.append(("update", copy.deepcopy(stored)))
        return copy.deepcopy(stored)

    def spec(self, name: str = DEFAULT_LEASE_NAME) -> dict:
        return self.objects[(NS, name)]["spec"]


class FakeClient:
    """One replica's view of the API (the ``KubeWriter.request`` shape) with faults:
    ``fail`` requests error before reaching the store, ``lose`` ones reach it but the
    answer is lost, ``hang`` (an Event) blocks requests until set. ``meddle`` runs
    callbacks inside a later request, before it reaches the store or after it was served
    and before its answer arrives (time passing, another replica acting meanwhile)."""

    PATH_RE = re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases(?:/([^/]+))?$")

    def __init__(self, api: FakeLeaseApi) -> None:
        self.api = api
        self.fail = 0
        self.lose = 0
        self.hang: threading.Event | None = None
        self.requests: list[str] = []
        self.timeouts: list[tuple[float, float] | None] = []  # the HTTP timeout each request was given
        self.hooks: list[list] = []  # [requests to skip, "before"|"after", callback]

    def meddle(self, skip: int, where: str, fn) -> None:
        self.hooks.append([skip, where, fn])

    def _run_hooks(self, where: str) -> None:
        for hook in list(self.hooks):
            if hook[0] == 0 and hook[1] == where:
                self.hooks.remove(hook)
                hook[2]()

    def request(self, method: str, path: str, body=None, content_type: str = "application/json",
                timeout: tuple[float, float] | None = None) -> dict:
        self.requests.append(method)
        self.timeouts.append(timeout)
        if self.hang is not None:
            self.hang.wait()
        try:
            self._run_hooks("before")
            if self.fail:
                self.fail -= 1
                raise ApiError(500, "InternalError", "injected")
            m = self.PATH_RE.match(path)
            assert m, path
            ns, name = m.groups()
            try:
                if method == "GET":
                    out = self.api.get(ns, name)
                elif method == "POST":
                    assert name is None
                    out = self.api.create(ns, body)
                elif method == "PUT":
                    assert body["metadata"]["name"] == name
                    out = self.api.update(ns, name, body)
                else:
                    raise AssertionError(method)
            finally:
                self._run_hooks("after")
            if self.lose:
                self.lose -= 1
                raise ConnectionResetError("injected: answer lost")
            return out
        finally:
            for hook in self.hooks:
                hook[0] -= 1
            self.hooks = [h for h in self.hooks if h[0] >= 0]


class Recorder:
    def __init__(self) -> None:
        self.started = 0
        self.stopped = 0
        self.healthy = True

    def on_started(self) -> None:
        self.started += 1

    def on_stopped(self) -> None:
        self.stopped += 1


def make(api: FakeLeaseApi, clock: FakeClock, identity: str, **kw):
    client = FakeClient(api)
    rec = Recorder()
    kw.setdefault("healthy", lambda: rec.healthy)
    el = LeaderElector(
        client, NS, identity=identity, clock=clock, wall=FakeWall(),
        on_started_leading=rec.on_started, on_stopped_leading=rec.on_stopped,
        rng=random.Random(0), **kw,
    )
    return el, client, rec


def seed_lease(api: FakeLeaseApi, holder: str, renew: str = "2000-01-01T00:00:00.000000Z", duration: int = 15,
               transitions: int = 3) -> None:
    api.create(NS, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": DEFAULT_LEASE_NAME, "namespace": NS},
        "spec": LeaseRecord(holder, duration, renew, renew, transitions).to_spec(),
    })


def renew_by(api: FakeLeaseApi, holder: str) -> None:
    """Another replica renews: same holder, new renewTime."""
    obj = api.get(NS, DEFAULT_LEASE_NAME)
    obj["spec"]["renewTime"] = format_micro_time(datetime.now(timezone.utc))
    api.update(NS, DEFAULT_LEASE_NAME, obj)


# -- small pieces ----------------------------------------------------------------------

def test_micro_time_format():
    dt = datetime(2026, 11, 29, 21, 0, 0, 123456, tzinfo=timezone.utc)
    assert format_micro_time(dt) == "2026-11-29T21:00:00.123456Z"
    assert format_micro_time(dt.replace(microsecond=0)) == "2026-11-29T21:00:00.000000Z"
    plus2 = timezone(timedelta(hours=2))
    assert format_micro_time(datetime(2026, 11, 29, 23, 0, 0, 5, tzinfo=plus2)) == "2026-11-29T21:00:00.000005Z"


def test_default_identity_is_unique_per_process_start():
    a, b = default_identity(), default_identity()
    assert a != b and a.split("_")[0] == b.split("_")[0]


def test_an_identity_names_its_release_namespace_and_host():
    """One Lease per cluster (product-decisions §9): a holder's release is in its identity."""
    ident = default_identity("pnc-a")
    host = socket.gethostname()
    assert ident.startswith(f"pnc-a/{host}_")
    assert (identity_namespace(ident), identity_host(ident)) == ("pnc-a", host)
    assert (identity_namespace(f"{host}_x"), identity_host(f"{host}_x")) == ("", host)  # the reference's form
    assert DEFAULT_LEASE_NAMESPACE == "kube-system"


def test_each_other_holder_is_reported_once_with_the_lease():
    api, clock = FakeLeaseApi(), FakeClock()
    seen: list[tuple[str, str]] = []
    seed_lease(api, "rel-b/pod-1_u1")
    b, _, _ = make(api, clock, "rel-a/pod-2_u2", on_new_holder=lambda h, lease: seen.append((h, lease["kind"])))
    b.step()
    renew_by(api, "rel-b/pod-1_u1")
    clock.advance(3)
    b.step()
    assert seen == [("rel-b/pod-1_u1", "Lease")]  # a renewal is not a new holder
    obj = api.get(NS, DEFAULT_LEASE_NAME)
    obj["spec"]["holderIdentity"] = "rel-c/pod-9_u9"
    api.update(NS, DEFAULT_LEASE_NAME, obj)
    clock.advance(3)
    b.step()
    assert seen[-1] == ("rel-c/pod-9_u9", "Lease") and len(seen) == 2


def test_lease_path_and_default_name():
    assert DEFAULT_LEASE_NAME == "proxmox-network-controller.proxmox.cozystack.io"
    assert lease_path("ns") == "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
    assert lease_path("ns", "x") == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/x"


@pytest.mark.parametrize("kw", [
    dict(lease_duration=10, renew_deadline=10),
    dict(lease_duration=15, renew_deadline=10, retry_period=9),
    dict(lease_duration=3, renew_deadline=2, retry_period=0),
    dict(identity=""),
])
def test_invalid_configuration_is_refused(kw):
    kw.setdefault("identity", "a")
    with pytest.raises(ValueError):
        LeaderElector(FakeClient(FakeLeaseApi()), NS, on_started_leading=lambda: None,
                      on_stopped_leading=lambda: None, **kw)


# -- acquire -------------------------------------------------------------------------

def test_acquires_an_absent_lease_by_creating_it():
    api, clock = FakeLeaseApi(), FakeClock()
    a, _, rec = make(api, clock, "a")
    assert not a.is_leader and a.last_renew_age() is None
    assert a.step() == a.retry_period
    assert a.is_leader and rec.started == 1 and rec.stopped == 0
    spec = api.spec()
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert MICRO.match(spec["acquireTime"]) and spec["acquireTime"] == spec["renewTime"]
    assert [w[0] for w in api.writes] == ["create"]


def test_create_race_already_exists_is_retried():
    api, clock = FakeLeaseApi(), FakeClock()
    a, ca, rec = make(api, clock, "a")

    class Racer(FakeClient):
        def request(self, method, path, body=None, content_type="application/json"):
            if method == "POST":  # someone created it between our GET and POST
                seed_lease(api, "b")
            return super().request(method, path, body, content_type)

    a.writer = Racer(api)
    wait = a.step()
    assert not a.is_leader and rec.started == 0
    assert a.retry_period <= wait <= a.retry_period * 2.2
    assert a.observed_holder is None  # nothing observed from the failed create
    a.writer = ca
    a.step()
    assert not a.is_leader and a.observed_holder == "b"  # now seen; fresh, not taken


def test_acquire_retry_is_jittered_within_client_go_bounds():
    api, clock = FakeLeaseApi(), FakeClock()
    seed_lease(api, "b")
    a, _, _ = make(api, clock, "a", retry_period=2.0)
    waits = [a.step() for _ in range(200)]
    assert all(2.0 <= w <= 2.0 * 2.2 for w in waits)
    assert max(waits) - min(waits) > 1.0


def test_does_not_take_over_a_fresh_lease_and_ignores_remote_renew_time():
    # The holder's renewTime is ancient by any wall clock: only our observation counts.
    api, clock = FakeLeaseApi(), FakeClock()
    seed_lease(api, "b", renew="2000-01-01T00:00:00.000000Z")
    a, _, rec = make(api, clock, "a")
    a.step()
    assert not a.is_leader and a.observed_holder == "b"
    clock.advance(14.9)
    a.step()
    assert not a.is_leader and rec.started == 0
    assert api.spec()["holderIdentity"] == "b"


def test_takes_over_after_lease_duration_of_unchanged_observations():
    api, clock = FakeLeaseApi(), FakeClock()
    seed_lease(api, "b", transitions=3)
    a, _, rec = make(api, clock, "a")
    a.step()  # first observation at t0
    clock.advance(10)
    renew_by(api, "b")  # b renews: the record changed, the timer restarts when a sees it
    a.step()  # observed at t0+10
    clock.advance(10)
    a.step()  # t0+20: only 10 s since the change was seen
    assert not a.is_leader
    clock.advance(5)
    a.step()  # t0+25 = seen-change + 15 s
    assert a.is_leader and rec.started == 1
    spec = api.spec()
    assert spec["holderIdentity"] == "a"
    assert spec["leaseTransitions"] == 4
    assert spec["acquireTime"] == spec["renewTime"]


def test_uses_the_recorded_lease_duration_of_the_holder():
    api, clock = FakeLeaseApi(), FakeClock()
    seed_lease(api, "b", duration=40)
    a, _, _ = make(api, clock, "a")  # our own lease_duration is 15
    a.step()
    clock.advance(39)
    a.step()
    assert not a.is_leader
    clock.advance(1)
    a.step()
    assert a.is_leader


def test_racing_takeover_loses_on_conflict():
    api, clock = FakeLeaseApi(), FakeClock()
    seed_lease(api, "z")
    a, _, ra = make(api, clock, "a")
    b, _, rb = make(api, clock, "b")
    a.step(), b.step()
    clock.advance(15)

    class Slow(FakeClient):
        def request(self, method, path, body=None, content_type="application/json"):
            if method == "PUT":  # b writes between a's GET and a's PUT
                b.step()
            return super().request(method, path, body, content_type)

    a.writer = Slow(api)
    a.step()
    assert b.is_leader and not a.is_leader
    assert ra.started == 0 and rb.started == 1
    assert api.spec()["holderIdentity"] == "b"


# -- renew ---------------------------------------------------------------------------

def lead(api, clock, identity="a", **kw):
    el, client, rec = make(api, clock, identity, **kw)
    el.step()
    assert el.is_leader
    return el, client, rec


def test_renews_every_retry_period_keeping_acquire_time():
    api, clock = FakeLeaseApi(), FakeClock()
    a, client, rec = lead(api, clock)
    acquired = api.spec()["acquireTime"]
    renew_times = set()
    for _ in range(10):
        clock.advance(2)
        assert a.step() == 2
        assert a.is_leader and a.last_renew_age() == 0
        renew_times.add(api.spec()["renewTime"])
    assert len(renew_times) == 10
    assert api.spec()["acquireTime"] == acquired and api.spec()["leaseTransitions"] == 0
    assert client.requests.count("GET") == 1  # renews take the fast path (no read)
    assert rec.stopped == 0


def test_renew_deadline_exceeded_stops_leading_once():
    api, clock = FakeLeaseApi(), FakeClock()
    a, client, rec = lead(api, clock)
    client.fail = 10**6
    for _ in range(4):
        clock.advance(2)
        a.step()
        assert a.is_leader and not a.finished  # 2, 4, 6, 8 s without a renew
    assert a.last_renew_age() == 8
    clock.advance(2)
    assert not a.is_leader  # the property turns false at the deadline by itself
    assert a.step() == math.inf
    assert a.finished and rec.stopped == 1 and a.lost_reason == "renew deadline exceeded"
    for _ in range(3):
        clock.advance(2)
        a.step()
    assert rec.stopped == 1 and rec.started == 1


def test_no_renew_is_attempted_once_the_deadline_has_passed():
    # The elector's thread was paused past the deadline: even though the API would accept
    # a renew, leadership is over and nothing more is written (B13: no writes after loss).
    api, clock = FakeLeaseApi(), FakeClock()
    a, client, rec = lead(api, clock)
    clock.advance(10)
    sent = len(client.requests)
    a.step()
    assert a.finished and rec.stopped == 1 and len(client.requests) == sent


def test_a_late_renew_within_the_deadline_keeps_leadership():
    api, clock = FakeLeaseApi(), FakeClock()
    a, client, rec = lead(api, clock)
    client.fail = 4  # fast path and read fail twice
    clock.advance(2); a.step()
    clock.advance(2); a.step()
    clock.advance(2); a.step()
    assert a.is_leader and a.last_renew_age() == 0 and rec.stopped == 0


def test_renew_deadline_counts_from_the_start_of_a_slow_renew():
    # The renew is written at once but its answer takes 9 s: a standby may have seen the
    # write at its start, so the leader counts from the start, not from the answer.
    api, clock = FakeLeaseApi(), FakeClock()
    a, client, rec = lead(api, clock)
    clock.advance(2)
    client.meddle(0, "after", lambda: clock.advance(9))
    a.step()
    assert api.spec()["renewTime"] != api.spec()["acquireTime"]
    assert a.last_renew_age() == 9 and a.is_leader
    clock.advance(0.99)
    assert a.is_leader
    clock.advance(0.01)
    assert not a.is_leader
    a.step()
    assert a.finished and rec.stopped == 1


def test_standby_counts_from_when_the_answer_arrived():
    # The read is sent at t but answered 5 s later with a record the standby had not
    # seen: the lease may have been renewed just before being served, so the 15 s run
    # from the answer.
    api, clock = FakeLeaseApi(), FakeClock()
    seed_lease(api, "b")
    a, client, _ = make(api, clock, "a")
    t = clock.now
    client.meddle(0, "before", lambda: clock.advance(5))
    a.step()
    clock.now = t + 19.99
    a.step()
    assert not a.is_leader
    clock.now = t + 20
    a.step()
    assert a.is_leader


def test_seeing_another_holder_ends_leadership_at_once():
    api, clock = FakeLeaseApi(), FakeClock()
    a, _, rec = lead(api, clock)
    obj = api.get(NS, DEFAULT_LEASE_NAME)
    obj["spec"]["holderIdentity"] = "intruder"  # e.g. an admin edit
    api.update(NS, DEFAULT_LEASE_NAME, obj)
    clock.advance(2)
    a.step()
    assert not a.is_leader and a.finished and rec.stopped == 1
    assert a.lost_reason == "lease taken over by intruder"
    assert api.spec()["holderIdentity"] == "intruder"


def test_unrelated_conflict_is_recovered_by_reading_again():
    api, clock = FakeLeaseApi(), FakeClock()
    a, _, rec = lead(api, clock)
    obj = api.get(NS, DEFAULT_LEASE_NAME)
    obj["metadata"]["labels"] = {"x": "y"}  # bumps the resourceVersion, holder unchanged
    api.update(NS, DEFAULT_LEASE_NAME, obj)
    clock.advance(2)
    a.step()
    assert a.is_leader and rec.stopped == 0
    assert api.objects[(NS, DEFAULT_LEASE_NAME)]["metadata"]["labels"] == {"x": "y"}


# -- health (B13) ------------------------------------------------------------------------

def test_unhealthy_work_loop_stops_renewing_and_leading():
    api, clock = FakeLeaseApi(), FakeClock()
    a, client, rec = lead(api, clock)
    rec.healthy = False
    clock.advance(2)
    writes = len(api.writes)
    a.step()
    assert not a.is_leader and a.finished and rec.stopped == 1
    assert a.lost_reason == "work loop not healthy"
    assert len(api.writes) == writes  # no renew, no release: the lease expires
    assert api.spec()["holderIdentity"] == "a"
    # a standby takes over one lease duration after it saw the last renew
    b, _, rb = make(api, clock, "b")
    b.step()
    clock.advance(15)
    b.step()
    assert b.is_leader and rb.started == 1


def test_health_check_raising_counts_as_unhealthy():
    api, clock = FakeLeaseApi(), FakeClock()

    def boom():
        raise RuntimeError("worker thread died")

    a, _, rec = lead(api, clock, healthy=boom)
    clock.advance(2)
    a.step()
    assert a.finished and rec.stopped == 1


def test_on_started_leading_raising_gives_up_leadership():
    api, clock = FakeLeaseApi(), FakeClock()
    stopped = []

    def bad_start():
        raise RuntimeError("could not start workers")

    a = LeaderElector(FakeClient(api), NS, identity="a", clock=clock, on_started_leading=bad_start,
                      on_stopped_leading=lambda: stopped.append(1))
    a.step()
    assert not a.is_leader and a.finished and stopped == [1]
    assert a.lost_reason == "on_started_leading failed"


# -- release -------------------------------------------------------------------------

def test_release_empties_the_holder_and_the_standby_takes_over_at_once():
    api, clock = FakeLeaseApi(), FakeClock()
    a, _, ra = lead(api, clock)
    b, _, rb = make(api, clock, "b")
    b.step()
    assert not b.is_leader
    a.stop()
    assert a.step() == math.inf
    assert not a.is_leader and a.finished and ra.stopped == 1 and a.lost_reason == "stopped"
    spec = api.spec()
    assert spec["holderIdentity"] == ""
    assert spec["leaseDurationSeconds"] == 1
    assert spec["leaseTransitions"] == 0
    assert MICRO.match(spec["renewTime"])
    b.step()  # no clock advance needed
    assert b.is_leader and rb.started == 1
    assert api.spec()["holderIdentity"] == "b" and api.spec()["leaseTransitions"] == 1


def test_stop_without_release_leaves_the_lease_to_expire():
    api, clock = FakeLeaseApi(), FakeClock()
    a, _, ra = lead(api, clock)
    a.stop(release=False)
    a.step()
    assert a.finished and ra.stopped == 1
    assert api.spec()["holderIdentity"] == "a"


def test_release_does_not_touch_a_lease_someone_else_holds():
    api, clock = FakeLeaseApi(), FakeClock()
    a, client, ra = lead(api, clock)
    obj = api.get(NS, DEFAULT_LEASE_NAME)
    obj["spec"]["holderIdentity"] = "b"
    api.update(NS, DEFAULT_LEASE_NAME, obj)
    a.stop()
    a.step()
    assert api.spec()["holderIdentity"] == "b" and ra.stopped == 1


def test_stop_before_acquiring_calls_no_callback():
    api, clock = FakeLeaseApi(), FakeClock()
    seed_lease(api, "b")
    a, _, rec = make(api, clock, "a")
    a.step()
    a.stop()
    a.step()
    assert a.finished and rec.started == 0 and rec.stopped == 0
    assert api.spec()["holderIdentity"] == "b"


def test_a_standby_that_stops_acquiring_never_takes_over_a_released_lease():
    """Issue 17: a rollout SIGTERMs both pods; the old leader releases, and the standby,
    still shutting down, must not take the lease (it would hold it until it is killed)."""
    api, clock = FakeLeaseApi(), FakeClock()
    a, _, ra = lead(api, clock)
    b, client, rb = make(api, clock, "b")
    b.step()
    b.stop_acquiring()
    a.stop()
    a.step()
    assert api.spec()["holderIdentity"] == ""
    before = len(client.requests)
    assert b.step() == math.inf
    assert b.finished and not b.is_leader and rb.started == rb.stopped == 0
    assert len(client.requests) == before  # not even a read
    assert api.spec()["holderIdentity"] == ""


def test_an_acquire_in_flight_when_acquiring_stops_hands_the_lease_back():
    api, clock = FakeLeaseApi(), FakeClock()
    seed_lease(api, "")  # released
    b, client, rb = make(api, clock, "b")
    client.meddle(0, "after", b.stop_acquiring)  # SIGTERM while the GET is on its way back
    assert b.step() == math.inf
    assert b.finished and not b.is_leader and rb.started == rb.stopped == 0
    spec = api.spec()
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1
    assert [w["spec"]["holderIdentity"] for _, w in api.writes[1:]] == ["b", ""]  # won, then given back


def test_a_leader_that_stops_acquiring_keeps_renewing_until_stopped():
    api, clock = FakeLeaseApi(), FakeClock()
    a, _, ra = lead(api, clock)
    a.stop_acquiring()
    clock.advance(2)
    a.step()
    assert a.is_leader and ra.stopped == 0
    a.stop()
    a.step()
    assert a.finished and ra.stopped == 1 and api.spec()["holderIdentity"] == ""


# -- run() on a thread (real time, small durations) -------------------------------------

def run_thread(el):
    t = threading.Thread(target=el.run, daemon=True)
    t.start()
    return t


def test_run_leads_and_release_on_stop_ends_the_thread():
    api = FakeLeaseApi()
    client = FakeClient(api)
    rec = Recorder()
    a = LeaderElector(client, NS, identity="a", lease_duration=2, renew_deadline=1, retry_period=0.05,
                      on_started_leading=rec.on_started, on_stopped_leading=rec.on_stopped)
    t = run_thread(a)
    wait_for(lambda: a.is_leader, timeout=10, what="a leads")
    wait_for(lambda: client.requests.count("PUT") >= 3, timeout=10, what="renews")
    a.stop()
    t.join(10)
    assert not t.is_alive()
    assert rec.started == 1 and rec.stopped == 1
    assert api.spec()["holderIdentity"] == ""
    # S3 / nsx-operator#1558: every request's own HTTP timeout ends by the renew deadline
    # (connect, read), never the client's default of 30 s.
    assert client.timeouts and all(t is not None and 0 < t[0] <= t[1] <= a.renew_deadline for t in client.timeouts)


def test_run_hung_renew_ends_leadership_by_the_deadline():
    api = FakeLeaseApi()
    client = FakeClient(api)
    rec = Recorder()
    a = LeaderElector(client, NS, identity="a", lease_duration=2, renew_deadline=1, retry_period=0.05,
                      on_started_leading=rec.on_started, on_stopped_leading=rec.on_stopped)
    t = run_thread(a)
    wait_for(lambda: a.is_leader, timeout=10, what="a leads")
    hang = threading.Event()
    client.hang = hang  # every request now blocks forever (a dead connection)
    try:
        wait_for(lambda: rec.stopped == 1, timeout=10, what="leadership given up despite the hung request")
        t.join(10)
        assert not t.is_alive() and not a.is_leader
        assert a.lost_reason == "renew deadline exceeded"
    finally:
        hang.set()


def test_run_stop_is_not_held_up_by_a_hung_acquire():
    api = FakeLeaseApi()
    client = FakeClient(api)
    hang = threading.Event()
    client.hang = hang
    rec = Recorder()
    a = LeaderElector(client, NS, identity="a", lease_duration=2, renew_deadline=1, retry_period=0.05,
                      on_started_leading=rec.on_started, on_stopped_leading=rec.on_stopped)
    try:
        t = run_thread(a)
        wait_for(lambda: client.requests, timeout=10, what="a first request")
        a.stop()
        t.join(10)  # the request is abandoned after renew_deadline
        assert not t.is_alive() and a.finished and rec.started == rec.stopped == 0
    finally:
        hang.set()


def test_run_stopped_before_acquiring_returns():
    api = FakeLeaseApi()
    seed_lease(api, "b")
    rec = Recorder()
    a = LeaderElector(FakeClient(api), NS, identity="a", lease_duration=2, renew_deadline=1, retry_period=0.05,
                      on_started_leading=rec.on_started, on_stopped_leading=rec.on_stopped)
    t = run_thread(a)
    wait_for(lambda: a.observed_holder == "b", timeout=10, what="a sees b")
    a.stop()
    t.join(10)
    assert not t.is_alive() and rec.started == rec.stopped == 0


# -- safety: two electors, random interleavings -----------------------------------------

DT = st.sampled_from([0.0, 1.0, 2.0, 5.0, 9.99, 10.0, 14.99, 15.0])


class TwoElectors(RuleBasedStateMachine):
    """Random steps of two replicas, clock advances, faults, health flips, stops and
    restarts. At every fake instant at most one replica believes it leads, and a
    replica that believes it leads is the Lease's holder."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.api = FakeLeaseApi()
        self.serial = 0
        self.slots = [self._new(), self._new()]
        self.retired: list[tuple[LeaderElector, Recorder]] = []
        self.busy: set[int] = set()
        self.violations: list[str] = []

    def _new(self):
        self.serial += 1
        el, client, rec = make(self.api, self.clock, f"r{self.serial}", lease_duration=15, renew_deadline=10,
                               retry_period=2)
        return el, client, rec

    @initialize(lease=st.sampled_from(["absent", "ghost", "released"]))
    def seed(self, lease):
        """The Lease is absent, held by a third replica (that renews only when the
        ``ghost_renews`` rule says so), or released."""
        if lease == "ghost":
            seed_lease(self.api, "ghost")
        elif lease == "released":
            seed_lease(self.api, "", duration=1)

    @rule()
    def ghost_renews(self):
        if self.api.objects.get((NS, DEFAULT_LEASE_NAME), {}).get("spec", {}).get("holderIdentity") == "ghost":
            renew_by(self.api, "ghost")

    @rule(i=st.integers(0, 1), dt=DT)
    def tick(self, i, dt):
        """Time passes, then replica i runs one iteration of its loop."""
        self.clock.advance(dt)
        self._step(i)

    @rule(i=st.integers(0, 1), dt=DT, nth=st.integers(0, 1), where=st.sampled_from(["before", "after"]),
          race_dt=DT, other=st.sampled_from(["idle", "steps first", "steps later"]))
    def racing_tick(self, i, dt, nth, where, race_dt, other):
        """Like ``tick``, but during the iteration's nth request -- before it is served,
        or after it was served and before its answer arrives -- ``race_dt`` passes and
        the other replica may run an iteration of its own (before or after that time)."""

        def hook():
            if other == "steps first":
                self._step(1 - i)
            self.clock.advance(race_dt)
            if other == "steps later":
                self._step(1 - i)
            # checked mid-request too; recorded, as the elector swallows request errors
            problem = self._leadership_problem()
            if problem:
                self.violations.append(problem)

        client = self.slots[i][1]
        client.meddle(nth, where, hook)
        self.clock.advance(dt)
        self._step(i)
        client.hooks.clear()

    def _step(self, i):
        if i in self.busy:  # a replica never runs two iterations at once
            return
        self.busy.add(i)
        try:
            self.slots[i][0].step()
        finally:
            self.busy.discard(i)

    @rule(i=st.integers(0, 1), kind=st.sampled_from(["fail", "lose"]))
    def fault(self, i, kind):
        """The next request of replica i fails before reaching the store, or reaches it
        and its answer is lost."""
        setattr(self.slots[i][1], kind, getattr(self.slots[i][1], kind) + 1)

    @rule(i=st.integers(0, 1))
    def flip_health(self, i):
        rec = self.slots[i][2]
        rec.healthy = not rec.healthy

    @rule(i=st.integers(0, 1), release=st.booleans())
    def stop(self, i, release):
        self.slots[i][0].stop(release=release)

    @rule(i=st.integers(0, 1))
    def restart(self, i):
        el, _, rec = self.slots[i]
        if el.finished:
            self.retired.append((el, rec))
            self.slots[i] = self._new()

    @invariant()
    def at_most_one_leader(self):
        assert not self.violations, self.violations
        problem = self._leadership_problem()
        assert problem is None, problem

    def _leadership_problem(self) -> str | None:
        electors = [el for el, _, _ in self.slots] + [el for el, _ in self.retired]
        leaders = [el.identity for el in electors if el.is_leader]
        if len(leaders) > 1:
            return f"at {self.clock.now}: both lead: {leaders}"
        holder = self.api.objects.get((NS, DEFAULT_LEASE_NAME), {}).get("spec", {}).get("holderIdentity")
        if leaders and holder != leaders[0]:
            return f"at {self.clock.now}: {leaders[0]} leads but the lease names {holder!r}"
        return None

    @invariant()
    def callbacks_balanced(self):
        for el, _, rec in self.slots:
            assert rec.started <= 1 and rec.stopped <= rec.started
            if el.is_leader:
                assert rec.started == 1 and rec.stopped == 0
        for el, rec in self.retired:
            assert rec.stopped == rec.started <= 1


TwoElectors.TestCase.settings = settings(
    max_examples=500, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_two_electors_never_both_lead = TwoElectors.TestCase


# -- S3: the write fence and the hard deadline ------------------------------------------

def test_the_fence_lets_writes_through_only_while_leading():
    api, clock = FakeLeaseApi(), FakeClock()
    seed_lease(api, "b")
    a, client, rec = make(api, clock, "a")
    a.step()
    with pytest.raises(LostLeadership, match="this replica does not hold the lease; the write was not sent"):
        a.fence()
    clock.advance(15)
    a.step()
    assert a.is_leader
    a.fence()  # leading: returns
    client.fail = 10**6
    clock.advance(9.99)
    a.fence()
    # At the renew deadline the fence refuses, before the elector's thread has noticed.
    clock.advance(0.01)
    with pytest.raises(LostLeadership, match=r"the renew deadline has passed \(the last successful renew began "
                                             r"10.0s ago, deadline 10s\)"):
        a.fence()
    assert not a.finished and rec.stopped == 0
    a.step()
    with pytest.raises(LostLeadership, match=r"leadership ended \(renew deadline exceeded\)"):
        a.fence()
    assert issubclass(LostLeadership, Stopping)  # the worker drops the key, no retry


def test_the_fence_refuses_while_stepping_down():
    api, clock = FakeLeaseApi(), FakeClock()
    a, client, rec = lead(api, clock)
    seen = []
    client.meddle(0, "before", lambda: seen.append(pytest.raises(LostLeadership, a.fence)))
    a.stop()
    a.step()  # the release: the fence already refuses while its request is on the way
    assert seen and rec.stopped == 1
    with pytest.raises(LostLeadership, match=r"leadership ended \(stopped\)"):
        a.fence()


class Exit:
    def __init__(self) -> None:
        self.codes: list[int] = []

    def __call__(self, code: int) -> None:
        self.codes.append(code)


def test_hard_deadline_ends_the_process_at_lease_duration_less_the_margin():
    api, clock = FakeLeaseApi(), FakeClock()
    a, client, rec = lead(api, clock)
    exit_ = Exit()
    hard = HardDeadline(a, exit=exit_)
    assert hard.margin == 1.0 and hard.age == 14.0
    # While renewing, the deadline moves with each renew.
    for _ in range(5):
        clock.advance(2)
        a.step()
        assert hard.check() == 14.0 and not exit_.codes
    # The API goes away: leadership ends at 10 s, the process is still there at 14 s.
    client.fail = 10**6
    for _ in range(5):
        clock.advance(2)
        a.step()
    assert a.finished and rec.stopped == 1 and a.last_renew_age() == 10
    assert hard.check() == pytest.approx(4.0) and not exit_.codes
    clock.advance(3.99)
    assert hard.check() == pytest.approx(0.01) and not exit_.codes
    clock.advance(0.01)
    assert hard.check() == math.inf
    assert exit_.codes == [EXIT_LEASE_EXPIRED] and hard.fired
    assert hard.check() == math.inf and exit_.codes == [EXIT_LEASE_EXPIRED]  # once


def test_hard_deadline_waits_for_a_first_lease_and_keeps_within_the_lease():
    api, clock = FakeLeaseApi(), FakeClock()
    seed_lease(api, "b")
    a, _, _ = make(api, clock, "a", lease_duration=6, renew_deadline=5, retry_period=1)
    exit_ = Exit()
    hard = HardDeadline(a, exit=exit_)
    assert hard.margin == 0.5 and hard.age == 5.5  # at most half of the 1 s between the two
    assert hard.remaining() is None and hard.check() == a.retry_period
    clock.advance(100)
    assert hard.check() == a.retry_period and not exit_.codes  # never led: nothing to end
    with pytest.raises(ValueError):
        HardDeadline(a, margin=1.0)  # not after the renew deadline


def test_hard_deadline_on_a_real_process_whose_main_thread_is_stuck(tmp_path):
    """The real thing: ``os._exit`` with the distinct status and one log line, from a process
    whose main thread never returns (a stop step that blocks, cilium#42920), at lease
    duration less the margin after its last renew, and not before the renew deadline."""
    import json
    import subprocess
    import sys
    import time as _time

    script = tmp_path / "stuck.py"
    script.write_text(f"""
import threading, time, sys, json
sys.path[:0] = [{str(Path(__file__).resolve().parents[1])!r}]
from controller.main import configure_logging
from controller.runtime.leader import LeaderElector, HardDeadline
from tests.test_leader_unit import FakeLeaseApi, FakeClient, NS
configure_logging("info", "json")
api = FakeLeaseApi()
client = FakeClient(api)
hard = None
def started():
    hard.start()
el = LeaderElector(client, NS, identity="a", lease_duration=3, renew_deadline=2, retry_period=0.2,
                   on_started_leading=started, on_stopped_leading=lambda: None)
hard = HardDeadline(el)
threading.Thread(target=el.run, name="leader-election", daemon=True).start()
while not el.is_leader:
    time.sleep(0.01)
time.sleep(0.5)
client.fail = 10**9  # the API server goes away
threading.Event().wait()  # the main thread never returns
""")
    started = _time.monotonic()
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          cwd=str(Path(__file__).resolve().parents[1]))
    took = _time.monotonic() - started
    assert proc.returncode == EXIT_LEASE_EXPIRED, proc.stdout + proc.stderr
    lines = [json.loads(ln) for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("{")]
    exits = [ln for ln in lines if ln.get("event") == "lease expired with the process still running; exiting at once"]
    assert len(exits) == 1, lines
    line = exits[0]
    assert line["level"] == "critical" and line["exitCode"] == EXIT_LEASE_EXPIRED
    # lease 3 s, renew deadline 2 s: the margin is 0.5 s, so 2.5 s after the last renew began.
    assert 2.5 <= line["lastRenewAge"] < 3.0
    assert line["leaseDuration"] == 3 and line["renewDeadline"] == 2
    assert "MainThread" in line["threads"] and "leader-election" not in line["threads"]  # run() has ended
    assert any(ln.get("event") == "leadership lost" for ln in lines)
    assert took < 30
