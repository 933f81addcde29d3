"""``proxmox-network-controller doctor``: explain, per network, which step it waits on and
until when, from what the cluster holds now (read-only; any user that can read the objects).

It re-derives the controller's view from the API server: the network's conditions, the
zone, the Vlan (its ``status.subnets`` and the ``deleted-subnets`` prune timers), the Subnet,
the pool and, for a deleting network, the consumers that hold it (reference-behaviour.md §5,
§6, §7); the addresses machines on a network's VLAN hold from other pools (field report
field-reports.md S4); and, with the NB, a Ready egress gateway whose reroute for the network
is gone (``controller.rules.egress_reroute``). It never writes.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from controller import names, reasons, rfc3339
from controller.rules import egress_reroute, kubeovn, prune
from controller.rules.conditions import carries_warning, find
from controller.config import load_api_client, parse_duration
from controller.rules.consumers import count_consumers
from controller.plan.gateway import NB_GRACE_PERIOD, SERVING_CHASSIS
from controller.runtime.kube import ApiError, KubeWriter
from controller.rules.foreign import find_foreign_addresses, foreign_address_message
from controller.watch.kinds import OPTIONAL_KINDS, OTHER_KINDS, discover
from informers.resource import Resource
from ovn.ovsdb import NBError, jsonrpc_call, parse_addresses
from ovn.tls import DEFAULT_SECRET, TLSSource

RUNBOOK = "docs/runbook.md"

# (VLAN ID, provider) -> the NB's localnet ports with that tag on that provider, or an error text.
Localnets = Callable[[int, str], "list[dict[str, Any]] | str"]


def nb_localnets(addresses: str) -> Localnets:
    """A reader of the OVN NB's localnet ports (read-only, one ``select`` per call, the first
    remote that answers). Kube-OVN gives every Subnet on a Vlan the port ``localnet.<subnet>``
    with ``tag`` = the Vlan's ID, ``options:network_name`` = its provider and
    ``external_ids:ls`` = the Subnet (pkg/ovs ``CreateLocalnetLogicalSwitchPort``), so the
    ports with one tag on one provider are exactly what shares that VLAN (field-reports.md S6).
    Returns rows ``{"name", "switch"}`` sorted by name, or the NB's error text."""
    remotes = parse_addresses(addresses)

    def read(vid: int, provider: str) -> list[dict[str, Any]] | str:
        op = {"op": "select", "table": "Logical_Switch_Port",
              "where": [["type", "==", "localnet"], ["tag", "==", vid]],
              "columns": ["name", "options", "external_ids"]}
        errors = []
        for remote in remotes:
            try:
                (result,) = jsonrpc_call(remote, "transact", ["OVN_Northbound", op])
            except (NBError, ValueError) as err:
                errors.append(str(err))
                continue
            rows = []
            for row in result.get("rows") or []:
                options, ids = dict(row["options"][1]), dict(row["external_ids"][1])
                if options.get("network_name") == provider:
                    rows.append({"name": row["name"], "switch": ids.get("ls", "")})
            return sorted(rows, key=lambda r: r["name"])
        return "; ".join(errors) or "no NB address"

    return read


# Router name -> its priority-29100 policies ``(priority, action, match)``, or an error text.
Reroutes = Callable[[], "dict[str, frozenset[tuple[int, str, str]]] | str"]


def _uuids(value: Any) -> list[str]:
    """The uuids of an OVSDB JSON ``uuid`` or ``set`` of them (RFC 7047 §5.1)."""
    if isinstance(value, list) and len(value) == 2 and value[0] == "uuid":
        return [str(value[1])]
    if isinstance(value, list) and len(value) == 2 and value[0] == "set":
        return [u for v in value[1] for u in _uuids(v)]
    return []


def nb_reroutes(addresses: str) -> Reroutes:
    """A reader of every router's egress reroutes in the OVN NB (read-only, one transaction
    of two ``select`` s, read once and kept: ``controller.rules.egress_reroute``)."""
    remotes = parse_addresses(addresses)
    kept: list[Any] = []

    def read() -> dict[str, frozenset[tuple[int, str, str]]] | str:
        if kept:
            return kept[0]
        ops = [{"op": "select", "table": "Logical_Router", "where": [], "columns": ["name", "policies"]},
               {"op": "select", "table": "Logical_Router_Policy",
                "where": [["priority", "==", egress_reroute.POLICY_PRIORITY]],
                "columns": ["_uuid", "priority", "action", "match"]}]
        errors = []
        for remote in remotes:
            try:
                routers, pols = jsonrpc_call(remote, "transact", ["OVN_Northbound", *ops])[:2]
                by_uuid = {_uuids(r["_uuid"])[0]: (int(r["priority"]), str(r["action"]),
                                                   egress_reroute.normal_match(r["match"]))
                           for r in pols.get("rows") or []}
                out = {str(r["name"]): frozenset(by_uuid[u] for u in _uuids(r["policies"]) if u in by_uuid)
                       for r in routers.get("rows") or []}
            except (NBError, ValueError, KeyError, TypeError, IndexError) as err:
                errors.append(str(err))
                continue
            kept.append(out)
            return out
        return "; ".join(errors) or "no NB address"

    return read


