#!/usr/bin/env bash
# A throwaway "machine Python" carrying other versions of the lock's distributions, as a new
# machine's own Python may (python-dateutil 2.9.0.post0 and six preinstalled, an older pytest):
# put its bin first on PATH to run the README's commands as on such a machine. The project's
# venv made from it must still be exactly the lock (tests/test_constraints.py).
#
#   PATH="$(hack/machine-python.sh)/bin:$PATH" bash .ci/run     # prints the directory
set -euo pipefail
dir="${1:-${TMPDIR:-/tmp}/pnc-machine-python}"
if ! "$dir/bin/python3" -c 'import dateutil, six, pytest, yaml' 2>/dev/null; then
  if [[ -e $dir && ! -f $dir/pyvenv.cfg ]]; then
    echo "$dir exists and is not a venv: not touching it" >&2
    exit 1
  fi
  rm -rf "$dir"
  python3 -m venv "$dir"
  "$dir/bin/python3" -m pip install -q --disable-pip-version-check \
    python-dateutil==2.9.0.post0 six==1.17.0 pytest==8.3.5 PyYAML==6.0.2 >&2
fi
echo "$dir"
