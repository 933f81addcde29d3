"""tests.support.schedstat: a child's run-queue wait, read after its exit and before its reaping
(what the SIGTERM exit bound of tests/test_peer_outage_integration.py leaves out; issue 28)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.schedstat import parse_runqueue_wait, runqueue_wait, wait_exited


def test_the_wait_is_the_second_of_the_three_figures_in_nanoseconds():
    # sched-stats.rst: time on the cpu, time waiting on a runqueue, timeslices run
    assert parse_runqueue_wait("100 2500000000 7\n") == 2.5
    assert parse_runqueue_wait("0 0 0") == 0.0  # a kernel without schedstat: nothing left out
    for bad in ("", "1 2", "1 2 3 4", "a b c"):
        with pytest.raises(ValueError):
            parse_runqueue_wait(bad)


def test_an_exited_child_is_awaited_without_being_reaped():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(7)"],
                             stdin=subprocess.PIPE)
    pidfd = os.pidfd_open(child.pid)
    try:
        assert wait_exited(pidfd, child.pid, 0.2) is False  # still reading its stdin
        assert wait_exited(pidfd, child.pid, -1) is False  # a spent budget: a look, not a block
        before = runqueue_wait(child.pid)
        child.stdin.close()  # end of input: it exits
        assert wait_exited(pidfd, child.pid, 30) is True
        after = runqueue_wait(child.pid)  # a zombie keeps its figures
        assert 0.0 <= before <= after
        assert child.wait(timeout=5) == 7  # the exit status was left to its owner
        with pytest.raises(OSError):
            runqueue_wait(child.pid)  # reaped: gone
    finally:
        os.close(pidfd)
        if child.poll() is None:
            child.kill()
            child.wait()


def test_the_calling_threads_own_wait_is_read_without_a_pid():
    first = runqueue_wait()
    assert 0.0 <= first <= runqueue_wait()
