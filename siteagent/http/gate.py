"""The gate every request of a service passes before its route runs: the body read within its
limit, the signature checked, the caller admitted.

Before the route, because a framework decodes a body before a route's dependencies run: a
request that must be signed is refused before a byte of its body is decoded. Which requests
must be signed is the service's policy (``must_sign``); the client proved is
``request.state.client``. Why, and what it cost otherwise: docs/admin.md, "What a site can
rely on"."""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from siteagent.core.errors import SiteagentError
from siteagent.http.errors import answer, error_response
from siteagent.http.limits import TooLarge, read_body, replay

#: Checks a request's signature: (method, url, header pairs, body) -> the client it proves.
Authenticate = Callable[[str, str, List[Tuple[str, str]], bytes], Any]
#: Whether a request (method, path) must be signed.
MustSign = Callable[[str, str], bool]
#: Lets an authenticated client in, or raises a SiteagentError (e.g. 429): (client, method, path).
Admit = Callable[[Any, str, str], None]


class Gate:
    """ASGI middleware: the body within ``max_body_bytes`` (413 past it), then the signature of
    every request ``must_sign`` names or that carries one (401 before any parsing), then
    ``admit``. ``retry_after_s`` is when a 503 may be retried."""

    def __init__(
        self,
        app: ASGIApp,
        authenticate: Authenticate,
        must_sign: MustSign,
        max_body_bytes: int,
        retry_after_s: Callable[[], int],
        admit: Optional[Admit] = None,
    ) -> None:
        self.app = app
        self.authenticate = authenticate
        self.must_sign = must_sign
        self.max_body_bytes = max_body_bytes
        self.retry_after_s = retry_after_s
        self.admit = admit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            body = await read_body(receive, self.max_body_bytes)
        except TooLarge as error:
            refused = error_response(error.status, error.code, str(error), headers=CLOSE)
            await refused(scope, receive, send)
            return
        request = Request(scope)
        method, path = request.method, request.url.path
        signed = any(name in _SIGNATURE_FIELDS for name, _ in scope["headers"])
        if signed or self.must_sign(method, path):
            try:
                client = self.authenticate(method, str(request.url), _fields(scope), body)
                if self.admit is not None:
                    self.admit(client, method, path)
            except SiteagentError as error:
                await answer(error, self.retry_after_s())(scope, receive, send)
                return
            scope.setdefault("state", {})["client"] = client
        await self.app(scope, replay(body, receive), send)


def _fields(scope: Scope) -> List[Tuple[str, str]]:
    """The request's header fields as (name, value) text, as Starlette's ``Headers.items()``
    gives them, without building its ``Headers`` (a signed request's every field is read)."""
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in scope["headers"]]


#: The header fields that say a request is signed (ASGI gives names in lower case).
_SIGNATURE_FIELDS = (b"signature", b"signature-input")

#: A refused body is left unread: the connection cannot be reused.
CLOSE = {"connection": "close"}


def signs_state_changes(method: str, path: str) -> bool:
    """The agent's policy: every request that may change state (anything but a read) is
    signed."""
    return method not in ("GET", "HEAD", "OPTIONS")
