"""What a reconcile pass asks of its worker (every reconciler returns one), and how a pass
ends early when the process stops."""

from __future__ import annotations

import attrs


@attrs.frozen
class Result:
    """What the worker does after a pass: requeue after ``requeue_after`` seconds, or not."""

    requeue_after: float | None = None


class Stopping(Exception):
    """The process is stopping: the pass ends before its next action, as if the leader had
    been killed there (the next leader redoes it; every step is one write that a later pass
    finds done). The worker drops the key quietly."""


class LostLeadership(Stopping):
    """A write refused by the leader fence (field-reports.md S3): this process no longer holds
    the Lease (its renew deadline passed, another replica took it, or it never held it), so
    nothing more may be sent, to the API server or to OVN NB. Raised by the fence
    :meth:`controller.runtime.leader.LeaderElector.fence` that ``controller.main`` gives the writers
    (:class:`controller.runtime.kube.KubeWriter`, ``ovn.nb.NBClient``), just before a request or a
    transaction would be sent. The worker drops the key without a retry (the process exits:
    product-decisions.md §4.5) and the pass ends there, as for :class:`Stopping`."""
