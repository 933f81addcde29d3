"""The main job on real input: a local control plane, the sample zones and networks of
hack/sample/, the controller running as its own user, and the result as
``kubectl get pxzone,pxnet -A`` shows it.

Usage: ``python hack/demo.py [--keep] [--workdir DIR]`` (``hack/demo.sh`` installs what a
fresh machine lacks first). With ``--keep`` the control plane and the controller stay up;
``python hack/cluster.py stop --dir DIR`` ends them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hack"))
sys.path.insert(0, str(REPO))

from cluster import LocalCluster  # noqa: E402

# Kube-OVN and the IPAM provider cannot run here: the demo uses the test peers that emulate
# their documented behaviour (tests/emulators/), never product code.
from tests.emulators.ipam import IpamEmulator  # noqa: E402
from tests.emulators.kubeovn import KubeOvnEmulator  # noqa: E402

# Ready reasons that do not change by waiting (a refusal the sample set provokes on purpose).
SETTLED = {"Ready", "NamespaceNotAllowed", "ZoneExhausted", "ZoneNotFound", "PoolOverlapsSubnet"}


def load_samples() -> list[dict]:
    docs: list[dict] = []
    for f in sorted((REPO / "hack" / "sample").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(f.read_text()) if d]
    return docs


def converged(cluster: LocalCluster, expected_networks: int) -> bool:
    out = cluster.run_kubectl("get", "pxnet,pxzone", "-A", "-o", "json").stdout
    items = json.loads(out)["items"]
    nets = [i for i in items if i["kind"] == "ProxmoxNetwork"]
    zones = [i for i in items if i["kind"] == "ProxmoxNetworkZone"]
    if len(nets) != expected_networks:
        return False
    for obj in nets + zones:
        st = obj.get("status") or {}
        if st.get("observedGeneration") != obj["metadata"].get("generation") or not st.get("conditions"):
            return False
    for n in nets:
        ready = next((c for c in n["status"]["conditions"] if c["type"] == "Ready"), {})
        if ready.get("reason") not in SETTLED:
            return False
    return all((z.get("status") or {}).get("allocatedVLANs") is not None for z in zones)


def gateway_table(cluster: LocalCluster) -> str:
    """HA_Chassis_Group name, its network and members (chassis=priority), one line each."""
    chassis = json.loads(cluster.nbctl("--format=json", "--columns=_uuid,chassis_name,priority", "list", "HA_Chassis"))
    members = {row[0][1]: (row[1], row[2]) for row in chassis["data"]}
    groups = json.loads(cluster.nbctl("--format=json", "--columns=name,external_ids,ha_chassis", "list",
                                      "HA_Chassis_Group"))
    lines = [f"{'GROUP':44} {'NETWORK':24} CHASSIS=PRIORITY"]
    for name, ids, refs in sorted(groups["data"]):
        uuids = [r[1] for r in refs[1]] if refs[0] == "set" else [refs[1]]
        ms = sorted((members[u] for u in uuids if u in members), key=lambda m: -m[1])
        network = dict(ids[1]).get("network", "")
        lines.append(f"{name:44} {network:24} " + ", ".join(f"{c}={p}" for c, p in ms))
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default=str(REPO / ".run" / "demo"))
    ap.add_argument("--keep", action="store_true", help="leave the control plane and controller running")
    ap.add_argument("--timeout", type=float, default=90.0)
    args = ap.parse_args()

    workdir = Path(args.workdir)
    if workdir.exists():
        try:
            LocalCluster.attach(workdir).stop()
        except Exception:
            pass
    print("==> starting kube-apiserver + etcd + OVN NB/SB + ovn-northd on 127.0.0.1 (CRDs and RBAC from manifests/)",
          flush=True)
    cluster = LocalCluster(workdir, detach=args.keep)
    cluster.start()
    controller = None
    peers: list = []
    try:
        print(f"    control plane up in {cluster.start_seconds:.1f}s at {cluster.server}", flush=True)
        print("==> starting the Kube-OVN and IPAM emulators (tests/emulators/) as the peers", flush=True)
        peers = [KubeOvnEmulator(cluster, manage_nb=True).start(), IpamEmulator(cluster).start()]
        samples = load_samples()
        print(f"==> applying {len(samples)} sample objects from hack/sample/", flush=True)
        cluster.apply_docs(samples, "sample objects")
        # What Kube-OVN's controller would report for the provider network.
        cluster.run_kubectl(
            "patch", "provider-networks.kubeovn.io", "physnet1", "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"ready": True, "readyNodes": ["pve-1", "pve-2", "pve-3"]}}),
        )
        log_path = workdir / "controller.log"
        print(f"==> running proxmox-network-controller as {cluster.controller_user} (log: {log_path})", flush=True)
        controller = subprocess.Popen(
            [
                sys.executable, "-m", "controller.main",
                f"--kubeconfig={cluster.controller_kubeconfig}",
                "--manage-gateway-chassis=true",
                f"--ovn-nb-address={cluster.nb_tcp}",
                "--metrics-bind-address=0",
                "--health-probe-bind-address=0",
                "--log-format=console",
            ],
            cwd=REPO,
            stdout=open(log_path, "wb"),
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
            start_new_session=args.keep,
        )
        expected = sum(1 for d in samples if d["kind"] == "ProxmoxNetwork")
        deadline = time.monotonic() + args.timeout
        while not converged(cluster, expected):
            if controller.poll() is not None:
                print(log_path.read_text()[-4000:], file=sys.stderr)
                raise SystemExit(f"controller exited with {controller.returncode}")
            if time.monotonic() > deadline:
                raise SystemExit(f"not converged after {args.timeout}s; see {log_path}")
            time.sleep(0.2)
        print("==> kubectl get pxzone,pxnet -A", flush=True)
        print(cluster.run_kubectl("get", "pxzone,pxnet", "-A").stdout.decode(), flush=True)
        print("==> kubectl get pxnet -A -o wide   (the Reason column is priority 1)", flush=True)
        print(cluster.run_kubectl("get", "pxnet", "-A", "-o", "wide").stdout.decode(), flush=True)
        print("==> Kube-OVN Vlans the controller created", flush=True)
        print(
            cluster.run_kubectl(
                "get", "vlans.kubeovn.io", "-o",
                "custom-columns=NAME:.metadata.name,ID:.spec.id,PROVIDER:.spec.provider,"
                "ZONE:.metadata.labels.proxmox\\.cozystack\\.io/zone,FINALIZERS:.metadata.finalizers",
            ).stdout.decode(),
            flush=True,
        )
        print("==> OVN NB: the HA_Chassis_Group of each bound network's router port (highest priority is active)",
              flush=True)
        print(gateway_table(cluster), flush=True)
        print("==> OVN SB (ovn-northd): the chassis-redirect ports that answer the VMs' ARP", flush=True)
        cr = cluster.sbctl("--bare", "--columns=logical_port", "find", "Port_Binding", "type=chassisredirect")
        print("\n".join(sorted(cr.split())) + "\n", flush=True)
        if args.keep:
            print(f"==> left running; KUBECONFIG={cluster.admin_kubeconfig} {cluster.kubectl} get pxnet -A")
            print(f"    stop with: python hack/cluster.py stop --dir {workdir} (and kill {controller.pid})")
            controller = None
        return 0
    finally:
        for p in peers:
            p.stop()
        if controller is not None:
            controller.terminate()
            try:
                controller.wait(timeout=10)
            except subprocess.TimeoutExpired:
                controller.kill()
        if not args.keep:
            cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
