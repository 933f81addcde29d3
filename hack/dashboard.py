#!/usr/bin/env python3
"""The Grafana dashboard of the controller, as code (grafanalib), written to
``charts/proxmox-network/dashboards/proxmox-network.json``.

    python hack/dashboard.py            # write the JSON
    python hack/dashboard.py --check    # exit 1 when the committed JSON differs

Every query reads the series of ``controller/metrics.py`` by their exported names
(docs/metrics.md describes each panel). The only Grafana variables used are the
``datasource`` template variable and Grafana's built-in ``$__rate_interval``.
tests/test_prometheus_integration.py evaluates every query against a real Prometheus
scraping the controller and checks that the committed file is what this script writes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafanalib.core import (
    Dashboard,
    GridPos,
    RowPanel,
    Target,
    Template,
    Templating,
    Threshold,
    TimeSeries,
)
from grafanalib._gen import DashboardEncoder

REPO = Path(__file__).resolve().parent.parent
OUTPUT = REPO / "charts" / "proxmox-network" / "dashboards" / "proxmox-network.json"

DATASOURCE = "${datasource}"
QUEUE = 'name=~"proxmox-network-.+"'  # every controller's queue (networks, zones, pods, namespaces)
RATE = "$__rate_interval"


def _targets(*queries: tuple[str, str]) -> list[Target]:
    return [Target(expr=expr, legendFormat=legend, refId=chr(ord("A") + i), datasource=DATASOURCE)
            for i, (expr, legend) in enumerate(queries)]


def _panel(title: str, description: str, queries: list[tuple[str, str]], pos: tuple[int, int, int, int],
           unit: str = "short", thresholds: list[Threshold] | None = None, **kw) -> TimeSeries:
    x, y, w, h = pos
    if thresholds:
        kw.update(thresholds=thresholds, thresholdsStyleMode="line")
    return TimeSeries(title=title, description=description, dataSource=DATASOURCE, targets=_targets(*queries),
                      gridPos=GridPos(h=h, w=w, x=x, y=y), unit=unit, legendDisplayMode="table",
                      legendPlacement="right", **kw)


def build() -> Dashboard:
    rows: list = []
    y = 0

    def row(title: str) -> None:
        nonlocal y
        rows.append(RowPanel(title=title, gridPos=GridPos(h=1, w=24, x=0, y=y)))
        y += 1

    row("Zones and networks")
    rows.append(_panel(
        "Zone capacity",
        "VLAN IDs per ProxmoxNetworkZone: total (vlanRanges minus reservedVLANs), allocated to "
        "networks, and free. A zone at 0 free is ProxmoxNetworkZoneExhausted.",
        [("max by (zone) (cozy_proxmox_zone_vlans_total)", "{{zone}} total"),
         ("max by (zone) (cozy_proxmox_zone_vlans_allocated)", "{{zone}} allocated"),
         ("max by (zone) (cozy_proxmox_zone_vlans_free)", "{{zone}} free")],
        (0, y, 12, 8)))
    rows.append(_panel(
        "Networks by Ready reason",
        "ProxmoxNetworks Ready and not Ready (cozy_proxmox_network_ready), and the not-Ready "
        "passes per second by Ready's reason (cozy_proxmox_network_reconcile_errors_total; "
        "'error' = a pass that raised). A waiting network adds one per pass.",
        [("count(max by (namespace, network) (cozy_proxmox_network_ready) == 1)", "Ready"),
         ("count(max by (namespace, network) (cozy_proxmox_network_ready) == 0)", "not Ready"),
         ("sum by (reason) (rate(cozy_proxmox_network_reconcile_errors_total[$__rate_interval]))",
          "{{reason}} (passes/s)")],
        (12, y, 12, 8)))
    y += 8

    row("Reconciles and work queue")
    rows.append(_panel(
        "Reconcile rate",
        "Network passes per second (all of them, deleting and failed included) and keys put "
        "on the work queue per second (networks, zones and egress-gateway pods).",
        [("sum(rate(cozy_proxmox_network_reconcile_duration_seconds_count[$__rate_interval]))", "network passes"),
         (f"sum(rate(workqueue_adds_total{{{QUEUE}}}[$__rate_interval]))", "queue adds")],
        (0, y, 8, 8), unit="ops"))
    rows.append(_panel(
        "Reconcile errors",
        "Network passes that raised (reason 'error': an API error or a bug, retried with "
        "backoff) and rate-limited re-adds after a failed pass of any kind.",
        [('sum(rate(cozy_proxmox_network_reconcile_errors_total{reason="error"}[$__rate_interval])) or vector(0)',
          "failed passes"),
         (f"sum(rate(workqueue_retries_total{{{QUEUE}}}[$__rate_interval]))", "queue retries")],
        (8, y, 8, 8), unit="ops"))
    rows.append(_panel(
        "Reconcile latency",
        "Quantiles of the duration of network passes (cozy_proxmox_network_reconcile_duration_seconds, "
        "buckets 5 ms .. 10 s).",
        [(f"histogram_quantile({q}, sum by (le) (rate(cozy_proxmox_network_reconcile_duration_seconds_bucket"
          f"[$__rate_interval])))", f"p{int(q * 100)}") for q in (0.5, 0.9, 0.99)],
        (16, y, 8, 8), unit="s"))
    y += 8
    rows.append(_panel(
        "Work queue depth",
        "Keys waiting for a worker, per replica (a standby holds every watched object here), "
        "and the longest-running key being processed now (growing = a stuck worker).",
        [(f"sum by (instance) (workqueue_depth{{{QUEUE}}})", "{{instance}} depth"),
         (f"max by (instance) (workqueue_longest_running_processor_seconds{{{QUEUE}}})",
          "{{instance}} longest running (s)")],
        (0, y, 12, 8)))
    rows.append(_panel(
        "Informer freshness",
        "Seconds since each informer last saw its watch alive, per resource (worst replica). "
        "Healthy watches renew every 5-10 min; above 1200 s the replica is not ready and "
        "ProxmoxNetworkInformerStale fires.",
        [("max by (resource) (cozy_proxmox_informer_last_event_age_seconds)", "{{resource}}")],
        (12, y, 12, 8), unit="s",
        thresholds=[Threshold("green", 0, 0.0), Threshold("red", 1, 1200.0)]))
    y += 8

    row("Leader and OVN gateway")
    rows.append(_panel(
        "Leader",
        "cozy_proxmox_leader per replica: 1 while it holds the Lease. Exactly one replica "
        "should be at 1; none for 5 min is ProxmoxNetworkControllerNoLeader.",
        [("max by (instance) (cozy_proxmox_leader)", "{{instance}}"),
         ("sum(cozy_proxmox_leader)", "leaders")],
        (0, y, 8, 8)))
    rows.append(_panel(
        "OVN NB errors and transactions",
        "Gateway passes and releases that failed against the OVN Northbound database, NB write "
        "transactions committed by kind (ensure/release/collect; flat in a steady state), and "
        "HA chassis groups of deleted networks collected, per second.",
        [("sum(rate(cozy_proxmox_gateway_nb_errors_total[$__rate_interval]))", "NB errors"),
         ("sum by (op) (rate(cozy_proxmox_gateway_nb_transactions_total[$__rate_interval]))", "{{op}} transactions"),
         ("sum(rate(cozy_proxmox_gateway_groups_collected_total[$__rate_interval]))", "groups collected")],
        (8, y, 8, 8), unit="ops"))
    rows.append(_panel(
        "Gateway chassis per network",
        "Chassis in the HA chassis group of each network's VPC router port "
        "(cozy_proxmox_network_gateway_chassis; the series carries namespace and network, not "
        "the VPC), and the networks whose GatewayReady is not True.",
        [("max by (namespace, network) (cozy_proxmox_network_gateway_chassis)", "{{namespace}}/{{network}}"),
         ("count(max by (namespace, network) (cozy_proxmox_network_gateway_ready) == 0)", "gateway not ready")],
        (16, y, 8, 8)))

    return Dashboard(
        title="Proxmox networks",
        uid="proxmox-network",
        description="proxmox-network-controller: zones, networks, reconciles, work queue, informers, "
                    "leader election and OVN gateway management (hack/dashboard.py)",
        tags=["proxmox-network", "cozystack"],
        timezone="browser",
        refresh="30s",
        panels=rows,
        templating=Templating(list=[Template(name="datasource", label="Data source", query="prometheus",
                                             type="datasource", default="Prometheus")]),
    ).auto_panel_ids()


def render() -> str:
    """The dashboard JSON as committed (sorted keys, two-space indent, final newline)."""
    data = build().to_json_data()
    return json.dumps(data, cls=DashboardEncoder, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the committed JSON is not what this writes")
    p.add_argument("--output", type=Path, default=OUTPUT)
    args = p.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run python hack/dashboard.py", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
