"""Bytes per cached object, per kind, as served less managedFields and as projected
(hack/bench_cache.py: the command line and its description)."""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import os
import platform
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any, Callable

from controller.watch.projection import transform_for
from hack.benchkit import population as pop
from informers.informer import strip_managed_fields

REPO = Path(__file__).resolve().parents[2]

BEGIN, END = "<!-- cache-bytes:begin -->", "<!-- cache-bytes:end -->"

KINDS: list[tuple[str, tuple[str, str], Callable[[int], dict[str, Any]]]] = [
    ("Kube-OVN IP", ("kubeovn.io", "ips"), lambda i: pop.kube_ovn_ip(i, f"subnet-{i % 2000:04d}", f"tenant-{i % 5000:05d}",
                                                                      f"worker-{i % 500:04d}")),
    ("Node", ("", "nodes"), lambda i: pop.node(i, ["pn-a", "pn-b"])),
    ("Namespace", ("", "namespaces"), pop.namespace),
    ("IPAddress", ("ipam.cluster.x-k8s.io", "ipaddresses"), lambda i: pop.ip_address(i, "tenant-00001", "pool")),
    ("IPAddressClaim", ("ipam.cluster.x-k8s.io", "ipaddressclaims"),
     lambda i: pop.ip_address_claim(i, "tenant-00001", "pool")),
    ("ProxmoxMachine v1alpha1", ("infrastructure.cluster.x-k8s.io", "proxmoxmachines"),
     lambda i: pop.proxmox_machine(i, "tenant-00001", "pool", "v1alpha1")),
    ("ProxmoxMachine v1alpha2", ("infrastructure.cluster.x-k8s.io", "proxmoxmachines"),
     lambda i: pop.proxmox_machine(i, "tenant-00001", "pool", "v1alpha2")),
]


def retained(make: Callable[[int], dict[str, Any]], transform: Callable[[dict], dict], count: int) -> float:
    """Bytes per object that ``count`` transformed objects keep alive."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = [transform(make(i)) for i in range(count)]
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return (after - before) / count


def measure(count: int) -> list[tuple[str, float, float]]:
    out = []
    for label, (group, plural), make in KINDS:
        projected = transform_for(group, plural)
        assert projected is not None, (group, plural)
        out.append((label, retained(make, strip_managed_fields, count), retained(make, projected, count)))
    return out


def table(rows: list[tuple[str, float, float]], count: int) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    lines = [f"Run of {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.machine()} "
             f"{os.cpu_count()} cores, Python {platform.python_version()}; `python3 hack/bench_cache.py --count {count}` "
             f"at commit {commit}.", "",
             "| Kind | Bytes per cached object, as served less managedFields | Projected | Ratio |",
             "|---|---|---|---|"]
    for label, full, proj in rows:
        lines.append(f"| {label} | {full:,.0f} | {proj:,.0f} | {proj / full:.2f} |")
    return "\n".join(lines)


def command(a: argparse.Namespace) -> int:
    """The body of hack/bench_cache.py with its parsed arguments; the exit status."""
    text = table(measure(a.count), a.count)
    print(text)
    if a.report:
        doc = a.report.read_text()
        if BEGIN not in doc or END not in doc:
            print(f"{a.report}: no {BEGIN} … {END} markers", file=sys.stderr)
            return 1
        a.report.write_text(re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: f"{BEGIN}\n{text}\n{END}",
                                   doc, flags=re.S))
    return 0

