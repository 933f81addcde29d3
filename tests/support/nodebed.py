"""A bed with a node (containerd, kubelet, controller manager, scheduler) for a test module."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.bed import ClusterError, LocalCluster


def node_bed(workdir: Path, with_peers: bool) -> Iterator[LocalCluster]:
    """Start a :class:`LocalCluster` with a node in ``workdir`` (and the real peers when
    ``with_peers``), yield it, stop it. Fails the test (never skips) when not root or when
    the bed does not start."""
    if os.geteuid() != 0:
        pytest.fail("the node needs root (containerd, kubelet)", pytrace=False)
    c = LocalCluster(workdir, with_peers=with_peers, with_node=True, with_dataplane=False)
    try:
        c.start()
    except ClusterError as e:
        pytest.fail(f"bed with a node{' and the peers' if with_peers else ''} did not start: {e}", pytrace=False)
    try:
        yield c
    finally:
        c.stop()
