"""The ``proxmox-network-controller`` console script: signal handlers first, then the
program (:func:`controller.main.main`).

In a container the controller is PID 1, and PID 1 ignores a SIGTERM for which it has no
handler: a pod deleted while it was still importing would run on until the kubelet kills it
at the end of its grace period (30 s), leading meanwhile (seen in the pods chaos run: a
replica deleted by a rollout 6 s after its start took the lease and was SIGKILLed 31 s
later). So the handlers are installed before anything heavy is imported. Standard library
only, on purpose.

A handler does no I/O and takes no lock: it records the signal and sets the stop event from
a thread of its own (``Event.set`` takes the event's lock, which the interrupted main thread
may hold inside ``Event.wait``; a log write could re-enter the stream the main thread is
writing to).
"""

from __future__ import annotations

import signal
import threading


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


def main() -> int:
    """Console script: :class:`SignalStop` installed, then :func:`controller.main.main`."""
    stop = SignalStop().install()
    from controller import main as program  # after the handlers: the heavy imports

    return program.main(signals=stop)
