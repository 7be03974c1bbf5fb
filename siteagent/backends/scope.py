"""The part of a cluster a backend serves (a partition, a queue), and the planner's view of it.

Backends read nodes, jobs and reservations in their own words; what they serve is then
assembled the same way: capacity counts usable nodes only (not down, drained, failed or not
responding), and running jobs are kept if they belong to the scope or run on its nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Mapping, Sequence, Tuple

from siteagent.core.values import BatchReservation, CapacityUnit, ClusterSnapshot, Job, NodeState


@dataclass(frozen=True)
class Scope:
    """The nodes a backend serves, and the capacity they give in ``unit``."""

    nodes: Tuple[NodeState, ...]
    unit: CapacityUnit

    @property
    def names(self) -> FrozenSet[str]:
        return frozenset(n.name for n in self.nodes)

    @property
    def usable_names(self) -> FrozenSet[str]:
        return frozenset(n.name for n in self.nodes if n.usable)

    @property
    def capacity(self) -> int:
        """Usable nodes, or their cores: what new work may use."""
        if self.unit is CapacityUnit.NODE:
            return len(self.usable_names)
        return sum(n.cores for n in self.nodes if n.usable)

    @property
    def cores_per_node(self) -> int:
        """The largest usable node's cores (1 without any)."""
        return max((n.cores for n in self.nodes if n.usable), default=1) or 1

    def running(
        self,
        jobs: Iterable[Job],
        nodes_of: Mapping[str, Sequence[str]],
        belongs: Callable[[Job], bool],
    ) -> Tuple[List[Job], List[str]]:
        """The running jobs of the scope, and the ids of those left out as out of service.

        A job is the scope's if ``belongs`` says so (its partition, its queue) or it runs on a
        node of the scope. One whose nodes are all out of service is left out, as their cores
        are not in the capacity either; a job on both kinds of node stays (the planner then
        sees slightly less free capacity, never more).
        """
        names, usable = self.names, self.usable_names
        kept: List[Job] = []
        dropped: List[str] = []
        for job in jobs:
            on = set(nodes_of.get(job.id, ()))
            if not (belongs(job) or on & names):
                continue
            if on and not on & usable:
                dropped.append(job.id)
                continue
            kept.append(job)
        return kept, dropped

    def snapshot(
        self,
        now: int,
        running: Iterable[Job],
        pending: Iterable[Job],
        reservations: Iterable[BatchReservation],
        backend: str,
        extra: Dict[str, Any],
    ) -> ClusterSnapshot:
        return ClusterSnapshot(
            now=now,
            capacity=self.capacity,
            running=tuple(running),
            pending=tuple(pending),
            reservations=tuple(reservations),
            nodes=self.nodes,
            unit=self.unit,
            cores_per_node=self.cores_per_node,
            backend=backend,
            extra=extra,
        )
