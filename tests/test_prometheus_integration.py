"""A real Prometheus (Debian's ``prometheus`` server) scraping the real controller
(``python -m controller.main`` as its own service-account user, leader election on,
gateway management on against an NB of its own) with the shipped alert rules loaded
(issue 16 parts 4 and 5).

What is proven, by the Prometheus HTTP API:

* every series docs/metrics.md lists exists in the server with exactly the documented
  labels (parsed from the doc's tables), with the values the docs promise for the
  objects written here;
* every rule of manifests/monitoring/prometheusrule.yaml is healthy in the server and
  its expression evaluates without error through ``/api/v1/query``;
* a zone with its only VLAN taken, a network failing with ``NBUnavailable`` (the NB
  stopped after the controller synced) and a 94 % full pool drive their alerts to
  ``pending`` with the shipped ``for:`` values, and to ``firing`` with a copy whose
  ``for:`` values are shortened (the copy is checked to differ only there); the
  controller-down and no-leader alerts stay inactive;
* every query of the Grafana dashboard (charts/proxmox-network/dashboards/, written by
  hack/dashboard.py, checked to be what the script writes) evaluates without error and
  returns data.

Expected values come from docs/metrics.md (series, labels, lifecycle), the alert table
there, and reference-behaviour.md §4/§9 (ZoneExhausted, NBUnavailable for a network whose
gateway was never up).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from hack.tools.objects import Admin, reason, unique
from hack.tools.wait import wait_for
from tests.support.ovsdb import NBServer, free_port
from tests.test_gateway_integration import VPC, Router, Trunk, bound_network
from tests.test_lifecycle_integration import Env

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "manifests" / "monitoring" / "prometheusrule.yaml"
DOCS = REPO / "docs" / "metrics.md"
DASHBOARD = REPO / "charts" / "proxmox-network" / "dashboards" / "proxmox-network.json"
JOB = "proxmox-network-controller-metrics"  # the Service's name, as the operator's scrape would name it
SHORT_FOR = "2s"
SHORT_LABEL = "rules_file"  # on the shortened copy's alerts only: its series are its own
# One queue per controller (issue 14): networks, zones, egress-gateway pods, the namespace annotation.
QUEUES = {"proxmox-network-networks", "proxmox-network-zones", "proxmox-network-pods", "proxmox-network-namespaces"}
# Grafana's built-in interval, replaced by hand (Grafana would use at least 4 x the 1 s
# scrape interval here; a minute covers every sample the test has).
RATE_INTERVAL = "1m"


# ------------------------------------------------------------------------------ rules


def shipped_rules_text() -> str:
    """The shipped rule groups as a Prometheus rules file (the PrometheusRule's spec)."""
    return yaml.safe_dump(yaml.safe_load(RULES.read_text())["spec"], sort_keys=False)


def shortened_rules_text(text: str) -> str:
    """The same rules with every ``for:`` shortened and the label ``rules_file: short-for``
    added: two groups in one Prometheus that write the same ``ALERTS`` and
    ``ALERTS_FOR_STATE`` series interleave their samples, and a late evaluation under load
    fails with "out of order sample" (flake hunt, failure 19)."""
    rules = yaml.safe_load(text)
    for g in rules["groups"]:
        for r in g["rules"]:
            r["for"] = SHORT_FOR
            r["labels"] = {**(r.get("labels") or {}), SHORT_LABEL: "short-for"}
    return yaml.safe_dump(rules, sort_keys=False)


def test_shortened_rules_differ_from_the_shipped_only_in_for_and_their_file_label():
    shipped = yaml.safe_load(shipped_rules_text())
    short = yaml.safe_load(shortened_rules_text(shipped_rules_text()))
    fors = [r["for"] for g in shipped["groups"] for r in g["rules"]]
    assert len(fors) == 12 and all(f != SHORT_FOR for f in fors)  # docs/metrics.md: 12 alerts, 1m..1h
    assert [r["for"] for g in short["groups"] for r in g["rules"]] == [SHORT_FOR] * 12
    assert all(SHORT_LABEL not in (r.get("labels") or {}) for g in shipped["groups"] for r in g["rules"])
    for g in short["groups"]:
        for r in g["rules"]:
            r["for"] = "restored"
            assert r["labels"].pop(SHORT_LABEL) == "short-for"
    for g in shipped["groups"]:
        for r in g["rules"]:
            r["for"] = "restored"
    assert short == shipped


# -------------------------------------------------------------------------- dashboard


def test_committed_dashboard_is_what_hack_dashboard_writes(tmp_path):
    out = tmp_path / "dash.json"
    subprocess.run([sys.executable, str(REPO / "hack" / "dashboard.py"), "--output", str(out)], check=True,
                   cwd=REPO, capture_output=True)
    assert DASHBOARD.read_text() == out.read_text(), "run python hack/dashboard.py and commit the result"
    r = subprocess.run([sys.executable, str(REPO / "hack" / "dashboard.py"), "--check", "--output", str(out)],
                       cwd=REPO, capture_output=True)
    assert r.returncode == 0
    out.write_text(out.read_text().replace("Zone capacity", "Zone capacity (edited)"))
    r = subprocess.run([sys.executable, str(REPO / "hack" / "dashboard.py"), "--check", "--output", str(out)],
                       cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 1 and "out of date" in r.stderr


def dashboard_panels() -> list[dict]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


def test_dashboard_has_the_issue_panels():
    titles = [p["title"] for p in dashboard_panels()]
    assert titles == ["Zone capacity", "Networks by Ready reason", "Reconcile rate", "Reconcile errors",
                      "Reconcile latency", "Work queue depth", "Informer freshness", "Leader",
                      "OVN NB errors and transactions", "Gateway chassis per network"]
    for p in dashboard_panels():
        assert p["datasource"] == "${datasource}" and p["targets"], p["title"]


# ---------------------------------------------------------------------- the test bed


class Prometheus:
    """``prometheus`` on 127.0.0.1 with a data dir of its own."""

    def __init__(self, workdir: Path, target: str, rule_files: list[Path]) -> None:
        self.dir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(f) for f in rule_files],
            "scrape_configs": [{"job_name": JOB, "honor_labels": True,
                                "static_configs": [{"targets": [target]}]}],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = open(workdir / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited: {(self.dir / 'prometheus.log').read_text()[-2000:]}")
        try:
            return urllib.request.urlopen(f"{self.url}/-/ready", timeout=2).status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> dict:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            body = urllib.request.urlopen(url, timeout=10).read()
        except urllib.error.HTTPError as err:  # 400/422: the error is in the JSON body
            body = err.read()
        return json.loads(body)

    def query(self, expr: str) -> list[dict]:
        """Instant query; fails the test on an error or a warning."""
        out = self.api("query", query=expr)
        assert out["status"] == "success" and not out.get("warnings"), (expr, out)
        return out["data"]["result"]

    def value(self, expr: str) -> float | None:
        res = self.query(expr)
        assert len(res) <= 1, (expr, res)
        return float(res[0]["value"][1]) if res else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


class Controller:
    """``python -m controller.main`` as the controller user, serving /metrics on 127.0.0.1."""

    def __init__(self, cluster, workdir: Path, nb_remote: str) -> None:
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.log = open(workdir / "controller.log", "wb")
        self.log_path = workdir / "controller.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "controller.main", f"--kubeconfig={cluster.controller_kubeconfig}",
             "--leader-elect=true", "--manage-gateway-chassis=true", f"--ovn-nb-address={nb_remote}",
             f"--ovn-tls-dir={workdir / 'tls'}", f"--metrics-bind-address={self.target}",
             "--health-probe-bind-address=0", "--log-format=json"],
            cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=self.log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL)

    def scrape(self) -> str:
        if self.proc.poll() is not None:
            raise RuntimeError(f"controller exited ({self.proc.returncode}): {self.log_path.read_text()[-2000:]}")
        return urllib.request.urlopen(f"http://{self.target}/metrics", timeout=5).read().decode()

    def sample(self, line_prefix: str) -> float | None:
        for line in self.scrape().splitlines():
            if line.startswith(line_prefix + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: releases the Lease
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


class Stack:
    """What the tests read: the server, the controller and the names of the objects."""

    prom: Prometheus
    ctl: Controller
    ns: str
    full_zone: str
    gw_net = "gw"
    nbdown_net = "nbdown"
    first_net = "first"
    second_net = "second"
    shipped_file: Path
    short_file: Path


@pytest.fixture(scope="module")
def stack(cluster, tmp_path_factory):
    work = tmp_path_factory.mktemp("prometheus")
    api = cluster.api_client("admin")
    admin = Admin(api)
    from kubernetes import client as k8s

    core = k8s.CoreV1Api(api)
    s = Stack()
    s.ns = unique("prom")
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=s.ns)))
    env = Env(admin, s.ns)
    trunk = Trunk(api, env.provider)
    trunk.join("worker1", "worker2")
    server = NBServer(work / "nb").start()
    # An HA chassis group of ours whose network is gone: the collector deletes it once the
    # controller leads with the NB synced (groups_collected_total 1, a "collect" transaction).
    server.nbctl("create", "HA_Chassis_Group", "name=px-gone",
                 "external_ids:owner=proxmox-network", f"external_ids:network={s.ns}/gone")
    gw_sub, down_sub = unique("sub"), unique("sub")
    router = Router(server.nbctl, gw_sub)
    router.create()
    s.shipped_file = work / "shipped-rules.yaml"
    s.shipped_file.write_text(shipped_rules_text())
    s.short_file = work / "short-for-rules.yaml"
    s.short_file.write_text(shortened_rules_text(shipped_rules_text()))
    ctl = prom = None
    try:
        ctl = s.ctl = Controller(cluster, work, server.remote)
        prom = s.prom = Prometheus(work, ctl.target, [s.shipped_file, s.short_file])
        # A one-VLAN zone: the first network takes VLAN 1500, the second finds it exhausted.
        s.full_zone = unique("full")
        admin.create_zone(s.full_zone, env.provider, ["1500"])
        admin.create_network(s.ns, s.first_net, s.full_zone, unique("sub"))
        env.wait(s.first_net, "VLANAllocated", "Allocated", timeout=60)  # first pass after the lease is taken
        admin.create_network(s.ns, s.second_net, s.full_zone, unique("sub"))
        # A network with its gateway up on two trunk nodes and a pool 48 of 51 used.
        env.a.create_network(s.ns, s.gw_net, env.zone, gw_sub, "p")
        env.wait(s.gw_net, "VLANAllocated", "Allocated")
        env.subnet(gw_sub, gw_sub, vpc=VPC)
        env.subnet_conditions(gw_sub, ("Validated", "True", ""), ("Ready", "True", ""))
        env.pool("p", total=51, used=48)
        obj = env.wait(s.gw_net, "Ready", "Ready")
        assert reason(obj, "GatewayReady")[:2] == ("True", "ChassisAssigned")
        env.wait(s.second_net, "VLANAllocated", "ZoneExhausted")
        wait_for(lambda: ctl.sample("cozy_proxmox_gateway_groups_collected_total") == 1.0, timeout=30,
                 what="the collector's pass over the NB")
        # Prometheus holds the NB error counter from before the outage, so the outage's
        # errors are an increase (ProxmoxNetworkGatewayNBErrors) and not the first sample.
        wait_for(lambda: prom.ready() and prom.query("cozy_proxmox_gateway_nb_errors_total"), timeout=30,
                 what="prometheus scraping the controller")
        # The NB goes away; a network bound now has never had its gateway up: NBUnavailable at once.
        server.stop()
        bound_network(env, s.nbdown_net, down_sub, "p2")
        obj = env.wait(s.nbdown_net, "GatewayReady", "NBUnavailable")
        assert reason(obj, "GatewayReady")[0] == "False"
        # The last passes, as scraped: the tests read a server that has caught up.
        def caught_up() -> bool:
            return (prom.value(f'cozy_proxmox_network_gateway_ready{{namespace="{s.ns}",'
                               f'network="{s.nbdown_net}"}}') == 0
                    and (prom.value('cozy_proxmox_network_reconcile_errors_total{reason="NBUnavailable"}') or 0) >= 1
                    and prom.value(f'cozy_proxmox_zone_networks{{zone="{s.full_zone}"}}') == 2)

        wait_for(caught_up, timeout=30, what="the last passes scraped")
        yield s
    finally:
        for p in (prom, ctl):
            if p is not None:
                p.stop()
        server.stop()
        trunk.leave("worker1", "worker2")
        for net in (s.first_net, s.second_net, s.gw_net, s.nbdown_net):
            try:
                admin.co.delete_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", s.ns,
                                                         "proxmoxnetworks", net)
            except k8s.ApiException:
                pass
        api.close()


