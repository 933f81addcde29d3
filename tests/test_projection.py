"""The cache projections of controller/watch/projection.py (issue 29) lose nothing a reader reads.

Two checks per projected kind, on objects shaped as their projects serve them (Kube-OVN
v1.15's IP and Node annotations, CAPI IPAM v1beta1 addresses and claims, capmox machines in
both versions), each carrying fields no reader wants (managedFields, other controllers'
labels and annotations, a Node's status, a machine's VM template):

* **derived from the code:** every reader runs on a recording copy of the object that notes
  each key path it reads; every noted path must survive the projection (a reader that
  starts reading a dropped field fails here, whatever the fixture's values);
* **same answers:** each reader gives the same result on the projected object as on the
  object as served.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from controller import names
from controller.rules.pool_conflicts import find_address_conflicts, ipaddress_holders, kube_ovn_ip_addresses
from controller.rules.spans import pool_spans
from controller.rules.consumers import PAUSED, count_consumers, machine_pool_refs
from controller.watch.indexes import gateway_key, node_index_provider, node_providers
from controller.watch.keys import keys_for_namespace
from controller.watch.indexes import address_index_pool, ip_index_subnet
from controller.plan.network_status import namespace_allowed
from controller.watch.projection import KEEP, Keys, project, transform_for
from controller.rules.foreign import find_foreign_addresses, machine_devices, machine_index_keys
from controller.watch.indexes import claim_index_machine
from ovn.planner import trunk_nodes

MANAGED = [{"manager": "kube-ovn-controller", "operation": "Update", "fieldsV1": {"f:spec": {"f:x": {}}}}]


class Recording(dict):
    """A dict that notes in ``log`` the path of every key read below it (``*``: the whole
    mapping was iterated). Values that are mappings or lists are recorded too."""

    def __init__(self, data: Mapping[str, Any], log: set[tuple], path: tuple = ()) -> None:
        super().__init__(data)
        self._log, self._path = log, path

    def _wrap(self, key: Any, value: Any) -> Any:
        return wrap(value, self._log, self._path + (key,))

    def __getitem__(self, key: Any) -> Any:
        self._log.add(self._path + (key,))
        return self._wrap(key, super().__getitem__(key))

    def get(self, key: Any, default: Any = None) -> Any:
        self._log.add(self._path + (key,))
        return self._wrap(key, super().get(key, default)) if key in self.keys() else default

    def __contains__(self, key: object) -> bool:
        self._log.add(self._path + (key,))
        return super().__contains__(key)

    def items(self) -> Iterator[tuple[Any, Any]]:  # type: ignore[override]
        self._log.add(self._path + ("*",))
        return iter([(k, self._wrap(k, v)) for k, v in super().items()])

    def values(self) -> Iterator[Any]:  # type: ignore[override]
        self._log.add(self._path + ("*",))
        return iter([self._wrap(k, v) for k, v in super().items()])

    def __iter__(self) -> Iterator[Any]:
        self._log.add(self._path + ("*",))
        return super().__iter__()

    def __eq__(self, other: object) -> bool:
        self._log.add(self._path + ("*",))
        return dict(self) == other

    __hash__ = None  # type: ignore[assignment]


def wrap(value: Any, log: set[tuple], path: tuple) -> Any:
    if isinstance(value, Mapping):
        return Recording(value, log, path)
    if isinstance(value, list):
        return [wrap(v, log, path + ("[]",)) for v in value]
    return value


def kept(keep: Any, path: tuple) -> bool:
    """``path`` (keys, ``[]`` for a list element, ``*`` for a whole mapping) survives ``keep``."""
    rule = keep
    for i, key in enumerate(path):
        if rule is True:
            return True
        if isinstance(rule, Keys):
            # A filtered mapping: iterating it is what the filter is for (the same-answers
            # check covers the result); a named key must pass the filter.
            return key == "*" or (isinstance(key, str) and rule.test(key))
        if key == "[]":
            return False  # a list under a nested keep-list: not a shape this module makes
        if key == "*":
            return False  # the whole mapping is read, only part of it kept
        if key not in rule:
            return False
        rule = rule[key]
    return True


def reads(reader: Callable[[Any], Any], obj: Mapping[str, Any]) -> set[tuple]:
    log: set[tuple] = set()
    reader(Recording(copy.deepcopy(obj), log))
    return log


# --------------------------------------------------------------------------- objects as served

IP = {"apiVersion": "kubeovn.io/v1", "kind": "IP",
      "metadata": {"name": "web-0.tenant-a", "uid": "u-ip", "resourceVersion": "77", "generation": 1,
                   "creationTimestamp": "2026-12-01T00:00:00Z", "finalizers": ["kube-ovn-controller"],
                   "labels": {"ovn.kubernetes.io/subnet": "sub-a", "ovn.kubernetes.io/node-name": "n1", "tenant-a": ""},
                   "managedFields": MANAGED},
      "spec": {"podName": "web-0", "namespace": "tenant-a", "subnet": "sub-a", "attachSubnets": [], "nodeName": "n1",
               "ipAddress": "10.1.0.210", "v4IpAddress": "10.1.0.210", "v6IpAddress": "", "attachIps": [],
               "macAddress": "00:00:00:aa:bb:cc", "attachMacs": [], "containerID": "c0ffee", "podType": ""}}

NODE = {"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "trunk-1", "uid": "u-node", "resourceVersion": "90",
                     "labels": {"kubernetes.io/hostname": "trunk-1", "node-role.kubernetes.io/worker": "",
                                "pn-a.provider-network.kubernetes.io/ready": "true",
                                "pn-b.provider-network.kubernetes.io/ready": "false",
                                "pn-a.provider-network.kubernetes.io/interface": "eth1"},
                     "annotations": {"ovn.kubernetes.io/chassis": "ch-trunk-1", "ovn.kubernetes.io/ip_address": "100.64.0.2",
                                     "node.alpha.kubernetes.io/ttl": "0"},
                     "managedFields": MANAGED},
        "spec": {"podCIDR": "10.244.1.0/24", "providerID": "proxmox://1"},
        "status": {"capacity": {"cpu": "32"}, "images": [{"names": [f"registry/img-{i}:v1"], "sizeBytes": i}
                                                          for i in range(50)],
                   "conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.34.1"}}}

NAMESPACE = {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": "tenant-a", "uid": "u-ns", "resourceVersion": "12",
                          "labels": {"tenant": "a", "kubernetes.io/metadata.name": "tenant-a"},
                          "annotations": {names.ANNOTATION_NAMESPACE_NETWORKS: '{"web":"1001/vmbr1/pool"}',
                                          "kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 500 + "}"},
                          "managedFields": MANAGED},
             "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}

NAMESPACE_UNANNOTATED = {"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": "tenant-a", "uid": "u-ns", "resourceVersion": "13", "labels": {"tenant": "a"}}}

POOL = {"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
        "metadata": {"name": "pool", "namespace": "tenant-a"},
        "spec": {"addresses": ["10.1.0.200-10.1.0.250"], "prefix": 24, "gateway": "10.1.0.1"},
        "status": {"ipAddresses": {"used": 2, "free": 49, "total": 51}}}
REF = {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "pool"}

ADDRESS = {"apiVersion": "ipam.cluster.x-k8s.io/v1beta1", "kind": "IPAddress",
           "metadata": {"name": "m1-net0-inet", "namespace": "tenant-a", "uid": "u-a", "resourceVersion": "5",
                        "deletionTimestamp": "2026-12-04T10:00:00Z", "finalizers": ["ipam.cluster.x-k8s.io/ProtectAddress"],
                        "annotations": {PAUSED: "", "other": "x"}, "labels": {"cluster.x-k8s.io/cluster-name": "c"},
                        "ownerReferences": [{"apiVersion": "ipam.cluster.x-k8s.io/v1beta1", "kind": "IPAddressClaim",
                                             "name": "gone-claim", "uid": "u-c", "controller": True}],
                        "managedFields": MANAGED},
           "spec": {"address": "10.1.0.210", "prefix": 24, "gateway": "10.1.0.1", "poolRef": REF,
                    "claimRef": {"name": "gone-claim"}}}

CLAIM = {"apiVersion": "ipam.cluster.x-k8s.io/v1beta1", "kind": "IPAddressClaim",
         "metadata": {"name": "m2-net0-inet", "namespace": "tenant-a", "uid": "u-c2", "resourceVersion": "6",
                      "finalizers": ["ipam.cluster.x-k8s.io/ReleaseAddress"], "labels": {"x": "y"},
                      "ownerReferences": [{"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                                           "kind": "ProxmoxMachine", "name": "m-missing", "uid": "u-m", "controller": True}],
                      "managedFields": MANAGED},
         "spec": {"poolRef": REF, "clusterName": "c"},
         "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Pending"}]}}

MACHINE_V1A1 = {"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "ProxmoxMachine",
                "metadata": {"name": "m1", "namespace": "tenant-a", "uid": "u-m1", "resourceVersion": "9",
                             "deletionTimestamp": "2026-12-04T10:00:00Z", "finalizers": ["proxmoxmachine.x"],
                             "labels": {"cluster.x-k8s.io/cluster-name": "c"}, "managedFields": MANAGED},
                "spec": {"sourceNode": "pve1", "templateID": 100, "numSockets": 2, "memoryMiB": 4096,
                         "disks": {"bootVolume": {"disk": "scsi0", "sizeGb": 40}},
                         "network": {"default": {"bridge": "vmbr1", "vlan": 1001, "ipv4PoolRef": REF},
                                     "additionalDevices": [{"name": "net1", "bridge": "vmbr1", "ipv4PoolRef": REF}]}},
                "status": {"ready": False, "vmStatus": "stopped", "addresses": [{"type": "InternalIP", "address": "x"}],
                           "conditions": [{"type": "VMProvisioned", "status": "False", "reason": "DeletionFailed",
                                           "message": "task failed"}]}}

MACHINE_V1A2 = {"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha2", "kind": "ProxmoxMachine",
                "metadata": {"name": "m2", "namespace": "tenant-a", "uid": "u-m2", "resourceVersion": "10",
                             "managedFields": MANAGED},
                "spec": {"virtualMachineID": 101, "network": {"networkDevices": [
                    {"name": "net0", "bridge": "vmbr1", "vlan": 1001, "ipPoolRef": [REF]}]}},
                "status": {"deprecated": {"v1beta1": {"conditions": [
                    {"type": "VMProvisioned", "status": "False", "reason": "CloneFailed", "message": "no space"}]}},
                    "conditions": [{"type": "Ready", "status": "False", "reason": "Waiting"}]}}


# Field report S4: capmox v0.8's claim of the cluster pool on m2's net0, and its address.
CL_REF = {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "cl-v4-icip"}
CLAIM_V08 = {"apiVersion": "ipam.cluster.x-k8s.io/v1beta1", "kind": "IPAddressClaim",
             "metadata": {"name": "m2-net0-00-inet", "namespace": "tenant-a", "uid": "u-c3", "resourceVersion": "7",
                          "finalizers": ["ipam.cluster.x-k8s.io/ReleaseAddress"],
                          "labels": {"topology.kubernetes.io/proxmox-zone": "default"},
                          "annotations": {"ipam.capmox.cluster.x-k8s.io/pool-ref-counter": "0",
                                          "ipam.capmox.cluster.x-k8s.io/default-gateway": "true"},
                          "ownerReferences": [{"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha2",
                                               "kind": "ProxmoxMachine", "name": "m2", "uid": "u-m2",
                                               "controller": True}],
                          "managedFields": MANAGED},
             "spec": {"poolRef": CL_REF},
             "status": {"addressRef": {"name": "m2-net0-00-inet"},
                        "conditions": [{"type": "Ready", "status": "True", "reason": "Allocated"}]}}
ADDRESS_V08 = {"apiVersion": "ipam.cluster.x-k8s.io/v1beta1", "kind": "IPAddress",
               "metadata": {"name": "m2-net0-00-inet", "namespace": "tenant-a", "uid": "u-a3", "resourceVersion": "8",
                            "finalizers": ["ipam.cluster.x-k8s.io/ProtectAddress"],
                            "ownerReferences": [{"apiVersion": "ipam.cluster.x-k8s.io/v1beta1",
                                                 "kind": "IPAddressClaim", "name": "m2-net0-00-inet", "uid": "u-c3",
                                                 "controller": True}],
                            "managedFields": MANAGED},
               "spec": {"address": "10.0.50.3", "prefix": 24, "gateway": "10.0.50.1", "poolRef": CL_REF,
                        "claimRef": {"name": "m2-net0-00-inet"}}}


def _foreign(machines: list, claims: list, addresses: list) -> Any:
    return find_foreign_addresses("pool", "10.1.0.0/24", "vmbr1", 1001, machines, claims, addresses)


def _spans() -> Any:
    return pool_spans(POOL["spec"])


def _consumers(machines: list, addresses: list, claims: list) -> Any:
    c = count_consumers(POOL, "pool", machines, addresses, claims)
    return c, c.message("pool", 1001, "sub-a")


# (kind key, the object, readers): each reader takes the one object.
READERS: list[tuple[tuple[str, str], dict, list[Callable[[Any], Any]]]] = [
    (("kubeovn.io", "ips"), IP, [ip_index_subnet, kube_ovn_ip_addresses,
                                 lambda ip: find_address_conflicts(_spans(), [ip], [ADDRESS])]),
    (("", "nodes"), NODE, [node_index_provider, node_providers, gateway_key,
                           lambda n: trunk_nodes([n], "pn-a"), lambda n: trunk_nodes([n], "pn-b")]),
    (("", "namespaces"), NAMESPACE, [
        lambda ns: namespace_allowed(ns, {"matchLabels": {"tenant": "a"}}),
        lambda ns: namespace_allowed(ns, {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                                                "operator": "In", "values": ["tenant-a"]}]}),
        lambda ns: keys_for_namespace(None, ns),
        lambda ns: keys_for_namespace(ns, NAMESPACE_UNANNOTATED)]),
    (("ipam.cluster.x-k8s.io", "ipaddresses"), ADDRESS, [
        address_index_pool, lambda a: ipaddress_holders([a]), lambda a: _consumers([], [a], []),
        lambda a: find_address_conflicts(_spans(), [IP], [a])]),
    (("ipam.cluster.x-k8s.io", "ipaddresses"), ADDRESS_V08, [
        lambda a: _foreign([MACHINE_V1A2], [CLAIM_V08], [a])]),
    (("ipam.cluster.x-k8s.io", "ipaddressclaims"), CLAIM, [lambda c: _consumers([], [], [c]), claim_index_machine]),
    (("ipam.cluster.x-k8s.io", "ipaddressclaims"), CLAIM_V08, [
        claim_index_machine, lambda c: _foreign([MACHINE_V1A2], [c], [ADDRESS_V08])]),
    (("infrastructure.cluster.x-k8s.io", "proxmoxmachines"), MACHINE_V1A1,
     [machine_pool_refs, lambda m: _consumers([m], [], [CLAIM]), machine_devices, machine_index_keys]),
    (("infrastructure.cluster.x-k8s.io", "proxmoxmachines"), MACHINE_V1A2,
     [machine_pool_refs, lambda m: _consumers([m], [], []), machine_devices, machine_index_keys,
      lambda m: _foreign([m], [CLAIM_V08], [ADDRESS_V08])]),
]
IDS = [f"{k[1]}-{obj['metadata']['name']}" for k, obj, _ in READERS]


@pytest.mark.parametrize("kind,obj,readers", READERS, ids=IDS)
def test_every_path_a_reader_reads_survives_the_projection(kind, obj, readers):
    keep = KEEP[kind]
    for reader in readers:
        lost = sorted(p for p in reads(reader, obj) if not kept(keep, p))
        assert lost == [], f"{kind}: read but dropped: {lost}"


@pytest.mark.parametrize("kind,obj,readers", READERS, ids=IDS)
def test_every_reader_answers_the_same_on_the_projected_object(kind, obj, readers):
    projected = transform_for(*kind)(copy.deepcopy(obj))
    for reader in readers:
        assert reader(projected) == reader(copy.deepcopy(obj))


@pytest.mark.parametrize("kind,obj", [(k, o) for k, o, _ in READERS], ids=IDS)
def test_the_projection_drops_what_no_reader_reads_and_keeps_the_cache_key(kind, obj):
    p = transform_for(*kind)(copy.deepcopy(obj))
    assert "managedFields" not in p["metadata"]
    assert (p["apiVersion"], p["kind"], p["metadata"]["name"], p["metadata"].get("namespace")) == (
        obj["apiVersion"], obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace"))
    assert len(repr(p)) < len(repr(obj))


def test_a_node_keeps_only_its_ready_labels_and_chassis_and_no_spec_or_status():
    p = transform_for("", "nodes")(copy.deepcopy(NODE))
    assert p["metadata"]["labels"] == {"pn-a.provider-network.kubernetes.io/ready": "true",
                                       "pn-b.provider-network.kubernetes.io/ready": "false"}
    assert p["metadata"]["annotations"] == {"ovn.kubernetes.io/chassis": "ch-trunk-1"}
    assert "spec" not in p and "status" not in p


def test_a_malformed_value_is_kept_as_served_for_its_reader_to_judge():
    """A spec that is not a mapping is not ours to repair: the reader sees what was served."""
    bad = {**IP, "spec": "not-a-map", "metadata": {**IP["metadata"], "labels": ["not", "a", "map"]}}
    p = project(bad, KEEP[("kubeovn.io", "ips")])
    assert p["spec"] == "not-a-map"
    assert ip_index_subnet(p) == ip_index_subnet(bad) == []


def test_kinds_the_controller_writes_from_its_cache_are_not_projected():
    """Networks, zones, Vlans and Subnets: their finalizer and annotation patches take their
    shape from the cached lists (controller/runtime/kube.py), which must stay complete."""
    for group, plural in [("proxmox.cozystack.io", "proxmoxnetworks"), ("proxmox.cozystack.io", "proxmoxnetworkzones"),
                          ("kubeovn.io", "vlans"), ("kubeovn.io", "subnets"), ("ipam.cluster.x-k8s.io", "inclusterippools")]:
        assert transform_for(group, plural) is None
