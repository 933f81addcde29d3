"""ovn.tls against a real ovsdb-server serving the OVN NB schema over SSL (reference §10/§11).

No kube-apiserver: the Secret comes from a dict. Each server is an ``ovsdb-server`` started here on
127.0.0.1 with ``pssl:<port>:127.0.0.1`` and its own key/certificate/CA (default ``--ssl-protocols``),
stopped at the end of the module. Every good chain is proven twice: by :func:`ovn.tls.probe` and by a
python-ovs ``ssl:`` JSON-RPC round trip after :func:`ovn.tls.set_tls_material` pointed python-ovs at
the Secret's files -- so what the probe accepts and refuses, python-ovs does too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import ovs.stream
import pytest

from ovn.nb import NBClient
from ovn.ovsdb import NBError, jsonrpc_call
from ovn.tls import TLSError, TLSSource, probe
from tests.support.ovsdb import NB_SCHEMA, free_port
from tests.support.pki import BOTH, CA, CLIENT_AUTH, SERVER_AUTH, CertKey, kube_ovn_secret, restore_ovs_ssl  # noqa: F401 (autouse fixture)
from hack.tools.wait import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

OVSDB_SERVER = shutil.which("ovsdb-server") or "/usr/sbin/ovsdb-server"
OVSDB_TOOL = shutil.which("ovsdb-tool") or "/usr/bin/ovsdb-tool"
REF = "cozy-kubeovn/kube-ovn-tls"

# hack/install-deps.sh installs them; a missing server is a broken bed, never a skip.
assert os.path.exists(OVSDB_SERVER) and os.path.exists(NB_SCHEMA), "ovsdb-server or the OVN NB schema is missing"


# -- the PKI and the servers ------------------------------------------------------------


@pytest.fixture(scope="module")
def pki():
    ca = CA("ovn-ca")
    inter = CA("ovn-intermediate", parent=ca)
    return {
        "ca": ca,
        "other_ca": CA("unrelated-ca"),
        # Kube-OVN's certificate has no EKU and serves both ends; our client is such a one.
        "client": ca.issue("ovn"),
        "server_auth": ca.issue("ovn", SERVER_AUTH),
        "no_eku": ca.issue("ovn"),
        "both": ca.issue("ovn", BOTH),
        "client_auth_only": ca.issue("ovn", CLIENT_AUTH),
        "via_intermediate": inter.issue("ovn", SERVER_AUTH),  # cert PEM = leaf + intermediate
        "expired": ca.issue("ovn", SERVER_AUTH, expired=True),
    }


class Servers:
    """Starts one ovsdb-server per server certificate, on demand; stops them all at the end."""

    def __init__(self, base: Path, ca_pem: bytes) -> None:
        self.base = base
        self.ca_pem = ca_pem
        self.procs: dict[str, subprocess.Popen] = {}
        self.remotes: dict[str, str] = {}
        self.args: dict[str, list[str]] = {}

    def restart(self, label: str) -> None:
        """Stop the server (its clients lose their connections) and start it again on the
        same port with the same files."""
        self.halt(label)
        self.resume(label)

    def halt(self, label: str) -> None:
        """Stop the server; :meth:`resume` starts it again."""
        proc = self.procs[label]
        proc.send_signal(signal.SIGTERM)
        proc.wait(5)

    def resume(self, label: str) -> None:
        self.procs[label] = subprocess.Popen(self.args[label], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL, start_new_session=True)

    def remote(self, label: str, leaf: CertKey) -> str:
        if label not in self.remotes:
            self.remotes[label] = self._start(label, leaf)
        return self.remotes[label]

    def _start(self, label: str, leaf: CertKey) -> str:
        d = self.base / label
        d.mkdir(mode=0o700)
        files = {"key.pem": leaf.key, "cert.pem": leaf.cert, "ca.pem": self.ca_pem}
        for name, data in files.items():
            (d / name).write_bytes(data)
            (d / name).chmod(0o600)
        # ovsdb-server sends only the first certificate of --certificate (plus what OpenSSL chains
        # from --ca-cert); intermediates go to peers through --peer-ca-cert.
        extra = []
        if leaf.chain:
            (d / "peer-ca.pem").write_bytes(leaf.chain)
            extra.append(f"--peer-ca-cert={d / 'peer-ca.pem'}")
        subprocess.run([OVSDB_TOOL, "create", str(d / "nb.db"), NB_SCHEMA], check=True, capture_output=True)
        last = ""
        for _ in range(3):  # the free port may be taken between probe and bind
            port = free_port()
            args = [OVSDB_SERVER, str(d / "nb.db"), f"--remote=pssl:{port}:127.0.0.1",
                    f"--private-key={d / 'key.pem'}", f"--certificate={d / 'cert.pem'}",
                    f"--ca-cert={d / 'ca.pem'}", f"--unixctl={d / 'ctl'}", f"--log-file={d / 'ovsdb.log'}",
                    "--no-chdir", "-vconsole:off", *extra]
            self.args[label] = args
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
            self.procs[label] = proc

            def listening() -> bool:
                if proc.poll() is not None:
                    return True  # exited: stop waiting, retried below
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        return True
                except OSError:
                    return False

            wait_for(listening, timeout=10, what=f"ovsdb-server {label} listening on {port}")
            if proc.poll() is None:
                return f"ssl:127.0.0.1:{port}"
            last = (d / "ovsdb.log").read_text(errors="replace") if (d / "ovsdb.log").exists() else ""
        raise RuntimeError(f"ovsdb-server {label} did not start: {last[-2000:]}")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@pytest.fixture(scope="module")
def servers(pki, tmp_path_factory) -> Iterator[Servers]:
    s = Servers(tmp_path_factory.mktemp("ovsdb-tls"), pki["ca"].cert_pem)
    try:
        yield s
    finally:
        s.stop()


def source_for(secret: dict, directory: Path) -> tuple[TLSSource, list]:
    calls: list = []

    def get_secret(namespace: str, name: str) -> dict:
        calls.append((namespace, name))
        return secret

    return TLSSource(get_secret, REF, directory), calls


def ovs_call(remote: str, method: str, params: list, timeout: float = 5.0):
    """One JSON-RPC request over a python-ovs stream (its process-wide SSL settings); the result, or
    the failure as ``ConnectionError``."""
    try:
        return jsonrpc_call(remote, method, params, timeout)
    except NBError as err:
        raise ConnectionError(str(err)) from err


# -- good chains -------------------------------------------------------------------------


@pytest.mark.parametrize("server", ["server_auth", "no_eku", "both", "via_intermediate"])
def test_good_chain_connects(pki, servers, tmp_path, server):
    remote = servers.remote(server, pki[server])
    src, calls = source_for(kube_ovn_secret(pki["ca"].cert_pem, pki["client"]), tmp_path / "tls")
    paths = src.material()
    assert calls == [("cozy-kubeovn", "kube-ovn-tls")]

    probe(remote, paths)  # §11: verified leaf (EKU serverAuth or none), CN "ovn", no SAN, no host check

    assert "OVN_Northbound" in ovs_call(remote, "list_dbs", [])
    assert ovs_call(remote, "get_schema", ["OVN_Northbound"])["name"] == "OVN_Northbound"


# -- refused chains ----------------------------------------------------------------------


def _refused(remote: str, paths) -> str:
    with pytest.raises(TLSError) as info:
        probe(remote, paths)
    return str(info.value)


def test_wrong_ca_is_refused(pki, servers, tmp_path):
    remote = servers.remote("server_auth", pki["server_auth"])
    # The server trusts our client certificate; we trust only an unrelated CA.
    src, _ = source_for(kube_ovn_secret(pki["other_ca"].cert_pem, pki["client"]), tmp_path / "tls")
    paths = src.material()
    # ovsdb-server also sends its CA (OpenSSL's automatic chain), so OpenSSL names the untrusted
    # self-signed root; without it, the missing issuer. Either is OpenSSL's verify message.
    text = _refused(remote, paths)
    prefix = f"{remote}: TLS handshake: OVN NB certificate: "
    assert text.startswith(prefix), text
    assert text[len(prefix):] in ("self-signed certificate in certificate chain",
                                  "unable to get local issuer certificate")
    with pytest.raises(ConnectionError):  # python-ovs refuses it as well
        ovs_call(remote, "list_dbs", [])


def test_client_auth_only_server_certificate_is_refused(pki, servers, tmp_path):
    # §11: required EKU serverAuth; OpenSSL's client-side purpose check does it (observed, not assumed).
    remote = servers.remote("client_auth_only", pki["client_auth_only"])
    src, _ = source_for(kube_ovn_secret(pki["ca"].cert_pem, pki["client"]), tmp_path / "tls")
    paths = src.material()
    # X509_V_ERR_INVALID_PURPOSE: "unsuitable certificate purpose" since OpenSSL 3.0,
    # "unsupported certificate purpose" before.
    text = _refused(remote, paths)
    prefix = f"{remote}: TLS handshake: OVN NB certificate: "
    assert text.startswith(prefix), text
    assert text[len(prefix):] in ("unsuitable certificate purpose", "unsupported certificate purpose")
    with pytest.raises(ConnectionError):
        ovs_call(remote, "list_dbs", [])


def test_expired_server_certificate_is_refused(pki, servers, tmp_path):
    remote = servers.remote("expired", pki["expired"])
    src, _ = source_for(kube_ovn_secret(pki["ca"].cert_pem, pki["client"]), tmp_path / "tls")
    assert _refused(remote, src.material()) == f"{remote}: TLS handshake: OVN NB certificate: certificate has expired"


def test_invalidate_after_refusal_picks_up_a_fixed_secret(pki, servers, tmp_path):
    # The NB client's flow (§10): handshake failure -> invalidate -> next connection re-reads and
    # re-writes even though the resourceVersion did not change.
    remote = servers.remote("server_auth", pki["server_auth"])
    secret = kube_ovn_secret(pki["other_ca"].cert_pem, pki["client"], resource_version="5")
    src, calls = source_for(secret, tmp_path / "tls")
    with pytest.raises(TLSError, match="OVN NB certificate"):
        probe(remote, src.material())
    src.invalidate()
    secret["data"] = kube_ovn_secret(pki["ca"].cert_pem, pki["client"])["data"]  # same resourceVersion
    probe(remote, src.material())
    assert "OVN_Northbound" in ovs_call(remote, "list_dbs", [])
    assert len(calls) == 2


# -- Secret errors stop before the network ------------------------------------------------


def test_missing_key_no_connection_attempted(pki, servers, tmp_path):
    secret = kube_ovn_secret(pki["ca"].cert_pem, pki["client"])
    del secret["data"]["key"]
    src, calls = source_for(secret, tmp_path / "tls")
    before = (ovs.stream.Stream._SSL_private_key_file, ovs.stream.Stream._SSL_certificate_file,
              ovs.stream.Stream._SSL_ca_cert_file)
    # A listener standing in for the NB: nothing may reach it.
    with socket.create_server(("127.0.0.1", 0)) as sentinel:
        sentinel.setblocking(False)
        remote = f"ssl:127.0.0.1:{sentinel.getsockname()[1]}"

        def dial() -> None:  # what the NB client does per connection: material first, then the dial
            probe(remote, src.material())

        with pytest.raises(TLSError) as info:
            dial()
        assert str(info.value) == 'OVN TLS secret cozy-kubeovn/kube-ovn-tls has no "key" key'
        with pytest.raises(BlockingIOError):
            sentinel.accept()
    assert calls == [("cozy-kubeovn", "kube-ovn-tls")]
    assert (ovs.stream.Stream._SSL_private_key_file, ovs.stream.Stream._SSL_certificate_file,
            ovs.stream.Stream._SSL_ca_cert_file) == before


def test_server_refusing_our_client_certificate(pki, servers, tmp_path):
    # Our client certificate comes from a CA the server does not trust. Under TLS 1.3 the server's
    # verdict arrives after the client's handshake is complete: the probe's echo round trip reads
    # it (field reports, fourth round, O6: without it the dial passed). Under TLS 1.2 the
    # handshake itself fails. Either way the probe names the handshake.
    remote = servers.remote("server_auth", pki["server_auth"])
    stranger = pki["other_ca"].issue("ovn")
    src, _ = source_for(kube_ovn_secret(pki["ca"].cert_pem, stranger), tmp_path / "tls")
    paths = src.material()
    with pytest.raises(TLSError) as exc:
        probe(remote, paths)
    assert str(exc.value).startswith(f"{remote}: TLS handshake: "), exc.value
    assert "OVN NB certificate" not in str(exc.value)  # not a verdict on the server's certificate
    with pytest.raises(ConnectionError):
        ovs_call(remote, "list_dbs", [])


@contextlib.contextmanager
def rotated(pki, servers, tmp_path, label: str, **options) -> Iterator[tuple[str, NBClient, list]]:
    """A client synced with server ``label``, whose Secret is then rotated to another CA:
    (remote, client, the Secret reads). Stopped on exit."""
    remote = servers.remote(label, pki["server_auth"])
    secret = kube_ovn_secret(pki["ca"].cert_pem, pki["client"], resource_version="1")
    src, calls = source_for(secret, tmp_path / "tls")
    c = NBClient(remote, tls_source=src, **options).start()
    try:
        assert c.wait_synced(15), c.last_error
        secret.update(kube_ovn_secret(pki["other_ca"].cert_pem, pki["client"], resource_version="2"))
        yield remote, c, calls
    finally:
        c.stop()


def handshake_named(c: NBClient, remote: str) -> None:
    """Until the client's error names the server's certificate (not only "lost the connection")."""
    prefix = f"{remote}: TLS handshake: OVN NB certificate: "
    wait_for(lambda: c.last_error.startswith(prefix), timeout=30, what=f"last_error naming the handshake "
             f"(now {c.last_error!r})")
    assert not c.synced()


def test_a_server_back_refusing_the_handshake_is_named_without_waiting_for_the_recheck(pki, servers, tmp_path):
    """Field reports, fourth round (the acceptance run's O6): the Secret rotated to another
    CA and the NB down for a while: the probe at the loss finds nothing listening
    ("Connection refused"). Once the NB listens again its refusal is named by the next
    second's check, not by the long recheck: here the recheck is an hour, so only that path
    can name it. While nothing listens, the Secret is not read again (a TCP connect a second)."""
    with rotated(pki, servers, tmp_path, "back-refusing", tls_recheck=3600.0) as (remote, c, calls):
        servers.halt("back-refusing")
        wait_for(lambda: "Connection refused" in c.last_error, timeout=30,
                 what=f"the loss probed while nothing listens (now {c.last_error!r})")
        reads, checked = len(calls), c._tls_checked_at
        wait_for(lambda: c._tls_checked_at > checked, timeout=5, what="a later check while nothing listens")
        assert len(calls) == reads  # no Secret read while the server is absent
        servers.resume("back-refusing")
        handshake_named(c, remote)


def test_a_handshake_failure_after_a_good_connection_is_named(pki, servers, tmp_path):
    """Issue 26 item 7: the Secret rotated to another CA and the NB restarted. python-ovs
    reconnects on its own and says nothing of the handshake; the client probes as a fresh
    dial does, so the error names the certificate instead of only "lost the connection"."""
    with rotated(pki, servers, tmp_path, "rotation") as (remote, c, _):
        servers.restart("rotation")
        handshake_named(c, remote)
