"""HTTP access for the reflector: one LIST page, or one streaming WATCH.

Built on the official client's ``ApiClient`` (auth headers, TLS, proxy, host
from its ``Configuration``) but not on its generated API methods or
``kubernetes.watch.Watch``: objects stay plain JSON dicts (CRDs need no model
classes), and the watch body is read by our own line reader, so that 410s,
bookmarks and client read timeouts are handled our way (field reports
field-reports.md B11/B12).
"""

from __future__ import annotations

import json
import threading
from urllib.parse import urlencode
from typing import Iterator, Protocol, Sequence

import urllib3
from kubernetes.client.exceptions import ApiException

Query = Sequence[tuple[str, str]]

# Metadata-only answers (client-go's metadata informers): the server sends each object as a
# meta.k8s.io/v1 PartialObjectMetadata, no spec and no status. Plain JSON comes back from a
# server that cannot (then the informer's transform drops the rest).
ACCEPT_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
ACCEPT_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

# How much one read of the watch body may return. read1() returns as soon as
# any bytes are there, so this bounds memory, not latency.
_READ_SIZE = 64 * 1024


class WatchStream(Protocol):
    """An open watch response."""

    def chunks(self) -> Iterator[bytes]:
        """Body bytes as they arrive; ends on a clean end of the response.
        Raises urllib3/socket errors on read timeouts and dropped connections."""

    def abort(self) -> None:
        """Unblock a reader in another thread and drop the connection (idempotent)."""

    def close(self) -> None:
        """Release the connection (idempotent)."""


class Transport(Protocol):
    """What the reflector needs from the API server (a fake in unit tests)."""

    def list(self, path: str, query: Query, timeout: tuple[float, float], metadata_only: bool = False) -> dict:
        """GET a collection page; the decoded JSON body (``metadata_only``: asked for as a
        ``PartialObjectMetadataList``). Raises ``ApiException`` for a non-2xx status,
        urllib3/socket errors for transport failures."""

    def watch(self, path: str, query: Query, timeout: tuple[float, float],
              metadata_only: bool = False) -> WatchStream:
        """Start a watch (``metadata_only``: events carry ``PartialObjectMetadata``); raises
        ``ApiException`` for a non-2xx status."""


def status_code_of(exc: ApiException) -> int | None:
    """The ``code`` of the ``Status`` in an error body, else the HTTP status."""
    try:
        body = json.loads(exc.body) if exc.body else None
        if isinstance(body, dict) and isinstance(body.get("code"), int):
            return body["code"]
    except (ValueError, TypeError):
        pass
    return exc.status


def api_error_text(exc: ApiException) -> str:
    """``HTTP <code>: <the Status message>`` of an error answer (the body's ``message``, else
    the HTTP reason), e.g. ``HTTP 500: conversion webhook for … failed: …``."""
    message = ""
    try:
        body = json.loads(exc.body) if exc.body else None
        if isinstance(body, dict):
            message = str(body.get("message") or "")
    except (ValueError, TypeError):
        message = str(exc.body or "")[:300]
    return f"HTTP {status_code_of(exc)}: {message or exc.reason or 'no message'}"


def retry_after_seconds(exc: ApiException) -> float:
    """Seconds the server asked us to wait (``Retry-After`` header or the
    Status ``details.retryAfterSeconds``), 0 if none."""
    try:
        header = (exc.headers or {}).get("Retry-After")
        if header:
            return max(0.0, float(header))
    except (TypeError, ValueError, AttributeError):
        pass
    try:
        body = json.loads(exc.body) if exc.body else None
        value = ((body or {}).get("details") or {}).get("retryAfterSeconds")
        return max(0.0, float(value)) if value is not None else 0.0
    except (ValueError, TypeError, AttributeError):
        return 0.0


