"""The peer emulators (tests/emulators/) against the real test bed.

Expected values come from product-decisions.md §5, reference-behaviour.md §3/§6/§7,
capmox-and-ipam.md ("In-cluster IPAM provider") and field reports B01, B03, B04, B05, B15.
Every object has a unique name and a unique provider network, so garbage from other tests
(the bed is shared by the whole session) cannot collide with these.
"""

from __future__ import annotations

import json
import time

import pytest
from kubernetes.client.rest import ApiException

from tests.emulators import IpamEmulator, KubeOvnEmulator
from tests.emulators.ipam import PROTECT_ADDRESS, PROTECT_POOL, RELEASE_ADDRESS, pool_status
from tests.emulators.kubeovn import KUBEOVN_FINALIZER, ip_counts, subnet_networks
from hack.objects import KUBEOVN, Admin, condition, unique
from tests.support.wait import wait_for

PRODUCT_FINALIZER = "proxmox.cozystack.io/network"
POOL_V = ("ipam.cluster.x-k8s.io", "v1alpha2")
ADDR_V = ("ipam.cluster.x-k8s.io", "v1beta2")

integration = pytest.mark.integration


# ====================================================================== helpers


def _ovs(value):
    """Decode the OVSDB JSON encoding ovn-nbctl --format=json prints."""
    if isinstance(value, list) and len(value) == 2 and value[0] in ("set", "map", "uuid", "named-uuid"):
        kind, inner = value
        if kind == "set":
            return [_ovs(v) for v in inner]
        if kind == "map":
            return {_ovs(k): _ovs(v) for k, v in inner}
        return inner
    return value


def nb_find(cluster, table: str, columns: str, *conditions: str) -> list[dict]:
    out = json.loads(cluster.nbctl("--format=json", f"--columns={columns}", "find", table, *conditions))
    return [{h: _ovs(v) for h, v in zip(out["headings"], row)} for row in out["data"]]


def nb_one(cluster, table: str, name: str, columns: str) -> dict | None:
    rows = nb_find(cluster, table, columns, f'name="{name}"')
    return rows[0] if rows else None


