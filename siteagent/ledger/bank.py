"""The bank of the marketplace paper: a double-entry ledger of confirmed deals, in SQLite or
PostgreSQL (its storage: storage.py; docs/ledger.md).

It books doubly signed receipts (:class:`~siteagent.security.Receipt`): it checks the buyer's
signature over the deal and the site's countersignature with public keys it holds itself
(participants are registered with their keys, as the paper's Banking Agent records them when
accounts are opened), then moves the price from the buyer's account to the site's. A signed
cancellation from the site moves the price back less the penalty the buyer agreed to.

Double entry: every transaction is a set of entries that sum to zero, so the balances of all
accounts (the ``bank`` account that issues deposits included) always sum to zero. Each
account's balance is kept beside its entries and moved in the same transaction, so a funds
check reads one row whatever the account's history; ``siteagent ledger check`` (audit.py)
verifies that every balance is still the sum of its entries.
Amounts are Decimal to the cent at the interface and integer cents in the database, so no
amount ever passes through a float.

Booking is idempotent on the receipt id (the hash of the deal): the same receipt sent twice,
by a retry or by two agents' relays, has one effect. Every operation is one transaction of the
database, which first claims the receipt and the account it decides on (storage.py), so a
crash leaves either all of it or none of it, and bank processes sharing the database book as
if they took turns.

**Funds.** A receipt is booked only if its buyer can pay: its balance less the price may not
fall below minus its credit (0 unless the participants file grants one). The check and the
booking are one transaction, so receipts booked in parallel cannot overdraw an account
together.

**Voids.** A site that booked a receipt whose reservation then could not be confirmed (the
deadline passed, the buyer cancelled meanwhile, the agent died in between) refunds it in full:
a cancellation with penalty 0. If that void reaches the bank before the receipt does (the
booking was still in flight), the bank remembers it and refuses the receipt from then on, so
a void and its receipt leave the buyer whole in either order.

The class takes and returns plain values with JSON forms and raises :class:`LedgerError`s that
carry an HTTP status, so that ``siteagent ledger serve`` can be a thin HTTP layer over it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import (
    Any,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Set,
    Tuple,
    Union,
)

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import ValidationError

from siteagent.core.money import BadMoney, from_cents, to_cents, written_amount
from siteagent.ledger.errors import (
    InsufficientFunds,
    LedgerConflict,
    LedgerError,
    LedgerForbidden,
    LedgerNotFound,
    LedgerRefused,
    LedgerUnavailable,
)
from siteagent.ledger.schema import migrate
from siteagent.ledger.storage import Database, Tx, open_database
from siteagent.protocol.documents import Cancellation, Receipt, signature_valid
from siteagent.protocol.keys import check_key_id, parse_public_key, public_key_text
from siteagent.protocol.models import LedgerTransaction, StatementLine

__all__ = [
    "BANK",
    "Bookkeeper",
    "DealTerms",
    "InsufficientFunds",
    "Ledger",
    "LedgerConflict",
    "LedgerError",
    "LedgerForbidden",
    "LedgerNotFound",
    "LedgerRefused",
    "LedgerUnavailable",
    "Posting",
    "StatementRow",
    "Transaction",
    "deal_terms",
    "parse_money",
]

#: The account deposits come from: the issuer of the virtual currency.
BANK = "bank"


@dataclass(frozen=True)
class Posting:
    """One side of a transaction: ``amount`` added to ``account`` (negative: taken)."""

    account: str
    amount: Decimal


@dataclass(frozen=True)
class Transaction:
    """A booked transaction; its entries sum to zero."""

    id: int
    kind: str
    at: int
    memo: str
    entries: Tuple[Posting, ...]
    receipt_id: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        """Its JSON, as :class:`~siteagent.protocol.models.LedgerTransaction` defines it."""
        entries = [{"account": one.account, "amount": str(one.amount)} for one in self.entries]
        return LedgerTransaction.model_validate({**vars(self), "entries": entries}).model_dump()

    @classmethod
    def from_json(cls, data: Any) -> Transaction:
        """The transaction a ledger service answered with; ValueError if it is not one."""
        try:
            wire = LedgerTransaction.model_validate(data)
            entries = tuple(Posting(one.account, Decimal(one.amount)) for one in wire.entries)
        except (ValidationError, ArithmeticError) as exc:
            raise ValueError(f"not a ledger transaction ({exc})") from None
        return cls(wire.id, wire.kind, wire.at, wire.memo, entries, wire.receipt_id)


@dataclass(frozen=True)
class StatementRow:
    """One movement of an account, with the balance after it."""

    transaction_id: int
    at: int
    kind: str
    memo: str
    amount: Decimal
    balance: Decimal
    receipt_id: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        """Its JSON, as :class:`~siteagent.protocol.models.StatementLine` defines it."""
        money = {"amount": str(self.amount), "balance": str(self.balance)}
        return StatementLine.model_validate({**vars(self), **money}).model_dump()


@dataclass(frozen=True)
class DealTerms:
    """What the ledger reads from a deal: the parties, the reservation and the amounts."""

    site: str
    buyer: str
    reservation_id: str
    price_cents: int
    penalty_cents: int


def parse_money(value: Any, what: str) -> int:
    """A deal's amount in cents, or the refusal naming the field."""
    try:
        return to_cents(written_amount(value))
    except BadMoney as exc:
        raise LedgerRefused(
            f"deal.{what}: {exc}", code="malformed_receipt", field=f"deal.{what}"
        ) from None


