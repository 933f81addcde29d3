"""hack/bed/procs.free_ports: the ports a bed's components listen on (issue 28: beds started
at once, in pytest-xdist workers or beside a benchmark, never share a port)."""

from __future__ import annotations

import multiprocessing
import socket
from pathlib import Path

import pytest

from hack.bed.procs import free_ports

EPHEMERAL_LOW = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_ports_are_below_the_ephemeral_range_and_free_to_bind(tmp_path):
    ports = free_ports(20, book_file=tmp_path / "book.json")
    assert len(set(ports)) == 20
    assert all(1024 < p < EPHEMERAL_LOW for p in ports)  # no connect() of another process takes one
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_port_handed_out_is_not_handed_out_again_while_it_is_held(tmp_path):
    book = tmp_path / "book.json"
    first = free_ports(3, port_range=(29000, 29006), book_file=book)
    second = free_ports(3, port_range=(29000, 29006), book_file=book)
    assert not set(first) & set(second)  # none bound yet, and still not given twice
    with pytest.raises(OSError, match="only 0 of 1 free ports in 29000-29005"):
        free_ports(1, port_range=(29000, 29006), book_file=book)


def test_a_port_with_a_listener_is_never_handed_out(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        with pytest.raises(OSError):
            free_ports(1, port_range=(port, port + 1), book_file=tmp_path / "book.json")


def _take(args: tuple[str, int]) -> list[int]:
    book, n = args
    return free_ports(n, book_file=Path(book))


def test_processes_asking_at_once_get_distinct_ports(tmp_path):
    book = str(tmp_path / "book.json")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        taken = pool.map(_take, [(book, 200)] * 4)
    every = [p for ports in taken for p in ports]
    assert len(every) == 800 and len(set(every)) == 800
