"""Work injected into a running replay, and replays forked to try several things from one
instant: ``Simulator.submit``, ``Simulator.fork`` and the best-effort workflow run on them
(``siteagent.sim.dag``), as the thesis reproduction uses them (docs/reproductions.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from siteagent.core.engines import Policy, make_engine
from siteagent.core.machine import Task
from siteagent.core.nodes import NodeMachine
from siteagent.sim.dag import DagJob, run_just_in_time
from siteagent.sim.simulator import Simulator
from siteagent.sim.workload import Workload
from testbed.inprocess.traces import trace_prefix

POLICIES = [Policy.FCFS, Policy.EASY, Policy.CONSERVATIVE]


def _kth(tmp_path: Path, jobs: int = 1500) -> List[Task]:
    path = trace_prefix("KTH-SP2-1996-2.1-cln.swf.gz", jobs, tmp_path / "kth.swf")
    return list(Workload(str(path)).tasks())


def _replay(tasks: List[Task], policy: Policy) -> Dict[object, int]:
    starts: Dict[object, int] = {}
    Simulator(
        iter(_copies(tasks)), 100, policy, on_start=lambda t: starts.update({t.key: t.start})
    ).run()
    return starts


def _copies(tasks: List[Task]) -> List[Task]:
    return [Task(t.key, t.size, t.estimate, t.submit, t.run) for t in tasks]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.value)
def test_a_submitted_task_is_an_arrival_behind_the_instants_own(
    policy: Policy, tmp_path: Path
) -> None:
    """Every 50th job of a KTH prefix is taken out of the trace and submitted into the
    replay at its own submit time instead: every job starts exactly when it does in the
    plain replay (each injected job is the last arrival of its instant there)."""
    tasks = _kth(tmp_path)
    instants: Dict[int, int] = {}
    for task in tasks:
        instants[task.submit] = instants.get(task.submit, 0) + 1
    injected = [t for t in tasks[::50] if instants[t.submit] == 1]
    assert len(injected) >= 25
    expected = _replay(tasks, policy)
    keys = {t.key for t in injected}
    starts: Dict[object, int] = {}
    sim = Simulator(
        iter(_copies([t for t in tasks if t.key not in keys])),
        100,
        policy,
        start_time=tasks[0].submit,
        on_start=lambda t: starts.update({t.key: t.start}),
    )
    for task in injected:
        sim.advance_to(task.submit)
        sim.submit(Task(task.key, task.size, task.estimate, -1, task.run))
    sim.run()
    assert starts == expected


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.value)
def test_a_fork_goes_on_as_the_original_would(policy: Policy, tmp_path: Path) -> None:
    """Forked halfway (with a reservation in place), the fork and the original each finish
    the replay exactly as an unforked replay does; a task submitted into the fork and a
    reservation added to it change the fork only."""
    tasks = _kth(tmp_path)
    middle = tasks[len(tasks) // 2].submit

    def prepared() -> Tuple[Simulator, Dict[object, int]]:
        starts: Dict[object, int] = {}
        sim = Simulator(
            iter(_copies(tasks)), 100, policy, on_start=lambda t: starts.update({t.key: t.start})
        )
        sim.add_reservation("maintenance", middle + 3600, middle + 7200, 40)
        sim.advance_to(middle)
        return sim, starts

    reference, reference_starts = prepared()
    reference.run()
    original, original_starts = prepared()
    fork_starts = dict(original_starts)
    fork = original.fork(on_start=lambda t: fork_starts.update({t.key: t.start}))
    fork.run()
    assert fork_starts == reference_starts
    assert fork.summary().jobs == reference.summary().jobs

    other_starts = dict(original_starts)
    other = original.fork(on_start=lambda t: other_starts.update({t.key: t.start}))
    other.add_reservation("late", middle + 20 * 86400, middle + 21 * 86400, 60)
    other.submit(Task("extra", 100, 36000, -1))
    other.run()
    assert other_starts["extra"] >= middle and other_starts != reference_starts
    original.run()
    assert original_starts == reference_starts


def test_a_copy_of_an_engine_on_nodes_is_refused() -> None:
    """Only pooled units are copied: a node machine's state is more than its profile."""
    machine = NodeMachine([4, 4], [1, 1], [True, True], now=0, capacity=8)
    engine = make_engine(Policy.CONSERVATIVE, 8, 0, machine)
    with pytest.raises(ValueError, match="pooled"):
        engine.copy(lambda task: task)


def test_just_in_time_workflow_on_a_busy_cluster() -> None:
    """P=4. Background: B1 (4 cores, 0-100), B2 (2 cores, arrives 150, runs 100 s).
    Workflow a -> (b, c) -> d from t=0: a (2 cores, 50 s) waits for B1, runs 100-150; b
    (2, 100 s) and c (2, 20 s) are submitted at 150, behind B2 (which arrives then, from
    the trace, first): B2 and b run 150-250, c is planned at 250 (conservative) and runs
    250-270; d (4 cores, 10 s) is submitted at 270 and runs 270-280. The replay has not
    reached its first instant when the workflow begins: B1 still arrives first."""
    background = [Task("B1", 4, 100, 0), Task("B2", 2, 100, 150)]
    sim = Simulator(iter(background), 4, Policy.CONSERVATIVE, start_time=0)
    jobs = [
        DagJob("a", 2, 50),
        DagJob("b", 2, 100, ("a",)),
        DagJob("c", 2, 20, ("a",)),
        DagJob("d", 4, 10, ("b", "c")),
    ]
    run = run_just_in_time({"site": sim}, jobs)
    assert run.submits == {"a": 0, "b": 150, "c": 150, "d": 270}
    assert run.starts == {"a": 100, "b": 150, "c": 250, "d": 270}
    assert run.ends == {"a": 150, "b": 250, "c": 270, "d": 280}
    assert run.makespan == 280 and sim.now == 280


