"""The bed's control plane: etcd and kube-apiserver (their flags, their waits, etcd's revision
and compaction), kubectl, the bootstrap of manifests/ and the fixtures, and the API clients:
the :class:`ControlPlane` mixin of :class:`~hack.bed.cluster.LocalCluster`."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterable

import yaml

from hack.bed.common import CONTROLLER_NAMESPACE, FIELD_MANAGER, VPC_EGRESS_GATEWAY_CRD, ClusterError

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}


class ControlPlane:
    """LocalCluster's etcd, kube-apiserver, kubectl and bootstrap."""

    # etcd ---------------------------------------------------------------

    def _start_etcd(self) -> None:
        client, peer = self._ports["etcd"], self._ports["etcd-peer"]
        self.etcd_url = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        self._spawn(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=testbed",
                f"--data-dir={self.workdir / 'etcd-data'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=testbed={peer_url}",
                "--initial-cluster-state=new",
                "--enable-grpc-gateway=true",
                "--unsafe-no-fsync=true",  # throwaway data; spares the disk
                "--log-level=warn",
                "--log-outputs=stderr",
            ],
            self.workdir / "etcd.log",
        )

    def _wait_etcd(self) -> None:
        log = self.workdir / "etcd.log"
        deadline = time.monotonic() + 30
        last = ""
        while time.monotonic() < deadline:
            self._check_alive("etcd", log)
            try:
                with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as r:
                    body = json.loads(r.read())
                    if body.get("health") == "true":
                        return
                    last = str(body)
            except (OSError, ValueError) as e:
                last = str(e)
            time.sleep(0.1)
        raise self._fail("etcd", f"not healthy after 30s ({last})", log)

    def _etcd_post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(
            f"{self.etcd_url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def etcd_revision(self) -> int:
        """etcd's current revision (from the header of a range request)."""
        resp = self._etcd_post("/v3/kv/range", {"key": base64.b64encode(b"/registry/").decode(), "limit": 1})
        return int(resp["header"]["revision"])

    def compact(self) -> int:
        """Compact etcd to its current revision (physical); returns that revision."""
        rev = self.etcd_revision()
        self._etcd_post("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        return rev

    # kube-apiserver -------------------------------------------------------

    def _start_apiserver(self) -> None:
        port = self._ports["apiserver"]
        self.server = f"https://127.0.0.1:{port}"
        w = self.workdir
        argv = [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={w / 'certs'}",
            f"--tls-cert-file={self.pki['serving_cert']}",
            f"--tls-private-key-file={self.pki['serving_key']}",
            f"--client-ca-file={self.pki['ca']}",
            f"--token-auth-file={w / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--anonymous-auth=false",
            f"--service-account-issuer={self.server}",
            f"--service-account-key-file={self.pki['sa_pub']}",
            f"--service-account-signing-key-file={self.pki['sa_key']}",
            "--service-cluster-ip-range=10.96.0.0/16",
            # To a kubelet (hack/bed/node.py): its InternalIP (it listens there, not on a hostname),
            # with the one client certificate it accepts.
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--kubelet-client-certificate={self.pki['kubelet_client_cert']}",
            f"--kubelet-client-key={self.pki['kubelet_client_key']}",
            # Without a node there is no controller manager: no "default" ServiceAccount appears
            # in new namespaces, and the ServiceAccount admission plugin would refuse every Pod
            # (tests create Pods). With one, pods get their service account's token.
            *(() if self.node is not None else ("--disable-admission-plugins=ServiceAccount",)),
            # The endpoints reconciler would try to publish 127.0.0.1 for the kubernetes
            # Service, which Endpoints validation refuses (loopback); nothing needs it here.
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            f"--audit-policy-file={w / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--audit-log-maxsize=0",
            f"--watch-cache={'true' if self.watch_cache else 'false'}",
            "--profiling=false",
            "--v=1",
        ]
        self._spawn("kube-apiserver", argv, w / "kube-apiserver.log")

    def _ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _wait_apiserver(self) -> None:
        log = self.workdir / "kube-apiserver.log"
        ctx = self._ssl_context()
        deadline = time.monotonic() + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            self._check_alive("kube-apiserver", log)
            self._check_alive("etcd", self.workdir / "etcd.log")
            req = urllib.request.Request(
                f"{self.server}/readyz", headers={"Authorization": f"Bearer {self.admin_token}"}
            )
            try:
                with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
                    if r.status == 200:
                        return
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}: {e.read()[-500:].decode(errors='replace')}"
            except OSError as e:
                last = str(e)
            time.sleep(0.2)
        raise self._fail("kube-apiserver", f"not ready after {self.start_timeout:.0f}s ({last})", log)

    # kubectl and bootstrap ----------------------------------------------------

    def run_kubectl(
        self,
        *args: str,
        user: str = "admin",
        input: str | bytes | None = None,
        check: bool = True,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess:
        kubeconfig = self.admin_kubeconfig if user == "admin" else self.controller_kubeconfig
        env = dict(os.environ, KUBECONFIG=str(kubeconfig))
        r = subprocess.run(
            [str(self.kubectl), f"--cache-dir={self.kube_cache_dir}", *args],
            input=input.encode() if isinstance(input, str) else input,
            capture_output=True,
            env=env,
            timeout=timeout,
        )
        if check and r.returncode != 0:
            raise ClusterError(
                f"kubectl {' '.join(args)} failed ({r.returncode}):\n{r.stderr.decode(errors='replace').strip()}"
            )
        return r

    def _manifest_docs(self) -> list[tuple[Path, dict]]:
        """manifests/ and the fixtures, and Kube-OVN's real VpcEgressGateway CRD (no fixture
        of it since issue 24) in every bed that has the peers' build."""
        docs = self._load_docs(self.manifest_dirs)
        real = self.peers_dir / "crds" / "kube-ovn"
        if not self.with_peers and real.is_dir():
            docs += [(f, d) for f, d in self._load_docs([real])
                     if d["kind"] == "CustomResourceDefinition" and d["metadata"]["name"] == VPC_EGRESS_GATEWAY_CRD]
        return docs

    @staticmethod
    def _load_docs(dirs: Iterable[Path]) -> list[tuple[Path, dict]]:
        """Every Kubernetes object in the YAML files under ``dirs`` (Lists unpacked), with its file."""
        docs: list[tuple[Path, dict]] = []
        for d in dirs:
            if not d.is_dir():
                continue
            files = sorted(p for ext in ("*.yaml", "*.yml") for p in d.rglob(ext))
            for f in files:
                if f.name in ("kustomization.yaml", "kustomization.yml"):
                    continue
                try:
                    loaded = list(yaml.safe_load_all(f.read_text()))
                except yaml.YAMLError as e:
                    raise ClusterError(f"cannot parse {f}: {e}") from e
                for doc in loaded:
                    if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
                        continue
                    if doc["kind"].endswith("List") and "items" in doc:
                        docs.extend((f, item) for item in doc["items"])
                    else:
                        docs.append((f, doc))
        return docs

    def apply_docs(self, docs: Iterable[dict], what: str = "objects") -> None:
        docs = list(docs)
        if not docs:
            return
        stream = yaml.safe_dump_all(docs, sort_keys=False)
        try:
            self.run_kubectl(
                "apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}", "-f", "-",
                input=stream,
            )
        except ClusterError as e:
            raise ClusterError(f"applying {what} failed: {e}") from e

    def _bootstrap(self) -> None:
        docs = self._manifest_docs()
        if self.with_peers:
            docs = self._with_peer_crds(docs) + [(self.peers_dir, d) for d in self._peer_objects()]
        namespaces = {CONTROLLER_NAMESPACE}
        namespaces.update(d["metadata"]["namespace"] for _, d in docs if d.get("metadata", {}).get("namespace"))
        ns_docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in sorted(namespaces)]
        ns_docs += [d for _, d in docs if d["kind"] == "Namespace" and d["apiVersion"] == "v1"]
        crds = [d for _, d in docs if d["kind"] == "CustomResourceDefinition"]
        rest = [d for _, d in docs if d["kind"] not in ("CustomResourceDefinition", "Namespace")]
        self.apply_docs(ns_docs, "namespaces")
        self.apply_docs(crds, "CRDs")
        if crds:
            names = [f"crd/{d['metadata']['name']}" for d in crds]
            self.run_kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
        self.apply_docs(rest, "manifests")
        if self.node is not None:
            # Without the Node authorizer, RBAC's system:node ClusterRole is what a kubelet
            # may do; the API server binds it to no one by default.
            self.apply_docs([{
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "pnc-testbed-nodes"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}],
            }], "the nodes' ClusterRoleBinding")

    # ------------------------------------------------------------------ clients

    def _api_get(self, path: str) -> dict | None:
        """GET ``path`` as the admin; None for 404."""
        req = urllib.request.Request(f"{self.server}{path}", headers={"Authorization": f"Bearer {self.admin_token}"})
        try:
            with urllib.request.urlopen(req, timeout=5, context=self._ssl_context()) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def api_client(self, user: str = "admin", host: str | None = None):
        """A kubernetes.client.ApiClient for ``admin`` or ``controller`` (optionally via ``host``)."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = host or self.server
        cfg.ssl_ca_cert = str(self.ca_file)
        cfg.verify_ssl = True
        token = self.admin_token if user == "admin" else self.controller_token
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(cfg)
