"""Processes of the test bed by pid (not necessarily our children): alive, state, stop, command
line; free loopback ports, a log's last lines and the parent-death signal of a child. Shared by
the bed's components (hack/bed/components.py) and the data plane's daemons
(hack/bed/dataplane.py); nothing of the bed's state."""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import random
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def spawn(argv: list[str], log: Path, pidfile: Path, *, detach: bool, env: dict[str, str] | None = None,
          cwd: Path | None = None) -> subprocess.Popen:
    """Start ``argv`` in a session of its own, its output appended to ``log``, its pid written
    to ``pidfile``. Unless ``detach``, it dies with this process (:func:`die_with_parent`)."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                                env=env, start_new_session=True, preexec_fn=None if detach else die_with_parent)
    pidfile.write_text(f"{proc.pid}\n")
    return proc


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


# Ports handed out come from below Linux's ephemeral range (ip_local_port_range, 32768-60999
# by default), so no connect() of any process takes one between our check and the
# component's bind; and each is reserved machine-wide for _PORT_HOLD seconds, so two beds
# started at once (pytest-xdist workers, a benchmark beside the suite) never get the same one.
_PORT_RANGE = (20000, 32767)
_PORT_HOLD = 1800.0
_PORT_BOOK = Path(tempfile.gettempdir()) / "pnc-free-ports.json"


def free_ports(n: int, *, port_range: tuple[int, int] = _PORT_RANGE, book_file: Path = _PORT_BOOK) -> list[int]:
    """``n`` distinct loopback ports of ``port_range`` (start inclusive, end exclusive), each
    free now (a bind without ``SO_REUSEADDR`` succeeds, so no listener and no connection in
    TIME_WAIT has it) and given to no other caller on this machine in the last 30 min (the
    book ``book_file``, read and written under an ``flock`` of its ``.lock`` beside it).
    Raises OSError when the range has no ``n`` such ports."""
    with open(book_file.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        now = time.time()
        try:
            book = {int(k): v for k, v in json.loads(book_file.read_text()).items() if v > now}
        except (OSError, ValueError, AttributeError):
            book = {}
        candidates = [p for p in range(*port_range) if p not in book]
        random.shuffle(candidates)
        chosen: list[int] = []
        for port in candidates:
            if len(chosen) == n:
                break
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            chosen.append(port)
        if len(chosen) < n:
            raise OSError(f"only {len(chosen)} of {n} free ports in {port_range[0]}-{port_range[1] - 1}")
        book.update((p, now + _PORT_HOLD) for p in chosen)
        tmp = book_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(book))
        tmp.replace(book_file)
        return chosen


def stop_pidfiles(d: Path, names: tuple[str, ...], timeout: float = 10.0,
                  procs: dict[str, subprocess.Popen] | None = None) -> None:
    """Stop the processes whose pid files ``<d>/<name>.pid`` are named, in ``names`` order
    (SIGTERM, SIGKILL after ``timeout``); a process of ``procs`` without a pid file by its
    handle. Removes the pid files."""
    for name in names:
        pidfile = d / f"{name}.pid"
        proc = (procs or {}).get(name)
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            pid = proc.pid if proc is not None else None
        if pid is not None and pid_alive(pid):
            terminate_pid(pid, timeout)
        if proc is not None:
            proc.poll()
        pidfile.unlink(missing_ok=True)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        data = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join(data[-lines:]) or f"(log {path} is empty)"


def die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort only
        pass


def _pid_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
