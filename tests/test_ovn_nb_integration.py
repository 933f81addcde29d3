"""ovn.nb.NBClient against the real OVN NB ovsdb-server of the test bed."""

from __future__ import annotations

import json
import secrets
import socket

import pytest

from ovn import planner
from ovn.nb import SUCCESS, NBClient
from ovn.ovsdb import NBError, NBNotSynced, parse_addresses

from hack.tools.wait import wait_for

pytestmark = pytest.mark.integration


def _free_tcp_address() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"tcp:127.0.0.1:{port}"


@pytest.fixture
def names():
    sfx = secrets.token_hex(3)
    return {"vpc": f"vpc-{sfx}", "subnet": f"sub-{sfx}", "router": f"lr-{sfx}"}


@pytest.fixture
def nb(cluster):
    c = NBClient(f"{cluster.nb_tcp}").start()
    try:
        assert c.wait_synced(15), c.last_error
        yield c
    finally:
        c.stop()


def test_parse_addresses_orders_and_validates():
    assert parse_addresses(" tcp:127.0.0.1:6641, ,unix:/run/nb.sock") == [
        "tcp:127.0.0.1:6641",
        "unix:/run/nb.sock",
    ]
    with pytest.raises(NBError, match="no OVSDB address given"):
        parse_addresses(" , ")
    with pytest.raises(NBError, match="want ssl"):
        parse_addresses("http://x")
    with pytest.raises(NBError, match="missing port"):
        parse_addresses("tcp:127.0.0.1")


def test_not_synced_before_connect_is_not_no_rows():
    c = NBClient(_free_tcp_address())  # nothing listens there
    c.start()
    try:
        assert not c.synced()
        with pytest.raises(NBNotSynced):
            c.snapshot()
        with pytest.raises(NBNotSynced):
            c.transact(lambda txn, idl: None)
    finally:
        c.stop()


def test_addresses_tried_in_order_unix(cluster):
    dead = _free_tcp_address()
    c = NBClient([dead, cluster.nb_unix]).start()
    try:
        assert c.wait_synced(20), c.last_error
        assert c.remote == cluster.nb_unix
        snap = c.snapshot()
        assert set(snap) == {"Logical_Router_Port", "HA_Chassis_Group", "HA_Chassis"}
    finally:
        c.stop()


def test_router_port_appears_in_snapshot(cluster, nb, names):
    lrp = planner.router_port_name(names["vpc"], names["subnet"])
    cluster.nbctl("lr-add", names["router"])
    try:
        cluster.nbctl("lrp-add", names["router"], lrp, "00:00:00:00:ab:01", "10.9.0.1/24")

        def seen():
            rows = [r for r in nb.snapshot()["Logical_Router_Port"].values() if r["name"] == lrp]
            return rows[0] if rows else None

        row = wait_for(seen)
        assert row["ha_chassis_group"] == []
        assert row["gateway_chassis"] == []
        assert set(row) == {"_uuid", "name", "ha_chassis_group", "gateway_chassis", "options"}
    finally:
        cluster.nbctl("--if-exists", "lr-del", names["router"])


