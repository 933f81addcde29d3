"""Integration tests of informers/ against a real kube-apiserver (hack/cluster.py).

ConfigMaps in a unique namespace are the watched resource (a field selector
on metadata.namespace keeps other tests' objects out). Faults:

* dropped connection: tests/support/tcpproxy.py ``cut()`` mid-stream;
* silent half-open connection: the proxy's blackhole, detected by the client
  read timeout (B11);
* 410 Gone: a server with ``--watch-cache=false``, the reflector kept away
  (blackhole) while objects change and etcd compacts, so its re-watch from
  the old resourceVersion gets 410 and it must relist (B12).

Every wait polls with a deadline.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Iterator

import pytest
from kubernetes import client

from hack.bed import LocalCluster
from informers import Resource, SharedInformerFactory, meta_namespace_key
from informers import reflector as reflector_mod
from tests.support.tcpproxy import TCPProxy
from hack.tools.wait import wait_for

pytestmark = pytest.mark.integration

CM = Resource("", "v1", "configmaps", True, kind="ConfigMap")
DEADLINE = 30.0


class Recorder:
    """Handler that replays events onto a shadow ``key -> data`` map, failing
    on anything that could not happen (double add, invented delete)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str]] = []
        self.shadow: dict[str, dict] = {}
        self.problems: list[str] = []

    def on_add(self, o: dict) -> None:
        k = meta_namespace_key(o)
        with self.lock:
            if k in self.shadow:
                self.problems.append(f"add for existing {k}")
            self.shadow[k] = o.get("data") or {}
            self.events.append(("add", k))

    def on_update(self, old: dict, new: dict) -> None:
        k = meta_namespace_key(new)
        with self.lock:
            if k not in self.shadow:
                self.problems.append(f"update for unknown {k}")
            self.shadow[k] = new.get("data") or {}
            self.events.append(("update", k))

    def on_delete(self, o: dict) -> None:
        k = meta_namespace_key(o)
        with self.lock:
            if self.shadow.pop(k, None) is None:
                self.problems.append(f"delete invented for {k}")
            self.events.append(("delete", k))

    def attach(self, inf) -> "Recorder":
        inf.add_event_handler(on_add=self.on_add, on_update=self.on_update, on_delete=self.on_delete)
        return self

    def snapshot(self) -> dict[str, dict]:
        with self.lock:
            return dict(self.shadow)


def api_state(core: client.CoreV1Api, ns: str) -> dict[str, dict]:
    return {f"{ns}/{c.metadata.name}": (c.data or {}) for c in core.list_namespaced_config_map(ns).items}


def cache_state(inf) -> dict[str, dict]:
    return {meta_namespace_key(o): (o.get("data") or {}) for o in inf.store.list()}


def put(core: client.CoreV1Api, ns: str, name: str, **data: str) -> None:
    try:
        core.patch_namespaced_config_map(name, ns, {"data": data})
    except client.ApiException as e:
        if e.status != 404:
            raise
        core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data=data))


def ns_informer(factory: SharedInformerFactory, ns: str):
    return factory.informer(CM, field_selector=f"metadata.namespace={ns}")


@pytest.fixture
def factories() -> Iterator[Callable[..., SharedInformerFactory]]:
    made: list[SharedInformerFactory] = []

    def make(api_client, **kw) -> SharedInformerFactory:
        kw.setdefault("relist_backoff", (0.05, 0.5))
        f = SharedInformerFactory(api_client, **kw)
        made.append(f)
        return f

    yield make
    for f in made:
        assert f.stop(10), "informer threads did not stop"


@pytest.fixture
def proxy(cluster) -> Iterator[TCPProxy]:
    port = int(cluster.server.rsplit(":", 1)[1])
    with TCPProxy("127.0.0.1", port) as p:
        yield p


# ------------------------------------------------------------------ basics


