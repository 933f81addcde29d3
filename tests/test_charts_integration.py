"""The Helm charts of charts/ on the real API server (issue 16 parts 1-3).

* ``helm lint --strict`` of both charts (helm v3.22.0 from hack/build-helm.sh);
* one source of truth: the charts rendered with their default values are the objects of the
  kustomization of manifests/ (the PrometheusRule: manifests/monitoring/), object for
  object, and the verbatim copies of hack/sync-charts.py are current;
* ``helm template`` for the defaults and every toggle, each rendering applied server-side
  (``--dry-run=server``) to the session bed, and every Deployment's args parsed by the
  controller's own parser (controller/main.py ``build_parser``);
* bad values refused by values.schema.json at ``helm template`` and ``helm install`` with the
  field and the reason in the message;
* a chart install, rendered and applied as the admin, after which the controller, started
  with the installed Deployment's args and a token of the chart's ServiceAccount (so with
  exactly the chart's RBAC), brings networks of a zone rendered from the values to Ready,
  their gateway over TLS with the Secret the chart's Role grants;
* the kubectl plugin: ``kubectl proxmox-network doctor`` prints what
  ``proxmox-network-controller doctor`` prints.
"""

from __future__ import annotations

import copy
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from controller.main import build_parser
from hack.tools.audit import read_events
from hack.tools.controller_process import ControllerProcess
from hack.tools.objects import Admin, reason, unique, unique_prefix, wait_condition
from hack.tools.wait import wait_for
from tests.support.ovsdb import NBServer
from tests.support.pki import CA, kube_ovn_secret
from tests.test_gateway_integration import Router, Trunk

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
CHARTS = ROOT / "charts"
CRDS_CHART = CHARTS / "proxmox-network-crds"
CHART = CHARTS / "proxmox-network"
MANIFESTS = ROOT / "manifests"
NAMESPACE = "proxmox-network-system"
PROMETHEUSRULE_CRD = ROOT / "tests" / "fixtures" / "monitoring" / "monitoring.coreos.com_prometheusrules.yaml"
PODMONITOR_CRD = ROOT / "tests" / "fixtures" / "monitoring" / "monitoring.coreos.com_podmonitors.yaml"
# What Helm adds and the comparison with manifests/ drops: the release labels of
# templates/_helpers.tpl and the CRDs' keep annotation. Nothing else is normalised.
RELEASE_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance")
RELEASE_ANNOTATIONS = ("helm.sh/resource-policy",)


# -- helm ---------------------------------------------------------------------------------------

