#!/bin/sh
# The image's one install step, run by Containerfile (RUN) and by hack/build-image.sh (in its
# mmdebstrap chroot, under env -i), so both builds make the same venv:
#
#   PYTHON_VERSION=3.11 sh install-venv.sh SRC
#
# SRC holds pyproject.toml, constraints.txt and the packages. Checks that Debian's python3 is
# PYTHON_VERSION (major.minor; Containerfile's ARG), makes the venv /opt/venv and installs
# SRC into it with every version pinned by SRC/constraints.txt; PIP_CONSTRAINT pins the build
# backend in pip's isolated build environment too. The caller may set PIP_CERT.
set -eu
src="$1"
: "${PYTHON_VERSION:?PYTHON_VERSION (major.minor) must be set}"
python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; assert v == '$PYTHON_VERSION', 'python3 is ' + v + ', not $PYTHON_VERSION'"
python3 -m venv /opt/venv
cd "$src"
export PIP_CONSTRAINT="$src/constraints.txt"
/opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check --no-input -c constraints.txt .
/opt/venv/bin/proxmox-network-controller --help >/dev/null
