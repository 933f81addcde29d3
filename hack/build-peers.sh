#!/usr/bin/env bash
# Build the real peers of the test bed (issues 13 and 24):
#
#   * sigs.k8s.io/cluster-api-ipam-provider-in-cluster  -> bin/ipam-provider-in-cluster
#     (its Go module, from the module proxy)
#   * github.com/kubeovn/kube-ovn                       -> bin/kube-ovn-controller
#                                                          bin/kube-ovn-daemon (the node
#                                                          agent, kube-ovn-cni)
#                                                          bin/kube-ovn (its CNI plugin)
#     (v1.15.24: the tag's `git archive` in ../shared/peers, checked against SHA256SUMS before
#     it is unpacked; its dependencies from the module proxy, checksum database on.
#     PNC_KUBE_OVN_VERSION=v1.13.0: the module proxy's v1.13.0, the version before v1.15.24)
#   * Kube-OVN's own Open vSwitch and OVN (hack/build-ovn.sh; not for v1.13.0, whose bed
#     runs Debian's OVN)
#
# and stage what a bed needs to run them: their CRDs (the IPAM provider's, cluster-api's
# IPAddress / IPAddressClaim / Cluster, Kube-OVN's, rendered by helm where the chart
# templates them), Kube-OVN's ClusterRole and the OVSDB schemas Kube-OVN embeds. Versions
# come from hack/versions.env. Everything lands in
#
#   ~/.cache/proxmox-network-controller/peers/<versions>/
#       bin/ipam-provider-in-cluster  bin/kube-ovn-controller  bin/kube-ovn-daemon  bin/kube-ovn
#       crds/ipam/*.yaml  crds/cluster-api/*.yaml  crds/kube-ovn/kube-ovn-crd.yaml
#       rbac/kube-ovn/ovn-CR.yaml  cni/01-kube-ovn.conflist
#       ovsdb/ovn-nb.ovsschema  ovsdb/ovn-sb.ovsschema
#
# so a second run only checks that they exist. Prints the bin directory on stdout (the rest
# is at ../crds and ../ovsdb). Quiet on success, loud on failure. Builds run at the lowest
# CPU priority with one compile job: other work on the machine keeps its share.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"
KUBE_OVN_VERSION="${PNC_KUBE_OVN_VERSION:-$KUBE_OVN_VERSION}"
ROOT="$(cd "$HERE/.." && pwd)"
SOURCES="${PNC_PEER_SOURCES:-$ROOT/../shared/peers}"
CACHE="${PNC_CACHE_DIR:-$HOME/.cache/proxmox-network-controller}/peers"
OUT="$CACHE/ipam-$IPAM_PROVIDER_VERSION-capi-$CLUSTER_API_VERSION-kube-ovn-$KUBE_OVN_VERSION"
BIN="$OUT/bin"
SRC="$CACHE/src"
KUBE_OVN_SUM="$HERE/peers/kube-ovn.go.sum"
# Our own GOFLAGS only: a caller's -mod=vendor or the like must not leak into these builds.
export GOFLAGS="-buildvcs=false -p=1" GOWORK=off
export GOMAXPROCS="${GOMAXPROCS:-2}"
LOWPRIO=(nice -n 19)
log() { echo "[build-peers] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Run a command quietly; on failure show the end of its output and stop.
# shellcheck source=build-lib.sh
source "$HERE/build-lib.sh"  # quiet

# json_get KEY: one top-level string field of the JSON object on stdin ("" when absent).
json_get() {
  python3 -c 'import json, sys; v = json.load(sys.stdin).get(sys.argv[1]); print(v if isinstance(v, str) else "")' "$1"
}

# go mod download -json MOD@VER (in the current directory) -> the module's Dir on stdout.
mod_dir() {
  local json dir
  if ! json="$("${LOWPRIO[@]}" go mod download -json "$1" 2>&1)"; then
    log "go mod download $1 failed:"
    printf '%s\n' "$json" >&2
    exit 1
  fi
  dir="$(printf '%s' "$json" | json_get Dir)"
  [[ -n $dir && -d $dir ]] || { log "go mod download $1 gave no Dir:"; printf '%s\n' "$json" >&2; exit 1; }
  echo "$dir"
}

# A writable copy of a module directory (the module cache is read-only), made once.
writable_copy() {
  local from="$1" to="$2"
  [[ -f "$to/.copied" ]] && return 0
  rm -rf "$to"
  mkdir -p "$(dirname "$to")"
  cp -r "$from" "$to.tmp"
  chmod -R u+w "$to.tmp"
  mv "$to.tmp" "$to"
  touch "$to/.copied"
}

stage() {  # stage SRC_FILE DEST_DIR: copy one file, writable, replacing what was there
  [[ -f $1 ]] || die "missing in the module: $1"
  mkdir -p "$2"
  install -m 0644 "$1" "$2/$(basename "$1")"
}

expected_files() {
  printf '%s\n' \
    bin/ipam-provider-in-cluster bin/kube-ovn-controller bin/kube-ovn-daemon bin/kube-ovn \
    crds/ipam/ipam.cluster.x-k8s.io_inclusterippools.yaml \
    crds/ipam/ipam.cluster.x-k8s.io_globalinclusterippools.yaml \
    crds/cluster-api/ipam.cluster.x-k8s.io_ipaddresses.yaml \
    crds/cluster-api/ipam.cluster.x-k8s.io_ipaddressclaims.yaml \
    crds/cluster-api/cluster.x-k8s.io_clusters.yaml \
    crds/kube-ovn/kube-ovn-crd.yaml rbac/kube-ovn/ovn-CR.yaml cni/01-kube-ovn.conflist \
    ovsdb/ovn-nb.ovsschema ovsdb/ovn-sb.ovsschema
}

complete() {
  [[ -f "$OUT/.complete" ]] || return 1
  local f
  while read -r f; do [[ -s "$OUT/$f" ]] || return 1; done < <(expected_files)
  [[ -x "$BIN/ipam-provider-in-cluster" && -x "$BIN/kube-ovn-controller" && -x "$BIN/kube-ovn-daemon" \
     && -x "$BIN/kube-ovn" ]]
}

# --------------------------------------------------------------------------- IPAM provider

build_ipam() {
  local mod=sigs.k8s.io/cluster-api-ipam-provider-in-cluster
  local dir work capi capi_dir
  # `go install …@version` asks the proxy for the version list, which it refuses here;
  # downloading the exact version works (checked against the checksum database as usual).
  cd "$NOMOD"
  dir="$(mod_dir "$mod@$IPAM_PROVIDER_VERSION")"
  work="$SRC/cluster-api-ipam-provider-in-cluster@$IPAM_PROVIDER_VERSION"
  writable_copy "$dir" "$work"
  cd "$work"
  capi="$(go mod edit -json | python3 -c 'import json, sys
print(" ".join(r["Version"] for r in json.load(sys.stdin)["Require"] if r["Path"] == "sigs.k8s.io/cluster-api"))')"
  [[ $capi == "$CLUSTER_API_VERSION" ]] \
    || die "$mod $IPAM_PROVIDER_VERSION requires sigs.k8s.io/cluster-api $capi, versions.env says $CLUSTER_API_VERSION"
  if [[ ! -x "$BIN/ipam-provider-in-cluster" ]]; then
    log "building ipam-provider-in-cluster $IPAM_PROVIDER_VERSION (low priority, one job)"
    local pkg=sigs.k8s.io/cluster-api-ipam-provider-in-cluster/version
    local minor="${IPAM_PROVIDER_VERSION#v*.}"; minor="${minor%%.*}"
    local major="${IPAM_PROVIDER_VERSION#v}"; major="${major%%.*}"
    CGO_ENABLED=0 quiet "${LOWPRIO[@]}" go build -trimpath \
      -ldflags "-s -w -X $pkg.gitVersion=$IPAM_PROVIDER_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean" \
      -o "$BIN/ipam-provider-in-cluster.tmp" .
    mv "$BIN/ipam-provider-in-cluster.tmp" "$BIN/ipam-provider-in-cluster"
  fi
  stage config/crd/bases/ipam.cluster.x-k8s.io_inclusterippools.yaml "$OUT/crds/ipam"
  stage config/crd/bases/ipam.cluster.x-k8s.io_globalinclusterippools.yaml "$OUT/crds/ipam"
  # IPAddress, IPAddressClaim and Cluster (its claim controller watches Clusters) come from
  # cluster-api itself, at the version the provider is built against.
  cd "$NOMOD"
  capi_dir="$(mod_dir "sigs.k8s.io/cluster-api@$CLUSTER_API_VERSION")"
  local f
  for f in ipam.cluster.x-k8s.io_ipaddresses.yaml ipam.cluster.x-k8s.io_ipaddressclaims.yaml cluster.x-k8s.io_clusters.yaml; do
    stage "$capi_dir/config/crd/bases/$f" "$OUT/crds/cluster-api"
  done
}

# --------------------------------------------------------------------------- Kube-OVN

# The checksum database has no entry for github.com/kubeovn/kube-ovn v1.13.0, so a plain
# `go mod download` outside a module fails (404 from the lookup). Verification stays on:
# hack/peers/kube-ovn.go.sum pins the module's two hashes (zip and go.mod, checked once
# against the published v1.13.0 tag). The download runs inside a throw-away module that
# requires kube-ovn at that version and whose go.sum is exactly that file. Inside a module,
# the go command checks every module it downloads (or finds in the module cache, through its
# recorded .ziphash) against the main module's go.sum before it consults the checksum
# database: a line that matches means verified, a line that differs is a fatal
# "SECURITY ERROR … checksum mismatch" (tried: one changed character in either line fails
# the download, with a warm and with an empty module cache; without the lines it fails on
# the checksum database's 404). The checksum database is never switched off.
verified_kube_ovn_dir() {
  grep -qx "github.com/kubeovn/kube-ovn $KUBE_OVN_VERSION h1:[A-Za-z0-9+/=]*" "$KUBE_OVN_SUM" \
    && grep -qx "github.com/kubeovn/kube-ovn $KUBE_OVN_VERSION/go.mod h1:[A-Za-z0-9+/=]*" "$KUBE_OVN_SUM" \
    || die "$KUBE_OVN_SUM has no hashes for kube-ovn $KUBE_OVN_VERSION (update it with the version)"
  local verify="$NOMOD/kube-ovn-verify"
  mkdir -p "$verify"
  printf 'module pnc.local/kube-ovn-verify\n\ngo 1.23\n\nrequire github.com/kubeovn/kube-ovn %s\n' \
    "$KUBE_OVN_VERSION" > "$verify/go.mod"
  cp "$KUBE_OVN_SUM" "$verify/go.sum"
  cd "$verify"
  mod_dir "github.com/kubeovn/kube-ovn@$KUBE_OVN_VERSION"
}

# kube_ovn_source_dir: a writable Kube-OVN source tree at KUBE_OVN_VERSION (path on stdout).
kube_ovn_source_dir() {
  local work="$SRC/kube-ovn@$KUBE_OVN_VERSION"
  if [[ $KUBE_OVN_VERSION == "$KUBE_OVN_LEGACY_VERSION" ]]; then
    local dir
    dir="$(verified_kube_ovn_dir)"
    # Its go.mod has replace directives (forked libovsdb, arp, kubevirt client, k8s.io pins),
    # which only count in the main module: build inside a writable copy of the module itself.
    writable_copy "$dir" "$work"
  else
    local tarball="$SOURCES/kube-ovn-$KUBE_OVN_VERSION.tar.gz"
    [[ -f $tarball ]] || die "$tarball missing (../shared/peers/README.md says where it comes from)"
    (cd "$SOURCES" && grep -E "  kube-ovn-$KUBE_OVN_VERSION\.tar\.gz\$" SHA256SUMS | sha256sum -c --quiet -) >/dev/null 2>&1 \
      || die "$tarball does not match $SOURCES/SHA256SUMS"
    if [[ ! -f "$work/.copied" ]]; then
      rm -rf "$work" "$work.tmp"
      mkdir -p "$work.tmp"
      tar -xzf "$tarball" -C "$work.tmp" --strip-components=1
      mv "$work.tmp" "$work"
      touch "$work/.copied"
    fi
  fi
  echo "$work"
}

# kube_ovn_binary NAME MAIN COMMIT: build one Kube-OVN program (in the source tree, the
# current directory) to $BIN/NAME once, with the version and commit its versions package
# prints at start-up. CGO_ENABLED=0 as in Kube-OVN's own Makefile: libcap's psx then uses the
# Go runtime's AllThreadsSyscall instead of libpsx (static, no gcc).
kube_ovn_binary() {
  local name="$1" main="$2" commit="$3" pkg=github.com/kubeovn/kube-ovn/versions
  [[ -x "$BIN/$name" ]] && return 0
  log "building $name $KUBE_OVN_VERSION (low priority, one job; long on 2 cores when cold)"
  local t0=$SECONDS
  CGO_ENABLED=0 quiet "${LOWPRIO[@]}" go build -trimpath \
    -ldflags "-s -w -X $pkg.VERSION=$KUBE_OVN_VERSION -X $pkg.COMMIT=$commit" \
    -o "$BIN/$name.tmp" "$main"
  mv "$BIN/$name.tmp" "$BIN/$name"
  log "built $name in $((SECONDS - t0)) s"
}

# kube_ovn_daemon_version BINARY: the "Version: … Commit: …" the agent logs at start-up (its
# versions.String()); it has no --version flag. --install-cni-config between two scratch
# files is its one mode that logs that and exits without touching the machine. Fails when
# the version is not KUBE_OVN_VERSION (the -X flags did not take).
kube_ovn_daemon_version() {
  local tmp out version commit
  tmp="$(mktemp -d)"
  echo '{}' > "$tmp/in.conflist"
  out="$("$1" --install-cni-config --cni-conf-file="$tmp/in.conflist" --cni-conf-dir="$tmp" \
           --cni-conf-name=out.conflist 2>&1)" || { rm -rf "$tmp"; die "$1 --install-cni-config failed: $out"; }
  rm -rf "$tmp"
  version="$(awk '$1 == "Version:" { print $2; exit }' <<<"$out")"
  commit="$(awk '$1 == "Commit:" { print $2; exit }' <<<"$out")"
  [[ $version == "$KUBE_OVN_VERSION" ]] || die "$1 says version '$version', expected $KUBE_OVN_VERSION: $out"
  echo "Kube-OVN $version (commit $commit)"
}

# kube_ovn_cni_version BINARY: the "about" line the CNI plugin prints on stderr when called
# without CNI_COMMAND ("CNI kube-ovn plugin <version>", cmd/cni through containernetworking's
# skel), which touches nothing. Fails when the version is not KUBE_OVN_VERSION.
kube_ovn_cni_version() {
  local out first
  out="$(env -u CNI_COMMAND "$1" 2>&1 </dev/null)" || true
  first="$(head -n 1 <<<"$out")"
  [[ $first == "CNI kube-ovn plugin $KUBE_OVN_VERSION" ]] \
    || die "$1 says '$out', expected 'CNI kube-ovn plugin $KUBE_OVN_VERSION'"
  echo "$first"
}

build_kube_ovn() {
  local work commit="$KUBE_OVN_COMMIT" says
  work="$(kube_ovn_source_dir)"
  if [[ $KUBE_OVN_VERSION == "$KUBE_OVN_LEGACY_VERSION" ]]; then
    commit="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["Origin"]["Hash"])' \
      "$(go env GOMODCACHE)/cache/download/github.com/kubeovn/kube-ovn/@v/$KUBE_OVN_VERSION.info" 2>/dev/null || echo unknown)"
  fi
  cd "$work"
  # v1.13's ./cmd is one multi-call binary; from v1.15 each program is its own main package
  # (./cmd/controller, ./cmd/daemon). Both dispatch on the base name of argv[0]: the binaries
  # must be called kube-ovn-controller and kube-ovn-daemon.
  local controller_main=./cmd/controller daemon_main=./cmd/daemon
  if [[ $KUBE_OVN_VERSION == "$KUBE_OVN_LEGACY_VERSION" ]]; then
    controller_main=./cmd daemon_main=./cmd
  fi
  kube_ovn_binary kube-ovn-controller "$controller_main" "$commit"
  # The node agent (kube-ovn-cni's kube-ovn-daemon). CGO_ENABLED=0 as Kube-OVN's Makefile
  # builds it too (makefiles/build.mk, build-go): it reaches OVS, iptables and ipset through
  # their command-line tools and the kernel through netlink, neither needs cgo, and libcap
  # (which it only reads its capabilities with) works without it as above. The image's
  # setcap (NET_ADMIN, NET_RAW, NET_BIND_SERVICE, SYS_ADMIN) is not needed: the bed runs it
  # as root.
  if [[ ! -x "$BIN/kube-ovn-daemon" ]]; then
    kube_ovn_binary kube-ovn-daemon "$daemon_main" "$commit"
    # A failed check inside $(…) ends only the subshell: check its status, and drop the
    # binary so that the next run builds and checks it again.
    says="$(kube_ovn_daemon_version "$BIN/kube-ovn-daemon")" || { rm -f "$BIN/kube-ovn-daemon"; exit 1; }
    log "kube-ovn-daemon says: $says"
  fi
  # The CNI plugin the runtime calls (Kube-OVN's Makefile: ./cmd/cni, the image installs it
  # as /opt/cni/bin/kube-ovn, dist/images/install-cni.sh); it only forwards each request to
  # the agent's socket. Its own main package in both versions; CGO_ENABLED=0 as above.
  if [[ ! -x "$BIN/kube-ovn" ]]; then
    kube_ovn_binary kube-ovn ./cmd/cni "$commit"
    says="$(kube_ovn_cni_version "$BIN/kube-ovn")" || { rm -f "$BIN/kube-ovn"; exit 1; }
    log "kube-ovn (the CNI plugin) says: $says"
  fi
  # The chart's CRD file and ClusterRole: plain YAML in v1.13, Helm-templated from v1.15
  # (rendered with the chart's defaults by the helm of hack/build-helm.sh).
  local crd=charts/kube-ovn/templates/kube-ovn-crd.yaml role=charts/kube-ovn/templates/ovn-CR.yaml
  mkdir -p "$OUT/crds/kube-ovn" "$OUT/rbac/kube-ovn"
  if grep -q '{{' "$crd" "$role"; then
    local helm
    helm="$("$HERE/build-helm.sh")/helm" || die "hack/build-helm.sh failed"
    # The chart wants a Kubernetes version (helm's default is v1.20) and its master nodes'
    # addresses (only to render the central Deployment, which is not shown).
    local render=(template kube-ovn charts/kube-ovn --namespace kube-system
                  --kube-version "$KUBERNETES_VERSION" --set MASTER_NODES=127.0.0.1)
    "$helm" "${render[@]}" --show-only templates/kube-ovn-crd.yaml > "$OUT/crds/kube-ovn/kube-ovn-crd.yaml.tmp" \
      || die "helm template of $crd failed"
    "$helm" "${render[@]}" --show-only templates/ovn-CR.yaml > "$OUT/rbac/kube-ovn/ovn-CR.yaml.tmp" \
      || die "helm template of $role failed"
    mv "$OUT/crds/kube-ovn/kube-ovn-crd.yaml.tmp" "$OUT/crds/kube-ovn/kube-ovn-crd.yaml"
    mv "$OUT/rbac/kube-ovn/ovn-CR.yaml.tmp" "$OUT/rbac/kube-ovn/ovn-CR.yaml"
  else
    stage "$crd" "$OUT/crds/kube-ovn"
    stage "$role" "$OUT/rbac/kube-ovn"
  fi
  # The CNI configuration Kube-OVN's image installs (dist/images/Dockerfile, install-cni.sh):
  # hack/bed/kube_ovn_cni.py adapts it for a kubelet node of the bed.
  stage dist/images/01-kube-ovn.conflist "$OUT/cni"
  # The OVSDB schemas Kube-OVN's generated models were made from (libovsdb modelgen keeps
  # them as a Go raw string, `var schema = \`{…}\``, in model.go).
  mkdir -p "$OUT/ovsdb"
  local db
  for db in nb sb; do
    awk '/^var schema = `/ { f = 1; sub(/^var schema = `/, "") }
         f { if (index($0, "`")) { sub(/`.*/, ""); print; exit } print }' \
      "pkg/ovsdb/ovn$db/model.go" > "$OUT/ovsdb/ovn-$db.ovsschema.tmp"
    python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); assert s["name"] and s["version"] and s["tables"]' \
      "$OUT/ovsdb/ovn-$db.ovsschema.tmp" 2>/dev/null || die "no OVSDB schema found in pkg/ovsdb/ovn$db/model.go"
    mv "$OUT/ovsdb/ovn-$db.ovsschema.tmp" "$OUT/ovsdb/ovn-$db.ovsschema"
  done
}

command -v go >/dev/null || die "go not found on PATH"
command -v python3 >/dev/null || die "python3 not found on PATH"
build_ovn() {  # Kube-OVN's OVS and OVN (cached by hack/build-ovn.sh itself); none for v1.13
  [[ $KUBE_OVN_VERSION == "$KUBE_OVN_LEGACY_VERSION" ]] && return 0
  "$HERE/build-ovn.sh" >/dev/null || die "hack/build-ovn.sh failed"
}
if complete; then
  build_ovn
  echo "$BIN"; exit 0
fi
mkdir -p "$BIN" "$SRC"
# An empty directory outside any module, for downloads by exact version.
NOMOD="$(mktemp -d)"
trap 'rm -rf "$NOMOD"' EXIT
rm -f "$OUT/.complete"
build_ipam
build_kube_ovn
build_ovn
complete_list="$(expected_files)"
while read -r f; do [[ -s "$OUT/$f" ]] || die "$OUT/$f missing after the build"; done <<<"$complete_list"
printf '%s\n' "$complete_list" > "$OUT/.complete"
echo "$BIN"
