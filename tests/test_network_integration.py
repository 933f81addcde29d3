"""The allocation slice end to end on a real kube-apiserver + etcd, the controller running
as its own user under the RBAC of manifests/ (product-decisions.md §5).

Expected values come from reference-behaviour.md §4, §5.3, §5.4 and §8 and
product-decisions.md §4.4 / §7.
"""

from __future__ import annotations

import pytest

from hack.tools.audit import format_writes, write_marker, writes_before
from tests.support.controller import running_controller, vlan_cached
from hack.tools.objects import PX, Admin, reason, unique
from hack.tools.wait import wait_for

pytestmark = pytest.mark.integration

FINALIZER = "proxmox.cozystack.io/network"


@pytest.fixture
def admin(admin_client):
    return Admin(admin_client)


@pytest.fixture
def ctl(cluster):
    with running_controller(cluster) as mgr:
        yield mgr


@pytest.fixture
def provider(admin):
    name = unique("pn")[:12]
    admin.create_provider_network(name, ready=True, ready_nodes=["node-a", "node-b"])
    return name


def vlan_allocated(admin, ns, name):
    def check():
        obj = admin.network(ns, name)
        c = reason(obj, "VLANAllocated")
        return obj if c and obj["status"].get("observedGeneration") == obj["metadata"]["generation"] else None

    return wait_for(check, what=f"VLANAllocated on {ns}/{name}")


def wait_reason(admin, ns, name, expected_reason):
    def check():
        obj = admin.network(ns, name)
        c = reason(obj, "VLANAllocated")
        return obj if c and c[1] == expected_reason else None

    return wait_for(check, what=f"{expected_reason} on {ns}/{name}")


def test_allocates_lowest_free_and_creates_the_vlan(admin, ctl, provider, unique_namespace):
    zname = unique("zone")
    admin.create_zone(zname, provider, ["100-103"], reservedVLANs=[100], mtu=1450)
    sub = unique("sub-a")
    admin.create_network(unique_namespace, "net-a", zname, sub)
    net = wait_reason(admin, unique_namespace, "net-a", "Allocated")

    st = net["status"]
    assert st["vlan"] == 101  # 100 is reserved
    assert st["bridge"] == "vmbr1"
    assert st["mtu"] == 1450
    assert reason(net, "VLANAllocated") == ("True", "Allocated", "VLAN 101 on bridge vmbr1")
    assert FINALIZER in net["metadata"]["finalizers"]
    # Gateway management off: Disabled, ignored by Ready; the next unmet condition decides.
    assert reason(net, "GatewayReady")[:2] == ("Unknown", "Disabled")
    # No Subnet yet: the first unmet condition decides Ready (§5.8).
    assert reason(net, "SubnetReady") == ("False", "SubnetNotFound", f'Kube-OVN Subnet "{sub}" does not exist')
    assert reason(net, "Ready") == ("False", "SubnetNotFound", f'Kube-OVN Subnet "{sub}" does not exist')

    vlan = admin.vlan(st["vlanName"])
    assert vlan["spec"] == {"id": 101, "provider": provider}
    assert vlan["metadata"]["labels"] == {
        "proxmox.cozystack.io/zone": zname,
        "proxmox.cozystack.io/network-namespace": unique_namespace,
        "proxmox.cozystack.io/network-name": "net-a",
    }
    assert vlan["metadata"]["finalizers"] == [FINALIZER]

    def zone_counted():
        z = admin.zone(zname)
        s = z.get("status") or {}
        return z if s.get("allocatedVLANs") == 1 and s.get("networks") == 1 else None

    z = wait_for(zone_counted, what="zone counts")
    assert (z["status"]["totalVLANs"], z["status"]["freeVLANs"]) == (3, 2)
    assert reason(z, "Ready") == ("True", "Ready", "2 of 3 VLANs free; trunk ready on 2 node(s)")


