#!/usr/bin/env bash
# What a Kube-OVN VpcEgressGateway's pods need on the bed's trunk kubelets, built without a
# registry:
#
#   * bin/multus -- Multus's thin CNI plugin (cmd/multus of the module
#     gopkg.in/k8snetworkplumbingwg/multus-cni.v4 at MULTUS_VERSION, hack/versions.env), from
#     the Go module proxy, CGO_ENABLED=0, its version stamped as Multus's own build-go.sh does;
#   * egress.tar -- the gateway image localhost/pnc-testbed/kube-ovn-egress:<KUBE_OVN_VERSION>
#     as an OCI archive: Debian bookworm minbase (mmdebstrap) plus iproute2, iptables and
#     procps, the commands the gateway pod runs (bash, sysctl, iptables/ip6tables, ip, grep,
#     awk, tr, chmod, sleep), and /kube-ovn/init-vpc-egress-gateway.sh from Kube-OVN's tag
#     archive in ../shared/peers (checked against its SHA256SUMS). iptables is Debian's nft
#     backend (update-alternatives): this kernel has nf_tables with the xtables compat layer
#     (NFT_COMPAT, NFT_NAT, NFT_MASQ), and the script's nat/raw/MARK/MASQUERADE rules load in a
#     network namespace with it;
#   * refs.env -- MULTUS_BIN= and EGRESS_IMAGE=.
#
# Cached by content (this script, the pins, the archive's hash) under
# ~/.cache/proxmox-network-controller/egress/<sha256>/; prints that directory on stdout, logs
# on stderr. Needs go, mmdebstrap and buildah (hack/install-deps.sh), and root (or
# mmdebstrap's unshare mode).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"
log() { echo "[build-egress] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

for tool in go mmdebstrap buildah python3; do
  command -v "$tool" >/dev/null || die "$tool not found; run hack/install-deps.sh"
done
SOURCES="${PNC_PEER_SOURCES:-$ROOT/../shared/peers}"
TARBALL="$SOURCES/kube-ovn-$KUBE_OVN_VERSION.tar.gz"
[[ -f $TARBALL ]] || die "$TARBALL missing (../shared/peers/README.md says where it comes from)"
TARBALL_SHA="$(cd "$SOURCES" && grep -E "  kube-ovn-$KUBE_OVN_VERSION\.tar\.gz\$" SHA256SUMS | cut -d' ' -f1)"
[[ -n $TARBALL_SHA ]] || die "no kube-ovn-$KUBE_OVN_VERSION.tar.gz in $SOURCES/SHA256SUMS"
(cd "$SOURCES" && grep -E "  kube-ovn-$KUBE_OVN_VERSION\.tar\.gz\$" SHA256SUMS | sha256sum -c --quiet -) >/dev/null 2>&1 \
  || die "$TARBALL does not match $SOURCES/SHA256SUMS"

MULTUS_MODULE=gopkg.in/k8snetworkplumbingwg/multus-cni.v4
EGRESS_REF="localhost/pnc-testbed/kube-ovn-egress:$KUBE_OVN_VERSION"
KEY="$( { sha256sum <"$HERE/build-egress.sh"; echo "$MULTUS_VERSION $KUBE_OVN_VERSION $TARBALL_SHA"; } | sha256sum | cut -c1-32)"
CACHE="${PNC_CACHE_DIR:-$HOME/.cache/proxmox-network-controller}/egress"
OUT="$CACHE/$KEY"
if [[ -f "$OUT/.complete" ]]; then
  echo "$OUT"
  exit 0
fi
t0=$(date +%s)
rm -rf "$OUT"
mkdir -p "$OUT/bin"
WORK="$(mktemp -d "$CACHE/work.XXXXXX")"
BUILDAH=(--root "$CACHE/buildah/storage" --runroot "$CACHE/buildah/run" --storage-driver vfs)
CTR=""
cleanup() {
  if [[ -n $CTR ]]; then buildah "${BUILDAH[@]}" rm "$CTR" >/dev/null 2>&1 || true; fi
  chmod -R u+w "$WORK" 2>/dev/null || true
  rm -rf "$WORK"
  [[ -f "$OUT/.complete" ]] || rm -rf "$OUT"  # a failed build leaves nothing that looks cached
}
trap cleanup EXIT

# shellcheck source=build-lib.sh
source "$HERE/build-lib.sh"  # quiet

# Multus: `go install …@version` asks the proxy for the version list, which it refuses here;
# so the module is downloaded by its exact version and built in a copy of its directory.
export GOFLAGS="-buildvcs=false -p=1" GOWORK=off CGO_ENABLED=0
export GOMAXPROCS="${GOMAXPROCS:-2}"
mkdir -p "$WORK/nomod"
if ! json="$(cd "$WORK/nomod" && nice -n 19 go mod download -json "$MULTUS_MODULE@$MULTUS_VERSION" 2>&1)"; then
  log "go mod download $MULTUS_MODULE@$MULTUS_VERSION failed:"; printf '%s\n' "$json" >&2; exit 1
fi
dir="$(printf '%s' "$json" | python3 -c 'import json, sys; print(json.load(sys.stdin).get("Dir") or "")')"
[[ -n $dir && -d $dir/cmd/multus ]] || { log "go mod download gave no Dir with cmd/multus:"; printf '%s\n' "$json" >&2; exit 1; }
commit="$(printf '%s' "$json" | python3 -c 'import json, sys; print((json.load(sys.stdin).get("Origin") or {}).get("Hash") or "")')"
cp -r "$dir" "$WORK/multus"
chmod -R u+w "$WORK/multus"
log "multus: building $MULTUS_MODULE/cmd/multus $MULTUS_VERSION (low priority, one job)"
pkg="$MULTUS_MODULE/pkg/multus"
(cd "$WORK/multus" && quiet nice -n 19 go build -trimpath \
  -ldflags "-s -w -X $pkg.version=$MULTUS_VERSION -X $pkg.commit=$commit -X $pkg.gitTreeState=clean -X $pkg.releaseStatus=,released" \
  -o "$OUT/bin/multus" ./cmd/multus)
ver="$("$OUT/bin/multus" -version 2>&1)" || die "the built multus does not run: $ver"
[[ $ver == *"$MULTUS_VERSION"* ]] || die "multus -version does not name $MULTUS_VERSION: $ver"
log "multus: $(printf '%s' "$ver" | head -n 1)"

log "gateway image: the init script from $(basename "$TARBALL")"
STAGE="$WORK/stage"
mkdir -p "$STAGE"
tar -xzf "$TARBALL" -C "$STAGE" --strip-components=3 "kube-ovn-$KUBE_OVN_VERSION/dist/images/init-vpc-egress-gateway.sh"
[[ -s $STAGE/init-vpc-egress-gateway.sh ]] || die "no dist/images/init-vpc-egress-gateway.sh in $TARBALL"

MIRROR="${PNC_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY="${PNC_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}"
log "gateway image: mmdebstrap bookworm minbase + iproute2, iptables (nft), procps"
mmdebstrap --variant=minbase --include=iproute2,iptables,procps \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --customize-hook='chroot "$1" update-alternatives --set iptables /usr/sbin/iptables-nft' \
  --customize-hook='chroot "$1" update-alternatives --set ip6tables /usr/sbin/ip6tables-nft' \
  --customize-hook='mkdir -p "$1/kube-ovn"' \
  --customize-hook="upload $STAGE/init-vpc-egress-gateway.sh /kube-ovn/init-vpc-egress-gateway.sh" \
  --customize-hook='chmod 0755 "$1/kube-ovn/init-vpc-egress-gateway.sh"' \
  --customize-hook='rm -rf "$1/var/lib/apt/lists"/* "$1/var/cache/apt"/*.bin' \
  bookworm "$WORK/rootfs.tar" \
  "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" "deb $SECURITY bookworm-security main" \
  >"$WORK/mmdebstrap.log" 2>&1 || { tail -n 40 "$WORK/mmdebstrap.log" >&2; die "mmdebstrap failed"; }

# Every command the init script and the pod spec call is in the root filesystem.
mkdir -p "$WORK/root"
tar -C "$WORK/root" -xf "$WORK/rootfs.tar" 2>/dev/null || tar -C "$WORK/root" -xf "$WORK/rootfs.tar"
for c in bash sh sysctl iptables ip6tables iptables-nft ip grep awk tr chmod sleep; do
  found=""
  for d in usr/sbin usr/bin sbin bin; do [[ -e "$WORK/root/$d/$c" || -L "$WORK/root/$d/$c" ]] && found=1; done
  [[ -n $found ]] || die "the gateway image has no $c"
done
[[ "$(readlink "$WORK/root/etc/alternatives/iptables")" == /usr/sbin/iptables-nft ]] \
  || die "the image's iptables is not iptables-nft"

log "gateway image: OCI archive $EGRESS_REF"
CTR="$(buildah "${BUILDAH[@]}" from scratch)"
buildah "${BUILDAH[@]}" add "$CTR" "$WORK/rootfs.tar" / >/dev/null
buildah "${BUILDAH[@]}" config \
  --workingdir / \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --cmd '["bash"]' \
  --label "org.opencontainers.image.title=pnc-testbed kube-ovn egress gateway" \
  --label "org.opencontainers.image.version=$KUBE_OVN_VERSION" \
  "$CTR"
buildah "${BUILDAH[@]}" commit --quiet --format oci --disable-compression=false --rm "$CTR" "oci-archive:$OUT/egress.tar:$EGRESS_REF" >/dev/null
CTR=""
buildah "${BUILDAH[@]}" rmi --all >/dev/null 2>&1 || true

printf 'MULTUS_BIN=%s\nEGRESS_IMAGE=%s\n' "$OUT/bin/multus" "$EGRESS_REF" >"$OUT/refs.env"
echo "$(( $(date +%s) - t0 ))" >"$OUT/build-seconds"
touch "$OUT/.complete"
log "built in $(cat "$OUT/build-seconds")s: multus $MULTUS_VERSION, $EGRESS_REF ($(( $(stat -c %s "$OUT/egress.tar") / 1000000 )) MB)"
echo "$OUT"
