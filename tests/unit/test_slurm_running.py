"""The running jobs an accept read, reused by the next accepts only while every node's
allocated cores are what they were and only for a few seconds (backends/slurm/running.py)."""

from __future__ import annotations

from typing import List, Tuple

from siteagent.backends.slurm.jobs import SlurmJobs
from siteagent.backends.slurm.running import RunningJobs
from siteagent.core.values import Job, NodeState


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def nodes(*alloc: int) -> List[NodeState]:
    return [NodeState(name=f"n{i}", cores=16, alloc_cores=a) for i, a in enumerate(alloc, 1)]


def running(*jobs: Tuple[str, int]) -> SlurmJobs:
    return SlurmJobs(running=[Job(id=i, cores=c, submit=0, limit=600, start=50) for i, c in jobs])


def kept(alloc: Tuple[int, ...], jobs: SlurmJobs) -> Tuple[RunningJobs, Clock]:
    clock = Clock()
    cache = RunningJobs(reuse_s=10.0, clock=clock)
    cache.keep(jobs, nodes(*alloc), clock())
    return cache, clock


def test_jobs_are_reused_while_every_node_shows_the_same_allocated_cores() -> None:
    jobs = running(("1", 8), ("2", 16))
    cache, clock = kept((8, 16, 0), jobs)
    clock.now += 9.9
    assert cache.recent()
    assert cache.still(nodes(8, 16, 0)) is jobs


def test_a_job_started_or_ended_on_any_node_makes_them_read_again() -> None:
    cache, _ = kept((8, 16, 0), running(("1", 8), ("2", 16)))
    assert cache.still(nodes(8, 16, 4)) is None  # a job started on n3
    assert cache.still(nodes(0, 16, 0)) is None  # job 1 ended
    assert cache.still(nodes(16, 8, 0)) is None  # the same total, other nodes


def test_a_read_is_reused_for_a_few_seconds_only() -> None:
    cache, clock = kept((8,), running(("1", 8)))
    clock.now += 10.0
    assert not cache.recent()
    assert cache.still(nodes(8)) is None


def test_reads_that_straddle_a_start_or_an_end_are_not_kept() -> None:
    """squeue listed a job sinfo did not count yet (or the other way round)."""
    cache, _ = kept((8, 0), running(("1", 8), ("2", 4)))
    assert not cache.recent() and cache.still(nodes(8, 0)) is None
    cache.keep(running(("1", 8)), nodes(8, 4), 100.0)
    assert cache.still(nodes(8, 4)) is None


def test_an_idle_cluster_is_kept_too_and_forgotten_on_demand() -> None:
    empty = running()
    cache, _ = kept((0, 0), empty)
    assert cache.still(nodes(0, 0)) is empty
    cache.forget()
    assert not cache.recent() and cache.still(nodes(0, 0)) is None