def test_refusals_with_the_spec_messages(admin, ctl, provider, unique_namespace):
    ns = unique_namespace
    zname = unique("zone")
    admin.create_zone(
        zname,
        provider,
        ["200-201"],
        reservedVLANs=[201],
        staticAssignments=[
            {"namespace": ns, "name": "static-reserved", "vlan": 201},
            {"namespace": ns, "name": "static-used", "vlan": 300},
        ],
    )
    # A hand-made Vlan on the provider holds 300.
    handmade = unique("handmade")
    admin.create_vlan(handmade, 300, provider)
    taken = unique("taken")
    admin.create_vlan(taken, 250, provider, labels={
        "proxmox.cozystack.io/network-namespace": "other", "proxmox.cozystack.io/network-name": "owner"})
    mismatch = unique("mismatch")
    admin.create_vlan(mismatch, 251, "elsewhere", labels={
        "proxmox.cozystack.io/network-namespace": ns, "proxmox.cozystack.io/network-name": "mismatch"})
    vlan_cached(ctl, handmade)  # static-used must see it (the allocator reads the cache)

    admin.create_network(ns, "nozone", "no-such-zone", unique("s"))
    admin.create_network(ns, "static-reserved", zname, unique("s"))
    admin.create_network(ns, "static-used", zname, unique("s"))
    admin.create_network(ns, "taken", zname, taken)
    admin.create_network(ns, "mismatch", zname, mismatch)

    nozone = wait_reason(admin, ns, "nozone", "ZoneNotFound")
    assert reason(nozone, "VLANAllocated") == ("False", "ZoneNotFound", 'ProxmoxNetworkZone "no-such-zone" does not exist')
    # §5.4 setNotReady: Subnet and pool wait; GatewayReady stays Disabled (management off).
    assert reason(nozone, "SubnetReady") == ("Unknown", "WaitingForVLAN", "waits for a VLAN to be allocated")
    assert reason(nozone, "IPPoolReady") == ("Unknown", "WaitingForVLAN", "waits for a VLAN to be allocated")
    assert reason(nozone, "GatewayReady")[:2] == ("Unknown", "Disabled")
    for n in ("nozone",):
        obj = admin.network(ns, n)
        assert reason(obj, "Ready")[:2] == ("False", "ZoneNotFound")

    r = wait_reason(admin, ns, "static-reserved", "StaticVLANReserved")
    assert reason(r, "VLANAllocated")[2] == f'static VLAN 201 is reserved in zone "{zname}"'
    assert reason(r, "SubnetReady") == ("Unknown", "WaitingForVLAN", "waits for a VLAN to be allocated")
    assert reason(r, "IPPoolReady") == ("Unknown", "WaitingForVLAN", "waits for a VLAN to be allocated")

    u = wait_reason(admin, ns, "static-used", "StaticVLANInUse")
    assert reason(u, "VLANAllocated")[2] == f'static VLAN 300 is already used on provider "{provider}"'

    t = wait_reason(admin, ns, "taken", "VLANNameTaken")
    assert reason(t, "VLANAllocated")[2] == f'Kube-OVN Vlan "{taken}" exists and belongs to other/owner'

    m = wait_reason(admin, ns, "mismatch", "VLANProviderMismatch")
    assert reason(m, "VLANAllocated")[2] == (
        f'Vlan "{mismatch}" uses provider "elsewhere", zone "{zname}" uses "{provider}"'
    )
    # Nothing was allocated for any of them: the only Vlans on the provider are the hand-made two.
    on_provider = sorted(v["spec"]["id"] for v in admin.vlans() if v["spec"]["provider"] == provider)
    assert on_provider == [250, 300]


def test_zone_invalid_and_exhausted(admin, ctl, provider, unique_namespace):
    ns = unique_namespace
    bad = unique("bad")
    admin.create_zone(bad, provider, ["200-100"])  # the CRD pattern admits it; the parser does not
    small = unique("small")
    admin.create_zone(small, provider, ["400"])
    admin.create_network(ns, "on-bad", bad, unique("s"))
    admin.create_network(ns, "first", small, unique("s"))
    wait_reason(admin, ns, "first", "Allocated")
    admin.create_network(ns, "second", small, unique("s"))

    inv = wait_reason(admin, ns, "on-bad", "ZoneInvalid")
    assert reason(inv, "VLANAllocated")[2] == 'vlan range "200-100" ends before it starts'
    z = wait_for(lambda: (reason(admin.zone(bad), "Ready") or [None, None])[1] == "ZoneInvalid" and admin.zone(bad))
    assert reason(z, "Ready") == ("False", "ZoneInvalid", 'vlan range "200-100" ends before it starts')

    ex = wait_reason(admin, ns, "second", "ZoneExhausted")
    assert reason(ex, "VLANAllocated")[2] == f'zone "{small}" has no free VLAN in 400'


