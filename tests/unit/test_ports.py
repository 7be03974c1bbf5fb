"""The ports the tests' programs listen on: outside the range the kernel hands to outgoing
connections, distinct within a process, and apart between pytest-xdist workers."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from testbed.processes import ports


def test_ports_are_below_the_ephemeral_range_and_never_handed_out_twice() -> None:
    chosen = ports.free_ports(50)
    assert len(set(chosen)) == 50
    assert all(ports.BASE <= port < ports._ephemeral_low() for port in chosen)


def test_a_port_in_use_is_passed_over() -> None:
    """Another program listens on the port the picker would hand out next: it is skipped."""
    low = ports._block()
    assert low is not None
    ahead = [low + (ports._START + step) % ports.BLOCK for step in range(ports.BLOCK)]
    nxt = next(port for port in ahead if port not in ports._HANDED and ports._bindable(port))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", nxt))
        taken.listen()
        chosen = ports.free_port()
    assert chosen != nxt
    assert low <= chosen < low + ports.BLOCK


def test_the_kernel_chooses_where_its_ephemeral_range_leaves_no_room_below(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ports, "_ephemeral_low", lambda: 1024)
    chosen = ports.free_ports(5)
    assert len(set(chosen)) == 5
    assert all(not ports.BASE <= port < ports.BASE + 8 * ports.BLOCK for port in chosen)


def test_each_worker_has_a_block_of_its_own() -> None:
    code = "from testbed.processes.ports import free_port; print(free_port())"
    blocks = []
    for worker in ("gw0", "gw1", "gw5"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={"PYTEST_XDIST_WORKER": worker, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        blocks.append((int(out) - ports.BASE) // ports.BLOCK)
    assert blocks == [0, 1, 5]
