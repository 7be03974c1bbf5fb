"""One site as the buyer talks to it: the published HTTP API over one keep-alive HTTPS
session, every state-changing request signed, every answer read into the protocol's models.

A :class:`SiteConnection` speaks exactly what docs/protocol.md and the
OpenAPI publish, through :mod:`siteagent.protocol` (the models, :func:`sign_request`, the
signed documents), so that it does what a third-party buyer would and nothing more:

- TLS is verified against the site's ``ca`` file, or against its pinned certificate (the
  SHA-256 of its DER bytes, checked during the handshake, before a byte of a request is
  sent); plain HTTP is never spoken;
- every POST and DELETE, and the buyer's GET of its own reservation (or account), carries an
  RFC 9421 signature over the exact URL sent, made with the buyer's key for this site;
- an answer with the API's error body is :class:`SiteError` (its code from
  :mod:`siteagent.protocol.errors`, its status, the field at fault); a site that cannot be
  reached, times out, or fails TLS is :class:`SiteUnreachable`; an answer that is not the
  protocol (not JSON, not the model, a receipt whose signature does not verify) is
  :class:`BadAnswer`. Callers decide what a failure means: a fan-out shows it as a row.

Nothing is retried here: a retry of an accept, confirm or cancel is safe only with the same
idempotency key, which the caller holds (and journals).

A connection is meant for one thread at a time (``requests.Session`` is not documented as
thread-safe); different sites are asked in parallel, each on its own connection.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Type, TypeVar

import pydantic
import requests
import requests.adapters
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from siteagent.client.sites import Site
from siteagent.core.errors import SiteagentError
from siteagent.protocol import documents, keys, signing
from siteagent.protocol.documents import Cancellation, Receipt
from siteagent.protocol.errors import INVALID_ANSWER, NOT_OWNER, UNREACHABLE
from siteagent.protocol.models import (
    BidAnswer,
    BidRequest,
    ErrorResponse,
    Info,
    OfferView,
    PublicReservationView,
    QuoteAnswer,
    QuoteRequest,
    RefusalView,
    ReservationView,
    SlotList,
    WaitHistory,
)
from siteagent.protocol.sessions import (
    AnswerTooLarge,
    DeadlinePassed,
    NoNetrc,
    Reply,
    bounded_send,
    proxies_for,
)

__all__ = [
    "BadAnswer",
    "Cancellation",
    "Receipt",
    "ReservationView",
    "SiteConnection",
    "SiteError",
    "SiteInfo",
    "SiteQuote",
    "SiteUnreachable",
    "Tentative",
]

M = TypeVar("M", bound=pydantic.BaseModel)

#: How urllib3 names the connection at the start of its messages, which says nothing new.
_CONNECTION_PREFIX = re.compile(r"^(<[^>]*>|\w+\([^)]*\)): ")

#: The deepest an answer may nest (objects and arrays): the API's nest five levels at most;
#: past this an answer is refused before anything walks it recursively.
MAX_NESTING = 32

#: What ``GET /v1/info`` answers: the published model itself.
SiteInfo = Info

#: A request body as JSON, or none.
Payload = Optional[Mapping[str, Any]]


class SiteError(SiteagentError):
    """The site answered with the API's error body: ``code`` (stable: docs/protocol.md,
    "Error codes"), ``message`` (for a person), the HTTP ``status``, the request ``field`` at
    fault if one is, and ``retry_after_s`` when the site said when to retry (503, 429)."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        site: str,
        status: Optional[int],
        field: Optional[str] = None,
        retry_after_s: Optional[int] = None,
    ) -> None:
        super().__init__(f"{site}: {message}", code=code, field=field, retry_after_s=retry_after_s)
        self.site = site
        self.message = message
        self.status = status


class BadAnswer(SiteError):
    """The site answered something that is not the protocol: not JSON, not the published
    model, or a signed document that does not verify. Not to be trusted, nor retried as is."""


class SiteUnreachable(SiteagentError):
    """No answer: the connection was refused or timed out, the answer did not come within the
    read timeout (``timed_out``), or TLS failed (a certificate that is not the site's)."""

    code = UNREACHABLE

    def __init__(self, message: str, *, site: str, timed_out: bool = False) -> None:
        super().__init__(f"{site}: {message}")
        self.site = site
        self.reason = message
        self.timed_out = timed_out


@dataclass(frozen=True)
class SiteQuote:
    """A site's answer to a request for quotes: offers (earliest first), or a refusal."""

    site: str
    request: QuoteRequest
    answer: QuoteAnswer

    @property
    def offers(self) -> List[OfferView]:
        return self.answer.offers

    @property
    def refusal(self) -> Optional[RefusalView]:
        """Why the site offers nothing (``None`` when it offers)."""
        return self.answer.refusal if self.answer.status == "refused" else None


