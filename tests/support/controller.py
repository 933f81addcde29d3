"""Run the controller in the test process as the controller user (RBAC from manifests/)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from controller.config import load_api_client
from controller.main import configure_logging
from controller.manager import Manager, Options
from hack.tools.wait import wait_for


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


def vlan_cached(mgr: Manager, name: str) -> None:
    """Wait until ``mgr``'s Vlan cache holds the Vlan ``name``.

    A test that makes a Vlan by hand and then a network that must see it calls this first:
    the allocator reads the cache (product-decisions.md §4), so a network queued before the
    watch brings the Vlan is allocated as if it were not there and later reported as
    ``VLANConflict``, which is a different, also correct, outcome.
    """
    wait_for(lambda: mgr.vlan_informer.store.get(name) is not None, what=f"Vlan {name} in the controller's cache")