def _egress_lines(w: KubeWriter, net: dict[str, Any], reroutes: Reroutes | None,
                  gateways: Callable[[], list[dict[str, Any]]]) -> list[str]:
    """A warning line for each Ready VpcEgressGateway of the network's VPC, that its Subnet is
    a source of, whose reroute policy is missing from the VPC's router in the OVN NB
    (``controller.rules.egress_reroute``); [] without the NB."""
    spec, st = net.get("spec") or {}, net.get("status") or {}
    if reroutes is None or net["metadata"].get("deletionTimestamp") or not st.get("cidr"):
        return []
    sname = str(spec.get("subnet") or "")
    sub = w.get_or_none(names.SUBNETS, sname)
    if sub is None:
        return []
    vpc = kubeovn.subnet_vpc(sub)
    found = reroutes()
    if isinstance(found, str):
        return [f"  egress reroutes of router \"{vpc}\" not read from the OVN NB: {found}"]
    router = egress_reroute.RouterPolicies(True, vpc in found, found.get(vpc, frozenset()))
    report = egress_reroute.reroute_report(gateways(), sname, str((sub.get("spec") or {}).get("cidrBlock") or ""),
                                           vpc, router)
    if report is None:
        return []
    lines = [f"  warning: {egress_reroute.missing_message(m, sname)}" for m in report.missing]
    if report.missing:
        lines.append(f"  runbook: {RUNBOOK}, section {reasons.EGRESS_REROUTE_MISSING}")
    return lines


def _localnet_lines(w: KubeWriter, net: dict[str, Any], localnets: Localnets | None) -> list[str]:
    """field-reports.md S6: for a network in VLANConflict, the NB's localnet ports on its VLAN
    and its zone's provider, each marked ours (``localnet.<its subnet>``) or foreign."""
    st = net.get("status") or {}
    conflict = (find(st.get("conditions") or [], names.VLAN_ALLOCATED) or {}).get("reason") == reasons.VLAN_CONFLICT
    vid = st.get("vlan")
    if localnets is None or not conflict or not isinstance(vid, int) or isinstance(vid, bool):
        return []
    zone = w.get_or_none(names.PROXMOX_NETWORK_ZONES, str((net.get("spec") or {}).get("zone") or ""))
    provider = str(((zone or {}).get("spec") or {}).get("providerNetwork") or "")
    if not provider:
        return [f"  OVN NB localnet ports on VLAN {vid} not read: the zone names no provider network"]
    found = localnets(vid, provider)
    if isinstance(found, str):
        return [f"  OVN NB localnet ports on VLAN {vid} not read: {found}"]
    own = f"localnet.{(net.get('spec') or {}).get('subnet')}"
    lines = [f'  OVN NB localnet ports on VLAN {vid} of provider "{provider}": {len(found)}']
    for r in found:
        whose = "this network's" if r["name"] == own else "foreign"
        lines.append(f'    {r["name"]} (logical switch "{r["switch"]}", {whose})')
    return lines


def _list(w: KubeWriter, res: Resource | None, ns: str | None = None) -> list[dict[str, Any]]:
    if res is None:
        return []
    try:
        return w.request("GET", res.path(ns)).get("items") or []
    except ApiError as err:
        if err.not_found:
            return []
        raise


def _timers(vlan: dict[str, Any] | None) -> dict[str, str]:
    raw = ((vlan or {}).get("metadata", {}).get("annotations") or {}).get(names.ANNOTATION_DELETED_SUBNETS)
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _serving(st: dict[str, Any], gw: dict[str, Any] | None, now: _dt.datetime) -> list[str]:
    """Which chassis serves the network's router port, as the controller read it from the
    OVN SB (product-decisions.md §10); [] when the SB is not read."""
    reason = (gw or {}).get("reason")
    if reason == reasons.SB_UNAVAILABLE:
        last = f" (last known: chassis {st[SERVING_CHASSIS]})" if st.get(SERVING_CHASSIS) else ""
        return [f"  gateway: which chassis serves it is not known, the OVN SB cannot be read{last}"]
    if st.get(SERVING_CHASSIS):
        return [f"  gateway served by chassis {st[SERVING_CHASSIS]}"]
    if reason == reasons.NO_SERVING_CHASSIS:
        t0 = rfc3339.parse((gw or {}).get("lastTransitionTime"))
        long = f" for {int((now - t0).total_seconds())} s" if t0 is not None else ""
        return [f"  gateway served by no chassis{long}: the VMs get no answer from their VPC gateway"]
    return []


