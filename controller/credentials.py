"""Bearer tokens that rotate: a projected service-account token, or a kubeconfig user's
``tokenFile``, re-read from their file as client-go does.

The kubernetes Python client reads a kubeconfig's ``tokenFile`` once and never again, and
re-reads the in-cluster token only when a timer says so; after a rotation it sends the old
token and gets 401 until the process restarts (field-reports.md R11, ../shared/cases). client-go
re-reads the file at most every minute (``transport.NewCachedFileTokenSource``) and, after a
401, asks for a fresh token and retries the request once. :class:`TokenFile` is that cache;
:class:`RotatingTokenApiClient` the retry for every request made through the generated
client; :class:`informers.transport.ApiClientTransport` does the same for LIST and WATCH.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import structlog
from kubernetes import client as k8s

# client-go's cached file token source re-reads the file after this long (transport/token_source.go).
TOKEN_REREAD_PERIOD = 60.0

log = structlog.get_logger("credentials")


class TokenFile:
    """The bearer token in ``path``, as ``"Bearer <token>"``: read at first use, re-read
    once it is ``period`` seconds old, and at once after a 401 (:meth:`renew`).

    ``on_unauthorized`` is called once per 401 answer (for the metric). Thread-safe.

    :raises OSError: the file cannot be read at first use (later failures keep the last
        token: a file being rewritten by the kubelet is briefly empty or absent).
    """

    def __init__(self, path: str | Path, period: float = TOKEN_REREAD_PERIOD,
                 clock: Callable[[], float] = time.monotonic,
                 on_unauthorized: Callable[[], None] | None = None) -> None:
        self.path = Path(path)
        self.period = period
        self.on_unauthorized = on_unauthorized
        self._clock = clock
        self._lock = threading.Lock()
        self._header = ""
        self._read_at = float("-inf")

    def header(self) -> str:
        """The ``Authorization`` header value to send now."""
        with self._lock:
            if self._clock() - self._read_at >= self.period:
                self._read()
            return self._header

    def renew(self, sent: str | None) -> bool:
        """After a 401 for a request sent with ``sent``: re-read the file unless another
        request already did since; True when the header to send now differs from ``sent``
        (worth one retry), False when the file holds the token that was refused."""
        if self.on_unauthorized is not None:
            self.on_unauthorized()
        with self._lock:
            if self._header == sent:
                self._read()
                log.info("the API server refused the token (401); token file re-read", path=str(self.path),
                         renewed=self._header != sent)
            return self._header != sent

    def _read(self) -> None:
        try:
            token = self.path.read_text().strip()
        except OSError:
            if not self._header:
                raise
            token = ""
        if token:
            self._header = f"Bearer {token}"
        self._read_at = self._clock()


class RotatingTokenApiClient(k8s.ApiClient):
    """A ``kubernetes.client.ApiClient`` whose bearer token comes from a :class:`TokenFile`
    and whose requests are retried once, with the renewed token, after a 401 (client-go's
    behaviour; field-reports.md R11). Everything else is the generated client's."""

    def __init__(self, configuration: k8s.Configuration, token: TokenFile) -> None:
        self.token = token
        configuration.api_key.pop("authorization", None)
        configuration.api_key_prefix.pop("BearerToken", None)
        configuration.api_key["BearerToken"] = token.header()
        configuration.refresh_api_key_hook = self._refresh
        super().__init__(configuration)

    def _refresh(self, configuration: k8s.Configuration) -> None:
        configuration.api_key["BearerToken"] = self.token.header()

    def call_api(self, method, url, header_params=None, body=None, post_params=None,  # type: ignore[override]
                 _request_timeout=None, before_retry: Callable[[], None] | None = None):
        """The generated client's ``call_api``, retried once with the renewed token after a
        401. ``before_retry`` is called before that second send and may raise to refuse it
        (the leader fence of a write, :class:`controller.runtime.kube.KubeWriter`): a 401 means the
        first was not carried out, and the retry is a new send."""
        response = super().call_api(method, url, header_params=header_params, body=body, post_params=post_params,
                                    _request_timeout=_request_timeout)
        if response.status != 401:
            return response
        sent = (header_params or {}).get("authorization")
        if not self.token.renew(sent):
            return response
        response.read()  # drain: the connection goes back to the pool
        if before_retry is not None:
            before_retry()
        headers = dict(header_params or {}, authorization=self.token.header())
        return super().call_api(method, url, header_params=headers, body=body, post_params=post_params,
                                _request_timeout=_request_timeout)
