#!/usr/bin/env python3
"""Issue 12's burst, repeated: does one controller process give two Vlans the same ID?

    python hack/burst.py --runs R --networks N [--before-tree DIR] [--threads 4]
                         [--workdir DIR] [--keep] [--json FILE]

Each run, on a fresh LocalCluster (etcd + kube-apiserver on loopback, no OVN NB), has the
shape of the report:

1. One ProviderNetwork ``physnet1`` (status ready), five ProxmoxNetworkZones ``zone-0..4``
   all on it, each ``vlanRanges: ["1-4094"]``, and the namespaces ``bench-0..9``.
2. The controller as a separate process, as the controller's user, default workers,
   ``--leader-elect=false --manage-gateway-chassis=false``; it starts with empty caches.
3. N ProxmoxNetworks (network i in zone ``zone-<i mod 5>``, namespace ``bench-<i mod 10>``,
   no Subnets) created by ``--threads`` admin threads.
4. Wait until every network has a status for its generation with VLANAllocated either
   True/Allocated or False/VLANConflict (the reason a duplicated ID gives both holders);
   the time from the first create is the convergence time.
5. Count through the API: Vlans on ``physnet1``, distinct IDs, IDs held more than once
   (duplicates), whether the IDs are exactly 1..N (lowest free), networks with
   VLANAllocated=True and with VLANConflict, and error lines in the controller's log.

One line per run, then a summary. ``--before-tree DIR`` runs the controller from another
source tree (e.g. a git worktree of an earlier commit) with this harness and this bed.
The controller process, the network bodies and the creating threads come from hack/benchkit/.

Only the command line: the benchmark's body is hack/benchkit/burst.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hack.benchkit.burst import command  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--networks", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=4, help="admin threads creating the networks")
    ap.add_argument("--before-tree", type=Path, default=None,
                    help="run the controller from this source tree instead of this repository")
    ap.add_argument("--timeout", type=float, default=None, help="convergence limit per run (s)")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, audit)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    tree = (args.before_tree or REPO).resolve()
    if not (tree / "controller" / "main.py").is_file():
        ap.error(f"{tree} has no controller/main.py")
    return command(args, tree)


if __name__ == "__main__":
    sys.exit(main())
