"""Test certificates shaped like Kube-OVN's OVN TLS material (test-only; uses ``cryptography``).

Kube-OVN's ``kube-ovn-tls`` Secret holds ``cacert``, ``cert`` and ``key``; the certificate has CN
``ovn`` and no subjectAltName, and the same pair serves ovsdb-server and its clients. Everything
here returns PEM bytes.

    ca = CA("ovn-ca")
    server = ca.issue("ovn", eku=SERVER_AUTH)   # or eku=None (no EKU extension), eku=CLIENT_AUTH
    client = ca.issue("ovn")
    other = CA("unrelated-ca")                  # a second, unrelated CA
    secret = kube_ovn_secret(ca.cert_pem, client)   # the Secret dict as the API would serve it

EC P-256 keys keep generation fast.
"""

from __future__ import annotations

import base64
import datetime as _dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import ovs.stream
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_AUTH = (ExtendedKeyUsageOID.SERVER_AUTH,)
CLIENT_AUTH = (ExtendedKeyUsageOID.CLIENT_AUTH,)
BOTH = (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH)


def _san(name: str) -> x509.GeneralName:
    """An IP address SAN for an address, else a DNS name."""
    import ipaddress

    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _key_pem(key: ec.EllipticCurvePrivateKey, passphrase: bytes | None = None) -> bytes:
    enc = serialization.BestAvailableEncryption(passphrase) if passphrase else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


@dataclass(frozen=True)
class CertKey:
    """A leaf: ``cert`` (PEM; leaf first, then any intermediates), ``key`` (PEM, PKCS#8),
    ``chain`` (the intermediates alone; ``b""`` when issued by a root)."""

    cert: bytes
    key: bytes
    private_key: Any  # the cryptography key object (to re-encode it, e.g. encrypted)
    chain: bytes = b""

    def encrypted_key(self, passphrase: bytes = b"secret") -> bytes:
        return _key_pem(self.private_key, passphrase)


class CA:
    """A self-signed root (or, with ``parent``, an intermediate) that issues leaves."""

    def __init__(self, cn: str = "ovn-ca", parent: CA | None = None, days: int = 30) -> None:
        self.cn = cn
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.parent = parent
        now = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(minutes=5)
        issuer_name = parent.cert.subject if parent else _name(cn)
        signer = parent.key if parent else self.key
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn))
            .issuer_name(issuer_name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + _dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                    key_encipherment=False, data_encipherment=False, key_agreement=False,
                    encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
        )
        if parent:
            builder = builder.add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(parent.key.public_key()), critical=False
            )
        self.cert = builder.sign(signer, hashes.SHA256())

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _key_pem(self.key)

    def chain_pem(self) -> bytes:
        """This CA and its parents up to (not including) the root, for a leaf's chain file."""
        out = b""
        ca: CA | None = self
        while ca is not None and ca.parent is not None:
            out += ca.cert_pem
            ca = ca.parent
        return out

    def issue(
        self,
        cn: str = "ovn",
        eku: Sequence[x509.ObjectIdentifier] | None = None,
        *,
        san: Sequence[str] = (),
        days: int = 30,
        expired: bool = False,
    ) -> CertKey:
        """A leaf signed by this CA: CN ``cn``, no SAN unless given (DNS names, IP addresses), EKU ``eku`` (None:
        no EKU extension at all, like Kube-OVN's ovs-pki certificates). ``expired``: validity ended
        an hour ago. The cert PEM carries the intermediates when this CA is one."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = _dt.datetime.now(_dt.timezone.utc)
        if expired:
            start, end = now - _dt.timedelta(days=2), now - _dt.timedelta(hours=1)
        else:
            start, end = now - _dt.timedelta(minutes=5), now + _dt.timedelta(days=days)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
        )
        if eku is not None:
            builder = builder.add_extension(x509.ExtendedKeyUsage(list(eku)), critical=False)
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName([_san(n) for n in san]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        chain = self.chain_pem()
        return CertKey(cert.public_bytes(serialization.Encoding.PEM) + chain, _key_pem(key), key, chain)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def kube_ovn_secret(
    cacert: bytes | None,
    leaf: CertKey | None = None,
    *,
    cert: bytes | None = None,
    key: bytes | None = None,
    namespace: str = "cozy-kubeovn",
    name: str = "kube-ovn-tls",
    resource_version: str = "1",
) -> dict[str, Any]:
    """The Secret as the API serves it (``data`` base64). ``cert``/``key`` override ``leaf``'s; a
    ``None`` value leaves the key out, ``b""`` makes it present but empty."""
    values = {
        "cacert": cacert,
        "cert": cert if cert is not None else (leaf.cert if leaf else None),
        "key": key if key is not None else (leaf.key if leaf else None),
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"namespace": namespace, "name": name, "resourceVersion": resource_version},
        "data": {k: b64(v) for k, v in values.items() if v is not None},
    }


@pytest.fixture(autouse=True)
def restore_ovs_ssl() -> Iterator[None]:
    """python-ovs' SSL settings are process-wide: leave them as the test found them (import
    this fixture into a test module that sets TLS material)."""
    saved = (ovs.stream.Stream._SSL_private_key_file, ovs.stream.Stream._SSL_certificate_file,
             ovs.stream.Stream._SSL_ca_cert_file)
    yield
    (ovs.stream.Stream._SSL_private_key_file, ovs.stream.Stream._SSL_certificate_file,
     ovs.stream.Stream._SSL_ca_cert_file) = saved
