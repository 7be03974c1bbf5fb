"""Settling the journal with the sites: what an entry stands for at its site, made certain, and
released where it must be.

An entry is *unsettled* while a request of its was sent without an answer (``accepting``,
``confirming``, ``cancelling``) or while it is ``tentative``: the site may hold capacity for
the buyer that nobody will confirm. :func:`settle` asks the site what it holds, with the
request's own idempotency key where that is the only way to know (an accept that got no
answer: sent again, it answers what the first did), records the site's answer, and cancels
what is tentative. A confirmed reservation is the buyer's: it is cancelled only when asked
(``cancel_confirmed``: the co-allocation it belongs to failed, or the user said so), because
that costs its penalty.

Used by the commit to release what it holds when it fails or is interrupted, by
``siteagent-client recover`` after a crash, and by ``reservations cancel``. A site that does
not answer leaves its entry unsettled (a later ``recover`` finishes it); a tentative
reservation there expires at its deadline on the site's side anyway.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, TypeVar

from siteagent.client.connection import SiteError, SiteUnreachable, Tentative
from siteagent.client.journal import (
    RELEASED,
    AuctionState,
    HoldState,
    Journal,
    JournalEntry,
)
from siteagent.protocol.documents import Cancellation, Receipt
from siteagent.protocol.models import ReservationView

#: The site's reservation states, as the journal records them once seen.
_OBSERVED: Mapping[str, HoldState] = {
    "REQUESTED": HoldState.TENTATIVE,
    "TENTATIVE": HoldState.TENTATIVE,
    "CONFIRMED": HoldState.CONFIRMED,
    "ACTIVE": HoldState.CONFIRMED,
    "COMPLETED": HoldState.CONFIRMED,
    "CANCELLED": HoldState.CANCELLED,
    "EXPIRED": HoldState.EXPIRED,
    "FAILED": HoldState.GONE,
    "LOST": HoldState.GONE,
}


Answer = TypeVar("Answer")


class Seller(Protocol):
    """What the commit and its recovery need of a site: the two-phase commit's requests
    (:class:`siteagent.client.connection.SiteConnection` is one)."""

    def accept(self, offer_id: str, idempotency_key: str) -> Tentative: ...

    def confirm(self, tentative: Tentative) -> Receipt: ...

    def cancel(self, reservation_id: str) -> Optional[Cancellation]: ...

    def reservation(self, reservation_id: str) -> ReservationView: ...

    def verified_receipt(self, data: Any, deal: Mapping[str, Any]) -> Receipt: ...


#: The longest a request waits out a site's rate limit in all before the 429 stands.
PATIENCE_S = 30.0


class Patient:
    """A seller that waits out the site's rate limit. A 429 (``rate_limited``) changed
    nothing at the site, so the same request, with the same idempotency key, is sent again
    after the ``Retry-After`` the site gave (1 s without one), for up to ``patience_s`` in
    all. A commit that meets refusals sends accepts and cancels in bursts that a site's
    rate limit (2 per second by default) would otherwise turn into refusals."""

    def __init__(
        self,
        seller: Seller,
        patience_s: float = PATIENCE_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.seller = seller
        self.patience_s = patience_s
        self.sleep = sleep

    def accept(self, offer_id: str, idempotency_key: str) -> Tentative:
        return self._patiently(lambda: self.seller.accept(offer_id, idempotency_key))

    def confirm(self, tentative: Tentative) -> Receipt:
        return self._patiently(lambda: self.seller.confirm(tentative))

    def cancel(self, reservation_id: str) -> Optional[Cancellation]:
        return self._patiently(lambda: self.seller.cancel(reservation_id))

    def reservation(self, reservation_id: str) -> ReservationView:
        return self._patiently(lambda: self.seller.reservation(reservation_id))

    def verified_receipt(self, data: Any, deal: Mapping[str, Any]) -> Receipt:
        return self.seller.verified_receipt(data, deal)

    def _patiently(self, request: Callable[[], Answer]) -> Answer:
        return patiently(request, self.patience_s, self.sleep)


def patiently(
    request: Callable[[], Answer],
    patience_s: float = PATIENCE_S,
    sleep: Callable[[float], None] = time.sleep,
) -> Answer:
    """``request()``, sent again after each 429's ``Retry-After`` (1 s without one) while the
    waits add up to no more than ``patience_s``; then the 429 stands (raised)."""
    waited = 0.0
    while True:
        try:
            return request()
        except SiteError as exc:
            pause = float(exc.retry_after_s or 1)
            if exc.status != 429 or waited + pause > patience_s:
                raise
            sleep(pause)
            waited += pause


def definite(error: Exception) -> bool:
    """Whether a failed request certainly changed nothing: the site refused it (4xx). No
    answer, a server error or an answer that is not the protocol leave it open."""
    if not isinstance(error, SiteError) or error.status is None:
        return False
    return 400 <= error.status < 500 and type(error) is SiteError


def refusal(error: SiteError) -> str:
    """A site's refusal as the journal notes it: its words and its code."""
    return f"{error.message} ({error.code})"


