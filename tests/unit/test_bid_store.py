"""English auctions' bids in the state database: a bid and its offer written together, the
offer it replaces lapsing in the same transaction, the capacity open bids hold, release (by the
auctioneer, or when the auction ended, after a restart too), a won bid, and the figures the
metrics show."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from pathlib import Path

import pytest

from siteagent.market.lifecycle import BidRecord, BidState
from siteagent.market.store import Remember, Store
from testbed.inprocess.offers import an_offer
from testbed.inprocess.records import a_record
from testbed.inprocess.syncs import commit_levels


@pytest.fixture
def db(tmp_path: Path) -> Store:
    return Store(str(tmp_path / "state" / "siteagent.sqlite3"))


def open_bid(auction: str = "a1", offer_id: str = "o1", size: int = 4) -> BidRecord:
    """An open bid of alice's holding ``size`` units over [1000, 4600), auction closing at 900."""
    return BidRecord(
        client="alice",
        auction_id=auction,
        job={"cores": size, "walltime": 3600, "priority": 2},
        closes_at=900,
        held_until=960,
        state=BidState.OPEN,
        created=10.0,
        updated=10.0,
        offer_id=offer_id,
        start=1000,
        end=4600,
        size=size,
        value=Decimal("7.5"),
        cores_value=Decimal("8.000"),
        displacement=Decimal("0.25"),
        transfer=Decimal("0.250"),
        transfer_s=10,
        made=True,
        updates=1,
    )


def test_a_bid_is_written_with_its_offer_and_read_back(db: Store) -> None:
    bid = open_bid()
    db.save_bid(bid, an_offer("o1"), withdrawn=None)
    assert db.bid("alice", "a1") == bid
    assert db.get_offer("o1") == an_offer("o1")
    assert db.bid("bob", "a1") is None  # auction ids are each client's own


def test_a_bid_moving_to_a_new_offer_withdraws_the_old_one_at_once(db: Store) -> None:
    db.save_bid(open_bid(offer_id="o1"), an_offer("o1"), withdrawn=None)
    moved = dataclasses.replace(open_bid(offer_id="o2"), updated=20.0, updates=2)
    db.save_bid(moved, an_offer("o2"), withdrawn="o1")
    old = db.get_offer("o1")
    assert old is not None and old.expires == 20
    assert db.bid("alice", "a1") == moved


def test_open_bids_hold_their_windows_but_the_one_being_accepted(db: Store) -> None:
    db.save_bid(open_bid("a1", "o1", 4), an_offer("o1"), None)
    db.save_bid(open_bid("a2", "o2", 6), an_offer("o2"), None)
    none = dataclasses.replace(open_bid("a3", "o3"), state=BidState.NONE, offer_id=None)
    db.save_bid(none, None, None)
    assert db.bid_holds() == [(1000, 4600, 4), (1000, 4600, 6)]
    assert db.bid_holds(except_offer="o1") == [(1000, 4600, 6)]
    assert db.bidding("alice") == (3, 960)


def test_counting_a_clients_open_auctions_does_not_read_every_bid_it_ever_made(
    db: Store,
) -> None:
    """Each call for bids counts its client's open auctions: with the client's thousands of
    settled bids behind it, the count takes as few SQLite steps as with none."""

    def steps_to_count() -> int:
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        db._db.set_progress_handler(count, 1)
        try:
            assert db.bidding("alice") == (1, 960)
        finally:
            db._db.set_progress_handler(None, 1)
        return steps[0]

    db.save_bid(open_bid("open", "o-open"), an_offer("o-open"), None)
    alone = steps_to_count()
    settled = dataclasses.replace(open_bid(), state=BidState.RELEASED, offer_id=None)
    for number in range(3000):
        db.save_bid(dataclasses.replace(settled, auction_id=f"old{number}"), None, None)
    assert steps_to_count() <= alone + 10


