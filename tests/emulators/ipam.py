"""An emulator of the in-cluster IPAM provider (cluster-api-ipam-provider-in-cluster) for
``InClusterIPPool`` (ipam.cluster.x-k8s.io/v1alpha2, namespaced).

Written from capmox-and-ipam.md ("In-cluster IPAM provider") and field report B15:

Pool reconciler

* adds ``ipam.cluster.x-k8s.io/ProtectPool`` to every live pool;
* ``status.ipAddresses``:
  - ``total``: the addresses of ``spec.addresses`` (each an IP, a range ``a-b`` or a CIDR; one
    family) minus ``spec.excludedAddresses``, minus the network address and (IPv4) the broadcast
    address of the subnet inferred from the first address and ``spec.prefix`` (unless
    ``spec.allocateReservedIPAddresses``; an IPv4 /31 or /32 and an IPv6 /128 reserve nothing),
    minus the gateway when it lies in what is left;
  - ``used``: IPAddress objects in the pool's namespace whose ``spec.poolRef`` is
    ``{apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool, name: <pool>}`` (all of them, in
    range or not, Terminating included);
  - ``free`` = total − used (as upstream: not clamped);
  - ``outOfRange``: distinct used addresses outside the pool's set (addresses − excluded −
    reserved);
  recomputed on every IPAddress change; written only when it differs; a pool whose spec does
  not parse keeps its old status (upstream's reconcile fails the same way);
* a Terminating pool: status is left alone, and ProtectPool is removed only once no IPAddress
  references it (B15). The delete *webhook* cannot be emulated here (no admission server), so
  a delete is always accepted, exactly as with the ``skip-validate-delete-webhook`` annotation.

Claim reconciler (``fulfil_claims=True``, or one claim at a time through :meth:`allocate`)

* claim ``spec.poolRef`` ``{kind: InClusterIPPool, name}`` in the claim's namespace: adds
  ``ipam.cluster.x-k8s.io/ReleaseAddress`` to the claim, creates IPAddress ``<claim name>``
  (lowest free address; ``spec.address``, ``prefix``, ``gateway``, ``claimRef``, ``poolRef``;
  finalizer ``ipam.cluster.x-k8s.io/ProtectAddress``; owner references to the claim and the
  pool) and sets ``claim.status.addressRef.name`` and a ``Ready`` condition;
* not reconciled: claims against a pool with annotation ``cluster.x-k8s.io/paused``, and claims
  naming a Cluster (``spec.clusterName`` or label ``cluster.x-k8s.io/cluster-name``) that
  cannot be found, unless the claim is being deleted;
* a Terminating claim: its IPAddress loses ProtectAddress and is deleted, then the claim loses
  ReleaseAddress;
* a Terminating IPAddress whose claim is gone (or Terminating) loses ProtectAddress.
"""

from __future__ import annotations

import ipaddress
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

GROUP = "ipam.cluster.x-k8s.io"
POOL_KIND = "InClusterIPPool"
PROTECT_POOL = "ipam.cluster.x-k8s.io/ProtectPool"
RELEASE_ADDRESS = "ipam.cluster.x-k8s.io/ReleaseAddress"
PROTECT_ADDRESS = "ipam.cluster.x-k8s.io/ProtectAddress"
PAUSED = "cluster.x-k8s.io/paused"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"

POOLS = Resource(GROUP, "v1alpha2", "inclusterippools", namespaced=True)
ADDRESSES = Resource(GROUP, "v1beta2", "ipaddresses", namespaced=True)
CLAIMS = Resource(GROUP, "v1beta2", "ipaddressclaims", namespaced=True)
CLUSTERS = Resource("cluster.x-k8s.io", "v1beta1", "clusters", namespaced=True)


MAX_INT64 = 2**63 - 1


class PoolSpecError(ValueError):
    pass


# ====================================================================== interval sets