def test_an_id_freed_by_another_zone_on_the_provider_goes_to_the_waiting_network_at_once(
        admin, ctl, provider, unique_namespace):
    """Two zones on one provider with overlapping ranges (product-decisions.md §8): zone B's
    network holds 420, so zone A (range 420 only) is exhausted. Deleting B's network frees 420
    on the provider, and A's waiting network gets it from that event, not from its 5-minute
    requeue (§5.10): well inside the 30 s this test waits."""
    ns = unique_namespace
    za, zb = unique("za"), unique("zb")
    admin.create_zone(zb, provider, ["420-421"])
    admin.create_network(ns, "b1", zb, unique("s"))
    assert wait_reason(admin, ns, "b1", "Allocated")["status"]["vlan"] == 420
    admin.create_zone(za, provider, ["420"])
    admin.create_network(ns, "a1", za, unique("s"))
    wait_reason(admin, ns, "a1", "ZoneExhausted")
    admin.co.delete_namespaced_custom_object(*PX, ns, "proxmoxnetworks", "b1")
    assert wait_reason(admin, ns, "a1", "Allocated")["status"]["vlan"] == 420


def test_namespace_selector_refuses_and_creates_nothing(admin, ctl, provider, unique_namespace):
    ns = unique_namespace
    zname = unique("zone")
    admin.create_zone(zname, provider, ["500-509"], namespaceSelector={"matchLabels": {"tenant": "yes"}})
    sub = unique("s")
    admin.create_network(ns, "refused", zname, sub)
    r = wait_reason(admin, ns, "refused", "NamespaceNotAllowed")
    assert reason(r, "VLANAllocated")[2] == f'namespace "{ns}" does not match the namespaceSelector of zone "{zname}"'
    assert all(v["metadata"]["name"] != sub for v in admin.vlans())
    # Labelling the namespace admits it (the Namespace watch maps to its networks).
    admin.label_namespace(ns, {"tenant": "yes"})
    ok = wait_reason(admin, ns, "refused", "Allocated")
    assert ok["status"]["vlan"] == 500


def test_vlan_conflicts(admin, ctl, provider, unique_namespace):
    ns = unique_namespace
    zname = unique("zone")
    admin.create_zone(zname, provider, ["600-609"])
    sub = unique("s")
    admin.create_network(ns, "net", zname, sub)
    net = wait_reason(admin, ns, "net", "Allocated")
    vid = net["status"]["vlan"]

    # Kube-OVN flags our Vlan.
    admin.set_vlan_status(sub, {"conflict": True})
    c = wait_reason(admin, ns, "net", "VLANConflict")
    assert reason(c, "VLANAllocated")[2] == (
        f'Kube-OVN reports VLAN {vid} on provider "{provider}" as conflicting with another Vlan'
    )
    assert c["status"]["vlan"] == vid  # the VLAN fields stay set
    admin.set_vlan_status(sub, {"conflict": False})
    wait_reason(admin, ns, "net", "Allocated")

    # Someone creates a second Vlan with our ID on the same provider: named, never shared silently.
    dup = unique("dup")
    admin.create_vlan(dup, vid, provider)
    d = wait_reason(admin, ns, "net", "VLANConflict")
    assert reason(d, "VLANAllocated")[2] == f'VLAN {vid} on provider "{provider}" is also held by Vlan "{dup}"'
    z = wait_for(lambda: "duplicate" in (reason(admin.zone(zname), "Ready") or ("", "", ""))[2] and admin.zone(zname))
    assert f"duplicate VLAN IDs on provider: {vid} ({', '.join(sorted([dup, sub]))})" in reason(z, "Ready")[2]


