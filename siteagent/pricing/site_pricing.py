"""Quoting: the price of a window, the list of priced alternatives, and the buyer's choice.

Singh, thesis ch. 5, query forms (17)-(19): the price of (s, n, d); and, for (n, d) from an
earliest start on, alternatives ``<s_i, c_i, f_i>`` at every instant where availability changes
in the predicted schedule. The list always holds the earliest admissible start and at least one
start with no fee (the earliest hole the window fits in), so it is never empty for a request
the machine can hold. The buyer picks with a trade-off α in [0, 1]: minimise
``α·norm(f) + (1-α)·norm(s)``, ties to the earliest.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from decimal import Decimal
from typing import Dict, List, Optional, Sequence

from siteagent.core import tradeoff
from siteagent.core.defaults import DEFAULT_PENALTY_FACTOR
from siteagent.core.engines import Policy
from siteagent.core.money import CENT
from siteagent.core.prediction import Plan
from siteagent.core.values import ClusterSnapshot, Request, Slot
from siteagent.pricing.base import Context, FeePolicy, Price, Refused, UnitPricePolicy, Window


@dataclass(frozen=True)
class Pricing:
    """A site's pricing: a unit-price policy, a fee policy, and the cancellation penalty.

    ``policy`` is the scheduling policy load and fees are computed under. Cancelling a
    confirmed reservation costs ``penalty_factor`` times its fee: it compensates the queued
    jobs that were pushed back for nothing.
    """

    unit: UnitPricePolicy
    fee: FeePolicy
    policy: Policy = Policy.CONSERVATIVE
    penalty_factor: Decimal = DEFAULT_PENALTY_FACTOR

    def context(self, snapshot: ClusterSnapshot, base: Optional[Plan] = None) -> Context:
        """The shared view one quote prices against (reuses ``base`` if it has our policy)."""
        return Context(snapshot, self.policy, base)

    def price(self, context: Context, window: Window, request: Optional[Request] = None) -> Price:
        """The price of one window, or Refused with the reason."""
        context.admissible(window)
        unit_price = self.unit.unit_price(context, window, request)
        fee = self.fee.fee(context, window)
        price = Price(window, unit_price, fee)
        if request is not None and request.max_price is not None:
            per_core_hour = price.total / window.core_hours
            if per_core_hour > request.max_price:
                raise Refused(
                    f"the price at that start is {per_core_hour.quantize(CENT)} per core-hour, "
                    f"above the maximum {request.max_price}"
                )
        return price

    def alternatives(self, context: Context, request: Request, limit: int = 100) -> List[Price]:
        """Priced starts for the request, earliest first; Refused if there is none."""
        size, duration = request.cores, request.duration
        earliest = max(context.now, request.earliest or context.now)
        first = context.hard.earliest_fit(size, duration, earliest)
        if first is None or size > context.capacity:
            raise Refused(f"{size} units for {duration} s never fit on this site")
        last_start = None if request.deadline is None else request.deadline - duration
        starts = self._candidate_starts(context, size, duration, first, last_start, limit)
        if not starts:
            raise Refused("no start lets the reservation end by the deadline")
        priced: List[Price] = []
        reasons: Dict[str, int] = {}
        for start in starts:
            try:
                priced.append(self.price(context, Window(start, size, duration), request))
            except Refused as exc:
                reasons[exc.reason] = reasons.get(exc.reason, 0) + 1
        if not priced:
            raise Refused("; ".join(sorted(reasons)))
        return priced

    def _candidate_starts(
        self,
        context: Context,
        size: int,
        duration: int,
        first: int,
        last_start: Optional[int],
        limit: int,
    ) -> List[int]:
        """The earliest admissible start, then each change of the predicted availability.

        The earliest start with no fee (the first hole the window fits) is always included,
        replacing the last candidate if the list is full.
        """
        free_from = context.plan.profile.earliest_fit(size, duration, first)
        starts = [first]
        for start, _, _ in context.plan.profile.segments(since=first):
            if len(starts) >= limit or (last_start is not None and start > last_start):
                break
            if start <= first:
                continue
            if context.hard.fits(size, start, duration):
                starts.append(start)
        in_time = free_from is not None and (last_start is None or free_from <= last_start)
        if free_from is not None and in_time and free_from not in starts:
            if len(starts) >= limit:
                starts.pop()
            starts.append(free_from)
        return [s for s in starts if last_start is None or s <= last_start]

    def price_slots(self, context: Context, slots: Sequence[Slot]) -> List[Slot]:
        """The advertised slots at this site's unit price (their fee stays 0: a hole delays
        nobody); slots the unit-price policy refuses (a saturated window) are left out."""
        priced = []
        for slot in slots:
            window = Window(slot.start, slot.cores, slot.duration)
            try:
                unit_price = self.unit.unit_price(context, window, None)
            except Refused:
                continue
            priced.append(dataclasses.replace(slot, unit_price=unit_price))
        return priced

    def describe(self) -> dict:  # type: ignore[type-arg]
        """What a buyer may know of the pricing (GET /v1/info)."""
        return {
            "unit_price": self.unit.describe(),
            "fee": self.fee.describe(),
            "scheduling_policy": self.policy.value,
            "cancellation_penalty_factor": str(self.penalty_factor),
        }


def choose(alternatives: Sequence[Price], alpha: float) -> int:
    """Index of the alternative minimising α·norm(fee) + (1-α)·norm(start); earliest on ties."""
    fees = [float(a.fee) for a in alternatives]
    starts = [float(a.window.start) for a in alternatives]
    return tradeoff.choose(fees, starts, alpha)
