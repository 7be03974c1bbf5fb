"""Recovery from the journal after a crash: tentative reservations cancelled, lost answers
found with their idempotency keys, confirmed parts kept and reported, live auctions left
alone, and sites that do not answer left for a later run."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Iterator

import pytest

from siteagent.client.journal import AuctionState, HoldState, Journal, JournalEntry
from siteagent.client.recovery import Seller, recover, settle
from testbed.inprocess.sellers import NOW, FakeSeller

START = NOW + 600


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    opened = Journal(tmp_path / "client.db")
    yield opened
    opened.close()


def crashed_auction(journal: Journal, parts: int) -> str:
    """An auction some process was running when it died (in the commit phase)."""
    auction = journal.open_auction({"parts": parts})
    journal.set_auction(auction.id, AuctionState.CONFIRMING)
    return auction.id


def accepted(journal: Journal, auction_id: str, seller: FakeSeller, part: int) -> JournalEntry:
    """An accept journaled, sent and answered: a tentative reservation."""
    bid = seller.bid(part, part, start=START)
    entry = journal.accepting(auction_id, bid)
    tentative = seller.accept(bid.offer_id, entry.idempotency_key)
    return journal.tentative(entry, tentative.reservation_id, tentative.deal, tentative.deadline)


def confirmed(journal: Journal, auction_id: str, seller: FakeSeller, part: int) -> JournalEntry:
    entry = accepted(journal, auction_id, seller, part)
    held = seller.reservations[entry.reservation_id or ""]
    receipt = seller.confirm(seller.accept_answer(held))
    return journal.confirmed(journal.confirming(entry), receipt.to_json())


def sellers_of(*sellers: FakeSeller) -> Dict[str, Seller]:
    return {seller.name: seller for seller in sellers}


def test_recover_cancels_tentative_parts_and_keeps_confirmed_ones(journal: Journal) -> None:
    a, b = FakeSeller("a"), FakeSeller("b")
    auction_id = crashed_auction(journal, parts=2)
    kept = confirmed(journal, auction_id, a, 0)
    held = accepted(journal, auction_id, b, 1)
    settled, running = recover(journal, sellers_of(a, b))
    assert running == []
    assert [(e.id, e.state) for e in settled] == [(held.id, HoldState.CANCELLED)]
    assert [h.state for h in b.reservations.values()] == ["CANCELLED"]
    assert journal.entry(kept.id).state is HoldState.CONFIRMED
    assert [h.state for h in a.reservations.values()] == ["CONFIRMED"]
    closed = journal.auction(auction_id)
    assert closed.state is AuctionState.INTERRUPTED
    assert "part(s) 1 confirmed and kept" in closed.message


def test_recover_finishes_an_auction_whose_parts_were_all_confirmed(journal: Journal) -> None:
    a, b = FakeSeller("a"), FakeSeller("b")
    auction_id = crashed_auction(journal, parts=2)
    confirmed(journal, auction_id, a, 0)
    entry = accepted(journal, auction_id, b, 1)
    # the last confirm was sent and done at the site; the process died before its answer
    b.confirm(b.accept_answer(b.reservations[entry.reservation_id or ""]))
    journal.confirming(entry)
    recover(journal, sellers_of(a, b))
    assert journal.entry(entry.id).state is HoldState.CONFIRMED
    assert journal.entry(entry.id).receipt is not None
    assert journal.auction(auction_id).state is AuctionState.DONE


def test_an_accept_whose_answer_was_lost_is_learnt_and_cancelled(journal: Journal) -> None:
    a = FakeSeller("a")
    auction_id = crashed_auction(journal, parts=1)
    bid = a.bid(0, 0, start=START)
    entry = journal.accepting(auction_id, bid)
    a.lose_accept_answer = True
    with pytest.raises(Exception, match="no answer"):
        a.accept(bid.offer_id, entry.idempotency_key)
    recover(journal, sellers_of(a))
    (held,) = a.reservations.values()
    assert held.state == "CANCELLED"
    after = journal.entry(entry.id)
    assert (after.state, after.reservation_id) == (HoldState.CANCELLED, held.id)
    assert [what for what, _ in a.calls] == ["accept", "accept", "cancel"]


def test_an_accept_that_never_left_and_whose_offer_expired_is_refused(journal: Journal) -> None:
    clock = {"now": NOW}
    a = FakeSeller("a", clock=lambda: clock["now"])
    auction_id = crashed_auction(journal, parts=1)
    entry = journal.accepting(auction_id, a.bid(0, 0, start=START))
    clock["now"] = START + 1
    recover(journal, sellers_of(a))
    assert journal.entry(entry.id).state is HoldState.REFUSED
    assert not a.reservations


def test_a_site_that_does_not_answer_is_left_for_a_later_recover(journal: Journal) -> None:
    a = FakeSeller("a")
    auction_id = crashed_auction(journal, parts=1)
    entry = accepted(journal, auction_id, a, 0)
    a.down = True
    recover(journal, sellers_of(a))
    waiting = journal.entry(entry.id)
    assert waiting.state is HoldState.TENTATIVE and "cannot connect" in waiting.message
    assert "1 step(s) not settled yet" in journal.auction(auction_id).message
    a.down = False
    recover(journal, sellers_of(a))
    assert journal.entry(entry.id).state is HoldState.CANCELLED


def test_a_running_auction_is_left_alone(journal: Journal) -> None:
    a = FakeSeller("a")
    auction_id = crashed_auction(journal, parts=1)
    entry = accepted(journal, auction_id, a, 0)
    with journal.running(auction_id):
        settled, running = recover(journal, sellers_of(a))
    assert (settled, running) == ([], [auction_id])
    assert journal.entry(entry.id).state is HoldState.TENTATIVE
    assert journal.auction(auction_id).state is AuctionState.CONFIRMING


def test_an_entry_of_an_unknown_site_is_left_as_it_is(journal: Journal) -> None:
    a = FakeSeller("a")
    auction_id = crashed_auction(journal, parts=1)
    entry = accepted(journal, auction_id, a, 0)
    settled, _ = recover(journal, {})
    assert [e.state for e in settled] == [HoldState.TENTATIVE]
    assert journal.entry(entry.id).state is HoldState.TENTATIVE


def test_a_reservation_that_expired_meanwhile_is_recorded_so(journal: Journal) -> None:
    a = FakeSeller("a")
    auction_id = crashed_auction(journal, parts=1)
    entry = accepted(journal, auction_id, a, 0)
    a.reservations[entry.reservation_id or ""].state = "EXPIRED"
    assert settle(entry, a, journal).state is HoldState.EXPIRED


def test_settle_cancels_a_confirmed_part_only_when_asked(journal: Journal) -> None:
    a = FakeSeller("a")
    auction_id = crashed_auction(journal, parts=1)
    entry = confirmed(journal, auction_id, a, 0)
    assert settle(entry, a, journal).state is HoldState.CONFIRMED
    cancelled = settle(entry, a, journal, cancel_confirmed=True)
    assert cancelled.state is HoldState.CANCELLED
    assert "penalty 0.10" in cancelled.message


def test_a_cancel_the_site_refuses_says_why_and_keeps_the_part(journal: Journal) -> None:
    """A reservation whose window began cannot be cancelled: the entry stays confirmed, with
    the site's reason, rather than a cancel said to be pending with nothing to say."""
    a = FakeSeller("a")
    auction_id = crashed_auction(journal, parts=1)
    entry = confirmed(journal, auction_id, a, 0)
    a.reservations[entry.reservation_id or ""].state = "ACTIVE"
    kept = settle(entry, a, journal, cancel_confirmed=True)
    assert kept.state is HoldState.CONFIRMED and kept.settled
    assert "the site refused to cancel it" in kept.message and "illegal_transition" in kept.message
