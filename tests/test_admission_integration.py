"""The three ValidatingAdmissionPolicies of manifests/admission/, proven on the real API server.

Every case is a server-side dry run, so nothing is stored except the few objects the UPDATE
and deletion cases need. The module applies manifests/admission/ itself, waits until the
policies deny a known-bad object, and removes the policies and its zones at the end (other
tests create machines that these policies would refuse). docs/admission.md maps every rule to
the tests below.
"""

from __future__ import annotations

import copy
import json
import secrets
from pathlib import Path

import pytest

from tests.conftest import KubectlError
from hack.tools.wait import wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
ADMISSION = ROOT / "manifests" / "admission"
KUBEVIRT_CRDS = sorted((ROOT / "tests" / "fixtures" / "crds").glob("kubevirt-*.yaml"))
CAPMOX = "infrastructure.cluster.x-k8s.io"
MACHINE = "proxmox-network-machine-binding"
VMPOL = "proxmox-network-vm-attachments"
PODPOL = "proxmox-network-pod-attachments"
NETWORKS = "proxmox.cozystack.io/networks"
EXEMPT = "proxmox.cozystack.io/admission-exempt"

# The rules' messages (stable fragments of the messageExpressions).
R0 = "owns Proxmox networks ("
R1 = "must be one of the Proxmox networks of namespace"
R2 = "a NIC off the zone bridges may not use the uplink VLAN"
R3 = "no NIC may be on an uplink bridge"
R4 = "every NIC must use one of the Proxmox networks of namespace"
R_PLAIN = "a NIC bridge must be a plain bridge name"
VM_MSG = "may attach only NetworkAttachmentDefinitions and Kube-OVN subnets of its own namespace"


def _hex(n: int = 3) -> str:
    return secrets.token_hex(n)


# Bridges of no zone (a host's infrastructure or raw bridges), named for this module alone: the
# session bed is shared with other modules, whose zones sit on vmbr0/vmbr1 (hack/tools/objects.py's
# default), and under pytest-xdist any of them may run before this one (issue 28).
_RAW = _hex()
RAW0, RAW1, RAW7, RAW9 = (f"raw{i}{_RAW}" for i in "0179")


class Bed:
    """Zones, namespaces and helpers shared by the module."""

    def __init__(self, kubectl):
        self.k = kubectl
        h = _hex()
        self.za, self.zb, self.zc = f"pxa-{h}", f"pxb-{h}", f"pxc-{h}"  # zone names
        self.bra, self.brb = f"za{h}", f"zb{h}"                          # zone bridges
        self.uplink_bridge = f"up{h}"
        self.uplink_vlan = 2000 + secrets.randbelow(999)
        self.zones: list[str] = []
        self.namespaces: list[str] = []
        # owning namespace: one network on zone A, one on zone B whose VLAN equals zone A's uplink VLAN
        self.owner = self.namespace(annotations={NETWORKS: f"{self.bra}/101/pool-a,{self.brb}/{self.uplink_vlan}/pool-b"})
        self.plain = self.namespace()
        self.other = self.namespace(annotations={NETWORKS: f"{self.bra}/102/pool-x"})

    # -- objects ---------------------------------------------------------------------------
    def apply(self, obj: dict) -> None:
        self.k("apply", "-f", "-", input=json.dumps(obj))

    def namespace(self, annotations: dict | None = None, labels: dict | None = None, name: str | None = None) -> str:
        name = name or f"adm-{_hex()}"
        self.apply({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}}})
        self.namespaces.append(name)
        return name

    def zone(self, name: str, bridge: str, admission: dict | None = None) -> None:
        spec = {"bridge": bridge, "providerNetwork": "pn-adm", "vlanRanges": ["100-199"]}
        if admission:
            spec["admission"] = admission
        self.apply({"apiVersion": "proxmox.cozystack.io/v1alpha1", "kind": "ProxmoxNetworkZone",
                    "metadata": {"name": name}, "spec": spec})
        self.zones.append(name)

    # -- admission ---------------------------------------------------------------------------
    def try_create(self, obj: dict) -> str | None:
        """None if a server-side dry-run create is admitted, else the error text."""
        try:
            self.k("create", "--dry-run=server", "-o", "name", "-f", "-", input=json.dumps(obj))
            return None
        except KubectlError as e:
            return e.stderr

    def try_replace(self, obj: dict) -> str | None:
        try:
            self.k("replace", "--dry-run=server", "-o", "name", "-f", "-", input=json.dumps(obj))
            return None
        except KubectlError as e:
            return e.stderr

    def get(self, obj: dict) -> dict:
        group_version = obj["apiVersion"]
        resource = obj["kind"].lower()
        if "/" in group_version:
            group, version = group_version.split("/")
            resource = f"{resource}s.{version}.{group}"
        m = obj["metadata"]
        return json.loads(self.k("get", resource, m["name"], "-n", m["namespace"], "-o", "json"))


def denied(err: str | None, policy: str, *fragments: str) -> None:
    assert err is not None, f"expected a denial by {policy}, but it was admitted"
    assert f"ValidatingAdmissionPolicy '{policy}'" in err, err
    for f in fragments:
        assert f in err, f"{f!r} not in {err!r}"


def denied_by_one_of(err: str | None, policy: str, *fragments: str) -> None:
    """Several rules refuse the object (e.g. rule 1 and rule 4 in an owning namespace); the
    API server reports the first failing evaluation, whose zone order is not fixed."""
    assert err is not None, f"expected a denial by {policy}, but it was admitted"
    assert f"ValidatingAdmissionPolicy '{policy}'" in err, err
    assert any(f in err for f in fragments), f"none of {fragments!r} in {err!r}"


def admitted(err: str | None) -> None:
    assert err is None, err


# -- capmox objects in both versions ------------------------------------------------------------

def nic(bridge: str | None = None, vlan: int | None = None, pool: str | None = None,
        kind: str = "InClusterIPPool", pool6: str | None = None) -> dict:
    return {"bridge": bridge, "vlan": vlan, "pool": pool, "kind": kind, "pool6": pool6}


def _ref(kind: str, name: str) -> dict:
    return {"apiGroup": "ipam.cluster.x-k8s.io", "kind": kind, "name": name}


def network(version: str, nics: list[dict], default: bool = True) -> dict:
    """The spec.network of a machine: nics[0] is the primary NIC (net0)."""
    if version == "v1alpha2":
        devs = []
        for i, n in enumerate(nics):
            d: dict = {"name": f"net{i}"}
            if n["bridge"]:
                d["bridge"] = n["bridge"]
            if n["vlan"]:
                d["vlan"] = n["vlan"]
            refs = ([_ref(n["kind"], n["pool"])] if n["pool"] else []) + ([_ref(n["kind"], n["pool6"])] if n["pool6"] else [])
            if refs:
                d["ipPoolRef"] = refs
            devs.append(d)
        return {"networkDevices": devs}
    out: dict = {}
    for i, n in enumerate(nics):
        d = {"bridge": n["bridge"]}
        if n["vlan"]:
            d["vlan"] = n["vlan"]
        if n["pool"]:
            d["ipv4PoolRef"] = _ref(n["kind"], n["pool"])
        if n["pool6"]:
            d["ipv6PoolRef"] = _ref(n["kind"], n["pool6"])
        if i == 0 and default:
            out["default"] = d
        else:
            out.setdefault("additionalDevices", []).append({"name": f"net{i + (0 if default else 1)}", **d})
    return out


