"""Quotes across sites: one request for quotes to every site at once, one ranked list of
their offers, and each site's part (offered, refused and why, failed, timed out).

The ranking is the trade-off of Singh's greedy provisioning (thesis ch. 7, docs/design.md
§4.7), the same α each site uses to mark the offer it would choose: every offer scores
``α·norm(total) + (1−α)·norm(end)`` with both figures normalised over all the offers, so
α = 1 ranks the cheapest first, α = 0 the earliest to finish, and 0.5 weighs them equally.
Ties go to the cheaper, then the earlier, then the site listed first in the registry, then
the order the site gave (earliest first), so the same answers always rank the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Callable, List, Optional, Sequence, Tuple

from siteagent.client.connection import SiteConnection, SiteQuote
from siteagent.client.fanout import SiteResult, any_answered, ask_all
from siteagent.protocol.models import OfferView, QuoteRequest


@dataclass(frozen=True)
class SiteOffer:
    """One offer and the site that made it."""

    site: str
    offer: OfferView

    @property
    def total(self) -> Decimal:
        return Decimal(self.offer.total)


@dataclass(frozen=True)
class SiteAnswer:
    """One site's part of a quote: ``status`` is ``offered``, ``refused``, ``failed`` or
    ``timed out``, ``reason`` says why there are no offers."""

    site: str
    status: str
    offers: int
    reason: str
    latency_s: float


@dataclass(frozen=True)
class Quotes:
    """Every site's answer to one request for quotes, and their offers ranked."""

    request: QuoteRequest
    results: Tuple[SiteResult[SiteQuote], ...]
    ranked: Tuple[SiteOffer, ...]

    def answers(self) -> List[SiteAnswer]:
        """Each site's part, in the registry's order."""
        return [site_answer(result) for result in self.results]

    @property
    def any_answered(self) -> bool:
        """Whether at least one site answered (with offers or a refusal, its quote's or the
        request's own: an unknown key, a rate limit)."""
        return any_answered(self.results)


def ask_for_quotes(
    connections: Sequence[SiteConnection],
    request: QuoteRequest,
    answered: Optional[Callable[[SiteResult[SiteQuote]], None]] = None,
) -> Quotes:
    """Send ``request`` to every site at once and rank the offers with its ``alpha``."""
    results = ask_all(connections, lambda connection: connection.quote(request), answered)
    offers = [
        SiteOffer(result.site, offer)
        for result in results
        if result.value is not None
        for offer in result.value.offers
    ]
    return Quotes(request, tuple(results), tuple(rank(offers, request.alpha)))


def rank(offers: Sequence[SiteOffer], alpha: float) -> List[SiteOffer]:
    """``offers`` best first by the α trade-off between total price and end (see the
    module's docstring); the input order breaks the remaining ties."""
    if not offers:
        return []
    totals = [offer.total for offer in offers]
    ends = [offer.offer.end for offer in offers]
    weight = Decimal(str(alpha))

    def score(index: int) -> Tuple[Decimal, Decimal, int, int]:
        cost = normalised(totals[index], min(totals), max(totals))
        finish = normalised(Decimal(ends[index]), Decimal(min(ends)), Decimal(max(ends)))
        return (weight * cost + (1 - weight) * finish, totals[index], ends[index], index)

    return [offers[index] for index in sorted(range(len(offers)), key=score)]


def normalised(value: Decimal, low: Decimal, high: Decimal) -> Decimal:
    """``value`` on [0, 1] between ``low`` and ``high`` (0 when they are equal)."""
    return Decimal(0) if high == low else (value - low) / (high - low)


def site_answer(result: SiteResult[SiteQuote]) -> SiteAnswer:
    quote = result.value
    if quote is None:
        return SiteAnswer(result.site, result.outcome.value, 0, result.reason, result.latency_s)
    refusal = quote.refusal
    if refusal is not None:
        why = refusal.reason + (f" (field {refusal.field})" if refusal.field else "")
        return SiteAnswer(result.site, "refused", 0, why, result.latency_s)
    return SiteAnswer(result.site, "offered", len(quote.offers), "", result.latency_s)
