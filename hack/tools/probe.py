"""Small HTTP helpers for probing controller processes in tests and hack/ harnesses."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families


def get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    """HTTP status and body of a GET of ``url``; ``(0, "")`` when nothing answers (refused,
    reset, timeout)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError:
        return 0, ""


def status_of(url: str, timeout: float = 2.0) -> int:
    """HTTP status of a GET of ``url``; 0 when nothing answers (refused, reset, timeout)."""
    return get(url, timeout)[0]


Labels = frozenset  # of (label, value) pairs


def samples(url: str, name: str, timeout: float = 5.0) -> dict[Labels, float]:
    """The samples named ``name`` (the full sample name: ``x_total`` for a counter ``x``) in
    the Prometheus text exposition at ``url``, by label set.

    :raises OSError: nothing answers at ``url`` or it answers an HTTP error.
    """
    with urllib.request.urlopen(url, timeout=timeout) as r:
        text = r.read().decode()
    return {frozenset(s.labels.items()): s.value
            for family in text_string_to_metric_families(text) for s in family.samples if s.name == name}


_SERVING = re.compile(r"serving (probes|metrics)\b")
_ADDRESS = re.compile(r"\baddress\W+([0-9.]+:[0-9]+)")  # key=value (console) or "key": "value" (JSON)


class Endpoints:
    """The probe and metrics addresses (``host:port``) a controller process started with
    ``--health-probe-bind-address=127.0.0.1:0 --metrics-bind-address=127.0.0.1:0`` logged it
    bound ("serving probes" / "serving metrics", controller.main; console or JSON format),
    read from ``log``. The kernel picks the ports when the process binds them, so no other
    process can take them between a choice and the bind."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def address(self, what: str) -> str | None:
        """The last address logged for ``what`` ("probes" or "metrics"), or None before it."""
        try:
            text = self.log.read_text(errors="replace")
        except FileNotFoundError:
            return None
        found = [a.group(1) for line in text.splitlines()
                 if (m := _SERVING.search(line)) and m.group(1) == what and (a := _ADDRESS.search(line))]
        return found[-1] if found else None

    def get(self, path: str) -> tuple[int, str]:
        """HTTP status and body of a GET of ``path`` on the probe server; ``(0, "")`` before
        it is served."""
        addr = self.address("probes")
        return get(f"http://{addr}{path}") if addr else (0, "")

    def status(self, path: str) -> int:
        """HTTP status of a GET of ``path`` on the probe server; 0 before it is served."""
        return self.get(path)[0]

    def metrics_url(self) -> str:
        """``http://<metrics address>/metrics``.

        :raises LookupError: the process has not logged it yet.
        """
        addr = self.address("metrics")
        if addr is None:
            raise LookupError(f"{self.log}: no 'serving metrics' line yet")
        return f"http://{addr}/metrics"

    def samples(self, name: str) -> dict[Labels, float]:
        """:func:`samples` of ``name`` on this process's metrics server.

        :raises LookupError: the process has not logged its metrics address yet.
        :raises OSError: the metrics server does not answer.
        """
        return samples(self.metrics_url(), name)

    def leads(self) -> bool:
        """The process says it holds the leader Lease (``cozy_proxmox_leader`` is 1); False
        while it does not answer. Readiness is serving, not leading (product-decisions §9), so
        ``/readyz`` cannot tell."""
        try:
            return self.samples("cozy_proxmox_leader").get(frozenset()) == 1
        except (OSError, LookupError):
            return False
