"""The limits on what a request and a client may cost: the head meter under the HTTP server,
the rate limiter and the bound on live offers."""

from __future__ import annotations

from decimal import Decimal
from typing import List

import pytest

from siteagent.config.schema import RateLimit
from siteagent.core.values import Offer, Request
from siteagent.http.limits import HeadMeter, TooLarge, refusal_bytes
from siteagent.security.admission import OfferQuota, RateLimited, RateLimiter, TooManyOffers

GET = b"GET /v1/info HTTP/1.1\r\nHost: a\r\n\r\n"


def post(body: bytes) -> bytes:
    return b"POST /v1/quotes HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


def fed(meter: HeadMeter, data: bytes, piece: int) -> None:
    """Feed ``data`` in pieces of ``piece`` bytes, as the network delivers it."""
    for at in range(0, len(data), piece):
        meter.feed(data[at : at + piece])


@pytest.mark.parametrize("piece", [1, 7, 64, 10_000])
def test_heads_and_bodies_are_told_apart_across_pipelined_requests(piece: int) -> None:
    """Bodies larger than the head limit pass (they are bodies), however the bytes are cut."""
    meter = HeadMeter(max_header_bytes=64, max_body_bytes=500)
    stream = GET + post(b"x" * 400) + GET + post(b"\r\n\r\n" * 50) + GET
    fed(meter, stream, piece)


@pytest.mark.parametrize("piece", [1, 64, 10_000])
def test_a_head_over_the_limit_is_refused_431_as_soon_as_it_is_too_long(piece: int) -> None:
    meter = HeadMeter(max_header_bytes=64, max_body_bytes=500)
    with pytest.raises(TooLarge) as caught:
        fed(meter, GET + b"GET / HTTP/1.1\r\nX-Pad: " + b"a" * 10_000, piece)
    assert caught.value.status == 431 and caught.value.code == "headers_too_large"


def test_an_announced_body_over_the_limit_is_refused_413_before_it_is_sent() -> None:
    meter = HeadMeter(max_header_bytes=1024, max_body_bytes=500)
    with pytest.raises(TooLarge) as caught:
        meter.feed(b"POST / HTTP/1.1\r\ncontent-length:  501 \r\n\r\n")
    assert caught.value.status == 413 and caught.value.code == "body_too_large"


def test_a_chunked_body_passes_the_meter_to_its_last_chunk() -> None:
    """Chunked bodies are the application's to count (read_body); the head after the last
    chunk is measured again."""
    meter = HeadMeter(max_header_bytes=64, max_body_bytes=500)
    head = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunks = b"".join(b"100\r\n" + b"y" * 256 + b"\r\n" for _ in range(10))
    fed(meter, head + chunks + b"0\r\n\r\n" + GET, 5)
    with pytest.raises(TooLarge):
        meter.feed(b"GET / HTTP/1.1\r\nX-Pad: " + b"a" * 100)


def test_the_refusal_is_a_complete_json_answer_that_closes() -> None:
    answer = refusal_bytes(TooLarge(431, "headers_too_large", "too long"))
    head, body = answer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 431 ") and b"connection: close" in head
    assert b"content-length: %d" % len(body) in head and b'"headers_too_large"' in body


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_client_gets_its_burst_then_its_rate_and_others_their_own() -> None:
    clock = Clock()
    limiter = RateLimiter({"quotes": RateLimit(per_second=2, burst=3)}, clock)
    for _ in range(3):
        limiter.admit("alice", "quotes")
    with pytest.raises(RateLimited) as caught:
        limiter.admit("alice", "quotes")
    assert caught.value.code == "rate_limited" and caught.value.retry_after_s == 1
    limiter.admit("bob", "quotes")  # bob's bucket is his own
    limiter.admit("alice", "cancels")  # a kind without a limit is not limited
    clock.now = 0.5  # one token back at 2 per second
    limiter.admit("alice", "quotes")
    with pytest.raises(RateLimited):
        limiter.admit("alice", "quotes")
    clock.now = 100.0  # never more than the burst saved up
    for _ in range(3):
        limiter.admit("alice", "quotes")
    with pytest.raises(RateLimited):
        limiter.admit("alice", "quotes")


def offers(expiries: List[int]) -> List[Offer]:
    request = Request(cores=1, duration=60)
    return [
        Offer(f"o{i}", request, 100, 60, 1, Decimal(1), Decimal(0), expires)
        for i, expires in enumerate(expiries)
    ]


def test_live_offers_are_bounded_per_client_until_they_lapse() -> None:
    quota = OfferQuota(per_client=3)
    quota.check("alice", now=0)
    quota.add("alice", offers([50, 60, 70]))
    with pytest.raises(TooManyOffers) as caught:
        quota.check("alice", now=10)
    assert caught.value.code == "too_many_offers" and caught.value.retry_after_s == 40
    quota.check("bob", now=10)  # bob holds none
    quota.check("alice", now=50)  # the first lapsed at 50