def machine(version: str, kind: str, ns: str, nics: list[dict] | None, default: bool = True,
            name: str | None = None) -> dict:
    spec: dict = {} if nics is None else {"network": network(version, nics, default)}
    if kind == "ProxmoxMachineTemplate":
        spec = {"template": {"spec": spec}}
    return {"apiVersion": f"{CAPMOX}/{version}", "kind": kind,
            "metadata": {"name": name or f"m-{_hex()}", "namespace": ns}, "spec": spec}


SHAPES = [("v1alpha1", "ProxmoxMachine"), ("v1alpha2", "ProxmoxMachine"),
          ("v1alpha1", "ProxmoxMachineTemplate"), ("v1alpha2", "ProxmoxMachineTemplate")]
SHAPE_IDS = [f"{v}-{k}" for v, k in SHAPES]


# -- module setup -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bed(cluster, kubectl):
    for f in KUBEVIRT_CRDS:  # the bed applies them too; harmless when it already has
        kubectl("apply", "-f", str(f))
    kubectl("wait", "--for=condition=Established", "--timeout=60s",
            "crd/virtualmachines.kubevirt.io", "crd/virtualmachineinstances.kubevirt.io")
    b = Bed(kubectl)
    b.zone(b.za, b.bra, {"uplinkVLAN": b.uplink_vlan, "uplinkBridges": [b.uplink_bridge]})
    b.zone(b.zb, b.brb)
    kubectl("apply", "-f", str(ADMISSION))
    probe_m = machine("v1alpha2", "ProxmoxMachine", b.plain, [nic(b.bra)])
    probe_vm = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "metadata": {"name": "probe", "namespace": b.plain}, "spec": {"networks": [
                    {"name": "x", "multus": {"networkName": "elsewhere/nad"}}]}}
    probe_pod = pod(b.plain, {"k8s.v1.cni.cncf.io/networks": "elsewhere/nad"})
    for probe in (probe_m, probe_vm, probe_pod):
        wait_for(lambda: b.try_create(probe) is not None, what=f"policy enforced for {probe['kind']}", timeout=60)
    try:
        yield b
    finally:
        kubectl("delete", "--ignore-not-found", "-f", str(ADMISSION))
        # Wait until the API server has dropped the policies, so later tests see none.
        for probe in (probe_m, probe_vm, probe_pod):
            wait_for(lambda: b.try_create(probe) is None, what=f"policy gone for {probe['kind']}", timeout=60)
        for z in b.zones:
            kubectl("delete", "proxmoxnetworkzone", z, "--ignore-not-found", "--wait=false", check=False)
        for ns in b.namespaces:
            kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false", check=False)


def pod(ns: str, annotations: dict | None = None, name: str | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name or f"p-{_hex()}", "namespace": ns, "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/pause:1"}]}}


# ================================ proxmox-network-machine-binding ================================

def test_policies_as_shipped(bed, kubectl):
    """Names, failurePolicy, bindings (Deny, machine binding over every live zone)."""
    for name in (MACHINE, VMPOL, PODPOL):
        pol = json.loads(kubectl("get", "validatingadmissionpolicy", name, "-o", "json"))
        assert pol["spec"]["failurePolicy"] == "Fail"
        binding = json.loads(kubectl("get", "validatingadmissionpolicybinding", name, "-o", "json"))
        assert binding["spec"]["policyName"] == name
        assert binding["spec"]["validationActions"] == ["Deny"]
        conds = [c["name"] for c in pol["spec"].get("matchConditions", [])]
        assert "not-being-deleted" in conds
        if name == MACHINE:
            assert pol["spec"]["paramKind"] == {"apiVersion": "proxmox.cozystack.io/v1alpha1",
                                                "kind": "ProxmoxNetworkZone"}
            assert binding["spec"]["paramRef"] == {"selector": {}, "parameterNotFoundAction": "Allow"}
            assert len(pol["spec"]["validations"]) == 6  # rules 0-4 of the reference + plain bridge names
            assert conds == ["not-being-deleted"]
        else:
            assert conds == ["not-a-platform-namespace", "not-being-deleted"]


@pytest.mark.parametrize("version", ["v1alpha1", "v1alpha2"])
def test_a_zone_nic_on_net0_only_on_an_additional_device_only_and_on_both(bed, version):
    """Issue 26 item 7: an additional NIC is judged by the same rules as net0 (the seed's
    ``proxmox.additionalNetworks[]``), in both capmox shapes; each refusal next to an
    admitted control. Rule 0 stays (spec validation 0; capmox v0.7's own webhook requires
    ``network.default`` too): in a namespace that owns networks, net0 must be one of them."""
    b = bed
    a, bb = nic(b.bra, 101, "pool-a"), nic(b.brb, b.uplink_vlan, "pool-b")  # the owner's two networks
    foreign = nic(b.bra, 102, "pool-x")  # the other tenant's network on the same zone bridge
    infra = nic(RAW0)  # an infrastructure bridge, no VLAN, no pool
    m = lambda ns, nics, default=True: b.try_create(machine(version, "ProxmoxMachine", ns, nics, default))  # noqa: E731
    # on net0 only
    admitted(m(b.owner, [a]))
    # Rule 1 (the zone's param) and rule 4 (every param) both refuse it; which the API server
    # reports depends on the order it evaluates the zone params in, which it does not define.
    err = m(b.owner, [foreign])
    denied_by_one_of(err, MACHINE, R1, R4)
    assert f"got: {b.bra}/102/pool-x" in err, err
    # on an additional device only: net0 elsewhere is refused in an owning namespace (rule 4),
    # and so is no net0 at all (rule 0, v1alpha1; v1alpha2 names its first device net0)
    denied(m(b.owner, [infra, a]), MACHINE, R4, f"{RAW0}//(no pool)")
    if version == "v1alpha1":
        denied(m(b.owner, [a], default=False), MACHINE, R0)
    admitted(m(b.owner, [bb, a]))
    # a namespace that owns nothing: net0 on an infrastructure bridge is its own business,
    # a zone NIC on an additional device is refused as on net0 (rule 1)
    admitted(m(b.plain, [infra]))
    denied(m(b.plain, [infra, a]), MACHINE, R1, "allowed: none")
    denied(m(b.plain, [a]), MACHINE, R1, "allowed: none")
    # on both
    admitted(m(b.owner, [a, bb]))
    denied_by_one_of(m(b.owner, [a, foreign]), MACHINE, R1, R4)
    denied_by_one_of(m(b.owner, [foreign, a]), MACHINE, R1, R4)


@pytest.mark.parametrize("version,kind", SHAPES, ids=SHAPE_IDS)
def test_rule0_network_default_required_in_owning_namespace(bed, version, kind):
    b = bed
    good = nic(b.bra, 101, "pool-a")
    # no network at all (v1alpha2 requires spec.network in its CRD, so it starts at "no net0 bridge")
    if version == "v1alpha1":
        denied(b.try_create(machine(version, kind, b.owner, None)), MACHINE, R0, "must declare network.default")
        # only additional devices, no default
        denied(b.try_create(machine(version, kind, b.owner, [good], default=False)), MACHINE, R0)
    else:
        denied(b.try_create(machine(version, kind, b.owner, [nic(None)])), MACHINE, R0, "net0 with a bridge")
    admitted(b.try_create(machine(version, kind, b.owner, [good])))
    # a namespace that owns nothing may leave the network to the template
    if version == "v1alpha1":
        admitted(b.try_create(machine(version, kind, b.plain, None)))
    else:
        admitted(b.try_create(machine(version, kind, b.plain, [nic(None)])))


