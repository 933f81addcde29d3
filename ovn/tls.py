"""TLS material and the TLS dial check for the OVN NB connection (reference §11, product decisions §7).

* :class:`TLSSource` reads the Kube-OVN Secret (keys ``cacert``, ``cert``, ``key``) with exactly one
  API Get per :meth:`TLSSource.material` call (one per new NB connection; no list, watch or cache of
  the Secret object), validates it, and writes it through :func:`set_tls_material` into a
  private directory (0700/0600) that python-ovs' process-wide SSL settings point at (§7 "python-ovs
  specifics"). The validated result is cached by the Secret's ``resourceVersion`` until it changes
  or :meth:`TLSSource.invalidate` is called (after a failed handshake, §10/§11).
* :func:`client_context` builds the client context of §11 and :func:`probe` does the dial of §10
  (TCP connect + TLS handshake within 3 s) with the §11 certificate check and error texts.

Certificate checks are OpenSSL's own (the same defaults python-ovs' ``SSLStream`` uses, so what
:func:`probe` accepts, python-ovs accepts): the leaf is verified against the ``cacert`` pool with the
rest of the presented chain as intermediates, and the client-side default purpose "SSL server"
rejects a leaf whose extended key usage lacks serverAuth while a leaf without any EKU passes -- the
rule of §11 (proven against a real ovsdb-server in ``tests/test_ovn_tls_integration.py``).

Secret data (PEM or base64) never appears in an error or a log line: every message here is built
from the Secret's namespace/name, key names and OpenSSL reason strings only.

This module must not import :mod:`ovn.nb` at import time (``nb`` imports this module).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import ovs.stream
import structlog

log = structlog.get_logger(__name__)

#: The Secret keys, in the order they are checked (§11, Kube-OVN's layout).
SECRET_KEYS = ("cacert", "cert", "key")
DEFAULT_SECRET = "cozy-kubeovn/kube-ovn-tls"  # §11, the default of --ovn-tls-secret
DIAL_TIMEOUT = 3.0  # seconds: TCP connect + TLS handshake (§10)


class TLSError(Exception):
    """Any failure of this module; the message is the operator-facing text of §10/§11.

    The NB client maps it to its own error type (``ovn.ovsdb.NBError``).
    """


@dataclass(frozen=True)
class TLSPaths:
    """Where the validated material of one Secret version lives (files 0600 in a 0700 directory).

    ``cacert``/``cert``/``key``: absolute file paths (PEM); ``resource_version``: the Secret's
    ``metadata.resourceVersion`` the files were written from.
    """

    cacert: str
    cert: str
    key: str
    resource_version: str


def parse_secret_ref(value: str) -> tuple[str, str]:
    """``"<namespace>/<name>"`` -> ``(namespace, name)`` (the ``--ovn-tls-secret`` flag, §11).

    Split at the first ``/``; both parts must be non-empty and the name must hold no further ``/``.

    :raises ValueError: ``--ovn-tls-secret "<value>": want <namespace>/<name>``.
    """
    namespace, sep, name = value.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise ValueError(f'--ovn-tls-secret "{value}": want <namespace>/<name>')
    return namespace, name


_SSL_SUFFIX = re.compile(r"\s*\(_ssl\.c:\d+\)$")
_SSL_PREFIX = re.compile(r"^\[[^\]]*\]\s*")


class ConnectFailed(TLSError):
    """The TCP connect of :func:`probe` failed (refused, timed out, unreachable): the server
    is not there, so nothing is known of its certificate yet."""


def _reason(exc: BaseException) -> str:
    """A short, data-free text for an OpenSSL or OS error.

    ``[SSL: TLSV1_ALERT_UNKNOWN_CA] tlsv1 alert unknown ca (_ssl.c:1006)`` -> ``tlsv1 alert unknown ca``;
    an ``OSError`` gives its strerror ("Connection refused"), a timeout "timed out".
    """
    if isinstance(exc, ssl.SSLError):
        text = _SSL_PREFIX.sub("", _SSL_SUFFIX.sub("", str(exc)))
        return text or (exc.reason or "").lower().replace("_", " ") or type(exc).__name__
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


class _EncryptedKey(Exception):
    pass


def _refuse_passphrase() -> bytes:
    # Without a callback OpenSSL would prompt for a passphrase on the terminal and hang the
    # controller (python-ovs loads the key without one); an encrypted key is a Secret error.
    raise _EncryptedKey


class TLSSource:
    """The NB TLS material from one Kube-OVN Secret (reference §11, product decisions §7).

    * ``get_secret(namespace, name)``: returns the Secret as the API serves it (a dict; ``data``
      values base64) and raises on any failure (e.g. ``KubeWriter.get(SECRETS, name, namespace)``).
    * ``secret_ref``: ``"<namespace>/<name>"`` (:func:`parse_secret_ref`; raises ``ValueError``).
    * ``directory``: the private directory the PEM files are written to (created 0700).

    Thread-safe; meant to be called by the one thread that dials the NB.
    """

    def __init__(
        self,
        get_secret: Callable[[str, str], Mapping[str, Any]],
        secret_ref: str,
        directory: str | os.PathLike,
    ) -> None:
        self.namespace, self.name = parse_secret_ref(secret_ref)
        self._get_secret = get_secret
        self._dir = os.path.abspath(os.fspath(directory))
        self._lock = threading.Lock()
        self._cached: TLSPaths | None = None

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def invalidate(self) -> None:
        """Forget the validated material: the next :meth:`material` validates and writes again even
        if the ``resourceVersion`` is unchanged (called after a failed TLS handshake, §10/§11)."""
        with self._lock:
            self._cached = None

    def material(self) -> TLSPaths:
        """Read the Secret (exactly one ``get_secret`` call) and return the paths of its material.

        Same ``resourceVersion`` as the cached, not invalidated, result -> the cached paths, no file
        is touched. Otherwise the three keys are decoded and validated, written through
        ``set_tls_material`` (atomic per file, 0600 in a 0700 directory; re-points python-ovs)
        and cached. An empty or missing ``resourceVersion`` is never treated as unchanged.
        A failed validation keeps the previous files and python-ovs settings untouched.

        :raises TLSError: with the §11 texts, checked in this order:

            * ``read OVN TLS secret <ns>/<name>: <err>`` -- ``get_secret`` raised;
            * ``OVN TLS secret <ns>/<name> has no "<key>" key`` -- empty or missing, in the order
              ``cacert``, ``cert``, ``key``;
            * ``OVN TLS secret <ns>/<name>: "<key>" key is not valid base64``;
            * ``OVN TLS secret <ns>/<name>: client certificate: <err>`` -- ``cert``/``key`` do not
              load as a PEM chain and private key, the key is encrypted, or they do not match;
            * ``OVN TLS secret <ns>/<name>: no CA certificate in the cacert key``;
            * ``OVN TLS secret <ns>/<name>: write TLS material: <os error>``.
        """
        with self._lock:
            try:
                secret = self._get_secret(self.namespace, self.name)
            except Exception as exc:
                raise TLSError(f"read OVN TLS secret {self.ref}: {exc}") from exc
            rv = str(((secret or {}).get("metadata") or {}).get("resourceVersion") or "")
            cached = self._cached
            if cached is not None and rv and cached.resource_version == rv:
                return cached
            self._cached = None
            material = self._decode(secret)
            self._validate(material)
            try:
                paths = set_tls_material(self._dir, material["cacert"], material["cert"], material["key"])
            except OSError as exc:
                raise TLSError(f"OVN TLS secret {self.ref}: write TLS material: {_reason(exc)}") from None
            self._cached = TLSPaths(paths["cacert"], paths["cert"], paths["key"], rv)
            log.info("OVN TLS material loaded", secret=self.ref, resource_version=rv, directory=self._dir)
            return self._cached

    # -- validation ------------------------------------------------------------------------

    def _decode(self, secret: Mapping[str, Any]) -> dict[str, bytes]:
        data = (secret or {}).get("data") or {}
        out: dict[str, bytes] = {}
        for key in SECRET_KEYS:
            value = data.get(key)
            if not value:
                raise TLSError(f'OVN TLS secret {self.ref} has no "{key}" key')
            try:
                raw = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError, TypeError):
                raise TLSError(f'OVN TLS secret {self.ref}: "{key}" key is not valid base64') from None
            if not raw:
                raise TLSError(f'OVN TLS secret {self.ref} has no "{key}" key')
            out[key] = raw
        return out

    def _validate(self, material: Mapping[str, bytes]) -> None:
        # Validate with the same OpenSSL calls python-ovs makes on every connect (from files,
        # load_cert_chain + load_verify_locations), so accepted material also works there.
        # The scratch files live in the private directory: key material never leaves it.
        os.makedirs(self._dir, mode=0o700, exist_ok=True)
        os.chmod(self._dir, 0o700)
        scratch: list[str] = []
        try:
            files = {}
            for key in SECRET_KEYS:
                fd, path = tempfile.mkstemp(prefix=f".check-{key}-", suffix=".pem", dir=self._dir)  # 0600
                scratch.append(path)
                with os.fdopen(fd, "wb") as f:
                    f.write(material[key])
                files[key] = path
            problem = _client_cert_problem(files["cert"], files["key"])
            if problem:
                raise TLSError(f"OVN TLS secret {self.ref}: client certificate: {problem}")
            if _count_certificates(files["cacert"]) == 0:
                raise TLSError(f"OVN TLS secret {self.ref}: no CA certificate in the cacert key")
        except OSError as exc:
            raise TLSError(f"OVN TLS secret {self.ref}: write TLS material: {_reason(exc)}") from None
        finally:
            for path in scratch:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass


def _count_certificates(path: str) -> int:
    """How many certificates OpenSSL loads from a PEM file as trust anchors (0 on any error)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        ctx.load_verify_locations(cafile=path)
    except ssl.SSLError:
        return 0
    return ctx.cert_store_stats()["x509"]


