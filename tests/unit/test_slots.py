"""Advertised slots (Singh, thesis ch. 3): Figure 1's slots, Table 1's costs, and properties of
the slots of any plan. Times are seconds; the thesis' examples use hours.
"""

from __future__ import annotations

from decimal import Decimal
from typing import List, Tuple

from hypothesis import given, settings
from hypothesis import strategies as st

from siteagent.core.engines import Policy
from siteagent.core.prediction import plan
from siteagent.core.slots import advertise, fit_request, provision, remainder, subslot_cost
from siteagent.core.values import ClusterSnapshot, Job, Slot
from testbed.inprocess.strategies import snapshots

H = 3600
D = Decimal

# Figure 1: a 5-processor cluster; queued A 2x3h, B 4x1h, C 1x2h, D 3x2h, all at t = 0. The
# conservative plan is A 0-3h, C 0-2h, B 3-4h, D 4-6h (tests/unit/test_scheduling.py).
FIGURE_1 = ClusterSnapshot(
    now=0,
    capacity=5,
    pending=(
        Job("A", 2, 0, 3 * H),
        Job("B", 4, 0, 1 * H),
        Job("C", 1, 0, 2 * H),
        Job("D", 3, 0, 2 * H),
    ),
)

SlotKey = Tuple[int, int, int, bool, bool]


def keys(slots: List[Slot]) -> List[SlotKey]:
    """(start, duration, cores, divisible, extensible), sorted."""
    return sorted((s.start, s.duration, s.cores, s.divisible, s.extensible) for s in slots)


# -- Figure 1 ------------------------------------------------------------------------------------


def test_figure_1_slots() -> None:
    """Free capacity is 2 until 2h, 3 until 3h, 1 until 4h, 2 until 6h, then 5. Cut into bands:
    the bottom core is free throughout (S1, open to the horizon); the second core is free 0-3h
    and the third 2-3h, both closed by B at 3h (S3, S2: indivisible, not extensible); the
    second core again from 4h (S4) and the top three from 6h (S5), open to the horizon. Five
    slots, S1, S4 and S5 extensible, as the thesis says. Our horizon is 48 h, the thesis
    draws 8 h."""
    horizon = 48 * H
    slots = advertise(plan(FIGURE_1, Policy.CONSERVATIVE))
    assert keys(slots) == [
        (0, 3 * H, 1, False, False),  # S3
        (0, horizon, 1, True, True),  # S1
        (2 * H, 1 * H, 1, False, False),  # S2
        (4 * H, horizon - 4 * H, 1, True, True),  # S4
        (6 * H, horizon - 6 * H, 3, True, True),  # S5
    ]
    assert all(s.unit_price == 1 and s.fee == 0 for s in slots)


def test_figure_1_two_by_two_hours_stacks_s1_and_s3() -> None:
    """The thesis: "an arriving task requiring 2 processors for 2 hours can be backfilled into
    slots S1 and S3". S1 gives one core for 2 h (2 core-hours); S3 is indivisible, so it is
    taken whole: one core for 3 h. Cost 2 + 3 = 5 at c = 1."""
    slots = advertise(plan(FIGURE_1, Policy.CONSERVATIVE))
    fit = fit_request(slots, 2, 2 * H, 0)
    assert fit is not None and fit.start == 0
    taken = sorted((slot.duration == 3 * H, cores) for slot, cores in fit.parts)
    assert taken == [(False, 1), (True, 1)]
    assert fit.cost == D("5.00")


def test_fit_prefers_one_slot_and_the_earliest_start() -> None:
    """Three cores for 1 h: at 0 only S1 and S3 hold the window (2 cores); at 2h S1, S2 and S3
    do: S1 gives one core-hour, S2 and S3 are indivisible and taken whole (1 and 3 core-hours),
    5 in all. Four cores first fit at 6h on the divisible slots, cheapest first: S1 1, S4 1,
    S5 2 cores, 4 core-hours. Six never fit on five cores."""
    slots = advertise(plan(FIGURE_1, Policy.CONSERVATIVE))
    three = fit_request(slots, 3, 1 * H, 0)
    assert three is not None
    assert three.start == 2 * H and len(three.parts) == 3
    assert three.cost == D("5.00")  # S1 1 core-hour, S2 1 (whole), S3 3 (whole)
    four = fit_request(slots, 4, 1 * H, 0)
    assert four is not None and four.start == 6 * H and four.cost == D("4.00")
    assert fit_request(slots, 6, 1 * H, 0) is None  # larger than the machine


