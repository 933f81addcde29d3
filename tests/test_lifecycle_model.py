"""A hypothesis state machine of allocation and the deletion lifecycle, driving the real
reconcilers against an in-memory API server.

product-decisions.md §6: no VLAN is ever held by two networks of one provider, and no VLAN
is released while a consumer exists or while Kube-OVN still lists a live subnet on it —
under restarts, cache lag and kills. Field reports B01 (duplicates, a hand-made Vlan racing
us), B03 (Kube-OVN prunes late or never: prune timers), B12 (a restart relists), B15
(consumers), R1 (another tenant's Subnet names a network's Vlan: the network reports
``VLANConflict`` naming it, the release waits for it, the controller never touches it), R12
(a trunk node's ready label flaps: Kube-OVN rewrites the ProviderNetwork's ready nodes, and
no flap may release, move or duplicate a VLAN). The model runs without the OVN side; the
hold-down's own rules are a state machine of their own in tests/test_trunk_hold_down.py, and
tests/test_trunk_flap_integration.py counts the NB writes on the real peers.

What is real: ``controller.reconcile.network.NetworkReconciler`` (its deletion walk), ``ZoneReconciler``
(orphan collection), ``controller.apply.vlans.VlanManager`` (allocation under the per-provider
lock, the assumed set, ``split_listed_subnets``/``track_timers``/``release``),
``controller.rules.allocator`` and ``controller.rules.prune`` — and ``controller.runtime.kube.KubeWriter``, whose
transport (``request``) is the only thing replaced: :class:`FakeApiServer` answers the
same HTTP paths with Kubernetes semantics (409 on a create of a taken name or a stale
resourceVersion, 422 (no details) on a failed JSON-patch ``test``, finalizers keep a deleted object
until the last one is removed).

What is fake: the caches (real ``ThreadSafeStore`` objects fed only when the machine
delivers queued watch events, so they lag arbitrarily), Kube-OVN (binds a Subnet onto its
Vlan, drops its own Subnet finalizer, prunes a deleted Subnet's name from the Vlan later or
never), the users (networks, Subnets, pools, machines and IPAddresses appear and leave in
any order), the clock, and restarts (a new controller with a fresh, synced cache and an
empty assumed set).

The release invariant is checked by the fake API server itself at the instant a Vlan
object goes away: at that moment no machine or IPAddress may reference the owning
network's pool and no Subnet named in the Vlan's ``status.subnets`` may exist.
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
import threading
import uuid
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from controller import names
from controller.runtime.kube import ApiError, KubeWriter
from controller.watch.indexes import subnet_index_vlan, zone_index_provider
from controller.reconcile.network import NetworkReconciler
from controller.watch.indexes import (
    ADDRESS_INDEXERS,
    CLAIM_INDEXERS,
    MACHINE_INDEXERS,
    POOL_INDEXERS,
    Listers,
    index_namespace,
    network_indexers,
)
from controller.apply.vlans import VlanManager
from controller.watch.indexes import vlan_indexers
from controller.reconcile.zone import ZoneReconciler
from informers import Resource, ThreadSafeStore

NS = "tenant"
PROVIDER = "physnet1"
# Two zones share the provider with overlapping ranges (issue 12): z1 100-102, z2 101-103;
# the allocator must serialise per provider, not per zone.
ZONES = {"z1": ["100-102"], "z2": ["101-103"]}
PRUNE_TIMEOUT = 60.0
REUSE_DELAY = 45.0  # --vlan-reuse-delay of the model's controllers
N = 4  # network slots over the two zones; 4 VLANs in all, one hand-made: IDs compete and are reused
KUBEOVN_FIN = "kube-ovn-controller"

POOLS = Resource("ipam.cluster.x-k8s.io", "v1alpha2", "inclusterippools", namespaced=True, kind="InClusterIPPool")
MACHINES = Resource("infrastructure.cluster.x-k8s.io", "v1alpha2", "proxmoxmachines", namespaced=True, kind="ProxmoxMachine")
ADDRESSES = Resource("ipam.cluster.x-k8s.io", "v1beta2", "ipaddresses", namespaced=True, kind="IPAddress")
CLAIMS = Resource("ipam.cluster.x-k8s.io", "v1beta2", "ipaddressclaims", namespaced=True, kind="IPAddressClaim")
POOL_REF = {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool"}

# plural -> store key of Listers
PLURALS = {
    "proxmoxnetworks": "networks", "proxmoxnetworkzones": "zones", "vlans": "vlans", "namespaces": "namespaces",
    "provider-networks": "provider_networks", "subnets": "subnets", "inclusterippools": "pools",
    "proxmoxmachines": "machines", "ipaddresses": "addresses", "ipaddressclaims": "claims",
}


# --------------------------------------------------------------------------- the fake API server


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def _apply_json_patch(obj: dict, ops: list[dict]) -> dict:
    doc = copy.deepcopy(obj)
    for op in ops:
        parts = _pointer(op["path"])
        parent: Any = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent.get(p)
            if parent is None:
                raise ApiError(422, "Invalid", f"path {op['path']} does not exist")
        last = parts[-1]
        kind = op["op"]
        if kind == "test":
            cur = parent[int(last)] if isinstance(parent, list) and last.isdigit() and int(last) < len(parent) else (
                parent.get(last) if isinstance(parent, dict) else None)
            if cur != op["value"]:
                raise ApiError(422, "Invalid", f"test failed at {op['path']}")
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op["value"])
                else:
                    parent.insert(int(last), op["value"]) if kind == "add" else parent.__setitem__(int(last), op["value"])
            else:
                parent[last] = op["value"]
        elif kind == "remove":
            if isinstance(parent, list):
                if int(last) >= len(parent):
                    raise ApiError(422, "Invalid", f"no element at {op['path']}")
                parent.pop(int(last))
            else:
                if last not in parent:
                    raise ApiError(422, "Invalid", f"no member at {op['path']}")
                del parent[last]
        else:
            raise AssertionError(f"unsupported op {kind}")
    return doc


def _merge(dst: dict, patch: dict) -> dict:
    out = copy.deepcopy(dst)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def pool_refs(obj: dict) -> list[str]:
    spec = obj.get("spec") or {}
    out = []
    if isinstance(spec.get("poolRef"), dict):
        out.append(spec["poolRef"].get("name"))
    for dev in ((spec.get("network") or {}).get("networkDevices") or []):
        out += [r.get("name") for r in dev.get("ipPoolRef") or []]
    return out


class FakeApiServer:
    """Objects by (plural, namespace, name); every change queues a watch event."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.events: list[tuple[str, str, dict]] = []  # (plural, type, object)
        self.rv = 0
        self.violations: list[str] = []
        self.releases = 0
        self.clock = lambda: _dt.datetime(2026, 1, 1, tzinfo=_dt.timezone.utc)  # the machine's clock
        self.released_at: dict[int, list[_dt.datetime]] = {}  # our Vlans' IDs -> release times
        # Workers of one controller call in from several threads (concurrent_workers).
        self.lock = threading.RLock()

    # -- helpers for the test (the "users" and Kube-OVN write here directly) -----------
    def put(self, plural: str, obj: dict) -> dict:
        m = obj["metadata"]
        key = (plural, m.get("namespace", ""), m["name"])
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        old = self.objects.get(key)
        if old is None:
            obj["metadata"].setdefault("uid", str(uuid.uuid4()))
            obj["metadata"].setdefault("generation", 1)
            obj["metadata"].setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        if obj["metadata"].get("deletionTimestamp") and not obj["metadata"].get("finalizers"):
            return self._remove(plural, key, obj)
        self.objects[key] = obj
        self.events.append((plural, "ADDED" if old is None else "MODIFIED", copy.deepcopy(obj)))
        return copy.deepcopy(obj)

    def find(self, plural: str, name: str, ns: str = "") -> dict | None:
        o = self.objects.get((plural, ns, name))
        return copy.deepcopy(o) if o else None

    def items(self, plural: str) -> list[dict]:
        return [copy.deepcopy(o) for (p, _, _), o in sorted(self.objects.items()) if p == plural]

    def delete(self, plural: str, name: str, ns: str = "", now: str = "2026-01-01T00:00:00Z") -> None:
        o = self.objects.get((plural, ns, name))
        if o is None:
            raise ApiError(404, "NotFound", f'{plural} "{name}" not found')
        if o["metadata"].get("finalizers"):
            if not o["metadata"].get("deletionTimestamp"):
                o = copy.deepcopy(o)
                o["metadata"]["deletionTimestamp"] = now
                self.put(plural, o)
            return
        self._remove(plural, (plural, ns, name), o)

    def _remove(self, plural: str, key: tuple[str, str, str], obj: dict) -> dict:
        if plural == "vlans":
            self._judge_release(obj)
        self.objects.pop(key, None)
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((plural, "DELETED", obj))
        return obj

    def _judge_release(self, vlan: dict) -> None:
        """§6: the moment a Vlan goes, nothing may still use it."""
        self.releases += 1
        labels = vlan["metadata"].get("labels") or {}
        if labels.get(names.LABEL_NETWORK_NAME):
            self.released_at.setdefault(vlan["spec"]["id"], []).append(self.clock())
        ns, net = labels.get(names.LABEL_NETWORK_NAMESPACE), labels.get(names.LABEL_NETWORK_NAME)
        vname = vlan["metadata"]["name"]
        # The owning network may be gone already (zone orphan collection): its pool is named
        # after its slot, as this machine names everything.
        pool = f"pool-{net}" if net else None
        if pool:
            for plural in ("proxmoxmachines", "ipaddresses", "ipaddressclaims"):
                for o in self.items(plural):
                    if o["metadata"].get("namespace") == ns and pool in pool_refs(o):
                        self.violations.append(f"Vlan {vname} released while {plural} {o['metadata']['name']} "
                                               f"references pool {pool}")
        for s in (vlan.get("status") or {}).get("subnets") or []:
            if ("subnets", "", s) in self.objects:
                self.violations.append(f"Vlan {vname} released while it lists live Subnet {s}")

    # -- the HTTP surface KubeWriter uses ---------------------------------------------
    def handle(self, method: str, path: str, body: Any, content_type: str) -> dict:
        parts = path.strip("/").split("/")
        parts = parts[2:] if parts[0] == "api" else parts[3:]  # drop /api/v1 or /apis/<g>/<v>
        ns = ""
        if parts[0] == "namespaces" and len(parts) >= 3:
            ns, parts = parts[1], parts[2:]
        plural = parts[0]
        name = parts[1] if len(parts) > 1 else None
        sub = parts[2] if len(parts) > 2 else ""
        if plural == "namespaces" and name is None and ns:  # /api/v1/namespaces/<name>
            plural, name, ns = "namespaces", ns, ""
        if method == "GET":
            if name is None:
                return {"items": [o for o in self.items(plural) if not ns or o["metadata"].get("namespace") == ns]}
            o = self.find(plural, name, ns)
            if o is None:
                raise ApiError(404, "NotFound", f'{plural} "{name}" not found')
            return o
        if method == "POST":
            m = body["metadata"]
            if self.find(plural, m["name"], ns) is not None:
                raise ApiError(409, "AlreadyExists", f'{plural} "{m["name"]}" already exists')
            if plural == "vlans":
                # product-decisions.md §8: no ID is handed out again inside its reuse delay.
                vid, now = body["spec"]["id"], self.clock()
                for at in self.released_at.get(vid, []):
                    if now < at + _dt.timedelta(seconds=REUSE_DELAY):
                        self.violations.append(f"VLAN {vid} reused {(now - at).total_seconds():.0f}s after its "
                                               f"release (delay {REUSE_DELAY:.0f}s)")
            body = copy.deepcopy(body)
            if ns:
                body["metadata"]["namespace"] = ns
            return self.put(plural, body)
        cur = self.objects.get((plural, ns, name))
        if cur is None:
            raise ApiError(404, "NotFound", f'{plural} "{name}" not found')
        if method == "DELETE":
            # As the API server: preconditions.uid checked, the object returned while
            # finalizers hold it (Terminating), a Status once it is gone.
            uid = ((body or {}).get("preconditions") or {}).get("uid")
            if uid and cur["metadata"].get("uid") != uid:
                raise ApiError(409, "Conflict", "Precondition failed: UID in precondition does not match")
            self.delete(plural, name, ns)
            return self.find(plural, name, ns) or {"kind": "Status", "status": "Success"}
        if method == "PUT":
            if body["metadata"].get("resourceVersion") != cur["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", "the object has been modified")
            new = copy.deepcopy(cur)
            if sub == "status":
                new["status"] = copy.deepcopy(body.get("status"))
            else:
                new = copy.deepcopy(body)
            return self.put(plural, new)
        if method == "PATCH":
            if "json-patch" in content_type:
                new = _apply_json_patch(cur, body)
            else:
                new = _merge(cur, body)
            if cur["metadata"].get("deletionTimestamp") and len(new["metadata"].get("finalizers") or []) > len(
                    cur["metadata"].get("finalizers") or []):
                # A validation error: details name the object and the field, as kube-apiserver's do.
                raise ApiError(422, "Invalid", "no new finalizers can be added if the object is being deleted",
                               {"name": cur["metadata"]["name"], "causes": [{"field": "metadata.finalizers"}]})
            return self.put(plural, new)
        raise AssertionError(f"unexpected {method} {path}")