def test_transact_creates_group_with_two_chassis(cluster, nb, names):
    vpc, subnet = names["vpc"], names["subnet"]
    lrp = planner.router_port_name(vpc, subnet)
    network = f"ns-{names['vpc']}/net"
    trunk = [planner.TrunkNode("worker1", "ch-w1"), planner.TrunkNode("worker2", "ch-w2")]
    cluster.nbctl("lr-add", names["router"])
    try:
        cluster.nbctl("lrp-add", names["router"], lrp, "00:00:00:00:ab:02", "10.9.1.1/24")
        wait_for(lambda: any(r["name"] == lrp for r in nb.snapshot()["Logical_Router_Port"].values()))

        plan = planner.plan_group(network, vpc, subnet, trunk, [])
        assert plan.allowed and plan.name == f"px-{vpc}-{subnet}"

        def write(txn, idl):
            port = next(r for r in idl.tables["Logical_Router_Port"].rows.values() if r.name == lrp)
            port.verify("ha_chassis_group")
            port.verify("gateway_chassis")
            members = []
            for ch, prio in plan.chassis:
                row = txn.insert(idl.tables["HA_Chassis"])
                row.chassis_name = ch
                row.priority = prio
                members.append(row)
            group = txn.insert(idl.tables["HA_Chassis_Group"])
            group.name = plan.name
            group.external_ids = plan.external_ids
            group.ha_chassis = members
            port.ha_chassis_group = [group]
            return group

        res = nb.transact(write)
        assert res.status == SUCCESS, res.error
        group_uuid = res.uuid_of(res.value)

        # Read back with ovn-nbctl (the server's view, not our cache).
        out = cluster.nbctl(
            "--format=json", "--columns=_uuid,name,external_ids,ha_chassis",
            "find", "HA_Chassis_Group", f"name={plan.name}",
        )
        data = json.loads(out)
        assert len(data["data"]) == 1
        row = dict(zip(data["headings"], data["data"][0]))
        assert row["_uuid"] == ["uuid", group_uuid]
        assert dict(row["external_ids"][1]) == {"owner": "proxmox-network", "network": network}
        listing = cluster.nbctl("ha-chassis-group-list")
        assert "ch-w1" in listing and "ch-w2" in listing
        prios = {}
        for ch in ("ch-w1", "ch-w2"):
            prios[ch] = int(
                cluster.nbctl("--bare", "--columns=priority", "find", "HA_Chassis", f"chassis_name={ch}")
                .split()[-1]
            )
        assert prios == dict(plan.chassis)
        assert cluster.nbctl("--bare", "--columns=ha_chassis_group", "list", "Logical_Router_Port", lrp).strip() == group_uuid

        # The cache reflects it, and the planner reads it back as ours (steady state).
        def resolved():
            return planner.groups_from_snapshot(nb.snapshot()).get(plan.name)

        view = wait_for(resolved)
        assert view.uuid == group_uuid
        assert sorted(view.chassis) == sorted(plan.chassis)
        again = planner.plan_group(network, vpc, subnet, trunk, [view])
        assert again.allowed and not again.claim.adopt
        assert again.chassis == plan.chassis
    finally:
        cluster.nbctl("--if-exists", "lr-del", names["router"])
        for u in cluster.nbctl(
            "--bare", "--columns=_uuid", "find", "HA_Chassis_Group", f"name=px-{vpc}-{subnet}"
        ).split():
            cluster.nbctl("--if-exists", "destroy", "HA_Chassis_Group", u)


def _tcp_port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_resync_after_connection_reset(cluster, names):
    from tests.support.tcpproxy import TCPProxy

    with TCPProxy("127.0.0.1", _tcp_port(cluster.nb_tcp)) as proxy:
        c = NBClient(f"tcp:{proxy.address}", probe_interval_ms=1000).start()
        try:
            assert c.wait_synced(15), c.last_error
            assert c.sync_count == 1
            proxy.cut()
            lrp = planner.router_port_name(names["vpc"], names["subnet"])
            cluster.nbctl("lr-add", names["router"])  # changed while we may be away
            cluster.nbctl("lrp-add", names["router"], lrp, "00:00:00:00:ab:04", "10.9.3.1/24")
            wait_for(lambda: c.sync_count >= 2 and c.synced(), timeout=20)
            wait_for(lambda: any(r["name"] == lrp for r in c.snapshot()["Logical_Router_Port"].values()))
        finally:
            c.stop()
            cluster.nbctl("--if-exists", "lr-del", names["router"])


def test_silent_drop_is_detected_and_cache_not_served(cluster):
    from tests.support.tcpproxy import TCPProxy

    with TCPProxy("127.0.0.1", _tcp_port(cluster.nb_tcp)) as proxy:
        c = NBClient(f"tcp:{proxy.address}", probe_interval_ms=1000).start()
        try:
            assert c.wait_synced(15), c.last_error
            proxy.blackhole()
            wait_for(lambda: not c.synced(), timeout=20)
            with pytest.raises(NBNotSynced):
                c.snapshot()
            proxy.restore()
            proxy.cut()  # the frozen connections are dead anyway
            wait_for(c.synced, timeout=30)
            assert c.snapshot() is not None
        finally:
            c.stop()


