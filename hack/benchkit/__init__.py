"""The benchmarks' bodies. Their command lines stay at hack/, each only its arguments and a
call (``python hack/bench.py --help`` and the like tell what each measures):

* hack/bench.py: convergence, restart, steady state, memory and the gateway runs;
* hack/bench_cache.py: bytes per cached object;
* hack/bench_e2e.py: end to end on the real peers;
* hack/bench_scale.py: the cluster-scale population, and a full VLAN space;
* hack/bench_wire.py: create to the first answered ARP on the data plane;
* hack/burst.py: the burst that gave two Vlans one ID, repeated;
* hack/pod_memory.py: the controller's pod memory on the bed's node.

One job a file:

* ``suite.py``: hack/bench.py's body (:func:`~hack.benchkit.suite.run`): runs, merges, writes;
* ``convergence.py``: one size: convergence, the allocation check, restart, a periodic pass;
* ``floor.py``: the API floor, the same API work with no controller;
* ``gateway.py``: the gateway runs (HA_Chassis_Group per network in the NB);
* ``report.py``: hack/bench.py's markdown block and the profiles' top functions;
* ``controller.py``: the controller as a child process, its log and metrics; /proc figures;
* ``load.py``: namespaces, providers, zones and networks, created on admin threads;
* ``writes.py``: the controller's API writes between audit-log markers;
* ``document.py``: :func:`~hack.benchkit.document.write_block`, a block between markers;
* ``profiled_main.py``: the controller under yappi (``python -m hack.benchkit.profiled_main``);
* ``cache.py``, ``e2e.py``, ``scale.py``, ``vlan_space.py``, ``wire.py``, ``burst.py``,
  ``pod_memory.py``: the other benchmarks' bodies; ``population.py``: a platform cluster's
  objects as their projects write them.

The benchmarks import the bed (``hack.bed``) and the shared tools (``hack.tools``); neither
imports them.
"""
