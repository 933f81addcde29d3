"""Who still uses an InClusterIPPool: the pool's own count, ProxmoxMachines (capmox
v1alpha1 and v1alpha2 shapes), IPAddresses and IPAddressClaims.

Rules: reference-behaviour.md §6 step 1, ``capmox-and-ipam.md`` "Recognising the
consumers", ``product-decisions.md`` §4.2 and §4.3. Pure functions over plain dicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from controller.rules.listing import SHOWN, first_shown

POOL_KIND = "InClusterIPPool"
PROTECT_POOL = "ipam.cluster.x-k8s.io/ProtectPool"
# CAPI's pause annotation: a clusterctl move is in progress, nothing may be released (field-reports.md B15).
PAUSED = "cluster.x-k8s.io/paused"


def _paused(obj: Mapping[str, Any] | None) -> bool:
    return obj is not None and PAUSED in ((obj.get("metadata") or {}).get("annotations") or {})


def _is_pool_ref(ref: Any, pool: str) -> bool:
    # apiGroup is not checked, as in the reference (§6 step 1).
    return isinstance(ref, Mapping) and ref.get("kind") == POOL_KIND and ref.get("name") == pool


def machine_pool_refs(machine: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every pool reference of a ProxmoxMachine's ``spec.network`` in either capmox shape.

    v1alpha1: ``default.ipv4PoolRef``/``ipv6PoolRef`` and the same on each
    ``additionalDevices[]``; v1alpha2: ``networkDevices[].ipPoolRef[]``. A v1alpha2 object
    read through v1alpha1 (or the reverse) is understood either way.
    """
    spec = machine.get("spec") if isinstance(machine, Mapping) else None
    network = spec.get("network") if isinstance(spec, Mapping) else None
    if not isinstance(network, Mapping):
        return []
    refs: list[Mapping[str, Any]] = []
    devices: list[Any] = []
    default = network.get("default")
    if isinstance(default, Mapping):
        devices.append(default)
    for key in ("additionalDevices", "networkDevices"):
        value = network.get(key)
        if isinstance(value, list):
            devices.extend(value)
    for dev in devices:
        if not isinstance(dev, Mapping):
            continue
        for key in ("ipv4PoolRef", "ipv6PoolRef"):
            ref = dev.get(key)
            if isinstance(ref, Mapping):
                refs.append(ref)
        lst = dev.get("ipPoolRef")
        if isinstance(lst, list):
            refs.extend(r for r in lst if isinstance(r, Mapping))
        elif isinstance(lst, Mapping):  # tolerate a single object where a list belongs
            refs.append(lst)
    return refs


def machine_uses_pool(machine: Mapping[str, Any], pool: str) -> bool:
    return any(_is_pool_ref(r, pool) for r in machine_pool_refs(machine))


def pool_ref_names_pool(obj: Mapping[str, Any], pool: str) -> bool:
    """IPAddress / IPAddressClaim whose ``spec.poolRef`` names InClusterIPPool ``pool``."""
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    return isinstance(spec, Mapping) and _is_pool_ref(spec.get("poolRef"), pool)


@attrs.frozen
class Holder:
    """One object that holds a pool: ``kind`` and ``name``, and what is odd about it
    (empty when nothing is): deleting since when on which finalizers, owner not found,
    an address without its claim, a claim without an address."""

    kind: str
    name: str
    odd: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.name}" + (f" ({self.odd})" if self.odd else "")


@attrs.frozen
class Consumers:
    """What holds a pool: ``used`` (pool status), ``protected`` (Terminating pool still
    carrying ProtectPool), counts of machines, addresses and claims naming it, and those
    objects by name (``holders``: machines, claims, addresses, each by name)."""

    used: int = 0
    protected: bool = False
    machines: int = 0
    addresses: int = 0
    claims: int = 0
    paused: bool = False
    holders: tuple[Holder, ...] = ()
    # Kinds the fresh read could not list, "<Kind>: <error>" (field-reports.md R8): an unknown holder is a holder.
    unlisted: tuple[str, ...] = ()

    @property
    def busy(self) -> bool:
        return (
            self.used > 0 or self.protected or self.paused
            or self.machines > 0 or self.addresses > 0 or self.claims > 0 or bool(self.unlisted)
        )

    @property
    def stuck(self) -> int:
        """How many holders have something odd about them (the stuck-holders gauge)."""
        return sum(1 for h in self.holders if h.odd)

    def named(self, limit: int | None = SHOWN) -> str:
        """The holders, first ``limit`` (None: all), then "and N more"."""
        return first_shown(self.holders, limit)

    def message(self, pool: str, vlan: int, subnet: str, limit: int | None = SHOWN) -> str:
        """The ``InUse`` message; the reference's text, with our extra consumers named
        only when there are any, then the holders by name (``limit`` of them; 0: none, for
        a reader that lists them itself, as ``doctor`` does)."""
        msg = f'{self.used} address(es) of pool "{pool}" are allocated and {self.machines} ProxmoxMachine(s) reference it'
        if self.addresses or self.claims:
            msg += f"; {self.addresses} IPAddress(es) and {self.claims} IPAddressClaim(s) name the pool"
        if self.protected:
            msg += f"; the pool is being deleted and still carries {PROTECT_POOL}"
        if self.paused:
            msg += f"; the pool or one of its addresses carries {PAUSED} (a move is in progress)"
        if self.holders and limit != 0:
            msg += f"; held by {self.named(limit)}"
        if self.unlisted:
            msg += (f"; cannot list {'; '.join(self.unlisted)}, and an object that cannot be read may hold the pool, "
                    f"so VLAN {vlan} and subnet \"{subnet}\" are kept until it can be listed and nothing holds them")
            return msg
        return msg + f'; VLAN {vlan} and subnet "{subnet}" are kept until they are gone'


