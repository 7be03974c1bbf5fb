"""Attackers: processes that send a running agent, over HTTPS, requests it must refuse unread,
while its buyers quote (bench/quote_clients.py), and what they were answered.

One process per kind of attack, each sending its request over and over on a new TLS
connection (the agent closes a refused request's connection), one after the other, at most
``per_second`` of them a second (none: as fast as the agent refuses them), until told to stop,
and never more than ``MAX_REQUESTS`` nor for longer than the time it was given. Each request
is written raw (testbed/inprocess/raw_http.py): an HTTP client library would refuse to send most of
them.

Why a bounded rate: refusing costs the agent CPU all the same (a TLS handshake, and the bytes
that arrive before the connection is gone), and on a machine of two cores a handful of
attackers sending flat out takes the CPU from the buyers and the agent both, whatever the
agent does. What the bench shows is what a given rate of such traffic costs the buyers, and
what each kind costs the agent (:func:`run_attacker` alone, flat out).
"""

from __future__ import annotations

import collections
import json
import multiprocessing
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.quote_clients import Target
from siteagent.protocol.signing import sign_request
from testbed.inprocess.raw_http import repeated, status_after_sending

MB = 1024 * 1024
#: The most requests one attacker sends in a level.
MAX_REQUESTS = 5000
#: A quote, as a buyer would send it.
QUOTE = json.dumps({"cores": 8, "walltime": 3600, "limit": 1}).encode()


@dataclass(frozen=True)
class Raw:
    """A request as written on the connection: its head, then ``piece`` until ``size`` bytes."""

    head: bytes
    piece: bytes = b""
    size: int = 0

    def body(self) -> Iterator[bytes]:
        return repeated(self.piece, self.size) if self.piece else iter(())


def oversized_headers(target: Target) -> Raw:
    """1 MB of header fields: refused 431 once the first 16 KiB have come."""
    head = b"GET /v1/info HTTP/1.1\r\nHost: %s\r\n" % _authority(target)
    return Raw(head, b"X-Pad: " + b"a" * 4089 + b"\r\n", MB)


def oversized_body_unsigned(target: Target) -> Raw:
    """A 4 MB JSON body, unsigned, its length announced: refused 413 on the head alone."""
    head = b"POST /v1/quotes HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n" % (
        _authority(target)
    )
    return Raw(head + b"Content-Length: %d\r\n\r\n" % (4 * MB), b"[{}," * 1024, 4 * MB)


def oversized_body_signed(target: Target) -> Raw:
    """A 4 MB body signed by the authorized buyer's own key and sent chunked, its length
    announced by nothing: refused 413 once 16 KiB of it have been read, before the signature
    is checked."""
    piece = b"{}," * 1365 + b"a"  # 4 KiB
    key = Ed25519PrivateKey.from_private_bytes(target.key)
    signed = sign_request("POST", target.url + "/v1/quotes", piece * 1024, key, target.key_id)
    head = _head("POST", target, {**signed, "Transfer-Encoding": "chunked"})
    return Raw(head, b"1000\r\n" + piece + b"\r\n", 4 * MB)


def malformed_unsigned(target: Target) -> Raw:
    """A quote of malformed JSON, unsigned: refused 401 before it is parsed."""
    return Raw(_head("POST", target, {"Content-Length": "9"}) + b"{not json")


def bad_signature(target: Target) -> Raw:
    """A quote signed in the buyer's name with another key: refused 401."""
    forged = sign_request(
        "POST", target.url + "/v1/quotes", QUOTE, Ed25519PrivateKey.generate(), target.key_id
    )
    return Raw(_head("POST", target, {**forged, "Content-Length": str(len(QUOTE))}) + QUOTE)


def malformed_http(target: Target) -> Raw:
    """A request line that is not HTTP/1.1: refused 400 by the HTTP parser, before any route."""
    return Raw(b"GET /v1/info HTTP/1.1 junk\r\nHost: %s\r\n\r\n" % _authority(target))


def _authority(target: Target) -> bytes:
    return target.url.removeprefix("https://").encode()


def _head(method: str, target: Target, fields: Mapping[str, str]) -> bytes:
    lines = [f"{method} /v1/quotes HTTP/1.1", f"Host: {_authority(target).decode()}"]
    lines += ["Content-Type: application/json", *(f"{k}: {v}" for k, v in fields.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@dataclass(frozen=True)
class Attack:
    """One kind of request the agent must refuse, and the status it must answer."""

    name: str
    expected: int
    build: Callable[[Target], Raw]


ATTACKS = (
    Attack("1 MB of header fields", 431, oversized_headers),
    Attack("4 MB body, unsigned", 413, oversized_body_unsigned),
    Attack("4 MB body, signed, chunked", 413, oversized_body_signed),
    Attack("malformed JSON, unsigned", 401, malformed_unsigned),
    Attack("bad signature", 401, bad_signature),
    Attack("malformed request line", 400, malformed_http),
)


def run_attacker(
    attack: Attack,
    target: Target,
    seconds: float,
    per_second: Optional[float],
    stop: Any,
    results: Any,
) -> None:
    """An attacker process: its request over and over until stopped, or its bounds reached;
    the statuses answered (0: none, the connection closed or failed first)."""
    raw = attack.build(target)
    statuses: Dict[int, int] = collections.Counter()
    began = time.monotonic()
    sent = 0
    while sent < MAX_REQUESTS and not stop.is_set() and time.monotonic() - began < seconds:
        if per_second:
            time.sleep(max(0.0, began + sent / per_second - time.monotonic()))
        try:
            status = status_after_sending(target.url, target.cert, raw.head, raw.body())
        except OSError:
            status = 0
        statuses[status] += 1
        sent += 1
    results.put((attack.name, dict(statuses), time.monotonic() - began))


class Attackers:
    """Attacker processes, one per attack, running until :meth:`stop` or ``seconds``."""

    def __init__(
        self,
        target: Target,
        seconds: float,
        per_second: Optional[float],
        attacks: Sequence[Attack] = ATTACKS,
    ) -> None:
        context = multiprocessing.get_context("fork")
        self.attacks = attacks
        self.stop_event, self.results = context.Event(), context.Queue()
        self.processes = [
            context.Process(
                target=run_attacker,
                args=(attack, target, seconds, per_second, self.stop_event, self.results),
            )
            for attack in attacks
        ]
        for process in self.processes:
            process.start()

    def stop(self) -> List[Dict[str, Any]]:
        """Stop them; what each sent and was answered, in the order of ``attacks``."""
        self.stop_event.set()
        gathered = {}
        for _ in self.processes:
            name, statuses, seconds = self.results.get(timeout=120)
            gathered[name] = (statuses, seconds)
        for process in self.processes:
            process.join()
        return [_report(attack, *gathered[attack.name]) for attack in self.attacks]


def _report(attack: Attack, statuses: Mapping[int, int], seconds: float) -> Dict[str, Any]:
    requests = sum(statuses.values())
    return {
        "attack": attack.name,
        "expected": attack.expected,
        "requests": requests,
        "per_second": requests / seconds if seconds else 0.0,
        "statuses": {str(status): count for status, count in sorted(statuses.items())},
        "as_expected": statuses.get(attack.expected, 0),
    }
