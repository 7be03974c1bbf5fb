"""Size limits enforced while a request is read, before anything buffers or parses it.

Requests to a site are a few hundred bytes. A client that sends megabytes of headers or body
(signed or not) must cost the server nothing: the limits are checked on the bytes as they
arrive from the connection, under the HTTP server (so whichever HTTP implementation uvicorn
uses, h11 or httptools, never holds more than the limit of a request head), and a request over
a limit is answered 431 or 413 at once and its connection closed without reading the rest.

:class:`HeadMeter` follows the HTTP/1.1 message boundaries itself, just enough to tell head
bytes from body bytes: the head ends at the first empty line, a body is ``Content-Length``
bytes or a chunked body up to its last chunk. Bodies sent without a length (chunked) are also
counted by :func:`read_body` in the ASGI layer, which every request's body passes through.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, Callable, List, Optional, Type

from starlette.types import Message, Receive

_CONTENT_LENGTH = re.compile(rb"^content-length:[ \t]*([0-9]{1,18})[ \t]*\r?$", re.I | re.M)
_CHUNKED = re.compile(rb"^transfer-encoding:[^\r\n]*chunked", re.I | re.M)
_LAST_CHUNK = b"\r\n0\r\n\r\n"


class TooLarge(Exception):
    """A request over a limit: ``status`` 413 (body) or 431 (headers) and the sentence."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class HeadMeter:
    """Counts the bytes of each request head on one connection, and announced body sizes.

    ``feed`` raises :class:`TooLarge` as soon as a head grows past ``max_header_bytes`` or a
    head announces a body longer than ``max_body_bytes``; it keeps at most one head's bytes.
    """

    def __init__(self, max_header_bytes: int, max_body_bytes: int) -> None:
        self.max_header_bytes = max_header_bytes
        self.max_body_bytes = max_body_bytes
        #: Requests (head and body) received whole on this connection.
        self.requests = 0
        self._head = b""
        self._skip = 0  # body bytes of the current request still to pass
        self._chunked_tail: Optional[bytes] = None  # a chunked body: the last bytes seen

    @property
    def receiving(self) -> bool:
        """Whether part of a request has arrived and its end has not."""
        return bool(self._head) or self._skip > 0 or self._chunked_tail is not None

    def feed(self, data: bytes) -> None:
        while data:
            if self._skip:
                passed = min(self._skip, len(data))
                self._skip -= passed
                data = data[passed:]
                if self._skip == 0:
                    self.requests += 1
            elif self._chunked_tail is not None:
                data = self._through_chunks(data)
            else:
                data = self._through_head(data)

    def _through_head(self, data: bytes) -> bytes:
        joined = self._head + data
        end = joined.find(b"\r\n\r\n")
        if end < 0:
            if len(joined) > self.max_header_bytes:
                raise TooLarge(
                    431,
                    "headers_too_large",
                    f"the request's header fields exceed {self.max_header_bytes} bytes",
                )
            self._head = joined
            return b""
        head, rest = joined[: end + 4], joined[end + 4 :]
        self._head = b""
        if len(head) > self.max_header_bytes:
            raise TooLarge(
                431,
                "headers_too_large",
                f"the request's header fields exceed {self.max_header_bytes} bytes",
            )
        length = _CONTENT_LENGTH.search(head)
        if length is not None:
            self._skip = int(length.group(1))
            if self._skip > self.max_body_bytes:
                raise TooLarge(
                    413,
                    "body_too_large",
                    f"the request's body is {self._skip} bytes; at most {self.max_body_bytes}",
                )
        elif _CHUNKED.search(head):
            self._chunked_tail = b""
        if not self._skip and self._chunked_tail is None:
            self.requests += 1  # a request without a body is whole with its head
        return rest

    def _through_chunks(self, data: bytes) -> bytes:
        assert self._chunked_tail is not None
        joined = self._chunked_tail + data
        end = joined.find(_LAST_CHUNK)
        if end < 0:
            self._chunked_tail = joined[-(len(_LAST_CHUNK) - 1) :]
            return b""
        self._chunked_tail = None
        self.requests += 1
        return joined[end + len(_LAST_CHUNK) :]


def refusal_bytes(error: TooLarge) -> bytes:
    """A complete HTTP response refusing the request, in the API's JSON error form."""
    reason = {413: b"Content Too Large", 431: b"Request Header Fields Too Large"}[error.status]
    body = json.dumps({"error": {"code": error.code, "message": str(error)}}).encode()
    head = b"HTTP/1.1 %d %s\r\n" % (error.status, reason)
    head += b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body)
    return head + b"connection: close\r\n\r\n" + body


def guarded(
    protocol: Type[asyncio.Protocol],
    meter: Callable[[], HeadMeter],
    request_timeout_s: Optional[float] = None,
) -> Type[Any]:
    """``protocol`` (uvicorn's HTTP protocol class) with every connection's incoming bytes
    measured by a fresh ``meter()`` before the HTTP parser sees them; with
    ``request_timeout_s``, a connection whose request (head and body) has not all arrived
    that long after it began, or after the connection was made, is dropped: a head sent a
    line every few seconds would otherwise hold the connection, and its file descriptor, for
    ever (an idle kept-alive connection is uvicorn's to close, after 5 s)."""

    class Guarded(protocol):  # type: ignore[valid-type, misc]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self._meter = meter()
            self._refused = False
            self._request_timer: Optional[asyncio.TimerHandle] = None
            super().connection_made(transport)
            self._time_the_request()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            requests = self._meter.requests
            try:
                self._meter.feed(data)
            except TooLarge as error:
                self._refused = True
                transport: asyncio.WriteTransport = self.transport
                transport.write(refusal_bytes(error))
                transport.close()
                return
            if self._meter.requests != requests:
                self._stop_timing()
            if self._meter.receiving:
                self._time_the_request()
            super().data_received(data)

        def connection_lost(self, exc: Optional[Exception]) -> None:
            self._stop_timing()
            super().connection_lost(exc)

        def _time_the_request(self) -> None:
            if request_timeout_s is not None and self._request_timer is None:
                loop = asyncio.get_running_loop()
                self._request_timer = loop.call_later(request_timeout_s, self._too_slow)

        def _stop_timing(self) -> None:
            if self._request_timer is not None:
                self._request_timer.cancel()
                self._request_timer = None

        def _too_slow(self) -> None:
            self._request_timer = None
            if self._meter.requests == 0 or self._meter.receiving:
                self._refused = True
                self.transport.abort()

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{protocol.__name__}"
    return Guarded


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole body of a request; TooLarge (413) as soon as it passes ``limit`` bytes, the
    rest left unread. A client that goes away mid-body gives what it sent."""
    chunks: List[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise TooLarge(413, "body_too_large", f"the request's body exceeds {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the app the body already read, then the connection's own
    messages (a disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
