"""The planners' :class:`~siteagent.client.greedy.BatchOffers` over real sites: several tasks
quoted in one request, their windows held in one all-or-nothing accept, where a site takes
batches (docs/batches.md); one request per task where it does not.

The offers a site gave for tasks that were then held elsewhere (or at another of its windows)
are withdrawn with the next batch quote to that site, so that a long provisioning run never
holds more live offers at a site than one run of tasks asked for (a site bounds them per buyer,
``api.max_live_offers_per_client``).
"""

from __future__ import annotations

import dataclasses
import time
from decimal import Decimal
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from siteagent.client.batchcommit import BatchCommit
from siteagent.client.batches import quote_all
from siteagent.client.commit import Held, Interrupted
from siteagent.client.connection import BadAnswer, SiteConnection, SiteError, SiteUnreachable
from siteagent.client.greedy import Alternative, Ask
from siteagent.client.liveoffers import GREEDY_OFFERS, QUOTE_PATIENCE_S, LiveOffers
from siteagent.client.recovery import patiently
from siteagent.client.reverse_auction import Bid
from siteagent.protocol.models import QuoteRequest


class LiveBatchOffers(LiveOffers):
    """:class:`LiveOffers` asking several tasks at once (see the module's docstring)."""

    def __init__(
        self,
        connections: Mapping[str, SiteConnection],
        commit: BatchCommit,
        dry_run: bool = False,
        on_hold: Callable[[], None] = lambda: None,
        offers_per_quote: int = GREEDY_OFFERS,
        max_price: Optional[Decimal] = None,
        budget: Optional[Decimal] = None,
    ) -> None:
        super().__init__(connections, commit, dry_run, on_hold, offers_per_quote, max_price, budget)
        self.batch_commit = commit
        self._unused: Dict[str, Set[str]] = {}  # offers quoted at each site, not held yet
        # the bids behind each alternative handed out: tasks of one run may be offered the
        # same window on the same terms, by offers any of them may take
        self._pool: Dict[Tuple[str, int, int, Decimal], List[Bid]] = {}

    def alternatives_all(self, site: str, asks: Sequence[Ask]) -> List[Sequence[Alternative]]:
        if site in self.commit.silent:
            return [[] for _ in asks]
        if self.commit.interrupted():
            raise Interrupted()
        ceiling = {} if self.max_price is None else {"max_price": self.max_price}
        requests = [
            QuoteRequest.model_validate(
                {
                    "walltime": walltime,
                    "cores": cores,
                    "earliest_start": earliest,
                    "limit": self.offers_per_quote,
                    **ceiling,
                }
            )
            for cores, walltime, earliest in asks
        ]
        withdraw = sorted(self._unused.pop(site, set()))
        connection = self.connections[site]
        try:
            quotes = patiently(
                lambda: quote_all(connection, requests, withdraw), QUOTE_PATIENCE_S, self._nap
            )
        except (SiteUnreachable, BadAnswer) as exc:
            self.commit.silent[site] = str(exc)
            return [[] for _ in asks]
        except SiteError as exc:  # busy, or refusing the buyer now: withdraw them later
            self.refusals[site] = f"{exc.message} ({exc.code})"
            self._unused.setdefault(site, set()).update(withdraw)
            return [[] for _ in asks]
        unused = self._unused.setdefault(site, set())
        found: List[Sequence[Alternative]] = []
        self.refusals.pop(site, None)
        for quote in quotes:
            if quote.refusal is not None:
                self.refusals[site] = f"{quote.refusal.reason} ({quote.refusal.code})"
            alternatives = []
            for offer in quote.offers:
                bid = Bid.of(site, 0, 1, self._arrivals, offer)
                self._arrivals += 1
                alternative = Alternative(bid.start, bid.end, bid.total)
                self._pool.setdefault((site, bid.start, bid.end, bid.total), []).append(bid)
                unused.add(bid.offer_id)
                alternatives.append(alternative)
            found.append(alternatives)
        return found

    def hold_all(self, site: str, holds: Sequence[Tuple[int, int, Alternative]]) -> List[bool]:
        bids: List[Bid] = []
        for part, _, alternative in holds:
            bid = self._pool[(site, alternative.start, alternative.end, alternative.cost)].pop()
            bids.append(dataclasses.replace(bid, part=part))
        if any(bid.expires <= time.time() for bid in bids):
            return [False] * len(bids)
        if not self._within_budget(bids):
            return [False] * len(bids)
        if self.dry_run:
            for bid in bids:
                self.spent += bid.total
                self.on_hold()
            return [True] * len(bids)
        pairs: List[Tuple[Bid, Optional[Held]]]
        if len(bids) > 1 and self.batch_commit.batches_at(site):
            held = self.batch_commit.accept_batch(site, bids)
            if held is None:
                return [False] * len(bids)
            pairs = list(zip(bids, held))
        else:
            pairs = [(bid, self.commit.accept(bid)) for bid in bids]
        done = []
        for bid, one in pairs:
            if one is not None:
                self.held[bid.part] = one
                self._unused.get(site, set()).discard(bid.offer_id)
                self.spent += bid.total
                self.on_hold()
            done.append(one is not None)
        return done
