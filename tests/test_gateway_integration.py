"""The gateway step of the controller end to end: real kube-apiserver, real OVN NB (and SB
with ovn-northd), Nodes as trunk nodes, the controller user with the manifests' RBAC.

Expected values: reference-behaviour.md §9 (messages, priorities from the §9.3 vectors:
for ``vpc/vpc-x`` worker5 > worker4 > worker1 > worker2), §5.10, §9.5;
product-decisions.md §4.6-§4.8; issue "OVN Northbound gateway management".
"""

from __future__ import annotations

import datetime as dt
import secrets

import pytest
from kubernetes import client as k8s

from controller.watch.keys import NetworkKey
from controller.plan.gateway import FAILING_SINCE
from tests.support.controller import running_controller
from hack.tools.objects import Admin, reason, unique
from tests.support.ovsdb import NBServer, ha_chassis_groups
from tests.support.pki import CA, kube_ovn_secret
from hack.tools.wait import wait_for
from tests.support.gateway import assigned
from tests.test_lifecycle_integration import Env

pytestmark = pytest.mark.integration

VPC = "vpc-x"
CHASSIS_ANNOTATION = "ovn.kubernetes.io/chassis"
PRUNE = 4.0


@pytest.fixture
def admin(admin_client):
    return Admin(admin_client)


class Trunk:
    """Nodes ``worker<N>`` with chassis ``ch-worker<N>``, labelled ready per provider."""

    def __init__(self, admin_client, provider: str) -> None:
        self.core = k8s.CoreV1Api(admin_client)
        self.label = f"{provider}.provider-network.kubernetes.io/ready"

    def join(self, *workers: str) -> None:
        for w in workers:
            body = {"metadata": {"name": w, "labels": {self.label: "true"},
                                 "annotations": {CHASSIS_ANNOTATION: f"ch-{w}"}}}
            try:
                self.core.create_node(body)
            except k8s.ApiException as exc:
                if exc.status != 409:
                    raise
                self.core.patch_node(w, body)

    def leave(self, *workers: str) -> None:
        for w in workers:
            self.core.patch_node(w, {"metadata": {"labels": {self.label: None}}})


class Router:
    """The router port Kube-OVN would make for a Subnet of VPC ``vpc-x`` (played by hand)."""

    def __init__(self, nbctl, subnet: str) -> None:
        self.nbctl = nbctl
        self.router = f"lr-{secrets.token_hex(3)}"
        self.lrp = f"{VPC}-{subnet}"
        self.group = f"px-{self.lrp}"

    def create(self) -> None:
        self.nbctl("lr-add", self.router)
        self.nbctl("lrp-add", self.router, self.lrp, "00:00:00:00:dd:01", "10.20.0.1/24")

    def pointer(self) -> str:
        return self.nbctl("--bare", "--columns=ha_chassis_group", "find", "Logical_Router_Port",
                          f"name={self.lrp}").strip()

    def group_rows(self) -> list[dict]:
        # One row per chassis expected here: a duplicate would show as a list and fail.
        return [{**g, "chassis": {c: ps[0] if len(ps) == 1 else ps for c, ps in g["chassis"].items()}}
                for g in ha_chassis_groups(self.nbctl, self.group)]

    def chassis(self) -> dict[str, int] | None:
        rows = self.group_rows()
        return rows[0]["chassis"] if rows else None

    def cleanup(self) -> None:
        self.nbctl("--if-exists", "lr-del", self.router)
        for u in self.nbctl("--bare", "--columns=_uuid", "find", "HA_Chassis_Group", f"name={self.group}").split():
            self.nbctl("--if-exists", "destroy", "HA_Chassis_Group", u)


def bound_network(env: Env, net: str, sub: str, pool: str, vpc: str = VPC) -> dict:
    """Network + a bound, Ready Subnet in ``vpc`` + a fine pool; returns the network once
    VLANAllocated."""
    env.a.create_network(env.ns, net, env.zone, sub, pool)
    env.wait(net, "VLANAllocated", "Allocated")
    env.subnet(sub, sub, vpc=vpc)
    env.subnet_conditions(sub, ("Validated", "True", ""), ("Ready", "True", ""))
    env.pool(pool)
    return env.wait(net, "IPPoolReady", "Ready")