def settle(
    entry: JournalEntry,
    seller: Seller,
    journal: Journal,
    cancel_confirmed: bool = False,
    raise_refusals: bool = False,
) -> JournalEntry:
    """Make ``entry`` settled: learn what the site holds and cancel it if it is tentative (or
    confirmed, with ``cancel_confirmed``). Returns the entry as journaled; it stays unsettled
    (with the reason in its message) when the site does not answer, or refuses the buyer
    (another key than the reservation's buyer's): ``raise_refusals`` raises that refusal
    (a SiteError) instead, for a command that must say it."""
    try:
        if entry.state is HoldState.ACCEPTING:
            entry = _accept_again(entry, seller, journal)
        if entry.state is HoldState.CONFIRMING:
            entry = observe(entry, seller, journal)
        cancel = {HoldState.TENTATIVE, HoldState.CANCELLING}
        if cancel_confirmed:
            cancel.add(HoldState.CONFIRMED)
        if entry.state in cancel:
            entry = cancel_entry(entry, seller, journal)
    except (SiteError, SiteUnreachable) as exc:
        noted = journal.noted(entry, str(exc))
        if raise_refusals and isinstance(exc, SiteError) and definite(exc):
            raise
        return noted
    return entry


def cancel_entry(entry: JournalEntry, seller: Seller, journal: Journal) -> JournalEntry:
    """Cancel the entry's reservation (journaled before it is sent). A refused cancel (it
    expired or was cancelled already) records what the site shows instead. SiteError or
    SiteUnreachable when the outcome is open."""
    reservation_id = entry.reservation_id
    assert reservation_id is not None, "only an accepted entry can be cancelled"
    entry = journal.cancelling(entry)
    try:
        cancellation = seller.cancel(reservation_id)
    except SiteError as exc:
        if not definite(exc):
            raise
        seen = observe(entry, seller, journal)
        if seen.state in RELEASED:
            return seen
        return journal.noted(seen, f"the site refused to cancel it: {refusal(exc)}")
    message = "" if cancellation is None else f"penalty {cancellation.penalty} kept by the site"
    return journal.released(entry, HoldState.CANCELLED, message)


def observe(entry: JournalEntry, seller: Seller, journal: Journal) -> JournalEntry:
    """Record what the site shows of the entry's reservation."""
    assert entry.reservation_id is not None
    try:
        view = seller.reservation(entry.reservation_id)
    except SiteError as exc:
        if exc.code != "unknown_reservation":
            raise
        return journal.released(entry, HoldState.GONE, f"the site does not know it: {exc.message}")
    state = _OBSERVED[view.state]
    deal = entry.deal or view.deal.model_dump(mode="json")
    if state is HoldState.TENTATIVE:
        return journal.tentative(entry, view.id, deal, view.deadline)
    if state is HoldState.CONFIRMED:
        shown = None if view.receipt is None else view.receipt.model_dump(mode="json")
        receipt = seller.verified_receipt(shown, deal)
        return journal.confirmed(entry, receipt.to_json())
    return journal.released(entry, state, f"{view.state} at the site")


def _accept_again(entry: JournalEntry, seller: Seller, journal: Journal) -> JournalEntry:
    """An accept whose answer was lost, sent again with its idempotency key: the site answers
    what the first one did (or decides it now if the first never arrived)."""
    try:
        tentative = seller.accept(entry.offer_id, entry.idempotency_key)
    except SiteError as exc:
        if not definite(exc):
            raise
        return journal.refused(entry, refusal(exc))
    return journal.tentative(entry, tentative.reservation_id, tentative.deal, tentative.deadline)


def release_all(
    entries: Sequence[JournalEntry],
    sellers: Mapping[str, Seller],
    journal: Journal,
    cancel_confirmed: bool,
) -> List[JournalEntry]:
    """Settle each entry (see :func:`settle`); entries of sites without a seller stay as
    they are."""
    return [
        settle(entry, sellers[entry.site], journal, cancel_confirmed)
        if entry.site in sellers
        else entry
        for entry in entries
    ]


def recover(
    journal: Journal, sellers: Mapping[str, Seller]
) -> Tuple[List[JournalEntry], List[str]]:
    """Finish or undo every interrupted auction in the journal: settle its unsettled entries
    (cancelling tentative reservations, recording confirmed ones) and close the auction:
    ``done`` if every part ended confirmed, else ``interrupted``. Auctions a live process is
    running are left alone. Returns the entries it settled (or tried to) and the ids of the
    auctions it left alone."""
    running: Dict[str, bool] = {}
    touched: List[JournalEntry] = []
    for entry in journal.unsettled():
        if entry.auction_id not in running:
            running[entry.auction_id] = journal.is_running(entry.auction_id)
        if running[entry.auction_id]:
            continue
        touched.extend(release_all([entry], sellers, journal, cancel_confirmed=False))
    for auction in journal.auctions():
        if auction.state in (AuctionState.DONE, AuctionState.FAILED):
            continue
        if auction.state is AuctionState.INTERRUPTED or running.get(auction.id):
            continue
        if journal.is_running(auction.id):
            running[auction.id] = True
            continue
        journal.set_auction(auction.id, *closing_state(journal, auction.id))
    return touched, sorted(auction for auction, live in running.items() if live)


def closing_state(journal: Journal, auction_id: str) -> Tuple[AuctionState, str]:
    """How an auction a process stopped running ends: ``done`` if every part is confirmed,
    else ``interrupted``, saying what it keeps."""
    auction = journal.auction(auction_id)
    parts = int(auction.request.get("parts", 1))
    entries = journal.entries(auction_id)
    confirmed = {e.part for e in entries if e.state is HoldState.CONFIRMED}
    open_steps = sum(1 for e in entries if not e.settled)
    left = f"; {open_steps} step(s) not settled yet (recover again)" if open_steps else ""
    if len(confirmed) == parts:
        return AuctionState.DONE, f"every part confirmed (finished by recover){left}"
    if confirmed:
        kept = ", ".join(str(part + 1) for part in sorted(confirmed))
        return AuctionState.INTERRUPTED, f"interrupted; part(s) {kept} confirmed and kept{left}"
    return AuctionState.INTERRUPTED, f"interrupted; nothing confirmed{left}"
