"""Oversized, unsigned and malformed traffic against a running `siteagent serve` over HTTPS:
every request is refused at once (431, 413, 401) without the agent holding its bytes, signed
buyers are served meanwhile, and the agent's memory comes back to its idle level.

Each attack is bounded (a few tens of megabytes per kind, a handful of connections), so the
test takes seconds; the latency the buyers see under such traffic is measured by the service
benchmark, not asserted here.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
from pathlib import Path
from typing import Iterator, List

import psutil
import pytest

from testbed.inprocess import raw_http
from testbed.processes.agents import BUSY_JOBS, ReplayBatch, RunningAgent, run_agent
from testbed.processes.programs import wait_until

MB = 1024 * 1024


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[RunningAgent]:
    yield from run_agent(tmp_path, ReplayBatch(BUSY_JOBS))


def status_after_sending(agent: RunningAgent, head: bytes, body: Iterator[bytes]) -> int:
    return raw_http.status_after_sending(agent.buyer.url, agent.buyer.cert, head, body)


def rss_mb(agent: RunningAgent) -> float:
    return float(psutil.Process(agent.process.pid).memory_info().rss) / MB


def test_oversized_and_unsigned_traffic_is_refused_unread(agent: RunningAgent) -> None:
    quote = {"cores": 8, "walltime": 3600, "limit": 1}
    assert agent.buyer.request("POST", "/v1/quotes", quote)[0] == 200  # warm: imports, caches
    idle = rss_mb(agent)
    statuses: List[int] = []
    lock = threading.Lock()

    def attack(head: bytes, body: Iterator[bytes]) -> None:
        status = status_after_sending(agent, head, body)
        with lock:
            statuses.append(status)

    attacks = []
    for _ in range(4):  # 32 MB of header fields
        head = b"GET /v1/info HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        attacks.append((head, raw_http.repeated(b"X-Pad: " + b"a" * 4089 + b"\r\n", 32 * MB)))
    for _ in range(8):  # 64 MB bodies, announced
        head = b"POST /v1/quotes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n"
        attacks.append((head % (64 * MB), raw_http.repeated(b"[{}," * 1024, 64 * MB)))
    for _ in range(2):  # 24 MB sent chunked, announced by nothing
        head = b"POST /v1/quotes HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        attacks.append((head, raw_http.repeated(b"1000\r\n" + b"{}," * 1365 + b"a\r\n", 24 * MB)))
    threads = [threading.Thread(target=attack, args=pair) for pair in attacks]
    for thread in threads:
        thread.start()
    served = [agent.buyer.request("POST", "/v1/quotes", quote)[0] for _ in range(20)]
    for thread in threads:
        thread.join(120)
    assert served == [200] * 20  # signed buyers are answered meanwhile
    assert sorted(statuses) == [413] * 10 + [431] * 4, statuses
    malformed = agent.buyer.call("POST", "/v1/quotes")  # signed, no body at all
    assert malformed.status == 422
    head = b"POST /v1/quotes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 9\r\n\r\n"
    unsigned = status_after_sending(agent, head, iter([b"{not json"]))
    assert unsigned == 401
    assert agent.alive()

    def settled() -> bool:
        return rss_mb(agent) <= idle + 20

    wait_until(f"the agent's RSS back within 20 MB of idle ({idle:.0f} MB)", settled, 30)
    assert "Traceback" not in agent.log_text()
    health = agent.buyer.call("GET", "/healthz")
    assert health.status == 200 and json.loads(health.body)["status"] == "ok"


#: The slow attacker's own loopback address: the buyers (127.0.0.1) are another address.
ATTACKER = "127.0.0.2"


@pytest.fixture
def strict_agent(tmp_path: Path) -> Iterator[RunningAgent]:
    """An agent giving a request 2 s to arrive whole, and an address 8 connections."""
    api = {"request_timeout_s": 2, "max_connections_per_address": 8}
    yield from run_agent(tmp_path, ReplayBatch(BUSY_JOBS), {"api": api})


def closed_by_the_agent(tls: ssl.SSLSocket) -> bool:
    """Whether the agent hung up on ``tls`` (waiting up to its socket timeout)."""
    try:
        return tls.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_slow_heads_and_many_connections_cannot_keep_buyers_out(
    strict_agent: RunningAgent,
) -> None:
    """Eight connections from one address each send a header line every half second and never
    end their head: a ninth from that address is dropped as it is made, buyers from another
    address are served meanwhile, the eight are dropped once their 2 s are up, and the
    address may connect again."""
    agent = strict_agent
    url, cert = agent.buyer.url, agent.buyer.cert
    slow = [raw_http.connect(url, cert, timeout=30, source=ATTACKER) for _ in range(8)]
    stop = threading.Event()

    def drip() -> None:
        for tls in slow:
            tls.sendall(b"GET /v1/info HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        while not stop.wait(0.5):
            for tls in slow:
                with contextlib.suppress(OSError):
                    tls.sendall(b"X-Slow: 1\r\n")

    dripping = threading.Thread(target=drip, daemon=True)
    dripping.start()
    try:
        ninth = raw_http.connect(url, cert, timeout=30, source=ATTACKER)
        assert closed_by_the_agent(ninth)
        ninth.close()
        assert agent.buyer.call("GET", "/healthz").status == 200  # another address is served
        quote = {"cores": 8, "walltime": 3600, "limit": 1}
        assert agent.buyer.request("POST", "/v1/quotes", quote)[0] == 200
        assert all(closed_by_the_agent(tls) for tls in slow)  # their 2 s were up long ago
    finally:
        stop.set()
        dripping.join(10)
        for tls in slow:
            tls.close()
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"

    def served_again() -> bool:
        with raw_http.connect(url, cert, timeout=30, source=ATTACKER) as tls:
            tls.sendall(head)
            return tls.recv(64).startswith(b"HTTP/1.1 200")

    wait_until("the address served again once its connections are gone", served_again, 30)
    assert agent.alive() and "Traceback" not in agent.log_text()
