"""tests.support.schedstat: a child's run-queue wait, read after its exit and before its reaping
(what the SIGTERM exit bound of tests/test_peer_outage_integration.py leaves out; issue 28)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.schedstat import runqueue_wait, wait_exited


def test_an_exited_child_is_awaited_without_being_reaped():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(7)"],
                             stdin=subprocess.PIPE)
    try:
        assert wait_exited(child.pid, 0.2) is False  # still reading its stdin
        before = runqueue_wait(child.pid)
        child.stdin.close()  # end of input: it exits
        assert wait_exited(child.pid, 30) is True
        after = runqueue_wait(child.pid)  # a zombie keeps its figures
        assert 0.0 <= before <= after
        assert child.wait(timeout=5) == 7  # the exit status was left to its owner
        with pytest.raises(OSError):
            runqueue_wait(child.pid)  # reaped: gone
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
