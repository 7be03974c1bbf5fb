"""In-memory sites for the English auctioneer's tests: each bids for an announced job with
values a test scripts round by round, holds the offer it bids with, releases it when told, and
is accepted and confirmed as the commit's fake seller is (testbed.sellers).

:class:`FakeSites` lends them by name as :class:`siteagent.client.auctioneer.SitePool` lends
connections, so that the auctioneer runs against them unchanged.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from siteagent.client.connection import SiteUnreachable
from siteagent.protocol.models import BidAnswer, BidRequest
from testbed.sellers import FakeSeller

#: How long after the auction's close a bid's offer can be accepted (as an agent's).
ACCEPT_WINDOW_S = 60


@dataclass
class FakeBidder(FakeSeller):
    """A site whose bid in round ``i`` of an auction is ``values[i]`` (the last one for later
    rounds; None: no capacity). A bid that does not beat ``to_beat`` holds nothing, and an
    open bid's offer changes only when its value does, as an agent's. ``bids`` records every
    call (auction, to_beat); ``released`` the auctions it was told it lost."""

    values: Sequence[Optional[str]] = ("1",)
    bids: List[Tuple[str, Optional[Decimal]]] = field(default_factory=list)
    released: List[str] = field(default_factory=list)
    holding: Dict[str, Tuple[str, str]] = field(default_factory=dict)  # auction: (offer, value)
    asked: Dict[str, int] = field(default_factory=dict)
    lock: Any = field(default_factory=threading.Lock)

    def bid(self, call: BidRequest) -> BidAnswer:
        if self.down:
            raise SiteUnreachable("cannot connect", site=self.name)
        with self.lock:
            self.bids.append((call.auction_id, call.to_beat))
            round = self.asked.get(call.auction_id, 0)
            self.asked[call.auction_id] = round + 1
            value = self.values[min(round, len(self.values) - 1)]
            base = self._answer(call, round + 1)
            if value is None:
                self.holding.pop(call.auction_id, None)
                return self._none(base, "no_capacity")
            if call.to_beat is not None and Decimal(value) <= call.to_beat:
                self.holding.pop(call.auction_id, None)
                return self._none(base, "outbid")
            held = self.holding.get(call.auction_id)
            if held is None or held[1] != value:
                start = call.closes_at + ACCEPT_WINDOW_S
                offer = self.offer(
                    start,
                    size=call.job.cores,
                    duration=call.job.walltime,
                    expires=call.closes_at + ACCEPT_WINDOW_S,
                )
                held = (offer.offer_id, value)
                self.holding[call.auction_id] = held
            offer_view = self.offers[held[0]]
            return BidAnswer.model_validate(
                {
                    **base,
                    "state": "open",
                    "bid": {
                        "value": value,
                        "cores_value": value,
                        "displacement": "0",
                        "transfer": "0",
                        "transfer_s": 0,
                        "offer": {
                            "offer_id": offer_view.id,
                            "start": offer_view.start,
                            "end": offer_view.end,
                            "cores": offer_view.size,
                            "unit_price": str(offer_view.unit_price),
                            "fee": str(offer_view.fee),
                            "total": str(offer_view.total),
                            "expires": offer_view.expires,
                        },
                    },
                }
            )

    def release_bid(self, auction_id: str) -> BidAnswer:
        if self.down:
            raise SiteUnreachable("cannot connect", site=self.name)
        with self.lock:
            self.released.append(auction_id)
            self.holding.pop(auction_id, None)
            return BidAnswer.model_validate(
                {
                    "auction_id": auction_id,
                    "state": "released",
                    "now": int(self.clock()),
                    "closes_at": 0,
                    "held_until": 0,
                    "updates": self.asked.get(auction_id, 0),
                    "refusal": {"code": "lost", "reason": "another bid won", "field": None},
                }
            )

    def _answer(self, call: BidRequest, updates: int) -> Dict[str, Any]:
        return {
            "auction_id": call.auction_id,
            "now": int(self.clock()),
            "closes_at": call.closes_at,
            "held_until": call.closes_at + ACCEPT_WINDOW_S,
            "updates": updates,
        }

    def _none(self, base: Dict[str, Any], code: str) -> BidAnswer:
        refusal = {"code": code, "reason": f"the site says {code}", "field": None}
        return BidAnswer.model_validate({**base, "state": "none", "refusal": refusal})


@dataclass
class FakeSites:
    """The fake sites by name, lent as a pool lends connections."""

    sites: Dict[str, FakeBidder]

    @property
    def names(self) -> List[str]:
        return list(self.sites)

    def call(self, name: str, request: Callable[[Any], Any]) -> Any:
        return request(self.sites[name])
