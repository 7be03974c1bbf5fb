"""A poll's plan planned again with one more reservation: the externality fee's question.

A fee (docs/design.md §4.3) compares every queued job's planned start without and with a
window reserved, and a quote asks it for up to 100 windows against the same poll's plan. What
does not depend on the window is prepared once per poll, here:

- a conservative plan placed in one pass re-uses its placements (``replan_from``): the jobs
  before the first whose window overlaps the new one keep their starts, so the re-plan starts
  at that job, from a checkpoint of the profile (running work, reservations and the jobs
  before it) kept every ``spacing`` jobs and built as far as fees need them;
- any other pooled plan (EASY, FCFS, conservative with jobs joining later) forks the running
  work and reservations already on an engine (``groundwork``): only the prediction runs again;
- a plan on nodes is planned from scratch.

Every path gives exactly ``plan(snapshot, policy, [window]).starts`` (tests/unit/test_replan.py).
"""

from __future__ import annotations

import threading
from typing import Dict, List, Optional, Tuple

from siteagent.core.engines import FitBound, Policy
from siteagent.core.prediction import (
    Groundwork,
    Plan,
    groundwork,
    on_nodes,
    plan,
    replan_from,
    starts_with_reservation,
)
from siteagent.core.profile import Profile
from siteagent.core.values import ClusterSnapshot

#: Checkpoints per plan at most: each is a copy of the profile's lists (the times themselves
#: are shared), so a 100,000-job plan keeps a few tens of MB while fees are asked of it.
CHECKPOINTS = 16


class Replanner:
    """One poll's plan (``base``, with ``hard``, its free capacity without the queue), ready to
    be planned again with any one more reservation."""

    def __init__(self, snapshot: ClusterSnapshot, base: Plan, hard: Profile) -> None:
        self.snapshot = snapshot
        self.base = base
        self.hard = hard
        jobs = len(base.starts)
        self.spacing = max(128, -(-jobs // CHECKPOINTS))
        # (jobs placed, profile with them, their fits), every ``spacing`` jobs from the first
        self._checkpoints: List[Tuple[int, Profile, FitBound]] = [(0, hard, FitBound())]
        self._ground: Optional[Groundwork] = None
        self._lock = threading.Lock()  # the API prices on its event loop and a thread

    def starts(self, start: int, end: int, size: int) -> Dict[str, int]:
        """Each queued job's planned start with ``size`` units reserved over [start, end);
        ReservationConflict if running work or reservations leave no room for it."""
        base = self.base
        start = max(start, base.now)
        if base.policy is Policy.CONSERVATIVE and base.placed_at_once:
            first = self._first_disturbed(start, end)
            profile, bound = self._placed(first)
            return replan_from(base, profile, bound, first, start, end, size)
        key = ("quote", start, size, end - start)
        if not on_nodes(self.snapshot):
            with self._lock:
                if self._ground is None:
                    self._ground = groundwork(self.snapshot, base.policy)
            return starts_with_reservation(self.snapshot, self._ground, key, start, end, size)
        return plan(self.snapshot, base.policy, extra_reservations=[(key, start, end, size)]).starts

    def _first_disturbed(self, start: int, end: int) -> int:
        """The first job, in the plan's order, whose planned window overlaps [start, end)."""
        _, _, starts, holds = self.base.queue()
        for k in range(len(starts)):
            if starts[k] < end and start < starts[k] + holds[k]:
                return k
        return len(starts)

    def _placed(self, jobs: int) -> Tuple[Profile, FitBound]:
        """A new profile with the running work, reservations and the plan's first ``jobs``
        jobs at their planned starts, and those jobs' fits."""
        _, sizes, starts, holds = self.base.queue()
        checkpoints = self._checkpoints
        wanted = jobs // self.spacing
        with self._lock:
            while len(checkpoints) <= wanted:
                placed, profile, bound = checkpoints[-1]
                profile, bound = profile.copy(), bound.copy()
                upto = placed + self.spacing
                _place(profile, bound, sizes, starts, holds, placed, upto)
                checkpoints.append((upto, profile, bound))
            placed, profile, bound = checkpoints[wanted]
            profile, bound = profile.copy(), bound.copy()
        _place(profile, bound, sizes, starts, holds, placed, jobs)
        return profile, bound


def _place(
    profile: Profile,
    bound: FitBound,
    sizes: List[int],
    starts: List[int],
    holds: List[int],
    first: int,
    stop: int,
) -> None:
    """Reserve jobs [first, stop) at their planned starts, recording their fits."""
    for k in range(first, stop):
        profile.reserve(starts[k], starts[k] + holds[k], sizes[k])
        bound.found(sizes[k], holds[k], starts[k])
