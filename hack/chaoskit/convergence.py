"""Convergence and teardown: :class:`Checker` says what has not converged yet (networks Ready
with their Vlan, deleted ones gone) and what a teardown left (Vlans, finalizers, namespace
annotations, what the load deleted); the waits for convergence and for a whole Deployment;
what the NB still holds of ours and of Kube-OVN's."""

from __future__ import annotations

import time

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from hack.bed import LocalCluster, ovsdb_rows, ovsdb_set
from hack.chaoskit.common import KUBEOVN, OUR_PREFIX, PX
from hack.chaoskit.load import Loader, Slot
from hack.chaoskit.monitor import KINDS, obj_key
from hack.chaoskit.pods import PodReplicas


def condition(obj: dict, ctype: str) -> dict:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return {}


class Checker:
    """Reads the API (admin) and says what has not converged yet."""

    def __init__(self, cluster: LocalCluster, namespaces: list[str], providers: set[str]) -> None:
        self.api = cluster.api_client("admin")
        self.co = k8s.CustomObjectsApi(self.api)
        self.namespaces = namespaces
        self.providers = providers

    def close(self) -> None:
        self.api.close()

    def deleted_left(self, run_id: str) -> list[str]:
        """After teardown: what the load deleted and is still there: a Subnet of the load's
        (``cs…-<run_id>``), or a pool, claim, address or machine in our namespaces — a
        deletion stuck on a finalizer (Kube-OVN's on a Subnet, the IPAM provider's
        ``ProtectPool`` / ``ReleaseAddress`` / ``ProtectAddress``)."""
        out = []
        for kind in ("subnets", "pools", "claims", "addresses", "machines"):
            g, ver, plural = KINDS[kind]
            for o in self.co.list_cluster_custom_object(g, ver, plural, _request_timeout=(5, 30))["items"]:
                m = o["metadata"]
                if kind == "subnets":
                    if not (m["name"].startswith("cs") and m["name"].endswith(f"-{run_id}")):
                        continue
                elif m.get("namespace") not in self.namespaces:
                    continue
                what = {"addresses": "IPAddress", "claims": "IPAddressClaim", "pools": "InClusterIPPool",
                        "machines": "ProxmoxMachine", "subnets": "Subnet"}[kind]
                out.append(f"{what} {obj_key(o)} left (finalizers {m.get('finalizers') or []})")
        return out

    def pending(self, slots: list[Slot], gone: list[tuple[str, str, str]]) -> list[str]:
        nets = {}
        for n in self.co.list_cluster_custom_object(*PX, "proxmoxnetworks", _request_timeout=(5, 30))["items"]:
            if n["metadata"]["namespace"] in self.namespaces:
                nets[(n["metadata"]["namespace"], n["metadata"]["name"])] = n
        vlans = {v["metadata"]["name"]: v
                 for v in self.co.list_cluster_custom_object(*KUBEOVN, "vlans", _request_timeout=(5, 30))["items"]
                 if (v.get("spec") or {}).get("provider") in self.providers}
        out = []
        live_subnets = set()
        for s in slots:
            if not s.live:
                continue
            live_subnets.add(s.subnet)
            n = nets.get((s.ns, s.net))
            if n is None:
                out.append(f"{s.ns}/{s.net}: missing")
                continue
            ready = condition(n, "Ready")
            vid = (n.get("status") or {}).get("vlan")
            v = vlans.get(s.subnet)
            if ready.get("status") != "True" or ready.get("reason") != "Ready":
                out.append(f"{s.ns}/{s.net}: Ready={ready.get('status')}/{ready.get('reason')}: {ready.get('message')}")
            elif v is None or (v.get("spec") or {}).get("id") != vid:
                out.append(f"{s.ns}/{s.net}: status.vlan {vid} but Vlan {s.subnet} is {v and v.get('spec')}")
        for ns, net, sub in gone:
            if (ns, net) in nets:
                ready = condition(nets[(ns, net)], "Ready")
                out.append(f"{ns}/{net}: deleting, Ready={ready.get('reason')}: {ready.get('message')}")
            elif sub in vlans:
                out.append(f"Vlan {sub} of deleted {ns}/{net} still exists")
        for name in vlans:
            if name not in live_subnets and not any(name == g[2] for g in gone):
                out.append(f"stray Vlan {name}")
        return out

    def leftovers(self, zones: list[str]) -> list[str]:
        """After teardown: no Vlan on our providers, no finalizer of ours anywhere we wrote."""
        out = []
        for v in self.co.list_cluster_custom_object(*KUBEOVN, "vlans")["items"]:
            if (v.get("spec") or {}).get("provider") in self.providers:
                out.append(f"Vlan {v['metadata']['name']} (VLAN {v['spec'].get('id')}) left")
        for kind, (g, ver, plural) in KINDS.items():
            for o in self.co.list_cluster_custom_object(g, ver, plural)["items"]:
                m = o["metadata"]
                if kind != "vlans" and kind != "subnets" and m.get("namespace") not in self.namespaces:
                    continue
                if kind == "subnets" and not m["name"].startswith("cs"):
                    continue
                ours = [f for f in m.get("finalizers") or [] if f.startswith(OUR_PREFIX)]
                if ours:
                    out.append(f"{kind} {obj_key(o)} keeps finalizer(s) {ours}")
                elif kind in ("networks",):
                    out.append(f"{kind} {obj_key(o)} left")
        for z in zones:
            try:
                zobj = self.co.get_cluster_custom_object(*PX, "proxmoxnetworkzones", z)
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise
            ours = [f for f in zobj["metadata"].get("finalizers") or [] if f.startswith(OUR_PREFIX)]
            if ours:
                out.append(f"zone {z} keeps finalizer(s) {ours}")
        return out

    def namespace_leftovers(self) -> list[str]:
        """After teardown: no namespace annotation still listing a network. Awaited, not read
        once: the namespace pass that drops the last triple follows the network's departure
        (coalesced for ``NAMESPACE_COALESCE``, 0.2 s), so it may land just after the network
        has gone."""
        out = []
        core = k8s.CoreV1Api(self.api)
        for ns in self.namespaces:
            ann = (core.read_namespace(ns).metadata.annotations or {}).get("proxmox.cozystack.io/networks")
            if ann:
                out.append(f"namespace {ns} still lists networks {ann!r}")
        return out


