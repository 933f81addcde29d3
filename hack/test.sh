#!/usr/bin/env bash
# The README's second command: install what is missing, then run every test (unit,
# property and integration; the integration tests start their own kube-apiserver, etcd and
# OVN NB ovsdb-server on 127.0.0.1 and stop them at the end).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash hack/install-deps.sh >/dev/null
source hack/python-env.sh
activate_python_env
# The house's import contracts (.importlinter): a layer that imports upward, a planner that
# reaches for a client, or a cycle through the entry points fails the run here.
lint-imports --no-cache >&2
# The suite runs in PNC_TEST_WORKERS pytest-xdist workers (default 4, measured in
# docs/testing.md "Workers"), each module whole on one worker with its own beds, the longest
# modules first (tests/support/schedule.py). Give -n yourself (-n 0: one process) to choose.
workers=(-n "${PNC_TEST_WORKERS:-4}" --dist loadfile)
for a in "$@"; do
  case "$a" in -n*|--numprocesses*|no:xdist|-pno:xdist) workers=() ;; esac
done
set +e
python3 -m pytest "${workers[@]}" "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit $rc
