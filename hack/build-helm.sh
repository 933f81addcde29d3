#!/usr/bin/env bash
# Build `helm` from its Go module: helm.sh/helm/v3 at HELM_VERSION (hack/versions.env),
# package ./cmd/helm. Cached under
#
#   ~/.cache/proxmox-network-controller/helm/<version>/bin/helm
#
# so a second run only checks that it exists. Prints the bin directory on stdout. Quiet on
# success, loud on failure. The build runs at the lowest CPU priority with one compile job.
#
# `go install helm.sh/helm/v3/cmd/helm@v3.22.0` asks the proxy for the version list, which it
# may refuse here; downloading the exact version works (checked against the checksum database
# as usual, never switched off). helm's go.mod has replace directives, which only count in the
# main module: the build runs inside a writable copy of the module itself, whose go.sum
# verifies its dependencies.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"
CACHE="${PNC_CACHE_DIR:-$HOME/.cache/proxmox-network-controller}/helm"
OUT="$CACHE/$HELM_VERSION"
BIN="$OUT/bin"
SRC="$CACHE/src"
# Our own GOFLAGS only: a caller's -mod=vendor or the like must not leak into this build.
export GOFLAGS="-buildvcs=false -p=1" GOWORK=off CGO_ENABLED=0
export GOMAXPROCS="${GOMAXPROCS:-2}"
LOWPRIO=(nice -n 19)
log() { echo "[build-helm] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# shellcheck source=build-lib.sh
source "$HERE/build-lib.sh"  # quiet

command -v go >/dev/null || die "go not found on PATH"
command -v python3 >/dev/null || die "python3 not found on PATH"
# What the build sets besides the version (bump when the ldflags change: the cached binary is
# rebuilt). 2: Helm's Makefile's Kubernetes version ldflags (without them `helm template` and
# `helm lint` assume Kubernetes v1.20 and refuse a chart whose kubeVersion asks for more).
BUILD_STAMP="ldflags 2"
if [[ -x "$BIN/helm" && "$(cat "$OUT/.build" 2>/dev/null)" == "$BUILD_STAMP" ]]; then
  echo "$BIN"; exit 0
fi
mkdir -p "$BIN" "$SRC"
NOMOD="$(mktemp -d)"
trap 'rm -rf "$NOMOD"' EXIT

mod=helm.sh/helm/v3
cd "$NOMOD"
if ! json="$("${LOWPRIO[@]}" go mod download -json "$mod@$HELM_VERSION" 2>&1)"; then
  log "go mod download $mod@$HELM_VERSION failed:"; printf '%s\n' "$json" >&2; exit 1
fi
dir="$(printf '%s' "$json" | python3 -c 'import json, sys; print(json.load(sys.stdin).get("Dir") or "")')"
[[ -n $dir && -d $dir ]] || { log "go mod download gave no Dir:"; printf '%s\n' "$json" >&2; exit 1; }
commit="$(printf '%s' "$json" | python3 -c 'import json, sys; print((json.load(sys.stdin).get("Origin") or {}).get("Hash") or "")')"

work="$SRC/helm@$HELM_VERSION"
if [[ ! -f "$work/.copied" ]]; then
  rm -rf "$work" "$work.tmp"
  cp -r "$dir" "$work.tmp"
  chmod -R u+w "$work.tmp"
  mv "$work.tmp" "$work"
  touch "$work/.copied"
fi
cd "$work"
log "building helm $HELM_VERSION (low priority, one job)"
pkg=helm.sh/helm/v3/internal/version
# As Helm's Makefile: the Kubernetes version `helm template`/`lint` assume without a cluster is
# that of the client-go Helm is built with (v0.<minor> -> 1.<minor>).
k8s="$(awk '$1 == "k8s.io/client-go" {print $2; exit}' go.mod)"
[[ $k8s =~ ^v0\.([0-9]+)\. ]] || die "no k8s.io/client-go version in helm's go.mod (got '$k8s')"
minor="${BASH_REMATCH[1]}"
k8sflags=""
for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  k8sflags+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$minor"
done
quiet "${LOWPRIO[@]}" go build -trimpath \
  -ldflags "-s -w -X $pkg.version=$HELM_VERSION -X $pkg.gitCommit=$commit -X $pkg.gitTreeState=clean$k8sflags" \
  -o "$BIN/helm.tmp" ./cmd/helm
mv "$BIN/helm.tmp" "$BIN/helm"
"$BIN/helm" version --short >/dev/null || die "the built helm does not run"
printf '%s' "$BUILD_STAMP" > "$OUT/.build"
echo "$BIN"
