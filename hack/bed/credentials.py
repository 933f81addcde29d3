"""The bed's credentials: its PKI (a CA, the API server's serving and kubelet-client
certificates, the service-account keys), files only their owner reads, and a kubeconfig per
user (the :class:`Kubeconfigs` mixin of :class:`~hack.bed.cluster.LocalCluster`)."""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Sequence

import yaml


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _make_pki(certs: Path, extra_ips: Sequence[str] = ()) -> dict[str, Path]:
    """A CA, a serving certificate for 127.0.0.1/localhost (and ``extra_ips``: the node's
    gateway, where its pods reach the API server), and the service-account keys."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    certs.mkdir(parents=True, exist_ok=True)
    now = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(minutes=5)
    later = now + _dt.timedelta(days=30)

    def pem_key(key) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pnc-testbed-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    srv_key = ec.generate_private_key(ec.SECP256R1())
    srv_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(srv_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(
            x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in extra_ips),
                x509.DNSName("localhost"),
                x509.DNSName("kubernetes.default.svc"),
            ]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    # The API server's client certificate towards kubelets (logs, exec): the only credential
    # the bed's kubelet accepts (hack/bed/node.py).
    kc_key = ec.generate_private_key(ec.SECP256R1())
    kc_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
            x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver-kubelet-client"),
        ]))
        .issuer_name(ca_name)
        .public_key(kc_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    paths = {
        "ca": certs / "ca.crt",
        "ca_key": certs / "ca.key",
        "serving_cert": certs / "apiserver.crt",
        "serving_key": certs / "apiserver.key",
        "sa_key": certs / "sa.key",
        "sa_pub": certs / "sa.pub",
        "kubelet_client_cert": certs / "apiserver-kubelet-client.crt",
        "kubelet_client_key": certs / "apiserver-kubelet-client.key",
    }
    paths["kubelet_client_cert"].write_bytes(kc_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(paths["kubelet_client_key"], pem_key(kc_key))
    paths["ca"].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(paths["ca_key"], pem_key(ca_key))
    paths["serving_cert"].write_bytes(srv_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(paths["serving_key"], pem_key(srv_key))
    _write_private(paths["sa_key"], pem_key(sa_key))
    paths["sa_pub"].write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return paths


class Kubeconfigs:
    """LocalCluster's kubeconfigs: each user's token with the bed's server and CA."""

    def _write_kubeconfigs(self) -> None:
        for path, user, token in (
            (self.admin_kubeconfig, "admin", self.admin_token),
            (self.controller_kubeconfig, "controller", self.controller_token),
            *((self.peer_kubeconfigs[name], name, tok) for name, tok in self._peer_tokens.items()),
            *((self.node_kubeconfigs[name], name, tok) for name, tok in self._node_tokens.items()),
            *(((self.agent_kubeconfig, "kube-ovn-cni", self._agent_token),) if self._agent_token else ()),
            *(((self.multus_kubeconfig, "multus", self._multus_token),) if self._multus_token else ()),
            *((self.trunk_kubelet_kubeconfigs[name], f"kubelet-{name}", tok)
              for name, tok in self._trunk_kubelet_tokens.items()),
        ):
            cfg = {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "testbed", "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)}}
                ],
                "users": [{"name": user, "user": {"token": token}}],
                "contexts": [{"name": user, "context": {"cluster": "testbed", "user": user}}],
                "current-context": user,
                "preferences": {},
            }
            _write_private(path, yaml.safe_dump(cfg, sort_keys=False).encode())
