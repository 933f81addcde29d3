#!/usr/bin/env bash
# Build Kube-OVN's own Open vSwitch and OVN for the test bed's OVN databases,
# ovn-northd and tools: the two source archives of ../shared/peers (the commits Kube-OVN's
# image build clones, `git archive`s checked against SHA256SUMS before anything is unpacked),
# with the patches of Kube-OVN's dist/images/patches applied in the order its
# dist/images/Dockerfile.base applies them, and the "+g<commit>" version suffix that build
# gives both (so `ovn-northd --version` shows which build runs).
#
#   ~/.cache/proxmox-network-controller/ovn/kube-ovn-<v>-ovs-<commit12>-ovn-<commit12>/
#       bin/ sbin/ share/openvswitch/ share/ovn/   (make install-exec install-data)
#       build-times                                (seconds per step)
#
# Out-of-tree autotools builds with --enable-ssl and the Dockerfile's amd64 flags
# (CFLAGS=-O2 -msse4.2 -mpopcnt -fPIC; -g dropped: 69 MB instead of several hundred),
# `make -j2` at the lowest CPU priority, no tests or docs. The compiler flags are pinned
# here: two of Kube-OVN's OVN patches draw warnings under gcc 12 (an incompatible pointer
# type in one would be an error under gcc >= 14, hence -Wno-error=incompatible-pointer-types).
# Build dependencies from Debian: autoconf automake libtool libssl-dev libcap-ng-dev
# libunbound-dev (installed by hack/install-deps.sh).
#
# Checks after the build that the OVN NB and SB schemas equal the ones Kube-OVN embeds
# (hack/build-peers.sh stages those as peers/<…>/ovsdb/). Prints the prefix on stdout.
# Quiet on success, loud on failure. Outside this environment the same script may take the
# sources from clones of the refs named in hack/versions.env (PNC_PEER_SOURCES: a directory
# with the same archive names).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"
SOURCES="${PNC_PEER_SOURCES:-$ROOT/../shared/peers}"
CACHE="${PNC_CACHE_DIR:-$HOME/.cache/proxmox-network-controller}"
PREFIX="$CACHE/ovn/kube-ovn-$KUBE_OVN_VERSION-ovs-${OVS_COMMIT:0:12}-ovn-${OVN_COMMIT:0:12}"
WORK="$CACHE/ovn/src"
LOWPRIO=(nice -n 19)
JOBS="${PNC_BUILD_JOBS:-2}"
CFLAGS_PINNED="-O2 -msse4.2 -mpopcnt -fPIC -Wno-error=incompatible-pointer-types"
log() { echo "[build-ovn] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# shellcheck source=build-lib.sh
source "$HERE/build-lib.sh"  # quiet

complete() {
  [[ -f "$PREFIX/.complete" ]] || return 1
  local f
  for f in sbin/ovsdb-server bin/ovsdb-tool bin/ovs-vsctl sbin/ovs-vswitchd bin/ovn-northd bin/ovn-controller \
           bin/ovn-nbctl bin/ovn-sbctl share/ovn/ovn-nb.ovsschema share/ovn/ovn-sb.ovsschema \
           share/openvswitch/vswitch.ovsschema; do
    [[ -s "$PREFIX/$f" ]] || return 1
  done
}

# verified ARCHIVE: the archive's path once its line in SHA256SUMS matches.
verified() {
  local f="$SOURCES/$1"
  [[ -f $f ]] || die "$f missing (the peers' sources: ../shared/peers/README.md)"
  (cd "$SOURCES" && grep -E "  $1\$" SHA256SUMS | sha256sum -c --quiet -) >/dev/null 2>&1 \
    || die "$1 does not match $SOURCES/SHA256SUMS"
  echo "$f"
}

# patch_order DOCKERFILE PROJECT: the patch files Kube-OVN's image applies to PROJECT (ovs or
# ovn), in its order: the `git apply` lines between that project's clone and the next RUN.
patch_order() {
  awk -v proj="$2" '
    /git clone .*\/(ovs|ovn)\.git/ { cur = ($0 ~ "/" proj "\\.git") ? 1 : 0; next }
    cur && /^RUN / { cur = 0 }
    cur && /git apply/ { for (i = 1; i <= NF; i++) if ($i ~ /\.patch$/) { sub(/.*\//, "", $i); print $i } }
  ' "$1"
}

# unpack ARCHIVE DEST: a fresh source tree (the archive's one top directory) at DEST.
unpack() {
  rm -rf "$2" "$2.tmp"
  mkdir -p "$2.tmp"
  tar -xzf "$1" -C "$2.tmp" --strip-components=1
  mv "$2.tmp" "$2"
}

# apply_patches SRC PROJECT PACKAGE COMMIT: Kube-OVN's patches for PROJECT (ovs or ovn), then
# the version suffix its build sets in PACKAGE's AC_INIT.
apply_patches() {
  local src="$1" proj="$2" package="$3" commit="$4" p n=0
  local patches="$KO_SRC/dist/images/patches"
  while read -r p; do
    [[ -f "$patches/$p" ]] || die "Dockerfile.base applies $p, which is not in $patches"
    (cd "$src" && git apply "$patches/$p") || die "$p does not apply to $proj ${commit:0:12}"
    n=$((n + 1))
  done < <(patch_order "$KO_SRC/dist/images/Dockerfile.base" "$proj")
  [[ $n -gt 0 ]] || die "found no $proj patches in Dockerfile.base"
  log "$proj: applied $n Kube-OVN patches"
  sed -i -E "s/^(AC_INIT\(\[?$package\]?, \[?[^],)]+)(\]?)(,.*)$/\1+g${commit:0:12}\2\3/" "$src/configure.ac"
}

timed() {  # timed NAME CMD...: run CMD, append "NAME seconds" to the build-times file
  local name="$1" t0=$SECONDS
  shift
  "$@"
  echo "$name $((SECONDS - t0))" >> "$WORK/build-times"
}

build_project() {  # build_project PROJECT SRC CONFIGURE_ARGS...
  local proj="$1" src="$2"; shift 2
  cd "$src"
  quiet "${LOWPRIO[@]}" ./boot.sh
  mkdir -p _build && cd _build
  quiet "${LOWPRIO[@]}" ../configure --prefix="$PREFIX" --enable-ssl "$@" CFLAGS="$CFLAGS_PINNED"
  log "building $proj (make -j$JOBS, low priority)"
  quiet "${LOWPRIO[@]}" make -j"$JOBS"
  quiet make install-exec install-data
}

if complete; then echo "$PREFIX"; exit 0; fi
# One build at a time (install-deps and a hand-run build-peers may overlap): the second waits.
mkdir -p "$CACHE/ovn"
exec 9>"$CACHE/ovn/.lock"
flock 9
if complete; then echo "$PREFIX"; exit 0; fi
for t in autoreconf libtoolize make gcc git python3; do
  command -v "$t" >/dev/null || die "$t not found (hack/install-deps.sh installs the build dependencies)"
done
ko_tar="$(verified "kube-ovn-$KUBE_OVN_VERSION.tar.gz")"
ovs_tar="$(verified "$OVS_ARCHIVE")"
ovn_tar="$(verified "$OVN_ARCHIVE")"
rm -rf "$WORK" "$PREFIX"
mkdir -p "$WORK"
KO_SRC="$WORK/kube-ovn"
unpack "$ko_tar" "$KO_SRC"
unpack "$ovs_tar" "$WORK/ovs"
unpack "$ovn_tar" "$WORK/ovn"
apply_patches "$WORK/ovs" ovs openvswitch "$OVS_COMMIT"
apply_patches "$WORK/ovn" ovn ovn "$OVN_COMMIT"
timed ovs build_project openvswitch "$WORK/ovs"
timed ovn build_project ovn "$WORK/ovn" --with-ovs-source="$WORK/ovs" --with-ovs-build="$WORK/ovs/_build"
cp "$WORK/build-times" "$PREFIX/build-times"
# The bed's databases use these schemas: they must be the ones Kube-OVN's models were made from.
python3 - "$KO_SRC" "$PREFIX" <<'PY' || die "the OVN build's schemas differ from the ones Kube-OVN $KUBE_OVN_VERSION embeds"
import json, re, sys
ko, prefix = sys.argv[1], sys.argv[2]
for db in ("nb", "sb"):
    model = open(f"{ko}/pkg/ovsdb/ovn{db}/model.go").read()
    embedded = json.loads(re.search(r"var schema = `(.*?)`", model, re.S).group(1))
    built = json.load(open(f"{prefix}/share/ovn/ovn-{db}.ovsschema"))
    if embedded["version"] != built["version"]:
        sys.exit(f"ovn-{db}: built {built['version']}, Kube-OVN embeds {embedded['version']}")
PY
rm -rf "$WORK"
touch "$PREFIX/.complete"
complete || die "$PREFIX is missing files after the build"
echo "$PREFIX"
