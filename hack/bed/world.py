"""The far side of a transit network: the seed's transit router and what lies behind it.

A VPC egress gateway SNATs its VPC's traffic onto the zone's transit network (a VLAN of
the trunk, admission-and-packaging.md (e)) towards the router there. The bed plays that
router with a namespace on the trunk (a VM of :meth:`DataPlane.add_vm` on the transit VLAN,
holding the transit Subnet's gateway address) and puts two services behind it, on
addresses no VPC owns (TEST-NET-2, RFC 5737):

* :data:`SERVER`: an HTTP server whose access log records each client's source address, so
  a test can tell what the far side saw (the gateway's transit address, after SNAT);
* :data:`API`: the bed's kube-apiserver on port :data:`API_PORT`, forwarded through a Unix
  socket (``socat``, as the node agents reach it) - what a CAPI worker joining dials. Its
  certificate names ``kubernetes.default.svc``, which a client asks for by SNI.

From a VM (any :class:`~hack.bed.dataplane.Vm`), :meth:`World.fetch` and :meth:`World.readyz`
are the two requests: the payload over HTTP and a joining worker's ``/readyz``.

Processes: ``world-httpd``, ``api-forward-host`` and ``api-forward-ns`` with pid files in
``<dataplane>/world-<name>/``, so :func:`hack.bed.dataplane.cleanup_leftovers` ends them
with the bed's other forwarders.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from hack.bed.dataplane import DataPlane, Vm
from hack.bed.node_agent import api_forwarders
from hack.bed.procs import _tail, spawn, stop_pidfiles

SERVER = "198.51.100.10"
API = "198.51.100.6"
API_PORT = 6443
HTTP_PORT = 8080
API_NAME = "kubernetes.default.svc"  # a SAN of the bed's serving certificate
PROCS = ("world-httpd", "api-forward-ns", "api-forward-host")
_READYZ = """\
import socket, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[1])
with socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=10) as s:
    with ctx.wrap_socket(s, server_hostname=sys.argv[4]) as t:
        t.sendall(("GET /readyz HTTP/1.1\\r\\nHost: %s\\r\\nAuthorization: Bearer %s\\r\\n"
                   "Connection: close\\r\\n\\r\\n" % (sys.argv[4], sys.stdin.read().strip())).encode())
        data = b""
        while chunk := t.recv(65536):
            data += chunk
head, _, body = data.partition(b"\\r\\n\\r\\n")
print(head.split(b"\\r\\n")[0].decode(), body.decode().split()[-1])
"""
_ACCESS = re.compile(r'^(\d+\.\d+\.\d+\.\d+) - - \[[^\]]*\] "GET (\S+)')


class WorldError(RuntimeError):
    """A step of the world's start failed (the message names it)."""