def _client_cert_problem(cert_path: str, key_path: str) -> str:
    """"" if the chain and key load and match, else a data-free reason (§11 "client certificate")."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        ctx.load_cert_chain(cert_path, key_path, password=_refuse_passphrase)
        return ""
    except _EncryptedKey:
        return 'the private key in the "key" key is encrypted'
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            return "the private key does not match the certificate"
        # OpenSSL says "PEM lib" for both files; tell them apart.
        if _count_certificates(cert_path) == 0:
            return 'no valid PEM certificate in the "cert" key'
        return f'no valid PEM private key in the "key" key ({_reason(exc)})'


# -- connection --------------------------------------------------------------------------


def client_context(paths: TLSPaths) -> ssl.SSLContext:
    """The client context of §11: TLS >= 1.2, the client certificate presented, the server verified
    against ``paths.cacert`` (``CERT_REQUIRED``; OpenSSL's default "SSL server" purpose enforces the
    serverAuth EKU, a leaf without EKU passes) and no host-name check (Kube-OVN certs: CN ``ovn``,
    no SANs).

    :raises TLSError: ``load TLS material: <err>`` if the files do not load (e.g. removed).
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False  # must precede verify_mode changes; the CA pin is the identity
    ctx.verify_mode = ssl.CERT_REQUIRED
    try:
        ctx.load_verify_locations(cafile=paths.cacert)
        ctx.load_cert_chain(paths.cert, paths.key, password=_refuse_passphrase)
    except (ssl.SSLError, OSError) as exc:
        raise TLSError(f"load TLS material: {_reason(exc)}") from None
    except _EncryptedKey:
        raise TLSError("load TLS material: the private key is encrypted") from None
    return ctx