def build_helm() -> str:
    """hack/build-helm.sh (cached), the path of its helm."""
    r = subprocess.run([str(ROOT / "hack" / "build-helm.sh")], capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, f"hack/build-helm.sh failed:\n{r.stderr}"
    path = Path(r.stdout.strip()) / "helm"
    assert os.access(path, os.X_OK), path
    return str(path)


@pytest.fixture(scope="module")
def helm() -> str:
    return build_helm()


def as_list(objs: list[dict]) -> str:
    """``objs`` as one JSON ``List`` for ``kubectl apply -f -``: JSON, not YAML, because
    PyYAML writes a string such as ``023e93`` unquoted and kubectl's YAML reads it back as
    the number 2.3e94 (a random label value broke a run that way)."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})


def helm_apply(bed, objs: list[dict]) -> None:
    """``objs`` applied to ``bed`` server-side as Helm 3.x applies them (field manager ``helm``)."""
    r = bed.run_kubectl("apply", "--server-side", "--field-manager=helm", "-f", "-", input=as_list(objs).encode(),
                        check=False)
    assert r.returncode == 0, r.stderr.decode()


def run_helm(helm: str, *args: str, check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    # A private HOME-less config: no repositories, no plugins, no cache of the caller's.
    env = {**(env or os.environ), "HELM_CONFIG_HOME": "/nonexistent-helm-config",
           "HELM_CACHE_HOME": "/nonexistent-helm-cache", "HELM_DATA_HOME": "/nonexistent-helm-data"}
    r = subprocess.run([helm, *args], capture_output=True, text=True, env=env, timeout=60)
    if check:
        assert r.returncode == 0, f"helm {' '.join(args)} failed ({r.returncode}):\n{r.stderr}"
    return r


def set_args(values: dict | None) -> list[str]:
    """``--set-json`` for every top-level value (whole subtrees, so lists replace lists)."""
    out: list[str] = []
    for k, v in (values or {}).items():
        out += ["--set-json", f"{k}={json.dumps(v)}"]
    return out


def render(helm: str, chart: Path, values: dict | None = None, namespace: str = NAMESPACE,
           release: str = "proxmox-network", api_versions: tuple[str, ...] = ()) -> list[dict]:
    """``helm template`` of ``chart``; ``api_versions`` as ``--api-versions`` (what
    ``.Capabilities`` offers the templates)."""
    apis = [a for v in api_versions for a in ("--api-versions", v)]
    out = run_helm(helm, "template", release, str(chart), "--namespace", namespace, *apis, *set_args(values)).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def key(obj: dict) -> tuple[str, str, str, str]:
    m = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], m.get("namespace", ""), m["name"])


def by_key(objs: list[dict]) -> dict[tuple, dict]:
    out: dict[tuple, dict] = {}
    for o in objs:
        assert key(o) not in out, f"rendered twice: {key(o)}"
        out[key(o)] = o
    return out


def normalised(obj: dict) -> dict:
    o = copy.deepcopy(obj)
    m = o["metadata"]
    for field, drop in (("labels", RELEASE_LABELS), ("annotations", RELEASE_ANNOTATIONS)):
        for k in drop:
            (m.get(field) or {}).pop(k, None)
        if field in m and not m[field]:
            del m[field]
    return o


def kinds(objs: list[dict]) -> list[str]:
    return sorted(o["kind"] for o in objs)


def find(objs: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def deployment_args(objs: list[dict]) -> list[str]:
    (dep,) = find(objs, "Deployment")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return c["args"]


def parsed(objs: list[dict]):
    """The Deployment's args through the controller's own parser: an unknown flag or a bad
    value exits 2 here as it would in the pod. Each flag is one of the parser's own names
    verbatim (argparse would also take an abbreviation)."""
    parser = build_parser()
    flags = {o for a in parser._actions for o in a.option_strings}
    args = deployment_args(objs)
    assert [a for a in args if a.split("=", 1)[0] not in flags] == []
    return parser.parse_args(args)


def kustomization_objects(kubectl) -> list[dict]:
    """The objects of manifests/kustomization.yaml. The kustomization only lists resources
    (asserted), so its objects are those files' documents; PyYAML reads them as kubectl
    apply -f and Helm do (kustomize's own YAML writer adds a blank line inside folded CEL
    strings that have more-indented lines, which changes no expression). kubectl kustomize
    must list the same objects."""
    kz = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    assert set(kz) == {"apiVersion", "kind", "resources"}, f"the comparison reads resources only: {sorted(kz)}"
    objs = [d for f in kz["resources"] for d in yaml.safe_load_all((MANIFESTS / f).read_text()) if d]
    built = [d for d in yaml.safe_load_all(kubectl("kustomize", str(MANIFESTS))) if d]
    assert sorted(map(key, built)) == sorted(map(key, objs))
    return objs


def drift(chart_objs: list[dict], manifest_objs: list[dict]) -> list[str]:
    """Differences between a chart rendering and manifests/, one line each (empty: none)."""
    h = {k: normalised(o) for k, o in by_key(chart_objs).items()}
    m = by_key(manifest_objs)
    out = [f"only in the chart: {k}" for k in sorted(set(h) - set(m))]
    out += [f"only in manifests/: {k}" for k in sorted(set(m) - set(h))]
    for k in sorted(set(h) & set(m)):
        if h[k] != m[k]:
            out.append(f"differs: {k}: {first_difference(m[k], h[k])}")
    return out


def first_difference(a, b, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return first_difference(a.get(k), b.get(k), f"{path}.{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return first_difference(x, y, f"{path}[{i}]")
    return f"{path or '.'}: manifests/ {a!r} != chart {b!r}"


# -- the bed ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bed(cluster, kubectl):
    """The namespaces a rendering names and the PrometheusRule and PodMonitor CRDs, on the session bed."""
    for ns in (NAMESPACE, "cozy-kubeovn"):
        kubectl("create", "namespace", ns, check=False)
    for crd in (PROMETHEUSRULE_CRD, PODMONITOR_CRD):
        kubectl("apply", "--server-side", "-f", str(crd))
    kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/prometheusrules.monitoring.coreos.com",
            "crd/podmonitors.monitoring.coreos.com")
    return cluster


def dry_run_apply(kubectl, objs: list[dict]) -> str:
    # --force-conflicts: the bed applied manifests/ with a manager of its own (CRDs: atomic
    # lists the server defaults into); what counts here is the server's validation.
    return kubectl("apply", "--server-side", "--force-conflicts", "--dry-run=server", "--field-manager=helm-chart-test", "-f", "-",
                   input=as_list(objs))


# =============================================================================== lint, drift

def test_helm_lint_is_clean(helm):
    for chart in (CRDS_CHART, CHART):
        r = run_helm(helm, "lint", "--strict", str(chart))
        assert "1 chart(s) linted, 0 chart(s) failed" in r.stdout, r.stdout
        assert "[WARNING]" not in r.stdout and "[ERROR]" not in r.stdout, r.stdout
    # Every toggle lints too (a template that only breaks with a value set shows here).
    r = run_helm(helm, "lint", "--strict", str(CHART), *set_args({
        "monitoring": {"enabled": True, "podMonitor": {"enabled": True}}, "dashboard": {"enabled": True},
        "gateway": {"manage": False}, "providerNetwork": {"create": True}, "transit": {"enabled": True, "mtu": 1400},
        "zones": {"z": {"bridge": "vmbr1", "providerNetwork": "pn", "vlanRanges": ["1-2"]}}}))
    assert "0 chart(s) failed" in r.stdout, r.stdout


def test_copies_of_manifests_in_the_charts_are_current():
    r = subprocess.run([sys.executable, str(ROOT / "hack" / "sync-charts.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_default_rendering_is_the_kustomization(helm, kubectl):
    """One source of truth: both charts with their default values render exactly the objects
    of manifests/kustomization.yaml, but the Namespace (Helm installs into an existing or
    --create-namespace one); with monitoring on, the PrometheusRule is that of
    manifests/monitoring/."""
    manifests = kustomization_objects(kubectl)
    assert [o["metadata"]["name"] for o in manifests if o["kind"] == "Namespace"] == [NAMESPACE]
    manifests = [o for o in manifests if o["kind"] != "Namespace"]
    chart = render(helm, CRDS_CHART) + render(helm, CHART)
    assert drift(chart, manifests) == []
    assert len(chart) == len(manifests) == 25

    rule = [d for d in yaml.safe_load_all((MANIFESTS / "monitoring" / "prometheusrule.yaml").read_text()) if d]
    with_monitoring = render(helm, CHART, {"monitoring": {"enabled": True}})
    assert drift(find(with_monitoring, "PrometheusRule"), rule) == []
    assert by_key([o for o in with_monitoring if o["kind"] != "PrometheusRule"]) == by_key(render(helm, CHART))


def test_the_drift_check_names_a_one_field_change(helm, kubectl):
    """The comparison above is not vacuous: one field changed on either side is reported with
    its object and path (proven on the real files once by hand too, see docs/testing.md)."""
    manifests = [o for o in kustomization_objects(kubectl) if o["kind"] != "Namespace"]
    chart = render(helm, CRDS_CHART) + render(helm, CHART)
    changed = copy.deepcopy(manifests)
    (dep,) = find(changed, "Deployment")
    dep["spec"]["template"]["spec"]["containers"][0]["args"][2] = "--health-probe-bind-address=:9091"
    assert drift(chart, changed) == [
        "differs: ('apps/v1', 'Deployment', 'proxmox-network-system', 'proxmox-network-controller'): "
        ".spec.template.spec.containers[0].args[2]: manifests/ '--health-probe-bind-address=:9091' "
        "!= chart '--health-probe-bind-address=:8081'"]
    changed = copy.deepcopy(chart)
    (role,) = find(changed, "ClusterRole", "proxmox-network-controller")
    role["rules"][0]["verbs"].append("delete")
    [line] = drift(changed, manifests)
    assert line.startswith("differs: ('rbac.authorization.k8s.io/v1', 'ClusterRole', '', 'proxmox-network-controller'): "
                           ".rules[0].verbs: "), line


# =============================================================================== renderings

def test_default_rendering_applies_and_its_args_are_the_controllers_flags(helm, bed, kubectl):
    crds, objs = render(helm, CRDS_CHART), render(helm, CHART)
    assert kinds(crds) == ["CustomResourceDefinition"] * 2
    assert all(c["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"} for c in crds)
    assert kinds(objs) == sorted(["ServiceAccount", "ClusterRole", "ClusterRole", "ClusterRoleBinding", "Role", "Role",
                                  "RoleBinding", "RoleBinding", "Deployment", "Service", "PodDisruptionBudget"]
                                 + ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 6)
    a = parsed(objs)
    assert (a.leader_elect, a.manage_gateway_chassis, a.ovn_nb_address, a.ovn_tls_secret, a.ovn_tls_dir) == (
        True, True, "ssl:ovn-nb.cozy-kubeovn.svc:6641", ("cozy-kubeovn", "kube-ovn-tls"), "/run/ovn-tls")
    # product-decisions.md §10: the SB is read by default (Kube-OVN's ovn-sb Service); no failback.
    assert (a.ovn_sb_address, a.gateway_failback) == ("ssl:ovn-sb.cozy-kubeovn.svc:6642", False)
    assert a.overlay_mtu == 1400  # §10: Kube-OVN's default pod MTU on Geneve
    assert (a.workers, a.resync_period, a.subnet_prune_timeout, a.log_level, a.log_format) == (4, 600.0, 600.0, "info", "json")
    assert (a.metrics_bind_address, a.health_probe_bind_address, a.metrics_secure) == (":8080", ":8081", False)
    dry_run_apply(kubectl, crds)
    dry_run_apply(kubectl, objs)


TOGGLES = {
    "gateway-off": {"gateway": {"manage": False}},
    "nb-over-tcp": {"ovn": {"nbAddress": "tcp:10.0.0.1:6641,tcp:10.0.0.2:6641", "sbAddress": "tcp:10.0.0.1:6642"}},
    "sb-unread-failback-on": {"ovn": {"sbAddress": ""}, "gateway": {"failback": True}},
    "overlay-mtu-jumbo": {"gateway": {"overlayMtu": 8900}},
    "pod-knobs": {"podAnnotations": {"example.com/owner": "net-team"}, "priorityClassName": "system-cluster-critical",
                  "imagePullSecrets": [{"name": "regcred"}], "nodeSelector": {"node-role.kubernetes.io/infra": ""},
                  "tolerations": [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}],
                  "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
                  "podDisruptionBudget": {"enabled": False}},
    "sizing-small": {"sizing": "small"},
    "sizing-large": {"sizing": "large"},
    "overlay-mtu-off": {"gateway": {"overlayMtu": 0}},
    "tls-elsewhere": {"ovn": {"nbAddress": "ssl:[fd00::1]:6641", "tlsSecret": "kube-system/ovn-certs", "tlsDir": "/tmp/tls"}},
    "admission-off": {"admission": {"enabled": False}},
    "admission-exemptions": {"admission": {"enabled": True, "exemptNamespaces": ["kube-system", "tenant-root"],
                                           "exemptNamespacePrefixes": ["cozy-", "infra-"]}},
    "admission-no-exemptions": {"admission": {"enabled": True, "exemptNamespaces": [], "exemptNamespacePrefixes": []}},
    "monitoring-on": {"monitoring": {"enabled": True, "ruleLabels": {"release": "prometheus"}}},
    "podmonitor-on": {"monitoring": {"podMonitor": {"enabled": True, "labels": {"release": "prometheus"},
                                                     "interval": "15s"}}},
    "dashboard-on": {"dashboard": {"enabled": True, "annotations": {"grafana_folder": "Cozystack"}}},
    "single-replica-no-election": {"replicas": 1, "leaderElection": {"enabled": False}},
    "election-elsewhere": {"replicas": 3, "leaderElection": {"enabled": True, "namespace": "kube-system"}},
    "tuning": {"image": {"repository": "registry.example/pnc", "tag": "1.2.3", "pullPolicy": "Always"},
               "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}}, "workers": 8, "resyncPeriod": "1h30m",
               "subnetPruneTimeout": "90s", "logLevel": "debug", "logFormat": "console",
               "metrics": {"port": 9090}, "health": {"port": 9091}},
    "zones": {"zones": {"tenant-a": {"bridge": "vmbr70", "providerNetwork": "pxtenant", "vlanRanges": ["101-199"],
                                     "reservedVLANs": [150], "mtu": 1500},
                        "tenant-b": {"bridge": "vmbr71", "providerNetwork": "pxtenant", "vlanRanges": ["200-299"],
                                     "namespaceSelector": {"matchLabels": {"tenant": "b"}}}}},
    "renamed": {"fullnameOverride": "pnc-second"},
    "provider-network-and-transit": {
        "providerNetwork": {"create": True, "name": "pxtrunk", "defaultInterface": "ens20",
                            "customInterfaces": [{"interface": "eth3", "nodes": ["node-b"]}], "excludeNodes": ["node-c"],
                            "nodeSelector": {"matchLabels": {"proxmox-trunk": "true"}}},
        "transit": {"enabled": True, "name": "transit-a", "vlan": 120, "cidr": "10.71.0.0/24", "gateway": "10.71.0.1",
                    "mtu": 1400, "excludeIps": ["10.71.0.2..10.71.0.9"]},
        "zones": {"tenants": {"bridge": "vmbr70", "vlanRanges": ["101-199"]},
                  "own-egress": {"bridge": "vmbr71", "providerNetwork": "other", "vlanRanges": ["200-299"],
                                 "egress": {"externalSubnet": "elsewhere", "gatewayNamespace": "gw"}}}},
}


@pytest.mark.parametrize("toggle", sorted(TOGGLES))
def test_toggle_renders_what_it_says_and_applies(helm, bed, kubectl, toggle):
    values = TOGGLES[toggle]
    objs = render(helm, CHART, values)
    default = render(helm, CHART)
    a = parsed(objs)
    got = by_key(objs)
    tls_role = [o for o in objs if o["kind"] in ("Role", "RoleBinding") and o["metadata"]["name"].endswith("-ovn-tls")]
    if toggle == "gateway-off":
        assert a.manage_gateway_chassis is False
        assert not [x for x in deployment_args(objs) if x.startswith("--ovn-")]
        assert tls_role == []
        assert "volumes" not in find(objs, "Deployment")[0]["spec"]["template"]["spec"]
    elif toggle == "pod-knobs":
        pod = find(objs, "Deployment")[0]["spec"]["template"]
        assert pod["metadata"]["annotations"] == {"example.com/owner": "net-team"}
        spec = pod["spec"]
        assert (spec["priorityClassName"], spec["imagePullSecrets"], spec["nodeSelector"]) == (
            "system-cluster-critical", [{"name": "regcred"}], {"node-role.kubernetes.io/infra": ""})
        assert spec["tolerations"] == [
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "infra", "operator": "Exists", "effect": "NoSchedule"}]
        assert spec["containers"][0]["env"][-1] == {"name": "HTTPS_PROXY", "value": "http://proxy:3128"}
        assert not find(objs, "PodDisruptionBudget")
    elif toggle.startswith("sizing-"):
        (c,) = find(objs, "Deployment")[0]["spec"]["template"]["spec"]["containers"]
        assert c["resources"] == {"small": {"requests": {"cpu": "10m", "memory": "128Mi"},
                                            "limits": {"cpu": "500m", "memory": "512Mi"}},
                                  "large": {"requests": {"cpu": "10m", "memory": "512Mi"},
                                            "limits": {"cpu": "500m", "memory": "1Gi"}}}[toggle[len("sizing-"):]]
    elif toggle.startswith("overlay-mtu-"):
        assert a.overlay_mtu == {"overlay-mtu-jumbo": 8900, "overlay-mtu-off": 0}[toggle]
    elif toggle == "sb-unread-failback-on":
        assert (a.ovn_sb_address, a.gateway_failback) == ("", True)
        assert not [x for x in deployment_args(objs) if x.startswith("--ovn-sb-address")]
    elif toggle == "nb-over-tcp":
        assert (a.ovn_nb_address, a.ovn_sb_address) == ("tcp:10.0.0.1:6641,tcp:10.0.0.2:6641", "tcp:10.0.0.1:6642")
        assert tls_role == []  # the Secret is read for ssl: addresses only
        assert not [x for x in deployment_args(objs) if x.startswith("--ovn-tls")]
    elif toggle == "tls-elsewhere":
        assert (a.ovn_nb_address, a.ovn_tls_secret, a.ovn_tls_dir) == ("ssl:[fd00::1]:6641", ("kube-system", "ovn-certs"), "/tmp/tls")
        assert {(o["kind"], o["metadata"]["namespace"]) for o in tls_role} == {("Role", "kube-system"), ("RoleBinding", "kube-system")}
        (role,) = find(tls_role, "Role")
        assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["ovn-certs"], "verbs": ["get"]}]
        (c,) = find(objs, "Deployment")[0]["spec"]["template"]["spec"]["containers"]
        assert c["volumeMounts"] == [{"name": "ovn-tls", "mountPath": "/tmp/tls"}]
    elif toggle == "admission-off":
        assert not [o for o in objs if o["kind"].startswith("ValidatingAdmissionPolicy")]
        assert len(objs) == len(default) - 12
    elif toggle.startswith("admission-"):
        pols = {o["metadata"]["name"]: o for o in find(objs, "ValidatingAdmissionPolicy")}
        conds = {n: {c["name"]: c["expression"] for c in p["spec"].get("matchConditions", [])} for n, p in pols.items()}
        for name in ("proxmox-network-vm-attachments", "proxmox-network-pod-attachments", "proxmox-network-pod-addresses"):
            if toggle == "admission-exemptions":
                assert conds[name]["not-a-platform-namespace"] == (
                    "!request.namespace.startsWith('cozy-') && !request.namespace.startsWith('infra-')"
                    " && request.namespace != 'kube-system' && request.namespace != 'tenant-root'")
            else:
                assert "not-a-platform-namespace" not in conds[name]
            if name != "proxmox-network-pod-addresses":  # CREATE only: nothing is being deleted
                assert "not-being-deleted" in conds[name]
        ip = conds["proxmox-network-ip-addresses"]
        if toggle == "admission-exemptions":  # a cluster-scoped Kube-OVN IP: its spec.namespace
            ns = "object.?spec.?namespace.orValue('')"
            assert ip["not-of-a-platform-namespace"] == (
                f"!{ns}.startsWith('cozy-') && !{ns}.startsWith('infra-') && {ns} != 'kube-system' && {ns} != 'tenant-root'")
        else:
            assert "not-of-a-platform-namespace" not in ip
        assert "not-being-deleted" in ip
        assert conds["proxmox-network-machine-binding"] == {"not-being-deleted": "!has(object.metadata.deletionTimestamp)"}
    elif toggle == "monitoring-on":
        (rule,) = find(objs, "PrometheusRule")
        assert rule["metadata"]["namespace"] == NAMESPACE and rule["metadata"]["labels"]["release"] == "prometheus"
        assert "{{ $labels.namespace }}" in json.dumps(rule["spec"])  # the alert templates are not Helm's
    elif toggle == "podmonitor-on":
        # Readiness = serving: every replica is behind the Service, so each pod is scraped.
        (pm,) = find(objs, "PodMonitor")
        assert pm["metadata"]["labels"]["release"] == "prometheus"
        assert pm["spec"] == {"selector": {"matchLabels": {"app": "proxmox-network-controller"}},
                              "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s",
                                                       "honorLabels": True,  # docs/metrics.md: required
                                                       # the job ProxmoxNetworkControllerDown selects
                                                       "relabelings": [{"action": "replace", "targetLabel": "job",
                                                                        "replacement": "proxmox-network-controller"}]}]}
        assert len(objs) == len(default) + 1
    elif toggle == "dashboard-on":
        files = sorted((CHART / "dashboards").glob("*.json"))
        cms = find(objs, "ConfigMap")
        if not files:
            assert cms == []
        else:
            (cm,) = cms
            assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
            assert cm["metadata"]["annotations"] == {"grafana_folder": "Cozystack"}
            assert cm["data"] == {f.name: f.read_text() for f in files}
            for f in files:
                json.loads(cm["data"][f.name])
    elif toggle == "single-replica-no-election":
        assert a.leader_elect is False
        assert find(objs, "Deployment")[0]["spec"]["replicas"] == 1
        assert not find(objs, "Role", "proxmox-network-controller-leader-election")
    elif toggle == "election-elsewhere":
        assert a.leader_election_namespace == "kube-system"
        dep = find(objs, "Deployment")[0]
        assert dep["spec"]["replicas"] == 3 and dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
        assert find(objs, "Role", "proxmox-network-controller-leader-election")[0]["metadata"]["namespace"] == "kube-system"
    elif toggle == "tuning":
        (c,) = find(objs, "Deployment")[0]["spec"]["template"]["spec"]["containers"]
        assert (c["image"], c["imagePullPolicy"]) == ("registry.example/pnc:1.2.3", "Always")
        assert c["resources"] == {"requests": {"cpu": "50m", "memory": "128Mi"}}  # replaces the sizing entirely
        assert (a.workers, a.resync_period, a.subnet_prune_timeout, a.log_level, a.log_format) == (8, 5400.0, 90.0, "debug", "console")
        assert (a.metrics_bind_address, a.health_probe_bind_address) == (":9090", ":9091")
        assert [p["containerPort"] for p in c["ports"]] == [9090, 9091]
        assert find(objs, "Service")[0]["spec"]["ports"][0]["port"] == 9090
    elif toggle == "zones":
        zones = {z["metadata"]["name"]: z["spec"] for z in find(objs, "ProxmoxNetworkZone")}
        assert zones == values["zones"]
    elif toggle == "provider-network-and-transit":
        # admission-and-packaging.md (e), field by field.
        (pn,) = find(objs, "ProviderNetwork")
        assert (pn["metadata"]["name"], pn["spec"]) == ("pxtrunk", {
            "defaultInterface": "ens20", "customInterfaces": [{"interface": "eth3", "nodes": ["node-b"]}],
            "excludeNodes": ["node-c"], "nodeSelector": {"matchLabels": {"proxmox-trunk": "true"}}})
        (vlan,) = find(objs, "Vlan")
        assert (vlan["metadata"]["name"], vlan["spec"]) == ("transit-a", {"id": 120, "provider": "pxtrunk"})
        (nad,) = find(objs, "NetworkAttachmentDefinition")
        assert nad["metadata"] == {**nad["metadata"], "name": "transit-a", "namespace": NAMESPACE}
        assert json.loads(nad["spec"]["config"]) == {
            "cniVersion": "0.3.0", "type": "kube-ovn", "server_socket": "/run/openvswitch/kube-ovn-daemon.sock",
            "provider": f"transit-a.{NAMESPACE}.ovn"}
        (sub,) = find(objs, "Subnet")
        assert sub["spec"] == {
            "protocol": "IPv4", "cidrBlock": "10.71.0.0/24", "gateway": "10.71.0.1", "vlan": "transit-a",
            "provider": f"transit-a.{NAMESPACE}.ovn", "private": False, "natOutgoing": False, "logicalGateway": False,
            "disableGatewayCheck": True, "mtu": 1400, "excludeIps": ["10.71.0.2..10.71.0.9"],
            "acls": [{"direction": "from-lport", "priority": 2001, "match": 'inport == "localnet.transit-a"',
                      "action": "allow"},
                     {"direction": "from-lport", "priority": 2000,
                      "match": "ip4 && ip4.dst == 10.71.0.0/24 && ip4.dst != 10.71.0.1", "action": "drop"}]}
        zones = {z["metadata"]["name"]: z["spec"] for z in find(objs, "ProxmoxNetworkZone")}
        assert zones["tenants"] == {"bridge": "vmbr70", "vlanRanges": ["101-199"], "providerNetwork": "pxtrunk",
                                    "egress": {"externalSubnet": "transit-a", "gatewayNamespace": NAMESPACE}}
        assert zones["own-egress"] == values["zones"]["own-egress"]  # given ones are kept as given
        assert vlan["metadata"]["labels"]["proxmox.cozystack.io/transit"] == "true"  # the guard's param
        assert {o["kind"] for o in objs if o["metadata"]["name"] == "proxmox-network-transit-vlan"} == {
            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
        # ProviderNetwork, Vlan, NAD, Subnet, two zones, the transit guard's policy and binding
        assert len(objs) == len(default) + 8
    elif toggle == "renamed":
        names = {(o["kind"], o["metadata"]["name"]) for o in objs}
        for kind, name in (("ServiceAccount", "pnc-second"), ("ClusterRole", "pnc-second"), ("ClusterRoleBinding", "pnc-second"),
                           ("Role", "pnc-second-leader-election"), ("Role", "pnc-second-ovn-tls"),
                           ("Deployment", "pnc-second"), ("Service", "pnc-second-metrics")):
            assert (kind, name) in names
        dep = find(objs, "Deployment")[0]
        assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "pnc-second"
        assert dep["spec"]["selector"]["matchLabels"] == {"app": "pnc-second"}
        assert find(objs, "ClusterRole", "pnc-second")[0]["rules"] == find(default, "ClusterRole", "proxmox-network-controller")[0]["rules"]
    # Everything the toggle does not touch is the default rendering.
    if toggle in ("admission-off", "monitoring-on", "podmonitor-on", "dashboard-on", "zones"):
        base = by_key(default)
        assert {k: o for k, o in got.items() if k in base} == {k: o for k, o in base.items() if k in got}
    dry_run_apply(kubectl, objs)


def test_crds_chart_without_keep_applies(helm, bed, kubectl):
    crds = render(helm, CRDS_CHART, {"keep": False})
    assert all("annotations" not in c["metadata"] for c in crds)
    dry_run_apply(kubectl, crds)


def test_dashboard_on_without_dashboard_files_renders_nothing(helm, tmp_path):
    chart = tmp_path / "proxmox-network"
    shutil.copytree(CHART, chart, ignore=shutil.ignore_patterns("dashboards"))
    assert find(render(helm, chart, {"dashboard": {"enabled": True}}), "ConfigMap") == []
    (chart / "dashboards").mkdir()
    assert find(render(helm, chart, {"dashboard": {"enabled": True}}), "ConfigMap") == []


# =============================================================================== schema

REFUSED = [
    ({"replicas": -1}, "- at '/replicas': minimum: got -1, want 0"),
    ({"ovn": {"nbAddress": "ssl:ovn-nb.cozy-kubeovn.svc"}},
     "- at '/ovn/nbAddress': 'ssl:ovn-nb.cozy-kubeovn.svc' does not match pattern"),
    ({"ovn": {"nbAddress": "tcp:10.0.0.1:6641,ssl:10.0.0.2"}}, "- at '/ovn/nbAddress': 'tcp:10.0.0.1:6641,ssl:10.0.0.2' does not match"),
    ({"logFormat": "text"}, "- at '/logFormat': value must be one of 'json', 'console'"),
    ({"gateway": {"overlayMtu": 100}}, "- at '/gateway/overlayMtu': minimum: got 100, want 576"),
    ({"logLevel": "warn"}, "- at '/logLevel': value must be one of 'debug', 'info'"),
    ({"replicas": 2, "leaderElection": {"enabled": False}}, "- at '/replicas': maximum: got 2, want 1"),
    ({"resyncPeriod": "10 minutes"}, "- at '/resyncPeriod': '10 minutes' does not match pattern"),
    ({"ovn": {"tlsSecret": "kube-ovn-tls"}}, "- at '/ovn/tlsSecret': 'kube-ovn-tls' does not match pattern"),
    ({"replicaCount": 2}, "- at '': additional properties 'replicaCount' not allowed"),
    ({"admission": {"exemptNamespaces": ["x') || true || ('"]}}, "- at '/admission/exemptNamespaces/0':"),
    ({"zones": {"z": {"bridge": "vmbr1", "providerNetwork": "pn"}}}, "- at '/zones/z': missing property 'vlanRanges'"),
    ({"metrics": {"port": 0}}, "- at '/metrics/port': minimum: got 0, want 1"),
    # A zone's schema is the CRD's, closed: a typo is refused, not pruned with a warning.
    ({"zones": {"z": {"bridge": "vmbr1", "providerNetwork": "pn", "vlanRanges": ["101"], "reservd": [5]}}},
     "- at '/zones/z': additional properties 'reservd' not allowed"),
    ({"zones": {"z": {"bridge": "vmbr1", "providerNetwork": "pn", "vlanRanges": ["101"],
                      "staticAssignments": [{"namespace": "t", "name": "n", "vlan": 5, "vlna": 6}]}}},
     "- at '/zones/z/staticAssignments/0': additional properties 'vlna' not allowed"),
    ({"zones": {"z": {"bridge": "vmbr1", "providerNetwork": "pn", "vlanRanges": ["101"], "reservedVLANs": [5000]}}},
     "- at '/zones/z/reservedVLANs/0': maximum: got 5,000, want 4,094"),
]

# What JSON Schema cannot say about a range, refused by the zones template (docs/api.md:
# VLAN IDs 1-4094, a range from its start to its end).
BAD_RANGES = [
    ("300-200", 'zones.z.vlanRanges: "300-200" ends before it starts'),
    ("4000-5000", 'zones.z.vlanRanges: "4000-5000": VLAN IDs are 1-4094'),
    ("0-10", 'zones.z.vlanRanges: "0-10": VLAN IDs are 1-4094'),
]


def test_the_chart_says_which_kubernetes_its_policies_need(helm):
    """Chart.yaml kubeVersion: ValidatingAdmissionPolicy v1 is GA from 1.30 (issue 27 item 5)."""
    r = run_helm(helm, "template", "x", str(CHART), "--kube-version", "1.29.9", check=False)
    assert r.returncode == 1 and "chart requires kubeVersion: >=1.30.0-0 which is incompatible with Kubernetes v1.29.9" \
        in r.stderr, r.stderr
    assert run_helm(helm, "template", "x", str(CHART), "--kube-version", "1.30.0-eks-1").returncode == 0


@pytest.mark.parametrize("create", [True, False])
def test_a_provider_network_name_kube_ovn_cannot_take_is_refused(helm, create):
    """Refused whether or not the chart creates it: the zones and the transit Vlan name it."""
    values = {"providerNetwork": {"create": create, "name": "pxtenant-trunk"},
              "zones": {"z": {"bridge": "vmbr1", "vlanRanges": ["100-199"]}}}
    r = run_helm(helm, "template", "x", str(CHART), *set_args(values), check=False)
    assert r.returncode == 1 and r.stdout == ""
    assert 'providerNetwork.name "pxtenant-trunk" is longer than the 12 characters Kube-OVN allows' in r.stderr, r.stderr


def test_a_zone_named_like_a_yaml_boolean_stays_a_string(helm):
    objs = render(helm, CHART, {"zones": {"on": {"bridge": "vmbr1", "providerNetwork": "pn", "vlanRanges": ["100-199"]}}})
    (zone,) = find(objs, "ProxmoxNetworkZone")
    assert zone["metadata"]["name"] == "on"


@pytest.mark.parametrize("vlan_range,message", BAD_RANGES, ids=[r for r, _ in BAD_RANGES])
def test_zone_ranges_the_schema_admits_but_no_zone_can_use_are_refused(helm, vlan_range, message):
    values = {"zones": {"z": {"bridge": "vmbr1", "providerNetwork": "pn", "vlanRanges": [vlan_range]}}}
    r = run_helm(helm, "template", "x", str(CHART), *set_args(values), check=False)
    assert r.returncode == 1
    assert message in r.stderr, r.stderr
    assert r.stdout == ""


def test_zones_from_values_are_kept_on_uninstall(helm):
    """Deleting a zone under its networks would leave them ZoneNotFound: like the CRDs, the
    zones a release made stay when it is uninstalled (docs/install.md)."""
    values = {"zones": {"z": {"bridge": "vmbr1", "providerNetwork": "pn", "vlanRanges": ["101-199"]}}}
    zones = [o for o in render(helm, CHART, values) if o["kind"] == "ProxmoxNetworkZone"]
    assert [z["metadata"]["annotations"].get("helm.sh/resource-policy") for z in zones] == ["keep"]


@pytest.mark.parametrize("values,message", REFUSED, ids=[m.split("'")[1] or "root" for _, m in REFUSED])
def test_bad_values_are_refused_by_the_schema(helm, values, message):
    r = run_helm(helm, "template", "x", str(CHART), *set_args(values), check=False)
    assert r.returncode == 1
    assert "values don't meet the specifications of the schema(s) in the following chart(s):\nproxmox-network:\n" in r.stderr
    assert message in r.stderr, r.stderr
    assert r.stdout == ""


def test_bad_values_are_refused_at_install_before_anything_is_sent(helm, bed, tmp_path):
    r = run_helm(helm, "install", "pnc", str(CHART), "--namespace", NAMESPACE, "--dry-run=server",
                 "--kubeconfig", str(bed.admin_kubeconfig), *set_args({"replicas": -1}), check=False)
    assert r.returncode == 1
    assert "- at '/replicas': minimum: got -1, want 0" in r.stderr, r.stderr


# =============================================================================== install

def sa_kubeconfig(bed, token: str, path: Path) -> Path:
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "sa",
           "clusters": [{"name": "bed", "cluster": {"server": bed.server, "certificate-authority": str(bed.ca_file)}}],
           "users": [{"name": "sa", "user": {"token": token}}],
           "contexts": [{"name": "sa", "context": {"cluster": "bed", "user": "sa"}}]}
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return path


def test_chart_install_brings_networks_to_ready_as_the_charts_service_account(helm, bed, kubectl, admin_client, tmp_path):
    """Both charts rendered with the operator's values and applied as the admin: a release
    namespace and name of its own (so its ServiceAccount has the chart's bindings and no
    other), a zone from the values, gateway management over TLS with the Secret in a
    namespace of its own. The controller runs with the installed Deployment's args (only
    the kubeconfig and the two listen addresses added for a process outside a pod) and a
    token of the chart's ServiceAccount. Admission stays off: its policies are cluster-wide
    and would judge the other tests' objects (test_admission_integration.py covers them, and
    the drift test proves the chart's are the same)."""
    admin = Admin(admin_client)
    core = k8s.CoreV1Api(admin_client)
    suffix = secrets.token_hex(3)
    release_ns, tls_ns, tenant = f"pnc-chart-{suffix}", f"ovn-{suffix}", f"tenant-{suffix}"
    name = release_ns  # fullnameOverride: cluster-scoped names of their own
    for ns in (release_ns, tls_ns, tenant):
        core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns, labels={"chart-test": suffix})))

    ca = CA("ovn-ca")
    leaf = ca.issue("ovn")
    server = NBServer(tmp_path / "nb", tls={"key": leaf.key, "cert": leaf.cert, "ca": ca.cert_pem}).start()
    secret = kube_ovn_secret(ca.cert_pem, leaf, namespace=tls_ns)
    secret["metadata"].pop("resourceVersion")
    core.create_namespaced_secret(tls_ns, secret)
    provider, zone = unique("pn")[:12], unique("zone")
    admin.create_provider_network(provider, ready=True, ready_nodes=["worker1", "worker2"])
    trunk = Trunk(admin_client, provider)
    trunk.join("worker1", "worker2")

    values = {
        "fullnameOverride": name,
        "replicas": 1,
        "logFormat": "console",
        "resyncPeriod": "1h",
        # This test's OVSDB is a TLS NB of its own, with no SB beside it: the SB is not read.
        "ovn": {"nbAddress": server.remote, "sbAddress": "", "tlsSecret": f"{tls_ns}/kube-ovn-tls",
                "tlsDir": str(tmp_path / "tls")},
        "admission": {"enabled": False},
        "zones": {zone: {"bridge": "vmbr1", "providerNetwork": provider, "vlanRanges": ["1300-1309"],
                         "namespaceSelector": {"matchLabels": {"chart-test": suffix}}}},
    }
    crds = render(helm, CRDS_CHART, namespace=release_ns, release="proxmox-network-crds")
    objs = render(helm, CHART, values, namespace=release_ns, release="proxmox-network")
    kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=helm-chart-test", "-f", "-",
            input=as_list(crds))
    kubectl("apply", "--server-side", "--field-manager=helm-chart-test", "-f", "-",
            input=as_list(objs))
    assert admin.zone(zone)["spec"]["vlanRanges"] == ["1300-1309"]

    # The chart's ServiceAccount, authenticated by a token the API server issues for it.
    tr = core.create_namespaced_service_account_token(name, release_ns, k8s.AuthenticationV1TokenRequest(
        spec=k8s.V1TokenRequestSpec(audiences=[bed.server], expiration_seconds=3600)))
    kubeconfig = sa_kubeconfig(bed, tr.status.token, tmp_path / "sa.kubeconfig")
    user = f"system:serviceaccount:{release_ns}:{name}"
    from controller.config import load_api_client

    sa_api = load_api_client(str(kubeconfig))
    try:
        review = k8s.AuthenticationV1Api(sa_api).create_self_subject_review(k8s.V1SelfSubjectReview())
        assert review.status.user_info.username == user
    finally:
        sa_api.close()

    dep = json.loads(kubectl("get", "deployment", "-n", release_ns, name, "-o", "json"))
    spec = dep["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == name
    args = spec["containers"][0]["args"]
    extra = [f"--kubeconfig={kubeconfig}"]
    pod = f"{name}-0"
    env = {**os.environ, "POD_NAME": pod, "POD_NAMESPACE": release_ns}
    env.pop("KUBECONFIG", None)
    nets = [("web", unique("sub")), ("db", unique("sub"))]
    routers = []
    try:
        with ControllerProcess(args + extra, tmp_path / "controller.log", env=env) as proc:
            for net, sub in nets:
                r = Router(server.nbctl, sub)
                r.create()
                routers.append(r)
                admin.create_network(tenant, net, zone, sub, f"pool-{net}")
            for net, sub in nets:
                obj = wait_condition(admin, tenant, net, "VLANAllocated", "Allocated", timeout=60)
                assert 1300 <= obj["status"]["vlan"] <= 1309
                p = unique_prefix()  # a range per network: one range in two pools is PoolOverlapsPool
                admin.co.create_cluster_custom_object("kubeovn.io", "v1", "subnets", {
                    "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": sub},
                    "spec": {"vlan": sub, "cidrBlock": f"{p}.0/24", "gateway": f"{p}.1", "vpc": "vpc-x",
                             "excludeIps": [f"{p}.1", f"{p}.200..{p}.250"]}})
                admin.co.patch_cluster_custom_object_status("kubeovn.io", "v1", "subnets", sub, {"status": {"conditions": [
                    {"type": t, "status": "True", "reason": "Test", "message": "",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"} for t in ("Validated", "Ready")]}})
                admin.co.create_namespaced_custom_object("ipam.cluster.x-k8s.io", "v1alpha2", tenant, "inclusterippools", {
                    "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
                    "metadata": {"name": f"pool-{net}", "namespace": tenant},
                    "spec": {"addresses": [f"{p}.200-{p}.250"], "prefix": 24, "gateway": f"{p}.1"}})
                admin.set_vlan_status(sub, {"subnets": [sub]})
            for net, sub in nets:
                obj = wait_condition(admin, tenant, net, "Ready", "Ready", timeout=60)
                assert reason(obj, "Ready")[0] == "True", (reason(obj, "Ready"), (tmp_path / "controller.log").read_text()[-3000:])
                assert reason(obj, "GatewayReady")[:2] == ("True", "ChassisAssigned")
            assert {tuple(sorted(r.chassis())) for r in routers} == {("ch-worker1", "ch-worker2")}
            assert wait_for(proc.ready, what="/readyz 200")
            # One Lease per cluster, in kube-system whatever the release's namespace; its holder
            # <release namespace>/<hostname>_<uuid> (in a pod the hostname is the pod's name).
            lease = wait_for(lambda: json.loads(kubectl(
                "get", "lease", "-n", "kube-system", "proxmox-network-controller.proxmox.cozystack.io", "-o", "json"))
                if proc.leads() else None, what="this release's controller leading")
            assert lease["spec"]["holderIdentity"].startswith(f"{release_ns}/{socket.gethostname()}_")
            # The counts follow the allocations within ZONE_COUNTS_DELAY (5 s).
            wait_for(lambda: (r := reason(admin.zone(zone), "Ready")) and r[0] == "True"
                     and r[2].startswith("8 of 10 VLANs free"), what="zone Ready, counting the two allocations")
            assert proc.alive()
    finally:
        trunk.leave("worker1", "worker2")
        server.stop()
    # Exactly the chart's RBAC sufficed: the API server refused none of that user's requests.
    # (403 for content in a namespace being deleted is admission, not RBAC: this controller also
    # reconciles other tests' networks, whose namespaces stay Terminating on this bed.)
    refused = [(e["verb"], e["requestURI"]) for e in read_events(bed)
               if e.get("user", {}).get("username") == user and (e.get("responseStatus") or {}).get("code") == 403
               and "being terminated" not in ((e.get("responseStatus") or {}).get("message") or "")]
    assert refused == []
    used = {e["objectRef"].get("resource") for e in read_events(bed)
            if e.get("user", {}).get("username") == user and e.get("objectRef")}
    assert {"secrets", "leases", "proxmoxnetworks", "vlans", "subnets", "nodes"} <= used


# =============================================================================== kubectl plugin

def test_kubectl_plugin_doctor_prints_what_the_controllers_doctor_prints(bed, tmp_path):
    """The console script pip makes from pyproject.toml's [project.scripts] entry, on PATH
    under its name: kubectl finds it as the plugin proxmox-network."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    target = scripts["kubectl-proxmox_network"]
    module, func = target.split(":")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "kubectl-proxmox_network"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n")
    script.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
           "KUBECONFIG": str(bed.admin_kubeconfig)}
    listed = subprocess.run([str(bed.kubectl), "plugin", "list"], capture_output=True, text=True, env=env)
    assert str(script) in listed.stdout, listed.stdout + listed.stderr

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)

    for args in ([], ["-n", NAMESPACE]):
        plugin = run(str(bed.kubectl), "proxmox-network", "doctor", *args)
        direct = run(sys.executable, "-m", "controller.main", "doctor", *args)
        assert (plugin.returncode, plugin.stdout, plugin.stderr) == (direct.returncode, direct.stdout, direct.stderr)
        assert plugin.returncode == 0 and plugin.stdout
    helped = run(str(bed.kubectl), "proxmox-network", "doctor", "--help")
    assert helped.returncode == 0 and "--subnet-prune-timeout" in helped.stdout
    bare = run(str(bed.kubectl), "proxmox-network")
    assert bare.returncode == 2 and "usage: kubectl proxmox-network doctor" in bare.stderr


def test_two_releases_in_two_namespaces_elect_one_allocator(helm, bed, kubectl, admin_client, tmp_path):
    """Issue 27 item 4, product-decisions §9 (one allocator per cluster, by construction):
    two releases of the chart, each in a namespace of its own, each with its controller as
    its own ServiceAccount (a process with the release's args, ``POD_NAMESPACE`` its
    namespace). Both take the one Lease in kube-system: exactly one leads at every sample,
    the other is Ready with ``cozy_proxmox_leader 0``, logs that another release holds the
    lock and posts a Warning Event ``LeaderLockHeldElsewhere`` on the Lease. A burst of
    networks while both run: every network gets its own VLAN, no duplicate on the provider.
    The leader stopped (SIGTERM releases the Lease), the other release's replica leads."""
    import threading

    admin = Admin(admin_client)
    core = k8s.CoreV1Api(admin_client)
    suffix = secrets.token_hex(3)
    tenant, provider, zone = f"tenant-{suffix}", unique("pn")[:12], unique("zone")
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=tenant, labels={"chart-test": suffix})))
    admin.create_provider_network(provider)
    releases = {}
    for r in ("a", "b"):
        ns = f"pnc-two-{r}-{suffix}"
        core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
        values = {"fullnameOverride": ns, "replicas": 1, "logFormat": "console", "resyncPeriod": "1h",
                  "gateway": {"manage": False}, "admission": {"enabled": False}}
        if r == "a":  # the zones belong to one release; the allocator they get is the cluster's one
            values["zones"] = {zone: {"bridge": "vmbr1", "providerNetwork": provider, "vlanRanges": ["1400-1449"],
                                      "namespaceSelector": {"matchLabels": {"chart-test": suffix}}}}
        objs = render(helm, CHART, values, namespace=ns, release=f"pnc-{r}")
        kubectl("apply", "--server-side", "--field-manager=helm-chart-test", "-f", "-", input=as_list(objs))
        tr = core.create_namespaced_service_account_token(ns, ns, k8s.AuthenticationV1TokenRequest(
            spec=k8s.V1TokenRequestSpec(audiences=[bed.server], expiration_seconds=3600)))
        args = find(objs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
        assert not [x for x in args if x.startswith("--leader-election-namespace")]  # the product's default
        releases[r] = (ns, args + [f"--kubeconfig={sa_kubeconfig(bed, tr.status.token, tmp_path / f'{r}.kubeconfig')}"])
        assert find(objs, "Role", f"{ns}-leader-election")[0]["metadata"]["namespace"] == "kube-system"

    def env(ns: str) -> dict[str, str]:
        e = {**os.environ, "POD_NAME": f"{ns}-0", "POD_NAMESPACE": ns}
        e.pop("KUBECONFIG", None)
        return e

    logs = {r: tmp_path / f"{r}.log" for r in releases}
    with ControllerProcess(releases["a"][1], logs["a"], env=env(releases["a"][0])) as pa, \
            ControllerProcess(releases["b"][1], logs["b"], env=env(releases["b"][0])) as pb:
        eps = {"a": pa, "b": pb}
        wait_for(lambda: all(p.ready() for p in eps.values()), timeout=60, what="both Ready")
        leader = wait_for(lambda: next((r for r in eps if eps[r].leads()), None), timeout=60, what="a leader")
        other = "b" if leader == "a" else "a"
        counts: list[int] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.2):
                counts.append(sum(p.leads() for p in eps.values()))

        t = threading.Thread(target=sample, daemon=True)
        t.start()
        try:
            for i in range(30):
                admin.create_network(tenant, f"n{i:02d}", zone, unique(f"s{i:02d}"))

            def allocated():
                items = admin.co.list_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", tenant,
                                                               "proxmoxnetworks")["items"]
                done = [i for i in items if (reason(i, "VLANAllocated") or ("", ""))[1] == "Allocated"]
                return items if len(done) == 30 else None

            items = wait_for(allocated, timeout=90, what="30 allocations")
        finally:
            stop.set()
            t.join()
        ids = sorted(i["status"]["vlan"] for i in items)
        assert ids == list(range(1400, 1430))
        assert sorted(v["spec"]["id"] for v in admin.vlans() if v["spec"]["provider"] == provider) == ids
        assert counts and set(counts) == {1}, counts  # exactly one leader at every sample
        assert eps[other].status("/readyz") == 200
        # The other replica learns who holds the Lease on its next read: when both raced for
        # a released Lease, its first answer was a 409 and the next read is one retry period
        # (2-4.4 s, client-go's jitter) later, which the burst may not outlast.
        wait_for(lambda: "another release holds the leader lock; waiting" in logs[other].read_text(),
                 timeout=30, what="the other release saying who holds the lock")
        held = f'namespace "{releases[leader][0]}"'

        def held_elsewhere_events():
            return [e for e in core.list_namespaced_event("kube-system").items
                    if e.reason == "LeaderLockHeldElsewhere" and held in (e.message or "")
                    and f'namespace "{releases[other][0]}" waits' in (e.message or "")]

        events = wait_for(held_elsewhere_events, timeout=30, what="a LeaderLockHeldElsewhere Event")
        assert events[0].type == "Warning" and events[0].involved_object.kind == "Lease"

        # The leader stopped: it releases the Lease on SIGTERM; the other release's replica leads.
        proc = pa if leader == "a" else pb
        proc.proc.send_signal(signal.SIGTERM)
        assert proc.proc.wait(20) == 0
        wait_for(eps[other].leads, timeout=30, what="the other release's replica leading")


def test_what_tenant_networks_stand_on_is_kept_on_uninstall(helm):
    """product-decisions.md §10: the package's uninstall never removes what live tenant
    networks stand on: the trunk ProviderNetwork (every tenant Vlan names it) and the transit
    network (Vlan, NetworkAttachmentDefinition, Subnet) stay, as the zones and the CRDs do."""
    values = {"providerNetwork": {"create": True, "name": "pn", "defaultInterface": "eth1"},
              "transit": {"enabled": True}}
    objs = render(helm, CHART, values)
    standing = [o for o in objs if o["kind"] in ("ProviderNetwork", "Vlan", "NetworkAttachmentDefinition", "Subnet")]
    assert sorted(o["kind"] for o in standing) == ["NetworkAttachmentDefinition", "ProviderNetwork", "Subnet", "Vlan"]
    assert [(o["kind"], (o["metadata"].get("annotations") or {}).get("helm.sh/resource-policy")) for o in standing] == \
        [(o["kind"], "keep") for o in standing]


def test_tenants_read_their_networks_through_kubernetes_own_roles(helm):
    """A tenant with the built-in view, edit or admin role in its namespace reads its
    ProxmoxNetworks on plain Kubernetes too (the aggregation labels' convention), besides
    Cozystack's tenant view role."""
    (role,) = find(render(helm, CHART), "ClusterRole", "cozy:proxmox-networks:view")
    labels = role["metadata"]["labels"]
    for r in ("view", "edit", "admin"):
        assert labels[f"rbac.authorization.k8s.io/aggregate-to-{r}"] == "true"
    assert labels["rbac.cozystack.io/aggregate-to-tenant-view"] == "true"
    assert role["rules"] == [{"apiGroups": ["proxmox.cozystack.io"], "resources": ["proxmoxnetworks"],
                              "verbs": ["get", "list", "watch"]}]


# =============================================================================== uninstall and reinstall

def helm_on(helm: str, bed, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run_helm(helm, *args, "--kubeconfig", str(bed.admin_kubeconfig), check=check)


def uid_of(kubectl, kind: str, name: str, ns: str | None = None) -> str | None:
    where = ("-n", ns) if ns else ()
    out = kubectl("get", kind, name, *where, "-o", "jsonpath={.metadata.uid}", check=False)
    return out or None


def test_the_package_uninstall_under_a_live_network_keeps_what_it_stands_on_and_a_reinstall_adopts_it(
        helm, bed, cluster, kubectl, admin_client):
    """Issue 40 item 7, the operator's trial replayed with helm itself: ``helm install`` of the
    package with the trunk ProviderNetwork, the transit network and a zone; a tenant network
    allocated on the zone by the controller; ``helm uninstall`` keeps the ProviderNetwork (the
    network's Vlan names it), the transit Vlan, Subnet and NetworkAttachmentDefinition and the
    zone, and says so; the network keeps its VLAN; ``helm install`` of the same release again
    adopts the kept objects (same uid: nothing re-created)."""
    from tests.support.controller import running_controller

    admin = Admin(admin_client)
    suffix = secrets.token_hex(3)
    ns, tenant = f"pnc-keep-{suffix}", f"tenant-{suffix}"
    for n in (ns, tenant):
        kubectl("create", "namespace", n)
    pn, transit, zone = f"pk{suffix}", f"transit-{suffix}", f"zone-{suffix}"
    values = {"fullnameOverride": ns, "replicas": 0, "podDisruptionBudget": {"enabled": False},
              "admission": {"enabled": False}, "ovn": {"tlsSecret": f"{ns}/kube-ovn-tls"},
              "providerNetwork": {"create": True, "name": pn, "defaultInterface": "eth1"},
              "transit": {"enabled": True, "name": transit, "vlan": 3990, "cidr": "10.79.0.0/24",
                          "gateway": "10.79.0.1"},
              "zones": {zone: {"bridge": "vmbr1", "providerNetwork": pn, "vlanRanges": ["3980-3989"]}}}
    # The view role is cluster-wide and fixed-named; another test may have applied it without
    # Helm's ownership: adopt it as docs/install.md says.
    if uid_of(kubectl, "clusterrole", "cozy:proxmox-networks:view"):
        kubectl("label", "clusterrole", "cozy:proxmox-networks:view", "app.kubernetes.io/managed-by=Helm", "--overwrite")
        kubectl("annotate", "clusterrole", "cozy:proxmox-networks:view", "meta.helm.sh/release-name=proxmox-network",
                f"meta.helm.sh/release-namespace={ns}", "--overwrite")
    notes = helm_on(helm, bed, "install", "proxmox-network", str(CHART), "--namespace", ns, *set_args(values)).stdout
    # The NOTES point at a doctor that is there: the controller's image has it on PATH.
    assert f"kubectl -n {ns} exec deploy/{ns} -- proxmox-network-controller doctor" in notes, notes
    kept = [("provider-networks.kubeovn.io", pn, None), ("vlans.kubeovn.io", transit, None), ("subnets.kubeovn.io", transit, None),
            ("network-attachment-definitions.k8s.cni.cncf.io", transit, ns), ("proxmoxnetworkzones", zone, None)]
    uids = {k: uid_of(kubectl, *k) for k in kept}
    assert all(uids.values()), uids
    try:
        with running_controller(cluster):
            admin.create_network(tenant, "net", zone, f"sub-{suffix}")
            vid = wait_condition(admin, tenant, "net", "VLANAllocated", "Allocated", 60)["status"]["vlan"]
            assert admin.vlan(f"sub-{suffix}")["spec"]["provider"] == pn

            r = helm_on(helm, bed, "uninstall", "proxmox-network", "--namespace", ns)
            assert "These resources were kept due to the resource policy:" in r.stdout, r.stdout
            for kind, name, _ in kept:
                assert name in r.stdout, (kind, name, r.stdout)
            assert {k: uid_of(kubectl, *k) for k in kept} == uids
            assert uid_of(kubectl, "deployment", ns, ns) is None  # the rest went
            obj = wait_condition(admin, tenant, "net", "VLANAllocated", "Allocated", 60)
            assert obj["status"]["vlan"] == vid and admin.vlan(f"sub-{suffix}")["spec"]["provider"] == pn

            helm_on(helm, bed, "install", "proxmox-network", str(CHART), "--namespace", ns, *set_args(values))
            assert {k: uid_of(kubectl, *k) for k in kept} == uids  # adopted, not re-created
            manifest = helm_on(helm, bed, "get", "manifest", "proxmox-network", "--namespace", ns).stdout
            assert f"name: {pn}" in manifest and f"name: {transit}" in manifest
            assert wait_condition(admin, tenant, "net", "VLANAllocated", "Allocated", 60)["status"]["vlan"] == vid
    finally:
        helm_on(helm, bed, "uninstall", "proxmox-network", "--namespace", ns, check=False)
        admin.co.delete_namespaced_custom_object("proxmox.cozystack.io", "v1alpha1", tenant, "proxmoxnetworks", "net")
        for kind, name, where in kept:
            kubectl("delete", kind, name, *(("-n", where) if where else ()), "--wait=false", check=False)


def test_a_subnet_on_the_transit_vlan_is_refused_unless_it_is_the_transit_subnet(helm, bed, kubectl):
    """Issue 40 item 9: the transit Vlan is guarded like a network's (admission on, the
    chart's default): a Subnet of anyone else naming it is refused with a message naming the
    transit network; the transit Subnet itself is admitted (the positive control)."""
    suffix = secrets.token_hex(3)
    transit = f"transit-{suffix}"
    objs = render(helm, CHART, {"transit": {"enabled": True, "name": transit, "vlan": 3991}})
    guard = [o for o in objs if o["metadata"]["name"] == "proxmox-network-transit-vlan"]
    (vlan,) = [o for o in objs if o["kind"] == "Vlan"]
    (subnet,) = [o for o in objs if o["kind"] == "Subnet"]
    assert sorted(o["kind"] for o in guard) == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    kubectl("apply", "--server-side", "-f", "-", input=as_list(guard + [vlan]))
    stranger = {"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": f"stranger-{suffix}"},
                "spec": {"vlan": transit, "cidrBlock": "10.78.0.0/24", "gateway": "10.78.0.1", "protocol": "IPv4"}}
    try:
        def refused() -> str | None:
            r = bed.run_kubectl("create", "-f", "-", input=json.dumps(stranger).encode(), check=False)
            if r.returncode == 0:
                kubectl("delete", "subnets.kubeovn.io", stranger["metadata"]["name"], "--wait=false")
                return None
            return r.stderr.decode()

        err = wait_for(refused, timeout=60, what="the transit guard enforced")
        assert "ValidatingAdmissionPolicy 'proxmox-network-transit-vlan'" in err, err
        assert (f"Vlan {transit} is the transit network of the VPC egress gateways: only its Subnet {transit} "
                "may name it") in err, err
        kubectl("create", "-f", "-", input=json.dumps(subnet))  # the transit Subnet: admitted
    finally:
        kubectl("delete", "subnets.kubeovn.io", transit, "--wait=false", check=False)
        kubectl("delete", "-f", "-", "--wait=false", input=as_list(guard + [vlan]), check=False)
