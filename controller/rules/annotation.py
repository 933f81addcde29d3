"""The value of the namespace annotation ``proxmox.cozystack.io/networks``
(reference-behaviour.md §5.9), pure: a network's ``<bridge>/<vlan>/<ipPool>`` triple, the
parsing of a stored value, which pending adds are still open, and the desired value of a
namespace (the sorted triples of its networks with a VLAN and a bridge, Terminating
networks without our finalizer left out, duplicates kept, plus the pending adds).
:class:`controller.reconcile.namespaces.NamespaceReconciler` writes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


from controller import names


def namespace_triple(net: Mapping[str, Any]) -> str | None:
    """``<bridge>/<vlan>/<ipPool>`` of a network with a VLAN and a bridge (§5.9)."""
    st = net.get("status") or {}
    vlan, bridge = st.get("vlan"), st.get("bridge")
    if not vlan or not bridge:
        return None
    return f"{bridge}/{vlan}/{(net.get('spec') or {}).get('ipPool', '')}"


def contribution(net: Mapping[str, Any]) -> str | None:
    """The triple ``net`` puts in the full sync (§5.9): None without a VLAN or a bridge, and
    for a Terminating network that no longer carries our finalizer."""
    meta = net.get("metadata") or {}
    if meta.get("deletionTimestamp") and names.FINALIZER not in (meta.get("finalizers") or []):
        return None
    return namespace_triple(net)


def split_value(value: str | None) -> list[str]:
    """The annotation's triples (an absent or empty value is the empty list)."""
    return value.split(",") if value else []


def lists_zone_bridge(value: str | None, bridges: Iterable[str]) -> bool:
    """Whether the annotation ``value`` lists a triple whose bridge is one of ``bridges``
    (the zones' ``spec.bridge``): only this controller writes such a triple."""
    on = set(bridges)
    return any(t.split("/", 1)[0] in on for t in split_value(value) if "/" in t)


def open_pending(networks: Mapping[str, Mapping[str, Any]], pending: Mapping[str, str]) -> dict[str, str]:
    """The pending adds still needed: those of networks in ``networks`` (by key) that are
    not Terminating without our finalizer and whose own status does not show the triple
    yet. A pending add of a network gone from the cache is needed by nobody."""
    out = {}
    for key, triple in pending.items():
        net = networks.get(key)
        if net is None:
            continue
        meta = net.get("metadata") or {}
        if meta.get("deletionTimestamp") and names.FINALIZER not in (meta.get("finalizers") or []):
            continue
        if contribution(net) == triple:
            continue
        out[key] = triple
    return out


def desired_value(networks: Iterable[Mapping[str, Any]], pending: Iterable[str] = ()) -> str:
    """The annotation's value: the §5.9 full sync over ``networks`` plus the ``pending``
    triples (pass them through :func:`open_pending` first, so a network whose status already
    shows its triple is not counted twice). Sorted, joined with ``,``; duplicates kept."""
    triples = [t for t in (contribution(n) for n in networks) if t]
    triples += list(pending)
    return ",".join(sorted(triples))
