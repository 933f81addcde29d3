#!/usr/bin/env python3
"""Memory and CPU of the controller's pod at N networks (issue 17 part 6).

The Deployment of manifests/ on the bed's node (hack/bed/deploy.py; root), on a bed without the
peers; hack/bench.py's load shape: ``--zones`` zones of range 1-4094, each on its own
ProviderNetwork, ``--n`` networks created by ``--threads`` admin threads. By default with
``--manage-gateway-chassis=false`` (the networks have no Subnets); ``--gateway VPCS`` keeps
the shipped gateway management on and adds hack/bench.py's gateway shape: a bound Ready
Subnet per network in ``VPCS`` VPCs, a pool per namespace, trunk Nodes, then every router
port in the NB, until every network is ``GatewayReady=True``. Sampled
every ``--interval`` seconds from the host, for every pod of the Deployment:

* the working set as the kubelet computes it, from the container's memory cgroup (v1 here):
  ``memory.usage_in_bytes`` minus ``total_inactive_file`` of ``memory.stat``, and the
  cgroup's ``memory.limit_in_bytes`` and ``failcnt``;
* CPU: ``cpuacct.usage`` and the CFS throttling of ``cpu.stat`` (``nr_periods``,
  ``nr_throttled``, ``throttled_time``) against ``cpu.cfs_quota_us``.

Phases: ``converge`` (from the first create until every network is ``VLANAllocated=True``
for its generation), ``settled`` (30 s after), then ``rollout`` (``kubectl rollout restart``
at N: until a new pod leads and is Ready, plus 30 s: its start lists all N networks and
Vlans). The kubelet's summary API (through the API server's node proxy) is read at the end
of each phase to check the cgroup figure. Prints one line per phase and pod and, with
``--json``, writes every sample.

``--population SCALE`` (issue 29) first grows the cluster around the running pods with
hack/bench_scale.py's population (at 1: 5,000 Namespaces, 500 Nodes, 2,000 Subnets, 50,000
IPs, 20,000 address/claim pairs, 5,000 machines; phase ``populate``, the caches fill from
their watches), then creates the ``--n`` networks with bench_scale's shape (two providers);
the rollout's new pods then start by listing all of it. The populated Nodes have no
kubelet, so the Deployment is pinned to the bed's node (``nodeSelector``) for the run.
The last line counts OOM kills: the pods' restarts and the containers' last termination
reasons, and the memory cgroups' ``failcnt``.

    python3 hack/pod_memory.py --n 2000                         # ~6 min on 2 cores
    python3 hack/pod_memory.py --n 4000 --population 1          # ~20 min

Only the command line: the benchmark's body is hack/benchkit/pod_memory.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hack.benchkit.pod_memory import command  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="networks")
    ap.add_argument("--zones", type=int, default=5)
    ap.add_argument("--threads", type=int, default=4, help="admin threads creating the networks")
    ap.add_argument("--gateway", type=int, default=0, metavar="VPCS",
                    help="gateway management on, with the networks' router ports in VPCS VPCs (0: off)")
    ap.add_argument("--population", type=float, default=0.0, metavar="SCALE",
                    help="grow the cluster first with hack/bench_scale.py's population at SCALE (1: the issue's)")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    ap.add_argument("--settle", type=float, default=30.0, help="seconds sampled after convergence and after the rollout")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/pnc-pod-memory"))
    ap.add_argument("--json", type=Path, default=None, help="write every sample here")
    args = ap.parse_args(argv)
    if args.population and args.gateway:
        ap.error("--population runs without gateway management (bench_scale's networks have no Subnets)")
    return command(args)


if __name__ == "__main__":
    sys.exit(main())
