"""``siteagent ledger serve``: the ledger as its own HTTPS service, the bank of a federation.

One agent books its receipts in its embedded ledger; sites that sell to the same buyers share
one bank instead, so that a buyer's balance is one figure wherever it bought. This module is a
thin HTTP layer over :class:`~siteagent.ledger.Ledger`, which does all the checking:

- ``POST /v1/receipts`` books a doubly signed receipt (both signatures verified against the
  registered keys; the same receipt again answers the same transaction and moves nothing);
- ``POST /v1/refunds`` books a cancellation signed by the deal's site;
- ``GET /v1/accounts/{id}`` and ``GET /v1/accounts/{id}/statement``, ``GET /healthz``.

Who has an account, and with which key, is the administrator's file (``ledger.participants``),
not something a request can change: the service takes no credential, since a receipt proves
itself by its two signatures and the bank trusts nobody's word for a payment. Errors are the
agent's JSON errors, with the ledger's codes: 422 refused (bad signature, unknown signer),
409 conflicting with what is booked, 404 unknown account or receipt.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Dict, TypeVar

import fastapi

from siteagent.config.reading import ConfigError
from siteagent.config.schema import Config
from siteagent.ledger.bank import Ledger, LedgerRefused
from siteagent.ledger.participants import load_participants, register_all
from siteagent.protocol.documents import Cancellation, MalformedDocument, Receipt
from siteagent.serving import errors
from siteagent.serving.server import ServiceError, run

log = logging.getLogger("siteagent.ledger")

T = TypeVar("T")


#: What the service's one answer to an unexpected failure tells a client to wait.
RETRY_AFTER_S = 5


def create_app(ledger: Ledger) -> fastapi.FastAPI:
    """The ASGI application serving ``ledger``."""
    app = fastapi.FastAPI(
        title="siteagent ledger",
        description="The bank of a federation of site agents: books doubly signed receipts "
        "and refunds in double entry, and shows balances and statements.",
        openapi_url="/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    errors.install(app, lambda: RETRY_AFTER_S)

    @app.post("/v1/receipts", tags=["ledger"])
    def book(body: Dict[str, Any]) -> Dict[str, Any]:
        """Book a doubly signed receipt; the same receipt again answers its transaction."""
        receipt = parsed(Receipt.from_json, body, "malformed_receipt")
        return checked(lambda: ledger.book(receipt).to_json(), "malformed_receipt")

    @app.post("/v1/refunds", tags=["ledger"])
    def refund(body: Dict[str, Any]) -> Dict[str, Any]:
        """Book a cancellation signed by the deal's site: the price less the penalty back."""
        cancellation = parsed(Cancellation.from_json, body, "malformed_cancellation")
        return checked(lambda: ledger.refund(cancellation).to_json(), "malformed_cancellation")

    @app.get("/v1/accounts/{account}", tags=["ledger"])
    def balance(account: str) -> Dict[str, Any]:
        """An account's balance."""
        return {"account": account, "balance": str(ledger.balance(account))}

    @app.get("/v1/accounts/{account}/statement", tags=["ledger"])
    def statement(account: str) -> Dict[str, Any]:
        """An account's movements in booking order, each with the balance after it."""
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


def parsed(parse: Callable[[Any], T], document: Any, code: str) -> T:
    """``parse(document)``, or the 422 refusal that says what is malformed."""
    try:
        return parse(document)
    except MalformedDocument as exc:
        raise LedgerRefused(code, str(exc), exc.field) from None
    except ValueError as exc:
        raise LedgerRefused(code, str(exc)) from None


def checked(operation: Callable[[], T], code: str) -> T:
    """``operation()``, with a document the signatures cannot even be checked over (one that
    has no canonical JSON form) refused as malformed rather than failing the service."""
    try:
        return operation()
    except ValueError as exc:
        raise LedgerRefused(code, f"the document cannot be canonicalized ({exc})") from None


def open_ledger(config: Config) -> Ledger:
    """The service's database, with the participants of the configured file registered."""
    if config.ledger.participants is None:
        raise ServiceError(
            "ledger.participants names no file: the ledger service needs the sites and "
            "clients that hold accounts (see `siteagent ledger serve --help`)"
        )
    participants = load_participants(config.ledger.participants)
    ledger = Ledger(config.ledger.path)
    register_all(ledger, participants)
    log.info(
        "ledger %s: %d participant(s) from %s",
        config.ledger.path,
        len(participants),
        config.ledger.participants,
    )
    return ledger


def reread_participants(ledger: Ledger, path: Path) -> None:
    """SIGHUP: open the accounts of participants added to the file since the start (a site
    joining the federation needs no restart). A file that cannot be read is logged and the
    accounts stay as they are; an account is never closed by leaving the file."""
    try:
        participants = load_participants(path)
    except ConfigError as exc:
        log.error("participants not re-read: %s", exc)
        return
    register_all(ledger, participants)
    log.info("participants re-read from %s: %d", path, len(participants))


def serve(config: Config) -> None:
    """Serve the ledger over HTTPS (``api.tls``) on ``ledger.listen``:``ledger.port`` until
    SIGTERM or SIGINT (requests in flight finish first); SIGHUP re-reads the participants."""
    # imported here: service.py imports the agent's whole web stack
    from siteagent.serving.server import NotifyingServer, https_config, url_of

    ledger = open_ledger(config)
    try:
        settings = config.ledger
        app = create_app(ledger)
        server = NotifyingServer(https_config(app, settings.listen, settings.port, config.api.tls))
        log.info(
            "ledger service on %s", url_of(settings.listen, settings.port, config.api.tls.enabled)
        )
        participants = settings.participants
        assert participants is not None  # open_ledger refused to open without it
        run(server, lambda: reread_participants(ledger, participants))
        if not server.started:
            raise ServiceError(
                f"the ledger could not listen on {settings.listen}:{settings.port} (see the log "
                "above); set ledger.listen and ledger.port to a free address"
            )
    finally:
        ledger.close()
