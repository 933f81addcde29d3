"""Real pods of the tenant's VPC next to its VMs: one trunk node of the bed also runs a
kubelet with Kube-OVN's CNI (hack/bed/trunk_kubelet.py), so the pods here are placed by the
scheduler and plumbed by Kube-OVN's own agent on that node (kube-ovn-cni v1.15.24), their
addresses from the real kube-ovn-controller. The controller runs as in the other wire tests;
the VMs are made as capmox makes them (hack/tools/vms.py). Every figure printed is a
measurement of this run.

* the agent plumbs the pod: its port in the node's ``br-int`` carries
  ``iface-id=<pod>.<namespace>``, its ``eth0`` has the address kube-ovn-controller allocated,
  an overlay pod Kube-OVN's MTU (1400);
* VM <-> pod on the Proxmox-backed subnet: L2 neighbours (ARP both ways, ping, TCP both ways);
* VM <-> pod on an overlay subnet of the same VPC on another node than the gateway chassis
  (through the router and Geneve): ping and 10 MiB over TCP both ways; the path MTU
  (product-decisions.md §10: a zone of ``mtu: 1450``, the router port's ``gateway_mtu``
  1400): a DF packet at the VM's MTU is answered with "fragmentation needed" (mtu 1400);
* another tenant's VM reaches none of these pods, next to its own gateway (the positive control);
* a trunk link cut under a live underlay (docs/operations.md "A trunk link lost"): what the real
  agent reports and what the documented remedy does, measured;
* the environment suite's resilience phase: kube-ovn-cni restarted on every trunk node, then
  kube-ovn-controller restarted, while the VM pings its gateway and the overlay pod: no
  allocation changes (the network's VLAN, the VM's and the pods' addresses), the gaps measured.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from hack.bed import DATAPLANE_PROVIDER, DataPlane, LocalCluster, Prober, ovsdb_rows
from hack.tools.objects import Admin, reason
from hack.tools.vms import real_pod
from hack.tools.wait import wait_for
from tests.support.beds import admin_of, running
from tests.support.peers import KUBE_OVN, KUBEOVN, vpc_homed_on
from tests.test_wire_integration import Tenant, df_ping, gateway_controller, reaches, serving_vm, transfer

pytestmark = pytest.mark.integration

WAIT = 60.0


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The peers, the data plane and the bed's node, with a kubelet on the last trunk node."""
    yield from running(LocalCluster(tmp_path_factory.mktemp("realpods"), with_peers=True, with_dataplane=True,
                                    with_node=True, trunk_kubelets=1), "bed with a trunk kubelet")


@pytest.fixture(scope="module")
def dp(bed: LocalCluster) -> DataPlane:
    assert bed.dataplane is not None
    return bed.dataplane


@pytest.fixture(scope="module")
def admin(bed: LocalCluster) -> Iterator[Admin]:
    yield from admin_of(bed)


def kubelet_of(bed: LocalCluster):
    (tk,) = bed.trunk_kubelets.values()
    return tk


def tenant_served_elsewhere(admin, dp: DataPlane, pod_node: str, first_vlan: int, **zone_spec) -> Tenant:
    """A tenant whose VPC's gateway chassis is another node than ``pod_node``, so that the
    overlay pods' path crosses Geneve."""
    return Tenant(admin, first_vlan, vpc=vpc_homed_on(dp, pod_node, False), **zone_spec)


def agent_port(dp: DataPlane, node_name: str, iface_id: str) -> dict | None:
    """The Interface of ``node_name``'s OVS whose ``external_ids:iface-id`` is ``iface_id``."""
    ch = next(c for c in dp.chassis if c.name == node_name)
    out = dp.vsctl(ch.ns, ch.rundir, "--format=json", "--columns=name,external_ids,mtu", "find", "Interface",
                   f'external_ids:iface-id="{iface_id}"')
    rows = json.loads(out)["data"]
    if not rows:
        return None
    name, ext, mtu = rows[0]
    return {"name": name, "external_ids": dict(ext[1]), "mtu": mtu}


