"""The planners' :class:`~siteagent.client.greedy.SiteOffers` over real sites.

``alternatives`` asks a site for quotes (``POST /v1/quotes``) for the task's cores and
walltime from the time its parents' data can be there; ``hold`` accepts the offer behind the
alternative chosen (a tentative reservation) through :meth:`.Commit.accept`, journaled before
it is sent as an auction's parts are: the plan is one journal "auction", each task held one
part, numbered in the order they were held. The commit (:meth:`.Commit.run_plan`) then
confirms them all or releases them all.

A site that does not answer (or answers outside the protocol) is asked nothing more: the plan
goes on with the others rather than waiting for it at every task. A site that refuses a quote
(its answer's refusal, or the request's: 429 ``too_many_offers`` or ``rate_limited`` once
:data:`QUOTE_PATIENCE_S` of its ``Retry-After`` are waited out) offers nothing for that task,
and its words are kept: a task no site offers a window says why (:meth:`LiveOffers.explain`).
A dry run quotes but holds nothing: each task is planned against the sites as they were
quoted, not as they would be with the earlier tasks held.

**The live-offer allowance.** Every offer a site quotes counts against the buyer's allowance
there (``api.max_live_offers_per_client``, 2,000 by default) until it lapses, five minutes
later, whether or not it is used; a plan uses one offer per task. So each task asks each site
for at most ``offers_per_quote`` offers (:data:`GREEDY_OFFERS` for the greedy planner, which
weighs cost against finish; :data:`PINNED_OFFERS` for a plan already made, which takes the
earliest window): a workflow of T tasks holds at most T x that many live offers at each site
(docs/client.md, "The live-offer allowance").
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from siteagent.client.commit import Commit, Held, Interrupted
from siteagent.client.connection import (
    BadAnswer,
    SiteConnection,
    SiteError,
    SiteQuote,
    SiteUnreachable,
)
from siteagent.client.greedy import Alternative
from siteagent.client.recovery import patiently
from siteagent.client.reverse_auction import Bid
from siteagent.protocol.models import QuoteRequest

#: What identifies an alternative handed to the planner: its site and window and cost.
_Key = Tuple[str, int, int, Decimal]

#: Offers the greedy planner asks of each site per task: the earliest window, the one that
#: delays nobody (a site always includes both) and a few between, for the cost/finish trade.
GREEDY_OFFERS = 5
#: Offers asked per task when the plan names the site and the earliest window is taken:
#: that one and two more, should the site refuse it.
PINNED_OFFERS = 3
#: The longest a quote waits out a site's 429 in all (its ``Retry-After``): the tasks held
#: already must still be confirmed before their deadline (two minutes by default).
QUOTE_PATIENCE_S = 30.0
#: How often a wait for a site's ``Retry-After`` looks at the user's Ctrl-C.
_NAP_S = 0.2


class LiveOffers:
    """Quotes at ``connections`` and holds through ``commit`` (which journals each accept
    and confirms or releases the plan); ``held`` maps each part (a task held, in order) to
    its tentative reservation. ``on_hold`` hears of each task held (a progress bar)."""

    def __init__(
        self,
        connections: Mapping[str, SiteConnection],
        commit: Commit,
        dry_run: bool = False,
        on_hold: Callable[[], None] = lambda: None,
        offers_per_quote: int = GREEDY_OFFERS,
        max_price: Optional[Decimal] = None,
        budget: Optional[Decimal] = None,
    ) -> None:
        self.connections = connections
        self.commit = commit
        self.dry_run = dry_run
        self.on_hold = on_hold
        self.offers_per_quote = offers_per_quote
        #: Every quote's ceiling per core-hour (sites offer nothing dearer), and what the
        #: tasks held may cost together: a window that would pass it is not held.
        self.max_price = max_price
        self.budget = budget
        self.spent = Decimal(0)
        self._over_budget = ""
        self.held: Dict[int, Held] = {}
        #: Why each site offered nothing the last time it was asked (its refusal).
        self.refusals: Dict[str, str] = {}
        self._bids: Dict[_Key, Bid] = {}
        self._arrivals = 0

    def alternatives(
        self, site: str, cores: int, walltime: int, earliest_start: int
    ) -> Sequence[Alternative]:
        if site in self.commit.silent:
            return []
        if self.commit.interrupted():
            raise Interrupted()
        request = QuoteRequest.model_validate(
            {
                "walltime": walltime,
                "cores": cores,
                "earliest_start": earliest_start,
                "limit": self.offers_per_quote,
                **({} if self.max_price is None else {"max_price": self.max_price}),
            }
        )
        quote = self._quote(site, request)
        if quote is None:
            return []
        refusal = quote.refusal
        if refusal is not None:
            self.refusals[site] = f"{refusal.reason} ({refusal.code})"
            return []
        self.refusals.pop(site, None)
        found: List[Alternative] = []
        for offer in quote.offers:
            bid = Bid.of(site, len(self.held), 1, self._arrivals, offer)
            self._arrivals += 1
            alternative = Alternative(bid.start, bid.end, bid.total)
            self._bids[_key(site, alternative)] = bid
            found.append(alternative)
        return found

    def _quote(self, site: str, request: QuoteRequest) -> Optional[SiteQuote]:
        """The site's answer to ``request`` (after waiting out its 429s, within patience), or
        None when it refused the request itself or did not answer (then it is silent)."""
        connection = self.connections[site]
        try:
            return patiently(lambda: connection.quote(request), QUOTE_PATIENCE_S, self._nap)
        except (SiteUnreachable, BadAnswer) as exc:
            self.commit.silent[site] = str(exc)
        except SiteError as exc:  # busy, or refusing the buyer now: it may offer the next task
            self.refusals[site] = f"{exc.message} ({exc.code})"
        return None

    def _nap(self, seconds: float) -> None:
        """Sleep ``seconds`` (a site's Retry-After), stopping at the user's Ctrl-C."""
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            if self.commit.interrupted():
                raise Interrupted()
            time.sleep(min(_NAP_S, left))

    def explain(self, failure: str) -> str:
        """``failure`` (a task no site offers a window) with what each site said the last
        time it was asked, if it refused or went silent."""
        said = {**self.refusals, **self.commit.silent}
        reasons = [f"{site}: {reason}" for site, reason in sorted(said.items())]
        if self._over_budget:
            reasons.append(self._over_budget)
        return f"{failure} ({'; '.join(reasons)})" if reasons else failure

    def hold(self, site: str, cores: int, alternative: Alternative) -> bool:
        bid = self._bids.pop(_key(site, alternative))
        if bid.expires <= time.time() or not self._within_budget([bid]):
            return False
        if not self.dry_run:
            held = self.commit.accept(bid)
            if held is None:
                return False
            self.held[bid.part] = held
        self.spent += bid.total
        self.on_hold()
        return True

    def _within_budget(self, bids: Sequence[Bid]) -> bool:
        """Whether ``bids`` (one site's, held together) fit in what is left of the budget
        (noted if not)."""
        total = sum((bid.total for bid in bids), Decimal(0))
        if self.budget is None or self.spent + total <= self.budget:
            return True
        windows = "window costs" if len(bids) == 1 else f"{len(bids)} windows cost"
        self._over_budget = (
            f"the budget {self.budget} leaves {self.budget - self.spent} after the tasks "
            f"held, and {bids[0].site}'s {windows} {total}"
        )
        return False


def _key(site: str, alternative: Alternative) -> _Key:
    return (site, alternative.start, alternative.end, alternative.cost)
