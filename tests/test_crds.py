"""Unit tests of the CRD manifests against reference-behaviour.md §1.

Pure file checks (PyYAML); what the API server makes of them is tested in
test_crds_integration.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

CRD_DIR = Path(__file__).resolve().parent.parent / "manifests" / "crds"
ZONE_FILE = CRD_DIR / "proxmox.cozystack.io_proxmoxnetworkzones.yaml"
NETWORK_FILE = CRD_DIR / "proxmox.cozystack.io_proxmoxnetworks.yaml"

BRIDGE_PATTERN = "^[a-zA-Z][a-zA-Z0-9_.-]*$"
RANGE_PATTERN = "^[0-9]{1,4}(-[0-9]{1,4})?$"
READY_STATUS = '.status.conditions[?(@.type=="Ready")].status'
READY_REASON = '.status.conditions[?(@.type=="Ready")].reason'


def load(path: Path) -> dict:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert len(docs) == 1, path
    return docs[0]


@pytest.fixture(scope="module")
def zone() -> dict:
    return load(ZONE_FILE)


@pytest.fixture(scope="module")
def network() -> dict:
    return load(NETWORK_FILE)


def version(crd: dict) -> dict:
    versions = crd["spec"]["versions"]
    assert len(versions) == 1
    return versions[0]


def schema(crd: dict) -> dict:
    return version(crd)["schema"]["openAPIV3Schema"]


def columns(crd: dict) -> list[tuple]:
    return [(c["name"], c["type"], c["jsonPath"], c.get("priority", 0)) for c in version(crd)["additionalPrinterColumns"]]


def test_crd_directory_holds_exactly_the_two_crds():
    assert sorted(p.name for p in CRD_DIR.glob("*.yaml")) == sorted([NETWORK_FILE.name, ZONE_FILE.name])


@pytest.mark.parametrize(
    ("fixture", "kind", "plural", "singular", "short", "scope"),
    [
        ("zone", "ProxmoxNetworkZone", "proxmoxnetworkzones", "proxmoxnetworkzone", "pxzone", "Cluster"),
        ("network", "ProxmoxNetwork", "proxmoxnetworks", "proxmoxnetwork", "pxnet", "Namespaced"),
    ],
)
def test_names_scope_version_subresource(request, fixture, kind, plural, singular, short, scope):
    crd = request.getfixturevalue(fixture)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{plural}.proxmox.cozystack.io"
    spec = crd["spec"]
    assert spec["group"] == "proxmox.cozystack.io"
    assert spec["names"] == {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": singular,
        "shortNames": [short],
    }
    assert spec["scope"] == scope
    v = version(crd)
    assert (v["name"], v["served"], v["storage"]) == ("v1alpha1", True, True)
    assert v["subresources"] == {"status": {}}
    top = schema(crd)
    assert top["type"] == "object"
    assert set(top["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert "required" not in top  # spec and status are omitempty


def test_zone_printer_columns(zone):
    assert columns(zone) == [
        ("Bridge", "string", ".spec.bridge", 0),
        ("Provider", "string", ".spec.providerNetwork", 0),
        ("Allocated", "integer", ".status.allocatedVLANs", 0),
        ("Free", "integer", ".status.freeVLANs", 0),
        ("Ready", "string", READY_STATUS, 0),
        ("Age", "date", ".metadata.creationTimestamp", 0),
    ]


def test_network_printer_columns(network):
    assert columns(network) == [
        ("Zone", "string", ".spec.zone", 0),
        ("VLAN", "integer", ".status.vlan", 0),
        ("Bridge", "string", ".status.bridge", 0),
        ("CIDR", "string", ".status.cidr", 0),
        ("Used", "integer", ".status.ipPool.used", 0),
        ("Free", "integer", ".status.ipPool.free", 0),
        ("Ready", "string", READY_STATUS, 0),
        ("Reason", "string", READY_REASON, 1),
        # product-decisions.md §10: the chassis that serves the gateway, from the OVN SB.
        ("Serving", "string", ".status.servingChassis", 1),
    ]


# -- zone spec -----------------------------------------------------------------


def zone_spec(zone) -> dict:
    return schema(zone)["properties"]["spec"]


def test_zone_spec_fields_and_required(zone):
    spec = zone_spec(zone)
    assert spec["type"] == "object"
    assert set(spec["properties"]) == {
        "bridge",
        "providerNetwork",
        "vlanRanges",
        "reservedVLANs",
        "mtu",
        "namespaceSelector",
        "staticAssignments",
        "egress",
        "admission",
    }
    assert sorted(spec["required"]) == ["bridge", "providerNetwork", "vlanRanges"]
    assert "x-kubernetes-validations" not in spec  # no CEL on the zone


def test_zone_bridge(zone):
    bridge = zone_spec(zone)["properties"]["bridge"]
    assert bridge == {**bridge, "type": "string", "minLength": 1, "maxLength": 15, "pattern": BRIDGE_PATTERN}


def test_zone_provider_network(zone):
    pn = zone_spec(zone)["properties"]["providerNetwork"]
    assert (pn["type"], pn["minLength"], pn["maxLength"]) == ("string", 1, 12)
    assert "pattern" not in pn


def test_zone_vlan_ranges(zone):
    vr = zone_spec(zone)["properties"]["vlanRanges"]
    assert (vr["type"], vr["minItems"]) == ("array", 1)
    assert vr["items"]["type"] == "string"
    assert vr["items"]["pattern"] == RANGE_PATTERN


@pytest.mark.parametrize("value", ["1", "120", "0", "4095", "9999", "101-199", "200-100", "0-0"])
def test_vlan_range_pattern_admits(value):
    assert re.search(RANGE_PATTERN, value)


@pytest.mark.parametrize("value", ["abc", " 7", "7 ", "-5", "12345", "1-", "1-2-3", "1 - 2", "", "1,2"])
def test_vlan_range_pattern_refuses(value):
    assert not re.search(RANGE_PATTERN, value)


@pytest.mark.parametrize("value", ["vmbr0", "vmbr70", "br-trunk.100", "a", "A_b"])
def test_bridge_pattern_admits(value):
    assert re.search(BRIDGE_PATTERN, value)


@pytest.mark.parametrize("value", ["0vmbr", "-br", "vm br", "vmbr/0", ""])
def test_bridge_pattern_refuses(value):
    assert not re.search(BRIDGE_PATTERN, value)


def test_zone_reserved_vlans(zone):
    rv = zone_spec(zone)["properties"]["reservedVLANs"]
    assert rv["type"] == "array"
    assert rv["items"] == {"type": "integer", "format": "int32", "minimum": 1, "maximum": 4094}
    assert "minItems" not in rv


def test_zone_mtu(zone):
    mtu = zone_spec(zone)["properties"]["mtu"]
    assert (mtu["type"], mtu["format"], mtu["minimum"], mtu["maximum"]) == ("integer", "int32", 576, 65520)


def test_zone_namespace_selector_is_a_label_selector(zone):
    sel = zone_spec(zone)["properties"]["namespaceSelector"]
    assert sel["type"] == "object"
    assert set(sel["properties"]) == {"matchLabels", "matchExpressions"}
    assert sel["properties"]["matchLabels"]["type"] == "object"
    assert sel["properties"]["matchLabels"]["additionalProperties"] == {"type": "string"}
    me = sel["properties"]["matchExpressions"]
    assert me["type"] == "array"
    item = me["items"]
    assert sorted(item["required"]) == ["key", "operator"]
    assert item["properties"]["key"]["type"] == "string"
    assert item["properties"]["operator"]["type"] == "string"
    assert item["properties"]["values"]["type"] == "array"
    assert item["properties"]["values"]["items"] == {"type": "string"}
    assert "required" not in sel


def test_zone_static_assignments(zone):
    sa = zone_spec(zone)["properties"]["staticAssignments"]
    assert sa["type"] == "array"
    assert sa["x-kubernetes-list-type"] == "map"
    assert sa["x-kubernetes-list-map-keys"] == ["namespace", "name"]
    item = sa["items"]
    assert sorted(item["required"]) == ["name", "namespace", "vlan"]
    assert set(item["properties"]) == {"namespace", "name", "vlan"}
    for f in ("namespace", "name"):
        prop = item["properties"][f]
        assert prop["type"] == "string"
        assert not {"minLength", "maxLength", "pattern"} & set(prop)
    vlan = item["properties"]["vlan"]
    assert (vlan["type"], vlan["format"], vlan["minimum"], vlan["maximum"]) == ("integer", "int32", 1, 4094)


def test_zone_egress(zone):
    eg = zone_spec(zone)["properties"]["egress"]
    assert eg["type"] == "object"
    assert sorted(eg["required"]) == ["externalSubnet", "gatewayNamespace"]
    for f in ("externalSubnet", "gatewayNamespace"):
        assert eg["properties"][f] == {**eg["properties"][f], "type": "string", "minLength": 1}


def test_zone_admission_block_is_optional(zone):
    adm = zone_spec(zone)["properties"]["admission"]
    assert adm["type"] == "object"
    assert "required" not in adm
    assert set(adm["properties"]) == {"uplinkVLAN", "uplinkBridges"}
    vlan = adm["properties"]["uplinkVLAN"]
    assert (vlan["type"], vlan["minimum"], vlan["maximum"]) == ("integer", 1, 4094)
    bridges = adm["properties"]["uplinkBridges"]
    assert bridges["type"] == "array"
    assert bridges["items"]["type"] == "string"
    assert bridges["items"]["pattern"] == BRIDGE_PATTERN
    assert bridges["items"]["maxLength"] == 15


# -- zone status ---------------------------------------------------------------


def test_zone_status(zone):
    st = schema(zone)["properties"]["status"]
    props = st["properties"]
    assert set(props) == {"observedGeneration", "conditions", "totalVLANs", "allocatedVLANs", "freeVLANs", "networks",
                          "vlansHeldForReuse"}  # issue 15, item 5
    held = props["vlansHeldForReuse"]
    assert held["type"] == "array" and held["items"]["required"] == ["vlan", "until"]
    assert held["items"]["properties"]["until"] == {"type": "string", "format": "date-time"}
    assert props["observedGeneration"] == {**props["observedGeneration"], "type": "integer", "format": "int64"}
    for f in ("totalVLANs", "allocatedVLANs", "freeVLANs", "networks"):
        assert (props[f]["type"], props[f]["format"]) == ("integer", "int32")
    assert "required" not in st
    check_conditions(props["conditions"])


# -- network -------------------------------------------------------------------


def network_spec(network) -> dict:
    return schema(network)["properties"]["spec"]


def test_network_spec_fields(network):
    spec = network_spec(network)
    assert spec["type"] == "object"
    assert set(spec["properties"]) == {"zone", "subnet", "ipPool"}
    assert sorted(spec["required"]) == ["ipPool", "subnet", "zone"]
    for f in ("zone", "subnet", "ipPool"):
        prop = spec["properties"][f]
        assert (prop["type"], prop["minLength"]) == ("string", 1)
        assert "maxLength" not in prop and "pattern" not in prop


def test_network_cel_rules_make_zone_and_subnet_immutable_not_ip_pool(network):
    spec = network_spec(network)
    assert spec["x-kubernetes-validations"] == [
        {"rule": "self.zone == oldSelf.zone", "message": "zone is immutable"},
        {"rule": "self.subnet == oldSelf.subnet", "message": "subnet is immutable"},
    ]
    for f in ("zone", "subnet", "ipPool"):
        assert "x-kubernetes-validations" not in spec["properties"][f]
    assert "ipPool" not in str(spec["x-kubernetes-validations"])


def test_no_other_cel_rules_anywhere(zone, network):
    def rules(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "x-kubernetes-validations":
                    yield from v
                else:
                    yield from rules(v)
        elif isinstance(node, list):
            for v in node:
                yield from rules(v)

    assert list(rules(schema(zone))) == []
    assert len(list(rules(schema(network)))) == 2


def test_network_status(network):
    st = schema(network)["properties"]["status"]
    props = st["properties"]
    assert set(props) == {
        "observedGeneration",
        "vlan",
        "vlanName",
        "bridge",
        "mtu",
        "cidr",
        "gateway",
        "prefix",
        "ipPool",
        "conditions",
        # product-decisions.md §4.6: the NB grace start is kept in the object.
        "gatewayFailingSince",
        # product-decisions.md §10: what serves, not what was written.
        "servingChassis",
        # product-decisions.md §10: the path MTU the gateway enforces.
        "gatewayMtu",
    }
    assert (props["gatewayMtu"]["type"], props["gatewayMtu"]["format"]) == ("integer", "int32")
    assert (props["gatewayFailingSince"]["type"], props["gatewayFailingSince"]["format"]) == ("string", "date-time")
    assert "required" not in st
    assert (props["observedGeneration"]["type"], props["observedGeneration"]["format"]) == ("integer", "int64")
    for f in ("vlan", "prefix"):
        assert (props[f]["type"], props[f]["format"]) == ("integer", "int32")
    for f in ("vlanName", "bridge", "cidr", "gateway"):
        assert props[f]["type"] == "string"
    assert (props["mtu"]["type"], props["mtu"]["format"], props["mtu"]["nullable"]) == ("integer", "int32", True)
    pool = props["ipPool"]
    assert pool["type"] == "object"
    assert sorted(pool["required"]) == ["free", "total", "used"]
    assert set(pool["properties"]) == {"total", "used", "free"}
    for f in ("total", "used", "free"):
        assert (pool["properties"][f]["type"], pool["properties"][f]["format"]) == ("integer", "int32")
    check_conditions(props["conditions"])


# -- shared --------------------------------------------------------------------


def check_conditions(cond: dict) -> None:
    """The metav1.Condition schema, as a list-map keyed by type."""
    assert cond["type"] == "array"
    assert cond["x-kubernetes-list-type"] == "map"
    assert cond["x-kubernetes-list-map-keys"] == ["type"]
    item = cond["items"]
    assert item["type"] == "object"
    assert sorted(item["required"]) == ["lastTransitionTime", "message", "reason", "status", "type"]
    props = item["properties"]
    assert set(props) == {"type", "status", "observedGeneration", "lastTransitionTime", "reason", "message"}
    assert props["status"]["enum"] == ["True", "False", "Unknown"]
    assert (props["lastTransitionTime"]["type"], props["lastTransitionTime"]["format"]) == ("string", "date-time")
    assert (props["observedGeneration"]["format"], props["observedGeneration"]["minimum"]) == ("int64", 0)
    assert props["message"]["maxLength"] == 32768
    assert props["reason"]["minLength"] == 1 and props["reason"]["maxLength"] == 1024
    assert props["type"]["maxLength"] == 316
    reason = re.compile(props["reason"]["pattern"])
    for ok in ("Allocated", "VLANConflict", "ZoneExhausted", "a_b:c,d"):
        assert reason.search(ok), ok
    for bad in ("", "1Bad", "has space", "Trailing,"):
        assert not reason.search(bad), bad
    ctype = re.compile(props["type"]["pattern"])
    for ok in ("Ready", "VLANAllocated", "SwitchDeleted", "example.com/Thing"):
        assert ctype.search(ok), ok
    for bad in ("", "-Ready", "Ready-"):
        assert not ctype.search(bad), bad


def test_schema_is_structural(zone, network):
    """Every node states its type; no free-form subtrees."""

    def walk(node, path):
        if "x-kubernetes-preserve-unknown-fields" in node:
            pytest.fail(f"{path} preserves unknown fields")
        if path != "metadata" and not path.endswith(".metadata"):
            assert "type" in node, path
        for name, sub in node.get("properties", {}).items():
            walk(sub, f"{path}.{name}")
        if "items" in node:
            walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}{{}}")

    walk(schema(zone), "zone")
    walk(schema(network), "network")
