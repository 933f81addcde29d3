"""The main job on real input: a local control plane with the real kube-ovn-controller and
in-cluster IPAM provider, the sample zones and networks of hack/sample/, the controller running
as its own user, and the result as ``kubectl get pxzone,pxnet -A`` and the OVN NB/SB show it.

Where the bed's node can start (root, containerd, the node's binaries; hack/bed/node.py) the
controller runs as it does in a cluster: the Deployment of manifests/ (``kubectl apply -k
hack/deploy-overlay``, hack/bed/deploy.py) on the bed's node, its image built here by
hack/build-image.sh (cached), two pods of which one leads; the demo prints
``kubectl get deploy,pods -n proxmox-network-system -o wide``. Elsewhere, or with
``--subprocess``, it says why in one line and runs the controller as a subprocess with the
controller user's kubeconfig, as before issue 17.

Usage: ``python hack/demo.py [--keep] [--workdir DIR] [--subprocess]`` (``hack/demo.sh``
installs what a fresh machine lacks first, the peers included). With ``--keep`` the control
plane, the peers and the controller stay up; ``python hack/cluster.py stop --dir DIR`` ends
the bed, its peers and its node with the controller's pods (a subprocess controller's pid is
printed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from kubernetes.client import CoreV1Api, CustomObjectsApi

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the controller's own package (hack/bed/deploy.py reads its Lease identities)

from hack.bed import (  # noqa: E402
    OVN_PREFIX, PEERS, ClusterError, DataPlane, LocalCluster, Node, NodeError, Vm, _read_versions, default_bin_dir,
    ovsdb_rows, ovsdb_set,
)
from hack.bed.deploy import NAMESPACE, ControllerDeployment, DeployError, build_image  # noqa: E402
from hack.bed.world import SERVER, World  # noqa: E402
from hack.tools.vms import real_pod, vm_for_network  # noqa: E402
from hack.tools.wait import wait_for  # noqa: E402

# Ready reasons that do not change by waiting (a refusal the sample set provokes on purpose).
SETTLED = {"Ready", "NamespaceNotAllowed", "ZoneExhausted", "ZoneNotFound", "PoolOverlapsSubnet"}
CHASSIS_ANNOTATION = "ovn.kubernetes.io/chassis"
KUBE_OVN_FINALIZER = "kubeovn.io/kube-ovn-controller"
# The sample's "one network too many" for the one-VLAN zone pve-edge, applied once edge-1 holds
# that VLAN: of two networks applied together either may get the last ID first, and edge-2,
# which has no Subnet, would then wait at SubnetNotFound with edge-1 ZoneExhausted.
LATE = ("tenant-beta", "edge-2")
FIRST = ("tenant-beta", "edge-1")


def load_samples(subdir: str = "") -> list[dict]:
    """The sample objects of ``hack/sample/<subdir>`` (its ``*.yaml``, in name order)."""
    docs: list[dict] = []
    for f in sorted((REPO / "hack" / "sample" / subdir).glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(f.read_text()) if d]
    return docs


# --------------------------------------------------------------------------- steps


def peer_lines(cluster: LocalCluster) -> list[str]:
    """One line per real peer: what it is, its version, pid, user and log."""
    v = _read_versions()
    kube_ovn_log = cluster.workdir / "kube-ovn-controller.log"
    logged = re.search(r"^\s*Version:\s*(\S+)", kube_ovn_log.read_text(errors="replace"), re.M)
    users = {"kube-ovn-controller": cluster.kube_ovn_user, "ipam-provider": cluster.ipam_user}
    what = {
        "kube-ovn-controller": (
            f"kube-ovn-controller {v['KUBE_OVN_VERSION']} (github.com/kubeovn/kube-ovn; "
            f"its log says Version: {logged.group(1) if logged else '?'})"
        ),
        "ipam-provider": (
            f"in-cluster IPAM provider {v['IPAM_PROVIDER_VERSION']} (sigs.k8s.io/cluster-api-ipam-provider-in-cluster, "
            f"with the IPAddress/IPAddressClaim/Cluster CRDs of cluster-api {v['CLUSTER_API_VERSION']})"
        ),
    }
    out = []
    for name in PEERS:
        out.append(f"    {what[name]}")
        out.append(f"      pid {cluster.peer_pid(name)}, as {users[name]}, log {cluster.workdir / (name + '.log')}")
    out.append(f"    binaries built by hack/build-peers.sh in {cluster.peers_dir / 'bin'}")
    out.extend(ovn_lines())
    return out


def ovn_lines() -> list[str]:
    """What OVS/OVN the bed runs: each tool's own ``--version`` (the Kube-OVN build shows
    "+g<commit>", hack/build-ovn.sh) and where it comes from."""
    out = []
    for tool in ("ovn-northd", "ovn-nbctl", "ovsdb-server"):
        path = shutil.which(tool) or tool
        r = subprocess.run([path, "--version"], capture_output=True, text=True)
        first = (r.stdout or r.stderr).splitlines()[0] if (r.stdout or r.stderr) else "?"
        out.append(f"    {first}  ({path})")
    if OVN_PREFIX is not None:
        out.append(f"    OVS and OVN built with Kube-OVN's patches by hack/build-ovn.sh in {OVN_PREFIX}")
    return out


def agent_lines(cluster: LocalCluster) -> list[str]:
    """Kube-OVN's node agent on each trunk node: its version (its own log's), pid, user, log,
    and who wrote each trunk Node's chassis annotation and provider ready label (the Node's
    managed fields)."""
    from hack.bed.node_agent import AGENT_USER, managed_by_agent

    dp = cluster.dataplane
    assert dp is not None
    v = _read_versions()
    label = f"{dp.provider}.provider-network.kubernetes.io/ready"
    out = []
    for name, agent in dp.agents.items():
        logged = re.search(r"^\s*Version:\s*(\S+)", agent.log.read_text(errors="replace"), re.M)
        pid = (agent.dir / "kube-ovn-daemon.pid").read_text().strip()
        meta = json.loads(cluster.run_kubectl("get", "node", name, "--show-managed-fields", "-o", "json").stdout)
        writers = [
            f"{what} {value!r} by {'kube-ovn-daemon' if managed_by_agent(meta, field) else 'someone else'}"
            for what, value, field in (
                ("chassis annotation", (meta["metadata"].get("annotations") or {}).get(CHASSIS_ANNOTATION),
                 ("f:annotations", f"f:{CHASSIS_ANNOTATION}")),
                ("ready label", (meta["metadata"].get("labels") or {}).get(label), ("f:labels", f"f:{label}")),
            )
        ]
        out.append(f"    {name}: kube-ovn-cni {v['KUBE_OVN_VERSION']} (kube-ovn-daemon; its log says Version: "
                   f"{logged.group(1) if logged else '?'}), pid {pid}, as {AGENT_USER}, log {agent.log}")
        out.append(f"      its Node's {'; '.join(writers)} (managed fields)")
    return out


def register_chassis(cluster: LocalCluster, nodes: list[dict]) -> list[str]:
    """Each trunk Node's chassis in the SB, as ovn-controller on that node would register it:
    name = the Node's chassis annotation, hostname = the Node's name (kube-ovn-controller's
    chassis GC deletes a chassis whose hostname names no Node), one geneve encap each (the
    SB allows one encap per type and IP). One transaction per chassis, so the GC never sees
    one without its hostname."""
    names = []
    for i, node in enumerate(nodes, start=11):
        chassis = node["metadata"]["annotations"][CHASSIS_ANNOTATION]
        cluster.sbctl("--may-exist", "chassis-add", chassis, "geneve", f"127.0.0.{i}",
                      "--", "set", "Chassis", chassis, f"hostname={node['metadata']['name']}")
        names.append(chassis)
    return names


def pending(cluster: LocalCluster, expected_networks: int, chassis: list[str]) -> str:
    """What the demo still waits for ("" once everything has settled)."""
    out = cluster.run_kubectl("get", "pxnet,pxzone", "-A", "-o", "json").stdout
    items = json.loads(out)["items"]
    nets = [i for i in items if i["kind"] == "ProxmoxNetwork"]
    zones = [i for i in items if i["kind"] == "ProxmoxNetworkZone"]
    if len(nets) != expected_networks:
        return f"{len(nets)} of {expected_networks} networks"
    for obj in nets + zones:
        st = obj.get("status") or {}
        if st.get("observedGeneration") != obj["metadata"].get("generation") or not st.get("conditions"):
            return f"{obj['kind']} {obj['metadata']['name']} not observed yet"
    for n in nets:
        ready = next((c for c in n["status"]["conditions"] if c["type"] == "Ready"), {})
        if ready.get("reason") not in SETTLED:
            return f"network {n['metadata']['namespace']}/{n['metadata']['name']} at {ready.get('reason')}"
    if not all((z.get("status") or {}).get("allocatedVLANs") is not None for z in zones):
        return "zone counts"
    tagged = {r["name"] for r in ovsdb_rows(cluster.sbctl, "Chassis", columns="name,external_ids")
              if r["external_ids"].get("vendor") == "kube-ovn"}
    untagged = [c for c in chassis if c not in tagged]
    return f"kube-ovn-controller to tag chassis {untagged}" if untagged else ""


def gateway_table(cluster: LocalCluster) -> str:
    """HA_Chassis_Group name, its network and members (chassis=priority), one line each."""
    members = {r["_uuid"]: (r["chassis_name"], r["priority"])
               for r in ovsdb_rows(cluster.nbctl, "HA_Chassis", columns="_uuid,chassis_name,priority")}
    lines = [f"{'GROUP':44} {'NETWORK':24} CHASSIS=PRIORITY"]
    for g in sorted(ovsdb_rows(cluster.nbctl, "HA_Chassis_Group", columns="name,external_ids,ha_chassis"), key=lambda g: g["name"]):
        ms = sorted((members[u] for u in ovsdb_set(g["ha_chassis"]) if u in members), key=lambda m: -m[1])
        lines.append(f"{g['name']:44} {g['external_ids'].get('network', ''):24} "
                     + ", ".join(f"{c}={p}" for c, p in ms))
    return "\n".join(lines) + "\n"


def localnet_table(cluster: LocalCluster) -> str:
    """Kube-OVN's localnet ports: port, switch, VLAN tag, provider network, who made it."""
    lines = [f"{'PORT':32} {'SWITCH':24} {'TAG':>4}  {'NETWORK':10} VENDOR"]
    for p in sorted(ovsdb_rows(cluster.nbctl, "Logical_Switch_Port", "type=localnet", columns="name,tag,options,external_ids"),
                    key=lambda p: p["name"]):
        tag = p["tag"] if not isinstance(p["tag"], list) else ""
        lines.append(f"{p['name']:32} {p['external_ids'].get('ls', ''):24} {tag!s:>4}  "
                     f"{p['options'].get('network_name', ''):10} {p['external_ids'].get('vendor', '')}")
    return "\n".join(lines) + "\n"