# ------------------------------------------------------------------------------ series


def documented_series() -> dict[str, tuple[str, frozenset[str]]]:
    """name -> (type, labels) from the tables under "## Series" in docs/metrics.md."""
    text = DOCS.read_text().split("## Series", 1)[1].split("\n## Alerts", 1)[0]
    out: dict[str, tuple[str, frozenset[str]]] = {}
    for section in re.split(r"\n### ", text)[1:]:
        lines = [ln for ln in section.splitlines() if ln.startswith("|")]
        if not lines:
            continue
        header = [c.strip() for c in lines[0].strip("|").split("|")]
        common = re.search(r"All labelled `(\w+)`", section)
        for ln in lines[2:]:
            cells = [c.strip() for c in ln.strip("|").split("|")]
            name = re.fullmatch(r"`(\w+)`", cells[0])
            assert name, ln
            if "Labels" in header:
                cell = re.sub(r"\([^)]*\)", "", cells[header.index("Labels")])
                labels = frozenset(re.findall(r"`(\w+)`", cell))
            else:
                assert common, section[:80]
                labels = frozenset([common.group(1)])
            out[name.group(1)] = (cells[header.index("Type")], labels)
    return out


def test_docs_list_the_series_of_the_controller():
    series = documented_series()
    # the doc's tables, by section: 7 zone, 15 network (3 of them read from the OVN SB, 1 from the NB's router
    # policies), 3 gateway, 3 reconcile, 2 status writes (S5), 1 leader, 1 credentials (R11), 7 queue, 4 informer
    # (R8: list_failing)
    assert len(series) == 43
    assert series["cozy_proxmox_network_ready"] == ("gauge", {"namespace", "network", "zone", "vlan"})
    assert series["cozy_proxmox_gateway_nb_errors_total"] == ("counter", frozenset())
    assert series["workqueue_depth"] == ("gauge", {"name"})


