"""A reservation's price next to the queue's odds (thesis ch. 6), worked by hand."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import pytest

from siteagent.client.connection import SiteQuote
from siteagent.client.odds import OFFERS_ASKED, Ask, cheapest_starting_by, site_odds
from siteagent.protocol.models import OfferView, QuoteAnswer, WaitHistory
from testbed.inprocess.https_stub import offer_view
from testbed.inprocess.provisioning import wait_bin, wait_history

H = 3600
T = 1_800_000_000  # the start wanted


def offer(offer_id: str, start: int, total: str) -> Dict[str, Any]:
    """Half an hour on 2 cores, as ``Ask(2, 1800, ...)`` asks."""
    return offer_view(offer_id, start, total, duration=1800, cores=2, expires=T)


def quote(offers: List[Dict[str, Any]], refusal: Optional[Dict[str, Any]] = None) -> SiteQuote:
    ask = Ask(2, 1800, T, 0.95)
    answer = QuoteAnswer.model_validate(
        {
            "status": "refused" if refusal else "offered",
            "now": T - 4 * H,
            "offers": offers,
            "refusal": refusal,
        }
    )
    return SiteQuote("hpc1", ask.quote_request(), answer)


def waits(upper_bound_s: Optional[int]) -> WaitHistory:
    """One bin, 1-4 cores asking up to an hour, its 0.95-quantile bounded at ``upper_bound_s``."""
    return wait_history(wait_bin([1, 4], [0, H], q95=upper_bound_s))


def test_the_request_asks_for_windows_ending_by_the_start_plus_the_walltime() -> None:
    request = Ask(2, 1800, T, 0.95).quote_request()
    assert (request.cores, request.walltime, request.deadline) == (2, 1800, T + 1800)
    assert request.limit == OFFERS_ASKED
    with pytest.raises(ValueError, match="probability"):
        Ask(2, 1800, T, 1.0)


def test_the_cheapest_offer_starting_by_then_beside_the_latest_submission() -> None:
    """Offers: 9.00 an hour before, 8.00 ten minutes before, 1.00 after the start (a site may
    offer it; it is not in time). The 0.95 bound of 1,800 s: submit half an hour before,
    asking 1,800 + 1,800 s, which stays in the bin of jobs up to an hour."""
    offers = [offer("early", T - H, "9.00"), offer("late", T - 600, "8.00")]
    offers.append(offer("too-late", T + 60, "1.00"))
    odds = site_odds(Ask(2, 1800, T, 0.95), quote(offers), waits(1800))
    assert odds.offer is not None and odds.offer.offer_id == "late"
    assert odds.no_offer == ""
    assert (odds.lead_s, odds.submit_by, odds.queue_walltime) == (1800, T - 1800, 3600)
    assert not odds.too_late(T - 1800) and odds.too_late(T - 1799)


def test_why_a_site_has_neither() -> None:
    refused = quote([], {"code": "no_offer", "reason": "full until then", "field": None})
    odds = site_odds(Ask(2, 1800, T, 0.95), refused, waits(None))
    assert odds.offer is None and odds.no_offer == "full until then"
    assert (odds.lead_s, odds.submit_by, odds.queue_walltime) == (None, None, None)
    assert not odds.too_late(T)
    late = site_odds(Ask(2, 1800, T, 0.95), quote([offer("x", T + 1, "1")]), waits(4000))
    assert late.no_offer == "no offer starts by then"
    assert late.lead_s is None  # 1,800 + 4,000 s leaves the bin, and no other bounds it


def test_equal_prices_go_to_the_earlier_start() -> None:
    offers = [OfferView(**offer("b", T - 60, "5")), OfferView(**offer("a", T - 600, "5.00"))]
    chosen = cheapest_starting_by(offers, T)
    assert chosen is not None and chosen.offer_id == "a"
    assert cheapest_starting_by([], T) is None
