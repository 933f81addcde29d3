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
