"""The tenant chart ``charts/proxmox-network-subnet`` (issue 27 item 2): the Proxmox part of
Cozystack's vpc chart, usable on its own (../shared/spec/admission-and-packaging.md (f)).

Rendered offline (``helm template``) for what needs no cluster: the objects of a subnet, the
IDs and vmRange arithmetic of the spec's examples, and every refusal of the schema and the
templates with its message. Against the session bed (``helm template --dry-run=server``,
whose ``lookup`` reads the zones) for the zone rules. Installed on the real peers: the
Subnet bound by the real Kube-OVN to the Vlan the controller allocates, the network Ready,
the pool handing an address to a claim through the real IPAM provider.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from hack.tools.objects import Admin, unique
from hack.tools.wait import wait_for
from tests.test_charts_integration import build_helm, run_helm, set_args

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "proxmox-network-subnet"
ZONE_API = "proxmox.cozystack.io/v1alpha1/ProxmoxNetworkZone"


@pytest.fixture(scope="module")
def helm() -> str:
    return build_helm()


def template(helm: str, values: dict, namespace: str = "tenant-test", api: bool = True, env: dict | None = None,
             server: bool = False):
    args = ["template", "t", str(CHART), "--namespace", namespace, *set_args(values)]
    if api:
        args += ["--api-versions", ZONE_API]
    if server:
        args += ["--dry-run=server"]
    return run_helm(helm, *args, check=False, env=env)


def objects(r) -> list[dict]:
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def subnet(name="workers", cidr="10.1.0.0/24", **proxmox) -> dict:
    return {"name": name, "cidr": cidr, "proxmox": {"zone": "tenant-a", **proxmox}}


def test_a_subnet_renders_its_subnet_pool_and_network_with_the_specs_ids_and_ranges(helm):
    """The spec's fixtures: namespace tenant-test, VPC vpc-a0c9fc (the vpc chart's ID of
    release virtualprivatecloud-myvpc), subnet workers -> subnet-ff692499; a /24's default
    vmRange is .64-.191, a /28's .4-.11; the pool lies inside the Subnet's excludeIps."""
    objs = objects(template(helm, {"vpc": "vpc-a0c9fc", "subnets": [subnet(), subnet("db", "10.2.0.0/28")]}))
    by = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    assert sorted(by) == sorted((k, n) for n in ("subnet-ff692499", by_name(objs, "db")) for k in
                                ("Subnet", "InClusterIPPool", "ProxmoxNetwork"))
    sub = by[("Subnet", "subnet-ff692499")]
    assert sub["spec"] == {"vpc": "vpc-a0c9fc", "protocol": "IPv4", "cidrBlock": "10.1.0.0/24", "gateway": "10.1.0.1",
                           "vlan": "subnet-ff692499", "logicalGateway": True, "enableLb": False, "private": False,
                           "excludeIps": ["10.1.0.64..10.1.0.191"]}
    pool = by[("InClusterIPPool", "subnet-ff692499")]
    assert pool["metadata"]["namespace"] == "tenant-test"
    assert pool["metadata"]["annotations"] == {"metric": "100", "ipam.cluster.x-k8s.io/skip-validate-delete-webhook": ""}
    assert pool["spec"] == {"addresses": ["10.1.0.64-10.1.0.191"], "prefix": 24, "gateway": "10.1.0.1"}
    net = by[("ProxmoxNetwork", "subnet-ff692499")]
    assert net["spec"] == {"zone": "tenant-a", "subnet": "subnet-ff692499", "ipPool": "subnet-ff692499"}
    assert {k: v for k, v in net["metadata"]["labels"].items() if "cozystack.io" in k} == {
        "cozystack.io/vpcId": "vpc-a0c9fc", "cozystack.io/vpcName": "vpc-a0c9fc", "cozystack.io/tenantName": "tenant-test",
        "cozystack.io/subnetName": "workers", "proxmox.cozystack.io/zone": "tenant-a"}
    db = by_name(objs, "db")
    assert by[("InClusterIPPool", db)]["spec"]["addresses"] == ["10.2.0.4-10.2.0.11"]
    assert by[("InClusterIPPool", db)]["metadata"]["annotations"]["metric"] == "101"  # the second subnet
    # No VLAN anywhere: the controller allocates it; the Subnet names the Vlan it will make.
    assert [o["kind"] for o in objs if "vlan" in json.dumps(o["spec"])] == ["Subnet", "Subnet"]


def by_name(objs: list[dict], subnet_name: str) -> str:
    return next(o["metadata"]["name"] for o in objs
                if o["kind"] == "ProxmoxNetwork" and o["metadata"]["labels"]["cozystack.io/subnetName"] == subnet_name)


def test_names_yaml_would_read_as_other_types_stay_strings_and_a_cidr_is_written_normalised(helm):
    """Subnet and zone names such as ``on`` or ``1e3`` are valid Kubernetes names that YAML
    would read as a bool or a number; a CIDR with leading zeros is the same network."""
    objs = objects(template(helm, {"vpc": "v", "subnets": [{"name": "on", "cidr": "010.001.000.000/24",
                                                             "proxmox": {"zone": "1e3"}}]}))
    net = next(o for o in objs if o["kind"] == "ProxmoxNetwork")
    assert net["spec"]["zone"] == "1e3" and net["metadata"]["labels"]["cozystack.io/subnetName"] == "on"
    sub = next(o for o in objs if o["kind"] == "Subnet")
    assert (sub["spec"]["cidrBlock"], sub["spec"]["gateway"]) == ("10.1.0.0/24", "10.1.0.1")


def test_a_vm_range_given_replaces_the_default_and_a_zone_mtu_is_not_invented(helm):
    objs = objects(template(helm, {"vpc": "v", "subnets": [subnet(vmRange=" 10.1.0.100 - 10.1.0.150 ")]}))
    pool = next(o for o in objs if o["kind"] == "InClusterIPPool")
    assert pool["spec"]["addresses"] == ["10.1.0.100-10.1.0.150"]
    sub = next(o for o in objs if o["kind"] == "Subnet")
    assert sub["spec"]["excludeIps"] == ["10.1.0.100..10.1.0.150"] and "mtu" not in sub["spec"]


REFUSED_BY_TEMPLATES = [
    (subnet(cidr="fd00::/64"), 'subnets[0] "workers": cidr "fd00::/64": Proxmox-backed subnets are IPv4 only'),
    (subnet(cidr="10.1.0.0"), 'subnets[0] "workers": cidr "10.1.0.0": Proxmox-backed subnets are IPv4 only'),
    (subnet(cidr="10.1.0.0/29"), 'subnets[0] "workers": cidr "10.1.0.0/29": prefix /29 is outside /8../28'),
    (subnet(cidr="10.0.0.0/7"), 'subnets[0] "workers": cidr "10.0.0.0/7": prefix /7 is outside /8../28'),
    (subnet(cidr="10.1.0.1/24"), 'subnets[0] "workers": cidr "10.1.0.1/24" is not a network address (host bits set)'),
    (subnet(cidr="10.1.300.0/24"), 'subnets[0] "workers": cidr: "10.1.300.0" is not an IPv4 address'),
    (subnet(vmRange="10.1.0.10"), 'subnets[0] "workers": proxmox.vmRange "10.1.0.10" must be first-last'),
    (subnet(vmRange="10.1.0.10-10.1.0.x"), 'subnets[0] "workers": proxmox.vmRange: "10.1.0.x" is not an IPv4 address'),
    (subnet(vmRange="10.1.0.50-10.1.0.20"), 'subnets[0] "workers": proxmox.vmRange "10.1.0.50-10.1.0.20" ends before it starts'),
    (subnet(vmRange="10.1.0.1-10.1.0.20"), 'subnets[0] "workers": proxmox.vmRange "10.1.0.1-10.1.0.20" must lie inside '
                                           '10.1.0.0/24 after the gateway 10.1.0.1 and before the broadcast address'),
    # Offline no zone can be read: the render asks for one rather than saying none exists.
    ({"name": "workers", "cidr": "10.1.0.0/24", "proxmox": {}},
     'subnets[0] "workers": set proxmox.zone (an offline render cannot read the zones)'),
    (subnet(vmRange="10.1.0.10-10.1.0.255"), 'subnets[0] "workers": proxmox.vmRange "10.1.0.10-10.1.0.255" must lie '
                                             'inside 10.1.0.0/24 after the gateway 10.1.0.1 and before the broadcast address'),
]


OVERLAPS = [  # (earlier, later, overlapping?) in values order
    ("10.1.0.0/24", "10.1.0.128/25", True),   # inside
    ("10.1.0.128/25", "10.1.0.0/24", True),   # around
    ("10.1.0.0/24", "10.0.0.0/8", True),      # far around
    ("10.1.0.0/24", "10.1.1.0/24", False),    # adjacent above
    ("10.1.1.0/24", "10.1.0.0/24", False),    # adjacent below
    ("10.1.0.0/28", "10.1.0.16/28", False),
]


@pytest.mark.parametrize("first,second,overlapping", OVERLAPS, ids=[f"{a}-{b}" for a, b, _ in OVERLAPS])
def test_two_subnets_of_the_release_with_overlapping_ranges_are_refused(helm, first, second, overlapping):
    r = template(helm, {"vpc": "v", "subnets": [subnet("workers", first), subnet("db", second)]})
    if overlapping:
        assert r.returncode == 1, r.stdout
        assert (f'subnets[1] "db": cidr {second} overlaps subnets[0] "workers" ({first}); subnets of one VPC need '
                f'ranges of their own') in r.stderr, r.stderr
    else:
        assert len([o for o in objects(r) if o["kind"] == "Subnet"]) == 2


def test_a_namespace_named_like_a_yaml_boolean_stays_a_string(helm):
    objs = objects(template(helm, {"vpc": "v", "subnets": [subnet()]}, namespace="on"))
    assert {o["metadata"]["namespace"] for o in objs if o["kind"] != "Subnet"} == {"on"}


def test_a_zone_name_that_is_no_object_name_is_refused_by_the_schema(helm):
    r = template(helm, {"vpc": "v", "subnets": [subnet(zone="Tenant A")]})
    assert r.returncode == 1 and "at '/subnets/0/proxmox/zone': 'Tenant A' does not match pattern" in r.stderr, r.stderr


def test_the_clusters_default_vpc_is_refused(helm):
    r = template(helm, {"vpc": "ovn-cluster", "subnets": [subnet()]})
    assert r.returncode == 1
    assert ('vpc "ovn-cluster" is the cluster\'s default VPC; Proxmox-backed subnets belong to a tenant VPC'
            in r.stderr), r.stderr


@pytest.mark.parametrize("sub,message", REFUSED_BY_TEMPLATES, ids=[m.split(": ", 1)[1][:40] for _, m in REFUSED_BY_TEMPLATES])
def test_each_refusal_of_the_templates_says_why(helm, sub, message):
    r = template(helm, {"vpc": "v", "subnets": [sub]})
    assert r.returncode == 1 and r.stdout == "", r.stdout
    assert message in r.stderr, r.stderr


REFUSED_BY_SCHEMA = [
    ({"subnets": [subnet()]}, "- at '/vpc': minLength: got 0, want 1"),  # the tenant VPC must be named
    ({"vpc": "v", "subnets": [{"name": "w", "proxmox": {}}]}, "missing property 'cidr'"),
    ({"vpc": "v", "subnets": [{**subnet(), "vlan": 101}]}, "additional properties 'vlan' not allowed"),
    ({"vpc": "v", "subnets": [{**subnet(), "proxmox": {"zone": "z", "vlan": 101}}]}, "additional properties 'vlan' not allowed"),
    ({"vpc": "v", "subnets": [subnet(name="Workers")]}, "'/subnets/0/name': 'Workers' does not match pattern"),
    ({"vpc": "v", "subnets": [subnet()], "egress": {"enabled": True, "replicas": 0}},
     "- at '/egress/replicas': minimum: got 0, want 1"),
]


@pytest.mark.parametrize("values,message", REFUSED_BY_SCHEMA, ids=[m[:30] for _, m in REFUSED_BY_SCHEMA])
def test_each_refusal_of_the_schema_says_why(helm, values, message):
    r = template(helm, values)
    assert r.returncode == 1 and message in r.stderr, r.stderr


def test_lint_is_clean_with_subnets_and_egress(helm):
    r = run_helm(helm, "lint", "--strict", str(CHART), *set_args({
        "vpc": "v", "subnets": [subnet()], "egress": {"enabled": False, "replicas": 2, "internalCidr": "10.250.0.0/29"}}))
    assert "1 chart(s) linted, 0 chart(s) failed" in r.stdout, r.stdout
    assert "[WARNING]" not in r.stdout and "[ERROR]" not in r.stdout, r.stdout


def test_a_name_used_twice_is_refused(helm):
    r = template(helm, {"vpc": "v", "subnets": [subnet(), subnet(cidr="10.2.0.0/24")]})
    assert r.returncode == 1
    assert 'subnets[1] "workers": the name is used twice; each subnet needs a name of its own' in r.stderr, r.stderr


def test_offline_rendering_skips_the_cluster_checks(helm):
    """docs/install.md: an offline ``helm template`` (no cluster, no ``--api-versions``)
    cannot read the cluster and skips what needs it (the API's presence, the zone's existence,
    terminating objects): it renders the objects."""
    r = template(helm, {"vpc": "v", "subnets": [subnet()]}, api=False)
    assert sorted(o["kind"] for o in objects(r)) == ["InClusterIPPool", "ProxmoxNetwork", "Subnet"]


def test_egress_refusals(helm):
    r = template(helm, {"vpc": "v", "subnets": [], "egress": {"enabled": True}})
    assert r.returncode == 1 and "egress.enabled needs at least one Proxmox-backed subnet" in r.stderr, r.stderr
    r = template(helm, {"vpc": "v", "subnets": [subnet(), {**subnet("db", "10.2.0.0/24"), "proxmox": {"zone": "b"}}],
                        "egress": {"enabled": True}})
    assert r.returncode == 1
    assert "egress: the Proxmox-backed subnets span zones b and tenant-a; one egress gateway serves one zone" in r.stderr
    for cidr, message in [("garbage", 'egress.internalCidr "garbage": an IPv4 network (a.b.c.d/prefix) is needed'),
                          ("fd00::/64", 'egress.internalCidr "fd00::/64": an IPv4 network (a.b.c.d/prefix) is needed'),
                          ("10.250.0.0/30", 'egress.internalCidr "10.250.0.0/30": prefix /30 is outside /8../29'),
                          ("10.250.0.3/29", 'egress.internalCidr "10.250.0.3/29" is not a network address (host bits set)'),
                          ("10.1.0.8/29", 'egress.internalCidr 10.1.0.8/29 overlaps subnets[0] "workers" (10.1.0.0/24); '
                                          'the gateway pods need a range of their own')]:
        r = template(helm, {"vpc": "v", "subnets": [subnet()], "egress": {"enabled": True, "internalCidr": cidr}})
        assert r.returncode == 1 and message in r.stderr, (cidr, r.stderr)
    # Offline the zone cannot be read: the message says so rather than blaming the zone.
    r = template(helm, {"vpc": "v", "subnets": [subnet()], "egress": {"enabled": True}})
    assert r.returncode == 1
    assert ('egress: ProxmoxNetworkZone "tenant-a" was not found, so its transit network is unknown (an offline helm '
            'template cannot read zones: render with --dry-run=server)') in r.stderr, r.stderr


# ----------------------------------------------------------------------------- against a cluster


def kube_env(kubeconfig: Path) -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": str(kubeconfig)}


def ensure_vpc(admin: Admin, name: str, namespaces: list[str] | None = None) -> None:
    """Kube-OVN Vpc ``name`` exists (the chart looks the VPC up once any Vpc exists)."""
    from kubernetes.client.rest import ApiException

    body = {"apiVersion": "kubeovn.io/v1", "kind": "Vpc", "metadata": {"name": name},
            "spec": {"namespaces": namespaces} if namespaces else {}}
    try:
        admin.co.create_cluster_custom_object("kubeovn.io", "v1", "vpcs", body)
    except ApiException as e:
        if e.status != 409:
            raise


def test_the_zone_is_the_only_one_or_must_be_named(helm, cluster, admin_client):
    """Zones read with ``lookup`` (``--dry-run=server``): with one zone it is used; with
    several, none named, the render is refused and names them (sorted). The session bed has
    other tests' zones, so the "one zone" case is the spec's rule applied to what exists."""
    admin = Admin(admin_client)
    env = kube_env(cluster.admin_kubeconfig)
    ensure_vpc(admin, "v")
    for z in (unique("zb"), unique("za")):
        admin.create_zone(z, "pn-chart", ["3000-3009"])
    zones = sorted(z["metadata"]["name"] for z in admin.co.list_cluster_custom_object(
        "proxmox.cozystack.io", "v1alpha1", "proxmoxnetworkzones")["items"])
    values = {"vpc": "v", "subnets": [{"name": "workers", "cidr": "10.1.0.0/24", "proxmox": {}}]}
    r = template(helm, values, env=env, server=True)
    assert r.returncode == 1
    assert f'subnets[0] "workers": several ProxmoxNetworkZones exist ({", ".join(zones)}); set proxmox.zone' in r.stderr
    named = {"vpc": "v", "subnets": [{"name": "workers", "cidr": "10.1.0.0/24", "proxmox": {"zone": zones[0]}}]}
    objs = objects(template(helm, named, env=env, server=True))
    assert {o["spec"]["zone"] for o in objs if o["kind"] == "ProxmoxNetwork"} == {zones[0]}


def test_a_zones_mtu_and_transit_give_the_subnet_its_mtu_and_the_egress_gateway_its_networks(helm, cluster, admin_client):
    """The zone read with ``lookup``: its ``mtu`` goes on the Subnet, its ``egress`` and
    provider make the VpcEgressGateway (section (f)): in the zone's gateway namespace, the
    vpc labels (the controller turns port security off only on gateways whose
    ``cozystack.io/vpcId`` is their ``spec.vpc``), SNAT of every Proxmox subnet, the dedicated
    internal subnet of ``egress.internalCidr``."""
    admin = Admin(admin_client)
    ensure_vpc(admin, "vpc-a0c9fc")
    zone = unique("zmtu")
    admin.create_zone(zone, "pn-egress", ["3010-3019"], mtu=1400,
                      egress={"externalSubnet": "px-transit", "gatewayNamespace": "cozy-egress"})
    values = {"vpc": "vpc-a0c9fc", "subnets": [subnet(), subnet("db", "10.2.0.0/24")],
              "egress": {"enabled": True, "replicas": 2, "internalCidr": "10.250.0.0/29"}}
    for s_ in values["subnets"]:
        s_["proxmox"]["zone"] = zone
    objs = objects(template(helm, values, env=kube_env(cluster.admin_kubeconfig), server=True))
    subs = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Subnet"}
    assert subs["subnet-ff692499"]["spec"]["mtu"] == 1400
    internal = subs.pop("subnet-aa3414a4")  # sha256("tenant-test/vpc-a0c9fc/__egress")
    assert internal["spec"] == {"vpc": "vpc-a0c9fc", "cidrBlock": "10.250.0.0/29", "protocol": "IPv4",
                                "enableLb": False, "private": False}
    assert internal["metadata"]["labels"]["cozystack.io/egressSubnet"] == "true"
    (gw,) = [o for o in objs if o["kind"] == "VpcEgressGateway"]
    assert (gw["metadata"]["name"], gw["metadata"]["namespace"]) == ("vpc-a0c9fc-egress", "cozy-egress")
    assert gw["metadata"]["labels"]["cozystack.io/vpcId"] == gw["spec"]["vpc"] == "vpc-a0c9fc"
    assert gw["spec"] == {"vpc": "vpc-a0c9fc", "replicas": 2, "internalSubnet": "subnet-aa3414a4",
                          "externalSubnet": "px-transit",
                          "nodeSelector": [{"matchLabels": {"pn-egress.provider-network.kubernetes.io/ready": "true"}}],
                          "policies": [{"snat": True, "subnets": sorted(subs)}]}


def test_the_vpc_must_exist_and_serve_the_release_namespace(helm, cluster, admin_client):
    """With the cluster answering, the VPC is looked up: one that does not exist is refused,
    one whose ``spec.namespaces`` leave the release's namespace out is another tenant's and
    refused, one that names the namespace (or none) is accepted."""
    admin = Admin(admin_client)
    env = kube_env(cluster.admin_kubeconfig)
    zone = unique("zvpc")
    admin.create_zone(zone, "pn-vpc", ["3020-3029"])
    mine, theirs, open_, missing = unique("vpc"), unique("vpc"), unique("vpc"), unique("vpc")
    ensure_vpc(admin, mine, ["tenant-test", "tenant-x"])
    ensure_vpc(admin, theirs, ["tenant-z", "tenant-b"])
    ensure_vpc(admin, open_)
    one = [{"name": "workers", "cidr": "10.1.0.0/24", "proxmox": {"zone": zone}}]
    r = template(helm, {"vpc": missing, "subnets": one}, env=env, server=True)
    assert r.returncode == 1 and f'vpc "{missing}": no such Kube-OVN Vpc; create the tenant\'s VPC first' in r.stderr, r.stderr
    r = template(helm, {"vpc": theirs, "subnets": one}, env=env, server=True)
    assert r.returncode == 1
    assert f'vpc "{theirs}" serves namespaces tenant-b, tenant-z, not "tenant-test": it is another tenant\'s' in r.stderr
    for vpc in (mine, open_):
        assert [o["spec"]["vpc"] for o in objects(template(helm, {"vpc": vpc, "subnets": one}, env=env, server=True))
                if o["kind"] == "Subnet"] == [vpc]


def test_a_range_taken_by_another_subnet_of_the_vpc_is_refused_and_another_vpcs_is_not(helm, cluster, admin_client):
    admin = Admin(admin_client)
    env = kube_env(cluster.admin_kubeconfig)
    zone, vpc, other_vpc = unique("zov"), unique("vpc"), unique("vpc")
    admin.create_zone(zone, "pn-ov", ["3030-3039"])
    ensure_vpc(admin, vpc)
    ensure_vpc(admin, other_vpc)
    pods, elsewhere = unique("pods"), unique("pods")
    for name, in_vpc in ((pods, vpc), (elsewhere, other_vpc)):
        admin.co.create_cluster_custom_object("kubeovn.io", "v1", "subnets", {
            "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": name},
            "spec": {"vpc": in_vpc, "cidrBlock": "10.9.0.0/16" if in_vpc == vpc else "10.8.0.0/16",
                     "protocol": "IPv4"}})
    r = template(helm, {"vpc": vpc, "subnets": [{"name": "vms", "cidr": "10.9.4.0/24", "proxmox": {"zone": zone}}]},
                 env=env, server=True)
    assert r.returncode == 1
    assert (f'subnets[0] "vms": cidr 10.9.4.0/24 overlaps Kube-OVN Subnet "{pods}" of the VPC (10.9.0.0/16); '
            f'subnets of one VPC need ranges of their own') in r.stderr, r.stderr
    ok = objects(template(helm, {"vpc": vpc, "subnets": [{"name": "vms", "cidr": "10.8.4.0/24",
                                                           "proxmox": {"zone": zone}}]}, env=env, server=True))
    assert [o["spec"]["cidrBlock"] for o in ok if o["kind"] == "Subnet"] == ["10.8.4.0/24"]


def test_an_upgrade_that_drops_a_subnet_with_vm_addresses_is_refused(helm, cluster, admin_client):
    """Release safety (section (f)): the ProxmoxNetworks this release made for this VPC and
    the values no longer have must hold no VM address (``status.ipPool.used``). Another
    release's network, or one of another VPC, is not this upgrade's to judge."""
    admin = Admin(admin_client)
    env = kube_env(cluster.admin_kubeconfig)
    ns = unique("tenant")
    from kubernetes import client as k8s

    admin.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    zone, vpc = unique("zrel"), unique("vpc")
    admin.create_zone(zone, "pn-rel", ["3040-3049"])
    ensure_vpc(admin, vpc)

    def network(name: str, subnet_name: str, used: int, release: str = "t", of_vpc: str = vpc) -> None:
        admin.co.create_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks", {
            "apiVersion": "proxmox.cozystack.io/v1alpha1", "kind": "ProxmoxNetwork",
            "metadata": {"name": name, "labels": {"cozystack.io/vpcId": of_vpc, "cozystack.io/subnetName": subnet_name,
                                                  "app.kubernetes.io/instance": release}},
            "spec": {"zone": zone, "subnet": name, "ipPool": name}})
        admin.co.patch_namespaced_custom_object_status("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks", name, {
            "status": {"ipPool": {"total": 128, "used": used, "free": 128 - used}}})

    keep = [{"name": "workers", "cidr": "10.1.0.0/24", "proxmox": {"zone": zone}}]
    network("subnet-00000001", "idle", 0)
    network("subnet-00000002", "theirs", 3, release="other")
    network("subnet-00000003", "elsewhere", 4, of_vpc="vpc-other")
    assert objects(template(helm, {"vpc": vpc, "subnets": keep}, namespace=ns, env=env, server=True))
    network("subnet-00000004", "db", 2)
    r = template(helm, {"vpc": vpc, "subnets": keep}, namespace=ns, env=env, server=True)
    assert r.returncode == 1
    assert ('subnet "db" is Proxmox-backed and 2 VM address(es) are still allocated on it; delete those machines '
            'before removing the subnet') in r.stderr, r.stderr
    r = template(helm, {"vpc": vpc, "subnets": []}, namespace=ns, env=env, server=True)  # the last one removed too
    assert r.returncode == 1 and 'subnet "db" is Proxmox-backed and 2 VM address(es)' in r.stderr


def test_egress_with_a_zone_that_has_no_transit_network_names_it(helm, cluster, admin_client):
    admin = Admin(admin_client)
    zone = unique("znoeg")
    admin.create_zone(zone, "pn-noeg", ["3050-3059"])
    ensure_vpc(admin, "v")
    r = template(helm, {"vpc": "v", "subnets": [{"name": "workers", "cidr": "10.1.0.0/24", "proxmox": {"zone": zone}}],
                        "egress": {"enabled": True}}, env=kube_env(cluster.admin_kubeconfig), server=True)
    assert r.returncode == 1
    assert (f'egress: ProxmoxNetworkZone "{zone}" has no spec.egress.externalSubnet (its transit network); ask the '
            f'platform administrator') in r.stderr, r.stderr


def test_a_zone_that_does_not_exist_is_refused_at_install(helm, cluster, admin_client):
    """Field reports, fourth round (the operator's trial): a named zone that the cluster does
    not have is refused at install, naming the zones there are, instead of installing a Subnet
    whose Vlan never comes."""
    admin = Admin(admin_client)
    env = kube_env(cluster.admin_kubeconfig)
    vpc, zone = unique("vpc"), unique("zreal")
    ensure_vpc(admin, vpc)
    admin.create_zone(zone, "pn-zone", ["3040-3049"])
    r = template(helm, {"vpc": vpc, "subnets": [subnet(zone="nope")]}, env=env, server=True)
    assert r.returncode == 1
    assert 'subnets[0] "workers": proxmox.zone "nope": no such ProxmoxNetworkZone; the zones are ' in r.stderr, r.stderr
    assert zone in r.stderr.split("the zones are ", 1)[1]
    assert objects(template(helm, {"vpc": vpc, "subnets": [subnet(zone=zone)]}, env=env, server=True))  # the control


def test_an_install_over_objects_still_being_deleted_is_refused(helm, cluster, admin_client):
    """Field reports, fourth round: installing a tenant release again while its network is
    still terminating (a VM holds an address) would adopt objects about to go; it is refused,
    naming the object and how to watch it go."""
    admin = Admin(admin_client)
    env = kube_env(cluster.admin_kubeconfig)
    vpc, zone, ns = unique("vpc"), unique("zterm"), unique("tenant")
    ensure_vpc(admin, vpc)
    admin.create_zone(zone, "pn-term", ["3050-3059"])
    admin.core.create_namespace({"metadata": {"name": ns}})
    values = {"vpc": vpc, "subnets": [subnet(zone=zone)]}
    (net,) = [o for o in objects(template(helm, values, namespace=ns, env=env, server=True)) if o["kind"] == "ProxmoxNetwork"]
    net["metadata"]["finalizers"] = ["example.com/hold"]  # as a VM's address holds ours
    admin.co.create_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks", net)
    admin.co.delete_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks",
                                             net["metadata"]["name"])
    try:
        r = template(helm, values, namespace=ns, env=env, server=True)
        assert r.returncode == 1
        assert (f'subnet "workers": ProxmoxNetwork "{net["metadata"]["name"]}" is still being deleted (since ') in r.stderr
        assert (f"wait until it is gone (kubectl get proxmoxnetworks {net['metadata']['name']} -n {ns}), then install "
                "again") in r.stderr, r.stderr
    finally:
        admin.co.patch_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks",
                                                net["metadata"]["name"], {"metadata": {"finalizers": None}})
    wait_for(lambda: not [o for o in admin.co.list_namespaced_custom_object(
        "proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks")["items"]], what="the network gone")
    assert objects(template(helm, values, namespace=ns, env=env, server=True))  # gone: installs again