def deal_terms(deal: Mapping[str, Any]) -> DealTerms:
    """The terms of a deal, or LedgerRefused naming what is missing or malformed."""
    if deal.get("version") != 1:
        raise LedgerRefused(
            "only deals of version 1 are understood", code="malformed_receipt", field="deal.version"
        )
    for key in ("site", "buyer", "reservation_id"):
        if not isinstance(deal.get(key), str) or not deal[key]:
            raise LedgerRefused(
                f"the deal has no {key}", code="malformed_receipt", field=f"deal.{key}"
            )
    price = parse_money(deal.get("price"), "price")
    penalty = parse_money(deal.get("cancellation_penalty"), "cancellation_penalty")
    if penalty > price:
        raise LedgerRefused(
            "the cancellation penalty exceeds the price",
            code="malformed_receipt",
            field="deal.cancellation_penalty",
        )
    return DealTerms(deal["site"], deal["buyer"], deal["reservation_id"], price, penalty)


class Bookkeeper(Protocol):
    """What the agent needs of a ledger: this embedded one, or a ledger service's client
    (:class:`siteagent.ledger.client.RemoteLedger`)."""

    def book(self, receipt: Receipt) -> Transaction: ...

    def book_all(self, receipts: Sequence[Receipt]) -> List[Transaction]: ...

    def refund(self, cancellation: Cancellation) -> Optional[Transaction]: ...

    def close(self) -> None: ...


