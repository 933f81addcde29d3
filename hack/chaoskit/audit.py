"""The chaos harness's reader of the API server's audit log (written in blocking mode, so it
misses nothing a watch may miss around an API server restart): Vlan lifetimes and removal
times, to refute or confirm the monitor's duplicate flags (:func:`recheck_duplicates`) and to
settle the judgements a relist gap left open (:func:`recheck_open`)."""

from __future__ import annotations

import json
import re
from pathlib import Path


def vlan_lifetimes(audit_log: Path) -> dict[str, list[tuple[str, str]]]:
    """Vlan name -> [(created, deleted)] from the API server's audit log (the times the
    create and the delete completed; "~" when not deleted). The audit log is written by the
    API server itself, in blocking mode, so it does not miss what a watch may miss around
    an API server restart."""
    spans: dict[str, list[list[str]]] = {}
    for e in _completed_object_requests(audit_log, {"vlans"}):
        ref = e.get("objectRef") or {}
        name, t = ref.get("name") or (e.get("responseObject") or {}).get("metadata", {}).get("name"), e["stageTimestamp"]
        if e["verb"] == "create":
            name = name or ""
            spans.setdefault(name, []).append([t, "~"])
        elif e["verb"] == "delete" and name in spans and spans[name][-1][1] == "~":
            spans[name][-1][1] = t
    return {k: [tuple(x) for x in v] for k, v in spans.items()}  # type: ignore[misc]


def _completed_object_requests(audit_log: Path, plurals: set[str]):
    """The audit log's successful (2xx), completed requests on objects (not subresources) of
    ``plurals``, in log order. Lines that cannot name one of them are skipped unparsed."""
    with open(audit_log, errors="replace") as f:
        for line in f:
            if '"ResponseComplete"' not in line or not any(f'"{pl}"' in line for pl in plurals):
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue
            ref = e.get("objectRef") or {}
            code = (e.get("responseStatus") or {}).get("code", 0)
            if e.get("stage") != "ResponseComplete" or ref.get("resource") not in plurals or ref.get("subresource") \
                    or not 200 <= code < 300:
                continue
            yield e


def recheck_duplicates(violations: list[str], audit_log: Path) -> tuple[list[str], list[str]]:
    """Split duplicate-VLAN flags into (confirmed, refuted) with the audit log: two Vlans
    held one ID together only if their lifetimes overlap. Other violations pass through."""
    import ast

    if not audit_log.exists():
        return violations, []
    life = vlan_lifetimes(audit_log)
    confirmed, refuted = [], []
    for v in violations:
        m = re.match(r"duplicate VLAN \S+ on provider \S+: (\[.*\]) \(rv \d+\)$", v)
        if not m:
            confirmed.append(v)
            continue
        names = ast.literal_eval(m.group(1))
        spans = [life.get(n) for n in names]
        if any(not sp for sp in spans):
            confirmed.append(v)
            continue
        def overlaps(x, y) -> bool:
            return any(a0 < (b1 if b1 != "~" else "9") and b0 < (a1 if a1 != "~" else "9")
                       for (a0, a1) in x for (b0, b1) in y)

        overlap = any(overlaps(spans[i], spans[j]) for i in range(len(spans)) for j in range(i + 1, len(spans)))
        if overlap:
            confirmed.append(v)
        else:
            refuted.append(f"{v}: refuted by the audit log, "
                           + "; ".join(f"{n} existed {' and '.join(f'{a}..{b}' for a, b in sp)}" for n, sp in zip(names, spans)))
    return confirmed, refuted


AUDIT_PLURALS = {"machine": "proxmoxmachines", "addresse": "ipaddresses", "claim": "ipaddressclaims",
                 "Subnet": "subnets", "Vlan": "vlans"}


def removal_times(audit_log: Path, plurals: set[str]) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(plural, namespace, name) -> (received, completed) of the request that removed the
    object from the API, from the audit log: its last successful write (a PATCH or PUT that
    took the last finalizer off; nothing can write an object once it is gone) at or after its
    successful DELETE, or that DELETE itself (no finalizer). Objects never deleted are absent.
    Subresource writes (status) never remove an object and are skipped."""
    out: dict[tuple[str, str, str], tuple[str, str]] = {}
    deleted: set[tuple[str, str, str]] = set()
    for e in _completed_object_requests(audit_log, plurals):
        ref = e.get("objectRef") or {}
        key = (ref["resource"], ref.get("namespace") or "", ref.get("name") or "")
        span = (e["requestReceivedTimestamp"], e["stageTimestamp"])
        if e["verb"] == "create":
            deleted.discard(key)
            out.pop(key, None)
        elif e["verb"] == "delete":
            deleted.add(key)
            out[key] = span
        elif e["verb"] in ("patch", "update") and key in deleted:
            out[key] = span
    return out


def recheck_open(uncertain: list[str], audit_log: Path) -> tuple[list[str], list[str], list[str]]:
    """Settle the judgements a relist gap left open with the API server's audit log:
    (still open, clean, violations). A judgement is about a Vlan that went while a consumer
    of its pool, or a Subnet it listed, may still have existed. Clean when the consumer's (or
    Subnet's) removal completed before the request removing the Vlan was even received; a
    violation when the consumer's removal was received after the Vlan's completed; open when
    the two requests overlap or one of them is not in the log. Names are unique per run (fresh names
    per slot generation), so (kind, namespace, name) identifies one object."""
    if not uncertain or not audit_log.exists():
        return uncertain, [], []
    pat_consumer = re.compile(r"Vlan (\S+) \(VLAN \S+\) deleted at rv \d+ \(\w+\) while (\w+) (\S+)/(\S+) referenced pool")
    pat_subnet = re.compile(r"Vlan (\S+) deleted at rv \d+ \(\w+\) while it listed live Subnet (\S+)$")
    gone = removal_times(audit_log, set(AUDIT_PLURALS.values()))
    still, clean, bad = [], [], []
    for u in uncertain:
        if m := pat_consumer.match(u):
            vlan, other = m.group(1), (AUDIT_PLURALS.get(m.group(2), ""), m.group(3), m.group(4))
        elif m := pat_subnet.match(u):
            vlan, other = m.group(1), ("subnets", "", m.group(2))
        else:
            still.append(u)
            continue
        v, o = gone.get(("vlans", "", vlan)), gone.get(other)
        if v is None:
            still.append(u)
        elif o is not None and o[1] < v[0]:
            clean.append(f"{u}: clean by the audit log, the {other[0][:-1]} was removed by {o[1]}, the Vlan from {v[0]}")
        elif o is not None and o[0] > v[1]:
            bad.append(f"{u}: confirmed by the audit log, the Vlan was removed by {v[1]}, the {other[0][:-1]} from {o[0]}")
        else:
            still.append(u)
    return still, clean, bad
