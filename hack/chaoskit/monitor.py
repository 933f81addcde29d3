"""The invariant monitor: its own watches (not the product's informers) on Vlans, Subnets,
networks, machines, addresses, claims and pools, with each object's history by
resourceVersion; it flags two Vlans with one ID on one provider as they appear, and judges
every Vlan deletion against the consumers and Subnets of that moment (:class:`InvariantMonitor`)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.rest import ApiException

from hack.bed import LocalCluster
from hack.chaoskit.common import CAPMOX, IPAM_ADDR, LABEL_NAME, LABEL_NS


KINDS: dict[str, tuple[str, str, str]] = {
    "vlans": ("kubeovn.io", "v1", "vlans"),
    "subnets": ("kubeovn.io", "v1", "subnets"),
    "networks": ("proxmox.cozystack.io", "v1alpha1", "proxmoxnetworks"),
    "machines": (CAPMOX, "v1alpha2", "proxmoxmachines"),
    "addresses": (*IPAM_ADDR, "ipaddresses"),
    "claims": (*IPAM_ADDR, "ipaddressclaims"),
    "pools": ("ipam.cluster.x-k8s.io", "v1alpha2", "inclusterippools"),
}


def obj_key(obj: dict) -> str:
    m = obj.get("metadata") or {}
    return f"{m['namespace']}/{m['name']}" if m.get("namespace") else m["name"]


def rv_of(obj: dict) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def pool_refs(obj: dict) -> list[str]:
    """Pool names a consumer references, read independently of controller.rules.consumers from the
    shapes this harness writes (capmox v1alpha1/v1alpha2 machines, poolRef of IPAM objects)."""
    spec = obj.get("spec") or {}
    out = []
    ref = spec.get("poolRef")
    if isinstance(ref, dict):
        out.append(ref.get("name"))
    netw = spec.get("network") or {}
    for dev in (netw.get("additionalDevices") or []) + (netw.get("networkDevices") or []):
        if isinstance(dev.get("ipv4PoolRef"), dict):
            out.append(dev["ipv4PoolRef"].get("name"))
        for r in dev.get("ipPoolRef") or []:
            out.append(r.get("name"))
    return [p for p in out if p]


@dataclass
class Deletion:
    rv: int
    vlan: dict
    synthesized: bool  # seen by a relist (after a 410 or a broken watch), not a DELETED event
    judged: bool = False


class InvariantMonitor:
    """Independent watches on the kinds that matter, with per-object history by resourceVersion."""

    def __init__(self, cluster: LocalCluster, namespaces: set[str], providers: set[str]) -> None:
        self.cluster = cluster
        self.namespaces = namespaces
        self.providers = providers
        self.lock = threading.Lock()
        self.current: dict[str, dict[str, dict]] = {k: {} for k in KINDS}
        # key -> [(resourceVersion, object or None for deleted, synthesized by a relist)]
        self.history: dict[str, dict[str, list[tuple[int, dict | None, bool]]]] = {k: {} for k in KINDS}
        self.uncertain: list[str] = []
        self.duplicates: list[str] = []  # duplicate-ID flags (kept; judge() adds release judgements)
        self.unjudgeable = 0  # deletions of Vlans whose network the monitor never saw
        self.net_specs: dict[str, dict] = {}  # last known spec of every network key, kept after delete
        self.deletions: list[Deletion] = []
        self.violations: list[str] = []
        self.vlan_events = 0
        self.relists = 0
        self.synced: dict[str, bool] = {k: False for k in KINDS}
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(k,), name=f"monitor-{k}", daemon=True)
                         for k in KINDS]
        self._seen_dups: set[tuple] = set()
        self.seen_by_provider: dict[str, tuple[set[str], set[Any]]] = {}  # provider -> (Vlan names, IDs)

    def start(self, timeout: float = 60.0) -> "InvariantMonitor":
        for t in self._threads:
            t.start()
        end = time.monotonic() + timeout
        while not all(self.synced.values()):
            if time.monotonic() > end:
                raise RuntimeError(f"monitor did not sync: {self.synced}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(50)

    def relevant(self, kind: str, obj: dict) -> bool:
        m = obj.get("metadata") or {}
        if kind == "vlans":
            return (obj.get("spec") or {}).get("provider") in self.providers
        if kind == "subnets":
            return True
        return m.get("namespace") in self.namespaces

    # -- watch loop ------------------------------------------------------------------
    def _run(self, kind: str) -> None:
        group, version, plural = KINDS[kind]
        api = self.cluster.api_client("admin")
        co = k8s.CustomObjectsApi(api)
        rv = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    lst = co.list_cluster_custom_object(group, version, plural, _request_timeout=(5, 60))
                    rv = lst["metadata"]["resourceVersion"]
                    self._snapshot(kind, lst["items"], int(rv))
                    self.synced[kind] = True
                w = k8s_watch.Watch()
                for ev in w.stream(co.list_cluster_custom_object, group, version, plural, resource_version=rv,
                                   timeout_seconds=20, allow_watch_bookmarks=True, _request_timeout=(5, 30)):
                    if self._stop.is_set():
                        w.stop()
                        break
                    etype, obj = ev["type"], ev["object"]
                    if etype == "ERROR":
                        if (obj or {}).get("code") == 410:
                            rv = None
                            break
                        continue
                    if etype == "BOOKMARK":
                        rv = obj["metadata"]["resourceVersion"]
                        continue
                    rv = obj["metadata"]["resourceVersion"]
                    self._event(kind, etype, obj, int(rv), synthesized=False)
            except ApiException as exc:
                if exc.status == 410:
                    rv = None
                else:
                    self._stop.wait(0.3)
            except Exception:  # connection refused / reset while the API server restarts
                self._stop.wait(0.3)
        api.close()

    def _snapshot(self, kind: str, items: list[dict], rv: int) -> None:
        with self.lock:
            if self.synced[kind]:
                self.relists += 1
            fresh = {obj_key(o): o for o in items if self.relevant(kind, o)}
            # Deletes first: a Vlan deleted and another created with its ID while the watch
            # was down must not look like two Vlans holding the ID at once.
            for key in list(self.current[kind]):
                if key not in fresh:
                    self._apply(kind, "DELETED", self.current[kind][key], rv, True)
            for key, obj in fresh.items():
                old = self.current[kind].get(key)
                if old is None or rv_of(old) != rv_of(obj):
                    self._apply(kind, "MODIFIED" if old else "ADDED", obj, rv_of(obj), True)

    def _event(self, kind: str, etype: str, obj: dict, rv: int, synthesized: bool) -> None:
        if not self.relevant(kind, obj):
            return
        with self.lock:
            self._apply(kind, etype, obj, rv, synthesized)

    def _apply(self, kind: str, etype: str, obj: dict, rv: int, synthesized: bool) -> None:
        key = obj_key(obj)
        hist = self.history[kind].setdefault(key, [])
        if etype == "DELETED":
            self.current[kind].pop(key, None)
            hist.append((rv, None, synthesized))
        else:
            self.current[kind][key] = obj
            hist.append((rv, obj, synthesized))
        if kind == "networks" and etype != "DELETED":
            self.net_specs[key] = obj.get("spec") or {}
        if kind != "vlans":
            return
        self.vlan_events += 1
        if etype == "DELETED":
            self.deletions.append(Deletion(rv, obj, synthesized))
            return
        # B01: never two Vlans with one ID on one provider, at any resourceVersion we see.
        spec = obj.get("spec") or {}
        names, ids = self.seen_by_provider.setdefault(spec.get("provider"), (set(), set()))
        names.add((obj.get("metadata") or {}).get("uid") or key)
        ids.add(spec.get("id"))
        same = sorted(k for k, v in self.current["vlans"].items()
                      if (v.get("spec") or {}).get("provider") == spec.get("provider")
                      and (v.get("spec") or {}).get("id") == spec.get("id"))
        if len(same) > 1:
            sig = (spec.get("provider"), spec.get("id"), tuple(same))
            if sig not in self._seen_dups:
                self._seen_dups.add(sig)
                flag = f"duplicate VLAN {spec.get('id')} on provider {spec.get('provider')}: {same} (rv {rv})"
                self.duplicates.append(flag)
                self.violations.append(flag)

    # -- judging deletions ---------------------------------------------------------------
    def _present_at(self, kind: str, key: str, rv: int) -> tuple[dict | None, bool]:
        """The object as of resourceVersion ``rv`` (None: absent) and whether that is certain.

        Entries from a relist carry the object's own resourceVersion (it existed at least
        since then); a delete synthesized by a relist carries the list's resourceVersion,
        but the object may have gone at any point since its previous entry. So an object
        present at ``rv`` whose next entry is such a synthesized delete may already have
        been gone at ``rv``: uncertain (after an API server restart the kinds relist at
        different resourceVersions)."""
        entries = sorted(self.history[kind].get(key, []), key=lambda e: e[0])
        best = None
        nxt = None
        for e in entries:
            if e[0] <= rv:
                best = e
            elif nxt is None:
                nxt = e
        if best is None or best[1] is None:
            return None, True
        certain = not (nxt is not None and nxt[1] is None and nxt[2])
        return best[1], certain

    def _referencing(self, kind: str, key: str, pool: str, lo: int, hi: int) -> tuple[bool, bool, bool]:
        """Whether ``key`` referenced ``pool`` at ``lo``, at ``hi``, and at any entry in between."""
        at_lo, _ = self._present_at(kind, key, lo)
        at_hi, _ = self._present_at(kind, key, hi)
        between = any(o is not None and pool in pool_refs(o)
                      for r, o, _ in self.history[kind].get(key, []) if lo < r <= hi)
        ref = (lambda o: o is not None and pool in pool_refs(o))
        return ref(at_lo), ref(at_hi), between

    def _deleted_since(self, d: Deletion) -> int:
        """For a delete seen only by a relist: the Vlan's previous entry (it went at some
        point after that); for a watched delete, the delete's own resourceVersion."""
        if not d.synthesized:
            return d.rv
        prior = [r for r, o, _ in self.history["vlans"].get(obj_key(d.vlan), []) if r < d.rv and o is not None]
        return max(prior) if prior else d.rv

    def judge(self) -> int:
        """Judge every Vlan deletion again from the history seen so far (a consumer's event
        that arrived late counts); returns how many deletions could be judged. Call after
        the watches have caught up (``caught_up``) for the final word.

        A delete seen only by a relist happened somewhere in (previous entry, list rv]: a
        consumer present at both ends is a violation, one present at some point in between
        only is reported as open (``uncertain``)."""
        violations: list[str] = []
        uncertain: list[str] = []
        judged = unjudgeable = 0
        with self.lock:
            for d in self.deletions:
                d.judged = True
                name = d.vlan["metadata"]["name"]
                labels = d.vlan["metadata"].get("labels") or {}
                how = "relist" if d.synthesized else "watch"
                ns, net = labels.get(LABEL_NS, ""), labels.get(LABEL_NAME, "")
                pool = (self.net_specs.get(f"{ns}/{net}") or {}).get("ipPool")
                lo = self._deleted_since(d)
                if ns and pool:
                    judged += 1
                else:
                    unjudgeable += 1  # its consumers cannot be judged; its listed Subnets still are
                for kind in ("machines", "addresses", "claims") if ns and pool else ():
                    for key in self.history[kind]:
                        if not key.startswith(ns + "/"):
                            continue
                        msg = (f"Vlan {name} (VLAN {(d.vlan.get('spec') or {}).get('id')}) deleted at rv {d.rv} "
                               f"({how}) while {kind[:-1]} {key} referenced pool {ns}/{pool}")
                        if d.synthesized:
                            at_lo, at_hi, between = self._referencing(kind, key, pool, lo, d.rv)
                            if at_lo and at_hi:
                                violations.append(msg)
                            elif at_lo or at_hi or between:
                                uncertain.append(msg)
                            continue
                        obj, certain = self._present_at(kind, key, d.rv)
                        if obj is not None and pool in pool_refs(obj):
                            (violations if certain else uncertain).append(msg)
                for sub in (d.vlan.get("status") or {}).get("subnets") or []:
                    msg = f"Vlan {name} deleted at rv {d.rv} ({how}) while it listed live Subnet {sub}"
                    at_hi, certain = self._present_at("subnets", sub, d.rv)
                    if d.synthesized:
                        # Both ends of the gap must be certain: a Subnet whose own delete a
                        # relist synthesized may have gone before the Vlan did (the audit log
                        # then settles it, recheck_open).
                        at_lo, _ = self._present_at("subnets", sub, lo)
                        if at_lo is not None and at_hi is not None and certain:
                            violations.append(msg)
                        elif at_lo is not None or at_hi is not None:
                            uncertain.append(msg)
                    elif at_hi is not None:
                        (violations if certain else uncertain).append(msg)
            self.violations = self.duplicates + violations
            self.uncertain = uncertain
            self.unjudgeable = unjudgeable
        return judged

    def caught_up(self, timeout: float = 30.0) -> bool:
        """Wait until every watched kind holds exactly what a fresh list returns (same keys,
        same resourceVersions): only then is a final ``judge`` based on all the events."""
        api = self.cluster.api_client("admin")
        co = k8s.CustomObjectsApi(api)
        end = time.monotonic() + timeout
        try:
            while time.monotonic() < end:
                behind = False
                for kind, (group, version, plural) in KINDS.items():
                    lst = co.list_cluster_custom_object(group, version, plural, _request_timeout=(5, 30))
                    want = {obj_key(o): rv_of(o) for o in lst["items"] if self.relevant(kind, o)}
                    with self.lock:
                        have = {k: rv_of(o) for k, o in self.current[kind].items()}
                    if want != have:
                        behind = True
                        break
                if not behind:
                    return True
                time.sleep(0.2)
        except Exception:  # the bed is going down: judge what we have
            return False
        finally:
            api.close()
        return False
