#!/usr/bin/env bash
# Install what the local test bed needs on a fresh Debian machine (product-decisions.md §5).
# Idempotent: every step checks first. Quiet on success, loud on failure.
#
#   * Debian's prometheus (promtool) and the build dependencies of Kube-OVN's own OVS and OVN
#     (autoconf automake libtool libssl-dev libcap-ng-dev libunbound-dev), which
#     hack/build-peers.sh builds (hack/build-ovn.sh): the bed's OVN is that build, not
#     Debian's; iputils-ping, iputils-arping and ethtool for the data plane's VMs.
#     Under PNC_KUBE_OVN_VERSION=v1.13.0 (out of CI) Debian's ovn-central and
#     openvswitch-common instead, without leaving their ovsdb-server / ovn-northd running;
#   * the Python environment: a venv of exactly the pinned versions of constraints.txt and
#     constraints-test.txt, isolated from the machine's site-packages (hack/python_env.py);
#   * kube-apiserver, kubectl and etcd (hack/build-control-plane.sh, cached);
#   * the real peers (hack/build-peers.sh) and helm (hack/build-helm.sh), cached;
#   * the bed's node: Debian's containerd, runc, containernetworking-plugins,
#     busybox-static and socat (the pods' way to the bed's loopback services), kubelet,
#     kube-controller-manager and kube-scheduler
#     (hack/build-control-plane.sh --node) and the node's images (hack/build-pause.sh), cached;
#   * Multus's thin plugin and a Kube-OVN VpcEgressGateway's image for the trunk kubelets
#     (hack/build-egress.sh: go, mmdebstrap, buildah), cached;
#   * the controller's image: Debian's mmdebstrap and buildah, then
#     hack/build-image.sh (cached by content: rebuilt only when the product or its pins change).
#
# Prints the control-plane bin directory on stdout (like build-control-plane.sh).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"
ROOT="$(cd "$HERE/.." && pwd)"
log() { echo "[install-deps] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || die "not root and no sudo: cannot install Debian packages"
  SUDO="sudo"
fi

# shellcheck source=build-lib.sh
source "$HERE/build-lib.sh"  # quiet

stop_debian_ovn() {
  # The packages may have started their own databases and northd (when an init system runs
  # them). Stop exactly those, through the packages' own control scripts / pid files.
  local ctl=/usr/share/ovn/scripts/ovn-ctl
  if [[ -x $ctl ]]; then
    $SUDO "$ctl" stop_northd >/dev/null 2>&1 || true
    $SUDO "$ctl" stop_ovsdb >/dev/null 2>&1 || true
  fi
  local pidfile pid
  for pidfile in /var/run/ovn/ovnnb_db.pid /var/run/ovn/ovnsb_db.pid /var/run/ovn/ovn-northd.pid \
                 /var/run/openvswitch/ovsdb-server.pid; do
    [[ -f $pidfile ]] || continue
    pid="$(cat "$pidfile" 2>/dev/null || true)"
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
      log "stopping Debian's $(basename "$pidfile" .pid) (pid $pid)"
      $SUDO kill "$pid" 2>/dev/null || true
    fi
  done
}

# apt-get update and install PACKAGE... without recommends, keeping Debian's services from
# starting (policy-rc.d exit 101 = "action forbidden") unless a policy is already in place.
apt_install() {
  local made_policy=""
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod 755 /usr/sbin/policy-rc.d
    made_policy=1
  fi
  quiet $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  quiet $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
  [[ -n $made_policy ]] && $SUDO rm -f /usr/sbin/policy-rc.d
  return 0
}

install_ovn() {
  # promtool (Debian's prometheus package) checks and unit-tests the alert rules; its
  # prometheus server scrapes the controller in tests/test_prometheus_integration.py.
  # iputils-ping, iputils-arping and ethtool: the data plane's VMs (hack/bed/dataplane.py).
  # ipset: Kube-OVN's node agent (hack/bed/node_agent.py) panics without it ("Failed to update IP
  # sets after multiple retries"); the kernel's ip_set is built in.
  # tcpdump: the egress tests count Geneve packets on the bed's underlay.
  local want=(prometheus autoconf automake libtool libssl-dev libcap-ng-dev libunbound-dev
              iputils-ping iputils-arping ethtool ipset tcpdump)
  local legacy=""
  [[ ${PNC_KUBE_OVN_VERSION:-} == "$KUBE_OVN_LEGACY_VERSION" ]] && legacy=1 && want+=(ovn-central openvswitch-common)
  local missing=() p
  for p in "${want[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  log "installing ${missing[*]} from Debian"
  apt_install "${missing[@]}"
  [[ -n $legacy ]] && stop_debian_ovn
  command -v promtool >/dev/null || die "promtool still missing after apt-get install"
  command -v prometheus >/dev/null || die "prometheus still missing after apt-get install"
  command -v autoreconf >/dev/null || die "autoreconf still missing after apt-get install"
  return 0
}

# The node's runtime and the image's tools. Their services are kept from starting (the bed
# runs a containerd of its own).
install_node_tools() {
  if command -v mmdebstrap >/dev/null && command -v buildah >/dev/null && command -v containerd >/dev/null \
     && command -v containerd-shim-runc-v2 >/dev/null && command -v runc >/dev/null && command -v ctr >/dev/null \
     && [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local ]] && dpkg -s busybox-static >/dev/null 2>&1 \
     && command -v socat >/dev/null && command -v tini >/dev/null \
     && command -v cc >/dev/null && compgen -G "/usr/lib/*/libc.a" >/dev/null; then
    return 0
  fi
  log "installing mmdebstrap, buildah, containerd, runc, containernetworking-plugins, busybox-static, socat from Debian"
  apt_install mmdebstrap buildah containerd runc containernetworking-plugins busybox-static socat gcc libc6-dev tini
  local t
  for t in mmdebstrap buildah containerd runc ctr socat tini; do
    command -v "$t" >/dev/null || die "$t still missing after apt-get install"
  done
}

install_python() {
  # The tests and the demo run in a venv made from the lock (constraints.txt and
  # constraints-test.txt), never on the machine's own site-packages; every run checks it
  # against the lock and repairs a drift (hack/python_env.py). The tree itself is imported in
  # place, not installed.
  python3 "$HERE/python_env.py" sync >/dev/null || die "hack/python_env.py sync failed"
}

install_ovn
stop_debian_ovn
install_node_tools
install_python
bin="$("$HERE/build-control-plane.sh" --node)" || die "hack/build-control-plane.sh --node failed"
for b in kube-apiserver kubectl etcd kubelet kube-controller-manager kube-scheduler; do
  [[ -x "$bin/$b" ]] || die "$bin/$b missing after build"
done
"$HERE/build-helm.sh" >/dev/null || die "hack/build-helm.sh failed"  # helm: the charts' tests, Kube-OVN's templated CRDs
"$HERE/build-peers.sh" >/dev/null || die "hack/build-peers.sh failed"  # kube-ovn-controller, IPAM provider, OVS/OVN (stdout: control plane only)
"$HERE/build-pause.sh" >/dev/null || die "hack/build-pause.sh failed"  # the node's sandbox and busybox images
"$HERE/build-egress.sh" >/dev/null || die "hack/build-egress.sh failed"  # Multus and the egress gateway's image
"$HERE/build-image.sh" >/dev/null || die "hack/build-image.sh failed"  # the controller's image (tests/test_image_layout.py)
echo "$bin"
