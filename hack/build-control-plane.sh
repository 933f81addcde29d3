#!/usr/bin/env bash
# Build kube-apiserver, kubectl and etcd from their Go modules (product-decisions.md §5).
# Binaries are cached under ~/.cache/proxmox-network-controller/control-plane/<version>/,
# so a second run only checks that they exist. Prints the bin directory on stdout.
#
#   hack/build-control-plane.sh          # kube-apiserver, kubectl, etcd
#   hack/build-control-plane.sh --node   # also kubelet, kube-controller-manager, kube-scheduler
#                                        # (the bed's node), same module and version
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"
CACHE="${PNC_CACHE_DIR:-$HOME/.cache/proxmox-network-controller}/control-plane"
BIN="$CACHE/k8s-$KUBERNETES_VERSION-etcd-$ETCD_VERSION/bin"
mkdir -p "$BIN"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
# 2 cores, 24 GiB: keep the compiler to two jobs.
export GOMAXPROCS="${GOMAXPROCS:-2}"
log() { echo "[build-control-plane] $*" >&2; }
NODE=""
case "${1:-}" in
  "") ;;
  --node) NODE=1 ;;
  *) log "usage: $0 [--node]"; exit 2 ;;
esac
NODE_BINARIES=(kubelet kube-controller-manager kube-scheduler)

need_go() {
  command -v go >/dev/null || { log "go not found on PATH"; exit 1; }
}

# A wrapper module in the current directory that requires k8s.io/kubernetes at
# KUBERNETES_VERSION and imports PACKAGE... (so that `go mod tidy` resolves what they need):
#   k8s_wrapper MODULE_NAME PACKAGE...
k8s_wrapper() {
  local name="$1"
  shift
  go mod init "$name" >&2
  # k8s.io/kubernetes requires its staging modules at v0.0.0 with local replaces;
  # pin every one of them to the published version instead.
  local modfile
  modfile="$(mktemp)"
  curl -fsSL "$(go env GOPROXY | cut -d, -f1)/k8s.io/kubernetes/@v/$KUBERNETES_VERSION.mod" -o "$modfile" \
    || go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" >/dev/null
  grep -oE '^\s+k8s\.io/[A-Za-z0-9._/-]+ => \./staging' "$modfile" | awk '{print $1}' | while read -r m; do
    go mod edit -replace "$m=$m@$KUBERNETES_STAGING_VERSION"
  done
  rm -f "$modfile"
  go mod edit -require "k8s.io/kubernetes@$KUBERNETES_VERSION"
  { printf 'package main\n\nimport (\n'; printf '\t_ "%s"\n' "$@"; printf ')\n\nfunc main() {}\n'; } > deps.go
  go mod tidy >&2
}

build_kubernetes() {
  local work="$CACHE/src-k8s-$KUBERNETES_VERSION"
  mkdir -p "$work"
  cd "$work"
  if [[ ! -f go.mod ]]; then
    log "creating wrapper module for k8s.io/kubernetes $KUBERNETES_VERSION"
    k8s_wrapper pnc.local/k8s-wrapper k8s.io/kubernetes/cmd/kube-apiserver/app k8s.io/kubectl/pkg/cmd
  fi
  if [[ ! -x "$BIN/kube-apiserver" ]]; then
    log "building kube-apiserver (several minutes on 2 cores)"
    go build -p 2 -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37" \
      -o "$BIN/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver >&2
    mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
  fi
  if [[ ! -x "$BIN/kubectl" ]]; then
    log "building kubectl"
    go build -p 2 -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION" \
      -o "$BIN/kubectl.tmp" k8s.io/kubernetes/cmd/kubectl >&2
    mv "$BIN/kubectl.tmp" "$BIN/kubectl"
  fi
}

build_etcd() {
  [[ -x "$BIN/etcd" ]] && return 0
  local work="$CACHE/src-etcd-$ETCD_VERSION"
  mkdir -p "$work"
  cd "$work"
  if [[ ! -f go.mod ]]; then
    go mod init pnc.local/etcd-wrapper >&2
    go mod edit -require "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
    printf 'package main\n\nimport _ "go.etcd.io/etcd/server/v3/etcdmain"\n\nfunc main() {}\n' > deps.go
    go mod tidy >&2
  fi
  log "building etcd $ETCD_VERSION"
  go build -p 2 -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3 >&2
  mv "$BIN/etcd.tmp" "$BIN/etcd"
}

# The node's binaries, from a wrapper module of their own (so the control plane's wrapper,
# which another clone's build may be using, is never edited); the versions are the same:
# every staging module is pinned to KUBERNETES_STAGING_VERSION and the rest comes from
# k8s.io/kubernetes' own go.mod.
build_node() {
  local work="$CACHE/src-k8s-node-$KUBERNETES_VERSION"
  mkdir -p "$work"
  cd "$work"
  if [[ ! -f .tidy ]]; then
    log "creating wrapper module for the node's binaries of k8s.io/kubernetes $KUBERNETES_VERSION"
    rm -f go.mod go.sum
    k8s_wrapper pnc.local/k8s-node-wrapper k8s.io/kubernetes/cmd/kubelet/app \
      k8s.io/kubernetes/cmd/kube-controller-manager/app k8s.io/kubernetes/cmd/kube-scheduler/app
    touch .tidy
  fi
  local b
  for b in "${NODE_BINARIES[@]}"; do
    [[ -x "$BIN/$b" ]] && continue
    log "building $b (several minutes on 2 cores)"
    go build -p 2 -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37" \
      -o "$BIN/$b.tmp" "k8s.io/kubernetes/cmd/$b" >&2
    mv "$BIN/$b.tmp" "$BIN/$b"
  done
}

node_built() {
  local b
  for b in "${NODE_BINARIES[@]}"; do [[ -x "$BIN/$b" ]] || return 1; done
}

need_go
if [[ -x "$BIN/kube-apiserver" && -x "$BIN/kubectl" && -x "$BIN/etcd" ]] && { [[ -z $NODE ]] || node_built; }; then
  echo "$BIN"; exit 0
fi
if [[ ! -x "$BIN/kube-apiserver" || ! -x "$BIN/kubectl" || ! -x "$BIN/etcd" ]]; then
  build_etcd
  build_kubernetes
fi
[[ -n $NODE ]] && build_node
echo "$BIN"
