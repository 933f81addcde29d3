#!/usr/bin/env bash
# The README's first command: install what is missing, then run the main job (hack/demo.py).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash hack/install-deps.sh >/dev/null
source hack/python-env.sh
activate_python_env
exec python3 hack/demo.py "$@"
