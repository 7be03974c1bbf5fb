"""The planners' :class:`~siteagent.client.greedy.SiteOffers` over real sites.

``alternatives`` asks a site for quotes (``POST /v1/quotes``) for the task's cores and
walltime from the time its parents' data can be there; ``hold`` accepts the offer behind the
alternative chosen, a tentative reservation, journaled before the accept is sent exactly as an
auction's parts are (:mod:`.journal`): the plan is one journal "auction", each task held one
part, numbered in the order they were held. The commit (:meth:`.Commit.run_plan`) then
confirms them all or releases them all.

A site that does not answer (or answers outside the protocol) is asked nothing more: the plan
goes on with the others rather than waiting for it at every task. A dry run quotes but holds
nothing: each task is planned against the sites as they were quoted, not as they would be
with the earlier tasks held.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Callable, Dict, List, Mapping, Sequence, Tuple

from siteagent.client.auction import Bid
from siteagent.client.commit import Held, Interrupted
from siteagent.client.connection import BadAnswer, SiteConnection, SiteError, SiteUnreachable
from siteagent.client.greedy import Alternative
from siteagent.client.journal import Journal
from siteagent.client.recovery import Seller, definite, refusal
from siteagent.protocol.models import QuoteRequest

#: What identifies an alternative handed to the planner: its site and window and cost.
_Key = Tuple[str, int, int, Decimal]


class LiveOffers:
    """Quotes and holds at ``connections`` for one plan journaled as ``plan_id``; ``held``
    maps each part (a task held, in order) to its tentative reservation. ``interrupted`` is
    checked before each request; ``on_hold`` hears of each task held (a progress bar)."""

    def __init__(
        self,
        connections: Mapping[str, SiteConnection],
        sellers: Mapping[str, Seller],
        journal: Journal,
        plan_id: str,
        interrupted: Callable[[], bool],
        dry_run: bool = False,
        on_hold: Callable[[], None] = lambda: None,
    ) -> None:
        self.connections = connections
        self.sellers = sellers
        self.journal = journal
        self.plan_id = plan_id
        self.interrupted = interrupted
        self.dry_run = dry_run
        self.on_hold = on_hold
        self.held: Dict[int, Held] = {}
        self.silent: Dict[str, str] = {}
        self._bids: Dict[_Key, Bid] = {}
        self._arrivals = 0

    def alternatives(
        self, site: str, cores: int, walltime: int, earliest_start: int
    ) -> Sequence[Alternative]:
        if site in self.silent:
            return []
        self._check_interrupt()
        request = QuoteRequest.model_validate(
            {"walltime": walltime, "cores": cores, "earliest_start": earliest_start}
        )
        try:
            quote = self.connections[site].quote(request)
        except (SiteUnreachable, BadAnswer) as exc:
            self.silent[site] = str(exc)
            return []
        except SiteError:
            return []  # busy or refusing this request: it may offer the next task
        found: List[Alternative] = []
        for offer in quote.offers:
            bid = Bid.of(site, len(self.held), 1, self._arrivals, offer)
            self._arrivals += 1
            alternative = Alternative(bid.start, bid.end, bid.total)
            self._bids[_key(site, alternative)] = bid
            found.append(alternative)
        return found

    def hold(self, site: str, cores: int, alternative: Alternative) -> bool:
        bid = self._bids.pop(_key(site, alternative))
        if bid.expires <= time.time():
            return False
        if self.dry_run:
            self.on_hold()
            return True
        self._check_interrupt()
        entry = self.journal.accepting(self.plan_id, bid)
        try:
            tentative = self.sellers[site].accept(bid.offer_id, entry.idempotency_key)
        except (SiteError, SiteUnreachable) as exc:
            if isinstance(exc, SiteError) and definite(exc):
                self.journal.refused(entry, refusal(exc))
            else:
                self.journal.noted(entry, str(exc))
                self.silent[site] = str(exc)
            return False
        entry = self.journal.tentative(
            entry, tentative.reservation_id, tentative.deal, tentative.deadline
        )
        self.held[bid.part] = Held(entry, tentative)
        self.on_hold()
        return True

    def _check_interrupt(self) -> None:
        if self.interrupted():
            raise Interrupted()


def _key(site: str, alternative: Alternative) -> _Key:
    return (site, alternative.start, alternative.end, alternative.cost)
