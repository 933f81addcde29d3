#!/usr/bin/env bash
# Build the controller's OCI image here, without any container registry.
#
#   hack/build-image.sh            # prints the path of the OCI archive (cached)
#   hack/build-image.sh --rebuild  # build again even if the cache has it
#
# The layout is the one `Containerfile` declares (tests/test_image_layout.py compares them):
#   * a Debian bookworm minbase root filesystem from mmdebstrap (Debian's packages only), with
#     Debian's python3 and python3-venv, man pages, docs and locales left out as in
#     debian:bookworm-slim;
#   * a venv /opt/venv holding this tree's package (pyproject.toml) and its dependencies
#     from PyPI, every version pinned by constraints.txt (PIP_CONSTRAINT also pins the
#     build backend in pip's isolated build environment);
#   * Debian's tini as PID 1 (a Python PID 1 ignores a SIGTERM that comes before its handler
#     exists: a pod deleted while starting ran on until SIGKILL; tini forwards the signal);
#   * user 65532:65532, entrypoint `tini -- proxmox-network-controller` (on PATH from /opt/venv/bin),
#     working directory /, PYTHONDONTWRITEBYTECODE=1 and PYTHONUNBUFFERED=1 so nothing is
#     written under a read-only root (the bytecode is compiled at install time), ports 8080
#     (metrics) and 8081 (probes);
#   * packed by buildah (its own storage under the cache, vfs driver) as an OCI archive with
#     a gzip layer, named localhost/proxmox-network-controller:<version>.
#
# pip runs inside the chroot under `env -i` (the host's pip settings, e.g. PIP_FIND_LINKS,
# must not leak in) with the host's CA bundle copied in for the install and removed after:
# a bare Debian root's trust store does not verify the package index on this machine.
#
# The venv is made by hack/image/install-venv.sh, the step Containerfile runs too, with
# Containerfile's ARG PYTHON_VERSION. Cached by content under
# ~/.cache/proxmox-network-controller/image/<sha256>/, the hash over pyproject.toml,
# constraints.txt, Containerfile, the product's packages, install-venv.sh and this script. Needs root (or
# mmdebstrap's unshare mode), mmdebstrap and buildah (hack/install-deps.sh installs them).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
log() { echo "[build-image] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

REBUILD=""
case "${1:-}" in
  "") ;;
  --rebuild) REBUILD=1 ;;
  *) die "usage: $0 [--rebuild]" ;;
esac

for tool in mmdebstrap buildah; do
  command -v "$tool" >/dev/null || die "$tool not found; run hack/install-deps.sh (apt-get install mmdebstrap buildah)"
done

cd "$ROOT"
# The product's packages (pyproject's [tool.setuptools] packages) and what decides the image.
PACKAGES=(controller informers ovn kubectl_plugin)
VERSION="$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml","rb"))["project"]["version"])')"
REF="localhost/proxmox-network-controller:$VERSION"

inputs() {
  printf '%s\n' pyproject.toml constraints.txt Containerfile hack/build-image.sh hack/image/install-venv.sh
  find "${PACKAGES[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' | LC_ALL=C sort
}
KEY="$(inputs | while read -r f; do printf '%s  %s\n' "$(sha256sum <"$f" | cut -d' ' -f1)" "$f"; done | sha256sum | cut -c1-32)"
CACHE="${PNC_CACHE_DIR:-$HOME/.cache/proxmox-network-controller}/image"
OUT="$CACHE/$KEY"
if [[ -z $REBUILD && -f "$OUT/.complete" ]]; then
  echo "$OUT/image.tar"
  exit 0
fi

t0=$(date +%s)
rm -rf "$OUT"
mkdir -p "$OUT"
WORK="$(mktemp -d "$CACHE/work.XXXXXX")"
cleanup() {
  if [[ -n ${CTR:-} ]]; then buildah "${BUILDAH[@]}" rm "$CTR" >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
  [[ -f "$OUT/.complete" ]] || rm -rf "$OUT"  # a failed build leaves nothing that looks cached
}
trap cleanup EXIT

