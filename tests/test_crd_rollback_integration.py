"""Field reports, fourth round, S5: CRDs changed under the controller, on the real API server
next to the real kube-ovn-controller v1.15.24 (``peers_bed``, a bed of this module's own: its
tests replace CRDs that every controller of the bed watches).

* (a) The ProxmoxNetwork CRD rolled back one version under this controller (a Helm rollback
  of ``proxmox-network-crds`` alone, or Flux's ``crds: Skip``): the status fields added last,
  ``gatewayMtu`` (57a3bab, path MTU) and ``servingChassis`` (dff5ce2, the SB reader), are
  pruned by the server. The controller, a real process with its probes and metrics, writes the
  networks' status, finds the fields missing in a write's answer, says so once (a Warning
  Event ``SchemaOutdated`` naming the fields and the CRD), and stops retrying them: the
  objects' resourceVersions stay put across resyncs and no status is written (each resync's
  recheck is a dry-run), ``/readyz`` 200. The CRD of this version applied again, the next
  resync writes the full status, without a restart.
* (b)/(c) Kube-OVN's CRDs re-applied in an older shape as Flux's server-side apply with
  force-conflicts does (Vlan without ``status.conflict``, Subnet without newer status fields,
  VpcEgressGateway without ``resources``/``bandwidth``, ProviderNetwork without the VLAN
  interface fields), twice with no change (the second reconcile of an unchanged release):
  nothing the controller owns changes (Vlans, finalizers, HA chassis groups), no network
  leaves Ready and the controller writes nothing.

controller/schema.py says how the read-back works; docs/runbook.md "SchemaOutdated".
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from controller import names, schema
from controller.runtime.kube import KubeWriter
from hack.tools.audit import write_marker, writes_before
from hack.bed import LocalCluster
from hack.tools.controller_process import ControllerProcess
from hack.tools.objects import PX, Admin, reason, unique
from hack.tools.wait import wait_for
from tests.support.ovsdb import ha_chassis_groups
from tests.support.peers import KUBEOVN, Ctl, Trunk, make_vpc
from tests.support.sbclaim import Claimer

pytestmark = pytest.mark.integration

VPC = "vpc-x"
TRUNK = (("worker1", "ch-worker1"), ("worker2", "ch-worker2"))
WAIT = 60.0
RESYNC = 4  # --resync-period of the controller process, seconds
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NETWORKS_CRD = schema.crd_name(names.PROXMOX_NETWORKS)
# The status fields the ProxmoxNetwork CRD gained last (git log of
# manifests/crds/proxmox.cozystack.io_proxmoxnetworks.yaml): servingChassis in dff5ce2 (the SB
# reader), gatewayMtu in 57a3bab (the path MTU). One version back has neither.
NEWEST = ("gatewayMtu", "servingChassis")
PRUNED = tuple(f"status.{f}" for f in NEWEST)
APPLY_PATCH = "application/apply-patch+yaml"
NETS = ("net", "net2")


@pytest.fixture(scope="module")
def bed(peers_bed: LocalCluster) -> LocalCluster:
    return peers_bed


@pytest.fixture(scope="module")
def admin(peers_admin: Admin) -> Admin:
    return peers_admin


@pytest.fixture(scope="module")
def world(bed: LocalCluster, admin: Admin) -> SimpleNamespace:
    """Trunk nodes worker1/worker2 on a ProviderNetwork of their own, VPC ``vpc-x`` (worker1
    tops its rendezvous order), their chassis in the SB, and a source of zones and prefixes."""
    trunk = Trunk(admin, TRUNK)
    make_vpc(admin, VPC)
    claimer = Claimer(bed, {ch: node for node, ch in TRUNK})
    claimer.register()
    return SimpleNamespace(provider=trunk.provider, claimer=claimer, ranges=itertools.count(2300, 100),
                           octets=itertools.count(80))


class Tenant:
    """A zone (its own range) and namespace; networks made as the tenant chart makes them."""

    def __init__(self, world: SimpleNamespace, admin: Admin) -> None:
        self.w, self.a = world, admin
        self.zone, self.ns = unique("zone"), unique("tenant")
        first = next(world.ranges)
        admin.create_zone(self.zone, world.provider, [f"{first}-{first + 99}"])
        admin.core.create_namespace({"metadata": {"name": self.ns}})
        self.nets: dict[str, dict[str, str]] = {}

    def network(self, name: str) -> dict[str, str]:
        made = self.a.create_proxmox_subnet(self.ns, name, self.zone, VPC, f"10.{next(self.w.octets)}.0")
        self.nets[name] = made
        return made

    def get(self, name: str) -> dict:
        return self.a.network(self.ns, name)

    def served(self, name: str) -> dict | None:
        """The network, once Ready with its gateway served by a chassis of its group (the
        claim of ``cr-`` played here: no data plane)."""
        self.w.claimer.claim(self.nets[name]["router_port"])
        obj = self.get(name)
        gw = reason(obj, "GatewayReady") or ("", "", "")
        ready = reason(obj, "Ready") or ("", "", "")
        return obj if ready[0] == "True" and gw[:2] == ("True", "ChassisAssigned") and "serves it" in gw[2] else None

    def events(self, why: str) -> list[Any]:
        return [e for e in self.a.core.list_namespaced_event(self.ns).items if e.reason == why]


def crd_without(crd: dict, drop: dict[str, tuple[str, ...]], columns: tuple[str, ...] = ()) -> dict:
    """``crd`` as an older release shipped it: the schema without the properties ``drop``
    names (``"spec"``/``"status"`` -> property names) and without the printer ``columns``;
    only what an apply carries (apiVersion, kind, metadata.name, spec)."""
    out = {"apiVersion": crd["apiVersion"], "kind": crd["kind"], "metadata": {"name": crd["metadata"]["name"]},
           "spec": copy.deepcopy(crd["spec"])}
    for v in out["spec"]["versions"]:
        props = v["schema"]["openAPIV3Schema"]["properties"]
        for part, fields in drop.items():
            for f in fields:
                del props[part]["properties"][f]
        if "additionalPrinterColumns" in v:
            v["additionalPrinterColumns"] = [c for c in v["additionalPrinterColumns"] if c["name"] not in columns]
    return out


def put_crd(w: KubeWriter, body: dict) -> None:
    """Replace a CRD with ``body`` (as a client-side ``helm rollback`` does)."""
    cur = w.request("GET", f"{CRDS}/{body['metadata']['name']}")
    new = {**body, "metadata": {**body["metadata"], "resourceVersion": cur["metadata"]["resourceVersion"]}}
    w.request("PUT", f"{CRDS}/{body['metadata']['name']}", new)


def probe_missing(w: KubeWriter, obj: dict) -> tuple[str, ...]:
    """The status fields the server drops from a dry-run status write of every field this
    version's schema has (controller.schema.full_shape) on ``obj``."""
    cur = w.get(names.PROXMOX_NETWORKS, obj["metadata"]["name"], obj["metadata"]["namespace"])
    st = schema.full_shape("proxmoxnetworks", {"conditions": [{
        "type": "Ready", "status": "False", "reason": "Pending", "message": "probe",
        "lastTransitionTime": "2026-12-06T00:00:00Z", "observedGeneration": 1}]})
    cur.pop("status", None)
    back = w.update_status(names.PROXMOX_NETWORKS, {**cur, "status": st}, dry_run=True)
    return schema.missing(st, back.get("status") or {})


