#!/usr/bin/env python3
"""Broadcast ARP requests for TARGET on IFACE every INTERVAL seconds (sub-second, which
iputils arping does not take) and print each reply as ``reply from <ip> [<mac>]``, flushed,
until killed. Run inside a VM's namespace by hack/bed/dataplane.py's ``Prober``.

    python3 hack/bed/arp_probe.py IFACE TARGET [INTERVAL]
"""

from __future__ import annotations

import fcntl
import select
import socket
import struct
import sys
import time

ETH_P_ARP = 0x0806
SIOCGIFADDR, SIOCGIFHWADDR = 0x8915, 0x8927


def _ifreq(sock: socket.socket, request: int, iface: str) -> bytes:
    return fcntl.ioctl(sock.fileno(), request, struct.pack("256s", iface.encode()[:15]))


def main(argv: list[str]) -> int:
    iface, target = argv[1], argv[2]
    interval = float(argv[3]) if len(argv) > 3 else 0.1
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ARP))
    s.bind((iface, 0))
    mac = _ifreq(s, SIOCGIFHWADDR, iface)[18:24]
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ip = _ifreq(udp, SIOCGIFADDR, iface)[20:24]
    tip = socket.inet_aton(target)
    request = (b"\xff" * 6 + mac + struct.pack("!H", ETH_P_ARP)
               + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + mac + ip + b"\x00" * 6 + tip)
    next_send = 0.0
    while True:
        now = time.monotonic()
        if now >= next_send:
            s.send(request)
            next_send = now + interval
        ready, _, _ = select.select([s], [], [], max(0.0, next_send - time.monotonic()))
        if not ready:
            continue
        frame = s.recv(2048)
        if len(frame) < 42 or struct.unpack("!H", frame[20:22])[0] != 2 or frame[28:32] != tip:
            continue  # not a reply from the target
        sender = ":".join(f"{b:02x}" for b in frame[22:28])
        print(f"reply from {target} [{sender}]", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
