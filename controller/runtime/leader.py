"""Leader election on a ``coordination.k8s.io/v1`` Lease, after client-go's ``leaderelection``.

``product-decisions.md`` §4.5: leader election is on by default, on a Lease named
``proxmox-network-controller.proxmox.cozystack.io`` (``reference-behaviour.md`` §14) with
controller-runtime's durations (lease 15 s, renew deadline 10 s, retry 2 s); workers run
only while leading and the process exits when leadership is lost. The kubernetes Python
client's ``leaderelection`` module is deliberately not used (ConfigMap lock, and field
report field-reports.md B13: it kept renewing after its work thread died).

The algorithm is client-go's (``k8s.io/client-go/tools/leaderelection``,
``tryAcquireOrRenew``, ``acquire``, ``renew``, ``release``):

* **Acquire.** Every ``retry_period`` (jittered by a factor 1.2, as client-go's
  ``JitterUntil``) read the Lease. Absent: create it (``AlreadyExists`` = someone was
  faster, retry). Held by someone else: take it over only once the *observed record*
  (holder, duration, acquire/renew times, transitions) has not changed for the record's
  ``leaseDurationSeconds`` measured on **our** clock from the moment we first saw that
  record. The remote ``renewTime`` is never compared with local time, so clock skew
  between replicas does not matter. Every update carries the resourceVersion that was
  read, so of two replicas racing for an expired lease one gets 409 and loses.
* **Renew.** While leading, update the Lease every ``retry_period``. A renew that has
  not succeeded ``renew_deadline`` seconds after the start of the last successful one
  ends leadership; so does seeing another holder. Since ``renew_deadline <
  lease_duration`` and a taker counts from a moment after our last write, the old leader
  stops believing it leads before anyone else can take over.
* **Tied to the work (field-reports.md B13).** ``healthy()`` is called before each renew; a false answer
  (or an exception, or an exception from ``on_started_leading``) stops renewing and ends
  leadership at once. The Lease is not released in that case: it expires after
  ``lease_duration``, which leaves the time for the process to exit before a standby
  starts writing.
* **Release on stop** (client-go ``ReleaseOnCancel``). :meth:`LeaderElector.stop` with
  ``release=True`` (the default) rewrites the Lease with an empty ``holderIdentity`` and
  ``leaseDurationSeconds: 1`` so a standby takes over at its next retry instead of
  waiting for expiry. Call it only once the work has stopped.
* **No takeover while shutting down.** :meth:`LeaderElector.stop_acquiring` (the first
  thing after SIGTERM) makes a standby give up at once, and an acquire in flight that wins
  hands the lease back; a leader keeps renewing until :meth:`LeaderElector.stop`.

A lease request cannot outlive the renew deadline: under :meth:`LeaderElector.run` each
request runs on a short-lived helper thread and is abandoned (counted as a failure) at
the renew deadline while leading, or ``renew_deadline`` after an acquire attempt began,
so a hung connection ends leadership on time instead of after the HTTP timeout (30 s in
:mod:`controller.runtime.kube`), and never keeps :meth:`LeaderElector.stop` waiting that long.
The request's own HTTP timeout is the time left until that deadline too, so the helper
thread and its connection end with it (vmware-tanzu/nsx-operator#1558: a renew inheriting
the client's 120 s timeout let a standby take over while the old leader still believed it
led). A renew that is slow but answers within the deadline keeps the lease (S3's slow-API
variant; home-operations/kopiur#324 is the opposite failure: giving up on the first slow
call). An abandoned request may still land; that is safe, since the record it writes only
delays a takeover (and a stale one is refused by its resourceVersion).
:attr:`LeaderElector.is_leader` also checks the deadline on every read.

**No write after the renew deadline** (field-reports.md S3; cilium/cilium#42920: an operator
whose stop hook blocked past the hard deadline kept writing, and two operators gave two
CiliumNodes one PodCIDR). The renew deadline ends leadership ``renew_deadline`` after the
start of the last successful renew; a standby can take the Lease no earlier than
``lease_duration`` after it saw that renew, on its own clock, so no earlier than
``lease_duration`` after the renew started. Two rules keep the old leader's writes before
that moment:

* **The fence.** :meth:`LeaderElector.fence` raises
  :class:`controller.runtime.result.LostLeadership` unless :attr:`LeaderElector.is_leader`.
  ``controller.main`` gives it to every writer: :class:`controller.runtime.kube.KubeWriter` calls
  it just before each create, update, patch or delete is handed to the HTTP client, and
  ``ovn.nb.NBClient`` just before each transaction is committed to its socket. A refused
  write is not sent; the worker drops its key without a retry (the process is exiting).
* **The hard deadline.** :class:`HardDeadline` ends the process with ``os._exit``
  (:data:`EXIT_LEASE_EXPIRED`, after one log line) if it is still alive ``lease_duration``
  less a margin (1 s by default) after the start of the last successful renew: whatever
  holds it (a worker inside a request to a hung peer, a stop step that blocks), it is gone
  before a standby can act, with its sockets. Those close abortively
  (``controller.config.ABORTIVE_CLOSE``, ``ovn.ovsdb.ABORTIVE_CLOSE``), so a request the
  kernel has not delivered yet dies with it instead of being retransmitted later.

What neither can recall: a request the peer's kernel already received before the process
died. A stopped ovsdb-server (SIGSTOP) commits such a transaction when it resumes; it
arrived before anything the new leader sends, and the new leader plans on top of it. And a
process frozen between the fence and the send (SIGSTOP of the controller itself, a paused
VM) sends once when it thaws, before its watchdog runs; only a fencing token checked by the
server would close that, and neither kube-apiserver nor OVSDB checks one for these writes
(resourceVersion preconditions and OVSDB ``wait`` guards narrow what such a write can do).

This file stays one piece (about 730 lines, over the house's 600): it is a port of client-go's
elector, and acquire, renew, release, the fence and the watchdog share one lease record and
one lock; kept together, each step reads side by side with ``leaderelection.go``.
"""

