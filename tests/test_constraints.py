"""The lock: constraints.txt pins the project's whole dependency closure, constraints-test.txt
what the test extra adds, and the tests run in exactly that lock.

The image (hack/build-image.sh and Containerfile) installs the project with
``pip install -c constraints.txt .``; a distribution the closure needs but the file does not
pin would come in at whatever version PyPI serves that day. The closure is walked through
the installed distributions' own metadata (``Requires-Dist``, markers evaluated for this
interpreter, no extras), from pyproject.toml's ``[project] dependencies`` (and the ``test``
extra for constraints-test.txt). The tests and the demo run in the venv hack/python_env.py
makes from both files; the last tests here fail when the environment running them is not
that venv or differs from the lock by one version, as on a machine whose own Python carries
``python-dateutil 2.9.0.post0`` and ``six``. No server.
"""

from __future__ import annotations

import os
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from hack import python_env

ROOT = Path(__file__).resolve().parent.parent
# pyproject's [build-system] backend, pinned for pip's isolated build environment only.
BUILD_ONLY = {"setuptools", "wheel"}


def _pins(file: str = "constraints.txt") -> dict[str, Version]:
    """A lock file as {canonical name: pinned version}; every line must be ``name==version``."""
    pins: dict[str, Version] = {}
    for line in (ROOT / file).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"not an exact pin: {line!r}"
        name = canonicalize_name(req.name)
        assert name not in pins, f"{req.name} pinned twice"
        pins[name] = Version(specs[0].version)
    return pins


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _applies(req: Requirement) -> bool:
    if req.marker is None:
        return True
    env = default_environment()
    env["extra"] = ""
    return req.marker.evaluate(env)


def _closure(extra: str | None = None) -> dict[str, list[str]]:
    """{canonical name: [who requires it]} of the runtime dependencies (with ``extra``'s
    requirements when given), walked through the installed metadata (a missing distribution
    fails: the lock installs them all)."""
    seen: dict[str, list[str]] = {}
    roots = list(_project()["project"]["dependencies"])
    if extra is not None:
        roots += _project()["project"]["optional-dependencies"][extra]
    todo = [(Requirement(r), "pyproject.toml") for r in roots]
    while todo:
        req, parent = todo.pop()
        if not _applies(req):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            seen[name].append(parent)
            continue
        seen[name] = [parent]
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            pytest.fail(f"{req.name} (required by {parent}) is not installed; run hack/install-deps.sh")
        todo.extend((Requirement(r), req.name) for r in dist.requires or [])
    return seen


def test_every_line_is_an_exact_pin() -> None:
    assert _pins()


def test_every_distribution_of_the_dependency_closure_is_pinned() -> None:
    pins = _pins()
    missing = {name: parents for name, parents in _closure().items() if name not in pins}
    assert not missing, f"in the dependency closure but not in constraints.txt: {missing}"


def test_every_pin_is_in_the_closure_or_the_build_backend() -> None:
    # A pin nothing needs is a stale line (six was one: python-dateutil 4 dropped it).
    closure = _closure()
    stale = sorted(set(_pins()) - set(closure) - BUILD_ONLY)
    assert not stale, f"pinned but not in the dependency closure: {stale}"


def test_the_pins_satisfy_pyprojects_requirements() -> None:
    pins = _pins()
    project = _project()
    reqs = [Requirement(r) for r in project["project"]["dependencies"]]
    reqs += [Requirement(r) for r in project["build-system"]["requires"]]
    wrong = [str(r) for r in reqs if not r.specifier.contains(pins[canonicalize_name(r.name)], prereleases=True)]
    assert not wrong, f"constraints.txt pins a version these refuse: {wrong}"


def test_the_build_backend_is_pinned() -> None:
    pins = _pins()
    backend = {canonicalize_name(Requirement(r).name) for r in _project()["build-system"]["requires"]}
    assert backend == BUILD_ONLY
    assert backend <= set(pins)


