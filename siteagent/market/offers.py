"""Offers made from prices, and the JSON rows of offers and slots.

`siteagent quote` and `POST /v1/quotes` both turn priced windows into offers the manager
records; sharing these functions keeps the two answering the same offer in the same words.
"""

from __future__ import annotations

import uuid
from typing import Any, Dict, Optional

from siteagent.core.model import Offer, Request, Slot
from siteagent.pricing import Price

#: How long a quoted offer can be accepted, by default (seconds).
OFFER_VALID_S = 300

#: How far ahead of the quote the earliest offered window starts (seconds). The past cannot be
#: reserved, so an offer stops being acceptable when its window starts; a window starting at
#: the quote's own instant would be refused to any buyer a second slower than the agent. A
#: minute is time enough for a program (or a multi-round auction) to accept.
ACCEPT_LEAD_S = 60


def earliest_start(asked: Optional[int], now: int) -> int:
    """The earliest start a quote offers: the buyer's, but not before now + ACCEPT_LEAD_S."""
    return max(asked or now, now + ACCEPT_LEAD_S)


def make_offer(price: Price, request: Request, now: int, valid_s: int, site: str = "") -> Offer:
    """The offer of one priced window for ``request``, with a fresh random id; acceptable for
    ``valid_s`` seconds from ``now``, or until its window starts if that is sooner."""
    window = price.window
    return Offer(
        id=uuid.uuid4().hex[:16],
        request=request,
        start=window.start,
        duration=window.duration,
        size=window.size,
        unit_price=price.unit_price,
        fee=price.fee,
        expires=min(now + valid_s, window.start),
        site=site,
    )


def offer_row(offer: Offer) -> Dict[str, Any]:
    """An offer as a flat JSON row: money as decimal strings, never floats."""
    return {
        "offer_id": offer.id,
        "start": offer.start,
        "end": offer.end,
        "cores": offer.size,
        "unit_price": str(offer.unit_price),
        "fee": str(offer.fee),
        "total": str(offer.total),
    }


def slot_row(slot: Slot) -> Dict[str, Any]:
    """An advertised slot as a flat JSON row."""
    return {
        "start": slot.start,
        "duration": slot.duration,
        "cores": slot.cores,
        "unit_price": str(slot.unit_price),
        "fee": str(slot.fee),
        "divisible": slot.divisible,
        "extensible": slot.extensible,
    }
