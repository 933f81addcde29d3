"""Field report S3 as a state machine: replicas that write to a peer (the OVN NB, the API
server) while leader election runs, under lost renews, slow requests, a stalled peer and
partitions. No write by a process after its renew deadline, and no write of an old leader
lands after one of a newer leader.

What is real: ``controller.runtime.leader.LeaderElector`` (each replica's, stepped by hand on a fake
clock, as in ``tests/test_leader_unit.py``), its write fence (:meth:`LeaderElector.fence`,
the product's check just before a request or a transaction is sent) and
``controller.runtime.leader.HardDeadline`` (the process ends ``lease_duration`` less its margin after
its last successful renew began), with an injected clock and exit.

What is modelled: the peer (:class:`Peer`: applies writes in the order its kernel received
them; stalled, it keeps them and applies them when it resumes: a SIGSTOPped ovsdb-server);
the network between a replica and the peer (partitioned, a replica's sent writes wait in its
kernel's send queue and go out when the path heals, unless the process died: the product
closes its sockets abortively, ``SO_LINGER`` 0, so the kernel drops them); each replica's
workers (a pass may try to write at any moment, leading or not: a pass still running after
leadership ended); the watchdog threads (after the clock moves, every due
:class:`HardDeadline` acts first: a thread wakes at its deadline, before anything later).

Out of the model, by design (docs/operations.md says so): a process frozen between the fence
and the send (it sends once when it thaws); the model's sends are atomic with their fence.

Two mutants show each rule is needed: without the hard deadline, or with an ordinary close
(the kernel keeps retransmitting a dead process's writes), an old leader's write lands after
the new leader's.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from controller.runtime.leader import EXIT_LEASE_EXPIRED, HardDeadline
from controller.runtime.result import LostLeadership
from tests.support.clock import FakeClock
from tests.test_leader_unit import DEFAULT_LEASE_NAME, NS, FakeLeaseApi, make

DT = st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.99, 4.0, 5.0, 9.99, 10.0, 14.0, 15.0])


class Peer:
    """The written peer: ``applied`` holds (writer identity, its term, sent at) in order."""

    def __init__(self) -> None:
        self.stalled = False
        self.held: list[tuple[str, int, float]] = []  # received by its kernel, not yet applied
        self.applied: list[tuple[str, int, float]] = []

    def receive(self, write: tuple[str, int, float]) -> None:
        (self.held if self.stalled else self.applied).append(write)

    def resume(self) -> None:
        self.stalled = False
        self.applied += self.held
        self.held = []


class Replica:
    """One controller process: its elector, its hard deadline, its kernel's send queue."""

    def __init__(self, machine: "LeadersWriting", identity: str) -> None:
        self.m = machine
        self.el, self.client, self.rec = make(machine.api, machine.clock, identity, lease_duration=15,
                                              renew_deadline=10, retry_period=2)
        self.el._on_started = self._started
        self.hard = HardDeadline(self.el, exit=self._exit)
        self.alive = True
        self.exit_code: int | None = None
        self.term = 0
        self.partitioned = False
        self.queue: list[tuple[str, int, float]] = []  # sent, not delivered (partitioned)
        self.cut = False

    def _started(self) -> None:
        self.term = next(self.m.terms)

    def _exit(self, code: int) -> None:
        self.die(code)

    def die(self, code: int) -> None:
        self.alive = False
        self.exit_code = code
        if self.m.abortive_close:
            self.queue = []  # SO_LINGER 0: the kernel drops what was not delivered
        elif not self.partitioned:
            self.flush()

    def flush(self) -> None:
        for w in self.queue:
            self.m.peer.receive(w)
        self.queue = []