class FakeWriter(KubeWriter):
    """The real KubeWriter (paths, patches, finalizer ops) over :class:`FakeApiServer`."""

    def __init__(self, server: FakeApiServer) -> None:
        super().__init__(None)  # type: ignore[arg-type]
        self.server = server

    def request(self, method, path, body=None, content_type="application/json", query=None):  # noqa: D102
        with self.server.lock:
            if method != "GET":
                self.writes += 1
            return self.server.handle(method, path, copy.deepcopy(body), content_type)


# --------------------------------------------------------------------------- the controller


def new_stores() -> dict[str, ThreadSafeStore]:
    return {
        "networks": ThreadSafeStore(network_indexers()),
        "zones": ThreadSafeStore({"provider": zone_index_provider}),
        "vlans": ThreadSafeStore(vlan_indexers()),
        "namespaces": ThreadSafeStore(),
        "provider_networks": ThreadSafeStore(),
        "subnets": ThreadSafeStore({"vlan": subnet_index_vlan}),
        "pools": ThreadSafeStore(POOL_INDEXERS),
        "machines": ThreadSafeStore(MACHINE_INDEXERS),
        "addresses": ThreadSafeStore(ADDRESS_INDEXERS),
        "claims": ThreadSafeStore(CLAIM_INDEXERS),
    }


