"""bench/delay_proxy.py: the wide-area stand-in of ``repro-ramp --part network`` forwards every
byte both ways, in order, whatever the jitter, each chunk held for its share of the round
trip."""

from __future__ import annotations

import argparse
import json
import random
import socket
import subprocess
import sys
import threading
from typing import Iterator, Tuple

import pytest

from bench.common import ROOT
from bench.delay_proxy import Delay, Route
from testbed.processes.ports import free_port


def test_a_route_names_the_agent_and_its_round_trip() -> None:
    assert Route.parse("127.0.0.1:8443@35") == Route("127.0.0.1", 8443, 35.0)
    assert Route.parse("9443=127.0.0.1:8443@0.5") == Route("127.0.0.1", 8443, 0.5, 9443)
    for bad in ("127.0.0.1:8443", "127.0.0.1@35", "host:port@35", "127.0.0.1:1@-1", "x=h:1@1"):
        with pytest.raises(argparse.ArgumentTypeError):
            Route.parse(bad)


def test_each_direction_waits_half_the_round_trip_give_or_take_the_jitter() -> None:
    delay = Delay(40.0, 0.1, random.Random(1))
    draws = [delay.draw() for _ in range(1000)]
    assert min(draws) >= 0.018 and max(draws) <= 0.022
    assert max(draws) - min(draws) > 0.003  # it does vary
    again = Delay(40.0, 0.1, random.Random(1))
    assert [again.draw() for _ in range(1000)] == draws  # seeded: a run can be repeated


@pytest.fixture
def echo() -> Iterator[int]:
    """A loopback server that sends back what it reads (a stand-in agent)."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(65536):
                    conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


@pytest.fixture
def proxy(echo: int) -> Iterator[Tuple[int, int]]:
    """The proxy with two routes to the echo server: 4 ms with full jitter on a free port,
    and none on the port given."""
    given = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.delay_proxy", "--jitter", "1",
         "--route", f"127.0.0.1:{echo}@4", "--route", f"{given}=127.0.0.1:{echo}@0"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    ports = json.loads(process.stdout.readline())["ports"]
    assert ports[1] == given
    yield ports[0], ports[1]
    process.terminate()
    assert process.wait(timeout=30) == 0


@pytest.mark.parametrize("route", [0, 1])
def test_every_byte_comes_back_in_order(proxy: Tuple[int, int], route: int) -> None:
    messages = [f"message {i};".encode() * (1 + i % 7) for i in range(300)]
    with socket.create_connection(("127.0.0.1", proxy[route])) as conn:
        for message in messages:
            conn.sendall(message)
        conn.shutdown(socket.SHUT_WR)
        received = b""
        while data := conn.recv(65536):
            received += data
    assert received == b"".join(messages)
