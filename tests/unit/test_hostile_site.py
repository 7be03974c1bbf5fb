"""A site that answers to hurt the buyer: real TLS on a loopback socket, each answer written
byte by byte as the test says. The client stays bounded: no redirect followed (a signed
request and its body never go elsewhere, in clear or not), at most 16 MiB read, the whole
exchange within its deadline, and every answer that is not the protocol one clean error."""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, List

import pytest

from siteagent.client.connection import BadAnswer, SiteConnection, SiteUnreachable
from siteagent.client.sites import Site, Timeouts
from siteagent.protocol import keys
from siteagent.protocol.models import QuoteRequest
from siteagent.protocol.sessions import MAX_ANSWER_BYTES
from siteagent.security.tls import write_self_signed
from testbed.inprocess.parties import Party

BUYER = Party("alice@laptop")
REQUEST = QuoteRequest.model_validate({"cores": 1, "walltime": 60})

#: What the hostile site does with one accepted connection (the request head is read).
Behaviour = Callable[[ssl.SSLSocket], None]


class Hostile:
    """A TLS listener on loopback running ``behaviour`` on each connection; ``sent`` counts
    the answer bytes it got out before the client hung up."""

    def __init__(self, directory: Path, behaviour: Behaviour) -> None:
        self.cert, key = directory / "server.crt", directory / "server.key"
        write_self_signed(self.cert, key, ("127.0.0.1",))
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(self.cert, key)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self.listener.getsockname()[1]}"
        self.behaviour = behaviour
        self.sent = 0
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        raw, _ = self.listener.accept()
        with contextlib.suppress(OSError), self.context.wrap_socket(raw, server_side=True) as conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(4096)
            head, _, body = request.partition(b"\r\n\r\n")
            length = re.search(rb"(?i)content-length: *(\d+)", head)
            while length is not None and len(body) < int(length.group(1)):
                body += conn.recv(4096)  # read all of it: unread bytes would reset the close
            self.behaviour(conn)
        self.done.set()

    def send(self, conn: ssl.SSLSocket, data: bytes) -> None:
        conn.sendall(data)
        self.sent += len(data)


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "alice.key"
    keys.write_private(path, keys.private_key_pem(BUYER.key))
    return path


@contextlib.contextmanager
def connection_to(
    hostile: Hostile, key_file: Path, total: float = 60.0
) -> Iterator[SiteConnection]:
    site = Site(
        "hpc1", hostile.url, hostile.cert, None, BUYER.key_id, key_file,
        Timeouts(connect=2, read=5, total=total),
    )  # fmt: skip
    with SiteConnection(site) as connection:
        yield connection


def answer(status: str, body: bytes, extra: str = "") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}"
    return head.encode() + b"Content-Length: %d\r\n\r\n" % len(body) + body


def test_a_redirect_is_not_followed_so_nothing_is_sent_in_clear(
    tmp_path: Path, key_file: Path
) -> None:
    plain = socket.create_server(("127.0.0.1", 0))
    plain.settimeout(1)
    where = f"http://127.0.0.1:{plain.getsockname()[1]}/v1/quotes"

    def redirect(conn: ssl.SSLSocket) -> None:
        conn.sendall(answer("307 Temporary Redirect", b"", f"Location: {where}\r\n"))

    hostile = Hostile(tmp_path, redirect)
    with connection_to(hostile, key_file) as connection, pytest.raises(BadAnswer) as refused:
        connection.quote(REQUEST)
    assert "redirects are not followed" in str(refused.value) and where in str(refused.value)
    with pytest.raises(socket.timeout):  # nobody came to the plain listener
        plain.accept()
    plain.close()


def test_json_nested_past_sense_is_a_clean_refusal(tmp_path: Path, key_file: Path) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    for n, body in enumerate((deep, b'{"offers": ' + b"[" * 40 + b"]" * 40 + b"}")):
        (tmp_path / str(n)).mkdir()
        hostile = Hostile(
            tmp_path / str(n), lambda conn, body=body: conn.sendall(answer("200 OK", body))
        )
        with connection_to(hostile, key_file) as connection, pytest.raises(BadAnswer):
            connection.quote(REQUEST)


def test_an_answer_past_the_bound_is_refused_unread(tmp_path: Path, key_file: Path) -> None:
    length = 300 * 1024 * 1024

    def flood(conn: ssl.SSLSocket) -> None:
        hostile.send(conn, f"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\n".encode())
        block = b" " * (1024 * 1024)
        for _ in range(300):
            hostile.send(conn, block)

    hostile = Hostile(tmp_path, flood)
    with connection_to(hostile, key_file) as connection, pytest.raises(BadAnswer) as refused:
        connection.quote(REQUEST)
    assert f"larger than {MAX_ANSWER_BYTES} bytes" in str(refused.value)
    assert hostile.done.wait(60)  # the client hung up: the site's send failed
    assert hostile.sent < 4 * MAX_ANSWER_BYTES


@pytest.mark.parametrize("where", ["head", "body"])
def test_an_answer_dripped_a_byte_at_a_time_ends_at_the_deadline(
    tmp_path: Path, key_file: Path, where: str
) -> None:
    """Each byte comes well within the read timeout (5 s); the whole exchange may take 1 s."""
    stop = threading.Event()

    def drip(conn: ssl.SSLSocket) -> None:
        if where == "body":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        else:
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
        while not stop.is_set():
            conn.sendall(b" " if where == "body" else b"X")
            time.sleep(0.2)

    hostile = Hostile(tmp_path, drip)
    outcome: List[BaseException] = []

    def ask() -> None:
        with connection_to(hostile, key_file, total=1.0) as connection:
            try:
                connection.quote(REQUEST)
            except BaseException as exc:
                outcome.append(exc)

    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    asker.join(60)  # a bound far past the deadline: without one the call never returns
    stop.set()
    assert not asker.is_alive(), "the client is still reading the dripped answer"
    (failure,) = outcome
    assert isinstance(failure, SiteUnreachable) and failure.timed_out
    assert "no whole answer within 1 s" in str(failure)
