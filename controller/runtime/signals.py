"""SIGTERM and SIGINT as a stop event, and the main thread's wait for it (standard library
only: :mod:`controller.entry` installs this before any heavy import).

Two rules:

* A handler does no I/O and takes no lock: it records the signal and sets the stop event from
  a thread of its own (``Event.set`` takes the event's lock, which the interrupted main
  thread may hold inside ``Event.wait``; a log write could re-enter the stream the main
  thread is writing to).
* The main thread waits for the stop event only through :func:`wait`, in slices: CPython runs
  a Python signal handler in the main thread at its next bytecode, while the kernel may
  deliver a process-directed SIGTERM to any thread, so a main thread blocked in a plain
  ``Event.wait()`` would never run it.
"""

from __future__ import annotations

import signal
import threading
import time


SIGNAL_POLL = 0.25  # seconds: the longest a pending signal handler waits for the main thread


class SignalStop:
    """``event`` is set once SIGTERM or SIGINT arrives; ``received`` names the first one."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.received = ""

    def install(self) -> "SignalStop":
        """Install the handlers (main thread only, as :func:`signal.signal` requires)."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        return self

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.received = self.received or signal.Signals(signum).name
        threading.Thread(target=self.event.set, name="signal", daemon=True).start()


def wait(event: threading.Event, timeout: float | None = None) -> bool:
    """``event.wait(timeout)`` for the main thread: in slices of at most :data:`SIGNAL_POLL`
    seconds, so a signal the kernel delivered to another thread has its Python handler run
    (by this thread, between two slices) within that time.

    :param timeout: seconds, or None to wait until the event is set.
    :returns: True once the event is set; False when ``timeout`` passed first."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        step = SIGNAL_POLL if deadline is None else min(SIGNAL_POLL, deadline - time.monotonic())
        if step <= 0:
            return event.is_set()
        if event.wait(step):
            return True
