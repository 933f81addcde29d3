"""A bed with a node (containerd, kubelet, controller manager, scheduler) for a test module."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.bed import LocalCluster
from tests.support.beds import running


def node_bed(workdir: Path, with_peers: bool) -> Iterator[LocalCluster]:
    """Start a :class:`LocalCluster` with a node in ``workdir`` (and the real peers when
    ``with_peers``), yield it, stop it. Fails the test (never skips) when not root or when
    the bed does not start."""
    if os.geteuid() != 0:
        pytest.fail("the node needs root (containerd, kubelet)", pytrace=False)
    yield from running(LocalCluster(workdir, with_peers=with_peers, with_node=True, with_dataplane=False),
                       f"bed with a node{' and the peers' if with_peers else ''}")