def _name(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return str(meta.get("name") or "") if isinstance(meta, Mapping) else ""


def _deleting(obj: Mapping[str, Any]) -> list[str]:
    meta = obj.get("metadata") or {}
    since = meta.get("deletionTimestamp")
    if not since:
        return []
    fins = [str(f) for f in meta.get("finalizers") or []]
    return [f"deleting since {since}" + (f" on finalizer {', '.join(fins)}" if fins else "")]


def _failed(machine: Mapping[str, Any]) -> list[str]:
    """A machine's False conditions whose reason ends in ``Failed`` (capmox marks a VM it
    cannot destroy ``DeletionFailed`` with the Proxmox error as the message, e.g. "VM 107 is
    running - destroy failed"), as ``<type> <reason>: "<message>"``, from
    both condition lists a capmox machine may carry (``status.conditions``, and v1alpha2's
    ``status.deprecated.v1beta1.conditions``), each reason once."""
    status = machine.get("status") if isinstance(machine.get("status"), Mapping) else {}
    lists = [status.get("conditions"),
             ((status.get("deprecated") or {}).get("v1beta1") or {}).get("conditions")
             if isinstance(status.get("deprecated"), Mapping) else None]
    out: list[str] = []
    for conds in lists:
        for c in conds if isinstance(conds, list) else []:
            if not isinstance(c, Mapping) or c.get("status") != "False":
                continue
            reason = str(c.get("reason") or "")
            if not reason.endswith("Failed"):
                continue
            text = f'{c.get("type")} {reason}' + (f': "{c.get("message")}"' if c.get("message") else "")
            if text not in out:
                out.append(text)
    return out


def _missing_owner(obj: Mapping[str, Any], machines: set[str]) -> list[str]:
    """An owner reference to a ProxmoxMachine the namespace no longer has (the owners we
    can see; others are not judged)."""
    out = []
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") == "ProxmoxMachine" and ref.get("name") not in machines:
            out.append(f"owner ProxmoxMachine {ref.get('name')} not found")
    return out


def _ref_name(obj: Mapping[str, Any], section: str, field: str) -> str:
    ref = (obj.get(section) or {}).get(field)
    return str(ref.get("name") or "") if isinstance(ref, Mapping) else ""


def holders_of(
    machines: list[Mapping[str, Any]], claims: list[Mapping[str, Any]], addresses: list[Mapping[str, Any]],
    all_machines: set[str],
) -> tuple[Holder, ...]:
    """The holders of a pool with what is odd about each.

    :param machines, claims, addresses: the objects naming the pool.
    :param all_machines: names of every ProxmoxMachine in the namespace (owner checks).
    """
    claim_names = {_name(c) for c in claims}
    address_names = {_name(a) for a in addresses}
    out: list[Holder] = []
    for m in sorted(machines, key=_name):
        out.append(Holder("ProxmoxMachine", _name(m), "; ".join(_deleting(m) + _failed(m))))
    for c in sorted(claims, key=_name):
        odd = _deleting(c) + _missing_owner(c, all_machines)
        addr = _ref_name(c, "status", "addressRef")
        if not addr or addr not in address_names:
            odd.append("no IPAddress" if not addr else f"its IPAddress {addr} not found")
        out.append(Holder("IPAddressClaim", _name(c), "; ".join(odd)))
    for a in sorted(addresses, key=_name):
        odd = _deleting(a)
        claim = _ref_name(a, "spec", "claimRef")
        if not claim or claim not in claim_names:
            odd.append("no IPAddressClaim" if not claim else f"its IPAddressClaim {claim} not found")
        out.append(Holder("IPAddress", _name(a), "; ".join(odd)))
    return tuple(out)


def count_consumers(
    pool_obj: Mapping[str, Any] | None,
    pool: str,
    machines: Iterable[Mapping[str, Any]],
    addresses: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
) -> Consumers:
    """Count a pool's consumers among objects of the network's namespace.

    Terminating machines count (they still hold their VM); see §6 step 1.
    """
    machines = list(machines)
    mine = [m for m in machines if machine_uses_pool(m, pool)]
    addresses = [a for a in addresses if pool_ref_names_pool(a, pool)]
    claims = [c for c in claims if pool_ref_names_pool(c, pool)]
    used, protected = 0, False
    if pool_obj is not None:
        ip = (pool_obj.get("status") or {}).get("ipAddresses") or {}
        u = ip.get("used") if isinstance(ip, Mapping) else None
        used = u if isinstance(u, int) and not isinstance(u, bool) else 0
        meta = pool_obj.get("metadata") or {}
        protected = bool(meta.get("deletionTimestamp")) and PROTECT_POOL in (meta.get("finalizers") or [])
    return Consumers(
        used=used,
        protected=protected,
        machines=len(mine),
        addresses=len(addresses),
        claims=len(claims),
        paused=_paused(pool_obj) or any(_paused(a) for a in addresses),
        holders=holders_of(mine, claims, addresses, {_name(m) for m in machines}),
    )
