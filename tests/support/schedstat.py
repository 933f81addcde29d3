"""A process's time waiting for a CPU, to tell its own time from a busy machine's (issue 28).

``/proc/<pid>/schedstat`` holds three figures for the process's main thread: nanoseconds run
on a CPU, nanoseconds runnable but waiting on a run queue, and time slices run (the Linux
kernel's Documentation/scheduler/sched-stats.rst). The second grows only while the thread
could run and the CPU went to another process: on a shared machine kept busy (the flake
hunt's hog), that is the share of a wall-clock span the process was owed and did not get.
A zombie (exited, not yet reaped) still has its figures, so they are read after the exit.
"""

from __future__ import annotations

import os
import select


def runqueue_wait(pid: int) -> float:
    """Seconds the main thread of ``pid`` has waited on a run queue since it started.

    :raises OSError: no such process (already reaped), or a kernel without schedstat."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


def wait_exited(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for the child ``pid`` to exit, without reaping it
    (``waitid(WNOWAIT)``: its ``/proc`` entry and exit status stay for the caller).

    :returns: True once it has exited, False at the timeout."""
    fd = os.pidfd_open(pid)
    try:
        readable, _, _ = select.select([fd], [], [], timeout)  # a pidfd turns readable at the exit
        if not readable:
            return False
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        return True
    finally:
        os.close(fd)
