"""ovn.tls without an NB: the Secret rules of reference §11, the cache, the private files (§7)."""

from __future__ import annotations

import base64
import errno
import os
import re
import socket
import ssl
import stat
import threading

import ovs.stream
import pytest
import structlog

from controller.runtime.kube import ApiError
from ovn.tls import TLSError, TLSPaths, TLSSource, check_peer, client_context, parse_secret_ref, probe, split_ssl_remote
from tests.support.pki import CA, SERVER_AUTH, b64, kube_ovn_secret, restore_ovs_ssl  # noqa: F401 (autouse fixture)

NS, NAME = "cozy-kubeovn", "kube-ovn-tls"
REF = f"{NS}/{NAME}"
GARBAGE = b"-----BEGIN CERTIFICATE-----\nTm90QUNlcnRpZmljYXRlQnV0U2VjcmV0TWFya2Vy\n-----END CERTIFICATE-----\n"


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki():
    ca = CA("ovn-ca")
    return {
        "ca": ca,
        "client": ca.issue("ovn"),
        "other": ca.issue("ovn", SERVER_AUTH),
        "other_ca": CA("unrelated-ca"),
    }


class FakeAPI:
    """get_secret from a dict; counts calls. A value that is an exception is raised."""

    def __init__(self, secret):
        self.secret = secret
        self.calls: list[tuple[str, str]] = []

    def __call__(self, namespace: str, name: str):
        self.calls.append((namespace, name))
        if isinstance(self.secret, BaseException):
            raise self.secret
        return self.secret


def secret_fragments(secret: dict) -> list[str]:
    """Windows of 16 characters every 8 over each base64 value and each PEM body line, so any
    leaked run of 23 or more characters of Secret data contains one of them."""
    texts = []
    for value in secret.get("data", {}).values():
        texts.append(value)
        try:
            raw = base64.b64decode(value)
        except ValueError:  # the "not base64" case
            continue
        texts += [line for line in raw.decode("latin-1").splitlines() if not line.startswith("-----")]
    return [t[i:i + 16] for t in texts for i in range(0, max(len(t) - 15, 1), 8) if len(t) >= 16]


def assert_no_secret_data(text: str, secret: dict) -> None:
    for frag in secret_fragments(secret):
        assert frag not in text, "secret data leaked into an error or log text"


def error_texts(exc: BaseException) -> str:
    """The exception and everything chained to it, as a traceback would show them."""
    parts = []
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts += [str(exc), repr(exc), repr(getattr(exc, "args", ()))]
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


def material_error(secret, tmp_path) -> str:
    src = TLSSource(FakeAPI(secret), REF, tmp_path / "tls")
    with structlog.testing.capture_logs() as logs:
        with pytest.raises(TLSError) as info:
            src.material()
    if isinstance(secret, dict):
        assert_no_secret_data(error_texts(info.value) + repr(logs), secret)
    return str(info.value)


# -- parse_secret_ref --------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, want",
    [("cozy-kubeovn/kube-ovn-tls", ("cozy-kubeovn", "kube-ovn-tls")), ("a/b", ("a", "b"))],
)
def test_parse_secret_ref(value, want):
    assert parse_secret_ref(value) == want


@pytest.mark.parametrize("value", ["", "ns", "/name", "ns/", "/", "ns/a/b", "ns//b"])
def test_parse_secret_ref_refuses(value):
    with pytest.raises(ValueError) as info:
        parse_secret_ref(value)
    assert str(info.value) == f'--ovn-tls-secret "{value}": want <namespace>/<name>'


def test_source_refuses_bad_ref(tmp_path):
    with pytest.raises(ValueError, match=re.escape('--ovn-tls-secret "nope": want <namespace>/<name>')):
        TLSSource(FakeAPI({}), "nope", tmp_path)


# -- Secret errors, in the §11 order -----------------------------------------------------


def test_read_error_wraps_the_api_error(tmp_path):
    err = ApiError(404, "NotFound", 'secrets "kube-ovn-tls" not found')
    api = FakeAPI(err)
    src = TLSSource(api, REF, tmp_path / "tls")
    with pytest.raises(TLSError) as info:
        src.material()
    assert str(info.value) == f'read OVN TLS secret {REF}: 404 NotFound: secrets "kube-ovn-tls" not found'
    assert api.calls == [(NS, NAME)]
    assert not (tmp_path / "tls").exists()


