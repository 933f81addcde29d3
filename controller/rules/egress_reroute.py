"""Which networks lose their egress when a Ready VpcEgressGateway's reroute policies are gone
from its VPC's router in the OVN NB.

What kube-ovn-controller v1.15 makes for a VpcEgressGateway ``<ns>/<name>``
(``reconcileVpcEgressGatewayOVNRoutes``, pkg/controller/vpc_egress_gateway.go), per address
family ``af`` (4, 6) that has next hops (the gateway pods' internal IPs, ``status.internalIPs``):

* an address set ``VEG.<h>.ipv<af>`` (``<h>``: the first 12 hex digits of the SHA-256 of
  ``<ns>/<name>``) holding the sources: the ``ipBlocks`` of every ``spec.policies[]`` and the
  CIDR of every Subnet a policy names in ``subnets``;
* on the VPC's logical router (``spec.vpc``, else ``ovn-cluster``) a ``Logical_Router_Policy``
  of priority 29100, action ``reroute`` to the gateway pods, match
  ``ip<af>.src == $VEG.<h>.ipv<af>``: the one that sends those sources to the gateway;
  beside it one for the gateway's port group (``ip<af>.src == $VEG.<h>_ip<af>``, pods picked
  by ``spec.selectors``), and with ``trafficPolicy: Local`` node-local ones at 29150 whose
  match also requires the source to be in a node's port group (pods of that node: never a
  VM on a VLAN). External IDs ``vendor=kube-ovn``, ``vpc-egress-gateway=<ns>/<name>``,
  ``af=<af>``;
* and only then ``status.ready: true`` with condition ``Ready`` True for the gateway's
  generation (``VpcEgressGateway.Ready()``, pkg/apis/kubeovn/v1/vpc-egress-gateway.go).

So a network's VMs leave through the gateway exactly while the 29100 address-set policy of
each family its Subnet is a source in stands on the router. A Ready gateway without it
forwards nothing of theirs, while saying Ready: that is what :func:`reroute_report` finds.
A gateway that is not Ready has not made its policies yet (or is failing, which it says);
an NB that is not known says nothing either way. Pure functions over plain dicts.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from controller.rules.kubeovn import DEFAULT_VPC

#: util.EgressGatewayPolicyPriority and util.EgressGatewayLocalPolicyPriority (pkg/util/const.go).
POLICY_PRIORITY = 29100
LOCAL_POLICY_PRIORITY = 29150
#: ovnnb.LogicalRouterPolicyActionReroute.
ACTION_REROUTE = "reroute"
FAMILIES = (4, 6)


def address_set_name(namespace: str, name: str, af: int) -> str:
    """Kube-OVN's ``vegAddressSetName("<ns>/<name>", af)``: ``VEG.<12 hex of sha256>.ipv<af>``."""
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()
    return f"VEG.{digest[:12]}.ipv{af}"


def reroute_match(namespace: str, name: str, af: int) -> str:
    """The match of the gateway's 29100 address-set reroute for family ``af``."""
    return f"ip{af}.src == ${address_set_name(namespace, name, af)}"


def normal_match(match: str) -> str:
    """A match with its runs of blanks folded to one space (the NB keeps the string as written)."""
    return " ".join(str(match).split())


def _mapping(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _strings(v: Any) -> list[str]:
    return [s for s in v if isinstance(s, str)] if isinstance(v, list) else []


def gateway_key(gw: Mapping[str, Any]) -> str:
    meta = _mapping(gw.get("metadata"))
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def gateway_vpc(gw: Mapping[str, Any]) -> str:
    """``spec.vpc``, else Kube-OVN's default VPC (``VpcEgressGateway.VPC``)."""
    vpc = _mapping(gw.get("spec")).get("vpc")
    return vpc if isinstance(vpc, str) and vpc else DEFAULT_VPC


def gateway_ready(gw: Mapping[str, Any]) -> bool:
    """``VpcEgressGateway.Ready()``: ``status.ready`` and a ``Ready`` condition True whose
    ``observedGeneration`` is at least ``metadata.generation``."""
    status = _mapping(gw.get("status"))
    if status.get("ready") is not True:
        return False
    gen = _mapping(gw.get("metadata")).get("generation")
    gen = gen if isinstance(gen, int) and not isinstance(gen, bool) else 0
    conditions = status.get("conditions")
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, Mapping) and c.get("type") == "Ready":
            seen = c.get("observedGeneration")
            seen = seen if isinstance(seen, int) and not isinstance(seen, bool) else 0
            return c.get("status") == "True" and seen >= gen
    return False


def _family(text: str) -> int | None:
    try:
        return ipaddress.ip_network(text.strip(), strict=False).version
    except ValueError:
        return None


def gateway_families(gw: Mapping[str, Any]) -> frozenset[int]:
    """The families the gateway has next hops in: those of ``status.internalIPs`` (one entry
    per pod, its IPs comma-separated). Kube-OVN makes a family's policies only with next hops."""
    out = set()
    for entry in _strings(_mapping(gw.get("status")).get("internalIPs")):
        for ip in entry.split(","):
            af = _family(ip)
            if af is not None:
                out.add(af)
    return frozenset(out)


