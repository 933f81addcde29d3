"""Which Kube-OVN Vlan a network may claim, pure (reference-behaviour.md §4.3;
product-decisions.md §8): the Vlan this controller makes (:func:`desired_vlan`)
and how it recognises its own (:func:`made_by_controller`, :func:`vlan_owner`), why a
network may not take a Vlan (:func:`claim_refusal`, :func:`vlan_name_error`), which of two
claimants of one Subnet wins (:func:`older_claimant`: the oldest), a hand edit of an ID
(:func:`changed_externally`), and a self-made duplicate that is given back
(:func:`gives_back_duplicate`). :class:`controller.apply.vlans.VlanManager` does the writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from controller import names, reasons
from controller.rules import allocator


@attrs.frozen
class VlanOutcome:
    """Result of :meth:`VlanManager.allocate`: ``vlan`` (the Vlan object) or a refusal
    ``reason``/``message`` for ``VLANAllocated=False``. ``allocated`` is True when this
    call created the Vlan; ``result`` is the allocation-counter label of a refusal."""

    vlan: dict[str, Any] | None = None
    reason: str = ""
    message: str = ""
    allocated: bool = False
    result: str = ""


def vlan_owner(vlan: Mapping[str, Any]) -> tuple[str, str]:
    labels = (vlan.get("metadata") or {}).get("labels") or {}
    return labels.get(names.LABEL_NETWORK_NAMESPACE, ""), labels.get(names.LABEL_NETWORK_NAME, "")


def desired_vlan(name: str, vid: int, provider: str, zone: str, namespace: str, network: str,
                 annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The Vlan the controller creates (reference-behaviour.md §4.3 step 6), with
    ``annotations`` of ours when given (the pool's CIDRs)."""
    body: dict[str, Any] = {
        "apiVersion": "kubeovn.io/v1",
        "kind": "Vlan",
        "metadata": {
            "name": name,
            "labels": {
                names.LABEL_ZONE: zone,
                names.LABEL_NETWORK_NAMESPACE: namespace,
                names.LABEL_NETWORK_NAME: network,
            },
            "finalizers": [names.FINALIZER],
        },
        "spec": {"id": vid, "provider": provider},
    }
    if annotations:
        body["metadata"]["annotations"] = dict(annotations)
    return body


def made_by_controller(vlan: Mapping[str, Any]) -> bool:
    """A Vlan as this controller creates it (:func:`desired_vlan`): the zone and network
    labels and our finalizer. A Vlan without them was made by someone else."""
    meta = vlan.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (
        bool(labels.get(names.LABEL_ZONE))
        and all(vlan_owner(vlan))
        and names.FINALIZER in (meta.get("finalizers") or [])
    )


def _age_key(vlan: Mapping[str, Any]) -> tuple[str, str]:
    # creationTimestamp has one-second resolution; the name breaks ties the same way on
    # every replica and in every pass of either network.
    meta = vlan.get("metadata") or {}
    return str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")


def gives_back_duplicate(vlan: Mapping[str, Any], twins: list[Mapping[str, Any]]) -> bool:
    """Whether ``vlan`` is the one of a duplicate ID that this controller repairs by giving
    it back (product-decisions.md §8 "Safety by construction"): every holder of
    the ID was made by this controller, none is Terminating, and ``vlan`` is the newest
    (latest ``creationTimestamp``, then the greatest name). Whether anything has bound it
    is for fresh reads to tell; this is only the part the cache decides.

    :param twins: the other Vlans on the provider with the same ID (not ``vlan`` itself).
    """
    holders = [vlan, *twins]
    if not twins or not all(made_by_controller(v) for v in holders):
        return False
    if any((v.get("metadata") or {}).get("deletionTimestamp") for v in holders):
        return False
    return max(holders, key=_age_key) is vlan


def edited(vlan: Mapping[str, Any]) -> bool:
    """The Vlan's spec was changed since it was made: generation above 1 (the controller
    never writes a Vlan's spec, so that is someone else's edit)."""
    gen = (vlan.get("metadata") or {}).get("generation")
    return isinstance(gen, int) and gen > 1


def _resource_version(obj: Mapping[str, Any]) -> int | None:
    """``metadata.resourceVersion`` as an integer (etcd revisions), None when not one."""
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(rv)
    except (TypeError, ValueError):
        return None


def shows_at_least(seen: Mapping[str, Any], assumed: Mapping[str, Any]) -> bool:
    """True when ``seen`` is the assumed object itself (same UID) at a version at least
    as new as ``assumed`` (client-go's assume cache: an assumed object is dropped only
    when the informer shows a version at least as new). A different UID (an earlier
    object of the same name) never counts; an unparsable resourceVersion counts only
    when it equals the assumed one."""
    sm, am = seen.get("metadata") or {}, assumed.get("metadata") or {}
    if sm.get("uid") != am.get("uid"):
        return False
    srv, arv = _resource_version(seen), _resource_version(assumed)
    if srv is None or arv is None:
        return sm.get("resourceVersion") == am.get("resourceVersion")
    return srv >= arv