def router_port_table(cluster: LocalCluster) -> str:
    """Kube-OVN's router ports: router, port, networks, who made it, the HA chassis group it points at."""
    groups = {g["_uuid"]: g["name"] for g in ovsdb_rows(cluster.nbctl, "HA_Chassis_Group", columns="_uuid,name")}
    lines = [f"{'ROUTER':13} {'PORT':36} {'NETWORKS':15} {'VENDOR':9} HA_CHASSIS_GROUP"]
    ports = ovsdb_rows(cluster.nbctl, "Logical_Router_Port", columns="name,networks,external_ids,ha_chassis_group")
    for p in sorted(ports, key=lambda p: (p["external_ids"].get("lr", ""), p["name"])):
        group = ", ".join(groups.get(u, u) for u in ovsdb_set(p["ha_chassis_group"])) or "-"
        lines.append(f"{p['external_ids'].get('lr', ''):13} {p['name']:36} {','.join(ovsdb_set(p['networks'])):15} "
                     f"{p['external_ids'].get('vendor', ''):9} {group}")
    return "\n".join(lines) + "\n"


def chassis_table(cluster: LocalCluster) -> str:
    lines = [f"{'CHASSIS':20} {'HOSTNAME':9} VENDOR"]
    for c in sorted(ovsdb_rows(cluster.sbctl, "Chassis", columns="name,hostname,external_ids"), key=lambda c: c["hostname"]):
        lines.append(f"{c['name']:20} {c['hostname']:9} {c['external_ids'].get('vendor', '')}")
    return "\n".join(lines) + "\n"


