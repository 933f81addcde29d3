"""The load: the world it runs in (trunk Nodes carrying every provider network, their SB
chassis, a Kube-OVN Vpc per namespace) and :class:`Loader`, which creates and deletes networks
with their Subnet and pool, machines, claims and addresses in :class:`Slot` s at random,
pausable between steps."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from kubernetes import client as k8s

from hack.bed import LocalCluster
from hack.chaoskit.common import CAPMOX, IPAM_ADDR, IPAM_POOL, KUBEOVN, PX, log, retry


TRUNK_NODES = ("chaos-node-a", "chaos-node-b", "chaos-node-c")
SHARED_PROVIDER = "chaos-pn2"  # the provider network of the ``shared_zones``


def create_trunk_nodes(admin: Any, providers: list[str]) -> None:
    """Nodes that carry every provider network, each with its OVN chassis (Kube-OVN's label
    and annotation), so every network's router port gets an HA chassis group. The ready
    label is what Kube-OVN's node agent sets (it does not run here); kube-ovn-controller
    rewrites every ProviderNetwork's status from these labels every 30 s, and a Node without
    them would make the ProviderNetwork not ready."""
    for n in TRUNK_NODES:
        admin.core.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(
            name=n,
            labels={f"{p}.provider-network.kubernetes.io/ready": "true" for p in providers},
            annotations={"ovn.kubernetes.io/chassis": f"{n}-chassis"},
        )))


def register_chassis(cluster: LocalCluster) -> None:
    """Each trunk Node's chassis in the SB, as ovn-controller on that node would register it
    (kube-ovn-controller looks a Node's chassis up there and retries the Node until it is;
    its chassis gc deletes a chassis whose ``hostname`` names no Node, so the hostname is set
    in the same transaction)."""
    for i, n in enumerate(TRUNK_NODES, start=11):
        cluster.sbctl("--may-exist", "chassis-add", f"{n}-chassis", "geneve", f"127.0.0.{i}",
                      "--", "set", "Chassis", f"{n}-chassis", f"hostname={n}")


def create_vpcs(admin: Any, names: list[str], timeout: float = 60.0) -> None:
    """Kube-OVN Vpcs (a Subnet with ``spec.vpc`` needs its Vpc: its router port goes on the
    router Kube-OVN makes for it); returns once Kube-OVN reports each one up (``standby``)."""
    for n in names:
        admin.co.create_cluster_custom_object(*KUBEOVN, "vpcs", {
            "apiVersion": "kubeovn.io/v1", "kind": "Vpc", "metadata": {"name": n}, "spec": {}})
    end = time.monotonic() + timeout
    for n in names:
        while not (admin.co.get_cluster_custom_object(*KUBEOVN, "vpcs", n).get("status") or {}).get("standby"):
            if time.monotonic() > end:
                raise RuntimeError(f"Kube-OVN did not bring Vpc {n} up within {timeout:.0f}s")
            time.sleep(0.2)


MAX_SLOTS = 150  # Slot.net24 has 10.100-10.249 for them


def vpc_of(ns: str) -> str:
    return f"vpc-{ns}"


@dataclass
class Slot:
    idx: int
    ns: str
    zone: str
    run_id: str = "0"
    gen: int = 0
    live: bool = False
    consumers: list[tuple[str, str]] = field(default_factory=list)  # (kind, name)

    @property
    def net(self) -> str:
        return f"net{self.idx:03d}-g{self.gen}"

    @property
    def subnet(self) -> str:
        return f"cs{self.idx:03d}g{self.gen}-{self.run_id}"

    @property
    def pool(self) -> str:
        return f"pool{self.idx:03d}-g{self.gen}"

    @property
    def vpc(self) -> str:
        return vpc_of(self.ns)

    @property
    def net24(self) -> str:
        """The /24 of this generation: a fresh one per generation, so a new Subnet never
        overlaps its slot's previous one in the same VPC while Kube-OVN is still deleting it."""
        return f"10.{100 + self.idx}.{self.gen % 256}"


