"""The bed's OVN SB and ovn-northd: an HA chassis group on a router port yields the
chassis-redirect binding ``cr-<router port>`` in the SB, and clearing it removes it.

Only ovn-nbctl / ovn-sbctl against the real ovsdb-servers and the real ovn-northd; no
code of ours is under test here (it checks the bed the gateway-chassis tests stand on).
"""

from __future__ import annotations

import secrets

import pytest

from hack.tools.wait import wait_for

pytestmark = pytest.mark.integration

WAIT = 15.0  # seconds; northd usually needs a few milliseconds


def _port_bindings(cluster, logical_port: str) -> list[dict[str, str]]:
    """SB Port_Binding rows for ``logical_port`` as {"logical_port", "type"} dicts."""
    out = cluster.sbctl(
        "--bare", "--format=csv", "--no-headings", "--columns=logical_port,type",
        "find", "Port_Binding", f"logical_port={logical_port}",
    )
    rows = []
    for line in out.splitlines():
        if line.strip():
            lp, _, typ = line.partition(",")
            rows.append({"logical_port": lp, "type": typ})
    return rows


def _uuid_of(cluster, table: str, name: str) -> str:
    out = cluster.nbctl("--bare", "--columns=_uuid", "find", table, f"name={name}").split()
    assert len(out) == 1, (table, name, out)
    return out[0]


@pytest.fixture
def router_port(cluster):
    """A router ``vpc-t<sfx>`` with one port ``<vpc>-<subnet>`` and an HA chassis group
    (ch-a prio 100, ch-b prio 90), not yet linked. All of it is deleted afterwards."""
    sfx = secrets.token_hex(3)
    vpc, subnet = f"vpc-t{sfx}", f"sub-{sfx}"
    lrp, group = f"{vpc}-{subnet}", f"hcg-{vpc}-{subnet}"
    cluster.nbctl("lr-add", vpc)
    try:
        cluster.nbctl("lrp-add", vpc, lrp, "0a:00:00:00:%02x:01" % (int(sfx[:2], 16)), "10.251.0.1/24")
        cluster.nbctl("ha-chassis-group-add", group)
        cluster.nbctl("ha-chassis-group-add-chassis", group, "ch-a", "100")
        cluster.nbctl("ha-chassis-group-add-chassis", group, "ch-b", "90")
        yield {"vpc": vpc, "lrp": lrp, "group": group, "group_uuid": _uuid_of(cluster, "HA_Chassis_Group", group)}
    finally:
        cluster.nbctl("--if-exists", "lr-del", vpc)
        for uuid in cluster.nbctl("--bare", "--columns=_uuid", "find", "HA_Chassis_Group", f"name={group}").split():
            cluster.nbctl("--if-exists", "destroy", "HA_Chassis_Group", uuid)  # its HA_Chassis go with it


def test_ha_chassis_group_makes_and_removes_chassis_redirect_port(cluster, router_port):
    lrp, cr = router_port["lrp"], f"cr-{router_port['lrp']}"

    # Negative control: northd has processed the router port (its own binding is in the SB),
    # and without a group there is no chassis-redirect binding.
    wait_for(lambda: _port_bindings(cluster, lrp), timeout=WAIT, what=f"SB binding of {lrp}")
    assert _port_bindings(cluster, cr) == []

    # Link the group: northd adds cr-<port> of type chassisredirect.
    cluster.nbctl("set", "Logical_Router_Port", lrp, f"ha_chassis_group={router_port['group_uuid']}")
    rows = wait_for(lambda: _port_bindings(cluster, cr), timeout=WAIT, what=f"SB binding {cr}")
    assert rows == [{"logical_port": cr, "type": "chassisredirect"}]
    # The group itself is synced to the SB with both chassis' priorities.
    members = cluster.sbctl(
        "--bare", "--columns=ha_chassis", "find", "HA_Chassis_Group", f"name={router_port['group']}"
    ).split()
    prios = {cluster.sbctl("get", "HA_Chassis", m, "priority").strip() for m in members}
    assert prios == {"100", "90"}, members

    # Clear the pointer: the chassis-redirect binding goes away, the port's own binding stays.
    cluster.nbctl("clear", "Logical_Router_Port", lrp, "ha_chassis_group")
    wait_for(lambda: _port_bindings(cluster, cr) == [], timeout=WAIT, what=f"{cr} to leave the SB")
    assert _port_bindings(cluster, lrp)


def test_cleanup_leaves_no_bindings(cluster, router_port):
    """Deleting the router (as the fixture does) removes the port's SB binding too."""
    lrp = router_port["lrp"]
    wait_for(lambda: _port_bindings(cluster, lrp), timeout=WAIT, what=f"SB binding of {lrp}")
    cluster.nbctl("lr-del", router_port["vpc"])
    wait_for(lambda: _port_bindings(cluster, lrp) == [], timeout=WAIT, what=f"{lrp} to leave the SB")
