"""The bank: doubly signed receipts booked in double entry when the buyer can pay, refunds
less the agreed penalty, voids of receipts never confirmed, idempotence on the receipt id, and
refusals that change nothing."""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import replace
from decimal import Decimal
from typing import Dict, Iterator, List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from siteagent.ledger.audit import check
from siteagent.ledger.bank import (
    BANK,
    InsufficientFunds,
    Ledger,
    LedgerConflict,
    LedgerError,
    LedgerNotFound,
    LedgerRefused,
)
from siteagent.market import deals
from siteagent.protocol import documents
from siteagent.protocol.documents import Cancellation, Receipt, Signed
from siteagent.protocol.errors import status_of
from testbed.inprocess.parties import NOW, Party, deal, receipt
from testbed.processes.postgres import PostgresTestServer

PRICE = Decimal("43.40")  # 16 cores x 2 h x 1.25 + fee 3.4 (testbed.inprocess.parties.offer)
#: What alice may owe: enough for the few deals a test books without a deposit.
CREDIT = Decimal("1000.00")


class Clock:
    now = NOW + 100

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def site() -> Party:
    return Party("hpc1")


@pytest.fixture
def alice() -> Party:
    return Party("alice@laptop")


@pytest.fixture
def ledger(site: Party, alice: Party, ledger_location: str) -> Iterator[Ledger]:
    """A bank on each database; whatever the test did, its books must pass `ledger check`."""
    book = Ledger(ledger_location, clock=Clock())
    book.register(site.key_id, "site", site.key.public_key())
    book.register(alice.key_id, "user", alice.key.public_key(), CREDIT)
    yield book
    audit = check(book.database)
    book.close()
    assert audit.ok, audit.to_json()


def snapshot(ledger: Ledger) -> Dict[str, object]:
    """Everything a refused operation must leave as it was."""
    return {
        "balances": ledger.balances(),
        "statements": {account: ledger.statement(account) for account in ledger.balances()},
    }


def refused(ledger: Ledger, error: type, code: str, operation: object, argument: object) -> None:
    before = snapshot(ledger)
    with pytest.raises(error) as caught:
        operation(argument)  # type: ignore[operator]
    assert isinstance(caught.value, LedgerError) and caught.value.code == code, caught.value
    assert snapshot(ledger) == before


def cancel(site: Party, booked: Receipt, penalty: str) -> Cancellation:
    return documents.sign_cancellation(booked, Decimal(penalty), NOW + 200, site.key, site.key_id)


# --------------------------------------------------------------------------- booking


def test_a_receipt_moves_the_price_from_buyer_to_site(
    ledger: Ledger, site: Party, alice: Party
) -> None:
    booked = receipt(site, alice)
    transaction = ledger.book(booked)
    assert transaction.kind == "deal" and transaction.receipt_id == booked.id
    assert transaction.memo == "reservation r-1 at hpc1"
    assert ledger.balance(alice.key_id) == -PRICE
    assert ledger.balance(site.key_id) == PRICE
    assert sum(ledger.balances().values()) == 0
    assert ledger.receipt(booked.id) == booked


def test_the_same_receipt_twice_has_one_effect(ledger: Ledger, site: Party, alice: Party) -> None:
    booked = receipt(site, alice)
    first = ledger.book(booked)
    relayed = Receipt.from_json(json.loads(json.dumps(booked.to_json())))  # as sent over HTTP
    assert ledger.book(relayed) == first
    assert ledger.balance(alice.key_id) == -PRICE
    assert len(ledger.statement(alice.key_id)) == 1


def test_a_receipt_with_a_wrong_user_signature_is_refused(
    ledger: Ledger, site: Party, alice: Party
) -> None:
    booked = receipt(site, alice)
    forged = replace(booked, user_signature=Signed(alice.key_id, bytes(64)))
    refused(ledger, LedgerRefused, "bad_user_signature", ledger.book, forged)


def test_a_receipt_with_a_wrong_site_signature_is_refused(
    ledger: Ledger, site: Party, alice: Party
) -> None:
    booked = receipt(site, alice)
    impostor = Party(site.key_id)  # the site's name, another key
    forged = replace(
        booked,
        site_signature=documents.sign_document(booked.countersigned(), impostor.key, site.key_id),
    )
    refused(ledger, LedgerRefused, "bad_site_signature", ledger.book, forged)


