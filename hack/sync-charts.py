#!/usr/bin/env python3
"""Copy the verbatim parts of manifests/ into the Helm charts (issue 16 part 2).

manifests/ is the one source of truth for what the charts ship unchanged; the charts read
these copies with ``.Files.Get`` (Helm cannot read files outside a chart):

  manifests/crds/*.yaml                  -> charts/proxmox-network-crds/files/
  manifests/admission/*.yaml             -> charts/proxmox-network/files/admission/
  manifests/rbac/02-clusterrole.yaml     -> charts/proxmox-network/files/rbac/  (its rules)
  manifests/monitoring/prometheusrule.yaml -> charts/proxmox-network/files/     (its spec)

and writes one generated part: the schema of a zone in ``values.schema.json`` (``zones.*``) is
the ProxmoxNetworkZone CRD's ``spec`` schema with every object closed to unknown keys, so a
typo in a zone's values (``reservdVLANs``) fails at ``helm install`` instead of being pruned
by the API server with a warning.

Everything else in the charts is templated; tests/test_charts_integration.py checks that the
chart rendered with its default values equals ``kubectl kustomize manifests/`` object for
object, so a change to either side alone fails there.

  python3 hack/sync-charts.py          # copy (quiet when nothing changed)
  python3 hack/sync-charts.py --check  # exit 1 and name the stale copies
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "manifests"
CRDS_CHART = ROOT / "charts" / "proxmox-network-crds"
CHART = ROOT / "charts" / "proxmox-network"


def pairs() -> list[tuple[Path, Path]]:
    out = [(f, CRDS_CHART / "files" / f.name) for f in sorted((MANIFESTS / "crds").glob("*.yaml"))]
    out += [(f, CHART / "files" / "admission" / f.name) for f in sorted((MANIFESTS / "admission").glob("*.yaml"))]
    out.append((MANIFESTS / "rbac" / "02-clusterrole.yaml", CHART / "files" / "rbac" / "02-clusterrole.yaml"))
    out.append((MANIFESTS / "monitoring" / "prometheusrule.yaml", CHART / "files" / "prometheusrule.yaml"))
    return out


SCHEMA = CHART / "values.schema.json"
ZONE_CRD = MANIFESTS / "crds" / "proxmox.cozystack.io_proxmoxnetworkzones.yaml"
# Kubernetes-only keywords JSON Schema does not know; dropped from the generated schema.
K8S_KEYWORDS = ("x-kubernetes-map-type", "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "format")


def _closed(node: dict) -> dict:
    """``node`` without Kubernetes-only keywords, every object with ``properties`` closed."""
    out = {k: v for k, v in node.items() if k not in K8S_KEYWORDS}
    if "properties" in out:
        out["properties"] = {k: _closed(v) for k, v in out["properties"].items()}
        out.setdefault("additionalProperties", False)
    elif isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _closed(out["additionalProperties"])
    if isinstance(out.get("items"), dict):
        out["items"] = _closed(out["items"])
    return out


def zone_schema() -> dict:
    """The values schema of one zone: the CRD's ``spec`` schema, closed (see module doc),
    with ``providerNetwork`` optional: the chart defaults it to ``providerNetwork.name``
    (admission-and-packaging.md (e))."""
    import yaml

    for doc in yaml.safe_load_all(ZONE_CRD.read_text()):
        if doc and doc.get("kind") == "CustomResourceDefinition":
            spec = _closed(copy.deepcopy(doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]))
            spec["required"] = [r for r in spec.get("required", []) if r != "providerNetwork"]
            return spec
    raise LookupError(f"no CustomResourceDefinition in {ZONE_CRD}")


def schema_with_zones() -> str:
    data = json.loads(SCHEMA.read_text())
    data["properties"]["zones"]["additionalProperties"] = zone_schema()
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def stale() -> list[tuple[Path, Path]]:
    """Copies that differ from their source, and copies whose source is gone."""
    want = pairs()
    bad = [(src, dst) for src, dst in want if not dst.is_file() or dst.read_bytes() != src.read_bytes()]
    wanted = {dst for _, dst in want}
    for d in (CRDS_CHART / "files", CHART / "files" / "admission"):
        bad += [(Path("(removed)"), f) for f in sorted(d.glob("*.yaml")) if f not in wanted]
    if SCHEMA.read_text() != schema_with_zones():
        bad.append((ZONE_CRD, SCHEMA))
    return bad


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="only report stale copies (exit 1 if any)")
    args = p.parse_args(argv)
    bad = stale()
    if args.check:
        for src, dst in bad:
            print(f"stale: {dst.relative_to(ROOT)} (from {src.relative_to(ROOT) if src.is_absolute() else src})",
                  file=sys.stderr)
        if bad:
            print("run: python3 hack/sync-charts.py", file=sys.stderr)
        return 1 if bad else 0
    for src, dst in bad:
        if not src.is_absolute():
            dst.unlink()
            continue
        if dst == SCHEMA:
            SCHEMA.write_text(schema_with_zones())
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(src.read_bytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