def test_real_pods_meet_the_vm_on_its_subnet_and_across_the_router(bed, dp, admin, tmp_path):
    a = admin
    tk = kubelet_of(bed)
    node = tk.node.name
    t = tenant_served_elsewhere(a, dp, node, 3400, mtu=1450)
    n = t.subnet(91)
    overlay = t.overlay_subnet(92)
    other = Tenant(a, 3410).subnet(93)
    with gateway_controller(bed):
        for net in (n, other):
            net.wait("Ready", "Ready")
        vm = n.vm(dp, "vm-real")
        assert reaches(vm, n.gateway)
        active = n.settled(bed)
        host = next(c for c in dp.chassis if c.name == node)
        assert active != host.system_id  # the overlay pod's path crosses Geneve

        t0 = time.monotonic()
        on_vlan = real_pod(tk, a.core, t.ns, n.sub, "pod-vlan")
        on_overlay = real_pod(tk, a.core, t.ns, overlay, "pod-overlay")
        pods_ready = time.monotonic() - t0

        # The agent plumbed both: a br-int port with the pod's iface-id, the allocated address.
        for pod in (on_vlan, on_overlay):
            port = agent_port(dp, node, f"{pod.name}.{t.ns}")
            assert port is not None, f"no OVS port for {pod.name}"
            assert port["external_ids"].get("pod_name") == pod.name
            ann = a.core.read_namespaced_pod(pod.name, t.ns).metadata.annotations
            assert pod.address.split("/")[0] == ann["ovn.kubernetes.io/ip_address"]
            assert pod.mac == ann["ovn.kubernetes.io/mac_address"].lower()
        assert on_vlan.address.startswith(f"{n.prefix}.") and on_overlay.address.startswith("10.92.0.")
        assert on_overlay.run("cat", "/sys/class/net/eth0/mtu").stdout.strip() == "1400"

        # Same subnet: L2 neighbours on the VLAN.
        vm_ip, l2_ip, ov_ip = (x.address.split("/")[0] for x in (vm, on_vlan, on_overlay))
        assert vm.arping(l2_ip, count=2, timeout=3)[:1] == [(l2_ip, on_vlan.mac)]
        assert on_vlan.arping(vm_ip, count=2, timeout=3)[:1] == [(vm_ip, vm.mac)]
        assert reaches(vm, l2_ip) and on_vlan.ping(vm_ip, count=3, timeout=1) == 3
        assert transfer(on_vlan, vm, tmp_path, 1 << 20) and transfer(vm, on_vlan, tmp_path, 1 << 20)

        # Across the router on the gateway chassis and Geneve to the overlay pod.
        assert reaches(vm, ov_ip) and on_overlay.ping(vm_ip, count=3, timeout=1) == 3
        wait_for(lambda: "1 received" in df_ping(vm, ov_ip, 1400), timeout=WAIT, interval=0.2,
                 what="a 1400-byte DF packet across")
        out = wait_for(lambda: (lambda o: o if "Frag needed" in o else None)(df_ping(vm, ov_ip, 1450)),
                       timeout=WAIT, interval=0.2, what="fragmentation needed for a 1450-byte DF packet")
        assert "Frag needed and DF set (mtu = 1400)" in out, out
        t1 = time.monotonic()
        assert transfer(on_overlay, vm, tmp_path, 10 << 20) and transfer(vm, on_overlay, tmp_path, 10 << 20)
        both_ways = time.monotonic() - t1

        # Another tenant's VM: its own gateway (the positive control), none of these pods.
        stranger = other.vm(dp, "vm-stranger")
        assert reaches(stranger, other.gateway)
        for ip in (l2_ip, ov_ip):
            assert stranger.ping(ip, count=3, timeout=1) == 0
        assert stranger.arping(l2_ip, count=2, timeout=2) == []
        assert stranger.ping(other.gateway, count=2, timeout=1) == 2
        print(f"\n[real pods] two pods Ready on {node} in {pods_ready:.1f}s (scheduler, kubelet, Kube-OVN's CNI and "
              f"agent); VM <-> VLAN pod ARP/ping/TCP both ways; VM <-> overlay pod across Geneve: ping, DF 1450 "
              f"answered (mtu 1400), 10 MiB both ways in {both_ways:.1f}s")


