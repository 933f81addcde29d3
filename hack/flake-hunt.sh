#!/usr/bin/env bash
# The whole suite N times from fresh clones, some under a CPU hog; see hack/flake_hunt.py.
set -euo pipefail
exec python3 "$(dirname "${BASH_SOURCE[0]}")/flake_hunt.py" "$@"