class Controller:
    """One controller process: caches synced from the API at start, then fed by deliveries."""

    def __init__(self, server: FakeApiServer, clock) -> None:
        self.stores = new_stores()
        for plural, key in PLURALS.items():
            for o in server.items(plural):
                self.stores[key].add(o)
        self.writer = FakeWriter(server)
        listers = Listers(**self.stores)
        self.mono = [0.0]
        self.vlans = VlanManager(self.stores["vlans"], self.stores["zones"], self.writer,
                                 monotonic=lambda: self.mono[0], networks=self.stores["networks"],
                                 reuse_delay=REUSE_DELAY, now=clock)
        consumers = {"pools": POOLS, "machines": MACHINES, "addresses": ADDRESSES, "claims": CLAIMS}
        self.net = NetworkReconciler(listers, self.writer, self.vlans, manage_gateway=False, now=clock,
                                     prune_timeout=PRUNE_TIMEOUT, consumer_resources=consumers)
        self.zone = ZoneReconciler(listers, self.writer, self.vlans, now=clock, prune_timeout=PRUNE_TIMEOUT)

    def deliver(self, plural: str, etype: str, obj: dict) -> None:
        store = self.stores[PLURALS[plural]]
        if etype == "DELETED":
            store.delete(obj)
        else:
            store.add(obj)
        if plural == "vlans":
            self.vlans.observe(obj, deleted=etype == "DELETED")
        elif plural == "proxmoxnetworks":
            self.net.recent.observe(obj)
        elif plural == "proxmoxnetworkzones":
            self.zone.recent.observe(obj)
        elif plural == "namespaces":
            self.net.recent_namespaces.observe(obj)