def test_resilience_kube_ovn_cni_and_kube_ovn_controller_restarted_under_a_pinging_vm(bed, dp, admin):
    """The environment suite's resilience phase: with a VM pinging its gateway and an overlay
    pod, kube-ovn-cni is restarted on every trunk node, then kube-ovn-controller; no
    allocation changes and both probes answer again."""
    a = admin
    tk = kubelet_of(bed)
    node = tk.node.name
    t = tenant_served_elsewhere(a, dp, node, 3420)
    n = t.subnet(94)
    overlay = t.overlay_subnet(95)
    with gateway_controller(bed):
        n.wait("Ready", "Ready")
        vm = n.vm(dp, "vm-resilient")
        assert reaches(vm, n.gateway)
        n.settled(bed)
        pod = real_pod(tk, a.core, t.ns, overlay, "pod-resilient")
        pod_ip = pod.address.split("/")[0]
        assert reaches(vm, pod_ip)
        before = {"vlan": n.network()["status"]["vlan"], "vm": vm.address, "pod": pod.address,
                  "vlan_object": a.co.get_cluster_custom_object("kubeovn.io", "v1", "vlans", n.sub)["spec"]["id"]}
        gw, to_pod = Prober(vm, "ping", n.gateway), Prober(vm, "ping", pod_ip)
        try:
            wait_for(lambda: gw.replies and to_pod.replies, timeout=WAIT, what="both probes answered")
            start = time.monotonic()
            agents_at = time.monotonic()
            for agent in dp.agents.values():
                agent.stop()
                agent.start()
            for agent in dp.agents.values():
                sock = agent.chassis.rundir / "kube-ovn-daemon.sock"
                wait_for(lambda s=sock: s.exists(), timeout=WAIT, what=f"{agent.chassis.name}'s agent serving again")
            agents_done = time.monotonic()
            bed.stop_peer(KUBE_OVN)
            bed.start_peer(KUBE_OVN)
            kubeovn_done = time.monotonic()
            # Both paths answer again after the restarts (a run of 10 consecutive replies).
            for p in (gw, to_pod):
                wait_for(lambda p=p: p.steady_after(kubeovn_done, 10), timeout=WAIT, what="steady replies again")
            end = time.monotonic()
            gaps = {"gateway": gw.longest_gap(start, end), "overlay pod": to_pod.longest_gap(start, end)}
            lost = {"gateway": gw.lost(), "overlay pod": to_pod.lost()}
        finally:
            gw.stop()
            to_pod.stop()
        after = {"vlan": n.network()["status"]["vlan"], "vm": vm.address,
                 "pod": f"{a.core.read_namespaced_pod(pod.name, t.ns).status.pod_ip}/{pod.address.split('/')[1]}",
                 "vlan_object": a.co.get_cluster_custom_object("kubeovn.io", "v1", "vlans", n.sub)["spec"]["id"]}
        assert after == before
        assert agent_port(dp, node, f"{pod.name}.{t.ns}") is not None
        assert vm.ping(n.gateway, count=3, timeout=1) == 3 and vm.ping(pod_ip, count=3, timeout=1) == 3
        rows = ovsdb_rows(bed.sbctl, "Port_Binding", f"logical_port={pod.name}.{t.ns}")
        assert rows and rows[0].get("chassis")
        print(f"\n[real pods] resilience: {len(dp.agents)} kube-ovn-cni restarted in {agents_done - agents_at:.1f}s, "
              f"kube-ovn-controller in {kubeovn_done - agents_done:.1f}s; longest gap {gaps}, lost {lost}; "
              f"allocations unchanged {before}")


