"""The one exponential backoff of the process: the workqueue's per-key retries
(``controller.runtime.workqueue``), the reflectors' relists and rewatches (``informers.reflector``)
and the OVN NB client's reconnects (``ovn.nb``) all wait ``first * 2**failures``, capped.

The reflectors jitter it (client-go's ``wait.Backoff`` with jitter spreads many informers
retrying after one outage); the workqueue does not (client-go's
``ItemExponentialFailureRateLimiter``).
"""

from __future__ import annotations

import math
import random


def exponential(first: float, failures: int, maximum: float) -> float:
    """``first * 2**failures`` seconds, never above ``maximum`` (no overflow for any count)."""
    try:
        return min(first * math.ldexp(1.0, failures), maximum)
    except OverflowError:
        return maximum


class Backoff:
    """Consecutive-failure backoff: the n-th failure waits :func:`exponential` ``(first, n,
    maximum)``; with ``jitter`` a random time in ``[d/2, d]``, never below ``first``.
    :meth:`reset` after a success. Not thread-safe (one per retrying loop)."""

    def __init__(self, first: float, maximum: float, rng: random.Random | None = None, jitter: bool = True) -> None:
        self.first = first
        self.maximum = maximum
        self.jitter = jitter
        self.failures = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        d = exponential(self.first, self.failures, self.maximum)
        self.failures += 1
        if not self.jitter:
            return d
        return max(self.first, self._rng.uniform(d / 2, d))

    def reset(self) -> None:
        self.failures = 0