def test_a_released_bid_holds_nothing_and_its_offer_lapses(db: Store) -> None:
    db.save_bid(open_bid(), an_offer("o1"), None)
    released = db.release_bid("alice", "a1", "lost", "another bid won", at=50.0)
    assert released is not None and released.state is BidState.RELEASED
    assert (released.reason_code, released.reason) == ("lost", "another bid won")
    offer = db.get_offer("o1")
    assert offer is not None and offer.expires == 50
    assert db.bid_holds() == []
    again = db.release_bid("alice", "a1", "lost", "twice", at=60.0)
    assert again == released  # settled bids stay as they are
    assert db.release_bid("alice", "nope", "lost", "", at=1.0) is None


def test_a_bid_and_its_release_skip_their_own_sync_but_winning_it_does_not(db: Store) -> None:
    """A power loss may take a bid (its offer is then unknown: no buyer can accept it, and
    what it held is free, as after a lost auction) or a release (the bid then holds until its
    auction's time to accept is over); the accept that wins a bid is synced."""
    levels = commit_levels(db._db)
    db.save_bid(open_bid("a1", "o1"), an_offer("o1"), None)
    db.release_bid("alice", "a1", "lost", "another bid won", at=50.0)
    db.save_bid(open_bid("a2", "o2"), an_offer("o2"), None)
    db.add_reservation(a_record("r1", offer_id="o2"), "alice", "ok", Remember("alice", "k", "x"))
    assert levels == ["NORMAL", "NORMAL", "NORMAL", "FULL"]
    won = db.bid("alice", "a2")
    assert won is not None and won.state is BidState.WON


def test_bids_are_released_when_their_auction_ended_even_after_a_restart(db: Store) -> None:
    db.save_bid(open_bid("a1", "o1"), an_offer("o1"), None)
    later = dataclasses.replace(open_bid("a2", "o2"), held_until=2000)
    db.save_bid(later, an_offer("o2"), None)
    db.close()
    restarted = Store(db.path)
    assert restarted.bid_holds() == [(1000, 4600, 4), (1000, 4600, 4)]  # still held
    assert restarted.release_due_bids(now=960.0) == 1
    first = restarted.bid("alice", "a1")
    assert first is not None and first.state is BidState.RELEASED
    assert first.reason_code == "auction_ended"
    assert restarted.bid_holds() == [(1000, 4600, 4)]


def test_accepting_a_bids_offer_wins_the_bid_in_the_same_transaction(db: Store) -> None:
    db.save_bid(open_bid("a1", "o1"), an_offer("o1"), None)
    record = a_record("r1", offer_id="o1")
    db.add_reservation(record, "alice", "accepted", Remember("alice", "k", "accept o1"))
    won = db.bid("alice", "a1")
    assert won is not None and won.state is BidState.WON
    assert db.bid_holds() == []  # the reservation holds it now
    assert db.release_due_bids(now=10_000.0) == 0  # a won bid is not released


def test_expired_offers_of_bids_are_kept_for_their_bids(db: Store) -> None:
    db.save_bid(open_bid("a1", "o1"), an_offer("o1"), None)
    db.add_offer(an_offer("quoted"), 5.0)
    assert db.prune_offers(expired_before=10**9) == 1
    assert db.get_offer("o1") is not None and db.get_offer("quoted") is None


def test_the_figures_count_auctions_bids_made_won_and_units_held(db: Store) -> None:
    db.save_bid(open_bid("a1", "o1", 4), an_offer("o1"), None)
    db.save_bid(open_bid("a2", "o2", 6), an_offer("o2"), None)
    none = dataclasses.replace(open_bid("a3"), state=BidState.NONE, offer_id=None, made=False)
    db.save_bid(none, None, None)
    db.add_reservation(a_record("r1", "o2"), "alice", "won", Remember("alice", "k", "accept"))
    figures = db.bid_figures()
    assert (figures.open_auctions, figures.made, figures.won, figures.held_units) == (2, 2, 1, 4)