def test_initial_sync_matches_list(cluster, admin_client, unique_namespace, factories, monkeypatch):
    monkeypatch.setattr(reflector_mod, "LIST_PAGE_SIZE", 4)  # real continue tokens
    core = client.CoreV1Api(admin_client)
    for i in range(11):
        put(core, unique_namespace, f"cm-{i}", i=str(i))
    f = factories(admin_client)
    inf = ns_informer(f, unique_namespace)
    rec = Recorder().attach(inf)
    f.start()
    assert f.wait_for_cache_sync(DEADLINE)
    assert cache_state(inf) == api_state(core, unique_namespace)
    assert rec.snapshot() == api_state(core, unique_namespace)  # handlers saw it before synced
    o = inf.store.get(f"{unique_namespace}/cm-3")
    assert o["kind"] == "ConfigMap" and o["apiVersion"] == "v1" and o["data"] == {"i": "3"}
    assert inf.last_sync_age() < 10


def test_a_metadata_only_informer_gets_metadata_from_the_server_under_its_own_kind(
        cluster, admin_client, unique_namespace, factories, monkeypatch):
    """Issue 29 (client-go's metadata informers): a ``metadata_only`` Resource is listed
    (in real pages) and watched as ``PartialObjectMetadata``: the server leaves out the
    ConfigMaps' ``data`` (no transform of ours drops it), and the objects reach the store and
    the handlers under the kind and apiVersion they stand for, labels and all."""
    monkeypatch.setattr(reflector_mod, "LIST_PAGE_SIZE", 4)
    core = client.CoreV1Api(admin_client)
    for i in range(6):
        core.create_namespaced_config_map(unique_namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=f"cm-{i}", labels={"i": str(i)}), data={"big": "x" * 1000}))
    f = factories(admin_client)
    meta_cm = Resource("", "v1", "configmaps", True, kind="ConfigMap", metadata_only=True)
    inf = f.informer(meta_cm, field_selector=f"metadata.namespace={unique_namespace}")
    seen: list[dict] = []
    inf.add_event_handler(on_add=seen.append, on_update=lambda old, new: seen.append(new))
    f.start()
    assert f.wait_for_cache_sync(DEADLINE)
    listed = {o["metadata"]["name"]: o for o in inf.store.list()}
    assert sorted(listed) == [f"cm-{i}" for i in range(6)]
    for i in range(6):
        o = listed[f"cm-{i}"]
        assert (o["kind"], o["apiVersion"]) == ("ConfigMap", "v1")
        assert o["metadata"]["labels"] == {"i": str(i)} and "data" not in o
    core.patch_namespaced_config_map("cm-2", unique_namespace, {"metadata": {"labels": {"i": "two"}}})
    wait_for(lambda: (inf.store.get(f"{unique_namespace}/cm-2") or {}).get("metadata", {}).get("labels") == {"i": "two"},
             what="the label change through the metadata-only watch")
    event = seen[-1]
    assert event["metadata"]["name"] == "cm-2"
    assert (event["kind"], event["apiVersion"]) == ("ConfigMap", "v1") and "data" not in event


def test_create_update_delete_events_arrive(cluster, admin_client, unique_namespace, factories):
    core = client.CoreV1Api(admin_client)
    f = factories(admin_client)
    inf = ns_informer(f, unique_namespace)
    f.start()
    assert f.wait_for_cache_sync(DEADLINE)
    late = Recorder().attach(inf)  # added after sync: replay (nothing) then events
    put(core, unique_namespace, "a", v="1")
    put(core, unique_namespace, "a", v="2")
    put(core, unique_namespace, "b", v="1")
    core.delete_namespaced_config_map("a", unique_namespace)
    key_a, key_b = f"{unique_namespace}/a", f"{unique_namespace}/b"
    wait_for(lambda: len(late.events) >= 4, what="4 events")
    assert late.events == [("add", key_a), ("update", key_a), ("add", key_b), ("delete", key_a)]
    assert late.problems == []
    assert cache_state(inf) == {key_b: {"v": "1"}}
    # a second user of the same resource+selector shares the informer (one watch)
    assert ns_informer(f, unique_namespace) is inf


