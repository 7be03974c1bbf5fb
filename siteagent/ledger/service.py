"""``siteagent ledger serve``: the ledger as its own HTTPS service, the bank of a federation.

One agent books its receipts in its embedded ledger; sites that sell to the same buyers share
one bank instead, so that a buyer's balance is one figure wherever it bought. This module is a
thin HTTP layer over :class:`~siteagent.ledger.Ledger`, which does all the checking:

- ``POST /v1/receipts`` books a doubly signed receipt (both signatures verified against the
  registered keys; the same receipt again answers the same transaction and moves nothing) if
  its buyer can pay;
- ``POST /v1/refunds`` books a cancellation signed by the deal's site;
- ``GET /v1/accounts/{id}`` and ``GET /v1/accounts/{id}/statement``, ``GET /healthz``.

Who has an account, and with which key, is the administrator's file (``ledger.participants``),
not something a request can change. Every request but the health check is signed (RFC 9421, as
the agent's are), checked by the agent's own gate and
:class:`~siteagent.security.authentication.Authenticator` against the keys the bank holds
*before* its body is parsed, and its body read within ``api.max_body_bytes``: a booking by a
site (a receipt still proves itself by its two signatures, and the bank trusts nobody's word
for a payment; the request's signature only keeps strangers from making the bank parse
anything), a read of an account by its holder or a site (a balance and the deals it paid for
are its holder's business).
Errors are the agent's JSON errors, with the ledger's codes: 422 refused (bad signature,
unknown signer), 402 a buyer who cannot pay, 401 an unsigned request, 403 another's account
(or a booking sent by a buyer, ``not_a_site``), 413 a body past the limit, 409
conflicting with what is booked, 404 unknown account or receipt.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Dict, Tuple, TypeVar

import fastapi

from siteagent.config.reading import ConfigError
from siteagent.config.schema import Config, LedgerConfig, default_public_names
from siteagent.core.defaults import DEFAULT_MAX_BODY_BYTES
from siteagent.http import errors
from siteagent.http.gate import Gate
from siteagent.http.server import ServiceError, run
from siteagent.ledger.bank import Ledger, LedgerForbidden, LedgerRefused
from siteagent.ledger.participants import load_participants, register_all
from siteagent.ledger.storage import DatabaseError
from siteagent.protocol.documents import Cancellation, MalformedDocument, Receipt
from siteagent.protocol.httpsig import authority
from siteagent.protocol.models import AccountBalance, AccountStatement
from siteagent.security.authentication import Authenticator, NonceCache
from siteagent.security.clients import AuthorizedClient
from siteagent.security.errors import Unauthenticated
from siteagent.security.replay import NONCES_FILE, SavedNonces

log = logging.getLogger("siteagent.ledger")

T = TypeVar("T")


#: What the service's one answer to an unexpected failure tells a client to wait.
RETRY_AFTER_S = 5


def create_app(
    ledger: Ledger, readers: Authenticator, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> fastapi.FastAPI:
    """The ASGI application serving ``ledger``; ``readers`` authenticates every request but
    the health check and the OpenAPI (its clients are the participants, see
    :func:`participant_keys`), before its body (at most ``max_body_bytes``) is parsed."""
    app = fastapi.FastAPI(
        title="siteagent ledger",
        description="The bank of a federation of site agents: books doubly signed receipts "
        "and refunds in double entry, and shows balances and statements.",
        openapi_url="/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    errors.install(app, lambda: RETRY_AFTER_S)
    app.add_middleware(
        Gate,
        authenticate=lambda *request: readers.authenticate(*request),
        must_sign=signed_at_the_bank,
        max_body_bytes=max_body_bytes,
        retry_after_s=lambda: RETRY_AFTER_S,
        admit=lambda who, method, path: admit_booking(ledger, who, method),
    )

    async def reader(request: fastapi.Request) -> AuthorizedClient:
        """The participant whose signature the gate checked (siteagent.http.gate)."""
        client = getattr(request.state, "client", None)
        if not isinstance(client, AuthorizedClient):  # the gate signs every account read
            raise Unauthenticated("this request must be signed (RFC 9421)", code="unsigned")
        return client

    signed = fastapi.Depends(reader)

    def readable(account: str, who: AuthorizedClient = signed) -> str:
        """``account``, if ``who`` may read it: its holder, or a site."""
        if who.key_id != account and ledger.kind_of(who.key_id) != "site":
            raise LedgerForbidden(
                f"account {account!r} is not {who.key_id!r}'s: only its holder and the sites "
                "may read it",
                code="not_account_holder",
            )
        return account

    account_read = fastapi.Depends(readable)

    @app.post("/v1/receipts", tags=["ledger"])
    def book(body: Dict[str, Any]) -> Dict[str, Any]:
        """Book a doubly signed receipt; the same receipt again answers its transaction."""
        receipt = parsed(Receipt.from_json, body, "malformed_receipt")
        return checked(lambda: ledger.book(receipt).to_json(), "malformed_receipt")

    @app.post("/v1/receipts/batch", tags=["ledger"])
    def book_all(body: Dict[str, Any]) -> Dict[str, Any]:
        """Book the receipts of a batch confirm (docs/batches.md) in one transaction: all or
        none; ``{"transactions": [...]}`` in their order."""
        documents = body.get("receipts")
        if not isinstance(documents, list) or not 1 <= len(documents) <= MAX_BATCH:
            raise LedgerRefused(
                f"receipts must be a list of 1 to {MAX_BATCH} receipts",
                code="malformed_receipt",
                field="receipts",
            )
        receipts = [
            parsed(Receipt.from_json, one, "malformed_receipt", f"receipts[{i}].")
            for i, one in enumerate(documents)
        ]
        booked = checked(lambda: ledger.book_all(receipts), "malformed_receipt")
        return {"transactions": [transaction.to_json() for transaction in booked]}

    @app.post("/v1/refunds", tags=["ledger"])
    def refund(body: Dict[str, Any]) -> Dict[str, Any]:
        """Book a cancellation signed by the deal's site: the price less the penalty back. A
        void (penalty 0) of a receipt not booked answers ``{"voided": receipt id}``: nothing
        moved, and that receipt is refused from now on."""
        cancellation = parsed(Cancellation.from_json, body, "malformed_cancellation")
        done = checked(lambda: ledger.refund(cancellation), "malformed_cancellation")
        return {"voided": cancellation.receipt_id} if done is None else done.to_json()

    @app.get("/v1/accounts/{account}", tags=["ledger"], response_model=AccountBalance)
    def balance(account: str = account_read) -> Dict[str, Any]:
        """An account's balance and credit (signed by its holder or a site)."""
        return {
            "account": account,
            "balance": str(ledger.balance(account)),
            "credit": str(ledger.credit(account)),
        }

    @app.get("/v1/accounts/{account}/statement", tags=["ledger"], response_model=AccountStatement)
    def statement(account: str = account_read) -> Dict[str, Any]:
        """An account's movements in booking order, each with the balance after it and the
        receipt it books, if any (signed by its holder or a site)."""
        lines = ledger.statement(account)
        return {
            "account": account,
            "balance": str(lines[-1].balance) if lines else "0.00",
            "lines": [line.to_json() for line in lines],
        }

    @app.get("/healthz", tags=["operations"])
    def healthz() -> Dict[str, Any]:
        """The database answers."""
        ledger.balance("bank")
        return {"status": "ok"}

    return app


