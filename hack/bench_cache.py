"""Bytes per cached object, per kind, as served less managedFields (the informer's default
transform) and as projected (controller/watch/projection.py; issue 29).

    python3 hack/bench_cache.py [--count 2000] [--report docs/performance.md]

For each kind ``--count`` objects of hack/benchkit/population.py go through the transform and are
kept in a list, as a store keeps them; tracemalloc measures what the kept objects retain
(the transform's garbage is freed first), divided by the count. One process, one run: the
two columns are compared within it. The figures go between the ``cache-bytes`` markers of
the report.

Only the command line: the benchmark's body is hack/benchkit/cache.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hack.benchkit.cache import command  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--report", type=Path, help="write the table between the cache-bytes markers of this file")
    a = ap.parse_args(argv)
    return command(a)


if __name__ == "__main__":
    sys.exit(main())
