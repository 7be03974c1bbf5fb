"""The externality fee's fast path against planning from scratch.

``ExternalityFee.delays`` asks ``replan_with_reservation`` first: it re-uses a conservative
plan, moving only the jobs the new reservation (or a job moved before them) disturbs. When it
declines (None), the fee plans the whole queue again with the reservation in place. Both must
give the same starts, or a quote's fee would depend on which path priced it: whenever the fast
path answers, its starts are exactly ``plan(..., extra_reservations=[window])``'s.
"""

from __future__ import annotations

import dataclasses
from decimal import ROUND_UP, Decimal
from typing import Dict, List, Optional

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from siteagent.core.engines import Policy
from siteagent.core.money import CENT, HOUR
from siteagent.core.prediction import plan, replan_with_reservation
from siteagent.core.values import ClusterSnapshot, Job
from siteagent.pricing import Context, ExternalityFee, Refused, Window
from testbed.inprocess.strategies import snapshots

#: Of the generated cases, at least this share must reach the fast path's answer: most
#: snapshots have every queued job submitted and none pinned, which is the case it serves.
MIN_ANSWERED = 0.5
#: And of those, at least this share must move a queued job: a window in a hole of the plan
#: proves nothing about re-planning.
MIN_MOVED = 0.15


@st.composite
def queues(draw: st.DrawFn) -> ClusterSnapshot:
    """A snapshot, one in three with queued jobs that join later (``not_before``) or that the
    batch system pinned (``expected_start``), or both: the plans the fast path must decline."""
    snapshot = draw(snapshots())
    if draw(st.integers(0, 2)) > 0:  # two in three: as the batch system queued them
        return snapshot
    pending = []
    for job in snapshot.pending:
        kind = draw(st.sampled_from(["as queued", "not_before", "expected_start"]))
        if kind != "as queued":
            later = snapshot.now + draw(st.integers(1, 5000))
            job = dataclasses.replace(job, **{kind: later})
        pending.append(job)
    return dataclasses.replace(snapshot, pending=tuple(pending))


def admissible_window(data: st.DataObject, context: Context) -> Window:
    """A window the site would price: at a random start, at the earliest fit from one, or at
    an edge of the plan (a queued job's planned start or end), where placements turn."""
    size = data.draw(st.integers(1, context.capacity), label="size")
    duration = data.draw(st.integers(1, 6000), label="duration")
    after = context.now + data.draw(st.integers(0, 8000), label="after")
    edges = sorted({*context.plan.starts.values(), *context.plan.ends.values()})
    where = data.draw(st.sampled_from(["random", "earliest fit", "plan edge"]), label="where")
    start: Optional[int] = after
    if where == "earliest fit":
        start = context.hard.earliest_fit(size, duration, after)
    elif where == "plan edge" and edges:
        start = data.draw(st.sampled_from(edges), label="edge")
    assume(start is not None)
    window = Window(start, size, duration)
    try:
        context.admissible(window)
    except Refused:
        assume(False)
    return window


def from_scratch(snapshot: ClusterSnapshot, policy: Policy, window: Window) -> Dict[str, int]:
    """The fee's slow path: the whole queue planned again with the window reserved."""
    key = ("quote", window.start, window.size, window.duration)
    return plan(
        snapshot, policy, extra_reservations=[(key, window.start, window.end, window.size)]
    ).starts


def test_the_fast_path_gives_the_starts_planning_from_scratch_gives() -> None:
    """Conservative plans, random admissible windows: every answer of the fast path is the
    slow path's, and the cases are not vacuous (counted across the examples)."""
    answered: List[bool] = []
    moved: List[bool] = []

    @settings(max_examples=400, deadline=None)
    @given(queues(), st.data())
    def fast_equals_slow(snapshot: ClusterSnapshot, data: st.DataObject) -> None:
        context = Context(snapshot, Policy.CONSERVATIVE)
        window = admissible_window(data, context)
        fast = replan_with_reservation(
            context.plan, context.hard, window.start, window.end, window.size
        )
        answered.append(fast is not None)
        event("fast path answered" if fast is not None else "fast path declined")
        if fast is not None:
            assert fast == from_scratch(snapshot, Policy.CONSERVATIVE, window), window
            moved.append(fast != context.plan.starts)

    fast_equals_slow()
    assert sum(answered) >= MIN_ANSWERED * len(answered), (sum(answered), len(answered))
    assert not all(answered), "no case reached the slow path: the strategy lost its later jobs"
    assert sum(moved) >= MIN_MOVED * len(moved), (sum(moved), len(moved))


