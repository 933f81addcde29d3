"""A settable monotonic clock for deterministic tests."""

from __future__ import annotations


class FakeClock:
    """Callable returning ``now`` (seconds); :meth:`advance` moves it forward."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