class IPRangeSet:
    """A set of addresses of one family as sorted, disjoint, inclusive integer intervals."""

    def __init__(self, version: int, ranges: list[tuple[int, int]] | None = None) -> None:
        self.version = version
        self.ranges = self._normalise(ranges or [])

    @staticmethod
    def _normalise(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for a, b in sorted(r for r in ranges if r[0] <= r[1]):
            if out and a <= out[-1][1] + 1:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        return out

    def union(self, other: "IPRangeSet") -> "IPRangeSet":
        return IPRangeSet(self.version, self.ranges + other.ranges)

    def minus(self, other: "IPRangeSet") -> "IPRangeSet":
        out: list[tuple[int, int]] = []
        for a, b in self.ranges:
            pieces = [(a, b)]
            for c, d in other.ranges:
                nxt = []
                for x, y in pieces:
                    if d < x or c > y:
                        nxt.append((x, y))
                        continue
                    if c > x:
                        nxt.append((x, c - 1))
                    if d < y:
                        nxt.append((d + 1, y))
                pieces = nxt
            out.extend(pieces)
        return IPRangeSet(self.version, out)

    def __contains__(self, ip: int) -> bool:
        return any(a <= ip <= b for a, b in self.ranges)

    def count(self) -> int:
        """Number of addresses, capped at the largest int64 like upstream's IPSetCount."""
        return min(sum(b - a + 1 for a, b in self.ranges), MAX_INT64)

    def addresses(self):
        for a, b in self.ranges:
            yield from range(a, b + 1)


def _addr(text: str) -> ipaddress._BaseAddress:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        raise PoolSpecError(f"invalid address {text!r}") from None


def parse_entries(entries: list[str], version: int | None = None) -> IPRangeSet:
    """IPs, ``a-b`` ranges and CIDRs of one family. ``version`` None: taken from the first."""
    ranges: list[tuple[int, int]] = []
    for raw in entries or []:
        text = str(raw).strip()
        if "/" in text:
            try:
                net = ipaddress.ip_network(text, strict=False)
            except ValueError:
                raise PoolSpecError(f"invalid CIDR {text!r}") from None
            lo, hi, v = net.network_address, net.broadcast_address, net.version
        elif "-" in text:
            a, b = text.split("-", 1)
            lo, hi = _addr(a), _addr(b)
            if lo.version != hi.version or int(lo) > int(hi):
                raise PoolSpecError(f"invalid range {text!r}")
            v = lo.version
        else:
            lo = hi = _addr(text)
            v = lo.version
        if version is None:
            version = v
        if v != version:
            raise PoolSpecError(f"{text!r} is not IPv{version}")
        ranges.append((int(lo), int(hi)))
    return IPRangeSet(version or 4, ranges)


def _first_address(entry: str) -> ipaddress._BaseAddress:
    text = str(entry).strip()
    if "/" in text:
        return ipaddress.ip_network(text, strict=False).network_address
    return _addr(text.split("-", 1)[0])


def pool_addresses(spec: dict) -> list[str]:
    """``spec.addresses``, or the v1alpha1 shape (``start``-``end`` / ``subnet``)."""
    if spec.get("addresses"):
        return [str(a) for a in spec["addresses"]]
    if spec.get("start") and spec.get("end"):
        return [f"{spec['start']}-{spec['end']}"]
    if spec.get("subnet"):
        return [str(spec["subnet"])]
    return []


def pool_sets(spec: dict) -> tuple[IPRangeSet, IPRangeSet]:
    """(pool set, allocatable set): addresses − excluded − reserved, and that − gateway."""
    entries = pool_addresses(spec)
    if not entries:
        raise PoolSpecError("pool has no addresses")
    base = parse_entries(entries)
    v = base.version
    pool = base.minus(parse_entries(spec.get("excludedAddresses") or [], v))
    prefix = spec.get("prefix")
    if not spec.get("allocateReservedIPAddresses") and prefix is not None:
        net = ipaddress.ip_network(f"{_first_address(entries[0])}/{int(prefix)}", strict=False)
        reserved: list[tuple[int, int]] = []
        if v == 4 and net.prefixlen < 31:
            reserved = [(int(net.network_address),) * 2, (int(net.broadcast_address),) * 2]
        elif v == 6 and net.prefixlen < 128:
            reserved = [(int(net.network_address),) * 2]
        pool = pool.minus(IPRangeSet(v, reserved))
    alloc = pool
    gw = str(spec.get("gateway") or "").strip()
    if gw:
        g = _addr(gw)
        if g.version == v:
            alloc = pool.minus(IPRangeSet(v, [(int(g), int(g))]))
    return pool, alloc


def pool_status(spec: dict, used_addresses: list[str]) -> dict:
    """``status.ipAddresses`` for a pool with these in-use addresses (one per IPAddress)."""
    pool, alloc = pool_sets(spec)
    total = alloc.count()
    used = len(used_addresses)
    out_of_range = set()
    for a in used_addresses:
        try:
            ip = ipaddress.ip_address(str(a))
        except ValueError:
            continue  # upstream: unparsable addresses are not in the pool's ranges and skipped
        if ip.version != pool.version or int(ip) not in pool:
            out_of_range.add(int(ip) if ip.version == pool.version else (ip.version, int(ip)))
    return {"total": total, "used": used, "free": total - used, "outOfRange": len(out_of_range)}


def refers_to_pool(addr: dict, pool_name: str) -> bool:
    ref = (addr.get("spec") or {}).get("poolRef") or {}
    return ref.get("apiGroup") == GROUP and ref.get("kind") == POOL_KIND and ref.get("name") == pool_name


# ====================================================================== the emulator


class IpamEmulator(EmulatorBase):
    """See the module docstring. Use as a context manager or call start()/stop()."""

    watched = (POOLS, ADDRESSES, CLAIMS)
    name = "ipam-emulator"

    def __init__(self, cluster: Any, *, fulfil_claims: bool = True, resync_seconds: float = 2.0,
                 label_selector: str | None = None) -> None:
        super().__init__(cluster, resync_seconds=resync_seconds, label_selector=label_selector)
        self.fulfil_claims = fulfil_claims

    # ------------------------------------------------------------------ helpers for tests

    def allocate(self, namespace: str, claim_name: str) -> dict | None:
        """Fulfil one IPAddressClaim now; return its IPAddress (None when not reconciled)."""
        with self._lock:
            claim = self.get(CLAIMS, claim_name, namespace)
            if claim is None:
                raise LookupError(f"IPAddressClaim {namespace}/{claim_name} not found")
            return self._reconcile_claim(claim, _View(self))

    def pool_status(self, namespace: str, name: str) -> dict | None:
        """What this emulator would write to ``status.ipAddresses`` of the pool now."""
        pool = self.get(POOLS, name, namespace)
        if pool is None:
            return None
        used = [(a.get("spec") or {}).get("address", "") for a in self._addresses_of(pool, self.list_all(ADDRESSES))]
        return pool_status(pool.get("spec") or {}, used)

    # ------------------------------------------------------------------ the pass

    def run_pass(self) -> float | None:
        # claims first: an address created before a claim we see is then in the address list
        claims = self.list_all(CLAIMS)
        view = _View(self)
        if self.fulfil_claims:
            for claim in claims:
                try:
                    self._reconcile_claim(claim, view)
                except Exception as exc:
                    self._failed(f"claim {_key(claim)}", exc)
        self._release_orphan_addresses(view.addrs, claims)
        for pool in view.pools.values():
            try:
                self._reconcile_pool(pool, view.addrs)
            except Exception as exc:
                self._failed(f"pool {_key(pool)}", exc)
        return None

    def _failed(self, what: str, exc: BaseException) -> None:
        if is_conflict(exc) or is_not_found(exc):
            self.kick()  # stale read; the next pass sees fresh objects
        else:
            self.record_error(what, exc)

    # ------------------------------------------------------------------ pools

    @staticmethod
    def _addresses_of(pool: dict, addrs: list[dict]) -> list[dict]:
        ns, name = meta(pool).get("namespace"), meta(pool)["name"]
        return [a for a in addrs if meta(a).get("namespace") == ns and refers_to_pool(a, name)]

    def _reconcile_pool(self, pool: dict, addrs: list[dict]) -> None:
        mine = self._addresses_of(pool, addrs)
        if is_deleting(pool):
            if PROTECT_POOL in finalizers(pool) and not mine:
                # fresh LIST before letting the pool go (the cached one may lag)
                if not self._addresses_of(pool, self.list_all(ADDRESSES)):
                    self.remove_finalizer(POOLS, pool, PROTECT_POOL)
                    self.counters["pool_finalizers_removed"] += 1
            return
        if PROTECT_POOL not in finalizers(pool):
            pool = self.add_finalizer(POOLS, pool, PROTECT_POOL)
            self.counters["pool_finalizers_added"] += 1
        try:
            want = pool_status(pool.get("spec") or {}, [(a.get("spec") or {}).get("address", "") for a in mine])
        except (PoolSpecError, ValueError) as exc:
            self.counters["pools_invalid"] += 1
            self.record_error(f"pool {_key(pool)} spec", exc)
            return
        if ((pool.get("status") or {}).get("ipAddresses") or {}) == want:
            return
        self.patch(POOLS, pool, {"status": {"ipAddresses": want}}, status=True)
        self.counters["pool_status_writes"] += 1

    # ------------------------------------------------------------------ claims and addresses

    def _cluster_missing(self, claim: dict) -> bool:
        cname = (claim.get("spec") or {}).get("clusterName") or (meta(claim).get("labels") or {}).get(
            CLUSTER_NAME_LABEL)
        if not cname:
            return False
        try:
            return self.get(CLUSTERS, cname, meta(claim)["namespace"]) is None
        except ApiException:
            return True

    def _reconcile_claim(self, claim: dict, view: "_View") -> dict | None:
        m = meta(claim)
        ns, name = m["namespace"], m["name"]
        ref = (claim.get("spec") or {}).get("poolRef") or {}
        if ref.get("kind") != POOL_KIND or (ref.get("apiGroup") not in (None, "", GROUP)):
            return None
        existing = next((a for a in view.addrs if meta(a).get("namespace") == ns and meta(a)["name"] == name), None)

        if is_deleting(claim):
            if RELEASE_ADDRESS not in finalizers(claim):
                return None
            if existing is not None:
                if PROTECT_ADDRESS in finalizers(existing):
                    self.remove_finalizer(ADDRESSES, existing, PROTECT_ADDRESS)
                try:
                    self.co.delete_namespaced_custom_object(GROUP, ADDRESSES.version, ns, ADDRESSES.plural, name)
                    self.counters["addresses_released"] += 1
                except ApiException as exc:
                    if exc.status != 404:
                        raise
            self.remove_finalizer(CLAIMS, claim, RELEASE_ADDRESS)
            return None

        if (existing is not None and RELEASE_ADDRESS in finalizers(claim)
                and ((claim.get("status") or {}).get("addressRef") or {}).get("name") == name):
            return existing  # fulfilled, nothing to write
        pool = view.pools.get((ns, ref.get("name", "")))
        if pool is None or is_deleting(pool) or PAUSED in (meta(pool).get("annotations") or {}):
            return None
        if PAUSED in (m.get("annotations") or {}) or self._cluster_missing(claim):
            return None
        if RELEASE_ADDRESS not in finalizers(claim):
            claim = self.add_finalizer(CLAIMS, claim, RELEASE_ADDRESS)

        if existing is None:
            existing = self._create_address(claim, pool, view.addrs)
            if existing is None:
                return None
            view.addrs.append(existing)
        addr_ref = ((claim.get("status") or {}).get("addressRef") or {}).get("name")
        if addr_ref != name:
            status = dict(claim.get("status") or {})
            status["addressRef"] = {"name": name}
            status["conditions"] = [{"type": "Ready", "status": "True", "reason": "",
                                     "lastTransitionTime": now_rfc3339()}]
            self.patch(CLAIMS, claim, {"status": status}, status=True)
        return existing

    def _create_address(self, claim: dict, pool: dict, addrs: list[dict]) -> dict | None:
        ns, name = meta(claim)["namespace"], meta(claim)["name"]
        spec = pool.get("spec") or {}
        try:
            _, alloc = pool_sets(spec)
        except (PoolSpecError, ValueError) as exc:
            self.record_error(f"pool {_key(pool)} spec", exc)
            return None
        used = set()
        for a in self._addresses_of(pool, addrs):
            try:
                used.add(int(ipaddress.ip_address(str((a.get("spec") or {}).get("address", "")))))
            except ValueError:
                pass
        ip = next((i for i in alloc.addresses() if i not in used), None)
        if ip is None:
            self.counters["claims_pool_exhausted"] += 1
            return None
        addr_spec: dict[str, Any] = {
            "address": str(ipaddress.ip_address(ip) if alloc.version == 4 else ipaddress.IPv6Address(ip)),
            "prefix": int(spec.get("prefix") or 0),
            "claimRef": {"name": name},
            "poolRef": {"apiGroup": GROUP, "kind": POOL_KIND, "name": meta(pool)["name"]},
        }
        if spec.get("gateway"):
            addr_spec["gateway"] = str(spec["gateway"])
        body = {
            "apiVersion": f"{GROUP}/{ADDRESSES.version}",
            "kind": "IPAddress",
            "metadata": {
                "name": name,
                "namespace": ns,
                "finalizers": [PROTECT_ADDRESS],
                "ownerReferences": [
                    {"apiVersion": f"{GROUP}/{CLAIMS.version}", "kind": "IPAddressClaim", "name": name,
                     "uid": meta(claim)["uid"], "controller": True, "blockOwnerDeletion": True},
                    {"apiVersion": f"{GROUP}/{POOLS.version}", "kind": POOL_KIND, "name": meta(pool)["name"],
                     "uid": meta(pool)["uid"], "blockOwnerDeletion": True},
                ],
            },
            "spec": addr_spec,
        }
        created = self.co.create_namespaced_custom_object(GROUP, ADDRESSES.version, ns, ADDRESSES.plural, body)
        self.counters["addresses_allocated"] += 1
        return created

    def _release_orphan_addresses(self, addrs: list[dict], claims: list[dict]) -> None:
        live_claims = {(meta(c).get("namespace"), meta(c)["name"]) for c in claims if not is_deleting(c)}
        for a in addrs:
            if not is_deleting(a) or PROTECT_ADDRESS not in finalizers(a):
                continue
            claim = ((a.get("spec") or {}).get("claimRef") or {}).get("name")
            if (meta(a).get("namespace"), claim) in live_claims:
                continue
            try:
                self.remove_finalizer(ADDRESSES, a, PROTECT_ADDRESS)
            except Exception as exc:
                self._failed(f"address {_key(a)}", exc)


class _View:
    """One pass's reads: pools by (namespace, name) and the IPAddress list (listed after the
    claims, and extended with the addresses this pass creates)."""

    def __init__(self, emu: IpamEmulator) -> None:
        self.pools = {(meta(p).get("namespace"), meta(p)["name"]): p for p in emu.list_all(POOLS)}
        self.addrs = emu.list_all(ADDRESSES)


def _key(obj: dict) -> str:
    m = meta(obj)
    return f"{m.get('namespace')}/{m.get('name')}" if m.get("namespace") else str(m.get("name"))