class Loader:
    """Creates and deletes networks, machines and addresses at random; pausable between steps."""

    def __init__(self, cluster: LocalCluster, slots: list[Slot], rng: random.Random) -> None:
        self.api = cluster.api_client("admin")
        self.co = k8s.CustomObjectsApi(self.api)
        self.slots = slots
        self.rng = rng
        self.ops: dict[str, int] = {}
        self.gone: list[tuple[str, str, str]] = []  # (ns, network, subnet) deleted
        self._run = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._stop = threading.Event()
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._loop, name="loader", daemon=True)

    def start(self) -> "Loader":
        self._thread.start()
        return self

    def resume(self) -> None:
        self._idle.clear()
        self._run.set()

    def pause(self, timeout: float = 300.0) -> None:
        self._run.clear()
        if not self._idle.wait(timeout):
            raise RuntimeError("loader did not pause")

    def stop(self) -> None:
        self._stop.set()
        self._run.set()
        self._thread.join(30)
        self.api.close()

    def _count(self, op: str) -> None:
        self.ops[op] = self.ops.get(op, 0) + 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self._run.is_set():
                self._idle.set()
                self._run.wait(0.5)
                continue
            self._idle.clear()
            try:
                self.step()
            except Exception as exc:  # noqa: BLE001 - recorded, the load goes on
                self.errors.append(f"{type(exc).__name__}: {exc}")
                log(f"loader step failed: {exc!r}")
            if not self._run.is_set():
                self._idle.set()

    # -- operations ---------------------------------------------------------------------
    def step(self) -> None:
        live = [s for s in self.slots if s.live]
        free = [s for s in self.slots if not s.live]
        choices = []
        if free:
            choices += ["create"] * 3
        if live:
            choices += ["delete"] * 2 + ["consumer"] * 2
        if any(s.consumers for s in live):
            choices += ["unconsume"] * 2
        op = self.rng.choice(choices)
        if op == "create":
            self.create(self.rng.choice(free))
        elif op == "delete":
            self.delete(self.rng.choice(live))
        elif op == "consumer":
            self.add_consumer(self.rng.choice(live))
        else:
            self.remove_consumer(self.rng.choice([s for s in live if s.consumers]))
        self._count(op)

    def create(self, s: Slot) -> None:
        s.gen += 1
        s.consumers = []
        n = s.net24
        # logicalGateway: Kube-OVN makes the VPC router port <vpc>-<subnet> (which gets our HA
        # chassis group) for a VLAN Subnet only with it.
        subnet = {"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": s.subnet},
                  "spec": {"vlan": s.subnet, "vpc": s.vpc, "cidrBlock": f"{n}.0/24", "gateway": f"{n}.1",
                           "protocol": "IPv4", "logicalGateway": True, "excludeIps": [f"{n}.100..{n}.150"]}}
        pool = {"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
                "metadata": {"name": s.pool, "namespace": s.ns},
                "spec": {"addresses": [f"{n}.100-{n}.150"], "prefix": 24, "gateway": f"{n}.1"}}
        net = {"apiVersion": "proxmox.cozystack.io/v1alpha1", "kind": "ProxmoxNetwork",
               "metadata": {"name": s.net, "namespace": s.ns}, "spec": {"zone": s.zone, "subnet": s.subnet, "ipPool": s.pool}}
        steps = [
            lambda: self.co.create_cluster_custom_object(*KUBEOVN, "subnets", subnet),
            lambda: self.co.create_namespaced_custom_object(*IPAM_POOL, s.ns, "inclusterippools", pool),
            lambda: self.co.create_namespaced_custom_object(*PX, s.ns, "proxmoxnetworks", net),
        ]
        self.rng.shuffle(steps)
        s.live = True
        for fn in steps:
            retry(fn, f"create {s.ns}/{s.net}", ok_statuses=(409,))

    def add_consumer(self, s: Slot) -> None:
        kind = self.rng.choice(["machine1", "machine2", "claim", "address"])
        name = f"{s.net}-{kind}-{len(s.consumers)}-{self.rng.randrange(1 << 20):05x}"
        ref = {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": s.pool}
        if kind == "machine1":
            body = {"apiVersion": f"{CAPMOX}/v1alpha1", "kind": "ProxmoxMachine", "metadata": {"name": name, "namespace": s.ns},
                    "spec": {"network": {"default": {"bridge": "vmbr0"}, "additionalDevices": [
                        {"name": "net1", "bridge": "vmbr1", "ipv4PoolRef": ref}]}}}
            fn = lambda: self.co.create_namespaced_custom_object(CAPMOX, "v1alpha1", s.ns, "proxmoxmachines", body)  # noqa: E731
        elif kind == "machine2":
            body = {"apiVersion": f"{CAPMOX}/v1alpha2", "kind": "ProxmoxMachine", "metadata": {"name": name, "namespace": s.ns},
                    "spec": {"network": {"networkDevices": [{"name": "net0", "bridge": "vmbr0"},
                                                            {"name": "net1", "bridge": "vmbr1", "ipPoolRef": [ref]}]}}}
            fn = lambda: self.co.create_namespaced_custom_object(CAPMOX, "v1alpha2", s.ns, "proxmoxmachines", body)  # noqa: E731
        elif kind == "claim":
            body = {"apiVersion": "/".join(IPAM_ADDR), "kind": "IPAddressClaim",
                    "metadata": {"name": name, "namespace": s.ns}, "spec": {"poolRef": ref}}
            fn = lambda: self.co.create_namespaced_custom_object(*IPAM_ADDR, s.ns, "ipaddressclaims", body)  # noqa: E731
        else:
            body = {"apiVersion": "/".join(IPAM_ADDR), "kind": "IPAddress",
                    "metadata": {"name": name, "namespace": s.ns},
                    "spec": {"address": f"{s.net24}.{140 + len(s.consumers) % 10}", "prefix": 24,
                             "gateway": f"{s.net24}.1", "claimRef": {"name": name}, "poolRef": ref}}
            fn = lambda: self.co.create_namespaced_custom_object(*IPAM_ADDR, s.ns, "ipaddresses", body)  # noqa: E731
        s.consumers.append((kind, name))
        retry(fn, f"create {kind} {s.ns}/{name}", ok_statuses=(409,))

    def _delete_consumer(self, s: Slot, kind: str, name: str) -> None:
        if kind.startswith("machine"):
            fn = lambda: self.co.delete_namespaced_custom_object(CAPMOX, "v1alpha2", s.ns, "proxmoxmachines", name)  # noqa: E731
        elif kind == "claim":
            fn = lambda: self.co.delete_namespaced_custom_object(*IPAM_ADDR, s.ns, "ipaddressclaims", name)  # noqa: E731
        else:
            fn = lambda: self.co.delete_namespaced_custom_object(*IPAM_ADDR, s.ns, "ipaddresses", name)  # noqa: E731
        retry(fn, f"delete {kind} {s.ns}/{name}", ok_statuses=(404,))

    def remove_consumer(self, s: Slot) -> None:
        kind, name = s.consumers.pop(self.rng.randrange(len(s.consumers)))
        self._delete_consumer(s, kind, name)

    def delete(self, s: Slot) -> None:
        """Delete the network and everything it uses, in a random order (a network deleted
        first waits InUse / SubnetStillExists until the rest follows)."""
        steps: list[Callable[[], Any]] = [
            lambda: self.co.delete_namespaced_custom_object(*PX, s.ns, "proxmoxnetworks", s.net),
            lambda: self.co.delete_cluster_custom_object(*KUBEOVN, "subnets", s.subnet),
            lambda: self.co.delete_namespaced_custom_object(*IPAM_POOL, s.ns, "inclusterippools", s.pool),
        ]
        consumers = list(s.consumers)
        steps += [lambda k=k, n=n: self._delete_consumer(s, k, n) for k, n in consumers]
        self.rng.shuffle(steps)
        s.live = False
        s.consumers = []
        self.gone.append((s.ns, s.net, s.subnet))
        for fn in steps:
            retry(fn, f"delete {s.ns}/{s.net}", ok_statuses=(404,))
