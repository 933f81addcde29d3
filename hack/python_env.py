"""The project's Python environment: a virtual environment made from the lock and held to it.

The lock is two files of exact pins: ``constraints.txt`` (the closure the image installs and
pip's build backend) and ``constraints-test.txt`` (what the ``test`` extra adds to it). The
environment the tests and the demo run in holds exactly the distributions they pin, at the
pinned versions, plus ``pip`` (the installer, from the interpreter's ``ensurepip``). It is a
venv without the system site-packages, so nothing the machine's Python carries leaks in: a
machine that came with ``python-dateutil 2.9.0.post0`` and ``six`` runs the tests on the
pinned ``python-dateutil`` and without ``six``, like the image.

A venv is the standard library's own isolation (PEP 405), needs no tool the machine lacks,
and pip installs exact pins into it; the tree itself is imported in place, not installed.

The venv lives in the cache, keyed by the lock's content and the interpreter
(``$PNC_CACHE_DIR/venv/<key>``, default ``~/.cache/proxmox-network-controller``), so a fresh
clone on a used machine finds it; ``.venv`` in the tree is a link to it. ``PNC_VENV`` names
another directory instead. Every ``sync`` checks the venv against the lock first; a
difference (a version other than pinned, a distribution the lock lacks or misses) is printed
and repaired, never kept.

    python3 hack/python_env.py sync    # make or repair the venv; prints its directory
    python3 hack/python_env.py check   # exit 1 listing every difference (run with the venv's python)

Uses the standard library only: ``sync`` runs on whatever Python 3.11+ the machine has.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK_FILES = (ROOT / "constraints.txt", ROOT / "constraints-test.txt")
# The installer: from the interpreter's ensurepip, not pinned.
INSTALLER = frozenset({"pip"})
# The project itself (an egg-info left in the tree by ``pip install -e`` is on sys.path when
# the tree is imported in place); never part of the lock.
PROJECT = "proxmox-network-controller"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)$")


class LockError(ValueError):
    """A lock file line that is not ``name==version``, or a name pinned twice."""


def canonical(name: str) -> str:
    """PEP 503 normalised name: ``PyYAML`` -> ``pyyaml``, ``typing_extensions`` -> ``typing-extensions``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(paths: tuple[Path, ...] = LOCK_FILES) -> dict[str, str]:
    """{canonical name: version} of every ``name==version`` line (comments and blanks ignored).

    Raises LockError on another line shape or on a name pinned twice, in one file or across
    files.
    """
    pins: dict[str, str] = {}
    for path in paths:
        for n, raw in enumerate(path.read_text().splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            m = _PIN.match(line)
            if m is None:
                raise LockError(f"{path.name}:{n}: not an exact pin: {raw!r}")
            name = canonical(m.group(1))
            if name in pins:
                raise LockError(f"{path.name}:{n}: {m.group(1)} pinned twice")
            pins[name] = m.group(2)
    return pins


def installed() -> dict[str, str]:
    """{canonical name: version} of the distributions this interpreter imports from (first
    on sys.path wins, as for import), without the project's own."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        found.setdefault(canonical(name), dist.version)
    found.pop(PROJECT, None)
    return found


def drift(pins: dict[str, str], have: dict[str, str]) -> list[str]:
    """Every way ``have`` differs from ``pins``, one sorted line each; [] when they agree.

    The installer (pip) may be there at any version or not at all.
    """
    lines = []
    for name in sorted(set(pins) | set(have)):
        if name in INSTALLER:
            continue
        if name not in have:
            lines.append(f"{name}: pinned {pins[name]}, not installed")
        elif name not in pins:
            lines.append(f"{name}: {have[name]} installed, not in the lock")
        elif have[name] != pins[name]:
            lines.append(f"{name}: {have[name]} installed, pinned {pins[name]}")
    return lines


def extras(pins: dict[str, str], have: dict[str, str]) -> list[str]:
    """The installed distributions the lock does not pin (the installer aside)."""
    return sorted(set(have) - set(pins) - INSTALLER)


def is_isolated(prefix: Path) -> bool:
    """True when ``prefix`` is a venv that does not see the system site-packages (its
    ``pyvenv.cfg``, PEP 405)."""
    cfg = prefix / "pyvenv.cfg"
    if not cfg.is_file():
        return False
    for line in cfg.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "include-system-site-packages":
            return value.strip().lower() == "false"
    return False


def cache_dir() -> Path:
    return Path(os.environ.get("PNC_CACHE_DIR") or Path.home() / ".cache/proxmox-network-controller")


def venv_dir() -> Path:
    """``$PNC_VENV``, else the cache's venv for this lock and this interpreter."""
    if os.environ.get("PNC_VENV"):
        return Path(os.environ["PNC_VENV"]).resolve()
    h = hashlib.sha256()
    for path in LOCK_FILES:
        h.update(path.read_bytes())
    h.update(os.path.realpath(sys.executable).encode())
    h.update(sys.version.encode())
    return cache_dir() / "venv" / f"py{sys.version_info[0]}.{sys.version_info[1]}-{h.hexdigest()[:16]}"


def _log(msg: str) -> None:
    print(f"[python-env] {msg}", file=sys.stderr, flush=True)


# What the caller's shell may carry that would put other packages in front of the venv's or
# send pip's installs elsewhere; dropped for every interpreter and pip run here.
_FOREIGN = ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PIP_TARGET", "PIP_PREFIX", "PIP_ROOT", "PIP_USER",
            "PIP_REQUIRE_VIRTUALENV")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _FOREIGN}
    # A file: URL, because pip splits PIP_CONSTRAINT on white space (a tree path may hold one).
    env.update(PIP_CONSTRAINT=LOCK_FILES[0].as_uri(), PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return env


def _venv_state(venv: Path) -> dict[str, str] | None:
    """What the venv's own interpreter reports installed; None when it cannot run, sees the
    system site-packages, or has no pip (a venv whose making was cut short)."""
    py = venv / "bin" / "python"
    if not py.exists() or not is_isolated(venv):
        return None
    proc = subprocess.run([str(py), str(Path(__file__).resolve()), "installed"],
                          capture_output=True, text=True, cwd="/", env=_env())
    if proc.returncode != 0:
        return None
    have = json.loads(proc.stdout)
    return have if "pip" in have else None


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env())
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"[python-env] failed: {' '.join(cmd)}")