def log_count(path: Path, needle: str) -> int:
    try:
        return path.read_text(errors="replace").count(needle)
    except FileNotFoundError:
        return 0


def status_writes(proc: ControllerProcess) -> float:
    return proc.endpoints.samples("cozy_proxmox_status_writes_total").get(frozenset({("crd", NETWORKS_CRD)}), 0.0)


# --------------------------------------------------------------------------------------- (a)


def test_a_crd_rolled_back_under_the_controller_is_said_once_and_written_no_more_until_fixed(
        bed, admin, world, tmp_path):
    w = KubeWriter(admin.api_client)
    current = w.request("GET", f"{CRDS}/{NETWORKS_CRD}")
    old = crd_without(current, {"status": NEWEST}, columns=("Serving",))
    tenant = Tenant(world, admin)
    # A network no controller runs for yet: the probe of what the server holds.
    admin.create_network(tenant.ns, "sentinel", "no-such-zone", "sentinel-sub")
    sentinel = tenant.get("sentinel")
    # This version's CRD holds every field of controller.schema.FULL_STATUS, placeholders and all.
    assert probe_missing(w, sentinel) == ()
    proc = None
    restored = False
    try:
        put_crd(w, old)
        wait_for(lambda: probe_missing(w, sentinel) == PRUNED, timeout=WAIT, what="the rolled-back CRD in force")
        admin.co.delete_namespaced_custom_object(*PX, tenant.ns, "proxmoxnetworks", "sentinel")
        log = tmp_path / "controller.log"
        proc = ControllerProcess([f"--kubeconfig={bed.controller_kubeconfig}", "--leader-elect=false",
                                  "--manage-gateway-chassis=true", f"--ovn-nb-address={bed.nb_tcp}",
                                  f"--ovn-sb-address={bed.sb_tcp}", f"--resync-period={RESYNC}s"], log)
        wait_for(proc.ready, timeout=WAIT, what="the controller Ready")
        for name in NETS:
            tenant.network(name)
        for name in NETS:
            obj = wait_for(lambda n=name: tenant.served(n), timeout=2 * WAIT, what=f"{name} Ready and served")
            assert not set(NEWEST) & set(obj["status"]), obj["status"]  # pruned by the server

        def said() -> list[Any]:
            return tenant.events("SchemaOutdated")

        (event,) = wait_for(said, timeout=WAIT, what="the SchemaOutdated Event")
        assert event.type == "Warning" and event.involved_object.name in NETS
        assert event.message == (f"status.gatewayMtu, status.servingChassis are not in CRD {NETWORKS_CRD}; the server "
                                 "prunes them: apply the CRDs of this controller's version")
        pruned = proc.endpoints.samples("cozy_proxmox_crd_pruned_status_fields")
        assert pruned[frozenset({("crd", NETWORKS_CRD)})] == 2

        # Quiescence, counted over resyncs (the write metric and the log's "resync complete"),
        # not slept for: once two resyncs leave the object as it was, three more must too.
        def resyncs() -> int:
            return log_count(log, "resync complete")

        def versions() -> dict[str, str]:
            return {n: tenant.get(n)["metadata"]["resourceVersion"] for n in NETS}

        def settled() -> tuple[dict[str, str], float, int] | None:
            r0, rv0 = resyncs(), versions()
            wait_for(lambda: resyncs() >= r0 + 2, timeout=WAIT, what="two resyncs")
            return (rv0, status_writes(proc), resyncs()) if versions() == rv0 else None

        rv, writes, r0 = wait_for(settled, timeout=3 * WAIT, what="no status change over two resyncs")
        assert proc.status("/readyz") == 200
        wait_for(lambda: resyncs() >= r0 + 3, timeout=WAIT, what="three more resyncs")
        more, done, now = status_writes(proc) - writes, resyncs() - r0, versions()
        print(f"\nover {done} resyncs of {len(NETS)} networks with the rolled-back CRD: resourceVersions {rv} -> "
              f"{now}, {more:.0f} status write(s)")
        assert now == rv and more == 0
        for name in NETS:
            assert reason(tenant.get(name), "Ready")[:2] == ("True", "Ready")
        assert len(said()) == 1 and said()[0].count in (None, 1)
        assert proc.status("/readyz") == 200 and proc.alive()

        # The CRD of this version applied again: the next resync writes the full status.
        put_crd(w, {"apiVersion": current["apiVersion"], "kind": current["kind"],
                    "metadata": {"name": NETWORKS_CRD}, "spec": current["spec"]})
        restored = True
        r1 = resyncs()
        def full() -> list[dict] | None:
            objs = [tenant.get(n) for n in NETS]
            return objs if all(set(NEWEST) <= set(o["status"]) for o in objs) else None

        objs = wait_for(full, timeout=WAIT, what="gatewayMtu and servingChassis written again")
        assert resyncs() <= r1 + 2, "written by the next resync"
        assert [(o["status"]["gatewayMtu"], o["status"]["servingChassis"]) for o in objs] == \
            [(1400, "ch-worker1")] * len(NETS)
        wait_for(lambda: proc.endpoints.samples("cozy_proxmox_crd_pruned_status_fields")
                 [frozenset({("crd", NETWORKS_CRD)})] == 0, timeout=WAIT, what="the pruned-fields gauge at 0")
        assert len(said()) == 1 and proc.status("/readyz") == 200
    finally:
        if proc is not None:
            proc.stop()
        if not restored:
            put_crd(w, {"apiVersion": current["apiVersion"], "kind": current["kind"],
                        "metadata": {"name": NETWORKS_CRD}, "spec": current["spec"]})


