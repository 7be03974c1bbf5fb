"""One cycle's view of the cluster, shared by everything the agent serves until the next cycle.

The loop (:mod:`siteagent.agent.loop`) makes a :class:`CycleState` per poll; the API, the metrics
and the command line read it, so that a burst of requests never multiplies the planning work.
"""

from __future__ import annotations

from dataclasses import dataclass

from siteagent.core.prediction import Plan
from siteagent.core.values import ClusterSnapshot
from siteagent.market.view import MarketView


@dataclass(frozen=True)
class CycleState:
    """One cycle's market view of the cluster (snapshot, predicted plan, pricing context,
    slots), when the snapshot was taken on the agent's clock, and how long the snapshot and
    the plan took."""

    market: MarketView
    taken_at: float
    snapshot_s: float
    plan_s: float

    @property
    def snapshot(self) -> ClusterSnapshot:
        return self.market.snapshot

    @property
    def plan(self) -> Plan:
        return self.market.plan

    @property
    def busy(self) -> int:
        """Units in use now (running jobs and active reservations)."""
        return self.snapshot.capacity - self.plan.profile.free_at(self.snapshot.now)
