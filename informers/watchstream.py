"""Decoding a Kubernetes watch response body: newline-delimited JSON events.

The API server writes one JSON object per line (``{"type": ..., "object":
...}\\n``). HTTP chunks do not align with lines: a chunk may hold half an event,
several events, or split a multi-byte UTF-8 character, so we split on raw
``\\n`` bytes (JSON never contains a literal newline) and decode whole lines.
"""

from __future__ import annotations

import json
from typing import Iterable, Iterator


class WatchDecodeError(Exception):
    """A line of the watch stream is not a JSON object, or the stream ended in
    the middle of an event (a truncated line at EOF)."""


class LineSplitter:
    """Accumulates byte chunks and returns the complete lines they finish.

    ``feed(b'{"a":1}\\n{"b"')`` -> ``[b'{"a":1}']``; a later ``feed(b':2}\\n')``
    -> ``[b'{"b":2}']``. Empty lines are dropped. :attr:`pending` is what is
    held for the next chunk.
    """

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        if not chunk:
            return []
        self._buf += chunk
        last_nl = self._buf.rfind(b"\n")
        if last_nl < 0:
            return []
        complete = bytes(self._buf[:last_nl])
        del self._buf[: last_nl + 1]
        return [line for line in complete.split(b"\n") if line.strip()]

    @property
    def pending(self) -> bytes:
        return bytes(self._buf)


def decode_event(line: bytes) -> dict:
    """Parse one watch line into an event dict with ``type`` and ``object``.

    Raises :class:`WatchDecodeError` if it is not a JSON object with a string
    ``type``.
    """
    try:
        event = json.loads(line)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        raise WatchDecodeError(f"undecodable watch line ({e}): {line[:200]!r}") from e
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise WatchDecodeError(f"watch line is not an event: {line[:200]!r}")
    return event


def iter_events(chunks: Iterable[bytes]) -> Iterator[dict]:
    """Yield decoded events from an iterable of byte chunks of any size.

    At the end of ``chunks``, leftover bytes without a final newline are
    decoded if they form a whole event; otherwise :class:`WatchDecodeError`
    (the connection ended mid-event).
    """
    splitter = LineSplitter()
    for chunk in chunks:
        for line in splitter.feed(chunk):
            yield decode_event(line)
    rest = splitter.pending
    if rest.strip():
        try:
            yield decode_event(rest)
        except WatchDecodeError as e:
            raise WatchDecodeError(f"watch stream ended mid-event: {rest[:200]!r}") from e
