"""Command-line entry point ``proxmox-network-controller`` (reference-behaviour.md §14).

Flag names and defaults are the reference's, so manifests written for it keep working.
Durations use Go's syntax (``10m``, ``90s``; controller/config.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import structlog

from controller.runtime.signals import SignalStop, wait
from controller.credentials import RotatingTokenApiClient
from controller.config import (
    load_api_client_and_source,
    parse_bool,
    parse_duration,
    parse_overlay_mtu,
    parse_tls_secret,
)
from controller.apply.gateway import DEFAULT_TRUNK_HOLD_DOWN
from controller.runtime.kube import KubeWriter
from controller.runtime.events import EventRecorder
from controller.runtime.leader import (
    DEFAULT_LEASE_NAME,
    DEFAULT_LEASE_NAMESPACE,
    HardDeadline,
    LeaderElector,
    default_identity,
    identity_namespace,
)
from controller.runtime.result import LostLeadership
from controller.reasons import LEADER_LOCK_HELD_ELSEWHERE
from controller.manager import Manager, Options
from controller.metrics import Metrics
from controller.rules.kubeovn import KUBE_OVN_STALE_AFTER
from controller.rules.prune import DEFAULT_SUBNET_PRUNE_TIMEOUT
from controller.rules.reuse import DEFAULT_VLAN_REUSE_DELAY
from ovn.planner import KUBE_OVN_OVERLAY_MTU

EXIT_BUDGET = 1.5  # seconds from SIGTERM to leaving main; the interpreter exits in the rest of 2 s

log = structlog.get_logger("proxmox-network-controller")

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="proxmox-network-controller",
        description="Allocates Kube-OVN VLANs for ProxmoxNetworks and keeps them until no VM uses them. "
        "`proxmox-network-controller doctor --help` explains what each network waits on.",
    )
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file; when unset: in-cluster config, else $KUBECONFIG or ~/.kube/config")
    p.add_argument("--metrics-bind-address", default=":8080", help='metrics endpoint [host]:port; "0" disables, port 0 picks a free port (logged: "serving metrics")')
    p.add_argument("--health-probe-bind-address", default=":8081", help='health probes [host]:port; "0" disables, port 0 picks a free port (logged: "serving probes")')
    p.add_argument(
        "--leader-elect",
        type=parse_bool,
        nargs="?",
        const=True,
        default=True,
        help="elect one active replica through a coordination.k8s.io Lease (15s lease, 10s renew deadline, "
        "2s retry); the allocator must run in one active instance only",
    )
    p.add_argument("--leader-election-namespace", default="",
                   help="namespace of the Lease (default: kube-system, the same for every release: one allocator "
                        "per cluster)")
    p.add_argument("--metrics-secure", type=parse_bool, nargs="?", const=True, default=False,
                   help="HTTPS metrics: not supported by this build; true is refused at start")
    p.add_argument("--enable-http2", type=parse_bool, nargs="?", const=True, default=False,
                   help="accepted for controller-runtime compatibility; no effect")
    p.add_argument(
        "--subnet-prune-timeout",
        type=parse_duration,
        default=DEFAULT_SUBNET_PRUNE_TIMEOUT.total_seconds(),
        help="how long Kube-OVN may keep a deleted subnet on a Vlan before the VLAN is released anyway (Go duration)",
    )
    p.add_argument(
        "--vlan-reuse-delay",
        type=parse_duration,
        default=DEFAULT_VLAN_REUSE_DELAY,
        help="how long a released VLAN ID is held back before it is allocated again (Go duration; 0 turns it off)",
    )
    p.add_argument(
        "--kube-ovn-stale-after",
        type=parse_duration,
        default=KUBE_OVN_STALE_AFTER,
        help="how long a Subnet may keep Kube-OVN's ValidateSubnetVlanFailed after its Vlan exists before the "
             "controller reports kube-ovn-controller's state as stale (Go duration)",
    )
    p.add_argument("--manage-gateway-chassis", type=parse_bool, nargs="?", const=True, default=True,
                   help="manage each network's OVN NB HA_Chassis_Group; false: GatewayReady=Unknown/Disabled, "
                   "no NB connection")
    p.add_argument(
        "--trunk-node-hold-down",
        type=parse_duration,
        default=DEFAULT_TRUNK_HOLD_DOWN,
        help="how long a trunk node that lost its provider-network ready label stays in the HA chassis groups "
             "(Go duration; 0 turns it off): kube-ovn-cni removes the label at each of its restarts",
    )
    p.add_argument("--ovn-nb-address", default="ssl:ovn-nb.cozy-kubeovn.svc:6641",
                   help="comma-separated OVN NB remotes tried in order: ssl:<host>:<port>, tcp:<host>:<port> "
                   "or unix:<path> (default %(default)s)")
    p.add_argument("--ovn-sb-address", default="",
                   help="OVN SB remotes (ssl:/tcp:/unix:, comma separated; Kube-OVN's is ssl:ovn-sb.cozy-kubeovn.svc:6642), "
                        "read only, with the NB's TLS Secret: GatewayReady then says which chassis serves each router "
                        "port; empty (the default here; the chart and manifests set Kube-OVN's): not read")
    p.add_argument("--gateway-failback", type=parse_bool, nargs="?", const=True, default=False,
                   help="with --ovn-sb-address: after an OVN failover let the preferred chassis take the gateway "
                        "back when it returns (a short outage each time); default: the serving chassis stays on top")
    p.add_argument("--overlay-mtu", type=parse_overlay_mtu, default=KUBE_OVN_OVERLAY_MTU,
                   help="the MTU Kube-OVN gives the VPCs' pods (kube-ovn-cni --mtu; by default its tunnel NIC's MTU "
                        "less 100 for Geneve): each managed router port gets options:gateway_mtu = the smaller of "
                        "this and the zone's mtu, so OVN answers a larger packet with 'fragmentation needed'; "
                        "0 leaves the option alone")
    p.add_argument("--ovn-tls-secret", type=parse_tls_secret, default=("cozy-kubeovn", "kube-ovn-tls"),
                   help="<namespace>/<name> of the Secret with the OVN client certificate, key and CA for ssl: "
                   "remotes (default cozy-kubeovn/kube-ovn-tls)")
    p.add_argument("--ovn-tls-dir", default="",
                   help="private directory (created 0700) for the TLS files python-ovs reads; "
                        "default: a new temporary directory")
    p.add_argument("--workers", type=int, default=4, help="reconcile workers")
    p.add_argument(
        "--resync-period", type=parse_duration, default=600.0, help="full resync of every key (Go duration)"
    )
    p.add_argument("--zap-log-level", "--log-level", dest="log_level", default="info", help="debug or info")
    p.add_argument("--log-format", choices=("json", "console"), default="json",
                   help="json (one object per line, the default) or console")
    return p


class _Stderr:
    """sys.stderr looked up at each write (test runners swap it), for structlog's PrintLogger."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(level: str, fmt: str) -> None:
    lvl = logging.DEBUG if level.lower() == "debug" else logging.INFO
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            # The queue key and pass id bound by the worker (controller.manager) on every line.
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(_Stderr()),
        cache_logger_on_first_use=True,
    )


