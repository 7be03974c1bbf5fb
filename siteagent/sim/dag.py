"""A workflow run as best-effort jobs on replayed clusters: the baseline of provisioning.

Singh's thesis (ch. 4.7 and 7.2) runs a workflow "just in time": its tasks, ranked in HEFT
order, are submitted to the batch queue one by one as they become ready, that is once all their
parents have finished; the makespan runs from the first submission to the last end, and the
cost is what the tasks use (cores × run time). Across several sites (ch. 4.9) each ready task
goes to the site with the fewest running and queued jobs, and a parent's output reaches
another site some time after the parent ends (the job's ``transfers``).

Jobs join the replays through :meth:`Simulator.submit` the instant they are ready, ready jobs
in the caller's order; the replays advance together, event by event, with their own work going
on, until the workflow's last job ends. The order (HEFT's) is the caller's: the simulator knows
nothing of workflows' ranks.

``early`` runs the stronger baseline a batch system allows: every job submitted at once with
its dependencies (Slurm's ``sbatch --dependency=afterok``), each held until its parents end
and then queued with the priority of its early submission, ahead of the jobs that arrived
meanwhile (first come, first served). Work the replay starts at the instant a job is released
(its planned start had come) goes first, as the instant's own arrivals do.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from siteagent.core.machine import Task
from siteagent.sim.simulator import Simulator


@dataclass(frozen=True)
class DagJob:
    """One task of the workflow as a batch job: ``size`` cores for ``run`` seconds, asking
    ``estimate`` seconds (its run time if None), once its ``parents`` have ended and their
    outputs are on its site: ``transfers[i]`` seconds after parent i ends if that ran on
    another site (none given: no time)."""

    key: str
    size: int
    run: int
    parents: Tuple[str, ...] = ()
    estimate: Optional[int] = None
    transfers: Tuple[int, ...] = ()

    def transfer(self, parent: int) -> int:
        return self.transfers[parent] if self.transfers else 0


@dataclass
class DagRun:
    """What the run did: for each job its site, and when it was submitted, started and ended;
    ``began`` is when the first job was submitted."""

    began: int
    sites: Dict[str, str] = field(default_factory=dict)
    submits: Dict[str, int] = field(default_factory=dict)
    starts: Dict[str, int] = field(default_factory=dict)
    ends: Dict[str, int] = field(default_factory=dict)

    @property
    def makespan(self) -> int:
        """From the first submission to the last end (thesis ch. 4.7)."""
        return max(self.ends.values(), default=self.began) - self.began

    @property
    def waits(self) -> Dict[str, int]:
        return {key: self.starts[key] - self.submits[key] for key in self.starts}


#: Picks a site for a ready job: the replays, and the jobs already routed to each but not
#: submitted yet (waiting for their input data).
SiteChooser = Callable[[Mapping[str, Simulator], Mapping[str, int]], str]


def fewest_jobs(sites: Mapping[str, Simulator], routed: Mapping[str, int]) -> str:
    """The thesis' best-effort site choice (ch. 4.9): the fewest running plus queued jobs
    (those routed there and not yet submitted count as queued); the first on a tie."""
    return min(
        sites, key=lambda name: len(sites[name].running) + len(sites[name].queued) + routed[name]
    )


def run_just_in_time(
    sites: Mapping[str, Simulator],
    jobs: Sequence[DagJob],
    choose: SiteChooser = fewest_jobs,
    early: bool = False,
) -> DagRun:
    """Run ``jobs`` (in submission order: a ready job goes before every later one) from the
    replays' common ``now`` until the last ends; the replays are left at that instant.

    ValueError if the replays are not at the same instant, a parent is unknown (or its
    transfers are not one per parent), or the jobs depend on each other in a circle (some
    would never be ready).
    """
    clocks = {sim.now for sim in sites.values()}
    if len(clocks) != 1:
        raise ValueError(f"the replays must stand at the same instant, not at {sorted(clocks)}")
    now = clocks.pop()
    by_key = {job.key: job for job in jobs}
    order = {job.key: i for i, job in enumerate(jobs)}
    children: Dict[str, List[str]] = {job.key: [] for job in jobs}
    missing: Dict[str, int] = {}
    for job in jobs:
        if job.transfers and len(job.transfers) != len(job.parents):
            raise ValueError(
                f"job {job.key} gives {len(job.transfers)} transfers for {len(job.parents)} parents"
            )
        for parent in job.parents:
            if parent not in by_key:
                raise ValueError(f"job {job.key} names an unknown parent {parent}")
            children[parent].append(job.key)
        missing[job.key] = len(job.parents)
    result = DagRun(began=now)
    routed = {name: 0 for name in sites}
    due: List[Tuple[int, int, str]] = []  # (submit at, order, key): routed, data on its way
    waiting: List[Tuple[str, Task]] = []
    running: List[Tuple[int, str]] = []  # (end, key)

    def route(keys: List[str]) -> None:
        """Send ready jobs (in order) to their sites; each is submitted once its inputs are
        there."""
        for key in sorted(keys, key=order.__getitem__):
            site = choose(sites, routed)
            routed[site] += 1
            result.sites[key] = site
            arrive = now
            job = by_key[key]
            for i, parent in enumerate(job.parents):
                moved = 0 if result.sites[parent] == site else job.transfer(i)
                arrive = max(arrive, result.ends[parent] + moved)
            heapq.heappush(due, (arrive, order[key], key))

    route([job.key for job in jobs if not job.parents])
    while len(result.ends) < len(jobs):
        while due and due[0][0] <= now:
            _, _, key = heapq.heappop(due)
            job, site = by_key[key], result.sites[key]
            routed[site] -= 1
            task = Task(("dag", key), job.size, job.estimate or job.run, now, job.run)
            sites[site].submit(task, since=result.began if early else None)
            result.submits[key] = now
            waiting.append((key, task))
        still = []
        for key, task in waiting:
            if task.start is None:
                still.append((key, task))
            else:
                result.starts[key] = task.start
                heapq.heappush(running, (task.start + task.run, key))
        waiting = still
        ready: List[str] = []
        while running and running[0][0] <= now:
            end, key = heapq.heappop(running)
            result.ends[key] = end
            for child in children[key]:
                missing[child] -= 1
                if missing[child] == 0:
                    ready.append(child)
        if ready:
            route(ready)
            continue
        if len(result.ends) == len(jobs):
            break
        if not (due or waiting or running):
            raise ValueError("some jobs can never be ready: their parents depend on each other")
        upcoming = [t for t in (sim.next_event_time() for sim in sites.values()) if t is not None]
        if due:
            upcoming.append(due[0][0])
        if not upcoming:
            raise RuntimeError("the workflow's jobs wait but nothing runs or ends: stalled")
        now = min(upcoming)
        for sim in sites.values():
            sim.advance_to(now)
    return result