SCRAPE_LABELS = {"__name__", "job", "instance"}


# Exported only with --ovn-sb-address and a cr- binding in the SB: this stack's NB is a server of
# its own with no SB beside it. Their labels: tests/test_metrics.py; on the wire:
# tests/test_wire_two_trunks_integration.py.
SB_SERIES = {"cozy_proxmox_network_gateway_bound", "cozy_proxmox_network_gateway_serving_chassis",
             "cozy_proxmox_gateway_sb_synced"}


def test_documented_series_exist_in_prometheus_with_their_labels(stack):
    prom = stack.prom
    series = {k: v for k, v in documented_series().items() if k not in SB_SERIES}
    assert set(documented_series()) - set(series) == SB_SERIES

    def all_there():
        return all(prom.query(f"{name}{'_count' if typ == 'histogram' else ''}")
                   for name, (typ, _) in series.items())

    wait_for(all_there, timeout=30, interval=0.5, what="every documented series scraped")
    for name, (typ, labels) in series.items():
        names = [f"{name}_bucket", f"{name}_sum", f"{name}_count"] if typ == "histogram" else [name]
        for n in names:
            res = prom.query(n)
            assert res, n
            want = labels | ({"le"} if n.endswith("_bucket") else set())
            for r in res:
                m = r["metric"]
                assert m["job"] == JOB
                assert set(m) - SCRAPE_LABELS == want, (n, m)
        # Prometheus scrapes OpenMetrics, whose counter families drop the _total suffix.
        family = name.removesuffix("_total") if typ == "counter" else name
        meta = prom.api("metadata", metric=family)["data"].get(family)
        assert meta and meta[0]["type"] == typ, (name, meta)

    ns, full = stack.ns, stack.full_zone
    v = prom.value
    # docs/metrics.md "Zones": the one-VLAN zone with both networks counted.
    assert [v(f'cozy_proxmox_zone_{k}{{zone="{full}"}}') for k in ("vlans_total", "vlans_allocated", "vlans_free",
                                                                   "networks")] == [1, 1, 0, 2]
    assert v(f'cozy_proxmox_orphaned_vlans{{zone="{full}"}}') == 0
    # "Networks": one series per network; vlan "0" before allocation, zone = spec.zone.
    assert v(f'cozy_proxmox_network_ready{{namespace="{ns}",network="second",zone="{full}",vlan="0"}}') == 0
    assert v(f'cozy_proxmox_network_ready{{namespace="{ns}",network="first",zone="{full}",vlan="1500"}}') == 0
    assert len(prom.query(f'cozy_proxmox_network_ready{{namespace="{ns}"}}')) == 4
    assert v(f'max by (namespace, network) (cozy_proxmox_network_ready{{namespace="{ns}",network="gw"}})') == 1
    pool = {r["metric"]["state"]: float(r["value"][1])
            for r in prom.query(f'cozy_proxmox_network_ippool_addresses{{namespace="{ns}",network="gw"}}')}
    assert pool == {"total": 51, "used": 48, "free": 3}
    assert v(f'cozy_proxmox_network_consumers{{namespace="{ns}",network="gw"}}') == 48
    assert v(f'cozy_proxmox_network_deleting{{namespace="{ns}",network="gw"}}') == 0
    # Gateway: two trunk nodes; the never-up network 0; the Ready one kept at 1 in its grace.
    assert v(f'cozy_proxmox_network_gateway_chassis{{namespace="{ns}",network="gw"}}') == 2
    assert v(f'cozy_proxmox_network_gateway_ready{{namespace="{ns}",network="gw"}}') == 1
    assert v(f'cozy_proxmox_network_gateway_ready{{namespace="{ns}",network="nbdown"}}') == 0
    assert v("cozy_proxmox_gateway_groups_collected_total") == 1
    assert v('cozy_proxmox_gateway_nb_transactions_total{op="collect"}') == 1
    assert v('cozy_proxmox_gateway_nb_transactions_total{op="ensure"}') >= 1
    assert {r["metric"]["op"] for r in prom.query("cozy_proxmox_gateway_nb_transactions_total")} <= {
        "ensure", "release", "collect"}
    assert v("cozy_proxmox_gateway_nb_errors_total") >= 1
    # Reconciles.
    assert v(f'cozy_proxmox_vlan_allocations_total{{zone="{full}",result="allocated"}}') == 1
    assert v(f'cozy_proxmox_vlan_allocations_total{{zone="{full}",result="exhausted"}}') >= 1
    assert v('cozy_proxmox_network_reconcile_errors_total{reason="ZoneExhausted"}') >= 1
    assert v('cozy_proxmox_network_reconcile_errors_total{reason="NBUnavailable"}') >= 1
    buckets = [r["metric"]["le"] for r in prom.query("cozy_proxmox_network_reconcile_duration_seconds_bucket")]
    assert sorted(buckets, key=float) == ["0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1.0", "2.5",
                                          "5.0", "10.0", "+Inf"]
    # Leader election on: this one replica holds the Lease.
    assert v("cozy_proxmox_leader") == 1
    assert {r["metric"]["name"] for r in prom.query('{__name__=~"workqueue_.*"}')} == QUEUES
    # Informers: one resource per watched kind, named <plural>.<group>/<version>.
    resources = {r["metric"]["resource"] for r in prom.query("cozy_proxmox_informer_relists_total")}
    assert {"proxmoxnetworks.proxmox.cozystack.io/v1alpha1", "proxmoxnetworkzones.proxmox.cozystack.io/v1alpha1",
            "vlans.kubeovn.io/v1", "subnets.kubeovn.io/v1", "provider-networks.kubeovn.io/v1", "namespaces/v1",
            "pods/v1", "nodes/v1"} <= resources, resources
    assert {r["metric"]["reason"] for r in prom.query("cozy_proxmox_informer_watch_restarts_total")} <= {
        "expired", "dropped", "timeout", "closed", "error"}
    assert prom.query("cozy_proxmox_informer_last_event_age_seconds > 600") == []
    # docs/metrics.md "The endpoint": only the controller's own families.
    assert prom.query('{job="%s", __name__=~"process_.*|python_.*|.*_created"}' % JOB) == []