class LeadersWriting(RuleBasedStateMachine):
    """Two replica slots (restarted as new processes), one peer."""

    hard_deadline = True  # the product: both on
    abortive_close = True

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.api = FakeLeaseApi()
        self.peer = Peer()
        self.terms = itertools.count(1)
        self.serial = 0
        self.slots = [self._new(), self._new()]
        self.retired: list[Replica] = []
        self.violations: list[str] = []
        self.refused = 0

    def _new(self) -> Replica:
        self.serial += 1
        return Replica(self, f"r{self.serial}")

    def replicas(self) -> list[Replica]:
        return self.slots + self.retired

    # -- time and the watchdogs ---------------------------------------------------------
    def _advance(self, dt: float) -> None:
        """Time passes; every hard deadline that fell due in between acts at once (its own
        thread wakes at its deadline: before anything that happens later)."""
        self.clock.advance(dt)
        self._watchdogs()

    def _watchdogs(self) -> None:
        """Each process's HardDeadline thread acts as soon as it is due (also right after an
        acquire whose requests took longer than the lease: it counts from their start)."""
        if not self.hard_deadline:
            return
        for r in self.replicas():
            left = r.hard.remaining()
            if r.alive and left is not None and left <= 0:
                r.hard.check()
                assert not r.alive and r.exit_code == EXIT_LEASE_EXPIRED

    def _step(self, r: Replica) -> None:
        if r.alive:
            if r.cut:
                r.client.fail = 10**6
            r.el.step()
            self._watchdogs()

    # -- rules --------------------------------------------------------------------------
    @rule(i=st.integers(0, 1), dt=DT)
    def tick(self, i, dt):
        """Time passes, then replica i's elector runs one iteration."""
        self._advance(dt)
        self._step(self.slots[i])

    @rule(i=st.integers(0, 1), dt=DT, slow=DT, other=st.sampled_from(["idle", "steps", "writes"]))
    def slow_request(self, i, dt, slow, other):
        """Like ``tick``, but the iteration's first request takes ``slow`` seconds (it is
        served at its start, its answer comes late: the renew counts from its start), and
        meanwhile the other replica may step or try to write."""
        r = self.slots[i]

        def hook():
            self._advance(slow)
            if other == "steps":
                self._step(self.slots[1 - i])
            elif other == "writes":
                self.write(1 - i)

        r.client.meddle(0, "after", hook)
        self._advance(dt)
        self._step(r)
        r.client.hooks.clear()

    @rule(i=st.integers(0, 1))
    def write(self, i):
        """A pass of replica i tries to write (leading or not: a pass may outlive leadership)."""
        r = self.slots[i]
        if not r.alive:
            return
        try:
            r.el.fence()  # the product's check, just before the send
        except LostLeadership:
            self.refused += 1
            return
        age = r.el.last_renew_age()
        if not r.el.is_leader or age is None or age >= r.el.renew_deadline:
            self.violations.append(f"{r.el.identity} sent a write {age}s after its last renew began")
        w = (r.el.identity, r.term, self.clock.now)
        if r.partitioned:
            r.queue.append(w)
        else:
            self.peer.receive(w)

    @rule(i=st.integers(0, 1), cut=st.booleans())
    def api_path(self, i, cut):
        """Replica i is cut off from the API server (every lease request fails), or not."""
        r = self.slots[i]
        r.cut = cut
        r.client.fail = 10**6 if cut else 0

    @rule(i=st.integers(0, 1), kind=st.sampled_from(["fail", "lose"]))
    def fault(self, i, kind):
        """The next lease request of replica i fails, or is served and its answer lost."""
        c = self.slots[i].client
        setattr(c, kind, getattr(c, kind) + 1)

    @rule(i=st.integers(0, 1), partitioned=st.booleans())
    def peer_path(self, i, partitioned):
        """The path from replica i to the peer breaks (its writes wait in its kernel), or heals
        (they go out; a dead process's only without the abortive close)."""
        r = self.slots[i]
        r.partitioned = partitioned
        if not partitioned and (r.alive or not self.abortive_close):
            r.flush()

    @rule()
    def stall(self):
        """The peer stops (SIGSTOP): its kernel still takes writes, it applies none."""
        self.peer.stalled = True

    @rule()
    def resume(self):
        self.peer.resume()

    @rule(i=st.integers(0, 1))
    def exits(self, i):
        """The ordinary exit of a replica whose leadership ended (controller.main)."""
        r = self.slots[i]
        if r.alive and r.el.finished:
            r.die(1)

    @rule(i=st.integers(0, 1))
    def restart(self, i):
        """A dead process comes back as a new one (the kubelet)."""
        r = self.slots[i]
        if not r.alive:
            self.retired.append(r)
            self.slots[i] = self._new()

    # -- invariants -----------------------------------------------------------------------
    @invariant()
    def no_write_after_the_renew_deadline(self):
        assert not self.violations, self.violations

    @invariant()
    def no_old_leaders_write_lands_after_a_newer_ones(self):
        terms = [term for _, term, _ in self.peer.applied]
        for (who, term, sent), later in zip(self.peer.applied, self.peer.applied[1:]):
            assert later[1] >= term, (f"{later[0]}'s write of term {later[1]} (sent at {later[2]}) landed after "
                                      f"{who}'s of term {term} (sent at {sent}): {terms}")

    @invariant()
    def at_most_one_leader(self):
        leaders = [r.el.identity for r in self.replicas() if r.alive and r.el.is_leader]
        assert len(leaders) <= 1, leaders
        holder = self.api.objects.get((NS, DEFAULT_LEASE_NAME), {}).get("spec", {}).get("holderIdentity")
        assert not leaders or leaders[0] == holder

    @invariant()
    def no_process_outlives_its_lease(self):
        if not self.hard_deadline:
            return
        for r in self.replicas():
            age = r.el.last_renew_age()
            if r.alive and age is not None:
                assert age < r.el.lease_duration - r.hard.margin + 1e-9, (r.el.identity, age)