def test_restart_recovery_adopts_the_vlan_and_allocates_nothing(admin, cluster, provider, unique_namespace):
    """A crash between the Vlan create and the status write (product-decisions.md §7): the
    Vlan exists exactly as the controller would have created it, the status is empty."""
    ns = unique_namespace
    zname = unique("zone")
    admin.create_zone(zname, provider, ["700-709"])
    sub = unique("s")
    # 703, not the lowest free ID: adoption must keep it rather than recompute.
    admin.create_vlan(sub, 703, provider, finalizers=[FINALIZER], labels={
        "proxmox.cozystack.io/zone": zname,
        "proxmox.cozystack.io/network-namespace": ns,
        "proxmox.cozystack.io/network-name": "crashed",
    })
    admin.create_network(ns, "crashed", zname, sub)
    with running_controller(cluster):
        net = wait_reason(admin, ns, "crashed", "Allocated")
    assert net["status"]["vlan"] == 703
    assert net["status"]["vlanName"] == sub
    on_provider = [v for v in admin.vlans() if v["spec"]["provider"] == provider]
    assert [(v["metadata"]["name"], v["spec"]["id"]) for v in on_provider] == [(sub, 703)]


def test_adoption_restores_a_missing_finalizer_without_dropping_others(admin, ctl, provider, unique_namespace):
    ns = unique_namespace
    zname = unique("zone")
    sub = unique("s")
    # The network exists first (its zone not yet), so its Vlan is never an orphan (§8.1):
    # a labelled Vlan whose network is NotFound would rightly be collected by the zone.
    admin.create_network(ns, "n", zname, sub)
    wait_reason(admin, ns, "n", "ZoneNotFound")
    admin.create_vlan(sub, 712, provider, finalizers=["kube-ovn-controller"], labels={
        "proxmox.cozystack.io/zone": zname,
        "proxmox.cozystack.io/network-namespace": ns,
        "proxmox.cozystack.io/network-name": "n",
    })
    admin.create_zone(zname, provider, ["710-719"])
    net = wait_reason(admin, ns, "n", "Allocated")
    assert net["status"]["vlan"] == 712  # adopted, not re-allocated
    v = wait_for(lambda: FINALIZER in admin.vlan(sub)["metadata"].get("finalizers", []) and admin.vlan(sub))
    assert v["metadata"]["finalizers"] == ["kube-ovn-controller", FINALIZER]


def test_many_networks_at_once_get_distinct_ids(admin, ctl, provider, unique_namespace):
    """No duplicate under cache lag (product-decisions.md §4.4): 40 networks created in one
    burst against 4 workers; the Vlan cache lags the creates, the assumed set covers it."""
    ns = unique_namespace
    zname = unique("zone")
    admin.create_zone(zname, provider, ["1000-1099"])
    names = [f"n{i:02d}" for i in range(40)]
    for n in names:
        admin.create_network(ns, n, zname, unique(f"s{n}"))

    def all_allocated():
        items = admin.co.list_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks")["items"]
        done = [i for i in items if (reason(i, "VLANAllocated") or ("", ""))[1] == "Allocated"]
        return items if len(done) == len(names) else None

    items = wait_for(all_allocated, timeout=60, what="40 allocations")
    ids = sorted(i["status"]["vlan"] for i in items)
    assert ids == list(range(1000, 1040))
    on_provider = [v["spec"]["id"] for v in admin.vlans() if v["spec"]["provider"] == provider]
    assert sorted(on_provider) == ids