class World:
    """The transit router ``name`` at ``address`` (CIDR) on ``vlan`` of ``dp``'s trunk,
    serving :data:`SERVER` and forwarding :data:`API` to the API server at ``server`` (its
    URL, ``https://127.0.0.1:<port>``, on the host).

    :param mtu: the router's MTU on the transit network: the transit Subnet's (a router
        whose MTU is larger than the gateway's ``net1`` sends it segments its veth drops).
    :param payload_bytes: the size of ``/payload`` on :data:`SERVER` (random bytes).
    """

    def __init__(self, dp: DataPlane, name: str, vlan: int, address: str, server: str, mtu: int | None = None,
                 payload_bytes: int = 4 << 20, detach: bool = False) -> None:
        self.dp, self.name, self.vlan, self.address = dp, name, vlan, address
        self.api_port = server.rsplit(":", 1)[1]
        self.dir = dp.dir / f"world-{name}"
        self.mtu, self.payload_bytes, self.detach = mtu, payload_bytes, detach
        self.vm: Vm | None = None
        self._procs: dict[str, subprocess.Popen] = {}

    def start(self, timeout: float = 10.0) -> "World":
        """The namespace on the trunk, the two service addresses, the HTTP server and the API
        forwarders; returns once both listen.

        :raises WorldError: a listener did not come up within ``timeout`` seconds.
        :raises DataPlaneError: the namespace could not be made (the name is taken).
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "www").mkdir(exist_ok=True)
        (self.dir / "www" / "payload").write_bytes(os.urandom(self.payload_bytes))
        # Another address of the transit network serves as the (unused) default route.
        self.vm = self.dp.add_vm(f"world-{self.name}", self.vlan, self.address, _other_on_link(self.address),
                                 mtu=self.mtu)
        for service in (SERVER, API):
            self.vm.run("ip", "addr", "add", f"{service}/32", "dev", "lo", check=True)
        self.access_log.write_bytes(b"")
        self._spawn("world-httpd", ["ip", "netns", "exec", self.vm.ns, sys.executable, "-m", "http.server",
                                    str(HTTP_PORT), "--bind", SERVER, "--directory", str(self.dir / "www")],
                    log=self.access_log)
        sock = self.dir / "api.sock"
        sock.unlink(missing_ok=True)
        host, inside = api_forwarders(sock, self.api_port, self.vm.ns, API, API_PORT)
        self._spawn("api-forward-host", host)
        self._until(sock.exists, timeout, f"socat made no {sock}")
        self._spawn("api-forward-ns", inside)
        for port in (HTTP_PORT, API_PORT):
            self._until(lambda: f":{port} " in self.vm.run("ss", "-Hltn").stdout, timeout,
                        f"nothing listens on port {port} in {self.vm.ns}")
        return self

    @property
    def access_log(self) -> Path:
        return self.dir / "world-httpd.log"

    def clients(self, path: str = "/payload") -> list[str]:
        """The source address of every GET of ``path`` :data:`SERVER` has answered, in order."""
        return [m.group(1) for line in self.access_log.read_text(errors="replace").splitlines()
                if (m := _ACCESS.match(line)) and m.group(2) == path]

    def fetch(self, vm: Vm, timeout: float = 60.0) -> float:
        """``vm`` GETs ``/payload`` from :data:`SERVER`; the throughput (MiB/s).

        :raises WorldError: the transfer failed, or what arrived is not the payload (SHA-256).
        """
        code = ("import hashlib, time, urllib.request; t = time.monotonic(); "
                f"b = urllib.request.urlopen('http://{SERVER}:{HTTP_PORT}/payload', timeout=20).read(); "
                "print(hashlib.sha256(b).hexdigest(), len(b), time.monotonic() - t)")
        r = vm.run(sys.executable, "-c", code, timeout=timeout)
        if r.returncode != 0:
            raise WorldError(f"{vm.name}: the transfer failed: {r.stderr.strip()[-400:]}")
        digest, size, seconds = r.stdout.split()
        if digest != hashlib.sha256((self.dir / "www" / "payload").read_bytes()).hexdigest():
            raise WorldError(f"{vm.name}: the payload arrived corrupted")
        return int(size) / (1 << 20) / max(float(seconds), 1e-6)

    @staticmethod
    def readyz(vm: Vm, ca_file: Path, token: str) -> str:
        """From ``vm``: TLS to :data:`API`, the server's certificate checked against ``ca_file``
        for :data:`API_NAME` (SNI), ``GET /readyz`` with ``token`` as a bearer token, as a
        worker's kubelet dials the control plane. The status line and the body's last word
        (``HTTP/1.1 200 OK ok``), or ``failed: <the error>``."""
        r = subprocess.run(["ip", "netns", "exec", vm.ns, sys.executable, "-c", _READYZ, str(ca_file), API,
                            str(API_PORT), API_NAME], input=token, capture_output=True, text=True, timeout=30)
        return r.stdout.strip() if r.returncode == 0 else f"failed: {r.stderr.strip().splitlines()[-1:]}"

    def stop(self, timeout: float = 10.0) -> None:
        """The processes (SIGTERM, SIGKILL after ``timeout``), then the namespace."""
        stop_pidfiles(self.dir, PROCS, timeout, self._procs)
        self._procs.clear()
        if self.vm is not None:
            self.dp.remove_vm(self.vm.name)
            self.vm = None

    def _spawn(self, name: str, argv: list[str], log: Path | None = None) -> None:
        self._procs[name] = spawn(argv, log or self.dir / f"{name}.log", self.dir / f"{name}.pid",
                                  detach=self.detach)

    def _until(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    log = self.access_log if name == "world-httpd" else self.dir / f"{name}.log"
                    raise WorldError(f"{name} exited with {proc.returncode}: {_tail(log)}")
            if time.monotonic() > deadline:
                raise WorldError(what)
            time.sleep(0.05)


def _other_on_link(cidr: str) -> str:
    """An address of ``cidr``'s network other than its own (the last usable one, or the one
    before it)."""
    iface = ipaddress.ip_interface(cidr)
    last = iface.network.broadcast_address - 1
    return str(last if last != iface.ip else last - 1)