def test_missing_keys_checked_in_order_cacert_cert_key(pki, tmp_path):
    ca, client = pki["ca"], pki["client"]
    cases = [
        ({"metadata": {"resourceVersion": "1"}}, "cacert"),  # no data at all
        (kube_ovn_secret(None, client), "cacert"),
        (kube_ovn_secret(b"", client), "cacert"),  # present but empty
        (kube_ovn_secret(None, None), "cacert"),
        (kube_ovn_secret(ca.cert_pem, None, cert=b"", key=client.key), "cert"),
        (kube_ovn_secret(ca.cert_pem, None, key=client.key), "cert"),
        (kube_ovn_secret(ca.cert_pem, None, cert=b"", key=None), "cert"),  # empty cert before missing key
        (kube_ovn_secret(ca.cert_pem, None, cert=client.cert), "key"),
        (kube_ovn_secret(ca.cert_pem, None, cert=client.cert, key=b""), "key"),
    ]
    for secret, key in cases:
        assert material_error(secret, tmp_path) == f'OVN TLS secret {REF} has no "{key}" key'


def test_value_that_is_not_base64(pki, tmp_path):
    secret = kube_ovn_secret(pki["ca"].cert_pem, pki["client"])
    secret["data"]["cert"] = "not base64 at all!"
    assert material_error(secret, tmp_path) == f'OVN TLS secret {REF}: "cert" key is not valid base64'


def test_bad_client_certificate(pki, tmp_path):
    client = pki["client"]
    prefix = f"OVN TLS secret {REF}: client certificate: "
    cert_garbage = material_error(kube_ovn_secret(pki["ca"].cert_pem, None, cert=GARBAGE, key=client.key), tmp_path)
    assert cert_garbage == prefix + 'no valid PEM certificate in the "cert" key'
    not_pem = material_error(kube_ovn_secret(pki["ca"].cert_pem, None, cert=b"plain text", key=client.key), tmp_path)
    assert not_pem == prefix + 'no valid PEM certificate in the "cert" key'


def test_bad_private_key(pki, tmp_path):
    client = pki["client"]
    prefix = f"OVN TLS secret {REF}: client certificate: "
    garbage_key = material_error(kube_ovn_secret(pki["ca"].cert_pem, None, cert=client.cert, key=GARBAGE), tmp_path)
    assert garbage_key.startswith(prefix + 'no valid PEM private key in the "key" key')


def test_key_not_matching_cert(pki, tmp_path):
    secret = kube_ovn_secret(pki["ca"].cert_pem, None, cert=pki["client"].cert, key=pki["other"].key)
    assert material_error(secret, tmp_path) == (
        f"OVN TLS secret {REF}: client certificate: the private key does not match the certificate"
    )


def test_encrypted_key_is_refused_without_prompting(pki, tmp_path):
    # OpenSSL would otherwise ask for a passphrase on the terminal (and python-ovs would hang).
    client = pki["client"]
    secret = kube_ovn_secret(pki["ca"].cert_pem, None, cert=client.cert, key=client.encrypted_key())
    assert material_error(secret, tmp_path) == (
        f'OVN TLS secret {REF}: client certificate: the private key in the "key" key is encrypted'
    )


@pytest.mark.parametrize("cacert", ["garbage", "private-key", "plain"])
def test_cacert_without_a_certificate(pki, tmp_path, cacert):
    value = {"garbage": GARBAGE, "private-key": pki["client"].key, "plain": b"no pem here"}[cacert]
    secret = kube_ovn_secret(value, pki["client"])
    assert material_error(secret, tmp_path) == f"OVN TLS secret {REF}: no CA certificate in the cacert key"


def test_client_certificate_checked_before_cacert(pki, tmp_path):
    secret = kube_ovn_secret(b"no pem here", None, cert=GARBAGE, key=pki["client"].key)
    assert material_error(secret, tmp_path).startswith(f"OVN TLS secret {REF}: client certificate: ")


def test_failed_validation_leaves_no_files(pki, tmp_path):
    d = tmp_path / "tls"
    src = TLSSource(FakeAPI(kube_ovn_secret(b"no pem here", pki["client"])), REF, d)
    before = ovs.stream.Stream._SSL_ca_cert_file
    with pytest.raises(TLSError):
        src.material()
    assert os.listdir(d) == []  # scratch files removed, nothing written
    assert ovs.stream.Stream._SSL_ca_cert_file == before  # python-ovs not re-pointed


