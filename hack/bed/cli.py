#!/usr/bin/env python3
"""Local test bed: etcd + kube-apiserver + OVN (NB and SB ovsdb-servers, ovn-northd), on loopback.

See product-decisions.md §5 and §7. The CLI of ``hack.bed.LocalCluster``::

    python hack/cluster.py start --dir DIR [--no-watch-cache] [--no-nb] [--no-sb] [--no-peers] [--node]
    python hack/cluster.py env   --dir DIR      # shell exports for a running bed
    python hack/cluster.py stop  --dir DIR      # works from any process (pid files)

Binaries come from hack/build-control-plane.sh (cached under ~/.cache); set
``PNC_CONTROL_PLANE_BIN`` to use another directory. Unless ``--no-peers`` (or ``--no-sb``) the bed also runs the
real kube-ovn-controller and in-cluster IPAM provider from hack/build-peers.sh (issue 13;
``PNC_PEERS_DIR`` for another build). Nothing listens on anything but 127.0.0.1 and unix
sockets inside the work directory, except what ``--node`` adds (hack/bed/node.py, issue 17): the
kubelet listens on this machine's own address (a node IP cannot be a loopback one), and the
forwarders to the API server and the NB on the node's pod bridge (its gateway address, for
the pods of that bridge only).
"""

# This module's one job is the command line (hack/cluster.py runs it); its docstring above is the
# --help text, as it was in hack/cluster.py.

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from hack.bed.cluster import LocalCluster
from hack.bed.common import ClusterError



def _cmd_stop(workdir: Path) -> int:
    try:
        with_node = json.loads((Path(workdir) / "state.json").read_text()).get("with_node", False)
    except (OSError, ValueError):
        with_node = (Path(workdir) / "node").is_dir()
    c = LocalCluster(workdir, with_nb=False, with_node=with_node)
    pids = c._read_pids()
    if not pids:
        print(f"nothing running in {c.workdir}", file=sys.stderr)
        return 0
    c.stop()
    (c.workdir / "state.json").unlink(missing_ok=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start", help="start a bed in DIR and leave it running")
    s.add_argument("--dir", required=True, type=Path,
                   help="the bed's work directory (certificates, data, logs, pid files, state.json); made if missing")
    s.add_argument("--no-watch-cache", action="store_true",
                   help="kube-apiserver with --watch-cache=false (every watch from etcd: a compaction gives 410)")
    s.add_argument("--no-nb", action="store_true", help="no OVN databases at all (NB, SB, ovn-northd, peers)")
    s.add_argument("--no-sb", action="store_true", help="no OVN SB ovsdb-server and no ovn-northd")
    s.add_argument(
        "--peers", action=argparse.BooleanOptionalAction, default=None,
        help="run the real kube-ovn-controller and IPAM provider (hack/build-peers.sh); "
        "default: on when the bed has the NB and SB",
    )
    s.add_argument("--node", action="store_true",
                   help="also a node: containerd, kubelet, kube-controller-manager, kube-scheduler (hack/bed/node.py)")
    s.add_argument(
        "--dataplane", action=argparse.BooleanOptionalAction, default=None,
        help="real OVN chassis, a trunk and VMs in network namespaces (hack/bed/dataplane.py); "
        "default: on with the peers, as root",
    )
    for name, what in (("stop", "stop every process of the bed in DIR (by its pid files; from any process), "
                                "its node's pods and data plane included"),
                       ("env", "print shell exports (PNC_SERVER, PNC_ADMIN_KUBECONFIG, PNC_NB_TCP, ...) for the running bed in DIR")):
        p = sub.add_parser(name, help=what, description=what)
        p.add_argument("--dir", required=True, type=Path, help="the work directory the bed was started with")
    args = ap.parse_args(argv)

    if args.cmd == "start":
        c = LocalCluster(
            args.dir,
            watch_cache=not args.no_watch_cache,
            with_nb=not args.no_nb,
            with_sb=not args.no_sb,
            detach=True,
            with_peers=args.peers,
            with_node=args.node,
            with_dataplane=args.dataplane,
        )
        try:
            c.start()
        except ClusterError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(f"started in {c.start_seconds:.1f}s: {c.server} (state in {c.workdir / 'state.json'})", file=sys.stderr)
        if c.node is not None:
            print(f"node {c.node.name} ({c.node.ip}) Ready {c.node_ready_seconds:.1f}s after the kubelet's start",
                  file=sys.stderr)
        if c.dataplane is not None:
            print(f"data plane: {len(c.dataplane.chassis)} chassis up in {c.dataplane.start_seconds:.1f}s; Kube-OVN's node "
                  f"agent on each, done (Node annotation and ready label its own, chassis in the SB) "
                  f"{c.agents_seconds:.1f}s after its start", file=sys.stderr)
        for k, v in c.env().items():
            print(f"export {k}={v}")
        return 0
    if args.cmd == "stop":
        return _cmd_stop(args.dir)
    if args.cmd == "env":
        try:
            c = LocalCluster.attach(args.dir)
        except ClusterError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        for k, v in c.env().items():
            print(f"export {k}={v}")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