def _foreign(net: dict[str, Any], in_namespace: Callable[[str], list[dict[str, Any]]]) -> list[str]:
    """field-reports.md S4: a warning line for each address a machine's NIC on the network holds
    from another pool, outside the network's subnet (``controller.rules.foreign``), judged on the
    bridge, VLAN and CIDR the network's status shows."""
    meta, spec, st = net["metadata"], net.get("spec") or {}, net.get("status") or {}
    cidr, vid = str(st.get("cidr") or ""), st.get("vlan")
    if not cidr:
        return []
    vid = vid if isinstance(vid, int) and not isinstance(vid, bool) and vid else None
    found = find_foreign_addresses(str(spec.get("ipPool") or ""), cidr, str(st.get("bridge") or ""), vid,
                                   in_namespace("machines"), in_namespace("claims"), in_namespace("addresses"))
    return [f"  warning: {foreign_address_message(meta['name'], vid, cidr, f)}" for f in found]


def explain(w: KubeWriter, net: dict[str, Any], prune_timeout: float, kinds: dict[str, Resource | None],
            now: _dt.datetime | None = None, localnets: Localnets | None = None,
            lists: dict[tuple[str, str], list[dict[str, Any]]] | None = None,
            reroutes: Reroutes | None = None) -> list[str]:
    """Lines describing one network: its state, the step it waits on, and until when; the
    serving chassis; every condition that carries a warning, True or not
    (``controller.rules.conditions.carries_warning``); addresses of other pools on its VLAN;
    with ``localnets``, the NB's localnet ports on its VLAN when it is in VLANConflict; with
    ``reroutes``, each Ready egress gateway whose reroute for it is gone from the NB
    (``kinds["egress_gateways"]``: the VpcEgressGateways, listed once).

    :param lists: the namespace's machines, claims and addresses by ``(kind, namespace)``, read
        once for every network of a namespace (``_run``); read here when absent."""
    meta, spec, st = net["metadata"], net.get("spec") or {}, net.get("status") or {}
    ns, name = meta["namespace"], meta["name"]
    lists = {} if lists is None else lists

    def in_namespace(key: str) -> list[dict[str, Any]]:
        if (key, ns) not in lists:
            lists[(key, ns)] = _list(w, kinds.get(key), ns)
        return lists[(key, ns)]

    conds = st.get("conditions") or []
    ready = find(conds, names.READY) or {}
    head = f"{ns}/{name}: Ready={ready.get('status', '?')} ({ready.get('reason', 'not evaluated yet')})"
    lines = [head, f"  zone {spec.get('zone')}, subnet {spec.get('subnet')}, pool {spec.get('ipPool')}, "
                   f"VLAN {st.get('vlan') or '-'} on {st.get('bridge') or '-'}"]
    if st.get("observedGeneration") != meta.get("generation") and not meta.get("deletionTimestamp"):
        lines.append("  the controller has not processed the latest spec yet (observedGeneration behind)")
    vlan = w.get_or_none(names.VLANS, str(spec.get("subnet") or ""))
    if meta.get("deletionTimestamp"):
        lines.append(f"  deleting since {meta['deletionTimestamp']}; release order: consumers, Subnet, gateway, Vlan")
        pool = w.get_or_none(kinds["pools"], str(spec.get("ipPool")), ns) if kinds.get("pools") else None
        c = count_consumers(pool, str(spec.get("ipPool")), in_namespace("machines"), in_namespace("addresses"),
                            in_namespace("claims"))
        if c.busy:
            lines.append("  waits on: consumers — " + c.message(str(spec.get("ipPool")), int(st.get("vlan") or 0),
                                                             str(spec.get("subnet")), limit=0))
            # The whole list, one holder a line (the condition shows the first five).
            lines += [f"    {h}" for h in c.holders]
        sub = w.get_or_none(names.SUBNETS, str(spec.get("subnet") or ""))
        if sub is not None:
            fins = sub["metadata"].get("finalizers") or []
            state = "deleting" if sub["metadata"].get("deletionTimestamp") else "present"
            lines.append(f"  waits on: Subnet {sub['metadata']['name']} ({state}, finalizers {fins})")
        timers = _timers(vlan)
        listed = ((vlan or {}).get("status") or {}).get("subnets") or []
        if listed:
            lines.append(f"  Kube-OVN lists {listed} on the Vlan")
        for s, start in sorted(timers.items()):
            t0 = rfc3339.parse(start)  # the controller's parser: what it restarts, doctor calls unreadable
            if t0 is not None:
                until = rfc3339.format_utc(prune.deadline(t0, prune_timeout))
                lines.append(f"  prune timer for {s}: started {start}, VLAN released at {until} at the latest")
            else:
                lines.append(f"  prune timer for {s}: unreadable start {start!r} (restarts at the next pass)")
    failing = st.get("gatewayFailingSince")
    if failing:
        t0 = rfc3339.parse(failing)
        if t0 is not None:
            until = rfc3339.format_utc(t0 + _dt.timedelta(seconds=NB_GRACE_PERIOD))
            lines.append(f"  OVN NB failing since {failing}; a network whose gateway was up stays Ready until {until}")
        else:
            lines.append(f"  OVN NB failing since an unreadable time {failing!r}")
    lines += _serving(st, find(conds, names.GATEWAY_READY), now or _dt.datetime.now(_dt.timezone.utc))
    lines += _localnet_lines(w, net, localnets)
    lines += _foreign(net, in_namespace)

    def gateways() -> list[dict[str, Any]]:
        if ("egress_gateways", "") not in lists:
            lists[("egress_gateways", "")] = _list(w, kinds.get("egress_gateways"))
        return lists[("egress_gateways", "")]

    lines += _egress_lines(w, net, reroutes, gateways)
    for c in conds:
        if c.get("type") == names.READY or not carries_warning(c):
            continue
        lines.append(f"  {c.get('type')}={c.get('status')} {c.get('reason')}: {c.get('message')}")
    if ready.get("reason") and ready.get("status") != "True":
        lines.append(f"  runbook: {RUNBOOK}, section {ready['reason']}")
    return lines


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="proxmox-network-controller doctor",
                                description="Explain which step each ProxmoxNetwork waits on, and until when.")
    p.add_argument("--kubeconfig", default=None,
                   help="kubeconfig file; when unset: in-cluster config, else $KUBECONFIG or ~/.kube/config")
    p.add_argument("-n", "--namespace", default=None, help="only this namespace")
    p.add_argument("name", nargs="?", help="only this network (needs --namespace)")
    p.add_argument("--subnet-prune-timeout", default="10m", help="the controller's --subnet-prune-timeout")
    p.add_argument("--ovn-nb-address", default="",
                   help="the OVN NB, read only (the controller's address forms; ssl: uses --ovn-tls-secret): a "
                        "network in VLANConflict then lists the localnet ports on its VLAN, and a network whose "
                        "Ready egress gateway lost its reroute policy says so; empty: not read")
    p.add_argument("--ovn-tls-secret", default=DEFAULT_SECRET,
                   help="<namespace>/<name> of Kube-OVN's TLS Secret, for an ssl: NB address")
    return p


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        timeout = parse_duration(args.subnet_prune_timeout) or prune.DEFAULT_SUBNET_PRUNE_TIMEOUT.total_seconds()
        w = KubeWriter(load_api_client(args.kubeconfig))
        return _run(w, args, timeout)
    except argparse.ArgumentTypeError as err:
        print(f"doctor: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # unreachable API server, bad kubeconfig, RBAC
        print(f"doctor: cannot read the cluster: {err}", file=sys.stderr)
        return 1


def _run(w: KubeWriter, args: argparse.Namespace, prune: float) -> int:
    kinds: dict[str, Resource | None] = {}
    for key, (group, plural, versions, _kind) in (OPTIONAL_KINDS | OTHER_KINDS).items():
        v = discover(w, group, plural, versions)
        kinds[key] = Resource(group, v, plural, namespaced=True) if v else None
    if args.name:
        if not args.namespace:
            print("doctor: a network name needs --namespace", file=sys.stderr)
            return 2
        net = w.get_or_none(names.PROXMOX_NETWORKS, args.name, args.namespace)
        nets = [net] if net else []
    else:
        nets = _list(w, names.PROXMOX_NETWORKS, args.namespace)
    if not nets:
        print("no ProxmoxNetworks found")
        return 0
    localnets, reroutes = None, None
    if args.ovn_nb_address:
        if "ssl:" in args.ovn_nb_address:
            TLSSource(lambda ns, name: w.get(names.SECRETS, name, ns), args.ovn_tls_secret,
                      tempfile.mkdtemp(prefix="pnc-doctor-tls-")).material()
        localnets = nb_localnets(args.ovn_nb_address)
        reroutes = nb_reroutes(args.ovn_nb_address)
    lists: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for net in sorted(nets, key=lambda n: (n["metadata"]["namespace"], n["metadata"]["name"])):
        print("\n".join(explain(w, net, prune, kinds, localnets=localnets, lists=lists, reroutes=reroutes)))
    return 0


if __name__ == "__main__":  # python -m controller.doctor: the same as `proxmox-network-controller doctor`
    sys.exit(main(sys.argv[1:]))