#: Receipts one batch booking may hold (an agent's batches hold at most 100 parts).
MAX_BATCH = 1000


#: What the bank answers without a signature: its health, and the description of its routes.
UNSIGNED = frozenset({("GET", "/healthz"), ("GET", "/v1/openapi.json")})


def signed_at_the_bank(method: str, path: str) -> bool:
    """The bank's policy: every request is signed by a participant (a booking by a site, an
    account read by its holder or a site), but the health check and the OpenAPI."""
    return (method, path) not in UNSIGNED


def admit_booking(ledger: Ledger, who: AuthorizedClient, method: str) -> None:
    """A booking (any POST) is sent by a site: a buyer posts no receipt or refund itself."""
    if method == "POST" and ledger.kind_of(who.key_id) != "site":
        raise LedgerForbidden(
            f"{who.key_id!r} is not a site of the participants file: receipts and refunds are "
            "booked by the sites that signed them",
            code="not_a_site",
        )


def parsed(parse: Callable[[Any], T], document: Any, code: str, where: str = "") -> T:
    """``parse(document)``, or the 422 refusal that says what is malformed (its field after
    ``where``, the document's place in a batch)."""
    try:
        return parse(document)
    except MalformedDocument as exc:
        field = where + exc.field if exc.field else where[:-1] or None
        raise LedgerRefused(str(exc), code=code, field=field) from None
    except ValueError as exc:
        raise LedgerRefused(str(exc), code=code, field=where[:-1] or None) from None


