"""constraints.txt pins the project's whole dependency closure (issue 17 part 1).

The image (hack/build-image.sh and Containerfile) installs the project with
``pip install -c constraints.txt .``; a distribution the closure needs but the file does not
pin would come in at whatever version PyPI serves that day. The closure is walked through
the installed distributions' own metadata (``Requires-Dist``, markers evaluated for this
interpreter, no extras), from pyproject.toml's ``[project] dependencies``. No server.
"""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
# pyproject's [build-system] backend, pinned for pip's isolated build environment only.
BUILD_ONLY = {"setuptools", "wheel"}


def _pins() -> dict[str, Version]:
    """constraints.txt as {canonical name: pinned version}; every line must be ``name==version``."""
    pins: dict[str, Version] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
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


def _closure() -> dict[str, list[str]]:
    """{canonical name: [who requires it]} of the runtime dependencies, walked through the
    installed metadata (a missing distribution fails: the test extra installs them all)."""
    seen: dict[str, list[str]] = {}
    todo = [(Requirement(r), "pyproject.toml") for r in _project()["project"]["dependencies"]]
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
