"""The daemon loop: refresh the snapshot, predict the schedule, publish, sleep, repeat.

Everything the agent serves (slots, quotes, metrics) is read from the latest :class:`State`,
computed once per cycle, so that a burst of requests never multiplies the planning work and a
slow batch system never blocks a request: readers see the last good state and its age.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

from siteagent.backends.base import Backend, BackendError
from siteagent.model import ClusterSnapshot
from siteagent.scheduling import Plan, Policy, plan

log = logging.getLogger("siteagent.agent")


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


class Agent:
    """Keeps a fresh :class:`State` of one cluster, polling its backend."""

    def __init__(
        self,
        backend: Backend,
        policy: Policy = Policy.CONSERVATIVE,
        poll_interval_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if poll_interval_s <= 0:
            raise ValueError(f"poll interval must be > 0 s, got {poll_interval_s}")
        self.backend = backend
        self.policy = Policy(policy)
        self.poll_interval_s = poll_interval_s
        self._clock = clock
        self.state: Optional[State] = None
        self.last_error: Optional[str] = None

    def refresh(self) -> State:
        """Take a snapshot and plan it; raises BackendError when the batch system fails."""
        began = self._clock()
        snapshot = self.backend.snapshot()
        taken = self._clock()
        predicted = plan(snapshot, self.policy)
        done = self._clock()
        self.state = State(snapshot, predicted, taken, taken - began, done - taken)
        self.last_error = None
        return self.state

    def cycle(self) -> Optional[State]:
        """One poll: refresh, log what was seen, keep the last good state on failure."""
        try:
            state = self.refresh()
        except BackendError as exc:
            self.last_error = str(exc)
            log.error(
                "backend %s failed: %s (keeping the state from before)", self.backend.name, exc
            )
            return None
        log.info(describe(state))
        return state

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set."""
        log.info(
            "agent started: backend %s, policy %s, polling every %.0f s",
            self.backend.name,
            self.policy.value,
            self.poll_interval_s,
        )
        while not stop.is_set():
            self.cycle()
            stop.wait(self.poll_interval_s)
        log.info("agent stopped")


def describe(state: State) -> str:
    """One log line an administrator can read at a glance."""
    snapshot, predicted = state.snapshot, state.plan
    upcoming = sorted(predicted.starts.values())
    next_start = (
        f"next pending start in {max(upcoming[0] - snapshot.now, 0) // 60} min"
        if upcoming
        else "queue empty"
    )
    return (
        f"{len(snapshot.running)} running, {len(snapshot.pending)} pending, "
        f"{state.busy}/{snapshot.capacity} {snapshot.unit.value}s busy, "
        f"{len(snapshot.reservations)} reservations; {next_start}; "
        f"snapshot {state.snapshot_s * 1000:.0f} ms, plan {state.plan_s * 1000:.0f} ms"
    )
