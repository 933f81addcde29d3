"""Run the controller in the test process as the controller user (RBAC from manifests/)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from controller.config import load_api_client
from controller.main import configure_logging
from controller.manager import Manager, Options


@contextlib.contextmanager
def running_controller(cluster, **options) -> Iterator[Manager]:
    """Start a :class:`Manager` against ``cluster`` and stop it on exit.

    ``options`` override :class:`Options` (defaults here: gateway management off, a long
    resync so only events and explicit ``enqueue_all`` calls drive passes).
    """
    configure_logging("info", "console")
    opts = {"manage_gateway": False, "workers": 4, "resync_period": 3600.0, "cache_sync_timeout": 60.0}
    opts.update(options)
    api = load_api_client(str(cluster.controller_kubeconfig))
    mgr = Manager(api, Options(**opts))
    mgr.start()
    try:
        yield mgr
    finally:
        mgr.stop()
        api.close()
