"""Time spent waiting for a CPU, to tell a span's own time from a busy machine's (issue 28).

``/proc/<pid>/schedstat`` (and ``/proc/thread-self/schedstat``) hold three figures for one
thread: nanoseconds run on a CPU, nanoseconds runnable but waiting on a run queue, and time
slices run (the Linux kernel's Documentation/scheduler/sched-stats.rst); for a pid they are the
main thread's, not a sum over its threads. The second grows only while the thread could run
and the CPU went to someone else: on a shared machine kept busy (the flake hunt's hog), that
is the share of a wall-clock span it was owed and did not get. A thread asleep (on a lock, a
join, the GIL, I/O) gathers none. A zombie (exited, not yet reaped) keeps its figures. A
kernel built without schedstat shows no file (``OSError``) or zeros (then nothing is left out).
"""

from __future__ import annotations

import os
import select


def parse_runqueue_wait(schedstat: str) -> float:
    """Seconds waited on a run queue from a schedstat line (``"<run ns> <wait ns> <slices>"``).

    :raises ValueError: not such a line."""
    fields = schedstat.split()
    if len(fields) != 3:
        raise ValueError(f"not a schedstat line: {schedstat!r}")
    return int(fields[1]) / 1e9


def runqueue_wait(pid: int | None = None) -> float:
    """Seconds the main thread of ``pid`` (None: the calling thread) has waited on a run queue.

    :raises OSError: no such process (already reaped), or a kernel without schedstat."""
    path = "/proc/thread-self/schedstat" if pid is None else f"/proc/{pid}/schedstat"
    with open(path) as f:
        return parse_runqueue_wait(f.read())


def wait_exited(pidfd: int, pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for the child ``pid`` (``pidfd`` its ``os.pidfd_open``)
    to exit, without reaping it (``waitid(WNOWAIT)``: its ``/proc`` entry and exit status stay
    for the caller).

    :returns: True once it has exited, False at the timeout (a negative one counts as 0)."""
    poller = select.poll()  # not select(): a worker with many beds may hold descriptors past 1024
    poller.register(pidfd, select.POLLIN)  # a pidfd turns readable when its process has exited
    if not poller.poll(max(0.0, timeout) * 1000):  # poll() blocks for ever on a negative one
        return False
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    return True