def test_fit_on_one_slot_costs_the_cheapest() -> None:
    cheap = Slot(0, 10 * H, 2, D("0.5"), D(0), True, True)
    dear = Slot(0, 10 * H, 2, D(2), D(0), True, True)
    fit = fit_request([dear, cheap], 2, 1 * H, 0)
    assert fit is not None and fit.parts == ((cheap, 2),) and fit.cost == D("1.00")


def test_what_a_task_leaves_of_a_slot_figure_3() -> None:
    """A task of 2 cores over 2h-3h in a 5-core divisible slot over 1h-5h leaves the hour
    before (5 cores), the 3 cores beside it, and the two hours after, at the slot's price;
    only the piece after keeps the slot's extensibility."""
    slot = Slot(1 * H, 4 * H, 5, D(2), D(0), True, True)
    pieces = remainder(slot, 2, 2 * H, 3 * H)
    assert keys(pieces) == [
        (1 * H, 1 * H, 5, True, False),
        (2 * H, 1 * H, 3, True, False),
        (3 * H, 2 * H, 5, True, True),
    ]
    assert {p.unit_price for p in pieces} == {D(2)}
    # outlasting an extensible slot still leaves it open after the task
    assert keys(remainder(slot, 5, 1 * H, 6 * H)) == [(6 * H, 4 * H, 5, True, True)]


def test_an_indivisible_slots_leftovers_are_free_once_it_is_paid() -> None:
    """S3 (1 core, 0-3h, indivisible) holding a 1-core task over 1h-2h was paid whole: what
    is left before and after costs nothing more and may be cut."""
    s3 = Slot(0, 3 * H, 1, D(1), D(0), False, False)
    pieces = remainder(s3, 1, 1 * H, 2 * H)
    assert keys(pieces) == [(0, 1 * H, 1, True, False), (2 * H, 1 * H, 1, True, False)]
    assert all(p.unit_price == 0 and p.fee == 0 for p in pieces)
    fit = fit_request(pieces, 1, 1 * H, 2 * H)
    assert fit is not None and fit.cost == D("0.00")


# -- Table 1 -------------------------------------------------------------------------------------


def slot(divisible: bool, extensible: bool) -> Slot:
    """4 cores for 2 h from t = 1 h at c = 2 per core-hour and f = 5."""
    return Slot(1 * H, 2 * H, 4, D(2), D(5), divisible, extensible)


def test_table_1_indivisible_not_extensible_is_taken_whole() -> None:
    """n_k = n_i, s_k = s_i, d_k = d_i; cost n_i d_i c_i + f_i = 4·2·2 + 5."""
    s = slot(False, False)
    assert subslot_cost(s, 4, 1 * H, 2 * H) == D("21.00")
    assert subslot_cost(s, 3, 1 * H, 2 * H) is None  # part of the cores
    assert subslot_cost(s, 4, 1 * H, 1 * H) is None  # part of the time
    assert subslot_cost(s, 4, 2 * H, 1 * H) is None  # a later start
    assert subslot_cost(s, 4, 1 * H, 3 * H) is None  # longer


def test_table_1_indivisible_extensible_may_run_longer() -> None:
    """n_k = n_i, s_k = s_i, d_k >= d_i; cost n_i d_k c_i + f_i."""
    s = slot(False, True)
    assert subslot_cost(s, 4, 1 * H, 2 * H) == D("21.00")
    assert subslot_cost(s, 4, 1 * H, 3 * H) == D("29.00")  # 4·3·2 + 5
    assert subslot_cost(s, 4, 1 * H, 1 * H) is None
    assert subslot_cost(s, 2, 1 * H, 3 * H) is None
    assert subslot_cost(s, 4, 2 * H, 3 * H) is None