@pytest.mark.parametrize("version,kind", SHAPES, ids=SHAPE_IDS)
def test_rule1_zone_bridge_only_as_own_network(bed, version, kind):
    b = bed
    # A namespace without networks cannot reach a zone bridge: another tenant's VLAN and pool,
    # a transit VLAN, untagged, tagged without a pool.
    for bad in (nic(b.bra, 102, "pool-x"), nic(b.bra, 150), nic(b.bra), nic(b.bra, None, "pool-a")):
        denied(b.try_create(machine(version, kind, b.plain, [nic(RAW0), bad])), MACHINE, R1,
               f"bridge {b.bra} of ProxmoxNetworkZone {b.za}", "allowed: none")
    # ... on the second zone too, even as the primary NIC
    denied(b.try_create(machine(version, kind, b.plain, [nic(b.brb, 120, "p")])), MACHINE, R1, b.zb)
    # positive control: the same namespace on a non-zone bridge
    admitted(b.try_create(machine(version, kind, b.plain, [nic(RAW0), nic(RAW9, 150, "p")])))
    # An owning namespace: its own network is admitted, a neighbour's is not.
    admitted(b.try_create(machine(version, kind, b.owner, [nic(b.bra, 101, "pool-a")])))
    # (rule 4 refuses these as well; either message may come first)
    err = b.try_create(machine(version, kind, b.owner, [nic(b.bra, 102, "pool-x")]))
    denied_by_one_of(err, MACHINE, R1, R4)
    denied(err, MACHINE, f"{b.bra}/101/pool-a, {b.brb}/{b.uplink_vlan}/pool-b", f"got: {b.bra}/102/pool-x")
    denied_by_one_of(b.try_create(machine(version, kind, b.owner, [nic(b.bra, 101, "pool-x")])), MACHINE, R1, R4)
    # every pool reference counts: an IPv6 / second pool of somebody else, or a non-InClusterIPPool kind
    err = b.try_create(machine(version, kind, b.owner, [nic(b.bra, 101, "pool-a", pool6="pool-x")]))
    denied_by_one_of(err, MACHINE, R1, R4)
    denied(err, MACHINE, f"{b.bra}/101/pool-x")
    err = b.try_create(machine(version, kind, b.owner, [nic(b.bra, 101, "pool-a", kind="GlobalInClusterIPPool")]))
    denied_by_one_of(err, MACHINE, R1, R4)
    denied(err, MACHINE, "GlobalInClusterIPPool:pool-a")


@pytest.mark.parametrize("version,kind", SHAPES, ids=SHAPE_IDS)
def test_rule2_uplink_vlan_off_zone_bridges(bed, version, kind):
    b = bed
    v = b.uplink_vlan
    denied(b.try_create(machine(version, kind, b.plain, [nic(RAW0, v)])), MACHINE, R2,
           f"uplink VLAN {v} of ProxmoxNetworkZone {b.za}", f"got: {RAW0}/{v}")
    denied(b.try_create(machine(version, kind, b.plain, [nic(RAW0), nic(RAW7, v, "p")])), MACHINE, R2)
    admitted(b.try_create(machine(version, kind, b.plain, [nic(RAW0, v + 1)])))
    # The owning namespace's network on zone B happens to use zone A's uplink VLAN: it is one
    # of its networks, so it is admitted; the same VLAN on a non-zone bridge is not.
    admitted(b.try_create(machine(version, kind, b.owner, [nic(b.bra, 101, "pool-a"), nic(b.brb, v, "pool-b")])))
    denied_by_one_of(b.try_create(machine(version, kind, b.owner, [nic(b.bra, 101, "pool-a"), nic(RAW0, v, "pool-b")])),
                     MACHINE, R2, R4)


@pytest.mark.parametrize("version,kind", SHAPES, ids=SHAPE_IDS)
def test_rule3_uplink_bridges_forbidden(bed, version, kind):
    b = bed
    for ns in (b.plain, b.owner):
        for bad in (nic(b.uplink_bridge), nic(b.uplink_bridge, 150), nic(b.uplink_bridge, 150, "pool-a")):
            nics = [nic(b.bra, 101, "pool-a"), bad] if ns == b.owner else [bad]
            err = b.try_create(machine(version, kind, ns, nics))
            if ns == b.plain:
                denied(err, MACHINE, R3, b.uplink_bridge)
            else:  # rule 4 refuses it too
                denied_by_one_of(err, MACHINE, R3, R4)
                denied(err, MACHINE, b.uplink_bridge)
    admitted(b.try_create(machine(version, kind, b.plain, [nic(RAW0)])))


@pytest.mark.parametrize("version,kind", SHAPES, ids=SHAPE_IDS)
def test_rule4_every_nic_in_owning_namespace(bed, version, kind):
    b = bed
    own = nic(b.bra, 101, "pool-a")
    denied(b.try_create(machine(version, kind, b.owner, [own, nic(RAW0)])), MACHINE, R4, f"got: {RAW0}//(no pool)")
    denied(b.try_create(machine(version, kind, b.owner, [nic(RAW0, 150, "pool-a")])), MACHINE, R4,
           f"{RAW0}/150/pool-a")
    admitted(b.try_create(machine(version, kind, b.owner, [own, nic(b.brb, b.uplink_vlan, "pool-b")])))
    # the same extra NIC is fine where the namespace owns nothing (raw path)
    admitted(b.try_create(machine(version, kind, b.plain, [nic(RAW0), nic(RAW1, 150)])))


def test_v1alpha2_does_not_bypass(bed):
    """The reference read only the v1alpha1 shape, so a v1alpha2 machine in a namespace without
    networks reached a zone bridge, an uplink VLAN and an uplink bridge. Not any more."""
    b = bed
    for bad, rule in ((nic(b.bra, 101, "pool-a"), R1), (nic(b.bra), R1), (nic(RAW0, b.uplink_vlan), R2),
                      (nic(b.uplink_bridge), R3)):
        for kind in ("ProxmoxMachine", "ProxmoxMachineTemplate"):
            denied(b.try_create(machine("v1alpha2", kind, b.plain, [bad])), MACHINE, rule)
    # and in an owning namespace a v1alpha2 machine is judged as itself, not refused wholesale
    admitted(b.try_create(machine("v1alpha2", "ProxmoxMachine", b.owner, [nic(b.bra, 101, "pool-a")])))


@pytest.mark.parametrize("version,kind", SHAPES, ids=SHAPE_IDS)
def test_bridge_must_be_a_plain_name(bed, version, kind):
    """capmox hands `bridge` to Proxmox verbatim ("bridge=%s"): "vmbr70,tag=104" would put a
    NIC on a zone bridge with any tag past rules 1-3 (found by review). Only plain names pass."""
    b = bed
    for bad in (f"{b.bra},tag=101", f"{b.uplink_bridge},tag=5", f"{RAW0},tag=" + str(b.uplink_vlan), f"{b.bra},trunks=101"):
        denied(b.try_create(machine(version, kind, b.plain, [nic(bad)])), MACHINE, R_PLAIN, bad)
    admitted(b.try_create(machine(version, kind, b.plain, [nic(RAW0, 5)])))  # a plain raw bridge


