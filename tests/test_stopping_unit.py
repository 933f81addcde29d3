"""A stopping process writes nothing more, and its Lease goes only once no pass can write
(product-decisions.md §4.5: only the leader writes; issue 17, the rollout under load: a
leader whose pass was still running at the end of its stop budget used to release
the Lease anyway, so the pass's later writes could land under the next leader).

No server: the executor, the worker and the manager's join are driven directly.
"""

from __future__ import annotations

import threading
import time

import pytest

from controller.plan.actions import Into, Level, Log, Plan, WriteStatus
from controller.apply.executor import Executor, run
from controller.runtime.worker import Controller
from controller.manager import Manager
from controller.metrics import Metrics
from controller.runtime.result import Result, Stopping
from controller import names


class NoWrites:
    """A writer that fails the test on any request."""

    def request(self, *args, **kwargs):
        raise AssertionError(f"a stopping process wrote: {args}")


NET = {"apiVersion": "proxmox.cozystack.io/v1alpha1", "kind": "ProxmoxNetwork",
       "metadata": {"name": "n", "namespace": "ns", "resourceVersion": "1"}, "status": {}}


def test_a_pass_ends_before_its_next_action_once_the_process_stops():
    stopping = threading.Event()
    ex = Executor(NoWrites(), vlans=None, stopping=stopping)
    seen = []

    def planner(s):
        seen.append(s)
        if len(seen) == 1:
            stopping.set()  # SIGTERM arrives while the pass plans
        return Plan((WriteStatus(names.PROXMOX_NETWORKS, NET, {"vlan": 7}, Into("network"), None),))

    with pytest.raises(Stopping):
        run(planner, object(), ex)


def test_the_worker_drops_an_abandoned_pass_without_a_retry():
    def reconcile(key):
        raise Stopping("stopping before WriteStatus")

    c = Controller("test-stopping", "network", reconcile, 1, Metrics().workqueue)
    c.process("ns/n")
    assert c.queue.num_requeues("ns/n") == 0  # no backoff retry: the next leader redoes it
    assert len(c.queue) == 0


def test_a_pass_runs_to_its_end_while_the_process_is_not_stopping():
    ex = Executor(NoWrites(), vlans=None, stopping=threading.Event())
    plan = Plan((Log(Level.INFO, "a step", {}),), requeue_after=5.0)
    assert run(lambda s: plan, object(), ex) == Result(5.0)


def test_the_join_reports_a_thread_still_running():
    gate = threading.Event()
    live = threading.Thread(target=gate.wait, daemon=True)
    done = threading.Thread(target=lambda: None, daemon=True)
    live.start()
    done.start()
    try:
        assert Manager._join([done], deadline=time.monotonic() + 1.0) is True
        assert Manager._join([done, live], deadline=time.monotonic() + 0.05) is False
    finally:
        gate.set()
        live.join()