def test_on_change_sees_router_port_rows(cluster, names):
    events = []
    c = NBClient(cluster.nb_unix,
                 on_row=lambda ev, row, old: events.append((ev, row._table.name, str(row.uuid)))).start()
    lrp = planner.router_port_name(names["vpc"], names["subnet"])
    try:
        assert c.wait_synced(15), c.last_error
        cluster.nbctl("lr-add", names["router"])
        cluster.nbctl("lrp-add", names["router"], lrp, "00:00:00:00:ab:03", "10.9.2.1/24")
        uuid = cluster.nbctl("--bare", "--columns=_uuid", "find", "Logical_Router_Port", f"name={lrp}").strip()
        wait_for(lambda: ("create", "Logical_Router_Port", uuid) in events)
        # Logical_Router is not registered: no events for it
        assert all(t in ("Logical_Router_Port", "HA_Chassis_Group", "HA_Chassis") for _, t, _ in events)
    finally:
        c.stop()
        cluster.nbctl("--if-exists", "lr-del", names["router"])


# --------------------------------------------------------------------------- TLS


def _pki(tmp_path):
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def pem_key(k):
        return k.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def ca(cn):
        k = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        c = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(k.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(k, hashes.SHA256())
        )
        return k, c

    def leaf(ca_k, ca_c, cn, eku):
        k = ec.generate_private_key(ec.SECP256R1())
        c = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
            .issuer_name(ca_c.subject).public_key(k.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([eku]), critical=False)
            .sign(ca_k, hashes.SHA256())
        )
        return pem_key(k), c.public_bytes(serialization.Encoding.PEM)

    ca_k, ca_c = ca("test-ca")
    other_k, other_c = ca("other-ca")
    pem = serialization.Encoding.PEM
    srv_key, srv_cert = leaf(ca_k, ca_c, "ovn", ExtendedKeyUsageOID.SERVER_AUTH)
    cli_key, cli_cert = leaf(ca_k, ca_c, "ovn", ExtendedKeyUsageOID.CLIENT_AUTH)
    d = tmp_path / "server-pki"
    d.mkdir()
    for n, data in (("key.pem", srv_key), ("cert.pem", srv_cert), ("ca.pem", ca_c.public_bytes(pem))):
        (d / n).write_bytes(data)
    return {
        "server_dir": d,
        "cacert": ca_c.public_bytes(pem),
        "other_cacert": other_c.public_bytes(pem),
        "cert": cli_cert,
        "key": cli_key,
    }


