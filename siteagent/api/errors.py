"""How every failure of an API request becomes a JSON error with a stable code.

One table maps each error the core raises to an HTTP status and a code, so that a new route
cannot answer an error differently from the others, and nothing a client sends can surface
as a bare 500: bad input is a 422 naming the field, an unavailable batch system or store a
503 with Retry-After.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Type

import fastapi
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from siteagent.backends.base import BackendError, BackendUnavailable
from siteagent.ledger.bank import LedgerError
from siteagent.market import reservations
from siteagent.market.store import StoreError
from siteagent.security.errors import SecurityError

log = logging.getLogger("siteagent.api")


class ApiError(Exception):
    """An answer other than success: ``status``, a stable ``code``, a sentence, and the
    request field at fault (if one is)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: Optional[str] = None,
        headers: Optional[Dict[str, str]] = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.field = field
        self.headers = headers or {}


#: The reservation lifecycle's refusals: (status, code). Nothing was changed by any of them.
LIFECYCLE: Sequence[Tuple[Type[reservations.LifecycleError], int, str]] = (
    (reservations.UnknownOffer, 404, "unknown_offer"),
    (reservations.UnknownReservation, 404, "unknown_reservation"),
    (reservations.NotOwner, 403, "not_owner"),
    (reservations.IdempotencyKeyReused, 409, "idempotency_key_reused"),
    (reservations.IllegalTransition, 409, "illegal_transition"),
    (reservations.ReservationFailed, 409, "reservation_failed"),
)

#: HTTP errors raised by the framework itself (no such route, wrong method).
FRAMEWORK = {404: "not_found", 405: "method_not_allowed"}


def error_response(
    status: int,
    code: str,
    message: str,
    field: Optional[str] = None,
    headers: Optional[Mapping[str, str]] = None,
    problems: Optional[Sequence[str]] = None,
) -> JSONResponse:
    detail: Dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        detail["field"] = field
    if problems:
        detail["problems"] = list(problems)
    return JSONResponse({"error": detail}, status_code=status, headers=headers)


def classify(exc: Exception, retry_after: int) -> ApiError:
    """The API's answer to an exception raised while serving a request."""
    if isinstance(exc, ApiError):
        return exc
    retry = {"Retry-After": str(retry_after)}
    if isinstance(exc, SecurityError):
        headers = {**exc.headers, **(retry if exc.status == 503 else {})}
        return ApiError(exc.status, exc.code, str(exc), headers=headers)
    if isinstance(exc, reservations.OfferRefused):
        return ApiError(409, f"offer_{exc.code}", str(exc), field="offer_id")
    for kind, status, code in LIFECYCLE:
        if isinstance(exc, kind):
            return ApiError(status, code, str(exc))
    if isinstance(exc, BackendUnavailable):
        message = f"the batch system is not answering ({exc}); retry in {retry_after} s"
        return ApiError(503, "backend_unavailable", message, headers=retry)
    if isinstance(exc, BackendError):
        return ApiError(502, "backend_error", f"the batch system refused: {exc}")
    if isinstance(exc, StoreError):
        message = f"the agent's state database is unavailable ({exc}); retry in {retry_after} s"
        return ApiError(503, "store_unavailable", message, headers=retry)
    if isinstance(exc, LedgerError):
        return ApiError(exc.status, exc.code, str(exc))
    log.exception("unexpected error serving a request", exc_info=exc)
    return ApiError(500, "internal_error", "the agent failed unexpectedly; see its log")


def validation_problem(error: Dict[str, Any]) -> Tuple[str, str]:
    """(field, sentence) of one pydantic error: ``body.cores`` -> ``cores``."""
    location = [str(part) for part in error.get("loc", ())]
    if location and location[0] in ("body", "query", "path", "header"):
        location = location[1:]
    field = ".".join(location) or "body"
    return field, f"{field}: {error.get('msg', 'invalid')}"


def install(app: fastapi.FastAPI, retry_after: Callable[[], int]) -> None:
    """Answer every error of ``app`` as ``{"error": {"code", "message"[, "field"]}}``."""

    async def on_validation(_: fastapi.Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        problems = [validation_problem(dict(error)) for error in exc.errors()]
        field, first = problems[0] if problems else ("body", "the request is malformed")
        message = first if len(problems) == 1 else f"{first} (and {len(problems) - 1} more)"
        return error_response(
            422, "invalid_request", message, field, problems=[text for _, text in problems]
        )

    async def on_http(_: fastapi.Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = FRAMEWORK.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), headers=exc.headers)

    async def on_error(_: fastapi.Request, exc: Exception) -> JSONResponse:
        error = classify(exc, retry_after())
        return error_response(error.status, error.code, str(error), error.field, error.headers)

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    for kind in (
        ApiError,
        SecurityError,
        reservations.LifecycleError,
        BackendError,
        StoreError,
        LedgerError,
        Exception,
    ):
        app.add_exception_handler(kind, on_error)
