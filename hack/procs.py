"""Processes of the test bed by pid (not necessarily our children): alive, state, stop.
Shared by hack/cluster.py (its components) and hack/dataplane.py (the chassis' daemons)."""

from __future__ import annotations

import os
import signal
import time


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    return pid_state(pid) not in ("Z", "")


def pid_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat (R, S, T for stopped, Z, ...); "" if unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def wait_dead(pid: int, timeout: float) -> bool:
    """Whether ``pid`` is gone within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def terminate_pid(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM, wait, then SIGKILL. Works for processes that are not our children."""
    if not pid_alive(pid):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if wait_dead(pid, timeout):
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    wait_dead(pid, 5)
