"""One cycle's view of the cluster, shared by everything the agent serves until the next cycle.

The loop (:mod:`siteagent.agent.loop`) makes a :class:`State` per poll; the API, the metrics
and the command line read it, so that a burst of requests never multiplies the planning work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from siteagent.core.model import ClusterSnapshot
from siteagent.core.scheduling import Plan

if TYPE_CHECKING:
    pass



@dataclass(frozen=True)
class State:
    """One cycle's view of the cluster: the snapshot, its predicted plan, and timings."""

    snapshot: ClusterSnapshot
    plan: Plan
    taken_at: float
    snapshot_s: float
    plan_s: float

    @property
    def busy(self) -> int:
        """Units in use now (running jobs and active reservations)."""
        return self.snapshot.capacity - self.plan.profile.free_at(self.snapshot.now)