def sync(venv: Path) -> list[str]:
    """Make ``venv`` equal the lock; returns the differences it repaired ([] when it was right).

    Makes the venv (``python -m venv``, no system site-packages) when it is missing, cannot
    run or sees the system site-packages; installs every pin (``pip install -r`` of both lock
    files, with PIP_CONSTRAINT pinning the build backend of a source build too) and removes
    what the lock does not pin. Raises SystemExit when pip fails or a difference remains.
    """
    pins = read_pins()
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two clones syncing one venv at once
        have = _venv_state(venv)
        if have is None:
            if venv.exists() and any(venv.iterdir()):
                if not (venv / "pyvenv.cfg").is_file():
                    # Never delete a directory that is not a venv (PNC_VENV=. or $HOME).
                    raise SystemExit(f"[python-env] {venv} exists and is not a virtual environment (no "
                                     "pyvenv.cfg): not touching it; set PNC_VENV to a new directory")
                _log(f"{venv} cannot run, has no pip or is not isolated: making it again")
                shutil.rmtree(venv)
            _log(f"making the venv {venv} ({sys.executable}, Python {sys.version.split()[0]})")
            _run([sys.executable, "-m", "venv", str(venv)])
            have = _venv_state(venv)
            if have is None:
                raise SystemExit(f"[python-env] the new venv {venv} does not run")
            found = []
        else:
            found = drift(pins, have)
            if not found:
                return []
            for line in found:
                _log(f"drift: {line}")
        py = str(venv / "bin" / "python")
        _log("installing the lock (" + ", ".join(p.name for p in LOCK_FILES) + ")")
        _run([py, "-m", "pip", "install", "-q", *[a for p in LOCK_FILES for a in ("-r", str(p))]])
        extra = extras(pins, _venv_state(venv) or {})
        if extra:
            _log("removing what the lock does not pin: " + " ".join(extra))
            _run([py, "-m", "pip", "uninstall", "-q", "-y", *extra])
        left = drift(pins, _venv_state(venv) or {})
        if left:
            raise SystemExit("[python-env] still differs from the lock after the install:\n  " + "\n  ".join(left))
        if not os.environ.get("PNC_VENV"):
            _link(venv)  # under the lock: two syncs never race on the link
        return found


def _link(venv: Path) -> None:
    """``.venv`` in the tree points at the venv (for a shell's ``source .venv/bin/activate``)."""
    link = ROOT / ".venv"
    if link.is_symlink() or not link.exists():
        if not (link.is_symlink() and os.readlink(link) == str(venv)):
            tmp = ROOT / f".venv.tmp{os.getpid()}"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(venv)
            tmp.replace(link)
    elif link.resolve() != venv:
        _log(f"{link} is a directory of its own, left alone; the environment is {venv}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("sync", help="make or repair the venv; print its directory")
    sub.add_parser("check", help="exit 1 listing how this interpreter's environment differs from the lock")
    sub.add_parser("installed", help="this interpreter's distributions as JSON")
    sub.add_parser("path", help="print the venv's directory")
    args = ap.parse_args(argv)
    if args.cmd == "installed":
        print(json.dumps(installed()))
        return 0
    if args.cmd == "path":
        print(venv_dir())
        return 0
    try:
        if args.cmd == "check":
            problems = [] if is_isolated(Path(sys.prefix)) else [f"{sys.prefix} is not an isolated venv"]
            problems += drift(read_pins(), installed())
            for line in problems:
                print(line)
            return 1 if problems else 0
        if sys.version_info < (3, 11):
            raise SystemExit(f"[python-env] Python {sys.version.split()[0]} is too old: the project needs 3.11 or "
                             "newer (pyproject.toml requires-python)")
        venv = venv_dir()
        sync(venv)
    except LockError as err:
        raise SystemExit(f"[python-env] {err}") from None
    print(venv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
