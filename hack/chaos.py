#!/usr/bin/env python3
"""The chaos harness's command line: ``python3 hack/chaos.py --help`` tells what it does.

Only an entry point: the harness is the package hack/chaoskit/ (``from hack.chaoskit import
run``), its command line hack/chaoskit/cli.py. Nothing imports this file.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hack.chaoskit.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