class Objects:
    """Creates Kube-OVN objects for one test and removes them (finalizers stripped) afterwards."""

    def __init__(self, admin: Admin, cluster) -> None:
        self.admin = admin
        self.cluster = cluster
        self.co = admin.co
        self.created: list[tuple[str, str]] = []
        self.routers: list[str] = []

    def vlan(self, vid: int, provider: str, name: str | None = None, **spec) -> dict:
        name = name or unique("vl")
        body = {"apiVersion": "kubeovn.io/v1", "kind": "Vlan", "metadata": {"name": name},
                "spec": {"id": vid, "provider": provider, **spec}}
        if vid is None:
            del body["spec"]["id"]
        obj = self.co.create_cluster_custom_object(*KUBEOVN, "vlans", body)
        self.created.append(("vlans", name))
        return obj

    def subnet(self, name: str, vlan: str | None, cidr: str = "10.77.0.0/24", vpc: str | None = None,
               gateway: str | None = None, finalizers: list[str] | None = None, **spec) -> dict:
        s: dict = {"cidrBlock": cidr, "protocol": "IPv4", **spec}
        if vlan:
            s["vlan"] = vlan
        if vpc:
            s["vpc"] = vpc
            self.routers.append(vpc)
        if gateway:
            s["gateway"] = gateway
        m: dict = {"name": name}
        if finalizers:
            m["finalizers"] = finalizers
        obj = self.co.create_cluster_custom_object(
            *KUBEOVN, "subnets", {"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": m, "spec": s})
        self.created.append(("subnets", name))
        return obj

    def get(self, plural: str, name: str) -> dict | None:
        try:
            return self.co.get_cluster_custom_object(*KUBEOVN, plural, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def delete(self, plural: str, name: str) -> None:
        self.co.delete_cluster_custom_object(*KUBEOVN, plural, name)

    def drop_finalizer(self, plural: str, name: str, fin: str) -> None:
        obj = self.co.get_cluster_custom_object(*KUBEOVN, plural, name)
        fins = [f for f in obj["metadata"].get("finalizers") or [] if f != fin]
        self.co.patch_cluster_custom_object(
            *KUBEOVN, plural, name,
            {"metadata": {"finalizers": fins, "resourceVersion": obj["metadata"]["resourceVersion"]}})

    def cleanup(self) -> None:
        for plural, name in reversed(self.created):
            try:
                self.co.patch_cluster_custom_object(*KUBEOVN, plural, name, {"metadata": {"finalizers": None}})
                self.co.delete_cluster_custom_object(*KUBEOVN, plural, name)
            except ApiException:
                pass
            if plural == "subnets":
                try:
                    self.cluster.nbctl("--if-exists", "ls-del", name)
                except Exception:
                    pass
        for r in set(self.routers):
            try:
                self.cluster.nbctl("--if-exists", "lr-del", r)
            except Exception:
                pass


@pytest.fixture
def admin(admin_client):
    return Admin(admin_client)


@pytest.fixture
def objs(admin, cluster):
    o = Objects(admin, cluster)
    try:
        yield o
    finally:
        o.cleanup()


@pytest.fixture
def kubeovn(cluster):
    with KubeOvnEmulator(cluster) as emu:
        yield emu


def cond(obj: dict | None, ctype: str) -> tuple[str, str, str] | None:
    c = condition(obj or {}, ctype)
    return (c["status"], c["reason"], c["message"]) if c else None


def listed(objs: Objects, vlan: str) -> list[str]:
    return list(((objs.get("vlans", vlan) or {}).get("status") or {}).get("subnets") or [])


def ready(objs: Objects, name: str) -> bool:
    s = objs.get("subnets", name)
    return bool(s) and (cond(s, "Ready") or ("",))[0] == "True"


# ====================================================================== Kube-OVN: pure parts


def test_subnet_networks_and_ip_counts():
    nets = subnet_networks("s", {"cidrBlock": "10.1.0.0/24"})
    assert [(str(n), str(g)) for n, g in nets] == [("10.1.0.0/24", "10.1.0.1")]
    # 256 - network - broadcast - gateway - 8 excluded
    assert ip_counts(nets, ["10.1.0.2..10.1.0.9"], 0) == {"v4availableIPs": 245.0, "v4usingIPs": 0.0}
    dual = subnet_networks("s", {"cidrBlock": "10.1.0.0/24,fd00::/120", "gateway": "10.1.0.254,fd00::1"})
    assert [(str(n), str(g)) for n, g in dual] == [("10.1.0.0/24", "10.1.0.254"), ("fd00::/120", "fd00::1")]
    with pytest.raises(ValueError, match="cidr 10.1.0.0/33 is invalid"):
        subnet_networks("s", {"cidrBlock": "10.1.0.0/33"})
    with pytest.raises(ValueError, match="gateway 10.2.0.1 is not in cidr"):
        subnet_networks("s", {"cidrBlock": "10.1.0.0/24", "gateway": "10.2.0.1"})


# ====================================================================== Kube-OVN: add path


@integration
def test_bound_subnet_gets_finalizer_vlan_status_conditions_and_nb(cluster, objs, kubeovn):
    provider, vpc, name = unique("pv"), unique("vpc"), unique("sn")
    objs.vlan(101, provider, name=name)
    objs.subnet(name, vlan=name, cidr="10.77.1.0/24", vpc=vpc, finalizers=[PRODUCT_FINALIZER])

    wait_for(lambda: ready(objs, name), 20, what="Subnet Ready")
    sub = objs.get("subnets", name)
    assert sub["metadata"]["finalizers"] == [PRODUCT_FINALIZER, KUBEOVN_FINALIZER]
    assert cond(sub, "Validated") == ("True", "ValidateLogicalSwitchSuccess", "")
    assert cond(sub, "Ready") == ("True", "ResetLogicalSwitchAclSuccess", "")
    for c in sub["status"]["conditions"]:
        assert c["lastUpdateTime"] and c["lastTransitionTime"]
    assert sub["status"]["v4availableIPs"] == 253  # 256 - network - broadcast - gateway
    assert sub["status"]["v4usingIPs"] == 0
    assert listed(objs, name) == [name]

    ls = nb_one(cluster, "Logical_Switch", name, "name,external_ids,other_config")
    assert ls["external_ids"]["vendor"] == "kube-ovn"
    assert ls["other_config"]["subnet"] == "10.77.1.0/24"
    lsp = nb_one(cluster, "Logical_Switch_Port", f"localnet.{name}", "name,type,tag,options,addresses")
    assert (lsp["type"], lsp["tag"], lsp["options"], lsp["addresses"]) == (
        "localnet", 101, {"network_name": provider}, "unknown")
    lrp = nb_one(cluster, "Logical_Router_Port", f"{vpc}-{name}", "name,networks")
    assert lrp["networks"] == "10.77.1.1/24"
    router = nb_find(cluster, "Logical_Router", "name,ports", f'name="{vpc}"')
    assert len(router) == 1
    rsp = nb_one(cluster, "Logical_Switch_Port", f"{name}-{vpc}", "type,addresses,options")
    assert (rsp["type"], rsp["addresses"], rsp["options"]) == ("router", "router", {"router-port": f"{vpc}-{name}"})
    # the brief's CSV view agrees
    csv = cluster.nbctl("--format=csv", "--columns=name,tag", "list", "Logical_Switch_Port")
    assert f"localnet.{name},101" in csv.splitlines()
    assert kubeovn.counters["subnets_bound"] >= 1


@integration
def test_gateway_from_spec_and_no_router_without_vpc(cluster, objs, kubeovn):
    provider, name = unique("pv"), unique("sn")
    objs.vlan(102, provider, name=name)
    objs.subnet(name, vlan=name, cidr="10.77.2.0/24", gateway="10.77.2.254")
    wait_for(lambda: ready(objs, name), 20, what="Subnet Ready")
    assert nb_one(cluster, "Logical_Switch_Port", f"localnet.{name}", "tag")["tag"] == 102
    assert nb_find(cluster, "Logical_Router_Port", "name", f"external_ids:subnet={name}") == []


@integration
def test_subnet_waits_for_its_vlan_then_binds(cluster, objs, kubeovn):
    provider, name = unique("pv"), unique("sn")
    objs.subnet(name, vlan=name, cidr="10.77.3.0/24")
    msg = f'failed to validate vlan for subnet {name}, failed to get vlan {name}: vlan.kubeovn.io "{name}" not found'
    wait_for(lambda: cond(objs.get("subnets", name), "Validated") == ("False", "VlanNotFound", msg), 20,
             what="VlanNotFound")
    assert cond(objs.get("subnets", name), "Ready") == ("False", "VlanNotFound", msg)
    assert nb_one(cluster, "Logical_Switch", name, "name") is None

    objs.vlan(103, provider, name=name)
    wait_for(lambda: ready(objs, name), 20, what="Subnet Ready once the Vlan exists")
    sub = objs.get("subnets", name)
    assert cond(sub, "Validated") == ("True", "ValidateLogicalSwitchSuccess", "")
    assert cond(sub, "Error")[0] == "False"
    assert listed(objs, name) == [name]
    assert nb_one(cluster, "Logical_Switch_Port", f"localnet.{name}", "tag")["tag"] == 103

    # Kube-OVN's Vlan update handler re-tags the localnet ports of the Vlan's subnets
    objs.co.patch_cluster_custom_object(*KUBEOVN, "vlans", name, {"spec": {"id": 123}})
    wait_for(lambda: nb_one(cluster, "Logical_Switch_Port", f"localnet.{name}", "tag")["tag"] == 123, 20,
             what="localnet re-tagged")
    # and its delete handler sends the subnets through the add path again
    objs.delete("vlans", name)
    wait_for(lambda: cond(objs.get("subnets", name), "Ready") == ("False", "VlanNotFound", msg), 20,
             what="VlanNotFound after the Vlan is deleted")


@integration
def test_invalid_cidr_is_not_validated(cluster, objs, kubeovn):
    provider, name = unique("pv"), unique("sn")
    objs.vlan(104, provider, name=name)
    objs.subnet(name, vlan=name, cidr="10.77.4.0/40")
    want = ("False", "ValidateLogicalSwitchFailed", f"subnet {name} cidr 10.77.4.0/40 is invalid")
    wait_for(lambda: cond(objs.get("subnets", name), "Validated") == want, 20, what="Validated False")
    assert cond(objs.get("subnets", name), "Ready")[0] == "False"
    assert KUBEOVN_FINALIZER in objs.get("subnets", name)["metadata"]["finalizers"]
    # (whether the Vlan lists it depends on whether Kube-OVN's Vlan add handler saw it: not asserted)
    assert nb_one(cluster, "Logical_Switch", name, "name") is None


@integration
def test_vlan_conflict_flags_newer_and_clears(cluster, objs, kubeovn):
    provider, other = unique("pv"), unique("pv")
    # creationTimestamp has second precision; on a tie the name decides, so name them in order
    old = objs.vlan(105, provider, name=unique("cf1"))["metadata"]["name"]
    new = objs.vlan(105, provider, name=unique("cf2"))["metadata"]["name"]
    elsewhere = objs.vlan(105, other)["metadata"]["name"]  # same id, other provider: no conflict (PR #5471)

    wait_for(lambda: (objs.get("vlans", new).get("status") or {}).get("conflict") is True, 20, what="conflict")
    assert not (objs.get("vlans", old).get("status") or {}).get("conflict")
    assert not (objs.get("vlans", elsewhere).get("status") or {}).get("conflict")

    # a Subnet on the conflicting Vlan is kept from becoming ready
    sn = unique("sn")
    objs.subnet(sn, vlan=new, cidr="10.77.5.0/24")
    want = ("False", "ValidateSubnetVlanFailed",
            f"failed to validate vlan for subnet {sn}, subnet {sn} has invalid conflict vlan {new}")
    wait_for(lambda: cond(objs.get("subnets", sn), "Ready") == want, 20, what="Subnet held by conflict")
    assert listed(objs, new) == []

    objs.delete("vlans", old)
    wait_for(lambda: "conflict" not in (objs.get("vlans", new).get("status") or {}), 20, what="conflict cleared")
    wait_for(lambda: ready(objs, sn), 20, what="Subnet Ready after the conflict cleared")
    assert listed(objs, new) == [sn]
    assert kubeovn.counters["conflicts_set"] >= 1 and kubeovn.counters["conflicts_cleared"] >= 1


@integration
def test_tolerates_odd_objects(cluster, objs, kubeovn):
    """A Vlan without id/provider still binds (untagged localnet); others are unaffected."""
    odd = unique("odd")
    objs.vlan(None, "", name=odd)
    objs.subnet(odd, vlan=odd, cidr="10.77.6.0/24")
    provider, name = unique("pv"), unique("sn")
    objs.vlan(106, provider, name=name)
    objs.subnet(name, vlan=name, cidr="10.77.7.0/24")
    wait_for(lambda: ready(objs, name) and ready(objs, odd), 20, what="both Ready")
    assert nb_one(cluster, "Logical_Switch_Port", f"localnet.{odd}", "tag")["tag"] == []


@integration
def test_overrides_set_conditions_and_survive_passes(cluster, objs, kubeovn):
    provider, name = unique("pv"), unique("sn")
    objs.vlan(107, provider, name=name)
    objs.subnet(name, vlan=name, cidr="10.77.8.0/24")
    wait_for(lambda: ready(objs, name), 20, what="Subnet Ready")

    kubeovn.set_subnet_ready(name, False, "ovn-nb unreachable")
    assert cond(objs.get("subnets", name), "Ready") == ("False", "CreateLogicalSwitchFailed", "ovn-nb unreachable")
    kubeovn.set_validated(name, False, "cidr overlaps subnet x")
    assert cond(objs.get("subnets", name), "Validated") == (
        "False", "ValidateLogicalSwitchFailed", "cidr overlaps subnet x")

    # a spec change runs the add path again; the forced conditions stay
    objs.co.patch_cluster_custom_object(*KUBEOVN, "subnets", name, {"spec": {"excludeIps": ["10.77.8.9"]}})
    wait_for(lambda: objs.get("subnets", name)["status"].get("v4availableIPs") == 252, 20, what="re-run add path")
    assert cond(objs.get("subnets", name), "Ready")[0] == "False"

    kubeovn.clear_overrides(name)
    wait_for(lambda: ready(objs, name), 20, what="Ready again")
    assert cond(objs.get("subnets", name), "Validated")[0] == "True"


# ====================================================================== Kube-OVN: delete path


def _bound(objs: Objects, cluster, vid: int, *, vpc: str | None = None, cidr: str = "10.78.0.0/24") -> str:
    provider, name = unique("pv"), unique("sn")
    objs.vlan(vid, provider, name=name)
    objs.subnet(name, vlan=name, cidr=cidr, vpc=vpc, finalizers=[PRODUCT_FINALIZER])
    wait_for(lambda: ready(objs, name) and listed(objs, name) == [name], 20, what="bound")
    return name


@integration
def test_delete_normal_terminating_then_gone_then_pruned(cluster, objs, kubeovn):
    vpc = unique("vpc")
    name = _bound(objs, cluster, 110, vpc=vpc, cidr="10.78.1.0/24")
    assert nb_one(cluster, "Logical_Router_Port", f"{vpc}-{name}", "name")
    objs.delete("subnets", name)

    # Kube-OVN lets go at once; the product's finalizer keeps the Subnet Terminating
    wait_for(lambda: objs.get("subnets", name)["metadata"]["finalizers"] == [PRODUCT_FINALIZER], 20,
             what="kube-ovn-controller removed")
    sub = objs.get("subnets", name)
    assert sub["metadata"]["deletionTimestamp"]
    # nothing else happens before the object is gone (Kube-OVN acts on the delete event)
    kubeovn.sync()
    assert listed(objs, name) == [name]
    assert nb_one(cluster, "Logical_Switch", name, "name")

    objs.drop_finalizer("subnets", name, PRODUCT_FINALIZER)
    wait_for(lambda: objs.get("subnets", name) is None, 20, what="Subnet gone")
    wait_for(lambda: listed(objs, name) == [], 20, what="pruned from Vlan")
    assert nb_one(cluster, "Logical_Switch", name, "name") is None
    assert nb_one(cluster, "Logical_Switch_Port", f"localnet.{name}", "name") is None
    assert nb_one(cluster, "Logical_Router_Port", f"{vpc}-{name}", "name") is None
    assert nb_find(cluster, "Logical_Router", "name", f'name="{vpc}"')  # the router stays
    assert kubeovn.counters["deletes_done"] >= 1


@integration
def test_delete_held_while_kube_ovn_sees_ips_in_use(cluster, objs, kubeovn):
    """B04: Kube-OVN's own finalizer stays while it believes IPs are used; ours comes off anyway."""
    name = _bound(objs, cluster, 111, cidr="10.78.2.0/24")
    kubeovn.set_using_ips(name, 1)
    objs.delete("subnets", name)
    objs.drop_finalizer("subnets", name, PRODUCT_FINALIZER)
    kubeovn.sync()
    sub = objs.get("subnets", name)
    assert sub["metadata"]["deletionTimestamp"] and sub["metadata"]["finalizers"] == [KUBEOVN_FINALIZER]
    kubeovn.set_using_ips(name, 0)
    wait_for(lambda: objs.get("subnets", name) is None, 20, what="Subnet gone")
    wait_for(lambda: listed(objs, name) == [], 20, what="pruned")


@integration
def test_delete_lost_keeps_vlan_entry_and_switch(cluster, objs):
    """B03: the delete event is lost; GC later removes the switch but never the Vlan entry."""
    with KubeOvnEmulator(cluster, delete_mode="lost") as emu:
        name = _bound(objs, cluster, 112, cidr="10.78.3.0/24")
        objs.delete("subnets", name)
        objs.drop_finalizer("subnets", name, PRODUCT_FINALIZER)
        wait_for(lambda: objs.get("subnets", name) is None, 20, what="Subnet gone")
        wait_for(lambda: name in emu.lost, 20, what="delete event seen and dropped")
        emu.sync()
        assert listed(objs, name) == [name]
        lsp = nb_one(cluster, "Logical_Switch_Port", f"localnet.{name}", "tag")
        assert lsp["tag"] == 112

        assert name in emu.gc_nb()
        assert nb_one(cluster, "Logical_Switch", name, "name") is None
        assert listed(objs, name) == [name]

        assert emu.prune_now(name) == [name]
        assert listed(objs, name) == []


@integration
def test_delete_slow_prunes_after_the_delay(cluster, objs):
    delay = 1.5
    with KubeOvnEmulator(cluster, delete_mode="slow", slow_delete_seconds=delay) as emu:
        name = _bound(objs, cluster, 113, cidr="10.78.4.0/24")
        objs.delete("subnets", name)
        objs.drop_finalizer("subnets", name, PRODUCT_FINALIZER)
        wait_for(lambda: objs.get("subnets", name) is None, 20, what="Subnet gone")
        wait_for(lambda: emu.counters["deletes_seen"] >= 1, 20, what="delete event seen")
        seen = time.monotonic()
        assert listed(objs, name) == [name]
        assert nb_one(cluster, "Logical_Switch", name, "name")

        wait_for(lambda: listed(objs, name) == [], delay + 10, what="pruned after the delay")
        assert time.monotonic() - seen >= delay - 0.6
        assert nb_one(cluster, "Logical_Switch", name, "name") is None


@integration
def test_restart_drops_pending_deletes(cluster, objs):
    with KubeOvnEmulator(cluster, delete_mode="slow", slow_delete_seconds=60) as emu:
        name = _bound(objs, cluster, 114, cidr="10.78.5.0/24")
        objs.delete("subnets", name)
        objs.drop_finalizer("subnets", name, PRODUCT_FINALIZER)
        wait_for(lambda: emu.counters["deletes_seen"] >= 1, 20, what="delete event seen")
        emu.restart(gc=True)
        assert name in emu.lost
        assert nb_one(cluster, "Logical_Switch", name, "name") is None  # startup GC
        assert listed(objs, name) == [name]  # never pruned


@integration
def test_router_port_only_recreated_on_the_add_path(cluster, objs, kubeovn):
    """B05: after the router is GC'd the port does not come back by itself."""
    vpc = unique("vpc")
    name = _bound(objs, cluster, 115, vpc=vpc, cidr="10.78.6.0/24")
    kubeovn.drop_router(vpc)
    kubeovn.sync()
    assert nb_one(cluster, "Logical_Router_Port", f"{vpc}-{name}", "name") is None
    kubeovn.resync(name)
    wait_for(lambda: nb_one(cluster, "Logical_Router_Port", f"{vpc}-{name}", "name"), 20, what="port recreated")


@integration
def test_stop_is_prompt(cluster):
    emu = KubeOvnEmulator(cluster).start()
    threads = list(emu._threads)
    assert len(threads) == 3 and all(t.is_alive() for t in threads)
    t0 = time.monotonic()
    emu.stop()
    assert time.monotonic() - t0 < 3
    assert not any(t.is_alive() for t in threads)


# ====================================================================== IPAM: pure parts


@pytest.mark.parametrize(
    "spec, used, want",
    [
        # B15's pool: 41 addresses, gateway outside
        ({"addresses": ["10.8.0.10-10.8.0.50"], "prefix": 24, "gateway": "10.8.0.1"},
         ["10.8.0.10", "10.9.0.1"], {"total": 41, "used": 2, "free": 39, "outOfRange": 1}),
        # CIDR: minus network, broadcast, gateway and 11 excluded
        ({"addresses": ["10.0.0.0/24"], "prefix": 24, "gateway": "10.0.0.1",
          "excludedAddresses": ["10.0.0.100-10.0.0.109", "10.0.0.200"]},
         [], {"total": 242, "used": 0, "free": 242, "outOfRange": 0}),
        ({"addresses": ["10.0.0.0/24"], "prefix": 24, "allocateReservedIPAddresses": True},
         [], {"total": 256, "used": 0, "free": 256, "outOfRange": 0}),
        # singles; the gateway is one of them
        ({"addresses": ["10.0.0.5", "10.0.0.7"], "prefix": 24, "gateway": "10.0.0.7"},
         [], {"total": 1, "used": 0, "free": 1, "outOfRange": 0}),
        # an excluded address in use is out of range
        ({"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "excludedAddresses": ["10.0.0.15"]},
         ["10.0.0.15", "10.0.0.11"], {"total": 10, "used": 2, "free": 8, "outOfRange": 1}),
        # IPv6: only the subnet-router anycast address is reserved
        ({"addresses": ["fd00::/120"], "prefix": 120, "gateway": "fd00::1"},
         ["fd00::5"], {"total": 254, "used": 1, "free": 253, "outOfRange": 0}),
        ({"addresses": ["fd00::10-fd00::1f"], "prefix": 64}, [], {"total": 16, "used": 0, "free": 16, "outOfRange": 0}),
        # /31: nothing reserved
        ({"addresses": ["10.0.0.0/31"], "prefix": 31}, [], {"total": 2, "used": 0, "free": 2, "outOfRange": 0}),
        # a huge IPv6 pool caps at int64 like upstream
        ({"addresses": ["fd00::/64"], "prefix": 64}, [],
         {"total": 2**63 - 1, "used": 0, "free": 2**63 - 1, "outOfRange": 0}),
    ],
)
def test_pool_status_math(spec, used, want):
    assert pool_status(spec, used) == want


# ====================================================================== IPAM: integration


class Ipam:
    def __init__(self, admin: Admin, ns: str) -> None:
        self.co, self.ns = admin.co, ns

    def pool(self, name: str, **spec) -> dict:
        body = {"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
                "metadata": {"name": name, "namespace": self.ns}, "spec": spec}
        return self.co.create_namespaced_custom_object(*POOL_V, self.ns, "inclusterippools", body)

    def get_pool(self, name: str) -> dict | None:
        try:
            return self.co.get_namespaced_custom_object(*POOL_V, self.ns, "inclusterippools", name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def counts(self, name: str) -> dict:
        return ((self.get_pool(name) or {}).get("status") or {}).get("ipAddresses") or {}

    def address(self, name: str, pool: str, address: str, *, kind: str = "InClusterIPPool",
                api_group: str | None = "ipam.cluster.x-k8s.io", ns: str | None = None) -> dict:
        ref = {"kind": kind, "name": pool}
        if api_group is not None:
            ref["apiGroup"] = api_group
        ns = ns or self.ns
        body = {"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddress",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"address": address, "prefix": 24, "claimRef": {"name": name}, "poolRef": ref}}
        return self.co.create_namespaced_custom_object(*ADDR_V, ns, "ipaddresses", body)

    def get_address(self, name: str) -> dict | None:
        try:
            return self.co.get_namespaced_custom_object(*ADDR_V, self.ns, "ipaddresses", name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def delete_address(self, name: str) -> None:
        self.co.delete_namespaced_custom_object(*ADDR_V, self.ns, "ipaddresses", name)

    def claim(self, name: str, pool: str, **spec) -> dict:
        body = {"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
                "metadata": {"name": name, "namespace": self.ns},
                "spec": {"poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": pool},
                         **spec}}
        return self.co.create_namespaced_custom_object(*ADDR_V, self.ns, "ipaddressclaims", body)

    def get_claim(self, name: str) -> dict | None:
        try:
            return self.co.get_namespaced_custom_object(*ADDR_V, self.ns, "ipaddressclaims", name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise


@pytest.fixture
def ipam_objs(admin, unique_namespace):
    return Ipam(admin, unique_namespace)


@pytest.fixture
def ipam(cluster):
    with IpamEmulator(cluster) as emu:
        yield emu


@integration
def test_pool_finalizer_and_counts_follow_ipaddresses(ipam_objs, ipam, admin):
    p = ipam_objs
    p.pool("pool", addresses=["10.8.0.10-10.8.0.50"], prefix=24, gateway="10.8.0.1")
    wait_for(lambda: p.counts("pool") == {"total": 41, "used": 0, "free": 41, "outOfRange": 0}, 20,
             what="initial counts")
    assert p.get_pool("pool")["metadata"]["finalizers"] == [PROTECT_POOL]

    p.address("a1", "pool", "10.8.0.10")
    p.address("a2", "pool", "10.9.0.7")  # out of range
    p.address("x-kind", "pool", "10.8.0.11", kind="GlobalInClusterIPPool")  # other kind: not ours
    p.address("x-group", "pool", "10.8.0.12", api_group="example.com")  # other group: not ours
    other_ns = unique("ns")
    admin.core.create_namespace({"metadata": {"name": other_ns}})
    try:
        p.address("x-ns", "pool", "10.8.0.13", ns=other_ns)  # same pool name, other namespace
        wait_for(lambda: p.counts("pool") == {"total": 41, "used": 2, "free": 39, "outOfRange": 1}, 20,
                 what="counts with two addresses")
        p.delete_address("a2")
        wait_for(lambda: p.counts("pool") == {"total": 41, "used": 1, "free": 40, "outOfRange": 0}, 20,
                 what="counts after a delete")
    finally:
        admin.core.delete_namespace(other_ns)

    # a spec change is reflected too
    p.co.patch_namespaced_custom_object(*POOL_V, p.ns, "inclusterippools", "pool",
                                        {"spec": {"excludedAddresses": ["10.8.0.50"]}})
    wait_for(lambda: p.counts("pool") == {"total": 40, "used": 1, "free": 39, "outOfRange": 0}, 20,
             what="counts after excluding an address")


@integration
def test_ipv6_pool_counts(ipam_objs, ipam):
    p = ipam_objs
    p.pool("v6", addresses=["fd00:10::/120"], prefix=120, gateway="fd00:10::1")
    p.address("b1", "v6", "fd00:10::5")
    wait_for(lambda: p.counts("v6") == {"total": 254, "used": 1, "free": 253, "outOfRange": 0}, 20, what="v6")


@integration
def test_terminating_pool_released_only_when_no_address_refers_to_it(ipam_objs, ipam):
    """B15: ProtectPool keeps a deleted pool while an IPAddress references it."""
    p = ipam_objs
    p.pool("held", addresses=["10.8.1.10-10.8.1.20"], prefix=24)
    p.address("vm-1", "held", "10.8.1.10")
    wait_for(lambda: p.counts("held").get("used") == 1, 20, what="used 1")
    p.co.delete_namespaced_custom_object(*POOL_V, p.ns, "inclusterippools", "held")
    ipam.sync()
    pool = p.get_pool("held")
    assert pool["metadata"]["deletionTimestamp"] and pool["metadata"]["finalizers"] == [PROTECT_POOL]
    p.delete_address("vm-1")
    wait_for(lambda: p.get_pool("held") is None, 20, what="pool gone")
    assert ipam.counters["pool_finalizers_removed"] >= 1


@integration
def test_claims_get_lowest_free_address_and_release_it(ipam_objs, ipam):
    p = ipam_objs
    p.pool("cp", addresses=["10.8.2.0/24"], prefix=24, gateway="10.8.2.1", excludedAddresses=["10.8.2.3"])
    p.address("manual", "cp", "10.8.2.2")
    p.claim("c1", "cp")
    addr = wait_for(lambda: p.get_address("c1"), 20, what="address for c1")
    assert addr["spec"]["address"] == "10.8.2.4"  # .0 network, .1 gateway, .2 used, .3 excluded
    assert addr["spec"]["prefix"] == 24 and addr["spec"]["gateway"] == "10.8.2.1"
    assert addr["spec"]["claimRef"] == {"name": "c1"}
    assert addr["spec"]["poolRef"] == {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "cp"}
    assert addr["metadata"]["finalizers"] == [PROTECT_ADDRESS]
    claim = wait_for(lambda: (c := p.get_claim("c1")) and (c.get("status") or {}).get("addressRef") and c, 20)
    assert claim["status"]["addressRef"] == {"name": "c1"}
    assert claim["metadata"]["finalizers"] == [RELEASE_ADDRESS]
    wait_for(lambda: p.counts("cp").get("used") == 2, 20, what="used 2")

    p.co.delete_namespaced_custom_object(*ADDR_V, p.ns, "ipaddressclaims", "c1")
    wait_for(lambda: p.get_claim("c1") is None and p.get_address("c1") is None, 20, what="claim released")
    wait_for(lambda: p.counts("cp").get("used") == 1, 20, what="used 1")


@integration
def test_allocate_helper_and_unreconciled_claims(cluster, ipam_objs):
    p = ipam_objs
    with IpamEmulator(cluster, fulfil_claims=False) as emu:
        p.pool("ap", addresses=["10.8.3.10-10.8.3.11"], prefix=24)
        p.claim("one", "ap")
        p.claim("two", "ap")
        p.claim("three", "ap")
        p.claim("orphan", "ap", clusterName="no-such-cluster")  # Cluster not found: not reconciled
        assert emu.allocate(p.ns, "orphan") is None
        assert emu.allocate(p.ns, "one")["spec"]["address"] == "10.8.3.10"
        assert emu.allocate(p.ns, "two")["spec"]["address"] == "10.8.3.11"
        assert emu.allocate(p.ns, "three") is None  # exhausted
        assert emu.counters["claims_pool_exhausted"] == 1
        wait_for(lambda: p.counts("ap") == {"total": 2, "used": 2, "free": 0, "outOfRange": 0}, 20, what="full")
