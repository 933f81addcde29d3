"""The test bed itself: API server, identities, RBAC, 410 after compaction, audit counting,
the OVN NB, and the TCP proxy."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from hack.bed import CONTROLLER_USER, LocalCluster
from hack.tools.audit import audit_writes, format_writes, write_marker, writes_before
from tests.support.tcpproxy import TCPProxy

pytestmark = pytest.mark.integration


def test_admin_lists_namespaces(admin_client):
    names = {ns.metadata.name for ns in client.CoreV1Api(admin_client).list_namespace().items}
    assert {"default", "kube-system", "proxmox-network-system"} <= names


def test_third_party_crds_established(admin_client):
    crds = client.ApiextensionsV1Api(admin_client).list_custom_resource_definition().items
    by_name = {c.metadata.name: c for c in crds}
    for name in (
        "vlans.kubeovn.io",
        "subnets.kubeovn.io",
        "provider-networks.kubeovn.io",
        "vpcs.kubeovn.io",
        "vpc-egress-gateways.kubeovn.io",
        "inclusterippools.ipam.cluster.x-k8s.io",
        "ipaddressclaims.ipam.cluster.x-k8s.io",
        "ipaddresses.ipam.cluster.x-k8s.io",
        "proxmoxmachines.infrastructure.cluster.x-k8s.io",
        "proxmoxmachinetemplates.infrastructure.cluster.x-k8s.io",
    ):
        assert name in by_name, name
        conds = {c.type: c.status for c in by_name[name].status.conditions or []}
        assert conds.get("Established") == "True", (name, conds)


def test_proxmoxmachine_both_versions_round_trip(admin_client, unique_namespace):
    co = client.CustomObjectsApi(admin_client)
    g, plural = "infrastructure.cluster.x-k8s.io", "proxmoxmachines"
    ref = {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "subnet-a"}
    old = {
        "apiVersion": f"{g}/v1alpha1", "kind": "ProxmoxMachine", "metadata": {"name": "m1"},
        "spec": {"network": {"default": {"bridge": "vmbr0", "ipv4PoolRef": ref}}},
    }
    new = {
        "apiVersion": f"{g}/v1alpha2", "kind": "ProxmoxMachine", "metadata": {"name": "m2"},
        "spec": {"network": {"networkDevices": [{"name": "net0", "bridge": "vmbr0", "ipPoolRef": [ref]}]}},
    }
    co.create_namespaced_custom_object(g, "v1alpha1", unique_namespace, plural, old)
    co.create_namespaced_custom_object(g, "v1alpha2", unique_namespace, plural, new)
    for version in ("v1alpha1", "v1alpha2"):
        m1 = co.get_namespaced_custom_object(g, version, unique_namespace, plural, "m1")
        m2 = co.get_namespaced_custom_object(g, version, unique_namespace, plural, "m2")
        assert m1["spec"]["network"]["default"]["ipv4PoolRef"] == ref
        assert m2["spec"]["network"]["networkDevices"][0]["ipPoolRef"] == [ref]


def test_controller_identity(controller_client):
    review = client.AuthenticationV1Api(controller_client).create_self_subject_review(client.V1SelfSubjectReview())
    info = review.status.user_info
    assert info.username == CONTROLLER_USER
    assert {"system:serviceaccounts", "system:serviceaccounts:proxmox-network-system", "system:authenticated"} <= set(
        info.groups
    )


def test_controller_cannot_list_secrets_cluster_wide(controller_client):
    with pytest.raises(ApiException) as exc:
        client.CoreV1Api(controller_client).list_secret_for_all_namespaces()
    assert exc.value.status == 403


def _first_watch_event(core: client.CoreV1Api, ns: str, rv: str) -> dict:
    """The first event of a watch from ``rv``; an HTTP error becomes an ERROR-like dict."""
    try:
        resp = core.list_namespaced_config_map(
            ns, watch=True, resource_version=rv, timeout_seconds=5, _preload_content=False
        )
    except ApiException as e:
        return {"type": "HTTP", "object": {"code": e.status}}
    try:
        line = resp.readline()
    finally:
        resp.release_conn()
    return json.loads(line)


def test_compaction_gives_410_without_watch_cache(tmp_path):
    with LocalCluster(tmp_path / "nocache", watch_cache=False, with_nb=False, manifest_dirs=[]) as c:
        api = c.api_client("admin")
        core = client.CoreV1Api(api)
        cm = core.create_namespaced_config_map(
            "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="w410"), data={"n": "0"})
        )
        rv0 = cm.metadata.resource_version
        for n in range(1, 4):
            core.patch_namespaced_config_map("w410", "default", {"data": {"n": str(n)}})

        before = _first_watch_event(core, "default", rv0)
        assert before["type"] == "MODIFIED", before

        rev = c.compact()
        assert rev > int(rv0)

        after = _first_watch_event(core, "default", rv0)
        assert after["type"] in ("ERROR", "HTTP"), after
        assert after["object"]["code"] == 410, after
        api.close()
    assert not any(p.poll() is None for p in c._procs.values())


def test_audit_counts_admin_write_exactly(cluster, admin_client, unique_namespace):
    start = write_marker(cluster)
    core = client.CoreV1Api(admin_client)
    core.create_namespaced_config_map(unique_namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="known")))
    core.read_namespaced_config_map("known", unique_namespace)  # a read is not a write
    end = write_marker(cluster)

    writes = writes_before(cluster, "admin", end, since_marker=start)
    assert [(w.verb, w.resource, w.namespace, w.name, w.code) for w in writes] == [
        ("create", "configmaps", unique_namespace, "known", 201)
    ], format_writes(writes)
    # Nothing by the controller user (it is not running).
    assert audit_writes(cluster, CONTROLLER_USER, since_marker=start, until_marker=end) == []


def test_nb_answers(cluster):
    assert cluster.nb_unix and cluster.nb_tcp
    name = f"ls-probe-{int(time.time() * 1000)}"
    cluster.nbctl("ls-add", name)
    for db in (cluster.nb_unix, cluster.nb_tcp):
        assert "switch " in cluster.nbctl("show", db=db)
        assert name in cluster.nbctl("show", db=db)
    cluster.nbctl("ls-del", name)


def test_kubectl_fixture(kubectl):
    assert "proxmox-network-system" in kubectl("get", "ns", "-o", "name")
    with pytest.raises(Exception) as exc:
        kubectl("get", "secrets", "-A", user="controller")
    assert "forbidden" in str(exc.value).lower()


def _api_port(cluster) -> int:
    return int(cluster.server.rsplit(":", 1)[1])


def test_proxy_forwards_and_cut_breaks_a_watch(cluster, unique_namespace):
    with TCPProxy("127.0.0.1", _api_port(cluster)) as proxy:
        api = cluster.api_client("admin", host=f"https://{proxy.address}")
        core = client.CoreV1Api(api)
        # Forwarding: a plain request works through the proxy.
        cms = core.list_namespaced_config_map(unique_namespace)
        resp = core.list_namespaced_config_map(
            unique_namespace, watch=True, resource_version=cms.metadata.resource_version,
            timeout_seconds=60, _preload_content=False,
        )
        core.create_namespaced_config_map(unique_namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="a")))
        ev = json.loads(resp.readline())
        assert ev["type"] == "ADDED" and ev["object"]["metadata"]["name"] == "a"
        assert proxy.active_connections >= 1

        outcome: dict = {}

        def read_rest():
            t0 = time.monotonic()
            try:
                outcome["data"] = resp.read()
            except Exception as e:  # noqa: BLE001 - any transport error is a break
                outcome["error"] = e
            outcome["seconds"] = time.monotonic() - t0

        reader = threading.Thread(target=read_rest, daemon=True)
        reader.start()
        time.sleep(0.2)
        assert proxy.cut() >= 1
        reader.join(10)
        assert not reader.is_alive(), "watch stream survived cut()"
        assert outcome["seconds"] < 10
        assert "error" in outcome or outcome.get("data", b"") == b"", outcome
        # New connections still go through after a cut.
        assert core.list_namespaced_config_map(unique_namespace).items
        api.close()


def _echo_server() -> socket.socket:
    """A loopback echo server on a free port (daemon threads; close the socket to stop)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(1024):
                    conn.sendall(data)
            except OSError:
                pass

    def accept() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return srv


def test_proxy_blackhole_is_silent():
    srv = _echo_server()
    with TCPProxy("127.0.0.1", srv.getsockname()[1]) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as s:
            s.sendall(b"ping")
            assert s.recv(4) == b"ping"
            proxy.blackhole()
            time.sleep(0.1)
            s.sendall(b"lost")
            s.settimeout(0.5)
            with pytest.raises(socket.timeout):
                s.recv(4)  # no data, no FIN, no RST
            proxy.cut()
            s.settimeout(2)
            with pytest.raises(ConnectionResetError):
                s.recv(4)
        proxy.restore()
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as s:
            s.sendall(b"pong")
            assert s.recv(4) == b"pong"
    srv.close()
