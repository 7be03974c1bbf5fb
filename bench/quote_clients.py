"""Buyers sending signed quotes to a running agent, one process per buyer, and what they saw.

Each client is its own process with one HTTPS connection (keep-alive, the agent's self-signed
certificate verified) on which it sends its quotes one after the other, each a real
``POST /v1/quotes`` signed afresh (RFC 9421, Ed25519: its own ``created`` time and nonce) that
the agent verifies in full. A quote's latency is from before it is signed to after its answer
is read and parsed.

Why processes and ``http.client``: the clients share the agent's two cores. As threads of one
Python process, 50 clients also shared one interpreter, and a response then waited for the
client's own interpreter as well as the agent; httpx cost about 0.5 ms of CPU per request
besides. So each client connects, and sends one quote that is not measured (the TLS handshake
and the process's start-up), before all of them start their measured quotes together.
"""

from __future__ import annotations

import http.client
import json
import math
import multiprocessing
import queue
import random
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence, Tuple

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from siteagent.protocol.signing import sign_request

#: What one quote came to: its start and end (perf_counter), kind and detail.
Sample = Tuple[float, float, str, str]


@dataclass(frozen=True)
class Target:
    """Where the clients send their quotes, and as whom."""

    url: str
    cert: Path
    key_id: str
    key: bytes  # raw Ed25519 private key: the processes are forked, but keep it plain data

    @classmethod
    def of(cls, url: str, cert: Path, key_id: str, key: Ed25519PrivateKey) -> Target:
        raw = key.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        return cls(url, cert, key_id, raw)


def shapes(seed: int) -> Iterator[Dict[str, int]]:
    """Request shapes a buyer might send: cores 1..256 (log-uniform), walltime 10 min..12 h."""
    rng = random.Random(seed)
    while True:
        cores = max(1, min(256, round(math.exp(rng.uniform(0, math.log(256))))))
        yield {"cores": cores, "walltime": rng.randrange(600, 12 * 3600 + 1, 60)}


class Buyer:
    """One client's connection to the agent, and its signing key."""

    def __init__(self, target: Target, timeout: float) -> None:
        self.target = target
        self.key = Ed25519PrivateKey.from_private_bytes(target.key)
        self.quotes_url = target.url + "/v1/quotes"
        parts = urllib.parse.urlsplit(target.url)
        context = ssl.create_default_context(cafile=str(target.cert))
        self.connection = http.client.HTTPSConnection(
            parts.hostname or "127.0.0.1", parts.port, context=context, timeout=timeout
        )

    def quote(self, body: Dict[str, int]) -> Tuple[str, str]:
        """One signed quote: ("offered" | "refused" | "busy" | "throttled" | "error", detail).

        "throttled" is a 429 (a rate limit or the live-offer cap), told apart from the errors
        so that a level whose buyers were throttled shows it: its latencies are not those of
        quotes served.
        """
        payload = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        headers.update(sign_request("POST", self.quotes_url, payload, self.key, self.target.key_id))
        try:
            self.connection.request("POST", "/v1/quotes", body=payload, headers=headers)
            answer = self.connection.getresponse()
            status, content = answer.status, answer.read()
        except (OSError, http.client.HTTPException) as exc:
            self.connection.close()  # the next request reconnects
            return "error", f"{type(exc).__name__}: {exc}"
        text = content.decode(errors="replace")
        if status == 503 and '"busy"' in text:
            return "busy", text[:200]
        if status == 429:
            return "throttled", text[:200]
        if status != 200:
            return "error", f"HTTP {status}: {text[:200]}"
        kind = str(json.loads(content).get("status"))
        return (kind, "") if kind in ("offered", "refused") else ("error", text[:200])


@dataclass(frozen=True)
class Load:
    """What each client sends: at least ``count`` quotes, and more until ``seconds`` have
    passed since the start (0: exactly ``count``), each asking for ``limit`` offers."""

    count: int
    limit: int
    seconds: float = 0.0
    timeout: float = 60.0

    def more(self, sent: int, began: float) -> bool:
        return sent < self.count or time.perf_counter() - began < self.seconds


def run_client(target: Target, seed: int, load: Load, ready: Any, go: Event, results: Any) -> None:
    """A client process: connect and warm up, wait for the start, send its quotes."""
    bodies = shapes(seed)
    samples: List[Sample] = []
    began_cpu = time.process_time()
    try:
        buyer = Buyer(target, load.timeout)
        # the connection and the process's start-up, not measured: one offer asked, so that
        # a level of slow quotes does not leave the first clients idle past the keep-alive
        buyer.quote({**next(bodies), "limit": 1})
        ready.release()
        go.wait()
        began_cpu, started = time.process_time(), time.perf_counter()
        while load.more(len(samples), started):
            body = {**next(bodies), "limit": load.limit}
            began = time.perf_counter()
            kind, detail = buyer.quote(body)
            samples.append((began, time.perf_counter(), kind, detail))
    except Exception as exc:  # a bug here must show as an error, not hang the level
        ready.release()
        now = time.perf_counter()
        samples.append((now, now, "error", f"client failed: {type(exc).__name__}: {exc}"))
    results.put((samples, time.process_time() - began_cpu))


@dataclass
class Level:
    """What ``clients`` buyers saw, each sending its quotes one after the other."""

    clients: int
    samples: List[Sample]
    client_cpu_s: float

    @property
    def wall_s(self) -> float:
        """From the first quote sent to the last answer read."""
        return max(s[1] for s in self.samples) - min(s[0] for s in self.samples)

    def latencies(self, kinds: Sequence[str]) -> List[float]:
        return [s[1] - s[0] for s in self.samples if s[2] in kinds]

    def count(self, kind: str) -> int:
        return sum(1 for s in self.samples if s[2] == kind)

    def errors(self) -> List[str]:
        return [s[3] for s in self.samples if s[2] == "error"]


def run_level(target: Target, clients: int, load: Load) -> Level:
    """Start ``clients`` client processes, let them warm up, then start them together."""
    context = multiprocessing.get_context("fork")
    ready, go, results = context.Semaphore(0), context.Event(), context.Queue()
    processes = [
        context.Process(
            target=run_client, args=(target, 1000 * clients + index, load, ready, go, results)
        )
        for index in range(clients)
    ]
    for process in processes:
        process.start()
    for _ in processes:
        ready.acquire()
    go.set()
    gathered = [_result(results, processes) for _ in processes]
    for process in processes:
        process.join()
    samples = [sample for some, _ in gathered for sample in some]
    return Level(clients, samples, sum(cpu for _, cpu in gathered))


def _result(results: Any, processes: Sequence[Any]) -> Tuple[List[Sample], float]:
    """The next client's samples; a client that died without any (killed) is an error."""
    while True:
        try:
            found: Tuple[List[Sample], float] = results.get(timeout=1.0)
            return found
        except queue.Empty:
            if all(not process.is_alive() for process in processes):
                now = time.perf_counter()
                return [(now, now, "error", "a client process died without answering")], 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (p99 of 50 samples is the largest but one); NaN if none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]
