"""What a reconcile pass asks of its worker (every reconciler returns one)."""

from __future__ import annotations

import attrs


@attrs.frozen
class Result:
    """What the worker does after a pass: requeue after ``requeue_after`` seconds, or not."""

    requeue_after: float | None = None
