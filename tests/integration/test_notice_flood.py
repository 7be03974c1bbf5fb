"""The notice socket of a running ``siteagent serve`` under a flood from local users: any user
may connect to it (it is 0666 so that SlurmUser can), so what a connection costs the agent is
bounded. An unprivileged user's connections are answered and closed as they are accepted
(hundreds of them, each dripping a byte now and then, take nothing from the agent); an allowed
one must send its whole line within the deadline however it drips it; at most
``MAX_CONNECTIONS`` are served at once; and a real notice gets through all along.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Iterator, List

import pytest

from siteagent.host.notices import MAX_CONNECTIONS, READ_TIMEOUT_S
from testbed.agents import BUSY_JOBS, ReplayBatch, RunningAgent, run_agent

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="floods as nobody, which needs root")

#: What an unprivileged local user runs: many connections held open, reporting how many the
#: agent answered and hung up on (all of them, at once, if it checks the uid at accept; before,
#: each held a thread of the agent until a line came or two seconds passed without a byte).
FLOOD = textwrap.dedent(
    """
    import socket, sys, time
    path, count = sys.argv[1], int(sys.argv[2])
    held = []
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        s.settimeout(5)
        held.append(s)
    hung_up = 0
    for s in held:
        try:
            answer = s.makefile("rb").readline()
            hung_up += s.recv(1) == b"" and b"may not notify" in answer
        except OSError:
            pass
    print(hung_up)
    """
)


@pytest.fixture
def place() -> Iterator[Path]:
    """A directory every user may enter (pytest's own are root's alone)."""
    directory = Path(tempfile.mkdtemp(prefix="siteagent-flood-"))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


@pytest.fixture
def agent(tmp_path: Path, place: Path) -> Iterator[RunningAgent]:
    settings = {"notifications": {"socket": str(place / "notify.sock")}}
    yield from run_agent(tmp_path, ReplayBatch(BUSY_JOBS), settings)


def notice(path: Path) -> bytes:
    """One notice as the batch system's program sends it (contrib/slurm/resv-notify), and the
    agent's answer: an agent refusing the connection as it comes may have closed it before the
    notice is sent, and its answer is still there to read."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(10)
        connection.connect(str(path))
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            connection.sendall(b'{"event": "begin", "reservation": "sa-0123456789ab"}\n')
        return connection.makefile("rb").readline()


def test_a_flood_of_local_users_costs_the_agent_nothing(agent: RunningAgent, place: Path) -> None:
    path = place / "notify.sock"
    flood = subprocess.run(
        ["/usr/bin/python3", "-c", FLOOD, str(path), "300"],
        user="nobody",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert flood.returncode == 0, flood.stderr
    assert int(flood.stdout) == 300  # each answered "may not notify" and closed at once
    assert json.loads(notice(path))["ok"] is False  # no such reservation, but heard
    assert agent.alive()
    log = agent.log_text()
    assert log.count("refused a connection to the notice socket") == 1  # once, not 300 times


def test_an_allowed_peer_has_a_deadline_for_its_whole_line(
    agent: RunningAgent, place: Path
) -> None:
    """A byte every half second passes any per-read timeout; the line's deadline ends it."""
    path = place / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as slow:
        slow.connect(str(path))
        began = time.monotonic()
        while time.monotonic() - began < READ_TIMEOUT_S * 20:
            try:
                slow.sendall(b" ")
                if slow.recv(4096, socket.MSG_DONTWAIT) == b"":
                    break  # the agent hung up while bytes were still coming
            except BlockingIOError:
                pass  # nothing to read: still open
            except OSError:
                break
            time.sleep(0.5)
        else:
            pytest.fail("the agent still reads a line dripped a byte every half second")


def test_connections_past_the_cap_are_refused_as_they_come(
    agent: RunningAgent, place: Path
) -> None:
    path = place / "notify.sock"
    silent: List[socket.socket] = []
    try:
        for _ in range(MAX_CONNECTIONS):
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.connect(str(path))
            silent.append(connection)
        time.sleep(0.5)  # accepted: each holds one of the agent's threads for its deadline
        one_more = notice(path)
        assert b"busy" in one_more
    finally:
        for connection in silent:
            connection.close()
    deadline = time.monotonic() + 60
    while b"busy" in (answer := notice(path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert b"busy" not in answer and json.loads(answer)["ok"] is False
    assert sys.executable  # (the test itself runs as root: an allowed uid)
