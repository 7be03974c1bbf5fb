"""The reverse auction's buyer side: what each round asks, how bids are ranked, what the
constraints and co-allocation leave, and what a failed auction shows."""

from __future__ import annotations

from decimal import Decimal
from typing import List

import pytest

from siteagent.client.reverse_auction import (
    Auction,
    Constraints,
    Mode,
    Preference,
    run_rounds,
)
from siteagent.core.money import cost
from siteagent.protocol.models import OfferView, QuoteRequest

NOW = 1_800_000_000
HOUR = 3600
RFQ = QuoteRequest(walltime=HOUR, cores=64, max_price=Decimal("2"))


def offer(offer_id: str, start: int, unit_price: str, fee: str = "0", cores: int = 64) -> OfferView:
    total = cost(cores, HOUR, Decimal(unit_price), Decimal(fee))
    return OfferView(
        offer_id=offer_id,
        start=start,
        end=start + HOUR,
        cores=cores,
        unit_price=unit_price,
        fee=fee,
        total=str(total),
        expires=NOW + 300,
    )


def auction(parts: int = 1, **constraints: object) -> Auction:
    return Auction(
        [RFQ] * parts,
        ["a", "b", "c"],
        Constraints(**constraints),  # type: ignore[arg-type]
    )


def ids(bids: List[object]) -> List[str]:
    return [bid.offer_id for bid in bids]  # type: ignore[attr-defined]


# ---- the rounds


def test_round_one_asks_the_request_as_given() -> None:
    assert auction().rfq(0, 1) == RFQ


def test_a_later_round_carries_the_lowest_unit_price_so_far() -> None:
    bidding = auction()
    bidding.record("a", 0, 1, [offer("a1", NOW + 60, "1.50"), offer("a2", NOW + 600, "1.20")])
    bidding.record("b", 0, 1, [offer("b1", NOW + 60, "1.30")])
    second = bidding.rfq(0, 2)
    assert second.round == 2
    assert second.best_price == Decimal("1.20")
    assert second.max_price == RFQ.max_price  # the buyer's ceiling does not move
    assert second.walltime == RFQ.walltime and second.cores == RFQ.cores


def test_a_later_round_with_no_bid_yet_has_no_best_price() -> None:
    second = auction().rfq(0, 2)
    assert second.round == 2 and second.best_price is None


def test_the_best_price_ignores_bids_past_the_deadline_while_others_meet_it() -> None:
    bidding = auction(deadline=NOW + 2 * HOUR)
    bidding.record("a", 0, 1, [offer("late", NOW + 5 * HOUR, "0.50")])
    bidding.record("b", 0, 1, [offer("in-time", NOW + 60, "1.40")])
    assert bidding.best_price(0) == Decimal("1.40")


def test_the_best_price_ignores_dropped_sites() -> None:
    bidding = auction()
    bidding.record("a", 0, 1, [offer("a1", NOW + 60, "0.90")])
    bidding.record("b", 0, 1, [offer("b1", NOW + 60, "1.10")])
    bidding.drop("a", 0, 2, "no answer within 10 s")
    assert bidding.best_price(0) == Decimal("1.10")
    assert bidding.bidders == ["b", "c"]


def test_rounds_run_until_the_count_or_the_stop() -> None:
    asked: List[int] = []
    bidding = auction()
    assert run_rounds(bidding, 5, lambda _, r: asked.append(r), lambda: False) == 5
    assert asked == [1, 2, 3, 4, 5]
    asked.clear()
    assert run_rounds(bidding, 5, lambda _, r: asked.append(r), lambda: len(asked) == 2) == 2
    assert asked == [1, 2]


class FakeClock:
    """A clock that moves only when slept on (or when a round takes ``round_s``)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize(
    ("round_s", "starts", "closed"), [(2.0, [0, 15, 30], 45), (20, [0, 20, 40], 60)]
)
def test_a_round_interval_paces_the_rounds_like_a_timer(
    round_s: float, starts: List[float], closed: float
) -> None:
    """Rounds start an interval apart (later when a round overruns it), and bidding closes
    an interval after the last round began: the paper's duration is rounds x its timer."""
    clock = FakeClock()
    began: List[float] = []

    def ask(_: Auction, round: int) -> None:
        began.append(clock())
        clock.now += round_s

    assert run_rounds(auction(), 3, ask, lambda: False, 15.0, clock, clock.sleep) == 3
    assert began == starts
    assert clock() == closed


