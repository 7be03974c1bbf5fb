"""The agent's HTTP API (ASGI, FastAPI): what a buyer and a monitoring system talk to.

Routes, by area: the site (``/v1/info``, ``/v1/slots``, ``/v1/history/waits``, in
:mod:`.site`), the market (``/v1/quotes``, ``/v1/reservations`` accept, show, confirm and
cancel, in :mod:`.market`), English auctions (``/v1/bids``, in :mod:`.auctions`), operations
(``/healthz``, ``/metrics``, in :mod:`.operations`).
The OpenAPI description is ``/v1/openapi.json``; request and response bodies are the models
of :mod:`siteagent.protocol.models`, shared with the client (the protocol is the marketplace
paper's, docs/design.md §4.5).

Errors are JSON ``{"error": {"code", "message"[, "field"]}}`` with the status of the one table
(:mod:`siteagent.http.errors`): a stable code for programs, a sentence for people, and the
field at fault for bad input (422, never 500).
"""

from __future__ import annotations

import time
from typing import Any

import fastapi
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from siteagent.agent.metrics import Metrics
from siteagent.api import english_auctions, market, operations, site
from siteagent.api.context import ApiContext
from siteagent.api.rates import Admission
from siteagent.api.site import API_VERSION
from siteagent.http import errors
from siteagent.http.gate import Gate, signs_state_changes


def create_app(context: ApiContext) -> fastapi.FastAPI:
    """The ASGI application serving ``context`` (the service runs it under uvicorn); its
    :class:`~siteagent.api.market.QuoteDesk` is ``app.state.quotes``, closed by the owner."""
    app = fastapi.FastAPI(
        title="siteagent",
        version=API_VERSION,
        description="A site agent for an HPC batch system: advertised slots, priced quotes "
        "and real advance reservations, confirmed by doubly signed receipts.",
        openapi_url="/v1/openapi.json",
        docs_url=None,  # Swagger UI loads from a CDN, which a cluster may not reach: none
        redoc_url=None,
    )
    admission = Admission(context)
    desk = market.QuoteDesk(context, admission)
    app.state.context = context
    app.state.quotes = desk
    errors.install(app, context.retry_after_s)
    limits = context.site.config.api
    # inside the gate (signed, admitted); the quote route's own object labels its metrics
    app.add_middleware(market.QuoteLane, desk=desk, route=lambda: route_of(app, "/v1/quotes"))
    app.add_middleware(
        Gate,
        authenticate=lambda *request: context.authenticator.authenticate(*request),
        must_sign=signs_state_changes,
        max_body_bytes=limits.max_body_bytes,
        retry_after_s=context.retry_after_s,
        admit=admission,
    )
    if context.metrics is not None:  # outermost: refusals at the gate are timed too
        app.add_middleware(Timed, metrics=context.metrics)
    site.add_routes(app, context)
    market.add_routes(app, context, desk, admission)
    english_auctions.add_routes(app, context)
    operations.add_routes(app, context)
    return app


def route_of(app: fastapi.FastAPI, path: str) -> Any:
    """The route serving ``path``."""
    return next(route for route in app.routes if getattr(route, "path", None) == path)


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
