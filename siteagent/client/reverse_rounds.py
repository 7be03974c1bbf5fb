"""The auction's rounds over the wire: each round's requests for quotes to every site still in,
all sites at once (:func:`siteagent.client.fanout.ask_all`), each answer recorded in the
auction as it arrives (arrival order is the ranking's last tie-break), and the round
journaled when it is over.

What a site's failure means for the auction: a site that is busy or asks the buyer to slow
down (503, 429) offers nothing this round and stays in; any other failure (no answer, an
answer that is not the protocol, a key it does not know) drops it from the auction, so that
later rounds and the commit do not wait for it again.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any, Callable, Dict, List, Mapping, Optional

from siteagent.client.batches import quote_all
from siteagent.client.connection import BadAnswer, SiteConnection, SiteError, SiteQuote
from siteagent.client.fanout import Answered, SiteResult, ask_all
from siteagent.client.journal import Journal
from siteagent.client.reverse_auction import AskRound, Auction

#: Statuses after which a site is asked again next round: it is busy, or the buyer too fast.
PASSING = (429, 503)


def round_asker(
    connections: Mapping[str, SiteConnection],
    journal: Journal,
    auction_id: str,
    answered: Optional[Callable[[SiteResult[List[SiteQuote]]], None]] = None,
) -> AskRound:
    """What runs one round: every part's request to every site still in, recorded and
    journaled. ``answered`` (a progress bar) hears of each site's answer."""

    def ask_round(auction: Auction, round: int) -> None:
        requests = [auction.rfq(part, round) for part in range(len(auction.parts))]
        bidders = [connections[name] for name in auction.bidders]

        def arrived(result: SiteResult[List[SiteQuote]]) -> None:
            record(auction, round, result)
            if answered is not None:
                answered(result)

        began = time.perf_counter()
        ask_all(bidders, lambda site: quote_all(site, requests), arrived)
        answered_s = time.perf_counter() - began
        journal.bidding_round(auction_id, round, summary(auction, round, answered_s))

    return ask_round


def record(auction: Auction, round: int, result: SiteResult[List[SiteQuote]]) -> None:
    """One site's answers to one round, in the auction."""
    if result.value is not None:
        for part, quote in enumerate(result.value):
            if quote.refusal is not None:
                auction.refused(result.site, part, round, quote.refusal.reason)
            else:
                auction.record(result.site, part, round, quote.offers)
        return
    for part in range(len(auction.parts)):
        if passes(result.error):
            auction.refused(result.site, part, round, result.reason)
        else:
            refused = result.outcome is Answered.REFUSED
            auction.drop(result.site, part, round, result.reason, answered=refused)


def passes(error: Optional[Exception]) -> bool:
    """Whether the site stays in after this failure (see the module's docstring)."""
    return (
        isinstance(error, SiteError)
        and not isinstance(error, BadAnswer)
        and error.status in PASSING
    )


def summary(auction: Auction, round: int, answered_s: Optional[float] = None) -> Dict[str, Any]:
    """What a round brought, for the journal and the report: each part's best price after it,
    the bids it brought, each site's answer and lowest unit price offered (per part, among
    its bids that meet the deadline), and the seconds every site took to answer (the round's
    processing time, without the wait of a paced auction)."""
    bids = [bid for bid in auction.bids if bid.round == round]
    prices: Dict[str, List[Optional[str]]] = {}
    for bid in filter(auction.in_time, bids):
        lowest = prices.setdefault(bid.site, [None] * len(auction.parts))
        current = lowest[bid.part]
        if current is None or bid.unit_price < Decimal(current):
            lowest[bid.part] = str(bid.unit_price)
    answers: Dict[str, str] = {}
    for site in auction.sites:
        offered = sum(1 for bid in bids if bid.site == site)
        if offered:
            answers[site] = f"{offered} offers"
    for no_bid in auction.no_bids:
        if no_bid.round == round and no_bid.site not in answers:
            verb = "dropped" if no_bid.dropped else "refused"
            answers[no_bid.site] = f"{verb}: {no_bid.reason}"
    best = [auction.best_price(part) for part in range(len(auction.parts))]
    return {
        "round": round,
        "best_price": [None if price is None else str(price) for price in best],
        "bids": len(bids),
        "answers": answers,
        "prices": prices,
        **({} if answered_s is None else {"answered_s": _to_the_millisecond(answered_s)}),
    }


def _to_the_millisecond(seconds: float) -> float:
    """Seconds to the millisecond (``round`` is a round number in the functions above)."""
    return round(seconds, 3)
