"""Await a condition with a deadline (tests and hack/ harnesses never sleep for timing)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(fn: Callable[[], T], timeout: float = 30.0, interval: float = 0.05, what: str = "condition") -> T:
    """Poll ``fn`` until it returns a truthy value and return that value.

    :raises AssertionError: with the last value seen when ``timeout`` seconds pass.
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        try:
            last = fn()
        except Exception as exc:  # an object not there yet, a transient error
            last = exc  # type: ignore[assignment]
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
        time.sleep(interval)
