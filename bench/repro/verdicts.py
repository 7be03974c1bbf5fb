"""A verdict per report row: match, trend or differs (with a measured why), as
issue 30's reproduction spec defines them.

- **match**: the paper's value lies in our confidence interval, or our value lies within the
  row's tolerance (paper_values.yaml);
- **trend**: the CI of our paired change (after − before) excludes 0 in the paper's direction;
- **differs**: anything else; the report must then say why, from a measurement.

Two more are not results: **n/a** (the paper's data or hardware is gone) and **not run** (this
run left the row out, e.g. ``--quick``); both need a why too. See docs/reproductions.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from bench.repro.paper_values import PaperValue
from bench.repro.stats import Estimate

MATCH, TREND, DIFFERS, NOT_AVAILABLE, NOT_RUN = "match", "trend", "differs", "n/a", "not run"
VERDICTS = (MATCH, TREND, DIFFERS, NOT_AVAILABLE, NOT_RUN)
#: Verdicts a report must explain.
NEED_WHY = (DIFFERS, NOT_AVAILABLE, NOT_RUN)


@dataclass(frozen=True)
class Verdict:
    """The verdict and the reason (required for differs, n/a and not run)."""

    verdict: str
    why: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}, got {self.verdict!r}")


def judge(
    paper: PaperValue,
    ours: Optional[Estimate] = None,
    point: Optional[str] = None,
    change: Optional[Estimate] = None,
    why: str = "",
) -> Verdict:
    """match if ``ours`` agrees with the paper's value at ``point`` (CI or tolerance); else
    trend if ``change`` (paired, after − before) goes the paper's ``direction`` with a CI
    that excludes 0; else differs, with ``why`` (the report refuses a differs without one)."""
    if ours is not None and paper.values:
        value = paper.value(point)
        low, high = paper.band(point)
        if ours.contains(value) or low <= ours.value <= high:
            return Verdict(MATCH, why)
    if change is not None:
        if paper.direction is None:
            raise ValueError(f"{paper.id} states no direction: a trend cannot be judged")
        if change.excludes_zero(paper.direction):
            return Verdict(TREND, why)
    if ours is None and change is None:
        raise ValueError(f"{paper.id}: judge needs our estimate, our paired change, or both")
    return Verdict(DIFFERS, why)