@dataclass(frozen=True)
class Tentative:
    """An accepted offer: a TENTATIVE reservation at ``site``, to be confirmed by signing
    ``deal`` (kept exactly as the site sent it: its canonical JSON is what is signed) before
    ``deadline`` (epoch seconds), or it is released."""

    site: str
    reservation_id: str
    deal: Dict[str, Any]
    deadline: Optional[float]
    reservation: ReservationView


class SiteConnection:
    """The buyer's connection to one site (see the module's docstring)."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self._session = requests.Session()
        self._session.auth = NoNetrc()
        self._session.headers.update({"Accept": "application/json"})
        if site.pin is not None:
            self._session.mount("https://", PinnedAdapter(site.pin))
            self._session.verify = False  # the pin replaces the CA check, see PinnedAdapter
        else:
            self._session.verify = str(site.ca)
        self._proxies = proxies_for(self._session, site.url)
        self._key: Optional[Ed25519PrivateKey] = None
        self._info: Optional[Info] = None

    # ---- the agent's API

    def info(self) -> SiteInfo:
        """``GET /v1/info``: the site's attributes, cores, pricing and public key (kept, for
        the receipts this connection verifies)."""
        self._info = self.parsed(Info, self.request("GET", "/v1/info", signed=False))
        return self._info

    def slots(self, limit: int = 1000) -> SlotList:
        """``GET /v1/slots``: the free holes the site advertises, earliest first."""
        path = f"/v1/slots?limit={limit}"
        return self.parsed(SlotList, self.request("GET", path, signed=False))

    def waits(self) -> WaitHistory:
        """``GET /v1/history/waits``: the site's queue waits by cores and walltime bins, with
        each bin's published bounds on their quantiles."""
        return self.parsed(WaitHistory, self.request("GET", "/v1/history/waits", signed=False))

    def quote(self, request: QuoteRequest) -> SiteQuote:
        """``POST /v1/quotes``: the site's offers for ``request``, or its refusal."""
        body = request.model_dump(mode="json", exclude_unset=True, exclude_none=True)
        answer = self.parsed(QuoteAnswer, self.request("POST", "/v1/quotes", body))
        return SiteQuote(self.site.name, request, answer)

    def accept(self, offer_id: str, idempotency_key: str) -> Tentative:
        """``POST /v1/reservations``: accept one of this site's offers. The same
        ``idempotency_key`` again (a retry after a lost answer) has one effect."""
        raw = self.request(
            "POST", "/v1/reservations", {"offer_id": offer_id}, idempotency_key=idempotency_key
        )
        reservation = self.parsed(ReservationView, raw)
        if reservation.deal.offer.id != offer_id:
            raise self.bad(f"the deal is for offer {reservation.deal.offer.id}, not {offer_id}")
        return Tentative(
            self.site.name, reservation.id, dict(raw["deal"]), reservation.deadline, reservation
        )

    def confirm(self, tentative: Tentative) -> Receipt:
        """``POST /v1/reservations/{id}/confirm`` with the buyer's signature over the deal; the
        receipt, once its deal is the one signed and the site's signature verifies against the
        key the site publishes (BadAnswer otherwise)."""
        self.site_public_key()  # known before the deal is confirmed, to check the receipt
        body = documents.confirm_body(tentative.deal, self.signing_key(), self.site.key_id)
        raw = self.request("POST", reservation_path(tentative.reservation_id, "/confirm"), body)
        self.parsed(ReservationView, raw)
        if raw.get("receipt") is None:
            raise self.bad(
                f"the confirm of {tentative.reservation_id} answered no receipt "
                f"(state {raw.get('state')})"
            )
        return self.verified_receipt(raw["receipt"], tentative.deal)

    def cancel(self, reservation_id: str) -> Optional[Cancellation]:
        """``DELETE /v1/reservations/{id}``: the site's signed refund (verified) if the
        reservation was confirmed, None if it was tentative (free: nothing was paid)."""
        raw = self.request("DELETE", reservation_path(reservation_id))
        self.parsed(ReservationView, raw)
        if raw.get("cancellation") is None:
            return None
        return self.verified_cancellation(raw["cancellation"])

    def bid(self, call: BidRequest) -> BidAnswer:
        """``POST /v1/bids``: the site's bid in an English auction (its first call announces
        the job), valued now; a bid's offer is accepted like any other."""
        body = call.model_dump(mode="json", exclude_none=True)
        answer = self.parsed(BidAnswer, self.request("POST", "/v1/bids", body))
        if answer.auction_id != call.auction_id:
            raise self.bad(f"the bid is for auction {answer.auction_id}, not {call.auction_id}")
        return answer

    def release_bid(self, auction_id: str) -> BidAnswer:
        """``DELETE /v1/bids/{auction_id}``: the site's bid in a lost auction released."""
        path = f"/v1/bids/{urllib.parse.quote(auction_id, safe='')}"
        return self.parsed(BidAnswer, self.request("DELETE", path))

    def reservation(self, reservation_id: str) -> ReservationView:
        """``GET /v1/reservations/{id}``, signed: the buyer's whole view of its reservation."""
        raw = self.request("GET", reservation_path(reservation_id), signed=True)
        if "deal" not in raw:  # the public part: the site does not take us for its buyer
            public = self.parsed(PublicReservationView, raw)
            raise SiteError(
                f"reservation {public.id} is not yours: the site shows its details only to "
                f"its buyer, and {self.site.key_id!r} (the key the sites file signs with "
                "here) is not its buyer",
                code=NOT_OWNER,
                site=self.site.name,
                status=403,
            )
        return self.parsed(ReservationView, raw)

    # ---- documents

    def site_public_key(self) -> Ed25519PublicKey:
        """The key this site countersigns with, as its ``/v1/info`` publishes it."""
        info = self._info or self.info()
        return keys.parse_public_key(info.public_key.value)

    def verified_receipt(self, data: Any, deal: Mapping[str, Any]) -> Receipt:
        """``data`` as a receipt of ``deal`` signed by the buyer and countersigned by this
        site; BadAnswer naming what does not hold."""
        try:
            receipt = Receipt.from_json(data)
        except ValueError as exc:
            raise self.bad(f"a malformed receipt ({exc})") from None
        if receipt.deal != dict(deal):
            raise self.bad("the receipt's deal is not the deal the buyer signed")
        if not receipt.signed_by_user(self.signing_key().public_key()):  # or of its batch
            raise self.bad("the receipt does not carry the buyer's signature of the deal")
        self.check_site_signature(receipt.countersigned(), receipt.site_signature, "receipt")
        return receipt

    def verified_cancellation(self, data: Any) -> Cancellation:
        """``data`` as a refund signed by this site; BadAnswer otherwise."""
        try:
            cancellation = Cancellation.from_json(data)
        except ValueError as exc:
            raise self.bad(f"a malformed cancellation ({exc})") from None
        signed = cancellation.signed_document()
        self.check_site_signature(signed, cancellation.site_signature, "cancellation")
        return cancellation

    def check_site_signature(self, document: Any, signature: documents.Signed, what: str) -> None:
        published = (self._info or self.info()).public_key.keyid
        if signature.key_id != published:
            raise self.bad(
                f"the {what} is signed by {signature.key_id!r}, not by {published!r}",
                "bad_site_signature",
            )
        if not documents.signature_valid(document, signature, self.site_public_key()):
            raise self.bad(
                f"the site's signature of the {what} does not verify", "bad_site_signature"
            )

    def bad(self, message: str, code: str = INVALID_ANSWER) -> BadAnswer:
        """An answer whose documents do not hold together (a deal, a receipt, a refund)."""
        return BadAnswer(message, code=code, site=self.site.name, status=None)

    # ---- HTTP

    def signing_key(self) -> Ed25519PrivateKey:
        """The buyer's key for this site, read (and its file mode checked) once."""
        if self._key is None:
            self._key = self.site.signing_key()
        return self._key

    def request(
        self,
        method: str,
        path: str,
        payload: Payload = None,
        signed: Optional[bool] = None,
        idempotency_key: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Send one request (signed unless it is a GET, or as ``signed`` says) and return
        its JSON object; SiteError, BadAnswer or SiteUnreachable otherwise."""
        body = b"" if payload is None else json.dumps(payload, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        prepared = self._session.prepare_request(
            requests.Request(method, self.site.url + path, data=body or None, headers=headers)
        )
        if method != "GET" if signed is None else signed:
            assert prepared.url is not None
            prepared.headers.update(
                signing.sign_request(
                    method, prepared.url, body, self.signing_key(), self.site.key_id
                )
            )
        timeouts = self.site.timeouts
        try:
            reply = bounded_send(
                self._session,
                prepared,
                (timeouts.connect, timeouts.read),
                timeouts.total,
                self._proxies,
            )
        except requests.RequestException as exc:
            reason = unreachable_reason(exc, self.site)
            timed_out = isinstance(exc, requests.Timeout)
            raise SiteUnreachable(reason, site=self.site.name, timed_out=timed_out) from None
        except DeadlinePassed as exc:
            raise SiteUnreachable(str(exc), site=self.site.name, timed_out=True) from None
        except AnswerTooLarge as exc:
            raise BadAnswer(
                str(exc), code=INVALID_ANSWER, site=self.site.name, status=None
            ) from None
        return self.answer(reply)

    def answer(self, reply: Reply) -> Dict[str, Any]:
        """The JSON object of a successful answer, or the error it stands for."""
        if 300 <= reply.status < 400:
            where = reply.headers.get("Location", "elsewhere")
            raise BadAnswer(
                f"HTTP {reply.status} to {where!r}: redirects are not followed (a signed "
                "request goes only where the sites file says); fix the site's url there",
                code=INVALID_ANSWER,
                site=self.site.name,
                status=reply.status,
            )
        try:
            data = json.loads(reply.body)
        except (ValueError, RecursionError):  # not JSON (or nested past any sense)
            data = None
        if nesting(data) > MAX_NESTING:
            raise BadAnswer(
                f"the answer nests deeper than {MAX_NESTING} levels: not the API's",
                code=INVALID_ANSWER,
                site=self.site.name,
                status=reply.status,
            )
        if reply.ok and isinstance(data, dict):
            return data
        if reply.ok:
            raise BadAnswer(
                "the answer is not a JSON object",
                code=INVALID_ANSWER,
                site=self.site.name,
                status=reply.status,
            )
        try:
            detail = ErrorResponse.model_validate(data).error
        except pydantic.ValidationError:
            raise BadAnswer(
                f"HTTP {reply.status} {reply.reason} without the API's error body",
                code=INVALID_ANSWER,
                site=self.site.name,
                status=reply.status,
            ) from None
        raise SiteError(
            detail.message,
            code=detail.code,
            site=self.site.name,
            status=reply.status,
            field=detail.field,
            retry_after_s=retry_after(reply.headers.get("Retry-After")),
        )

    def parsed(self, model: Type[M], data: Any) -> M:
        """``data`` as ``model``; BadAnswer naming the first field that is not."""
        try:
            return model.model_validate(data)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "the body"
            raise BadAnswer(
                f"not a {model.__name__} of the API: {where}: {first['msg']}",
                code=INVALID_ANSWER,
                site=self.site.name,
                status=None,
            ) from None

    def close(self) -> None:
        """Close the session's kept-alive connections."""
        self._session.close()

    def __enter__(self) -> SiteConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PinnedAdapter(requests.adapters.HTTPAdapter):
    """HTTPS that trusts exactly one certificate: urllib3 compares the SHA-256 of the
    certificate the server presents with the pin during the handshake and drops the
    connection on a mismatch, before the request is sent. No CA is consulted and the host
    name is not matched: the pin names the very certificate, which is stronger than both."""

    def __init__(self, pin: str) -> None:
        self.pin = pin
        super().__init__(max_retries=0)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["assert_fingerprint"] = self.pin
        super().init_poolmanager(*args, **kwargs)


def reservation_path(reservation_id: str, action: str = "") -> str:
    """The route of a reservation, its id quoted (an id is the site's word, or the user's)."""
    return f"/v1/reservations/{urllib.parse.quote(reservation_id, safe='')}{action}"


def unreachable_reason(exc: requests.RequestException, site: Site) -> str:
    """Why a request got no answer, in a sentence: what failed and the low-level cause."""
    detail = innermost(exc)
    if isinstance(exc, requests.exceptions.SSLError):
        trusted = (
            f"does {site.ca} hold the site's certificate or its CA"
            if site.ca
            else ("is the pin the SHA-256 of the site's current certificate")
        )
        return f"TLS failed ({detail}): {trusted}?"
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return f"no connection within {site.timeouts.connect:g} s"
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return f"no answer within {site.timeouts.read:g} s"
    if isinstance(exc, requests.exceptions.ConnectionError):
        return f"cannot connect to {site.url} ({detail})"
    return f"the request failed ({detail})"


def innermost(exc: BaseException) -> str:
    """The message of the deepest cause urllib3 gives (``MaxRetryError.reason`` and the
    like), without the connection object and the URL that requests wraps it in."""
    reason = exc
    for _ in range(8):
        nested = getattr(reason, "reason", None)
        if not isinstance(nested, BaseException):
            nested = reason.args[0] if reason.args else None
        if not isinstance(nested, BaseException):
            break
        reason = nested
    return _CONNECTION_PREFIX.sub("", str(reason))


def nesting(data: Any) -> int:
    """How deep JSON ``data`` nests (counted without recursion: the data may be hostile)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            deepest = max(deepest, depth)
            stack.extend((item, depth + 1) for item in value)
    return deepest


def retry_after(value: Optional[str]) -> Optional[int]:
    """Seconds of a ``Retry-After`` header given as seconds (the only form the API sends)."""
    return int(value) if value is not None and value.isdigit() else None
