"""Addresses of other pools on a network's VLAN (field-reports.md S4; capmox#868).

capmox v0.8+ (v1alpha2 stored) takes an explicit ``defaultIPv4: false`` (or
``defaultIPv6: false``) on every device as unset and sets it true on ``net0`` again, so
``net0`` draws an address of the ProxmoxCluster's default pool (claim ``<m>-net0-00-inet``)
besides the one of its own ``ipPoolRef`` (``<m>-net0-01-inet``; ``capmox-and-ipam.md``,
"IPAddressClaim naming per device"). When ``net0`` is a tenant network's NIC, the VM then
holds an address outside the network's subnet on the network's VLAN.

Such an address is none of the network's business as a holder: only objects naming the
network's pool hold it (``controller.rules.consumers``), and ``AddressConflict`` is about the
network's own pool. It is reported instead: a Warning Event ``ForeignAddressOnNetwork`` on
the network, once per machine, device and address (``controller.plan.actions.ReportOnce``), and a
``doctor`` line. ``Ready`` does not change, and the controller deletes nothing.

Pure functions over plain dicts (the caches' projected objects, or fresh reads for doctor).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from controller.rules.spans import GLOBAL_IN_CLUSTER_IP_POOL, IN_CLUSTER_IP_POOL
from controller.rules.ranges import in_cidr_block, parse_address

MACHINE_KIND = "ProxmoxMachine"
CAPMOX_868 = "cluster-api-provider-proxmox#868"
# v0.7: <m>-<device>-inet / -inet6; v0.8+: <m>-<netN>-<NN>-inet (capmox-and-ipam.md).
_CLAIM_TAIL = re.compile(r"^(?P<device>.+?)(?:-(?P<index>[0-9]{2}))?-inet6?$")
_POOL_KINDS = (IN_CLUSTER_IP_POOL, GLOBAL_IN_CLUSTER_IP_POOL)


@attrs.frozen(order=True)
class Device:
    """One NIC of a ProxmoxMachine: its name (``net0`` for v1alpha1's ``default``), bridge,
    VLAN (None: untagged) and the pools it references, ``(kind, name)``."""

    name: str
    bridge: str
    vlan: int | None
    pools: tuple[tuple[str, str], ...] = ()


@attrs.frozen(order=True)
class ForeignAddress:
    """An address a machine's NIC on the network holds from another pool, outside the
    network's subnet: the machine, the NIC, the address (as Go prints it), the pool
    (``pool_kind`` and name), the IPAddress (named like its claim), and whether the NIC
    itself references that pool."""

    machine: str
    device: str
    address: str
    pool_kind: str
    pool: str
    ipaddress: str
    # The NIC's own pool references name the pool (else it is a default pool: capmox#868).
    asked: bool = False

    @property
    def key(self) -> str:
        """What the Event is posted once for: machine, NIC, address and pool."""
        return f"{self.machine}/{self.device}/{self.address}/{self.pool_kind}/{self.pool}"


def _name(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    value = meta.get("name") if isinstance(meta, Mapping) else None
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _pool_refs(dev: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    refs: list[Any] = [dev.get("ipv4PoolRef"), dev.get("ipv6PoolRef")]
    lst = dev.get("ipPoolRef")
    refs += lst if isinstance(lst, list) else [lst]
    return tuple((str(r["kind"]), str(r["name"])) for r in refs
                 if isinstance(r, Mapping) and r.get("kind") in _POOL_KINDS and r.get("name"))


def machine_devices(machine: Mapping[str, Any]) -> list[Device]:
    """The NICs of a ProxmoxMachine in either capmox shape: v1alpha1 ``network.default``
    (``net0``) and ``additionalDevices[]``, v1alpha2 ``networkDevices[]`` (a device without a
    name is ``net0``, the CRD's default)."""
    spec = machine.get("spec") if isinstance(machine, Mapping) else None
    network = spec.get("network") if isinstance(spec, Mapping) else None
    if not isinstance(network, Mapping):
        return []
    raw: list[tuple[str, Any]] = []
    if isinstance(network.get("default"), Mapping):
        raw.append(("net0", network["default"]))
    for key in ("additionalDevices", "networkDevices"):
        devices = network.get(key)
        for dev in devices if isinstance(devices, list) else []:
            if isinstance(dev, Mapping):
                fallback = "net0" if key == "networkDevices" else ""
                raw.append((str(dev.get("name") or fallback), dev))
    return [Device(name, str(dev.get("bridge") or ""), _int(dev.get("vlan")), _pool_refs(dev))
            for name, dev in raw if name]


def on_network(dev: Device, pool: str, bridge: str, vlan: int | None) -> bool:
    """A NIC is on the network when it references the network's pool, or when it is on the
    network's bridge with the network's VLAN."""
    if pool and (IN_CLUSTER_IP_POOL, pool) in dev.pools:
        return True
    return bool(bridge) and vlan is not None and dev.bridge == bridge and dev.vlan == vlan


def machine_index_keys(machine: Mapping[str, Any]) -> list[str]:
    """Keys of the machine cache's ``network_device`` index: ``<ns>/pool/<pool>`` for each
    InClusterIPPool a NIC references, ``<ns>/vlan/<bridge>/<vlan>`` for each tagged NIC (what
    :func:`on_network` looks at)."""
    ns = (machine.get("metadata") or {}).get("namespace") if isinstance(machine, Mapping) else None
    if not ns:
        return []
    out: set[str] = set()
    for dev in machine_devices(machine):
        out.update(f"{ns}/pool/{name}" for kind, name in dev.pools if kind == IN_CLUSTER_IP_POOL)
        if dev.bridge and dev.vlan is not None:
            out.add(f"{ns}/vlan/{dev.bridge}/{dev.vlan}")
    return sorted(out)


def owner_machines(claim: Mapping[str, Any]) -> list[str]:
    """The ProxmoxMachines a claim's ownerReferences name (capmox sets one, as controller)."""
    refs = (claim.get("metadata") or {}).get("ownerReferences") if isinstance(claim, Mapping) else None
    return sorted({str(r["name"]) for r in refs or []
                   if isinstance(r, Mapping) and r.get("kind") == MACHINE_KIND and r.get("name")})


def claim_device(machine: str, claim: str, devices: Iterable[str]) -> str | None:
    """The NIC of ``machine`` a claim is for, read from its name (``<m>-<device>-inet``,
    ``<m>-<device>-inet6``, ``<m>-<netN>-<NN>-inet``), among ``devices``; None when the name
    does not say."""
    prefix = f"{machine}-"
    if not claim.startswith(prefix):
        return None
    m = _CLAIM_TAIL.match(claim[len(prefix):])
    if m is None:
        return None
    known = set(devices)
    whole = claim[len(prefix):].rsplit("-", 1)[0]  # a v0.7 device name that ends in -NN
    for candidate in (m.group("device"), whole):
        if candidate in known:
            return candidate
    return None


def _pool_ref(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    ref = spec.get("poolRef") if isinstance(spec, Mapping) else None
    if not isinstance(ref, Mapping) or ref.get("kind") not in _POOL_KINDS or not ref.get("name"):
        return None
    return str(ref["kind"]), str(ref["name"])


def find_foreign_addresses(
    pool: str,
    cidr_block: str,
    bridge: str,
    vlan: int | None,
    machines: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    addresses: Iterable[Mapping[str, Any]],
) -> tuple[ForeignAddress, ...]:
    """The addresses that machines' NICs on the network hold from pools other than the
    network's, outside its subnet (sorted; each once).

    :param pool: the network's InClusterIPPool (``spec.ipPool``).
    :param cidr_block: the network's Subnet ``cidrBlock``; nothing is found when it does not
        parse (what is outside cannot be said).
    :param bridge, vlan: the network's bridge and VLAN.
    :param machines: ProxmoxMachines of the network's namespace (others are not looked at).
    :param claims: IPAddressClaims of the namespace; a claim is a machine's when an
        ownerReference names it, its NIC is read from its name.
    :param addresses: IPAddresses of the namespace; a claim's address is the one its
        ``status.addressRef`` names, else the one named like it.
    """
    on: dict[str, dict[str, Device]] = {}
    for m in machines:
        name = _name(m)
        devices = {d.name: d for d in machine_devices(m) if on_network(d, pool, bridge, vlan)}
        if name and devices:
            on[name] = devices
    if not on:
        return ()
    by_name = {_name(a): a for a in addresses if _name(a)}
    out: set[ForeignAddress] = set()
    for claim in claims:
        cname = _name(claim)
        for machine in owner_machines(claim):
            devices = on.get(machine, {})
            device = claim_device(machine, cname, devices)
            if device is None:
                continue
            ref = (claim.get("status") or {}).get("addressRef") if isinstance(claim.get("status"), Mapping) else None
            aname = str(ref.get("name") or "") if isinstance(ref, Mapping) else ""
            addr = by_name.get(aname or cname)
            held = _pool_ref(addr) if addr is not None else None
            if held is None or held == (IN_CLUSTER_IP_POOL, pool):
                continue
            parsed = parse_address((addr.get("spec") or {}).get("address"))  # type: ignore[union-attr]
            if parsed is None:
                continue
            family, value, text = parsed
            if in_cidr_block(cidr_block, family, value) is not False:
                continue  # inside the subnet, or no subnet to compare with
            out.add(ForeignAddress(machine, device, text, held[0], held[1], _name(addr), held in devices[device].pools))
    return tuple(sorted(out))


def foreign_address_message(network: str, vlan: int | None, cidr_block: str, f: ForeignAddress) -> str:
    """The Event's message, which ``doctor`` prints too."""
    on_vlan = f"VLAN {vlan}" if vlan is not None else "its VLAN"
    why = (f"the machine's own pool references name {f.pool_kind} \"{f.pool}\"" if f.asked else
           f"a default pool: capmox v0.8+ sets defaultIPv4/defaultIPv6 on net0 again although the machine says "
           f"false ({CAPMOX_868})")
    return (
        f'machine "{f.machine}" {f.device} is on network "{network}" ({on_vlan}) but also holds {f.address} '
        f'from {f.pool_kind} "{f.pool}" (IPAddress "{f.ipaddress}"), an address outside the network\'s subnet '
        f"{cidr_block} on its VLAN; {why}. The address does not hold the network and the controller deletes "
        "nothing: see ForeignAddressOnNetwork in docs/runbook.md"
    )
