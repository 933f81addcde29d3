#!/usr/bin/env bash
# The README's second command: install what is missing, then run every test (unit,
# property and integration; the integration tests start their own kube-apiserver, etcd and
# OVN NB ovsdb-server on 127.0.0.1 and stop them at the end).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash hack/install-deps.sh >/dev/null
set +e
python3 -m pytest "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit $rc
