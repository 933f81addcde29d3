#!/usr/bin/env bash
# The two local OCI images the bed's node needs (issue 17 part 2), built without a registry:
#
#   * localhost/pnc-testbed/pause:1 -- the sandbox image containerd is configured with
#     (sandbox_image): our own hack/node/pause.c, compiled statically, as /pause, user 65535;
#   * localhost/pnc-testbed/busybox:<version> -- Debian's busybox-static as /bin/busybox with
#     links for the few applets the node's test pods run (sh, echo, sleep, cat, ...).
#
# Packed by buildah (its own storage under the cache) as OCI archives, cached by content
# (pause.c, this script, the busybox version) under
# ~/.cache/proxmox-network-controller/node-images/<sha256>/. Prints that directory on stdout:
# pause.tar and busybox.tar in it, and refs.env with PAUSE_IMAGE= and BUSYBOX_IMAGE=.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "[build-pause] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

for tool in cc buildah; do
  command -v "$tool" >/dev/null || die "$tool not found; run hack/install-deps.sh"
done
BUSYBOX=/bin/busybox
[[ -x $BUSYBOX ]] && dpkg -s busybox-static >/dev/null 2>&1 \
  || die "Debian's busybox-static is not installed; run hack/install-deps.sh"
BUSYBOX_VERSION="$(dpkg-query -W -f '${Version}' busybox-static)"
BUSYBOX_TAG="$(printf '%s' "$BUSYBOX_VERSION" | sed 's/^[0-9]*://; s/[^A-Za-z0-9_.-]/_/g')"
PAUSE_REF=localhost/pnc-testbed/pause:1
BUSYBOX_REF="localhost/pnc-testbed/busybox:$BUSYBOX_TAG"
APPLETS=(sh echo sleep cat ls true false kill env id date hostname head tail)

KEY="$( { sha256sum <"$HERE/node/pause.c"; sha256sum <"$HERE/build-pause.sh"; echo "$BUSYBOX_VERSION"; } | sha256sum | cut -c1-32)"
CACHE="${PNC_CACHE_DIR:-$HOME/.cache/proxmox-network-controller}/node-images"
OUT="$CACHE/$KEY"
if [[ -f "$OUT/.complete" ]]; then
  echo "$OUT"
  exit 0
fi
rm -rf "$OUT"
mkdir -p "$OUT"
WORK="$(mktemp -d "$CACHE/work.XXXXXX")"
BUILDAH=(--root "$CACHE/buildah/storage" --runroot "$CACHE/buildah/run" --storage-driver vfs)
CTR=""
cleanup() {
  if [[ -n $CTR ]]; then buildah "${BUILDAH[@]}" rm "$CTR" >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

log "pause: compiling hack/node/pause.c (static)"
cc -Os -static -Wall -Wextra -Werror -o "$WORK/pause" "$HERE/node/pause.c"
strip "$WORK/pause"
[[ "$("$WORK/pause" -v)" == "pnc-pause 1" ]] || die "the pause binary does not run"

commit() {  # commit CTR as an OCI archive: commit FILE REF
  buildah "${BUILDAH[@]}" commit --quiet --format oci --rm "$CTR" "oci-archive:$1:$2" >/dev/null
  CTR=""
}

CTR="$(buildah "${BUILDAH[@]}" from scratch)"
buildah "${BUILDAH[@]}" copy --chmod 0755 "$CTR" "$WORK/pause" /pause >/dev/null
buildah "${BUILDAH[@]}" config --user 65535:65535 --entrypoint '["/pause"]' --workingdir / "$CTR"
commit "$OUT/pause.tar" "$PAUSE_REF"

log "busybox: Debian's busybox-static $BUSYBOX_VERSION"
mkdir -p "$WORK/bb/bin" "$WORK/bb/tmp"
chmod 1777 "$WORK/bb/tmp"
cp "$BUSYBOX" "$WORK/bb/bin/busybox"
for a in "${APPLETS[@]}"; do ln -s busybox "$WORK/bb/bin/$a"; done
tar -C "$WORK/bb" -cf "$WORK/bb.tar" .
CTR="$(buildah "${BUILDAH[@]}" from scratch)"
buildah "${BUILDAH[@]}" add "$CTR" "$WORK/bb.tar" / >/dev/null
buildah "${BUILDAH[@]}" config --env PATH=/bin --workingdir / --cmd '["sh"]' "$CTR"
commit "$OUT/busybox.tar" "$BUSYBOX_REF"
buildah "${BUILDAH[@]}" rmi --all >/dev/null 2>&1 || true

printf 'PAUSE_IMAGE=%s\nBUSYBOX_IMAGE=%s\n' "$PAUSE_REF" "$BUSYBOX_REF" >"$OUT/refs.env"
touch "$OUT/.complete"
echo "$OUT"
