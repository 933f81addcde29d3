"""Expected texts of the gateway step that several test modules share.

``FAILOVER_NOTE``: what ``GatewayReady`` (ChassisAssigned) adds for a group of 1 or 2
chassis (issue 25; docs/api.md, docs/runbook.md "ChassisAssigned"), by chassis count.
"""

from __future__ import annotations

FAILOVER_NOTE = {
    1: "; with 1 chassis there is no failover: make at least 3 nodes of the provider network ready",
    2: ("; with 2 chassis OVN moves the gateway only while the survivor keeps a BFD session with another chassis, "
        "so it stays on a failed active chassis: make at least 3 nodes of the provider network ready"),
}


def assigned(lrp: str, group: str, chassis: list[tuple[str, int]]) -> str:
    """The ChassisAssigned message (reference-behaviour.md §9.4, with the note of issue 25)."""
    parts = ", ".join(f"{c}={p}" for c, p in chassis)
    return (f'router port "{lrp}" has HA chassis group "{group}" with {len(chassis)} chassis ({parts}); '
            f"the highest priority is active{FAILOVER_NOTE.get(len(chassis), '')}")
