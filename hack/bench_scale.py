#!/usr/bin/env python3
"""Cluster-scale benchmark (issue 29 item 1): the controller in a cluster that is large in
the kinds it caches without owning them, not only in its networks.

    python hack/bench_scale.py [--scale 1.0] [--networks 4000] [--rest 600] [--threads 4]
                               [--controller-tree DIR] [--label TEXT] [--out docs/performance.md]
                               [--json FILE] [--workdir DIR] [--keep]
    python hack/bench_scale.py --vlan-space [--reuse-delay 60] [--release 100] [--out ...]

``--vlan-space`` is issue 29 item 3 instead (hack/benchkit/vlan_space.py): one provider, one zone
over 1-4094, 4,094 networks, the 4,095th ``ZoneExhausted``, releases reused after the delay.

On a fresh LocalCluster (etcd + kube-apiserver on loopback, no OVN), through the API as the
admin, ``--threads`` threads:

1. The population, shaped by hack/benchkit/population.py (at ``--scale 1``): 5,000 Namespaces,
   500 Nodes (labels of both providers, Kube-OVN annotations, kubelet status), 2,000
   Kube-OVN Subnets over 200 VPCs, 50,000 Kube-OVN ``IP`` objects spread over them,
   20,000 ``IPAddress``/``IPAddressClaim`` pairs and 5,000 ``ProxmoxMachine`` (half created
   as v1alpha1, half as v1alpha2). Object counts scale with ``--scale``.
2. Two ProviderNetworks (ready), one zone on each with range 1-4094, and ``--networks``
   ProxmoxNetworks (10 per namespace, alternating zones; no Subnets of their own, so they
   converge at VLANAllocated=True/Allocated, as in hack/bench.py).
3. The controller starts (a process, ``--leader-elect=false``, no gateway): seconds from
   exec to ``caches synced``, to every network converged (VLANAllocated=True/Allocated at
   the current generation) and to the start pass's ``resync complete``; its CPU seconds.
   RSS is sampled every 0.5 s (peak: the kernel's ``VmHWM``); settled RSS 60 s after the
   start pass.
4. Rest: ``--rest`` seconds (600 for the issue's figure) with nothing changing: CPU seconds
   and the controller user's API writes (audit log).
5. One restart: SIGTERM (seconds to exit), a new process: seconds to ``caches synced`` and to
   ``resync complete``, its writes (audit log), its peak RSS.
6. The allocation check of hack/bench.py: distinct IDs per provider, no ID twice on one
   provider, every network allocated. A failure is printed and the exit status is 1.

The pod's view (cgroup memory against the chart's limit) is hack/pod_memory.py's job; this
measures the process, which is what the limit has to hold.

Only the command line: the benchmark's bodies are hack/benchkit/scale.py and, with
``--vlan-space``, hack/benchkit/vlan_space.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hack.benchkit import scale, vlan_space  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="population as a fraction of the issue's (1 = full)")
    ap.add_argument("--networks", type=int, default=4000)
    ap.add_argument("--rest", type=float, default=600.0, help="seconds of rest measured")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--controller-tree", type=Path, default=None, help="run the controller from this checkout")
    ap.add_argument("--label", default="this tree")
    ap.add_argument("--out", type=Path, default=None, help="write the table here (between the scale markers)")
    ap.add_argument("--json", type=Path, default=None, help="append the run's figures to this JSON list")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, audit)")
    ap.add_argument("--vlan-space", action="store_true",
                    help="the full-VLAN-space run instead (issue 29 item 3): 4,094 networks on one provider, then more")
    ap.add_argument("--reuse-delay", type=float, default=60.0, help="--vlan-reuse-delay of the VLAN-space run, seconds")
    ap.add_argument("--release", type=int, default=100, help="networks released (and waiting) in the VLAN-space run")
    ap.add_argument("--space", type=int, default=vlan_space.VLAN_SPACE, help="the VLAN-space run's zone range 1-SPACE (4094: all)")
    args = ap.parse_args(argv)
    return (vlan_space.command if args.vlan_space else scale.command)(args)


if __name__ == "__main__":
    sys.exit(main())
