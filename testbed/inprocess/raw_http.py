"""Use this when a test sends malformed or oversized HTTP to a running agent.

Raw HTTP/1.1 over TLS to a running agent: a request head and body written byte by byte, as
an attacker would send them, and the status the agent answered.

No HTTP client library: a client builds a request it believes valid (and refuses to send huge
header fields), buffers the body, and waits for all of it to be written before reading the
answer; an agent that refuses a request early closes the connection while the sender is still
writing.
"""

from __future__ import annotations

import socket
import ssl
import urllib.parse
from pathlib import Path
from typing import Iterable, Iterator, Optional


def connect(
    url: str, cert: Path, timeout: float = 20.0, source: Optional[str] = None
) -> ssl.SSLSocket:
    """A TLS connection to the agent at ``url`` (https://host:port), trusting only ``cert``;
    from the loopback address ``source`` if given (another "host" than the buyers')."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    context = ssl.create_default_context(cafile=str(cert))
    bind = None if source is None else (source, 0)
    raw = socket.create_connection((host, parts.port or 443), timeout=timeout, source_address=bind)
    return context.wrap_socket(raw, server_hostname=host)


def status_after_sending(url: str, cert: Path, head: bytes, body: Iterable[bytes]) -> int:
    """Send ``head`` then ``body`` on a new connection until the agent stops reading; the
    status it answered (0: none)."""
    with connect(url, cert) as tls:
        try:
            tls.sendall(head)
            for chunk in body:
                tls.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
            pass  # refused and closed before we were done: what it is meant to do
        answer = b""
        try:
            while b"\r\n" not in answer:
                piece = tls.recv(4096)
                if not piece:
                    break
                answer += piece
        except (ConnectionResetError, ssl.SSLError):
            pass
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def repeated(piece: bytes, total: int) -> Iterator[bytes]:
    """``piece`` as many times as fit in ``total`` bytes."""
    for _ in range(total // len(piece)):
        yield piece