# --------------------------------------------------------------------------- the machine


slot = st.integers(0, N - 1)


class Lifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.api = FakeApiServer()
        self.t = _dt.datetime(2026, 10, 7, 7, 0, 0, tzinfo=_dt.timezone.utc)
        self.api.put("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        self.api.put("provider-networks", {"metadata": {"name": PROVIDER}, "spec": {},
                                           "status": {"ready": True, "readyNodes": ["node-a"]}})
        for zname, ranges in ZONES.items():
            self.api.put("proxmoxnetworkzones", {"metadata": {"name": zname},
                                                 "spec": {"bridge": "vmbr1", "providerNetwork": PROVIDER,
                                                          "vlanRanges": ranges}})
        # A Vlan made by hand on the provider, not ours (B01): its ID is never handed out.
        self.api.put("vlans", {"metadata": {"name": "legacy-db"}, "spec": {"id": 101, "provider": PROVIDER}})
        self.api.events.clear()
        self.api.clock = self.clock
        self.ctl = Controller(self.api, self.clock)
        self.pending: list[tuple[str, str, dict]] = []  # events not yet delivered to this controller
        self.gen = [0] * N
        self.lost: set[str] = set()  # Subnets whose delete Kube-OVN lost (never pruned)
        self.errors = 0

    def clock(self) -> _dt.datetime:
        return self.t

    def _sync_events(self) -> None:
        with self.api.lock:
            self.pending += self.api.events
            self.api.events = []

    def net(self, i: int) -> str:
        return f"n{i}"

    def subnet(self, i: int) -> str:
        return f"s{i}"  # reused across generations: adoption and prune-timer carry-over (§7.1)

    def pool(self, i: int) -> str:
        return f"pool-n{i}"

    def zone_of(self, i: int) -> str:
        return sorted(ZONES)[i % len(ZONES)]

    # -- users ---------------------------------------------------------------------------
    @rule(i=slot)
    def create_network(self, i):
        if self.api.find("proxmoxnetworks", self.net(i), NS) is None:
            self.gen[i] += 1
            self.api.put("proxmoxnetworks", {
                "apiVersion": "proxmox.cozystack.io/v1alpha1", "kind": "ProxmoxNetwork",
                "metadata": {"name": self.net(i), "namespace": NS},
                "spec": {"zone": self.zone_of(i), "subnet": self.subnet(i), "ipPool": self.pool(i)}})
        self._sync_events()

    @rule(i=slot)
    def create_subnet_and_pool(self, i):
        if self.api.find("subnets", self.subnet(i)) is None:
            self.api.put("subnets", {"metadata": {"name": self.subnet(i)},
                                     "spec": {"vlan": self.subnet(i), "cidrBlock": f"10.0.{i}.0/24",
                                              "gateway": f"10.0.{i}.1", "excludeIps": [f"10.0.{i}.1", f"10.0.{i}.100..10.0.{i}.150"]}})
            self.lost.discard(self.subnet(i))
        if self.api.find("inclusterippools", self.pool(i), NS) is None:
            self.api.put("inclusterippools", {"metadata": {"name": self.pool(i), "namespace": NS},
                                              "spec": {"addresses": [f"10.0.{i}.100-10.0.{i}.150"], "prefix": 24,
                                                       "gateway": f"10.0.{i}.1"}})
        self._sync_events()

    @rule(i=slot)
    def delete_network(self, i):
        if self.api.find("proxmoxnetworks", self.net(i), NS) is not None:
            self.api.delete("proxmoxnetworks", self.net(i), NS, self.t.strftime("%Y-%m-%dT%H:%M:%SZ"))
        self._sync_events()

    @rule(i=slot, lost=st.booleans())
    def delete_subnet(self, i, lost):
        if self.api.find("subnets", self.subnet(i)) is not None:
            self.api.delete("subnets", self.subnet(i))
            if lost:
                self.lost.add(self.subnet(i))
        self._sync_events()

    @rule(i=slot, kind=st.sampled_from(["proxmoxmachines", "ipaddresses", "ipaddressclaims"]), k=st.integers(0, 1))
    def add_consumer(self, i, kind, k):
        """A consumer appears — also for a network already deleting (nothing forbids it;
        the network must then hold its VLAN until the consumer leaves)."""
        name = f"{kind[:4]}-{i}-{k}"
        if self.api.find(kind, name, NS) is None:
            ref = dict(POOL_REF, name=self.pool(i))
            spec = ({"network": {"networkDevices": [{"name": "net1", "ipPoolRef": [ref]}]}}
                    if kind == "proxmoxmachines" else {"poolRef": ref})
            self.api.put(kind, {"metadata": {"name": name, "namespace": NS}, "spec": spec})
        self._sync_events()

    @rule(i=slot, kind=st.sampled_from(["proxmoxmachines", "ipaddresses", "ipaddressclaims"]), k=st.integers(0, 1))
    def remove_consumer(self, i, kind, k):
        name = f"{kind[:4]}-{i}-{k}"
        if self.api.find(kind, name, NS) is not None:
            self.api.delete(kind, name, NS)
        self._sync_events()

    @rule(i=slot)
    def handmade_vlan_races(self, i):
        """An operator creates a Vlan by hand with the next free ID (B01 race)."""
        used = {(v.get("spec") or {}).get("id") for v in self.api.items("vlans")}
        free = [v for v in (100, 102, 103) if v not in used]
        if free and self.api.find("vlans", f"ops-{i}") is None:
            self.api.put("vlans", {"metadata": {"name": f"ops-{i}"}, "spec": {"id": free[0], "provider": PROVIDER}})
        self._sync_events()

    @rule(i=slot)
    def handmade_vlan_leaves(self, i):
        if self.api.find("vlans", f"ops-{i}") is not None:
            self.api.delete("vlans", f"ops-{i}")
        self._sync_events()

    @rule(i=slot, to=st.sampled_from([100, 102, 103]))
    def someone_edits_the_vlan_id(self, i, to):
        """A person changes our Vlan's spec.id (issue 15, item 2), to an ID nothing holds,
        on a settled cluster and seen at once: an edit racing an allocation from a lagging
        cache is the hand-made-duplicate race above (B01), reported, not prevented."""
        self.deliver(10_000)
        v = self.api.find("vlans", self.subnet(i))
        if v is None or v["metadata"].get("deletionTimestamp"):
            return
        held = {(o.get("spec") or {}).get("id") for o in self.api.items("vlans")}
        held |= {(n.get("status") or {}).get("vlan") for n in self.api.items("proxmoxnetworks")}
        if to in held:
            return
        v["spec"]["id"] = to
        v["metadata"]["generation"] = int(v["metadata"].get("generation") or 1) + 1
        self.api.put("vlans", v)
        self._sync_events()
        self.deliver(10_000)

    @rule(i=slot, accept=st.booleans())
    def operator_resolves_the_edit(self, i, accept):
        """The runbook's two ways out: put the ID back, or accept the new one."""
        n = self.api.find("proxmoxnetworks", self.net(i), NS)
        v = self.api.find("vlans", self.subnet(i))
        if n is None or v is None:
            return
        recorded = (n.get("status") or {}).get("vlan")
        if not recorded or recorded == v["spec"]["id"]:
            return
        if accept:
            n["metadata"].setdefault("annotations", {})[names.ANNOTATION_ACCEPT_VLAN_ID] = str(v["spec"]["id"])
            self.api.put("proxmoxnetworks", n)
        else:
            v["spec"]["id"] = recorded
            v["metadata"]["generation"] = int(v["metadata"].get("generation") or 1) + 1
            self.api.put("vlans", v)
        self._sync_events()

    # -- Kube-OVN ------------------------------------------------------------------------
    @rule(i=slot)
    def kubeovn_binds(self, i):
        """A live Subnet whose Vlan exists: finalizer on, listed in Vlan.status.subnets."""
        s = self.api.find("subnets", self.subnet(i))
        v = self.api.find("vlans", self.subnet(i))
        if s is not None and not s["metadata"].get("deletionTimestamp"):
            if KUBEOVN_FIN not in (s["metadata"].get("finalizers") or []):
                s["metadata"]["finalizers"] = (s["metadata"].get("finalizers") or []) + [KUBEOVN_FIN]
                self.api.put("subnets", s)
            if v is not None and self.subnet(i) not in ((v.get("status") or {}).get("subnets") or []):
                v.setdefault("status", {})["subnets"] = ((v.get("status") or {}).get("subnets") or []) + [self.subnet(i)]
                self.api.put("vlans", v)
        self._sync_events()

    @rule(i=slot)
    def kubeovn_drops_its_finalizer(self, i):
        s = self.api.find("subnets", self.subnet(i))
        if s is not None and s["metadata"].get("deletionTimestamp") and KUBEOVN_FIN in s["metadata"].get("finalizers", []):
            s["metadata"]["finalizers"] = [f for f in s["metadata"]["finalizers"] if f != KUBEOVN_FIN]
            self.api.put("subnets", s)
        self._sync_events()

    @rule(i=slot)
    def kubeovn_prunes(self, i):
        """Late (any time after the Subnet is gone) or never (``lost``): B03."""
        name = self.subnet(i)
        if self.api.find("subnets", name) is None and name not in self.lost:
            for v in self.api.items("vlans"):
                listed = (v.get("status") or {}).get("subnets") or []
                if name in listed:
                    v["status"]["subnets"] = [x for x in listed if x != name]
                    self.api.put("vlans", v)
        self._sync_events()

    # -- someone else (field report R1) --------------------------------------------------------
    def stranger(self, i: int) -> str:
        return f"stranger-{i}"

    @rule(i=slot)
    def a_stranger_subnet_names_the_vlan(self, i):
        """Another tenant's Subnet names network i's Vlan (made before the admission policy,
        or with it off); Kube-OVN lists it on the Vlan as it does any Subnet on a Vlan."""
        name = self.stranger(i)
        if self.api.find("subnets", name) is None:
            self.api.put("subnets", {"metadata": {"name": name},
                                     "spec": {"vlan": self.subnet(i), "vpc": "vpc-b", "cidrBlock": f"10.9.{i}.0/24",
                                              "gateway": f"10.9.{i}.1"}})
        v = self.api.find("vlans", self.subnet(i))
        if v is not None and name not in ((v.get("status") or {}).get("subnets") or []):
            v.setdefault("status", {})["subnets"] = ((v.get("status") or {}).get("subnets") or []) + [name]
            self.api.put("vlans", v)
        self._sync_events()

    @rule(i=slot)
    def the_stranger_goes(self, i):
        """Its owner deletes it; Kube-OVN prunes it from the Vlan on the delete event."""
        self._remove_stranger(i)
        self._sync_events()

    def _remove_stranger(self, i: int) -> None:
        name = self.stranger(i)
        if self.api.find("subnets", name) is None:
            return
        self.api.delete("subnets", name)
        for v in self.api.items("vlans"):
            listed = (v.get("status") or {}).get("subnets") or []
            if name in listed:
                v["status"]["subnets"] = [x for x in listed if x != name]
                self.api.put("vlans", v)

    @invariant()
    def a_stranger_subnet_is_never_touched(self):
        """R1: the controller never deletes or holds someone else's Subnet (the release
        waits for it: the fake API judges every release against the Vlan's live listing)."""
        for s in self.api.items("subnets"):
            if s["metadata"]["name"].startswith("stranger-"):
                assert not s["metadata"].get("deletionTimestamp"), s["metadata"]
                assert not [f for f in s["metadata"].get("finalizers") or [] if f.startswith("proxmox.cozystack.io/")]

    # -- Kube-OVN's node agent (field report R12) -------------------------------------------
    @rule(ready=st.booleans())
    def a_ready_label_flaps(self, ready):
        """kube-ovn-cni removes the trunk node's ready label at its start and sets it again
        once the bridge is up; kube-ovn-controller rewrites the ProviderNetwork's status."""
        pn = self.api.find("provider-networks", PROVIDER)
        pn["status"] = {"ready": ready, "readyNodes": ["node-a"] if ready else [], "notReadyNodes": [] if ready else ["node-a"]}
        self.api.put("provider-networks", pn)
        self._sync_events()

    # -- the controller --------------------------------------------------------------------
    @rule(n=st.integers(1, 6))
    def deliver(self, n):
        """Watch events reach the caches, in order, ``n`` at a time (the rest lag)."""
        self._sync_events()
        batch, self.pending = self.pending[:n], self.pending[n:]
        for plural, etype, obj in batch:
            self.ctl.deliver(plural, etype, obj)

    @rule(i=slot)
    def reconcile_network(self, i):
        try:
            self.ctl.net.reconcile(f"{NS}/{self.net(i)}")
        except ApiError:
            self.errors += 1  # a stale write (409/422): the worker retries with backoff
        self._sync_events()

    @rule()
    def reconcile_zone(self):
        for zname in ZONES:
            try:
                self.ctl.zone.reconcile(zname)
            except ApiError:
                self.errors += 1
        self._sync_events()

    @rule(i=slot, j=slot, n=st.integers(0, 6))
    def concurrent_workers(self, i, j, n):
        """Two workers reconcile two networks (of either zone) at once while the watch
        delivers ``n`` events: real threads, so the interleaving of picks, creates,
        deliveries and the assumed set is the scheduler's (issue 12)."""
        errors: list[ApiError] = []

        def work(k: int) -> None:
            try:
                self.ctl.net.reconcile(f"{NS}/{self.net(k)}")
            except ApiError as err:
                errors.append(err)

        threads = [threading.Thread(target=work, args=(k,)) for k in {i, j}]
        for t in threads:
            t.start()
        self.deliver(n)
        for t in threads:
            t.join()
        self.errors += len(errors)
        self._sync_events()

    @rule()
    def restart(self):
        """The leader is killed; a new one starts with a fresh LIST (synced cache, empty
        assumed set); events queued for the old one are moot."""
        self._sync_events()
        self.pending = []
        self.ctl = Controller(self.api, self.clock)

    @rule()
    def relist(self):
        """B12: the watch of every kind gets 410 (an API server restart or a compaction
        during a gap) and the informers relist: the stores are replaced by the API's current
        state, the undelivered events are never seen one by one (the versions in between are
        skipped), and the handlers see an update or a synthesized delete for every key. The
        process keeps running: its assumed set and read-your-writes overlay stay."""
        self._sync_events()
        self.pending = []
        for plural, key in PLURALS.items():
            store = self.ctl.stores[key]
            current = {o["metadata"].get("namespace", "") + "/" + o["metadata"]["name"]: o for o in self.api.items(plural)}
            for old in list(store.list()):
                if old["metadata"].get("namespace", "") + "/" + old["metadata"]["name"] not in current:
                    self.ctl.deliver(plural, "DELETED", old)
            for o in current.values():
                self.ctl.deliver(plural, "MODIFIED", o)

    @rule(seconds=st.sampled_from([1, 10, 30, 61]))
    def time_passes(self, seconds):
        self.t += _dt.timedelta(seconds=seconds)
        self.ctl.mono[0] += seconds

    # -- invariants -------------------------------------------------------------------------
    @invariant()
    def no_two_vlans_share_an_id_on_the_provider(self):
        ids = [(v["spec"]["provider"], v["spec"]["id"]) for v in self.api.items("vlans")
               if not v["metadata"]["name"].startswith("ops-")]
        # Our allocations never collide with each other or with hand-made Vlans that were
        # there first; a hand-made Vlan racing in afterwards is reported, never shared
        # silently (checked below).
        assert len(ids) == len(set(ids)), f"duplicate IDs: {sorted(ids)}"

    @invariant()
    def no_id_is_held_twice_counting_the_records(self):
        """An edited Vlan leaves its network on the allocated ID (status.vlan) and the Vlan
        on the new one: no other network may be given either (product-decisions.md §8)."""
        vlans = {v["metadata"]["name"]: v for v in self.api.items("vlans")}
        seen: dict[int, str] = {101: "legacy-db"}
        for n in self.api.items("proxmoxnetworks"):
            ids = set()
            rec = (n.get("status") or {}).get("vlan")
            if rec:
                ids.add(rec)
            v = vlans.get(n["spec"]["subnet"])
            labels = (v or {}).get("metadata", {}).get("labels") or {}
            if v is not None and labels.get(names.LABEL_NETWORK_NAME) == n["metadata"]["name"]:
                ids.add(v["spec"]["id"])
            for vid in ids:
                assert vid not in seen, f"VLAN {vid} held by {seen[vid]} and {n['metadata']['name']}"
                seen[vid] = n["metadata"]["name"]

    @invariant()
    def no_vlan_reused_inside_its_delay(self):
        assert not [v for v in self.api.violations if "reused" in v]

    @invariant()
    def no_two_networks_hold_one_vlan(self):
        held = []
        for n in self.api.items("proxmoxnetworks"):
            st_ = n.get("status") or {}
            conds = {c["type"]: c for c in st_.get("conditions") or []}
            if conds.get("VLANAllocated", {}).get("status") == "True":
                held.append(st_.get("vlan"))
        assert len(held) == len(set(held)), f"networks share a VLAN: {held}"

    @invariant()
    def nothing_released_while_in_use(self):
        assert self.api.violations == []

    @rule()
    def settle_and_check_conflicts(self):
        """Caches catch up and every network is reconciled: a network whose Vlan shares its
        ID with another Vlan on the provider (a hand-made one that raced a lagging cache,
        B01) reports ``VLANAllocated=False/VLANConflict`` naming the other Vlan, never Ready."""
        self.deliver(10_000)
        for i in range(N):
            try:
                self.ctl.net.reconcile(f"{NS}/{self.net(i)}")
            except ApiError:
                return  # a stale write: the next pass would retry; nothing to judge now
            self._sync_events()
            self.deliver(10_000)
        vlans = self.api.items("vlans")
        for n in self.api.items("proxmoxnetworks"):
            if n["metadata"].get("deletionTimestamp"):
                continue
            mine = next((v for v in vlans if v["metadata"]["name"] == n["spec"]["subnet"]), None)
            if mine is None:
                continue
            twins = [v["metadata"]["name"] for v in vlans
                     if v["spec"]["id"] == mine["spec"]["id"] and v is not mine]
            conds = {c["type"]: c for c in (n.get("status") or {}).get("conditions") or []}
            strangers = [s["metadata"]["name"] for s in self.api.items("subnets")
                         if (s.get("spec") or {}).get("vlan") == mine["metadata"]["name"]
                         and s["metadata"]["name"] != n["spec"]["subnet"]]
            if strangers and not twins and (mine["metadata"].get("labels") or {}).get(names.LABEL_NETWORK_NAME) == \
                    n["metadata"]["name"]:
                # R1: another Subnet on the network's Vlan is its VLANConflict, naming it (a
                # Vlan whose ID was edited by hand reports that first: VLANChangedExternally).
                c = conds.get("VLANAllocated", {})
                if c.get("reason") != "VLANChangedExternally":
                    assert (c.get("status"), c.get("reason")) == ("False", "VLANConflict"), (n["metadata"]["name"], c)
                    assert all(f'"{s}"' in c.get("message", "") for s in strangers), c
            if twins:
                c = conds.get("VLANAllocated", {})
                assert (c.get("status"), c.get("reason")) == ("False", "VLANConflict"), (n["metadata"]["name"], c)
                assert all(t in c.get("message", "") for t in twins), c
                assert conds.get("Ready", {}).get("status") != "True"

    def teardown(self):
        """Drain: every network deleted, consumers gone, Kube-OVN catches up, the clock runs
        past the prune timeout; then the release must have happened and nothing of ours stays."""
        for kind in ("proxmoxmachines", "ipaddresses", "ipaddressclaims"):
            for o in self.api.items(kind):
                self.api.delete(kind, o["metadata"]["name"], NS)
        for i in range(N):
            self._remove_stranger(i)
        for i in range(N):
            if self.api.find("proxmoxnetworks", self.net(i), NS) is not None:
                self.api.delete("proxmoxnetworks", self.net(i), NS, self.t.strftime("%Y-%m-%dT%H:%M:%SZ"))
            if self.api.find("subnets", self.subnet(i)) is not None:
                self.api.delete("subnets", self.subnet(i))
        for v in self.api.items("vlans"):
            if v["metadata"]["name"].startswith("ops-"):
                self.api.delete("vlans", v["metadata"]["name"])
        # No restart here: the running process must drain by itself (a stale cache or
        # overlay that only a restart would clear is a liveness bug).
        for _ in range(8):
            for i in range(N):
                self.kubeovn_drops_its_finalizer(i)
                self.kubeovn_prunes(i)
            self.deliver(10_000)
            for i in range(N):
                try:
                    self.ctl.net.reconcile(f"{NS}/{self.net(i)}")
                except ApiError:
                    pass
            for zname in ZONES:
                try:
                    self.ctl.zone.reconcile(zname)
                except ApiError:
                    pass
            self._sync_events()
            self.deliver(10_000)
            self.t += _dt.timedelta(seconds=PRUNE_TIMEOUT / 2)
        assert self.api.violations == []
        left = [n["metadata"]["name"] for n in self.api.items("proxmoxnetworks")]
        assert left == [], f"networks never finished deleting: {left}"
        ours = [v["metadata"]["name"] for v in self.api.items("vlans") if v["metadata"]["name"] != "legacy-db"]
        assert ours == [], f"Vlans left after teardown: {ours}"
        assert self.api.find("vlans", "legacy-db") is not None  # never touched
        for plural in PLURALS:
            for o in self.api.items(plural):
                fins = [f for f in o["metadata"].get("finalizers") or [] if f.startswith("proxmox.cozystack.io/")]
                assert not fins, f"{plural} {o['metadata']['name']} keeps {fins}"