def test_steady_state_resync_writes_nothing(admin, cluster, ctl, provider, unique_namespace):
    """After convergence a full resync of every key makes zero write requests as the
    controller user (product-decisions.md §6, §7 "Counting writes")."""
    ns = unique_namespace
    zname = unique("zone")
    admin.create_zone(zname, provider, ["800-809"], staticAssignments=[{"namespace": ns, "name": "pinned", "vlan": 805}])
    for n in ("a", "b", "pinned"):
        admin.create_network(ns, n, zname, unique("s"))
    for n in ("a", "b", "pinned"):
        wait_reason(admin, ns, n, "Allocated")
    wait_for(lambda: (admin.zone(zname).get("status") or {}).get("allocatedVLANs") == 3)
    # Let every in-flight pass finish: a first resync converges whatever is still pending.
    for _ in range(2):
        done = ctl.resyncs_completed
        ctl.enqueue_all()
        wait_for(lambda: ctl.resyncs_completed > done, what="resync complete")
    before = write_marker(cluster)
    done = ctl.resyncs_completed
    n = ctl.enqueue_all()
    assert n >= 4
    wait_for(lambda: ctl.resyncs_completed > done, what="resync complete")
    marker = write_marker(cluster)
    writes = writes_before(cluster, cluster.controller_user, marker, since_marker=before)
    assert writes == [], format_writes(writes)
    # The count is real: the same window sees the controller's writes when there are some.
    admin.create_network(ns, "late", zname, unique("s"))
    wait_reason(admin, ns, "late", "Allocated")
    marker2 = write_marker(cluster)
    later = writes_before(cluster, cluster.controller_user, marker2, since_marker=marker)
    assert {(w.verb, w.resource) for w in later} >= {("create", "vlans"), ("patch", "proxmoxnetworks")}


def test_zone_status_provider_network_and_stranded_vlans(admin, ctl, unique_namespace):
    ns = unique_namespace
    provider = unique("pn")[:12]
    zname = unique("zone")
    admin.create_zone(zname, provider, ["900-903"], reservedVLANs=[903])

    def zone_reason(expected):
        def check():
            z = admin.zone(zname)
            r = reason(z, "Ready")
            return z if r and r[1] == expected else None
        return wait_for(check, what=f"zone {expected}")

    z = zone_reason("ProviderNetworkNotFound")
    assert reason(z, "Ready") == ("False", "ProviderNetworkNotFound", f'Kube-OVN ProviderNetwork "{provider}" does not exist')
    assert (z["status"]["totalVLANs"], z["status"]["allocatedVLANs"], z["status"]["freeVLANs"], z["status"]["networks"]) == (3, 0, 3, 0)

    admin.create_provider_network(provider, ready=False)
    z = zone_reason("ProviderNetworkNotReady")
    assert reason(z, "Ready")[2] == f'Kube-OVN ProviderNetwork "{provider}" is not ready on every node it should be'

    pn = admin.co.get_cluster_custom_object("kubeovn.io", "v1", "provider-networks", provider)
    pn["status"] = {"ready": True, "readyNodes": ["a", "b", "c"]}
    admin.co.replace_cluster_custom_object_status("kubeovn.io", "v1", "provider-networks", provider, pn)
    admin.create_network(ns, "x", zname, unique("sx"))
    admin.create_network(ns, "y", zname, unique("sy"))
    wait_reason(admin, ns, "x", "Allocated")
    wait_reason(admin, ns, "y", "Allocated")
    vx = admin.network(ns, "x")["status"]
    vy = admin.network(ns, "y")["status"]
    assert {vx["vlan"], vy["vlan"]} == {900, 901}
    z = wait_for(lambda: (admin.zone(zname).get("status") or {}).get("allocatedVLANs") == 2 and admin.zone(zname))
    assert reason(z, "Ready") == ("True", "Ready", "1 of 3 VLANs free; trunk ready on 3 node(s)")

    # Shrink the range under both: nothing moves, the zone names the stranded ones.
    admin.patch_zone(zname, {"spec": {"vlanRanges": ["902-903"], "reservedVLANs": []}})
    def stranded():
        z = admin.zone(zname)
        return z if "outside" in (reason(z, "Ready") or ("", "", ""))[2] else None
    z = wait_for(stranded, what="stranded VLANs in the zone message")
    expected = sorted([f"{vx['vlan']} ({vx['vlanName']})", f"{vy['vlan']} ({vy['vlanName']})"])
    assert reason(z, "Ready") == (
        "True", "Ready",
        "2 of 2 VLANs free; trunk ready on 3 node(s); allocated outside the current ranges: " + ", ".join(expected),
    )
    assert admin.network(ns, "x")["status"]["vlan"] == vx["vlan"]  # held VLANs keep their IDs


