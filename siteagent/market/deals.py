"""Deals: accepting an offer, confirming it with a receipt, cancelling it with a refund.

The marketplace paper's commit phase on one site, as one use case that every face calls (the
API and ``siteagent reservations ...``), so that "confirmed" means one thing: the buyer signed
the deal, the site countersigned it into a receipt, the bank booked it (and so found that the
buyer can pay), and then the receipt was kept with the CONFIRMED state.

The bank books *before* the reservation moves, because a confirm the buyer cannot pay (or that
a silent bank cannot check) must change nothing. Each step is written down before the next
system is touched: the receipt is kept in the store as owed, then booked, then marked booked,
then the reservation moves TENTATIVE -> CONFIRMED (compare-and-set). When that move fails (the
deadline passed, the buyer cancelled meanwhile) or the process dies before it, the receipt may
be booked for a reservation that never became confirmed: it is **voided**, refunded in full by
the site's signed cancellation with penalty 0 (:func:`~siteagent.protocol.documents.sign_void`,
the same document from every path, so the bank books it once). The confirm voids it at once;
the agent's loop (:meth:`Deals.settle`) voids any such receipt whose reservation is no longer
live, and books whatever else is owed.

A cancel after a confirm owes the site's signed refund in the same transaction as the CANCELLED
state, and books it at once (or the loop does). The reservation lifecycle itself (what may move
where, the batch system) is :mod:`siteagent.market.reservations`; this module adds the money
and the signatures around it.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from siteagent.config.schema import Config
from siteagent.core.errors import SiteagentError
from siteagent.core.money import cancellation_penalty
from siteagent.core.usage import Usage
from siteagent.ledger.bank import (
    Bookkeeper,
    InsufficientFunds,
    Ledger,
    LedgerError,
    LedgerUnavailable,
)
from siteagent.ledger.participants import Participant, register_all
from siteagent.market import bookkeeping
from siteagent.market.lifecycle import (
    LifecycleError,
    ReservationRecord,
    ReservationState,
    UnknownReservation,
    check_transition,
)
from siteagent.market.reservations import ReservationManager
from siteagent.market.store import Store
from siteagent.market.usage import reservation_usage
from siteagent.protocol.documents import (
    Receipt,
    Signed,
    batch_document,
    countersigned_document,
    deal_document,
    deal_id,
    sign_cancellation,
    sign_document,
    sign_void,
    signature_valid,
)
from siteagent.protocol.errors import ledger
from siteagent.protocol.keys import load_or_create_site_key
from siteagent.security.clients import AuthorizedClient
from siteagent.security.errors import ConfirmRefused

S = ReservationState

log = logging.getLogger("siteagent.ledger")

#: Reservation states in which the site has signed (and keeps) a receipt.
SIGNED = frozenset({S.CONFIRMED, S.ACTIVE, S.COMPLETED})

#: What anybody may see of a reservation (see :meth:`Deal.public_json`).
PUBLIC = ("id", "state", "start", "end", "size", "unit")


class LedgerBookingFailed(SiteagentError):
    """The reservation moved, but the bank refused or did not answer the booking; it stays
    owed, and the same request retried (or the agent's loop) books it."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message, code=code)


class PaymentRefused(SiteagentError):
    """A confirm the bank did not book, so nothing changed: the reservation stays TENTATIVE
    until its deadline. ``insufficient_funds`` (402) when the buyer cannot pay, else the bank's
    code prefixed ``ledger_`` (``ledger_unavailable``, 503: retry the confirm)."""

    def __init__(self, refusal: LedgerError) -> None:
        if isinstance(refusal, InsufficientFunds):
            code, advice = refusal.code, "deposit, then confirm again before the deadline"
        elif isinstance(refusal, LedgerUnavailable):
            code, advice = ledger(refusal.code), "retry the confirm"
        else:
            code, advice = ledger(refusal.code), "the reservation stays unconfirmed"
        message = f"the bank did not book the deal ({refusal}); nothing changed: {advice}"
        super().__init__(message, code=code, retry_after_s=refusal.retry_after_s)


@dataclass(frozen=True)
class Deal:
    """A reservation as its buyer sees it: the record, the deal to sign, and the receipt once
    confirmed; ``outcome`` holds the site's signed ``cancellation`` of one cancelled after its
    confirm, and what the request that produced it did (after a confirm, the bank's
    ``ledger_transaction``, None without a bank; after a cancel also the ``penalty`` kept)."""

    record: ReservationRecord
    deal: Dict[str, Any]
    receipt: Optional[Dict[str, Any]]
    outcome: Mapping[str, Any] = field(default_factory=dict)
    usage: Optional[Usage] = None

    def to_json(self) -> Dict[str, Any]:
        """The reservation as the API answers its buyer (``ReservationView`` in the OpenAPI)."""
        view = self.record.to_dict()
        del view["accept_key"]  # the client's own idempotency key: nobody else's business
        if self.usage is not None:
            view["usage"] = self.usage.to_json()
        return {**view, "deal": self.deal, "receipt": self.receipt, **self.outcome}

    def public_json(self) -> Dict[str, Any]:
        """What anybody may see (``PublicReservationView``): where it stands and what it holds
        when; not who bought it, for which scheduler user, at what price, nor the signatures."""
        view = self.record.to_dict()
        return {key: view[key] for key in PUBLIC}

    def view_for(self, reader: Optional[str]) -> Dict[str, Any]:
        """The whole reservation for its buyer (``reader``, the key id that signed the
        request), the public part for anybody else (None: an unsigned request)."""
        return self.to_json() if reader == self.record.client else self.public_json()


class Deals:
    """The deal use cases of one site: its store and lifecycle manager, its signing key, the
    bank it books in (None: no bookkeeping), and the credit its clients get in an embedded
    bank."""

    def __init__(
        self,
        manager: ReservationManager,
        site_key: Ed25519PrivateKey,
        site_key_id: str,
        ledger: Optional[Bookkeeper],
        credit: Decimal = Decimal(0),
    ) -> None:
        self.manager = manager
        self.site_key = site_key
        self.site_key_id = site_key_id
        self.ledger = ledger
        self.credit = credit

    @property
    def store(self) -> Store:
        return self.manager.store

    def close(self) -> None:
        """Close the bank (the store is the site's, closed with it)."""
        if self.ledger is not None:
            self.ledger.close()

    def open_accounts(self, clients: Iterable[AuthorizedClient]) -> None:
        """Open accounts in an embedded bank for this site and ``clients`` (a no-op for those
        that exist), each client with :attr:`credit`, so that any receipt the site signs can
        be booked. A bank service keeps its own participants file: a site opens no accounts
        there."""
        if not isinstance(self.ledger, Ledger):
            return
        site = Participant(self.site_key_id, "site", self.site_key.public_key())
        users = [
            Participant(client.key_id, "user", client.public_key, self.credit) for client in clients
        ]
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
        """Check the buyer signed exactly this reservation's deal, countersign it, have the
        bank book it (PaymentRefused, changing nothing, if it does not), then confirm.

        A confirm of a reservation that is signed already (a retry, with the same idempotency
        key or another) answers the reservation as it is now, with the receipt kept (the first
        one the site signed) and, if it was cancelled since, its cancellation: retrying is safe.
        """
        record = self.manager.owned(reservation_id, client.key_id)
        expected = self.deal_document(record)
        now = int(self.manager.clock())
        receipt = countersign(body, expected, client, self.site_key, self.site_key_id, now)
        paid: Dict[str, Any] = {}
        if record.state not in SIGNED or self.store.receipt(reservation_id) is None:
            try:
                self.manager.confirm(
                    reservation_id,
                    client.key_id,
                    idempotency_key,
                    receipt=receipt.to_json(),
                    pay=lambda record, receipt: self._pay(record, receipt, paid),
                )
            except LifecycleError:
                self._void_unconfirmed(reservation_id)
                raise
            except PaymentRefused:
                self._refuse_if_moved(reservation_id)
                raise
        booked = paid.get("transaction") or self._book(reservation_id, bookkeeping.RECEIPT)
        return self.deal_of(self._current(reservation_id), {"ledger_transaction": booked})

    def accept_all(
        self,
        offer_ids: Sequence[str],
        client: str,
        idempotency_key: str,
        users: Sequence[str],
        accounts: Sequence[str] = (),
    ) -> List[Deal]:
        """Several offers held at once, all or nothing (docs/batches.md)."""
        records = self.manager.accept_all(offer_ids, client, idempotency_key, users, accounts)
        return [self.deal_of(record) for record in records]

    def confirm_all(
        self, parts: Sequence[Tuple[str, str]], signature: Any, client: AuthorizedClient
    ) -> List[Deal]:
        """Confirm several reservations with one signature over their receipt ids and one
        booking (docs/batches.md): ``parts`` are (reservation id, receipt id) in the order
        signed.

        Every part is checked first (the buyer's, its deal the one signed, confirmable now),
        and a part that fails refuses the batch, changing nothing; then each part's receipt
        is kept as owed, the bank books them all in one go (refusing them all, changing
        nothing, if the buyer cannot pay their total), and each is confirmed as a single
        confirm would (a part whose deadline passed meanwhile is voided). Parts confirmed
        already answer as they are now.
        """
        signed = _batch_signature(signature, client)
        ids = [receipt_id for _, receipt_id in parts]
        if not signature_valid(batch_document(ids), signed, client.public_key):
            raise ConfirmRefused(
                "the signature over the receipt ids does not verify", code="bad_confirm_signature"
            )
        records = [
            self._part(i, rid, receipt_id, client) for i, (rid, receipt_id) in enumerate(parts)
        ]
        todo = [
            (i, record)
            for i, record in enumerate(records)
            if record.state not in SIGNED or self.store.receipt(record.id) is None
        ]
        booked: Dict[str, Optional[Dict[str, Any]]] = {}
        if todo:
            held = self.manager.listed()
            for i, record in todo:
                _naming(f"parts[{i}].reservation_id", self.manager.check_confirmable, record, held)
            now = int(self.manager.clock())
            kept = {
                record.id: self.store.owe(
                    record.id, bookkeeping.RECEIPT, self._countersigned(record, signed, ids, now)
                )
                for _, record in todo
            }
            booked = self._pay_all([record.id for _, record in todo], kept)
            for _, record in todo:
                try:
                    self.manager.confirm(
                        record.id,
                        client.key_id,
                        f"confirm-{record.id}",
                        receipt=kept[record.id],
                        held=held,
                    )
                except LifecycleError as exc:
                    log.warning("batch confirm: %s not confirmed: %s", record.id, exc)
                    self._void_unconfirmed(record.id)
        return [
            self.deal_of(self._current(record.id), {"ledger_transaction": booked.get(record.id)})
            for record in records
        ]

    def _part(
        self, index: int, reservation_id: str, receipt_id: str, client: AuthorizedClient
    ) -> ReservationRecord:
        """Part ``index`` of a batch confirm: the buyer's reservation whose deal is the one
        signed, or the error naming the part."""
        where = f"parts[{index}]"
        record = _naming(
            f"{where}.reservation_id", self.manager.owned, reservation_id, client.key_id
        )
        if deal_id(self.deal_document(record)) != receipt_id:
            raise ConfirmRefused(
                f"reservation {reservation_id}'s deal is not the one signed (its receipt id "
                "differs): read the reservation again and sign its deal",
                code="deal_mismatch",
                field=f"{where}.receipt_id",
            )
        return record

    def _countersigned(
        self, record: ReservationRecord, signed: Signed, ids: Sequence[str], now: int
    ) -> Dict[str, Any]:
        """The receipt of a part of a batch confirm."""
        deal = self.deal_document(record)
        document = countersigned_document(deal, signed, now, ids)
        site = sign_document(document, self.site_key, self.site_key_id)
        return Receipt(deal, signed, now, site, tuple(ids)).to_json()

    def _pay_all(
        self, reservation_ids: Sequence[str], kept: Mapping[str, Mapping[str, Any]]
    ) -> Dict[str, Optional[Dict[str, Any]]]:
        """Have the bank book the kept receipts in one go; PaymentRefused (and the receipts
        forgotten, nothing booked) when it refuses; their transactions by reservation."""
        if self.ledger is None:
            return {}
        receipts = [Receipt.from_json(kept[rid]) for rid in reservation_ids]
        try:
            done = self.ledger.book_all(receipts)
        except LedgerUnavailable as exc:  # perhaps booked: kept, voided if never confirmed
            raise PaymentRefused(exc) from None
        except LedgerError as exc:  # refused, so not booked: nothing to keep
            for rid in reservation_ids:
                self.store.forget_unbooked(rid, bookkeeping.RECEIPT)
            raise PaymentRefused(exc) from None
        now = self.manager.clock()
        for rid in reservation_ids:
            self.store.mark_booked(rid, bookkeeping.RECEIPT, now)
        return {rid: one.to_json() for rid, one in zip(reservation_ids, done)}

    def cancel(self, reservation_id: str, client: str, idempotency_key: str) -> Deal:
        """Cancel: free while tentative; once confirmed the agreed penalty is kept, and the
        rest refunded by the site's signed cancellation, booked at the bank. A receipt a
        confirm in flight may have had booked is voided."""
        self.manager.owned(reservation_id, client)
        record = self.manager.cancel(reservation_id, client, idempotency_key, refund=self._refund)
        self._void_unconfirmed(reservation_id)
        penalty = record.penalty if record.penalty is not None else Decimal(0)
        cancellation = None
        booked = None
        if self.store.receipt(reservation_id) is not None:
            cancellation = self.store.booking(reservation_id, bookkeeping.REFUND)
            booked = self._book(reservation_id, bookkeeping.REFUND)
        outcome = {
            "penalty": str(penalty),
            "cancellation": cancellation,
            "ledger_transaction": booked,
        }
        return self.deal_of(record, outcome)

    def settle(self) -> bookkeeping.CatchUp:
        """The agent loop's part: void every receipt booked (or perhaps booked) for a
        reservation that is no longer live and was never confirmed, then book what is owed."""
        if self.ledger is None:
            return bookkeeping.CatchUp()
        bookkeeping.owe_voids(self.store, self._void)
        return bookkeeping.book_owed(self.store, self.ledger)

    # ---- what a reservation's deal is

    def deal_of(
        self, record: ReservationRecord, outcome: Optional[Mapping[str, Any]] = None
    ) -> Deal:
        """``record`` with its deal, its receipt (if confirmed) and its cancellation (if
        cancelled after that)."""
        receipt = self.store.receipt(record.id)
        found: Dict[str, Any] = {}
        if receipt is not None and record.state is S.CANCELLED:
            found["cancellation"] = self.store.booking(record.id, bookkeeping.REFUND)
        return Deal(record, self.deal_document(record), receipt, {**found, **(outcome or {})})

    def show(self, reservation_id: str) -> Deal:
        """A reservation of this site, with its deal, its receipt, and its jobs."""
        record = self._current(reservation_id)
        usage = reservation_usage(self.store, record, int(self.manager.clock()))
        return dataclasses.replace(self.deal_of(record), usage=usage)

    def deal_document(self, record: ReservationRecord) -> Dict[str, Any]:
        """The deal a buyer signs to confirm ``record``, built from the site's own records."""
        offer = self.store.get_offer(record.offer_id)
        if offer is None:  # the store keeps every offer a reservation refers to
            raise RuntimeError(f"reservation {record.id}: offer {record.offer_id} is missing")
        penalty = cancellation_penalty(record.penalty_factor, record.fee)
        site, buyer = self.site_key_id, record.client
        return deal_document(site, buyer, record.id, offer, record.total, penalty)

    # ---- helpers

    def _current(self, reservation_id: str) -> ReservationRecord:
        record = self.store.get_reservation(reservation_id)
        if record is None:
            raise UnknownReservation(f"no reservation {reservation_id!r} at this site")
        return record

    def _pay(
        self, record: ReservationRecord, receipt: Mapping[str, Any], paid: Dict[str, Any]
    ) -> Mapping[str, Any]:
        """A confirm's payment (:data:`~siteagent.market.reservations.Pay`): keep the receipt
        as owed (the first one signed, if a confirm of this reservation was tried before),
        then have the bank book it; the bank's transaction goes into ``paid``."""
        kept = self.store.owe(record.id, bookkeeping.RECEIPT, receipt)
        if self.ledger is not None:
            try:
                done = bookkeeping.book(
                    self.store, self.ledger, record.id, bookkeeping.RECEIPT, kept
                )
            except LedgerUnavailable as exc:  # perhaps booked: kept, voided if never confirmed
                raise PaymentRefused(exc) from None
            except LedgerError as exc:  # refused, so not booked: nothing to keep
                self.store.forget_unbooked(record.id, bookkeeping.RECEIPT)
                raise PaymentRefused(exc) from None
            paid["transaction"] = None if done is None else done.to_json()
        return kept

    def _refuse_if_moved(self, reservation_id: str) -> None:
        """A payment refused because the reservation moved meanwhile (a cancel voided the
        receipt before the bank booked it) is answered with why it cannot be confirmed."""
        current = self._current(reservation_id)
        if current.state is not S.TENTATIVE:
            check_transition(current, S.CONFIRMED)

    def _void(self, receipt: Mapping[str, Any]) -> Dict[str, Any]:
        """The void of a receipt: its full refund, the same document whoever makes it."""
        return sign_void(Receipt.from_json(receipt), self.site_key, self.site_key_id).to_json()

    def _void_unconfirmed(self, reservation_id: str) -> None:
        """Void a receipt of ``reservation_id`` kept by a confirm that did not confirm it, if
        it is no longer live, and try to book the void now (else the agent's loop will)."""
        if self.ledger is None:
            return
        if not bookkeeping.owe_voids(self.store, self._void, reservation_id):
            return
        try:
            bookkeeping.book_one(self.store, self.ledger, reservation_id, bookkeeping.REFUND)
        except LedgerError as exc:
            log.warning("void of reservation %s not booked yet: %s", reservation_id, exc)

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
            done = bookkeeping.book_one(self.store, self.ledger, reservation_id, kind)
        except LedgerError as exc:
            what = "could not reach" if isinstance(exc, LedgerUnavailable) else "refused"
            raise LedgerBookingFailed(
                f"the reservation was updated but the ledger {what} the booking ({exc}); "
                "retry the same request to book it",
                code=ledger(exc.code),
            ) from None
        return None if done is None else done.to_json()


def _batch_signature(signature: Any, client: AuthorizedClient) -> Signed:
    """A batch confirm's signature, made by the client that sent it."""
    try:
        signed = Signed.from_json(signature)
    except ValueError as exc:
        raise ConfirmRefused(str(exc), code="malformed_confirm", field="signature") from None
    if signed.key_id != client.key_id:
        raise ConfirmRefused(
            f"the receipt ids are signed by {signed.key_id!r} but the request by {client.key_id!r}",
            code="confirm_key_mismatch",
        )
    return signed


_T = TypeVar("_T")


def _naming(field: str, check: Callable[..., _T], *args: Any) -> _T:
    """``check(*args)``, with the error it raises naming ``field``."""
    try:
        return check(*args)
    except SiteagentError as exc:
        exc.field = field
        raise


def open_deals(
    config: Config, manager: ReservationManager, clients: Iterable[AuthorizedClient]
) -> Deals:
    """The deals of the site ``config`` describes: its signing key (made on first start), and
    its bank (embedded, or the client of the bank service ``ledger.url`` names), with accounts
    opened in an embedded bank for the site and ``clients`` (with ``ledger.default_credit``)."""
    site_key = load_or_create_site_key(config.security.site_key)
    ledger = open_ledger(config, site_key)
    deals = Deals(manager, site_key, config.site.name, ledger, config.ledger.default_credit)
    deals.open_accounts(clients)
    return deals


def open_ledger(config: Config, site_key: Ed25519PrivateKey) -> Bookkeeper:
    """The embedded ledger, or the client of the ledger service the configuration names
    (bookings signed with the site's key)."""
    if config.ledger.url is not None:
        log.info("ledger: receipts are booked by the ledger service at %s", config.ledger.url)
        signer = (site_key, config.site.name)
        from siteagent.ledger.client import RemoteLedger  # requests: only for a remote bank

        return RemoteLedger(config.ledger.url, config.ledger.ca, signer=signer)
    return Ledger(config.ledger.location)


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
        raise ConfirmRefused(
            'a confirm is {"deal": ..., "signature": ...}', code="malformed_confirm"
        )
    try:
        signature = Signed.from_json(body.get("signature"))
    except ValueError as exc:
        raise ConfirmRefused(str(exc), code="malformed_confirm") from None
    if signature.key_id != client.key_id:
        raise ConfirmRefused(
            f"the deal is signed by {signature.key_id!r} but the request by {client.key_id!r}",
            code="confirm_key_mismatch",
        )
    differing = sorted(
        key
        for key in set(expected) | set(body["deal"])
        if expected.get(key) != body["deal"].get(key)
    )
    if differing:
        raise ConfirmRefused(
            "the signed deal differs from this reservation in: " + ", ".join(differing),
            code="deal_mismatch",
        )
    if not signature_valid(expected, signature, client.public_key):
        raise ConfirmRefused("the deal's signature does not verify", code="bad_confirm_signature")
    document = countersigned_document(expected, signature, now)
    return Receipt(expected, signature, now, sign_document(document, site_key, site_id))