def test_the_test_lock_pins_the_test_extras_closure_and_nothing_else() -> None:
    runtime, test = _pins(), _pins("constraints-test.txt")
    assert not set(runtime) & set(test), "pinned in both lock files"
    closure = _closure("test")
    missing = {n: parents for n, parents in closure.items() if n not in runtime and n not in test}
    assert not missing, f"in the test extra's closure but in neither lock file: {missing}"
    stale = sorted(set(test) - set(closure))
    assert not stale, f"pinned in constraints-test.txt but not in the test extra's closure: {stale}"


def test_the_test_pins_satisfy_the_test_extra() -> None:
    pins = {**_pins(), **_pins("constraints-test.txt")}
    reqs = [Requirement(r) for r in _project()["project"]["optional-dependencies"]["test"]]
    wrong = [str(r) for r in reqs if not r.specifier.contains(pins[canonicalize_name(r.name)], prereleases=True)]
    assert not wrong, f"constraints-test.txt pins a version these refuse: {wrong}"


def test_python_env_reads_the_same_pins_as_packaging() -> None:
    # hack/python_env.py parses the lock with the standard library only (it runs on the
    # machine's Python before the venv exists); it must read what packaging reads.
    ours = python_env.read_pins()
    theirs = {**_pins(), **_pins("constraints-test.txt")}
    assert {n: Version(v) for n, v in ours.items()} == theirs


def test_the_tests_run_in_a_venv_that_does_not_see_the_machines_site_packages() -> None:
    assert sys.prefix != sys.base_prefix, (
        f"the tests run on the machine's Python ({sys.prefix}), not the project's venv: run hack/test.sh")
    assert python_env.is_isolated(Path(sys.prefix)), f"{sys.prefix}/pyvenv.cfg includes the system site-packages"
    # The project's venv, the one hack/test.sh activated, not just any isolated one.
    active = os.environ.get("VIRTUAL_ENV")
    assert active and Path(active).resolve() == Path(sys.prefix).resolve(), (active, sys.prefix)


def test_the_environment_the_tests_run_in_is_exactly_the_lock() -> None:
    # Every pinned distribution at its pin, nothing unpinned (pip, the installer, aside).
    have = python_env.installed()
    drift = python_env.drift(python_env.read_pins(), have)
    assert drift == [], "run hack/install-deps.sh to repair:\n" + "\n".join(drift)
    assert "six" not in have  # python-dateutil 4 dropped it; a machine's Python may carry it


def test_drift_names_every_kind_of_difference() -> None:
    # The fresh machine of the issue: python-dateutil 2.9.0.post0 and six preinstalled.
    pins = {"python-dateutil": "4.0.0", "kubernetes": "37.0.2", "tzdata": "2026.6"}
    have = {"python-dateutil": "2.9.0.post0", "kubernetes": "37.0.2", "six": "1.17.0", "pip": "23.2.1"}
    assert python_env.drift(pins, have) == [
        "python-dateutil: 2.9.0.post0 installed, pinned 4.0.0",
        "six: 1.17.0 installed, not in the lock",
        "tzdata: pinned 2026.6, not installed",
    ]
    assert python_env.extras(pins, have) == ["six"]
    assert python_env.drift(pins, dict(pins, pip="99")) == []


def test_python_env_refuses_a_lock_line_that_is_not_an_exact_pin(tmp_path: Path) -> None:
    bad = tmp_path / "c.txt"
    bad.write_text("# comment\nkubernetes>=37\n")
    with pytest.raises(python_env.LockError, match="c.txt:2: not an exact pin"):
        python_env.read_pins((bad,))
    twice = tmp_path / "d.txt"
    twice.write_text("PyYAML==6.0.3\npyyaml==6.0.3\n")
    with pytest.raises(python_env.LockError, match="pinned twice"):
        python_env.read_pins((twice,))


def test_is_isolated_reads_pyvenv_cfg(tmp_path: Path) -> None:
    assert not python_env.is_isolated(tmp_path)
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = true\n")
    assert not python_env.is_isolated(tmp_path)
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
    assert python_env.is_isolated(tmp_path)
