"""Scheduling engines and plan(): hand-worked cases with answers checked on paper.

Times in the replays are plain seconds; Figure 1 uses hours. Each case says how its answer was
worked out. The engines are driven either by plan() (every job running to its estimate) or by
the simulator (jobs may end early), as the agent and the benchmarks drive them.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import pytest

from siteagent.core.engines import Policy, ReservationConflict, make_engine
from siteagent.core.machine import Task
from siteagent.core.prediction import plan
from siteagent.core.values import BatchReservation, ClusterSnapshot, Job
from siteagent.sim.simulator import Simulator

FCFS, EASY, CONSERVATIVE = Policy.FCFS, Policy.EASY, Policy.CONSERVATIVE
H = 3600

# Singh's thesis, Figure 1: 5 processors; queued A 2x3h, B 4x1h, C 1x2h, D 3x2h, all at t=0.
FIGURE_1 = (
    Job("A", 2, 0, 3 * H),
    Job("B", 4, 0, 1 * H),
    Job("C", 1, 0, 2 * H),
    Job("D", 3, 0, 2 * H),
)


def replay(
    cores: int,
    policy: Policy,
    jobs: Sequence[Tuple[str, int, int, int, Optional[int]]],
    reservations: Sequence[Tuple[int, int, int]] = (),
) -> Dict[str, int]:
    """Start times from the simulator. jobs: (key, size, estimate, submit, run or None)."""
    tasks = [Task(key, size, est, submit, run) for key, size, est, submit, run in jobs]
    starts: Dict[str, int] = {}

    def started(task: Task) -> None:
        starts[str(task.key)] = task.start  # type: ignore[assignment]

    sim = Simulator(iter(tasks), cores, policy, start_time=0, on_start=started)
    for k, (start, end, size) in enumerate(reservations):
        sim.add_reservation(f"r{k}", start, end, size)
    sim.run()
    return starts


# -- Figure 1 ------------------------------------------------------------------------------------


def test_figure_1_conservative_plan() -> None:
    """A at 0 leaves 3; B (4) first fits when A ends: 3-4h; C (1) fits at 0 for 2h; D (3):
    at 0 only 2 free, at 2h 3 free but B takes 4 of 5 at 3-4h, so 4-6h."""
    snapshot = ClusterSnapshot(now=0, capacity=5, pending=FIGURE_1)
    result = plan(snapshot, CONSERVATIVE)
    assert result.starts == {"A": 0, "B": 3 * H, "C": 0, "D": 4 * H}
    assert result.ends == {"A": 3 * H, "B": 4 * H, "C": 2 * H, "D": 6 * H}
    assert result.sizes == {"A": 2, "B": 4, "C": 1, "D": 3}
    assert result.unplanned == []
    # free capacity: 5-2-1 until 2h, 3 until 3h, 1 (B) until 4h, 2 (D) until 6h, then all 5
    assert list(result.profile.segments()) == [
        (0, 2 * H, 2),
        (2 * H, 3 * H, 3),
        (3 * H, 4 * H, 1),
        (4 * H, 6 * H, 2),
        (6 * H, None, 5),
    ]
    assert result.horizon == 48 * H


def test_figure_1_easy_plan() -> None:
    """A starts (3 free). B does not fit: shadow 3h (A ends), extra 5-4 = 1. C (1, ends 2h <= 3h)
    backfills at 0. D (3) does not fit now (2 free). At 2h C ends: 3 free, D fits now but runs
    to 4h > 3h and needs 3 > extra 1: refused. At 3h B starts; at 4h D starts."""
    result = plan(ClusterSnapshot(now=0, capacity=5, pending=FIGURE_1), EASY)
    assert result.starts == {"A": 0, "B": 3 * H, "C": 0, "D": 4 * H}


def test_figure_1_fcfs_plan() -> None:
    """A starts; B blocks the queue until A ends at 3h; then B (4) and C (1) start; D (3) waits
    for B to end at 4h (C still holds 1: 4 free)."""
    result = plan(ClusterSnapshot(now=0, capacity=5, pending=FIGURE_1), FCFS)
    assert result.starts == {"A": 0, "B": 3 * H, "C": 3 * H, "D": 4 * H}


# -- FCFS ----------------------------------------------------------------------------------------


def test_fcfs_never_skips_ahead() -> None:
    """P=4. A (3) runs 0-10. B (2) arrives at 1: 1 free, waits. C (1) arrives at 2 and would
    fit, but FCFS does not skip B. At 10 both start."""
    jobs = [("A", 3, 10, 0, None), ("B", 2, 5, 1, None), ("C", 1, 5, 2, None)]
    assert replay(4, FCFS, jobs) == {"A": 0, "B": 10, "C": 10}


def test_fcfs_early_completion_starts_the_queue_early() -> None:
    """Same, but A really runs 4 s of its 10: B and C start at 4."""
    jobs = [("A", 3, 10, 0, 4), ("B", 2, 5, 1, None), ("C", 1, 5, 2, None)]
    assert replay(4, FCFS, jobs) == {"A": 0, "B": 4, "C": 4}


# -- EASY ----------------------------------------------------------------------------------------


def test_easy_refuses_a_backfill_that_would_delay_the_head() -> None:
    """P=4. R (2) runs 0-10. H (4) arrives at 1: shadow 10, extra = 4 - 4 = 0. At 2, X (2,
    20 s) fits now but would run past 10 and needs 2 > 0 extra: refused. Y (2, 8 s) ends at
    10 <= shadow: starts at 2. At 10 H starts; X follows when H ends at 15."""
    jobs = [
        ("R", 2, 10, 0, None),
        ("H", 4, 5, 1, None),
        ("X", 2, 20, 2, None),
        ("Y", 2, 8, 2, None),
    ]
    assert replay(4, EASY, jobs) == {"R": 0, "H": 10, "X": 15, "Y": 2}


def test_easy_backfills_into_the_extra_cores() -> None:
    """P=8. R (5) runs 0-10. H (6) arrives at 1: 3 free; shadow 10, extra = 8 - 6 = 2. At 2:
    X (2, 20 s) runs past 10 but 2 <= extra: starts, extra 0, free 1. Z (1, 20 s) fits now
    but runs past 10 and 1 > extra 0: refused. W (1, 8 s) ends at 10: starts. At 10 R and W
    end: 8 - 2 (X) = 6 free, H starts on time. Z waits for H to end at 15."""
    jobs = [
        ("R", 5, 10, 0, None),
        ("H", 6, 5, 1, None),
        ("X", 2, 20, 2, None),
        ("Z", 1, 20, 2, None),
        ("W", 1, 8, 2, None),
    ]
    assert replay(8, EASY, jobs) == {"R": 0, "H": 10, "X": 2, "Z": 15, "W": 2}


def test_easy_shadow_moves_forward_on_early_completion() -> None:
    """P=4. R (4) says 10 s but runs 3. H (4) arrives at 1: shadow 10. R ends at 3: H starts
    at 3, not 10."""
    jobs = [("R", 4, 10, 0, 3), ("H", 4, 5, 1, None)]
    assert replay(4, EASY, jobs) == {"R": 0, "H": 3}


# -- conservative --------------------------------------------------------------------------------


def test_conservative_early_completion_moves_queued_jobs_earlier() -> None:
    """P=4. R (4) says 10 s, runs 3. At 1: A (2, 5 s) is reserved at 10; B (4, 5 s) at 15 (A
    holds 2 of 4 over 10-15); C (2, 5 s) at 10 beside A. At 3 R ends. In queue order: A moves
    to 3; B cannot move (C still holds 10-15, so 4 are free only from 15); C moves to 3. At 8
    A and C end: B moves to 8."""
    engine = make_engine(CONSERVATIVE, 4, 0)
    r = Task("R", 4, 10, 0, 3)
    engine.submit(r)
    assert engine.schedule(0) == [r]
    a, b, c = Task("A", 2, 5, 1), Task("B", 4, 5, 1), Task("C", 2, 5, 1)
    for task in (a, b, c):
        engine.submit(task)
    assert engine.schedule(1) == []
    assert (a.planned, b.planned, c.planned) == (10, 15, 10)
    engine.complete(r, 3)
    assert engine.schedule(3) == [a, c]
    assert b.planned == 15
    engine.complete(a, 8)
    engine.complete(c, 8)
    assert engine.schedule(8) == [b]

    jobs = [
        ("R", 4, 10, 0, 3),
        ("A", 2, 5, 1, None),
        ("B", 4, 5, 1, None),
        ("C", 2, 5, 1, None),
    ]
    assert replay(4, CONSERVATIVE, jobs) == {"R": 0, "A": 3, "B": 8, "C": 3}


def test_conservative_reservations_never_move_later() -> None:
    """A job that arrives later never takes a queued job's place: P=2, R (2) 0-10, A (2, 5 s)
    reserved at 10; B (1, 100 s) arrives at 5 and gets 15 (after A), not 10."""
    jobs = [("R", 2, 10, 0, None), ("A", 2, 5, 1, None), ("B", 1, 100, 5, None)]
    assert replay(2, CONSERVATIVE, jobs) == {"R": 0, "A": 10, "B": 15}


# -- advance reservations ------------------------------------------------------------------------

# P=4 with 3 cores reserved over [5, 10). A (2, 10 s) cannot start at 0: only 1 core is left
# over [5, 10); its earliest fit is 10. B (1, 10 s) fits at 0 beside the reservation. C (1, 3 s)
# fits at 0. D (2, 6 s) would reach into [5, 6) where nothing is left: not before 10.
RESERVED = [(5, 10, 3)]
AROUND = [
    ("A", 2, 10, 0, None),
    ("B", 1, 10, 0, None),
    ("C", 1, 3, 0, None),
    ("D", 2, 6, 0, None),
]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # FCFS: A blocks everything until the reservation ends at 10; then A, B, C start (4
        # cores); D waits for A and B to end at 20 (C's end at 13 leaves only 1 free).
        (FCFS, {"A": 10, "B": 10, "C": 10, "D": 20}),
        # EASY: A is protected at 10; B (ends 10) and C backfill at 0; D does not fit anywhere
        # before 10; at 10 A starts and D takes the other 2 cores.
        (EASY, {"A": 10, "B": 0, "C": 0, "D": 10}),
        # conservative: A 10, B 0, C 0, D 10 (beside A); C's end at 3 frees nothing D can use.
        (CONSERVATIVE, {"A": 10, "B": 0, "C": 0, "D": 10}),
    ],
    ids=["fcfs", "easy", "conservative"],
)
def test_jobs_keep_out_of_an_advance_reservation(policy: Policy, expected: Dict[str, int]) -> None:
    assert replay(4, policy, AROUND, RESERVED) == expected


def _queued_engine(policy: Policy) -> Tuple[object, Task, Task]:
    """P=4: R (4 cores) runs 0-10, Q (4 cores, 5 s) waits for it (planned at 10: the
    conservative reservation, or EASY's shadow time)."""
    engine = make_engine(policy, 4, 0)
    r, q = Task("R", 4, 10, 0), Task("Q", 4, 5, 0)
    engine.submit(r)
    engine.submit(q)
    assert engine.schedule(0) == [r]
    assert q.planned == (None if policy is FCFS else 10)
    return engine, r, q


@pytest.mark.parametrize("policy", [EASY, CONSERVATIVE], ids=lambda p: p.value)
def test_refused_reservation_changes_no_plan(policy: Policy) -> None:
    """add_reservation's contract: a refused reservation leaves every plan exactly as it was
    (EASY's protected head keeps its shadow time, conservative's queue its reservations)."""
    engine, _, q = _queued_engine(policy)
    before = list(engine.profile.segments())  # type: ignore[attr-defined]
    with pytest.raises(ReservationConflict):
        engine.add_reservation("x", 5, 15, 1)  # type: ignore[attr-defined]
    assert q.planned == 10
    assert list(engine.profile.segments()) == before  # type: ignore[attr-defined]
    assert engine.reservations == {}  # type: ignore[attr-defined]


def test_accepted_reservation_pushes_queued_jobs_back_and_removal_brings_them_back() -> None:
    engine, r, q = _queued_engine(CONSERVATIVE)
    engine.add_reservation("x", 10, 20, 2)  # type: ignore[attr-defined]
    assert engine.reservations == {"x": (10, 20, 2)}  # type: ignore[attr-defined]
    assert q.planned == 20  # 4 cores for 5 s: not before the reservation ends
    engine.remove_reservation("x")  # type: ignore[attr-defined]
    assert engine.schedule(1) == []  # type: ignore[attr-defined]
    assert q.planned == 10
    engine.complete(r, 10)  # type: ignore[attr-defined]
    assert engine.schedule(10) == [q]  # type: ignore[attr-defined]


def test_reservation_arguments_are_checked() -> None:
    engine, _, _ = _queued_engine(FCFS)
    engine.add_reservation("x", 20, 30, 4)  # type: ignore[attr-defined]
    with pytest.raises(ReservationConflict):
        engine.add_reservation("x", 40, 50, 1)  # type: ignore[attr-defined]
    with pytest.raises(ReservationConflict):
        engine.add_reservation("y", 25, 35, 1)  # type: ignore[attr-defined]  # overlaps x
    with pytest.raises(ValueError):
        engine.add_reservation("z", 40, 40, 1)  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        engine.add_reservation("z", 40, 50, 0)  # type: ignore[attr-defined]


def test_reservation_injected_while_a_replay_runs() -> None:
    """P=2. A (2, 10 s) runs 0-10; B (2, 10 s) is queued for 10. At 5 a 2-core reservation over
    [10, 20) is accepted (nothing running there): B is pushed to 20."""
    tasks = [Task("A", 2, 10, 0), Task("B", 2, 10, 1)]
    starts: Dict[str, int] = {}
    sim = Simulator(
        iter(tasks), 2, CONSERVATIVE, on_start=lambda t: starts.update({t.key: t.start})
    )
    sim.advance_to(5)
    sim.add_reservation("x", 10, 20, 2)
    with pytest.raises(ReservationConflict):
        sim.add_reservation("y", 6, 12, 1)  # A holds both cores until 10
    sim.run()
    assert starts == {"A": 0, "B": 20}


# -- plan() over snapshots -----------------------------------------------------------------------


def test_plan_with_extra_reservation_shifts_the_queue() -> None:
    """All 5 cores reserved for the first hour: Figure 1's plan moves one hour later."""
    snapshot = ClusterSnapshot(now=0, capacity=5, pending=FIGURE_1)
    result = plan(snapshot, CONSERVATIVE, extra_reservations=[("quote", 0, H, 5)])
    assert result.starts == {"A": H, "B": 4 * H, "C": H, "D": 5 * H}


def test_plan_refuses_an_extra_reservation_over_running_work() -> None:
    running = (Job("R", 4, 0, 100, start=0),)
    snapshot = ClusterSnapshot(now=10, capacity=5, running=running)
    with pytest.raises(ReservationConflict):
        plan(snapshot, CONSERVATIVE, extra_reservations=[("quote", 50, 150, 2)])
    # one core is free beside R: fine
    plan(snapshot, CONSERVATIVE, extra_reservations=[("quote", 50, 150, 1)])


def test_plan_batch_reservation_and_running_jobs() -> None:
    """P=4, now 100. R (2) runs until 150. The batch system holds 2 cores over [120, 200).
    P1 (2, 30 s) cannot start at 100: over [120, 130) R and the reservation hold all 4. When R
    ends at 150, 2 are free beside the reservation: P1 at 150. P2 (2, 20 s) fits over
    [100, 120): conservative and EASY start it now (it ends before P1's 150); FCFS keeps it
    behind P1, and after P1 ends at 180 it fits in [180, 200) beside the reservation."""
    snapshot = ClusterSnapshot(
        now=100,
        capacity=4,
        running=(Job("R", 2, 0, 100, start=50),),
        pending=(Job("P1", 2, 90, 30), Job("P2", 2, 90, 20)),
        reservations=(BatchReservation("maint", 120, 200, 2),),
    )
    for policy in (EASY, CONSERVATIVE):
        assert plan(snapshot, policy).starts == {"P1": 150, "P2": 100}, policy
    assert plan(snapshot, FCFS).starts == {"P1": 150, "P2": 180}


def test_plan_lists_jobs_that_cannot_start() -> None:
    snapshot = ClusterSnapshot(
        now=0,
        capacity=4,
        pending=(
            Job("held", 1, 0, 10, eligible=False),
            Job("huge", 5, 0, 10),
            Job("ok", 4, 0, 10),
        ),
    )
    result = plan(snapshot)
    assert result.starts == {"ok": 0}
    assert sorted(result.unplanned) == ["held", "huge"]


def test_plan_holds_an_overdue_running_job_for_a_second() -> None:
    """A running job past its time limit still runs: it holds its cores at least until now+1."""
    snapshot = ClusterSnapshot(
        now=100,
        capacity=2,
        running=(Job("late", 2, 0, 50, start=0),),
        pending=(Job("next", 2, 0, 10),),
    )
    for policy in (FCFS, EASY, CONSERVATIVE):
        assert plan(snapshot, policy).starts == {"next": 101}, policy


def test_plan_job_with_a_begin_time_waits_for_it() -> None:
    snapshot = ClusterSnapshot(
        now=100,
        capacity=2,
        pending=(Job("later", 2, 0, 10, not_before=150), Job("now", 2, 0, 10)),
    )
    for policy in (FCFS, EASY, CONSERVATIVE):
        assert plan(snapshot, policy).starts == {"later": 150, "now": 100}, policy


@pytest.mark.parametrize(
    ("policy", "p0_not_before"), [(FCFS, None), (EASY, None), (CONSERVATIVE, 105)]
)
def test_a_pinned_job_keeps_its_start_when_the_prediction_runs_past_it(
    policy: Policy, p0_not_before: Optional[int]
) -> None:
    """P=1: p1 is held at the batch system's expected start 101 for its 1 s; p0 (10 s) cannot
    start before that ends, at 102 (or its begin time 105), so the prediction runs past the
    pin. Conservative only runs forward while a job is still to arrive, hence the begin time.
    Found by tests/unit/test_replan.py's strategy: plan() read the pinned start after the
    prediction had let the pin end and dropped it (KeyError)."""
    snapshot = ClusterSnapshot(
        now=100,
        capacity=1,
        pending=(
            Job("p0", 1, 100, 10, not_before=p0_not_before),
            Job("p1", 1, 100, 1, expected_start=101),
        ),
    )
    assert plan(snapshot, policy).starts == {"p0": p0_not_before or 102, "p1": 101}


def test_plan_many_jobs_finishing_together() -> None:
    """Several jobs end at the same instant (a heap of equal times): the replay must not
    compare tasks. P=2: three 1-core jobs of 1, 4 and 3 s; FCFS and EASY start the third
    when the first ends."""
    pending = (Job("p0", 1, 0, 1), Job("p1", 1, 0, 4), Job("p2", 1, 0, 3), Job("p3", 1, 0, 3))
    snapshot = ClusterSnapshot(now=0, capacity=2, pending=pending)
    expected = {"p0": 0, "p1": 0, "p2": 1, "p3": 4}
    for policy in (FCFS, EASY, CONSERVATIVE):
        assert plan(snapshot, policy).starts == expected, policy


def test_plan_is_repeatable() -> None:
    """plan() leaves the snapshot alone: asking twice gives the same answer."""
    snapshot = ClusterSnapshot(now=0, capacity=5, pending=FIGURE_1)
    assert plan(snapshot).starts == plan(snapshot).starts