def kubectl_out(cluster: LocalCluster, *args: str) -> str:
    return cluster.run_kubectl(*args).stdout.decode()


def why_no_node(workdir: Path) -> str:
    """Why the controller cannot run as a pod here ("" when the node can start): what
    :meth:`node.Node.check` names (root, containerd and its tools, the node's binaries)."""
    try:
        Node(workdir, default_bin_dir()).check()
    except NodeError as e:
        return str(e)
    return ""


def start_subprocess(cluster: LocalCluster, log_path: Path, keep: bool) -> subprocess.Popen:
    """The controller as a subprocess with the controller user's kubeconfig (no node here)."""
    return subprocess.Popen(
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
        start_new_session=keep,
    )


# The overlay Subnet the demo gives each VPC of the sample for its pods (not Proxmox-backed).
OVERLAY_CIDRS = {"tenant-alpha": "10.111.0", "tenant-beta": "10.113.0"}


def real_pods(cluster: LocalCluster, nets: list[dict]) -> dict[tuple[str, str], tuple[Vm | None, Vm | None]]:
    """With a trunk kubelet: per network, a real pod on its Subnet and one on its VPC's overlay
    Subnet (made here, ``<vpc>-pods``), placed by the scheduler on the trunk node and plumbed
    by Kube-OVN's agent there (hack/tools/vms.py ``real_pod``); {} without one."""
    if not cluster.trunk_kubelets:
        return {}
    tk = next(iter(cluster.trunk_kubelets.values()))
    core = CoreV1Api(cluster.api_client("admin"))
    co = CustomObjectsApi(core.api_client)
    vpc_of, users = {}, {}
    for n in nets:
        ns, subnet = n["metadata"]["namespace"], n["spec"]["subnet"]
        sub = co.get_cluster_custom_object("kubeovn.io", "v1", "subnets", subnet)
        vpc_of[subnet] = (sub.get("spec") or {}).get("vpc", "")
        users.setdefault(subnet, set()).add(ns)
    overlays = {}
    for vpc, prefix in OVERLAY_CIDRS.items():
        if vpc in vpc_of.values():
            overlays[vpc] = f"{vpc}-pods"
            users[f"{vpc}-pods"] = {n["metadata"]["namespace"] for n in nets if vpc_of[n["spec"]["subnet"]] == vpc}
            cluster.apply_docs([{"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": f"{vpc}-pods"},
                                 "spec": {"vpc": vpc, "cidrBlock": f"{prefix}.0/24", "gateway": f"{prefix}.1",
                                          "protocol": "IPv4"}}], f"the overlay Subnet of {vpc}")
    # Each Subnet names the namespaces that use it (spec.namespaces), and so does its Vpc (Kube-OVN
    # refuses a Subnet namespace its custom VPC does not name); kube-ovn-controller then lists
    # them in each namespace's ovn.kubernetes.io/logical_switch, which is what the pod admission
    # policy lets a pod of that namespace ask for.
    vpc_users: dict[str, set[str]] = {}
    for subnet, namespaces in users.items():
        vpc = vpc_of.get(subnet) or subnet.removesuffix("-pods")
        vpc_users.setdefault(vpc, set()).update(namespaces)
    for vpc, namespaces in vpc_users.items():
        co.patch_cluster_custom_object("kubeovn.io", "v1", "vpcs", vpc, {"spec": {"namespaces": sorted(namespaces)}})
    for subnet, namespaces in users.items():
        co.patch_cluster_custom_object("kubeovn.io", "v1", "subnets", subnet, {"spec": {"namespaces": sorted(namespaces)}})
    for subnet, namespaces in users.items():
        for ns in namespaces:
            wait_for(lambda ns=ns, subnet=subnet: subnet in (core.read_namespace(ns).metadata.annotations or {}).get(
                "ovn.kubernetes.io/logical_switch", "").split(","), timeout=60,
                what=f"kube-ovn-controller binding namespace {ns} to Subnet {subnet}")
    jobs = {}
    with ThreadPoolExecutor(max_workers=8) as pool:
        for n in nets:
            ns, name, sub = n["metadata"]["namespace"], n["metadata"]["name"], n["spec"]["subnet"]
            jobs[(ns, name, "subnet")] = pool.submit(real_pod, tk, core, ns, sub, f"pod-{name}"[:40])
            vpc = vpc_of[sub]
            if vpc in overlays:
                jobs[(ns, name, "overlay")] = pool.submit(real_pod, tk, core, ns, overlays[vpc],
                                                          f"pod-{name}-overlay"[:40])
        done = {k: f.result() for k, f in jobs.items()}
    return {(n["metadata"]["namespace"], n["metadata"]["name"]):
            (done.get((n["metadata"]["namespace"], n["metadata"]["name"], "subnet")),
             done.get((n["metadata"]["namespace"], n["metadata"]["name"], "overlay"))) for n in nets}


