"""ovn-controller's part in a bed without a data plane: SB ``Chassis`` rows for the trunk
nodes, and the claim of each router port's chassis-redirect binding ``cr-<port>`` by the
top chassis of its HA chassis group (what the active chassis' ovn-controller writes:
``Port_Binding.chassis``; ``ovn-sbctl lsp-bind`` writes the same column).

A chassis row carries ``hostname`` = its Node's name: kube-ovn-controller's ``gcChassis``
deletes every SB chassis whose hostname is not the Node whose ``ovn.kubernetes.io/chassis``
annotation names it (v1.15.24 pkg/controller/gc.go).
"""

from __future__ import annotations

from hack.bed import ClusterError, LocalCluster, ovsdb_rows
from tests.support.ovsdb import ha_chassis_groups


class Claimer:
    """``chassis``: system-id -> Node name, registered in the SB by :meth:`register`."""

    def __init__(self, bed: LocalCluster, chassis: dict[str, str]) -> None:
        self.bed = bed
        self.chassis = dict(chassis)

    def register(self, name: str | None = None) -> None:
        """Add the chassis rows (or the one ``name``) as ovn-controller registers them."""
        for i, (ch, node) in enumerate(sorted(self.chassis.items())):
            if name is not None and ch != name:
                continue
            # One transaction: kube-ovn-controller collects a chassis without its Node's
            # hostname at once (its SB chassis handler, then gcChassis).
            self.bed.sbctl("--may-exist", "chassis-add", ch, "geneve", f"127.0.9.{i + 1}",
                           "--", "set", "Chassis", ch, f"hostname={node}")

    def reregister(self, name: str) -> None:
        """The chassis row deleted and added again (an ovn-controller restart with a clean
        SB entry): a new row UUID for the same system-id."""
        self.bed.sbctl("--if-exists", "chassis-del", name)
        self.register(name)

    def top(self, group: str) -> str | None:
        """The highest-priority chassis of the NB group ``group`` (None: no such group)."""
        rows = ha_chassis_groups(self.bed.nbctl, group)
        if len(rows) != 1 or not rows[0]["chassis"]:
            return None
        return max(rows[0]["chassis"].items(), key=lambda kv: max(kv[1]))[0]

    def claim(self, lrp: str) -> str | None:
        """Bind ``cr-<lrp>`` to the top chassis of its group when it is unbound or bound to
        another one; returns the chassis it is bound to (None: no ``cr-`` port or no group
        yet, or the SB does not answer)."""
        try:
            rows = ovsdb_rows(self.bed.sbctl, "Port_Binding", f"logical_port=cr-{lrp}", columns="_uuid,chassis")
            if not rows:
                return None
            top = self.top(f"px-{lrp}")
            if top is None or top not in self.chassis:
                return None
            ch = rows[0]["chassis"]
            bound = ovsdb_rows(self.bed.sbctl, "Chassis", f"_uuid={ch}", columns="name")[0]["name"] if ch else ""
            if bound != top:
                if bound:
                    self.bed.sbctl("lsp-unbind", f"cr-{lrp}")
                self.bed.sbctl("lsp-bind", f"cr-{lrp}", top)
            return top
        except (ClusterError, IndexError, OSError):
            return None