def subnet_cidrs(cidr_block: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The networks of a Subnet's ``cidrBlock`` (dual stack: comma-separated); unparsable parts
    are left out."""
    out = []
    for part in str(cidr_block or "").split(","):
        try:
            out.append(ipaddress.ip_network(part.strip(), strict=False))
        except ValueError:
            continue
    return out


def source_families(gw: Mapping[str, Any], subnet: str, cidr_block: str) -> frozenset[int]:
    """The families in which Subnet ``subnet`` (CIDR ``cidr_block``) is a source of the gateway:
    every family of its CIDR when a policy names it in ``subnets``, else each family whose
    CIDR lies within one of a policy's ``ipBlocks`` (an address or a CIDR)."""
    cidrs = subnet_cidrs(cidr_block)
    out: set[int] = set()
    policies = _mapping(gw.get("spec")).get("policies")
    for policy in policies if isinstance(policies, list) else []:
        if not isinstance(policy, Mapping):
            continue
        if subnet and subnet in _strings(policy.get("subnets")):
            out |= {c.version for c in cidrs}
            continue
        for block in _strings(policy.get("ipBlocks")):
            try:
                net = ipaddress.ip_network(block.strip(), strict=False)
            except ValueError:
                continue
            out |= {c.version for c in cidrs if c.version == net.version and c.subnet_of(net)}  # type: ignore[arg-type]
    return frozenset(out)


@attrs.frozen
class RouterPolicies:
    """The priority-29100 policies of one logical router as the NB holds them.

    :ivar known: the NB copy is synced; when False nothing else means anything.
    :ivar present: the router exists.
    :ivar policies: ``(priority, action, match)`` of each, the match as :func:`normal_match`.
    :ivar error: why not known.
    """

    known: bool
    present: bool = False
    policies: frozenset[tuple[int, str, str]] = frozenset()
    error: str = ""


@attrs.frozen
class MissingReroute:
    """A Ready gateway of the network's VPC whose reroute for the network's families is gone."""

    gateway: str  # <namespace>/<name>
    router: str
    families: tuple[int, ...]
    matches: tuple[str, ...]


@attrs.frozen
class RerouteReport:
    """What :func:`reroute_report` found for one network.

    :ivar missing: the gateways whose reroute is gone, sorted by gateway.
    :ivar standing: ``<ns>/<name>`` of the Ready gateways the network is a source of whose
        reroutes all stand (sorted).
    """

    missing: tuple[MissingReroute, ...] = ()
    standing: tuple[str, ...] = ()


def reroute_report(gateways: Iterable[Mapping[str, Any]], subnet: str, cidr_block: str, vpc: str,
                   router: RouterPolicies) -> RerouteReport | None:
    """For the Ready gateways of VPC ``vpc`` that Subnet ``subnet`` (``cidr_block``) is a source
    of, in the families both have (:func:`source_families`, :func:`gateway_families`): which
    lack their 29100 address-set reroute on ``router`` (the VPC's router) and which have it.
    None while the NB is not known. A malformed gateway (no metadata, no policies, an
    unparsable block) is simply a source of nothing; a gateway with no family in common is
    in neither list."""
    if not router.known:
        return None
    missing, standing = [], []
    for gw in gateways:
        if not isinstance(gw, Mapping) or gateway_vpc(gw) != vpc or not gateway_ready(gw):
            continue
        meta = _mapping(gw.get("metadata"))
        ns, name = meta.get("namespace"), meta.get("name")
        if not isinstance(ns, str) or not isinstance(name, str) or not ns or not name:
            continue
        families = sorted(source_families(gw, subnet, cidr_block) & gateway_families(gw))
        if not families:
            continue
        gone = [af for af in families
                if (POLICY_PRIORITY, ACTION_REROUTE, reroute_match(ns, name, af)) not in router.policies]
        if gone:
            missing.append(MissingReroute(f"{ns}/{name}", vpc, tuple(gone),
                                          tuple(reroute_match(ns, name, af) for af in gone)))
        else:
            standing.append(f"{ns}/{name}")
    return RerouteReport(tuple(sorted(missing, key=lambda m: m.gateway)), tuple(sorted(standing)))


def missing_message(m: MissingReroute, subnet: str) -> str:
    """The Warning's text for one gateway."""
    fams = " and ".join(f"IPv{af}" for af in m.families)
    matches = ", ".join(f'"{x}"' for x in m.matches)
    return (f'VpcEgressGateway "{m.gateway}" is Ready, but its {fams} reroute policy (priority {POLICY_PRIORITY}, '
            f'match {matches}) is missing from router "{m.router}" in the OVN NB: traffic of subnet "{subnet}" '
            f"does not leave through the gateway until kube-ovn-controller makes it again")


def restored_message(gateway: str, router: str, subnet: str) -> str:
    """The Normal Event's text once a gateway's reroute is back."""
    return (f'the reroute policies of VpcEgressGateway "{gateway}" are on router "{router}" again: traffic of '
            f'subnet "{subnet}" leaves through the gateway')
