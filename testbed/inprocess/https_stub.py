"""Use this when a client unit test needs an HTTPS server with canned answers.

A scripted HTTPS server for the client's unit tests: real TLS on loopback (a self-signed
certificate, so that trust by CA file and by pin are both exercised), canned answers by method
and path, and every request it received kept for the test to look at.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from siteagent.protocol.keys import public_key_text
from siteagent.security.tls import write_self_signed
from testbed.inprocess.parties import Party


@dataclass
class Canned:
    """An answer: status, JSON body (or raw bytes), header fields, and a delay before it."""

    status: int = 200
    body: Any = None
    raw: Optional[bytes] = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: Dict[str, str]
    body: bytes


@dataclass
class HttpsStub:
    """The running server: its URL, certificate file, and what it answers and received."""

    url: str
    cert: Path
    der: bytes
    answers: Dict[Tuple[str, str], Canned]
    received: List[Received]

    def answer(self, method: str, path: str, canned: Canned) -> None:
        self.answers[(method, path)] = canned


def offer_view(
    offer_id: str,
    start: int,
    total: str,
    duration: int = 3600,
    cores: int = 8,
    expires: int = 1_900_000_000,
) -> Dict[str, Any]:
    """An offer as a site's quote answers it (OfferView), at a unit price of 1 and no fee."""
    return {
        "offer_id": offer_id,
        "start": start,
        "end": start + duration,
        "cores": cores,
        "unit_price": "1",
        "fee": "0",
        "total": total,
        "expires": expires,
    }


def site_info(signer: Party) -> Dict[str, Any]:
    """What a site's GET /v1/info answers, signing with ``signer``'s key (replay, flat price)."""
    return {
        "api_version": "1",
        "software_version": "0.1.0",
        "site": {
            "name": "hpc1",
            "description": "",
            "architecture": "x86_64",
            "os": None,
            "cpu_speed_mhz": None,
            "memory_per_core_mb": None,
            "cores_per_node": 16,
            "partitions": [],
        },
        "cluster": None,
        "pricing": {
            "unit_price": {"policy": "flat", "price_per_core_hour": "1"},
            "fee": {"policy": "none"},
            "scheduling_policy": "conservative",
            "cancellation_penalty_factor": "0.1",
        },
        "offers_valid_s": 300,
        "confirm_timeout_s": 120.0,
        "public_key": {
            "keyid": signer.key_id,
            "alg": "ed25519",
            "value": public_key_text(signer.key.public_key()),
        },
    }


def _handler(stub: HttpsStub) -> type:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test looks at ``received``."""

        def handle_any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            headers = {name.lower(): value for name, value in self.headers.items()}
            stub.received.append(Received(self.command, self.path, headers, body))
            canned = stub.answers.get((self.command, self.path), Canned(404, _not_found()))
            time.sleep(canned.delay_s)
            data = canned.raw if canned.raw is not None else json.dumps(canned.body).encode()
            self.send_response(canned.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in canned.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = handle_any

    return Handler


def _not_found() -> Dict[str, Any]:
    return {"error": {"code": "not_found", "message": "no such route"}}


@contextlib.contextmanager
def https_stub(directory: Path) -> Iterator[HttpsStub]:
    """Serve on a free loopback port with a certificate for 127.0.0.1 written to
    ``directory``; stopped afterwards."""
    cert, key = directory / "server.crt", directory / "server.key"
    write_self_signed(cert, key, ("127.0.0.1",))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    der = x509.load_pem_x509_certificate(cert.read_bytes()).public_bytes(Encoding.DER)
    stub = HttpsStub("", cert, der, {}, [])
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stub))
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    stub.url = f"https://127.0.0.1:{server.server_address[1]}"
    # shutdown() waits for serve_forever's next poll: 0.05 s, not its 0.5 s default, per stub
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
