"""The order in which pytest-xdist workers take the suite's modules (issue 28).

hack/test.sh runs the suite in workers (``-n``, ``--dist loadfile``): every module goes
whole to one worker, so a module's beds (module fixtures) start once and the session bed
once per worker. xdist's own ``loadfile`` hands the modules out by their number of tests,
largest first, which puts this suite's longest modules (the chaos harness, the data plane,
a conversion-webhook or NB-outage module of one or a few tests of a minute or more) last:
the run then ends with one worker busy and the others idle. :class:`LongestModuleFirst`
hands them out by their seconds in the last recorded run instead (``tests/module_seconds.json``,
written by ``--module-seconds-out``), longest first: the classic longest-processing-time
order, whose last module to start is short. A module missing from the record counts
``UNKNOWN_SECONDS`` plus ``PER_TEST_SECONDS`` per test, so a new module is neither first
nor lost; the record is a hint of order only, never a test's input.

Everything else (two units in hand per worker, the low-water mark, the collection check)
is xdist's ``LoadScopeScheduling``, which this class extends through the scheduler hook
``pytest_xdist_make_scheduler`` (tests/conftest.py).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

from xdist.scheduler import LoadFileScheduling

RECORD = Path(__file__).resolve().parent.parent / "module_seconds.json"
UNKNOWN_SECONDS = 10.0
PER_TEST_SECONDS = 0.05


def load_record(path: Path = RECORD) -> dict[str, float]:
    """``{module node id: seconds}`` of the record at ``path``; ``{}`` when it is missing or
    unreadable (the order then falls back to the estimate for every module)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))} if isinstance(data, dict) else {}


def order_modules(units: dict[str, dict[str, bool]], record: dict[str, float]) -> list[str]:
    """The modules of ``units`` (module -> its test ids) longest first by ``record``, the
    unrecorded ones by their estimate; ties keep collection order."""
    def seconds(module: str) -> float:
        return record.get(module, UNKNOWN_SECONDS + PER_TEST_SECONDS * len(units[module]))

    return sorted(units, key=lambda m: -seconds(m))


class LongestModuleFirst(LoadFileScheduling):
    """xdist's ``loadfile`` with the modules handed out longest first (see the module doc)."""

    def __init__(self, config, log=None, record: dict[str, float] | None = None) -> None:
        super().__init__(config, log)
        self.record = load_record() if record is None else record

    def schedule(self) -> None:
        if self.collection is not None or not self.collection_is_completed:
            super().schedule()  # later calls: xdist reschedules every node
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = list(next(iter(self.registered_collections.values())))
        units: dict[str, dict[str, bool]] = {}
        for nodeid in self.collection:
            units.setdefault(self._split_scope(nodeid), {})[nodeid] = False
        self.workqueue = OrderedDict((m, units[m]) for m in order_modules(units, self.record))
        for node in list(self.nodes)[len(self.workqueue):]:  # more workers than modules
            self.assigned_work.pop(node, None)
            node.shutdown()
        for node in self.nodes:
            if not node.shutting_down and self.workqueue:
                self._assign_work_unit(node)
        for node in self.nodes:
            self._reschedule(node)