@pytest.fixture
def ssl_nb(tmp_path):
    import subprocess

    from hack.bed import NB_SCHEMA

    pki = _pki(tmp_path)
    db = tmp_path / "nb.db"
    subprocess.run(["ovsdb-tool", "create", str(db), str(NB_SCHEMA)], check=True, capture_output=True)
    port = _tcp_port(_free_tcp_address())
    d = pki["server_dir"]
    proc = subprocess.Popen(
        [
            "ovsdb-server", str(db), f"--remote=pssl:{port}:127.0.0.1",
            f"--private-key={d / 'key.pem'}", f"--certificate={d / 'cert.pem'}", f"--ca-cert={d / 'ca.pem'}",
            f"--unixctl={tmp_path / 'nb.ctl'}", f"--log-file={tmp_path / 'nb.log'}", "-vconsole:off",
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        def listening():
            s = socket.socket()
            try:
                return s.connect_ex(("127.0.0.1", port)) == 0
            finally:
                s.close()

        wait_for(listening)
        yield f"ssl:127.0.0.1:{port}", pki, tmp_path
    finally:
        proc.terminate()
        proc.wait(10)


def test_tls_connect_with_private_material(ssl_nb):
    import os
    import stat

    from ovn.tls import set_tls_material

    address, pki, tmp = ssl_nb
    paths = set_tls_material(tmp / "tls", pki["cacert"], pki["cert"], pki["key"])
    assert stat.S_IMODE(os.stat(tmp / "tls").st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(p).st_mode) == 0o600 for p in paths.values())
    c = NBClient(address).start()
    try:
        assert c.wait_synced(15), c.last_error
        assert c.snapshot()["HA_Chassis_Group"] == {}
    finally:
        c.stop()


def test_tls_wrong_ca_never_syncs(ssl_nb):
    from ovn.tls import set_tls_material

    address, pki, tmp = ssl_nb
    set_tls_material(tmp / "tls-bad", pki["other_cacert"], pki["cert"], pki["key"])
    c = NBClient(address).start()
    try:
        assert not c.wait_synced(3)
        assert address in c.last_error
        assert "BEGIN" not in c.last_error
        with pytest.raises(NBNotSynced):
            c.snapshot()
    finally:
        c.stop()


@pytest.fixture
def relay_nb(cluster, tmp_path):
    """An OVSDB relay of the bed's NB (``ovsdb-server relay:OVN_Northbound:<nb>``), as an
    operator may put in front of a large NB cluster."""
    import subprocess

    sock = tmp_path / "relay.sock"
    proc = subprocess.Popen(
        ["ovsdb-server", f"relay:OVN_Northbound:{cluster.nb_unix}", f"--remote=punix:{sock}",
         f"--unixctl={tmp_path / 'relay.ctl'}", f"--log-file={tmp_path / 'relay.log'}", "-vconsole:off"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(sock.exists, what="the relay's socket")
        yield f"unix:{sock}"
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_relay_is_refused_with_its_reason(relay_nb):
    """Issue 26 item 7: python-ovs refuses a relay when the client wants the leader and says
    why only through OVS's vlog; the condition read ``OVN NB IDL is not synced: ``."""
    c = NBClient(relay_nb).start()
    try:
        wait_for(lambda: "relay" in c.last_error, timeout=20, what="the relay named in last_error")
        assert c.last_error == (
            f"OVN NB {relay_nb} is an OVSDB relay, and the controller writes to the NB cluster's leader only (a relay "
            "is never the leader): give --ovn-nb-address the addresses of the NB cluster's members")
        assert not c.synced()
        with pytest.raises(NBNotSynced, match="is an OVSDB relay"):
            c.snapshot()
    finally:
        c.stop()
    # The control: the same relay serves a client that does not ask for the leader.
    c = NBClient(relay_nb, leader_only=False).start()
    try:
        assert c.wait_synced(20), c.last_error
    finally:
        c.stop()


def test_transactions_queued_behind_a_hung_one_end_at_their_own_deadline(tmp_path):
    """Issue 26 item 7: the NB stops answering (SIGSTOP: a hung server, connections open);
    three passes' transactions submitted at once each end by their own deadline (2 s here,
    counted from the call, plus the owner thread's poll granularity), not one after the other
    (before: 2, 4, 6 s). None is known to be applied."""
    import os
    import signal
    import subprocess
    import threading
    import time

    from hack.bed import NB_SCHEMA
    from ovn.nb import TIMED_OUT

    db, sock = tmp_path / "nb.db", tmp_path / "nb.sock"
    subprocess.run(["ovsdb-tool", "create", str(db), str(NB_SCHEMA)], check=True, capture_output=True)
    proc = subprocess.Popen(["ovsdb-server", str(db), f"--remote=punix:{sock}", f"--unixctl={tmp_path / 'ctl'}",
                             f"--log-file={tmp_path / 'nb.log'}", "-vconsole:off"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    c = None
    try:
        wait_for(sock.exists, what="the NB's socket")
        c = NBClient(f"unix:{sock}").start()
        assert c.wait_synced(15), c.last_error
        os.kill(proc.pid, signal.SIGSTOP)
        took: dict[int, tuple[float, str]] = {}

        def one(i: int) -> None:
            def build(txn, idl):
                txn.insert(idl.tables["HA_Chassis_Group"]).name = f"hung-{i}"
            t0 = time.monotonic()
            r = c.transact(build, timeout=2.0)
            took[i] = (time.monotonic() - t0, r.status)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(s for _, s in took.values()) == [TIMED_OUT] * 3
        assert max(t for t, _ in took.values()) < 3.0, took
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        if c is not None:
            c.stop()
        proc.terminate()
        proc.wait(10)