def wait_converged(checker: Checker, loader: Loader, timeout: float) -> tuple[float | None, list[str]]:
    """Poll until nothing is pending; returns (monotonic time of convergence or None, last pending)."""
    end = time.monotonic() + timeout
    last: list[str] = []
    while time.monotonic() < end:
        try:
            last = checker.pending(loader.slots, loader.gone)
        except Exception as exc:  # API server still coming back
            last = [f"check failed: {exc!r}"]
        else:
            if not last:
                return time.monotonic(), []
        time.sleep(0.25)
    return None, last


def wait_whole(reps: PodReplicas, timeout: float) -> tuple[float | None, str]:
    """Poll until the Deployment is whole (:meth:`PodReplicas.whole`); returns (monotonic time
    or None, what it lacked last)."""
    end = time.monotonic() + timeout
    last = ""
    while time.monotonic() < end:
        try:
            last = reps.whole()
        except Exception as exc:  # noqa: BLE001 - the API server still coming back
            last = f"check failed: {exc!r}"
        else:
            if not last:
                return time.monotonic(), ""
        time.sleep(0.25)
    return None, last


def nb_groups_of_ours(cluster: LocalCluster) -> list[str]:
    out = cluster.nbctl("--bare", "--columns=name", "list", "HA_Chassis_Group")
    return [n for n in out.split() if n.startswith("px-")]


def nb_leftovers(cluster: LocalCluster, vpcs: list[str], run_id: str) -> tuple[list[str], list[str]]:
    """After teardown, what the NB still holds for the load's Subnets: (ours, Kube-OVN's own).

    Ours: a router port on one of the load's VPC routers that still points at an HA chassis
    group. Kube-OVN's own (reported, not a failure): its logical switches ``cs…-<run_id>``
    and router ports ``<vpc>-cs…`` (Kube-OVN's start-up gc keeps the router port of a
    Subnet whose delete it missed while it was down, docs/testing.md "What the real peers taught us")."""
    ours, kube_ovns = [], []
    for row in ovsdb_rows(cluster.nbctl, "Logical_Router_Port", columns="name,ha_chassis_group"):
        name = row["name"]
        if not any(name.startswith(f"{v}-cs") for v in vpcs):
            continue
        if ovsdb_set(row["ha_chassis_group"]):
            ours.append(f"router port {name} still has an HA_Chassis_Group")
        else:
            kube_ovns.append(f"router port {name}")
    for row in ovsdb_rows(cluster.nbctl, "Logical_Switch", columns="name"):
        if row["name"].startswith("cs") and row["name"].endswith(f"-{run_id}"):
            kube_ovns.append(f"logical switch {row['name']}")
    return ours, kube_ovns