def split_address(addr: str) -> tuple[str, int] | None:
    """``:8081`` / ``127.0.0.1:8081`` to (host, port); ``0`` or empty disables."""
    if addr in ("", "0"):
        return None
    host, _, port = addr.rpartition(":")
    return (host or "0.0.0.0", int(port))


def serve_probes(
    addr: tuple[str, int],
    readiness: Callable[[], tuple[bool, str]],
    liveness: Callable[[], tuple[bool, str]],
) -> ThreadingHTTPServer:
    """``/readyz`` (caches synced and fresh, on every replica) and ``/healthz`` (work loop alive)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server API)
            if self.path.startswith("/readyz"):
                ok, why = readiness()
            elif self.path.startswith("/healthz"):
                ok, why = liveness()
            else:
                ok, why = False, "not found"
            body = why.encode()
            self.send_response(200 if ok else (404 if why == "not found" else 503))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(addr, Handler)
    threading.Thread(target=srv.serve_forever, name="probes", daemon=True).start()
    return srv


def main(argv: Sequence[str] | None = None, signals: SignalStop | None = None) -> int:
    """Run the controller; ``signals``: the handlers the console script installed first
    (controller.entry), else they are installed here (``python -m controller.main``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["doctor"]:
        from controller import doctor

        return doctor.main(argv[1:])
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    if not args.manage_gateway_chassis:
        log.info("not managing gateway chassis groups; VMs on Proxmox networks get no ARP answer from their VPC gateway")
    if args.manage_gateway_chassis:
        from ovn.ovsdb import NBError, parse_addresses

        try:
            parse_addresses(args.ovn_nb_address)  # §10: a bad list stops the start
        except NBError as err:
            log.error("unable to set up the OVN NB client", error=str(err))
            return 1
        if args.ovn_sb_address.strip():
            try:
                parse_addresses(args.ovn_sb_address)
            except NBError as err:
                log.error("unable to set up the OVN SB client", error=str(err))
                return 1
    if args.metrics_secure:
        # The reference serves HTTPS with a TokenReview/SubjectAccessReview filter; this build
        # serves plain HTTP only. Refuse rather than expose metrics unprotected by surprise.
        log.error("unable to start: --metrics-secure=true is not supported by this build; "
                  "serve metrics on a cluster-internal port with --metrics-secure=false")
        return 1
    try:
        api, source = load_api_client_and_source(args.kubeconfig)
    except Exception as err:
        log.error("unable to load a Kubernetes client configuration", error=repr(err))
        return 1
    # Which credentials run this process: a pod's own service account ("in-cluster") or a file.
    log.info("kubernetes client configured", source=source, server=api.configuration.host)
    release = os.environ.get("POD_NAMESPACE", "")
    identity = default_identity(release)
    # The audit log tells the replicas apart by their holder identity (field-reports.md S3: no
    # write of an old leader after its renew deadline is checked there).
    api.user_agent = f"proxmox-network-controller ({identity})"
    options = Options(
        manage_gateway=args.manage_gateway_chassis,
        workers=args.workers,
        resync_period=args.resync_period,
        subnet_prune_timeout=args.subnet_prune_timeout,
        vlan_reuse_delay=args.vlan_reuse_delay,
        ovn_nb_address=args.ovn_nb_address,
        ovn_sb_address=args.ovn_sb_address.strip(),
        ovn_tls_secret="/".join(args.ovn_tls_secret),
        ovn_tls_dir=args.ovn_tls_dir,
        trunk_hold_down=args.trunk_node_hold_down,
        gateway_failback=args.gateway_failback,
        overlay_mtu=args.overlay_mtu,
        kube_ovn_stale_after=args.kube_ovn_stale_after,
    )
    metrics = Metrics()
    if isinstance(api, RotatingTokenApiClient):
        api.token.on_unauthorized = metrics.api_unauthorized.inc
    elector: LeaderElector | None = None

    def fence() -> None:
        """field-reports.md S3: every write the controller sends (API and OVN NB) is checked
        here just before it leaves the process; refused unless this replica leads."""
        if elector is None:
            raise LostLeadership("not the leader: leader election has not started; the write was not sent")
        elector.fence()

    try:
        manager = Manager(api, options, metrics, fence=fence if args.leader_elect else None)
    except Exception as err:  # a bug in wiring; the constructor talks to no server
        log.error("unable to start manager", error=repr(err))
        return 1

    signals = signals or SignalStop().install()
    stop = signals.event
    lost = threading.Event()
    hard_deadline: HardDeadline | None = None

    def started_leading() -> None:
        log.info("started leading; starting workers")
        if hard_deadline is not None:
            hard_deadline.start()  # field-reports.md S3: gone before a standby can act, whatever holds the process
        metrics.set_leader(True)
        manager.start_workers()

    def stopped_leading() -> None:
        metrics.set_leader(False)
        if not stop.is_set():
            # product-decisions.md §4.5: a replica that lost its lease exits; it comes back
            # as a standby with empty state (nothing that matters lives in memory).
            log.error("leadership lost; exiting")
            lost.set()
            stop.set()

    def readiness() -> tuple[bool, str]:
        if not manager.caches_fresh():
            return False, "caches not synced or stale"
        failing = manager.unlistable()
        if failing:  # field-reports.md R8: e.g. a conversion webhook that fails every LIST of a version
            return False, "cannot list " + "; ".join(failing)
        # Readiness = serving, not leading (product-decisions §9): a warm standby is Ready;
        # leadership shows in cozy_proxmox_leader, the Lease and the log.
        return True, "ok"

    def liveness() -> tuple[bool, str]:
        return (True, "ok") if manager.healthy() else (False, "a worker thread died")

    try:
        probes = split_address(args.health_probe_bind_address)
        if probes:
            host, port = serve_probes(probes, readiness, liveness).server_address[:2]
            log.info("serving probes", address=f"{host}:{port}")
        maddr = split_address(args.metrics_bind_address)
        if maddr:
            host, port = metrics.serve(*maddr)
            log.info("serving metrics", address=f"{host}:{port}")
    except OSError as err:  # e.g. the port is taken: one clear line, not a traceback
        log.error("unable to serve metrics or probes", error=str(err))
        manager.stop()
        return 1

    log.info("starting manager", workers=options.workers, manage_gateway_chassis=options.manage_gateway,
             leader_elect=args.leader_elect)
    try:
        started = manager.start_informers(cancel=stop)
    except Exception as err:  # caches not synced in time, or a bug in wiring
        log.error("unable to start manager", error=str(err) or repr(err))
        manager.stop()
        return 1
    if not started:  # SIGTERM while waiting for the API server: a clean stop
        manager.stop()
        return 0
    elector_thread = None
    notices: EventRecorder | None = None
    if args.leader_elect:
        namespace = args.leader_election_namespace or DEFAULT_LEASE_NAMESPACE
        lease_writer = KubeWriter(api)  # the elector's own, unfenced: the Lease is how leading is decided
        if manager.events is not None:
            # The one write a standby makes (an Event on the Lease): through the elector's
            # writer, as the controller's own (Events included) are fenced to the leader.
            notices = EventRecorder(lease_writer)
            notices.start()

        def new_holder(holder: str, lease: dict) -> None:
            # One allocator per cluster (product-decisions §9): a replica of another release
            # holds the Lease; this one waits, Ready, cozy_proxmox_leader 0, and says why.
            other = identity_namespace(holder)
            if not release or not other or other == release:
                return
            message = (f'the leader lock, Lease {namespace}/{DEFAULT_LEASE_NAME}, is held by {holder} of the release in '
                       f'namespace "{other}": this replica of namespace "{release}" waits; one allocator per cluster')
            log.warning("another release holds the leader lock; waiting", holder=holder, release=other)
            if notices is not None:
                notices.event(lease, "Warning", LEADER_LOCK_HELD_ELSEWHERE, message)

        elector = LeaderElector(
            lease_writer, namespace, identity=identity,
            on_started_leading=started_leading, on_stopped_leading=stopped_leading,
            # field-reports.md B11/B13: a leader whose work loop died or whose caches went stale lets go.
            healthy=lambda: manager.healthy() and manager.caches_fresh(),
            on_new_holder=new_holder,
        )
        hard_deadline = HardDeadline(elector)
        elector_thread = threading.Thread(target=elector.run, name="leader-election", daemon=True)
        elector_thread.start()
    else:
        started_leading()
    wait(stop)  # never a plain stop.wait(): controller.runtime.signals says why
    if signals.received:
        log.info("stopping", signal=signals.received)
    exit_by = time.monotonic() + EXIT_BUDGET
    if elector is not None:
        elector.stop_acquiring()  # a standby stopping must not take over (rollouts)
    stopped = manager.stop()
    if notices is not None:
        notices.stop(min(0.2, max(0.0, exit_by - time.monotonic())))
    if elector is not None and elector_thread is not None:
        # Released only once no pass can write: a standby takes over at once. A pass still
        # running (a peer hanging) sends nothing more once leadership ends (the fence), but
        # a request or NB transaction it already sent may still be carried out when the
        # peer wakes, and must not land after a standby that took over at once had acted:
        # so the lease expires instead, and the hard deadline ends the process before it
        # does (field-reports.md S3).
        if not stopped:
            log.error("a worker is still running; the lease is left to expire", leaseDuration=elector.lease_duration)
        elector.stop(release=stopped)
        # The release is one bounded request; with the API server down it is abandoned
        # and the lease expires instead (the daemon thread does not hold the exit).
        elector_thread.join(timeout=max(0.0, exit_by - time.monotonic()))
    return 1 if lost.is_set() else 0

if __name__ == "__main__":
    sys.exit(main())