def test_network_gets_its_group_and_keeps_it_in_shape(admin, admin_client, cluster, unique_namespace):
    env = Env(admin, unique_namespace)
    trunk = Trunk(admin_client, env.provider)
    ns, net, sub, pool = unique_namespace, "gw", unique("sub"), "p"
    r = Router(cluster.nbctl, sub)
    trunk.join("worker1", "worker2")
    try:
        with running_controller(cluster, manage_gateway=True, ovn_nb_address=cluster.nb_tcp,
                                subnet_prune_timeout=PRUNE) as mgr:
            bound_network(env, net, sub, pool)
            # No router port yet.
            obj = env.wait(net, "GatewayReady", "RouterPortMissing")
            assert reason(obj, "GatewayReady") == ("False", "RouterPortMissing",
                                                   f'OVN has no logical router port "{r.lrp}" yet')
            assert reason(obj, "Ready")[:2] == ("False", "RouterPortMissing")
            # Kube-OVN makes the port: the NB event brings the network back at once.
            r.create()
            obj = env.wait(net, "Ready", "Ready")
            assert reason(obj, "GatewayReady") == (
                "True", "ChassisAssigned", assigned(r.lrp, r.group, [("ch-worker1", 100), ("ch-worker2", 90)]))
            rows = r.group_rows()
            assert len(rows) == 1
            assert rows[0]["external_ids"] == {"owner": "proxmox-network", "network": f"{ns}/{net}"}
            assert rows[0]["chassis"] == {"ch-worker1": 100, "ch-worker2": 90}
            assert r.pointer() == rows[0]["uuid"]
            # northd turns the port into a distributed gateway port: cr-<port> in the SB.
            wait_for(lambda: cluster.sbctl("--bare", "--columns=type", "find", "Port_Binding",
                                           f"logical_port=cr-{r.lrp}").strip() == "chassisredirect",
                     timeout=20, what="cr- port in the SB")
            m = mgr.metrics
            assert m.network_gateway_chassis.labels(ns, net)._value.get() == 2
            assert m.network_gateway_ready.labels(ns, net)._value.get() == 1

            # Drift: the pointer cleared by hand is repaired from the NB event (resync is 1 h here).
            r.nbctl("clear", "Logical_Router_Port", r.lrp, "ha_chassis_group")
            wait_for(lambda: r.pointer() == rows[0]["uuid"], timeout=15, what="pointer repaired")

            # A node joining does not move the active chassis (worker5 tops the hash).
            trunk.join("worker5")
            wait_for(lambda: r.chassis() == {"ch-worker1": 100, "ch-worker5": 90, "ch-worker2": 80},
                     timeout=15, what="worker5 added below the active chassis")
            # The active node leaving moves it.
            trunk.leave("worker1")
            wait_for(lambda: r.chassis() == {"ch-worker5": 100, "ch-worker2": 90}, timeout=15,
                     what="active moved to worker5")
            # The status follows the NB transaction just seen: awaited, not read once.
            want = assigned(r.lrp, r.group, [("ch-worker5", 100), ("ch-worker2", 90)])
            wait_for(lambda: reason(admin.network(ns, net), "GatewayReady")[2] == want, timeout=30,
                     what="GatewayReady names the moved chassis")
            assert reason(admin.network(ns, net), "Ready")[:2] == ("True", "Ready")

            # Steady state: a full resync writes nothing to the NB.
            n = mgr.gateway.applier.transactions
            done = mgr.resyncs_completed
            mgr.enqueue_all()
            wait_for(lambda: mgr.resyncs_completed > done, timeout=30, what="resync")
            assert mgr.gateway.applier.transactions == n

            # No trunk node left: the group stays as it is, GatewayReady False.
            trunk.leave("worker2")
            wait_for(lambda: r.chassis() == {"ch-worker5": 100}, timeout=15, what="worker2 dropped")
            trunk.leave("worker5")
            obj = env.wait(net, "GatewayReady", "NoTrunkNodes")
            assert reason(obj, "Ready")[:2] == ("False", "NoTrunkNodes")
            assert r.chassis() == {"ch-worker5": 100}  # never emptied (B06)
            trunk.join("worker2")
            env.wait(net, "Ready", "Ready")

            # Deletion: the group goes before the VLAN.
            admin.co.delete_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks", net)
            env.wait(net, "Ready", "SubnetStillExists")
            assert r.group_rows()  # still there while the network waits
            env.delete_subnet(sub)
            env.vlan_subnets(sub, [])
            env.gone(net)
            assert r.group_rows() == [] and r.pointer() == ""
            assert not env.vlan_exists(sub)
    finally:
        trunk.leave("worker1", "worker2", "worker5")
        r.cleanup()