def test_just_in_time_across_sites_pays_the_transfer() -> None:
    """Sites A and B of 4 cores. A runs a long 2-core job from 0; B gets one at 50. x (2
    cores, 100 s) goes to B, the one with fewer jobs at 0, and runs 0-100. At 100 both have
    one job: y goes to A, the first on a tie, and is submitted once x's output has arrived,
    250 s later: it runs 350-450."""
    a = Simulator(iter([Task("bgA", 2, 10_000, 0)]), 4, Policy.CONSERVATIVE, start_time=0)
    a.advance_to(0)
    b = Simulator(iter([Task("bgB", 2, 10_000, 50)]), 4, Policy.CONSERVATIVE, start_time=0)
    jobs = [DagJob("x", 2, 100), DagJob("y", 2, 100, ("x",), transfers=(250,))]
    run = run_just_in_time({"A": a, "B": b}, jobs)
    assert run.sites == {"x": "B", "y": "A"}
    assert (run.submits, run.starts, run.ends) == (
        {"x": 0, "y": 350},
        {"x": 0, "y": 350},
        {"x": 100, "y": 450},
    )
    assert run.makespan == 450


def test_a_workflow_whose_jobs_wait_for_each_other_is_refused() -> None:
    sim = Simulator(iter(()), 4, Policy.CONSERVATIVE, start_time=0)
    with pytest.raises(ValueError, match="never be ready"):
        run_just_in_time({"s": sim}, [DagJob("a", 1, 10, ("b",)), DagJob("b", 1, 10, ("a",))])


@pytest.mark.parametrize("policy", [Policy.EASY, Policy.CONSERVATIVE], ids=lambda p: p.value)
def test_a_job_queued_early_joins_ahead_of_later_arrivals(policy: Policy) -> None:
    """P=2. A (2 cores) runs 0-100; B (2 cores, 10 s) arrives at 10, C (1 core, 10 s) at 20.
    X (2 cores, 10 s), held since 5 and eligible at 50, goes ahead of both: X 100-110, B
    110-120, C 120-130. Submitted plainly at 50 it queues behind them: B 100, C 110, X 120."""

    def run(since: object) -> Dict[object, int]:
        starts: Dict[object, int] = {}
        sim = Simulator(
            iter([Task("A", 2, 100, 0), Task("B", 2, 10, 10), Task("C", 1, 10, 20)]),
            2,
            policy,
            start_time=0,
            on_start=lambda t: starts.update({t.key: t.start}),
        )
        sim.advance_to(50)
        task = Task("X", 2, 10, -1)
        sim.submit(task, since=since)  # type: ignore[arg-type]
        sim.run()
        assert task.submit == (50 if since is None else since)
        return starts

    assert run(5) == {"A": 0, "X": 100, "B": 110, "C": 120}
    assert run(None) == {"A": 0, "B": 100, "C": 110, "X": 120}


def test_early_submission_with_dependencies_beats_just_in_time() -> None:
    """P=4, conservative. R (2 cores) runs 0-200, B1 (2 cores) 0-100; Q (4 cores, 50 s)
    arrives at 120 and is planned at 200. Workflow a -> (b, c) -> d from 0, a (2 cores, 50 s)
    running 100-150. Just in time, b and c queue behind Q: c backfills at 150, b waits for Q
    (200-250) and runs 250-350, d 350-360. Queued at 0 with their dependencies, b and c are
    ahead of Q: b 150-250, c 200-220 (R's cores). Q, planned at b's end, starts in the pass of
    that instant, before d is released (the replay's own work at an instant goes first): d
    300-310."""

    def run(early: bool) -> Tuple[Dict[str, int], Dict[object, int]]:
        background = [Task("R", 2, 200, 0), Task("B1", 2, 100, 0), Task("Q", 4, 50, 120)]
        starts: Dict[object, int] = {}
        sim = Simulator(
            iter(background),
            4,
            Policy.CONSERVATIVE,
            start_time=0,
            on_start=lambda t: starts.update({t.key: t.start}),
        )
        jobs = [
            DagJob("a", 2, 50),
            DagJob("b", 2, 100, ("a",)),
            DagJob("c", 2, 20, ("a",)),
            DagJob("d", 4, 10, ("b", "c")),
        ]
        return run_just_in_time({"site": sim}, jobs, early=early).starts, starts

    late, late_all = run(False)
    assert late == {"a": 100, "b": 250, "c": 150, "d": 350} and late_all["Q"] == 200
    early, early_all = run(True)
    assert early == {"a": 100, "b": 150, "c": 200, "d": 300} and early_all["Q"] == 250
