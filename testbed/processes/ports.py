"""Use this when a test or a benchmark starts a program that listens on a port.

The kernel's own choice (binding port 0) comes from its ephemeral range, the range it also
gives every outgoing connection, so a port a killed agent held could be taken by anybody's
connection before the agent restarts on it. So ports here come from below that range
(``/proc/sys/net/ipv4/ip_local_port_range``), in a block of their own for each pytest-xdist
worker (``PYTEST_XDIST_WORKER``): two workers never choose the same port, and a process never
hands out a port twice. Each is checked free by binding it. Where the ephemeral range leaves no
room below it, the kernel's choice it is, as before.
"""

from __future__ import annotations

import os
import random
import re
import socket
from pathlib import Path
from typing import List, Optional, Set

#: the lowest port handed out, and how many each worker has
BASE = 20000
BLOCK = 1000
#: the ephemeral range's start where /proc does not say
EPHEMERAL_LOW = 32768


def free_port() -> int:
    """A port free on 127.0.0.1 now, never handed out before by this process."""
    low = _block()
    if low is None:
        return _kernel_choice()
    for step in range(BLOCK):
        port = low + (_START + step) % BLOCK
        if port not in _HANDED and _bindable(port):
            _HANDED.add(port)
            return port
    raise RuntimeError(f"no port left in {low}-{low + BLOCK - 1}: each is in use or handed out")


def free_ports(count: int) -> List[int]:
    """``count`` distinct free ports."""
    return [free_port() for _ in range(count)]


def _block() -> Optional[int]:
    """The first port of this worker's block; None where the kernel's ephemeral range leaves
    no room below it for the block."""
    worker = re.search(r"\d+", os.environ.get("PYTEST_XDIST_WORKER", "gw0"))
    low = BASE + BLOCK * (int(worker.group()) if worker else 0)
    return low if low + BLOCK <= _ephemeral_low() else None


def _kernel_choice() -> int:
    """A port the kernel chooses (from its ephemeral range), not handed out before."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port not in _HANDED:
            _HANDED.add(port)
            return port


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return EPHEMERAL_LOW


#: where in the block this process starts (a test run and a benchmark of one worker number
#: rarely meet), and what it handed out
_START = random.randrange(BLOCK)
_HANDED: Set[int] = set()
