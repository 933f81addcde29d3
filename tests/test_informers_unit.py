"""Unit tests of informers/ (no server).

* ThreadSafeStore: indexes under add/update/delete/replace, index value changes.
* replace(): the synthesized event stream turns the old key set into the new
  one exactly (hypothesis).
* The watch line reader across arbitrary chunk boundaries.
* meta_namespace_key / Resource.path.
* The reflector loop against an in-memory fake API server (FakeApiServer):
  pagination, expired continue tokens, 410 as HTTP status and as ERROR event,
  bookmarks, dropped connections, read timeouts, 404 until a CRD appears,
  error backoff, handler isolation, late handlers, stop.

Conditions are awaited by polling with a deadline; nothing sleeps for timing.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from typing import Callable, Iterator

import attrs
import pytest
import urllib3.exceptions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException

from informers import (
    RESTART_REASONS,
    Resource,
    SharedIndexInformer,
    SharedInformerFactory,
    ThreadSafeStore,
    meta_namespace_key,
    split_meta_namespace_key,
)
from informers.backoff import Backoff
from informers.reflector import ReflectorConfig
from informers.watchstream import LineSplitter, WatchDecodeError, decode_event, iter_events
from hack.tools.wait import wait_for

CM = Resource("", "v1", "configmaps", True)
DEADLINE = 10.0


def obj(name: str, ns: str | None = "ns", rv: str = "1", **labels: str) -> dict:
    meta: dict = {"name": name, "resourceVersion": rv}
    if ns is not None:
        meta["namespace"] = ns
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


# =============================================================== keys / paths


def test_meta_namespace_key():
    assert meta_namespace_key(obj("a", "ns1")) == "ns1/a"
    assert meta_namespace_key(obj("node-1", None)) == "node-1"
    assert meta_namespace_key({"metadata": {"name": "x", "namespace": ""}}) == "x"
    with pytest.raises(KeyError):
        meta_namespace_key({"metadata": {}})
    assert split_meta_namespace_key("ns1/a") == ("ns1", "a")
    assert split_meta_namespace_key("a") == (None, "a")
    with pytest.raises(ValueError):
        split_meta_namespace_key("a/b/c")


def test_resource_paths():
    assert CM.path() == "/api/v1/configmaps"
    assert CM.path("tenant-a") == "/api/v1/namespaces/tenant-a/configmaps"
    vlans = Resource("kubeovn.io", "v1", "vlans", False)
    assert vlans.path() == "/apis/kubeovn.io/v1/vlans"
    assert vlans.api_version == "kubeovn.io/v1"
    with pytest.raises(ValueError):
        vlans.path("ns")
    with pytest.raises(ValueError):
        Resource("", "v1", "a/b", True)
    # frozen + hashable: usable as a factory key
    assert {Resource("", "v1", "configmaps", True): 1}[CM] == 1


# ======================================================================= store


def by_label(name: str) -> Callable[[dict], list[str]]:
    def fn(o: dict) -> list[str]:
        v = o["metadata"].get("labels", {}).get(name)
        return [v] if v is not None else []

    return fn


def multi(o: dict) -> list[str]:
    return sorted(o["metadata"].get("labels", {}).keys())


def check_index_consistent(store: ThreadSafeStore, name: str, fn: Callable[[dict], list[str]]) -> None:
    expected: dict[str, set[str]] = {}
    for o in store.list():
        for v in fn(o):
            expected.setdefault(v, set()).add(meta_namespace_key(o))
    actual = {v: set(store.index_keys(name, v)) for v in store.list_index_values(name)}
    assert actual == expected


def test_store_add_update_delete_and_index_changes():
    s = ThreadSafeStore({"app": by_label("app"), "labels": multi})
    assert s.add(obj("a", app="x")) is None
    s.add(obj("b", app="x", tier="web"))
    s.add(obj("c", app="y"))
    assert [meta_namespace_key(o) for o in s.by_index("app", "x")] == ["ns/a", "ns/b"]
    assert s.index_keys("labels", "tier") == ["ns/b"]

    # index value changes on update: a moves from x to y
    old = s.update(obj("a", rv="2", app="y"))
    assert old["metadata"]["resourceVersion"] == "1"
    assert s.index_keys("app", "x") == ["ns/b"]
    assert s.index_keys("app", "y") == ["ns/a", "ns/c"]

    # a value disappears entirely (label removed)
    s.update(obj("b", rv="3"))
    assert s.index_keys("app", "x") == []
    assert "x" not in s.list_index_values("app")
    assert s.index_keys("labels", "tier") == []

    # delete by object and by key, returning the last stored object
    gone = s.delete(obj("c"))
    assert gone["metadata"]["labels"] == {"app": "y"}
    assert s.delete("ns/c") is None
    assert s.index_keys("app", "y") == ["ns/a"]
    assert s.delete("ns/a")["metadata"]["resourceVersion"] == "2"
    assert s.list_index_values("app") == []
    assert s.keys() == ["ns/b"] and len(s) == 1 and "ns/b" in s
    for name, fn in (("app", by_label("app")), ("labels", multi)):
        check_index_consistent(s, name, fn)


def test_store_replace_rebuilds_indexes():
    s = ThreadSafeStore({"app": by_label("app")})
    s.add(obj("a", app="x"))
    s.add(obj("b", app="x"))
    events = s.replace([obj("b", rv="2", app="z"), obj("c", app="x")])
    assert [(e.type, e.key) for e in events] == [("DELETED", "ns/a"), ("MODIFIED", "ns/b"), ("ADDED", "ns/c")]
    assert events[0].old["metadata"]["name"] == "a"  # last known object for the tombstone
    assert s.index_keys("app", "x") == ["ns/c"]
    assert s.index_keys("app", "z") == ["ns/b"]
    check_index_consistent(s, "app", by_label("app"))


def test_store_index_errors():
    s = ThreadSafeStore({"app": by_label("app")})
    with pytest.raises(KeyError):
        s.by_index("nope", "x")
    with pytest.raises(ValueError):
        s.add_indexers({"app": multi})

    def broken(o: dict) -> list[str]:
        raise RuntimeError("boom")

    s.add_indexers({"broken": broken})
    s.add(obj("a", app="x"))  # stored despite the failing index function
    assert s.get("ns/a") is not None
    assert s.list_index_values("broken") == []


def test_store_add_indexers_later_indexes_existing():
    s = ThreadSafeStore()
    s.add(obj("a", app="x"))
    s.add(obj("b", app="y"))
    s.add_indexers({"app": by_label("app")})
    assert s.index_keys("app", "x") == ["ns/a"]
    s.add_indexers({"app": s.indexers()["app"]})  # same function again: fine


def test_store_index_survives_caller_mutation():
    # Removal uses the recorded values, not a re-run of the index function.
    s = ThreadSafeStore({"app": by_label("app")})
    o = obj("a", app="x")
    s.add(o)
    o["metadata"]["labels"]["app"] = "mutated"  # against the rules
    s.delete("ns/a")
    assert s.list_index_values("app") == []


store_ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "delete", "replace"]),
        st.lists(st.tuples(st.sampled_from("abcdef"), st.sampled_from(["x", "y", "z", None])), max_size=6),
    ),
    max_size=25,
)


@given(store_ops)
def test_store_indexes_always_consistent(ops):
    s = ThreadSafeStore({"app": by_label("app"), "labels": multi})
    model: dict[str, dict] = {}
    for op, items in ops:
        objs = [obj(n, app=v) if v else obj(n) for n, v in items]
        if op == "add":
            for o in objs:
                s.add(o)
                model[meta_namespace_key(o)] = o
        elif op == "delete":
            for o in objs:
                s.delete(o)
                model.pop(meta_namespace_key(o), None)
        else:
            s.replace(objs)
            model = {meta_namespace_key(o): o for o in objs}
        assert sorted(s.keys()) == sorted(model)
        check_index_consistent(s, "app", by_label("app"))
        check_index_consistent(s, "labels", multi)


# ======================================= replace -> handler event stream (property)


class NullTransport:
    def list(self, path, query, timeout, metadata_only=False):  # pragma: no cover - never started
        raise AssertionError("not used")

    def watch(self, path, query, timeout, metadata_only=False):  # pragma: no cover
        raise AssertionError("not used")


def recorder(inf: SharedIndexInformer) -> list[tuple]:
    events: list[tuple] = []
    inf.add_event_handler(
        on_add=lambda o: events.append(("add", meta_namespace_key(o), o)),
        on_update=lambda old, new: events.append(("update", meta_namespace_key(new), old, new)),
        on_delete=lambda o: events.append(("delete", meta_namespace_key(o), o)),
    )
    return events


key_sets = st.dictionaries(st.sampled_from([f"o{i}" for i in range(12)]), st.integers(0, 3), max_size=12)


@given(before=key_sets, after=key_sets)
def test_replace_event_stream_turns_old_keys_into_new(before, after):
    inf = SharedIndexInformer(CM, NullTransport())
    inf._on_list([obj(n, rv=str(v)) for n, v in before.items()], "10")
    events = recorder(inf)  # late handler: replays the cached objects as adds
    assert sorted(e[1] for e in events) == sorted(f"ns/{n}" for n in before)
    events.clear()

    inf._on_list([obj(n, rv=str(v)) for n, v in after.items()], "20")

    # Apply the stream to the old key set: it must become the new one exactly.
    shadow = {f"ns/{n}": v for n, v in before.items()}
    for e in events:
        if e[0] == "add":
            assert e[1] not in shadow, "add for a key that already existed"
            shadow[e[1]] = int(e[2]["metadata"]["resourceVersion"])
        elif e[0] == "update":
            assert e[1] in shadow, "update for an unknown key"
            assert int(e[2]["metadata"]["resourceVersion"]) == shadow[e[1]]  # old is the cached one
            shadow[e[1]] = int(e[3]["metadata"]["resourceVersion"])
        else:
            assert e[1] in shadow, "delete invented for a key we never had"
            # tombstone carries the last known object
            assert int(e[2]["metadata"]["resourceVersion"]) == shadow.pop(e[1])
    assert shadow == {f"ns/{n}": v for n, v in after.items()}
    assert len({e[1] for e in events}) == len(events), "one event per key"
    assert sorted(inf.store.keys()) == sorted(shadow)


# ========================================================== watch line reader


def test_line_splitter_basic():
    sp = LineSplitter()
    assert sp.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert sp.pending == b'{"b"'
    assert sp.feed(b":2}\n\n") == [b'{"b":2}']
    assert sp.pending == b""
    assert sp.feed(b"") == []


def _events(n: int) -> list[dict]:
    # includes multi-byte UTF-8 so splits can land inside a character
    return [
        {"type": "ADDED", "object": {"metadata": {"name": f"cm-{i}", "resourceVersion": str(i)},
                                     "data": {"k": "é✓🙂" * (i % 4), "nl": "a\nb"}}}
        for i in range(n)
    ]


@given(st.integers(1, 8), st.data())
def test_iter_events_any_chunking(n, data):
    events = _events(n)
    body = b"".join(json.dumps(e, ensure_ascii=False).encode() + b"\n" for e in events)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=20)))
    chunks, prev = [], 0
    for c in cuts + [len(body)]:
        chunks.append(body[prev:c])
        prev = c
    assert list(iter_events(chunks)) == events


def test_iter_events_last_line_without_newline_and_truncation():
    line = json.dumps(_events(1)[0]).encode()
    assert list(iter_events([line[:5], line[5:]])) == _events(1)
    with pytest.raises(WatchDecodeError):
        list(iter_events([line + b"\n", line[:10]]))
    with pytest.raises(WatchDecodeError):
        decode_event(b"[1,2]")
    with pytest.raises(WatchDecodeError):
        decode_event(b"not json")


# ====================================================== fake API server + reflector


def status(code: int, reason: str, message: str = "") -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
            "message": message}


class FakeStream:
    """A live watch: replays history after its start RV, then waits for more."""

    def __init__(self, server: "FakeApiServer", start_rv: int, timeout_s: float = 3600) -> None:
        self.server = server
        self.deadline = time.monotonic() + timeout_s  # the server-side timeoutSeconds
        self.pos = start_rv
        self.fate: str | None = None  # "cut", "timeout", "end", "abort", "error500"
        self.pending_bookmarks: list[int] = []
        self.closed = False

    def _line(self, etype: str, o: dict) -> bytes:
        return json.dumps({"type": etype, "object": o}).encode() + b"\n"

    def chunks(self) -> Iterator[bytes]:
        srv = self.server
        while True:
            with srv.cond:
                while True:
                    if self.pos < srv.lost_upto and not self.fate:
                        # Like etcd: a watcher that had not yet received
                        # events that compaction removed is cancelled (410).
                        self.fate = "expired"
                    new = [h for h in srv.history if h[0] > self.pos]
                    if new or self.fate or self.pending_bookmarks:
                        break
                    left = self.deadline - time.monotonic()
                    if left <= 0:
                        self.fate = "end"
                        break
                    srv.cond.wait(left)
                fate, bookmarks = self.fate, self.pending_bookmarks
                self.pending_bookmarks = []
                if fate:  # the connection is gone: nothing more gets through
                    new, bookmarks = [], []
            data = b""
            for rv, etype, o in new:
                data += self._line(etype, o)
                self.pos = rv
            for rv in bookmarks:
                data += self._line("BOOKMARK", {"kind": "ConfigMap", "apiVersion": "v1",
                                                "metadata": {"resourceVersion": str(rv)}})
            # hand out in odd-sized pieces to exercise the line reader
            for i in range(0, len(data), 37):
                yield data[i:i + 37]
            if fate == "cut":
                raise urllib3.exceptions.ProtocolError("Connection broken", ConnectionResetError(104, "reset"))
            if fate == "timeout":
                raise urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out.")
            if fate == "expired":
                yield self._line("ERROR", status(410, "Expired", "too old resource version"))
                return
            if fate == "error500":
                yield self._line("ERROR", status(500, "InternalError", "etcd hiccup"))
                return
            if fate in ("end", "abort"):
                return

    def abort(self) -> None:
        with self.server.cond:
            self.fate = self.fate or "abort"
            self.server.cond.notify_all()

    def close(self) -> None:
        self.closed = True
        with self.server.cond:
            if self in self.server.streams:
                self.server.streams.remove(self)


class FakeApiServer:
    """Just enough of kube-apiserver for one namespaced resource.

    ``expired_mode``: how a watch from a compacted RV fails: "event" (200 +
    ERROR 410 event, what etcd-backed watches do) or "http" (HTTP 410).
    """

    def __init__(self, expired_mode: str = "event") -> None:
        self.cond = threading.Condition()
        self.rv = 100
        self.objects: dict[str, dict] = {}
        self.history: list[tuple[int, str, dict]] = []
        self.compacted = 0
        self.lost_upto = 0  # newest event dropped by a compaction
        self.expired_mode = expired_mode
        self.streams: list[FakeStream] = []
        self.lists: list[list[tuple[str, str]]] = []
        self.watches: list[tuple[list[tuple[str, str]], tuple[float, float]]] = []
        self.list_errors: list[Exception] = []  # raised by the next LIST calls, in order
        self.watch_errors: list[Exception] = []
        self.expire_next_continue = False
        self._snapshots: dict[str, tuple[int, list[dict]]] = {}

    # --- mutations (as admin)
    def _bump(self, etype: str, o: dict) -> dict:
        self.rv += 1
        o = copy.deepcopy(o)
        o["metadata"]["resourceVersion"] = str(self.rv)
        self.history.append((self.rv, etype, o))
        self.cond.notify_all()
        return o

    def put(self, name: str, ns: str = "ns", **data: str) -> None:
        with self.cond:
            key = f"{ns}/{name}"
            etype = "MODIFIED" if key in self.objects else "ADDED"
            o = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns},
                 "data": dict(data)}
            self.objects[key] = self._bump(etype, o)

    def delete(self, name: str, ns: str = "ns") -> None:
        with self.cond:
            o = self.objects.pop(f"{ns}/{name}")
            self._bump("DELETED", o)

    def compact(self) -> None:
        with self.cond:
            if self.history:
                self.lost_upto = max(self.lost_upto, self.history[-1][0])
            self.compacted = self.rv
            self.history = []
            self.cond.notify_all()

    def state(self) -> dict[str, str]:
        with self.cond:
            return {k: o["metadata"]["resourceVersion"] for k, o in self.objects.items()}

    # --- connection control
    def live(self) -> list[FakeStream]:
        """Watches that are open and not yet doomed."""
        with self.cond:
            return [s for s in self.streams if not s.fate]

    def doom_streams(self, fate: str) -> int:
        with self.cond:
            n = 0
            for s in self.streams:
                if not s.fate:
                    s.fate = fate
                    n += 1
            self.cond.notify_all()
            return n

    def bookmark(self) -> None:
        with self.cond:
            self.rv += 1  # something else in etcd moved the revision on
            for s in self.streams:
                s.pending_bookmarks.append(self.rv)
            self.cond.notify_all()

    # --- Transport protocol
    def list(self, path, query, timeout, metadata_only=False):
        q = dict(query)
        with self.cond:
            self.lists.append(list(query))
            if self.list_errors:
                raise self.list_errors.pop(0)
            limit = int(q["limit"])
            if "continue" in q:
                if self.expire_next_continue:
                    self.expire_next_continue = False
                    raise ApiException(status=410, reason="Gone",
                                       body=json.dumps(status(410, "Expired", "continue token expired")))
                rv, items = self._snapshots[q["continue"]]
            else:
                rv = self.rv
                items = [copy.deepcopy(o) for _, o in sorted(self.objects.items())]
            page, rest = items[:limit], items[limit:]
            meta: dict = {"resourceVersion": str(rv)}
            if rest:
                token = f"c{len(self._snapshots)}"
                self._snapshots[token] = (rv, rest)
                meta["continue"] = token
            for o in page:  # real list items carry no kind/apiVersion
                o.pop("kind", None)
                o.pop("apiVersion", None)
            return {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": meta, "items": page}

    def watch(self, path, query, timeout, metadata_only=False):
        q = dict(query)
        with self.cond:
            self.watches.append((list(query), timeout))
            if self.watch_errors:
                raise self.watch_errors.pop(0)
            start = int(q.get("resourceVersion") or self.rv)
            stream = FakeStream(self, start, float(q.get("timeoutSeconds", 3600)))
            if start < self.compacted:
                if self.expired_mode == "http":
                    raise ApiException(status=410, reason="Gone",
                                       body=json.dumps(status(410, "Expired", "too old resource version")))
                return _ErrorStream(status(410, "Expired", "too old resource version"))
            self.streams.append(stream)
            return stream


class _ErrorStream:
    """A watch that starts, stays quiet ``hang`` seconds and ends with an ERROR event
    carrying ``status`` (410 Expired, or a 500 inside the stream)."""

    def __init__(self, status: dict, hang: float = 0.0) -> None:
        self.status = status
        self.hang = hang

    def chunks(self):
        if self.hang:
            time.sleep(self.hang)  # the server's silence: nothing to await on our side
        yield json.dumps({"type": "ERROR", "object": self.status}).encode() + b"\n"

    def abort(self):
        pass

    def close(self):
        pass


# A backoff long enough to tell a wait from none, short enough for a unit test (seconds).
BACKOFF = 0.05
FAST = ReflectorConfig(watch_timeout_range=(5, 9), read_timeout_margin=3, relist_backoff=(0.001, 0.01))


@pytest.fixture
def server():
    return FakeApiServer()


@pytest.fixture
def running():
    started: list[SharedIndexInformer] = []

    def start(srv: FakeApiServer, **kw) -> SharedIndexInformer:
        inf = SharedIndexInformer(CM, srv, config=kw.pop("config", FAST), **kw)
        started.append(inf)
        inf.start()
        return inf

    yield start
    for inf in started:
        inf.stop()
    for inf in started:
        assert inf.join(5), "informer thread did not stop"


def cache_state(inf: SharedIndexInformer) -> dict[str, str]:
    return {meta_namespace_key(o): o["metadata"]["resourceVersion"] for o in inf.store.list()}


def converged(inf: SharedIndexInformer, srv: FakeApiServer) -> bool:
    return cache_state(inf) == srv.state()


def test_initial_list_paginates_and_syncs(server, running):
    for i in range(1203):
        server.put(f"cm-{i:04d}")
    seen: list[str] = []
    inf = SharedIndexInformer(CM, server, config=FAST)
    inf.add_event_handler(on_add=lambda o: seen.append(meta_namespace_key(o)))
    assert not inf.has_synced()
    assert inf.last_sync_age() == float("inf")
    inf.start()
    try:
        assert inf.wait_for_sync(DEADLINE)
        assert len(server.lists) == 3  # 500 + 500 + 203
        assert all(("limit", "500") in q for q in server.lists)
        assert sorted(seen) == sorted(server.state())  # handlers notified before has_synced
        assert converged(inf, server)
        o = inf.store.get("ns/cm-0000")
        assert o["kind"] == "ConfigMap" and o["apiVersion"] == "v1"  # filled in for list items
        wait_for(lambda: server.watches, what="watch started")
        query, timeout = server.watches[0]
        q = dict(query)
        assert q["resourceVersion"] == str(server.rv)
        assert q["allowWatchBookmarks"] == "true" and q["watch"] == "true"
        assert 5 <= int(q["timeoutSeconds"]) <= 9
        assert timeout == (10, int(q["timeoutSeconds"]) + 3)
        assert inf.relists == 0 and inf.last_sync_age() < 5
    finally:
        inf.stop()
        assert inf.join(5)


def test_expired_continue_token_restarts_list(server, running):
    for i in range(700):
        server.put(f"cm-{i:04d}")
    server.expire_next_continue = True
    inf = running(server)
    assert inf.wait_for_sync(DEADLINE)
    assert ["continue" in dict(q) for q in server.lists] == [False, True, False, True]
    assert converged(inf, server)
    assert inf.relists == 0


def test_watch_events_update_cache_and_handlers(server, running):
    server.put("a", v="1")
    inf = running(server)
    events = recorder(inf)
    assert inf.wait_for_sync(DEADLINE)
    wait_for(server.live, what="watch")
    server.put("b", v="1")
    server.put("a", v="2")
    server.delete("b")
    wait_for(lambda: len(events) == 4, what="4 events")
    assert [e[:2] for e in events] == [("add", "ns/a"), ("add", "ns/b"), ("update", "ns/a"), ("delete", "ns/b")]
    assert events[2][2]["data"] == {"v": "1"} and events[2][3]["data"] == {"v": "2"}
    assert events[3][2]["metadata"]["name"] == "b"
    assert converged(inf, server)
    assert inf.last_resource_version == str(server.rv)


def test_bookmark_advances_resource_version(server, running):
    inf = running(server)
    assert inf.wait_for_sync(DEADLINE)
    wait_for(server.live, what="watch")
    server.bookmark()
    wait_for(lambda: inf.last_resource_version == str(server.rv), what="rv from bookmark")
    # The next watch resumes from the bookmark's RV, not the list's.
    server.doom_streams("end")
    wait_for(lambda: len(server.watches) == 2, what="rewatch")
    assert dict(server.watches[1][0])["resourceVersion"] == str(server.rv)
    assert inf.watch_restarts["closed"] == 1 and inf.relists == 0


@pytest.mark.parametrize("fate,reason", [("cut", "dropped"), ("timeout", "timeout"), ("end", "closed")])
def test_rewatch_from_last_rv_after_connection_loss(server, running, fate, reason):
    server.put("a")
    inf = running(server)
    assert inf.wait_for_sync(DEADLINE)
    wait_for(server.live, what="watch")
    server.put("b")
    wait_for(lambda: inf.store.get("ns/b"), what="b")
    rv_before = inf.last_resource_version
    with server.cond:  # changes race with the connection loss
        server.doom_streams(fate)
        server.put("c")
        server.delete("a")
    wait_for(lambda: converged(inf, server), what="cache converged")
    assert inf.watch_restarts[reason] == 1
    assert inf.relists == 0 and len(server.lists) == 1
    resumed = [dict(q)["resourceVersion"] for q, _ in server.watches]
    assert resumed[1] == rv_before


@pytest.mark.parametrize("mode", ["event", "http"])
def test_410_relists_with_synthesized_deletes(mode, running):
    server = FakeApiServer(expired_mode=mode)
    for n in ("keep", "vanish", "change"):
        server.put(n, v="1")
    inf = running(server)
    events = recorder(inf)
    assert inf.wait_for_sync(DEADLINE)
    wait_for(server.live, what="watch")
    events.clear()
    # Stop-the-world: the watch dies, changes happen, etcd compacts.
    with server.cond:
        server.doom_streams("cut")
        server.watch_errors.append(ConnectionRefusedError(111, "refused"))  # API server away
        server.delete("vanish")
        server.put("change", v="2")
        server.put("new", v="1")
        server.compact()
    wait_for(lambda: converged(inf, server), what="converged after relist")
    assert inf.watch_restarts["expired"] == 1
    assert inf.relists == 1
    kinds = {(e[0], e[1]) for e in events}
    assert ("delete", "ns/vanish") in kinds and ("add", "ns/new") in kinds
    assert ("update", "ns/change") in kinds and ("update", "ns/keep") in kinds
    assert len(events) == 4
    tomb = next(e for e in events if e[0] == "delete")
    assert tomb[2]["data"] == {"v": "1"}  # last known object
    # and the informer keeps watching from the new list's RV
    server.put("after")
    wait_for(lambda: inf.store.get("ns/after"), what="event after relist")


def test_repeated_410_right_after_relist_backs_off(running):
    class AlwaysGone(FakeApiServer):
        def watch(self, path, query, timeout, metadata_only=False):
            self.watches.append((list(query), timeout))
            raise ApiException(status=410, reason="Gone", body=json.dumps(status(410, "Expired")))

        def list(self, path, query, timeout, metadata_only=False):
            self.list_times.append(time.monotonic())
            return super().list(path, query, timeout, metadata_only)

    srv = AlwaysGone()
    srv.list_times = []
    inf = running(srv, config=attrs.evolve(FAST, relist_backoff=(BACKOFF, BACKOFF)))
    wait_for(lambda: len(srv.list_times) >= 4, what="relists")
    assert inf.has_synced() and inf.is_running()
    # Not a hot LIST loop: a second 410 in a row waits the backoff (never shorter than its
    # first delay) before the next LIST; the first one relists at once.
    later = [b - a for a, b in zip(srv.list_times[1:3], srv.list_times[2:4])]
    assert all(gap >= BACKOFF for gap in later), later
    assert inf.watch_restarts["expired"] >= 3


def test_missing_crd_keeps_retrying_until_it_appears(server, running):
    not_found = ApiException(status=404, reason="Not Found", body=json.dumps(status(404, "NotFound")))
    server.list_errors.extend([not_found] * 5)
    server.put("a")
    inf = running(server)
    assert inf.wait_for_sync(DEADLINE)
    assert len(server.lists) == 6
    assert inf.watch_restarts["error"] == 5


def test_missing_crd_has_synced_stays_false(running):
    class NoCrd(FakeApiServer):
        def list(self, path, query, timeout, metadata_only=False):
            self.lists.append(query)
            raise ApiException(status=404, reason="Not Found", body=json.dumps(status(404, "NotFound")))

    srv = NoCrd()
    inf = running(srv)
    wait_for(lambda: len(srv.lists) >= 3, what="retries")
    assert not inf.has_synced()
    assert inf.is_running()


def test_a_kind_that_cannot_be_listed_says_why_until_a_list_succeeds(running):
    """R8: ``last_error`` quotes the API server's Status message of the failing LIST (a
    conversion webhook answering 500 fails every LIST of the converted version), and
    ``failing_for`` counts from the first failure; both clear once a LIST succeeds."""
    class Converting(FakeApiServer):
        def __init__(self) -> None:
            super().__init__()
            self.broken = threading.Event()
            self.broken.set()

        def list(self, path, query, timeout, metadata_only=False):
            if self.broken.is_set():
                self.lists.append(query)
                raise ApiException(status=500, reason="Internal Server Error", body=json.dumps(
                    status(500, "InternalError") | {"message": "conversion webhook for x/v1alpha1 failed"}))
            return super().list(path, query, timeout)

    srv = Converting()
    inf = running(srv)
    wait_for(lambda: len(srv.lists) >= 2, what="two failed LISTs")
    assert inf.last_error == "HTTP 500: conversion webhook for x/v1alpha1 failed"
    assert inf.failing_for() > 0 and not inf.has_synced()
    srv.broken.clear()
    assert inf.wait_for_sync(DEADLINE)
    wait_for(lambda: inf.last_error is None, what="the error cleared")
    assert inf.failing_for() == 0.0


def test_a_watch_that_stays_open_clears_a_failure_at_its_start(server, running):
    """R8 readiness after a transient 429 at watch start ("storage is (re)initializing", what
    kube-apiserver answers while a new CRD's watch cache fills, flake hunt failure 15): once
    the next watch has been open ``watch_proof`` seconds the kind lists, so ``last_error`` is
    None and ``failing_for`` 0, though the watch has delivered nothing and has not ended.
    Once proven, an ERROR event that ends the watch starts a new run of failures."""
    server.watch_errors.append(ApiException(status=429, reason="Too Many Requests", body=json.dumps(
        status(429, "TooManyRequests", "storage is (re)initializing"))))
    # Watches that outlast the test: what clears the failure is the open watch, not its end.
    inf = running(server, config=attrs.evolve(FAST, watch_timeout_range=(300, 300), watch_proof=5.0))
    assert inf.wait_for_sync(DEADLINE)
    wait_for(lambda: server.live(), what="the second watch open")
    assert len(server.watches) == 2 and len(server.lists) == 1
    assert inf.last_error == "HTTP 429: storage is (re)initializing"  # the open watch is < 5 s old
    assert inf.failure() is not None and inf.failure()[0] == inf.last_error
    wait_for(lambda: inf.last_error is None, timeout=30, what="the failure cleared by the open watch")
    assert inf.failing_for() == 0.0 and inf.failure() is None
    assert len(server.live()) == 1 and len(server.watches) == 2  # the same quiet watch, still open
    cleared = time.monotonic()
    server.doom_streams("error500")
    wait_for(lambda: inf.last_error is not None, what="the ERROR event recorded")
    assert "etcd hiccup" in inf.last_error
    assert inf.failing_for() <= time.monotonic() - cleared  # a new run, not the 429's


@pytest.mark.parametrize("hang", [0.0, 0.4])
def test_a_watch_that_errors_before_its_proof_keeps_the_failure_and_its_start(running, hang):
    """The other side of the rule above: a watch that starts (HTTP 200) and, at once or
    after hanging for less than ``watch_proof`` (a slow conversion webhook), ends with an
    ERROR event (an etcd-served watch of an object the webhook cannot convert) is no sign
    the kind lists: the failure stays and ``failing_for`` counts from the first one, so
    /readyz names the kind after its grace (R8)."""
    class ErrorsAfterHang(FakeApiServer):
        def watch(self, path, query, timeout, metadata_only=False):
            with self.cond:
                self.watches.append((list(query), timeout))
            return _ErrorStream(status(500, "InternalError", "conversion webhook failed"), hang)

    srv = ErrorsAfterHang()
    inf = running(srv, config=attrs.evolve(FAST, watch_proof=1.0))
    assert inf.wait_for_sync(DEADLINE)
    wait_for(lambda: inf.failing_for() >= 2.5, what="failing for longer than two proofs")
    assert inf.last_error is not None and "conversion webhook failed" in inf.last_error
    assert len(srv.watches) >= 3


def test_a_watch_that_hangs_past_its_proof_before_each_error_is_one_run_of_failures(running):
    """Issue 40 item 4: a watch that hangs longer than ``watch_proof`` (here 2x) before each
    ERROR event (a conversion webhook that times out) did prove itself by lasting, so each
    ERROR started a new run and /readyz's grace was never reached. After one such ERROR, a
    quiet open watch proves nothing by lasting: the failure stays visible while the next
    one hangs, and ``failing_for`` counts from the first ERROR, past several hangs."""
    class HangsThenErrors(FakeApiServer):
        def watch(self, path, query, timeout, metadata_only=False):
            with self.cond:
                self.watches.append((list(query), timeout))
            return _ErrorStream(status(500, "InternalError", "conversion webhook timed out"), 1.0)

    srv = HangsThenErrors()
    inf = running(srv, config=attrs.evolve(FAST, watch_proof=0.5))
    assert inf.wait_for_sync(DEADLINE)
    wait_for(lambda: len(srv.watches) >= 2, what="the first ERROR")
    first = time.monotonic()
    wait_for(lambda: len(srv.watches) >= 5, timeout=30, what="three more hangs, each past its proof")
    assert inf.last_error is not None and "conversion webhook timed out" in inf.last_error
    assert inf.failing_for() >= time.monotonic() - first  # one run since the first ERROR


def test_a_quiet_watch_proves_the_kind_again_once_it_delivers_after_hanging_errors(server, running):
    """The way back from the rule above: an event on the next watch ends the run."""
    inf = running(server, config=attrs.evolve(FAST, watch_proof=0.5))
    assert inf.wait_for_sync(DEADLINE)
    wait_for(server.live, what="a watch open")
    server.doom_streams("error500")
    wait_for(lambda: inf.last_error is not None, what="the ERROR recorded")
    wait_for(server.live, what="the next watch open")
    server.put("a")
    wait_for(lambda: inf.last_error is None, what="the run ended by an event")
    assert inf.failing_for() == 0.0


def test_errors_back_off_and_keep_going(server, running):
    server.put("a")
    server.watch_errors.extend([
        ApiException(status=500, reason="Internal", body=json.dumps(status(500, "InternalError"))),
        urllib3.exceptions.NewConnectionError(None, "refused"),
        RuntimeError("a surprise"),
    ])
    inf = running(server)
    assert inf.wait_for_sync(DEADLINE)
    wait_for(server.live, what="watch after errors")
    assert inf.watch_restarts["error"] == 3
    server.doom_streams("error500")  # ERROR event that is not a 410: rewatch, no relist
    wait_for(lambda: inf.watch_restarts["error"] == 4, what="error event counted")
    server.put("b")
    wait_for(lambda: converged(inf, server), what="converged")
    assert inf.relists == 1  # only the unexpected exception forced a relist
    assert set(inf.watch_restarts) == set(RESTART_REASONS)


def test_immediately_ending_watch_backs_off(server, running):
    opens: list[float] = []
    watch = server.watch

    def timed_watch(*args, **kwargs):
        opens.append(time.monotonic())
        return watch(*args, **kwargs)

    server.watch = timed_watch
    inf = running(server, config=attrs.evolve(FAST, relist_backoff=(BACKOFF, BACKOFF)))
    assert inf.wait_for_sync(DEADLINE)
    for _ in range(3):
        wait_for(server.live, what="watch")
        ended, opened = time.monotonic(), len(opens)
        server.doom_streams("end")
        wait_for(lambda: len(opens) > opened, what="the next watch")
        # a watch that ended at once having delivered nothing is a failure: the next waits
        assert opens[-1] - ended >= BACKOFF
    wait_for(lambda: inf.watch_restarts["closed"] == 3, what="3 closes")


def test_handler_exception_is_isolated(server, running):
    got: list[str] = []

    def bad(o):
        raise ValueError("handler bug")

    inf = running(server)
    inf.add_event_handler(on_add=bad)
    inf.add_event_handler(on_add=lambda o: got.append(o["metadata"]["name"]))
    assert inf.wait_for_sync(DEADLINE)
    server.put("a")
    server.put("b")
    wait_for(lambda: got == ["a", "b"], what="both events")
    assert inf.is_running()


def test_late_handler_gets_adds_then_events_without_gaps(server, running):
    for i in range(50):
        server.put(f"pre-{i}")
    inf = running(server)
    assert inf.wait_for_sync(DEADLINE)
    wait_for(server.live, what="watch")
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set() and i < 200:
            server.put(f"live-{i}")
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    shadow: dict[str, str] = {}
    lock = threading.Lock()

    def on_add(o):
        with lock:
            k = meta_namespace_key(o)
            assert k not in shadow, f"double add {k}"
            shadow[k] = o["metadata"]["resourceVersion"]

    def on_update(old, new):
        with lock:
            shadow[meta_namespace_key(new)] = new["metadata"]["resourceVersion"]

    inf.add_event_handler(on_add=on_add, on_update=on_update)
    t.join()
    wait_for(lambda: converged(inf, server), what="converged")
    with lock:
        assert shadow == server.state()


def test_stop_is_prompt_during_a_blocked_watch(server):
    inf = SharedIndexInformer(CM, server, config=FAST)
    inf.start()
    assert inf.wait_for_sync(DEADLINE)
    wait_for(server.live, what="watch")
    t0 = time.monotonic()
    inf.stop()
    assert inf.join(5)
    assert time.monotonic() - t0 < 2
    assert not inf.is_running()


def test_relist_period_triggers_relist(server, running):
    server.put("a")
    cfg = ReflectorConfig(watch_timeout_range=(300, 600), read_timeout_margin=3,
                          relist_backoff=(0.001, 0.01), relist_period=0.01)
    inf = running(server, config=cfg)
    assert inf.wait_for_sync(DEADLINE)
    wait_for(server.live, what="watch")
    # the watch was capped to end when the relist is due
    assert int(dict(server.watches[0][0])["timeoutSeconds"]) == 1
    wait_for(lambda: inf.relists >= 1, what="periodic relist")
    assert inf.watch_restarts["closed"] >= 1


# ================================================================ factory


def test_factory_shares_informers_and_merges_indexers(server):
    f = SharedInformerFactory(transport=server, relist_backoff=(0.001, 0.01))
    a = f.informer(CM, indexers={"app": by_label("app")})
    b = f.informer(CM, indexers={"labels": multi})
    c = f.informer(CM, label_selector="x=y")
    d = f.informer(CM, namespace="ns")
    assert a is b and a is not c and a is not d
    assert set(a.store.indexers()) == {"app", "labels"}
    assert not f.has_synced()
    f.start()
    try:
        assert f.wait_for_cache_sync(DEADLINE)
        assert f.has_synced()
        late = f.informer(Resource("", "v1", "secrets", True))  # started at once
        assert late.wait_for_sync(DEADLINE)
        assert dict(server.lists[-1]) .get("labelSelector") in (None, "x=y")
    finally:
        assert f.stop(5)
    assert all(not i.is_running() for i in f.informers())
    with pytest.raises(RuntimeError):
        f.informer(CM)


def test_factory_wait_for_cache_sync_times_out(running):
    class Down(FakeApiServer):
        def list(self, path, query, timeout, metadata_only=False):
            raise urllib3.exceptions.NewConnectionError(None, "refused")

    f = SharedInformerFactory(transport=Down(), relist_backoff=(0.001, 0.01))
    f.informer(CM)
    f.start()
    try:
        t0 = time.monotonic()
        assert f.wait_for_cache_sync(0.2) is False
        assert time.monotonic() - t0 < 2
    finally:
        assert f.stop(5)


def test_factory_validates_options():
    with pytest.raises(ValueError):
        SharedInformerFactory(transport=NullTransport(), watch_timeout_range=(10, 5))
    with pytest.raises(ValueError):
        SharedInformerFactory(transport=NullTransport(), relist_backoff=(0, 1))
    with pytest.raises(ValueError):
        SharedInformerFactory()


def test_backoff_bounds():
    b = Backoff(0.5, 30)
    delays = [b.next_delay() for _ in range(20)]
    assert all(0.5 <= d <= 30 for d in delays)
    assert max(delays[-5:]) > 14  # reached the cap region
    b.reset()
    assert b.next_delay() == 0.5


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["put", "put", "put", "delete", "cut", "timeout", "end", "bookmark", "compact"]),
                min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_cache_converges_under_random_faults(ops, rnd):
    server = FakeApiServer(expired_mode=rnd.choice(["event", "http"]))
    inf = SharedIndexInformer(CM, server, config=FAST)
    shadow: dict[str, str] = {}

    def on_add(o):
        shadow[meta_namespace_key(o)] = o["metadata"]["resourceVersion"]

    def on_delete(o):
        assert shadow.pop(meta_namespace_key(o), None) is not None, "delete invented"

    inf.add_event_handler(on_add=on_add, on_update=lambda old, new: on_add(new), on_delete=on_delete)
    inf.start()
    try:
        assert inf.wait_for_sync(DEADLINE)
        for op in ops:
            name = f"o{rnd.randint(0, 5)}"
            if op == "put":
                server.put(name, v=str(rnd.random()))
            elif op == "delete":
                if f"ns/{name}" in server.objects:
                    server.delete(name)
            elif op == "compact":
                server.compact()
            elif op == "bookmark":
                server.bookmark()
            else:
                server.doom_streams(op)
        wait_for(lambda: converged(inf, server), what="converged")
        wait_for(lambda: shadow == server.state(), what="handler view converged")
    finally:
        inf.stop()
        assert inf.join(5)


def test_retry_after_is_read_from_header_or_status():
    from informers.transport import retry_after_seconds

    e = ApiException(status=429, reason="Too Many Requests",
                     body=json.dumps({**status(429, "TooManyRequests"), "details": {"retryAfterSeconds": 1}}))
    assert retry_after_seconds(e) == 1.0
    e.headers = {"Retry-After": "3"}
    assert retry_after_seconds(e) == 3.0
    assert retry_after_seconds(ApiException(status=500, reason="x", body="not json")) == 0.0


def test_cached_objects_carry_no_managed_fields_unless_the_transform_is_off(running):
    """The default transform drops ``metadata.managedFields`` from list items and watch
    events before the store or a handler sees them (client-go SetTransform; nothing we
    reconcile reads them); ``transform=None`` keeps objects exactly as served."""
    mf = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:data": {}}}]

    class Managed(FakeApiServer):
        def list(self, path, query, timeout, metadata_only=False):
            page = super().list(path, query, timeout)
            for o in page["items"]:
                o["metadata"]["managedFields"] = copy.deepcopy(mf)
            return page

    srv = Managed()
    srv.put("a")
    inf = running(srv)
    events = recorder(inf)
    assert inf.wait_for_sync(DEADLINE)
    served = obj("b", rv="1")
    served["metadata"]["managedFields"] = copy.deepcopy(mf)
    inf._on_watch_event("ADDED", served)
    for key in ("ns/a", "ns/b"):
        assert "managedFields" not in inf.store.get(key)["metadata"]
        assert inf.store.get(key)["metadata"]["name"] == key[3:]
    assert all("managedFields" not in e[2]["metadata"] for e in events)

    raw = running(srv, transform=None)
    assert raw.wait_for_sync(DEADLINE)
    assert raw.store.get("ns/a")["metadata"]["managedFields"] == mf


def test_each_list_page_is_transformed_before_the_next_page_is_read(running):
    """Issue 29: the objects of a LIST page as served are dropped page by page, not kept
    until the last page (50,000 Kube-OVN IPs kept whole pinned twice the cache's memory).
    When page k is requested, the transform has run on every object of the k pages before."""
    transformed: list[str] = []
    seen_at_request: list[int] = []

    class Recording(FakeApiServer):
        def list(self, path, query, timeout, metadata_only=False):
            seen_at_request.append(len(transformed))
            return super().list(path, query, timeout)

    def transform(o: dict) -> dict:
        transformed.append(o["metadata"]["name"])
        return {"metadata": {k: o["metadata"][k] for k in ("name", "namespace", "resourceVersion")}}

    srv = Recording()
    for i in range(1203):
        srv.put(f"cm-{i:04d}")
    inf = running(srv, transform=transform)
    assert inf.wait_for_sync(DEADLINE)
    assert seen_at_request[:3] == [0, 500, 1000]
    assert len(inf.store.keys()) == 1203
    kept = inf.store.get("ns/cm-0000")
    assert set(kept) == {"metadata"} and set(kept["metadata"]) == {"name", "namespace", "resourceVersion"}


def test_a_metadata_only_resource_asks_for_metadata_and_keeps_its_own_kind(running):
    """A ``metadata_only`` Resource asks the transport for metadata (list and watch), and
    the ``PartialObjectMetadata`` it gets back is stored under the resource's kind and
    apiVersion, from the LIST and from a watch event alike."""
    asked: list[tuple[str, bool]] = []

    class Partial(FakeApiServer):
        def list(self, path, query, timeout, metadata_only=False):
            asked.append(("list", metadata_only))
            page = super().list(path, query, timeout)
            page["kind"], page["apiVersion"] = "PartialObjectMetadataList", "meta.k8s.io/v1"
            for o in page["items"]:
                o.pop("data", None)
                o["kind"], o["apiVersion"] = "PartialObjectMetadata", "meta.k8s.io/v1"
            return page

        def watch(self, path, query, timeout, metadata_only=False):
            asked.append(("watch", metadata_only))
            return super().watch(path, query, timeout)

    srv = Partial()
    srv.put("a", k="v")
    meta_cm = Resource("", "v1", "configmaps", True, kind="ConfigMap", metadata_only=True)
    inf = SharedIndexInformer(meta_cm, srv, config=FAST)
    inf.start()
    try:
        assert inf.wait_for_sync(DEADLINE)
        a = inf.store.get("ns/a")
        assert (a["kind"], a["apiVersion"]) == ("ConfigMap", "v1") and "data" not in a
        wait_for(lambda: ("watch", True) in asked, what="the watch")
        partial = obj("b", rv="1")
        partial["kind"], partial["apiVersion"] = "PartialObjectMetadata", "meta.k8s.io/v1"
        inf._reflector._handle_event({"type": "ADDED", "object": partial})
        b = inf.store.get("ns/b")
        assert (b["kind"], b["apiVersion"]) == ("ConfigMap", "v1")
        assert ("list", True) in asked and all(flag for _, flag in asked)
    finally:
        inf.stop()
        assert inf.join(5)


def test_a_metadata_only_resource_needs_its_kind():
    with pytest.raises(ValueError, match="needs its kind"):
        Resource("", "v1", "nodes", False, metadata_only=True)
