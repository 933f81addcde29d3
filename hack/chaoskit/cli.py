#!/usr/bin/env python3
"""Chaos harness: two controller replicas under load while the bed is broken on purpose.

product-decisions.md §6 ("no VLAN is ever held by two networks of one provider, and no VLAN
is released while a consumer exists or while Kube-OVN still lists a live subnet on it —
under restarts, cache lag and kills") and field reports B01, B11, B12, B13.

What runs (all on loopback, in a bed of its own, because the API server is restarted):

* a :class:`~hack.bed.LocalCluster` (etcd + kube-apiserver + OVN NB/SB + ovn-northd)
  with the real peers (``with_peers``, hack/build-peers.sh): kube-ovn-controller (hack/versions.env; v1.15.24)
  and the in-cluster IPAM provider v1.0.3. Kube-OVN makes the logical switches, localnet and
  router ports, ``Vlan.status.subnets`` (pruned on a Subnet's delete event) and its own
  Subnet finalizer; the provider fulfils IPAddressClaims (``v1beta1``, the newest version
  cluster-api v1.10 serves), counts pools and holds them with ``ProtectPool``. The harness
  makes what they need: a Kube-OVN ``Vpc`` per namespace (each Subnet is a VLAN Subnet of
  its namespace's VPC with ``logicalGateway: true``, so Kube-OVN makes the router port our
  HA chassis group goes on), ProviderNetworks (``spec.defaultInterface``, names ≤ 12 bytes),
  and three trunk Nodes carrying every provider network (the ready label Kube-OVN's node
  agent would set, from which kube-ovn-controller writes the ProviderNetworks' status, and
  an OVN chassis). A :class:`PeerSupervisor` keeps the peers running: a peer that exits
  without the harness killing it is started again and reported (expected within a minute of
  an API server or NB outage or an etcd compaction, unexpected otherwise);
* two controller replicas as subprocesses (``python -m controller.main --leader-elect=true
  --manage-gateway-chassis=true --ovn-nb-address=<the bed's NB>``; ``--manage-gateway
  false`` turns gateway management off), kept alive by a :class:`Supervisor` the way a
  Deployment keeps its pods: a replica that exits (SIGKILL, or "leadership lost" after an
  API outage) is started again. With ``--pods`` (``ChaosConfig.pods``; root) the bed has its
  node (hack/bed/node.py) and the controller is the Deployment of manifests/ instead
  (:class:`PodReplicas`, hack/bed/deploy.py): its ReplicaSet and the kubelet keep the pods
  running, and the faults include the pod kinds below; the supervisor stays for where the
  node cannot start;
* a :class:`GarbageCollector` standing in for kube-controller-manager's (claim-owned
  IPAddresses whose claim is gone are deleted) and for the operator who removes the
  provider's ProtectAddress finalizer from such an address: kube-apiserver can delete a new
  claim under the provider's just-added finalizer (kubernetes/kubernetes#77988), and the
  provider then makes an address for a claim that is gone and never lets go of it;
* a :class:`Loader` that creates and deletes networks (with their Subnet and pool),
  ProxmoxMachines (both capmox versions), IPAddressClaims and IPAddresses across several
  namespaces and two kinds of zones: ``zones`` zones alternating over two provider networks
  with disjoint ranges, and ``shared_zones`` zones all on a third provider network with one
  and the same range (the layout of issue 12: zones that share a provider compete for the
  same IDs, so only the per-provider lock and the assumed set keep them apart);
* an :class:`InvariantMonitor` with its own watches (not the product's informers) on Vlans,
  Subnets, networks, machines, addresses and claims. It checks, on every Vlan event, that no
  two Vlans share an ID on one provider (whatever their zones: the check is keyed by
  ``spec.provider`` and ``spec.id`` only), and records every Vlan deletion with its
  resourceVersion; a deletion is judged against the history of the other kinds at that
  resourceVersion (a consumer of the network's pool, or a subnet listed in the deleted
  Vlan's ``status.subnets`` that still existed, is a violation).

* with the bed's data plane (root; ``--wire``, on by default with gateway management): a
  :class:`~hack.chaoskit.wire_monitor.WireMonitor`, a tenant of its own whose VM pings its gateway
  every 0.1 s from before the first fault until the teardown; the gateway is OVN's and the
  controller only writes the group, so a lost echo reply is a violation.

Faults, injected at random points of the load: ``kill`` (SIGKILL of the leader), ``api``
(kube-apiserver killed and started again on the same port; the peers stay up and
reconnect), ``compact`` (etcd compaction to the current revision), ``nb`` (the NB
ovsdb-server stopped and started again with its database), ``kubeovn`` (kube-ovn-controller
SIGKILLed, started again after ``peer_down`` seconds) and ``ipam`` (the same for the IPAM
provider); with ``--pods``: ``poddelete`` (the leader's pod deleted), ``podkill`` (``kill -9``
of the leader container's process, found from the host), ``rollout`` (``kubectl rollout
restart``, the load going on until a new pod leads) and ``oom`` (the Deployment's memory
limit lowered until the kernel OOM-kills its pods, then restored); for each, the time to a
new Lease holder, to a Ready one and to a whole Deployment. After each fault the loader pauses (it finishes the step it is in) and the time
until every network has converged is measured: a live network Ready with its VLAN, a deleted
one gone together with its Vlan. After the last fault everything is torn down and the bed
must hold no Vlan, no ``proxmox.cozystack.io/`` finalizer, no HA_Chassis_Group of ours and
no router port pointing at one, and nothing the load deleted (Subnets, pools, claims,
addresses, machines: a deletion stuck on Kube-OVN's or the provider's finalizer); what
Kube-OVN itself leaves in the NB for the load's Subnets is reported, not failed.

Long form (figures into docs/reliability.md)::

    python hack/chaos.py --kills 50 --api-restarts 5 --compactions 5 --nb-restarts 5 \\
        --kubeovn-restarts 5 --ipam-restarts 5

On the Deployment's pods (figures into the pods' block of docs/reliability.md)::

    python hack/chaos.py --pods --pod-deletes 15 --pod-kills 15 --rollouts 10 --ooms 5 \
        --api-restarts 2 --compactions 2 --nb-restarts 2 --kubeovn-restarts 1 --ipam-restarts 1

Short forms: ``tests/test_chaos_integration.py`` (marker ``chaos``; the pods' one also
``node`` and ``image``) calls :func:`run` with a small :class:`ChaosConfig`.
"""