def test_stop_is_prompt_with_a_live_watch(cluster, admin_client, unique_namespace):
    f = SharedInformerFactory(admin_client)  # default 300-600 s watches
    inf = ns_informer(f, unique_namespace)
    f.start()
    assert f.wait_for_cache_sync(DEADLINE)
    wait_for(lambda: inf.watching, what="watch open")
    t0 = time.monotonic()
    assert f.stop(10)
    assert time.monotonic() - t0 < 3
    assert not inf.is_running()


# --------------------------------------------------------- dropped connection


def test_survives_dropped_connection(cluster, proxy, unique_namespace, admin_client, factories):
    core = client.CoreV1Api(admin_client)
    put(core, unique_namespace, "stay", v="1")
    put(core, unique_namespace, "goes", v="1")
    via_proxy = cluster.api_client("admin", host=f"https://{proxy.address}")
    try:
        f = factories(via_proxy, connect_timeout=2)
        inf = ns_informer(f, unique_namespace)
        rec = Recorder().attach(inf)
        f.start()
        assert f.wait_for_cache_sync(DEADLINE)
        put(core, unique_namespace, "before-cut", v="1")
        wait_for(lambda: inf.store.get(f"{unique_namespace}/before-cut"), what="watch is live")

        # Cut mid-stream, and keep the reflector away while things change.
        proxy.blackhole()
        assert proxy.cut() >= 1
        put(core, unique_namespace, "stay", v="2")
        core.delete_namespaced_config_map("goes", unique_namespace)
        put(core, unique_namespace, "new", v="1")
        proxy.restore()

        want = api_state(core, unique_namespace)
        wait_for(lambda: cache_state(inf) == want, what="cache caught up")
        wait_for(lambda: rec.snapshot() == want, what="handlers caught up")
        assert rec.problems == []
        assert inf.watch_restarts["dropped"] >= 1
        # Re-watched from the last resourceVersion: no relist was needed.
        assert inf.relists == 0
    finally:
        via_proxy.close()


def test_blackholed_connection_detected_by_read_timeout(cluster, proxy, unique_namespace, admin_client, factories):
    core = client.CoreV1Api(admin_client)
    via_proxy = cluster.api_client("admin", host=f"https://{proxy.address}")
    try:
        f = factories(via_proxy, watch_timeout_range=(2, 3), read_timeout_margin=1, connect_timeout=1)
        inf = ns_informer(f, unique_namespace)
        rec = Recorder().attach(inf)
        f.start()
        assert f.wait_for_cache_sync(DEADLINE)
        put(core, unique_namespace, "probe", v="1")
        wait_for(lambda: inf.store.get(f"{unique_namespace}/probe"), what="watch is live")

        # A silent drop: no FIN, no RST, no data. Only the read timeout notices.
        proxy.blackhole()
        put(core, unique_namespace, "probe", v="2")
        put(core, unique_namespace, "during", v="1")
        t0 = time.monotonic()
        wait_for(lambda: inf.watch_restarts["timeout"] >= 1, timeout=15, what="read timeout")
        assert time.monotonic() - t0 < 3 + 1 + 2  # timeoutSeconds + margin + slack
        assert inf.store.get(f"{unique_namespace}/during") is None  # nothing got through
        proxy.restore()

        want = api_state(core, unique_namespace)
        wait_for(lambda: cache_state(inf) == want, what="cache caught up")
        # Handlers run just after the store changes: awaited too.
        wait_for(lambda: rec.snapshot() == want, what="handlers caught up")
        assert rec.problems == []
        assert inf.is_running()
    finally:
        proxy.cut()  # frozen connections would otherwise linger
        via_proxy.close()


# ------------------------------------------------------------------------ 410


@pytest.fixture(scope="module")
def nocache_cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("nocache"), watch_cache=False, with_nb=False, manifest_dirs=[])
    c.start()
    try:
        yield c
    finally:
        c.stop()