def split_ssl_remote(remote: str) -> tuple[str, int]:
    """``"ssl:<host>:<port>"`` (IPv6 host in brackets) -> ``(host, port)``.

    :raises TLSError: ``OVSDB address "<remote>": want ssl:<host>:<port>``.
    """
    kind, _, hostport = remote.partition(":")
    host, sep, port = hostport.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        host = ""  # an unbracketed IPv6 address is ambiguous
    if kind != "ssl" or not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise TLSError(f'OVSDB address "{remote}": want ssl:<host>:<port>')
    return host, int(port)


def check_peer(tls_sock: ssl.SSLSocket) -> None:
    """After a successful handshake: the server must have presented a certificate (§11).

    With ``CERT_REQUIRED`` OpenSSL already fails a handshake without one unless an anonymous cipher
    was negotiated; this is the explicit rule, not a path we expect to take.

    :raises TLSError: ``TLS handshake: OVN NB presented no certificate``.
    """
    if not tls_sock.getpeercert(binary_form=True):
        raise TLSError("TLS handshake: OVN NB presented no certificate")


def reachable(remote: str, timeout: float = DIAL_TIMEOUT) -> bool:
    """A TCP connect to ``remote`` (``ssl:<host>:<port>``) succeeds within ``timeout`` seconds
    (closed at once; no TLS, no Secret read)."""
    host, port = split_ssl_remote(remote)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError:
        return False
    return True


