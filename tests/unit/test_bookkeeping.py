"""What the site owes its ledger is booked once, in order, even when the ledger was down; a
receipt kept for a confirm that never confirmed its reservation is voided once the reservation
is no longer live, and left alone while it is."""

from __future__ import annotations

import contextlib
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import pytest

from siteagent.ledger.bank import Ledger, LedgerConflict, LedgerUnavailable, Transaction
from siteagent.market import bookkeeping
from siteagent.market.store import RECEIPT, REFUND, ReservationState, Store
from siteagent.protocol import documents
from siteagent.protocol.documents import Cancellation, Receipt
from testbed.parties import NOW, Party, receipt
from testbed.promises import unsettled_charges
from testbed.records import requested

S = ReservationState


class FlakyLedger:
    """A ledger that does not answer while ``down`` (a ledger service being restarted)."""

    def __init__(self, inner: Ledger) -> None:
        self.inner = inner
        self.down = False
        self.calls: List[str] = []

    def book(self, receipt: Receipt) -> Transaction:
        self.calls.append("book")
        if self.down:
            raise LedgerUnavailable("the ledger service did not answer", code="unavailable")
        return self.inner.book(receipt)

    def refund(self, cancellation: Cancellation) -> Optional[Transaction]:
        self.calls.append("refund")
        if self.down:
            raise LedgerUnavailable("the ledger service did not answer", code="unavailable")
        return self.inner.refund(cancellation)

    def close(self) -> None:
        self.inner.close()


Parties = Tuple[Party, Party]


@pytest.fixture
def parties() -> Parties:
    """The site and a buyer."""
    return Party("hpc1"), Party("alice@laptop")


@pytest.fixture
def ledger(parties: Parties) -> Iterator[FlakyLedger]:
    site, alice = parties
    bank = Ledger()
    bank.register(site.key_id, "site", site.key.public_key())
    bank.register(alice.key_id, "user", alice.key.public_key(), Decimal("100.00"))
    yield FlakyLedger(bank)
    bank.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    db = Store(str(tmp_path / "s.db"))
    requested(db, "r-1")
    yield db
    db.close()


def confirm(store: Store, document: Dict[str, Any]) -> None:
    """r-1 TENTATIVE then CONFIRMED, owing ``document`` (its receipt), as a confirm does."""
    store.transition("r-1", S.REQUESTED, S.TENTATIVE, NOW, "agent", "made", deadline=NOW + 120)
    owed = (RECEIPT, document)
    store.transition(
        "r-1", S.TENTATIVE, S.CONFIRMED, NOW, "alice", "ok", receipt=document, owed=owed
    )


def test_a_booking_made_while_the_ledger_is_down_is_owed_then_caught_up(
    store: Store, ledger: FlakyLedger, parties: Parties
) -> None:
    site, alice = parties
    deal = receipt(site, alice, "r-1")
    confirm(store, deal.to_json())
    ledger.down = True
    with pytest.raises(LedgerUnavailable):
        bookkeeping.book_one(store, ledger, "r-1", RECEIPT)
    assert [kind for _, kind, _ in store.bookings_owed()] == [RECEIPT]
    assert unsettled_charges(store, ledger.inner) == ["r-1 is CONFIRMED but its deal is not booked"]

    still_down = bookkeeping.book_owed(store, ledger)
    assert still_down.booked == 0 and "did not answer" in still_down.problems[0]

    ledger.down = False
    caught_up = bookkeeping.book_owed(store, ledger)
    assert (caught_up.booked, caught_up.problems) == (1, [])
    assert store.bookings_owed() == []
    assert ledger.inner.balance(alice.key_id) == -Decimal(deal.deal["price"])
    assert unsettled_charges(store, ledger.inner) == []
    assert bookkeeping.book_owed(store, ledger).booked == 0  # nothing booked twice
    again = bookkeeping.book_one(store, ledger, "r-1", RECEIPT)  # a retried confirm
    assert again == ledger.inner.book(deal)  # the same transaction: booked once
    assert ledger.inner.balance(alice.key_id) == -Decimal(deal.deal["price"])