def claim_refusal(vlan: Mapping[str, Any], ns: str, nname: str, zname: str, provider: str) -> tuple[str, str] | None:
    """Why network ``ns/nname`` of zone ``zname`` may not take the Vlan named after its
    Subnet (reference-behaviour.md §4.3), as ``(reason, message)``; None when it may."""
    owner = vlan_owner(vlan)
    vname = vlan["metadata"]["name"]
    if owner != (ns, nname):
        return reasons.VLAN_NAME_TAKEN, f'Kube-OVN Vlan "{vname}" exists and belongs to {owner[0]}/{owner[1]}'
    vprov = allocator.vlan_provider(vlan)
    if vprov != provider:
        return reasons.VLAN_PROVIDER_MISMATCH, f'Vlan "{vname}" uses provider "{vprov}", zone "{zname}" uses "{provider}"'
    return None


_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


DNS1123_SUBDOMAIN_MAX = 253


def vlan_name_error(name: str) -> str | None:
    """Why ``name`` (a network's ``spec.subnet``, which names its Vlan and Subnet) cannot
    name a Kube-OVN Vlan, as the API server would say it (k8s.io/apimachinery
    ``IsDNS1123Subdomain``: the name rule of every custom resource); None when it can.
    Checked before the create, so bad input ends in a condition, not a retried 422."""
    if not name:
        return "must not be empty"
    if len(name) > DNS1123_SUBDOMAIN_MAX:
        return f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters (it has {len(name)})"
    if not all(_DNS1123_LABEL.fullmatch(part) for part in name.split(".")):
        return ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                "and must start and end with an alphanumeric character")
    return None


def claimant_order(net: Mapping[str, Any]) -> tuple[str, str, str]:
    """Who claims a Subnet first: the older network (``creationTimestamp``), then by
    namespace and name ("the oldest claimant wins", across restarts)."""
    meta = net.get("metadata") or {}
    return str(meta.get("creationTimestamp") or ""), str(meta.get("namespace") or ""), str(meta.get("name") or "")


def older_claimant(net: Mapping[str, Any], rivals: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The first claimant, when it is not ``net``, of the Subnet ``net`` names, among
    ``rivals`` (networks of any namespace naming the same ``spec.subnet``); None when
    ``net`` comes first. A deleting rival still claims: it holds the Vlan until released."""
    uid = (net.get("metadata") or {}).get("uid")
    others = [r for r in rivals if (r.get("metadata") or {}).get("uid") != uid]
    if not others:
        return None
    first = min(others, key=claimant_order)
    return first if claimant_order(first) < claimant_order(net) else None


def changed_externally(vlan: Mapping[str, Any], recorded: int, accepted: str | None) -> bool:
    """The Vlan's ``spec.id`` was changed by someone else after the network recorded
    ``recorded`` (its ``status.vlan``) and the operator has not accepted the new ID with
    the annotation ``proxmox.cozystack.io/accept-vlan-id``.

    Only a spec edit of the same object counts: the controller never writes a Vlan's spec,
    so a generation above 1 means a hand edit, while a Vlan the controller made anew (a
    repaired duplicate) is generation 1 and is followed."""
    vid = allocator.vlan_id(vlan)
    if not recorded or vid is None or vid == recorded or not edited(vlan):
        return False
    return (accepted or "").strip() != str(vid)


def recorded_id(net: Mapping[str, Any] | None) -> int:
    """The ID allocated to a network as its status records it (``status.vlan``); 0 for none."""
    v = ((net or {}).get("status") or {}).get("vlan")
    return v if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 4094 else 0


def taken_over(vlan: Mapping[str, Any]) -> bool:
    """The Vlan was made or adopted by a network (it carries our finalizer): only such a
    Vlan is ever patched or deleted on a network's behalf ("we delete only what
    we own"; a hand-made Vlan the network refused is left as it is)."""
    return names.FINALIZER in ((vlan.get("metadata") or {}).get("finalizers") or [])


def needs_adoption(vlan: Mapping[str, Any]) -> bool:
    """An owned Vlan lacks our finalizer (and is not Terminating) or still carries the
    prune timers of an earlier same-named network (§7.3): :meth:`VlanManager.adopt` writes."""
    meta = vlan.get("metadata") or {}
    need_fin = names.FINALIZER not in (meta.get("finalizers") or []) and not meta.get("deletionTimestamp")
    return need_fin or names.ANNOTATION_DELETED_SUBNETS in (meta.get("annotations") or {})
