"""The two-phase commit against in-memory sites: the winner confirmed and nothing held at the
losers, refusals moving to the next offer, co-allocation all or nothing, interrupts and dead
sites leaving nothing tentative, and the journal agreeing with every site."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

from siteagent.client.commit import Commit, CommitOutcome, Held
from siteagent.client.connection import SiteError
from siteagent.client.journal import AuctionState, HoldState, Journal
from siteagent.client.plans import PlanningError
from siteagent.client.recovery import Patient, Seller
from siteagent.client.reverse_auction import Auction, Bid, Constraints
from siteagent.protocol import documents
from siteagent.protocol.models import QuoteRequest
from testbed.inprocess.sellers import NOW, FakeSeller

RFQ = QuoteRequest(walltime=3600, cores=64)
START = NOW + 600


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    opened = Journal(tmp_path / "client.db")
    yield opened
    opened.close()


def sites(*names: str, **kw: object) -> Dict[str, FakeSeller]:
    return {name: FakeSeller(name, **kw) for name in names}  # type: ignore[arg-type]


def run(
    journal: Journal,
    sellers: Dict[str, FakeSeller],
    auction: Auction,
    budget: Optional[Decimal] = None,
    interrupt_after: Optional[int] = None,
) -> CommitOutcome:
    """Commit the auction's choices; ``interrupt_after``: the user interrupts once that many
    requests (accepts and confirms) were sent."""
    record = journal.open_auction({"parts": len(auction.parts)})

    def interrupted() -> bool:
        sent = sum(1 for seller in sellers.values() for what, _ in seller.calls if what != "show")
        return interrupt_after is not None and sent >= interrupt_after

    as_sellers: Dict[str, Seller] = dict(sellers)
    commit = Commit(
        journal,
        record.id,
        as_sellers,
        len(auction.parts),
        budget=budget,
        interrupted=interrupted,
        clock=lambda: NOW,
    )
    return commit.run(auction.choices(NOW))


def bidding(sellers: Dict[str, FakeSeller], parts: int = 1, **constraints: object) -> Auction:
    return Auction([RFQ] * parts, list(sellers), Constraints(**constraints))  # type: ignore[arg-type]


def offer(auction: Auction, seller: FakeSeller, part: int, price: str, start: int = START) -> str:
    view = seller.offer(start=start, unit_price=price)
    auction.record(seller.name, part, 1, [view])
    return view.offer_id


def assert_journal_agrees(journal: Journal, sellers: Dict[str, FakeSeller]) -> None:
    """Every journaled reservation is in the state its site shows, and every reservation a
    site holds is journaled."""
    journaled = {e.reservation_id: e for e in journal.entries() if e.reservation_id}
    expected = {
        HoldState.TENTATIVE: "TENTATIVE",
        HoldState.CONFIRMED: "CONFIRMED",
        HoldState.CANCELLED: "CANCELLED",
    }
    for seller in sellers.values():
        for held in seller.reservations.values():
            assert held.id in journaled, f"{seller.name} holds {held.id}, not journaled"
            assert expected[journaled[held.id].state] == held.state


def tentative_anywhere(sellers: Dict[str, FakeSeller]) -> List[str]:
    return [held.id for seller in sellers.values() for held in seller.tentative()]


# ---- one part


def test_the_best_offer_is_confirmed_and_nothing_is_held_at_the_losers(journal: Journal) -> None:
    sellers = sites("a", "b", "c")
    auction = bidding(sellers)
    offer(auction, sellers["a"], 0, "1.50")
    cheapest = offer(auction, sellers["b"], 0, "1.10")
    offer(auction, sellers["c"], 0, "1.30")
    outcome = run(journal, sellers, auction)
    assert outcome.state is AuctionState.DONE
    (bought,) = outcome.confirmed
    assert bought.offer_id == cheapest and bought.site == "b"
    assert [held.state for held in sellers["b"].reservations.values()] == ["CONFIRMED"]
    assert not sellers["a"].reservations and not sellers["c"].reservations
    # the journaled receipt is the site's, and verifies against the site's key
    receipt = documents.Receipt.from_json(bought.receipt)
    assert sellers["b"].verified_receipt(receipt.to_json(), bought.deal or {}) == receipt
    assert journal.auction(outcome.entries[0].auction_id).state is AuctionState.DONE
    assert_journal_agrees(journal, sellers)


def test_a_winner_that_refuses_at_accept_passes_to_the_next_offer(journal: Journal) -> None:
    sellers = sites("a", "b")
    sellers["a"].capacity = 0  # its capacity went since it quoted
    auction = bidding(sellers)
    offer(auction, sellers["a"], 0, "1")
    offer(auction, sellers["b"], 0, "2")
    outcome = run(journal, sellers, auction)
    assert outcome.state is AuctionState.DONE
    assert [e.site for e in outcome.confirmed] == ["b"]
    refused = [e for e in outcome.entries if e.state is HoldState.REFUSED]
    gone = "the capacity is gone (offer_capacity_gone)"
    assert [(e.site, e.message) for e in refused] == [("a", gone)]


def test_nothing_to_accept_fails_and_holds_nothing(journal: Journal) -> None:
    sellers = sites("a", "b", capacity=0)
    auction = bidding(sellers)
    offer(auction, sellers["a"], 0, "1")
    offer(auction, sellers["b"], 0, "2")
    outcome = run(journal, sellers, auction)
    assert outcome.state is AuctionState.FAILED
    assert "the capacity is gone" in outcome.message
    assert not outcome.confirmed and not tentative_anywhere(sellers)


def test_a_site_that_dies_is_dropped_and_the_next_offer_taken(journal: Journal) -> None:
    sellers = sites("a", "b")
    sellers["a"].down = True
    auction = bidding(sellers)
    offer(auction, sellers["a"], 0, "1")
    offer(auction, sellers["a"], 0, "1.1")
    offer(auction, sellers["b"], 0, "2")
    outcome = run(journal, sellers, auction)
    assert outcome.state is AuctionState.DONE
    assert [e.site for e in outcome.confirmed] == ["b"]
    # one accept was tried at the dead site, not both of its offers; it stays unsettled
    (open_entry,) = outcome.unsettled
    assert open_entry.site == "a" and open_entry.state is HoldState.ACCEPTING
    assert "cannot connect" in open_entry.message


def test_an_accept_whose_answer_was_lost_is_found_and_released(journal: Journal) -> None:
    sellers = sites("a", "b")
    sellers["a"].lose_accept_answer = True  # a holds it, the client does not know
    auction = bidding(sellers)
    offer(auction, sellers["a"], 0, "1")
    offer(auction, sellers["b"], 0, "2")
    outcome = run(journal, sellers, auction)
    assert outcome.state is AuctionState.DONE and outcome.confirmed[0].site == "b"
    # the commit passed the silent site; once done, it asked again and released what it held
    assert outcome.unsettled == []
    assert [h.state for h in sellers["a"].reservations.values()] == ["CANCELLED"]
    assert [what for what, _ in sellers["a"].calls] == ["accept", "accept", "cancel"]


def test_the_budget_skips_offers_that_leave_no_room(journal: Journal) -> None:
    sellers = sites("a", "b")
    sellers["a"].capacity = 0
    auction = bidding(sellers)
    offer(auction, sellers["a"], 0, "1")  # 64.00, refused
    offer(auction, sellers["b"], 0, "2")  # 128.00, over the budget
    outcome = run(journal, sellers, auction, budget=Decimal("100"))
    assert outcome.state is AuctionState.FAILED
    assert not sellers["b"].calls


def test_a_site_that_refused_a_part_is_not_asked_again_for_it(journal: Journal) -> None:
    sellers = sites("a", "b")
    sellers["a"].capacity = 0
    auction = bidding(sellers)
    for price in ("1", "1.01", "1.02"):  # a's offers of three rounds
        offer(auction, sellers["a"], 0, price)
    offer(auction, sellers["b"], 0, "2")
    outcome = run(journal, sellers, auction)
    assert outcome.state is AuctionState.DONE and outcome.confirmed[0].site == "b"
    assert [what for what, _ in sellers["a"].calls] == ["accept"]


def test_a_rate_limited_request_is_sent_again_after_the_pause(journal: Journal) -> None:
    seller = FakeSeller("a", rate_limited=2)
    slept: List[float] = []
    patient = Patient(seller, sleep=slept.append)
    view = seller.offer(start=START)
    tentative = patient.accept(view.offer_id, "key-1")
    assert slept == [1.0, 1.0] and tentative.reservation_id in seller.reservations
    seller.rate_limited = 100
    with pytest.raises(SiteError, match="too fast"):
        Patient(seller, patience_s=3, sleep=slept.append).cancel(tentative.reservation_id)
    assert seller.reservations[tentative.reservation_id].state == "TENTATIVE"


# ---- co-allocation


def test_co_allocation_over_three_sites_confirms_every_part(journal: Journal) -> None:
    sellers = sites("a", "b", "c")
    auction = bidding(sellers, parts=3, tolerance=120)
    for part, name in enumerate(sellers):
        offer(auction, sellers[name], part, "1", start=START + 60 * part)
    outcome = run(journal, sellers, auction)
    assert outcome.state is AuctionState.DONE
    assert sorted((e.part, e.site) for e in outcome.confirmed) == [(0, "a"), (1, "b"), (2, "c")]
    assert all(len(s.live()) == 1 for s in sellers.values())
    assert_journal_agrees(journal, sellers)


def test_two_parts_offered_by_one_full_site_move_to_another(journal: Journal) -> None:
    sellers = sites("a", "b")
    auction = bidding(sellers, parts=2, tolerance=0)
    for part in (0, 1):
        offer(auction, sellers["a"], part, "1")  # a has room for one part only
        offer(auction, sellers["b"], part, "2")
    outcome = run(journal, sellers, auction)
    assert outcome.state is AuctionState.DONE
    assert sorted(e.site for e in outcome.confirmed) == ["a", "b"]


def test_a_part_that_cannot_be_had_releases_the_parts_held(journal: Journal) -> None:
    sellers = sites("a", "b")
    sellers["b"].capacity = 0
    auction = bidding(sellers, parts=2, tolerance=0)
    offer(auction, sellers["a"], 0, "1")
    offer(auction, sellers["b"], 1, "1")
    outcome = run(journal, sellers, auction)
    assert outcome.state is AuctionState.FAILED
    assert [held.state for held in sellers["a"].reservations.values()] == ["CANCELLED"]
    assert not tentative_anywhere(sellers)
    assert_journal_agrees(journal, sellers)


def test_a_held_part_the_next_choice_also_uses_is_kept(journal: Journal) -> None:
    sellers = sites("a", "b", "c")
    sellers["b"].capacity = 0
    auction = bidding(sellers, parts=2, tolerance=600)
    kept = offer(auction, sellers["a"], 0, "1", start=START + 300)
    offer(auction, sellers["b"], 1, "1", start=START)  # cheapest window: [START, START+600]
    offer(auction, sellers["c"], 1, "3", start=START + 900)  # next: [START+300, START+900]
    outcome = run(journal, sellers, auction)
    assert outcome.state is AuctionState.DONE
    assert sorted(e.offer_id for e in outcome.confirmed)[0] == kept
    assert len(sellers["a"].reservations) == 1  # accepted once, never cancelled


def test_a_confirm_refused_on_one_part_releases_every_part(journal: Journal) -> None:
    sellers = sites("a", "b", "c")
    sellers["c"].refuse_confirm = "insufficient_funds"
    auction = bidding(sellers, parts=3, tolerance=0)
    for part, name in enumerate(sellers):
        offer(auction, sellers[name], part, "1")
    outcome = run(journal, sellers, auction)
    assert outcome.state is AuctionState.FAILED
    assert "part 3 at c" in outcome.message and "every part released" in outcome.message
    # a and b were confirmed first, then cancelled (at their penalty); c was never confirmed
    for name in sellers:
        assert [h.state for h in sellers[name].reservations.values()] == ["CANCELLED"]
    assert [w for w, _ in sellers["a"].calls] == ["accept", "confirm", "cancel"]
    assert all(e.state is HoldState.CANCELLED for e in outcome.entries)
    assert_journal_agrees(journal, sellers)


def test_a_confirm_whose_answer_was_lost_is_found_and_released(journal: Journal) -> None:
    sellers = sites("a", "b")
    sellers["b"].lose_confirm_answer = True
    auction = bidding(sellers, parts=2, tolerance=0)
    offer(auction, sellers["a"], 0, "1")
    offer(auction, sellers["b"], 1, "1")
    outcome = run(journal, sellers, auction)
    assert outcome.state is AuctionState.FAILED
    assert not any(seller.live() for seller in sellers.values())
    assert_journal_agrees(journal, sellers)


# ---- interrupts


@pytest.mark.parametrize("after", [1, 2, 3, 4, 5])
def test_an_interrupt_at_any_step_leaves_nothing_tentative(journal: Journal, after: int) -> None:
    """Steps: accept a, accept b, accept c, confirm a, confirm b, (confirm c)."""
    sellers = sites("a", "b", "c")
    auction = bidding(sellers, parts=3, tolerance=0)
    for part, name in enumerate(sellers):
        offer(auction, sellers[name], part, "1")
    outcome = run(journal, sellers, auction, interrupt_after=after)
    assert outcome.state is AuctionState.INTERRUPTED
    assert not tentative_anywhere(sellers)
    confirmed = max(0, after - 3)
    assert len(outcome.confirmed) == confirmed  # bought parts are kept and reported
    if confirmed:
        assert "confirmed part(s) kept" in outcome.message
    assert not outcome.unsettled
    assert_journal_agrees(journal, sellers)


# ---- a provisioning plan: parts held by the planner, then confirmed or all released


def plan_holds(journal: Journal, plan_id: str, sellers: Dict[str, FakeSeller]) -> Dict[int, Held]:
    """One part held at each seller, as a planner holds a task's window."""
    held: Dict[int, Held] = {}
    for part, seller in enumerate(sellers.values()):
        bid = Bid.of(seller.name, part, 1, part, seller.offer(start=START, unit_price="1"))
        entry = journal.accepting(plan_id, bid)
        tentative = seller.accept(bid.offer_id, entry.idempotency_key)
        entry = journal.tentative(
            entry, tentative.reservation_id, tentative.deal, tentative.deadline
        )
        held[part] = Held(entry, tentative)
    return held