def _refuse_status_vlan(admin_client, ns: str, sfx: str) -> tuple[str, str]:
    """A ValidatingAdmissionPolicy that refuses every network status write in ``ns`` that
    records a VLAN: the status write after the group is lost (as when the leader is killed
    between the two, or the write gets a 409). Returns (policy, binding)."""
    adm = k8s.AdmissionregistrationV1Api(admin_client)
    policy, binding = f"test-lose-status-{sfx}", f"test-lose-status-{sfx}"
    adm.create_validating_admission_policy({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{
                     "apiGroups": ["proxmox.cozystack.io"], "apiVersions": ["*"], "operations": ["UPDATE"],
                     "resources": ["proxmoxnetworks/status"]}]},
                 "validations": [{"expression": "!has(object.status) || !has(object.status.vlan) || "
                                                "object.status.vlan == 0",
                                  "message": "test: the status write that records the VLAN is lost"}]}})
    adm.create_validating_admission_policy_binding({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": binding},
        "spec": {"policyName": policy, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}})
    return policy, binding


def test_a_group_whose_status_write_was_lost_goes_with_the_network(admin, admin_client, cluster, unique_namespace):
    """The pass that writes a network's group writes its status (with the VLAN) after it; when
    that write is lost, the stored status never shows the VLAN, and §6 step 3 as written
    ("status.vlan ≠ 0") would skip the release and leave the group behind until the next
    collection (5 min). The deletion asks the NB cache too: the group goes before the
    finalizer (chaos short form, a group left after teardown; docs/architecture.md)."""
    env = Env(admin, unique_namespace)
    trunk = Trunk(admin_client, env.provider)
    ns, net, sub, pool = unique_namespace, "lost", unique("sub"), "p"
    r = Router(cluster.nbctl, sub)
    adm = k8s.AdmissionregistrationV1Api(admin_client)
    policy = binding = ""
    trunk.join("worker1")
    try:
        # Kube-OVN's side first (Subnet bound and Ready, router port), as a load creates them.
        r.create()
        env.subnet(sub, sub, vpc=VPC)
        env.subnet_conditions(sub, ("Validated", "True", ""), ("Ready", "True", ""))
        env.pool(pool)
        admin.create_network(ns, net, env.zone, sub, pool)
        policy, binding = _refuse_status_vlan(admin_client, ns, secrets.token_hex(3))

        def refused() -> bool:
            try:
                admin.co.patch_namespaced_custom_object_status(
                    "proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks", net, {"status": {"vlan": 1}},
                    dry_run="All")
            except k8s.ApiException as exc:
                return "the status write that records the VLAN is lost" in str(exc.body)
            return False

        wait_for(refused, timeout=30, what="the policy refuses status writes with a VLAN")
        with running_controller(cluster, manage_gateway=True, ovn_nb_address=cluster.nb_tcp,
                                subnet_prune_timeout=PRUNE, gateway_collect_period=3600.0) as mgr:
            wait_for(lambda: r.group_rows() and r.pointer(), timeout=40, what="the network's group written")
            assert r.group_rows()[0]["external_ids"] == {"owner": "proxmox-network", "network": f"{ns}/{net}"}
            assert "vlan" not in (admin.network(ns, net).get("status") or {})
            wait_for(lambda: mgr.collector.runs >= 1, timeout=30, what="the collector's start run")

            admin.co.delete_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks", net)
            env.delete_subnet(sub)
            env.vlan_subnets(sub, [])
            env.gone(net)
            assert r.group_rows() == [] and r.pointer() == ""
            assert not env.vlan_exists(sub)
            # The release did it, not the collector (its next run is an hour away).
            assert mgr.collector.runs == 1
            assert mgr.metrics.registry.get_sample_value("cozy_proxmox_gateway_groups_collected_total") == 0
    finally:
        if binding:
            adm.delete_validating_admission_policy_binding(binding)
        if policy:
            adm.delete_validating_admission_policy(policy)
        trunk.leave("worker1")
        r.cleanup()


