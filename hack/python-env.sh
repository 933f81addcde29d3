# Sourced by the README's two commands (hack/test.sh, hack/demo.sh):
# puts the project's venv (hack/python_env.py; made by hack/install-deps.sh) first on PATH, so
# `python3`, here and in every subprocess, is the lock's environment and never the machine's.
# PYTHONPATH and PYTHONHOME from the caller's shell are dropped: they would put other
# site-packages in front of the lock's.
activate_python_env() {
  local root venv
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  venv="$(python3 "$root/hack/python_env.py" path)"
  if [[ ! -x $venv/bin/python ]]; then
    echo "no Python environment at $venv: run hack/install-deps.sh" >&2
    return 1
  fi
  export VIRTUAL_ENV="$venv"
  export PATH="$venv/bin:$PATH"
  unset PYTHONPATH PYTHONHOME
}
