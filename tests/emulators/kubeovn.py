"""A Kube-OVN emulator: the part of kube-ovn-controller the product talks to.

Written from Kube-OVN's documented and source-visible behaviour (``pkg/controller/subnet.go``,
``vlan.go``; product-decisions.md §5; field reports B01, B03, B04, B05):

Subnet add/update path (runs for a Subnet until it succeeds once per spec, like Kube-OVN's
rate-limited work queue; a success is not repeated until the spec changes or :meth:`resync`):

* adds Kube-OVN's finalizer ``kube-ovn-controller`` to every live Subnet;
* ``spec.cidrBlock`` that does not parse, or a gateway outside it: ``Validated`` False,
  ``Ready`` False, ``Error`` True, reason ``ValidateLogicalSwitchFailed``;
* ``spec.vlan`` naming no Vlan: ``Validated`` False / ``Ready`` False reason ``VlanNotFound``
  with Kube-OVN's message (retried every pass, so the Subnet binds once the Vlan appears);
* ``spec.vlan`` naming a Vlan with ``status.conflict: true``: ``Ready`` False reason
  ``ValidateSubnetVlanFailed`` (Kube-OVN's ``validateSubnetVlan``); retried until it clears;
* otherwise, with ``manage_nb``: logical switch ``<subnet>`` (``external_ids:vendor=kube-ovn``),
  localnet port ``localnet.<subnet>`` (type localnet, addresses unknown, tag = Vlan ``spec.id``
  when 1..4095, ``options:network_name=<Vlan spec.provider>``); the subnet name is appended to
  the Vlan's ``status.subnets`` (status subresource, optimistic lock); with ``spec.vpc``: router
  ``<vpc>`` (created on first use), router port ``<vpc>-<subnet>`` with ``<gateway>/<prefix>``
  and the switch's router-type port ``<subnet>-<vpc>``; then ``Validated`` True
  (``ValidateLogicalSwitchSuccess``) and ``Ready`` True (``ResetLogicalSwitchAclSuccess``), and
  ``status.v4availableIPs``/``v4usingIPs`` (v6 likewise).

Subnet delete (Kube-OVN's two separate steps):

* Terminating Subnet: ``kube-ovn-controller`` is removed as soon as the Subnet uses no IPs
  (:meth:`set_using_ips` > 0 holds it, which is how B04's leaked ``IP`` CRs look), whatever
  other finalizers it carries; other finalizers keep it Terminating until their owners act;
* Subnet object gone (the informer's delete event): delete the logical switch (with its
  ports) and the router port, then remove the name from every Vlan's ``status.subnets``.
  ``delete_mode="lost"``: never (kube-ovn-controller restarted before handling the event, B03);
  ``"slow"``: only ``slow_delete_seconds`` after the Subnet is gone.

Vlan handlers (``vlan.go``): a new Vlan lists every Subnet whose ``spec.vlan`` names it in its
``status.subnets`` (whatever state that Subnet is in) and re-runs their add path; a spec change
re-runs it too (re-tagging the localnet ports); so does a delete (the Subnets then report
VlanNotFound). A Subnet that moves to another Vlan stays listed on the old one (Kube-OVN prunes
only on Subnet delete).

Vlan conflicts (B01, PR #5233/#5471): among Vlans with the same ``spec.provider`` and non-zero
``spec.id`` the oldest (creationTimestamp, then name) is clean and every other one gets
``status.conflict: true``; the flag is removed (level-triggered, so never stale) when the
duplicate goes away.

Test helpers: :meth:`prune_now`, :meth:`gc_nb`, :meth:`restart`, :meth:`resync`,
:meth:`drop_router`, :meth:`set_using_ips`, :meth:`set_subnet_ready`, :meth:`set_validated`,
:meth:`clear_overrides`; ``counters``, ``errors``, ``lost``; :meth:`sync` runs one pass now.

Acts on all objects (optionally only those matching ``label_selector``). Objects of other
tests are tolerated: an object that makes a step fail is counted in ``errors`` and skipped.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import time
from typing import Any

from kubernetes.client.rest import ApiException

from ._base import (
    EmulatorBase,
    Resource,
    finalizers,
    is_conflict,
    is_deleting,
    is_not_found,
    meta,
    now_rfc3339,
)

KUBEOVN_FINALIZER = "kube-ovn-controller"

SUBNETS = Resource("kubeovn.io", "v1", "subnets", namespaced=False)
VLANS = Resource("kubeovn.io", "v1", "vlans", namespaced=False)

# Kube-OVN's condition reasons
R_VALIDATE_OK = "ValidateLogicalSwitchSuccess"
R_VALIDATE_FAILED = "ValidateLogicalSwitchFailed"
R_READY_OK = "ResetLogicalSwitchAclSuccess"
R_VLAN_NOT_FOUND = "VlanNotFound"
R_VLAN_INVALID = "ValidateSubnetVlanFailed"
R_NOT_READY = "CreateLogicalSwitchFailed"

DELETE_MODES = ("normal", "lost", "slow")


class SubnetSpecError(ValueError):
    """The Subnet's addresses do not validate (Kube-OVN: ValidateLogicalSwitchFailed)."""