def test_subnet_without_vpc_and_foreign_group(admin, admin_client, cluster, unique_namespace):
    env = Env(admin, unique_namespace)
    trunk = Trunk(admin_client, env.provider)
    trunk.join("worker1")
    sub1, sub2 = unique("sub"), unique("sub")
    r = Router(cluster.nbctl, sub2)
    try:
        with running_controller(cluster, manage_gateway=True, ovn_nb_address=cluster.nb_tcp):
            bound_network(env, "novpc", sub1, "p1", vpc="")
            # No Kube-OVN here to default it into ovn-cluster: the default VPC all the same (R2).
            obj = env.wait("novpc", "GatewayReady", "SubnetUnavailable")
            assert reason(obj, "GatewayReady")[2] == (f'no HA chassis group on router port "ovn-cluster-{sub1}" of the '
                                                      "default VPC: see SubnetReady")
            assert reason(obj, "SubnetReady")[:2] == ("False", "SubnetInvalid")
            assert reason(obj, "SubnetReady")[2].startswith(
                f'Subnet "{sub1}" has no spec.vpc, so Kube-OVN puts it in the default VPC "ovn-cluster"; ')

            r.create()
            r.nbctl("ha-chassis-group-add", r.group)
            r.nbctl("set", "HA_Chassis_Group", r.group, "external_ids:owner=kube-ovn")
            bound_network(env, "foreign", sub2, "p2")
            obj = env.wait("foreign", "GatewayReady", "ForeignGroup")
            msg = f'OVN HA_Chassis_Group "{r.group}" belongs to "kube-ovn"; the controller leaves it alone'
            assert reason(obj, "GatewayReady") == ("False", "ForeignGroup", msg)
            assert reason(obj, "Ready") == ("False", "ForeignGroup", msg)
            assert r.pointer() == ""
            # The owner lets go of it (owner key removed): adopted in place on the NB event.
            uuid = r.group_rows()[0]["uuid"]
            r.nbctl("remove", "HA_Chassis_Group", r.group, "external_ids", "owner")
            env.wait("foreign", "Ready", "Ready")
            assert r.group_rows()[0]["uuid"] == uuid and r.pointer() == uuid
    finally:
        trunk.leave("worker1")
        r.cleanup()


def test_collector_deletes_groups_of_networks_that_are_gone(admin, cluster, unique_namespace):
    sfx = secrets.token_hex(3)
    gone, live, bad = f"px-gone-{sfx}", f"px-live-{sfx}", f"px-bad-{sfx}"
    env = Env(admin, unique_namespace)
    admin.create_network(unique_namespace, "alive", env.zone, unique("sub"))
    for name, network in ((gone, f"{unique_namespace}/deleted"), (live, f"{unique_namespace}/alive"),
                          (bad, "no-slash")):
        cluster.nbctl("ha-chassis-group-add", name)
        cluster.nbctl("set", "HA_Chassis_Group", name, "external_ids:owner=proxmox-network",
                      f"external_ids:network={network}")
    try:
        with running_controller(cluster, manage_gateway=True, ovn_nb_address=cluster.nb_tcp) as mgr:
            wait_for(lambda: mgr.collector.runs >= 1, timeout=30, what="collector ran at start")

            def exists(name):
                return bool(cluster.nbctl("--bare", "--columns=_uuid", "find", "HA_Chassis_Group",
                                          f"name={name}").strip())

            assert not exists(gone)
            assert exists(live) and exists(bad)
            assert mgr.metrics.registry.get_sample_value("cozy_proxmox_gateway_groups_collected_total") >= 1
    finally:
        for name in (gone, live, bad):
            for u in cluster.nbctl("--bare", "--columns=_uuid", "find", "HA_Chassis_Group", f"name={name}").split():
                cluster.nbctl("--if-exists", "destroy", "HA_Chassis_Group", u)