SETTINGS = settings(max_examples=400, stateful_step_count=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
LeadersWriting.TestCase.settings = SETTINGS
test_no_write_after_the_lease_and_none_out_of_order = LeadersWriting.TestCase


class WithoutHardDeadline(LeadersWriting):
    hard_deadline = False


class WithOrdinaryClose(LeadersWriting):
    abortive_close = False


def s3(machine: LeadersWriting) -> None:
    """The case's scenario on the model: leader r1 sends a write on a path to the peer that
    breaks (it waits in r1's kernel), r1 is cut off from the API server and loses the lease,
    r2 takes over and writes, then the path heals. Every step is a rule of the machine and
    the invariants are checked after each."""

    def then(rule_, *args):
        rule_(*args)
        for inv in (machine.no_write_after_the_renew_deadline, machine.no_old_leaders_write_lands_after_a_newer_ones,
                    machine.at_most_one_leader, machine.no_process_outlives_its_lease):
            inv()

    then(machine.tick, 0, 0.0)  # r1 leads
    then(machine.tick, 1, 0.5)  # r2 sees r1's record
    then(machine.write, 0)
    then(machine.peer_path, 0, True)
    then(machine.write, 0)  # waits in r1's kernel
    then(machine.api_path, 0, True)
    for _ in range(5):  # r1's renews fail; its renew deadline passes at 10 s
        then(machine.tick, 0, 2.0)
        then(machine.tick, 1, 0.0)
    then(machine.write, 0)  # refused by the fence
    assert machine.refused == 1 and machine.slots[0].el.finished
    for _ in range(3):
        then(machine.tick, 1, 2.0)  # r2 takes over 15 s after it saw r1's last renew
    assert machine.slots[1].el.is_leader
    then(machine.write, 1)
    then(machine.peer_path, 0, False)  # the path to the peer heals


def test_the_case_holds_in_the_model():
    m = LeadersWriting()
    s3(m)
    r1, r2 = m.slots
    assert not r1.alive and r1.exit_code == EXIT_LEASE_EXPIRED  # stuck, ended by its hard deadline
    assert [who for who, _, _ in m.peer.applied] == ["r1", "r2"]  # r1's first write only, before r2's


@pytest.mark.parametrize("mutant", [WithoutHardDeadline, WithOrdinaryClose], ids=lambda m: m.__name__)
def test_each_rule_is_needed(mutant):
    """The model can fail: without the hard deadline the stuck old leader is still there when
    the path heals and its queued write goes out after the new leader's; with an ordinary
    close the kernel sends it although the process is dead."""
    with pytest.raises(AssertionError, match="landed after"):
        s3(mutant())
