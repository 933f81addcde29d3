"""The planners and rules are pure, and the runtime machinery free of the product, at run
time too, not only in import-linter's graph.

import-linter reads the import statements; it does not see what importing a package's
``__init__`` loads. For the contracts "pure" and "runtime" of ``.importlinter``, this imports
every module of the contract's source packages in a fresh interpreter and checks that none of
the contract's forbidden modules (the Kubernetes client, urllib3, python-ovs, the informer
machinery, the NB client, the runtime, the product) was loaded along the way. The module lists
come from ``.importlinter``.
"""

from __future__ import annotations

import configparser
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _contract(name: str) -> tuple[list[str], list[str]]:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / ".importlinter")
    section = cfg[f"importlinter:contract:{name}"]
    return section["source_modules"].split(), section["forbidden_modules"].split()


def _modules_of(package: str) -> list[str]:
    root = REPO / package.replace(".", "/")
    return sorted(
        ".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for p in root.rglob("*.py")
    )


@pytest.mark.parametrize("contract", ["pure", "runtime"])
def test_importing_a_contracts_sources_loads_nothing_it_forbids(contract):
    sources, forbidden = _contract(contract)
    modules = [m for package in sources for m in _modules_of(package)]
    assert len(modules) > 8  # every module of the packages, not an empty glob
    probe = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    leaked = sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in forbidden))
    assert leaked == [], f"importing {sources} loads forbidden modules: {leaked}"
