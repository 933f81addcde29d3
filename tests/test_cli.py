"""Command-line flags (reference-behaviour.md §14): names, defaults and refusals."""

from __future__ import annotations

import argparse

import pytest

from controller.config import parse_duration, parse_tls_secret
from controller.main import build_parser, main


def test_reference_flags_and_defaults():
    a = build_parser().parse_args([])
    assert a.metrics_bind_address == ":8080"
    assert a.health_probe_bind_address == ":8081"
    assert a.leader_elect is True  # product-decisions.md §4.5: on by default
    assert a.metrics_secure is False and a.enable_http2 is False
    assert a.subnet_prune_timeout == 600.0
    assert a.manage_gateway_chassis is True
    assert a.ovn_nb_address == "ssl:ovn-nb.cozy-kubeovn.svc:6641"
    assert a.ovn_tls_secret == ("cozy-kubeovn", "kube-ovn-tls")
    # product-decisions.md §10: the SB is read when given (the chart and manifests give
    # Kube-OVN's); the serving chassis stays on top unless failback is asked for.
    assert a.ovn_sb_address == "" and a.gateway_failback is False
    # §10: the path MTU bound, Kube-OVN's default pod MTU on Geneve (1500 less 100).
    assert a.overlay_mtu == 1400


@pytest.mark.parametrize("argv, attr, value", [
    (["--leader-elect=false"], "leader_elect", False),
    (["--leader-elect"], "leader_elect", True),
    (["--manage-gateway-chassis=false"], "manage_gateway_chassis", False),
    (["--subnet-prune-timeout=90s"], "subnet_prune_timeout", 90.0),
    (["--subnet-prune-timeout=1h30m"], "subnet_prune_timeout", 5400.0),
    (["--overlay-mtu=8900"], "overlay_mtu", 8900),
    (["--overlay-mtu=0"], "overlay_mtu", 0),
])
def test_go_style_values(argv, attr, value):
    assert getattr(build_parser().parse_args(argv), attr) == value


@pytest.mark.parametrize("value", ["cozy-kubeovn", "/x", "x/", "a/b/c", ""])
def test_tls_secret_needs_namespace_and_name(value):
    with pytest.raises(argparse.ArgumentTypeError) as exc:
        parse_tls_secret(value)
    assert str(exc.value) == f'--ovn-tls-secret "{value}": want <namespace>/<name>'


@pytest.mark.parametrize("value", ["575", "65521", "-1", "1400b", ""])
def test_an_overlay_mtu_outside_a_zones_range_is_refused(value):
    with pytest.raises(SystemExit):
        build_parser().parse_args([f"--overlay-mtu={value}"])


def test_bad_duration_is_refused():
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration("ten minutes")


def test_metrics_secure_is_refused_not_ignored():
    assert main(["--metrics-secure=true", "--kubeconfig=/nonexistent"]) == 1


def test_doctor_reports_an_unreadable_cluster_without_a_traceback(capsys):
    from controller import doctor

    assert doctor.main(["--kubeconfig=/nonexistent"]) == 1
    assert capsys.readouterr().err.startswith("doctor: cannot read the cluster:")
    assert doctor.main(["--subnet-prune-timeout=soon"]) == 2


@pytest.mark.parametrize("address, message", [
    ("", "no OVSDB address given"),
    (" , ", "no OVSDB address given"),
    ("http://nb:6641", 'OVSDB address "http://nb:6641": want ssl:<host>:<port>'),
    ("tcp:nb", 'OVSDB address "tcp:nb": missing port in address'),
    # issue 15, item 8: IPv6 hosts in brackets (ovsdb-server(1)), a port that is not a number says so
    ("tcp:::1:6641", 'OVSDB address "tcp:::1:6641": an IPv6 host must be in brackets, as in tcp:[::1]:6641'),
    ("tcp:127.0.0.1:notaport", 'OVSDB address "tcp:127.0.0.1:notaport": port "notaport" is not a number'),
    ("ssl:[::1:6641", 'OVSDB address "ssl:[::1:6641": missing "]" after the IPv6 host'),
    ("ssl:[::1]", 'OVSDB address "ssl:[::1]": missing port in address'),
    ("tcp::6641", 'OVSDB address "tcp::6641": missing host in address'),
    ("tcp:nb:70000", 'OVSDB address "tcp:nb:70000": port 70000 is out of range (1-65535)'),
])
def test_bad_nb_address_stops_the_start(address, message, capsys):
    """reference-behaviour.md §10: the address list is checked before anything starts."""
    import json

    assert main([f"--ovn-nb-address={address}", "--kubeconfig=/nonexistent", "--log-format=json"]) == 1
    lines = [json.loads(ln) for ln in capsys.readouterr().err.splitlines() if ln.startswith("{")]
    errors = [ln for ln in lines if ln["event"] == "unable to set up the OVN NB client"]
    assert len(errors) == 1 and errors[0]["error"].startswith(message)


def test_bad_sb_address_stops_the_start(capsys):
    import json

    assert main(["--ovn-sb-address=tcp:sb", "--kubeconfig=/nonexistent", "--log-format=json"]) == 1
    lines = [json.loads(ln) for ln in capsys.readouterr().err.splitlines() if ln.startswith("{")]
    errors = [ln for ln in lines if ln["event"] == "unable to set up the OVN SB client"]
    assert len(errors) == 1 and errors[0]["error"].startswith('OVSDB address "tcp:sb": missing port in address')


def test_bracketed_ipv6_nb_address_is_accepted():
    from ovn.ovsdb import parse_addresses

    assert parse_addresses("ssl:[fd00::10]:6641,tcp:[::1]:6641") == ["ssl:[fd00::10]:6641", "tcp:[::1]:6641"]


def test_bad_nb_address_is_not_checked_with_management_off(capsys):
    # Management off: no NB client at all (§9.8); the start fails later, on the kubeconfig.
    assert main(["--manage-gateway-chassis=false", "--ovn-nb-address=", "--kubeconfig=/nonexistent",
                 "--log-format=json"]) == 1
    assert "OVSDB" not in capsys.readouterr().err


@pytest.mark.integration
def test_taken_metrics_port_is_one_clear_error(cluster, capsys):
    import json
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        rc = main([f"--kubeconfig={cluster.controller_kubeconfig}", f"--metrics-bind-address=127.0.0.1:{port}",
                   "--health-probe-bind-address=0", "--manage-gateway-chassis=false", "--leader-elect=false",
                   "--log-format=json"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [json.loads(ln) for ln in err.splitlines() if ln.startswith("{")]
    assert any(ln["event"] == "unable to serve metrics or probes" and "in use" in ln["error"] for ln in lines)


def test_the_kubectl_plugin_runs_from_a_checkout_with_python_m():
    # `python3 -m kubectl_plugin` from the tree, no `pip install .` (docs/operations.md).
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "-m", "kubectl_plugin", "--help"], cwd=root, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("usage: kubectl proxmox-network doctor"), (r.stdout, r.stderr)
    r = subprocess.run([sys.executable, "-m", "kubectl_plugin", "nope"], cwd=root, capture_output=True, text=True)
    assert r.returncode == 2 and "unknown command 'nope'" in r.stderr
