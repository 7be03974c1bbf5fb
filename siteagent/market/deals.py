"""Deals: accepting an offer, confirming it with a receipt, cancelling it with a refund.

The marketplace paper's commit phase on one site, as one use case that every face calls (the
API and ``siteagent reservations ...``), so that "confirmed" means one thing: the buyer signed
the deal, the site countersigned it into a receipt, the receipt is kept and owed to the bank in
the same transaction as the CONFIRMED state, and the bank booked it (or will: the agent's loop
books what is owed). A cancel after a confirm likewise owes the site's signed refund in the same
transaction as the CANCELLED state. The reservation lifecycle itself (what may move where, the
batch system) is :mod:`siteagent.market.reservations`; this module adds the money and the
signatures around it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from siteagent.config.schema import Config
from siteagent.core.errors import SiteagentError
from siteagent.core.money import cancellation_penalty
from siteagent.ledger.bank import Bookkeeper, Ledger, LedgerError, LedgerUnavailable, Transaction
from siteagent.ledger.client import RemoteLedger
from siteagent.ledger.participants import Participant, register_all
from siteagent.market import bookkeeping
from siteagent.market.reservations import ReservationManager, UnknownReservation
from siteagent.market.store import ReservationRecord, ReservationState, Store
from siteagent.protocol.documents import (
    Receipt,
    Signed,
    countersigned_document,
    deal_document,
    sign_cancellation,
    sign_document,
    signature_valid,
)
from siteagent.protocol.keys import load_or_create_site_key
from siteagent.security.clients import AuthorizedClient
from siteagent.security.errors import ConfirmRefused

S = ReservationState

log = logging.getLogger("siteagent.ledger")

#: Reservation states in which the site has signed (and keeps) a receipt.
SIGNED = frozenset({S.CONFIRMED, S.ACTIVE, S.COMPLETED})


class LedgerBookingFailed(SiteagentError):
    """The reservation moved, but the bank refused or did not answer the booking; it stays
    owed, and the same request retried (or the agent's loop) books it."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message, code=f"ledger_{code}")


@dataclass(frozen=True)
class Deal:
    """A reservation as its buyer sees it: the record, the deal to sign, and the receipt once
    confirmed; ``outcome`` is what the request that produced it did (after a confirm, the
    bank's ``ledger_transaction``, None without a bank; after a cancel also the ``penalty``
    kept and the site's signed ``cancellation``)."""

    record: ReservationRecord
    deal: Dict[str, Any]
    receipt: Optional[Dict[str, Any]]
    outcome: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        """The reservation as the API answers it (``ReservationView`` in the OpenAPI)."""
        view = self.record.to_dict()
        del view["accept_key"]  # the client's own idempotency key: nobody else's business
        return {**view, "deal": self.deal, "receipt": self.receipt, **self.outcome}


class Deals:
    """The deal use cases of one site: its store and lifecycle manager, its signing key, and
    the bank it books in (None: no bookkeeping)."""

    def __init__(
        self,
        manager: ReservationManager,
        site_key: Ed25519PrivateKey,
        site_key_id: str,
        ledger: Optional[Bookkeeper],
    ) -> None:
        self.manager = manager
        self.site_key = site_key
        self.site_key_id = site_key_id
        self.ledger = ledger

    @property
    def store(self) -> Store:
        return self.manager.store

    def close(self) -> None:
        """Close the bank (the store is the site's, closed with it)."""
        if self.ledger is not None:
            self.ledger.close()

    def open_accounts(self, clients: Iterable[AuthorizedClient]) -> None:
        """Open accounts in an embedded bank for this site and ``clients`` (a no-op for those
        that exist), so that any receipt the site signs can be booked. A bank service keeps its
        own participants file: a site opens no accounts there."""
        if not isinstance(self.ledger, Ledger):
            return
        site = Participant(self.site_key_id, "site", self.site_key.public_key())
        users = [Participant(client.key_id, "user", client.public_key) for client in clients]
        register_all(self.ledger, [site, *users])

    # ---- the buyer's requests

    def accept(
        self,
        offer_id: str,
        client: str,
        idempotency_key: str,
        users: Sequence[str],
        accounts: Sequence[str] = (),
    ) -> Deal:
        """A TENTATIVE reservation for the offer, and the deal its buyer signs to confirm."""
        record = self.manager.accept(offer_id, client, idempotency_key, users, accounts)
        return self.deal_of(record)

    def confirm(
        self, reservation_id: str, body: Any, client: AuthorizedClient, idempotency_key: str
    ) -> Deal:
        """Check the buyer signed exactly this reservation's deal, countersign it, and book it.

        A confirm of a reservation that is signed already answers the receipt kept (the first
        one the site signed), and books it if it is still owed: retrying is safe.
        """
        record = self.manager.owned(reservation_id, client.key_id)
        expected = self.deal_document(record)
        now = int(self.manager.clock())
        receipt = countersign(body, expected, client, self.site_key, self.site_key_id, now)
        if record.state not in SIGNED or self.store.receipt(reservation_id) is None:
            record = self.manager.confirm(
                reservation_id, client.key_id, idempotency_key, receipt=receipt.to_json()
            )
        booked = self._book(reservation_id, bookkeeping.RECEIPT)
        return self.deal_of(record, {"ledger_transaction": booked})

    def cancel(self, reservation_id: str, client: str, idempotency_key: str) -> Deal:
        """Cancel: free while tentative; once confirmed the agreed penalty is kept, and the
        rest refunded by the site's signed cancellation, booked at the bank."""
        self.manager.owned(reservation_id, client)
        record = self.manager.cancel(reservation_id, client, idempotency_key, refund=self._refund)
        penalty = record.penalty if record.penalty is not None else Decimal(0)
        cancellation = self.store.booking(reservation_id, bookkeeping.REFUND)
        booked = None if cancellation is None else self._book(reservation_id, bookkeeping.REFUND)
        outcome = {
            "penalty": str(penalty),
            "cancellation": cancellation,
            "ledger_transaction": booked,
        }
        return self.deal_of(record, outcome)

    # ---- what a reservation's deal is

    def deal_of(
        self, record: ReservationRecord, outcome: Optional[Mapping[str, Any]] = None
    ) -> Deal:
        """``record`` with its deal and its receipt (if confirmed)."""
        receipt = self.store.receipt(record.id)
        return Deal(record, self.deal_document(record), receipt, outcome or {})

    def show(self, reservation_id: str) -> Deal:
        """A reservation of this site, with its deal and receipt."""
        record = self.store.get_reservation(reservation_id)
        if record is None:
            raise UnknownReservation(f"no reservation {reservation_id!r} at this site")
        return self.deal_of(record)

    def deal_document(self, record: ReservationRecord) -> Dict[str, Any]:
        """The deal a buyer signs to confirm ``record``, built from the site's own records."""
        offer = self.store.get_offer(record.offer_id)
        if offer is None:  # the store keeps every offer a reservation refers to
            raise RuntimeError(f"reservation {record.id}: offer {record.offer_id} is missing")
        penalty = cancellation_penalty(record.penalty_factor, record.fee)
        site, buyer = self.site_key_id, record.client
        return deal_document(site, buyer, record.id, offer, record.total, penalty)

    # ---- helpers

    def _refund(self, record: ReservationRecord, penalty: Decimal, at: int) -> Dict[str, Any]:
        """The signed cancellation of a confirmed ``record``, owed with its CANCELLED state."""
        kept = self.store.receipt(record.id)
        if kept is None:  # CONFIRMED and its receipt are written in one transaction
            raise RuntimeError(f"reservation {record.id} is confirmed but has no receipt")
        signed = sign_cancellation(
            Receipt.from_json(kept), penalty, at, self.site_key, self.site_key_id
        )
        return signed.to_json()

    def _book(self, reservation_id: str, kind: str) -> Optional[Dict[str, Any]]:
        """Book what is owed for ``reservation_id`` now (None without a ledger). A refusal or a
        silent bank is an error that says the reservation stands and the booking stays owed."""
        if self.ledger is None:
            return None
        try:
            done: Transaction = bookkeeping.book_one(self.store, self.ledger, reservation_id, kind)
        except LedgerError as exc:
            what = "could not reach" if isinstance(exc, LedgerUnavailable) else "refused"
            raise LedgerBookingFailed(
                exc.code,
                f"the reservation was updated but the ledger {what} the booking ({exc}); "
                "retry the same request to book it",
            ) from None
        return done.to_json()


def open_deals(
    config: Config, manager: ReservationManager, clients: Iterable[AuthorizedClient]
) -> Deals:
    """The deals of the site ``config`` describes: its signing key (made on first start), and
    its bank (embedded, or the client of the bank service ``ledger.url`` names), with accounts
    opened in an embedded bank for the site and ``clients``."""
    site_key = load_or_create_site_key(config.security.site_key)
    deals = Deals(manager, site_key, config.site.name, open_ledger(config))
    deals.open_accounts(clients)
    return deals


def open_ledger(config: Config) -> Bookkeeper:
    """The embedded ledger, or the client of the ledger service the configuration names."""
    if config.ledger.url is not None:
        log.info("ledger: receipts are booked by the ledger service at %s", config.ledger.url)
        return RemoteLedger(config.ledger.url, config.ledger.ca)
    return Ledger(config.ledger.path)


def countersign(
    body: Any,
    expected: Mapping[str, Any],
    client: AuthorizedClient,
    site_key: Ed25519PrivateKey,
    site_id: str,
    now: int,
) -> Receipt:
    """The site's side of a confirm: check the buyer signed exactly ``expected`` (the deal
    built from the site's own records), then countersign it into a receipt.

    ``client`` is the authenticated sender; the deal must be signed with that same key, so a
    confirm cannot carry someone else's signature.
    """
    if not isinstance(body, Mapping) or not isinstance(body.get("deal"), Mapping):
        raise ConfirmRefused("malformed_confirm", 'a confirm is {"deal": ..., "signature": ...}')
    try:
        signature = Signed.from_json(body.get("signature"))
    except ValueError as exc:
        raise ConfirmRefused("malformed_confirm", str(exc)) from None
    if signature.key_id != client.key_id:
        raise ConfirmRefused(
            "confirm_key_mismatch",
            f"the deal is signed by {signature.key_id!r} but the request by {client.key_id!r}",
        )
    differing = sorted(
        key
        for key in set(expected) | set(body["deal"])
        if expected.get(key) != body["deal"].get(key)
    )
    if differing:
        raise ConfirmRefused(
            "deal_mismatch",
            "the signed deal differs from this reservation in: " + ", ".join(differing),
        )
    if not signature_valid(expected, signature, client.public_key):
        raise ConfirmRefused("bad_confirm_signature", "the deal's signature does not verify")
    document = countersigned_document(expected, signature, now)
    return Receipt(expected, signature, now, sign_document(document, site_key, site_id))

