"""Where the API prices a quote: at once on the event loop when that is cheap, else on the one
pricing thread, and a quote that would wait too long for it is refused at once as busy.

Why two places. Pricing is pure Python and every thread shares one interpreter, so a thread
buys a quote no CPU, only hand-overs of the interpreter (on a 10,000-job queue they cost more
than pricing a unit-price quote does). A quote priced on the event loop, though, holds up
every other request until it is done, which is fine for a fraction of a millisecond and not
for the externality fee's re-plans: each start that is not in a hole of the predicted schedule
re-plans the whole queue (about 20 ms on 10,000 jobs), and a quote may ask for 100 starts.
Those are priced one at a time on a thread of their own, so that the event loop keeps
answering (health, metrics, accepts, cheap quotes) in between, and the agent's polling thread
competes with one pricing thread, not with dozens.

Why refuse at once. The pricing thread prices a limited number of quotes per second; when
more arrive, waiting longer only holds the buyer's connection and tells it nothing. A quote
whose estimated wait (the offers asked by the quotes ahead of it, times the recent time per
offer) exceeds :data:`MAX_WAIT_S` is answered 503 ``busy`` with the estimated wait as
Retry-After, so the buyer can ask another site or come back when the queue has drained.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import math
import threading
import time
from decimal import Decimal
from typing import Callable, Optional, TypeVar

from siteagent.core.errors import Unavailable
from siteagent.pricing import Pricing
from siteagent.pricing.base import Context, FeePolicy, Window
from siteagent.protocol.errors import BUSY

#: A quote that would wait longer than this for the pricing thread is refused as busy.
MAX_WAIT_S = 5.0

#: Weight of the latest quote in the running estimate of the time per offer asked.
SMOOTHING = 0.2

#: The pricing thread's pause after each fee it computes, to let the event loop in.
YIELD_S = 0.0005

_T = TypeVar("_T")


def priced_inline(pricing: Pricing, limit: int) -> bool:
    """Whether a quote asking for ``limit`` offers is cheap enough to price on the event loop.

    A fee policy that never re-plans is cheap. With one that does, a single offer asked is the
    earliest start with no fee (the pricing keeps that start when the list is cut short), which
    is a hole of the plan and needs no re-plan; only when no such start meets the deadline is
    the earliest admissible start priced instead, at one re-plan. More offers may re-plan the
    queue once per start.
    """
    return not pricing.fee.replans or limit == 1


def yielding(pricing: Pricing) -> Pricing:
    """``pricing`` with a pause after each fee (see :class:`YieldingFee`), for the thread."""
    return dataclasses.replace(pricing, fee=YieldingFee(pricing.fee))


class YieldingFee(FeePolicy):
    """A fee policy that lets other threads have the interpreter after each fee.

    A re-plan runs in compiled code that keeps the interpreter for its whole ~20 ms, and a
    thread waiting for the interpreter only gets it when the holder lets go: the event loop
    got it a few times per priced quote, so under a burst even the 503 busy answers took
    0.6 s. Sleeping :data:`YIELD_S` after each window lets go for certain (about 2% of a
    re-plan); busy answers then took 0.2 s at most in the same run.
    """

    def __init__(self, inner: FeePolicy) -> None:
        self.inner = inner
        self.replans = inner.replans

    def fee(self, context: Context, window: Window) -> Decimal:
        try:
            return self.inner.fee(context, window)
        finally:
            time.sleep(YIELD_S)

    def describe(self) -> dict:  # type: ignore[type-arg]
        return self.inner.describe()


class PricingQueue:
    """The pricing thread, and the estimate of how long a quote would wait for it."""

    def __init__(self, max_wait_s: float = MAX_WAIT_S) -> None:
        self.max_wait_s = max_wait_s
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pricing")
        self._lock = threading.Lock()
        self._offers_ahead = 0
        self._seconds_per_offer: Optional[float] = None

    async def run(self, price: Callable[[], _T], offers: int) -> _T:
        """``price()`` on the pricing thread; ``offers`` is how many the quote asks for.
        Raises Unavailable (503 ``busy``) at once if the wait would be too long."""
        self._admit(offers)
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, self._timed, price, offers)
        finally:
            with self._lock:
                self._offers_ahead -= offers

    def estimated_wait_s(self) -> float:
        """Seconds a quote arriving now would wait (0 until one quote has been timed)."""
        with self._lock:
            return self._offers_ahead * (self._seconds_per_offer or 0.0)

    def close(self) -> None:
        """Finish the quotes being priced, then stop the thread."""
        self._executor.shutdown(wait=True)

    def _admit(self, offers: int) -> None:
        with self._lock:
            wait = self._offers_ahead * (self._seconds_per_offer or 0.0)
            if wait > self.max_wait_s:
                retry = max(1, math.ceil(wait))
                raise Unavailable(
                    f"the site is pricing other requests (about {retry} s of work queued); "
                    f"retry in {retry} s",
                    code=BUSY,
                    retry_after_s=retry,
                )
            self._offers_ahead += offers

    def _timed(self, price: Callable[[], _T], offers: int) -> _T:
        began = time.perf_counter()
        try:
            return price()
        finally:
            per_offer = (time.perf_counter() - began) / max(offers, 1)
            with self._lock:
                known = self._seconds_per_offer
                self._seconds_per_offer = (
                    per_offer if known is None else known + SMOOTHING * (per_offer - known)
                )
