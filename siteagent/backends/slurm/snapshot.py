"""The planner's view of the configured Slurm partition, from what the clients reported."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterable, List, Mapping, Sequence, Set

from siteagent.backends.scope import Scope
from siteagent.backends.slurm.config import SlurmConfig
from siteagent.backends.slurm.hostlist import expand_hostlist
from siteagent.backends.slurm.jobs import SlurmJobs
from siteagent.backends.slurm.scheduler import SchedulerSettings
from siteagent.core.values import (
    Allocation,
    BatchReservation,
    ClusterSnapshot,
    Job,
    Neighbours,
    NodeState,
)

#: Where the controller's configuration is not read: the pooled plan.
POOLED = SchedulerSettings()


def nodes_in_partition(nodes: Iterable[NodeState], partition: str) -> List[NodeState]:
    """The nodes of ``partition`` (every node if none is configured)."""
    return [n for n in nodes if not partition or partition in n.partitions]


def node_cores(nodes: Iterable[NodeState], partition: str) -> int:
    """The cores of a whole node of the partition (the largest usable one's, else any one's):
    what a pending ``--exclusive`` job takes per node."""
    scope = nodes_in_partition(nodes, partition)
    usable = [n for n in scope if n.usable]
    return max((n.cores for n in usable or scope), default=1)


#: slurmctld refuses a CoreCnt or NodeCnt reservation on nodes whose running job's limit ends
#: at its very start second, in 22.05 to 26.05 alike (reservation.c ``_select_nodes``: a job
#: with ``end_time < start_time`` is the only one left out); docs/slurm.md §6.1.
END_MARGIN_S = 1


def build_snapshot(
    now: int,
    nodes: Sequence[NodeState],
    jobs: SlurmJobs,
    reservations: Sequence[BatchReservation],
    config: SlurmConfig,
    layout: str = "",
    settings: SchedulerSettings = POOLED,
) -> ClusterSnapshot:
    """Assemble the planner's view, limited to the configured partition.

    Capacity and running jobs are counted as :class:`~siteagent.backends.scope.Scope` says.
    Reservations count when they touch a node of the partition. Every running job and
    reservation gets the cores it holds on each node (:func:`allocations`,
    :func:`reservation_allocation`), and what the partitions sharing its nodes do comes along
    as ``neighbours``: the node-aware plan needs both.
    """
    scope = Scope(tuple(nodes_in_partition(nodes, config.partition)), config.unit)
    placed = allocations(jobs, nodes)
    all_running = [dataclasses.replace(job, allocation=placed[job.id]) for job in jobs.running]

    def in_partition(job: Job) -> bool:
        return not config.partition or config.partition in job.partition.split(",")

    running, dropped = scope.running(all_running, jobs.nodes_of, in_partition)
    pending = [j for j in jobs.pending if in_partition(j)]
    names = scope.names
    cores = {node.name: node.cores for node in nodes}
    held = [
        dataclasses.replace(r, allocation=reservation_allocation(r, cores))
        for r in reservations
        if r.end > now
        and (
            not config.partition
            or r.partition == config.partition
            or set(expand_hostlist(r.node_list)) & names
        )
    ]
    extra: Dict[str, Any] = {
        "layout": layout,
        "array_throttle": dict(jobs.array_throttle),
        "running_on_unusable_nodes": dropped,
        "finished_jobs_ignored": jobs.finished,
    }
    snapshot = scope.snapshot(now, running, pending, held, "slurm", extra)
    return dataclasses.replace(
        snapshot,
        placement=settings.placement,
        backfill=settings.backfill,
        neighbours=neighbours(nodes, all_running, jobs, config.partition),
        end_margin=END_MARGIN_S,
    )


def neighbours(
    nodes: Sequence[NodeState], running: Sequence[Job], jobs: SlurmJobs, partition: str
) -> Neighbours:
    """The partitions sharing a node with ``partition``: their other nodes, the jobs running
    only there (of ``running``), and their pending jobs."""
    if not partition:
        return Neighbours()
    ours = {n.name for n in nodes if partition in n.partitions}
    others: Set[str] = set()
    for node in nodes:
        if node.name in ours:
            others.update(node.partitions)
    others.discard(partition)
    if not others:
        return Neighbours()
    theirs = [n for n in nodes if n.name not in ours and others & set(n.partitions)]
    names = {n.name for n in theirs}
    return Neighbours(
        nodes=tuple(theirs),
        running=tuple(
            job
            for job in running
            if jobs.nodes_of.get(job.id) and set(jobs.nodes_of[job.id]) <= names
        ),
        pending=tuple(
            job
            for job in jobs.pending
            if partition not in job.partition.split(",") and others & set(job.partition.split(","))
        ),
    )


def allocations(jobs: SlurmJobs, nodes: Sequence[NodeState]) -> Dict[str, Allocation]:
    """The cores each running job holds on each of its nodes.

    ``squeue --json`` says it; the text form used for an accept's re-check does not, and then
    the nodes' allocated CPUs tell: a job alone on a node, or on one node, holds what it
    holds there; a job sharing its nodes with others holds, on each node whose share cannot be
    told apart, at most all that the node has allocated and the job still owes (never less
    than the truth, so that a reservation is never placed on cores that are not free).
    """
    placed: Dict[str, Allocation] = {}
    left = {node.name: node.alloc_cores for node in nodes}
    open_jobs: List[Job] = []
    for job in jobs.running:
        on = jobs.nodes_of.get(job.id, [])
        if job.allocation:
            placed[job.id] = job.allocation
        elif len(on) == 1:
            placed[job.id] = ((on[0], job.cores),)
        else:
            open_jobs.append(job)
            continue
        for name, cores in placed[job.id]:
            left[name] = left.get(name, 0) - cores
    sharing: Dict[str, int] = {}
    for job in open_jobs:
        for name in jobs.nodes_of.get(job.id, []):
            sharing[name] = sharing.get(name, 0) + 1
    for job in open_jobs:
        share = []
        for name in jobs.nodes_of.get(job.id, []):
            alone = left.get(name, 0) if sharing[name] == 1 else min(job.cores, left.get(name, 0))
            share.append((name, max(1, alone)))
        placed[job.id] = tuple(share)
    return placed


def reservation_allocation(res: BatchReservation, cores: Mapping[str, int]) -> Allocation:
    """The cores ``res`` holds on each of its nodes: as Slurm listed them, or all of each
    node's when it holds whole nodes, or its count on its one node; a core reservation over
    several nodes whose split Slurm does not show holds, on each node, as much of its total
    as the node has (never less than the truth)."""
    if res.allocation:
        return res.allocation
    names = [name for name in res.node_names if name in cores]
    whole = sum(cores[name] for name in names)
    if len(names) == 1 and res.cores < whole:
        return ((names[0], res.cores),)
    if not res.cores or res.cores >= whole:
        return tuple((name, cores[name]) for name in names)
    return tuple((name, min(res.cores, cores[name])) for name in names)
