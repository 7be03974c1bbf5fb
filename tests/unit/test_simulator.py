"""The simulator against the independent reference of testbed/sims/reference.py, job for job
(the rules and the conventions it fixes are in that module's docstring)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from siteagent.core.engines import Policy
from siteagent.core.machine import Task
from siteagent.core.prediction import plan
from siteagent.core.values import BatchReservation, ClusterSnapshot, Job
from siteagent.sim.simulator import Simulator
from siteagent.sim.workload import Workload
from testbed.inprocess.traces import swf_row, trace_prefix, write_swf
from testbed.sims.reference import (
    AGREEMENT,
    ALL_POLICIES,
    CONSERVATIVE,
    EASY,
    FCFS,
    GREEDY,
    PROPERTY,
    Observed,
    Rect,
    RefJob,
    compare_with_reference,
    load_at,
    real_simulate,
    ref_read_swf,
    ref_simulate,
    reservation_sets,
    same_shape_workloads,
    scratch_swf,
    workloads,
)

# =============================================================================================
# The reference checks itself
# =============================================================================================


def test_reference_reads_the_rules(tmp_path: Path) -> None:
    rows = [
        swf_row(1, 0, 10, 2, req_time=20),  # field 5, estimate from field 9
        swf_row(2, 1, 30, -1, req_procs=3, req_time=20),  # field 8; runs past its estimate
        swf_row(3, 2, 7, 0, req_procs=1),  # no field 9: estimate = run time
        swf_row(4, 3, 5, -1, req_procs=-1),  # no processors
        swf_row(5, 4, -1, 1),  # negative run time
        swf_row(6, 5, 5, 9),  # more than P
        swf_row(7, -1, 5, 1),  # negative submit
    ]
    cores, jobs, skipped = ref_read_swf(write_swf(tmp_path / "r.swf", rows, max_procs=4))
    assert cores == 4 and skipped == 4
    assert [(j.job, j.size, j.est, j.run) for j in jobs] == [
        (1, 2, 20, 10),
        (2, 3, 20, 20),
        (3, 1, 7, 7),
    ]


@settings(PROPERTY)
@given(workloads())
def test_reference_easy_counters_equal_rectangles(workload: Tuple[int, List[List[int]]]) -> None:
    """Without reservations, the textbook counters and the rectangle formulation agree."""
    cores, rows = workload
    _, jobs, _ = ref_read_swf(scratch_swf(rows, cores))
    again = [RefJob(j.job, j.submit, j.size, j.est, j.run) for j in jobs]
    counters = ref_simulate(jobs, cores, EASY, easy="counters")
    rectangles = ref_simulate(again, cores, EASY, easy="rectangles")
    assert counters == rectangles


# =============================================================================================
# Real simulator == reference, job for job
# =============================================================================================


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
@AGREEMENT
@given(data=st.data())
def test_simulator_matches_reference(policy: Policy, data: st.DataObject) -> None:
    """Half the workloads run on an open machine (EASY: against the textbook counters), half
    around advance reservations."""
    cores, rows = data.draw(workloads())
    reservations = data.draw(st.one_of(st.just([]), reservation_sets(cores)))
    easy = "rectangles" if reservations else "counters"
    compare_with_reference(cores, rows, policy, reservations, easy)


@AGREEMENT
@given(data=st.data())
def test_greedy_matches_reference(data: st.DataObject) -> None:
    """Backfilling without reservations (Aridor et al.'s), open or around reservations."""
    cores, rows = data.draw(workloads())
    reservations = data.draw(st.one_of(st.just([]), reservation_sets(cores)))
    compare_with_reference(cores, rows, GREEDY, reservations)


@settings(AGREEMENT, max_examples=300)
@given(workload=same_shape_workloads())
def test_conservative_matches_reference_on_queues_of_few_shapes(
    workload: Tuple[int, List[List[int]]],
) -> None:
    cores, rows = workload
    compare_with_reference(cores, rows, CONSERVATIVE, ())


@pytest.mark.parametrize("policy", [EASY, CONSERVATIVE, FCFS, GREEDY], ids=lambda p: p.value)
def test_simulator_matches_reference_on_kth_prefix(policy: Policy, tmp_path: Path) -> None:
    path = trace_prefix("KTH-SP2-1996-2.1-cln.swf.gz", 3000, tmp_path / "kth.swf")
    real = real_simulate(path, policy)
    cores, jobs, _ = ref_read_swf(path)
    assert cores == 100 and len(jobs) >= 2990
    expected = ref_simulate(jobs, cores, policy)
    assert len(real.starts) == len(expected)
    differing = [job for job in expected if real.starts.get(job) != expected[job]]
    assert not differing, (
        f"{len(differing)} jobs differ, first {differing[0]}: "
        f"real {real.starts.get(differing[0])}, reference {expected[differing[0]]}"
    )


@pytest.mark.parametrize("policy", [EASY, CONSERVATIVE], ids=lambda p: p.value)
def test_simulator_matches_reference_on_kth_prefix_at_double_load(
    policy: Policy, tmp_path: Path
) -> None:
    """Submit times halved: long queues, many backfilling decisions per instant."""
    path = _compressed_prefix("KTH-SP2-1996-2.1-cln.swf.gz", 1000, 2, tmp_path)
    real = real_simulate(path, policy)
    cores, jobs, _ = ref_read_swf(path)
    expected = ref_simulate(jobs, cores, policy)
    assert sum(expected[j.job] - j.submit for j in jobs) / len(jobs) > 10_000  # really loaded
    assert real.starts == expected


@pytest.mark.slow
@pytest.mark.parametrize("policy", [EASY, CONSERVATIVE], ids=lambda p: p.value)
def test_simulator_matches_reference_on_longer_kth_prefix_at_double_load(
    policy: Policy, tmp_path: Path
) -> None:
    path = _compressed_prefix("KTH-SP2-1996-2.1-cln.swf.gz", 3000, 2, tmp_path)
    real = real_simulate(path, policy)
    cores, jobs, _ = ref_read_swf(path)
    assert real.starts == ref_simulate(jobs, cores, policy)


def _compressed_prefix(name: str, jobs: int, divide: int, tmp_path: Path) -> Path:
    """A trace prefix whose submit times are divided by ``divide`` (higher offered load)."""
    plain = trace_prefix(name, jobs, tmp_path / "prefix.swf")
    lines = []
    for line in plain.read_text(encoding="latin-1").splitlines():
        fields = line.split()
        if fields and not line.lstrip().startswith(";"):
            fields[1] = str(int(fields[1]) // divide)
            line = " ".join(fields)
        lines.append(line)
    out = tmp_path / "compressed.swf"
    out.write_text("\n".join(lines) + "\n", encoding="latin-1")
    return out


# =============================================================================================
# Hand-worked replays (small enough to check on paper)
# =============================================================================================


def _replay(
    tmp_path: Path,
    cores: int,
    rows: List[List[int]],
    policy: Policy,
    reservations: Sequence[Rect] = (),
) -> Dict[int, int]:
    path = write_swf(tmp_path / f"{policy.value}.swf", rows, max_procs=cores)
    starts = real_simulate(path, policy, reservations).starts
    _, jobs, _ = ref_read_swf(path)
    easy = "rectangles" if reservations else "counters"
    assert ref_simulate(jobs, cores, policy, reservations, easy=easy) == starts, "reference"
    return starts


def test_runs_are_cut_at_the_estimate(tmp_path: Path) -> None:
    """P=2. Job 1 (2 cores) says 10 s but would run 50 s: it is killed at 10 and job 2 (2
    cores, submitted at 1) starts at 10. Job 3 has no field 9: its estimate is its run time
    (4 s), so under EASY it backfills... it cannot (0 free); it starts when job 2 ends at 15."""
    rows = [
        swf_row(1, 0, 50, 2, req_time=10),
        swf_row(2, 1, 5, -1, req_procs=2, req_time=5),
        swf_row(3, 2, 4, 1),
    ]
    for policy in ALL_POLICIES:
        assert _replay(tmp_path, 2, rows, policy) == {1: 0, 2: 10, 3: 15}


def test_zero_length_job_frees_its_cores_at_the_same_instant(tmp_path: Path) -> None:
    """P=2. Job 1 (2 cores, estimate 10) runs 0 s: it starts and ends at 0, and job 2 (2
    cores, submitted at 0 too) starts at 0 in the second pass of that instant."""
    rows = [swf_row(1, 0, 0, 2, req_time=10), swf_row(2, 0, 5, 2, req_time=5)]
    for policy in ALL_POLICIES:
        assert _replay(tmp_path, 2, rows, policy) == {1: 0, 2: 0}


def test_zero_length_reservation_is_not_built_over(tmp_path: Path) -> None:
    """P=2, all at 0. Job 1 (1 core, estimate 1, runs 0 s); job 2 (2 cores, estimate 0);
    job 3 (1 core, 2 s). Conservative: job 1 starts; job 2 needs both cores for an instant:
    reserved at 1, holding [1, 2); job 3 cannot be placed over that instant: reserved at 2.
    Job 1 ends at once (0 s): job 2 moves to 0, job 3 to 1 (behind job 2's claim); job 2
    starts and ends at once; job 3 moves to 0. All start at 0.

    (Were job 2's reservation to hold nothing, job 3 would be placed at 0 over it, job 2
    could then neither move nor start at 1, and with no event at 1 the replay stalls.)"""
    rows = [
        swf_row(1, 0, 0, 1, req_time=1),
        swf_row(2, 0, 0, 2),
        swf_row(3, 0, 2, 1),
    ]
    for policy in ALL_POLICIES:
        assert _replay(tmp_path, 2, rows, policy) == {1: 0, 2: 0, 3: 0}, policy


def test_easy_protects_a_zero_length_head(tmp_path: Path) -> None:
    """P=4. Job 1 (2 cores, 10 s) runs from 0. Job 2 (4 cores, estimate 0) arrives at 1 and does
    not fit: shadow 10, extra = 4 - 4 = 0. Job 3 (2 cores, 100 s) fits now but runs past the
    shadow and needs 2 > 0 extra cores: refused, or job 2 would wait until 101. Job 2 starts at
    10 and ends at once; job 3 starts at 10 too."""
    rows = [
        swf_row(1, 0, 10, 2, req_time=10),
        swf_row(2, 1, 0, 4),
        swf_row(3, 1, 100, 2, req_time=100),
    ]
    assert _replay(tmp_path, 4, rows, EASY) == {1: 0, 2: 10, 3: 10}
    # with a reservation far away the engine takes its general path: same answer
    assert _replay(tmp_path, 4, rows, EASY, [(10_000, 10_001, 1)]) == {1: 0, 2: 10, 3: 10}


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
def test_removing_a_reservation_starts_the_waiting_job_at_once(policy: Policy) -> None:
    """P=2, both cores reserved over [0, 100). A (2 cores, 10 s) arrives at 5 and waits. The
    reservation is cancelled at 20: A starts at 20, in the pass the removal triggers."""
    starts: Dict[str, int] = {}
    sim = Simulator(
        iter([Task("A", 2, 10, 5)]),
        2,
        policy,
        start_time=0,
        on_start=lambda task: starts.update({task.key: task.start}),
    )
    sim.add_reservation("maint", 0, 100, 2)
    sim.advance_to(20)
    assert sim.now == 20 and starts == {} and [t.key for t in sim.queued] == ["A"]
    sim.remove_reservation("maint")
    assert starts == {"A": 20}
    sim.run()
    assert sim.finished


def test_exact_estimates_take_the_run_time(tmp_path: Path) -> None:
    """Job 1 asks 100 s and runs 30 s; job 2 gives no estimate. With exact estimates both
    estimates are the run times; without, job 1 keeps its 100 s."""
    path = write_swf(
        tmp_path / "t.swf", [swf_row(1, 0, 30, 2, req_time=100), swf_row(2, 5, 7, 1)], 4
    )
    exact = [(t.estimate, t.run) for t in Workload(str(path), exact_estimates=True).tasks()]
    asked = [(t.estimate, t.run) for t in Workload(str(path)).tasks()]
    assert exact == [(30, 30), (7, 7)]
    assert asked == [(100, 30), (7, 7)]


def test_reservation_from_on_arrival_replans_from_that_instant() -> None:
    """P=2, conservative. A (1 core, 100 s) runs from 0; B (2 cores, 10 s) is planned at 100;
    C (1 core, 150 s) waits behind B, planned at 110. D arrives at 50 and the on_arrival hook
    turns it into a reservation of 1 core over [100, 300) instead of queueing it: B moves to
    300 and C now fits at 50, when the reservation is made (not at 0, the engine's previous
    instant, where it would never start)."""
    starts: Dict[str, int] = {}
    seen: List[Tuple[str, int]] = []

    def on_arrival(task: Task) -> bool:
        seen.append((task.key, sim.now))
        if task.key != "D":
            return True
        sim.add_reservation("r", 100, 300, 1)
        return False

    tasks = [Task("A", 1, 100, 0), Task("B", 2, 10, 0), Task("C", 1, 150, 0), Task("D", 1, 5, 50)]
    sim = Simulator(
        iter(tasks),
        2,
        Policy.CONSERVATIVE,
        start_time=0,
        on_start=lambda task: starts.update({task.key: task.start}),
        on_arrival=on_arrival,
    )
    sim.run()
    assert seen == [("A", 0), ("B", 0), ("C", 0), ("D", 50)]
    assert starts == {"A": 0, "C": 50, "B": 300}
    assert sim.finished


def test_summary_of_a_replay() -> None:
    """P=4, FCFS. A (3, 10 s) at 0; B (2, 5 s) at 1; C (1, 5 s) at 2: A 0-10, B and C 10-15.
    Waits 0, 9, 8. Bounded slowdowns (tau 10 s): 1, (9+5)/10, (8+5)/10. Core-seconds
    30 + 10 + 5 = 45 over 4 cores x 15 s."""
    tasks = [Task("A", 3, 10, 0), Task("B", 2, 5, 1), Task("C", 1, 5, 2)]
    finished: List[str] = []
    sim = Simulator(iter(tasks), 4, FCFS, on_finish=lambda task: finished.append(task.key))
    summary = sim.run()
    assert finished == ["A", "B", "C"]
    assert (summary.jobs, summary.cores, summary.policy) == (3, 4, "fcfs")
    assert summary.mean_wait_s == pytest.approx(17 / 3)
    assert summary.mean_bounded_slowdown == pytest.approx((1 + 1.4 + 1.3) / 3)
    assert summary.utilization == pytest.approx(45 / 60)
    assert (summary.first_submit, summary.last_end, summary.makespan_s) == (0, 15, 15)


# =============================================================================================
# Properties of the real simulator on random queues
# =============================================================================================


def _observe(
    cores: int, rows: List[List[int]], policy: Policy, reservations: Sequence[Rect]
) -> Tuple[Observed, List[RefJob]]:
    path = scratch_swf(rows, cores)
    seen = real_simulate(path, policy, reservations, observe=True)
    _, jobs, _ = ref_read_swf(path)
    return seen, jobs


def _check_capacity(cores: int, seen: Observed, reservations: Sequence[Rect]) -> None:
    """Running jobs and reservations never hold more than P cores at any instant."""
    tasks = list(seen.tasks.values())
    points = {task.start for task in tasks} | {start for start, _, _ in reservations}
    for t in points:
        jobs = sum(task.size for task in tasks if task.start <= t < task.start + task.run)
        held = load_at(reservations, t)
        assert jobs + held <= cores, f"at {t}: jobs hold {jobs}, reservations {held}, P={cores}"


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
@PROPERTY
@given(data=st.data())
def test_replay_properties(policy: Policy, data: st.DataObject) -> None:
    """On random queues with advance reservations:

    * every simulable job starts exactly once, never before its submit time, with the size,
      estimate and run the rules give it;
    * running jobs and reservations never hold more than P cores (no job intrudes on a
      reservation);
    * FCFS starts jobs in submit order;
    * conservative: no job starts later than the reservation it got in the pass it arrived in;
    * EASY (textbook guarantee): estimates are upper bounds (jobs are killed at them), so once a
      job is the protected head with shadow time S, backfilling never pushes it past S. Early
      completions can only bring S forward: the shadow times a head is given never increase,
      and it starts no later than the last one.
    """
    cores, rows = data.draw(workloads())
    reservations = data.draw(reservation_sets(cores))
    seen, jobs = _observe(cores, rows, policy, reservations)
    assert sorted(seen.starts) == sorted(job.job for job in jobs)
    for job in jobs:
        task = seen.tasks[job.job]
        assert task.start >= job.submit  # type: ignore[operator]
        assert (task.size, task.estimate, task.run) == (job.size, job.est, job.run)
    _check_capacity(cores, seen, reservations)
    if policy is FCFS:
        starts = [seen.starts[job.job] for job in jobs]
        assert starts == sorted(starts)
    elif policy is CONSERVATIVE:
        for job in jobs:
            assert seen.starts[job.job] <= seen.first_planned[job.job], job
    else:
        for job, shadows in seen.shadows.items():
            assert shadows == sorted(shadows, reverse=True), (job, shadows)
            assert seen.starts[job] <= shadows[-1], (job, shadows, seen.starts[job])


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
@settings(PROPERTY, max_examples=100)
@given(workload=workloads())
def test_far_reservation_changes_nothing(
    policy: Policy, workload: Tuple[int, List[List[int]]]
) -> None:
    """A 1-core reservation after every job could end changes no decision. For EASY it moves
    the engine from its fast path (counters) to its general path (fits around the head's
    window): the two must give the same schedule."""
    cores, rows = workload
    seen, jobs = _observe(cores, rows, policy, ())
    far = max([job.submit for job in jobs], default=0) + 2 * sum(j.est for j in jobs) + 10
    with_far, _ = _observe(cores, rows, policy, [(far, far + 5, 1)])
    assert with_far.starts == seen.starts


# =============================================================================================
# plan() over a snapshot == the reference with every job running to its estimate
# =============================================================================================


@st.composite
def snapshots(draw: Callable) -> ClusterSnapshot:  # type: ignore[type-arg]
    now = 1000
    cores = draw(st.integers(1, 8))
    running, used = [], 0
    for k, (size, began, left) in enumerate(
        draw(
            st.lists(
                st.tuples(st.integers(1, cores), st.integers(0, 20), st.integers(1, 15)), max_size=4
            )
        )
    ):
        if used + size <= cores:
            used += size
            running.append(Job(f"run{k}", size, now - began - 5, began + left, start=now - began))
    pending = [
        Job(f"p{k}", size, now - 1, limit, not_before=None if later is None else now + later)
        for k, (size, limit, later) in enumerate(
            draw(
                st.lists(
                    st.tuples(
                        st.integers(1, cores),
                        st.integers(1, 12),
                        st.one_of(st.none(), st.none(), st.integers(0, 10)),
                    ),
                    min_size=1,
                    max_size=10,
                )
            )
        )
    ]
    reservations: List[BatchReservation] = []
    held = [(now, job.start + job.limit, job.cores) for job in running]  # type: ignore[operator]
    for k, (start, length, size) in enumerate(
        draw(
            st.lists(
                st.tuples(
                    st.integers(now - 5, now + 20), st.integers(1, 12), st.integers(1, cores)
                ),
                max_size=3,
            )
        )
    ):
        rect = (max(start, now), start + length, size)
        if rect[1] > now and all(load_at([*held, rect], x) <= cores for x in range(now, now + 40)):
            held.append(rect)
            reservations.append(BatchReservation(f"res{k}", start, start + length, size))
    return ClusterSnapshot(
        now=now,
        capacity=cores,
        running=tuple(running),
        pending=tuple(pending),
        reservations=tuple(reservations),
    )


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
@PROPERTY
@given(snapshot=snapshots())
def test_plan_matches_reference(policy: Policy, snapshot: ClusterSnapshot) -> None:
    now = snapshot.now
    result = plan(snapshot, policy)
    running = [
        RefJob(-1, job.submit, job.cores, job.limit, job.limit, start=job.start)
        for job in snapshot.running
    ]
    jobs = [
        RefJob(k, max(job.not_before or now, now), job.cores, job.limit, job.limit)
        for k, job in enumerate(snapshot.pending)
    ]
    jobs.sort(key=lambda job: job.submit)  # stable: ties in priority order
    rects = [(max(r.start, now), r.end, r.cores) for r in snapshot.reservations]
    easy = "rectangles" if rects else "counters"
    expected = ref_simulate(jobs, snapshot.capacity, policy, rects, running, easy=easy)
    assert result.starts == {f"p{k}": start for k, start in expected.items()}
    assert result.unplanned == []
    # the plan's profile: running jobs, reservations and pending jobs at their planned windows
    held = [(now, job.start + job.limit, job.cores) for job in snapshot.running]  # type: ignore[operator]
    held += rects
    held += [(result.starts[j.id], result.ends[j.id], j.cores) for j in snapshot.pending]
    for start, _, free in result.profile.segments():
        assert free == snapshot.capacity - load_at(held, start), start
    assert all(result.ends[j.id] - result.starts[j.id] == j.limit for j in snapshot.pending)
    assert result.horizon >= max(result.ends.values()) + 300
