"""How close the planner's own predicted starts come to the batch system's published ones.

Slurm's backfill publishes an expected start for the pending jobs it looked at
(docs/slurm.md §4). ``plan`` uses those where present (Source.BATCH) and predicts the rest;
comparing ``plan(..., batch_estimates=False)`` with the published starts on the same snapshot
says how much the prediction can be trusted where Slurm publishes nothing. Both the integration
tests and ``python -m bench slurm`` measure agreement with this one function.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from siteagent.core.engines import Policy
from siteagent.core.prediction import plan
from siteagent.core.values import ClusterSnapshot

#: Slurm's backfill works on a grid of ``bf_resolution`` seconds (default 60): starts that do
#: not follow from a running job's exact end are rounded to it, so one minute is the natural
#: tolerance for "the same start".
DEFAULT_TOLERANCE_S = 60


@dataclass(frozen=True)
class StartPair:
    """One pending job's start as the batch system published it and as the planner predicts it."""

    job_id: str
    published: int
    predicted: int

    @property
    def difference(self) -> int:
        """Predicted minus published, in seconds (positive: we expect it later)."""
        return self.predicted - self.published


@dataclass(frozen=True)
class Agreement:
    """The pairs compared, and the pending jobs left out (no published start, or unplanned)."""

    policy: Policy
    pairs: List[StartPair]
    without_estimate: int
    unplanned: int

    def fraction_within(self, seconds: int) -> float:
        """Share of compared jobs whose starts differ by at most ``seconds`` (NaN: none)."""
        if not self.pairs:
            return float("nan")
        return sum(1 for p in self.pairs if abs(p.difference) <= seconds) / len(self.pairs)

    @property
    def median_abs_difference_s(self) -> float:
        if not self.pairs:
            return float("nan")
        return float(statistics.median(abs(p.difference) for p in self.pairs))

    @property
    def max_abs_difference_s(self) -> Optional[int]:
        return max((abs(p.difference) for p in self.pairs), default=None)

    def summary(self) -> Dict[str, Any]:
        """The figures a report shows: counts, fraction equal / within 1 min, median and max."""
        return {
            "policy": self.policy.value,
            "compared": len(self.pairs),
            "without_estimate": self.without_estimate,
            "unplanned": self.unplanned,
            "fraction_equal": self.fraction_within(0),
            "fraction_within_1_min": self.fraction_within(DEFAULT_TOLERANCE_S),
            "median_abs_difference_s": self.median_abs_difference_s,
            "max_abs_difference_s": self.max_abs_difference_s,
        }


def compare_starts(snapshot: ClusterSnapshot, policy: Policy = Policy.CONSERVATIVE) -> Agreement:
    """Pair every pending job that has a published start with the planner's own prediction."""
    predicted = plan(snapshot, policy, batch_estimates=False)
    unplanned = set(predicted.unplanned)
    pairs = []
    without = 0
    for job in snapshot.pending:
        if job.id in unplanned:
            continue
        if job.expected_start is None:
            without += 1
            continue
        pairs.append(StartPair(job.id, job.expected_start, predicted.starts[job.id]))
    return Agreement(Policy(policy), pairs, without, len(unplanned))
