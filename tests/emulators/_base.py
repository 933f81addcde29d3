"""Shared machinery of the peer emulators: a level-triggered worker thread woken by watches.

An emulator is a test peer, not product code. Its shape is deliberately simple:

* one *watch thread* per watched resource. It only wakes the worker (any bytes on the watch
  stream mean "something changed"); it never parses events, so a missed or garbled event
  cannot desynchronise anything;
* one *worker thread* that runs :meth:`EmulatorBase.run_pass` — LIST everything it cares about
  and converge — whenever it is woken, after every ``resync_seconds``, and when a timer the
  pass asked for falls due;
* helpers that tests call take the same lock as a pass, so they never interleave with one.

Every write is conditional (a resourceVersion precondition or an idempotent NB command) and
made only when the stored value differs from the wanted one, so a quiet cluster sees no writes.
Errors on one object are counted and logged and never stop the pass.
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
import threading
import time
from typing import Any, Iterable

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

log = logging.getLogger("tests.emulators")


def now_rfc3339() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def is_deleting(obj: dict) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def finalizers(obj: dict) -> list[str]:
    return list(meta(obj).get("finalizers") or [])


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status == 404


def is_conflict(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status == 409


class Resource:
    """group/version/plural of a custom resource, cluster-scoped or namespaced."""

    def __init__(self, group: str, version: str, plural: str, namespaced: bool) -> None:
        self.group, self.version, self.plural, self.namespaced = group, version, plural, namespaced

    def __repr__(self) -> str:
        return f"{self.plural}.{self.group}/{self.version}"


class EmulatorBase:
    """Threads, wake-ups, counters and small API helpers shared by the emulators."""

    #: resources whose watch wakes the worker
    watched: tuple[Resource, ...] = ()
    name = "emulator"

    def __init__(self, cluster: Any, *, resync_seconds: float = 2.0, label_selector: str | None = None) -> None:
        self.cluster = cluster
        self.resync_seconds = resync_seconds
        self.label_selector = label_selector
        self.api = cluster.api_client("admin")
        self.co = k8s.CustomObjectsApi(self.api)
        self.counters: collections.Counter[str] = collections.Counter()
        self.errors: collections.deque[str] = collections.deque(maxlen=100)
        self.passes = 0
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._first_pass = threading.Event()
        self._threads: list[threading.Thread] = []
        self._responses: set[Any] = set()
        self._resp_lock = threading.Lock()
        self._started = False

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 30.0) -> "EmulatorBase":
        """Start the watch threads and the worker; return once the first pass has run."""
        if self._started:
            return self
        self._started = True
        self._stop.clear()
        for res in self.watched:
            t = threading.Thread(target=self._watch_loop, args=(res,), name=f"{self.name}-watch-{res.plural}",
                                 daemon=True)
            t.start()
            self._threads.append(t)
        worker = threading.Thread(target=self._work_loop, name=f"{self.name}-worker", daemon=True)
        worker.start()
        self._threads.append(worker)
        if not self._first_pass.wait(timeout):
            raise RuntimeError(f"{self.name}: first pass did not finish in {timeout}s; errors: {list(self.errors)}")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop all threads. The emulator writes nothing once this returns."""
        if not self._started:
            return
        self._stop.set()
        self._wake.set()
        with self._resp_lock:
            responses = list(self._responses)
        for resp in responses:
            _interrupt(resp)
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._threads = []
        self._started = False
        self.api.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kick(self) -> None:
        """Ask for a pass now (the worker also runs one on every watch event)."""
        self._wake.set()

    def sync(self) -> None:
        """Run one pass in the caller's thread (serialised with the worker)."""
        with self._lock:
            self._run_pass_guarded()

    @property
    def running(self) -> bool:
        return self._started and not self._stop.is_set()

    # ------------------------------------------------------------------ loops

    def _work_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            with self._lock:
                if self._stop.is_set():
                    break
                delay = self._run_pass_guarded()
            self._first_pass.set()
            wait = self.resync_seconds if delay is None else max(0.01, min(delay, self.resync_seconds))
            self._wake.wait(wait)

    def _run_pass_guarded(self) -> float | None:
        try:
            delay = self.run_pass()
            self.passes += 1
            return delay
        except Exception as exc:  # a pass never kills the worker
            self.record_error("pass", exc)
            return 0.5

    def run_pass(self) -> float | None:  # pragma: no cover - abstract
        """Converge once. Return seconds until a timer falls due, or None."""
        raise NotImplementedError

    def _watch_loop(self, res: Resource) -> None:
        while not self._stop.is_set():
            resp = None
            try:
                kwargs: dict[str, Any] = {
                    "watch": True,
                    "timeout_seconds": 30,
                    "_preload_content": False,
                    "_request_timeout": (5, 45),
                }
                if self.label_selector:
                    kwargs["label_selector"] = self.label_selector
                resp = self.co.list_cluster_custom_object(res.group, res.version, res.plural, **kwargs)
                with self._resp_lock:
                    self._responses.add(resp)
                if self._stop.is_set():
                    break
                for _chunk in resp.stream(65536, decode_content=True):
                    if self._stop.is_set():
                        break
                    self._wake.set()
            except Exception as exc:  # the watch is only a wake-up source; a relist covers gaps
                if self._stop.is_set():
                    break
                log.debug("%s: watch on %s ended: %s", self.name, res, exc)
                self._stop.wait(0.5)
            finally:
                if resp is not None:
                    with self._resp_lock:
                        self._responses.discard(resp)
                    try:
                        resp.release_conn()
                    except Exception:
                        pass
            self._wake.set()  # whatever happened in the gap, the next pass relists

    # ------------------------------------------------------------------ API helpers

    def record_error(self, what: str, exc: BaseException) -> None:
        self.counters["errors"] += 1
        msg = f"{what}: {type(exc).__name__}: {getattr(exc, 'reason', None) or exc}"
        if msg not in self.errors:  # a broken object fails on every pass; log it once
            log.warning("%s: %s", self.name, msg)
        self.errors.append(msg)

    def list_all(self, res: Resource) -> list[dict]:
        kwargs: dict[str, Any] = {}
        if self.label_selector:
            kwargs["label_selector"] = self.label_selector
        out = self.co.list_cluster_custom_object(res.group, res.version, res.plural, **kwargs)
        return list(out.get("items") or [])

    def get(self, res: Resource, name: str, namespace: str | None = None) -> dict | None:
        try:
            if res.namespaced:
                return self.co.get_namespaced_custom_object(res.group, res.version, namespace, res.plural, name)
            return self.co.get_cluster_custom_object(res.group, res.version, res.plural, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch(self, res: Resource, obj: dict, body: dict, *, status: bool = False) -> dict:
        """Merge-patch ``obj`` (by its name/namespace); ``status`` targets the status subresource."""
        m = meta(obj)
        name, ns = m["name"], m.get("namespace")
        if res.namespaced:
            fn = (self.co.patch_namespaced_custom_object_status if status
                  else self.co.patch_namespaced_custom_object)
            return fn(res.group, res.version, ns, res.plural, name, body)
        fn = self.co.patch_cluster_custom_object_status if status else self.co.patch_cluster_custom_object
        return fn(res.group, res.version, res.plural, name, body)

    def replace_status(self, res: Resource, obj: dict) -> dict:
        """PUT the status subresource; ``obj`` carries its resourceVersion (optimistic lock)."""
        m = meta(obj)
        if res.namespaced:
            return self.co.replace_namespaced_custom_object_status(res.group, res.version, m["namespace"],
                                                                   res.plural, m["name"], obj)
        return self.co.replace_cluster_custom_object_status(res.group, res.version, res.plural, m["name"], obj)

    def set_finalizers(self, res: Resource, obj: dict, wanted: Iterable[str]) -> dict:
        """Write ``metadata.finalizers`` with a resourceVersion precondition (never clobbers a
        finalizer someone else added meanwhile: the write fails with 409 instead)."""
        body = {"metadata": {"finalizers": list(wanted), "resourceVersion": meta(obj)["resourceVersion"]}}
        return self.patch(res, obj, body)

    def add_finalizer(self, res: Resource, obj: dict, fin: str) -> dict:
        fins = finalizers(obj)
        if fin in fins:
            return obj
        return self.set_finalizers(res, obj, fins + [fin])

    def remove_finalizer(self, res: Resource, obj: dict, fin: str) -> dict | None:
        fins = finalizers(obj)
        if fin not in fins:
            return obj
        try:
            return self.set_finalizers(res, obj, [f for f in fins if f != fin])
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise


def _interrupt(resp: Any) -> None:
    """Unblock a thread reading a streaming urllib3 response."""
    for attr in ("shutdown", "close"):
        fn = getattr(resp, attr, None)
        if fn is None:
            continue
        try:
            fn()
        except Exception:
            pass
