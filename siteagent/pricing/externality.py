"""Adaptive (externality) pricing: the fee is the harm a reservation does to the queue.

Singh, thesis ch. 5: plan the queue without and with the reservation in place, under the site's
policy (conservative or EASY), and charge ``f = Σ_q max(0, v'_q - v_q) · n_q`` over queued jobs
q, where v and v' are q's planned starts without and with it: delay times size, in core-hours,
at ``rate`` per core-hour. A reservation in a hole of the schedule delays nobody and costs no
fee: those are the advertised slots.
"""

from __future__ import annotations

from decimal import ROUND_UP, Decimal
from typing import Dict

from siteagent.core.engines import Policy, ReservationConflict
from siteagent.core.money import CENT, HOUR
from siteagent.core.prediction import on_nodes
from siteagent.pricing.base import Context, FeePolicy, Refused, Window


class ExternalityFee(FeePolicy):
    """``f`` = the queued jobs' total delay (core-hours) caused by the window, times ``rate``."""

    replans = True

    def __init__(self, rate: Decimal = Decimal(1)) -> None:
        if rate < 0:
            raise ValueError(f"the externality rate must be >= 0, got {rate}")
        self.rate = rate

    def fee(self, context: Context, window: Window) -> Decimal:
        if (
            context.policy is Policy.CONSERVATIVE
            and not on_nodes(context.snapshot)
            and context.plan.profile.fits(window.size, window.start, window.duration)
        ):
            # Conservative plans place pooled units in order at their earliest fit; capacity
            # that is free in the final plan was free at every step, so no placement changes.
            # (Jobs placed on nodes may change with it: those are planned again.)
            return Decimal(0)
        key = (self.rate, window.start, window.size, window.duration)
        fee = context.fees.get(key)
        if fee is None:
            delays = self.delays(context, window)
            sizes = context.plan.sizes
            core_seconds = sum(delay * sizes[job_id] for job_id, delay in delays.items())
            # rounded up: a window that delays anybody by a second is never quoted as free
            fee = (Decimal(core_seconds) / HOUR * self.rate).quantize(CENT, rounding=ROUND_UP)
            context.fees[key] = fee
        return fee

    def delays(self, context: Context, window: Window) -> Dict[str, int]:
        """Seconds each queued job would start later with the window reserved (the jobs
        planned before the window that it cannot move are not planned again:
        :class:`~siteagent.core.replan.Replanner`)."""
        try:
            after = context.replanner.starts(window.start, window.end, window.size)
        except ReservationConflict as exc:
            raise Refused(
                f"the window conflicts with running jobs or reservations: {exc}"
            ) from None
        return {
            job_id: after[job_id] - start
            for job_id, start in context.plan.starts.items()
            if after[job_id] > start
        }

    def describe(self) -> dict:  # type: ignore[type-arg]
        return {"policy": "externality", "rate_per_core_hour_of_delay": str(self.rate)}