def test_a_paced_auction_stops_while_it_waits() -> None:
    clock = FakeClock()
    asked: List[int] = []

    def stop() -> bool:  # interrupted 5 s into the first wait
        return clock() >= 5

    done = run_rounds(auction(), 3, lambda _, r: asked.append(r), stop, 15.0, clock, clock.sleep)
    assert done == 1
    assert asked == [1]
    assert clock() < 15


def test_rounds_stop_when_every_site_dropped_out() -> None:
    bidding = auction()

    def everyone_fails(auction: Auction, round: int) -> None:
        for site in auction.bidders:
            auction.drop(site, 0, round, "down")

    assert run_rounds(bidding, 5, everyone_fails, lambda: False) == 1


# ---- ranking


def test_bids_rank_by_cost_then_end_then_arrival() -> None:
    bidding = auction()
    bidding.record("a", 0, 1, [offer("dear", NOW + 60, "1.50"), offer("late", NOW + 900, "1")])
    bidding.record("b", 0, 1, [offer("soon", NOW + 60, "1"), offer("soon-too", NOW + 60, "1")])
    (choice,) = bidding.choices(NOW)
    assert ids(list(choice.candidates[0])) == ["soon", "soon-too", "late", "dear"]


def test_earliest_mode_ranks_by_end_first() -> None:
    bidding = Auction([RFQ], ["a"], preference=Preference(Mode.EARLIEST))
    bidding.record("a", 0, 1, [offer("cheap-late", NOW + 900, "1"), offer("dear", NOW + 60, "2")])
    (choice,) = bidding.choices(NOW)
    assert ids(list(choice.candidates[0])) == ["dear", "cheap-late"]


@pytest.mark.parametrize(("alpha", "first"), [(1.0, "cheap-late"), (0.0, "dear-soon")])
def test_alpha_trades_cost_against_time(alpha: float, first: str) -> None:
    bidding = Auction([RFQ], ["a"], preference=Preference(Mode.ALPHA, alpha))
    bidding.record(
        "a",
        0,
        1,
        [offer("cheap-late", NOW + 9000, "1"), offer("dear-soon", NOW + 60, "2")],
    )
    (choice,) = bidding.choices(NOW)
    assert choice.candidates[0][0].offer_id == first


def test_an_alpha_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="alpha"):
        Preference(Mode.ALPHA, 1.5)


# ---- constraints


def test_bids_past_the_deadline_are_not_candidates() -> None:
    bidding = auction(deadline=NOW + 2 * HOUR)
    bidding.record("a", 0, 1, [offer("in-time", NOW + 60, "2"), offer("late", NOW + HOUR + 1, "1")])
    (choice,) = bidding.choices(NOW)
    assert ids(list(choice.candidates[0])) == ["in-time"]


def test_bids_over_the_budget_are_not_candidates() -> None:
    bidding = auction(budget=Decimal("100"))
    bidding.record("a", 0, 1, [offer("cheap", NOW + 60, "1.5"), offer("dear", NOW + 60, "1.6")])
    (choice,) = bidding.choices(NOW)
    assert ids(list(choice.candidates[0])) == ["cheap"]  # 96.00 fits, 102.40 does not


def test_expired_bids_and_bids_of_dropped_sites_are_not_candidates() -> None:
    bidding = auction()
    bidding.record("a", 0, 1, [offer("a1", NOW + 60, "1")])
    bidding.record("b", 0, 1, [offer("b1", NOW + 60, "1.1")])
    bidding.record("c", 0, 1, [offer("c1", NOW + 60, "1.2")])
    bidding.drop("b", 0, 2, "no answer")
    (choice,) = bidding.choices(NOW)
    assert ids(list(choice.candidates[0])) == ["a1", "c1"]
    assert bidding.choices(NOW + 300) == []  # every offer expires at NOW + 300


