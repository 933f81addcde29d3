"""Small HTTP helpers for probing controller processes in tests and hack/ harnesses."""

from __future__ import annotations

import urllib.error
import urllib.request


def status_of(url: str, timeout: float = 2.0) -> int:
    """HTTP status of a GET of ``url``; 0 when nothing answers (refused, reset, timeout)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0