# This module's one job is the command line (hack/chaos.py runs it); its docstring above is the
# --help text, as it was in hack/chaos.py.

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

from hack.chaoskit.audit import recheck_duplicates, recheck_open
from hack.chaoskit.common import REPO
from hack.chaoskit.config import ChaosConfig, ChaosResult, FaultRecord
from hack.chaoskit.load import SHARED_PROVIDER
from hack.chaoskit.report import write_figures
from hack.chaoskit.runner import run


def main(argv: list[str] | None = None) -> int:
    import faulthandler

    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid>: every thread's stack on stderr
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", action="store_true",
                    help="run the controller as the Deployment of manifests/ on the bed's node (root; hack/bed/deploy.py) "
                         "instead of supervised subprocesses, and make the pod faults")
    ap.add_argument("--kills", type=int, default=None,
                    help="SIGKILL of the leader subprocess (default 50; not with --pods: see --pod-kills)")
    ap.add_argument("--pod-deletes", type=int, default=None, help="the leader's pod deleted (--pods; default 15)")
    ap.add_argument("--pod-kills", type=int, default=None,
                    help="kill -9 of the leader container's process from the host (--pods; default 15)")
    ap.add_argument("--rollouts", type=int, default=None, help="kubectl rollout restart under load (--pods; default 10)")
    ap.add_argument("--ooms", type=int, default=None,
                    help="the memory limit lowered until the pods are OOM-killed, then restored (--pods; default 5)")
    ap.add_argument("--oom-limit", default=ChaosConfig.oom_limit, help="the lowered memory limit of the oom fault")
    ap.add_argument("--api-restarts", type=int, default=5)
    ap.add_argument("--compactions", type=int, default=5)
    ap.add_argument("--nb-restarts", type=int, default=5)
    ap.add_argument("--kubeovn-restarts", type=int, default=5,
                    help="kube-ovn-controller SIGKILLed and started again (the `kubeovn` fault)")
    ap.add_argument("--ipam-restarts", type=int, default=5,
                    help="the IPAM provider SIGKILLed and started again (the `ipam` fault)")
    ap.add_argument("--peer-down", type=float, default=ChaosConfig.peer_down,
                    help="seconds a killed peer stays down")
    ap.add_argument("--slots", type=int, default=30)
    ap.add_argument("--initial-networks", type=int, default=20)
    ap.add_argument("--namespaces", type=int, default=4)
    ap.add_argument("--zones", type=int, default=4, help="zones over two provider networks, disjoint ranges")
    ap.add_argument("--shared-zones", type=int, default=ChaosConfig.shared_zones,
                    help=f"zones all on a third provider network ({SHARED_PROVIDER}) with one and the same range "
                         "(issue 12's layout; 0: none)")
    ap.add_argument("--shared-range", default=ChaosConfig.shared_range, help="the range of every shared zone")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--duration", type=float, default=0.0,
                    help="stop injecting faults after this many seconds (0: inject them all)")
    ap.add_argument("--converge-timeout", type=float, default=180.0)
    from controller.config import parse_bool

    ap.add_argument("--manage-gateway", type=parse_bool, default=True,
                    help="run the replicas with HA chassis group management on (default true)")
    ap.add_argument("--wire", type=parse_bool, default=True,
                    help="a VM on the bed's data plane pings its gateway through the run; a lost reply is a "
                         "violation (default true; needs root and gateway management)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs) even on success")
    ap.add_argument("--report", default=str(REPO / "docs" / "reliability.md"),
                    help="markdown file whose figures block is replaced ('' to skip)")
    ap.add_argument("--json", default="", help="also write the raw result as JSON here")
    ap.add_argument("--recheck", nargs=2, metavar=("RESULT_JSON", "AUDIT_LOG"),
                    help="re-judge a finished run's duplicate flags against its audit log and write its figures")
    args = ap.parse_args(argv)
    if args.recheck:
        result_json, audit_log = (Path(a) for a in args.recheck)
        if not audit_log.is_file():
            ap.error(f"--recheck: no audit log at {audit_log}")
        try:
            raw = json.loads(result_json.read_text())
            raw["faults"] = [FaultRecord(**f) for f in raw["faults"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            ap.error(f"--recheck: {result_json} is not a result of --json ({type(e).__name__}: {e})")
        res = ChaosResult(**{k: v for k, v in raw.items() if k in ChaosResult.__dataclass_fields__})
        res.violations, refuted = recheck_duplicates(res.violations, Path(args.recheck[1]))
        res.refuted += refuted
        res.uncertain, resolved, late = recheck_open(res.uncertain, Path(args.recheck[1]))
        res.resolved += resolved
        res.violations += late
        print(res.summary())
        if args.report:
            write_figures(Path(args.report), res)
        return 0 if res.ok else 1
    def pick(value: int | None, with_pods: int, without: int) -> int:
        return value if value is not None else (with_pods if args.pods else without)

    cfg = ChaosConfig(kills=pick(args.kills, 0, 50), api_restarts=args.api_restarts, compactions=args.compactions,
                      nb_restarts=args.nb_restarts, kubeovn_restarts=args.kubeovn_restarts,
                      ipam_restarts=args.ipam_restarts, peer_down=args.peer_down, slots=args.slots, initial_networks=args.initial_networks,
                      namespaces=args.namespaces, zones=args.zones, shared_zones=args.shared_zones,
                      shared_range=args.shared_range, seed=args.seed,
                      converge_timeout=args.converge_timeout, workdir=args.workdir, keep_workdir=args.keep)
    cfg.duration = args.duration
    cfg.manage_gateway = args.manage_gateway
    cfg.wire = args.wire and args.manage_gateway  # without the group the VM gets no answer at all (the seed's bug)
    cfg.pods = args.pods
    cfg.pod_deletes, cfg.pod_kills = pick(args.pod_deletes, 15, 0), pick(args.pod_kills, 15, 0)
    cfg.rollouts, cfg.ooms = pick(args.rollouts, 10, 0), pick(args.ooms, 5, 0)
    cfg.oom_limit = args.oom_limit
    try:
        cfg.check()
    except ValueError as exc:
        ap.error(str(exc))
    try:
        res = run(cfg)
    except Exception:
        traceback.print_exc()
        return 1
    print(res.summary())
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(res), indent=2, default=str))
    if args.report:
        write_figures(Path(args.report), res)
        print(f"figures written to {args.report}")
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
