"""What the site owes its ledger: every receipt and refund it signed, kept until booked.

A confirm keeps its receipt as owed *before* the bank books it and before the reservation
moves (see :mod:`siteagent.market.deals`): the bank's booking is the funds check, and a
confirm it refuses changes nothing. A cancel after a confirm keeps its refund as owed in the
same transaction as the CANCELLED state (see :meth:`siteagent.market.store.Store.transition`)
and books it at once; when the ledger does not answer, the agent's loop books what is still
owed, so the bank never misses a refund the site signed. A receipt kept for a confirm that did
not confirm its reservation is voided (:func:`owe_voids`) once the reservation is no longer
live. Booking is idempotent at the ledger (a receipt already booked answers its transaction
again, the same refund too), so a booking that reached the ledger but whose mark was lost in a
crash is harmless.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, List, Mapping, Optional

from siteagent.ledger.bank import Bookkeeper, LedgerError, LedgerUnavailable, Transaction
from siteagent.market.lifecycle import LIVE
from siteagent.market.store import RECEIPT, REFUND, Store
from siteagent.protocol.documents import Cancellation, Receipt

__all__ = ["RECEIPT", "REFUND", "CatchUp", "book", "book_one", "book_owed", "owe_voids"]


def book(
    store: Store,
    ledger: Bookkeeper,
    reservation_id: str,
    kind: str,
    document: Mapping[str, Any],
    clock: Callable[[], float] = time.time,
) -> Optional[Transaction]:
    """Book one owed receipt or refund and mark it booked; LedgerError leaves it owed. None
    for a void the bank kept before it booked the receipt (nothing moved)."""
    done: Optional[Transaction]
    if kind == RECEIPT:
        done = ledger.book(Receipt.from_json(document))
    else:
        done = ledger.refund(Cancellation.from_json(document))
    store.mark_booked(reservation_id, kind, clock())
    return done


def book_one(
    store: Store,
    ledger: Bookkeeper,
    reservation_id: str,
    kind: str,
    clock: Callable[[], float] = time.time,
) -> Optional[Transaction]:
    """Book the receipt or refund the store keeps for ``reservation_id`` (owed, or booked
    already: the ledger answers a booked one with its transaction again)."""
    document = store.booking(reservation_id, kind)
    if document is None:
        raise KeyError(f"reservation {reservation_id} owes the ledger no {kind}")
    return book(store, ledger, reservation_id, kind, document, clock)


def owe_voids(
    store: Store,
    void: Callable[[Mapping[str, Any]], Mapping[str, Any]],
    reservation_id: Optional[str] = None,
) -> int:
    """Owe the bank the void (``void(receipt)``, a full refund) of every receipt kept for a
    confirm whose reservation never became confirmed and is no longer live (expired,
    cancelled or lost while tentative), so can never be; only ``reservation_id``'s if given.
    How many were owed. A tentative one is left alone: its confirm may still be under way."""
    owed = 0
    for record, receipt in store.unconfirmed_receipts(reservation_id):
        if record.state not in LIVE:
            store.owe(record.id, REFUND, void(receipt))
            owed += 1
    return owed


@dataclass
class CatchUp:
    """One pass over what was owed: how many were booked, and what the ledger said of the
    others (refused ones stay owed for an administrator to look at)."""

    booked: int = 0
    problems: List[str] = field(default_factory=list)

    def describe(self) -> str:
        if not self.problems:
            return f"ledger: {self.booked} owed booking(s) done"
        return f"ledger: {self.booked} owed booking(s) done; not yet: " + "; ".join(self.problems)


def book_owed(store: Store, ledger: Bookkeeper, clock: Callable[[], float] = time.time) -> CatchUp:
    """Book every receipt and refund still owed, oldest first; stop at the first sign that
    the ledger is down (the rest would fail the same way)."""
    result = CatchUp()
    for reservation_id, kind, document in store.bookings_owed():
        try:
            book(store, ledger, reservation_id, kind, document, clock)
        except LedgerUnavailable as exc:
            result.problems.append(f"{kind} of {reservation_id}: {exc}")
            break
        except LedgerError as exc:
            result.problems.append(f"{kind} of {reservation_id}: {exc}")
            continue
        result.booked += 1
    return result
