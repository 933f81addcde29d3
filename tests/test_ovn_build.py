"""Kube-OVN's own OVS and OVN as the bed's (issue 24): the tools the bed runs are the build
of hack/build-ovn.sh, at the commits hack/versions.env names, with the "+g<commit>" suffix
Kube-OVN's image build gives them, and their OVN schemas are the ones Kube-OVN v1.15 embeds
(what hack/build-peers.sh staged from pkg/ovsdb/ovn{nb,sb}/model.go)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from hack.bed import NB_SCHEMA, OVN_PREFIX, SB_SCHEMA, _read_versions, default_peers_dir

VERSIONS = _read_versions()


@pytest.fixture(scope="module")
def prefix():
    if OVN_PREFIX is None:
        pytest.fail("the bed runs Debian's OVN (PNC_KUBE_OVN_VERSION switches to v1.13.0); CI runs v1.15",
                    pytrace=False)
    return OVN_PREFIX


@pytest.mark.parametrize("tool, words", [
    ("ovn-northd", ("ovn-northd", "25.03.")),
    ("ovn-nbctl", ("ovn-nbctl", "25.03.")),
    ("ovn-sbctl", ("ovn-sbctl", "25.03.")),
    ("ovsdb-server", ("ovsdb-server (Open vSwitch)", "3.5.")),
    ("ovsdb-tool", ("ovsdb-tool (Open vSwitch)", "3.5.")),
])
def test_the_bed_runs_kube_ovns_build_of_each_tool(prefix, tool, words):
    path = shutil.which(tool)
    assert path is not None and path.startswith(str(prefix)), (tool, path)
    first = subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    commit = VERSIONS["OVN_COMMIT" if tool.startswith("ovn-") else "OVS_COMMIT"][:12]
    assert first.startswith(words[0]) and words[1] in first and first.endswith(f"+g{commit}"), first


@pytest.mark.parametrize("db, schema", [("nb", NB_SCHEMA), ("sb", SB_SCHEMA)])
def test_the_beds_schemas_are_the_ones_kube_ovn_embeds(prefix, db, schema):
    built = json.loads(schema.read_text())
    embedded = json.loads((default_peers_dir() / "ovsdb" / f"ovn-{db}.ovsschema").read_text())
    assert schema.is_relative_to(prefix)
    assert built["version"] == embedded["version"] == {"nb": "7.11.0", "sb": "20.41.0"}[db]
    # Every table and column Kube-OVN's models map exists in the build's schema.
    for table, spec in embedded["tables"].items():
        assert set(spec["columns"]) <= set(built["tables"][table]["columns"]), table