# ------------------------------------------------------------------------------- rules


def rule_groups(prom: Prometheus) -> dict[str, list[dict]]:
    """file -> rules of the group proxmox-network.rules loaded from it."""
    out = prom.api("rules")
    assert out["status"] == "success", out
    return {g["file"]: g["rules"] for g in out["data"]["groups"] if g["name"] == "proxmox-network.rules"}


def test_every_rule_is_healthy_and_its_expression_evaluates(stack):
    prom = stack.prom
    shipped = yaml.safe_load(shipped_rules_text())["groups"]
    assert [g["name"] for g in shipped] == ["proxmox-network.rules"]
    exprs = {r.get("alert") or r["record"]: r["expr"] for r in shipped[0]["rules"]}

    def evaluated() -> dict | None:
        groups = rule_groups(prom)
        ok = len(groups) == 2 and all(r.get("lastEvaluation", "").startswith("20") and
                                      not r["lastEvaluation"].startswith("0001") for rs in groups.values() for r in rs)
        return groups if ok else None

    groups = wait_for(evaluated, timeout=20, interval=0.5, what="both rule files evaluated")
    for file, rules in groups.items():
        assert [r["name"] for r in rules] == list(exprs), file
        for r in rules:
            assert r["health"] == "ok" and not r.get("lastError"), (file, r["name"], r.get("lastError"))
    for name, expr in exprs.items():
        out = prom.api("query", query=expr)
        assert out["status"] == "success" and not out.get("warnings"), (name, out)


