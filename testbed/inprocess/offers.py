"""Use this when a test needs an offer, recorded or plain, for a window it chooses.

Offers the tests make: one recorded with the reservation manager for exactly the window a
test chooses, where such a window fits, and a plain offer with exact money in it."""

from __future__ import annotations

import dataclasses
import uuid
from decimal import Decimal
from typing import Optional

from siteagent.backends.base import Backend
from siteagent.core.prediction import plan
from siteagent.core.values import Offer, Request
from siteagent.market.reservations import ReservationManager


def record_offer(
    manager: ReservationManager,
    size: int,
    start: int,
    duration: int,
    valid_s: int = 60,
    fee: Decimal = Decimal("0"),
    offer_id: Optional[str] = None,
) -> Offer:
    """Record an offer for exactly this window (no feasibility check: tests choose)."""
    now = int(manager.clock())
    offer = Offer(
        id=offer_id or uuid.uuid4().hex[:16],
        request=Request(cores=size, duration=duration, earliest=start),
        start=start,
        duration=duration,
        size=size,
        unit_price=Decimal("1"),
        fee=fee,
        expires=now + valid_s,
    )
    manager.record_offer(offer)
    return offer


def earliest_start(backend: Backend, size: int, duration: int, after: int) -> Optional[int]:
    """Earliest start >= after where a reservation of ``size`` fits (running work and
    reservations only), as the placeholder offer command computes it."""
    snapshot = backend.snapshot()
    free = plan(dataclasses.replace(snapshot, pending=())).profile
    return free.earliest_fit(size, duration, max(after, snapshot.now))


def an_offer(offer_id: str = "o1") -> Offer:
    """A 4-core, one-hour offer at 1000 that expires at 2000, with exact money in it."""
    return Offer(
        id=offer_id,
        request=Request(cores=4, duration=3600, max_price=Decimal("2.50"), deadline=99),
        start=1000,
        duration=3600,
        size=4,
        unit_price=Decimal("1.10"),
        fee=Decimal("0.333"),
        expires=2000,
        site="here",
    )
