"""A Ready VpcEgressGateway whose reroute policy goes missing from its VPC's router: the
network it serves says so (Warning ``EgressRerouteMissing``, the gauge at 1) and says when it
is back (Normal ``EgressRerouteRestored``, the gauge at 0). Object level, on the real OVN NB
and kube-apiserver (Kube-OVN v1.15.24's real VpcEgressGateway CRD), the controller user with
the manifests' RBAC.

kube-ovn-controller does not run on this bed, so the test writes what it would: the
gateway's status through the status subresource (``status.ready`` and ``Ready`` True for its
generation, ``internalIPs``), and on router ``<vpc>`` the priority-29100 reroute policies of
``reconcileVpcEgressGatewayOVNRoutes`` (pkg/controller/vpc_egress_gateway.go): matches
``ip4.src == $VEG.<h>_ip4`` (port group) and ``ip4.src == $VEG.<h>.ipv4`` (address set, the
VMs' sources), ``<h>`` the first 12 hex digits of ``sha256("<ns>/<name>")``, external IDs
``vendor=kube-ovn``, ``vpc-egress-gateway=<ns>/<name>``, ``af=4``.
"""

from __future__ import annotations

import hashlib
import secrets

import pytest

from controller import doctor
from tests.support.controller import running_controller
from hack.tools.objects import Admin, unique
from hack.tools.wait import wait_for
from tests.test_gateway_integration import bound_network
from tests.test_lifecycle_integration import Env

pytestmark = pytest.mark.integration

KUBEOVN = ("kubeovn.io", "v1")


@pytest.fixture
def admin(admin_client):
    return Admin(admin_client)


def ready_gateway(admin: Admin, ns: str, name: str, vpc: str, subnet: str) -> None:
    """The gateway as kube-ovn-controller leaves it once its policies are made: Ready."""
    gw = admin.co.create_namespaced_custom_object(*KUBEOVN, ns, "vpc-egress-gateways", {
        "apiVersion": "kubeovn.io/v1", "kind": "VpcEgressGateway", "metadata": {"name": name, "namespace": ns},
        "spec": {"vpc": vpc, "externalSubnet": "ext", "policies": [{"snat": False, "subnets": [subnet]}]}})
    gen = gw["metadata"]["generation"]
    admin.co.patch_namespaced_custom_object_status(*KUBEOVN, ns, "vpc-egress-gateways", name, {"status": {
        "ready": True, "phase": "Completed", "replicas": 1, "internalIPs": ["10.255.0.5"],
        "externalIPs": ["172.16.0.5"],
        "conditions": [{"type": "Ready", "status": "True", "reason": "ReconcileSuccess", "message": "",
                        "observedGeneration": gen, "lastUpdateTime": "2026-01-01T00:00:00Z",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})


def test_a_missing_reroute_is_reported_and_its_return_too(admin, cluster, unique_namespace, capsys):
    env = Env(admin, unique_namespace)
    ns, net, sub, pool = unique_namespace, "egr", unique("sub"), "p"
    vpc, gw = f"vpc-{secrets.token_hex(3)}", "gw"
    h = hashlib.sha256(f"{ns}/{gw}".encode()).hexdigest()[:12]
    ids = ["external_ids:vendor=kube-ovn", f"external_ids:vpc-egress-gateway={ns}/{gw}", "external_ids:af=4"]
    nbctl = cluster.nbctl

    def put_policies() -> None:
        for match in (f"ip4.src == $VEG.{h}_ip4", f"ip4.src == $VEG.{h}.ipv4"):
            nbctl("--", "--id=@p", "create", "Logical_Router_Policy", "priority=29100", "action=reroute",
                  f'match="{match}"', 'nexthops="10.255.0.5"', *ids,
                  "--", "add", "Logical_Router", vpc, "policies", "@p")

    def events(reason: str) -> list:
        return [e for e in admin.core.list_namespaced_event(ns).items
                if e.involved_object.name == net and e.reason == reason]

    nbctl("lr-add", vpc)
    put_policies()
    try:
        with running_controller(cluster, manage_gateway=True, ovn_nb_address=cluster.nb_tcp) as mgr:
            gauge = mgr.metrics.network_egress_reroute_missing
            bound_network(env, net, sub, pool, vpc=vpc)
            ready_gateway(admin, ns, gw, vpc, sub)
            # The policies stand: the gauge says 0 once the pass has seen the gateway.
            wait_for(lambda: gauge.labels(ns, net)._value.get() == 0 and mgr.listers.egress_gateways.get(f"{ns}/{gw}"),
                     timeout=20, what="the gateway in the cache, the gauge at 0")
            assert events("EgressRerouteMissing") == []

            # The policies vanish from the router (as in Kube-OVN #6100): the NB event brings the network back.
            nbctl("clear", "Logical_Router", vpc, "policies")
            wait_for(lambda: gauge.labels(ns, net)._value.get() == 1, timeout=20, what="the gauge at 1")
            mgr.events.flush()
            (warn,) = wait_for(lambda: events("EgressRerouteMissing"), timeout=20, what="the Warning")
            assert warn.type == "Warning" and warn.count == 1
            # doctor, from the API and the NB, says the same.
            capsys.readouterr()
            assert doctor.main(["--kubeconfig", str(cluster.admin_kubeconfig), "-n", ns, net,
                                "--ovn-nb-address", cluster.nb_tcp]) == 0
            assert f"  warning: {warn.message}" in capsys.readouterr().out.splitlines()
            assert warn.message == (
                f'VpcEgressGateway "{ns}/{gw}" is Ready, but its IPv4 reroute policy (priority 29100, '
                f'match "ip4.src == $VEG.{h}.ipv4") is missing from router "{vpc}" in the OVN NB: traffic of '
                f'subnet "{sub}" does not leave through the gateway until kube-ovn-controller makes it again')

            # kube-ovn-controller makes them again: the Normal Event, the gauge back to 0.
            put_policies()
            wait_for(lambda: gauge.labels(ns, net)._value.get() == 0, timeout=20, what="the gauge back at 0")
            mgr.events.flush()
            (back,) = wait_for(lambda: events("EgressRerouteRestored"), timeout=20, what="the Normal Event")
            assert back.type == "Normal" and back.message == (
                f'the reroute policies of VpcEgressGateway "{ns}/{gw}" are on router "{vpc}" again: traffic of '
                f'subnet "{sub}" leaves through the gateway')
            assert len(events("EgressRerouteMissing")) == 1
            assert doctor.main(["--kubeconfig", str(cluster.admin_kubeconfig), "-n", ns, net,
                                "--ovn-nb-address", cluster.nb_tcp]) == 0
            out = capsys.readouterr().out
            assert "is missing from router" not in out and "EgressReroute" not in out
    finally:
        nbctl("--if-exists", "lr-del", vpc)