def alert_states(prom: Prometheus, file: Path) -> dict[str, list[tuple[str, dict]]]:
    return {r["name"]: [(a["state"], a["labels"]) for a in r.get("alerts", [])]
            for r in rule_groups(prom)[str(file)]}


def test_provoked_conditions_drive_their_alerts(stack):
    prom, ns, full = stack.prom, stack.ns, stack.full_zone

    def has(alerts, state, **labels):
        return any(s == state and all(lbl.get(k) == v for k, v in labels.items()) for s, lbl in alerts)

    provoked = {
        "ProxmoxNetworkZoneExhausted": {"zone": full},
        "ProxmoxNetworkNotReady": {"namespace": ns, "network": stack.second_net, "zone": full},
        "ProxmoxNetworkGatewayNotReady": {"namespace": ns, "network": stack.nbdown_net},
        "ProxmoxNetworkGatewayNBErrors": {},
        "ProxmoxNetworkPoolNearlyFull": {"namespace": ns, "network": stack.gw_net},
    }

    missing: dict[str, list[str]] = {}

    def reached(file: Path, state: str):
        alerts = alert_states(prom, file)
        missing[file.name] = [a for a, labels in provoked.items() if not has(alerts[a], state, **labels)]
        return alerts if not missing[file.name] else None

    # With the shipped for: (5m..15m) they stay pending for the test's whole life ...
    try:
        shipped = wait_for(lambda: reached(stack.shipped_file, "pending"), timeout=30, interval=0.5,
                           what="provoked alerts pending with the shipped rules")
        # ... and the shortened copy, the same expressions, fires them.
        short = wait_for(lambda: reached(stack.short_file, "firing"), timeout=30, interval=0.5,
                         what="provoked alerts firing with for: shortened")
    except AssertionError as err:
        raise AssertionError(f"{err}; not reached: {missing}") from None
    for alerts in (shipped, short):
        assert alerts["ProxmoxNetworkZoneExhausted"][0][1]["severity"] == "warning"
        # The healthy side: the target is up under the documented job name, one replica leads.
        assert alerts["ProxmoxNetworkControllerDown"] == []
        assert alerts["ProxmoxNetworkControllerNoLeader"] == []
        assert alerts["ProxmoxNetworkInformerStale"] == []
        # The gateway of the Ready network is kept up through the NB grace: no alert for it.
        assert not has(alerts["ProxmoxNetworkGatewayNotReady"], "pending", network=stack.gw_net)
        assert not has(alerts["ProxmoxNetworkGatewayNotReady"], "firing", network=stack.gw_net)
    assert all(s == "pending" for rs in alert_states(prom, stack.shipped_file).values() for s, _ in rs)
    # Prometheus' own view of it: ALERTS series, labelled as in the rules.
    firing = {r["metric"]["alertname"] for r in prom.query('ALERTS{alertstate="firing"}')}
    assert set(provoked) <= firing


