"""hack.probe.Endpoints reads the addresses a controller process logged it bound, in both
of the controller's log formats (controller.main.configure_logging)."""

from __future__ import annotations

import pytest
import structlog

from controller.main import configure_logging
from hack.probe import Endpoints


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
