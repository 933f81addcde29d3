#!/usr/bin/env python3
"""Performance benchmark: convergence, its API floor, restart recovery, steady state, memory.

    python hack/bench.py [--sizes 100,500,2000] [--zones 5] [--out docs/performance.md]
                         [--profile-size 500] [--workdir DIR] [--threads 4]
                         [--shared-provider] [--controller-tree DIR] [--label TEXT]

For each size N, on a fresh LocalCluster (etcd + kube-apiserver on loopback, no OVN NB):

1. ``zones`` ProxmoxNetworkZones, each with range 1-4094: by default each on its own
   ProviderNetwork (status ready); with ``--shared-provider`` all of them on ONE
   ProviderNetwork, so their ranges overlap completely and every allocation competes for the
   same IDs (the layout of issue 12).
2. The controller, a separate process as the controller user, waits with empty caches.
   ``--controller-tree DIR`` runs the controller from another checkout (e.g. a worktree of
   an earlier commit); the bed, the CRDs and this harness stay those of this tree.
3. Convergence: N ProxmoxNetworks (over 10 namespaces, round-robin over the zones) are
   created by ``threads`` admin threads; timed from the first create until every network has
   VLANAllocated=True/Allocated and status.observedGeneration == metadata.generation.
   (Ready stays False: there are no Subnets. That is expected.) When the count stops moving
   for 30 s after the creates are done (e.g. networks held in VLANConflict), the run is not
   converged: it is reported as a failure.
3b. Allocation check, after convergence: the Vlans of the bench networks per provider, the
   distinct IDs on each provider, every ID held by two Vlans of one provider, and the
   networks with VLANAllocated=True. A duplicate, a missing Vlan or a network not allocated
   fails the run: it is printed as FAILED, marked in the tables, and the exit status is 1.
   A failed run skips steps 4-6 (the floor, 7, is still measured).
4. Restart recovery: SIGTERM, start again with --resync-period=30s; time until the
   "resync complete" line of the start pass; controller writes in that window (audit log).
5. Steady state: the next periodic resync pass; its writes and controller CPU (utime+stime).
6. Memory: VmRSS after convergence and after the restart pass.
7. Floor (controller stopped): the same client library doing the same API work with no
   controller logic: per network create it, create its Vlan, add the finalizer (JSON patch),
   PUT the status; ``threads`` threads.

One size (``--profile-size``) runs the converging controller under yappi (hack/benchkit/
profiled_main.py; all threads, CPU clock) and the report lists the top functions.

Gateway runs (``--gateway 250x10,1000x1``: N networks spread over VPCS VPCs), each on a fresh
LocalCluster with an OVN NB (no SB/northd) and gateway management on; see
``hack.benchkit.gateway.run_gateway``:
start → every network RouterPortMissing; all router ports made in one NB transaction → time
until every network is GatewayReady=True, NB write transactions (the controller's
``cozy_proxmox_gateway_nb_transactions_total``), CPU, API writes; then a restart pass and a
periodic pass (NB transactions, API writes, CPU). ``--gateway-profile NxV`` runs one more
restart of that run under yappi.

    python hack/bench.py --sizes 100,500,2000 --profile-size 2000 \
        --gateway 250x10,500x10,1000x10,250x1,500x1,1000x1 --gateway-profile 1000x1 \
        --out docs/performance.md --json results.json
    python hack/bench.py --sizes '' --gateway 1000x1 --merge-json results.json --out ...  # redo a part

Only the command line: the benchmark is the package hack/benchkit/ (``hack.benchkit.suite.run``).
``--out`` replaces the block between ``<!-- bench:begin -->`` and ``<!-- bench:end -->`` of the
file (appended with a heading when the markers are missing); the text around it is kept.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hack.benchkit import controller  # noqa: E402
from hack.benchkit.suite import parse_gateway, run  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,500", help="main benchmark sizes ('' to skip)")
    ap.add_argument("--zones", type=int, default=5)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--shared-provider", action="store_true",
                    help="main runs: every zone on ONE ProviderNetwork with overlapping ranges (1-4094 each); "
                         "default: one ProviderNetwork per zone")
    ap.add_argument("--controller-tree", type=Path, default=None,
                    help="run the controller from this checkout (e.g. a git worktree of an earlier commit); "
                         "main runs only")
    ap.add_argument("--label", default=None,
                    help="name of this code in the tables (default: none for this tree, the commit for "
                         "--controller-tree); a run replaces an earlier one with the same N, layout and label")
    ap.add_argument("--gateway", default="", help="gateway runs as NxVPCS,... e.g. 250x10,500x10,1000x10,1000x1")
    ap.add_argument("--gateway-profile", default="", help="one gateway run (NxVPCS) profiled with yappi")
    ap.add_argument("--gateway-profile-phase", choices=("restart", "converge"), default="restart",
                    help="restart: one more restart (start pass + a periodic pass) under yappi; "
                         "converge: the first controller (start, router ports → GatewayReady) under yappi")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown tables here")
    ap.add_argument("--json", type=Path, default=None, help="also write raw results here")
    ap.add_argument("--merge-json", type=Path, action="append", default=[],
                    help="start from the results in this JSON file (runs of this invocation replace its sections)")
    ap.add_argument("--profile-size", type=int, default=None,
                    help="run this N's converging controller under yappi (its figures are then slowed by the profiler)")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, audit)")
    args = ap.parse_args(argv)
    gw_runs = parse_gateway(args.gateway)
    if gw_runs and (args.shared_provider or args.controller_tree or args.label):
        ap.error("--shared-provider, --controller-tree and --label apply to main runs only (the gateway tables "
                 "do not tell layouts or trees apart): run them without --gateway")
    if args.controller_tree is not None:
        controller.CONTROLLER_TREE = args.controller_tree.resolve()
        if not (controller.CONTROLLER_TREE / "controller" / "main.py").exists():
            ap.error(f"--controller-tree {controller.CONTROLLER_TREE}: no controller/main.py there")
    return run(sizes=[int(s) for s in args.sizes.split(",") if s], gw_runs=gw_runs, zones=args.zones,
               threads=args.threads, shared_provider=args.shared_provider, label=args.label,
               gateway_profile=args.gateway_profile, gateway_profile_phase=args.gateway_profile_phase, out=args.out,
               json_out=args.json, merge_json=args.merge_json, profile_size=args.profile_size, workdir=args.workdir,
               keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
