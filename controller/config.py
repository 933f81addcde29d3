"""Process configuration shared by the controller and ``doctor``: the flag value parsers
(Go booleans and durations, ``<namespace>/<name>``) and the API client from a kubeconfig or
the in-cluster service account."""

from __future__ import annotations

import argparse
import os
import socket
import struct
from pathlib import Path

import durationpy
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.incluster_config import SERVICE_TOKEN_FILENAME
from kubernetes.config.kube_config import KUBE_CONFIG_DEFAULT_LOCATION

from controller.credentials import RotatingTokenApiClient, TokenFile


def parse_bool(value: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "t", "true", "yes"):
        return True
    if v in ("0", "f", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {value!r}")


def parse_overlay_mtu(value: str) -> int:
    """``--overlay-mtu``: 0 (leave ``options:gateway_mtu`` alone) or 576-65520, the range of a
    zone's ``spec.mtu`` (admission-and-packaging.md). Raises ArgumentTypeError."""
    try:
        mtu = int(value.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid MTU {value!r}: not an integer") from None
    if mtu != 0 and not 576 <= mtu <= 65520:
        raise argparse.ArgumentTypeError(f"invalid MTU {mtu}: 0 or 576-65520")
    return mtu


def parse_duration(value: str) -> float:
    """Go duration (``10m``, ``1h30m``, ``250ms``) to seconds. Raises ArgumentTypeError."""
    try:
        return durationpy.from_str(value.strip()).total_seconds()
    except Exception as exc:  # durationpy raises several types
        raise argparse.ArgumentTypeError(f"invalid duration {value!r}: {exc}") from None


def parse_tls_secret(value: str) -> tuple[str, str]:
    """``<namespace>/<name>``, split at the first ``/`` (reference-behaviour.md §14)."""
    ns, sep, name = value.partition("/")
    if not sep or not ns or not name or "/" in name:
        raise argparse.ArgumentTypeError(f'--ovn-tls-secret "{value}": want <namespace>/<name>')
    return ns, name


# Every informer holds one watch connection and workers write in parallel: urllib3's
# default pool (5 x CPUs) would discard connections under load.
CONNECTION_POOL_SIZE = 64

ABORTIVE_CLOSE = (socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
"""``SO_LINGER`` on with a zero timeout: closing the socket (or the process dying, which
closes it) resets the connection and drops whatever the kernel has not delivered yet.

field-reports.md S3: with the ordinary close, a request sent while the API server was out of
reach stays in the kernel's send queue and is retransmitted after the process has died,
until the path heals; a write the old leader sent before its renew deadline could then land
after the new leader had acted (seen on loopback in a network namespace: the bytes arrived
when the link came back, seconds after the sender had closed the socket). With this option
the death of the process ends everything it sent but not yet delivered. Bytes the server's
kernel already received are not recalled (a TCP reset does not drop them); those arrived
before the process died, so before a standby could take over."""

SOCKET_OPTIONS = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1), ABORTIVE_CLOSE]
"""Options of every API connection: urllib3's default (``TCP_NODELAY``) and :data:`ABORTIVE_CLOSE`."""


def load_api_client(kubeconfig: str | None) -> k8s.ApiClient:
    """An ApiClient from ``kubeconfig``, else the in-cluster config, else ``~/.kube/config``."""
    return load_api_client_and_source(kubeconfig)[0]


def load_api_client_and_source(kubeconfig: str | None) -> tuple[k8s.ApiClient, str]:
    """:func:`load_api_client` and where its configuration came from: ``"kubeconfig"``
    (the flag), ``"in-cluster"`` (the pod's service account token and CA, the API server at
    ``$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``) or ``"default kubeconfig"``
    ($KUBECONFIG or ``~/.kube/config``). A token read from a file (in-cluster, or a
    kubeconfig user's ``tokenFile``) is re-read as it rotates, and a 401 retried once with
    the new one (:mod:`controller.credentials`, field-reports.md R11). Raises what the kubernetes client's
    loaders raise (``ConfigException``, ``OSError``)."""
    cfg = k8s.Configuration()
    token_file: Path | None = None
    if kubeconfig:
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        source = "kubeconfig"
        token_file = _token_file(kubeconfig)
    else:
        try:
            k8s_config.load_incluster_config(client_configuration=cfg)
            source = "in-cluster"
            token_file = Path(SERVICE_TOKEN_FILENAME)
        except k8s_config.ConfigException:
            k8s_config.load_kube_config(client_configuration=cfg)
            source = "default kubeconfig"
            token_file = _token_file(os.path.expanduser(KUBE_CONFIG_DEFAULT_LOCATION.split(os.pathsep)[0]))
    cfg.connection_pool_maxsize = CONNECTION_POOL_SIZE
    cfg.socket_options = list(SOCKET_OPTIONS)
    if token_file is not None:
        return RotatingTokenApiClient(cfg, TokenFile(token_file)), source
    if kubeconfig and _static_credentials(kubeconfig):
        # The loader's refresh hook re-reads the kubeconfig on every request (~6% of CPU
        # in docs/performance.md); a static token or client certificate never changes.
        cfg.refresh_api_key_hook = None
    return k8s.ApiClient(cfg), source


def _current_user(path: str) -> dict | None:
    """The current context's user of the kubeconfig at ``path``, or None if unreadable."""
    try:
        import yaml

        doc = yaml.safe_load(open(path)) or {}
        ctx = next(c["context"] for c in doc.get("contexts") or [] if c.get("name") == doc.get("current-context"))
        user = next(u["user"] for u in doc.get("users") or [] if u.get("name") == ctx.get("user"))
    except (OSError, StopIteration, KeyError, TypeError, AttributeError, ValueError):
        return None
    return user if isinstance(user, dict) else None


def _token_file(path: str) -> Path | None:
    """The current user's ``tokenFile`` (relative to the kubeconfig's directory, as
    kubectl resolves it), when it has one and no inline ``token`` (which wins in client-go)."""
    user = _current_user(path)
    if not user or user.get("token") or not user.get("tokenFile"):
        return None
    return Path(path).resolve().parent / Path(os.path.expanduser(str(user["tokenFile"])))


def _static_credentials(path: str) -> bool:
    """True when the kubeconfig's current user has a token or client certificate and no
    exec plugin or auth provider (whose credentials expire and must be refreshed)."""
    user = _current_user(path)
    if user is None or "exec" in user or "auth-provider" in user or "tokenFile" in user:
        return False
    return bool(user.get("token") or user.get("client-certificate") or user.get("client-certificate-data"))
