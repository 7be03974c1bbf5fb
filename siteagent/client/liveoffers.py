"""The planners' :class:`~siteagent.client.greedy.SiteOffers` over real sites.

``alternatives`` asks a site for quotes (``POST /v1/quotes``) for the task's cores and
walltime from the time its parents' data can be there; ``hold`` accepts the offer behind the
alternative chosen (a tentative reservation) through :meth:`.Commit.accept`, journaled before
it is sent as an auction's parts are: the plan is one journal "auction", each task held one
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
from siteagent.client.commit import Commit, Held, Interrupted
from siteagent.client.connection import BadAnswer, SiteConnection, SiteError, SiteUnreachable
from siteagent.client.greedy import Alternative
from siteagent.protocol.models import QuoteRequest

#: What identifies an alternative handed to the planner: its site and window and cost.
_Key = Tuple[str, int, int, Decimal]


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
    ) -> None:
        self.connections = connections
        self.commit = commit
        self.dry_run = dry_run
        self.on_hold = on_hold
        self.held: Dict[int, Held] = {}
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
            {"walltime": walltime, "cores": cores, "earliest_start": earliest_start}
        )
        try:
            quote = self.connections[site].quote(request)
        except (SiteUnreachable, BadAnswer) as exc:
            self.commit.silent[site] = str(exc)
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
        held = self.commit.accept(bid)
        if held is None:
            return False
        self.held[bid.part] = held
        self.on_hold()
        return True


def _key(site: str, alternative: Alternative) -> _Key:
    return (site, alternative.start, alternative.end, alternative.cost)
