"""The read-only OVN SB reader (``ovn.sb.SBReader``, product-decisions.md §10) against the
bed's real SB and ovn-northd: the ``cr-`` binding of a router port as ovn-northd makes it and
a chassis claims it (``ovn-sbctl lsp-bind``, what ovn-controller's claim writes), a change
reported per port, a chassis removed, and only chassis-redirect bindings replicated."""

from __future__ import annotations

import secrets
import threading

import pytest

from hack.tools.wait import wait_for
from ovn.sb import SBReader

pytestmark = pytest.mark.integration

WAIT = 30.0


@pytest.fixture
def port(cluster):
    """A router with port ``<vpc>-<subnet>`` pointing at an HA chassis group (northd makes
    ``cr-<port>``), a logical switch with a VM-like port, and two SB chassis; all removed
    afterwards."""
    sfx = secrets.token_hex(3)
    vpc, lrp, group, ls = f"vpc-sb{sfx}", f"vpc-sb{sfx}-sub", f"px-vpc-sb{sfx}-sub", f"ls-sb{sfx}"
    chassis = [f"ch-sb{sfx}-a", f"ch-sb{sfx}-b"]
    cluster.nbctl("lr-add", vpc)
    cluster.nbctl("lrp-add", vpc, lrp, "0a:00:00:00:%02x:02" % int(sfx[:2], 16), "10.252.0.1/24")
    cluster.nbctl("ha-chassis-group-add", group)
    for i, ch in enumerate(chassis):
        cluster.nbctl("ha-chassis-group-add-chassis", group, ch, str(100 - 10 * i))
        cluster.sbctl("chassis-add", ch, "geneve", f"127.0.{int(sfx[:2], 16)}.{i + 1}")
        cluster.sbctl("set", "Chassis", ch, f"hostname=node-{ch}")
    uuid = cluster.nbctl("--bare", "--columns=_uuid", "find", "HA_Chassis_Group", f"name={group}").split()[0]
    cluster.nbctl("set", "Logical_Router_Port", lrp, f"ha_chassis_group={uuid}")
    cluster.nbctl("ls-add", ls)
    cluster.nbctl("lsp-add", ls, f"{ls}-vm")
    try:
        yield {"lrp": lrp, "chassis": chassis, "vm_port": f"{ls}-vm"}
    finally:
        cluster.nbctl("--if-exists", "lr-del", vpc)
        cluster.nbctl("--if-exists", "ls-del", ls)
        cluster.nbctl("--if-exists", "destroy", "HA_Chassis_Group", uuid)
        for ch in chassis:
            cluster.sbctl("--if-exists", "chassis-del", ch)


def test_the_reader_follows_the_cr_binding_and_replicates_nothing_else(cluster, port):
    lrp, (a, b) = port["lrp"], port["chassis"]
    changed: list[str] = []
    seen = threading.Event()

    def on_port(p: str) -> None:
        changed.append(p)
        seen.set()

    r = SBReader(cluster.sb_tcp, on_port=on_port).start()
    try:
        assert r.wait_synced(WAIT), r.client.last_error
        # northd made cr-<port>; nothing claims it yet.
        first = wait_for(lambda: (lambda x: x if x.present else None)(r.binding(lrp)), timeout=WAIT,
                         what=f"cr-{lrp} in the reader")
        assert (first.known, first.chassis, first.bound) == (True, "", False)
        cluster.sbctl("lsp-bind", f"cr-{lrp}", a)
        got = wait_for(lambda: (lambda x: x if x.chassis == a else None)(r.binding(lrp)), timeout=WAIT,
                       what=f"cr-{lrp} bound to {a}")
        assert (got.hostname, got.bound) == (f"node-{a}", True)
        assert got.since >= first.since
        assert lrp in changed
        # Another chassis claims it (an OVN failover).
        cluster.sbctl("lsp-unbind", f"cr-{lrp}")
        cluster.sbctl("lsp-bind", f"cr-{lrp}", b)
        wait_for(lambda: r.binding(lrp).chassis == b, timeout=WAIT, what=f"cr-{lrp} bound to {b}")
        # The chassis row goes (the SB's weak reference clears the binding).
        cluster.sbctl("chassis-del", b)
        wait_for(lambda: r.binding(lrp).present and r.binding(lrp).chassis == "", timeout=WAIT,
                 what="the binding cleared with its chassis")
        # Only chassis-redirect bindings are replicated (the monitor condition).
        wait_for(lambda: cluster.sbctl("--bare", "--columns=logical_port", "find", "Port_Binding",
                                       f"logical_port={port['vm_port']}").strip(), timeout=WAIT,
                 what="the VM port's binding in the SB")
        types = r.client.call(lambda idl: sorted({row.type for row in idl.tables["Port_Binding"].rows.values()}))
        assert types == ["chassisredirect"]
    finally:
        r.stop()


def test_an_unreachable_sb_is_unknown_never_unbound(cluster, port):
    r = SBReader("tcp:127.0.0.1:1").start()  # nothing listens there
    try:
        b = wait_for(lambda: (lambda x: x if "connect to OVN SB" in x.error else None)(r.binding(port["lrp"])),
                     timeout=WAIT, what="the connect error")
        assert (b.known, b.bound, b.present) == (False, False, False)
        assert "connect to OVN SB" in b.error
    finally:
        r.stop()
