#!/usr/bin/env python3
"""End-to-end benchmark on the real peers (issue 13): N networks from create to Ready.

    python hack/bench_e2e.py [--n 500] [--vpcs 10] [--zones 5] [--threads 4]
                             [--out docs/performance.md] [--json FILE] [--workdir DIR] [--keep]

One fresh :class:`~hack.bed.LocalCluster` with the OVN NB and SB, ``ovn-northd`` and the
real kube-ovn-controller and in-cluster IPAM provider (hack/build-peers.sh):

1. Objects nobody times: ``zones`` ProviderNetworks (one per zone, each zone range 1-4094),
   three trunk Nodes carrying every provider (the ready label Kube-OVN's node agent sets,
   the chassis annotation ovn-controller sets), ``vpcs`` Vpcs (awaited up), 10 namespaces.
2. The controller as a separate process (gateway management on, the bed's NB), caches synced.
3. The timed part: ``threads`` admin threads create, per network, what a chart applies
   together: the ProxmoxNetwork, its Subnet (VPC ``vpc-<i mod vpcs>``, ``vlan`` = the
   Subnet's name, ``logicalGateway: true``, a /24 of its own, the pool's range excluded) and
   its InClusterIPPool. Timed from the first create until every network is ``Ready=True``
   and ``GatewayReady=True`` at its current generation and the NB holds one
   HA_Chassis_Group ``px-*`` per network. Kube-OVN makes each logical switch, localnet
   port and router port; the controller allocates the VLAN and sets the group.
4. Teardown, also timed: every network, Subnet and pool deleted at once; until no network,
   no Vlan of ours and no group ``px-*`` is left (Kube-OVN's finalizer and pruning, the
   provider's ProtectPool, the controller's release).

For each phase: wall time; CPU seconds (utime+stime from /proc) and API writes (audit log,
per user) of the controller, kube-ovn-controller and the IPAM provider; the controller's NB
write transactions (its metric). The admin's own creates are counted apart. Figures go to
the ``bench-e2e`` block of ``--out``.

Only the command line: the benchmark's body is hack/benchkit/e2e.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hack.benchkit.e2e import command  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--vpcs", type=int, default=10)
    ap.add_argument("--zones", type=int, default=5)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None, help="write the figures block into this markdown file")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, audit)")
    args = ap.parse_args(argv)
    return command(args, argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