def test_nothing_within_the_constraints_shows_the_closest_offers() -> None:
    bidding = auction(deadline=NOW + HOUR + 60, budget=Decimal("60"))
    bidding.record("a", 0, 1, [offer("a-late", NOW + 600, "0.5")])  # 540 s late, in budget
    bidding.record("b", 0, 1, [offer("b-dear", NOW + 60, "1")])  # in time, 4.00 over
    bidding.record("c", 0, 1, [offer("c-both", NOW + 7200, "2")])  # late and over
    assert bidding.choices(NOW) == []
    closest = bidding.closest(NOW)
    assert ids([s.bid for s in closest]) == ["b-dear", "a-late", "c-both"]
    assert closest[0].problems == ("4.00 over the budget",)
    assert closest[1].problems == ("ends 540 s after the deadline",)
    assert len(closest[2].problems) == 2


# ---- co-allocation


def test_parts_are_placed_only_where_all_start_within_the_tolerance() -> None:
    bidding = auction(parts=3, tolerance=300)
    bidding.record("a", 0, 1, [offer("a0", NOW + 1000, "1")])
    bidding.record("b", 1, 1, [offer("b1", NOW + 1200, "1"), offer("b1-far", NOW + 9000, "0.5")])
    bidding.record("c", 2, 1, [offer("c2", NOW + 1250, "1.2")])
    choices = bidding.choices(NOW)
    assert [ids(list(choice.best)) for choice in choices] == [["a0", "b1", "c2"]]


def test_co_allocation_choices_rank_by_their_total_cost() -> None:
    bidding = auction(parts=2, tolerance=0)
    bidding.record("a", 0, 1, [offer("a-early", NOW + 60, "2"), offer("a-late", NOW + 900, "1")])
    bidding.record("b", 1, 1, [offer("b-early", NOW + 60, "2"), offer("b-late", NOW + 900, "1")])
    choices = bidding.choices(NOW)
    assert [ids(list(c.best)) for c in choices] == [["a-late", "b-late"], ["a-early", "b-early"]]


def test_the_budget_counts_the_other_parts_at_their_cheapest() -> None:
    bidding = auction(parts=2, tolerance=0, budget=Decimal("140"))
    bidding.record("a", 0, 1, [offer("a1", NOW + 60, "1"), offer("a2", NOW + 60, "1.25")])
    bidding.record("b", 1, 1, [offer("b1", NOW + 60, "1")])
    (choice,) = bidding.choices(NOW)
    # 64 + 64 fits; 80 + 64 = 144 does not
    assert [ids(list(part)) for part in choice.candidates] == [["a1"], ["b1"]]


def test_parts_that_never_align_are_reported_as_such() -> None:
    bidding = auction(parts=2, tolerance=60)
    bidding.record("a", 0, 1, [offer("a0", NOW + 60, "1")])
    bidding.record("b", 1, 1, [offer("b1", NOW + 5000, "1")])
    assert bidding.choices(NOW) == []
    assert all("no start within 60 s" in s.problems[0] for s in bidding.closest(NOW))


def test_a_co_allocation_without_a_common_window_asks_from_where_enough_sites_can() -> None:
    bidding = auction(parts=3, tolerance=600)
    bidding.record("a", 0, 1, [offer("a0", NOW + 60, "1")])
    bidding.record("b", 1, 1, [offer("b1", NOW + 4000, "1")])
    bidding.record("c", 2, 1, [offer("c2", NOW + 9000, "1"), offer("c2-later", NOW + 9500, "1")])
    assert bidding.choices(NOW) == []
    assert bidding.aligned_start() == NOW + 9000  # the third site's earliest offer
    assert bidding.rfq(0, 2).earliest_start == NOW + 9000
    assert bidding.rfq(0, 1).earliest_start is None  # round 1 is the request as given


def test_a_co_allocation_with_a_common_window_keeps_its_start() -> None:
    bidding = auction(parts=2, tolerance=600)
    bidding.record("a", 0, 1, [offer("a0", NOW + 60, "1")])
    bidding.record("b", 1, 1, [offer("b1", NOW + 300, "1")])
    assert bidding.aligned_start() is None
    assert bidding.rfq(1, 2).earliest_start is None
    assert auction().aligned_start() is None
