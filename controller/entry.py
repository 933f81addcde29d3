"""The ``proxmox-network-controller`` console script: the signal handlers of
:mod:`controller.runtime.signals` first, then the program (:func:`controller.main.main`).

In a container the controller is PID 1, and PID 1 ignores a SIGTERM it has no handler for:
a pod deleted while the process still imports would run on until the kubelet kills it at the
end of its grace period. So the handlers are installed before anything heavy is imported,
and this module imports only the standard library and :mod:`controller.runtime.signals`.
"""

from __future__ import annotations

from controller.runtime.signals import SignalStop


def main() -> int:
    """Console script: :class:`SignalStop` installed, then :func:`controller.main.main`."""
    stop = SignalStop().install()
    from controller import main as program  # after the handlers: the heavy imports

    return program.main(signals=stop)