def test_zone_created_later_is_enforced_at_once(bed):
    b = bed
    bridge = f"zc{_hex()}"
    late = machine("v1alpha2", "ProxmoxMachine", b.plain, [nic(bridge, 120, "p")])
    late1 = machine("v1alpha1", "ProxmoxMachineTemplate", b.plain, [nic(RAW0), nic(bridge, 120, "p")])
    admitted(b.try_create(late))  # no zone on that bridge yet
    b.zone(b.zc, bridge, {"uplinkVLAN": 4000, "uplinkBridges": [f"u{bridge}"]})
    err = wait_for(lambda: b.try_create(late), what="the new zone to be enforced", timeout=10, interval=0.05)
    denied(err, MACHINE, R1, f"ProxmoxNetworkZone {b.zc}")
    denied(b.try_create(late1), MACHINE, R1, b.zc)
    denied(b.try_create(machine("v1alpha2", "ProxmoxMachine", b.plain, [nic(RAW0, 4000)])), MACHINE, R2, b.zc)
    denied(b.try_create(machine("v1alpha1", "ProxmoxMachine", b.plain, [nic(f"u{bridge}")])), MACHINE, R3, b.zc)
    # a later change of the zone is read live as well
    b.zone(b.zc, bridge, {"uplinkVLAN": 4001})
    wait_for(lambda: b.try_create(machine("v1alpha2", "ProxmoxMachine", b.plain, [nic(RAW0, 4001)])),
          what="the new uplink VLAN", timeout=10, interval=0.05)
    wait_for(lambda: b.try_create(machine("v1alpha2", "ProxmoxMachine", b.plain, [nic(RAW0, 4000)])) is None,
          what="the old uplink VLAN to be released", timeout=10, interval=0.05)


@pytest.mark.parametrize("version,kind", SHAPES, ids=SHAPE_IDS)
def test_update_judges_only_new_nics(bed, kubectl, version, kind):
    b = bed
    bridge = f"zu{_hex()}"
    ns = b.namespace()
    # admitted before any zone owns the bridge, stored for real
    obj = machine(version, kind, ns, [nic(RAW0), nic(bridge, 150)])
    b.apply(obj)
    name = f"pxu-{_hex()}"
    b.zone(name, bridge, {"uplinkVLAN": 4002})
    wait_for(lambda: b.try_create({**obj, "metadata": {**obj["metadata"], "name": "x" + _hex()}}), what="zone enforced")
    cur = b.get(obj)
    # an unrelated change keeps the old, now forbidden, NIC: admitted
    upd = copy.deepcopy(cur)
    upd["metadata"].setdefault("labels", {})["touched"] = "yes"
    admitted(b.try_replace(upd))
    # adding a new bad NIC: denied
    upd2 = copy.deepcopy(cur)
    extra = network(version, [nic(RAW0), nic(bridge, 150), nic(RAW0, 4002)])
    spec = upd2["spec"]["template"]["spec"] if kind == "ProxmoxMachineTemplate" else upd2["spec"]
    spec["network"] = extra
    denied(b.try_replace(upd2), MACHINE, R2, f"{RAW0}/4002")
    # adding a good NIC: admitted
    extra["additionalDevices" if version == "v1alpha1" else "networkDevices"][-1]["vlan"] = 4003
    admitted(b.try_replace(upd2))
    # changing the old NIC makes it new: judged
    upd3 = copy.deepcopy(cur)
    spec = upd3["spec"]["template"]["spec"] if kind == "ProxmoxMachineTemplate" else upd3["spec"]
    spec["network"] = network(version, [nic(RAW0), nic(bridge, 151)])
    denied(b.try_replace(upd3), MACHINE, R1, bridge)
    # dropping the forbidden NIC is always possible
    upd4 = copy.deepcopy(cur)
    spec = upd4["spec"]["template"]["spec"] if kind == "ProxmoxMachineTemplate" else upd4["spec"]
    spec["network"] = network(version, [nic(RAW0)])
    admitted(b.try_replace(upd4))


def test_update_rule0_only_when_network_default_is_dropped(bed):
    b = bed
    ns = b.namespace()
    # stored before the namespace owned networks, without network.default
    obj = machine("v1alpha1", "ProxmoxMachine", ns, None)
    b.apply(obj)
    good = machine("v1alpha1", "ProxmoxMachine", ns, [nic(RAW0)])
    b.apply(good)
    b.apply({"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": ns, "annotations": {NETWORKS: f"{b.bra}/101/pool-a"}}})
    wait_for(lambda: b.try_create(machine("v1alpha1", "ProxmoxMachine", ns, None)), what="namespace owns networks")
    cur = b.get(obj)
    cur["metadata"].setdefault("labels", {})["touched"] = "yes"
    admitted(b.try_replace(cur))
    cur = b.get(good)
    cur["spec"] = {}
    denied(b.try_replace(cur), MACHINE, R0)


@pytest.mark.parametrize("version", ["v1alpha1", "v1alpha2"])
def test_machine_being_deleted_is_not_judged(bed, kubectl, version):
    b = bed
    bridge = f"zd{_hex()}"
    ns = b.namespace()
    obj = machine(version, "ProxmoxMachine", ns, [nic(RAW0), nic(bridge, 150)])
    obj["metadata"]["finalizers"] = ["test.proxmox.cozystack.io/hold"]
    b.apply(obj)
    b.zone(f"pxd-{_hex()}", bridge)
    wait_for(lambda: b.try_create({**obj, "metadata": {"name": "x" + _hex(), "namespace": ns}}), what="zone enforced")
    plural = f"proxmoxmachines.{version}.{CAPMOX}"
    kubectl("delete", plural, obj["metadata"]["name"], "-n", ns, "--wait=false")
    cur = b.get(obj)
    assert cur["metadata"].get("deletionTimestamp")
    # a new forbidden NIC on an object being deleted: not judged
    cur2 = copy.deepcopy(cur)
    cur2["spec"]["network"] = network(version, [nic(RAW0), nic(bridge, 150), nic(bridge, 151)])
    admitted(b.try_replace(cur2))
    # the finalizer can always be removed
    kubectl("patch", plural, obj["metadata"]["name"], "-n", ns, "--type=json",
            "-p", '[{"op":"remove","path":"/metadata/finalizers"}]')


# ================================ proxmox-network-pod-attachments ================================

NET = "k8s.v1.cni.cncf.io/networks"
DEFNET = "v1.multus-cni.io/default-network"
LS = "ovn.kubernetes.io/logical_switch"


def _pod_cases(ns: str):
    """(annotations, refused?) pairs for the shared annotation rules."""
    return [
        ({NET: f"other-{ns}/nad"}, True),
        ({NET: "nad, other/nad2"}, True),
        ({NET: "nad"}, False),
        ({NET: f"{ns}/nad"}, False),
        ({NET: f" nad@eth1 , {ns}/nad2@eth2 "}, False),
        ({NET: ""}, False),
        ({NET: "Bad_Name"}, True),
        ({NET: f'[{{"name":"nad","namespace":"{ns}"}}]'}, False),
        ({NET: '[{"name":"nad"}]'}, False),
        ({NET: '[{"name":"nad","namespace":"elsewhere"}]'}, True),
        ({NET: '[{"name":"nad","NameSpace":"elsewhere"}]'}, True),          # Go's decoder folds case
        ({NET: f'[{{"name":"nad","namespace":"{ns}"}},{{"name":"n","namespace" : "x"}}]'}, True),
        ({NET: '[{"name":"nad","namespace":"\\u0065lsewhere"}]'}, True),    # backslash refused outright
        ({DEFNET: f"{ns}/nad"}, False),
        ({DEFNET: f" {ns}/nad@eth0 "}, False),
        ({DEFNET: "nad"}, True),                                             # Multus would look in kube-system
        ({DEFNET: "elsewhere/nad"}, True),
        ({DEFNET: f'{{"name":"nad","namespace":"{ns}"}}'}, True),           # JSON refused
        ({LS: "foreign-subnet"}, True),
        ({LS: f"sw-{ns}"}, False),                                           # the namespace's own switch
        ({"kube-ovn.kubernetes.io/logical_switch": f"sw-{ns}"}, True),        # other provider keys: always
        ({"attach.kubernetes.io/logical_switch": "x"}, True),
        ({"ovn.kubernetes.io/ip_address": "10.0.0.5", "example.com/x": "y"}, False),
    ]


