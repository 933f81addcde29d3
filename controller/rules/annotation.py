"""The namespace annotation ``proxmox.cozystack.io/networks`` (reference-behaviour.md §5.9):
a reconciler of its own, keyed by namespace.

One job: keep each namespace's annotation equal to the §5.9 full sync, i.e. the sorted
``<bridge>/<vlan>/<ipPool>`` triples of its networks with a VLAN and a bridge (Terminating
networks without our finalizer left out, duplicates kept, the key deleted when the list is
empty), plus the triples network passes have asked for and not yet written to their status
(the *pending adds*).

Why the pending adds: admission policies read the annotation, so a network's
``status.vlan``/``status.bridge`` must never be visible before its triple is listed (§5.9
"add", step 8, before the status write). A network pass whose triple is missing asks for it
here (:meth:`NamespaceReconciler.want`), does not write its status, and is queued again once
a namespace pass has written the annotation with it. Between the ask and the status write
only the pending add keeps the triple in the desired value; once the network's own status
(read through its read-your-writes overlay) shows the triple, the pending add is dropped.

Why a queue of its own: the queue hands a namespace key to one worker at a time, so two
read-modify-write patches of one annotation never race (no locks), and a burst of networks
in one namespace shares a few patches: every ask only queues the namespace, and a namespace
is passed at most once per ``write_window`` seconds (the first pass after a quiet spell at
once; a pass asked for sooner waits for the window's end, so what arrives meanwhile is
handled by one pass and written in one patch, and a waiting pass costs nothing).

Which namespaces are ours: a namespace with a network in the cache, a pending add, a
network that has just gone (:meth:`NamespaceReconciler.network_gone`: the pass then reads
the Namespace from the API server, so the removal of the last triple is never skipped on a
stale copy), or an annotation that lists a triple on the bridge of a zone (a leftover of
ours: the network went while no leader was there to pass its namespace, e.g. the leader
was killed between the network's NotFound pass and the namespace pass; the next leader
never sees that network, and admission would keep honouring the triple, so the memory of
a departure cannot be what decides; product-decisions.md §5 item 6, chaos short form).
Any other namespace's annotation is left alone.

Without a queue (``enqueue=None``, as when a :class:`controller.reconcile.network.NetworkReconciler`
is used on its own) an ask runs the namespace pass at once on the caller's thread, which is
the reference's synchronous "add"; those passes are serialised by one lock, because there is
no queue to hand out one namespace at a time.
"""

from __future__ import annotations

import time
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