def test_a_trunk_link_lost_under_a_live_underlay_is_invisible_to_ovn_and_the_documented_remedy_moves_the_gateway(
        bed, dp, admin):
    """docs/operations.md "A trunk link lost": the active trunk node loses its trunk link while
    its underlay stays up. OVN's BFD runs over Geneve, so nothing fails over: the node keeps
    ``cr-`` (the SB shows it serving, so status stays Ready), the VM's ARP for its gateway goes
    unanswered, and Kube-OVN's real agent reports nothing (the ready label stays, the
    ProviderNetwork still lists the node, no Event names it). The documented remedy: remove
    the node's label the ProviderNetwork's selector matches; the agent then removes the ready
    label, the controller drops the chassis once the trunk hold-down ends (0 here), OVN moves
    ``cr-`` to the next chassis and the VM is answered. Measured: from the selector label's
    removal to the agent's removal of the ready label, and to the first ARP answer."""
    a = admin
    n = Tenant(a, 3430).subnet(96)
    label = f"{DATAPLANE_PROVIDER}.provider-network.kubernetes.io/ready"
    with gateway_controller(bed, ovn_sb_address=bed.sb_tcp):
        vm, cut = serving_vm(n, bed, dp, "vm-link")
        active = cut.system_id

        def pn_status() -> dict:
            return a.co.get_cluster_custom_object(*KUBEOVN, "provider-networks", DATAPLANE_PROVIDER).get("status") or {}

        # kube-ovn-controller writes the ProviderNetwork's status from the labels every 30 s.
        wait_for(lambda: cut.name in (pn_status().get("readyNodes") or []), timeout=WAIT,
                 what=f"the ProviderNetwork's status listing {cut.name} ready")
        cut_at = time.time()
        dp.set_trunk_link(cut, False)
        try:
            assert vm.arping(n.gateway, count=10, timeout=10) == []  # 10 s: nothing answers
            assert n.cr_chassis(bed) == active  # no failover: BFD over the underlay is up
            st = n.network()["status"]
            assert reason(n.network(), "Ready")[:2] == ("True", "Ready") and st["servingChassis"] == active
            # What the real agent says about the cut after 10 s: nothing.
            assert (a.core.read_node(cut.name).metadata.labels or {}).get(label) == "true"
            st_pn = pn_status()
            assert cut.name in (st_pn.get("readyNodes") or []), st_pn
            def when(e) -> float:
                at = e.last_timestamp or e.event_time
                return at.timestamp() if at else 0.0

            events = [e for e in a.core.list_event_for_all_namespaces().items
                      if e.involved_object.name in (cut.name, DATAPLANE_PROVIDER) and when(e) >= cut_at]
            assert events == [], [f"{e.reason}: {e.message}" for e in events]

            arp = Prober(vm, "arping", n.gateway)
            try:
                removed = time.monotonic()
                a.core.patch_node(cut.name, {"metadata": {"labels": {bed.TRUNK_LABEL: None}}})
                wait_for(lambda: (a.core.read_node(cut.name).metadata.labels or {}).get(label) is None,
                         timeout=WAIT, interval=0.2, what="Kube-OVN's agent removing the ready label")
                unlabelled = time.monotonic() - removed
                wait_for(lambda: arp.replies, timeout=WAIT, interval=0.1, what="an ARP answer from another chassis")
                answered = arp.replies[0] - removed
            finally:
                arp.stop()
            # The SB's binding follows the claim that answered: awaited, it may lag the ARP.
            wait_for(lambda: n.cr_chassis(bed) not in (None, active), timeout=WAIT,
                     what="cr- bound to another chassis")
            moved = n.cr_chassis(bed)
            assert moved not in (None, active)
            wait_for(lambda: n.network()["status"].get("servingChassis") == moved, timeout=WAIT,
                     what="status.servingChassis on the new chassis")
            print(f"\n[wire] trunk link of {active} down: 10/10 ARP unanswered, cr- stayed, status Ready, the agent "
                  f"kept the ready label and wrote no Event (ProviderNetwork readyNodes "
                  f"{st_pn.get('readyNodes')}); selector label removed: the agent removed the ready "
                  f"label after {unlabelled:.1f}s, first ARP answer after {answered:.2f}s, from {moved}")
        finally:
            # The last test of its bed: the node goes back, the agent labels it again at its
            # next pass (not awaited).
            dp.set_trunk_link(cut, True)
            a.core.patch_node(cut.name, {"metadata": {"labels": {bed.TRUNK_LABEL: "true"}}})