@settings(max_examples=100, deadline=None)
@given(snapshots(), st.data())
def test_the_fast_path_answers_every_plain_conservative_queue(
    snapshot: ClusterSnapshot, data: st.DataObject
) -> None:
    """Every job submitted, none pinned: the plan was placed at once and is always re-used."""
    context = Context(snapshot, Policy.CONSERVATIVE)
    window = admissible_window(data, context)
    fast = replan_with_reservation(
        context.plan, context.hard, window.start, window.end, window.size
    )
    assert fast is not None
    assert fast == from_scratch(snapshot, Policy.CONSERVATIVE, window)


@settings(max_examples=100, deadline=None)
@given(queues(), st.data())
def test_the_fast_path_leaves_easy_plans_to_planning_from_scratch(
    snapshot: ClusterSnapshot, data: st.DataObject
) -> None:
    """Only conservative plans are re-used (EASY holds a place for the queue's head alone;
    its other starts come from running the queue forward), so EASY is always planned again."""
    context = Context(snapshot, Policy.EASY)
    window = admissible_window(data, context)
    assert (
        replan_with_reservation(context.plan, context.hard, window.start, window.end, window.size)
        is None
    )


# -- the fee's re-plans, per poll (siteagent.core.replan) ------------------------------------


@st.composite
def longer_queues(draw: st.DrawFn) -> ClusterSnapshot:
    """A snapshot of ``queues()``, one in two with up to 30 more queued jobs (submitted now,
    or joining later): EASY passes then backfill many, and a conservative re-plan has a
    prefix of jobs before the window to skip."""
    snapshot = draw(queues())
    if draw(st.booleans()):
        return snapshot
    more = []
    for k in range(draw(st.integers(1, 30))):
        size = draw(st.integers(1, snapshot.capacity))
        limit = draw(st.integers(1, 3000))
        later = draw(st.sampled_from([0, 0, 0, draw(st.integers(1, 3000))]))
        job = Job(f"q{k}", size, snapshot.now, limit, not_before=snapshot.now + later or None)
        more.append(job)
    return dataclasses.replace(snapshot, pending=snapshot.pending + tuple(more))


def fee_from_scratch(snapshot: ClusterSnapshot, context: Context, window: Window) -> Decimal:
    """The fee by its definition: every queued job's delay times its size, planned twice."""
    after = from_scratch(snapshot, context.policy, window)
    core_seconds = sum(
        max(0, after[job] - start) * context.plan.sizes[job]
        for job, start in context.plan.starts.items()
    )
    return (Decimal(core_seconds) / HOUR * RATE).quantize(CENT, rounding=ROUND_UP)


RATE = Decimal("1.7")


@pytest.mark.parametrize("policy", [Policy.CONSERVATIVE, Policy.EASY], ids=lambda p: p.value)
def test_the_incremental_fee_is_the_fee_planning_from_scratch(policy: Policy) -> None:
    """Random queues, three windows against one poll's plan (so checkpoints are built and
    re-used, every few jobs): each re-plan gives plan()'s starts and each fee its fee from
    scratch; counted across the examples, conservative re-plans skip a prefix of the queue,
    and fees are not all zero."""
    skipped: List[bool] = []
    charged: List[bool] = []

    @settings(max_examples=250, deadline=None)
    @given(longer_queues(), st.integers(1, 4), st.data())
    def incremental_equals_scratch(
        snapshot: ClusterSnapshot, spacing: int, data: st.DataObject
    ) -> None:
        context = Context(snapshot, policy)
        context.replanner.spacing = spacing
        fee = ExternalityFee(RATE)
        for _ in range(3):
            window = admissible_window(data, context)
            starts = context.replanner.starts(window.start, window.end, window.size)
            assert starts == from_scratch(snapshot, policy, window), window
            expected = fee_from_scratch(snapshot, context, window)
            assert fee.fee(context, window) == expected, window
            charged.append(expected > 0)
            if context.plan.placed_at_once:
                first = context.replanner._first_disturbed(window.start, window.end)
                skipped.append(first > 0)

    incremental_equals_scratch()
    assert sum(charged) >= 0.2 * len(charged), (sum(charged), len(charged))
    if policy is Policy.CONSERVATIVE:
        assert sum(skipped) >= 0.1 * len(skipped), (sum(skipped), len(skipped))
