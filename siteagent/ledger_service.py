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

import contextlib
import logging
import signal
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Dict, List, Mapping, Optional, TypeVar

import fastapi
import uvicorn
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from siteagent import api_errors
from siteagent.config import Config, ConfigError, Problem, Reading, Section
from siteagent.ledger import Ledger, LedgerConflict, LedgerRefused
from siteagent.security import (
    CLIENT_KEYS,
    Cancellation,
    Receipt,
    check_key_id,
    ed25519_public_key,
    mapping,
)

log = logging.getLogger("siteagent.ledger")

T = TypeVar("T")

#: What the service's one answer to an unexpected failure tells a client to wait.
RETRY_AFTER_S = 5


class LedgerServiceError(RuntimeError):
    """The service could not start (no participants file, the address is taken)."""


# --------------------------------------------------------------------------- participants


@dataclass(frozen=True)
class Participant:
    """An account holder: a site or a client (``kind`` "site" or "user") and its key."""

    key_id: str
    kind: str
    public_key: Ed25519PublicKey


def load_participants(path: Path) -> List[Participant]:
    """Read a participants file; errors name the key path, like the configuration's.

    ::

        sites:
          hpc1:
            public_key: "<base64 Ed25519 key: the agent's /v1/info public_key.value>"
        clients:            # the authorized-clients format; user and account are not used
          alice@laptop:
            public_key: "<base64 Ed25519 key, as `siteagent keys` prints it>"
    """
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(str(path), [Problem("", f"cannot read it ({exc})")]) from None
    reading = Reading()
    root = Section(data, "", ("sites", "clients"), reading)
    found: Dict[str, Participant] = {}
    for group, kind, keys in (("sites", "site", ("public_key",)), ("clients", "user", CLIENT_KEYS)):
        entries: Mapping[str, Any] = root.get(group, {}, mapping)
        for key_id, entry in entries.items():
            section = Section(entry, f"{group}.{key_id}", keys, reading)
            participant = read_participant(str(key_id), kind, section)
            if participant is None:
                continue
            if participant.key_id in found:
                reading.problem(
                    section.path, "expected a key id listed once, as a site or a client"
                )
                continue
            found[participant.key_id] = participant
    if reading.problems:
        raise ConfigError(str(path), reading.problems)
    return list(found.values())


def read_participant(key_id: str, kind: str, section: Section) -> Optional[Participant]:
    """One entry, or None (with the problem recorded) if it is unusable."""
    try:
        check_key_id(key_id)
    except ValueError as exc:
        section.reading.problem(section.path, str(exc))
        return None
    if not section.has("public_key"):
        section.reading.problem(section.path, "expected public_key")
        return None
    public_key = section.get("public_key", None, ed25519_public_key)
    return None if public_key is None else Participant(key_id, kind, public_key)


def register_all(ledger: Ledger, participants: List[Participant]) -> None:
    """Open the accounts (a no-op for those that exist). A key that differs from the one
    booked is logged and left as it was: changing a key is the administrator's decision."""
    for participant in participants:
        try:
            ledger.register(participant.key_id, participant.kind, participant.public_key)
        except LedgerConflict as exc:
            log.error("%s; its receipts will be refused until an administrator resolves it", exc)


# --------------------------------------------------------------------------- the app


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
    api_errors.install(app, lambda: RETRY_AFTER_S)

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
    except ValueError as exc:
        raise LedgerRefused(code, str(exc)) from None


def checked(operation: Callable[[], T], code: str) -> T:
    """``operation()``, with a document the signatures cannot even be checked over (one that
    has no canonical JSON form) refused as malformed rather than failing the service."""
    try:
        return operation()
    except ValueError as exc:
        raise LedgerRefused(code, f"the document cannot be canonicalized ({exc})") from None


# --------------------------------------------------------------------------- serving


def open_ledger(config: Config) -> Ledger:
    """The service's database, with the participants of the configured file registered."""
    if config.ledger.participants is None:
        raise LedgerServiceError(
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
    from siteagent.service import NotifyingServer, https_config, url_of

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
            raise LedgerServiceError(
                f"the ledger could not listen on {settings.listen}:{settings.port} (see the log "
                "above); set ledger.listen and ledger.port to a free address"
            )
    finally:
        ledger.close()


def run(server: uvicorn.Server, on_hangup: Callable[[], None]) -> None:
    """Run ``server`` until SIGTERM or SIGINT, calling ``on_hangup`` on SIGHUP.

    uvicorn handles SIGTERM and SIGINT while it serves and then raises them again with the
    handlers found at start: ours just ask it to exit, so that a stop is a clean exit (status
    0, as systemd expects), not death by the signal. SIGHUP's default would kill the process.
    """

    def stop(signum: int, frame: Optional[FrameType]) -> None:
        server.should_exit = True

    def hangup(signum: int, frame: Optional[FrameType]) -> None:
        on_hangup()

    handlers = {signal.SIGTERM: stop, signal.SIGINT: stop, signal.SIGHUP: hangup}
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
    try:
        with contextlib.suppress(SystemExit):  # uvicorn's way out when it cannot listen
            server.run()
    finally:
        for signum, previous_handler in previous.items():
            signal.signal(signum, previous_handler)
