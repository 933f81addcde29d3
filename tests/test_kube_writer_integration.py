"""controller.runtime.kube against the real kube-apiserver: a failed JSON-patch ``test`` op is told
apart from bad input (issue 15, item 8: "a JSON-patch test op that fails on a concurrent
change is logged as reason=Invalid status=422, which reads like bad input").
"""

from __future__ import annotations

import pytest
from controller.main import configure_logging

from controller import names
from controller.runtime.worker import Controller
from controller.runtime.kube import ApiError, KubeWriter, finalizer_add_patch
from controller.metrics import Metrics

pytestmark = pytest.mark.integration


def _error(fn) -> ApiError:
    with pytest.raises(ApiError) as info:
        fn()
    return info.value


def test_a_failed_test_op_is_a_conflict_and_a_validation_error_is_not(admin_client, unique_namespace, capsys):
    configure_logging("info", "json")  # a no-op for loggers earlier tests cached
    writer = KubeWriter(admin_client)
    ns = unique_namespace
    secret = writer.create(names.SECRETS, {"metadata": {"name": "s"}, "type": "Opaque"}, ns)
    # Our finalizer patch is guarded by the list as read: another field's change in between does
    # not refuse it; a list made meanwhile does (tested absent), and so does one changed.
    writer.merge_patch(names.SECRETS, "s", {"metadata": {"labels": {"changed": "yes"}}}, ns)
    added = writer.add_finalizer(names.SECRETS, secret, "x.io/f")
    assert added["metadata"]["finalizers"] == ["x.io/f"]
    again = writer.add_finalizer(names.SECRETS, {"metadata": {**added["metadata"], "resourceVersion": "1"}}, "x.io/g")
    assert again["metadata"]["finalizers"] == ["x.io/f", "x.io/g"]
    stale = secret  # read with no list, which exists now
    conflict = _error(lambda: writer.json_patch(names.SECRETS, "s", finalizer_add_patch(stale, "x.io/h"), ns))
    assert (conflict.status, conflict.reason, conflict.test_failed, conflict.conflict) == (
        409, "PatchTestFailed", True, True)
    assert conflict.message.startswith("the JSON patch did not apply: the object changed since it was read")
    bad = _error(lambda: writer.create(names.SECRETS, {"metadata": {"name": "Not_A_Name"}}, ns))
    assert (bad.status, bad.test_failed, bad.conflict) == (422, False, False)
    # A patch whose result fails validation is bad input, not a conflict.
    fresh = writer.get(names.SECRETS, "s", ns)
    invalid = _error(lambda: writer.json_patch(names.SECRETS, "s", [
        {"op": "test", "path": "/metadata/resourceVersion", "value": fresh["metadata"]["resourceVersion"]},
        {"op": "add", "path": "/metadata/labels", "value": {"bad label!": "x"}}], ns))
    assert (invalid.status, invalid.test_failed) == (422, False)

    def reconcile(key):
        raise conflict if key == "stale" else bad

    c = Controller("test-writer", "test", reconcile, 1, Metrics().workqueue)
    capsys.readouterr()
    c.process("stale")
    c.process("bad")
    err = capsys.readouterr().err.splitlines()

    def line(key: str) -> str:
        # Console or JSON, as the process' logging was configured by earlier tests.
        found = [ln for ln in err if f"key=test:{key}" in ln or f'"key": "test:{key}"' in ln]
        assert len(found) == 1, err
        return found[0]

    assert "reconcile conflict, retrying with backoff" in line("stale") and "PatchTestFailed" in line("stale")
    assert "reconcile failed, retrying with backoff" in line("bad") and "Invalid" in line("bad")
    assert c.queue.num_requeues("stale") == 1 and c.queue.num_requeues("bad") == 1


def test_a_status_update_without_managed_fields_keeps_the_servers_record(admin_client, unique_namespace):
    """The informers cache objects without ``metadata.managedFields`` and status writes send
    none; the API server then keeps the live object's record (a client that does not know the
    field cannot clear it), so server-side apply users lose nothing to our writes."""
    writer = KubeWriter(admin_client)
    ns = unique_namespace
    made = writer.create(names.PROXMOX_NETWORKS, {
        "apiVersion": "proxmox.cozystack.io/v1alpha1", "kind": "ProxmoxNetwork",
        "metadata": {"name": "n1"}, "spec": {"zone": "z", "subnet": "s", "ipPool": "p"}}, ns)
    created = [m for m in made["metadata"]["managedFields"] if not m.get("subresource")]
    assert created and "f:spec" in created[0]["fieldsV1"]
    body = {**made, "metadata": {k: v for k, v in made["metadata"].items() if k != "managedFields"},
            "status": {"vlan": 7, "bridge": "vmbr1"}}
    written = writer.update_status(names.PROXMOX_NETWORKS, body)
    assert written["status"]["vlan"] == 7
    records = written["metadata"]["managedFields"]
    assert [m for m in records if not m.get("subresource")] == created  # the create's record kept
    assert [m["fieldsV1"] for m in records if m.get("subresource") == "status"] == [
        {"f:status": {".": {}, "f:bridge": {}, "f:vlan": {}}}]  # and the status write has its own