def _switch_ns(b: Bed) -> str:
    ns = f"adm-{_hex()}"
    b.namespace(name=ns, annotations={LS: f"sw-{ns}, sw2-{ns}"})
    return ns


def test_pod_annotation_rules(bed):
    b = bed
    ns = _switch_ns(b)
    for ann, refused in _pod_cases(ns):
        err = b.try_create(pod(ns, ann))
        if refused:
            denied(err, PODPOL, VM_MSG, f"a pod in namespace {ns}", "refused: ")
        else:
            admitted(err)
    denied(b.try_create(pod(ns, {NET: "elsewhere/nad"})), PODPOL, f"{ns}/<name>", "refused: k8s.v1.cni.cncf.io/networks=elsewhere/nad")


def test_pod_update_judges_only_changed_annotations(bed):
    b = bed
    ns = _switch_ns(b)
    # stored while the namespace was exempt, with a foreign attachment
    b.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {EXEMPT: "true"}}})
    p = pod(ns, {NET: "elsewhere/nad"})
    wait_for(lambda: b.try_create(p) is None, what="exemption")
    b.apply(p)
    b.k("label", "namespace", ns, f"{EXEMPT}-")
    wait_for(lambda: b.try_create({**p, "metadata": {**p["metadata"], "name": "x" + _hex()}}), what="exemption gone")
    cur = b.get(p)
    upd = copy.deepcopy(cur)
    upd["metadata"].setdefault("labels", {})["touched"] = "yes"
    admitted(b.try_replace(upd))                                 # unchanged foreign annotation
    upd["metadata"]["annotations"][NET] = "elsewhere/nad2"
    denied(b.try_replace(upd), PODPOL, "elsewhere/nad2")          # changed: judged
    upd["metadata"]["annotations"][NET] = "nad"
    admitted(b.try_replace(upd))                                 # changed to a local one
    upd["metadata"]["annotations"][NET] = "elsewhere/nad"
    upd["metadata"]["annotations"][LS] = "foreign-subnet"         # kube-ovn-controller writes these back
    admitted(b.try_replace(upd))
    upd["metadata"]["annotations"][DEFNET] = "nad"
    denied(b.try_replace(upd), PODPOL, DEFNET)


def test_pod_exemptions(bed):
    b = bed
    bad = {NET: "elsewhere/nad", LS: "foreign"}
    ns = b.namespace(labels={EXEMPT: "true"})
    admitted(b.try_create(pod(ns, bad)))
    cozy = b.namespace(name=f"cozy-adm-{_hex()}")
    admitted(b.try_create(pod(cozy, bad)))
    admitted(b.try_create(pod("kube-system", bad)))
    # a label with another value does not exempt
    ns2 = b.namespace(labels={EXEMPT: "false"})
    denied(b.try_create(pod(ns2, bad)), PODPOL)


def test_pod_being_deleted_is_not_judged(bed, kubectl):
    b = bed
    ns = b.namespace()
    p = pod(ns, {NET: "nad"})
    p["metadata"]["finalizers"] = ["test.proxmox.cozystack.io/hold"]
    b.apply(p)
    kubectl("delete", "pod", p["metadata"]["name"], "-n", ns, "--wait=false")
    cur = b.get(p)
    assert cur["metadata"].get("deletionTimestamp")
    cur["metadata"]["annotations"][NET] = "elsewhere/nad"
    admitted(b.try_replace(cur))
    kubectl("patch", "pod", p["metadata"]["name"], "-n", ns, "--type=json",
            "-p", '[{"op":"remove","path":"/metadata/finalizers"}]')


# ================================ proxmox-network-vm-attachments ================================

def vm(ns: str, networks: list[dict] | None = None, annotations: dict | None = None, name: str | None = None) -> dict:
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": name or f"vm-{_hex()}", "namespace": ns},
            "spec": {"runStrategy": "Halted", "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {"domain": {"devices": {}}, "networks": networks or [{"name": "default", "pod": {}}]}}}}


def vmi(ns: str, networks: list[dict] | None = None, annotations: dict | None = None) -> dict:
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": f"vmi-{_hex()}", "namespace": ns, "annotations": annotations or {}},
            "spec": {"domain": {"devices": {}}, "networks": networks or [{"name": "default", "pod": {}}]}}


def multus(name: str, default: bool = False) -> dict:
    m = {"networkName": name}
    if default:
        m["default"] = True
    return {"name": f"n{_hex(2)}", "multus": m}


@pytest.mark.parametrize("make", [vm, vmi], ids=["VirtualMachine", "VirtualMachineInstance"])
def test_vm_networks_and_annotations(bed, make):
    b = bed
    ns = _switch_ns(b)
    cases = [
        ([multus("elsewhere/nad")], True),
        ([multus(f"{ns}/nad")], False),
        ([multus("nad")], False),
        ([multus("nad", default=True)], True),           # a default network must be <ns>/<name>
        ([multus(f"{ns}/nad", default=True)], False),
        ([multus("elsewhere/nad", default=True)], True),
        ([{"name": "default", "pod": {}}, multus("nad"), multus("x/y")], True),
    ]
    for networks, refused in cases:
        err = b.try_create(make(ns, networks))
        if refused:
            denied(err, VMPOL, f"a VM in namespace {ns}", VM_MSG)
        else:
            admitted(err)
    denied(b.try_create(make(ns, [multus("elsewhere/nad")])), VMPOL, "refused: elsewhere/nad")
    for ann, refused in _pod_cases(ns):
        err = b.try_create(make(ns, None, ann))
        if refused:
            denied(err, VMPOL, VM_MSG)
        else:
            admitted(err)


def test_vm_update_and_deletion(bed, kubectl):
    b = bed
    ns = b.namespace(labels={EXEMPT: "true"})
    v = vm(ns, [multus("elsewhere/nad")], {NET: "elsewhere/nad"})
    v["metadata"]["finalizers"] = ["test.proxmox.cozystack.io/hold"]
    wait_for(lambda: b.try_create(v) is None, what="exemption")
    b.apply(v)
    b.k("label", "namespace", ns, f"{EXEMPT}-")
    wait_for(lambda: b.try_create({**v, "metadata": {"name": "x" + _hex(), "namespace": ns}}), what="exemption gone")
    cur = b.get(v)
    upd = copy.deepcopy(cur)
    upd["spec"]["runStrategy"] = "Always"
    admitted(b.try_replace(upd))                                   # earlier entries are not judged
    upd["spec"]["template"]["spec"]["networks"].append(multus("elsewhere/two"))
    denied(b.try_replace(upd), VMPOL, "refused: elsewhere/two")     # a new one is
    upd = copy.deepcopy(cur)
    upd["spec"]["template"]["metadata"]["annotations"][LS] = "foreign"
    denied(b.try_replace(upd), VMPOL, f"{LS}=foreign")              # VMs: switches judged on UPDATE too
    upd = copy.deepcopy(cur)
    upd["spec"]["template"]["spec"]["networks"] = [{"name": "default", "pod": {}}]
    admitted(b.try_replace(upd))                                   # dropping a foreign entry
    kubectl("delete", "virtualmachine", v["metadata"]["name"], "-n", ns, "--wait=false")
    cur = b.get(v)
    assert cur["metadata"].get("deletionTimestamp")
    cur["spec"]["template"]["spec"]["networks"].append(multus("elsewhere/three"))
    admitted(b.try_replace(cur))                                   # being deleted: not judged
    kubectl("patch", "virtualmachine", v["metadata"]["name"], "-n", ns, "--type=json",
            "-p", '[{"op":"remove","path":"/metadata/finalizers"}]')