# -- success, files, cache ---------------------------------------------------------------


def _ino(path: str) -> int:
    return os.stat(path).st_ino


def test_material_writes_private_files_and_points_python_ovs(pki, tmp_path):
    d = tmp_path / "tls"
    d.mkdir(mode=0o755)
    secret = kube_ovn_secret(pki["ca"].cert_pem, pki["client"], resource_version="42")
    src = TLSSource(FakeAPI(secret), REF, d)
    with structlog.testing.capture_logs() as logs:
        paths = src.material()
    assert paths.resource_version == "42"
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    for path, want in ((paths.cacert, pki["ca"].cert_pem), (paths.cert, pki["client"].cert),
                       (paths.key, pki["client"].key)):
        assert os.path.dirname(path) == str(d)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        with open(path, "rb") as f:
            assert f.read() == want
    assert sorted(os.listdir(d)) == sorted(os.path.basename(p) for p in (paths.cacert, paths.cert, paths.key))
    assert (ovs.stream.Stream._SSL_ca_cert_file, ovs.stream.Stream._SSL_certificate_file,
            ovs.stream.Stream._SSL_private_key_file) == (paths.cacert, paths.cert, paths.key)
    assert_no_secret_data(repr(logs), secret)


def test_cache_by_resource_version(pki, tmp_path):
    ca, client = pki["ca"], pki["client"]
    api = FakeAPI(kube_ovn_secret(ca.cert_pem, client, resource_version="7"))
    src = TLSSource(api, REF, tmp_path / "tls")

    first = src.material()
    inodes = [_ino(p) for p in (first.cacert, first.cert, first.key)]
    second = src.material()
    assert len(api.calls) == 2  # one Get per material() call, even when cached
    assert second == first
    assert [_ino(p) for p in (second.cacert, second.cert, second.key)] == inodes  # not rewritten

    # A new resourceVersion: validated and written again.
    api.secret = kube_ovn_secret(ca.cert_pem, pki["other"], resource_version="8")
    third = src.material()
    assert third.resource_version == "8"
    assert len(api.calls) == 3
    assert _ino(third.cert) != inodes[1]
    with open(third.cert, "rb") as f:
        assert f.read() == pki["other"].cert
    inodes = [_ino(p) for p in (third.cacert, third.cert, third.key)]

    # invalidate(): same resourceVersion, written again.
    src.invalidate()
    fourth = src.material()
    assert fourth.resource_version == "8"
    assert len(api.calls) == 4
    assert all(_ino(p) != i for p, i in zip((fourth.cacert, fourth.cert, fourth.key), inodes))


def test_failed_read_keeps_the_cache(pki, tmp_path):
    api = FakeAPI(kube_ovn_secret(pki["ca"].cert_pem, pki["client"], resource_version="3"))
    src = TLSSource(api, REF, tmp_path / "tls")
    first = src.material()
    ino = _ino(first.key)
    good = api.secret
    api.secret = ApiError(503, "ServiceUnavailable", "try later")
    with pytest.raises(TLSError, match=re.escape(f"read OVN TLS secret {REF}: 503 ServiceUnavailable: try later")):
        src.material()
    api.secret = good
    assert src.material() == first
    assert _ino(first.key) == ino


def test_bad_new_version_keeps_old_files(pki, tmp_path):
    api = FakeAPI(kube_ovn_secret(pki["ca"].cert_pem, pki["client"], resource_version="3"))
    src = TLSSource(api, REF, tmp_path / "tls")
    first = src.material()
    with open(first.key, "rb") as f:
        old_key = f.read()
    api.secret = kube_ovn_secret(pki["ca"].cert_pem, None, cert=pki["client"].cert, key=pki["other"].key,
                                 resource_version="4")
    with pytest.raises(TLSError, match="does not match"):
        src.material()
    with open(first.key, "rb") as f:
        assert f.read() == old_key
    # Still refused on the next connection: a failure is never cached as good.
    with pytest.raises(TLSError, match="does not match"):
        src.material()