def test_a_receipt_whose_deal_was_altered_after_signing_is_refused(
    ledger: Ledger, site: Party, alice: Party
) -> None:
    booked = receipt(site, alice)
    cheaper = replace(booked, deal={**booked.deal, "price": "1.00"})
    refused(ledger, LedgerRefused, "bad_user_signature", ledger.book, cheaper)
    later = replace(booked, confirmed_at=booked.confirmed_at + 1)  # covered by the site only
    refused(ledger, LedgerRefused, "bad_site_signature", ledger.book, later)


def test_a_receipt_signed_by_others_than_its_parties_is_refused(
    ledger: Ledger, site: Party, alice: Party
) -> None:
    bob = Party("bob@ci")
    ledger.register(bob.key_id, "user", bob.key.public_key())
    booked = receipt(site, alice)
    by_bob = replace(
        booked, user_signature=documents.sign_document(booked.deal, bob.key, bob.key_id)
    )
    refused(ledger, LedgerRefused, "signer_mismatch", ledger.book, by_bob)


def test_a_receipt_from_an_unregistered_party_is_refused(ledger: Ledger, site: Party) -> None:
    stranger = Party("eve")
    refused(ledger, LedgerRefused, "unknown_participant", ledger.book, receipt(site, stranger))


def test_a_user_cannot_pose_as_a_site(ledger: Ledger, alice: Party) -> None:
    as_site = receipt(alice, alice)  # alice signs as both buyer and "site"
    refused(ledger, LedgerRefused, "unknown_participant", ledger.book, as_site)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"price": "43.4"}, "deal.price: expected an amount written with two decimals"),
        ({"price": 43.4}, "deal.price: expected an amount written with two decimals"),
        ({"cancellation_penalty": "50.00"}, "penalty exceeds the price"),
        ({"version": 2}, "version 1"),
        ({"reservation_id": ""}, "no reservation_id"),
    ],
)
def test_a_malformed_deal_is_refused(
    ledger: Ledger, site: Party, alice: Party, change: Dict[str, object], message: str
) -> None:
    document = {**deal(site, alice), **change}
    body = documents.confirm_body(document, alice.key, alice.key_id)
    signed = deals.countersign(body, document, alice.client(), site.key, site.key_id, NOW)
    before = snapshot(ledger)
    with pytest.raises(LedgerRefused, match=message):
        ledger.book(signed)
    assert snapshot(ledger) == before


def test_another_receipt_for_a_booked_reservation_conflicts(
    ledger: Ledger, site: Party, alice: Party
) -> None:
    ledger.book(receipt(site, alice))
    other = receipt(site, alice, offer_id="o-2")  # same reservation id, another deal
    refused(ledger, LedgerConflict, "reservation_already_booked", ledger.book, other)
    ledger.book(receipt(site, alice, reservation_id="r-2"))  # another reservation is fine
    assert ledger.balance(alice.key_id) == -2 * PRICE


# --------------------------------------------------------------------------- refunds


def test_a_cancellation_refunds_the_price_less_the_penalty(
    ledger: Ledger, site: Party, alice: Party
) -> None:
    booked = receipt(site, alice)
    ledger.book(booked)
    transaction = ledger.refund(cancel(site, booked, "0.34"))
    assert transaction.kind == "refund" and "penalty 0.34" in transaction.memo
    assert ledger.balance(alice.key_id) == Decimal("-0.34")
    assert ledger.balance(site.key_id) == Decimal("0.34")
    assert sum(ledger.balances().values()) == 0
    lines = ledger.statement(alice.key_id)
    assert [(line.kind, line.amount, line.balance) for line in lines] == [
        ("deal", -PRICE, -PRICE),
        ("refund", Decimal("43.06"), Decimal("-0.34")),
    ]


def test_the_same_cancellation_twice_has_one_effect(
    ledger: Ledger, site: Party, alice: Party
) -> None:
    booked = receipt(site, alice)
    ledger.book(booked)
    cancellation = cancel(site, booked, "0.00")
    first = ledger.refund(cancellation)
    assert (
        ledger.refund(Cancellation.from_json(json.loads(json.dumps(cancellation.to_json()))))
        == first
    )
    assert ledger.balance(alice.key_id) == Decimal("0.00")
    refused(ledger, LedgerConflict, "already_refunded", ledger.refund, cancel(site, booked, "0.10"))