def localnet_port(subnet: str) -> str:
    return f"localnet.{subnet}"


def router_port(vpc: str, subnet: str) -> str:
    return f"{vpc}-{subnet}"


def switch_router_port(subnet: str, vpc: str) -> str:
    return f"{subnet}-{vpc}"


def router_port_mac(name: str) -> str:
    h = hashlib.sha1(name.encode()).digest()
    return "00:00:00:%02x:%02x:%02x" % (h[0], h[1], h[2])


def vlan_id(vlan: dict) -> int | None:
    spec = vlan.get("spec") or {}
    vid = spec.get("id", spec.get("vlanId"))
    try:
        return int(vid) if vid is not None else None
    except (TypeError, ValueError):
        return None


def subnet_networks(name: str, spec: dict) -> list[tuple[ipaddress._BaseNetwork, ipaddress._BaseAddress]]:
    """[(network, gateway)] per CIDR of ``spec.cidrBlock`` (dual stack: comma separated).

    :raises SubnetSpecError: with Kube-OVN's message.
    """
    cidr_block = str(spec.get("cidrBlock") or "")
    nets = []
    for cidr in cidr_block.split(","):
        try:
            nets.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError:
            raise SubnetSpecError(f"subnet {name} cidr {cidr} is invalid") from None
    if not cidr_block:
        raise SubnetSpecError(f"subnet {name} cidr {cidr_block} is invalid")
    gateways: dict[int, ipaddress._BaseAddress] = {}
    for gw in [g.strip() for g in str(spec.get("gateway") or "").split(",") if g.strip()]:
        try:
            addr = ipaddress.ip_address(gw)
        except ValueError:
            raise SubnetSpecError(f"gateway {gw} is not a valid address") from None
        gateways[addr.version] = addr
    out = []
    for net in nets:
        gw = gateways.get(net.version)
        if gw is None:
            gw = net.network_address + 1 if net.num_addresses > 1 else net.network_address
        elif gw not in net:
            raise SubnetSpecError(f"gateway {gw} is not in cidr {spec.get('cidrBlock')}")
        out.append((net, gw))
    return out


def _exclude_count(net: ipaddress._BaseNetwork, exclude_ips: list[str], gateway: ipaddress._BaseAddress) -> int:
    """How many addresses of ``net`` Kube-OVN's excludeIps (``a`` or ``a..b``) plus the gateway cover."""
    ranges: list[tuple[int, int]] = [(int(gateway), int(gateway))]
    for item in exclude_ips or []:
        try:
            if ".." in str(item):
                a, b = (ipaddress.ip_address(x.strip()) for x in str(item).split("..", 1))
            else:
                a = b = ipaddress.ip_address(str(item).strip())
        except ValueError:
            continue
        if a.version != net.version:
            continue
        ranges.append((int(a), int(b)))
    lo, hi = int(net.network_address), int(net.broadcast_address)
    clipped = sorted((max(a, lo), min(b, hi)) for a, b in ranges if max(a, lo) <= min(b, hi))
    total, cur_a, cur_b = 0, None, None
    for a, b in clipped:
        if cur_b is None or a > cur_b + 1:
            if cur_b is not None:
                total += cur_b - cur_a + 1
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a + 1
    return total