def test_vm_exemptions(bed):
    b = bed
    bad = [multus("elsewhere/nad")]
    admitted(b.try_create(vm(b.namespace(labels={EXEMPT: "true"}), bad)))
    admitted(b.try_create(vm(b.namespace(name=f"cozy-adm-{_hex()}"), bad)))
    admitted(b.try_create(vm("kube-system", bad)))


# ============================ proxmox-network-{pod,ip}-addresses (issue 15, item 6) ============================
#
# The params are Vlans as the controller keeps them (tests/test_network_integration.py proves the
# controller writes the annotation): named after the network's Subnet, labelled with the network's
# namespace, the pool as CIDRs in proxmox.cozystack.io/pool-cidrs. The pool here is
# 10.77.<x>.16-10.77.<x>.33, which the controller writes as <x>.16/28,<x>.32/31.

PODADDR = "proxmox-network-pod-addresses"
IPADDR = "proxmox-network-ip-addresses"
POOL_CIDRS = "proxmox.cozystack.io/pool-cidrs"
IPADDRESS = "ovn.kubernetes.io/ip_address"
IPPOOL = "ovn.kubernetes.io/ip_pool"
UNREADABLE_POD = ("a fixed pod address (Kube-OVN ip_address, ip_pool) must be an IP address in plain form"
                  " (no IPv4-mapped IPv6, zone or leading zeros); refused: ")


def pod_refusal(subnet: str, refused: str) -> str:
    return (f"the address is in the VM pool of the Proxmox network on Kube-OVN subnet {subnet}: only a pod of that "
            f"network's namespace on that subnet (ovn.kubernetes.io/logical_switch: {subnet}) may ask for it; "
            f"refused: {refused}")


def ip_refusal(subnet: str, ip: str, ns: str, addresses: str) -> str:
    return (f"the address is in the VM pool of the Proxmox network on Kube-OVN subnet {subnet}: only an IP of that "
            f"network's namespace may hold it; IP {ip} (spec.namespace '{ns}') asks for {addresses}")


