"""hack.tools.probe.Endpoints reads the addresses a controller process logged it bound, in both
of the controller's log formats (controller.main.configure_logging)."""

from __future__ import annotations

import pytest
import structlog

from controller.main import configure_logging
from hack.tools.probe import Endpoints


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_endpoints_read_the_last_bound_addresses_from_either_log_format(fmt, capsys, tmp_path):
    configure_logging("info", fmt)
    try:
        log = structlog.get_logger("test")
        log.info("serving probes", address="127.0.0.1:40001")
        log.info("serving metrics", address="127.0.0.1:40002")
        log.info("serving probes", address="127.0.0.1:40003")  # a restart logging into the same file
    finally:
        structlog.reset_defaults()
    path = tmp_path / "controller.log"
    path.write_text(capsys.readouterr().err)
    e = Endpoints(path)
    assert (e.address("probes"), e.metrics_url()) == ("127.0.0.1:40003", "http://127.0.0.1:40002/metrics")


def test_endpoints_before_the_process_logged_them(tmp_path):
    e = Endpoints(tmp_path / "not-yet.log")
    assert e.address("probes") is None and e.status("/readyz") == 0
    with pytest.raises(LookupError):
        e.metrics_url()


def test_samples_and_leads_read_the_metrics_the_process_serves(tmp_path):
    """Endpoints.samples parses the text exposition (prometheus_client serves it, as in the
    controller); leads is cozy_proxmox_leader == 1 and False while nothing answers."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

    registry = CollectorRegistry()
    leader = Gauge("cozy_proxmox_leader", "1 while this replica holds the Lease", registry=registry)
    relists = Counter("cozy_proxmox_informer_relists", "relists", ["resource"], registry=registry)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        log = tmp_path / "controller.log"
        log.write_text(f"serving metrics address=127.0.0.1:{server.server_port}\n")
        e = Endpoints(log)
        assert not e.leads()
        leader.set(1)
        relists.labels(resource="vlans.kubeovn.io/v1").inc(2)
        assert e.leads()
        assert e.samples("cozy_proxmox_informer_relists_total") == {
            frozenset({("resource", "vlans.kubeovn.io/v1")}): 2.0}
        assert e.samples("no_such_metric") == {}
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert not e.leads()  # nothing answers any more