from __future__ import annotations

import math
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

import structlog

from controller.runtime.kube import REQUEST_TIMEOUT, ApiError
from controller.runtime.result import LostLeadership

__all__ = [
    "DEFAULT_LEASE_NAME",
    "DEFAULT_LEASE_NAMESPACE",
    "EXIT_LEASE_EXPIRED",
    "HardDeadline",
    "JITTER_FACTOR",
    "LeaderElector",
    "LeaseRecord",
    "default_identity",
    "identity_host",
    "identity_namespace",
    "format_micro_time",
    "lease_path",
]

log = structlog.get_logger(__name__)

DEFAULT_LEASE_NAME = "proxmox-network-controller.proxmox.cozystack.io"
"""The leader-election ID of the reference (``reference-behaviour.md`` §14)."""

DEFAULT_LEASE_NAMESPACE = "kube-system"
"""Where the Lease lives unless ``--leader-election-namespace`` says otherwise: one place for
the whole cluster, whatever namespace a release is installed in, so two releases elect one
allocator (product-decisions §9, "one allocator per cluster, by construction"). The
reference took the pod's namespace, so each release had a Lease of its own."""

JITTER_FACTOR = 1.2
"""client-go's ``JitterFactor``: acquire retries wait ``retry_period * (1 + U(0, 1.2))``."""

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

EXIT_LEASE_EXPIRED = 3
"""Exit status of a process ended by :class:`HardDeadline` (1 is the ordinary exit after
losing leadership, 2 a command-line error)."""

HARD_DEADLINE_MARGIN = 1.0
"""Seconds before ``lease_duration`` (after the start of the last successful renew) at which
:class:`HardDeadline` ends the process: time for its thread to wake and log (at most half of
``lease_duration - renew_deadline``)."""


class LeaseWriter(Protocol):
    """What the elector needs from :class:`controller.runtime.kube.KubeWriter`. Under
    :meth:`LeaderElector.run` requests also get ``timeout=(connect, read)`` seconds, bounded
    by the renew deadline."""

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json", **kwargs: Any) -> dict[str, Any]: ...


def lease_path(namespace: str, name: str | None = None) -> str:
    """API path of the Lease collection in ``namespace``, or of the Lease ``name``."""
    base = LEASES.format(namespace=namespace)
    return f"{base}/{name}" if name else base


