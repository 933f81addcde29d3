"""A small threaded loopback TCP proxy to break connections on purpose (reflector tests).

    with TCPProxy("127.0.0.1", api_port) as proxy:
        client = cluster.api_client(host=f"https://{proxy.address}")
        ...
        proxy.cut()          # every live connection gets a TCP RST, both sides
        proxy.blackhole()    # stop forwarding: no data, no FIN, no RST (a silent drop)
        proxy.restore()      # new connections forward again (blackholed ones stay dead)
        proxy.delay(3.0)     # a slow server: what the client sends arrives 3 s later

TLS passes through untouched, so a client verifying 127.0.0.1 against the API server's
certificate works through the proxy.
"""

from __future__ import annotations

import collections
import selectors
import socket
import struct
import threading
import time
from typing import Any

_BUF = 64 * 1024


def _rst_close(sock: socket.socket) -> None:
    """Close with SO_LINGER 0, so the peer sees a reset instead of an orderly FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class _Conn:
    def __init__(self, proxy: "TCPProxy", client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream: socket.socket | None = None
        self.kill = threading.Event()
        self.done = threading.Event()
        self.blackholed = proxy._blackhole
        self.graceful = False
        self._late: collections.deque[tuple[float, bytes]] = collections.deque()  # client data held by delay()
        self._wake_r, self._wake_w = socket.socketpair()
        self.thread = threading.Thread(target=self._run, name="tcpproxy-conn", daemon=True)

    def wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _run(self) -> None:
        try:
            if not self.blackholed:
                try:
                    self.upstream = socket.create_connection(self.proxy.target, timeout=5)
                    self.upstream.settimeout(None)
                    self.upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:
                    return  # client gets a reset in finally
            self._pump()
        finally:
            close = (lambda s: s.close()) if self.graceful else _rst_close
            close(self.client)
            if self.upstream is not None:
                close(self.upstream)
            self._wake_r.close()
            self._wake_w.close()
            self.proxy._forget(self)
            self.done.set()

    def _pump(self) -> None:
        sel = selectors.DefaultSelector()
        try:
            sel.register(self._wake_r, selectors.EVENT_READ)
            if not self.blackholed:
                sel.register(self.client, selectors.EVENT_READ)
                assert self.upstream is not None
                sel.register(self.upstream, selectors.EVENT_READ)
            open_sides = 0 if self.blackholed else 2
            while not self.kill.is_set():
                while self._late and self._late[0][0] <= time.monotonic() and not self.blackholed:
                    try:
                        self.upstream.sendall(self._late.popleft()[1])  # type: ignore[union-attr]
                    except OSError:
                        return
                if self.proxy._blackhole and not self.blackholed:
                    # Stop reading both sides: nothing moves, nothing closes.
                    self.blackholed = True
                    for sock in (self.client, self.upstream):
                        try:
                            sel.unregister(sock)
                        except (KeyError, ValueError):
                            pass
                wait = max(0.0, min(1.0, self._late[0][0] - time.monotonic())) if self._late else 1.0
                for key, _ in sel.select(timeout=wait):
                    if self.proxy._blackhole and not self.blackholed:
                        break  # set while selecting: unregister before reading anything more
                    sock = key.fileobj
                    if sock is self._wake_r:
                        try:
                            self._wake_r.recv(64)
                        except OSError:
                            pass
                        continue
                    other = self.upstream if sock is self.client else self.client
                    try:
                        data = sock.recv(_BUF)
                    except OSError:
                        return
                    if not data:
                        # Orderly close from one side: pass the FIN on and keep the other
                        # direction open until it closes too.
                        sel.unregister(sock)
                        open_sides -= 1
                        try:
                            other.shutdown(socket.SHUT_WR)
                        except OSError:
                            pass
                        if open_sides == 0:
                            self.graceful = True
                            return
                        continue
                    if sock is self.client and (self.proxy._delay > 0 or self._late):
                        # In order, each chunk ``delay`` seconds after it came in.
                        self._late.append((time.monotonic() + self.proxy._delay, data))
                        continue
                    try:
                        other.sendall(data)
                    except OSError:
                        return
        finally:
            sel.close()


class TCPProxy:
    """Listen on 127.0.0.1:<free port>, forward to ``target_host:target_port``."""

    def __init__(self, target_host: str, target_port: int, listen_host: str = "127.0.0.1") -> None:
        self.target = (target_host, int(target_port))
        self._listen_host = listen_host
        self._lsock: socket.socket | None = None
        self._conns: set[_Conn] = set()
        self._lock = threading.Lock()
        self._blackhole = False
        self._delay = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.accepted = 0
        self.port = 0

    # lifecycle ---------------------------------------------------------------

    def start(self) -> "TCPProxy":
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((self._listen_host, 0))
        ls.listen(128)
        ls.settimeout(0.2)
        self._lsock = ls
        self.port = ls.getsockname()[1]
        self._thread = threading.Thread(target=self._accept_loop, name="tcpproxy-accept", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._lsock is not None:
            self._lsock.close()
        self.cut()

    def __enter__(self) -> "TCPProxy":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"{self._listen_host}:{self.port}"

    @property
    def active_connections(self) -> int:
        with self._lock:
            return len(self._conns)

    # faults ------------------------------------------------------------------

    def cut(self, timeout: float = 5.0) -> int:
        """Reset every live connection (both sides); returns how many were cut.

        New connections are still accepted afterwards."""
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.kill.set()
            c.wake()
        for c in conns:
            c.done.wait(timeout)
        return len(conns)

    def blackhole(self, on: bool = True) -> None:
        """Silently stop forwarding: live connections freeze, new ones are accepted and
        never connected upstream. Nothing is closed until :meth:`cut` or :meth:`close`."""
        self._blackhole = on
        if on:
            with self._lock:
                conns = list(self._conns)
            for c in conns:
                c.wake()

    def restore(self) -> None:
        """Forward new connections again (connections blackholed so far stay frozen)."""
        self._blackhole = False

    def delay(self, seconds: float) -> None:
        """Hold what clients send for ``seconds`` before passing it on, each chunk in order
        (0: at once again): a slow server, every request answered that much later; the
        answers themselves are not held. Live connections too, from their next chunk."""
        self._delay = float(seconds)

    # internals ---------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._lsock is not None
        while not self._stop.is_set():
            try:
                client, _ = self._lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            client.settimeout(None)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(self, client)
            with self._lock:
                self._conns.add(conn)
                self.accepted += 1
            conn.thread.start()

    def _forget(self, conn: _Conn) -> None:
        with self._lock:
            self._conns.discard(conn)
