"""When a Vlan may go: the one rule that network deletion (reference-behaviour.md §6 step 4)
and orphan collection (§8.1) share.

Both hold the Vlan while Kube-OVN lists a live subnet on it, keep one prune timer per
listed subnet that is gone (§7.1) and release once none is listed, or once the newest timer
has run for the prune timeout. The callers differ only in what they do while waiting (a
network writes a status, a zone counts and rechecks) and in the timer floor (a network's
deletion time; none for an orphan).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from controller import names
from controller.rules import prune

WAIT_LIVE, WAIT_PRUNE, RELEASE = "WaitLive", "WaitPrune", "Release"


@attrs.frozen
class ReleaseStep:
    """The next step of a release.

    :ivar timers: the ``deleted-subnets`` annotation value to store first, when it must
        change (``attrs.NOTHING`` when it is up to date; ``None`` removes it).
    :ivar kind: :data:`WAIT_LIVE` (a live subnet is listed), :data:`WAIT_PRUNE` (gone
        subnets are listed and the newest timer has not run out) or :data:`RELEASE`.
    :ivar deadline: the release deadline while :data:`WAIT_PRUNE` (aware UTC).
    :ivar timed_out: released because the timer ran out, not because Kube-OVN pruned.
    """

    kind: str
    timers: Any = attrs.NOTHING
    deadline: _dt.datetime | None = None
    timed_out: bool = False

    @property
    def stores_timers(self) -> bool:
        return self.timers is not attrs.NOTHING


def release_step(
    vlan: Mapping[str, Any],
    live: Sequence[str],
    gone: Sequence[str],
    now: _dt.datetime,
    not_before: _dt.datetime | None,
    timeout: float,
) -> ReleaseStep:
    """Decide the next release step from a fresh Vlan and the fresh split of its
    ``status.subnets`` (see :class:`ReleaseStep`).

    :param not_before: no timer starts before this (the network's deletionTimestamp, §7.1).
    :param timeout: the prune timeout in seconds (``prune.prune_timeout`` rules).
    """
    stored = ((vlan.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_DELETED_SUBNETS)
    tracked = prune.track_deleted_subnets(stored, gone, now, not_before)
    timers = tracked.desired if tracked.changed else attrs.NOTHING
    if live:
        return ReleaseStep(WAIT_LIVE, timers)
    if gone and tracked.newest is not None:
        deadline = prune.deadline(tracked.newest, timeout)
        if deadline > now:
            return ReleaseStep(WAIT_PRUNE, timers, deadline)
        return ReleaseStep(RELEASE, timers, deadline, timed_out=True)
    return ReleaseStep(RELEASE, timers)
