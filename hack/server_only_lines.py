#!/usr/bin/env python3
"""How much of the product only a test against a server can reach.

    python hack/server_only_lines.py [--tree DIR] [--json OUT]

Runs the tests that need no server (``pytest -m "not integration and not image"``: the image
tests need a built image, not a server, and reach no product line) of the tree under
``coverage`` (statement coverage of ``controller/``, ``informers/``, ``ovn/``) and prints,
per module and in total, the statements those tests never execute: what can only be tested
against a real API server or NB. ``--tree`` measures another checkout (e.g. a worktree of
an earlier commit) with that checkout's own tests. Needs the ``coverage`` package (not a
dependency of the project: ``pip install coverage``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGES = ("controller", "informers", "ovn")


def measure(tree: Path) -> dict[str, dict[str, int]]:
    """``{module: {"statements": n, "server_only": m}}`` for the product modules of ``tree``."""
    with tempfile.TemporaryDirectory(prefix="pnc-cov-") as tmp:
        data = Path(tmp) / ".coverage"
        env = dict(os.environ, COVERAGE_FILE=str(data))
        run = [sys.executable, "-m", "coverage", "run", "--branch", "--source=" + ",".join(PACKAGES),
               "-m", "pytest", "-q", "-m", "not integration and not image", "-p", "no:cacheprovider", "tests"]
        subprocess.run(run, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
        out = Path(tmp) / "cov.json"
        subprocess.run([sys.executable, "-m", "coverage", "json", "-o", str(out)], cwd=tree, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        files = json.loads(out.read_text())["files"]
    return {
        name: {"statements": f["summary"]["num_statements"], "server_only": f["summary"]["missing_lines"]}
        for name, f in sorted(files.items())
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    per = measure(a.tree.resolve())
    total = sum(v["statements"] for v in per.values())
    only = sum(v["server_only"] for v in per.values())
    for name, v in per.items():
        print(f"{name:40} {v['statements']:6} {v['server_only']:6}")
    print(f"{'total':40} {total:6} {only:6}  ({only / max(total, 1):.0%} only against a server)")
    if a.json:
        a.json.write_text(json.dumps({"modules": per, "statements": total, "server_only": only}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