def test_relist_after_410_synthesizes_deletes(nocache_cluster, factories):
    c = nocache_cluster
    admin = c.api_client("admin")
    core = client.CoreV1Api(admin)
    ns = f"w410-{int(time.time() * 1000) % 10**8}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    port = int(c.server.rsplit(":", 1)[1])
    with TCPProxy("127.0.0.1", port) as px:
        via_proxy = c.api_client("admin", host=f"https://{px.address}")
        try:
            for n in ("keep", "vanish", "change"):
                put(core, ns, n, v="1")
            f = factories(via_proxy, connect_timeout=1)
            inf = ns_informer(f, ns)
            rec = Recorder().attach(inf)
            f.start()
            assert f.wait_for_cache_sync(DEADLINE)
            wait_for(lambda: px.active_connections >= 1, what="watch connected")
            old_rv = inf.last_resource_version

            # Stop the world: the reflector cannot reach the server while
            # objects change and etcd compacts past its resourceVersion.
            px.blackhole()
            px.cut()
            core.delete_namespaced_config_map("vanish", ns)
            put(core, ns, "change", v="2")
            put(core, ns, "new", v="1")
            rev = c.compact()
            assert rev > int(old_rv)
            with rec.lock:
                rec.events.clear()
            px.restore()

            want = api_state(core, ns)
            wait_for(lambda: cache_state(inf) == want, what="relisted cache")
            wait_for(lambda: rec.snapshot() == want, what="handlers caught up")
            assert inf.watch_restarts["expired"] >= 1
            assert inf.relists >= 1
            assert rec.problems == []  # nothing invented
            with rec.lock:
                events = set(rec.events)
            assert ("delete", f"{ns}/vanish") in events
            assert ("add", f"{ns}/new") in events
            assert ("update", f"{ns}/change") in events
            assert not any(e[0] == "delete" and e[1] != f"{ns}/vanish" for e in events)
            # watching again from the fresh list's resourceVersion
            put(core, ns, "after", v="1")
            wait_for(lambda: inf.store.get(f"{ns}/after"), what="event after relist")
        finally:
            px.cut()
            via_proxy.close()
    admin.close()


def test_watch_from_compacted_rv_gets_410_and_relists(nocache_cluster, factories):
    """No proxy: the reflector holds a resourceVersion that nothing advances
    (no events in its namespace, no bookmarks without the watch cache) while
    writes elsewhere move etcd on and etcd compacts. Its next re-watch (the
    server ends each watch after 1 s) starts from a compacted resourceVersion:
    410, relist, and nothing invented (only updates for the same objects)."""
    c = nocache_cluster
    admin = c.api_client("admin")
    core = client.CoreV1Api(admin)
    stamp = int(time.time() * 1000) % 10**8
    ns, other = f"c410-{stamp}", f"c410o-{stamp}"
    for n in (ns, other):
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=n)))
    try:
        put(core, ns, "a", v="1")
        put(core, ns, "b", v="1")
        f = factories(admin, watch_timeout_range=(1, 1), read_timeout_margin=2)
        inf = ns_informer(f, ns)
        rec = Recorder().attach(inf)
        f.start()
        assert f.wait_for_cache_sync(DEADLINE)
        held_rv = int(inf.last_resource_version)
        for i in range(5):
            put(core, other, "noise", i=str(i))
        rev = c.compact()
        assert rev > held_rv
        with rec.lock:
            rec.events.clear()

        wait_for(lambda: inf.watch_restarts["expired"] >= 1, what="410 on re-watch")
        wait_for(lambda: inf.relists >= 1, what="relist")
        want = api_state(core, ns)
        wait_for(lambda: cache_state(inf) == want, what="converged")
        # Handlers run just after the store changes: awaited too.
        wait_for(lambda: rec.snapshot() == want, what="handlers caught up")
        assert rec.problems == []
        with rec.lock:
            kinds = {e[0] for e in rec.events}
        assert kinds == {"update"}, rec.events  # no synthesized add/delete for unchanged objects
        assert int(inf.last_resource_version) >= rev
        # and it keeps watching
        put(core, ns, "after", v="1")
        wait_for(lambda: inf.store.get(f"{ns}/after"), what="event after relist")
    finally:
        admin.close()