def ip_counts(nets: list[tuple[Any, Any]], exclude_ips: list[str], using: int) -> dict[str, float]:
    """Kube-OVN's ``status.v{4,6}{available,using}IPs`` for a subnet using ``using`` IPs."""
    out: dict[str, float] = {}
    for net, gw in nets:
        reserved = 2 if net.version == 4 and net.prefixlen < 31 else (1 if net.version == 6 else 0)
        avail = net.num_addresses - reserved - _exclude_count(net, exclude_ips, gw) - using
        out[f"v{net.version}availableIPs"] = float(max(avail, 0))
        out[f"v{net.version}usingIPs"] = float(using)
    return out


def condition(ctype: str, status: bool, reason: str, message: str = "") -> dict:
    return {"type": ctype, "status": "True" if status else "False", "reason": reason, "message": message}


def merge_conditions(current: list[dict], wanted: list[dict]) -> list[dict]:
    """Kube-OVN's SetCondition: lastUpdateTime on any change, lastTransitionTime on a status flip."""
    now = now_rfc3339()
    out = [dict(c) for c in current or []]
    for w in wanted:
        old = next((c for c in out if c.get("type") == w["type"]), None)
        if old is not None and all(old.get(k, "") == w[k] for k in ("status", "reason", "message")):
            continue
        new = dict(w)
        new["lastUpdateTime"] = now
        new["lastTransitionTime"] = (
            old.get("lastTransitionTime") or now if old is not None and old.get("status") == w["status"] else now
        )
        if old is None:
            out.append(new)
        else:
            out[out.index(old)] = new
    return out


