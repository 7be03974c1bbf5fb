"""A reservation's price next to the queue's odds, for one request at one site.

A buyer who needs ``cores`` for ``walltime`` seconds from a time T has two ways to get them at
a site (Singh's thesis, ch. 6): buy a reservation, which costs its price and is certain, or
submit an ordinary job early enough that the queue has very likely started it by T (a virtual
advance reservation, :mod:`.var`), which costs the queue's price for a longer job and is
certain only with some probability. Side by side, per site:

- the cheapest offer starting by T, from a request for quotes whose deadline is T plus the
  walltime (an offer lasts the walltime, so it ends by then exactly when it starts by T);
- the latest submission that starts by T with probability at least q, from the bounds the
  site publishes on its queue waits, or none when the job's bin holds too few waits to bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Dict, Optional, Sequence

from siteagent.client.connection import SiteQuote
from siteagent.client.var import least_lead
from siteagent.protocol.models import OfferView, QuoteRequest, WaitHistory

#: Offers asked of each site: the most a quote gives, so that the cheapest is among them.
OFFERS_ASKED = 100


@dataclass(frozen=True)
class Ask:
    """The request: ``cores`` for ``walltime`` seconds from ``start_by`` (epoch seconds), in
    the queue with at least ``probability``."""

    cores: int
    walltime: int
    start_by: int
    probability: float

    def __post_init__(self) -> None:
        if not 0.0 < self.probability < 1.0:
            raise ValueError(f"the probability must be in (0, 1), got {self.probability}")

    def quote_fields(self) -> Dict[str, Any]:
        """The request for quotes of windows that start by ``start_by``, as its fields."""
        return {
            "cores": self.cores,
            "walltime": self.walltime,
            "deadline": self.start_by + self.walltime,
            "limit": OFFERS_ASKED,
        }

    def quote_request(self) -> QuoteRequest:
        return QuoteRequest.model_validate(self.quote_fields())


@dataclass(frozen=True)
class SiteOdds:
    """One site's two ways: ``offer`` (None: none starts by then, ``no_offer`` says why) and
    ``lead_s``, how long before the start to submit (None: no bound); the job then asks
    ``walltime + lead_s``, so that it still runs ``walltime`` if the queue starts it at once."""

    site: str
    ask: Ask
    offer: Optional[OfferView]
    no_offer: str
    lead_s: Optional[int]

    @property
    def submit_by(self) -> Optional[int]:
        """The latest submission (epoch seconds); None without a bound."""
        return None if self.lead_s is None else self.ask.start_by - self.lead_s

    @property
    def queue_walltime(self) -> Optional[int]:
        """The walltime the queued job asks, the lead included; None without a bound."""
        return None if self.lead_s is None else self.ask.walltime + self.lead_s

    def too_late(self, now: int) -> bool:
        """Whether the latest submission has passed."""
        return self.submit_by is not None and self.submit_by < now


def site_odds(ask: Ask, quote: SiteQuote, waits: WaitHistory) -> SiteOdds:
    """The site's cheapest offer by the start and its virtual reservation, from its answers."""
    offer = cheapest_starting_by(quote.offers, ask.start_by)
    refusal = quote.refusal
    if offer is not None:
        no_offer = ""
    elif refusal is not None:
        no_offer = refusal.reason + (f" (field {refusal.field})" if refusal.field else "")
    else:
        no_offer = "no offer starts by then"
    lead = least_lead(waits, ask.cores, ask.walltime, ask.probability)
    return SiteOdds(quote.site, ask, offer, no_offer, lead)


def cheapest_starting_by(offers: Sequence[OfferView], start_by: int) -> Optional[OfferView]:
    """The cheapest of ``offers`` starting by ``start_by`` (the earlier of equal prices)."""
    timely = [offer for offer in offers if offer.start <= start_by]
    return min(timely, key=lambda o: (Decimal(o.total), o.start), default=None)
