"""A bed and its admin client for a test module: started, yielded, stopped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hack.bed import ClusterError, LocalCluster
from hack.tools.objects import Admin


def running(c: LocalCluster, what: str) -> Iterator[LocalCluster]:
    """Start ``c``, yield it, stop it. Fails the test (never skips) naming ``what`` when the
    bed does not start."""
    try:
        c.start()
    except ClusterError as e:
        pytest.fail(f"{what} did not start: {e}", pytrace=False)
    try:
        yield c
    finally:
        c.stop()


def admin_of(bed: LocalCluster) -> Iterator[Admin]:
    """The bed's admin client (:class:`Admin`), closed after the module."""
    api = bed.api_client("admin")
    try:
        yield Admin(api)
    finally:
        api.close()
