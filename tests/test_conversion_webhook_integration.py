"""Field report R8 (../shared/cases/field-reports.md): capmox serves ProxmoxMachine v1alpha2
through a conversion webhook; while the webhook fails, every LIST and WATCH of the converted
version fails whole. On a bed of its own (the test rewrites the ProxmoxMachine CRD): a
conversion webhook of the test's own (tests/support/conversion.py), the CRD with both
versions served and v1alpha1 stored, the webhook answering 500 for a while, a controller
restart during the outage, then the version the controller moved to switched off (while
the webhook still fails, so no version lists), then the webhook back.

Expected, step by step: the network is never released while machines cannot be listed (an
unknown holder is a holder: ``InUse`` quoting the error); ``/readyz`` and
``cozy_proxmox_informer_list_failing`` name the kind; the controller moves to the served
version that lists (v1alpha1, stored: no conversion) at its next resync and to v1alpha2
once that lists again, with no restart; the process restarted during the outage starts on
the version that lists.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client.rest import ApiException

from hack.bed import LocalCluster
from hack.tools.controller_process import ControllerProcess
from hack.tools.objects import Admin, reason, unique
from hack.tools.wait import wait_for
from tests.support.beds import running
from tests.support.conversion import GROUP, ConversionWebhook
from tests.test_lifecycle_integration import FINALIZER, Env

pytestmark = pytest.mark.integration

RESYNC = 8  # --resync-period (s): the move to another version happens at a resync
MACHINES = f"proxmoxmachines.{GROUP}"


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from running(LocalCluster(tmp_path_factory.mktemp("conversion"), with_peers=False, with_nb=False),
                       "test bed")


class Controller(ControllerProcess):
    """The controller as a process of its own (so it can be restarted), single replica; one
    log across restarts. ``standby``: with leader election, for a Lease someone else holds."""

    def __init__(self, bed: LocalCluster, log: Path, resync: int = RESYNC, standby: bool = False) -> None:
        super().__init__([f"--kubeconfig={bed.controller_kubeconfig}", "--manage-gateway-chassis=false",
                          f"--leader-elect={'true' if standby else 'false'}", f"--resync-period={resync}s",
                          "--log-format=console"], log, append=True)

    def readyz(self) -> tuple[int, str]:
        return self.endpoints.get("/readyz")

    def failing(self) -> dict[str, float]:
        """``cozy_proxmox_informer_list_failing`` of the machine informers, by version."""
        return {dict(labels)["resource"].split(MACHINES + "/")[1]: v
                for labels, v in self.endpoints.samples("cozy_proxmox_informer_list_failing").items()
                if MACHINES in dict(labels)["resource"]}


def machine(ns: str, name: str, pool: str, version: str) -> dict:
    """A machine whose net0 takes its address from ``pool``, in ``version``'s shape."""
    ref = {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": pool}
    network = ({"default": {"bridge": "vmbr1", "vlan": 100, "ipv4PoolRef": ref}} if version == "v1alpha1"
               else {"networkDevices": [{"name": "net0", "bridge": "vmbr1", "vlan": 100, "ipPoolRef": [ref]}]})
    return {"apiVersion": f"{GROUP}/{version}", "kind": "ProxmoxMachine", "metadata": {"name": name, "namespace": ns},
            "spec": {"network": network}}


def test_a_failing_conversion_webhook_never_releases_and_the_controller_moves_to_a_version_that_lists(bed, tmp_path):
    admin = Admin(bed.api_client("admin"))
    hook = ConversionWebhook(tmp_path / "webhook")
    ctl: Controller | None = None
    standby: Controller | None = None
    timeline: list[str] = []
    t0 = time.monotonic()

    def note(what: str) -> None:
        timeline.append(f"+{time.monotonic() - t0:5.1f}s {what}")

    try:
        hook.configure_crd(admin.co.api_client, storage="v1alpha1", served={"v1alpha1": True, "v1alpha2": True})
        ns = unique("conv")
        from kubernetes import client as k8s

        admin.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
        env = Env(admin, ns)
        net, sub, pool = "net", unique("sub"), "pool"
        # The webhook serves v1alpha2 reads of v1alpha1-stored machines from now on. m1 uses a
        # pool of its own: whether its delete event reaches the cache before the webhook fails
        # (the event is converted too) is a race that must not decide what holds the network.
        wait_for(lambda: _try(lambda: admin.co.create_namespaced_custom_object(
            GROUP, "v1alpha2", ns, "proxmoxmachines", machine(ns, "m1", "pool-of-m1", "v1alpha2"))), timeout=30,
            what="a machine created through the conversion webhook")
        assert hook.calls["ok"] > 0
        # First a controller whose resync (when it would move to another version) is far off.
        ctl = Controller(bed, tmp_path / "controller.log", resync=600)
        wait_for(lambda: ctl.readyz()[0] == 200, timeout=60, what="the controller ready")
        assert ctl.failing() == {"v1alpha2": 0.0}  # the newest served version, listing
        admin.create_network(ns, net, env.zone, sub, pool)
        vid = env.wait(net, "VLANAllocated", "Allocated")["status"]["vlan"]
        env.subnet(sub, sub)
        env.subnet_conditions(sub, ("Validated", "True", ""), ("Ready", "True", ""))
        env.pool(pool)
        env.wait(net, "Ready", "Ready")
        admin.co.delete_namespaced_custom_object(GROUP, "v1alpha2", ns, "proxmoxmachines", "m1")
        note("network Ready; machine m1 made and deleted through the webhook, watched as v1alpha2")

        # The outage: m2 comes through the stored version (no conversion needed), unseen by
        # the v1alpha2 watch; the cache says free, the fresh read before a release cannot list.
        hook.failing.set()
        admin.co.create_namespaced_custom_object(GROUP, "v1alpha1", ns, "proxmoxmachines", machine(ns, "m2", pool, "v1alpha1"))
        admin.co.delete_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", ns, "proxmoxnetworks", net)
        obj = wait_for(lambda: (lambda o: o if "cannot list" in reason(o, "Ready")[2] else None)(admin.network(ns, net)),
                       timeout=60, what="InUse quoting the listing error")
        ready = reason(obj, "Ready")
        assert ready[:2] == ("False", "InUse"), ready
        assert f"cannot list {MACHINES}/v1alpha2 (HTTP 500" in ready[2], ready
        assert ready[2].endswith(f'so VLAN {vid} and subnet "{sub}" are kept until it can be listed and nothing holds them')
        note(f"webhook 500, network deleted: {ready[1]}: {ready[2][:160]}…")
        wait_for(lambda: ctl.failing().get("v1alpha2") == 1.0, timeout=90, what="list_failing for v1alpha2")
        note(f"metrics: list_failing {ctl.failing()}")
        # The API server's watch cache answers 429 "storage is (re)initializing" around the
        # conversion failure, which it quotes with the webhook's own words; /readyz names the
        # machines after the 30 s grace, and them first: a kind whose watch got a 429 at its
        # start and then stayed open lists, and is not named (flake hunt, failures 12 and 15).
        seen: list[tuple[int, str]] = []  # what /readyz said, for the message if it never matches

        def readyz_names_the_machines() -> tuple[int, str] | None:
            r = ctl.readyz()
            if not seen or seen[-1] != r:
                seen.append(r)
            return r if (r[0] == 503 and r[1].startswith(f"cannot list {MACHINES}/v1alpha2: HTTP ")
                         and "conversion backend unavailable" in r[1]) else None

        try:
            code, body = wait_for(readyz_names_the_machines, timeout=90,
                                  what="/readyz naming the machines' kind and the webhook's failure")
        except AssertionError as err:  # name what it said instead (flake hunt, failure 15)
            raise AssertionError(f"{err}; /readyz said, last distinct answers: {seen[-5:]}") from None
        note(f"readyz {code} {body[:120]!r}…")
        assert env.vlan_exists(sub) and reason(admin.network(ns, net), "Ready")[1] == "InUse"

        # A restart during the outage starts on the served version that lists: v1alpha1 (the
        # stored one needs no conversion). Its cache sees m2, which holds the network.
        ctl.stop()
        assert ctl.proc.returncode == 0
        ctl = Controller(bed, tmp_path / "controller.log")
        wait_for(lambda: ctl.readyz()[0] == 200, timeout=60, what="the restarted controller ready during the outage")
        assert ctl.failing() == {"v1alpha1": 0.0}
        obj = wait_for(lambda: (lambda o: o if "held by ProxmoxMachine m2" in reason(o, "Ready")[2] else None)(
            admin.network(ns, net)), timeout=60, what="m2 seen through v1alpha1")
        assert reason(obj, "Ready")[1] == "InUse"
        note(f"restarted during the outage: watching v1alpha1, readyz {ctl.readyz()}, network InUse held by m2")
        # A standby (leader election on, the Lease held elsewhere for an hour) watches too.
        hold_lease_elsewhere(admin)
        standby = Controller(bed, tmp_path / "standby.log", standby=True)
        wait_for(lambda: standby.readyz()[0] == 200, timeout=60, what="the standby ready")
        assert standby.failing() == {"v1alpha1": 0.0} and not standby.leads()

        # The webhook back and v1alpha1 switched off: at a resync the controller moves to
        # v1alpha2, with no restart.
        hook.failing.clear()
        hook.configure_crd(admin.co.api_client, storage="v1alpha2", served={"v1alpha1": False, "v1alpha2": True})
        wait_for(lambda: ctl.failing() == {"v1alpha2": 0.0}, timeout=4 * RESYNC + 60, what="the move to v1alpha2")
        assert "moved to another served version" in ctl.log.read_text()
        wait_for(lambda: ctl.readyz()[0] == 200, timeout=30, what="/readyz 200 on v1alpha2")
        obj = admin.network(ns, net)
        assert reason(obj, "Ready")[1] == "InUse" and "held by ProxmoxMachine m2" in reason(obj, "Ready")[2]
        note(f"webhook back, v1alpha1 no longer served: moved to v1alpha2 without a restart, readyz {ctl.readyz()}, "
             f"network still InUse")
        # The standby moves as well, without leading: its /readyz does not stay 503 for the outage.
        wait_for(lambda: standby.failing() == {"v1alpha2": 0.0}, timeout=4 * RESYNC + 60, what="the standby's move")
        wait_for(lambda: standby.readyz()[0] == 200, timeout=30, what="the standby's /readyz 200 on v1alpha2")
        assert not standby.leads() and "moved to another served version" in standby.log.read_text()
        note("the standby moved to v1alpha2 too, not leading")
        # Nothing was released while machines could not be listed.
        assert env.vlan_exists(sub) and FINALIZER in admin.network(ns, net)["metadata"]["finalizers"]

        # The positive control: once m2 is gone the network goes on to its Subnet.
        admin.co.delete_namespaced_custom_object(GROUP, "v1alpha2", ns, "proxmoxmachines", "m2")
        obj = env.wait(net, "Ready", "SubnetStillExists", timeout=60)
        note(f"m2 deleted: network {reason(obj, 'Ready')[1]}")
        print("\n[R8] " + "\n[R8] ".join(timeline))
    finally:
        for c in (ctl, standby):
            if c is not None:
                c.stop()
        hook.stop()


def hold_lease_elsewhere(admin: Admin) -> None:
    """The controller's Lease held by an identity of no process here for an hour, renewed
    now: a replica with leader election stays a standby."""
    import datetime as dt

    from kubernetes import client as k8s

    from controller.runtime.leader import DEFAULT_LEASE_NAME, DEFAULT_LEASE_NAMESPACE

    now = dt.datetime.now(dt.timezone.utc)
    k8s.CoordinationV1Api(admin.co.api_client).create_namespaced_lease(DEFAULT_LEASE_NAMESPACE, k8s.V1Lease(
        metadata=k8s.V1ObjectMeta(name=DEFAULT_LEASE_NAME),
        spec=k8s.V1LeaseSpec(holder_identity="elsewhere/other_0", lease_duration_seconds=3600, acquire_time=now,
                             renew_time=now, lease_transitions=0)))


def _try(fn) -> bool:
    try:
        fn()
        return True
    except ApiException:
        return False
