#!/usr/bin/env python3
"""The test bed's command line: ``python3 hack/cluster.py start|env|stop --dir DIR`` (``--help``).

Only an entry point: the bed is the package hack/bed/ (``from hack.bed import LocalCluster``),
its command line hack/bed/cli.py. Nothing imports this file.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hack.bed.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