def probe(remote: str, paths: TLSPaths, timeout: float = DIAL_TIMEOUT) -> None:
    """TCP connect to ``remote`` (``ssl:<host>:<port>``), TLS handshake with :func:`client_context`,
    close -- all within ``timeout`` seconds (§10 dial timeout 3 s).

    The NB client calls this before handing the address to python-ovs; on a handshake failure it
    must :meth:`TLSSource.invalidate` the source (§10). Under TLS 1.3 the server's verdict on our
    client certificate arrives after the client's handshake has finished, so the probe ends with
    one JSON-RPC ``echo`` round trip, which reads it (a refusal is a ``TLS handshake`` error).

    :raises TLSError: (every text prefixed ``<remote>: ``)

        * ``OVSDB address "<remote>": want ssl:<host>:<port>`` (no prefix) -- not an ssl remote;
        * ``<remote>: load TLS material: <err>`` -- see :func:`client_context`;
        * ``<remote>: <os error>`` -- connect failed or timed out ("Connection refused", "timed out"):
          :class:`ConnectFailed`;
        * ``<remote>: TLS handshake: OVN NB certificate: <verify message>`` -- the server certificate
          does not verify (unknown CA, wrong EKU "unsupported certificate purpose", expired, ...);
        * ``<remote>: TLS handshake: OVN NB presented no certificate``;
        * ``<remote>: TLS handshake: <err>`` -- any other handshake failure (alert, timeout, EOF).
    """
    host, port = split_ssl_remote(remote)
    try:
        ctx = client_context(paths)
    except TLSError as exc:
        raise TLSError(f"{remote}: {exc}") from None
    deadline = time.monotonic() + timeout
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise ConnectFailed(f"{remote}: {_reason(exc)}") from None
    try:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TLSError(f"{remote}: TLS handshake: timed out")
        sock.settimeout(remaining)
        try:
            tls_sock = ctx.wrap_socket(sock, server_side=False, do_handshake_on_connect=True)
        except ssl.SSLCertVerificationError as exc:
            raise TLSError(f"{remote}: TLS handshake: OVN NB certificate: {exc.verify_message}") from None
        except (ssl.SSLError, OSError) as exc:
            raise TLSError(f"{remote}: TLS handshake: {_reason(exc)}") from None
        sock = tls_sock  # closing the wrapper closes the socket
        try:
            check_peer(tls_sock)
        except TLSError as exc:
            raise TLSError(f"{remote}: {exc}") from None
        _echo(tls_sock, remote, deadline)
    finally:
        sock.close()


ECHO = b'{"id":"pnc-probe","method":"echo","params":[]}'


def _echo(tls_sock: ssl.SSLSocket, remote: str, deadline: float) -> None:
    """One JSON-RPC ``echo`` round trip (RFC 7047 §4.1.11) on a finished handshake. Under TLS 1.3
    the server's verdict on our client certificate comes after the client's handshake is done
    (an alert on the first read): without a read, a server refusing our certificate (a CA
    rotated on one side only: ``tlsv1 alert unknown ca`` in its log) looked like a good dial,
    and the failure was named only as a lost connection."""
    try:
        tls_sock.settimeout(max(deadline - time.monotonic(), 0.001))
        tls_sock.sendall(ECHO)
        answer = tls_sock.recv(4096)
    except socket.timeout:
        raise TLSError(f"{remote}: echo after the handshake: timed out") from None
    except (ssl.SSLError, OSError) as exc:
        raise TLSError(f"{remote}: TLS handshake: {_reason(exc)}") from None
    if not answer:
        raise TLSError(f"{remote}: TLS handshake: the server closed the connection (it may refuse our client "
                       "certificate)")


TLS_FILES = {"key": "key.pem", "cert": "cert.pem", "cacert": "cacert.pem"}


def set_tls_material(directory: str | os.PathLike, cacert: bytes, cert: bytes, key: bytes) -> dict[str, str]:
    """Write TLS material (Kube-OVN's ``cacert``/``cert``/``key``) into a private
    directory and point python-ovs' process-wide SSL settings at it.

    The directory is created mode 0700, each file 0600, written atomically
    (temporary file + rename), so a connection being set up never reads half a
    file. Call again with new material when the Secret changes; new connections
    pick it up. Returns the paths by key. Key material never appears in errors.
    """
    d = os.fspath(directory)
    os.makedirs(d, mode=0o700, exist_ok=True)
    os.chmod(d, 0o700)
    paths: dict[str, str] = {}
    for k, data in (("cacert", cacert), ("cert", cert), ("key", key)):
        if not data:
            raise TLSError(f'OVN TLS material has no "{k}" key')
        path = os.path.join(d, TLS_FILES[k])
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        paths[k] = path
    ovs.stream.Stream.ssl_set_private_key_file(paths["key"])
    ovs.stream.Stream.ssl_set_certificate_file(paths["cert"])
    ovs.stream.Stream.ssl_set_ca_cert_file(paths["cacert"])
    return paths