def format_micro_time(dt: datetime) -> str:
    """A Kubernetes ``MicroTime``: RFC 3339 in UTC with microseconds, ``2026-11-29T21:00:00.123456Z``.

    A naive ``dt`` is taken as UTC.
    """
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity(namespace: str = "") -> str:
    """``<namespace>/<hostname>_<uuid4>``, or controller-runtime's ``<hostname>_<uuid4>``
    without a ``namespace`` (the release's, ``$POD_NAMESPACE``): unique per process, so a
    restarted pod never mistakes its predecessor's lease for its own, and a replica can tell
    a holder of another release (:func:`identity_namespace`)."""
    own = f"{socket.gethostname()}_{uuid.uuid4()}"
    return f"{namespace}/{own}" if namespace else own


def identity_namespace(identity: str) -> str:
    """The namespace part of a holder identity of :func:`default_identity` ("" if none)."""
    return identity.split("/", 1)[0] if "/" in identity else ""


def identity_host(identity: str) -> str:
    """The hostname part of a holder identity (in a pod: the pod's name)."""
    return identity.split("/", 1)[-1].rsplit("_", 1)[0]


@dataclass(frozen=True)
class LeaseRecord:
    """The leader-election part of a Lease ``spec`` (client-go ``LeaderElectionRecord``).

    ``holder`` is ``""`` when nobody holds the lease (released); times are the MicroTime
    strings as stored (compared for equality only, never with a local clock).
    """

    holder: str
    lease_duration_seconds: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int

    @classmethod
    def from_lease(cls, lease: dict[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder=spec.get("holderIdentity") or "",
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


class LeaderElector:
    """Elects one leader among replicas through the Lease ``<namespace>/<name>``.

    :param writer: a :class:`controller.runtime.kube.KubeWriter` (anything with its ``request``);
        give the elector its own, so lease writes never count as the controller's writes.
        Errors are :class:`controller.runtime.kube.ApiError`; any error of a request is a failed
        attempt, never raised out of the elector.
    :param namespace: namespace of the Lease (the controller's; RBAC in
        ``manifests/rbac/03-leader-election.yaml``).
    :param name: Lease name, the leader-election ID.
    :param identity: this process's holder identity; must be unique per process
        (:func:`default_identity`).
    :param lease_duration: seconds a standby waits, from when it last saw the record
        change, before taking over; written rounded up to whole seconds as
        ``leaseDurationSeconds``.
    :param renew_deadline: seconds after the start of the last successful renew at which
        the leader gives up; must be less than ``lease_duration``.
    :param retry_period: seconds between acquire attempts (jittered) and between renews;
        ``renew_deadline`` must exceed ``1.2 * retry_period``.
    :param clock: monotonic seconds (injectable for tests).
    :param wall: current UTC ``datetime``, only for the Lease's MicroTime fields.
    :param on_started_leading: called once, on the elector's thread, right after the
        lease is acquired; must return promptly (start the workers and return). An
        exception ends leadership.
    :param on_stopped_leading: called exactly once when leadership that was held ends, for
        any reason (renew deadline, another holder, unhealthy, :meth:`stop`); the caller
        exits the process. Not called if the lease was never held.
    :param on_new_holder: called with the identity of each other holder this replica sees
        take the Lease (once per holder) and the Lease object, e.g. to say another release
        holds it.
    :param healthy: checked before every renew; ``False`` or an exception means the work
        loop died (field-reports.md B13): stop renewing and end leadership.
    :param rng: source of the acquire jitter.
    :raises ValueError: when the durations break ``lease_duration > renew_deadline >
        1.2 * retry_period > 0`` (client-go's checks) or ``identity`` is empty.

    Drive it with :meth:`run` on a thread, or step by step with :meth:`step` (tests).
    """

    def __init__(
        self,
        writer: LeaseWriter,
        namespace: str,
        name: str = DEFAULT_LEASE_NAME,
        *,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = _utc_now,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        healthy: Callable[[], bool] = lambda: True,
        on_new_holder: Callable[[str, dict[str, Any]], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if not identity:
            raise ValueError("leader election identity must not be empty")
        if not lease_duration > renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if not renew_deadline > JITTER_FACTOR * retry_period:
            raise ValueError("renew_deadline must be greater than 1.2 * retry_period")
        if not retry_period > 0:
            raise ValueError("retry_period must be greater than zero")
        self.writer = writer
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = float(lease_duration)
        self.renew_deadline = float(renew_deadline)
        self.retry_period = float(retry_period)
        self.lease_duration_seconds = max(1, math.ceil(lease_duration))
        self._clock = clock
        self._wall = wall
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._healthy = healthy
        self._on_new_holder = on_new_holder
        self._rng = rng or random.Random()
        self._path = lease_path(namespace, name)
        self._log = log.bind(lease=f"{namespace}/{name}", identity=identity)

        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._no_acquire = threading.Event()
        self._release_on_stop = True
        self._bounded = False  # set by run(): each lease request is abandoned at its deadline
        # What we last saw of the Lease: the object (for its resourceVersion), its record,
        # and our clock when that record was first seen (client-go observedTime).
        self._observed_obj: dict[str, Any] | None = None
        self._observed: LeaseRecord | None = None
        self._observed_time = 0.0
        self._leading = False  # acquired, not yet given up
        self._stepping_down = False  # releasing: no longer leader, callback not yet run
        self._held = False
        self._finished = False
        self._last_renew: float | None = None  # start of the last successful acquire/renew
        self._lost_reason: str | None = None

    # -- public state --------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        """True while this process holds the lease and its last successful renew started
        less than ``renew_deadline`` ago (checked on every read, so it turns false on time
        even while a renew request hangs)."""
        with self._lock:
            return (
                self._leading
                and not self._stepping_down
                and self._last_renew is not None
                and self._clock() - self._last_renew < self.renew_deadline
            )

    @property
    def finished(self) -> bool:
        """True once the elector is done: leadership ended, or stopped before acquiring."""
        return self._finished

    @property
    def lost_reason(self) -> str | None:
        """Why held leadership ended (``"renew deadline exceeded"``, ``"stopped"``, ...)."""
        return self._lost_reason

    @property
    def observed_holder(self) -> str | None:
        """Holder identity in the last Lease record seen (``""`` = released), or None."""
        rec = self._observed
        return rec.holder if rec else None

    def fence(self) -> None:
        """The write fence of field-reports.md S3 (module docstring): returns while this process
        leads (:attr:`is_leader`: the lease held and the renew deadline not passed), else
        raises. Give it to every writer, to be called just before a write is sent.

        :raises controller.runtime.result.LostLeadership: not leading; the message says why.
        """
        with self._lock:
            leading = self._leading and not self._stepping_down and self._last_renew is not None
            age = None if self._last_renew is None else self._clock() - self._last_renew
            if leading and age is not None and age < self.renew_deadline:
                return
        if leading:
            why = (f"the renew deadline has passed (the last successful renew began {age:.1f}s ago, "
                   f"deadline {self.renew_deadline:g}s)")
        elif self._held:
            why = f"leadership ended ({self._lost_reason or 'stepping down'})"
        else:
            why = "this replica does not hold the lease"
        raise LostLeadership(f"not the leader: {why}; the write was not sent")

    def last_renew_age(self) -> float | None:
        """Seconds (our clock) since the start of the last successful acquire or renew,
        or None if the lease was never acquired. For liveness and metrics."""
        with self._lock:
            return None if self._last_renew is None else self._clock() - self._last_renew

    # -- driving -------------------------------------------------------------------
    def run(self) -> None:
        """Acquire, then renew until leadership ends or :meth:`stop`; blocks (run it on a
        thread). Returns when done; does not acquire again (client-go ``Run``). If the
        elector itself fails unexpectedly while leading, leadership ends
        (``on_stopped_leading``) and the exception propagates."""
        self._bounded = True
        try:
            while not self._finished:
                wait = self.step()
                if self._finished:
                    return
                self._stop.wait(wait)
        except BaseException:
            self._end("leader elector failed")
            raise

    def stop(self, release: bool = True) -> None:
        """Ask :meth:`run` to finish (returns at once; join the thread to wait).

        :param release: when leading, give the lease up (empty holder,
            ``leaseDurationSeconds: 1``) so a standby takes over at once; pass False to
            let it expire instead. Only release after the work has stopped.
        """
        self._release_on_stop = release
        self._stop.set()

    def stop_acquiring(self) -> None:
        """Never acquire from now on (the process is shutting down; returns at once). A
        standby finishes at its next step; an acquire already in flight that wins hands the
        lease straight back (released, ``on_started_leading`` not called). A leader keeps
        renewing until :meth:`stop`, so that its work stops before the lease goes.

        Seen on the bed's node: in a rollout both pods get SIGTERM at once; the
        standby, still stopping, took the lease the old leader had just released and renewed
        it until the kubelet killed it at the end of the grace period (30 s), and the new
        pods then waited out the lease."""
        self._no_acquire.set()

    def step(self) -> float:
        """One iteration of the loop :meth:`run` drives: an acquire attempt, or one renew
        (after the stop, health and deadline checks). Returns the seconds to wait before
        the next step (``inf`` once :attr:`finished`). Not to be called concurrently."""
        if self._finished:
            return math.inf
        if not self._leading:
            if self._stop.is_set() or self._no_acquire.is_set():
                self._end("stopped")
                return math.inf
            start = self._clock()
            if not self._try_acquire_or_renew():
                return self.retry_period * (1.0 + self._rng.random() * JITTER_FACTOR)
            if self._stop.is_set() or self._no_acquire.is_set():
                # Won while shutting down: give it back before any work starts.
                self._release()
                self._end("stopped")
                return math.inf
            with self._lock:
                self._leading = True
                self._held = True
                self._last_renew = start
            self._log.info("acquired lease; leading", transitions=self._observed.transitions if self._observed else 0)
            try:
                self._on_started()
            except Exception:
                self._log.exception("on_started_leading failed; giving up leadership")
                self._end("on_started_leading failed")
                return math.inf
            return self.retry_period

        if self._stop.is_set():
            if self._release_on_stop:
                with self._lock:
                    self._stepping_down = True
                self._release()
            self._end("stopped")
            return math.inf
        if self._remaining() <= 0:
            self._end("renew deadline exceeded")
            return math.inf
        try:
            ok = bool(self._healthy())
        except Exception:
            self._log.exception("health check failed")
            ok = False
        if not ok:
            self._end("work loop not healthy")
            return math.inf
        start = self._clock()
        if self._try_acquire_or_renew():
            with self._lock:
                self._last_renew = start
            return self.retry_period
        rec = self._observed
        if rec is not None and rec.holder and rec.holder != self.identity:
            self._end(f"lease taken over by {rec.holder}")
            return math.inf
        remaining = self._remaining()
        if remaining <= 0:
            self._end("renew deadline exceeded")
            return math.inf
        return min(self.retry_period, remaining)  # wake at the deadline, not past it

    # -- internals -----------------------------------------------------------------
    def _remaining(self) -> float:
        assert self._last_renew is not None
        return self._last_renew + self.renew_deadline - self._clock()

    def _end(self, reason: str) -> None:
        with self._lock:
            if self._finished:
                return
            self._finished = True
            held = self._held
            self._leading = False
            if held:
                self._lost_reason = reason
        if not held:
            self._log.info("leader election stopped before acquiring the lease")
            return
        if reason == "stopped":  # a clean stop hands the lease over; nothing went wrong
            self._log.info("leadership given up", reason=reason)
        else:
            self._log.warning("leadership lost", reason=reason)
        try:
            self._on_stopped()
        except Exception:
            self._log.exception("on_stopped_leading failed")

    def _lease_valid(self) -> bool:
        rec = self._observed
        return rec is not None and self._observed_time + rec.lease_duration_seconds > self._clock()

    def _observe(self, obj: dict[str, Any], *, own_write: bool = False) -> LeaseRecord:
        rec = LeaseRecord.from_lease(obj)
        if own_write or rec != self._observed:
            if not own_write and self._observed is not None and rec.holder != self._observed.holder:
                self._log.info("lease holder changed", holder=rec.holder or "<released>")
            if (not own_write and rec.holder and rec.holder != self.identity and self._on_new_holder is not None
                    and (self._observed is None or rec.holder != self._observed.holder)):
                try:
                    self._on_new_holder(rec.holder, obj)
                except Exception:
                    self._log.exception("on_new_holder failed")
            self._observed = rec
            self._observed_time = self._clock()  # read after the answer: never before the write
        self._observed_obj = obj
        return rec

    def _call(self, method: str, path: str, body: Any, deadline: float) -> dict[str, Any]:
        """One request; under :meth:`run`, abandoned (TimeoutError) at ``deadline`` (our clock)."""
        if not self._bounded:
            return self.writer.request(method, path, body, "application/json")
        timeout = deadline - self._clock()
        if timeout <= 0:
            raise TimeoutError("no time left for a lease request")
        box: dict[str, Any] = {}
        done = threading.Event()
        # The HTTP timeout ends with the deadline too (nsx-operator#1558): the helper thread
        # and its connection do not outlive the attempt by the client's default (30 s).
        http_timeout = (min(REQUEST_TIMEOUT[0], timeout), timeout)

        def target() -> None:
            try:
                box["value"] = self.writer.request(method, path, body, "application/json", timeout=http_timeout)
            except BaseException as exc:  # handed to the caller
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=target, name="leader-election-request", daemon=True).start()
        if not done.wait(timeout):
            raise TimeoutError(f"lease {method} did not answer within {timeout:.1f}s")
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _put(self, record: LeaseRecord, deadline: float) -> dict[str, Any]:
        assert self._observed_obj is not None
        obj = dict(self._observed_obj)
        meta = dict(obj.get("metadata") or {})
        obj["metadata"] = meta  # keeps resourceVersion: a stale update is a 409
        obj["spec"] = {**(obj.get("spec") or {}), **record.to_spec()}
        obj.setdefault("apiVersion", "coordination.k8s.io/v1")
        obj.setdefault("kind", "Lease")
        return self._call("PUT", self._path, obj, deadline)

    def _try_acquire_or_renew(self) -> bool:
        """client-go ``tryAcquireOrRenew``: one attempt; True when we hold the lease after it."""
        # Requests of one attempt end by the renew deadline while leading, else within
        # renew_deadline of the attempt's start (a hung read never blocks stop()).
        base = self._last_renew if self._leading and self._last_renew is not None else self._clock()
        deadline = base + self.renew_deadline
        stamp = format_micro_time(self._wall())
        me = self.identity
        # 1. Fast path: we lead and hold the object we last wrote; renew without a read.
        rec = self._observed
        if self._leading and rec is not None and rec.holder == me and self._observed_obj is not None:
            try:
                obj = self._put(LeaseRecord(me, self.lease_duration_seconds, rec.acquire_time, stamp,
                                            rec.transitions), deadline)
            except Exception as exc:
                self._log.info("lease renew failed", error=str(exc))
            else:
                self._observe(obj, own_write=True)
                return True
        # 2. Read the lease, creating it when absent.
        try:
            obj = self._call("GET", self._path, None, deadline)
        except ApiError as exc:
            if not exc.not_found:
                self._log.info("could not read lease", error=str(exc))
                return False
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": LeaseRecord(me, self.lease_duration_seconds, stamp, stamp, 0).to_spec(),
            }
            try:
                created = self._call("POST", lease_path(self.namespace), body, deadline)
            except Exception as exc2:
                self._log.info("could not create lease", error=str(exc2))
                return False
            self._observe(created, own_write=True)
            return True
        except Exception as exc:
            self._log.info("could not read lease", error=str(exc))
            return False
        old = self._observe(obj)
        # 3. Someone else holds it and we have not seen it unchanged for its duration.
        if old.holder and old.holder != me and self._lease_valid():
            self._log.debug("lease held by another replica and not expired", holder=old.holder)
            return False
        # 4. Take it over (or renew it if the record already names us).
        if old.holder == me:
            new = LeaseRecord(me, self.lease_duration_seconds, old.acquire_time, stamp, old.transitions)
        else:
            new = LeaseRecord(me, self.lease_duration_seconds, stamp, stamp, old.transitions + 1)
        try:
            written = self._put(new, deadline)
        except Exception as exc:
            self._log.info("could not update lease", error=str(exc), holder=old.holder or "<released>")
            return False
        self._observe(written, own_write=True)
        return True

    def _release(self) -> bool:
        """client-go ``release``: if the lease (read afresh) still names us, rewrite it with
        an empty holder and ``leaseDurationSeconds: 1``. True when nothing is left to do."""
        deadline = self._clock() + self.renew_deadline
        try:
            obj = self._call("GET", self._path, None, deadline)
            rec = self._observe(obj)
            if rec.holder != self.identity:
                return True
            stamp = format_micro_time(self._wall())
            written = self._put(LeaseRecord("", 1, stamp, stamp, rec.transitions), deadline)
        except Exception as exc:
            self._log.warning("could not release lease", error=str(exc))
            return False
        self._observe(written, own_write=True)
        self._log.info("released lease")
        return True


class HardDeadline:
    """Ends the process when it outlives its lease (field-reports.md S3, cilium/cilium#42920).

    Once the process has led, if it is still alive ``lease_duration`` less ``margin``
    seconds after the start of its last successful renew, it logs one line (``lease expired
    with the process still running; exiting at once``, naming the threads still there) and
    calls ``exit(EXIT_LEASE_EXPIRED)`` (``os._exit``: no cleanup, no stop step that could
    block). At that age the renew deadline has long passed (the ordinary exit after losing
    leadership takes about 1.5 s), so something holds the process: a worker inside a request
    to a hung peer, a stop step that blocks. A standby cannot take the Lease before
    ``lease_duration`` after it saw that renew, so the process is gone first, and with it
    every connection (closed abortively: nothing it has not delivered yet is sent later).

    :param elector: the :class:`LeaderElector` whose renews count (its clock).
    :param margin: seconds before ``lease_duration`` to act; default
        :data:`HARD_DEADLINE_MARGIN`, at most half of ``lease_duration - renew_deadline``.
    :param exit: called with :data:`EXIT_LEASE_EXPIRED` (``os._exit``).
    :param log_budget: seconds the log line may take (written from its own thread, as a
        blocked stderr must not hold the exit).

    Start it once leading (:meth:`start`, a daemon thread); :meth:`check` is one look.
    """

    def __init__(self, elector: LeaderElector, *, margin: float | None = None,
                 exit: Callable[[int], Any] = os._exit, log_budget: float = 0.25) -> None:
        self.elector = elector
        slack = elector.lease_duration - elector.renew_deadline
        self.margin = min(HARD_DEADLINE_MARGIN, slack / 2) if margin is None else float(margin)
        if not 0 <= self.margin < slack:
            raise ValueError("the hard deadline must fall after the renew deadline")
        self.age = elector.lease_duration - self.margin  # of the last successful renew, when it acts
        self._exit = exit
        self._log_budget = log_budget
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.fired = False

    def remaining(self) -> float | None:
        """Seconds until the process is ended (<= 0: due), None if it never led."""
        age = self.elector.last_renew_age()
        return None if age is None else self.age - age

    def check(self) -> float:
        """End the process if it is due; else the seconds to wait before the next look."""
        if self.fired:
            return math.inf
        left = self.remaining()
        if left is None:
            return self.elector.retry_period
        if left > 0 or self.elector.is_leader:  # leading cannot be due; checked all the same
            return max(left, 0.01)
        self.fired = True
        age = self.elector.last_renew_age() or 0.0
        threads = sorted(t.name for t in threading.enumerate() if t is not threading.current_thread())
        said = threading.Thread(target=lambda: log.critical(
            "lease expired with the process still running; exiting at once",
            lastRenewAge=round(age, 3), leaseDuration=self.elector.lease_duration,
            renewDeadline=self.elector.renew_deadline, exitCode=EXIT_LEASE_EXPIRED, threads=threads,
        ), name="hard-deadline-log", daemon=True)
        said.start()
        said.join(self._log_budget)
        self._exit(EXIT_LEASE_EXPIRED)
        return math.inf

    def run(self) -> None:
        """Look, then sleep until the next look, until :meth:`stop` or the end."""
        while not self.fired:
            wait = self.check()
            if self.fired or self._stop.wait(wait):
                return

    def start(self) -> "HardDeadline":
        """Run on a daemon thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self.run, name="hard-deadline", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