def test_a_plan_held_task_by_task_is_confirmed_whole(journal: Journal) -> None:
    sellers = sites("a", "b", "c")
    record = journal.open_auction({"provision": "wf.yaml"})
    commit = Commit(journal, record.id, dict(sellers), 3, clock=lambda: NOW)
    outcome = commit.run_plan(lambda: plan_holds(journal, record.id, sellers))
    assert outcome.state is AuctionState.DONE
    assert [e.state for e in outcome.entries] == [HoldState.CONFIRMED] * 3
    assert_journal_agrees(journal, sellers)


def test_a_plan_a_task_cannot_finish_releases_every_task_held(journal: Journal) -> None:
    sellers = sites("a", "b")
    record = journal.open_auction({"provision": "wf.yaml"})
    commit = Commit(journal, record.id, dict(sellers), 3, clock=lambda: NOW)

    def hold() -> Dict[int, Held]:
        plan_holds(journal, record.id, sellers)
        raise PlanningError("task c: no site offers a window")

    outcome = commit.run_plan(hold)
    assert outcome.state is AuctionState.FAILED and "task c" in outcome.message
    assert [e.state for e in outcome.entries] == [HoldState.CANCELLED] * 2
    assert_journal_agrees(journal, sellers)


def test_a_dry_run_plan_confirms_nothing(journal: Journal) -> None:
    sellers = sites("a")
    record = journal.open_auction({"provision": "wf.yaml"})
    commit = Commit(journal, record.id, dict(sellers), 1, clock=lambda: NOW)
    outcome = commit.run_plan(lambda: plan_holds(journal, record.id, sellers), confirm=False)
    assert outcome.state is AuctionState.FAILED and outcome.confirmed == []
    assert [e.state for e in outcome.entries] == [HoldState.CANCELLED]
    assert_journal_agrees(journal, sellers)
