"""Load-based auction pricing (Zasada & Coveney, the marketplace paper, section 6.2.3).

The site has a start price and a minimum price per core-hour. Facing a request whose current
price is ``P`` (the buyer's opening price in round 1, the best offer so far later), it offers
``P - Δ`` with ``Δ = (P_start - P_min)(1 - L) / R``: ``L`` is the fraction of the machine
allocated during the requested window in the predicted schedule, ``R`` the number of rounds the
site expects. So a lightly loaded site cuts deep, a busy one hardly at all. The offer never goes
below the minimum and never above the start price; a window the predicted schedule fills
completely is refused (saturated); a request already below the minimum makes the site drop out.

The paper's formula was lost in its text; this is the project's reconstruction of the prose,
keeping each stated behaviour (see docs/design.md §4.4).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Optional

from siteagent.core.money import CENT
from siteagent.core.values import Request
from siteagent.pricing.base import Context, Refused, UnitPricePolicy, Window


@dataclass(frozen=True)
class LoadOffer:
    """How one offer was priced: the request's price ``current`` (P), the allocated fraction
    ``load`` (L), the decrement Δ and the unit price offered. Δ is what the paper plots as a
    resource's attractiveness (its Fig. 8(b)), so the agent logs it and exports it."""

    current: Decimal
    load: float
    decrement: Decimal
    offer: Decimal


class LoadBasedPrice(UnitPricePolicy):
    """The marketplace paper's resource-agent pricing."""

    def __init__(self, start_price: Decimal, min_price: Decimal, rounds: int = 3) -> None:
        if min_price < 0 or start_price < min_price:
            raise ValueError(
                f"need 0 <= min_price <= start_price, got min {min_price}, start {start_price}"
            )
        if rounds < 1:
            raise ValueError(f"expected rounds must be >= 1, got {rounds}")
        self.start_price = start_price
        self.min_price = min_price
        self.rounds = rounds

    def decrement(self, load: float) -> Decimal:
        """Δ for an allocated fraction ``load`` in [0, 1]."""
        spare = Decimal(str(round(1.0 - min(max(load, 0.0), 1.0), 6)))
        return (self.start_price - self.min_price) * spare / Decimal(self.rounds)

    def offer(self, current: Decimal, load: float) -> Decimal:
        """The price offered against a request currently at ``current`` per core-hour."""
        if current < self.min_price:
            raise Refused(
                f"the request's price {current} is below this site's minimum {self.min_price}"
            )
        lowered = min(current, self.start_price) - self.decrement(load)
        return max(lowered, self.min_price).quantize(CENT)

    def unit_price(self, context: Context, window: Window, request: Optional[Request]) -> Decimal:
        return self.explain(context, window, request).offer

    def explain(self, context: Context, window: Window, request: Optional[Request]) -> LoadOffer:
        """The unit price of ``window`` with the figures it came from, or Refused."""
        load = context.load(window)
        if load >= 1.0:
            raise Refused("the machine is fully allocated throughout that window")
        current = self.start_price
        if request is not None:
            if request.round > 1 and request.best_price is not None:
                current = request.best_price
            elif request.max_price is not None:
                current = request.max_price
        return LoadOffer(current, load, self.decrement(load), self.offer(current, load))

    def describe(self) -> dict:  # type: ignore[type-arg]
        return {
            "policy": "load",
            "start_price_per_core_hour": str(self.start_price),
            "min_price_per_core_hour": str(self.min_price),
            "expected_rounds": self.rounds,
        }
