"""The README's first command, ``hack/demo.sh``, runs ``hack/demo.py``: its imports (the bed,
the Deployment harness and the controller package that harness reads Lease identities
with) must resolve from the script's own location, whatever the working directory and
with no PYTHONPATH. A fresh clone's demo once failed with "No module named 'controller'"
after the harness began to import the controller lazily, and no test ran the demo."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_demo_script_imports_all_it_uses_from_any_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, str(ROOT / "hack" / "demo.py"), "--help"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "usage: demo.py" in p.stdout, p.stderr
