"""A CRD conversion webhook of the test's own for capmox's ProxmoxMachine (field report R8):
an HTTPS server on loopback that converts between v1alpha1 (``network.default`` +
``additionalDevices[]``, ``ipv4PoolRef``/``ipv6PoolRef``) and v1alpha2
(``network.networkDevices[]`` with ``ipPoolRef[]``) as capmox's webhook does
(../shared/spec/capmox-and-ipam.md), and answers 500 while :attr:`ConversionWebhook.failing`
is set, as capmox's does when its pod is broken."""

from __future__ import annotations

import base64
import copy
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.pki import CA, SERVER_AUTH

GROUP = "infrastructure.cluster.x-k8s.io"


def _to_v1alpha2(spec: dict) -> dict:
    net = spec.get("network")
    if not isinstance(net, dict) or "networkDevices" in net:
        return spec
    devices = []
    for name, dev in [("net0", net.get("default"))] + [(d.get("name"), d) for d in net.get("additionalDevices") or []]:
        if not isinstance(dev, dict):
            continue
        out = {k: v for k, v in dev.items() if k not in ("ipv4PoolRef", "ipv6PoolRef", "name")}
        refs = [dev[k] for k in ("ipv4PoolRef", "ipv6PoolRef") if dev.get(k)]
        devices.append({"name": name, **out, **({"ipPoolRef": refs} if refs else {})})
    rest = {k: v for k, v in net.items() if k not in ("default", "additionalDevices")}
    return {**spec, "network": {**rest, "networkDevices": devices}}


def _to_v1alpha1(spec: dict) -> dict:
    net = spec.get("network")
    if not isinstance(net, dict) or "networkDevices" not in net:
        return spec
    out: dict[str, Any] = {k: v for k, v in net.items() if k != "networkDevices"}
    for dev in net.get("networkDevices") or []:
        d = {k: v for k, v in dev.items() if k not in ("ipPoolRef", "name")}
        refs = dev.get("ipPoolRef") or []
        if refs:
            d["ipv4PoolRef"] = refs[0]
        if len(refs) > 1:
            d["ipv6PoolRef"] = refs[1]
        if dev.get("name", "net0") == "net0":
            out["default"] = d
        else:
            out.setdefault("additionalDevices", []).append({"name": dev["name"], **d})
    return {**spec, "network": out}


def convert(obj: dict, desired: str) -> dict:
    """``obj`` as ``desired`` (``<group>/<version>``)."""
    out = copy.deepcopy(obj)
    version = desired.rsplit("/", 1)[-1]
    spec = out.get("spec") or {}
    out["spec"] = _to_v1alpha2(spec) if version == "v1alpha2" else _to_v1alpha1(spec)
    out["apiVersion"] = desired
    return out


class ConversionWebhook:
    """The server; :meth:`patch_crd` points the ProxmoxMachine CRD at it."""

    def __init__(self, workdir: Path) -> None:
        self.failing = threading.Event()
        self.calls = {"ok": 0, "failed": 0}
        ca = CA("conversion-webhook-ca")
        leaf = ca.issue("conversion-webhook", SERVER_AUTH, san=["127.0.0.1"])
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "tls.crt").write_bytes(leaf.cert)
        (workdir / "tls.key").write_bytes(leaf.key)
        self.ca_bundle = base64.b64encode(ca.cert_pem).decode()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                review = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                if hook.failing.is_set():
                    hook.calls["failed"] += 1
                    body = b"conversion backend unavailable"
                    self.send_response(500)
                else:
                    hook.calls["ok"] += 1
                    req = review["request"]
                    body = json.dumps({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                                       "response": {"uid": req["uid"], "result": {"status": "Success"},
                                                    "convertedObjects": [convert(o, req["desiredAPIVersion"])
                                                                         for o in req["objects"]]}}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(workdir / "tls.crt", workdir / "tls.key")
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}/convert"
        threading.Thread(target=self.server.serve_forever, name="conversion-webhook", daemon=True).start()

    def configure_crd(self, api_client: Any, storage: str, served: dict[str, bool]) -> None:
        """Point the ProxmoxMachine CRD's conversion at this webhook, store ``storage``,
        serve the versions as ``served`` says (read, changed, replaced: the versions are a list)."""
        from kubernetes import client as k8s

        ext = k8s.ApiextensionsV1Api(api_client)
        name = f"proxmoxmachines.{GROUP}"
        crd = api_client.sanitize_for_serialization(ext.read_custom_resource_definition(name))
        crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
            "conversionReviewVersions": ["v1"], "clientConfig": {"url": self.url, "caBundle": self.ca_bundle}}}
        for v in crd["spec"]["versions"]:
            v["storage"] = v["name"] == storage
            v["served"] = served.get(v["name"], v["served"])
        ext.replace_custom_resource_definition(name, crd)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
