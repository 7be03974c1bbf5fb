"""How every failure of a request becomes a JSON error, for the agent's API and the bank alike.

Errors are ``{"error": {"code", "message"[, "field"][, "problems"]}}`` with the status the one
table gives the code (:data:`siteagent.protocol.errors.STATUS`), so that a new route cannot
answer an error differently from the others, and nothing a client sends can surface as a bare
500: bad input is a 422 naming the field, a condition that passes by itself a 503 with
Retry-After. Only an exception that is no :class:`SiteagentError` (a bug) is a 500, logged
with its traceback.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

import fastapi
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from siteagent.core.errors import SiteagentError
from siteagent.protocol.errors import status_of

log = logging.getLogger("siteagent.serving")

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


def answer(error: SiteagentError, retry_after_s: int) -> JSONResponse:
    """The response to ``error``: its code's status, and Retry-After on a 429 or a 503 (the
    error's own estimate, else ``retry_after_s``)."""
    status = status_of(error.code)  # logs a code that is not registered
    if status == 500:
        log.error("error code %r reached a client as 500 (a bug): %s", error.code, error)
    headers = dict(error.headers)
    if status in (429, 503):
        headers["Retry-After"] = str(error.retry_after_s or retry_after_s)
    return error_response(status, error.code, str(error), error.field, headers)


def validation_problem(error: Mapping[str, Any]) -> Tuple[str, str]:
    """(field, sentence) of one pydantic error: ``body.cores`` -> ``cores``; a body that is
    not JSON at all is the ``body``'s problem (not a character position's)."""
    if error.get("type") == "json_invalid":
        reason = (error.get("ctx") or {}).get("error", "not valid JSON")
        return "body", f"body: the body is not a JSON document ({reason})"
    location = [str(part) for part in error.get("loc", ())]
    whole_body = location == ["body"]
    if location and location[0] in ("body", "query", "path", "header"):
        location = location[1:]
    field = ".".join(location) or "body"
    if whole_body:  # a body that decoded to something else than an object, or did not decode
        return field, f"body: the body is not a JSON object ({error.get('msg', 'invalid')})"
    return field, f"{field}: {error.get('msg', 'invalid')}"


def install(app: fastapi.FastAPI, retry_after_s: Callable[[], int]) -> None:
    """Answer every error of ``app`` as JSON; ``retry_after_s`` is when a retry can see
    something new (the agent's next poll), for 503s that do not know better."""

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
        if exc.status_code == 400:  # the framework could not even parse the body
            message = f"the body is not a JSON document ({exc.detail})"
            return error_response(422, "invalid_request", message, "body")
        code = FRAMEWORK.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), headers=exc.headers)

    async def on_error(_: fastapi.Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, SiteagentError)
        return answer(exc, retry_after_s())

    async def on_bug(_: fastapi.Request, exc: Exception) -> JSONResponse:
        log.error("unexpected error serving a request", exc_info=exc)
        return error_response(500, "internal_error", "the service failed unexpectedly; see its log")

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(SiteagentError, on_error)
    app.add_exception_handler(Exception, on_bug)
