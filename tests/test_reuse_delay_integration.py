"""The VLAN reuse delay against the real API server (product-decisions.md §8 "VLAN reuse
delay"; issue 15, item 5): a released ID is not handed out again before the delay, the
record lives on the zone (a restart neither drops nor extends it), and allocation still
picks the lowest eligible ID.

A zone of three IDs (1300-1302) on a provider of its own; the delay is 12 s so the test can
wait it out. Networks have no Subnet or pool: a deleted one releases its VLAN at once.
"""

from __future__ import annotations

import datetime as dt

import pytest
from kubernetes.client.rest import ApiException

from controller import names
from controller.rfc3339 import parse
from hack.tools.objects import PX, Admin, reason, unique, wait_condition
from hack.tools.wait import wait_for
from tests.support.controller import running_controller

pytestmark = pytest.mark.integration

DELAY = 12.0


def vid(admin: Admin, ns: str, net: str) -> int:
    return wait_condition(admin, ns, net, "VLANAllocated", "Allocated", 40)["status"]["vlan"]


def gone(admin: Admin, ns: str, net: str) -> None:
    def check() -> bool:
        try:
            admin.network(ns, net)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(check, timeout=40, what=f"{net} deleted")


def test_a_released_id_waits_out_the_delay_across_a_restart(admin_client, cluster, unique_namespace):
    admin, ns = Admin(admin_client), unique_namespace
    provider, zone = unique("pn")[:12], unique("zone")
    admin.create_provider_network(provider)
    admin.create_zone(zone, provider, ["1300-1302"])
    opts = dict(vlan_reuse_delay=DELAY)
    with running_controller(cluster, **opts):
        admin.create_network(ns, "a", zone, unique("sub"))
        assert vid(admin, ns, "a") == 1300
        admin.co.delete_namespaced_custom_object(*PX, ns, "proxmoxnetworks", "a")
        gone(admin, ns, "a")
        record = admin.zone(zone)["metadata"]["annotations"][names.ANNOTATION_RELEASED_VLANS]
        held, _, until_text = record.partition("@")
        until = parse(until_text)
        assert held == "1300" and until is not None
        # The lowest eligible ID, not the held one.
        admin.create_network(ns, "b", zone, unique("sub"))
        assert vid(admin, ns, "b") == 1301
        z = wait_for(lambda: (o := admin.zone(zone)).get("status", {}).get("vlansHeldForReuse") and o,
                     timeout=30, what="the zone shows the held ID")
        assert z["status"]["vlansHeldForReuse"] == [{"vlan": 1300, "until": until_text}]
    # A restart within the delay keeps it exactly.
    with running_controller(cluster, **opts):
        admin.create_network(ns, "c", zone, unique("sub"))
        assert vid(admin, ns, "c") == 1302
        admin.create_network(ns, "d", zone, unique("sub"))
        obj = wait_condition(admin, ns, "d", "VLANAllocated", "ZoneExhausted", 40)
        if dt.datetime.now(dt.timezone.utc) < until:
            assert reason(obj, "VLANAllocated") == (
                "False", "ZoneExhausted",
                f'zone "{zone}" has no free VLAN in 1300-1302; 1 released ID(s) held by the VLAN reuse delay, '
                f"free again from {until_text}")
        assert admin.zone(zone)["metadata"]["annotations"][names.ANNOTATION_RELEASED_VLANS] == record
        # Once the delay is over the ID goes to the waiting network, not before.
        assert vid(admin, ns, "d") == 1300
        made = parse(admin.vlan(admin.network(ns, "d")["spec"]["subnet"])["metadata"]["creationTimestamp"])
        assert made >= until.replace(microsecond=0)
        wait_for(lambda: names.ANNOTATION_RELEASED_VLANS not in (admin.zone(zone)["metadata"].get("annotations") or {}),
                 timeout=30, what="the expired record pruned")
        # The zone pass prunes the annotation first and writes its status on the replan.
        wait_for(lambda: "vlansHeldForReuse" not in admin.zone(zone).get("status", {}), timeout=30,
                 what="the zone no longer shows the held ID")