# ----------------------------------------------------------------------------------- (b), (c)


# Kube-OVN's CRDs as an older release shipped them (the fields the running v1.15.24 has and
# they lack): a Vlan without status.conflict (kube-ovn#5233, v1.14.0), a Subnet without its
# newer status fields, a VpcEgressGateway without resources and bandwidth (the field report's
# example), a ProviderNetwork without the VLAN interface fields.
OLDER_KUBE_OVN = {
    "vlans.kubeovn.io": ({"status": ("conflict",)}, ("conflict",)),
    "subnets.kubeovn.io": ({"status": ("mcastQuerierIP", "mcastQuerierMAC", "natOutgoingPolicyRules",
                                       "u2oInterconnectionVPC")}, ()),
    "vpc-egress-gateways.kubeovn.io": ({"spec": ("resources", "bandwidth")}, ()),
    "provider-networks.kubeovn.io": ({"spec": ("autoCreateVlanSubinterfaces", "preserveVlanInterfaces",
                                               "vlanInterfaces")}, ()),
}


def apply_crd(w: KubeWriter, body: dict) -> None:
    """Server-side apply with force-conflicts, field manager helm-controller (Flux's
    HelmRelease CRD upsert since helm-controller v1.5.0, fluxcd/helm-controller#1588)."""
    w.request("PATCH", f"{CRDS}/{body['metadata']['name']}", body, APPLY_PATCH,
              query=[("fieldManager", "helm-controller"), ("force", "true")])


