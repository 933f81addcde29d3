"""Flakes found by method (issue 28): the whole suite N times, each from a fresh clone of the
repository's HEAD, some of the runs under a CPU hog, every failure written to a report with
its test id, its output and the load the machine had during that run.

    python3 hack/flake_hunt.py --runs 5 --hog-runs 2 [--report docs/flake-hunt.md] [-- pytest args]

(``hack/flake-hunt.sh`` is the same.) A run is ``bash hack/test.sh`` in its clone (the
README's test command: it installs what is missing, then runs pytest) with
``--junitxml`` added, so the failures are read from pytest's own record rather than from its
console. The hog is one busy-looping process per core at normal priority, started before the
run and stopped after it: a check that only passes on an idle machine shows up there.
Load is the 1-minute load average, sampled every 10 s while the run lasts.

The report is Markdown: one row per run (under the hog or not, the commit, wall time, tests,
failures, exit code, load mean/max), then each failure with its id, the message and the
last lines of its output. The exit status is 1 when any run failed, else 0.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUTPUT_LINES = 60  # of a failure's output kept in the report


@dataclass
class Failure:
    test: str  # pytest's node id as JUnit writes it: <module path as dots>::<name>
    kind: str  # "failure" or "error"
    message: str
    output: str


@dataclass
class Run:
    index: int
    hog: bool
    commit: str = ""
    seconds: float = 0.0
    returncode: int | None = None
    tests: int = 0
    failures: list[Failure] = field(default_factory=list)
    load: list[float] = field(default_factory=list)


def failures_of(junit_xml: Path) -> tuple[int, list[Failure]]:
    """The number of tests and the failed or erroring ones in pytest's JUnit XML.

    :raises FileNotFoundError: pytest wrote no report (it did not start).
    :raises xml.etree.ElementTree.ParseError: the report is cut short.
    """
    root = ET.parse(junit_xml).getroot()
    tests, out = 0, []
    for case in root.iter("testcase"):
        tests += 1
        for kind in ("failure", "error"):
            for el in case.findall(kind):
                test = f"{case.get('classname', '')}::{case.get('name', '')}"
                text = (el.text or "").splitlines()
                extra = [(case.findtext(k) or "") for k in ("system-out", "system-err")]
                lines = text + [line for e in extra for line in e.splitlines()]
                out.append(Failure(test=test, kind=kind, message=el.get("message", ""),
                                   output="\n".join(lines[-OUTPUT_LINES:])))
    return tests, out


class Hog:
    """One busy-looping process per core at normal priority."""

    def __init__(self, processes: int | None = None) -> None:
        self.n = processes or os.cpu_count() or 1
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "Hog":
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.n)]
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


def sample_load(into: list[float], stop: threading.Event, every: float = 10.0) -> None:
    while not stop.wait(every):
        into.append(os.getloadavg()[0])


def one_run(run: Run, workdir: Path, pytest_args: list[str], source: Path) -> None:
    clone = workdir / f"run-{run.index}"
    subprocess.run(["git", "clone", "-q", str(source), str(clone)], check=True)
    run.commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True,
                                check=True).stdout.strip()
    junit = workdir / f"run-{run.index}.xml"
    log = workdir / f"run-{run.index}.log"
    stop = threading.Event()
    sampler = threading.Thread(target=sample_load, args=(run.load, stop), daemon=True)
    started = time.monotonic()
    sampler.start()
    try:
        with Hog() if run.hog else _nothing(), open(log, "wb") as out:
            run.returncode = subprocess.run(["bash", "hack/test.sh", "-q", f"--junitxml={junit}", *pytest_args],
                                            cwd=clone, stdout=out, stderr=subprocess.STDOUT).returncode
    finally:
        stop.set()
        sampler.join()
        run.seconds = time.monotonic() - started
    try:
        run.tests, run.failures = failures_of(junit)
    except (FileNotFoundError, ET.ParseError) as e:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-OUTPUT_LINES:])
        run.failures = [Failure(test="(the run itself)", kind="error", message=f"no JUnit report: {e}", output=tail)]
    if run.returncode and not run.failures:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-OUTPUT_LINES:])
        run.failures = [Failure(test="(the run itself)", kind="error", message=f"exit {run.returncode}", output=tail)]


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def report(runs: list[Run], pytest_args: list[str]) -> str:
    lines = [f"Flake hunt of {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC on {os.cpu_count()} cores; "
             f"`python3 hack/flake_hunt.py --runs {len(runs)} --hog-runs {sum(r.hog for r in runs)}"
             + (f" -- {' '.join(pytest_args)}" if pytest_args else "") + "`.", "",
             "| Run | Hog | Commit | Wall (min) | Tests | Failed | Exit | Load mean / max |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        load = f"{statistics.mean(r.load):.1f} / {max(r.load):.1f}" if r.load else "–"
        lines.append(f"| {r.index} | {'yes' if r.hog else 'no'} | {r.commit} | {r.seconds / 60:.1f} | {r.tests} | "
                     f"{len(r.failures)} | {r.returncode} | {load} |")
    failed = [(r, f) for r in runs for f in r.failures]
    lines += ["", f"Failures: **{len(failed)}** in {sum(1 for r in runs if r.failures)} of {len(runs)} runs."]
    for r, f in failed:
        lines += ["", f"### Run {r.index}{' (hog)' if r.hog else ''}: {f.kind} in `{f.test}`", "",
                  f"{f.message}", "", "```", f.output, "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--hog-runs", type=int, default=2, help="how many of the runs (the last ones) run under the hog")
    ap.add_argument("--report", type=Path, help="write the report here too (it is always printed)")
    ap.add_argument("--workdir", type=Path, help="clones, logs and JUnit files (default: a temporary directory)")
    ap.add_argument("--source", type=Path, default=REPO, help="the repository to clone (its HEAD)")
    ap.add_argument("pytest_args", nargs="*", help="after --: passed to pytest (e.g. -k, a module)")
    a = ap.parse_args(argv)
    if a.runs < 1 or not 0 <= a.hog_runs <= a.runs:
        ap.error("--runs must be at least 1 and --hog-runs between 0 and --runs")
    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="flake-hunt-"))
    workdir.mkdir(parents=True, exist_ok=True)
    runs = [Run(index=i + 1, hog=i >= a.runs - a.hog_runs) for i in range(a.runs)]
    for r in runs:
        print(f"[flake-hunt] run {r.index}/{a.runs}{' under the hog' if r.hog else ''} in {workdir}", flush=True)
        one_run(r, workdir, a.pytest_args, a.source)
        print(f"[flake-hunt] run {r.index}: exit {r.returncode}, {r.tests} tests, {len(r.failures)} failed, "
              f"{r.seconds / 60:.1f} min", flush=True)
    text = report(runs, a.pytest_args)
    print(text)
    if a.report:
        a.report.write_text(text)
    return 1 if any(r.failures for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