def test_table_1_divisible_not_extensible_any_part_inside() -> None:
    """n_k <= n_i, s_i <= s_k, s_k + d_k <= s_i + d_i; cost n_k d_k c_i + f_i."""
    s = slot(True, False)
    assert subslot_cost(s, 2, 2 * H, 1 * H) == D("9.00")  # 2·1·2 + 5
    assert subslot_cost(s, 4, 1 * H, 2 * H) == D("21.00")
    assert subslot_cost(s, 2, 2 * H, 2 * H) is None  # past the end
    assert subslot_cost(s, 2, 0, 1 * H) is None  # before the start
    assert subslot_cost(s, 5, 1 * H, 1 * H) is None  # more cores than it has


def test_table_1_divisible_extensible_any_part_from_its_start() -> None:
    """n_k <= n_i, s_i <= s_k; cost n_k d_k c_i + f_i."""
    s = slot(True, True)
    assert subslot_cost(s, 2, 2 * H, 5 * H) == D("25.00")  # 2·5·2 + 5
    assert subslot_cost(s, 1, 4 * H, 1 * H) == D("7.00")  # after its end: it is open
    assert subslot_cost(s, 2, 0, 1 * H) is None
    assert subslot_cost(s, 5, 1 * H, 1 * H) is None


def test_provision_takes_an_indivisible_slot_whole() -> None:
    """A smaller request inside an indivisible slot provisions (and pays for) all of it."""
    assert provision(slot(False, False), 1, 2 * H, 30 * 60) == (4, D("21.00"))
    assert provision(slot(False, False), 1, 2 * H, 2 * H) is None  # runs past the end
    assert provision(slot(False, True), 1, 2 * H, 2 * H) == (4, D("29.00"))  # 1h-4h whole
    assert provision(slot(True, False), 1, 2 * H, 30 * 60) == (1, D("6.00"))


# -- properties ----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(snapshots())
def test_slots_are_free_independent_and_cover_every_hole(snapshot: ClusterSnapshot) -> None:
    """Reserving every advertised slot at once fits in the plan (each slot is free and no two
    describe the same capacity) and leaves nothing free before the horizon (no hole is left
    out). A slot is open to the horizon exactly when it is divisible and extensible."""
    predicted = plan(snapshot, Policy.CONSERVATIVE)
    slots = advertise(predicted)
    left = predicted.profile.copy()
    for s in slots:
        assert s.cores > 0 and s.duration > 0 and s.start >= snapshot.now
        assert left.fits(s.cores, s.start, s.duration), s
        left.reserve(s.start, s.end, s.cores)
        assert s.divisible == s.extensible == (s.end == predicted.horizon)
    for start, end, free in left.segments():
        if start >= predicted.horizon:
            break
        assert free <= 0, (start, end, free)


@settings(max_examples=200, deadline=None)
@given(snapshots(), st.integers(1, 12), st.integers(1, 6000))
def test_a_fit_lies_in_free_capacity_and_costs_what_its_parts_cost(
    snapshot: ClusterSnapshot, cores: int, duration: int
) -> None:
    """Wherever fit_request puts a request, the plan has the cores free for the whole window,
    the parts hold at least the cores asked, and the cost is the sum of the parts' costs."""
    predicted = plan(snapshot, Policy.CONSERVATIVE)
    slots = advertise(predicted)
    fit = fit_request(slots, cores, duration, snapshot.now)
    if fit is None:
        assert cores > snapshot.capacity or not slots
        return
    assert fit.start >= snapshot.now
    assert predicted.profile.fits(cores, fit.start, duration)
    assert sum(taken for _, taken in fit.parts) >= cores
    costs = []
    for s, taken in fit.parts:
        held = provision(s, min(taken, cores), fit.start, duration)
        assert held is not None and held[0] == taken
        costs.append(held[1])
    assert fit.cost == sum(costs, D(0))
