"""What every part of the chaos harness shares: the API groups and labels it writes and reads,
its log line, and :func:`retry` of an API call while the API server may be away."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable

from kubernetes.client.rest import ApiException

REPO = Path(__file__).resolve().parent.parent.parent


OUR_PREFIX = "proxmox.cozystack.io/"
PX = ("proxmox.cozystack.io", "v1alpha1")
KUBEOVN = ("kubeovn.io", "v1")
IPAM_POOL = ("ipam.cluster.x-k8s.io", "v1alpha2")
# IPAddress / IPAddressClaim: cluster-api v1.10 (the IPAM provider's) serves v1alpha1 and v1beta1 only.
IPAM_ADDR = ("ipam.cluster.x-k8s.io", "v1beta1")
CAPMOX = "infrastructure.cluster.x-k8s.io"
LABEL_NS = "proxmox.cozystack.io/network-namespace"
LABEL_NAME = "proxmox.cozystack.io/network-name"
LABEL_ZONE = "proxmox.cozystack.io/zone"


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def api_status(exc: BaseException) -> int | None:
    return getattr(exc, "status", None) if isinstance(exc, ApiException) else None


def retry(fn: Callable[[], Any], what: str, deadline: float = 120.0, ok_statuses: tuple[int, ...] = ()) -> Any:
    """Call ``fn`` until it succeeds (the API server may be down for a while).

    A status in ``ok_statuses`` (409 AlreadyExists on a create, 404 on a delete) counts as
    done, since an earlier attempt may have gone through before the connection broke.
    """
    end = time.monotonic() + deadline
    delay = 0.2
    while True:
        try:
            return fn()
        except ApiException as exc:
            if exc.status in ok_statuses:
                return None
            if exc.status is not None and 400 <= exc.status < 500 and exc.status not in (429, 409):
                raise
            err: BaseException = exc
        except Exception as exc:  # connection refused / reset while the API server restarts
            err = exc
        if time.monotonic() > end:
            raise RuntimeError(f"{what}: still failing after {deadline:.0f}s: {err!r}")
        time.sleep(delay)
        delay = min(delay * 2, 2.0)
