#!/usr/bin/env python3
"""On the wire: N networks from create to the first answered ARP of their VM (issue 25).

    python hack/bench_wire.py [--n 50] [--vpcs 5] [--out docs/performance.md] [--workdir DIR]

One fresh :class:`~hack.bed.LocalCluster` with the real peers and the data plane
(hack/bed/dataplane.py: three trunk chassis in network namespaces on Kube-OVN's OVS/OVN build),
the controller as a separate process (gateway management on, the bed's NB). The burst: at
t0 every network's objects are created together (network, Subnet with ``logicalGateway``
in one of ``vpcs`` VPCs, InClusterIPPool), as a chart applies them. As soon as a network
shows its VLAN in its status, its VM is made as capmox makes it (hack/tools/vms.py: the address
claimed from the network's pool through the real IPAM provider) with a broadcast ARP probe
for its gateway every 0.1 s (hack/bed/arp_probe.py). Per network: the seconds from t0 to the
first ARP answer. Written as p50 and max to the ``bench-wire`` block of ``--out``, with the
OVN and OVS builds.

Only the command line: the benchmark's body is hack/benchkit/wire.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hack.benchkit.wire import command  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--vpcs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "performance.md")
    ap.add_argument("--workdir", type=Path)
    args = ap.parse_args(argv)
    return command(args)


if __name__ == "__main__":
    sys.exit(main())