def owned(admin: Admin, bed: LocalCluster, tenant: Tenant) -> dict[str, Any]:
    """Everything the controller owns of the tenant's networks, as read now."""
    out: dict[str, Any] = {}
    for name, made in tenant.nets.items():
        vlan = admin.vlan(made["subnet"])
        sub = admin.co.get_cluster_custom_object(*KUBEOVN, "subnets", made["subnet"])
        net = tenant.get(name)
        ready = next(c for c in net["status"]["conditions"] if c["type"] == "Ready")
        out[name] = {
            "vlan": (vlan["metadata"]["uid"], vlan["spec"], vlan["metadata"].get("labels"),
                     vlan["metadata"].get("annotations"), vlan["metadata"].get("finalizers")),
            "subnet finalizers": sub["metadata"].get("finalizers"),
            "group": ha_chassis_groups(bed.nbctl, made["group"]),
            "ready": (ready["status"], ready["reason"], ready["lastTransitionTime"]),
            "status.vlan": net["status"].get("vlan"),
        }
    return out


def kube_ovn_log(bed: LocalCluster, offset: int) -> str:
    with open(bed.workdir / "kube-ovn-controller.log", "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def vlan_conflict_pruned(w: KubeWriter, name: str) -> bool:
    """A dry-run status write of ``status.conflict`` on Vlan ``name`` comes back without it."""
    vlan = w.get(names.VLANS, name)
    st = dict(vlan.get("status") or {}, conflict=True)
    back = w.update_status(names.VLANS, {**vlan, "status": st}, dry_run=True)
    return "conflict" not in (back.get("status") or {})


@pytest.fixture
def kube_ovn_crds_restored(admin: Admin) -> Iterator[dict[str, dict]]:
    w = KubeWriter(admin.api_client)
    current = {name: w.request("GET", f"{CRDS}/{name}") for name in OLDER_KUBE_OVN}
    try:
        yield current
    finally:
        for name, crd in current.items():
            apply_crd(w, {"apiVersion": crd["apiVersion"], "kind": crd["kind"], "metadata": {"name": name},
                          "spec": crd["spec"]})


def test_kube_ovn_crds_re_applied_in_an_older_shape_change_nothing_the_controller_owns(
        bed, admin, world, kube_ovn_crds_restored):
    tenant = Tenant(world, admin)
    ctl = Ctl(bed, manage_gateway=True, ovn_nb_address=bed.nb_tcp, ovn_sb_address=bed.sb_tcp)
    ctl.start()
    try:
        for name in ("b1", "b2"):
            tenant.network(name)
        for name in ("b1", "b2"):
            wait_for(lambda n=name: tenant.served(n), timeout=2 * WAIT, what=f"{name} Ready and served")
        ctl.resync()
        before = owned(admin, bed, tenant)
        assert all(v["status.vlan"] and v["group"] and "proxmox.cozystack.io/network" in v["subnet finalizers"]
                   for v in before.values()), before
        nb_writes = ctl.mgr.gateway.applier.transactions
        w = KubeWriter(admin.api_client)
        informers = {str(i.resource): i for i in ctl.mgr.factory.informers()}
        watched = ("vlans.kubeovn.io/v1", "subnets.kubeovn.io/v1", "provider-networks.kubeovn.io/v1")
        start = write_marker(bed)
        for reconcile in (1, 2):  # (b) the upsert; (c) the next reconcile of the unchanged release
            ended = {r: sum(informers[r].watch_restarts.values()) for r in watched}
            generations = {n: w.request("GET", f"{CRDS}/{n}")["metadata"]["generation"] for n in OLDER_KUBE_OVN}
            offset = (bed.workdir / "kube-ovn-controller.log").stat().st_size
            for name, crd in kube_ovn_crds_restored.items():
                drop, columns = OLDER_KUBE_OVN[name]
                apply_crd(w, crd_without(crd, drop, columns))
            wait_for(lambda: vlan_conflict_pruned(w, tenant.nets["b1"]["subnet"]), timeout=WAIT,
                     what="the older Vlan CRD in force")
            changed = {n: w.request("GET", f"{CRDS}/{n}")["metadata"]["generation"] != g for n, g in generations.items()}
            if reconcile == 1:
                assert all(changed.values()), changed
                # A CRD's schema change ends every watch of its kind: each of our informers starts
                # another (from its resourceVersion, or with a LIST when the server answers 410;
                # which one depends on the API server's watch cache, so the end is what is awaited).
                wait_for(lambda: all(sum(informers[r].watch_restarts.values()) > ended[r] for r in watched),
                         timeout=WAIT, what="our watches of the Kube-OVN kinds ended and started again")
                wait_for(lambda: all(f"handle update vlan {m['subnet']}" in kube_ovn_log(bed, offset)
                                     for m in tenant.nets.values()), timeout=WAIT,
                         what="kube-ovn-controller handling our Vlans again")
            else:
                assert not any(changed.values()), changed  # the same shape again: no change at all
            ctl.resync()
            for name in tenant.nets:
                wait_for(lambda n=name: tenant.served(n), timeout=WAIT, what=f"{name} Ready and served")
            after = owned(admin, bed, tenant)
            assert after == before, (reconcile, after)
        end = write_marker(bed)
        ours = [x for x in writes_before(bed, bed.controller_user, end, since_marker=start) if x.resource != "events"]
        assert ours == [], [str(x) for x in ours]
        assert ctl.mgr.gateway.applier.transactions == nb_writes
        for name in tenant.nets:
            assert reason(tenant.get(name), "Ready")[:2] == ("True", "Ready")
    finally:
        ctl.stop()