# What goes into the chroot: a copy of the source (pip builds in it) and the host's CA bundle.
STAGE="$WORK/stage"
mkdir -p "$STAGE/src"
cp pyproject.toml constraints.txt "$STAGE/src/"
tar -C "$ROOT" --exclude=__pycache__ --exclude='*.pyc' -cf - "${PACKAGES[@]}" | tar -C "$STAGE/src" -xf -
CA_BUNDLE="${PNC_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
[[ -r $CA_BUNDLE ]] || die "no CA bundle at $CA_BUNDLE (set PNC_CA_BUNDLE)"
cp "$CA_BUNDLE" "$STAGE/ca.pem"

# The install step Containerfile runs too, with Containerfile's Python major.minor.
cp hack/image/install-venv.sh "$STAGE/install-venv.sh"
PYTHON_VERSION="$(sed -n 's/^ARG PYTHON_VERSION=\([0-9.]*\)$/\1/p' Containerfile)"
[[ -n $PYTHON_VERSION ]] || die "no 'ARG PYTHON_VERSION=' in Containerfile"

MIRROR="${PNC_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY="${PNC_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}"
log "root filesystem: mmdebstrap bookworm minbase + python3, python3-venv, tini; the venv from PyPI"
mmdebstrap --variant=minbase --include=python3,python3-venv,tini \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --customize-hook='mkdir -p "$1/tmp/pnc-build"' \
  --customize-hook="sync-in $STAGE /tmp/pnc-build" \
  --customize-hook="chroot \"\$1\" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 PYTHON_VERSION=$PYTHON_VERSION PIP_CERT=/tmp/pnc-build/ca.pem /bin/sh /tmp/pnc-build/install-venv.sh /tmp/pnc-build/src" \
  --customize-hook='rm -rf "$1/tmp/pnc-build" "$1/root/.cache"' \
  bookworm "$WORK/rootfs.tar" \
  "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" "deb $SECURITY bookworm-security main" \
  >"$WORK/mmdebstrap.log" 2>&1 || { tail -n 40 "$WORK/mmdebstrap.log" >&2; die "mmdebstrap failed"; }

log "OCI image: buildah from scratch, the root filesystem, the config"
BUILDAH=(--root "$CACHE/buildah/storage" --runroot "$CACHE/buildah/run" --storage-driver vfs)
CTR="$(buildah "${BUILDAH[@]}" from scratch)"
buildah "${BUILDAH[@]}" add "$CTR" "$WORK/rootfs.tar" / >/dev/null
buildah "${BUILDAH[@]}" config \
  --user 65532:65532 \
  --workingdir / \
  --env PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env PYTHONDONTWRITEBYTECODE=1 \
  --env PYTHONUNBUFFERED=1 \
  --port 8080/tcp --port 8081/tcp \
  --entrypoint '["tini", "--", "proxmox-network-controller"]' \
  --label "org.opencontainers.image.title=proxmox-network-controller" \
  --label "org.opencontainers.image.version=$VERSION" \
  "$CTR"
buildah "${BUILDAH[@]}" commit --quiet --format oci --disable-compression=false --rm "$CTR" "oci-archive:$OUT/image.tar:$REF" >/dev/null
CTR=""
# The image itself is in the archive; the storage copy only costs disk.
buildah "${BUILDAH[@]}" rmi --all >/dev/null 2>&1 || true

stat -c %s "$WORK/rootfs.tar" >"$OUT/rootfs-bytes"
echo "$REF" >"$OUT/ref"
echo "$(( $(date +%s) - t0 ))" >"$OUT/build-seconds"
touch "$OUT/.complete"
# Keep the three newest builds (other clones may use other trees); drop older ones (~92 MB each).
find "$CACHE" -mindepth 2 -maxdepth 2 -name .complete -printf '%T@ %h\n' | sort -rn | tail -n +4 | cut -d' ' -f2- \
  | while read -r old; do rm -rf "$old"; done
log "built $REF in $(cat "$OUT/build-seconds")s: rootfs $(( $(cat "$OUT/rootfs-bytes") / 1000000 )) MB, OCI archive $(( $(stat -c %s "$OUT/image.tar") / 1000000 )) MB"
echo "$OUT/image.tar"