def private_nb_bed(admin: Admin, admin_client, ns: str, tmp_path) -> tuple[NBServer, Env, Trunk, str, Router]:
    """A private NB server (this test may stop or pause it), a zone and ``Env`` for ``ns``,
    trunk node worker1, and a new Subnet name with its router port's helper (not created).
    Returns (server, env, trunk, subnet, router)."""
    server = NBServer(tmp_path / "nb").start()
    env = Env(admin, ns)
    trunk = Trunk(admin_client, env.provider)
    trunk.join("worker1")
    sub = unique("sub")
    return server, env, trunk, sub, Router(server.nbctl, sub)


def _time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_nb_outage_grace_survives_a_restart_and_recovers(admin, admin_client, cluster, unique_namespace, tmp_path,
                                                          capsys):
    """§9.5 with the start kept in the object (product-decisions.md §4.6): a Ready network
    stays Ready for the grace, then NBUnavailable; a restart in between keeps the
    deadline; recovery restores it."""
    grace = 8.0
    server, env, trunk, sub, r = private_nb_bed(admin, admin_client, unique_namespace, tmp_path)
    ns, net = unique_namespace, "out"
    key = NetworkKey(ns, net)
    opts = dict(manage_gateway=True, ovn_nb_address=server.remote, nb_grace_period=grace)
    try:
        with running_controller(cluster, **opts) as mgr:
            r.create()
            bound_network(env, net, sub, "p")
            env.wait(net, "Ready", "Ready")
            server.stop()
            wait_for(lambda: not mgr.gateway.applier.synced(), timeout=15, what="NB lost")
            mgr.network_controller.add(key)
            obj = wait_for(lambda: (o := admin.network(ns, net))["status"].get(FAILING_SINCE) and o,
                           timeout=15, what="failure recorded")
            since = obj["status"][FAILING_SINCE]
            assert reason(obj, "GatewayReady")[:2] == ("True", "ChassisAssigned")  # kept within the grace
            assert reason(obj, "Ready")[:2] == ("True", "Ready")
            # doctor tells the operator until when (with the deployed 10 min grace).
            from controller import doctor

            assert doctor.main(["--kubeconfig", str(cluster.admin_kubeconfig), "-n", ns, net]) == 0
            until = (_time(since) + dt.timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
            assert (f"OVN NB failing since {since}; a network whose gateway was up stays Ready until {until}"
                    in capsys.readouterr().out)
        # A restart during the grace: the recorded start stays, so does the deadline.
        with running_controller(cluster, **opts) as mgr:
            def after_grace():
                mgr.network_controller.add(key)
                o = admin.network(ns, net)
                return reason(o, "Ready")[:2] == ("False", "NBUnavailable") and o

            obj = wait_for(after_grace, timeout=40, interval=0.5, what="grace over")
            assert obj["status"][FAILING_SINCE] == since
            gw = next(c for c in obj["status"]["conditions"] if c["type"] == "GatewayReady")
            assert (gw["status"], gw["reason"]) == ("False", "NBUnavailable")
            assert gw["message"].startswith(
                f'could not bring the HA chassis group of router port "{r.lrp}" up to date in OVN NB since {since}: ')
            assert _time(gw["lastTransitionTime"]) >= _time(since) + dt.timedelta(seconds=grace)
            assert mgr.metrics.registry.get_sample_value("cozy_proxmox_gateway_nb_errors_total") >= 1
            # Recovery: the same rows are found again; no failure record is left.
            server.start()
            obj = wait_for(lambda: (o := admin.network(ns, net)) and reason(o, "Ready")[:2] == ("True", "Ready") and o,
                           timeout=40, what="recovered")
            assert FAILING_SINCE not in obj["status"]
            assert reason(obj, "GatewayReady")[:2] == ("True", "ChassisAssigned")
    finally:
        trunk.leave("worker1")
        server.stop()


def test_never_up_network_fails_at_once_and_release_waits_for_the_nb(admin, admin_client, cluster,
                                                                      unique_namespace, tmp_path):
    server = NBServer(tmp_path / "nb").start()
    env = Env(admin, unique_namespace)
    trunk = Trunk(admin_client, env.provider)
    trunk.join("worker1")
    ns, net, sub = unique_namespace, "never", unique("sub")
    try:
        with running_controller(cluster, manage_gateway=True, ovn_nb_address=server.remote,
                                subnet_prune_timeout=PRUNE) as mgr:
            wait_for(mgr.gateway.applier.synced, timeout=15, what="NB synced")
            server.stop()
            bound_network(env, net, sub, "p")
            obj = env.wait(net, "GatewayReady", "NBUnavailable")
            assert reason(obj, "GatewayReady")[0] == "False"  # never up: no grace
            assert reason(obj, "Ready")[:2] == ("False", "NBUnavailable")
            # Deleting while the NB is down: the VLAN is held (GatewayReleasePending).
            admin.co.delete_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks", net)
            env.delete_subnet(sub)
            env.vlan_subnets(sub, [])
            obj = env.wait(net, "Ready", "GatewayReleasePending")
            assert reason(obj, "Ready")[2].startswith("could not delete the network's HA chassis group from OVN NB: ")
            assert env.vlan_exists(sub)
            server.start()
            env.gone(net, timeout=60)
            assert not env.vlan_exists(sub)
    finally:
        trunk.leave("worker1")
        server.stop()


def _apply_tls_role(cluster) -> None:
    import yaml
    from pathlib import Path

    role = Path(__file__).resolve().parent.parent / "manifests" / "ovn" / "tls-secret-role.yaml"
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "cozy-kubeovn"}}
    cluster.apply_docs([ns, *[d for d in yaml.safe_load_all(role.read_text()) if d]], "OVN TLS Role")


