"""A site's bid in an English auction (siteagent.pricing.bids): the value's parts worked by hand,
the window a bid chooses (pushing the queue back only for a high enough priority), no bid
without capacity, and held capacity: what other bids hold is never offered again.

Times are seconds; windows are an hour, so core-hours are easy to count.
"""

from __future__ import annotations

from decimal import Decimal
from typing import List

from hypothesis import given, settings
from hypothesis import strategies as st

from siteagent.core.values import ClusterSnapshot, Job
from siteagent.pricing import ExternalityFee, FlatPrice, Pricing
from siteagent.pricing.bids import (
    AuctionedJob,
    Hold,
    NoBid,
    Valuation,
    held_profile,
    holding,
    valuation,
)
from testbed.inprocess.strategies import snapshots

H = 3600
D = Decimal
PRICING = Pricing(FlatPrice(), ExternalityFee())


def context_of(snapshot: ClusterSnapshot):  # type: ignore[no-untyped-def]
    return PRICING.context(snapshot)


def valued(snapshot: ClusterSnapshot, job: AuctionedJob, earliest: int = 0) -> Valuation:
    bid = valuation(context_of(snapshot), job, earliest)
    assert isinstance(bid, Valuation), bid
    return bid


def job(cores: int = 8, walltime: int = H, priority: int = 1, transfer_s: int = 0) -> AuctionedJob:
    return AuctionedJob(cores, walltime, priority, transfer_s)


EMPTY = ClusterSnapshot(now=0, capacity=16)


def test_free_cores_now_are_worth_all_their_core_hours() -> None:
    bid = valued(EMPTY, job())
    assert bid.window.start == 0 and bid.window.size == 8 and bid.window.duration == H
    assert (bid.cores_value, bid.displacement, bid.transfer) == (D("8.000"), D(0), D(0))
    assert bid.value == D("8.000")


def test_cores_free_a_walltime_later_are_worth_half() -> None:
    busy = ClusterSnapshot(now=0, capacity=16, running=(Job("r", 16, 0, H, start=0),))
    bid = valued(busy, job())
    assert bid.window.start == H
    assert bid.cores_value == D("4.000")


def test_cores_not_free_within_a_walltime_are_no_bid() -> None:
    busy = ClusterSnapshot(now=0, capacity=16, running=(Job("r", 16, 0, 2 * H, start=0),))
    bid = valuation(context_of(busy), job(), 0)
    assert isinstance(bid, NoBid) and bid.code == "no_capacity"


def test_a_job_wider_than_the_machine_is_no_bid_naming_its_cores() -> None:
    bid = valuation(context_of(EMPTY), job(cores=17), 0)
    assert bid == NoBid("unsatisfiable", "17 cores asked, the site has 16", "job.cores")


def test_the_input_transfer_counts_in_the_jobs_core_hours_at_its_priority() -> None:
    assert valued(EMPTY, job(transfer_s=1800)).transfer == D("4.000")
    doubled = valued(EMPTY, job(priority=2, transfer_s=1800))
    assert (doubled.cores_value, doubled.transfer, doubled.value) == (
        D("16.000"),
        D("8.000"),
        D("8.000"),
    )


# A 10-core machine with a 10-core hour-long job queued (it starts now): a 4-core job now
# delays it by an hour, 10 core-hours of displacement; after it, the job waits a walltime.
QUEUED = ClusterSnapshot(now=0, capacity=10, pending=(Job("q", 10, 0, H),))


def test_a_low_priority_job_waits_rather_than_displace_the_queue() -> None:
    """Now: 4 - 10 = -6; after the queued job: 4 x 1/2 = 2. The hole wins."""
    bid = valued(QUEUED, job(cores=4))
    assert bid.window.start == H
    assert (bid.cores_value, bid.displacement, bid.value) == (D("2.000"), D(0), D("2.000"))


def test_a_high_priority_job_displaces_the_queue_to_start_now() -> None:
    """Priority 10: now 40 - 10 = 30 beats 20 after the queued job."""
    bid = valued(QUEUED, job(cores=4, priority=10))
    assert bid.window.start == 0
    assert (bid.cores_value, bid.displacement, bid.value) == (D("40.000"), D("10.00"), D("30"))


def test_the_earliest_start_the_auction_allows_counts_as_no_wait() -> None:
    """Windows start no sooner than the auction ends (plus the time to accept): waiting
    until then costs nothing."""
    bid = valued(EMPTY, job(), earliest=600)
    assert bid.window.start == 600 and bid.cores_value == D("8.000")


def test_held_capacity_is_not_offered_again() -> None:
    """12 of 16 cores held for the next hour: an 8-core job waits until the hold ends."""
    context = holding(context_of(EMPTY), [Hold(0, H, 12)])
    bid = valuation(context, job(), 0)
    assert isinstance(bid, Valuation) and bid.window.start == H
    assert bid.cores_value == D("4.000")


def test_a_hold_the_batch_system_took_since_holds_nothing() -> None:
    busy = ClusterSnapshot(now=0, capacity=16, running=(Job("r", 8, 0, H, start=0),))
    free, kept = held_profile(context_of(busy).hard, [Hold(0, H, 12), Hold(0, H, 4)])
    assert kept == [Hold(0, H, 4)]
    assert free.free_at(0) == 4


def test_holding_nothing_is_the_same_context() -> None:
    context = context_of(EMPTY)
    assert holding(context, []) is context
    assert holding(context, [Hold(0, H, 17)]) is context


@settings(max_examples=60, deadline=None)
@given(
    snapshots(),
    st.lists(st.tuples(st.integers(1, 6), st.integers(60, 7200), st.integers(1, 5)), max_size=6),
)
def test_bids_made_one_after_another_never_share_capacity(
    snapshot: ClusterSnapshot,
    jobs: List[tuple],  # type: ignore[type-arg]
) -> None:
    """Each bid is valued around the ones made before it and then held: together with running
    work and reservations, the held windows never need more than the machine has."""
    base = context_of(snapshot)
    holds: List[Hold] = []
    for cores, walltime, priority in jobs:
        bid = valuation(holding(base, holds), job(cores, walltime, priority), snapshot.now)
        if isinstance(bid, Valuation):
            holds.append(Hold(bid.window.start, bid.window.end, bid.window.size))
    free, kept = held_profile(base.hard, holds)
    assert kept == holds
    assert min(units for _, _, units in free.segments()) >= 0


def test_holding_leaves_the_views_own_profiles_alone() -> None:
    """The market view's context is shared by every quote of a poll: holds are taken on a
    copy."""
    context = context_of(EMPTY)
    holding(context, [Hold(0, H, 12)])
    held_profile(context.hard, [Hold(0, H, 12)])
    assert context.hard.free_at(0) == 16 and context.plan.profile.free_at(0) == 16
