"""The CRDs as the real API server enforces them (reference-behaviour.md §1,
product-decisions.md §7 "Parse cases the CRD refuses").

Refused input is a 422 from the API server; input the CRD pattern admits
(0, 4095, backwards ranges) is stored and left to the controller (ZoneInvalid).
"""

from __future__ import annotations

import secrets

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.integration

GROUP, VERSION = "proxmox.cozystack.io", "v1alpha1"


@pytest.fixture
def crd_api(admin_client) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(admin_client)


@pytest.fixture
def zones(crd_api):
    """Create cluster-scoped zones with unique names; delete them afterwards."""
    made: list[str] = []

    def create(spec: dict) -> dict:
        name = f"crdtest-{secrets.token_hex(4)}"
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ProxmoxNetworkZone", "metadata": {"name": name}, "spec": spec}
        obj = crd_api.create_cluster_custom_object(GROUP, VERSION, "proxmoxnetworkzones", body)
        made.append(name)
        return obj

    yield create
    for name in made:
        try:
            crd_api.delete_cluster_custom_object(GROUP, VERSION, "proxmoxnetworkzones", name)
        except ApiException:
            pass


def valid_zone(**overrides) -> dict:
    spec = {"bridge": "vmbr70", "providerNetwork": "pxtenant", "vlanRanges": ["101-199"]}
    spec.update(overrides)
    return spec


def assert_422(call, *needles: str) -> ApiException:
    with pytest.raises(ApiException) as info:
        call()
    err = info.value
    assert err.status == 422, err.body
    for needle in needles:
        assert needle in err.body, err.body
    return err


def test_valid_zone_is_stored_with_every_optional_block(zones):
    obj = zones(
        valid_zone(
            reservedVLANs=[1, 4094],
            mtu=1500,
            namespaceSelector={
                "matchLabels": {"tenant": "yes"},
                "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}],
            },
            staticAssignments=[{"namespace": "t1", "name": "net", "vlan": 150}],
            egress={"externalSubnet": "px-transit", "gatewayNamespace": "cozy-proxmox-network"},
            admission={"uplinkVLAN": 10, "uplinkBridges": ["vmbr0"]},
        )
    )
    spec = obj["spec"]
    assert spec["admission"] == {"uplinkVLAN": 10, "uplinkBridges": ["vmbr0"]}
    assert spec["staticAssignments"] == [{"namespace": "t1", "name": "net", "vlan": 150}]
    assert spec["namespaceSelector"]["matchExpressions"][0]["values"] == ["prod"]


@pytest.mark.parametrize("item", ["abc", " 7", "-5", "12345"])
def test_vlan_range_items_the_pattern_refuses(zones, item):
    assert_422(lambda: zones(valid_zone(vlanRanges=["100", item])), "spec.vlanRanges[1]")


@pytest.mark.parametrize("item", ["0", "4095", "200-100"])
def test_vlan_range_items_the_pattern_admits(zones, item):
    assert zones(valid_zone(vlanRanges=[item]))["spec"]["vlanRanges"] == [item]


def test_empty_vlan_ranges_refused(zones):
    assert_422(lambda: zones(valid_zone(vlanRanges=[])), "spec.vlanRanges")


def test_bridge_longer_than_15_refused(zones):
    assert_422(lambda: zones(valid_zone(bridge="b" * 16)), "spec.bridge")
    assert zones(valid_zone(bridge="b" * 15))["spec"]["bridge"] == "b" * 15


def test_bridge_pattern_refused(zones):
    assert_422(lambda: zones(valid_zone(bridge="0vmbr")), "spec.bridge")


def test_provider_network_longer_than_12_refused(zones):
    assert_422(lambda: zones(valid_zone(providerNetwork="p" * 13)), "spec.providerNetwork")


@pytest.mark.parametrize("mtu", [575, 65521])
def test_mtu_out_of_bounds_refused(zones, mtu):
    assert_422(lambda: zones(valid_zone(mtu=mtu)), "spec.mtu")


@pytest.mark.parametrize("mtu", [576, 65520])
def test_mtu_bounds_admitted(zones, mtu):
    assert zones(valid_zone(mtu=mtu))["spec"]["mtu"] == mtu


@pytest.mark.parametrize("vlan", [0, 4095])
def test_reserved_vlans_out_of_bounds_refused(zones, vlan):
    assert_422(lambda: zones(valid_zone(reservedVLANs=[vlan])), "spec.reservedVLANs[0]")


@pytest.mark.parametrize("vlan", [0, 4095])
def test_static_assignment_vlan_out_of_bounds_refused(zones, vlan):
    sa = [{"namespace": "t1", "name": "net", "vlan": vlan}]
    assert_422(lambda: zones(valid_zone(staticAssignments=sa)), "spec.staticAssignments[0].vlan")


def test_static_assignments_are_a_map_keyed_by_namespace_and_name(zones):
    sa = [{"namespace": "t1", "name": "net", "vlan": 150}, {"namespace": "t1", "name": "net", "vlan": 151}]
    assert_422(lambda: zones(valid_zone(staticAssignments=sa)), "Duplicate value")


@pytest.mark.parametrize("vlan", [0, 4095])
def test_admission_uplink_vlan_out_of_bounds_refused(zones, vlan):
    assert_422(lambda: zones(valid_zone(admission={"uplinkVLAN": vlan})), "spec.admission.uplinkVLAN")


