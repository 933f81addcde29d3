"""How a message names many objects (product-decisions.md §8: "first five, then a count")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SHOWN = 5  # product-decisions.md §8: named "first five, then a count"


def first_shown(items: Sequence[Any], limit: int | None = SHOWN) -> str:
    """``str`` of the first ``limit`` items (None: all), comma-separated, then
    ``" and N more"`` for the rest (``["a", "b", "c"]``, 2 -> ``"a, b and 1 more"``)."""
    shown = items if limit is None else items[:limit]
    text = ", ".join(str(i) for i in shown)
    if len(items) > len(shown):
        text += f" and {len(items) - len(shown)} more"
    return text
