"""The agent's HTTP API (ASGI, FastAPI): what a buyer and a monitoring system talk to.

Routes (docs/design.md §1, §3; the marketplace paper's protocol): ``/v1/info``, ``/v1/slots``,
``/v1/quotes``, ``/v1/reservations`` (accept, show, confirm, cancel), ``/v1/history/waits``,
``/healthz`` and ``/metrics``; the OpenAPI description is ``/v1/openapi.json``.

What this module decides, and why:

- **Reads come from the agent's latest state.** Slots and quotes are computed from the plan
  the agent's loop made (one snapshot per cycle), never by polling the batch system per
  request: a burst of quotes costs no batch-system calls, and a slow batch system never makes
  a quote slow. When the last poll failed, they answer 503 with Retry-After rather than sell
  capacity from a picture of the cluster that may be wrong.
- **Every POST and DELETE is authenticated** by an RFC 9421 signature (security.py) before
  its body is even validated, so a refused request changes nothing and learns nothing.
- **Blocking work runs in the thread pool**: endpoints are plain ``def`` (FastAPI runs them in
  worker threads), because accept, confirm and cancel call the batch system and the store.
  Quotes are the exception, being the one route buyers call in bursts: they are answered on
  the event loop, which prices them at once when that is cheap and otherwise waits for the
  pricing thread (api_pricing.py), and waits for their offers to be stored (offer_writer.py):
  a hand-over to a worker thread costs more CPU than a unit-price quote.
- **Errors are JSON** ``{"error": {"code", "message"[, "field"]}}``: a stable code for
  programs, a sentence for people, and the field at fault for bad input (422, never 500).
- **Confirm and cancel are safe to retry.** Without an Idempotency-Key header the key is
  derived from the operation and the reservation, and the receipt the site signed first is
  the one kept and booked, so a retried confirm books nothing twice.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, Optional, Union

import fastapi
from fastapi import Depends, Header, Path, Query, Security
from fastapi.responses import JSONResponse, Response
from fastapi.security import APIKeyHeader
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from siteagent.agent.metrics import Metrics
from siteagent.api import errors
from siteagent.api.errors import ApiError
from siteagent.api.service import API_VERSION, ApiContext, Service
from siteagent.ledger.bank import Ledger, LedgerConflict
from siteagent.protocol.models import (
    MAX_TIME,
    OFFER_ID_PATTERN,
    AcceptRequest,
    ConfirmRequest,
    ErrorResponse,
    QuoteRequest,
)
from siteagent.security.clients import AuthorizedClient

__all__ = ["ApiContext", "authenticated_client", "create_app", "register_participants"]

log = logging.getLogger("siteagent.api")

ERRORS: Dict[Union[int, str], Dict[str, Any]] = {
    status: {"model": ErrorResponse} for status in (401, 403, 404, 409, 422, 502, 503)
}


# --------------------------------------------------------------------------- the app


def create_app(context: ApiContext) -> fastapi.FastAPI:
    """The ASGI application serving ``context`` (the service runs it under uvicorn)."""
    app = fastapi.FastAPI(
        title="siteagent",
        version=API_VERSION,
        description="A site agent for an HPC batch system: advertised slots, priced quotes "
        "and real advance reservations, confirmed by doubly signed receipts.",
        openapi_url="/v1/openapi.json",
        docs_url="/v1/docs",
        redoc_url=None,
    )
    service = Service(context)
    app.state.service = service
    register_participants(context)
    errors.install(app, service.retry_after)
    if context.metrics is not None:
        app.add_middleware(Timed, metrics=context.metrics)
    add_routes(app, service)
    return app


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


async def authenticated_client(
    request: fastapi.Request, _: Optional[str] = Security(SIGNATURE)
) -> AuthorizedClient:
    """The client that signed this request (RFC 9421), or a 401/503 SecurityError.

    Async so that it can read the body (cached: the route parses the same bytes again);
    verifying one Ed25519 signature is too quick to be worth a thread.
    """
    service: Service = request.app.state.service
    body = await request.body()
    headers = list(request.headers.items())
    return service.context.authenticator.authenticate(
        request.method, str(request.url), headers, body
    )


Client = Depends(authenticated_client)
IdempotencyKey = Header(
    None,
    alias="Idempotency-Key",
    min_length=1,
    max_length=128,
    description="retry with the same key to get the same answer; default: one per operation",
)
ReservationId = Path(pattern=OFFER_ID_PATTERN)


def add_routes(app: fastapi.FastAPI, service: Service) -> None:
    """The routes, each a thin adapter from HTTP to a :class:`Service` method."""

    @app.get("/v1/info", tags=["site"])
    def info() -> Dict[str, Any]:
        """The site's description, visible pricing parameters, public key and API version."""
        return service.info()

    @app.get("/v1/slots", tags=["site"], responses=ERRORS)
    def slots(
        min_cores: int = Query(1, ge=1, le=10**7, description="only slots this wide (units)"),
        min_duration: int = Query(1, ge=1, le=MAX_TIME, description="only slots this long (s)"),
        start: Optional[int] = Query(None, ge=0, le=MAX_TIME, description="window start"),
        end: Optional[int] = Query(None, ge=0, le=MAX_TIME, description="window end"),
        limit: int = Query(100, ge=1, le=1000),
    ) -> Dict[str, Any]:
        """Advertised slots: free holes of the predicted schedule overlapping the window."""
        return service.slots(min_cores, min_duration, start, end, limit)

    @app.post("/v1/quotes", tags=["market"], responses=ERRORS, response_model=Dict[str, Any])
    async def quotes(body: QuoteRequest, client: AuthorizedClient = Client) -> Response:
        """Priced offers for a request for quotes, or a refusal with its reason."""
        return JSONResponse(await service.quote(body, client))

    @app.post("/v1/reservations", tags=["market"], status_code=201, responses=ERRORS)
    def accept(
        body: AcceptRequest,
        client: AuthorizedClient = Client,
        key: Optional[str] = IdempotencyKey,
    ) -> Dict[str, Any]:
        """Accept an offer: a tentative reservation, to be confirmed before its deadline."""
        return service.accept(body.offer_id, client, key)

    @app.get("/v1/reservations/{reservation_id}", tags=["market"], responses=ERRORS)
    def show(reservation_id: str = ReservationId) -> Dict[str, Any]:
        """A reservation: its state, the deal to sign, and its receipt once confirmed."""
        return service.show(reservation_id)

    @app.post("/v1/reservations/{reservation_id}/confirm", tags=["market"], responses=ERRORS)
    def confirm(
        body: ConfirmRequest,
        reservation_id: str = ReservationId,
        client: AuthorizedClient = Client,
        key: Optional[str] = IdempotencyKey,
    ) -> Dict[str, Any]:
        """Confirm with the signed deal; answers the doubly signed receipt."""
        return service.confirm(reservation_id, body.model_dump(), client, key)

    @app.delete("/v1/reservations/{reservation_id}", tags=["market"], responses=ERRORS)
    def cancel(
        reservation_id: str = ReservationId,
        client: AuthorizedClient = Client,
        key: Optional[str] = IdempotencyKey,
    ) -> Dict[str, Any]:
        """Cancel: free while tentative, the agreed penalty once confirmed."""
        return service.cancel(reservation_id, client, key)

    @app.get("/v1/history/waits", tags=["site"], responses=ERRORS)
    def waits(
        since: Optional[int] = Query(None, ge=0, le=MAX_TIME, description="jobs started since"),
    ) -> Dict[str, Any]:
        """Observed queue waits by core-count and walltime bins."""
        return service.waits(since)

    @app.get("/healthz", tags=["operations"])
    def healthz() -> JSONResponse:
        """Whether the batch system answers, and how old the agent's snapshot is."""
        body, healthy = service.health()
        if healthy:
            return JSONResponse(body)
        headers = {"Retry-After": str(service.retry_after())}
        return JSONResponse(body, status_code=503, headers=headers)

    @app.get("/metrics", tags=["operations"], responses=ERRORS)
    def metrics() -> Response:
        """Prometheus metrics (text exposition format)."""
        if service.context.metrics is None:
            raise ApiError(404, "metrics_disabled", "this agent was started without metrics")
        data, content_type = service.context.metrics.render()
        return Response(data, media_type=content_type)


class Timed:
    """ASGI middleware observing each request's latency by route template (bounded labels).

    Plain ASGI rather than Starlette's ``BaseHTTPMiddleware``, which runs every request
    through an extra task and memory streams: about 0.1 ms of CPU per request, several times
    what pricing a unit-price quote on a 10,000-job queue costs.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            elapsed = time.perf_counter() - began
            self.metrics.observe_request(route, scope["method"], status, elapsed)


def register_participants(context: ApiContext) -> None:
    """Open ledger accounts for the site and every authorized client (a no-op when they
    exist), so that any receipt the API signs can be booked. A ledger service has its own
    participants file: the agent opens no accounts there."""
    if not isinstance(context.ledger, Ledger):
        return
    parties = [(context.site_key_id, "site", context.site_key.public_key())]
    parties += [
        (client.key_id, "user", client.public_key)
        for client in context.authenticator.clients.values()
    ]
    for key_id, kind, public_key in parties:
        try:
            context.ledger.register(key_id, kind, public_key)
        except LedgerConflict as exc:
            log.error(
                "ledger: %s; its receipts will be refused until an administrator resolves it", exc
            )