# --------------------------------------------------------------------------- dashboard


def test_every_dashboard_query_evaluates_with_data(stack):
    prom = stack.prom
    targets = [(p["title"], t) for p in dashboard_panels() for t in p["targets"]]
    assert len(targets) == 23

    def all_have_data():
        empty = [(title, t["expr"]) for title, t in targets
                 if not prom.query(t["expr"].replace("$__rate_interval", RATE_INTERVAL))]
        return not empty or None

    try:
        wait_for(all_have_data, timeout=30, interval=0.5, what="every dashboard query with data")
    finally:
        for title, t in targets:  # no error for any query, data or not
            prom.query(t["expr"].replace("$__rate_interval", RATE_INTERVAL))
    def panel(title: str, ref: str) -> list[dict]:
        t = next(t for p in dashboard_panels() if p["title"] == title for t in p["targets"] if t["refId"] == ref)
        return prom.query(t["expr"].replace("$__rate_interval", RATE_INTERVAL))

    def of_zone(res: list[dict]) -> float:
        return next(float(r["value"][1]) for r in res if r["metric"]["zone"] == stack.full_zone)

    # The panels show the documented values of the objects written here.
    assert [of_zone(panel("Zone capacity", ref)) for ref in "ABC"] == [1, 1, 0]
    assert float(panel("Leader", "B")[0]["value"][1]) == 1
    chassis = {(r["metric"]["namespace"], r["metric"]["network"]): float(r["value"][1])
               for r in panel("Gateway chassis per network", "A")}
    assert chassis[(stack.ns, stack.gw_net)] == 2
    reasons = {r["metric"]["reason"] for r in panel("Networks by Ready reason", "C")}
    assert {"ZoneExhausted", "NBUnavailable", "SubnetNotFound"} <= reasons
    assert {r["metric"]["op"] for r in panel("OVN NB errors and transactions", "B")} >= {"collect", "ensure"}