class Pools:
    """One network's Vlan (the param) in its owning namespace, and a foreign namespace."""

    def __init__(self, b: Bed):
        self.b = b
        h = _hex()
        self.net = secrets.randbelow(200) + 20             # 10.77.<net>.0/24
        self.subnet = f"sub-{h}"                           # the network's Kube-OVN Subnet = its Vlan
        self.other_subnet = f"sub2-{h}"                    # a second subnet of the owner's namespace
        self.owner = b.namespace(annotations={LS: f"{self.subnet},{self.other_subnet}"})
        self.foreign_switch = f"sw-{h}"
        self.foreign = b.namespace(annotations={LS: self.foreign_switch})
        self.vlans: list[str] = []
        self.ips: list[str] = []
        self.vlan(self.subnet, self.owner, f"10.77.{self.net}.16/28,10.77.{self.net}.32/31")

    def a(self, host: int) -> str:
        return f"10.77.{self.net}.{host}"

    def vlan(self, name: str, owner: str, cidrs: str | None, labelled: bool = True) -> None:
        labels = {"proxmox.cozystack.io/zone": "pxz-adm", "proxmox.cozystack.io/network-name": "net"}
        if labelled:
            labels["proxmox.cozystack.io/network-namespace"] = owner
        meta: dict = {"name": name, "labels": labels}
        if cidrs is not None:
            meta["annotations"] = {POOL_CIDRS: cidrs}
        self.b.apply({"apiVersion": "kubeovn.io/v1", "kind": "Vlan", "metadata": meta,
                      "spec": {"id": 100 + secrets.randbelow(3000), "provider": f"pn-adm-{_hex()}"}})
        if name not in self.vlans:
            self.vlans.append(name)

    def ip(self, ns: str, subnet: str, v4: str = "", name: str | None = None, **spec: str) -> dict:
        return {"apiVersion": "kubeovn.io/v1", "kind": "IP",
                "metadata": {"name": name or f"p-{_hex()}.{ns}"},
                "spec": {"podName": "p", "namespace": ns, "subnet": subnet, "v4IpAddress": v4, **spec}}

    def cleanup(self) -> None:
        for name in self.ips:
            self.b.k("patch", "ip", name, "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False)
            self.b.k("delete", "ip", name, "--ignore-not-found", "--wait=false", check=False)
        for name in self.vlans:
            self.b.k("delete", "vlan", name, "--ignore-not-found", "--wait=false", check=False)


@pytest.fixture(scope="module")
def pools(bed, kubectl):
    kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/ips.kubeovn.io", "crd/vlans.kubeovn.io")
    p = Pools(bed)
    # the API server's param informer has seen the Vlan
    wait_for(lambda: bed.try_create(pod(p.foreign, {IPADDRESS: p.a(20)})), what="pool enforced", timeout=60)
    try:
        yield p
    finally:
        p.cleanup()


def test_fixed_address_policies_as_shipped(pools, kubectl):
    """Vlans as params (every Vlan the controller made), Fail, Deny. (The type-checking
    warnings of status.typeChecking come from kube-controller-manager, which this bed does not run.)"""
    for name, conds, n in ((PODADDR, ["not-a-platform-namespace", "asks-for-a-fixed-address", "a-vlan-with-a-pool"], 2),
                           (IPADDR, ["not-of-a-platform-namespace", "not-being-deleted", "on-the-subnet-of-the-vlan",
                                     "a-vlan-with-a-pool"], 2)):
        pol = json.loads(kubectl("get", "validatingadmissionpolicy", name, "-o", "json"))
        assert pol["spec"]["failurePolicy"] == "Fail"
        assert pol["spec"]["paramKind"] == {"apiVersion": "kubeovn.io/v1", "kind": "Vlan"}
        assert [c["name"] for c in pol["spec"]["matchConditions"]] == conds
        assert len(pol["spec"]["validations"]) == n
        binding = json.loads(kubectl("get", "validatingadmissionpolicybinding", name, "-o", "json"))
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert binding["spec"]["paramRef"] == {
            "selector": {"matchExpressions": [{"key": "proxmox.cozystack.io/network-namespace", "operator": "Exists"}]},
            "parameterNotFoundAction": "Allow"}
    pod_pol = json.loads(kubectl("get", "validatingadmissionpolicy", PODADDR, "-o", "json"))
    assert pod_pol["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE"]


def test_pod_fixed_address_in_another_namespaces_pool_is_refused(pools):
    p, b = pools, pools.b
    ns = p.foreign
    cases = [
        ({IPADDRESS: p.a(20)}, f"{IPADDRESS}={p.a(20)}"),
        ({IPADDRESS: p.a(16)}, f"{IPADDRESS}={p.a(16)}"),                       # the pool's first address
        ({IPADDRESS: p.a(33)}, f"{IPADDRESS}={p.a(33)}"),                       # its last one
        ({IPADDRESS: f"{p.a(21)},fd00::21"}, f"{IPADDRESS}={p.a(21)}"),          # dual stack
        ({IPPOOL: f"{p.a(1)}, {p.a(22)}"}, f"{IPPOOL}={p.a(22)}"),               # a StatefulSet's pool
        ({IPPOOL: f"{p.a(1)},fd00::1;{p.a(23)},fd00::2"}, f"{IPPOOL}={p.a(23)}"),
        ({f"nad.{ns}.ovn.kubernetes.io/ip_address": p.a(24)}, f"nad.{ns}.ovn.kubernetes.io/ip_address={p.a(24)}"),
        # the namespace's own default subnet does not help another namespace
        ({IPADDRESS: p.a(25), LS: p.foreign_switch}, f"{IPADDRESS}={p.a(25)}"),
    ]
    for ann, refused in cases:
        denied(b.try_create(pod(ns, ann)), PODADDR, pod_refusal(p.subnet, refused))
    for ann in ({IPADDRESS: p.a(15)}, {IPADDRESS: p.a(34)}, {IPADDRESS: "10.78.0.20"}, {IPADDRESS: "fd00::20"},
                {IPPOOL: "my-kube-ovn-ippool"}, {IPADDRESS: ""}, {"example.com/ip_address": p.a(20)}):
        admitted(b.try_create(pod(ns, ann)))


def test_pod_fixed_address_kube_ovn_would_read_but_cel_cannot_is_refused(pools):
    """Go's net.ParseIP (Kube-OVN) reads ::ffff:a.b.c.d as a.b.c.d; CEL's ip() refuses it, so
    such an entry is refused rather than let through unjudged."""
    p, b = pools, pools.b
    for ann, shown in (({IPADDRESS: f"::ffff:{p.a(20)}"}, f"{IPADDRESS}=::ffff:{p.a(20)}"),
                       ({IPPOOL: f"::ffff:{p.a(20)}"}, f"{IPPOOL}=::ffff:{p.a(20)}"),
                       ({IPADDRESS: "::ffff:a4d:1414"}, f"{IPADDRESS}=::ffff:a4d:1414"),
                       ({IPPOOL: f"{p.a(1)},not-an-address"}, f"{IPPOOL}=not-an-address")):
        denied(b.try_create(pod(p.foreign, ann)), PODADDR, UNREADABLE_POD + shown)
    for ns in (p.owner, p.foreign):  # in every namespace, once a managed pool exists
        denied(b.try_create(pod(ns, {IPADDRESS: "fe80::1%eth0"})), PODADDR, UNREADABLE_POD + f"{IPADDRESS}=fe80::1%eth0")


def test_pod_fixed_address_in_its_own_networks_pool_and_subnet_is_admitted(pools):
    p, b = pools, pools.b
    # kube-ovn#2653: no logical_switch: the namespace's first subnet, the network's
    admitted(b.try_create(pod(p.owner, {IPADDRESS: p.a(20)})))
    admitted(b.try_create(pod(p.owner, {IPADDRESS: p.a(20), LS: p.subnet})))
    admitted(b.try_create(pod(p.owner, {IPPOOL: f"{p.a(20)},{p.a(21)}", LS: p.subnet})))
    admitted(b.try_create(pod(p.owner, {f"nad.{p.owner}.ovn.kubernetes.io/ip_address": p.a(20)})))
    # the network's namespace, another of its subnets
    denied(b.try_create(pod(p.owner, {IPADDRESS: p.a(20), LS: p.other_subnet})), PODADDR,
           pod_refusal(p.subnet, f"{IPADDRESS}={p.a(20)}"))
    # a namespace whose first subnet is another one
    ns2 = b.namespace(annotations={LS: f"{p.other_subnet}, {p.subnet}"})
    denied(b.try_create(pod(ns2, {IPADDRESS: p.a(20)})), PODADDR, pod_refusal(p.subnet, f"{IPADDRESS}={p.a(20)}"))


def test_pod_fixed_address_exemptions(pools):
    p, b = pools, pools.b
    bad = {IPADDRESS: p.a(20)}
    admitted(b.try_create(pod(b.namespace(labels={EXEMPT: "true"}), bad)))
    admitted(b.try_create(pod(b.namespace(name=f"cozy-adm-{_hex()}"), bad)))
    admitted(b.try_create(pod("kube-system", bad)))
    denied(b.try_create(pod(b.namespace(labels={EXEMPT: "false"}), bad)), PODADDR, pod_refusal(p.subnet, f"{IPADDRESS}={p.a(20)}"))


def test_pools_are_read_live_from_the_vlans(pools):
    """A Vlan made later is enforced at once (50 ms polls, 10 s at most), a changed pool with
    its new addresses, a deleted Vlan no more; a Vlan without the annotation or the label, or
    with entries CEL cannot read, refuses nothing and breaks nothing."""
    p, b = pools, pools.b
    h = _hex()
    sub, owner = f"late-{h}", b.namespace()
    probe = pod(p.foreign, {IPADDRESS: "10.79.0.5"})
    admitted(b.try_create(probe))
    p.vlan(sub, owner, "10.79.0.0/29")
    err = wait_for(lambda: b.try_create(probe), timeout=10, what="a new Vlan enforced")
    denied(err, PODADDR, pod_refusal(sub, f"{IPADDRESS}=10.79.0.5"))
    p.vlan(sub, owner, "garbage, 10.79.0.8/29,,")                            # moved; an unreadable entry skipped
    wait_for(lambda: b.try_create(probe) is None, timeout=10, what="the old range released")
    denied(b.try_create(pod(p.foreign, {IPADDRESS: "10.79.0.9"})), PODADDR, pod_refusal(sub, f"{IPADDRESS}=10.79.0.9"))
    p.vlan(sub, owner, None)                                                  # annotation gone
    wait_for(lambda: b.try_create(pod(p.foreign, {IPADDRESS: "10.79.0.9"})) is None, timeout=10, what="annotation gone")
    p.vlan(sub, owner, "10.79.0.8/29", labelled=False)                       # not a network's Vlan
    admitted(b.try_create(pod(p.foreign, {IPADDRESS: "10.79.0.9"})))
    b.k("label", "vlan", sub, f"proxmox.cozystack.io/network-namespace={owner}")
    wait_for(lambda: b.try_create(pod(p.foreign, {IPADDRESS: "10.79.0.9"})), timeout=10, what="labelled again")
    b.k("delete", "vlan", sub)
    wait_for(lambda: b.try_create(pod(p.foreign, {IPADDRESS: "10.79.0.9"})) is None, timeout=10, what="Vlan deleted")


def test_kube_ovn_ip_in_a_pool(pools):
    p, b = pools, pools.b
    ip = p.ip(p.foreign, p.subnet, p.a(20))
    denied(b.try_create(ip), IPADDR, ip_refusal(p.subnet, ip["metadata"]["name"], p.foreign, p.a(20)))
    ip = p.ip(p.foreign, p.subnet, ipAddress=f"{p.a(33)},fd00::33", v6IpAddress="fd00::33")
    denied(b.try_create(ip), IPADDR, ip_refusal(p.subnet, ip["metadata"]["name"], p.foreign, p.a(33)))
    ip = p.ip("", p.subnet, p.a(20), name=f"n-{_hex()}")                     # no namespace: not the network's
    denied(b.try_create(ip), IPADDR, ip_refusal(p.subnet, ip["metadata"]["name"], "", p.a(20)))
    admitted(b.try_create(p.ip(p.owner, p.subnet, p.a(20))))                 # the network's namespace
    admitted(b.try_create(p.ip(p.foreign, p.subnet, p.a(34))))               # outside the pool
    admitted(b.try_create(p.ip(p.foreign, p.other_subnet, p.a(20))))         # another logical switch
    admitted(b.try_create(p.ip(f"cozy-x-{_hex()}", p.subnet, p.a(20))))
    admitted(b.try_create(p.ip("kube-system", p.subnet, p.a(20))))
    denied(b.try_create(p.ip(p.foreign, p.subnet, f"::ffff:{p.a(20)}")), IPADDR,
           f"a Kube-OVN IP on subnet {p.subnet} (a Proxmox network's) must hold IP addresses in plain form "
           f"(no IPv4-mapped IPv6, zone or leading zeros); refused: ::ffff:{p.a(20)}")


def stored_ip(p, kubectl, ns: str, subnet: str, address: str) -> tuple[dict, dict]:
    """A Kube-OVN IP applied (held by a test finalizer, so it stays for updates) and a copy
    of it as stored, to edit for an UPDATE."""
    ip = p.ip(ns, subnet, address)
    ip["metadata"]["finalizers"] = ["test.proxmox.cozystack.io/hold"]
    p.b.apply(ip)
    p.ips.append(ip["metadata"]["name"])
    return ip, json.loads(kubectl("get", "ip", ip["metadata"]["name"], "-o", "json"))


def test_kube_ovn_ip_update_judges_only_what_changed(pools, kubectl):
    p, b = pools, pools.b
    # stored on the subnet before it was a managed network's (another subnet, then moved is refused)
    ip, upd = stored_ip(p, kubectl, p.foreign, p.other_subnet, p.a(20))
    upd["spec"]["nodeName"] = "node-a"
    admitted(b.try_replace(upd))                                             # nothing judged changed
    upd["spec"]["subnet"] = p.subnet
    denied(b.try_replace(upd), IPADDR, ip_refusal(p.subnet, ip["metadata"]["name"], p.foreign, p.a(20)))
    # the network's own IP: kept on UPDATE; a new pool address or another namespace is judged
    own, upd = stored_ip(p, kubectl, p.owner, p.subnet, p.a(21))
    upd["spec"]["macAddress"] = "00:00:00:00:00:01"
    admitted(b.try_replace(upd))
    upd["spec"]["namespace"] = p.foreign
    denied(b.try_replace(upd), IPADDR, ip_refusal(p.subnet, own["metadata"]["name"], p.foreign, p.a(21)))
    # being deleted: not judged
    kubectl("delete", "ip", own["metadata"]["name"], "--wait=false")
    cur = json.loads(kubectl("get", "ip", own["metadata"]["name"], "-o", "json"))
    assert cur["metadata"].get("deletionTimestamp")
    cur["spec"]["namespace"] = p.foreign
    admitted(b.try_replace(cur))


# ================================ proxmox-network-subnet-vlan (R1) ================================

SUBNETVLAN = "proxmox-network-subnet-vlan"


def kube_ovn_subnet(name: str, vlan: str, octet: int) -> dict:
    return {"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": name},
            "spec": {"vlan": vlan, "vpc": "tenant-vpc", "protocol": "IPv4", "cidrBlock": f"10.78.{octet}.0/24",
                     "gateway": f"10.78.{octet}.1"}}