class KubeOvnEmulator(EmulatorBase):
    """See the module docstring. Use as a context manager or call start()/stop()."""

    watched = (SUBNETS, VLANS)
    name = "kubeovn-emulator"

    def __init__(
        self,
        cluster: Any,
        *,
        delete_mode: str = "normal",
        slow_delete_seconds: float = 5.0,
        manage_nb: bool = True,
        resync_seconds: float = 2.0,
        label_selector: str | None = None,
    ) -> None:
        if delete_mode not in DELETE_MODES:
            raise ValueError(f"delete_mode must be one of {DELETE_MODES}, not {delete_mode!r}")
        super().__init__(cluster, resync_seconds=resync_seconds, label_selector=label_selector)
        self.delete_mode = delete_mode
        self.slow_delete_seconds = slow_delete_seconds
        self.manage_nb = manage_nb and bool(getattr(cluster, "nb_unix", None))
        # uid -> spec fingerprint of the last successful add/update path
        self._done: dict[str, str] = {}
        # Vlan name -> (uid, spec) last seen (to run the Vlan add/update/delete handlers)
        self._vlan_seen: dict[str, tuple[str, str]] = {}
        # name -> last seen Subnet (to notice deletions by diffing lists)
        self._known: dict[str, dict] = {}
        # delete events not handled yet: {"name", "uid", "vpc", "due", "nb_done"}
        self._pending: list[dict] = []
        # name -> {ctype: (bool, reason, message)} forced by tests
        self._overrides: dict[str, dict[str, tuple[bool, str, str]]] = {}
        # name -> IPs Kube-OVN believes are in use (holds its finalizer, B04)
        self._using_ips: dict[str, int] = {}
        #: names whose delete event was dropped (delete_mode="lost" or restart())
        self.lost: list[str] = []

    # ================================================================== test helpers

    def prune_now(self, vlan_name: str) -> list[str]:
        """Remove from Vlan ``vlan_name``'s ``status.subnets`` every Subnet that no longer
        exists (what Kube-OVN's delete handler would have done). Returns the pruned names."""
        with self._lock:
            vlan = self.get(VLANS, vlan_name)
            if vlan is None:
                return []
            listed = list((vlan.get("status") or {}).get("subnets") or [])
            gone = [s for s in listed if self.get(SUBNETS, s) is None]
            if gone:
                self._remove_from_vlan(vlan_name, gone)
            return gone

    def gc_nb(self) -> list[str]:
        """Kube-OVN's startup GC: delete logical switches (and their router ports) whose Subnet
        no longer exists. Like the real GC it never touches ``Vlan.status.subnets`` (B03)."""
        with self._lock:
            if not self.manage_nb:
                return []
            out = self.cluster.nbctl("--bare", "--columns=name", "find", "Logical_Switch",
                                     "external_ids:vendor=kube-ovn")
            removed = []
            for ls in sorted({line.strip() for line in out.splitlines() if line.strip()}):
                if self.get(SUBNETS, ls) is None:
                    self._nb_delete_subnet(ls)
                    removed.append(ls)
            return removed

    def restart(self, gc: bool = True) -> None:
        """kube-ovn-controller restarts: in-memory queues are lost (pending delete events are
        dropped, so their Vlan entries are never pruned), every live Subnet goes through the
        add path again, and with ``gc`` the startup GC runs."""
        with self._lock:
            for p in self._pending:
                self.lost.append(p["name"])
                self.counters["deletes_lost"] += 1
            self._pending.clear()
            self._done.clear()
            self._known.clear()
            self._vlan_seen.clear()
            if gc:
                self.gc_nb()
        self.kick()

    def resync(self, subnet: str | None = None) -> None:
        """Run the add path again for ``subnet`` (or all): Kube-OVN re-creates router ports
        only on that path (B05)."""
        with self._lock:
            if subnet is None:
                self._done.clear()
            elif subnet in self._known:
                self._done.pop(meta(self._known[subnet]).get("uid"), None)
        self.kick()

    def drop_router(self, vpc: str) -> None:
        """Delete logical router ``vpc`` with its ports, as Kube-OVN's GC does after the Vpc
        is deleted (B05). Ports come back only through :meth:`resync`."""
        with self._lock:
            self.cluster.nbctl("--if-exists", "lr-del", vpc)

    def set_using_ips(self, name: str, count: int) -> None:
        """Kube-OVN's idea of IPs in use in Subnet ``name``; > 0 keeps its finalizer (B04)."""
        with self._lock:
            self._using_ips[name] = int(count)
        self.kick()

    def set_subnet_ready(self, name: str, ready: bool, message: str = "", reason: str | None = None) -> dict:
        """Force Kube-OVN's ``Ready`` condition of Subnet ``name`` (kept on later passes)."""
        reason = reason or (R_READY_OK if ready else R_NOT_READY)
        return self._override(name, "Ready", ready, reason, message)

    def set_validated(self, name: str, ok: bool, message: str = "", reason: str | None = None) -> dict:
        """Force Kube-OVN's ``Validated`` condition of Subnet ``name`` (kept on later passes)."""
        reason = reason or (R_VALIDATE_OK if ok else R_VALIDATE_FAILED)
        return self._override(name, "Validated", ok, reason, message)

    def clear_overrides(self, name: str) -> None:
        with self._lock:
            self._overrides.pop(name, None)
        self.resync(name)

    def _override(self, name: str, ctype: str, ok: bool, reason: str, message: str) -> dict:
        with self._lock:
            self._overrides.setdefault(name, {})[ctype] = (ok, reason, message)
            for _ in range(10):
                sub = self.get(SUBNETS, name)
                if sub is None:
                    raise LookupError(f"Subnet {name} not found")
                try:
                    return self._write_status(sub, [condition(ctype, ok, reason, message)], {})
                except ApiException as exc:
                    if not is_conflict(exc):
                        raise
            raise RuntimeError(f"could not write Subnet {name} status (conflicts)")

    # ================================================================== the pass

    def run_pass(self) -> float | None:
        subnets = self.list_all(SUBNETS)
        vlans = self.list_all(VLANS)
        vlans = self._reconcile_conflicts(vlans)
        self._vlan_events(vlans, subnets)

        current = {meta(s)["name"]: s for s in subnets}
        # delete events: known before, now gone (or re-created with another uid)
        for name, old in list(self._known.items()):
            new = current.get(name)
            if new is None or meta(new).get("uid") != meta(old).get("uid"):
                self._on_deleted(old)
        self._known = dict(current)

        for sub in subnets:
            try:
                self._reconcile_subnet(sub, vlans)
            except Exception as exc:
                if is_conflict(exc) or is_not_found(exc):
                    self.kick()
                else:
                    self.record_error(f"subnet {meta(sub).get('name')}", exc)

        return self._run_pending()

    # ------------------------------------------------------------------ Vlan conflicts

    def _reconcile_conflicts(self, vlans: list[dict]) -> dict[str, dict]:
        """Set/clear status.conflict; return the Vlans by name as they are after the writes."""
        out = {meta(v)["name"]: v for v in vlans}
        groups: dict[tuple[str, int], list[dict]] = {}
        for v in vlans:
            vid = vlan_id(v)
            if not vid:  # Kube-OVN: "no conflict if vlan id is 0"
                continue
            groups.setdefault((str((v.get("spec") or {}).get("provider") or ""), vid), []).append(v)
        for v in vlans:
            vid = vlan_id(v)
            want = False
            if vid:
                key = (str((v.get("spec") or {}).get("provider") or ""), vid)
                oldest = min(groups[key], key=lambda o: (meta(o).get("creationTimestamp") or "", meta(o)["name"]))
                want = meta(oldest)["name"] != meta(v)["name"]
            have = bool((v.get("status") or {}).get("conflict"))
            if want == have:
                continue
            try:
                out[meta(v)["name"]] = self.patch(VLANS, v, {"status": {"conflict": True if want else None}},
                                                  status=True)
                self.counters["conflicts_set" if want else "conflicts_cleared"] += 1
            except Exception as exc:
                if not is_not_found(exc):
                    self.record_error(f"vlan {meta(v)['name']} conflict", exc)
        return out

    def _vlan_events(self, vlans: dict[str, dict], subnets: list[dict]) -> None:
        """Kube-OVN's Vlan handlers. Add: list every Subnet whose spec.vlan names the Vlan in
        its status.subnets and re-run their add path. Update (spec): re-run the add path of
        those Subnets (which re-tags their localnet ports). Delete: re-run it too (they then
        report VlanNotFound)."""
        seen = {name: (meta(v).get("uid"), json.dumps(v.get("spec") or {}, sort_keys=True))
                for name, v in vlans.items()}
        changed = {n for n in set(seen) | set(self._vlan_seen) if seen.get(n) != self._vlan_seen.get(n)}
        for name in changed:
            users = [s for s in subnets if (s.get("spec") or {}).get("vlan") == name]
            for s in users:
                self._done.pop(meta(s).get("uid"), None)
            added = name in seen and (name not in self._vlan_seen or self._vlan_seen[name][0] != seen[name][0])
            if added and users:
                try:
                    for s in users:
                        self._add_to_vlan(name, meta(s)["name"])
                except Exception as exc:
                    if not (is_conflict(exc) or is_not_found(exc)):
                        self.record_error(f"vlan {name} add", exc)
                    seen.pop(name)  # try the add handler again next pass
                    self.kick()
        self._vlan_seen = seen

    # ------------------------------------------------------------------ Subnet add/update path

    def _fingerprint(self, sub: dict) -> str:
        return json.dumps(sub.get("spec") or {}, sort_keys=True)

    def _reconcile_subnet(self, sub: dict, vlans: dict[str, dict]) -> None:
        m = meta(sub)
        name, uid = m["name"], m.get("uid")
        if is_deleting(sub):
            if KUBEOVN_FINALIZER in finalizers(sub) and self._using_ips.get(name, 0) == 0:
                self.remove_finalizer(SUBNETS, sub, KUBEOVN_FINALIZER)
                self.counters["finalizers_removed"] += 1
            return
        if KUBEOVN_FINALIZER not in finalizers(sub):
            sub = self.add_finalizer(SUBNETS, sub, KUBEOVN_FINALIZER)
            self.counters["finalizers_added"] += 1
        fp = self._fingerprint(sub)
        if self._done.get(uid) == fp:
            return
        spec = sub.get("spec") or {}

        try:
            nets = subnet_networks(name, spec)
        except SubnetSpecError as exc:
            msg = str(exc)
            self._write_status(sub, [condition("Validated", False, R_VALIDATE_FAILED, msg),
                                     condition("Ready", False, R_VALIDATE_FAILED, msg),
                                     condition("Error", True, R_VALIDATE_FAILED, msg)], {})
            self.counters["subnets_invalid"] += 1
            self._done[uid] = fp  # only a spec change can fix it
            return

        vlan_name = str(spec.get("vlan") or "")
        vlan = None
        if vlan_name:
            vlan = vlans.get(vlan_name)
            if vlan is None:
                msg = (f"failed to validate vlan for subnet {name}, failed to get vlan {vlan_name}: "
                       f'vlan.kubeovn.io "{vlan_name}" not found')
                if self._write_status(sub, [condition("Validated", False, R_VLAN_NOT_FOUND, msg),
                                            condition("Ready", False, R_VLAN_NOT_FOUND, msg),
                                            condition("Error", True, R_VLAN_NOT_FOUND, msg)], {}) is not sub:
                    self.counters["subnets_vlan_not_found"] += 1
                return  # retried every pass until the Vlan exists
            if (vlan.get("status") or {}).get("conflict"):
                msg = (f"failed to validate vlan for subnet {name}, subnet {name} has invalid conflict "
                       f"vlan {vlan_name}")
                if self._write_status(sub, [condition("Validated", True, R_VLAN_INVALID),
                                            condition("Ready", False, R_VLAN_INVALID, msg),
                                            condition("Error", True, R_VLAN_INVALID, msg)], {}) is not sub:
                    self.counters["subnets_vlan_conflict"] += 1
                return

        vpc = str(spec.get("vpc") or "")
        if self.manage_nb:
            self._nb_ensure_subnet(name, nets, vlan, vpc)
        if vlan is not None:
            self._add_to_vlan(vlan_name, name)

        extra = ip_counts(nets, list(spec.get("excludeIps") or []), self._using_ips.get(name, 0))
        wanted = [condition("Validated", True, R_VALIDATE_OK), condition("Ready", True, R_READY_OK)]
        if any(c.get("type") == "Error" for c in (sub.get("status") or {}).get("conditions") or []):
            wanted.append(condition("Error", False, R_READY_OK))
        self._write_status(sub, wanted, extra)
        self.counters["subnets_bound" if vlan is not None else "subnets_ready"] += 1
        self._done[uid] = fp

    def _write_status(self, sub: dict, wanted: list[dict], extra: dict) -> dict:
        """Set conditions (plus test overrides) and extra status fields; write only on change."""
        name = meta(sub)["name"]
        forced = [condition(t, ok, r, msg) for t, (ok, r, msg) in self._overrides.get(name, {}).items()]
        types = {c["type"] for c in forced}
        wanted = [c for c in wanted if c["type"] not in types] + forced
        status = dict(sub.get("status") or {})
        status["conditions"] = merge_conditions(status.get("conditions") or [], wanted)
        status.update(extra)
        if status == (sub.get("status") or {}):
            return sub
        body = dict(sub)
        body["status"] = status
        return self.replace_status(SUBNETS, body)

    def _add_to_vlan(self, vlan_name: str, subnet: str) -> None:
        vlan = self.get(VLANS, vlan_name)
        if vlan is None:
            raise ApiException(status=404, reason=f"Vlan {vlan_name} disappeared")
        status = dict(vlan.get("status") or {})
        listed = list(status.get("subnets") or [])
        if subnet in listed:
            return
        status["subnets"] = listed + [subnet]
        vlan["status"] = status
        self.replace_status(VLANS, vlan)
        self.counters["vlan_status_added"] += 1

    def _remove_from_vlan(self, vlan_name: str, names: list[str]) -> bool:
        """Drop ``names`` from one Vlan's status.subnets; True when done (or nothing to do)."""
        for _ in range(5):
            vlan = self.get(VLANS, vlan_name)
            if vlan is None:
                return True
            status = dict(vlan.get("status") or {})
            listed = list(status.get("subnets") or [])
            keep = [s for s in listed if s not in names]
            if keep == listed:
                return True
            status["subnets"] = keep
            vlan["status"] = status
            try:
                self.replace_status(VLANS, vlan)
                self.counters["vlan_status_pruned"] += len(listed) - len(keep)
                return True
            except ApiException as exc:
                if exc.status == 404:
                    return True
                if exc.status != 409:
                    raise
        return False

    # ------------------------------------------------------------------ delete events

    def _on_deleted(self, old: dict) -> None:
        name = meta(old)["name"]
        self.counters["deletes_seen"] += 1
        if self.delete_mode == "lost":
            self.lost.append(name)
            self.counters["deletes_lost"] += 1
            return
        delay = self.slow_delete_seconds if self.delete_mode == "slow" else 0.0
        self._pending.append({
            "name": name,
            "uid": meta(old).get("uid"),
            "vpc": str((old.get("spec") or {}).get("vpc") or ""),
            "due": time.monotonic() + delay,
            "nb_done": False,
        })
        self._done.pop(meta(old).get("uid"), None)
        self._using_ips.pop(name, None)

    def _run_pending(self) -> float | None:
        now = time.monotonic()
        next_due: float | None = None
        still: list[dict] = []
        for p in self._pending:
            if p["due"] > now:
                still.append(p)
                next_due = p["due"] - now if next_due is None else min(next_due, p["due"] - now)
                continue
            try:
                if not p["nb_done"]:
                    if self.manage_nb:
                        self._nb_delete_subnet(p["name"], p["vpc"])
                    p["nb_done"] = True
                # Kube-OVN walks every Vlan and prunes the name where listed
                ok = True
                for vlan in self.list_all(VLANS):
                    if p["name"] in ((vlan.get("status") or {}).get("subnets") or []):
                        ok = self._remove_from_vlan(meta(vlan)["name"], [p["name"]]) and ok
                if not ok:
                    raise RuntimeError("Vlan status kept conflicting")
                self.counters["deletes_done"] += 1
            except Exception as exc:
                self.record_error(f"delete subnet {p['name']}", exc)
                p["due"] = now + 0.2
                still.append(p)
                next_due = 0.2 if next_due is None else min(next_due, 0.2)
        self._pending = still
        return next_due

    # ------------------------------------------------------------------ OVN NB

    def _nb_ensure_subnet(self, name: str, nets: list[tuple[Any, Any]], vlan: dict | None, vpc: str) -> None:
        cidr = ",".join(str(n) for n, _ in nets)
        args = ["--may-exist", "ls-add", name, "--", "set", "Logical_Switch", name,
                "external_ids:vendor=kube-ovn", f'other_config:subnet="{cidr}"']
        if vlan is not None:
            lsp = localnet_port(name)
            provider = str((vlan.get("spec") or {}).get("provider") or "")
            vid = vlan_id(vlan) or 0
            args += ["--", "--may-exist", "lsp-add", name, lsp,
                     "--", "lsp-set-type", lsp, "localnet",
                     "--", "lsp-set-addresses", lsp, "unknown",
                     "--", "lsp-set-options", lsp, f"network_name={provider}"]
            if 0 < vid < 4096:
                args += ["--", "set", "Logical_Switch_Port", lsp, f"tag={vid}"]
            else:
                args += ["--", "clear", "Logical_Switch_Port", lsp, "tag"]
        created = not self._nb_exists("Logical_Switch", name)
        self.cluster.nbctl(*args)
        if created:
            self.counters["switches_created"] += 1
        if not vpc:
            return
        lrp = router_port(vpc, name)
        lsp = switch_router_port(name, vpc)
        networks = [f"{gw}/{net.prefixlen}" for net, gw in nets]
        args = ["--may-exist", "lr-add", vpc, "--", "set", "Logical_Router", vpc, "external_ids:vendor=kube-ovn"]
        existing = self.cluster.nbctl("--if-exists", "get", "Logical_Router_Port", lrp, "networks").strip()
        if existing:
            args += ["--", "set", "Logical_Router_Port", lrp,
                     "networks=" + "[" + ",".join(f'"{n}"' for n in networks) + "]"]
        else:
            args += ["--", "lrp-add", vpc, lrp, router_port_mac(lrp), *networks]
        args += ["--", "set", "Logical_Router_Port", lrp, "external_ids:vendor=kube-ovn",
                 f"external_ids:subnet={name}",
                 "--", "--may-exist", "lsp-add", name, lsp,
                 "--", "lsp-set-type", lsp, "router",
                 "--", "lsp-set-addresses", lsp, "router",
                 "--", "lsp-set-options", lsp, f"router-port={lrp}"]
        self.cluster.nbctl(*args)
        if not existing:
            self.counters["router_ports_created"] += 1

    def _nb_exists(self, table: str, name: str) -> bool:
        return bool(self.cluster.nbctl("--bare", "--columns=_uuid", "find", table, f"name={name}").strip())

    def _nb_delete_subnet(self, name: str, vpc: str = "") -> None:
        args = ["--if-exists", "ls-del", name]
        ports = [p for p in self.cluster.nbctl("--bare", "--columns=name", "find", "Logical_Router_Port",
                                                f"external_ids:subnet={name}").split() if p]
        if vpc:
            ports.append(router_port(vpc, name))
        for p in sorted(set(ports)):
            args += ["--", "--if-exists", "lrp-del", p]
        existed = self._nb_exists("Logical_Switch", name)
        self.cluster.nbctl(*args)
        if existed:
            self.counters["switches_deleted"] += 1
