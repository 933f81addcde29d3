"""The data plane of the local test bed (issue 25): real OVN chassis, a Proxmox trunk and VMs,
each in a network namespace the bed makes, on Kube-OVN's own OVS and OVN (hack/build-ovn.sh).

Used by ``LocalCluster(with_dataplane=True)`` (hack/bed/cluster.py; CLI ``start --dataplane``).
What it builds, with no kernel module (the kernel here has no openvswitch, 8021q or geneve
module, but TUN, veth, bridge and network namespaces):

* **Chassis** ``<tag>-ch<i>`` (default three), each a trunk node: a network namespace with
  its own ``ovsdb-server`` (``conf.db``), ``ovs-vswitchd`` and ``ovn-controller``, each with
  its own run directory (``OVS_RUNDIR``/``OVN_RUNDIR``: the ``br-int.mgmt`` sockets collide
  otherwise). Every bridge has ``datapath_type=netdev`` (OVS's userspace datapath):
  ``br-int`` (made by ovn-controller, fail mode secure), ``br-<provider>`` (the provider
  bridge under Kube-OVN's name for it, its uplink a veth to the trunk) and ``br-underlay``
  (a veth to the underlay, the chassis' geneve address on it). What OVS's own start-up
  sets in Kube-OVN's OVS container, and no more: the ``system-id`` (also in the run
  directory's ``system-id.conf``, as ``ovs-ctl --system-id=random`` writes
  ``/etc/openvswitch/system-id.conf``), ``external_ids`` ``system-id``, ``hostname`` (the
  trunk Node's name: kube-ovn-controller deletes an SB chassis whose hostname names no
  Node), ``ovn-remote`` (the bed's SB unix socket: a unix socket crosses network
  namespaces), ``ovn-encap-type=geneve`` and ``ovn-bridge-datapath-type=netdev``, and a
  ``<component>.<pid>.ctl`` link to each daemon's control socket (the name ``ovs-appctl``
  looks for by default). Kube-OVN's node agent (hack/bed/node_agent.py) then sets
  ``ovn-encap-ip``, ``ovn-bridge-mappings`` and ``ovn-chassis-mac-mappings``, and so the
  chassis' ovn-controller registers its SB ``Chassis`` row.
* **The underlay** ``<tag>-under``: a Linux bridge joining the chassis' geneve addresses
  (``198.18.<n>.<i>/24``, the benchmarking range, inside the bed's namespaces only).
* **The trunk** ``<tag>-trunk``: an OVS bridge in a namespace of its own (without 8021q a
  namespace cannot have a VLAN subinterface, and this kernel's bridge has no VLAN
  filtering): each chassis' uplink is a trunk port, each VM's veth an **access port with
  ``tag=<VLAN>``**, as a Proxmox VM NIC with ``tag=`` on a VLAN-aware bridge. Its MAC
  learning is OVS's legacy one (``mac-learning-fallback=true``), which moves a MAC to a new
  port at once, as a Linux bridge does.
* **VMs** (:meth:`DataPlane.add_vm`): a namespace ``<tag>-vm-<name>`` with ``eth0`` on the
  trunk, its address, its default route via the gateway, TX checksum offload off (the
  userspace datapath does not fill checksums in: TCP would fail).

Stop kills every process by its pid file and deletes the namespaces (with their veths);
:func:`cleanup_leftovers` does the same for a bed whose Python process died. Only addresses
inside namespaces the bed made are used, never the host's interfaces.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Sequence

import attrs

from hack.bed.procs import pid_alive, terminate_pid, wait_dead

DEFAULT_CHASSIS = 3
TRUNK_BRIDGE = "trunk"
UNDERLAY_BRIDGE = "br-underlay"
# The underlay's MTU (a veth's default) and the pods' MTU Kube-OVN derives from it: the
# tunnel NIC's MTU less its 100-byte budget for Geneve (kube-ovn pkg/daemon/config.go,
# pkg/util/const.go GeneveHeaderLength), 1400 as on a real cluster.
UNDERLAY_MTU = 1500
POD_MTU = UNDERLAY_MTU - 100
# The tools a VM uses, from Debian (hack/install-deps.sh): iputils-arping, iputils-ping, ethtool.
VM_TOOLS = ("arping", "ping", "ethtool", "ip")


class DataPlaneError(RuntimeError):
    """The data plane could not be built, or a step of it failed."""


def missing_prerequisites() -> list[str]:
    """What this machine lacks for a data plane (empty when it has everything): root,
    ``/dev/net/tun`` (the userspace datapath's internal ports), the VM tools."""
    out = []
    if os.geteuid() != 0:
        out.append("root (network namespaces, veths)")
    if not os.path.exists("/dev/net/tun"):
        out.append("/dev/net/tun")
    out += [t for t in VM_TOOLS if shutil.which(t) is None]
    return out


def _run(argv: Sequence[str], *, check: bool = True, timeout: float = 30, env: dict | None = None,
         input: str | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=env, input=input)
    if check and r.returncode != 0:
        raise DataPlaneError(f"{' '.join(argv)} failed ({r.returncode}): {(r.stderr or r.stdout).strip()}")
    return r


def _kill(pidfile: Path, sig: int = signal.SIGTERM, timeout: float = 5.0) -> None:
    """Stop the process of ``pidfile`` (SIGTERM, SIGKILL after ``timeout``; or SIGKILL at once)
    and remove the file; nothing when it names no live process."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        pid = None
    if pid is not None and sig == signal.SIGKILL and pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
        wait_dead(pid, timeout)
    elif pid is not None:
        terminate_pid(pid, timeout)
    pidfile.unlink(missing_ok=True)


def namespaces_with_prefix(prefix: str) -> list[str]:
    r = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.split() and line.split()[0].startswith(prefix)]


@attrs.define
class Chassis:
    """One trunk node: ``name`` (its Node), ``system_id`` (its SB Chassis), namespace
    ``ns``, geneve address ``encap_ip``, run directory ``rundir``."""

    name: str
    system_id: str
    ns: str
    encap_ip: str
    rundir: Path


@attrs.define
class Vm:
    """A VM on the trunk (access port ``port`` with ``vlan``), or a pod on a chassis'
    ``br-int`` (``port`` there, ``vlan`` 0): namespace ``ns``, ``address`` (CIDR),
    ``gateway``, ``mac`` of its ``eth0``."""

    name: str
    ns: str
    port: str
    vlan: int
    address: str
    gateway: str
    mac: str

    def run(self, *argv: str, timeout: float = 30, check: bool = False) -> subprocess.CompletedProcess:
        return _run(["ip", "netns", "exec", self.ns, *argv], check=check, timeout=timeout)

    def arping(self, target: str, count: int = 1, timeout: int = 1) -> list[tuple[str, str]]:
        """``count`` ARP requests for ``target``, one a second, waiting at most ``timeout``
        whole seconds (iputils arping's deadline is an integer); the replies as (address,
        MAC), MACs lower-case."""
        r = self.run("arping", "-c", str(count), "-w", str(max(1, int(timeout))), "-I", "eth0", target,
                     timeout=timeout + 10)
        return [(m.group(1), m.group(2).lower())
                for m in re.finditer(r"reply from (\S+) \[([0-9A-Fa-f:]+)\]", r.stdout)]

    def ping(self, target: str, count: int = 1, timeout: float = 1.0, interval: float = 0.2) -> int:
        """ICMP echo to ``target``; the number of replies."""
        r = self.run("ping", "-n", "-q", "-c", str(count), "-i", f"{interval:g}", "-W", f"{timeout:g}", target,
                     timeout=count * (interval + timeout) + 10)
        m = re.search(r"(\d+) (?:packets )?received", r.stdout)
        return int(m.group(1)) if m else 0


class Prober:
    """A probe running in a VM's namespace until :meth:`stop`: ``ping`` (ICMP echo) or
    ``arping`` (broadcast ARP requests, ``-b``: a fresh resolution each time) every
    ``interval`` seconds (hack/bed/arp_probe.py: iputils arping takes whole seconds only); each
    reply is recorded with the ``time.monotonic()`` it was read at.

    Use :meth:`first_reply_after`, :meth:`steady_after` and :meth:`longest_gap` on the recorded times.
    """

    REPLY = {"ping": re.compile(r"bytes from"), "arping": re.compile(r"reply from")}

    def __init__(self, vm: Vm, kind: str, target: str, interval: float = 0.1) -> None:
        argv = (["ping", "-n", "-i", f"{interval:g}", "-W", "1", target] if kind == "ping"
                else [sys.executable, str(Path(__file__).parent / "arp_probe.py"), "eth0", target, f"{interval:g}"])
        self.kind, self.replies, self.interval = kind, [], interval  # type: str, list[float], float
        self.seqs: set[int] = set()  # ping's icmp_seq of each reply (ping only)
        self.reply_at: dict[int, float] = {}  # icmp_seq -> when its reply was read (ping only)
        # stdbuf: both print through stdio, block-buffered into a pipe; each reply must arrive as it comes.
        self._proc = subprocess.Popen(["ip", "netns", "exec", vm.ns, "stdbuf", "-oL", *argv], stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if self.REPLY[self.kind].search(line):
                self.replies.append(time.monotonic())
                m = re.search(r"icmp_seq=(\d+)", line)
                if m:
                    self.seqs.add(int(m.group(1)))
                    self.reply_at[int(m.group(1))] = self.replies[-1]

    def lost(self) -> int:
        """Echo requests between the first and the last answered one that got no reply
        (ping only; those before the first reply wait for the VM's ARP resolution)."""
        return max(self.seqs) - min(self.seqs) + 1 - len(self.seqs) if self.seqs else 0

    def lost_at(self) -> list[float]:
        """When each lost echo request's reply was due (``time.monotonic()``): the reply time
        of the last answered request before it plus the interval per request since (ping
        only)."""
        out, last = [], None
        for seq in range(min(self.seqs, default=1), max(self.seqs, default=0) + 1):
            if seq in self.reply_at:
                last = seq
            elif last is not None:
                out.append(self.reply_at[last] + (seq - last) * self.interval)
        return out

    def first_reply_after(self, t: float) -> float | None:
        """Seconds from ``t`` to the first reply read after it, or None."""
        return next((r - t for r in list(self.replies) if r > t), None)

    def steady_after(self, after: float, run: int) -> float | None:
        """When the first of ``run`` consecutive ``icmp_seq`` numbers, all answered after
        ``after`` (``time.monotonic()``), was answered; None before there is such a run
        (ping only)."""
        seqs = sorted(q for q, t in list(self.reply_at.items()) if t > after)
        for i in range(len(seqs) - run + 1):
            if seqs[i + run - 1] - seqs[i] == run - 1:
                return self.reply_at[seqs[i]]
        return None

    def longest_gap(self, start: float, end: float) -> float:
        """The longest time without a reply in [start, end] (seconds): from ``start`` to the
        first reply, between two consecutive replies, or from the last reply to ``end``.

        With ``ping`` a stretch between two replies counts only when a request in it went
        unanswered (an ``icmp_seq`` between theirs is missing): when every request was
        answered, the gateway was there and the stretch is this prober's own (the pinger or
        this reader not scheduled on a busy machine; issue 28 saw 1.2 s with 0 lost under
        three pytest workers). ``arping`` numbers nothing: every stretch counts."""
        if self.kind != "ping":
            marks = [start, *(r for r in list(self.replies) if start < r < end), end]
            return max(b - a for a, b in zip(marks, marks[1:]))
        answered = sorted((seq, t) for seq, t in list(self.reply_at.items()) if start < t < end)
        if not answered:
            return end - start
        gaps = [answered[0][1] - start, end - answered[-1][1]]
        gaps += [t2 - t1 for (s1, t1), (s2, t2) in zip(answered, answered[1:]) if s2 - s1 > 1]
        return max(gaps)

    def stop(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)
        self._reader.join(5)


class DataPlane:
    """Chassis, underlay, trunk and VMs of one bed (see the module docstring).

    :param workdir: the bed's directory; the data plane's files go to ``<workdir>/dataplane``.
    :param ovn_prefix: Kube-OVN's OVS/OVN build (hack/build-ovn.sh).
    :param sb_remote: the bed's SB as ``unix:<path>``.
    :param provider: the ProviderNetwork the chassis' ``br-<provider>`` belongs to.
    :param chassis: how many trunk nodes.
    :param node_prefix: their Node names are ``<node_prefix>-<i>``.
    """

    def __init__(self, workdir: Path, ovn_prefix: Path, sb_remote: str, provider: str,
                 chassis: int = DEFAULT_CHASSIS, node_prefix: str = "trunk") -> None:
        self.workdir = Path(workdir).resolve()
        self.dir = self.workdir / "dataplane"
        self.prefix = ovn_prefix
        self.sb_remote = sb_remote
        self.provider = provider
        digest = hashlib.sha256(str(self.workdir).encode()).hexdigest()
        # Namespace and interface names: short (an interface name has at most 15 bytes).
        self.tag = f"px{digest[:5]}"
        self.underlay_net = f"198.18.{int(digest[5:7], 16)}"
        self.trunk_ns, self.under_ns = f"{self.tag}-trunk", f"{self.tag}-under"
        self.chassis = [
            Chassis(name=f"{node_prefix}-{i}", system_id=f"{self.tag}-{node_prefix}-{i}", ns=f"{self.tag}-ch{i}",
                    encap_ip=f"{self.underlay_net}.{i}", rundir=self.dir / f"ch{i}")
            for i in range(1, chassis + 1)
        ]
        self.vms: dict[str, Vm] = {}
        # Kube-OVN's name for the provider's OVS bridge (pkg/util ExternalBridgeName).
        self.provider_bridge = f"br-{provider}"
        # Each chassis' node agent (hack/bed/node_agent.NodeAgent), once the bed has started it.
        self.agents: dict[str, Any] = {}
        self.env = dict(os.environ, PATH=f"{ovn_prefix / 'bin'}:{ovn_prefix / 'sbin'}:{os.environ.get('PATH', '')}")
        self.start_seconds: float | None = None

    # ------------------------------------------------------------------ OVS in a namespace

    def _ovs_env(self, rundir: Path) -> dict[str, str]:
        r = str(rundir)
        return dict(self.env, OVS_RUNDIR=r, OVS_LOGDIR=r, OVS_DBDIR=r, OVN_RUNDIR=r, OVN_LOGDIR=r, OVN_DBDIR=r)

    def vsctl(self, ns: str, rundir: Path, *args: str) -> str:
        return _run(["ip", "netns", "exec", ns, "ovs-vsctl", f"--db=unix:{rundir / 'db.sock'}", "--timeout=10", *args],
                    env=self._ovs_env(rundir)).stdout

    def _start_ovsdb(self, ns: str, rundir: Path) -> None:
        rundir.mkdir(parents=True, exist_ok=True)
        db = rundir / "conf.db"
        db.unlink(missing_ok=True)
        _run(["ovsdb-tool", "create", str(db), str(self.prefix / "share" / "openvswitch" / "vswitch.ovsschema")],
             env=self.env)
        _run(["ip", "netns", "exec", ns, "ovsdb-server", str(db), f"--remote=punix:{rundir / 'db.sock'}",
              f"--unixctl={rundir / 'db.ctl'}", f"--pidfile={rundir / 'ovsdb-server.pid'}",
              f"--log-file={rundir / 'ovsdb-server.log'}", "-vconsole:off", "--detach"], env=self._ovs_env(rundir))
        self.vsctl(ns, rundir, "--no-wait", "init")

    def start_vswitchd(self, ns: str, rundir: Path) -> None:
        """``ovs-vswitchd`` of one namespace (again, after :meth:`kill_vswitchd`)."""
        _run(["ip", "netns", "exec", ns, "ovs-vswitchd", f"unix:{rundir / 'db.sock'}",
              f"--unixctl={rundir / 'ovs-vswitchd.ctl'}", f"--pidfile={rundir / 'ovs-vswitchd.pid'}",
              f"--log-file={rundir / 'ovs-vswitchd.log'}", "-vconsole:off", "--detach"], env=self._ovs_env(rundir))
        _ctl_link(rundir, "ovs-vswitchd")

    def kill_vswitchd(self, chassis: Chassis) -> None:
        """SIGKILL the chassis' ``ovs-vswitchd`` (a trunk node's datapath dies); returns once it is gone."""
        _kill(chassis.rundir / "ovs-vswitchd.pid", signal.SIGKILL)

    def ofctl(self, chassis: Chassis, *args: str) -> str:
        """``ovs-ofctl`` on the chassis' ``ovs-vswitchd`` (e.g. ``dump-flows br-int``)."""
        rd = chassis.rundir
        return _run(["ip", "netns", "exec", chassis.ns, "ovs-ofctl", *args], env=self._ovs_env(rd)).stdout

    def flow_packets(self, bridge: str, *needles: str) -> int:
        """The packets counted, over every chassis, by the OpenFlow flows of ``bridge`` whose
        text contains each of ``needles`` (a chassis whose vswitchd is down counts 0)."""
        total = 0
        for ch in self.chassis:
            try:
                flows = self.ofctl(ch, "dump-flows", bridge)
            except DataPlaneError:
                continue
            for line in flows.splitlines():
                m = re.search(r"n_packets=(\d+)", line)
                if m and all(n in line for n in needles):
                    total += int(m.group(1))
        return total

    def set_provider_bridge(self, *settings: str) -> None:
        """``ovs-vsctl set bridge br-<provider> <settings>`` on every chassis (e.g.
        ``other_config:mac-learning-fallback=true``)."""
        for ch in self.chassis:
            self.vsctl(ch.ns, ch.rundir, "set", "bridge", self.provider_bridge, *settings)

    def start_ovn_controller(self, chassis: Chassis) -> None:
        rd = chassis.rundir
        _run(["ip", "netns", "exec", chassis.ns, "ovn-controller", f"unix:{rd / 'db.sock'}",
              f"--unixctl={rd / 'ovn-controller.ctl'}", f"--pidfile={rd / 'ovn-controller.pid'}",
              f"--log-file={rd / 'ovn-controller.log'}", "-vconsole:off", "--detach"], env=self._ovs_env(rd))
        _ctl_link(rd, "ovn-controller")

    def stop_ovn_controller(self, chassis: Chassis) -> None:
        """Stop the chassis' ``ovn-controller`` as a node agent's shutdown does
        (``ovn-appctl exit``: it releases its port bindings and removes its Chassis rows
        from the SB); returns once the process is gone. :meth:`start_ovn_controller` starts
        it again (it registers anew)."""
        rd = chassis.rundir
        pidfile = rd / "ovn-controller.pid"
        pid = int(pidfile.read_text().strip()) if pidfile.exists() else None
        _run(["ovn-appctl", "-t", str(rd / "ovn-controller.ctl"), "exit"], env=self._ovs_env(rd), check=False)
        if pid is not None:
            wait_dead(pid, 10.0)
        _kill(pidfile)  # nothing when it is gone; SIGTERM when the exit did not end it

    def set_trunk_link(self, chassis: Chassis, up: bool) -> None:
        """The chassis' trunk link down or up at the trunk's side (a cable or switch port
        lost: its ``uplink`` has no carrier); its underlay, and so Geneve and BFD, stay up."""
        i = self.chassis.index(chassis) + 1
        _run(["ip", "-n", self.trunk_ns, "link", "set", f"t{i}", "up" if up else "down"])

    def reprovision(self, chassis: Chassis, system_id: str) -> Chassis:
        """The node's OVS re-provisioned under a new ``system-id``, as an operator does it:
        its ovn-controller stops as at a node agent's shutdown (its SB Chassis row goes, its
        bindings are released), the system-id changes (OVS's ``external_ids`` and
        ``system-id.conf``), ovn-controller starts again (a new SB Chassis), and the node's
        agent is restarted: Kube-OVN's agent reads ``system-id.conf`` and writes the Node's
        ``ovn.kubernetes.io/chassis`` annotation at its start only (cmd/daemon
        ``initChassisAnno``). Returns the chassis as it is now (also in :attr:`chassis`) once
        the agent runs again; the annotation follows without the caller.

        :raises DataPlaneError: a step failed, or the chassis has no running agent.
        """
        agent = self.agents.get(chassis.name)
        if agent is None:
            raise DataPlaneError(f"{chassis.name} has no node agent to restart")
        agent.stop()
        self.stop_ovn_controller(chassis)
        self.vsctl(chassis.ns, chassis.rundir, "set", "open_vswitch", ".", f'external_ids:system-id="{system_id}"')
        (chassis.rundir / "system-id.conf").write_text(system_id)
        new = attrs.evolve(chassis, system_id=system_id)
        self.chassis[self.chassis.index(chassis)] = new
        self.start_ovn_controller(new)
        agent.chassis = new
        agent.start()
        return new

    def _veth(self, a: str, a_ns: str, b: str, b_ns: str) -> None:
        """A veth pair ``a`` in ``a_ns`` and ``b`` in ``b_ns``, both up (made inside ``a_ns``,
        so no name meets the host's interfaces)."""
        _run(["ip", "-n", a_ns, "link", "add", a, "type", "veth", "peer", "name", b, "netns", b_ns])
        _run(["ip", "-n", a_ns, "link", "set", a, "up"])
        _run(["ip", "-n", b_ns, "link", "set", b, "up"])

    def _netns(self, ns: str) -> None:
        _run(["ip", "netns", "add", ns])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Build the namespaces and start every process (the chassis register in the SB once
        their node agent has set their encap IP: :meth:`wait_registered`).

        :raises DataPlaneError: a prerequisite is missing or a step failed (what was built is removed).
        """
        missing = missing_prerequisites()
        if missing:
            raise DataPlaneError(f"the data plane needs {', '.join(missing)}")
        t0 = time.monotonic()
        cleanup_leftovers(self.workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self._netns(self.trunk_ns)
            trunk_rd = self.dir / "trunk"
            self._start_ovsdb(self.trunk_ns, trunk_rd)
            self.start_vswitchd(self.trunk_ns, trunk_rd)
            # The trunk stands for a Proxmox host's Linux bridge, whose MAC learning moves a
            # MAC to a new port at once: OVS's legacy learning, not Kube-OVN's patched one
            # (f627b772 moves a learned MAC only once the entry is 10 s old).
            self.vsctl(self.trunk_ns, trunk_rd, "add-br", TRUNK_BRIDGE, "--", "set", "bridge", TRUNK_BRIDGE,
                       "datapath_type=netdev", "other_config:mac-learning-fallback=true")
            self._netns(self.under_ns)
            _run(["ip", "-n", self.under_ns, "link", "add", "underlay", "type", "bridge"])
            _run(["ip", "-n", self.under_ns, "link", "set", "underlay", "up"])
            for i, ch in enumerate(self.chassis, start=1):
                self._start_chassis(i, ch, trunk_rd)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0

    def _start_chassis(self, i: int, ch: Chassis, trunk_rd: Path) -> None:
        self._netns(ch.ns)
        self._start_ovsdb(ch.ns, ch.rundir)
        self.start_vswitchd(ch.ns, ch.rundir)
        self._veth(f"t{i}", self.trunk_ns, "uplink", ch.ns)
        self.vsctl(self.trunk_ns, trunk_rd, "add-port", TRUNK_BRIDGE, f"t{i}")
        self._veth(f"u{i}", self.under_ns, "underlay", ch.ns)
        _run(["ip", "-n", self.under_ns, "link", "set", f"u{i}", "master", "underlay"])
        # The provider bridge is the bed's: with br-int on the userspace datapath Kube-OVN's agent
        # takes the node for an OVS-DPDK one and makes br-<provider> on the kernel datapath, which
        # ovs-vswitchd cannot open here ("failed to open datapath of type system"), never adding
        # the NIC. On a DPDK node the operator makes it, as here, with the NIC in it.
        for bridge, port in ((self.provider_bridge, "uplink"), (UNDERLAY_BRIDGE, "underlay")):
            self.vsctl(ch.ns, ch.rundir, "add-br", bridge, "--", "set", "bridge", bridge, "datapath_type=netdev",
                       "--", "add-port", bridge, port)
        _run(["ip", "-n", ch.ns, "addr", "add", f"{ch.encap_ip}/24", "dev", UNDERLAY_BRIDGE])
        _run(["ip", "-n", ch.ns, "link", "set", UNDERLAY_BRIDGE, "up"])
        (ch.rundir / "system-id.conf").write_text(ch.system_id)
        ids = {
            "system-id": ch.system_id, "hostname": ch.name, "ovn-remote": self.sb_remote,
            "ovn-encap-type": "geneve", "ovn-bridge-datapath-type": "netdev",
        }
        self.vsctl(ch.ns, ch.rundir, "set", "open_vswitch", ".", *(f'external_ids:{k}="{v}"' for k, v in ids.items()))
        self.start_ovn_controller(ch)

    def registered(self) -> set[str]:
        """System IDs of this data plane's chassis that the SB has, with their encap."""
        out = _run(["ovn-sbctl", f"--db={self.sb_remote}", "--timeout=5", "--bare", "--columns=name,encaps",
                    "list", "Chassis"], env=self.env, check=False).stdout
        rows = [block.split("\n") for block in out.strip().split("\n\n") if block.strip()]
        return {r[0].strip() for r in rows if len(r) >= 2 and r[1].strip()} & {c.system_id for c in self.chassis}

    def wait_registered(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        want = {c.system_id for c in self.chassis}
        while time.monotonic() < deadline:
            if self.registered() == want:
                return
            time.sleep(0.05)
        raise DataPlaneError(f"chassis not registered in the SB after {timeout:.0f}s: "
                             f"{sorted(want - self.registered())} (logs: {self.dir}/ch*/ovn-controller.log)")

    def stop(self) -> None:
        """Stop every process and delete the namespaces. Safe to call twice."""
        cleanup_leftovers(self.workdir)
        self.vms.clear()

    # ------------------------------------------------------------------ VMs

    def _nic(self, kind: str, name: str, host_ns: str) -> tuple[str, str]:
        """A namespace ``<tag>-<kind>-<name>`` whose ``eth0`` is a veth to a port (up) in
        ``host_ns``; returns (namespace, port). The port's name is short (15 bytes at most).

        :raises DataPlaneError: the name is taken, or a step failed.
        """
        if name in self.vms:
            raise DataPlaneError(f"{name} exists")
        # The port's name from the VM's name (no counter to keep: another process attached to
        # the bed names the same VM's port the same way).
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        ns, port = f"{self.tag}-{kind}-{name}"[:40], f"{kind[0]}{digest}-{self.tag[2:]}"
        self._netns(ns)
        _run(["ip", "-n", host_ns, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns])
        _run(["ip", "-n", host_ns, "link", "set", port, "up"])
        return ns, port

    @staticmethod
    def _address(ns: str, address: str, gateway: str, mac: str | None = None, mtu: int | None = None) -> str:
        """``eth0`` of ``ns`` up with ``mac`` and ``mtu`` (if given), ``address`` (CIDR), a default
        route via ``gateway`` and TX checksum offload off; returns its MAC."""
        if mac is not None:
            _run(["ip", "-n", ns, "link", "set", "eth0", "address", mac])
        if mtu is not None:
            _run(["ip", "-n", ns, "link", "set", "eth0", "mtu", str(mtu)])
        _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        _run(["ip", "-n", ns, "addr", "add", address, "dev", "eth0"])
        _run(["ip", "-n", ns, "route", "add", "default", "via", gateway])
        _run(["ip", "netns", "exec", ns, "ethtool", "-K", "eth0", "tx", "off"])
        return _run(["ip", "-n", ns, "-br", "link", "show", "eth0"]).stdout.split()[2].lower()

    def add_vm(self, name: str, vlan: int, address: str, gateway: str, mtu: int | None = None) -> Vm:
        """A VM on the trunk: an access port with ``tag=vlan``, ``address`` (CIDR) on its
        ``eth0`` with ``mtu`` (None: the default, 1500) and its default route via ``gateway``.

        :raises DataPlaneError: the name is taken, or a step failed.
        """
        ns, port = self._nic("vm", name, self.trunk_ns)
        self.vsctl(self.trunk_ns, self.dir / "trunk", "add-port", TRUNK_BRIDGE, port, f"tag={vlan}")
        mac = self._address(ns, address, gateway, mtu=mtu)
        vm = self.vms[name] = Vm(name=name, ns=ns, port=port, vlan=vlan, address=address, gateway=gateway, mac=mac)
        return vm

    def add_pod(self, name: str, chassis: Chassis, iface_id: str, mac: str, address: str, gateway: str,
                mtu: int = POD_MTU) -> Vm:
        """A pod's network on ``chassis``, as kube-ovn-cni makes one (the bed plays it): a
        namespace with ``eth0`` (``mac``, ``address`` CIDR, default route via ``gateway``)
        whose other end is a port of the chassis' ``br-int`` with
        ``external_ids:iface-id=<iface_id>`` (the logical switch port Kube-OVN made), which
        the chassis' ovn-controller then binds. Both ends have ``mtu`` (Kube-OVN's overlay pod
        MTU, :data:`POD_MTU`, unless told).

        :raises DataPlaneError: the name is taken, or a step failed.
        """
        ns, port = self._nic("pod", name, chassis.ns)
        _run(["ip", "-n", chassis.ns, "link", "set", port, "mtu", str(mtu)])
        _run(["ip", "netns", "exec", chassis.ns, "ethtool", "-K", port, "tx", "off"])
        self.vsctl(chassis.ns, chassis.rundir, "add-port", "br-int", port, "--", "set", "interface", port,
                   f'external_ids:iface-id="{iface_id}"')
        self._address(ns, address, gateway, mac, mtu)
        pod = self.vms[name] = Vm(name=name, ns=ns, port=port, vlan=0, address=address, gateway=gateway,
                                  mac=mac.lower())
        return pod

    def remove_vm(self, name: str) -> None:
        vm = self.vms.pop(name)
        self.vsctl(self.trunk_ns, self.dir / "trunk", "--if-exists", "del-port", TRUNK_BRIDGE, vm.port)
        _run(["ip", "netns", "del", vm.ns], check=False)


def _ctl_link(rundir: Path, component: str) -> None:
    """``<component>.<pid>.ctl`` -> ``<component>.ctl`` in ``rundir`` (stale links of earlier
    pids removed): ``ovs-appctl -t <component>`` (Kube-OVN's agent calls it so) looks for the
    first name, the bed's daemons are told the second."""
    for old in rundir.glob(f"{component}.*.ctl"):
        if old.is_symlink():
            old.unlink()
    pid = (rundir / f"{component}.pid").read_text().strip()
    (rundir / f"{component}.{pid}.ctl").symlink_to(f"{component}.ctl")


def cleanup_leftovers(workdir: Path) -> None:
    """Kill the data plane processes of the bed in ``workdir`` (by their pid files) and
    delete its namespaces (their veths go with them)."""
    d = Path(workdir).resolve() / "dataplane"
    if d.is_dir():
        # The node agents, the transit world's server (hack/bed/world.py) and their API
        # forwarders first (hack/bed/node_agent.py), then ovn-controller (it would otherwise
        # log the bridges going), vswitchd, the databases.
        for name in ("kube-ovn-daemon", "world-httpd", "api-forward-ns", "api-forward-host", "ovn-controller",
                     "ovs-vswitchd", "ovsdb-server"):
            for pidfile in d.glob(f"*/{name}.pid"):
                _kill(pidfile)
    tag = f"px{hashlib.sha256(str(Path(workdir).resolve()).encode()).hexdigest()[:5]}-"
    for ns in namespaces_with_prefix(tag):
        _run(["ip", "netns", "del", ns], check=False)
