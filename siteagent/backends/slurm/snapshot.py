"""The planner's view of the configured Slurm partition, from what the clients reported."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Sequence

from siteagent.backends.scope import Scope
from siteagent.backends.slurm.config import SlurmConfig
from siteagent.backends.slurm.hostlist import expand_hostlist
from siteagent.backends.slurm.jobs import SlurmJobs
from siteagent.core.model import BatchReservation, ClusterSnapshot, Job, NodeState


def nodes_in_partition(nodes: Iterable[NodeState], partition: str) -> List[NodeState]:
    """The nodes of ``partition`` (every node if none is configured)."""
    return [n for n in nodes if not partition or partition in n.partitions]


def node_cores(nodes: Iterable[NodeState], partition: str) -> int:
    """The cores of a whole node of the partition (the largest usable one's, else any one's):
    what a pending ``--exclusive`` job takes per node."""
    scope = nodes_in_partition(nodes, partition)
    usable = [n for n in scope if n.usable]
    return max((n.cores for n in usable or scope), default=1)


def build_snapshot(
    now: int,
    nodes: Sequence[NodeState],
    jobs: SlurmJobs,
    reservations: Sequence[BatchReservation],
    config: SlurmConfig,
    layout: str = "",
) -> ClusterSnapshot:
    """Assemble the planner's view, limited to the configured partition.

    Capacity and running jobs are counted as :class:`~siteagent.backends.scope.Scope` says.
    Reservations count when they touch a node of the partition.
    """
    scope = Scope(tuple(nodes_in_partition(nodes, config.partition)), config.unit)

    def in_partition(job: Job) -> bool:
        return not config.partition or config.partition in job.partition.split(",")

    running, dropped = scope.running(jobs.running, jobs.nodes_of, in_partition)
    pending = [j for j in jobs.pending if in_partition(j)]
    names = scope.names
    held = [
        r
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
    return scope.snapshot(now, running, pending, held, "slurm", extra)