Lifecycle.TestCase.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
test_lifecycle = Lifecycle.TestCase


def test_fake_api_server_speaks_kubernetes():
    """The stand-in answers like kube-apiserver where the controller relies on it."""
    api = FakeApiServer()
    w = FakeWriter(api)
    vlans = names.VLANS
    v = w.create(vlans, {"metadata": {"name": "a", "finalizers": [names.FINALIZER]}, "spec": {"id": 1, "provider": "p"}})
    try:
        w.create(vlans, {"metadata": {"name": "a"}, "spec": {}})
    except ApiError as err:
        assert err.already_exists
    else:
        raise AssertionError("create of a taken name must fail")
    w.delete(vlans, "a")
    assert api.find("vlans", "a")["metadata"]["deletionTimestamp"]  # held by the finalizer
    stale = copy.deepcopy(v)
    try:
        w.add_finalizer(vlans, stale, "other/x")  # deleting since it was read: refused (422), a conflict to us
    except ApiError as err:
        assert err.test_failed and err.conflict  # the writer's PatchTestFailed, from the 422
    else:
        raise AssertionError("stale patch must fail")
    w.remove_finalizer(vlans, api.find("vlans", "a"), names.FINALIZER)
    assert api.find("vlans", "a") is None and api.releases == 1
    w.merge_patch(names.NAMESPACES, "x", {}) if api.find("namespaces", "x") else None
    api.put("namespaces", {"metadata": {"name": "x"}})
    w.merge_patch(names.NAMESPACES, "x", {"metadata": {"annotations": {"k": "v"}}})
    assert api.find("namespaces", "x")["metadata"]["annotations"] == {"k": "v"}
    assert json.dumps(w.request("GET", MACHINES.path("x"))) == '{"items": []}'


def test_a_deletion_seen_only_through_a_relist_is_not_hidden_by_our_last_write():
    """Regression (found by hack/chaos.py, B12): our status write, then the user deletes the
    network, then the watch gets 410 and relists — the version we wrote is never delivered,
    only the later deleting one. The read-your-writes overlay used to keep serving our
    non-deleting copy (it waited for exactly our resourceVersion), so the deletion pass did
    not run and the network waited for the next 10-minute resync."""
    m = Lifecycle()
    m.create_subnet_and_pool(0)
    m.create_network(0)
    m.deliver(100)
    m.reconcile_network(0)  # finalizer and status written; the watch has not brought them back
    m.delete_network(0)
    m.relist()
    res = m.ctl.net.reconcile(f"{NS}/n0")
    net = m.api.find("proxmoxnetworks", "n0", NS)
    ready = next(c for c in net["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["reason"], ready["message"]) == ("SubnetStillExists",
                                                   'Subnet "s0" still exists; VLAN 100 is released after it is deleted')
    assert res.requeue_after == 30.0  # the deletion walk's retry, not the 600 s resync of a live network
