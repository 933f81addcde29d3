"""A benchmark's figures in a markdown file, between its two markers."""

from __future__ import annotations

from pathlib import Path


def write_block(path: Path, block: str, begin: str, end: str, heading: str) -> None:
    """Replace the figures between the markers ``begin`` and ``end`` in ``path`` with
    ``block`` (which carries both markers); without the markers, append ``heading`` and it."""
    text = path.read_text() if path.exists() else ""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n## {heading}\n\n" + block + "\n"
    path.write_text(text)
