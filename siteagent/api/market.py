"""Routes of the market: quotes, and the reservation's two-phase commit (accept, confirm,
cancel). Every POST and DELETE is signed (RFC 9421) by an authorized client, checked before
the route runs, so a refused request changes nothing and learns nothing. A reservation's GET
may be signed too: its buyer sees all of it, anybody else only its public part.

The routes are thin: the use cases are :mod:`siteagent.market.quoting` and
:mod:`siteagent.market.deals`. What this module decides is where the work runs:

- **Quotes are answered on the event loop**, being the one route buyers call in bursts: a
  hand-over to a worker thread costs more CPU than pricing a unit-price quote. Their pricing
  runs there too when it is cheap, else on the one pricing thread (:mod:`.pricing_queue`), and
  their offers are stored by group commit (:mod:`.offer_writer`) before the answer.
- **Accept, confirm and cancel run in the thread pool** (plain ``def`` routes): they call the
  batch system and the store.
- **Confirm and cancel are safe to retry.** Without an Idempotency-Key header the key is
  derived from the operation and the reservation, and the receipt the site signed first is
  the one kept and booked, so a retried confirm books nothing twice.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import fastapi
from fastapi import Depends, Header, Path, Security
from fastapi.responses import JSONResponse, Response
from fastapi.security import APIKeyHeader

from siteagent.api.context import ApiContext
from siteagent.api.offer_writer import OfferWriter
from siteagent.api.pricing_queue import PricingQueue, priced_inline, yielding
from siteagent.api.site import ERRORS, answers
from siteagent.core.defaults import DEFAULT_OFFER_VALID_S
from siteagent.core.model import Request
from siteagent.core.money import CENT
from siteagent.market import quoting
from siteagent.market.quoting import Quote, Refusal
from siteagent.market.view import MarketView
from siteagent.pricing import Price
from siteagent.protocol.models import (
    OFFER_ID_PATTERN,
    AcceptRequest,
    ConfirmRequest,
    PublicReservationView,
    QuoteAnswer,
    QuoteRequest,
    ReservationView,
)
from siteagent.security.admission import OfferQuota
from siteagent.security.clients import AuthorizedClient
from siteagent.security.errors import Unauthenticated

log = logging.getLogger("siteagent.api")

#: Declares the signature in the OpenAPI document (so that generated clients know to sign);
#: the check itself needs Signature-Input and Content-Digest too, and is the Authenticator's.
SIGNATURE = APIKeyHeader(
    name="Signature",
    scheme_name="httpMessageSignature",
    description="RFC 9421 HTTP Message Signature (Ed25519) over @method, @target-uri and "
    "content-digest, with created, keyid and nonce; sent with Signature-Input and "
    "Content-Digest (RFC 9530)",
    auto_error=False,
)

IdempotencyKey = Header(
    None,
    alias="Idempotency-Key",
    min_length=1,
    max_length=128,
    description="retry with the same key to get the same answer; default: one per operation",
)
ReservationId = Path(pattern=OFFER_ID_PATTERN)


class QuoteDesk:
    """Where the API prices quotes and stores their offers (closed with the API)."""

    def __init__(self, context: ApiContext) -> None:
        self.context = context
        self.pricing_queue = PricingQueue()
        self.offer_writer = OfferWriter(context.site.manager.record_offers)
        self.quota = OfferQuota(context.site.config.api.max_live_offers_per_client)
        self._around: Optional[Tuple[MarketView, Tuple[Tuple[int, int, int], ...], MarketView]]
        self._around = None

    async def quote(self, rfq: QuoteRequest, client: AuthorizedClient) -> Quote:
        """The quoting use case's steps, with the pricing on the event loop or the pricing
        thread, and the offers stored (on disk) before the answer."""
        view = self._around_bids(self.context.view())
        site = self.context.site.config.site
        now = int(self.context.site.manager.clock())
        self.quota.check(client.key_id, now)
        request = quoting.requested(rfq, view.snapshot, site, now)
        if isinstance(request, Refusal):
            return quoting.refused(view, now, request)
        if priced_inline(view.pricing, rfq.limit):
            prices = quoting.priced(view.pricing, view, request, rfq.limit)
        else:
            threaded = yielding(view.pricing)
            prices = await self.pricing_queue.run(
                lambda: quoting.priced(threaded, view, request, rfq.limit), rfq.limit
            )
        if isinstance(prices, Refusal):
            return quoting.refused(view, now, prices)
        offers = quoting.offered(
            prices, request, now, DEFAULT_OFFER_VALID_S, site.name, client.key_id
        )
        await self.offer_writer.record(offers)
        self.quota.add(client.key_id, offers)
        log.debug("quote for %s: %d offers", client.key_id, len(offers))
        self._observe_load_offer(view, request, prices, client.key_id, now)
        return quoting.answered(view, now, offers, prices, rfq.alpha)

    def _around_bids(self, view: MarketView) -> MarketView:
        """The view without what open English-auction bids hold (an accept of it would be
        refused), made once per view and set of holds: both change far less often than quotes
        come."""
        holds = self.context.site.store.open_holds()
        if not holds:
            return view
        if self._around is not None and self._around[0] is view and self._around[1] == holds:
            return self._around[2]
        around = quoting.around_bids(view, holds)
        self._around = (view, holds, around)
        return around

    def _observe_load_offer(
        self,
        view: MarketView,
        request: Request,
        prices: Sequence[Price],
        client: str,
        now: int,
    ) -> None:
        """A site pricing by load logs and exports each quote's decrement and offer (the
        marketplace paper's attractiveness and offer price over time, its Figs. 8(b), 9(b))."""
        figures = quoting.load_offer(view, request, prices)
        if figures is None:
            return
        log.info(
            "load price at %d: round %d for %s, price %s, load %.4f, decrement %s, offer %s",
            now,
            request.round,
            client,
            figures.current,
            figures.load,
            figures.decrement.quantize(CENT),
            figures.offer,
        )
        if self.context.metrics is not None:
            self.context.metrics.observe_load_offer(figures)

    def close(self) -> None:
        """Finish the quotes in progress (priced, offers stored); the store closes next."""
        self.pricing_queue.close()
        self.offer_writer.close()


async def authenticated_client(
    request: fastapi.Request, _: Optional[str] = Security(SIGNATURE)
) -> AuthorizedClient:
    """The client whose signature the gate checked (siteagent.serving.gate) before the body
    was parsed; the parameter declares the signature in the OpenAPI."""
    client = getattr(request.state, "client", None)
    if not isinstance(client, AuthorizedClient):  # the gate signs every state change
        raise Unauthenticated("unsigned", "this request must be signed (RFC 9421)")
    return client


signed = Depends(authenticated_client)


async def client_if_signed(
    request: fastapi.Request, _: Optional[str] = Security(SIGNATURE)
) -> Optional[AuthorizedClient]:
    """The client that signed this read, None if it is not signed; a signature that does not
    verify is refused (401) as on any route, rather than read as no signature."""
    if "signature" not in request.headers and "signature-input" not in request.headers:
        return None
    return await authenticated_client(request)


signed_if_any = Depends(client_if_signed)


def add_routes(app: fastapi.FastAPI, context: ApiContext, desk: QuoteDesk) -> None:
    """Register this area's routes on ``app``."""
    deals = context.deals

    @app.post("/v1/quotes", tags=["market"], responses=ERRORS, response_model=QuoteAnswer)
    async def quotes(body: QuoteRequest, client: AuthorizedClient = signed) -> Response:
        """Priced offers for a request for quotes, or a refusal with its reason."""
        return JSONResponse((await desk.quote(body, client)).to_json())

    @app.post(
        "/v1/reservations",
        tags=["market"],
        status_code=201,
        **answers(ReservationView),
    )
    def accept(
        body: AcceptRequest,
        client: AuthorizedClient = signed,
        key: Optional[str] = IdempotencyKey,
    ) -> Dict[str, Any]:
        """Accept an offer: a tentative reservation, to be confirmed before its deadline."""
        accounts = (client.account,) if client.account else ()
        idempotency = key or f"accept-{body.offer_id}"
        deal = deals.accept(body.offer_id, client.key_id, idempotency, (client.user,), accounts)
        return deal.to_json()

    @app.get(
        "/v1/reservations/{reservation_id}",
        tags=["market"],
        responses=ERRORS,
        response_model=Union[ReservationView, PublicReservationView],
        response_model_exclude_unset=True,
    )
    def show(
        reservation_id: str = ReservationId,
        reader: Optional[AuthorizedClient] = signed_if_any,
    ) -> Dict[str, Any]:
        """A reservation: for its buyer (a GET signed with its key) its state, the deal to
        sign, and its receipt once confirmed; for anybody else only its public part."""
        who = None if reader is None else reader.key_id
        return deals.show(reservation_id).view_for(who)

    @app.post(
        "/v1/reservations/{reservation_id}/confirm",
        tags=["market"],
        **answers(ReservationView),
    )
    def confirm(
        body: ConfirmRequest,
        reservation_id: str = ReservationId,
        client: AuthorizedClient = signed,
        key: Optional[str] = IdempotencyKey,
    ) -> Dict[str, Any]:
        """Confirm with the signed deal; answers the doubly signed receipt."""
        idempotency = key or f"confirm-{reservation_id}"
        return deals.confirm(reservation_id, body.model_dump(), client, idempotency).to_json()

    @app.delete(
        "/v1/reservations/{reservation_id}",
        tags=["market"],
        **answers(ReservationView),
    )
    def cancel(
        reservation_id: str = ReservationId,
        client: AuthorizedClient = signed,
        key: Optional[str] = IdempotencyKey,
    ) -> Dict[str, Any]:
        """Cancel: free while tentative, the agreed penalty once confirmed."""
        idempotency = key or f"cancel-{reservation_id}"
        return deals.cancel(reservation_id, client.key_id, idempotency).to_json()
