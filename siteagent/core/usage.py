"""What the jobs that ran in a reservation used, and how much of what was sold that is.

A site sells capacity for a window; whether the buyer used it is the other half of the story:
a reservation bought and left empty held cores the queue could have used, and a site that
sees many of those prices or sizes them differently. The figures are counted in the
reservation's own unit (cores, or whole nodes on a partition that allocates them) and in
core-hours, within the reservation's window only: a job's time before the window (it cannot
have any) or after it (an overrun) is not what was sold.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Optional, Tuple

from siteagent.core.values import CapacityUnit


class UsageSource(str, enum.Enum):
    """Where a reservation's job figures come from: the agent's polls (a job's end is known
    to within one poll interval, a job that started and ended between two polls is missed),
    or the batch system's accounting (exact)."""

    POLL = "poll"
    ACCOUNTING = "accounting"


@dataclass(frozen=True)
class JobUsage:
    """One job that ran in a reservation: the ``cores`` and ``nodes`` it held from ``start``
    until ``end`` (None while it runs), by the batch system's clock."""

    job_id: str
    user: str
    cores: int
    nodes: int
    start: int
    end: Optional[int] = None

    def demand(self, unit: CapacityUnit) -> int:
        """What the job held in ``unit``: its cores, or its whole nodes."""
        return max(1, self.nodes) if unit is CapacityUnit.NODE else self.cores

    def seconds_within(self, start: int, end: int, now: int) -> int:
        """Seconds it held its share inside [start, end); a running job counts up to ``now``."""
        stop = self.end if self.end is not None else now
        return max(0, min(stop, end) - max(self.start, start))


@dataclass(frozen=True)
class Usage:
    """A reservation's jobs and what they used of it: ``used_unit_seconds`` of the
    ``sold_unit_seconds`` (size x window), ``core_seconds`` in all. ``final`` once the window
    is over and the figures will not change."""

    jobs: Tuple[JobUsage, ...]
    unit: CapacityUnit
    used_unit_seconds: int
    sold_unit_seconds: int
    core_seconds: int
    source: UsageSource
    final: bool

    @property
    def core_hours(self) -> float:
        return self.core_seconds / 3600

    @property
    def utilization(self) -> float:
        """The share of what was sold that jobs used, 0 for a reservation left empty."""
        return self.used_unit_seconds / self.sold_unit_seconds if self.sold_unit_seconds else 0.0

    def to_json(self) -> Dict[str, Any]:
        """The figures as the API and ``siteagent reservations show --json`` give them."""
        return {
            "jobs": [
                {
                    "id": job.job_id,
                    "user": job.user,
                    "cores": job.cores,
                    "nodes": job.nodes,
                    "start": job.start,
                    "end": job.end,
                }
                for job in self.jobs
            ],
            "core_hours": round(self.core_hours, 4),
            "used_unit_hours": round(self.used_unit_seconds / 3600, 4),
            "sold_unit_hours": round(self.sold_unit_seconds / 3600, 4),
            "utilization": round(self.utilization, 4),
            "source": self.source.value,
            "final": self.final,
        }


def usage_of(
    jobs: Iterable[JobUsage],
    unit: CapacityUnit,
    size: int,
    start: int,
    end: int,
    now: int,
    source: UsageSource,
    final: bool,
) -> Usage:
    """What ``jobs`` used of a reservation of ``size`` units over [start, end), as of ``now``
    (the part of the window still to come is sold, not yet used)."""
    ordered = tuple(sorted(jobs, key=lambda job: (job.start, job.job_id)))
    used = sum(job.demand(unit) * job.seconds_within(start, end, now) for job in ordered)
    cores = sum(job.cores * job.seconds_within(start, end, now) for job in ordered)
    return Usage(
        jobs=ordered,
        unit=unit,
        used_unit_seconds=used,
        sold_unit_seconds=size * max(0, end - start),
        core_seconds=cores,
        source=source,
        final=final,
    )