def checked(operation: Callable[[], T], code: str) -> T:
    """``operation()``, with a document the signatures cannot even be checked over (one that
    has no canonical JSON form) refused as malformed rather than failing the service."""
    try:
        return operation()
    except ValueError as exc:
        raise LedgerRefused(f"the document cannot be canonicalized ({exc})", code=code) from None


def participant_keys(ledger: Ledger) -> Dict[str, AuthorizedClient]:
    """Who may sign a read: every participant, by the key the bank holds (the scheduler user
    and account of an authorized client mean nothing at the bank)."""
    return {
        key_id: AuthorizedClient(key_id, public_key, user="")
        for key_id, (_, public_key) in ledger.participants().items()
    }


def open_ledger(config: Config) -> Ledger:
    """The service's database, with the participants of the configured file registered."""
    if config.ledger.participants is None:
        raise ServiceError(
            "ledger.participants names no file: the ledger service needs the sites and "
            "clients that hold accounts (see `siteagent ledger serve --help`)"
        )
    participants = load_participants(config.ledger.participants)
    try:
        ledger = Ledger(config.ledger.location)
    except DatabaseError as exc:
        raise ServiceError(str(exc)) from None
    try:
        register_all(ledger, participants)
    except BaseException:
        ledger.close()
        raise
    log.info(
        "ledger %s: %d participant(s) from %s",
        ledger.database.describe(),
        len(participants),
        config.ledger.participants,
    )
    return ledger


def reread_participants(ledger: Ledger, path: Path, readers: Authenticator) -> None:
    """SIGHUP: open the accounts of participants added to the file since the start (a site
    joining the federation needs no restart), set the credits it gives, and let the new
    participants read. A file that cannot be read is logged and the accounts stay as they
    are; an account is never closed by leaving the file."""
    try:
        participants = load_participants(path)
    except ConfigError as exc:
        log.error("participants not re-read: %s", exc)
        return
    register_all(ledger, participants)
    readers.clients = participant_keys(ledger)
    log.info("participants re-read from %s: %d", path, len(participants))


def ledger_authorities(settings: LedgerConfig) -> Tuple[str, ...]:
    """The authorities a signed read may name: the service's listen address, and the host of
    ``ledger.url`` when the file names the address the agents reach it by (a DNS name)."""
    names = default_public_names(settings.listen, settings.port)
    if settings.url is None:
        return names
    return tuple(dict.fromkeys((*names, authority(settings.url))))


def serve(config: Config) -> None:
    """Serve the ledger over HTTPS (``api.tls``) on ``ledger.listen``:``ledger.port`` until
    SIGTERM or SIGINT (requests in flight finish first); SIGHUP re-reads the participants."""
    # imported here: service.py imports the agent's whole web stack
    from siteagent.http.server import NotifyingServer, https_config, url_of

    ledger = open_ledger(config)
    try:
        settings = config.ledger
        readers = Authenticator(
            participant_keys(ledger),
            ledger_authorities(settings),
            max_age_s=config.security.signature_max_age_s,
            nonces=NonceCache(
                config.security.nonces_per_client,
                saved=SavedNonces(config.state_dir / NONCES_FILE),
            ),
        )
        app = create_app(ledger, readers, config.api.max_body_bytes)
        server = NotifyingServer(https_config(app, settings.listen, settings.port, config.api))
        log.info(
            "ledger service on %s", url_of(settings.listen, settings.port, config.api.tls.enabled)
        )
        participants = settings.participants
        assert participants is not None  # open_ledger refused to open without it
        run(server, lambda: reread_participants(ledger, participants, readers))
        if not server.started:
            raise ServiceError(
                f"the ledger could not listen on {settings.listen}:{settings.port} (see the log "
                "above); set ledger.listen and ledger.port to a free address"
            )
    finally:
        ledger.close()