def test_admission_uplink_bridge_pattern_refused(zones):
    assert_422(lambda: zones(valid_zone(admission={"uplinkBridges": ["bad bridge"]})), "spec.admission.uplinkBridges[0]")


def test_egress_needs_both_fields(zones):
    assert_422(lambda: zones(valid_zone(egress={"externalSubnet": "px-transit"})), "gatewayNamespace")


def test_missing_required_zone_fields_refused(zones):
    assert_422(lambda: zones({"bridge": "vmbr70"}), "providerNetwork", "vlanRanges")


# -- ProxmoxNetwork --------------------------------------------------------------


def network_body(name: str, **spec) -> dict:
    full = {"zone": "zone-a", "subnet": "subnet-a", "ipPool": "pool-a"}
    full.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ProxmoxNetwork", "metadata": {"name": name}, "spec": full}


def test_network_zone_and_subnet_are_immutable_ip_pool_is_not(crd_api, unique_namespace):
    ns = unique_namespace
    plural = "proxmoxnetworks"
    crd_api.create_namespaced_custom_object(GROUP, VERSION, ns, plural, network_body("net"))

    def patch(spec):
        return lambda: crd_api.patch_namespaced_custom_object(GROUP, VERSION, ns, plural, "net", {"spec": spec})

    assert_422(patch({"zone": "zone-b"}), "zone is immutable")
    assert_422(patch({"subnet": "subnet-b"}), "subnet is immutable")
    updated = patch({"ipPool": "pool-b"})()
    assert updated["spec"] == {"zone": "zone-a", "subnet": "subnet-a", "ipPool": "pool-b"}

    # A full update (PUT) is held to the same rules.
    current = crd_api.get_namespaced_custom_object(GROUP, VERSION, ns, plural, "net")
    current["spec"]["zone"] = "zone-c"
    assert_422(lambda: crd_api.replace_namespaced_custom_object(GROUP, VERSION, ns, plural, "net", current),
               "zone is immutable")


@pytest.mark.parametrize("field", ["zone", "subnet", "ipPool"])
def test_network_spec_fields_must_not_be_empty(crd_api, unique_namespace, field):
    body = network_body("net", **{field: ""})
    assert_422(lambda: crd_api.create_namespaced_custom_object(GROUP, VERSION, unique_namespace, "proxmoxnetworks", body),
               f"spec.{field}")


def test_network_status_subresource_and_ip_pool_shape(crd_api, unique_namespace):
    ns = unique_namespace
    plural = "proxmoxnetworks"
    crd_api.create_namespaced_custom_object(GROUP, VERSION, ns, plural, network_body("net"))
    status = {
        "vlan": 101,
        "vlanName": "subnet-a",
        "bridge": "vmbr70",
        "mtu": None,
        "ipPool": {"total": 10, "used": 2, "free": 8},
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "SubnetNotFound", "message": "m",
             "lastTransitionTime": "2026-10-07T08:00:00Z", "observedGeneration": 1},
        ],
    }
    got = crd_api.patch_namespaced_custom_object_status(GROUP, VERSION, ns, plural, "net", {"status": status})
    assert got["status"]["ipPool"] == {"total": 10, "used": 2, "free": 8}
    assert got["status"]["conditions"][0]["reason"] == "SubnetNotFound"
    # Status written through the main resource is ignored (status subresource on).
    got = crd_api.patch_namespaced_custom_object(GROUP, VERSION, ns, plural, "net", {"status": {"vlan": 999}})
    assert got["status"]["vlan"] == 101
    bad = {"ipPool": {"used": None}}  # merge patch: drop a required member
    assert_422(lambda: crd_api.patch_namespaced_custom_object_status(GROUP, VERSION, ns, plural, "net", {"status": bad}),
               "status.ipPool.used")
    bad_cond = {"conditions": [{"type": "Ready", "status": "Maybe", "reason": "X", "message": "",
                                "lastTransitionTime": "2026-10-07T08:00:00Z"}]}
    assert_422(lambda: crd_api.patch_namespaced_custom_object_status(GROUP, VERSION, ns, plural, "net",
                                                                      {"status": bad_cond}),
               "status.conditions[0].status")


def test_printer_columns_served(kubectl, unique_namespace, crd_api):
    crd_api.create_namespaced_custom_object(GROUP, VERSION, unique_namespace, "proxmoxnetworks", network_body("net"))
    head = kubectl("get", "pxnet", "-n", unique_namespace, "-o", "wide").splitlines()[0].split()
    assert head == ["NAME", "ZONE", "VLAN", "BRIDGE", "CIDR", "USED", "FREE", "READY", "REASON", "SERVING"]
    head = kubectl("get", "pxnet", "-n", unique_namespace).splitlines()[0].split()
    assert head == ["NAME", "ZONE", "VLAN", "BRIDGE", "CIDR", "USED", "FREE", "READY"]


def test_zone_printer_columns_served(kubectl, zones):
    name = zones(valid_zone())["metadata"]["name"]
    head = kubectl("get", "pxzone", name).splitlines()[0].split()
    assert head == ["NAME", "BRIDGE", "PROVIDER", "ALLOCATED", "FREE", "READY", "AGE"]
