"""Routes of English auctions, the site's side: bidding for a job (``POST /v1/bids``) and
releasing a lost bid (``DELETE /v1/bids/{auction_id}``). Both are signed (RFC 9421) by an
authorized client, checked before the route runs, and counted in the client's ``bids`` rate.

The routes are thin: the use case is :mod:`siteagent.market.english_bids`. They run in the thread
pool (plain ``def`` routes): a bid takes the store's exclusive lock, plans the queue around
the capacity other bids hold, and writes before it answers. A winning bid is accepted and
confirmed on the reservation routes (:mod:`.market`), with the offer id it carries.
"""

from __future__ import annotations

from typing import Any, Dict

import fastapi
from fastapi import Path

from siteagent.api.context import ApiContext
from siteagent.api.market import signed
from siteagent.api.site import answers
from siteagent.market.english_bids import Bidding
from siteagent.protocol.models import AUCTION_ID_PATTERN, BidAnswer, BidRequest
from siteagent.security.clients import AuthorizedClient

AuctionId = Path(pattern=AUCTION_ID_PATTERN)


def add_routes(app: fastapi.FastAPI, context: ApiContext) -> None:
    """Register this area's routes on ``app``."""

    def bidding() -> Bidding:
        """The use case on the site's current configuration (a reload applies at once)."""
        config = context.site.config
        return Bidding(context.site.manager, config.site, config.auctions)

    @app.post("/v1/bids", tags=["auctions"], **answers(BidAnswer))
    def bid(body: BidRequest, client: AuthorizedClient = signed) -> Dict[str, Any]:
        """This site's bid for an auctioned job, valued now; the first call for an auction
        announces the job, later ones ask again while the auction is open."""
        return bidding().bid(body, client.key_id, context.view()).to_json()

    @app.delete("/v1/bids/{auction_id}", tags=["auctions"], **answers(BidAnswer))
    def release(auction_id: str = AuctionId, client: AuthorizedClient = signed) -> Dict[str, Any]:
        """Release this site's bid in a lost auction: its capacity is free at once."""
        return bidding().release(client.key_id, auction_id).to_json()