def test_a_penalty_above_the_agreed_one_is_refused(
    ledger: Ledger, site: Party, alice: Party
) -> None:
    booked = receipt(site, alice)
    ledger.book(booked)
    refused(
        ledger, LedgerRefused, "penalty_not_agreed", ledger.refund, cancel(site, booked, "0.35")
    )


def test_a_cancellation_signed_by_another_key_is_refused(
    ledger: Ledger, site: Party, alice: Party
) -> None:
    booked = receipt(site, alice)
    ledger.book(booked)
    genuine = cancel(site, booked, "0.00")
    forged = replace(genuine, penalty=Decimal("0.34"))  # the signature covers the penalty
    refused(ledger, LedgerRefused, "bad_site_signature", ledger.refund, forged)
    by_alice = documents.sign_cancellation(booked, Decimal(0), NOW, alice.key, alice.key_id)
    refused(ledger, LedgerRefused, "signer_mismatch", ledger.refund, by_alice)


def test_a_cancellation_of_an_unbooked_receipt_is_not_found(
    ledger: Ledger, site: Party, alice: Party
) -> None:
    unbooked = cancel(site, receipt(site, alice), "0.34")
    refused(ledger, LedgerNotFound, "unknown_receipt", ledger.refund, unbooked)


# --------------------------------------------------------------------------- voids


def test_a_void_refunds_a_booked_receipt_in_full_once(
    ledger: Ledger, site: Party, alice: Party
) -> None:
    booked = receipt(site, alice)
    ledger.book(booked)
    void = documents.sign_void(booked, site.key, site.key_id)
    assert void.to_json() == documents.sign_void(booked, site.key, site.key_id).to_json()
    refund = ledger.refund(void)
    assert refund is not None and refund.receipt_id == booked.id
    assert ledger.refund(void) == refund  # the same document from another path: booked once
    assert ledger.balance(alice.key_id) == 0 and ledger.balance(site.key_id) == 0


def test_a_void_before_its_receipt_forbids_booking_it(
    ledger: Ledger, site: Party, alice: Party
) -> None:
    """The void of a confirm that failed can overtake the booking still in flight: the bank
    keeps it and refuses the receipt, so the buyer pays nothing in either order."""
    late = receipt(site, alice)
    before = snapshot(ledger)
    assert ledger.refund(documents.sign_void(late, site.key, site.key_id)) is None
    assert snapshot(ledger) == before
    refused(ledger, LedgerConflict, "receipt_voided", ledger.book, late)
    ledger.book(receipt(site, alice, reservation_id="r-2"))  # other receipts are booked


def test_a_void_must_be_signed_by_a_registered_site(
    ledger: Ledger, site: Party, alice: Party
) -> None:
    late = receipt(site, alice)
    by_alice = documents.sign_void(late, alice.key, alice.key_id)
    refused(ledger, LedgerRefused, "unknown_participant", ledger.refund, by_alice)
    forged = documents.sign_void(late, Party(site.key_id).key, site.key_id)
    refused(ledger, LedgerRefused, "bad_site_signature", ledger.refund, forged)
    other_site = Party("hpc2")
    ledger.register(other_site.key_id, "site", other_site.key.public_key())
    assert ledger.refund(documents.sign_void(late, other_site.key, other_site.key_id)) is None
    ledger.book(late)  # hpc2 cannot void hpc1's receipt
    assert ledger.balance(alice.key_id) == -PRICE


# --------------------------------------------------------------------------- funds


def test_a_buyer_pays_within_its_balance_and_credit(ledger: Ledger, site: Party) -> None:
    bob = Party("bob@desk")
    ledger.register(bob.key_id, "user", bob.key.public_key(), Decimal("40.00"))
    first = receipt(site, bob)
    before = snapshot(ledger)
    with pytest.raises(InsufficientFunds) as caught:
        ledger.book(first)
    message = str(caught.value)
    assert "cannot pay 43.40" in message and "balance is 0.00" in message
    assert "credit 40.00" in message
    assert caught.value.code == "insufficient_funds" and status_of("insufficient_funds") == 402
    assert snapshot(ledger) == before
    ledger.deposit(bob.key_id, Decimal("3.40"))
    ledger.book(first)  # 3.40 - 43.40 = -40.00: exactly the credit
    assert ledger.balance(bob.key_id) == Decimal("-40.00")
    refused(ledger, InsufficientFunds, "insufficient_funds", ledger.book, receipt(site, bob, "r-2"))


