"""The buyer's trade-off between money and time: ``α·norm(cost) + (1−α)·norm(time)``.

Singh's thesis weighs the two with one factor α in [0, 1] wherever a buyer picks among
alternatives: a site's priced starts (ch. 5, where the cost is the fee and the time the start),
a plan of the Pareto set (ch. 4, eq. 15) and a task's offers across sites (ch. 7, Figure 51,
where the time is the finish). Each figure is normalised by the least and greatest among the
candidates, so that neither unit dominates; α = 1 is the cheapest, α = 0 the soonest. The agent
and the client both choose this way, so the rule lives here once.
"""

from __future__ import annotations

from typing import Sequence


def normalised(value: float, values: Sequence[float]) -> float:
    """``value`` on the scale of ``values``: 0 at their least, 1 at their greatest (0 if they
    are all equal)."""
    low, high = min(values), max(values)
    return 0.0 if high == low else (value - low) / (high - low)


def check_alpha(alpha: float) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")


def choose(costs: Sequence[float], times: Sequence[float], alpha: float) -> int:
    """Index of the candidate minimising ``α·norm(cost) + (1−α)·norm(time)``; on a tie the
    soonest, then the first."""
    if not costs or len(costs) != len(times):
        raise ValueError("no alternatives to choose from")
    check_alpha(alpha)
    scores = [
        alpha * normalised(c, costs) + (1 - alpha) * normalised(t, times)
        for c, t in zip(costs, times)
    ]
    best = min(scores)
    return min((i for i, score in enumerate(scores) if score == best), key=lambda i: times[i])
