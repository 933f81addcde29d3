"""The ClusterRole and the leader-election Role grant exactly what the code uses.

A scenario drives every code path that talks to the API server (allocation, Subnet
finalizer, deletion through release, Event aggregation, the egress-gateway chain, leader
election) as the controller user; the API server's audit log then lists every (group,
resource, verb) that user sent. Each grant of manifests/rbac/ must appear there, and no
request of the controller user may have been refused (403). In one process it runs last
(file name), so the whole session's requests count too; under hack/test.sh's workers it runs
where the schedule puts it, with the requests of its worker's bed so far: it passes on its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from controller import names
from controller.runtime.kube import KubeWriter
from controller.runtime.leader import DEFAULT_LEASE_NAMESPACE, LeaderElector
from hack.tools.audit import read_events
from tests.support.controller import running_controller
from hack.tools.objects import Admin, unique
from hack.tools.wait import wait_for
from tests.test_egress_integration import annotation, chain
from tests.test_lifecycle_integration import Env, ready_network

pytestmark = pytest.mark.integration

RBAC = Path(__file__).resolve().parent.parent / "manifests" / "rbac"


def granted() -> set[tuple[str, str, str]]:
    out = set()
    for f in ("02-clusterrole.yaml", "03-leader-election.yaml"):
        for doc in yaml.safe_load_all((RBAC / f).read_text()):
            if doc and doc.get("kind") in ("ClusterRole", "Role") and doc["metadata"]["name"].startswith("proxmox-network-controller"):
                for rule in doc.get("rules") or []:
                    for g in rule.get("apiGroups") or []:
                        for r in rule.get("resources") or []:
                            for v in rule.get("verbs") or []:
                                out.add((g, r, v))
    return out


def used_by(cluster, user: str, since: str) -> tuple[set[tuple[str, str, str]], list[dict]]:
    """Everything ``user`` requested in the session, and its refusals since ``since``
    (RFC 3339; other tests make deliberate forbidden requests before this one)."""
    used, refused = set(), []
    for ev in read_events(cluster):
        if (ev.get("user") or {}).get("username") != user or ev.get("stage") != "ResponseComplete":
            continue
        ref = ev.get("objectRef") or {}
        if not ref.get("resource"):
            continue  # discovery and other non-resource URLs
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        status = ev.get("responseStatus") or {}
        # 403 for content in a namespace being deleted is admission, not RBAC.
        if (status.get("code") == 403 and "being terminated" not in (status.get("message") or "")
                and (ev.get("requestReceivedTimestamp") or "") >= since):
            refused.append(ev)
        used.add((ref.get("apiGroup") or "", resource, ev.get("verb")))
    return used, refused


def test_rbac_grants_exactly_what_the_code_uses(admin_client, cluster, unique_namespace):
    import datetime as dt

    since = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    admin = Admin(admin_client)
    env = Env(admin, unique_namespace)
    ns, sub = unique_namespace, unique("sub")
    # The reuse delay on (the CLI's default is 10 min; Options' is off): the release records
    # the ID on the zone, a fresh GET and a patch of the zone (controller/apply/vlans.py). Issue 28:
    # under workers the module of the reuse delay may not share this worker's bed.
    with running_controller(cluster, subnet_prune_timeout=3.0, vlan_reuse_delay=600.0) as ctl:
        ready_network(env, "rbac", sub, "p")
        # Event aggregation (create, then patch of the count).
        for _ in range(2):
            admin.set_vlan_status(sub, {"conflict": True, "subnets": [sub]})
            env.wait("rbac", "VLANAllocated", "VLANConflict")
            admin.set_vlan_status(sub, {"conflict": False, "subnets": [sub]})
            env.wait("rbac", "VLANAllocated", "Allocated")
        # The egress-gateway chain and the pod patch.
        pod = chain(admin_client, ns, "gw-rbac")
        wait_for(lambda: annotation(admin_client, ns, pod) == "false", what="pod patched")
        # Deletion through release: fresh reads, Subnet finalizer off, timers, Vlan delete.
        admin.co.delete_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks", "rbac")
        env.wait("rbac", "Ready", "SubnetStillExists")
        env.delete_subnet(sub)
        env.gone("rbac", timeout=40)
        wait_for(lambda: names.ANNOTATION_RELEASED_VLANS in (admin.zone(env.zone)["metadata"].get("annotations") or {}),
                 what="the released ID recorded on the zone")
        ctl.events.flush()
    # The gateway step's informers (Nodes, for the trunk chassis): started with gateway
    # management on, held until the API server has the watch, so this test covers the
    # grant on its own too (in the full session the gateway tests use it as well).
    with running_controller(cluster, manage_gateway=True, ovn_nb_address=cluster.nb_tcp):
        wait_for(lambda: any((ev.get("user") or {}).get("username") == cluster.controller_user
                             and ev.get("verb") == "watch" and (ev.get("objectRef") or {}).get("resource") == "nodes"
                             and (ev.get("requestReceivedTimestamp") or "") >= since
                             for ev in read_events(cluster)), timeout=60, what="the controller's watch of Nodes")
    # Leader election as the controller user: acquire, renew, release.
    api = cluster.api_client("controller")
    try:
        el = LeaderElector(KubeWriter(api), DEFAULT_LEASE_NAMESPACE, unique("rbac-lease"), identity="rbac-test",
                           lease_duration=3, renew_deadline=2, retry_period=0.5,
                           on_started_leading=lambda: None, on_stopped_leading=lambda: None)
        el.step()
        el.step()
        el.stop(release=True)
        el.step()
    finally:
        api.close()

    used, refused = used_by(cluster, cluster.controller_user, since)
    assert not refused, [(e.get("verb"), e.get("requestURI")) for e in refused]
    unused = sorted(g for g in granted() if g not in used)
    assert unused == [], f"granted but never used by the controller: {unused}"