def _self_made_twins(admin, provider, ns, zname, vid):
    """Two Vlans exactly as the controller creates them (labels, finalizer), one ID: the
    duplicate of issue 12. The second is the newer (same second at worst: the name
    breaks the tie, ``-b`` after ``-a``)."""
    base = unique("dup")
    names_ = {}
    for net, suffix in (("older", "a"), ("newer", "b")):
        sub = f"{base}-{suffix}"
        admin.create_network(ns, net, zname, sub)
        names_[net] = sub
    for net in ("older", "newer"):
        wait_reason(admin, ns, net, "ZoneNotFound")
        admin.create_vlan(names_[net], vid, provider, finalizers=[FINALIZER], labels={
            "proxmox.cozystack.io/zone": zname,
            "proxmox.cozystack.io/network-namespace": ns,
            "proxmox.cozystack.io/network-name": net,
        })
    return names_


def test_a_self_made_duplicate_nothing_bound_is_repaired(admin, ctl, provider, unique_namespace):
    """product-decisions.md §8: a duplicate this controller made and nothing has bound yet
    is repaired: the newer Vlan is given back (Warning Event) and its network allocated
    again; the older keeps its ID."""
    ns = unique_namespace
    zname = unique("zone")
    subs = _self_made_twins(admin, provider, ns, zname, 730)
    newer_uid = admin.vlan(subs["newer"])["metadata"]["uid"]
    admin.create_zone(zname, provider, ["730-739"])
    old = wait_reason(admin, ns, "older", "Allocated")
    new = wait_reason(admin, ns, "newer", "Allocated")
    assert old["status"]["vlan"] == 730
    assert new["status"]["vlan"] == 731  # the lowest free ID once 730 is the older's alone
    v = admin.vlan(subs["newer"])
    assert v["spec"]["id"] == 731 and v["metadata"]["uid"] != newer_uid
    assert admin.vlan(subs["older"])["spec"]["id"] == 730
    ev = wait_for(lambda: [e for e in admin.core.list_namespaced_event(ns).items
                           if e.involved_object.name == "newer" and e.reason == "VLANDuplicateRepaired"],
                  what="the repair's Warning Event")
    assert ev[0].type == "Warning"
    assert ev[0].message == (
        f'VLAN 730 on provider "{provider}" is also held by Vlan "{subs["older"]}"; gave back Vlan '
        f'"{subs["newer"]}" (made by this controller, not bound yet) and allocating again')
    assert not [e for e in admin.core.list_namespaced_event(ns).items
                if e.involved_object.name == "older" and e.reason == "VLANDuplicateRepaired"]


def test_a_self_made_duplicate_already_bound_stays_a_conflict(admin, ctl, provider, unique_namespace):
    """A Subnet names the newer Vlan: something may already send frames with that ID, so
    nothing is given back on a guess; both networks report ``VLANConflict``."""
    ns = unique_namespace
    zname = unique("zone")
    subs = _self_made_twins(admin, provider, ns, zname, 740)
    admin.co.create_cluster_custom_object("kubeovn.io", "v1", "subnets", {
        "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": subs["newer"]},
        "spec": {"vpc": "vpc1", "vlan": subs["newer"], "cidrBlock": "10.74.0.0/24", "gateway": "10.74.0.1", "protocol": "IPv4"}})
    try:
        admin.create_zone(zname, provider, ["740-749"])
        for net, other in (("older", "newer"), ("newer", "older")):
            c = wait_reason(admin, ns, net, "VLANConflict")
            # The Subnet on the other Vlan is named with it (field report S6): only the newer has one.
            on_it = f' (Subnet "{subs[other]}")' if other == "newer" else ""
            assert reason(c, "VLANAllocated")[2] == (
                f'VLAN 740 on provider "{provider}" is also held by Vlan "{subs[other]}"{on_it}')
        assert [admin.vlan(s)["spec"]["id"] for s in (subs["older"], subs["newer"])] == [740, 740]
    finally:
        admin.co.delete_cluster_custom_object("kubeovn.io", "v1", "subnets", subs["newer"])


