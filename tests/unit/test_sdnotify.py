"""systemd's notification protocol, received on a real Unix datagram socket as systemd would."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path
from typing import Iterator, List

import pytest

from siteagent.host import sdnotify
from siteagent.host.sdnotify import Watchdog, notify, watchdog_interval_s
from testbed.fakes import FakeClock


class Listener:
    """The systemd end: a bound datagram socket and the messages it received."""

    def __init__(self, sock: socket.socket, address: str) -> None:
        self.sock = sock
        self.address = address

    def received(self) -> List[str]:
        messages = []
        while True:
            try:
                messages.append(self.sock.recv(4096).decode("utf-8"))
            except BlockingIOError:
                return messages


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[Listener]:
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.setblocking(False)
        yield Listener(sock, path)


def test_a_message_reaches_the_socket(listener: Listener) -> None:
    assert notify("READY=1\nSTATUS=serving", {"NOTIFY_SOCKET": listener.address})
    assert listener.received() == ["READY=1\nSTATUS=serving"]


def test_an_abstract_socket_is_reached_too() -> None:
    name = f"siteagent-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.setblocking(False)
        assert notify("READY=1", {"NOTIFY_SOCKET": "@" + name})
        assert Listener(sock, "@" + name).received() == ["READY=1"]


def test_outside_systemd_nothing_is_sent() -> None:
    assert not notify("READY=1", {})


def test_an_unreachable_socket_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert not notify("READY=1", {"NOTIFY_SOCKET": str(tmp_path / "gone")})
    assert "cannot notify systemd" in caplog.text


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"WATCHDOG_USEC": "300000000"}, 300.0),
        ({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": str(os.getpid())}, 4.0),
        ({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": "1"}, None),  # another process's
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({}, None),
    ],
)
def test_the_watchdog_period_comes_from_the_environment(
    environ: dict[str, str], expected: float | None
) -> None:
    assert watchdog_interval_s(environ) == expected


def test_the_watchdog_pings_at_most_every_quarter_period(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", listener.address)
    monkeypatch.setenv("WATCHDOG_USEC", "4000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    clock = FakeClock(0.0)
    watchdog = Watchdog.from_environment(clock)
    assert watchdog.beat_every_s == 2.0
    watchdog.beat()
    watchdog.beat()  # at once again: no second datagram
    assert listener.received() == ["WATCHDOG=1"]
    clock.advance(1.0)
    watchdog.beat()
    assert listener.received() == ["WATCHDOG=1"]


def test_without_a_watchdog_beats_send_nothing(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", listener.address)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    watchdog = Watchdog.from_environment(FakeClock(0.0))
    watchdog.beat()
    assert watchdog.beat_every_s is None
    assert listener.received() == []


def test_the_module_reads_the_process_environment_by_default(
    listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", listener.address)
    assert sdnotify.notify("STOPPING=1")
    assert listener.received() == ["STOPPING=1"]