def test_no_resource_version_is_never_cached(pki, tmp_path):
    secret = kube_ovn_secret(pki["ca"].cert_pem, pki["client"])
    del secret["metadata"]["resourceVersion"]
    src = TLSSource(FakeAPI(secret), REF, tmp_path / "tls")
    first = src.material()
    ino = _ino(first.key)
    assert src.material().resource_version == ""
    assert _ino(first.key) != ino


# -- client context and probe without a server -------------------------------------------


def test_client_context(pki, tmp_path):
    src = TLSSource(FakeAPI(kube_ovn_secret(pki["ca"].cert_pem, pki["client"])), REF, tmp_path / "tls")
    ctx = client_context(src.material())
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.check_hostname is False
    assert ctx.cert_store_stats()["x509"] == 1


def test_client_context_missing_files(tmp_path):
    paths = TLSPaths(str(tmp_path / "ca"), str(tmp_path / "c"), str(tmp_path / "k"), "1")
    with pytest.raises(TLSError, match="^load TLS material: No such file or directory$"):
        client_context(paths)


@pytest.mark.parametrize(
    "remote, want",
    [("ssl:127.0.0.1:6641", ("127.0.0.1", 6641)), ("ssl:[::1]:6641", ("::1", 6641)),
     ("ssl:ovn-nb.kube-system:6641", ("ovn-nb.kube-system", 6641))],
)
def test_split_ssl_remote(remote, want):
    assert split_ssl_remote(remote) == want


@pytest.mark.parametrize("remote", ["tcp:127.0.0.1:6641", "ssl:127.0.0.1", "ssl::6641", "ssl:::1:6641",
                                    "ssl:127.0.0.1:x", "ssl:127.0.0.1:70000", "unix:/run/nb.sock"])
def test_split_ssl_remote_refuses(remote):
    with pytest.raises(TLSError) as info:
        split_ssl_remote(remote)
    assert str(info.value) == f'OVSDB address "{remote}": want ssl:<host>:<port>'


@pytest.fixture
def paths(pki, tmp_path) -> TLSPaths:
    return TLSSource(FakeAPI(kube_ovn_secret(pki["ca"].cert_pem, pki["client"])), REF, tmp_path / "tls").material()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_probe_connect_refused(paths):
    remote = f"ssl:127.0.0.1:{_closed_port()}"
    with pytest.raises(TLSError) as info:
        probe(remote, paths)
    assert str(info.value) == f"{remote}: {os.strerror(errno.ECONNREFUSED)}"


def test_probe_handshake_times_out(paths):
    # The kernel accepts the connection; nobody ever speaks TLS.
    with socket.create_server(("127.0.0.1", 0)) as srv:
        remote = f"ssl:127.0.0.1:{srv.getsockname()[1]}"
        with pytest.raises(TLSError) as info:
            probe(remote, paths, timeout=0.3)
    assert str(info.value) == f"{remote}: TLS handshake: timed out"


def test_probe_other_handshake_failure(paths):
    # A plain-text server: not a certificate problem, the generic "TLS handshake: <err>".
    with socket.create_server(("127.0.0.1", 0)) as srv:
        remote = f"ssl:127.0.0.1:{srv.getsockname()[1]}"

        def answer():
            conn, _ = srv.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        t = threading.Thread(target=answer, daemon=True)
        t.start()
        with pytest.raises(TLSError) as info:
            probe(remote, paths)
        t.join(5)
    text = str(info.value)
    assert text.startswith(f"{remote}: TLS handshake: ")
    assert "OVN NB certificate" not in text
    assert "_ssl.c" not in text and "[SSL" not in text  # OpenSSL's noise trimmed


def test_check_peer_requires_a_certificate():
    class NoCert:
        def getpeercert(self, binary_form=False):
            return None

    with pytest.raises(TLSError) as info:
        check_peer(NoCert())  # type: ignore[arg-type]
    assert str(info.value) == "TLS handshake: OVN NB presented no certificate"


def test_secret_fixture_is_base64_of_pem(pki):
    # Guard for the helpers above: the Secret carries base64 of the exact PEM bytes.
    s = kube_ovn_secret(pki["ca"].cert_pem, pki["client"])
    assert s["data"] == {"cacert": b64(pki["ca"].cert_pem), "cert": b64(pki["client"].cert),
                         "key": b64(pki["client"].key)}