def test_a_booked_receipt_is_answered_again_whatever_the_funds(ledger: Ledger, site: Party) -> None:
    """A retried booking is idempotent: the funds were checked when it was booked."""
    bob = Party("bob@desk")
    ledger.register(bob.key_id, "user", bob.key.public_key(), PRICE)
    booked = receipt(site, bob)
    first = ledger.book(booked)
    assert ledger.book(booked) == first and ledger.balance(bob.key_id) == -PRICE


def test_registering_again_sets_the_credit(ledger: Ledger, alice: Party) -> None:
    assert ledger.credit(alice.key_id) == CREDIT
    ledger.register(alice.key_id, "user", alice.key.public_key(), Decimal("5.00"))
    assert ledger.credit(alice.key_id) == Decimal("5.00")
    ledger.register(alice.key_id, "user", alice.key.public_key())
    assert ledger.credit(alice.key_id) == 0


def test_parallel_bookings_cannot_overdraw(ledger_location: str, site: Party) -> None:
    """Four processes' worth of connections booking at once: the funds check and the booking
    are one transaction, so at most what the credit allows is booked."""
    path = ledger_location
    bob = Party("bob@desk")
    setup = Ledger(path)
    setup.register(site.key_id, "site", site.key.public_key())
    setup.register(bob.key_id, "user", bob.key.public_key(), 3 * PRICE)
    setup.close()
    banks = [Ledger(path) for _ in range(4)]
    start = threading.Barrier(len(banks))
    outcomes: List[str] = []

    def book_many(bank: Ledger, index: int) -> None:
        start.wait()
        for number in range(5):
            try:
                bank.book(receipt(site, bob, reservation_id=f"r-{index}-{number}"))
                outcomes.append("booked")
            except InsufficientFunds:
                outcomes.append("refused")

    threads = [
        threading.Thread(target=book_many, args=(bank, index)) for index, bank in enumerate(banks)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("booked") == 3 and outcomes.count("refused") == 17
    assert banks[0].balance(bob.key_id) == -3 * PRICE
    assert check(banks[0].database).ok
    for bank in banks:
        bank.close()


def test_a_cancellation_in_fractions_of_a_cent_is_refused(
    ledger: Ledger, site: Party, alice: Party
) -> None:
    booked = receipt(site, alice)
    ledger.book(booked)
    fraction = replace(cancel(site, booked, "0.00"), penalty=Decimal("0.001"))
    refused(ledger, LedgerRefused, "malformed_cancellation", ledger.refund, fraction)


# --------------------------------------------------------------------------- accounts


def test_deposits_come_from_the_bank_and_statements_run(
    ledger: Ledger, site: Party, alice: Party
) -> None:
    ledger.deposit(alice.key_id, Decimal("100"), "allocation 2025")
    booked = receipt(site, alice)
    ledger.book(booked)
    lines = ledger.statement(alice.key_id)
    assert [(line.memo, line.amount, line.balance, line.receipt_id) for line in lines] == [
        ("allocation 2025", Decimal("100.00"), Decimal("100.00"), None),
        ("reservation r-1 at hpc1", -PRICE, Decimal("56.60"), booked.id),
    ]
    assert lines[1].to_json()["balance"] == "56.60"
    assert lines[1].to_json()["receipt_id"] == booked.id  # a deal found by its receipt
    assert ledger.balances() == {
        BANK: Decimal("-100.00"),
        alice.key_id: Decimal("56.60"),
        site.key_id: PRICE,
    }
    with pytest.raises(ValueError, match="positive"):
        ledger.deposit(alice.key_id, Decimal("0"))
    with pytest.raises(ValueError, match="2 after"):
        ledger.deposit(alice.key_id, Decimal("0.001"))


def test_unknown_accounts_are_not_found(ledger: Ledger) -> None:
    for operation in (ledger.balance, ledger.statement):
        with pytest.raises(LedgerNotFound) as caught:
            operation("nobody")
        assert status_of(caught.value.code) == 404
    with pytest.raises(LedgerNotFound):
        ledger.deposit("nobody", Decimal(1))
    with pytest.raises(LedgerNotFound):
        ledger.receipt("0" * 64)


def test_registration_is_idempotent_and_a_new_key_conflicts(ledger: Ledger, alice: Party) -> None:
    ledger.register(alice.key_id, "user", alice.key.public_key())
    with pytest.raises(LedgerConflict) as caught:
        ledger.register(alice.key_id, "user", Party("x").key.public_key())
    assert status_of(caught.value.code) == 409
    with pytest.raises(LedgerConflict):
        ledger.register(alice.key_id, "site", alice.key.public_key())
    with pytest.raises(LedgerConflict):
        ledger.register(BANK, "user", alice.key.public_key())


def test_the_ledger_survives_a_restart(ledger_location: str, site: Party, alice: Party) -> None:
    path = ledger_location
    first = Ledger(path)
    first.register(site.key_id, "site", site.key.public_key())
    first.register(alice.key_id, "user", alice.key.public_key(), CREDIT)
    booked = receipt(site, alice)
    first.book(booked)
    first.close()
    second = Ledger(path)
    assert second.balance(site.key_id) == PRICE
    assert second.book(booked).receipt_id == booked.id  # still idempotent
    assert second.balance(site.key_id) == PRICE
    second.close()


def test_transactions_have_a_json_form(ledger: Ledger, site: Party, alice: Party) -> None:
    transaction = ledger.book(receipt(site, alice))
    assert transaction.to_json()["entries"] == [
        {"account": alice.key_id, "amount": "-43.40"},
        {"account": site.key_id, "amount": "43.40"},
    ]


# --------------------------------------------------------------------------- double entry


operations = st.lists(
    st.one_of(
        st.tuples(st.just("deposit"), st.integers(0, 2), st.integers(1, 10_000)),
        st.tuples(st.just("book"), st.integers(0, 2), st.integers(0, 5)),
        st.tuples(st.just("refund"), st.integers(0, 2), st.integers(0, 5)),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None)
@given(operations, st.lists(st.integers(0, 100), min_size=3, max_size=3))
def test_balances_always_add_up(steps: List[tuple], credits: List[int]) -> None:  # type: ignore[type-arg]
    """Whatever is deposited, booked (when it can be paid) and refunded, the accounts sum to
    zero, every statement runs to its balance, and no buyer goes below minus its credit."""
    balances_add_up(Ledger(), steps, credits)


@pytest.mark.postgres
def test_balances_always_add_up_on_postgresql(postgres_server: PostgresTestServer) -> None:
    """The same on PostgreSQL, each example in a fresh schema (fewer: each costs a schema)."""

    @settings(max_examples=12, deadline=None)
    @given(operations, st.lists(st.integers(0, 100), min_size=3, max_size=3))
    def add_up(steps: List[tuple], credits: List[int]) -> None:  # type: ignore[type-arg]
        balances_add_up(Ledger(postgres_server.schema()), steps, credits)

    add_up()


def balances_add_up(ledger: Ledger, steps: List[tuple], credits: List[int]) -> None:  # type: ignore[type-arg]
    """Run ``steps`` on ``ledger`` and check what must hold whatever they were."""
    site = Party("hpc1")
    users = [Party(f"user{index}") for index in range(3)]
    ledger.register(site.key_id, "site", site.key.public_key())
    for user, credit in zip(users, credits):
        ledger.register(user.key_id, "user", user.key.public_key(), Decimal(credit))
    booked: Dict[str, Receipt] = {}
    for kind, who, amount in steps:
        user = users[who]
        if kind == "deposit":
            ledger.deposit(user.key_id, Decimal(amount).scaleb(-2))
        elif kind == "book":
            made = receipt(site, user, reservation_id=f"r-{who}-{amount}")
            try:
                ledger.book(made)
                booked[made.id] = made
            except InsufficientFunds:
                assert ledger.balance(user.key_id) - PRICE < -credits[who]
        elif booked:
            target = sorted(booked)[amount % len(booked)]
            ledger.refund(cancel(site, booked[target], "0.34"))  # again: idempotent
    balances = ledger.balances()
    assert sum(balances.values()) == 0
    for user, credit in zip(users, credits):
        assert balances[user.key_id] >= -credit
    for account, balance in balances.items():
        lines = ledger.statement(account)
        assert sum((line.amount for line in lines), Decimal(0)) == balance
        assert not lines or lines[-1].balance == balance
    assert check(ledger.database).ok
    ledger.close()


def test_signatures_in_receipts_are_base64_in_json(site: Party, alice: Party) -> None:
    form = receipt(site, alice).to_json()
    assert len(base64.b64decode(form["user_signature"]["value"])) == 64
    assert form["site_signature"]["alg"] == "ed25519"
