"""A site bidding only what is free now (``auctions.mode: now``, Baranov et al.'s sites;
siteagent.pricing.bids.valuation_now), worked by hand: no future window, cores held by running
jobs of lower absolute priority counted as free and their suspension counted as displacement,
the fewest such jobs suspended, and what other bids hold never offered again.

Times are seconds; windows are an hour, so core-hours are easy to count.
"""

from __future__ import annotations

from decimal import Decimal
from typing import List, Tuple

from hypothesis import given, settings
from hypothesis import strategies as st

from siteagent.core.values import ClusterSnapshot, Job
from siteagent.pricing import ExternalityFee, FlatPrice, Pricing
from siteagent.pricing.bids import (
    AuctionedJob,
    Hold,
    NoBid,
    Valuation,
    capacity_now,
    valuation,
    valuation_now,
)

H = 3600
D = Decimal
PRICING = Pricing(FlatPrice(), ExternalityFee())


def job(cores: int = 8, walltime: int = H, priority: int = 2) -> AuctionedJob:
    return AuctionedJob(cores, walltime, priority, 0)


def running(name: str, cores: int, level: int, start: int = 0, limit: int = 2 * H) -> Job:
    return Job(name, cores, start, limit, start=start, absolute_priority=level)


def now_bid(snapshot: ClusterSnapshot, auctioned: AuctionedJob, earliest: int = 0) -> Valuation:
    bid = valuation_now(PRICING.context(snapshot), auctioned, earliest, [])
    assert isinstance(bid, Valuation), bid
    return bid


def test_free_cores_are_bid_at_the_earliest_start_with_nothing_displaced() -> None:
    bid = now_bid(ClusterSnapshot(now=0, capacity=16), job(), earliest=60)
    assert (bid.window.start, bid.window.size, bid.window.duration) == (60, 8, H)
    assert (bid.cores_value, bid.displacement, bid.value) == (D("16.000"), D(0), D("16.000"))


def test_cores_free_only_later_are_no_bid_where_a_future_bid_would_wait() -> None:
    busy = ClusterSnapshot(now=0, capacity=16, running=(running("r", 16, 3, limit=H // 2),))
    context = PRICING.context(busy)
    later = valuation(context, job(), 0)
    assert isinstance(later, Valuation) and later.window.start == H // 2
    bid = valuation_now(context, job(), 0, [])
    assert isinstance(bid, NoBid) and bid.code == "no_capacity"


def test_cores_of_a_lower_priority_job_are_bid_and_its_delay_displaced() -> None:
    """16 cores run a priority-1 job for two more hours: a priority-2 job of 8 cores for an
    hour suspends it, and it waits that hour: 16 core-hours displaced, against the job's
    2 x 8 = 16 (the priority weighs its own core-hours)."""
    busy = ClusterSnapshot(now=0, capacity=16, running=(running("low", 16, 1),))
    bid = now_bid(busy, job(priority=2))
    assert bid.window.start == 0
    assert (bid.cores_value, bid.displacement, bid.value) == (D("16.000"), D("16.000"), D(0))
    assert bid.basis is not None
    assert [j.id for j in bid.basis.snapshot.pending] == ["low"]
    assert bid.basis.snapshot.pending[0].limit == 2 * H


def test_the_fewest_lowest_latest_jobs_are_suspended() -> None:
    """Two priority-1 jobs of 8 cores and one of priority 2: an 8-core job of priority 3 needs
    one of them, the priority-1 job started last (8 core-hours displaced), not both."""
    busy = ClusterSnapshot(
        now=100,
        capacity=24,
        running=(running("a", 8, 1, start=0), running("b", 8, 1, start=50), running("c", 8, 2)),
    )
    bid = now_bid(busy, job(priority=3), earliest=100)
    assert bid.basis is not None
    assert [j.id for j in bid.basis.snapshot.pending] == ["b"]
    assert bid.displacement == D("8.000")


def test_jobs_of_the_same_or_a_higher_or_no_known_priority_are_never_counted_on() -> None:
    for level in (2, 3, 0):
        busy = ClusterSnapshot(now=0, capacity=16, running=(running("r", 16, level),))
        bid = valuation_now(PRICING.context(busy), job(priority=2), 0, [])
        assert isinstance(bid, NoBid) and bid.code == "no_capacity", level


def test_a_job_wider_than_the_machine_is_unsatisfiable() -> None:
    bid = valuation_now(PRICING.context(ClusterSnapshot(now=0, capacity=4)), job(), 0, [])
    assert isinstance(bid, NoBid) and bid.code == "unsatisfiable"


def test_held_capacity_is_not_offered_again() -> None:
    """12 of 16 cores held by another auction's bid: an 8-core job gets no bid, a 4-core one
    the rest."""
    context = PRICING.context(ClusterSnapshot(now=0, capacity=16))
    held = [Hold(0, H, 12)]
    assert isinstance(valuation_now(context, job(8), 0, held), NoBid)
    assert isinstance(valuation_now(context, job(4), 0, held), Valuation)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 8), st.integers(0, 4)), min_size=1, max_size=5),
    st.lists(st.tuples(st.integers(1, 8), st.integers(60, 2 * H), st.integers(1, 4)), max_size=6),
)
def test_bids_made_one_after_another_never_share_capacity(
    jobs_running: List[Tuple[int, int]], auctioned: List[Tuple[int, int, int]]
) -> None:
    """Each bid is valued around the ones held before it: whatever their priorities, the held
    windows fit together in what the highest of them may take (never more than the machine
    once the work they would suspend is suspended)."""
    capacity = sum(cores for cores, _ in jobs_running) + 2
    snapshot = ClusterSnapshot(
        now=0,
        capacity=capacity,
        running=tuple(
            running(f"r{k}", cores, level, start=-k)
            for k, (cores, level) in enumerate(jobs_running)
        ),
    )
    context = PRICING.context(snapshot)
    holds: List[Hold] = []
    top = 0
    for cores, walltime, priority in auctioned:
        bid = valuation_now(context, job(cores, walltime, priority), 0, holds)
        if isinstance(bid, Valuation):
            assert bid.value == bid.cores_value - bid.displacement - bid.transfer
            holds.append(Hold(bid.window.start, bid.window.end, bid.window.size))
            top = max(top, priority)
    if holds:
        free = capacity_now(context, top, holds)
        assert min(units for _, _, units in free.segments()) >= 0
