"""What every pricing policy shares: the question, the answer, and the refusal.

A price is a unit price per core-hour ``c`` and a fixed fee ``f``; a window of ``n`` units for
``d`` seconds costs ``n·d·c + f`` (Singh's slot model). Policies come in two kinds, composed by
:class:`Pricing`: a unit-price policy (flat, load-based) and a fee policy (none, externality).

Admissibility is the same for all: a reservation may not conflict with running jobs or existing
reservations (queued jobs may be pushed back; that is what the externality fee charges for).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from decimal import Decimal
from typing import Dict, Optional, Tuple

from siteagent.core.engines import Policy, ReservationConflict
from siteagent.core.errors import SiteagentError
from siteagent.core.money import core_hours, cost
from siteagent.core.prediction import Plan, plan, reservation_nodes
from siteagent.core.profile import Profile
from siteagent.core.replan import Replanner
from siteagent.core.values import ClusterSnapshot, Placement, Request


class Refused(SiteagentError):
    """The site will not offer this window; ``reason`` says why, for the buyer. A quote turns
    it into its refusal (an answer, not an error)."""

    code = "no_offer"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.reason = message


@dataclass(frozen=True)
class Window:
    """``size`` units over [start, start + duration)."""

    start: int
    size: int
    duration: int

    @property
    def end(self) -> int:
        return self.start + self.duration

    @property
    def core_hours(self) -> Decimal:
        return core_hours(self.size, self.duration)


@dataclass(frozen=True)
class Price:
    """The price of one window: ``unit_price`` per core-hour and a fixed ``fee``."""

    window: Window
    unit_price: Decimal
    fee: Decimal

    @property
    def total(self) -> Decimal:
        window = self.window
        return cost(window.size, window.duration, self.unit_price, self.fee)


class Context:
    """One quote's view of the cluster, computed once and shared by every price it asks for.

    ``plan`` is the predicted schedule under ``policy`` (load and fees are read from it);
    ``hard`` is free capacity with only running jobs and reservations, which decides whether a
    window is admissible at all (on a node-aware snapshot, whether some nodes have room for it
    all along, as the batch system will check).
    """

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        policy: Policy = Policy.CONSERVATIVE,
        base: Optional[Plan] = None,
    ) -> None:
        self.snapshot = snapshot
        self.policy = Policy(policy)
        self.plan = (
            base if base is not None and base.policy is self.policy else plan(snapshot, policy)
        )
        self.hard = _hard_profile(self.plan)
        self._replanner: Optional[Replanner] = None
        #: fees already computed against this plan, by (rate, start, size, duration): the
        #: rounds of an auction ask for the same windows again
        self.fees: Dict[Tuple[Decimal, int, int, int], Decimal] = {}

    @property
    def replanner(self) -> Replanner:
        """The plan, ready to be planned again with one more reservation (built once)."""
        if self._replanner is None:
            self._replanner = Replanner(self.snapshot, self.plan, self.hard)
        return self._replanner

    @property
    def now(self) -> int:
        return self.snapshot.now

    @property
    def capacity(self) -> int:
        return self.snapshot.capacity

    def admissible(self, window: Window) -> None:
        """Refuse a window that running jobs or reservations leave no room for."""
        if window.size <= 0 or window.duration <= 0:
            raise Refused("a reservation needs at least one unit for at least one second")
        if window.size > self.capacity:
            raise Refused(
                f"{window.size} {self.snapshot.unit.value}s asked, the site has {self.capacity}"
            )
        if window.start < self.now:
            raise Refused("the window starts in the past")
        if not self.hard.fits(window.size, window.start, window.duration):
            raise Refused(
                "running jobs or existing reservations leave too few units in that window"
            )
        if self.snapshot.placement is not Placement.POOLED:
            try:
                reservation_nodes(self.snapshot, window.start, window.end, window.size)
            except ReservationConflict:
                raise Refused(
                    "running jobs or existing reservations leave no nodes with room for it "
                    "all through that window"
                ) from None

    def load(self, window: Window) -> float:
        """Fraction of the machine allocated in the predicted schedule over the window."""
        free = 0
        for start, end, units in self.plan.profile.segments(since=window.start):
            stop = window.end if end is None else min(end, window.end)
            begin = max(start, window.start)
            if stop > begin:
                free += max(units, 0) * (stop - begin)
            if end is None or end >= window.end:
                break
        return 1.0 - free / (self.capacity * window.duration)


def _hard_profile(base: Plan) -> Profile:
    """The plan's profile with every pending job's window given back."""
    hard = base.profile.copy()
    for job_id, start in base.starts.items():
        hard.release(start, base.ends[job_id], base.sizes[job_id])
    return hard


class UnitPricePolicy(abc.ABC):
    """Decides ``c``, the price per core-hour, for a window (and an auction round)."""

    @abc.abstractmethod
    def unit_price(self, context: Context, window: Window, request: Optional[Request]) -> Decimal:
        """The unit price, or Refused."""

    @abc.abstractmethod
    def describe(self) -> dict:  # type: ignore[type-arg]
        """The parameters a buyer may see (GET /v1/info)."""


class FeePolicy(abc.ABC):
    """Decides ``f``, the fixed part of the price, for a window."""

    #: Whether a fee may re-plan the queue (tens of milliseconds on a long queue), so that a
    #: server knows which quotes to price off its event loop.
    replans: bool = False

    @abc.abstractmethod
    def fee(self, context: Context, window: Window) -> Decimal:
        """The fee, or Refused."""

    @abc.abstractmethod
    def describe(self) -> dict:  # type: ignore[type-arg]
        """The parameters a buyer may see."""
