"""The tools tests, the chaos harness (hack/chaoskit/), the benchmarks (hack/benchkit/) and
the demo share; each module is imported by its own name (``from hack.tools.wait import
wait_for``):

* ``wait.py``: :func:`wait_for`, a condition awaited with a deadline;
* ``objects.py``: the admin's side: build and read the objects the controller works on;
* ``audit.py``: the controller's API writes, counted from the bed's audit log;
* ``probe.py``: the probe and metrics endpoints of a controller process;
* ``controller_process.py``: one controller process (``python -m controller.main``);
* ``vms.py``: VMs as capmox makes them, on the bed's data plane.

The tools may import the bed (``hack.bed``); the bed imports none of them, and no tool
imports the harnesses or the benchmarks.
"""