POOL_CIDRS = "proxmox.cozystack.io/pool-cidrs"


def _create_pool(admin, ns, name, addresses):
    admin.co.create_namespaced_custom_object("ipam.cluster.x-k8s.io", "v1alpha2", ns, "inclusterippools", {
        "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"addresses": addresses, "prefix": 24, "gateway": "10.66.0.1"}})


def _pool_cidrs(admin, sub):
    return (admin.vlan(sub)["metadata"].get("annotations") or {}).get(POOL_CIDRS)


def test_the_vlan_carries_the_pool_as_cidrs_and_a_resync_or_restart_rewrites_nothing(admin, cluster, provider,
                                                                                       unique_namespace):
    """Issue 15, item 6: the network's Vlan carries its pool's addresses as CIDRs for the
    fixed-address admission policies (docs/admission.md); it follows the pool, a hand edit is
    put back, and neither a full resync nor a restart writes it again (audit log)."""
    ns = unique_namespace
    zname = unique("zone")
    admin.create_zone(zname, provider, ["1200-1209"])
    sub = unique("s")
    # 10.66.0.100-10.66.0.150, by hand: .100-.103 /30, .104-.111 /29, .112-.127 /28, .128-.143 /28,
    # .144-.147 /30, .148-.149 /31, .150 /32
    _create_pool(admin, ns, "pool", ["10.66.0.100-10.66.0.150"])
    admin.create_network(ns, "n", zname, sub, "pool")
    want = "10.66.0.100/30,10.66.0.104/29,10.66.0.112/28,10.66.0.128/28,10.66.0.144/30,10.66.0.148/31,10.66.0.150/32"
    with running_controller(cluster) as ctl:
        wait_reason(admin, ns, "n", "Allocated")
        wait_for(lambda: _pool_cidrs(admin, sub) == want, what="pool-cidrs written")
        # the pool changes: the annotation follows
        admin.co.patch_namespaced_custom_object("ipam.cluster.x-k8s.io", "v1alpha2", ns, "inclusterippools", "pool",
                                                {"spec": {"addresses": ["10.66.0.200/29", "10.66.0.208"]}})
        wait_for(lambda: _pool_cidrs(admin, sub) == "10.66.0.200/29,10.66.0.208/32", what="pool-cidrs follow the pool")
        # a hand edit is put back on the next pass
        admin.co.patch_cluster_custom_object("kubeovn.io", "v1", "vlans", sub,
                                             {"metadata": {"annotations": {POOL_CIDRS: "0.0.0.0/0"}}})
        ctl.enqueue_all()
        wait_for(lambda: _pool_cidrs(admin, sub) == "10.66.0.200/29,10.66.0.208/32", what="hand edit put back")
        for _ in range(2):  # let every in-flight pass finish
            done = ctl.resyncs_completed
            ctl.enqueue_all()
            wait_for(lambda: ctl.resyncs_completed > done, what="resync complete")
        before = write_marker(cluster)
        done = ctl.resyncs_completed
        ctl.enqueue_all()
        wait_for(lambda: ctl.resyncs_completed > done, what="resync complete")
        marker = write_marker(cluster)
        writes = writes_before(cluster, cluster.controller_user, marker, since_marker=before)
        assert writes == [], format_writes(writes)
    before = write_marker(cluster)
    with running_controller(cluster) as ctl:  # a restart: the same value is found, nothing is written
        for _ in range(2):  # every key passed over at least once after the start
            done = ctl.resyncs_completed
            ctl.enqueue_all()
            wait_for(lambda: ctl.resyncs_completed > done, what="resync complete")
        marker = write_marker(cluster)
    writes = writes_before(cluster, cluster.controller_user, marker, since_marker=before)
    assert [w for w in writes if w.resource == "vlans"] == [], format_writes(writes)
    assert _pool_cidrs(admin, sub) == "10.66.0.200/29,10.66.0.208/32"
