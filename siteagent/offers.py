"""Offers made from prices, and the JSON rows of offers and slots.

`siteagent quote` and `POST /v1/quotes` both turn priced windows into offers the manager
records; sharing these functions keeps the two answering the same offer in the same words.
"""

from __future__ import annotations

import uuid
from typing import Any, Dict

from siteagent.model import Offer, Request, Slot
from siteagent.pricing import Price

#: How long a quoted offer can be accepted, by default (seconds).
OFFER_VALID_S = 300


def make_offer(price: Price, request: Request, expires: int, site: str = "") -> Offer:
    """The offer of one priced window for ``request``, with a fresh random id."""
    window = price.window
    return Offer(
        id=uuid.uuid4().hex[:16],
        request=request,
        start=window.start,
        duration=window.duration,
        size=window.size,
        unit_price=price.unit_price,
        fee=price.fee,
        expires=expires,
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