def test_a_refund_owed_after_its_receipt_is_booked_after_it(
    store: Store, ledger: FlakyLedger, parties: Parties
) -> None:
    site, alice = parties
    deal = receipt(site, alice, "r-1")
    penalty = Decimal(deal.deal["cancellation_penalty"])
    cancellation = documents.sign_cancellation(deal, penalty, NOW + 120, site.key, site.key_id)
    confirm(store, deal.to_json())
    store.transition(
        "r-1",
        S.CONFIRMED,
        S.CANCELLED,
        NOW + 120,
        "alice",
        "x",
        penalty=penalty,
        owed=(REFUND, cancellation.to_json()),
    )
    ledger.down = True
    assert bookkeeping.book_owed(store, ledger).booked == 0
    ledger.down = False
    ledger.calls.clear()
    assert bookkeeping.book_owed(store, ledger).booked == 2
    assert ledger.calls == ["book", "refund"]
    assert ledger.inner.balance(alice.key_id) == -penalty


def tentative_with_a_kept_receipt(store: Store, document: Dict[str, Any]) -> None:
    """r-1 TENTATIVE, its receipt kept as a confirm keeps it before the bank books it."""
    store.transition("r-1", S.REQUESTED, S.TENTATIVE, NOW, "agent", "made", deadline=NOW + 120)
    assert store.owe("r-1", RECEIPT, document) == document


def voids(site: Party) -> Any:
    def void(kept: Mapping[str, Any]) -> Dict[str, Any]:
        return documents.sign_void(Receipt.from_json(kept), site.key, site.key_id).to_json()

    return void


def test_a_receipt_kept_for_a_confirm_under_way_is_neither_booked_nor_voided(
    store: Store, ledger: FlakyLedger, parties: Parties
) -> None:
    site, alice = parties
    tentative_with_a_kept_receipt(store, receipt(site, alice, "r-1").to_json())
    assert store.bookings_owed() == [] and store.count_bookings_owed() == 0
    assert bookkeeping.owe_voids(store, voids(site)) == 0
    assert bookkeeping.book_owed(store, ledger).booked == 0 and ledger.calls == []


@pytest.mark.parametrize("booked", [True, False])
def test_a_receipt_of_a_reservation_never_confirmed_is_voided_once(
    store: Store, ledger: FlakyLedger, parties: Parties, booked: bool
) -> None:
    """Booked (the confirm died before the move) or not (it died before the bank), the
    buyer ends with nothing paid, and the receipt can no longer be booked."""
    site, alice = parties
    deal = receipt(site, alice, "r-1")
    tentative_with_a_kept_receipt(store, deal.to_json())
    if booked:
        bookkeeping.book_one(store, ledger, "r-1", RECEIPT)
    store.transition("r-1", S.TENTATIVE, S.EXPIRED, NOW + 120, "agent", "deadline")
    if booked:  # what the crash test checks once the agent settled
        assert unsettled_charges(store, ledger.inner) == [
            f"r-1 was never confirmed (EXPIRED) but {alice.key_id} paid {deal.deal['price']}"
        ]
    assert bookkeeping.owe_voids(store, voids(site)) == 1
    assert bookkeeping.owe_voids(store, voids(site)) == 0  # owed once
    assert [kind for _, kind, _ in store.bookings_owed()] == [REFUND]
    assert bookkeeping.book_owed(store, ledger).booked == 1
    assert ledger.inner.balance(alice.key_id) == 0 and store.bookings_owed() == []
    assert unsettled_charges(store, ledger.inner) == []
    with pytest.raises(LedgerConflict) if not booked else contextlib.nullcontext():
        ledger.inner.book(deal)  # a booking still in flight after the void is refused
    assert ledger.inner.balance(alice.key_id) == 0