def put_kube_ovn_secret(core: k8s.CoreV1Api, cacert: bytes, leaf) -> None:
    """Kube-OVN's TLS Secret ``cozy-kubeovn/kube-ovn-tls`` with ``cacert`` and the client ``leaf``
    (created, or replaced as a rotation does)."""
    body = kube_ovn_secret(cacert, leaf)
    body["metadata"].pop("resourceVersion")
    try:
        core.create_namespaced_secret("cozy-kubeovn", body)
    except k8s.ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_secret("kube-ovn-tls", "cozy-kubeovn", body)


def test_tls_from_the_kube_ovn_secret_and_its_rotation(admin, admin_client, cluster, unique_namespace, tmp_path):
    """§11 with certificates made like Kube-OVN's (CN ovn, no SAN, no EKU): the controller
    user reads the Secret through the Role of manifests/ovn/; a wrong CA is refused with
    the certificate message; the fixed Secret is picked up without a restart."""
    _apply_tls_role(cluster)
    ca, other = CA("ovn-ca"), CA("unrelated-ca")
    leaf = ca.issue("ovn")
    server = NBServer(tmp_path / "nb", tls={"key": leaf.key, "cert": leaf.cert, "ca": ca.cert_pem}).start()
    core = k8s.CoreV1Api(admin_client)

    def put_secret(cacert: bytes) -> None:
        put_kube_ovn_secret(core, cacert, leaf)

    env = Env(admin, unique_namespace)
    trunk = Trunk(admin_client, env.provider)
    trunk.join("worker1")
    sub = unique("sub")
    r = Router(server.nbctl, sub)
    r.create()
    put_secret(other.cert_pem)  # wrong CA first
    try:
        with running_controller(cluster, manage_gateway=True, ovn_nb_address=server.remote,
                                ovn_tls_dir=str(tmp_path / "tls")) as mgr:
            bound_network(env, "tls", sub, "p")
            obj = env.wait("tls", "GatewayReady", "NBUnavailable")
            msg = reason(obj, "GatewayReady")[2]
            assert f"{server.remote}: TLS handshake: OVN NB certificate: " in msg, msg
            assert "BEGIN" not in msg
            put_secret(ca.cert_pem)
            obj = env.wait("tls", "Ready", "Ready", timeout=60)
            assert reason(obj, "GatewayReady")[:2] == ("True", "ChassisAssigned")
            assert mgr.gateway.applier.nb.remote == server.remote
            assert r.chassis() == {"ch-worker1": 100}
    finally:
        trunk.leave("worker1")
        server.stop()
        core.delete_namespaced_secret("kube-ovn-tls", "cozy-kubeovn")


