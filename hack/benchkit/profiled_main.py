"""Run ``controller.main`` under yappi (all threads, CPU clock) for hack/bench.py.

    python -m hack.benchkit.profiled_main OUT.pstat [controller flags...]

cProfile only sees the main thread, and the controller's work happens in worker,
informer and resync threads; yappi profiles every thread. On exit (SIGTERM is handled by
controller.main, which returns) the stats are saved in pstat format for ``pstats``.
"""

from __future__ import annotations

import sys

import yappi


def run() -> int:
    out, argv = sys.argv[1], sys.argv[2:]
    from controller.main import main  # import outside the profile: startup is not the subject

    yappi.set_clock_type("cpu")
    yappi.start(builtins=False, profile_threads=True)
    try:
        rc = main(argv)
    finally:
        yappi.stop()
        yappi.get_func_stats().save(out, type="pstat")
    return rc


if __name__ == "__main__":
    sys.exit(run())
