"""The buyer's journal: each step on disk before it is sent, private files, the states an
entry moves through, and the lock that tells a live auction from an interrupted one."""

from __future__ import annotations

import os
import sqlite3
import stat
from decimal import Decimal
from pathlib import Path

import pytest

from siteagent.client.journal import (
    AuctionState,
    HoldState,
    Journal,
    JournalError,
    default_path,
)
from siteagent.client.reverse_auction import Bid
from testbed.inprocess.syncs import commit_levels

BID = Bid(
    site="hpc1",
    part=0,
    round=2,
    arrival=7,
    offer_id="o-1",
    start=1_800_000_600,
    end=1_800_004_200,
    size=64,
    unit_price=Decimal("1.25"),
    fee=Decimal("3.4"),
    total=Decimal("83.40"),
    expires=1_800_000_300,
)


def test_the_default_journal_is_under_the_xdg_state_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_path() == tmp_path / "state" / "siteagent" / "client.db"
    monkeypatch.setenv("XDG_STATE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_path() == tmp_path / ".local" / "state" / "siteagent" / "client.db"


def test_the_journal_and_its_directory_are_private(tmp_path: Path) -> None:
    path = tmp_path / "new" / "client.db"
    Journal(path).close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700


def test_a_step_is_on_disk_when_the_call_returns(tmp_path: Path) -> None:
    """What another process (here: another connection) reads right after the call, before
    the request is sent, is the step."""
    path = tmp_path / "client.db"
    journal = Journal(path)
    auction = journal.open_auction({"parts": 1})
    entry = journal.accepting(auction.id, BID)
    other = sqlite3.connect(str(path))
    row = other.execute(
        "SELECT state, offer_id, idempotency_key FROM entries WHERE id = ?", (entry.id,)
    ).fetchone()
    assert row == ("accepting", "o-1", entry.idempotency_key)
    other.close()
    journal.close()


def test_only_the_steps_about_to_be_sent_wait_for_the_disk(tmp_path: Path) -> None:
    """accepting, confirming and cancelling are synced before their request leaves; what
    records an answer, a round or the auction's end is committed without a sync of its own
    (a power loss may take it, and leaves the step before it, which recover sends again)."""
    journal = Journal(tmp_path / "client.db")
    levels = commit_levels(journal._db)
    auction = journal.open_auction({"parts": 2})
    journal.bidding_round(auction.id, 1, {"standing": "83.40"})
    first = journal.accepting(auction.id, BID)
    first = journal.tentative(first, "r-1", {}, None)
    refused = journal.refused(journal.accepting(auction.id, BID), "offer expired")
    first = journal.confirming(first)
    first = journal.noted(first, "no answer")
    first = journal.confirmed(first, {"id": "abc"})
    cancelled = journal.released(journal.cancelling(first), HoldState.CANCELLED)
    journal.set_auction(auction.id, AuctionState.INTERRUPTED, "interrupted")
    assert (refused.state, cancelled.state) == (HoldState.REFUSED, HoldState.CANCELLED)
    assert levels == [
        *("NORMAL", "NORMAL"),  # opened, a round
        *("FULL", "NORMAL"),  # accepting, tentative
        *("FULL", "NORMAL"),  # accepting, refused
        *("FULL", "FULL", "NORMAL"),  # confirming, noted while confirming, confirmed
        *("FULL", "NORMAL"),  # cancelling, cancelled
        "NORMAL",  # the auction's end
    ]
    journal.close()


def test_an_entry_keeps_its_bid_and_moves_through_the_commit(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "client.db")
    auction = journal.open_auction({"parts": 1, "rfq": {"cores": 64}})
    entry = journal.accepting(auction.id, BID)
    assert entry.bid == BID and entry.state is HoldState.ACCEPTING and not entry.settled
    deal = {"reservation_id": "r-1", "price": "83.40"}
    entry = journal.tentative(entry, "r-1", deal, 1_800_000_120.0)
    assert (entry.reservation_id, entry.deal, entry.deadline) == ("r-1", deal, 1_800_000_120.0)
    entry = journal.confirming(entry)
    assert entry.state is HoldState.CONFIRMING and not entry.settled
    entry = journal.confirmed(entry, {"id": "abc"})
    assert entry.settled and entry.receipt == {"id": "abc"}
    assert [e.id for e in journal.find("r-1")] == [entry.id]
    assert journal.find("r-1", site="hpc2") == []
    assert journal.unsettled() == []
    assert journal.auction(auction.id).request == {"parts": 1, "rfq": {"cores": 64}}
    journal.close()


def test_the_auction_moves_on_with_its_first_accept_and_its_first_confirm(
    tmp_path: Path,
) -> None:
    """Each move is written with the step that makes it (one transaction, not two), and
    never moves the auction back."""
    journal = Journal(tmp_path / "client.db")
    auction = journal.open_auction({"parts": 2})
    assert journal.auction(auction.id).state is AuctionState.BIDDING
    first = journal.tentative(journal.accepting(auction.id, BID), "r-1", {}, None)
    assert journal.auction(auction.id).state is AuctionState.ACCEPTING
    second = journal.tentative(journal.accepting(auction.id, BID), "r-2", {}, None)
    journal.confirming(first)
    assert journal.auction(auction.id).state is AuctionState.CONFIRMING
    journal.accepting(auction.id, BID)
    journal.confirming(second)
    assert journal.auction(auction.id).state is AuctionState.CONFIRMING
    journal.set_auction(auction.id, AuctionState.DONE)
    journal.confirming(second)
    assert journal.auction(auction.id).state is AuctionState.DONE
    journal.close()


def test_unsettled_lists_what_a_site_may_hold_unknown_to_the_buyer(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "client.db")
    auction = journal.open_auction({"parts": 1})
    sent = journal.accepting(auction.id, BID)
    refused = journal.refused(journal.accepting(auction.id, BID), "capacity gone")
    cancelling = journal.cancelling(
        journal.tentative(journal.accepting(auction.id, BID), "r", {}, None)
    )
    assert [e.id for e in journal.unsettled()] == [sent.id, cancelling.id]
    assert journal.released(cancelling, HoldState.CANCELLED).settled
    assert refused.settled and refused.message == "capacity gone"
    with pytest.raises(ValueError, match="not a released state"):
        journal.released(sent, HoldState.TENTATIVE)
    journal.close()


def test_each_accept_gets_its_own_idempotency_key(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "client.db")
    auction = journal.open_auction({"parts": 1})
    keys = {journal.accepting(auction.id, BID).idempotency_key for _ in range(3)}
    assert len(keys) == 3 and all(1 <= len(key) <= 128 for key in keys)
    journal.close()


def test_auction_states_are_kept(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "client.db")
    auction = journal.open_auction({"parts": 2})
    assert auction.state is AuctionState.BIDDING
    journal.set_auction(auction.id, AuctionState.FAILED, "no offer")
    (kept,) = journal.auctions()
    assert (kept.state, kept.message) == (AuctionState.FAILED, "no offer")
    with pytest.raises(JournalError, match="no auction nope"):
        journal.auction("nope")
    journal.close()


def test_a_running_auction_is_seen_from_another_journal(tmp_path: Path) -> None:
    path = tmp_path / "client.db"
    journal, other = Journal(path), Journal(path)
    auction = journal.open_auction({"parts": 1})
    assert not other.is_running(auction.id)
    with journal.running(auction.id):
        assert other.is_running(auction.id)
    assert not other.is_running(auction.id)
    journal.close()
    other.close()


def test_a_journal_of_a_newer_siteagent_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "client.db"
    Journal(path).close()
    db = sqlite3.connect(str(path))
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(JournalError, match="newer siteagent"):
        Journal(path)


def test_rounds_are_kept_in_order(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "client.db")
    auction = journal.open_auction({"parts": 1})
    journal.bidding_round(auction.id, 2, {"best_price": ["1.1"]})
    journal.bidding_round(auction.id, 1, {"best_price": ["1.5"]})
    assert journal.rounds(auction.id) == [{"best_price": ["1.5"]}, {"best_price": ["1.1"]}]
    with pytest.raises(JournalError):
        journal.bidding_round(auction.id, 1, {})  # a round is over once
    journal.close()
