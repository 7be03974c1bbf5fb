"""What a provisioning plan is made of, and how data moves between sites.

A plan places each task of a workflow on a site for a window at a cost (allocation cost, AC)
and finishes at some time after planning began (makespan, the thesis' scheduling cost SC):
the two objectives every planner here trades against each other (Singh, thesis ch. 4.2).
Times are epoch seconds, costs Decimal in the sites' currency, as the agents quote them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Optional, Tuple

from siteagent.core.errors import SiteagentError
from siteagent.protocol.errors import NO_PLAN


@dataclass(frozen=True)
class Network:
    """How long a parent's output takes to reach a child on another site: ``latency_s`` plus
    the bytes over ``bytes_per_s``, without contention (thesis ch. 4.9: 10 Gbps, 150 s); no
    time on the same site, or when nothing is sent."""

    bytes_per_s: float
    latency_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.bytes_per_s > 0 or self.latency_s < 0:
            raise ValueError("the bandwidth must be positive and the latency not negative")

    def transfer_s(self, size: int, same_site: bool) -> int:
        """Whole seconds for ``size`` bytes to arrive (rounded up)."""
        if same_site or size <= 0:
            return 0
        return math.ceil(self.latency_s + size / self.bytes_per_s)


@dataclass(frozen=True)
class TaskPlacement:
    """Where and when one task runs, and what its reservation costs. ``site`` is None for a
    structural task (an ensemble's entry or exit), which runs nowhere and costs nothing."""

    task: str
    site: Optional[str]
    start: int
    finish: int
    cost: Decimal


@dataclass(frozen=True)
class ProvisioningPlan:
    """Every task's placement (in the order they were planned), the total cost, and the
    makespan: from ``began`` (when planning started) to the last finish."""

    placements: Tuple[TaskPlacement, ...]
    began: int

    @property
    def cost(self) -> Decimal:
        return sum((p.cost for p in self.placements), Decimal(0))

    @property
    def makespan(self) -> int:
        return max((p.finish for p in self.placements), default=self.began) - self.began

    def placement(self, task: str) -> TaskPlacement:
        for p in self.placements:
            if p.task == task:
                return p
        raise KeyError(task)


class PlanningError(SiteagentError, ValueError):
    """No plan: a task no site can run, or no site offers a window for."""

    code = NO_PLAN
