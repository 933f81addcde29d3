"""The chaos harness: two controller replicas under load while the bed is broken on purpose
(its whole description is its command line's help, hack/chaoskit/cli.py; the command line is
``python3 hack/chaos.py``). This package's names are the one place tests and scripts import
the harness from (``from hack.chaoskit import run, ChaosConfig``).

One job a file (docs/testing.md, "The hack/ layout"):

* ``runner.py``: :func:`run`, one run from the bed's start to the teardown's checks;
* ``config.py``: the fault kinds, :class:`ChaosConfig`, :class:`FaultRecord`, :class:`ChaosResult`;
* ``load.py``: the load's world (trunk Nodes, chassis, Vpcs) and the :class:`Loader`;
* ``faults.py``: the bed's faults (API server, NB, the peers' :class:`PeerSupervisor`);
* ``replicas.py``: the controller as supervised subprocesses (:class:`Supervisor`);
* ``pods.py``: the controller as its Deployment's pods and the pod faults (:class:`PodReplicas`);
* ``garbage.py``: the stand-in for kube-controller-manager's garbage collector;
* ``monitor.py``: the :class:`InvariantMonitor` and its watches;
* ``convergence.py``: what has not converged yet, what a teardown left;
* ``audit.py``: the API server's audit log, to recheck the monitor's flags;
* ``wire_monitor.py``: the :class:`WireMonitor`, a VM pinging its gateway through a run;
* ``report.py``: the figures block of docs/reliability.md;
* ``common.py``: the API groups and labels, ``log`` and ``retry``;
* ``cli.py``: the command line (run by hack/chaos.py).

The harness imports the bed (``hack.bed``, its Deployment ``hack.bed.deploy``) and the shared
tools (``hack.tools``); neither imports the harness.
"""

from hack.chaoskit.audit import recheck_duplicates, recheck_open, removal_times, vlan_lifetimes
from hack.chaoskit.common import log, retry
from hack.chaoskit.config import (
    BED_FAULT_KINDS, FAULT_KINDS, PEER_OF_FAULT, POD_FAULT_KINDS, ChaosConfig, ChaosResult, FaultRecord,
)
from hack.chaoskit.convergence import Checker
from hack.chaoskit.faults import PeerSupervisor, exit_reason, restart_apiserver, restart_nb, start_ovsdb, stop_ovsdb
from hack.chaoskit.garbage import GarbageCollector
from hack.chaoskit.load import SHARED_PROVIDER, Loader, Slot
from hack.chaoskit.monitor import InvariantMonitor, pool_refs
from hack.chaoskit.pods import PodReplicas, lease_live, longest_unheld
from hack.chaoskit.replicas import Replica, Supervisor
from hack.chaoskit.report import render_markdown, write_figures
from hack.chaoskit.runner import run

__all__ = [
    "recheck_duplicates", "recheck_open", "removal_times", "vlan_lifetimes",
    "log", "retry",
    "BED_FAULT_KINDS", "FAULT_KINDS", "PEER_OF_FAULT", "POD_FAULT_KINDS", "ChaosConfig", "ChaosResult", "FaultRecord",
    "Checker",
    "PeerSupervisor", "exit_reason", "restart_apiserver", "restart_nb", "start_ovsdb", "stop_ovsdb",
    "GarbageCollector",
    "SHARED_PROVIDER", "Loader", "Slot",
    "InvariantMonitor", "pool_refs",
    "PodReplicas", "lease_live", "longest_unheld",
    "Replica", "Supervisor",
    "render_markdown", "write_figures",
    "run",
]