def subnet_refusal(p: Pools) -> str:
    return (f"Vlan {p.subnet} belongs to the Proxmox network {p.owner}/net: only its Subnet {p.subnet} may name it "
            "(another Subnet on it would share the VLAN, one L2 segment, with that network)")


def test_subnet_vlan_policy_as_shipped(pools, kubectl):
    pol = json.loads(kubectl("get", "validatingadmissionpolicy", SUBNETVLAN, "-o", "json"))
    assert pol["spec"]["failurePolicy"] == "Fail"
    assert pol["spec"]["paramKind"] == {"apiVersion": "kubeovn.io/v1", "kind": "Vlan"}
    assert [c["name"] for c in pol["spec"]["matchConditions"]] == ["names-a-vlan-of-a-network", "moves-onto-it"]
    assert pol["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE", "UPDATE"]
    binding = json.loads(kubectl("get", "validatingadmissionpolicybinding", SUBNETVLAN, "-o", "json"))
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["paramRef"]["selector"] == {
        "matchExpressions": [{"key": "proxmox.cozystack.io/network-namespace", "operator": "Exists"}]}


def test_a_second_subnet_on_a_networks_vlan_is_refused(pools, kubectl):
    """Field report R1: Kube-OVN would give it a localnet port with the network's tag."""
    p, b = pools, pools.b
    kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/subnets.kubeovn.io")
    denied(b.try_create(kube_ovn_subnet(f"stranger-{_hex()}", p.subnet, 1)), SUBNETVLAN, subnet_refusal(p))
    # Controls: the network's own Subnet (named as its Vlan), and any Subnet on a Vlan that is
    # not a network's (no owner label), or on no Vlan at all.
    admitted(b.try_create(kube_ovn_subnet(p.subnet, p.subnet, 2)))
    plain = f"plain-{_hex()}"
    p.vlan(plain, p.owner, None, labelled=False)
    admitted(b.try_create(kube_ovn_subnet(f"other-{_hex()}", plain, 3)))
    overlay = kube_ovn_subnet(f"overlay-{_hex()}", "", 4)
    del overlay["spec"]["vlan"]
    admitted(b.try_create(overlay))


def test_a_subnet_already_on_the_vlan_is_not_judged_but_moving_one_onto_it_is(pools, kubectl):
    """A Subnet that was on the Vlan before it was a network's (or before the policy) can still
    be updated (Kube-OVN writes its Subnets; its finalizer must come off) and deleted; moving
    a Subnet onto a network's Vlan is a CREATE in all but name and is refused."""
    p, b = pools, pools.b
    kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/subnets.kubeovn.io")
    later = f"later-{_hex()}"
    p.vlan(later, p.owner, None, labelled=False)  # not a network's yet
    early = kube_ovn_subnet(f"early-{_hex()}", later, 5)
    b.apply(early)
    mover = kube_ovn_subnet(f"mover-{_hex()}", f"elsewhere-{_hex()}", 6)
    b.apply(mover)
    try:
        p.vlan(later, p.owner, None)  # now labelled: a network's Vlan (the param)
        wait_for(lambda: b.try_create(kube_ovn_subnet(f"probe-{_hex()}", later, 7)) is not None,
                 what="the policy sees the labelled Vlan", timeout=60)
        cur = json.loads(kubectl("get", "subnet", early["metadata"]["name"], "-o", "json"))
        cur["spec"]["excludeIps"] = ["10.78.5.10"]
        admitted(b.try_replace(cur))
        cur = json.loads(kubectl("get", "subnet", mover["metadata"]["name"], "-o", "json"))
        cur["spec"]["vlan"] = later
        denied(b.try_replace(cur), SUBNETVLAN, f"Vlan {later} belongs to the Proxmox network {p.owner}/net")
    finally:
        for s in (early, mover):
            kubectl("delete", "subnet", s["metadata"]["name"], "--ignore-not-found", "--wait=false", check=False)
