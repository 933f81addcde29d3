"""What the API server holds of a status the controller writes (field reports, fourth round,
S5; controller/schema.py), pure, and the executor's read-back of a status write with a
writer that prunes like an older CRD (the real API server: tests/test_crd_rollback_integration.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import attrs
import yaml

from controller import names, schema
from controller.plan.actions import Into, WriteStatus
from controller.apply.executor import Executor
from controller.metrics import Metrics

CRDS = Path(__file__).resolve().parent.parent / "manifests" / "crds"
NETWORKS_CRD = "proxmoxnetworks.proxmox.cozystack.io"
PRUNED = ("status.gatewayMtu", "status.servingChassis")


def status(**extra: Any) -> dict[str, Any]:
    base = {"vlan": 101, "bridge": "vmbr70", "ipPool": {"total": 41, "used": 3, "free": 38},
            "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "m",
                            "lastTransitionTime": "2026-12-06T10:00:00Z", "observedGeneration": 1}]}
    base.update(extra)
    return base


def test_missing_names_the_fields_written_and_not_returned_nested_and_in_list_items():
    written = status(gatewayMtu=1400, servingChassis="ch-a", mtu=None)
    returned = status()
    assert schema.missing(written, returned) == PRUNED
    # nested members, and a member of every list item
    back = copy.deepcopy(written)
    del back["ipPool"]["free"]
    for c in back["conditions"]:
        del c["observedGeneration"]
    assert schema.missing(written, back) == ("status.ipPool.free", "status.conditions[].observedGeneration")
    # a null written, another type or another list length back: no schema gap
    assert schema.missing({"mtu": None}, {}) == ()
    assert schema.missing({"ipPool": {"total": 1}}, {"ipPool": "x"}) == ()
    assert schema.missing({"conditions": [{"a": 1}]}, {"conditions": []}) == ()
    assert schema.missing(written, written) == ()


def test_paths_and_held():
    s = status(gatewayMtu=1400)
    assert "status.ipPool.used" in schema.paths(s)
    assert "status.conditions[].reason" in schema.paths(s)
    assert schema.held(s, ["status.gatewayMtu", "status.conditions[].observedGeneration"]) == {
        **{k: v for k, v in status().items() if k != "conditions"},
        "conditions": [{k: v for k, v in status()["conditions"][0].items() if k != "observedGeneration"}]}
    assert schema.held(s, ["status.nothere.deeper", "other.gatewayMtu"]) == s  # unknown paths are ignored
    assert s["gatewayMtu"] == 1400  # not changed in place


def test_differs_is_the_one_write_decision():
    stored = status()
    desired = status(gatewayMtu=1400, servingChassis="ch-a")
    assert schema.differs(desired, stored)
    assert not schema.differs(desired, stored, PRUNED)
    assert schema.differs(status(vlan=102, gatewayMtu=1400), stored, PRUNED)  # a real change
    assert not schema.differs(stored, stored)


def test_full_shape_fills_every_field_of_the_crds_and_keeps_what_the_status_has():
    for plural, fname in (("proxmoxnetworks", "proxmox.cozystack.io_proxmoxnetworks.yaml"),
                          ("proxmoxnetworkzones", "proxmox.cozystack.io_proxmoxnetworkzones.yaml")):
        crd = yaml.safe_load((CRDS / fname).read_text())
        props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        # every top-level status field of this version's CRD, conditions aside (always written)
        assert set(schema.FULL_STATUS[plural]) == set(props) - {"conditions"}, plural
        for key, value in schema.FULL_STATUS[plural].items():
            want = {"integer": int, "string": str, "object": dict, "array": list}[props[key]["type"]]
            assert isinstance(value, want), (plural, key)
    shape = schema.full_shape("proxmoxnetworks", status(mtu=None))
    assert shape["vlan"] == 101 and shape["mtu"] == 1500 and shape["servingChassis"] == "probe"
    assert shape["conditions"] == status()["conditions"]


def test_the_message_names_the_fields_and_the_crd():
    assert schema.outdated_message(names.PROXMOX_NETWORKS, ["status.servingChassis", "status.gatewayMtu"]) == (
        f"status.gatewayMtu, status.servingChassis are not in CRD {NETWORKS_CRD}; the server prunes them: "
        "apply the CRDs of this controller's version")
    assert schema.outdated_message(names.PROXMOX_NETWORKS, ["status.gatewayMtu"]).startswith(
        f"status.gatewayMtu is not in CRD {NETWORKS_CRD}; the server prunes it: ")


def test_pruned_fields_learn_and_clear():
    cleared: list[Any] = []
    reg = schema.PrunedFields(on_cleared=cleared.append)
    res = names.PROXMOX_NETWORKS
    sent = schema.paths(status(gatewayMtu=1400, servingChassis="ch-a"))
    first = reg.learn(res, sent, ["status.gatewayMtu"])
    assert first == schema.Learned(("status.gatewayMtu",), ("status.gatewayMtu",), False)
    assert reg.of(res) == {"status.gatewayMtu"} and reg.outdated() == [res]
    assert reg.learn(res, sent, PRUNED).new == ("status.servingChassis",)
    assert reg.learn(res, sent, PRUNED).new == ()  # known: nothing new to say
    # a write that did not carry a known field says nothing of it
    assert reg.learn(res, schema.paths(status()), ()).fields == PRUNED
    # the CRD of this version applied: the fields come back
    done = reg.learn(res, sent, ())
    assert done == schema.Learned((), (), True) and cleared == [res]
    assert reg.of(res) == frozenset() and reg.outdated() == [] and reg.of(names.PROXMOX_NETWORK_ZONES) == frozenset()


# -- the executor's read-back ---------------------------------------------------------------------


class PruningWriter:
    """A status PUT as an API server with a CRD lacking ``lacks`` answers it."""

    def __init__(self, lacks: tuple[str, ...]) -> None:
        self.lacks = lacks
        self.puts: list[tuple[dict, bool]] = []
        self.writes = 0

    def update_status(self, resource, obj, dry_run: bool = False):
        self.puts.append((copy.deepcopy(obj), dry_run))
        out = copy.deepcopy(obj)
        out["status"] = {k: v for k, v in out["status"].items() if k not in self.lacks}
        out["metadata"]["resourceVersion"] = "8"
        return out


class Events:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str, str]] = []

    def event(self, obj, etype, reason, message):
        self.posted.append((obj["metadata"]["name"], etype, reason, message))


@attrs.frozen
class Snap:
    network: Any = None


def net(name: str) -> dict:
    return {"apiVersion": "proxmox.cozystack.io/v1alpha1", "kind": "ProxmoxNetwork",
            "metadata": {"name": name, "namespace": "t", "resourceVersion": "7", "uid": f"u-{name}"},
            "spec": {}}


def test_a_write_whose_read_back_lacks_fields_probes_once_and_posts_one_event_naming_every_gap():
    writer = PruningWriter(("gatewayMtu", "servingChassis", "gatewayFailingSince"))
    events, metrics = Events(), Metrics()
    reg = schema.PrunedFields()
    ex = Executor(writer, None, events=events, metrics=metrics, pruned=reg)  # type: ignore[arg-type]

    def write(name: str, st: dict) -> None:
        ex(WriteStatus(names.PROXMOX_NETWORKS, net(name), st, Into("network")), Snap())

    write("a", status(gatewayMtu=1400))  # servingChassis not known yet, gatewayFailingSince not failing
    assert [dry for _, dry in writer.puts] == [False, True]  # the write, then one dry-run of the full shape
    probe = writer.puts[1][0]["status"]
    assert probe["servingChassis"] == "probe" and probe["vlan"] == 101
    fields = ("status.gatewayFailingSince", "status.gatewayMtu", "status.servingChassis")
    assert events.posted == [("a", "Warning", "SchemaOutdated", schema.outdated_message(names.PROXMOX_NETWORKS,
                                                                                           fields))]
    assert reg.of(names.PROXMOX_NETWORKS) == set(fields)
    gauge = metrics.registry.get_sample_value("cozy_proxmox_crd_pruned_status_fields", {"crd": NETWORKS_CRD})
    assert gauge == 3
    # Other writes (another network, the served chassis now known): no probe, no Event.
    write("b", status(gatewayMtu=1400, servingChassis="ch-a"))
    assert [dry for _, dry in writer.puts] == [False, True, False] and len(events.posted) == 1
    assert metrics.registry.get_sample_value("cozy_proxmox_status_writes_total", {"crd": NETWORKS_CRD}) == 2
    # A resync's recheck: a dry-run alone, still outdated: nothing new said, nothing written.
    ex.probe_schema(names.PROXMOX_NETWORKS, {**net("a"), "status": status()})
    assert [dry for _, dry in writer.puts][-1:] == [True] and len(events.posted) == 1
    assert reg.of(names.PROXMOX_NETWORKS) == set(fields)
    # The CRDs of this version applied: the recheck finds every field held.
    writer.lacks = ()
    ex.probe_schema(names.PROXMOX_NETWORKS, {**net("a"), "status": status()})
    assert reg.of(names.PROXMOX_NETWORKS) == frozenset() and len(events.posted) == 1
    assert metrics.registry.get_sample_value("cozy_proxmox_crd_pruned_status_fields", {"crd": NETWORKS_CRD}) == 0
    assert metrics.registry.get_sample_value("cozy_proxmox_status_writes_total", {"crd": NETWORKS_CRD}) == 2


def test_a_read_back_that_keeps_what_was_written_costs_no_probe():
    writer = PruningWriter(())
    events = Events()
    ex = Executor(writer, None, events=events, metrics=Metrics(), pruned=schema.PrunedFields())  # type: ignore[arg-type]
    ex(WriteStatus(names.PROXMOX_NETWORKS, net("a"), status(gatewayMtu=1400), Into("network")), Snap())
    assert [dry for _, dry in writer.puts] == [False] and events.posted == []
