"""The namespace annotation's own reconciler on a real kube-apiserver (issue 14 part 3).

reference-behaviour.md §5.9: the annotation lists every network's ``<bridge>/<vlan>/<ipPool>``
and is written before the network's status shows the VLAN (admission reads it). The
reconciler is keyed by namespace, so a burst of networks in one namespace shares its
patches instead of one read-modify-write patch per network pass.
"""

from __future__ import annotations

import concurrent.futures as cf

import pytest

from controller.reconcile.namespaces import NAMESPACE_WRITE_WINDOW
from hack.tools.audit import format_writes, write_marker, writes_before
from hack.tools.objects import Admin, reason, unique
from hack.tools.wait import wait_for
from tests.support.controller import running_controller

pytestmark = pytest.mark.integration

ANNOTATION = "proxmox.cozystack.io/networks"
N = 60


@pytest.fixture
def admin(admin_client):
    return Admin(admin_client)


@pytest.fixture
def ctl(cluster):
    with running_controller(cluster) as mgr:
        yield mgr


def test_a_burst_in_one_namespace_coalesces_its_patches_and_lists_every_vlan_first(
        admin, cluster, ctl, unique_namespace):
    ns = unique_namespace
    provider = unique("pn")[:12]
    admin.create_provider_network(provider, ready=True, ready_nodes=["node-a"])
    zname = unique("zone")
    admin.create_zone(zname, provider, ["1000-1099"])
    before = write_marker(cluster)
    with cf.ThreadPoolExecutor(4) as ex:
        list(ex.map(lambda i: admin.create_network(ns, f"n{i}", zname, unique("s"), pool=f"p{i % 3}"), range(N)))

    def converged():
        items = admin.co.list_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks")["items"]
        # Read after the list: every VLAN a status showed was listed before that status
        # was written, and nothing leaves the annotation during the burst.
        listed = (admin.core.read_namespace(ns).metadata.annotations or {}).get(ANNOTATION, "").split(",")
        for i in items:
            st = i.get("status") or {}
            if st.get("vlan"):
                triple = f'{st["bridge"]}/{st["vlan"]}/{i["spec"]["ipPool"]}'
                assert triple in listed, f'{i["metadata"]["name"]} shows {triple}; the annotation lists {listed}'
        done = [i for i in items if (reason(i, "VLANAllocated") or ("", ""))[1] == "Allocated"]
        return items if len(done) == N else None

    items = wait_for(converged, timeout=120, what=f"{N} networks allocated")
    want = ",".join(sorted(f'vmbr1/{i["status"]["vlan"]}/{i["spec"]["ipPool"]}' for i in items))
    wait_for(lambda: (admin.core.read_namespace(ns).metadata.annotations or {}).get(ANNOTATION) == want,
             what="the annotation lists every network")
    done = ctl.resyncs_completed
    ctl.enqueue_all()
    wait_for(lambda: ctl.resyncs_completed > done, what="resync complete")
    marker = write_marker(cluster)
    writes = writes_before(cluster, cluster.controller_user, marker, since_marker=before)
    patches = [w for w in writes if (w.verb, w.resource, w.name) == ("patch", "namespaces", ns)]
    # One patch per network pass was N. A namespace is passed (so patched) at most once per
    # window (NAMESPACE_WRITE_WINDOW, 1 s) and each patch carries every triple asked for
    # until then: a few patches for the whole burst, however long the burst took (+2: the
    # first and the last request may each arrive late within their window).
    received = sorted(w.received for w in patches)
    span = (received[-1] - received[0]).total_seconds() if received else 0.0
    assert 1 <= len(patches) <= span / NAMESPACE_WRITE_WINDOW + 2 and len(patches) < N / 2, format_writes(patches)
    statuses = [w for w in writes if (w.verb, w.resource, w.subresource) == ("update", "proxmoxnetworks", "status")]
    assert len(statuses) >= N, format_writes(writes)