class Ledger:
    """Accounts, receipts and transactions in one database: an SQLite file's path
    (``:memory:`` for tests), a PostgreSQL URL, or an open :class:`Database`; its schema is
    migrated to the current version when it is opened (schema.py)."""

    def __init__(
        self,
        path: Union[str, Path, Database] = ":memory:",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.database = open_database(path) if isinstance(path, (str, Path)) else path
        try:
            migrate(self.database)
        except BaseException:
            self.database.close()
            raise
        self._clock = clock

    def close(self) -> None:
        self.database.close()

    # ---- participants

    def register(
        self,
        participant_id: str,
        kind: str,
        public_key: Ed25519PublicKey,
        credit: Decimal = Decimal(0),
    ) -> None:
        """Open an account for a user or a site with the key its signatures verify with, and
        set how far below zero its balance may go to pay for a deal (``credit``).

        Registering again with the same key is a no-op but for the credit, which is the
        administrator's latest word (agents register at every start, the service at every
        SIGHUP); another key is a conflict: a key change is an administrator's decision.
        """
        check_key_id(participant_id)
        if kind not in ("user", "site"):
            raise ValueError(f"a participant is a user or a site, not {kind!r}")
        if participant_id == BANK:
            raise LedgerConflict(f"{BANK!r} is the issuing account", code="reserved_account")
        key = public_key_text(public_key)
        credit_cents = to_cents(credit)

        def register(tx: Tx) -> None:
            row = tx.one(
                "SELECT kind, public_key FROM participants WHERE id = ?", (participant_id,)
            )
            if row is None:
                tx.run(
                    "INSERT INTO participants (id, kind, public_key) VALUES (?, ?, ?)",
                    (participant_id, kind, key),
                )
            elif row != (kind, key):
                raise LedgerConflict(
                    f"{participant_id!r} is already registered with another kind or key",
                    code="participant_conflict",
                )
            current = tx.one(
                "SELECT credit_cents FROM credit_limits WHERE account = ?", (participant_id,)
            )
            if current is None:
                tx.run(
                    "INSERT INTO credit_limits (account, credit_cents) VALUES (?, ?)",
                    (participant_id, credit_cents),
                )
            elif current[0] != credit_cents:  # unchanged: nothing written, nothing to conflict
                tx.run(
                    "UPDATE credit_limits SET credit_cents = ? WHERE account = ?",
                    (credit_cents, participant_id),
                )

        self.database.run(register, idempotent=True)

    def participants(self) -> Dict[str, Tuple[str, Ed25519PublicKey]]:
        """Every account holder's kind ("user" or "site") and key, as the bank holds them."""
        rows = self.database.run(lambda tx: tx.all("SELECT id, kind, public_key FROM participants"))
        return {key_id: (kind, parse_public_key(key)) for key_id, kind, key in rows}

    def kind_of(self, key_id: str) -> Optional[str]:
        """ "user" or "site" for an account holder, None for anybody else."""
        row = self.database.run(
            lambda tx: tx.one("SELECT kind FROM participants WHERE id = ?", (key_id,))
        )
        return None if row is None else str(row[0])

    def _participant(self, tx: Tx, key_id: str, kind: str, field: str) -> Ed25519PublicKey:
        """The registered key of ``key_id`` as a ``kind``; the refusal names ``field``, where
        the document named it."""
        row = tx.one(
            "SELECT public_key FROM participants WHERE id = ? AND kind = ?", (key_id, kind)
        )
        if row is None:
            raise LedgerRefused(
                f"no {kind} {key_id!r} is registered", code="unknown_participant", field=field
            )
        return parse_public_key(row[0])

    # ---- booking

    def deposit(self, account: str, amount: Decimal, memo: str = "deposit") -> Transaction:
        """Credit a participant from the bank (the administrator funding an account);
        ValueError unless ``amount`` is a positive amount (to the cent, bounded)."""
        cents = to_cents(amount)
        if cents <= 0:
            raise ValueError(f"a deposit must be positive, got {amount}")

        def deposit(tx: Tx) -> Transaction:
            self._require_account(tx, account)
            return self._post(tx, "deposit", memo, [(BANK, -cents), (account, cents)], None, None)

        return self.database.run(deposit)

    def book(self, receipt: Receipt) -> Transaction:
        """Book a confirmed deal: the buyer pays the site the price.

        Both signatures are checked against the registered keys before anything is written;
        a receipt already booked returns its transaction again without a second effect.
        """
        return self.book_all([receipt])[0]

    def book_all(self, receipts: Sequence[Receipt]) -> List[Transaction]:
        """Book several confirmed deals (a batch confirm's, docs/batches.md) in one
        transaction: each checked as :meth:`book` checks it, the buyers' funds checked for
        what they pay in all, and either every receipt booked or none. Receipts booked
        already answer their transactions again."""
        checked = [
            (receipt, self._terms(receipt, _where(i, len(receipts))))
            for i, receipt in enumerate(receipts)
        ]
        return self.database.run(lambda tx: self._book_all(tx, checked), idempotent=True)

    def _book_all(self, tx: Tx, checked: Sequence[Tuple[Receipt, DealTerms]]) -> List[Transaction]:
        # what it decides on: whether each receipt is booked or voided, and the buyers' funds
        tx.claim(
            *{f"receipt:{receipt.id}" for receipt, _ in checked},
            *{f"account:{terms.buyer}" for _, terms in checked},
        )
        new: List[Tuple[Receipt, DealTerms]] = []
        reservations: Set[Tuple[str, str]] = set()
        for i, (receipt, terms) in enumerate(checked):
            where = _where(i, len(checked))
            self._check_signatures(tx, receipt, terms, where)
            if (terms.site, terms.reservation_id) in reservations:
                raise LedgerRefused(
                    f"reservation {terms.reservation_id} at {terms.site} is twice in the batch",
                    code="malformed_receipt",
                    field=where + "deal.reservation_id",
                )
            reservations.add((terms.site, terms.reservation_id))
            if self._find(tx, "deal", receipt.id) is None:
                self._check_bookable(tx, receipt, terms, where)
                new.append((receipt, terms))
        owed: Dict[str, int] = {}
        for _, terms in new:
            owed[terms.buyer] = owed.get(terms.buyer, 0) + terms.price_cents
        for buyer, cents in owed.items():
            self._check_funds(tx, buyer, cents)
        for receipt, terms in new:
            self._insert_receipt(tx, receipt, terms)
        return [self._booked(tx, receipt.id) for receipt, _ in checked]

    @staticmethod
    def _terms(receipt: Receipt, where: str) -> DealTerms:
        terms = deal_terms(receipt.deal)
        if receipt.user_signature.key_id != terms.buyer:
            raise LedgerRefused(
                "the deal is not signed by its buyer",
                code="signer_mismatch",
                field=where + "user_signature.keyid",
            )
        if receipt.site_signature.key_id != terms.site:
            raise LedgerRefused(
                "the receipt is not signed by the deal's site",
                code="signer_mismatch",
                field=where + "site_signature.keyid",
            )
        return terms

    def _check_signatures(self, tx: Tx, receipt: Receipt, terms: DealTerms, where: str) -> None:
        buyer_key = self._participant(tx, terms.buyer, "user", where + "deal.buyer")
        site_key = self._participant(tx, terms.site, "site", where + "deal.site")
        if not receipt.signed_by_user(buyer_key):
            raise LedgerRefused(
                "the buyer's signature does not verify",
                code="bad_user_signature",
                field=where + "user_signature",
            )
        if not signature_valid(receipt.countersigned(), receipt.site_signature, site_key):
            raise LedgerRefused(
                "the site's signature does not verify",
                code="bad_site_signature",
                field=where + "site_signature",
            )

    def _check_bookable(self, tx: Tx, receipt: Receipt, terms: DealTerms, where: str) -> None:
        """Refuse a receipt its site voided, or a second receipt of one reservation."""
        if self._voided(tx, receipt.id, terms.site):
            raise LedgerConflict(
                f"receipt {receipt.id} was voided by {terms.site} before it was booked "
                f"(reservation {terms.reservation_id} was not confirmed)",
                code="receipt_voided",
                field=where + "deal.reservation_id",
            )
        clash = tx.one(
            "SELECT id FROM receipts WHERE site = ? AND reservation_id = ?",
            (terms.site, terms.reservation_id),
        )
        if clash is not None:
            raise LedgerConflict(
                f"reservation {terms.reservation_id} at {terms.site} is booked by "
                f"receipt {clash[0]}",
                code="reservation_already_booked",
                field=where + "deal.reservation_id",
            )

    def _insert_receipt(self, tx: Tx, receipt: Receipt, terms: DealTerms) -> None:
        tx.run(
            "INSERT INTO receipts (id, site, reservation_id, buyer, price_cents, "
            "penalty_cents, document) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                receipt.id,
                terms.site,
                terms.reservation_id,
                terms.buyer,
                terms.price_cents,
                terms.penalty_cents,
                json.dumps(receipt.to_json(), sort_keys=True),
            ),
        )
        memo = f"reservation {terms.reservation_id} at {terms.site}"
        entries = [(terms.buyer, -terms.price_cents), (terms.site, terms.price_cents)]
        self._post(tx, "deal", memo, entries, receipt.id, None)

    def _booked(self, tx: Tx, receipt_id: str) -> Transaction:
        found = self._find(tx, "deal", receipt_id)
        assert found is not None  # booked in this transaction or before it
        return found

    def refund(self, cancellation: Cancellation) -> Optional[Transaction]:
        """Book a cancellation signed by the site: the buyer gets the price back less the
        penalty, which may not exceed the one the buyer agreed to in the deal.

        A cancellation with penalty 0 of a receipt not booked (yet) is a void: it is kept, the
        receipt is refused from then on, and None is answered (nothing moved).
        """
        try:
            penalty = to_cents(cancellation.penalty)
        except BadMoney as exc:
            raise LedgerRefused(str(exc), code="malformed_cancellation", field="penalty") from None
        return self.database.run(
            lambda tx: self._refund(tx, cancellation, penalty), idempotent=True
        )

    def _refund(self, tx: Tx, cancellation: Cancellation, penalty: int) -> Optional[Transaction]:
        tx.claim(f"receipt:{cancellation.receipt_id}")  # booked, voided or refunded already?
        row = tx.one(
            "SELECT site, reservation_id, buyer, price_cents, penalty_cents FROM receipts "
            "WHERE id = ?",
            (cancellation.receipt_id,),
        )
        if row is None and penalty == 0:
            self._keep_void(tx, cancellation)
            return None
        if row is None:
            raise LedgerNotFound(
                f"no receipt {cancellation.receipt_id} is booked",
                code="unknown_receipt",
                field="receipt_id",
            )
        site, reservation_id, buyer, price, agreed = row
        if cancellation.site_signature.key_id != site:
            raise LedgerRefused(
                "the cancellation is not signed by the site",
                code="signer_mismatch",
                field="site_signature.keyid",
            )
        self._check_site_signature(tx, cancellation, site)
        if not 0 <= penalty <= agreed:
            raise LedgerRefused(
                f"the penalty must be between 0.00 and the agreed {from_cents(agreed)}",
                code="penalty_not_agreed",
                field="penalty",
            )
        document = json.dumps(cancellation.to_json(), sort_keys=True)
        booked = self._find(tx, "refund", cancellation.receipt_id)
        if booked is not None:
            same = tx.one("SELECT document FROM transactions WHERE id = ?", (booked.id,))
            if same is None or same[0] != document:
                raise LedgerConflict(
                    f"reservation {reservation_id} was already refunded",
                    code="already_refunded",
                    field="receipt_id",
                )
            return booked
        refund = price - penalty
        memo = f"refund of reservation {reservation_id} at {site} (penalty {from_cents(penalty)})"
        entries = [(site, -refund), (buyer, refund)]
        return self._post(tx, "refund", memo, entries, cancellation.receipt_id, document)

    def _check_site_signature(self, tx: Tx, cancellation: Cancellation, site: str) -> None:
        site_key = self._participant(tx, site, "site", "site_signature.keyid")
        document = cancellation.signed_document()
        if not signature_valid(document, cancellation.site_signature, site_key):
            raise LedgerRefused(
                "the site's signature does not verify",
                code="bad_site_signature",
                field="site_signature",
            )

    def _keep_void(self, tx: Tx, cancellation: Cancellation) -> None:
        """Remember that the signing site voided a receipt it never had booked: the bank
        knows no receipt to check the signer against, so it must be a registered site, and
        only a receipt of that site is refused for it."""
        site = cancellation.site_signature.key_id
        self._check_site_signature(tx, cancellation, site)
        tx.run(
            "INSERT INTO voids (receipt_id, site, document) VALUES (?, ?, ?) "
            "ON CONFLICT (receipt_id) DO NOTHING",
            (
                cancellation.receipt_id,
                site,
                json.dumps(cancellation.to_json(), sort_keys=True),
            ),
        )

    def _voided(self, tx: Tx, receipt_id: str, site: str) -> bool:
        row = tx.one("SELECT 1 FROM voids WHERE receipt_id = ? AND site = ?", (receipt_id, site))
        return row is not None

    def _check_funds(self, tx: Tx, buyer: str, price_cents: int) -> None:
        """InsufficientFunds unless ``buyer`` can pay ``price_cents`` within its credit."""
        balance = self._balance_cents(tx, buyer)
        credit = self._credit_cents(tx, buyer)
        if balance - price_cents < -credit:
            raise InsufficientFunds(
                f"{buyer} cannot pay {from_cents(price_cents)}: its balance is "
                f"{from_cents(balance)} and its credit {from_cents(credit)}; a deposit "
                f"of {from_cents(price_cents - balance - credit)} would do",
                code="insufficient_funds",
            )

    def _balance_cents(self, tx: Tx, account: str) -> int:
        """The kept balance: one row, whatever the account's history."""
        row = tx.one("SELECT balance_cents FROM balances WHERE account = ?", (account,))
        return 0 if row is None else int(row[0])

    def _credit_cents(self, tx: Tx, account: str) -> int:
        row = tx.one("SELECT credit_cents FROM credit_limits WHERE account = ?", (account,))
        return 0 if row is None else int(row[0])

    def _post(
        self,
        tx: Tx,
        kind: str,
        memo: str,
        entries: Sequence[Tuple[str, int]],
        receipt_id: Optional[str],
        document: Optional[str],
    ) -> Transaction:
        """Write a balanced transaction: its entries, and each account's kept balance."""
        if sum(cents for _, cents in entries) != 0:
            raise AssertionError(f"unbalanced {kind} transaction: {entries}")
        at = int(self._clock())
        transaction_id = tx.insert(
            "INSERT INTO transactions (kind, receipt_id, at, memo, document) "
            "VALUES (?, ?, ?, ?, ?)",
            (kind, receipt_id, at, memo, document),
        )
        for account, cents in entries:
            tx.run(
                "INSERT INTO entries (transaction_id, account, amount_cents) VALUES (?, ?, ?)",
                (transaction_id, account, cents),
            )
        for account, cents in sorted(entries):  # rows locked in one order: no deadlocks
            tx.run(
                "INSERT INTO balances (account, balance_cents) VALUES (?, ?) "
                "ON CONFLICT (account) DO UPDATE "
                "SET balance_cents = balances.balance_cents + excluded.balance_cents",
                (account, cents),
            )
        return Transaction(
            transaction_id,
            kind,
            at,
            memo,
            tuple(Posting(account, from_cents(cents)) for account, cents in entries),
            receipt_id,
        )

    def _find(self, tx: Tx, kind: str, receipt_id: str) -> Optional[Transaction]:
        row = tx.one(
            "SELECT id FROM transactions WHERE kind = ? AND receipt_id = ?", (kind, receipt_id)
        )
        return None if row is None else self._load(tx, int(row[0]))

    def _load(self, tx: Tx, transaction_id: int) -> Transaction:
        found = tx.one(
            "SELECT kind, at, memo, receipt_id FROM transactions WHERE id = ?", (transaction_id,)
        )
        assert found is not None
        kind, at, memo, receipt_id = found
        entries = tx.all(
            "SELECT account, amount_cents FROM entries WHERE transaction_id = ? ORDER BY id",
            (transaction_id,),
        )
        return Transaction(
            transaction_id,
            kind,
            int(at),
            memo,
            tuple(Posting(account, from_cents(int(cents))) for account, cents in entries),
            receipt_id,
        )

    # ---- reading

    def _require_account(self, tx: Tx, account: str) -> None:
        if account == BANK:
            return
        if tx.one("SELECT 1 FROM participants WHERE id = ?", (account,)) is None:
            raise LedgerNotFound(f"no account {account!r}", code="unknown_account")

    def balance(self, account: str) -> Decimal:
        def balance(tx: Tx) -> int:
            self._require_account(tx, account)
            return self._balance_cents(tx, account)

        return from_cents(self.database.run(balance))

    def credit(self, account: str) -> Decimal:
        """How far below zero ``account`` may go to pay for a deal."""

        def credit(tx: Tx) -> int:
            self._require_account(tx, account)
            return self._credit_cents(tx, account)

        return from_cents(self.database.run(credit))

    def balances(self) -> Dict[str, Decimal]:
        """Every account's balance (accounts with no movement show 0.00); they sum to zero."""

        def balances(tx: Tx) -> Dict[str, int]:
            rows = tx.all("SELECT account, balance_cents FROM balances")
            kept: Dict[str, int] = {str(account): int(cents) for account, cents in rows}
            holders = [str(row[0]) for row in tx.all("SELECT id FROM participants")]
            return {account: int(kept.get(account, 0)) for account in [BANK, *holders]}

        found = self.database.run(balances)
        return {account: from_cents(found[account]) for account in sorted(found)}

    def statement(self, account: str) -> List[StatementRow]:
        """An account's movements in booking order, each with the running balance."""

        def rows(tx: Tx) -> List[Tuple[Any, ...]]:
            self._require_account(tx, account)
            return tx.all(
                "SELECT t.id, t.at, t.kind, t.memo, e.amount_cents, t.receipt_id FROM entries e "
                "JOIN transactions t ON t.id = e.transaction_id WHERE e.account = ? "
                "ORDER BY t.id, e.id",
                (account,),
            )

        lines, balance = [], 0
        for transaction_id, at, kind, memo, cents, receipt_id in self.database.run(rows):
            balance += int(cents)
            amount, after = from_cents(int(cents)), from_cents(balance)
            lines.append(
                StatementRow(int(transaction_id), int(at), kind, memo, amount, after, receipt_id)
            )
        return lines

    def movements(self, receipt_id: str) -> List[Transaction]:
        """What was booked for a receipt: its deal, then its refund (none if never booked)."""
        found = self.database.run(
            lambda tx: [self._find(tx, kind, receipt_id) for kind in ("deal", "refund")]
        )
        return [transaction for transaction in found if transaction is not None]

    def receipt(self, receipt_id: str) -> Receipt:
        """A booked receipt as it was received."""
        row = self.database.run(
            lambda tx: tx.one("SELECT document FROM receipts WHERE id = ?", (receipt_id,))
        )
        if row is None:
            raise LedgerNotFound(f"no receipt {receipt_id} is booked", code="unknown_receipt")
        return Receipt.from_json(json.loads(row[0]))


def _where(index: int, count: int) -> str:
    """Where in a booking a refused field is: ``receipts[i].`` in a batch of several."""
    return f"receipts[{index}]." if count > 1 else ""
