"""The alerts of manifests/monitoring/prometheusrule.yaml against the metrics we export.

Two layers:

* a PromQL reference check that always runs: every metric name an expression
  reads is exported by :class:`controller.metrics.Metrics`, and every label it
  matches or groups on is a label of those metrics (a renamed metric or label
  breaks the test, not the alert in production);
* ``promtool`` (Debian package ``prometheus``), skipped only when it is not
  installed: ``promtool check rules`` on the rule group, and
  ``promtool test rules`` on series taken from the exposition of real
  :class:`Metrics` instances driven into a healthy and a troubled state, with
  every alert's expected labels and rendered annotations.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from controller.metrics import Metrics
from tests.test_metrics import FakeInformer, populate

ROOT = Path(__file__).resolve().parent.parent
RULE_FILE = ROOT / "manifests" / "monitoring" / "prometheusrule.yaml"

# admission-and-packaging.md (d): alert -> (for, severity)
REFERENCE_ALERTS = {
    "ProxmoxNetworkNotReady": ("15m", "warning"),
    "ProxmoxNetworkGatewayNotReady": ("10m", "warning"),
    "ProxmoxNetworkGatewayNBErrors": ("10m", "warning"),
    "ProxmoxNetworkPoolNearlyFull": ("10m", "warning"),
    "ProxmoxNetworkZoneExhausted": ("5m", "warning"),
    "ProxmoxNetworkOrphanedVLANs": ("30m", "warning"),
    "ProxmoxNetworkStuckDeleting": ("1h", "informational"),
    "ProxmoxNetworkControllerDown": ("10m", "warning"),
}
# field reports B11 and B13; issue 25 (a gateway of fewer than three chassis does not fail over)
EXTRA_ALERTS = {
    "ProxmoxNetworkInformerStale": ("5m", "warning"),
    "ProxmoxNetworkControllerNoLeader": ("5m", "warning"),
    "ProxmoxNetworkGatewayWithoutFailover": ("30m", "warning"),
    # product-decisions.md §10: nothing serves the router port's cr- binding in the OVN SB
    "ProxmoxNetworkGatewayUnbound": ("1m", "warning"),
}
ALL_ALERTS = {**REFERENCE_ALERTS, **EXTRA_ALERTS}

# Labels Prometheus adds to every scraped series, and its own `up` series.
SCRAPE_LABELS = frozenset({"job", "instance"})
PROMETHEUS_SERIES = {"up": SCRAPE_LABELS}


def load_rule() -> dict[str, Any]:
    with RULE_FILE.open() as f:
        return yaml.safe_load(f)


def rules() -> dict[str, dict[str, Any]]:
    (group,) = load_rule()["spec"]["groups"]
    return {r["alert"]: r for r in group["rules"]}


def exported() -> dict[str, frozenset[str]]:
    """Sample name -> label names, from the exposition of a Metrics with every series set."""
    m = Metrics()
    populate(m)
    out: dict[str, set[str]] = {}
    for fam in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in fam.samples:
            out.setdefault(s.name, set()).update(k for k in s.labels if k != "le")
    return {k: frozenset(v) for k, v in out.items()}


# --------------------------------------------------------------------- the object


def test_rule_object():
    doc = load_rule()
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert doc["kind"] == "PrometheusRule"
    assert doc["metadata"]["name"] == "proxmox-network"
    (group,) = doc["spec"]["groups"]
    assert group["name"] == "proxmox-network.rules"
    names = [r["alert"] for r in group["rules"]]
    assert len(names) == len(set(names))
    assert set(names) == set(ALL_ALERTS)
    for rule in group["rules"]:
        want_for, severity = ALL_ALERTS[rule["alert"]]
        assert rule["for"] == want_for, rule["alert"]
        assert rule["labels"] == {"severity": severity}, rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]
        assert rule["annotations"]["description"].strip(), rule["alert"]


def _norm(expr: str) -> str:
    return " ".join(expr.split())


def test_reference_expressions():
    r = rules()
    assert _norm(r["ProxmoxNetworkGatewayNBErrors"]["expr"]) == \
        "sum(increase(cozy_proxmox_gateway_nb_errors_total[10m])) > 0"
    assert _norm(r["ProxmoxNetworkZoneExhausted"]["expr"]) == "max by (zone) (cozy_proxmox_zone_vlans_free) == 0"
    assert _norm(r["ProxmoxNetworkOrphanedVLANs"]["expr"]) == "max by (zone) (cozy_proxmox_orphaned_vlans) > 0"
    assert _norm(r["ProxmoxNetworkStuckDeleting"]["expr"]) == "cozy_proxmox_network_deleting == 1"
    assert _norm(r["ProxmoxNetworkControllerDown"]["expr"]) == \
        'absent(up{job=~".*proxmox-network-controller.*"} == 1)'
    assert _norm(r["ProxmoxNetworkGatewayNotReady"]["expr"]) == (
        "(max by (namespace, network) (cozy_proxmox_network_gateway_ready) == 0) and on (namespace, network) "
        "(max by (namespace, network) (cozy_proxmox_network_deleting) == 0)")
    # the "not deleting" guard of the two readiness alerts
    for name in ("ProxmoxNetworkNotReady", "ProxmoxNetworkGatewayNotReady"):
        assert "and on (namespace, network)" in _norm(r[name]["expr"])
        assert "(cozy_proxmox_network_deleting) == 0" in _norm(r[name]["expr"])
    desc = r["ProxmoxNetworkGatewayNotReady"]["annotations"]["description"]
    for reason in ("NoTrunkNodes", "RouterPortMissing", "NBUnavailable", "ForeignGroup"):
        assert reason in desc
    nb = r["ProxmoxNetworkGatewayNBErrors"]["annotations"]["description"]
    assert "GatewayReleasePending" in nb and "NBUnavailable" in nb
    # B11: twice the longest server watch timeout (informers' watch_timeout_range max)
    from informers import ReflectorConfig

    assert f"> {2 * ReflectorConfig().watch_timeout_range[1]}" in _norm(r["ProxmoxNetworkInformerStale"]["expr"])


# ------------------------------------------------------------- PromQL references

_TOKEN = re.compile(
    r"""
    (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<matchop>=~|!~|!=|==|=|>=|<=|>|<)
  | (?P<punct>[(){},+\-*/%^@])
  | (?P<space>\s+)
    """,
    re.VERBOSE,
)
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}
_AGGREGATIONS = {"sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
                 "count_values", "group"}
_FUNCTIONS = _AGGREGATIONS | {
    "abs", "absent", "absent_over_time", "increase", "rate", "irate", "delta", "idelta", "deriv",
    "changes", "resets", "time", "vector", "scalar", "clamp_min", "clamp_max", "histogram_quantile",
    "max_over_time", "min_over_time", "avg_over_time", "sum_over_time", "count_over_time", "last_over_time",
    "label_replace", "label_join", "timestamp", "round", "ceil", "floor", "sort", "sort_desc",
    "predict_linear", "present_over_time",
}


def _tokens(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise ValueError(f"cannot tokenize {expr[pos:]!r}")
        pos = m.end()
        if m.lastgroup != "space":
            out.append((m.lastgroup, m.group()))
    return out


def promql_refs(expr: str) -> tuple[dict[str, set[str]], set[str]]:
    """(metric name -> label names in its matchers, label names in by/on/... lists).

    A small PromQL reader, enough for alert expressions: it raises on what it
    does not understand (an unknown function, a selector without a name).
    """
    toks = _tokens(expr)
    metrics: dict[str, set[str]] = {}
    grouping: set[str] = set()
    i = 0

    def nxt(j: int) -> tuple[str, str] | None:
        return toks[j] if j < len(toks) else None

    while i < len(toks):
        kind, text = toks[i]
        if kind == "ident" and text in _GROUPING:
            if nxt(i + 1) == ("punct", "("):
                j = i + 2
                while toks[j] != ("punct", ")"):
                    if toks[j][0] == "ident":
                        grouping.add(toks[j][1])
                    j += 1
                i = j + 1
                continue
            i += 1
            continue
        if kind == "ident" and text.lower() in _KEYWORDS:
            i += 1
            continue
        if kind == "ident" and (nxt(i + 1) == ("punct", "(") or (
                text in _AGGREGATIONS and nxt(i + 1) in (("ident", "by"), ("ident", "without")))):
            if text not in _FUNCTIONS:
                raise ValueError(f"unknown PromQL function {text!r}")
            i += 1
            continue
        if kind == "ident":
            matchers = metrics.setdefault(text, set())
            i += 1
            if nxt(i) == ("punct", "{"):
                j = i + 1
                while toks[j] != ("punct", "}"):
                    if toks[j][0] == "ident" and toks[j + 1][0] == "matchop":
                        matchers.add(toks[j][1])
                    j += 1
                i = j + 1
            continue
        if (kind, text) == ("punct", "{"):
            raise ValueError("selector without a metric name")
        i += 1
    return metrics, grouping


def test_promql_reader_itself():
    metrics, grouping = promql_refs(
        'sum by (zone) (rate(foo_total{zone="a", result=~"x|y"}[5m])) / on (zone) group_left bar > 0.9 '
        "and ignoring(instance) baz unless absent(qux{job!=\"j\"} == 1)")
    assert metrics == {"foo_total": {"zone", "result"}, "bar": set(), "baz": set(), "qux": {"job"}}
    assert grouping == {"zone", "instance"}
    with pytest.raises(ValueError):
        promql_refs("frobnicate(foo)")


@pytest.mark.parametrize("alert", sorted(ALL_ALERTS))
def test_alert_reads_only_exported_metrics_and_labels(alert):
    rule = rules()[alert]
    names = {**exported(), **PROMETHEUS_SERIES}
    metrics, grouping = promql_refs(rule["expr"])
    assert metrics, f"{alert}: no metric in {rule['expr']!r}"
    available: set[str] = set()
    for metric, matchers in metrics.items():
        assert metric in names, f"{alert}: {metric} is not exported by controller.metrics.Metrics"
        labels = names[metric] | SCRAPE_LABELS
        assert matchers <= labels, f"{alert}: {metric} has no label(s) {sorted(matchers - labels)}"
        available |= labels
    assert grouping <= available, f"{alert}: grouping on unknown label(s) {sorted(grouping - available)}"
    # labels the annotations print must exist somewhere in what the expression reads
    used = set()
    for text in rule["annotations"].values():
        used |= set(re.findall(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)", text))
    assert used <= available, f"{alert}: annotations use unknown label(s) {sorted(used - available)}"


def test_reader_catches_a_misspelt_metric():
    metrics, _ = promql_refs("max by (zone) (cozy_proxmox_zone_vlan_free) == 0")
    assert not set(metrics) <= set(exported())


# ---------------------------------------------------------------------- promtool

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian package: prometheus)")

SCRAPE = {"job": "proxmox-network-controller-metrics", "instance": "10.244.0.7:8080"}
MINUTES = 180


@needs_promtool
def test_promtool_check_rules(tmp_path):
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(yaml.safe_dump(load_rule()["spec"], sort_keys=False))
    res = subprocess.run([PROMTOOL, "check", "rules", str(rule_file)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(ALL_ALERTS)} rules found" in res.stdout


def _num(v: float) -> str:
    if math.isinf(v):
        return "Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _selector(name: str, labels: dict[str, str]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"')

    inner = ",".join(f'{k}="{esc(v)}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def input_series(m: Metrics, *, up: int, grow: dict[str, float] | None = None) -> list[dict[str, str]]:
    """The scrape of ``m`` held for MINUTES minutes (counters in ``grow`` rise per minute)."""
    grow = grow or {}
    out = [{"series": _selector("up", SCRAPE), "values": f"{up}+0x{MINUTES}"}]
    for fam in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in fam.samples:
            step = grow.get(s.name, 0.0)
            out.append({
                "series": _selector(s.name, {**s.labels, **SCRAPE}),
                "values": f"{_num(s.value)}+{_num(step)}x{MINUTES}",
            })
    return out


def _go_value(v: float) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if float(v).is_integer():
        return str(int(v))
    return repr(float(v))


def _humanize_duration(v: float) -> str:
    if math.isinf(v) or math.isnan(v):
        return _go_value(v)
    if v == 0:
        return "0s"
    assert v >= 1, "sub-second durations are not needed here"
    secs = int(v)
    days, hours, minutes, seconds = secs // 86400, secs // 3600 % 24, secs // 60 % 60, secs % 60
    if days:
        return f"{days}d {hours}h {minutes}m {seconds}s"
    if hours:
        return f"{hours}h {minutes}m {seconds}s"
    if minutes:
        return f"{minutes}m {seconds}s"
    return f"{v:.4g}s"


def render(template: str, labels: dict[str, str], value: float) -> str:
    """The few Go-template forms the rule uses, rendered as Prometheus does."""

    def one(m: re.Match[str]) -> str:
        expr = m.group(1).strip()
        arg, _, fn = (part.strip() for part in expr.partition("|"))
        if arg.startswith("$labels."):
            out = labels.get(arg[len("$labels."):], "")
        elif arg == "$value":
            out = value
        else:
            raise ValueError(f"unsupported template {expr!r}")
        if fn == "":
            return out if isinstance(out, str) else _go_value(out)
        if fn == "humanizePercentage":
            return f"{out * 100:.4g}%"
        if fn == "humanizeDuration":
            return _humanize_duration(out)
        raise ValueError(f"unsupported template function {fn!r}")

    return re.sub(r"\{\{(.*?)\}\}", one, template)


def expected(alert: str, firing: list[tuple[dict[str, str], float]]) -> list[dict[str, Any]]:
    rule = rules()[alert]
    return [
        {
            "exp_labels": {**labels, **rule["labels"]},
            "exp_annotations": {k: render(v, labels, value) for k, v in rule["annotations"].items()},
        }
        for labels, value in firing
    ]


def healthy_metrics() -> Metrics:
    m = Metrics()
    m.set_leader(True)
    m.set_zone("zone-a", 100, 2, 98, 2, 0)
    m.set_network("tenant-a", "net-1", "zone-a", 101, True, {"total": 100, "used": 50, "free": 50}, False)
    m.set_network("tenant-a", "net-2", "zone-a", 102, True, {"total": 0, "used": 0, "free": 0}, False)
    for name in ("net-1", "net-2"):
        m.set_gateway_chassis("tenant-a", name, 3)  # three trunk nodes: the gateway fails over (issue 25)
        m.set_gateway_ready("tenant-a", name, True)
    m.gateway_nb_error()  # an old error: the counter is not rising
    m.vlan_allocation("zone-a", "allocated")
    m.observe_reconcile(0.05)
    m.register_informers({r: FakeInformer(30.0) for r in ("subnets", "vlans", "ipaddresses")})
    return m


def troubled_metrics() -> Metrics:
    m = Metrics()
    m.set_leader(False)
    m.set_zone("zone-a", 100, 95, 5, 7, 2)
    m.set_zone("zone-full", 10, 10, 0, 10, 0)
    # not Ready, not deleting: alerts
    m.set_network("tenant-a", "net-bad", "zone-a", None, False, None, False)
    # Ready
    m.set_network("tenant-a", "net-ok", "zone-a", 101, True, {"total": 100, "used": 50, "free": 50}, False)
    # deleting for a long time, not Ready, gateway down: only StuckDeleting
    m.set_network("tenant-b", "net-gone", "zone-a", 103, False, {"total": 100, "used": 3, "free": 97}, False)
    m.set_deleting("tenant-b", "net-gone", True)
    m.set_gateway_ready("tenant-b", "net-gone", False)
    # gateway down
    m.set_network("tenant-a", "net-gw", "zone-a", 104, True, None, False)
    m.set_gateway_chassis("tenant-a", "net-gw", 0)
    m.set_gateway_ready("tenant-a", "net-gw", False)
    # a gateway of two chassis (up): no failover
    m.set_network("tenant-a", "net-two", "zone-a", 107, True, None, False)
    m.set_gateway_chassis("tenant-a", "net-two", 2)
    m.set_gateway_ready("tenant-a", "net-two", True)
    # the group is written, nothing serves it in the SB (a two-chassis outage)
    m.set_network("tenant-a", "net-unbound", "zone-a", 108, False, None, False)
    m.set_gateway_chassis("tenant-a", "net-unbound", 2)
    m.set_gateway_ready("tenant-a", "net-unbound", False)
    m.set_gateway_serving("tenant-a", "net-unbound", False, "")
    # deleting with nothing bound: no Unbound alert
    m.set_gateway_serving("tenant-b", "net-gone", False, "")
    # pool 95 % used
    m.set_network("tenant-a", "net-full", "zone-a", 105, True, {"total": 100, "used": 95, "free": 5}, False)
    m.set_network("tenant-a", "net-empty", "zone-a", 106, True, {"total": 0, "used": 0, "free": 0}, False)
    m.register_informers({
        "subnets": FakeInformer(math.inf),  # never listed
        "vlans": FakeInformer(1500.0),  # watch hung for 25 min
        "ipaddresses": FakeInformer(30.0),
    })
    return m


ALL_QUIET = [{"eval_time": t, "alertname": a, "exp_alerts": []}
             for t in ("16m", "61m", "2h") for a in sorted(ALL_ALERTS)]


def troubled_tests() -> list[dict[str, Any]]:
    net = {"namespace": "tenant-a"}
    s = SCRAPE
    cases: list[tuple[str, str, list[tuple[dict[str, str], float]]]] = [
        ("14m", "ProxmoxNetworkNotReady", []),  # still pending
        ("16m", "ProxmoxNetworkNotReady", [({**net, "network": "net-bad", "zone": "zone-a"}, 0),
                                           ({**net, "network": "net-unbound", "zone": "zone-a"}, 0)]),
        ("9m", "ProxmoxNetworkGatewayNotReady", []),
        ("11m", "ProxmoxNetworkGatewayNotReady", [({**net, "network": "net-gw"}, 0), ({**net, "network": "net-unbound"}, 0)]),
        ("0m", "ProxmoxNetworkGatewayUnbound", []),
        ("2m", "ProxmoxNetworkGatewayUnbound", [({**net, "network": "net-unbound"}, 0)]),
        ("25m", "ProxmoxNetworkGatewayNBErrors", [({}, 10)]),
        ("11m", "ProxmoxNetworkPoolNearlyFull", [({**net, "network": "net-full"}, 0.95)]),
        ("6m", "ProxmoxNetworkZoneExhausted", [({"zone": "zone-full"}, 0)]),
        ("29m", "ProxmoxNetworkOrphanedVLANs", []),
        ("31m", "ProxmoxNetworkOrphanedVLANs", [({"zone": "zone-a"}, 2)]),
        ("59m", "ProxmoxNetworkStuckDeleting", []),
        ("61m", "ProxmoxNetworkStuckDeleting", [({"namespace": "tenant-b", "network": "net-gone", **s}, 1)]),
        ("11m", "ProxmoxNetworkControllerDown", [({}, 1)]),
        ("6m", "ProxmoxNetworkInformerStale", [
            ({"resource": "subnets", **s}, math.inf), ({"resource": "vlans", **s}, 1500.0)]),
        ("29m", "ProxmoxNetworkGatewayWithoutFailover", []),
        ("31m", "ProxmoxNetworkGatewayWithoutFailover", [({**net, "network": "net-two"}, 2)]),
        ("4m", "ProxmoxNetworkControllerNoLeader", []),
        ("6m", "ProxmoxNetworkControllerNoLeader", [({}, 0)]),
    ]
    assert {a for _t, a, firing in cases if firing} == set(ALL_ALERTS)
    return [{"eval_time": t, "alertname": a, "exp_alerts": expected(a, firing)} for t, a, firing in cases]


@needs_promtool
def test_promtool_unit_tests_on_our_exposition(tmp_path):
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(yaml.safe_dump(load_rule()["spec"], sort_keys=False))
    # the NB error counter rises by one per minute: increase over 10m is 10
    tests = {
        "rule_files": [str(rule_file)],
        "evaluation_interval": "1m",
        "tests": [
            {"name": "healthy", "interval": "1m",
             "input_series": input_series(healthy_metrics(), up=1), "alert_rule_test": ALL_QUIET},
            {"name": "troubled", "interval": "1m",
             "input_series": input_series(troubled_metrics(), up=0,
                                          grow={"cozy_proxmox_gateway_nb_errors_total": 1.0}),
             "alert_rule_test": troubled_tests()},
        ],
    }
    test_file = tmp_path / "tests.yaml"
    test_file.write_text(yaml.safe_dump(tests, sort_keys=False, width=10_000))
    res = subprocess.run([PROMTOOL, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout
