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

import hashlib
import json
import logging
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

import fastapi
import pydantic
from fastapi import Depends, Header, Path, Security
from fastapi.responses import JSONResponse, Response
from fastapi.security import APIKeyHeader

from siteagent.api.context import ApiContext
from siteagent.api.offer_writer import OfferWriter
from siteagent.api.pricing_queue import PricingQueue, priced_inline, yielding
from siteagent.api.rates import Admission, confirm_cost
from siteagent.api.site import ERRORS, answers
from siteagent.core.defaults import DEFAULT_OFFER_VALID_S
from siteagent.core.errors import InvalidRequest, SiteagentError
from siteagent.core.money import CENT
from siteagent.core.values import Offer, Request
from siteagent.http import errors
from siteagent.market import quoting
from siteagent.market.quoting import Quote, Refusal
from siteagent.market.view import MarketView
from siteagent.pricing import Price, Pricing
from siteagent.protocol.models import (
    OFFER_ID_PATTERN,
    AcceptRequest,
    BatchAcceptRequest,
    BatchConfirmRequest,
    BatchQuoteAnswer,
    BatchQuoteRequest,
    BatchReservations,
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

_T = TypeVar("_T")

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

    def __init__(self, context: ApiContext, admission: Admission) -> None:
        self.context = context
        self.admission = admission
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

    async def quote_all(self, body: BatchQuoteRequest, client: AuthorizedClient) -> Dict[str, Any]:
        """A batch quote (docs/batches.md): the withdrawals, then each request priced as
        :meth:`quote` prices it (on the pricing thread together if any would be there), all
        their offers stored in one commit before the answer."""
        self.admission.batch(client, "/v1/quotes/batch", len(body.requests))
        view = self._around_bids(self.context.view())
        site = self.context.site.config.site
        manager = self.context.site.manager
        now = int(manager.clock())
        withdrawn = 0
        if body.withdraw:
            withdrawn = manager.store.withdraw_offers(client.key_id, body.withdraw, now)
            self.quota.withdraw(client.key_id, body.withdraw)
        self.quota.check(client.key_id, now)
        requests = [
            _naming(f"requests[{i}]", quoting.requested, rfq, view.snapshot, site, now)
            for i, rfq in enumerate(body.requests)
        ]

        def price_all(pricing: Pricing) -> List[Union[List[Price], Refusal]]:
            return [
                request
                if isinstance(request, Refusal)
                else quoting.priced(pricing, view, request, rfq.limit)
                for rfq, request in zip(body.requests, requests)
            ]

        if all(priced_inline(view.pricing, rfq.limit) for rfq in body.requests):
            prices = price_all(view.pricing)
        else:
            threaded = yielding(view.pricing)
            asked = sum(rfq.limit for rfq in body.requests)
            prices = await self.pricing_queue.run(lambda: price_all(threaded), asked)
        offers: List[List[Offer]] = []
        for priced, request in zip(prices, requests):
            if isinstance(priced, Refusal) or isinstance(request, Refusal):
                offers.append([])
                continue
            offers.append(
                quoting.offered(
                    priced, request, now, DEFAULT_OFFER_VALID_S, site.name, client.key_id
                )
            )
        everything = [offer for some in offers for offer in some]
        if everything:
            await self.offer_writer.record(everything)
            self.quota.add(client.key_id, everything)
        answers = []
        for rfq, priced, request, some in zip(body.requests, prices, requests, offers):
            if isinstance(request, Refusal):
                answers.append(quoting.refused(view, now, request).to_json())
            elif isinstance(priced, Refusal):
                answers.append(quoting.refused(view, now, priced).to_json())
            else:
                answers.append(quoting.answered(view, now, some, priced, rfq.alpha).to_json())
                self._observe_load_offer(view, request, priced, client.key_id, now)
        return {"answers": answers, "withdrawn": withdrawn}

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


class QuoteLane:
    """ASGI middleware inside the gate: a valid signed ``POST /v1/quotes`` answered without the
    framework's per-request machinery (routing, dependencies, the request model's own pass).

    Quotes are the one route buyers call in bursts, and the framework's layers cost about as
    much CPU as verifying the signature and pricing a unit-price quote together
    (bench/results/service.md). The lane does what the route does, in the same order and with
    the same model: the body parsed as the framework parses it (``json.loads``, then
    :class:`QuoteRequest` validated from the object), the client the gate authenticated (and
    admitted), :meth:`QuoteDesk.quote`, the same JSON answer and error bodies. Anything else,
    a body that does not validate included, goes to the framework, so every error is still
    answered by the one error mapping.
    """

    def __init__(self, app: Any, desk: QuoteDesk, route: Callable[[], Any]) -> None:
        self.app = app
        self.desk = desk
        self.route = route

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/v1/quotes":
            await self.app(scope, receive, send)
            return
        client = scope.get("state", {}).get("client")
        message = await receive()  # the gate's replay: the whole body at once
        rfq = _quote_request(message.get("body", b"")) if _is_json(scope) else None
        if rfq is None or not isinstance(client, AuthorizedClient):
            await self.app(scope, _again(message, receive), send)
            return
        scope["route"] = self.route()  # what the metrics label the request with
        try:
            answer: Response = JSONResponse((await self.desk.quote(rfq, client)).to_json())
        except SiteagentError as error:
            answer = errors.answer(error, self.desk.context.retry_after_s())
        await answer(scope, receive, send)


def _is_json(scope: Dict[str, Any]) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            return bool(value.split(b";")[0].strip().lower() == b"application/json")
    return False


def _quote_request(body: bytes) -> Optional[QuoteRequest]:
    """The request for quotes in ``body``, as the framework would read it; None if it does
    not validate (the framework then answers why)."""
    try:
        return QuoteRequest.model_validate(json.loads(body))
    except (ValueError, pydantic.ValidationError):
        return None


def _again(message: Dict[str, Any], receive: Any) -> Any:
    """A ``receive`` that gives ``message`` (already read) first."""
    given = False

    async def replayed() -> Dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return message
        result: Dict[str, Any] = await receive()
        return result

    return replayed


async def authenticated_client(
    request: fastapi.Request, _: Optional[str] = Security(SIGNATURE)
) -> AuthorizedClient:
    """The client whose signature the gate checked (siteagent.http.gate) before the body
    was parsed; the parameter declares the signature in the OpenAPI."""
    client = getattr(request.state, "client", None)
    if not isinstance(client, AuthorizedClient):  # the gate signs every state change
        raise Unauthenticated("this request must be signed (RFC 9421)", code="unsigned")
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


def _naming(field: str, step: Callable[..., _T], *args: Any) -> _T:
    """``step(*args)``, an InvalidRequest it raises naming ``field`` (its part of a batch)."""
    try:
        return step(*args)
    except InvalidRequest as exc:
        exc.field = field if exc.field is None else f"{field}.{exc.field}"
        raise


def add_routes(
    app: fastapi.FastAPI, context: ApiContext, desk: QuoteDesk, admission: Admission
) -> None:
    """Register this area's routes on ``app``."""
    deals = context.deals

    @app.post("/v1/quotes", tags=["market"], responses=ERRORS, response_model=QuoteAnswer)
    async def quotes(body: QuoteRequest, client: AuthorizedClient = signed) -> Response:
        """Priced offers for a request for quotes, or a refusal with its reason."""
        return JSONResponse((await desk.quote(body, client)).to_json())

    @app.post(
        "/v1/quotes/batch",
        tags=["market"],
        responses=ERRORS,
        response_model=BatchQuoteAnswer,
    )
    async def quote_batch(body: BatchQuoteRequest, client: AuthorizedClient = signed) -> Response:
        """Several requests for quotes in one call, each answered as ``POST /v1/quotes``
        would; offers named in ``withdraw`` lapse first (docs/batches.md)."""
        return JSONResponse(await desk.quote_all(body, client))

    @app.post(
        "/v1/reservations/batch",
        tags=["market"],
        status_code=201,
        **answers(BatchReservations),
    )
    def accept_batch(
        body: BatchAcceptRequest,
        client: AuthorizedClient = signed,
        key: Optional[str] = IdempotencyKey,
    ) -> Dict[str, Any]:
        """Accept several offers, all or nothing: tentative reservations for every one, or
        none and the error of the part that failed (docs/batches.md)."""
        admission.batch(client, "/v1/reservations/batch", len(body.offer_ids))
        accounts = (client.account,) if client.account else ()
        digest = hashlib.sha256(",".join(body.offer_ids).encode()).hexdigest()
        idempotency = key or f"accept-batch-{digest}"
        done = deals.accept_all(
            body.offer_ids, client.key_id, idempotency, (client.user,), accounts
        )
        return {"reservations": [deal.to_json() for deal in done]}

    @app.post(
        "/v1/reservations/confirm",
        tags=["market"],
        **answers(BatchReservations),
    )
    def confirm_batch(
        body: BatchConfirmRequest, client: AuthorizedClient = signed
    ) -> Dict[str, Any]:
        """Confirm several reservations with one signature over their receipt ids; the bank
        books them all in one go (docs/batches.md)."""
        admission.batch(client, "/v1/reservations/confirm", confirm_cost(len(body.parts)))
        parts = [(part.reservation_id, part.receipt_id) for part in body.parts]
        done = deals.confirm_all(parts, body.signature, client)
        return {"reservations": [deal.to_json() for deal in done]}

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