def columns(rows: list[tuple[str, ...]]) -> str:
    """``rows`` (the first one the header) as left-aligned columns two spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows) + "\n"


def ready_networks(cluster: LocalCluster) -> list[dict]:
    """Every ProxmoxNetwork whose Ready condition is True."""
    nets = json.loads(cluster.run_kubectl("get", "pxnet", "-A", "-o", "json").stdout)["items"]
    return [n for n in nets
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions") or [])]


def wire_table(cluster: LocalCluster, dp: DataPlane) -> str:
    """One VM per Ready network (hack/tools/vms.py): its VLAN and address, the ARP answer from its
    gateway (the MAC), pings to the gateway (replies of 3), the chassis bound to the router
    port's ``cr-`` (the one answering), pings to the VM of another tenant (replies of 3), and,
    with a trunk kubelet, pings to a real pod on the network's Subnet and to one on its VPC's
    overlay Subnet (:func:`real_pods`)."""
    co = CustomObjectsApi(cluster.api_client("admin"))
    ready = ready_networks(cluster)
    ready.sort(key=lambda n: (n["metadata"]["namespace"], n["metadata"]["name"]))
    pods = real_pods(cluster, ready)
    vms = []
    for n in ready:
        ns, name = n["metadata"]["namespace"], n["metadata"]["name"]
        vms.append((ns, name, n, vm_for_network(dp, co, ns, name, f"{ns}-{name}"[:20])))
    bound = {r["_uuid"]: r["name"] for r in ovsdb_rows(cluster.sbctl, "Chassis", columns="_uuid,name")}
    crs = {r["logical_port"]: bound.get(str(r["chassis"]), "-")
           for r in ovsdb_rows(cluster.sbctl, "Port_Binding", "type=chassisredirect", columns="logical_port,chassis")}
    rows = [("NETWORK", "VLAN", "VM ADDRESS", "GATEWAY", "ARP REPLY", "PINGS", "ANSWERING CHASSIS", "OTHER TENANT'S VM")
            + (("POD ON THE SUBNET", "OVERLAY POD") if pods else ())]

    def to_pod(vm: Vm, pod: Vm | None) -> str:
        if pod is None:
            return "-"
        ip = pod.address.split("/")[0]
        wait_for(lambda: vm.ping(ip, count=1, timeout=1) == 1, timeout=30, interval=0, what=f"{vm.name} -> {ip}")
        return f"{ip}: {vm.ping(ip, count=3, timeout=1)}/3"

    for ns, name, n, vm in vms:
        wait_for(lambda: vm.ping(vm.gateway, count=1, timeout=1) == 1, timeout=30, interval=0,
                 what=f"{ns}/{name}'s VM pinging its gateway")
        arp = vm.arping(vm.gateway, count=1, timeout=1)
        other = next((o for o in vms if o[0] != ns), None)
        answering = next((c for port, c in crs.items() if port.endswith(f"-{n['spec']['subnet']}")), "-")
        rows.append((f"{ns}/{name}", str(vm.vlan), vm.address, vm.gateway, arp[0][1] if arp else "none",
                     f"{vm.ping(vm.gateway, count=3, timeout=1)}/3", answering,
                     f"{other[3].address.split('/')[0]}: {vm.ping(other[3].address.split('/')[0], count=3, timeout=1)}/3"
                     if other else "-")
                    + ((to_pod(vm, pods[(ns, name)][0]), to_pod(vm, pods[(ns, name)][1])) if pods else ()))
    return columns(rows)


def egress_table(cluster: LocalCluster, dp: DataPlane, world: World) -> str:
    """Per VpcEgressGateway of the sample (hack/sample/egress/), once Kube-OVN says it is Ready:
    a VM on the first Ready network among its policy's subnets pings the world's server,
    fetches its payload over HTTP, and asks the API server's ``/readyz`` through the gateway as
    a joining worker would; the source address the world saw for that transfer."""
    co = CustomObjectsApi(cluster.api_client("admin"))
    core = CoreV1Api(co.api_client)
    ready = {n["spec"]["subnet"]: n for n in ready_networks(cluster)}
    rows = [("VPC", "EGRESS GATEWAY", "ITS NODE", "VM ADDRESS", f"PINGS TO {SERVER}", "SOURCE THE WORLD SAW",
             "TRANSFER", "API SERVER /readyz")]
    for gw in co.list_cluster_custom_object("kubeovn.io", "v1", "vpc-egress-gateways")["items"]:
        ns, name, vpc = gw["metadata"]["namespace"], gw["metadata"]["name"], gw["spec"]["vpc"]
        wait_for(lambda: (co.get_namespaced_custom_object("kubeovn.io", "v1", ns, "vpc-egress-gateways", name)
                          .get("status") or {}).get("ready"), timeout=120, what=f"VpcEgressGateway {ns}/{name} Ready")
        pods = core.list_namespaced_pod(ns, label_selector=f"ovn.kubernetes.io/vpc-egress-gateway={name}").items
        node = ",".join(sorted({p.spec.node_name for p in pods if p.spec.node_name})) or "-"
        subnet = next((s for p in gw["spec"].get("policies") or [] for s in p.get("subnets") or [] if s in ready), None)
        if subnet is None:
            rows.append((vpc, f"{ns}/{name}", node, "-", "no Ready network", "-", "-", "-"))
            continue
        n = ready[subnet]
        vm = vm_for_network(dp, co, n["metadata"]["namespace"], n["metadata"]["name"], f"egress-{vpc}"[:20])
        wait_for(lambda: vm.ping(SERVER, count=1, timeout=1) == 1, timeout=60, interval=0,
                 what=f"{vm.name} reaching {SERVER} through {ns}/{name}")
        pings = vm.ping(SERVER, count=3, timeout=1)
        seen_before = len(world.clients())
        rate = world.fetch(vm)
        seen = world.clients()[seen_before:]
        rows.append((vpc, f"{ns}/{name}", node, vm.address, f"{pings}/3", ",".join(sorted(set(seen))) or "-",
                     f"{world.payload_bytes >> 20} MiB at {rate:.0f} MiB/s",
                     World.readyz(vm, cluster.ca_file, cluster.controller_token)))
    return columns(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default=str(REPO / ".run" / "demo"))
    ap.add_argument("--keep", action="store_true", help="leave the control plane, the peers and the controller running")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--subprocess", action="store_true",
                    help="run the controller as a subprocess even where the bed's node could start")
    args = ap.parse_args()
    t0 = time.monotonic()

    workdir = Path(args.workdir)
    if workdir.exists():
        try:
            LocalCluster.attach(workdir).stop()
        except Exception:
            pass
    # The controller as a pod of its Deployment where the node can start, else a subprocess.
    no_node = "--subprocess given" if args.subprocess else why_no_node(workdir)
    archive = None
    if not no_node:
        try:
            archive = build_image()  # cached by content; minutes only after a change to the product
        except DeployError as e:
            no_node = f"the controller's image did not build ({str(e).splitlines()[-1]})"
    with_node = not no_node
    print("==> starting etcd, kube-apiserver, OVN NB/SB (Kube-OVN's schemas) and ovn-northd on 127.0.0.1, "
          "CRDs and RBAC from manifests/, and the real Kube-OVN and IPAM provider"
          + ("; a node (containerd, kubelet, kube-controller-manager, kube-scheduler)" if with_node else ""),
          flush=True)
    # The data plane's trunk is the sample's provider network, its trunk nodes pve-1..3
    # (hack/bed/dataplane.py; where it cannot run, the demo registers the sample's chassis by hand).
    trunk = {"dataplane_provider": "physnet1", "dataplane_node_prefix": "pve"}
    # With the node, the last trunk node runs a kubelet too, for the tenants' real pods and, behind
    # Multus, their VPCs' egress gateways.
    kubelets = 1 if with_node and OVN_PREFIX is not None else 0
    cluster = LocalCluster(workdir, detach=args.keep, with_peers=True, with_node=with_node,
                           trunk_kubelets=kubelets, multus=kubelets > 0, **trunk)
    try:
        cluster.start()
    except ClusterError as e:
        if not with_node:
            raise
        no_node, with_node = f"the node did not start ({str(e).splitlines()[0]})", False
        cluster = LocalCluster(workdir, detach=args.keep, with_peers=True, **trunk)
        cluster.start()
    controller = None
    world = None
    try:
        print(f"    bed up in {cluster.start_seconds:.1f}s at {cluster.server}; the real peers run "
              "(kube-ovn-controller leads with its VPC ovn-cluster up, the provider runs its workers):", flush=True)
        if cluster.node is not None:
            print(f"    node {cluster.node.name} ({cluster.node.ip}) Ready {cluster.node_ready_seconds:.1f}s after "
                  f"its kubelet started; its pods reach the API server and the NB at {cluster.node.gateway} "
                  "(the bridge's gateway, forwarded to 127.0.0.1)", flush=True)
        print("\n".join(peer_lines(cluster)), flush=True)
        samples = load_samples()
        late = [d for d in samples if d["kind"] == "ProxmoxNetwork"
                and (d["metadata"]["namespace"], d["metadata"]["name"]) == LATE]
        print(f"==> applying {len(samples) - len(late)} sample objects from hack/sample/ "
              f"({'/'.join(LATE)} comes once {'/'.join(FIRST)} holds its zone's one VLAN)", flush=True)
        dp = cluster.dataplane
        if dp is not None:  # the data plane's own trunk nodes, chassis and ProviderNetwork replace the sample's
            samples = [d for d in samples if d["kind"] not in ("Node", "ProviderNetwork")]
        cluster.apply_docs([d for d in samples if not any(d is x for x in late)], "sample objects")
        if cluster.multus and dp is not None:
            egress = load_samples("egress")
            cluster.apply_docs(egress, "the transit network and the egress gateways")
            world = World(dp, "transit", 100, "10.70.0.1/24", cluster.server, mtu=1400).start()
            print(f"==> egress: {len(egress)} objects from hack/sample/egress/ (the package's transit network px-transit "
                  "on VLAN 100, a VpcEgressGateway per tenant VPC in proxmox-network-system, made real by "
                  "kube-ovn-controller: its Deployment, pods on pve-3 in Kube-OVN's gateway image with net1 through "
                  f"Multus); the transit router's side at 10.70.0.1 with a server at {SERVER} and the API server "
                  "behind it (hack/bed/world.py)", flush=True)
        if dp is not None:
            chassis = [c.system_id for c in dp.chassis]
            ready_nodes = [c.name for c in dp.chassis]
            print(f"==> the Proxmox trunk on the wire (hack/bed/dataplane.py, {dp.start_seconds:.1f}s): nodes "
                  f"{', '.join(ready_nodes)}, each a network namespace with ovs-vswitchd and ovn-controller of "
                  "Kube-OVN's OVS/OVN build and Kube-OVN's node agent, their chassis registered in the SB by their "
                  "own ovn-controller; a trunk bridge where each VM is an access port with its VLAN tag. The agent "
                  "writes its Node's chassis annotation and provider labels, the bridge mappings and encap IP "
                  f"({cluster.agents_seconds:.1f}s from the agents' start); kube-ovn-controller the "
                  "ProviderNetwork's status. Stand-ins left (docs/testing.md): the provider bridge on the userspace "
                  "datapath, made by the bed; the API server reached over a forwarder; a mount namespace for "
                  "the agent's fixed paths.", flush=True)
            print("\n".join(agent_lines(cluster)), flush=True)
            for name, tk in cluster.trunk_kubelets.items():
                print(f"    {name} also runs containerd and a kubelet in its namespace with Kube-OVN's CNI (the kube-ovn "
                      f"plugin on its own kube-ovn-daemon), Ready {tk.ready_seconds:.1f}s after its start, tainted "
                      "so that only the tenants' pods go there", flush=True)
            t_pn = time.monotonic()

            def pn_ready() -> bool:
                pn = cluster.run_kubectl("get", "provider-networks.kubeovn.io", dp.provider, "-o", "json").stdout
                st = json.loads(pn).get("status") or {}
                return st.get("ready") is True and set(ready_nodes) <= set(st.get("readyNodes") or [])

            wait_for(pn_ready, timeout=90, interval=0.5, what=f"ProviderNetwork {dp.provider} ready on every trunk node")
            print(f"    ProviderNetwork {dp.provider} ready on {', '.join(ready_nodes)}, written by kube-ovn-controller "
                  f"{time.monotonic() - t_pn:.1f}s later (it rewrites that status every 30 s)", flush=True)
        else:
            nodes = [d for d in samples if d["kind"] == "Node"]
            print("==> playing the Proxmox nodes' own agents, which do not run here (kube-ovn-cni, ovn-controller; "
                  "no data plane: it needs root):", flush=True)
            chassis = register_chassis(cluster, nodes)
            print(f"    registered the trunk chassis {', '.join(chassis)} in the OVN SB, as ovn-controller would",
                  flush=True)
            ready_nodes = [n["metadata"]["name"] for n in nodes]
            # kube-ovn-controller writes this itself from the Nodes' ready labels, but only every
            # 30 s (with the data plane the bed has written it).
            cluster.run_kubectl(
                "patch", "provider-networks.kubeovn.io", "physnet1", "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {"ready": True, "readyNodes": ready_nodes}}),
            )
            print(f"    wrote ProviderNetwork physnet1 status ready=true, readyNodes={ready_nodes} "
                  "(what kube-ovn-controller "
                  "derives from the Nodes' ready labels every 30 s; written now so the demo does not wait)",
                  flush=True)
        log_path = workdir / "controller.log"
        deployment = None
        t_controller = time.monotonic()
        if cluster.node is not None:
            print("==> running proxmox-network-controller as the Deployment of manifests/ on node "
                  f"{cluster.node.name} (kubectl apply -k hack/deploy-overlay: the image of hack/build-image.sh, "
                  "the service account's token, two replicas of which the leader is Ready)", flush=True)
            deployment = ControllerDeployment(cluster)
            try:
                deployment.import_image(archive)  # type: ignore[arg-type]
                deployment.apply()
                rolled = deployment.wait_rolled_out(timeout=args.timeout)
            except DeployError as e:
                raise SystemExit(str(e)) from e
            print(f"    2 pods Running, {deployment.holder()} leads and is Ready, {rolled:.1f}s after the apply "
                  f"(logs: kubectl logs -n {NAMESPACE} <pod>)", flush=True)
        else:
            print(f"==> no node for the controller's pods here ({no_node}): running it as a subprocess instead",
                  flush=True)
            print(f"==> running proxmox-network-controller as {cluster.controller_user} (log: {log_path})", flush=True)
            controller = start_subprocess(cluster, log_path, args.keep)
        expected = sum(1 for d in samples if d["kind"] == "ProxmoxNetwork")
        deadline = t_controller + args.timeout
        while late:
            if controller is not None and controller.poll() is not None:
                print(log_path.read_text()[-4000:], file=sys.stderr)
                raise SystemExit(f"controller exited with {controller.returncode}")
            first = json.loads(kubectl_out(cluster, "get", "pxnet", "-n", FIRST[0], FIRST[1], "-o", "json"))
            if (first.get("status") or {}).get("vlan"):
                cluster.apply_docs(late, "the late sample network")
                print(f"    {'/'.join(FIRST)} holds VLAN {first['status']['vlan']}; applied {'/'.join(LATE)}", flush=True)
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"{'/'.join(FIRST)} got no VLAN in {args.timeout:.0f}s")
            time.sleep(0.2)
        while waiting := pending(cluster, expected, chassis):
            if controller is not None and controller.poll() is not None:
                print(log_path.read_text()[-4000:], file=sys.stderr)
                raise SystemExit(f"controller exited with {controller.returncode}")
            if time.monotonic() > deadline:
                where = deployment.describe() if deployment is not None else f"see {log_path}"
                raise SystemExit(f"not settled after {args.timeout:.0f}s (waiting for {waiting}); {where} "
                                 f"and the peers' logs in {workdir}")
            time.sleep(0.2)
        cluster.nbctl("--wait=sb", "sync", timeout=30)  # ovn-northd has caught up with the NB
        print(f"    settled {time.monotonic() - t_controller:.1f}s after the controller started", flush=True)

        print("==> kubectl get pxzone,pxnet -A", flush=True)
        print(kubectl_out(cluster, "get", "pxzone,pxnet", "-A"), flush=True)
        print("==> kubectl get pxnet -A -o wide   (the Reason column is priority 1)", flush=True)
        print(kubectl_out(cluster, "get", "pxnet", "-A", "-o", "wide"), flush=True)
        print("==> Kube-OVN Vlans the controller created (STATUS.SUBNETS written by kube-ovn-controller)", flush=True)
        print(kubectl_out(
            cluster, "get", "vlans.kubeovn.io", "-o",
            "custom-columns=NAME:.metadata.name,ID:.spec.id,PROVIDER:.spec.provider,"
            "ZONE:.metadata.labels.proxmox\\.cozystack\\.io/zone,FINALIZERS:.metadata.finalizers,"
            "STATUS.SUBNETS:.status.subnets",
        ), flush=True)
        print("==> Kube-OVN Subnets of the sample (READY written by kube-ovn-controller)", flush=True)
        subnets = [d["metadata"]["name"] for d in samples if d["kind"] == "Subnet"]
        print(kubectl_out(
            cluster, "get", "subnets.kubeovn.io", *subnets, "-o",
            "custom-columns=NAME:.metadata.name,VPC:.spec.vpc,VLAN:.spec.vlan,CIDR:.spec.cidrBlock,"
            "READY:.status.conditions[?(@.type==\"Ready\")].status,FINALIZERS:.metadata.finalizers",
        ), end="", flush=True)
        subs = json.loads(kubectl_out(cluster, "get", "subnets.kubeovn.io", *subnets, "-o", "json"))["items"]
        without = [s["metadata"]["name"] for s in subs
                   if KUBE_OVN_FINALIZER not in (s["metadata"].get("finalizers") or [])]
        if without:
            print(f"    note: {len(without)} of {len(subs)} carry no {KUBE_OVN_FINALIZER} (Kube-OVN's own finalizer) "
                  "yet: kube-ovn-controller adds it once it has validated the Subnet, which needs its Vlan "
                  "(handleSubnetFinalizer, pkg/controller/subnet.go).", flush=True)
        print(flush=True)
        print("==> OVN NB: the localnet ports kube-ovn-controller made (tag = the Vlan's ID)", flush=True)
        print(localnet_table(cluster), flush=True)
        print("==> OVN NB: the router ports kube-ovn-controller made (<vpc>-<subnet>: Subnet with spec.vpc and "
              "logicalGateway: true), and the HA chassis group the controller pointed each at", flush=True)
        print(router_port_table(cluster), flush=True)
        print("==> OVN NB: the HA_Chassis_Group of each bound network's router port (highest priority is active)",
              flush=True)
        print(gateway_table(cluster), flush=True)
        print("==> OVN SB: the trunk chassis (VENDOR kube-ovn is kube-ovn-controller's tag)", flush=True)
        print(chassis_table(cluster), flush=True)
        print("==> OVN SB (ovn-northd): the chassis-redirect ports that answer the VMs' ARP", flush=True)
        cr = cluster.sbctl("--bare", "--columns=logical_port", "find", "Port_Binding", "type=chassisredirect")
        print("\n".join(sorted(cr.split())) + "\n", flush=True)
        if dp is not None:
            print("==> on the wire: a VM per Ready network, made as capmox makes it (its VLAN from the network's "
                  "status, its address claimed from the network's pool by the real IPAM provider), pinging its "
                  "gateway and another tenant's VM"
                  + ("; and real pods on the trunk kubelet's node (the scheduler placed them, Kube-OVN's CNI and "
                     "agent plumbed them): one on the network's Subnet, one on its VPC's overlay Subnet"
                     if cluster.trunk_kubelets else ""), flush=True)
            print(wire_table(cluster, dp), flush=True)
            if world is not None:
                print("==> egress on the wire: per tenant VPC with an egress gateway, a VM of its network reaches the "
                      "world through the gateway (SNAT: the world sees the gateway's transit address) and the API "
                      "server answers it as it would a CAPI worker joining", flush=True)
                print(egress_table(cluster, dp, world), flush=True)
        if deployment is not None:
            print(f"==> kubectl get deploy,pods -n {NAMESPACE} -o wide   (the controller as pods of its Deployment; "
                  "every replica Ready, the Lease names the leader)", flush=True)
            print(kubectl_out(cluster, "get", "deploy,pods", "-n", NAMESPACE, "-o", "wide"), flush=True)
        print(f"==> done in {time.monotonic() - t0:.0f}s", flush=True)
        if args.keep and deployment is not None:
            print("==> left running (control plane, kube-ovn-controller, IPAM provider, the node with the "
                  "controller's pods):")
            print(f"    KUBECONFIG={cluster.admin_kubeconfig} {cluster.kubectl} get pxnet -A")
            print(f"    stop with: python hack/cluster.py stop --dir {workdir}")
        elif args.keep:
            print("==> left running (control plane, kube-ovn-controller, IPAM provider, "
                  f"controller pid {controller.pid}):")
            print(f"    KUBECONFIG={cluster.admin_kubeconfig} {cluster.kubectl} get pxnet -A")
            print(f"    stop with: kill {controller.pid}; python hack/cluster.py stop --dir {workdir}")
            controller = None
        return 0
    finally:
        if world is not None and not args.keep:
            world.stop()
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
