"""Field report S3 on the API side: the leader fence in ``controller.runtime.kube.KubeWriter`` (every
write, and the one retry after a 401, checked just before it is sent; reads never) and the
abortive close of the API connections (``controller.config.ABORTIVE_CLOSE``).

Against a small HTTP/1.1 server on loopback that records what reaches it and how each
connection ended (an orderly FIN or a reset); the client is the product's own, built by
``controller.config.load_api_client_and_source`` from a kubeconfig.
"""

from __future__ import annotations

import json
import socket
import threading

import pytest
import yaml

from controller import names
from controller.config import ABORTIVE_CLOSE, load_api_client_and_source
from controller.credentials import RotatingTokenApiClient
from controller.runtime.kube import KubeWriter
from controller.runtime.result import LostLeadership
from hack.tools.wait import wait_for


class Server:
    """Answers every request 200 ``{}``, or 401 when the token is in ``refuse``; keeps
    connections open (keep-alive). ``requests`` holds (method, path, authorization);
    ``ends`` how each connection ended: ``"fin"`` or ``"reset"``."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.refuse: set[str] = set()
        self.requests: list[tuple[str, str, str]] = []
        self.ends: list[str] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    try:
                        data = conn.recv(65536)
                    except ConnectionResetError:
                        self.ends.append("reset")
                        return
                    if not data:
                        self.ends.append("fin")
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
                length = int(headers.get("content-length", "0"))
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                auth = headers.get("authorization", "")
                self.requests.append((method, path, auth))
                status = "401 Unauthorized" if auth in self.refuse else "200 OK"
                body = json.dumps({} if status == "200 OK" else {"kind": "Status", "code": 401}).encode()
                conn.sendall(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                             f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def kubeconfig(tmp_path, port: int, user: dict) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return str(path)


VLAN = {"apiVersion": "kubeovn.io/v1", "kind": "Vlan", "metadata": {"name": "v"}, "spec": {"id": 100}}


def refuse() -> None:
    raise LostLeadership("not the leader: test")


def test_a_write_the_fence_refuses_is_never_sent_and_reads_are_not_fenced(tmp_path, server):
    api, _ = load_api_client_and_source(kubeconfig(tmp_path, server.port, {"token": "t"}))
    calls = []

    def fence() -> None:
        calls.append(len(server.requests))  # what had reached the server when it was asked
        refuse()

    w = KubeWriter(api, fence=fence)
    assert w.get(names.VLANS, "v") == {}
    with pytest.raises(LostLeadership):
        w.create(names.VLANS, VLAN)
    for write in (lambda: w.merge_patch(names.VLANS, "v", {}), lambda: w.json_patch(names.VLANS, "v", []),
                  lambda: w.delete(names.VLANS, "v"), lambda: w.update_status(names.VLANS, VLAN)):
        with pytest.raises(LostLeadership):
            write()
    assert [m for m, _, _ in server.requests] == ["GET"]  # nothing written reached the server
    assert calls == [1] * 5 and w.writes == 0
    # Without a fence (no leader election) the same writes go out.
    plain = KubeWriter(api)
    plain.create(names.VLANS, VLAN)
    assert [m for m, _, _ in server.requests] == ["GET", "POST"] and plain.writes == 1


def test_the_retry_after_a_401_is_a_new_send_and_is_fenced_too(tmp_path, server):
    token = tmp_path / "token"
    token.write_text("old")
    api, _ = load_api_client_and_source(kubeconfig(tmp_path, server.port, {"tokenFile": str(token)}))
    assert isinstance(api, RotatingTokenApiClient)
    server.refuse.add("Bearer old")
    token.write_text("new")  # rotated: the 401 makes the client re-read it and send again
    asked = []

    def lost_meanwhile() -> None:  # leading for the first send, not for the retry
        asked.append(1)
        if len(asked) > 1:
            refuse()

    with pytest.raises(LostLeadership):
        KubeWriter(api, fence=lost_meanwhile).create(names.VLANS, VLAN)
    assert [(m, a) for m, _, a in server.requests] == [("POST", "Bearer old")]  # the retry was not sent
    assert len(asked) == 2
    # Still leading at the retry: it goes out with the new token.
    server.refuse.add("Bearer new")
    token.write_text("newer")
    assert KubeWriter(api, fence=lambda: None).create(names.VLANS, VLAN) == {}
    assert [(m, a) for m, _, a in server.requests][1:] == [("POST", "Bearer new"), ("POST", "Bearer newer")]


def test_api_connections_close_abortively(tmp_path, server):
    """A closed (or dead) client resets its connections: what its kernel had not delivered is
    dropped, never sent once the path heals (S3). Seen here as the server's side of the close."""
    api, _ = load_api_client_and_source(kubeconfig(tmp_path, server.port, {"token": "t"}))
    assert ABORTIVE_CLOSE in api.configuration.socket_options
    KubeWriter(api).get(names.VLANS, "v")
    api.rest_client.pool_manager.clear()  # closes the pooled connection, as the process's death does
    wait_for(lambda: server.ends, timeout=10, what="the connection closed")
    assert server.ends == ["reset"]
    # The control: a connection of the same client without the option ends with a FIN.
    api.configuration.socket_options = None
    plain, _ = load_api_client_and_source(kubeconfig(tmp_path, server.port, {"token": "t"}))
    plain.rest_client.pool_manager.connection_pool_kw.pop("socket_options", None)
    KubeWriter(plain).get(names.VLANS, "v")
    plain.rest_client.pool_manager.clear()
    wait_for(lambda: len(server.ends) == 2, timeout=10, what="the second connection closed")
    assert server.ends == ["reset", "fin"]
