"""Absolute priorities with preemption in the simulator (docs/design.md §4.6).

A job of higher priority suspends running jobs of lower priority when it cannot start
otherwise; a suspended job keeps what it has done and resumes with what remains; the queue is
in priority order. Checked by hand on small cases, then over random workloads: every job runs
exactly its run time in all (suspending loses and adds no work), the cores in use never exceed
the machine, and a waiting job never has lower-priority work it could push out. With every
priority equal, a preemptive simulator schedules exactly as the reference of
``test_simulator`` does, job for job (its held-out schedules stay identical).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from siteagent.core.engines import Policy
from siteagent.core.machine import Task
from siteagent.core.prediction import plan
from siteagent.core.values import ClusterSnapshot, Job
from siteagent.sim.simulator import Simulator
from siteagent.sim.snapshot import snapshot_of
from siteagent.sim.workload import Workload
from testbed.inprocess.traces import trace_prefix
from testbed.sims.reference import (
    AGREEMENT,
    ALL_POLICIES,
    PROPERTY,
    ref_read_swf,
    ref_simulate,
    scratch_swf,
    workloads,
)

FCFS, EASY, CONSERVATIVE = Policy.FCFS, Policy.EASY, Policy.CONSERVATIVE

#: (key, submit, size, run, priority); the estimate is the run time
Spec = Tuple[str, int, int, int, int]


@dataclass
class Trace:
    """What a preemptive replay did: each job's run segments [start, end), and the cores in
    use after every instant (with the top waiting job's priority and size then)."""

    segments: Dict[str, List[List[int]]] = field(default_factory=dict)
    ends: Dict[str, int] = field(default_factory=dict)
    busy: List[Tuple[int, int]] = field(default_factory=list)
    starved: List[str] = field(default_factory=list)


def replay(
    specs: Sequence[Spec], cores: int, policy: Policy, estimates: Optional[Dict[str, int]] = None
) -> Tuple[Trace, Simulator]:
    tasks = [
        Task(key, size, (estimates or {}).get(key, run), submit, run=run, priority=priority)
        for key, submit, size, run, priority in specs
    ]
    trace = Trace()
    sim: Simulator

    def started(task: Task) -> None:
        trace.segments.setdefault(str(task.key), []).append([sim.now, -1])

    def stopped(task: Task) -> None:
        trace.segments[str(task.key)][-1][1] = sim.now

    def finished(task: Task) -> None:
        stopped(task)
        trace.ends[str(task.key)] = sim.now

    sim = Simulator(
        iter(tasks),
        cores,
        policy,
        start_time=0,
        on_start=started,
        on_finish=finished,
        on_suspend=stopped,
        preemptive=True,
    )
    while True:
        t = sim.next_event_time()
        if t is None:
            break
        sim.advance_to(t)
        running = sim.running
        trace.busy.append((t, sum(task.size for task in running)))
        waiting = sim.queued
        if waiting and policy is not FCFS:
            top = max(waiting, key=lambda task: task.priority)
            lower = sum(task.size for task in running if task.priority < top.priority)
            if top.size <= cores - trace.busy[-1][1] + lower and lower:
                trace.starved.append(f"{top.key} at {t}")
    assert sim.finished
    return trace, sim


# ---- by hand


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
def test_a_higher_priority_job_suspends_a_lower_one_which_resumes_with_what_remains(
    policy: Policy,
) -> None:
    """8 cores. low (priority 1, 8 cores, 100 s) starts at 0; high (priority 2, 4 cores, 10 s)
    arrives at 20: low is suspended after 20 s, high runs 20-30, low resumes at 30 with 80 s
    left and ends at 110."""
    trace, sim = replay([("low", 0, 8, 100, 1), ("high", 20, 4, 10, 2)], 8, policy)
    assert trace.segments == {"low": [[0, 20], [30, 110]], "high": [[20, 30]]}
    summary = sim.summary()
    assert summary.jobs == 2
    assert summary.mean_wait_s == (10 + 0) / 2  # low waited 10 s while suspended
    assert summary.utilization == pytest.approx((8 * 100 + 4 * 10) / (8 * 110))


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
def test_victims_are_the_lowest_priority_then_the_latest_started(policy: Policy) -> None:
    """8 cores full of a (priority 2, from 0), b (priority 1, from 1) and c (priority 1, from
    2), 4 + 2 + 2 cores. top (priority 3, 2 cores) takes c's cores only: lowest priority, and
    the latest started of those."""
    specs = [
        ("a", 0, 4, 50, 2),
        ("b", 1, 2, 50, 1),
        ("c", 2, 2, 50, 1),
        ("top", 10, 2, 5, 3),
    ]
    trace, _ = replay(specs, 8, policy)
    assert trace.segments["a"] == [[0, 50]]
    assert trace.segments["b"] == [[1, 51]]
    assert trace.segments["c"] == [[2, 10], [15, 57]]
    assert trace.segments["top"] == [[10, 15]]


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
def test_nothing_is_suspended_for_a_job_it_would_not_make_room_for(policy: Policy) -> None:
    """8 cores: high (priority 3, 6 cores) runs; low (priority 1, 2 cores) runs; mid (priority
    2, 4 cores) arrives: suspending low frees 2, not 4, so low keeps running."""
    specs = [("high", 0, 6, 40, 3), ("low", 0, 2, 40, 1), ("mid", 5, 4, 10, 2)]
    trace, _ = replay(specs, 8, policy)
    assert trace.segments["low"] == [[0, 40]]
    assert trace.segments["mid"] == [[40, 50]]


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
def test_the_queue_is_in_priority_order(policy: Policy) -> None:
    """4 cores busy with a job of priority 3 until 10; jobs of priority 1, 2 and 3 queue
    behind it in that order and start highest first, each needing the whole machine."""
    specs = [
        ("busy", 0, 4, 10, 3),
        ("p1", 1, 4, 10, 1),
        ("p2", 2, 4, 10, 2),
        ("p3", 3, 4, 10, 3),
    ]
    trace, _ = replay(specs, 4, policy)
    assert [trace.segments[k][0][0] for k in ("p3", "p2", "p1")] == [10, 20, 30]


def test_a_suspended_job_resumes_before_later_jobs_of_its_priority() -> None:
    specs = [
        ("first", 0, 4, 30, 1),
        ("top", 5, 4, 10, 2),
        ("second", 6, 4, 10, 1),
    ]
    trace, _ = replay(specs, 4, CONSERVATIVE)
    assert trace.segments["first"] == [[0, 5], [15, 40]]
    assert trace.segments["second"] == [[40, 50]]


def test_a_snapshot_shows_the_absolute_priorities() -> None:
    task = Task("b", 1, 10, 0, priority=2)
    live = Simulator(iter([task]), 4, CONSERVATIVE, start_time=0, preemptive=True)
    live.advance_to(1)
    snapshot = snapshot_of(live)
    assert [(job.id, job.absolute_priority) for job in snapshot.running] == [("b", 2)]
    assert Job("x", 1, 0, 10).absolute_priority == 0


# ---- random workloads


@st.composite
def prioritised(draw: st.DrawFn) -> Tuple[int, List[Spec], Dict[str, int]]:
    """(cores, jobs, estimates): jobs of 1-4 priorities arriving in bursts, some estimates
    above the run time."""
    cores = draw(st.integers(1, 8))
    count = draw(st.integers(1, 16))
    specs: List[Spec] = []
    estimates: Dict[str, int] = {}
    t = 0
    for k in range(count):
        t += draw(st.sampled_from([0, 0, 1, 2, 3, 5, 8]))
        run = draw(st.integers(0, 12))
        key = f"j{k}"
        specs.append((key, t, draw(st.integers(1, cores)), run, draw(st.integers(1, 4))))
        estimates[key] = run + draw(st.sampled_from([0, 0, 1, 5]))
    return cores, specs, estimates


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
@settings(PROPERTY)
@given(workload=prioritised())
def test_suspending_conserves_work_and_never_overfills_the_machine(
    policy: Policy, workload: Tuple[int, List[Spec], Dict[str, int]]
) -> None:
    cores, specs, estimates = workload
    trace, sim = replay(specs, cores, policy, estimates)
    for key, submit, _, run, _ in specs:
        segments = trace.segments[key]
        assert sum(end - start for start, end in segments) == run, (key, segments)
        assert segments[0][0] >= submit
        assert all(a[1] <= b[0] for a, b in zip(segments, segments[1:])), segments
        assert trace.ends[key] == segments[-1][1]
    assert all(busy <= cores for _, busy in trace.busy), trace.busy
    assert sim.summary().jobs == len(specs)
    core_seconds = sum(size * run for _, _, size, run, _ in specs)
    makespan = sim.summary().makespan_s
    if makespan:
        assert sim.summary().utilization == pytest.approx(core_seconds / (cores * makespan))


@pytest.mark.parametrize("policy", [EASY, CONSERVATIVE], ids=lambda p: p.value)
@settings(PROPERTY)
@given(workload=prioritised())
def test_the_top_waiting_job_never_has_lower_priority_work_it_could_push_out(
    policy: Policy, workload: Tuple[int, List[Spec], Dict[str, int]]
) -> None:
    cores, specs, estimates = workload
    trace, _ = replay(specs, cores, policy, estimates)
    assert trace.starved == []


def _equal_priorities(tasks: Iterator[Task], priority: int) -> Iterator[Task]:
    for task in tasks:
        task.priority = priority
        yield task


def _starts(path: Path, policy: Policy, priority: int) -> Dict[int, int]:
    starts: Dict[int, int] = {}

    def started(task: Task) -> None:
        starts.setdefault(task.payload.job, task.start)  # type: ignore[attr-defined, arg-type]

    workload = Workload(str(path), skip_invalid=True)
    tasks = _equal_priorities(workload.tasks(), priority)
    sim = Simulator(tasks, workload.cores, policy, start_time=0, on_start=started, preemptive=True)
    sim.run()
    return starts


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
@settings(AGREEMENT, max_examples=200)
@given(workload=workloads(), priority=st.sampled_from([0, 1, 3]))
def test_with_equal_priorities_a_preemptive_simulator_matches_the_reference(
    policy: Policy, workload: Tuple[int, List[List[int]]], priority: int
) -> None:
    cores, rows = workload
    path = scratch_swf(rows, cores)
    _, jobs, _ = ref_read_swf(path)
    assert _starts(path, policy, priority) == ref_simulate(jobs, cores, policy)


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
def test_with_equal_priorities_the_kth_prefix_is_scheduled_job_for_job_as_before(
    policy: Policy, tmp_path: Path
) -> None:
    path = trace_prefix("KTH-SP2-1996-2.1-cln.swf.gz", 3000, tmp_path / "kth.swf")
    cores, jobs, _ = ref_read_swf(path)
    assert _starts(path, policy, 2) == ref_simulate(jobs, cores, policy)


# ---- the agent's prediction of a preemptive site


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
@settings(PROPERTY)
@given(workload=prioritised(), cut=st.integers(0, 30))
def test_a_preemptive_plan_predicts_what_the_simulator_then_does(
    policy: Policy, workload: Tuple[int, List[Spec], Dict[str, int]], cut: int
) -> None:
    """Exact estimates, every job arrived by ``cut``: the plan of the simulated cluster's
    snapshot at ``cut`` predicts each queued job's start (a suspended one's resumption) as the
    simulator then starts it."""
    cores, specs, _ = workload
    # a snapshot's limit 0 means none: no zero-length jobs here
    arrived = [(k, t, n, max(run, 1), p) for k, t, n, run, p in specs if t <= cut]
    if not arrived:
        return
    tasks = [
        Task(key, size, run, submit, run=run, priority=p) for key, submit, size, run, p in arrived
    ]
    starts: Dict[str, int] = {}

    def started(task: Task) -> None:
        starts.setdefault(str(task.key), task.start)  # type: ignore[arg-type]

    sim = Simulator(iter(tasks), cores, policy, start_time=0, on_start=started, preemptive=True)
    sim.advance_to(cut)
    snapshot = snapshot_of(sim)
    predicted = plan(snapshot, policy, preemptive=True).starts
    starts.clear()  # from now on: a suspended job's next start is its resumption
    sim.run()
    assert predicted == {job.id: starts[job.id] for job in snapshot.pending}


def test_a_requeued_job_starts_over_where_a_suspended_one_resumes() -> None:
    """8 cores: low (priority 1) has run 20 of its 100 s; high (priority 2, 4 cores, 10 s) and
    next (priority 1, 8 cores, 10 s) wait. Suspended, low resumes at 30 with 80 s left and next
    starts at 110; requeued, low starts over at 30 and next starts at 130."""
    snapshot = ClusterSnapshot(
        now=20,
        capacity=8,
        running=(Job("low", 8, 0, 100, start=0, absolute_priority=1),),
        pending=(
            Job("high", 4, 20, 10, absolute_priority=2),
            Job("next", 8, 20, 10, absolute_priority=1),
        ),
    )
    assert plan(snapshot, CONSERVATIVE).starts == {"high": 100, "next": 110}
    suspended = plan(snapshot, CONSERVATIVE, preemptive=True).starts
    assert suspended == {"high": 20, "next": 110}
    requeued = plan(snapshot, CONSERVATIVE, preemptive=True, requeue=True).starts
    assert requeued == {"high": 20, "next": 130}


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.value)
def test_a_fork_taken_while_a_job_is_suspended_goes_on_as_the_original(policy: Policy) -> None:
    """Forked at 25, while one of two low-priority jobs is suspended for high: the fork
    suspends the other for mid (arriving at 27) and resumes both with what remains, start for
    start as the unforked replay."""
    specs = [
        ("low", 0, 4, 100, 1),
        ("side", 0, 4, 100, 1),
        ("high", 20, 4, 10, 2),
        ("mid", 27, 4, 30, 2),
    ]

    def prepared() -> Tuple[Simulator, List[Tuple[str, int]]]:
        starts: List[Tuple[str, int]] = []
        tasks = [
            Task(key, size, run, submit, run=run, priority=priority)
            for key, submit, size, run, priority in specs
        ]
        sim = Simulator(
            iter(tasks),
            8,
            policy,
            start_time=0,
            preemptive=True,
            on_start=lambda task: starts.append((str(task.key), sim.now)),
        )
        return sim, starts

    reference, expected = prepared()
    reference.run()
    original, before = prepared()
    original.advance_to(25)
    assert len(original.queued) == 1  # one low-priority job suspended, waiting
    forked = list(before)
    fork = original.fork(on_start=lambda task: forked.append((str(task.key), fork.now)))
    fork.run()
    assert forked == expected
    assert fork.summary() == reference.summary()
    assert ("mid", 27) in expected