def test_a_rotation_that_the_nb_refuses_is_named_in_a_new_event_o6(admin, admin_client, cluster, unique_namespace,
                                                                   tmp_path):
    """Field reports, fourth round, the acceptance run's O6: the NB goes down (connection
    refused: an NBUnavailable Event says so), the certificates are rotated to another CA and the
    NB comes back refusing the handshake. The first pass after it names the TLS cause
    in GatewayReady's place of record (the log and the Event), and a second NBUnavailable Event
    names it: the Event an operator reads during the grace is never the stale cause."""
    _apply_tls_role(cluster)
    ca, other = CA("ovn-ca"), CA("rotated-ca")
    leaf = ca.issue("ovn")
    server = NBServer(tmp_path / "nb", tls={"key": leaf.key, "cert": leaf.cert, "ca": ca.cert_pem}).start()
    core = k8s.CoreV1Api(admin_client)
    env = Env(admin, unique_namespace)
    trunk = Trunk(admin_client, env.provider)
    trunk.join("worker1")
    sub, ns, net = unique("sub"), unique_namespace, "o6"
    r = Router(server.nbctl, sub)
    r.create()
    put_kube_ovn_secret(core, ca.cert_pem, leaf)
    key = NetworkKey(ns, net)

    def nb_events() -> list[str]:
        return [e.message for e in core.list_namespaced_event(ns).items
                if e.involved_object.name == net and e.reason == "NBUnavailable"]

    try:
        with running_controller(cluster, manage_gateway=True, ovn_nb_address=server.remote,
                                ovn_tls_dir=str(tmp_path / "tls")) as mgr:
            bound_network(env, net, sub, "p")
            env.wait(net, "Ready", "Ready")
            server.stop()

            def first_event() -> list[str]:
                mgr.network_controller.add(key)
                return nb_events()

            (first,) = wait_for(first_event, timeout=30, interval=0.5, what="the first NBUnavailable Event")
            assert "TLS handshake" not in first, first
            # A half-done rotation: the NB comes back with a certificate of the new CA but still
            # trusting clients of the old one only, and the client Secret is rotated to the new
            # CA: whichever material a dial uses, the handshake fails.
            rotated = other.issue("ovn")
            (server.dir / "key.pem").write_bytes(rotated.key)
            (server.dir / "cert.pem").write_bytes(rotated.cert)
            put_kube_ovn_secret(core, other.cert_pem, other.issue("ovn"))
            server.start()

            def tls_event() -> list[str]:
                mgr.network_controller.add(key)
                return [m for m in nb_events() if m != first]

            (now,) = wait_for(tls_event, timeout=30, interval=0.5, what="an NBUnavailable Event naming TLS")
            assert now.startswith(f'OVN NB still unavailable for router port "{r.lrp}", now the TLS handshake '
                                  "or the TLS Secret fails: "), now
            assert "TLS handshake" in now.split(" fails: ", 1)[1], now
            assert reason(admin.network(ns, net), "Ready")[:2] == ("True", "Ready")  # within the grace
    finally:
        trunk.leave("worker1")
        server.stop()
        core.delete_namespaced_secret("kube-ovn-tls", "cozy-kubeovn")
