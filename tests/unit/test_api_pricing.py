"""Where quotes are priced, and the estimate that turns a too-long wait into 503 busy."""

from __future__ import annotations

import asyncio
import math
import re
import threading
import time
from decimal import Decimal

import pytest

from siteagent.api.pricing_queue import PricingQueue, priced_inline, yielding
from siteagent.core.errors import Unavailable
from siteagent.core.values import ClusterSnapshot, Job, Request
from siteagent.pricing import ExternalityFee, FlatPrice, NoFee, Pricing, Refused
from siteagent.protocol.errors import status_of


def test_only_quotes_that_may_replan_the_queue_leave_the_event_loop() -> None:
    unit_only = Pricing(FlatPrice(), NoFee())
    with_fee = Pricing(FlatPrice(), ExternalityFee(Decimal(1)))
    assert priced_inline(unit_only, 1) and priced_inline(unit_only, 100)
    assert priced_inline(with_fee, 1)
    assert not priced_inline(with_fee, 2)


def test_the_wait_is_estimated_from_the_offers_asked_ahead_and_refused_past_the_limit() -> None:
    queue = PricingQueue(max_wait_s=0.1)
    started, release = threading.Event(), threading.Event()

    def held() -> str:
        started.set()
        release.wait(30)
        return "priced"

    def slow() -> str:
        time.sleep(0.2)
        return "timed"

    async def scenario() -> None:
        assert queue.estimated_wait_s() == 0.0  # nothing timed, nothing ahead
        assert await queue.run(slow, 4) == "timed"  # at least 0.05 s per offer asked
        assert await queue.run(lambda: "admitted", 1) == "admitted"  # nothing ahead of it
        first = asyncio.ensure_future(queue.run(held, 3))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 30)
        wait = queue.estimated_wait_s()
        assert wait > 0.1  # three offers ahead
        with pytest.raises(Unavailable) as refused:
            await queue.run(lambda: "never", 1)
        assert status_of(refused.value.code) == 503 and refused.value.code == "busy"
        assert refused.value.retry_after_s == max(1, math.ceil(wait))
        release.set()
        assert await first == "priced"
        assert queue.estimated_wait_s() == 0.0  # nothing ahead any more
        assert await queue.run(lambda: "admitted", 1) == "admitted"

    asyncio.run(scenario())
    queue.close()


def test_the_pricing_runs_on_the_pricing_thread_and_errors_reach_the_quote() -> None:
    queue = PricingQueue()

    def fails() -> None:
        raise ValueError(threading.current_thread().name)

    async def scenario() -> None:
        with pytest.raises(ValueError, match=r"^pricing"):
            await queue.run(fails, 1)
        assert queue.estimated_wait_s() == 0.0

    asyncio.run(scenario())
    queue.close()


def test_the_pricing_thread_prices_as_the_site_does_fees_and_refusals_alike() -> None:
    """The pause after each fee lets the event loop in; it changes no price."""
    hour = 3600
    snapshot = ClusterSnapshot(
        now=0,
        capacity=5,
        running=(Job("run", 3, 0, 2 * hour, start=0),),
        pending=(Job("q", 2, 0, 1 * hour), Job("r", 4, 0, 2 * hour)),
    )
    site = Pricing(FlatPrice(), ExternalityFee(Decimal(1)))
    threaded = yielding(site)
    context = site.context(snapshot)
    request = Request(cores=2, duration=hour)
    priced = site.alternatives(context, request, 10)
    assert any(price.fee > 0 for price in priced)  # some starts delay the queue
    assert threaded.alternatives(context, request, 10) == priced
    assert threaded.describe() == site.describe()
    with pytest.raises(Refused) as refused:
        site.alternatives(context, Request(cores=6, duration=hour), 10)
    with pytest.raises(Refused, match=re.escape(refused.value.reason)):
        threaded.alternatives(context, Request(cores=6, duration=hour), 10)