class _UrllibWatchStream:
    def __init__(self, resp: urllib3.BaseHTTPResponse) -> None:
        self._resp = resp
        self._lock = threading.Lock()
        self._closed = False

    def chunks(self) -> Iterator[bytes]:
        while True:
            data = self._resp.read1(_READ_SIZE)
            if not data:
                return
            yield data

    def abort(self) -> None:
        with self._lock:
            if self._closed:
                return
            # close() alone does not wake a thread blocked in recv() on Linux;
            # shutdown(SHUT_RD) does (urllib3 >= 2.3 exposes it).
            try:
                self._resp.shutdown()
            except Exception:
                pass
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            # Never return a half-read watch connection to the pool.
            self._resp.close()
        except Exception:
            pass
        try:
            self._resp.release_conn()
        except Exception:
            pass


class ApiClientTransport:
    """:class:`Transport` over a ``kubernetes.client.ApiClient``.

    Requests take host, default headers and the bearer token (incl. its
    refresh hook) from the client's ``Configuration`` and go straight to the
    ``rest_client``'s urllib3 pool (TLS, client certificates, proxy as
    configured) with ``preload_content=False`` and
    ``retries=False``: the reflector owns retrying and backoff, and urllib3's
    default retry would silently repeat a timed-out watch (hiding the read
    timeout we count) and wrap errors in ``MaxRetryError``.

    ``timeout`` is ``(connect, read)`` seconds; the read timeout applies to
    every socket read, so a silent half-open connection raises
    ``urllib3.exceptions.ReadTimeoutError`` instead of hanging (field-reports.md B11).
    """

    def __init__(self, api_client) -> None:
        self._api_client = api_client

    def _headers(self, accept: str = "application/json") -> dict[str, str]:
        # Built from the Configuration only (host, auth_settings()), which has
        # the same shape in the old (<= v34) and new (pydantic) generated
        # clients; auth_settings() also runs the token refresh hook.
        cfg = self._api_client.configuration
        headers = dict(self._api_client.default_headers)
        headers["Accept"] = accept
        if getattr(self._api_client, "cookie", None):
            headers["Cookie"] = self._api_client.cookie
        for setting in cfg.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        return headers

    def _open(self, path: str, query: Query, timeout: tuple[float, float],
              accept: str = "application/json") -> urllib3.BaseHTTPResponse:
        """GET ``path``; after a 401, once more when the client's token rotated since it was
        sent (``controller.credentials.TokenFile.renew``, as client-go retries once): a
        rotated token is never the LIST's or WATCH's own error (field-reports.md R11)."""
        url = self._api_client.configuration.host.rstrip("/") + path
        if query:
            url += "?" + urlencode(list(query))
        headers = self._headers(accept)
        resp = self._send(url, headers, timeout)
        token = getattr(self._api_client, "token", None)
        if resp.status == 401 and token is not None and token.renew(headers.get("authorization")):
            resp.drain_conn()
            resp.release_conn()
            resp = self._send(url, self._headers(accept), timeout)
        return resp

    def _send(self, url: str, headers: dict[str, str], timeout: tuple[float, float]) -> urllib3.BaseHTTPResponse:
        pool = self._api_client.rest_client.pool_manager
        return pool.request(
            "GET",
            url,
            headers=headers,
            timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
            preload_content=False,
            retries=False,
        )

    @staticmethod
    def _raise_for_status(resp: urllib3.BaseHTTPResponse) -> None:
        if 200 <= resp.status <= 299:
            return
        try:
            body = resp.read().decode("utf-8", "replace")
        finally:
            resp.release_conn()
        exc = ApiException(status=resp.status, reason=resp.reason, body=body)
        exc.headers = resp.headers
        raise exc

    def list(self, path: str, query: Query, timeout: tuple[float, float], metadata_only: bool = False) -> dict:
        resp = self._open(path, query, timeout, ACCEPT_METADATA_LIST if metadata_only else "application/json")
        self._raise_for_status(resp)
        try:
            data = resp.read()
        finally:
            resp.release_conn()
        return json.loads(data)

    def watch(self, path: str, query: Query, timeout: tuple[float, float],
              metadata_only: bool = False) -> WatchStream:
        resp = self._open(path, query, timeout, ACCEPT_METADATA if metadata_only else "application/json")
        self._raise_for_status(resp)
        return _UrllibWatchStream(resp)
