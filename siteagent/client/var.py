"""Virtual advance reservations: when to submit so that a job is running by a given time.

Singh's thesis (ch. 6, Figure 33, after Nurmi et al.'s VARQ) reserves without the site's help:
submit an ordinary job early enough that, with the wanted probability, the queue has started it
by the desired time, and ask for the lead on top of the walltime, so that the job still runs
``walltime`` seconds after the desired start if it starts at once. The thesis scans submission
times and asks QBETS the probability at each; with the bounds a site publishes per bin it is
closed-form: a lead L works when the bound of the bin a job of ``walltime + L`` falls in is at
most L, and the latest submission is the desired start less the least such L. The probability
holds with the bounds' confidence (95% by default). :func:`scan_submission` is the thesis' own
scan, for any estimate of the probability.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Tuple

from siteagent.client.waits import bin_bound, holds
from siteagent.protocol.models import WaitHistory


@dataclass(frozen=True)
class Submission:
    """Submit at ``submit_at`` a job asking ``walltime`` seconds (the lead included)."""

    submit_at: int
    walltime: int


def latest_submission(
    history: WaitHistory,
    cores: int,
    walltime: int,
    start_by: int,
    probability: float,
    now: int,
) -> Optional[Submission]:
    """The latest submission at which a job of ``cores`` that must run ``walltime`` seconds
    starts by ``start_by`` with at least ``probability``; None if no bin bounds the wait that
    tightly or the submission would have to be before ``now``."""
    lead = least_lead(history, cores, walltime, probability)
    if lead is None or start_by - lead < now:
        return None
    return Submission(start_by - lead, walltime + lead)


def least_lead(
    history: WaitHistory, cores: int, walltime: int, probability: float
) -> Optional[int]:
    """The least lead L (seconds between submission and the desired start) such that a job
    of ``cores`` asking ``walltime + L`` starts within L with at least ``probability``; None
    if no bin bounds the wait at that probability (too few waits, or no bin for the job)."""
    if not 0.0 < probability < 1.0:
        raise ValueError(f"the probability must be in (0, 1), got {probability}")
    leads = []
    for bin_ in history.bins:
        bound = bin_bound(bin_, probability)
        if bound is None:
            continue
        lead = max(bound, (bin_.walltime_s[0] or 0) + 1 - walltime, 0)  # into the bin's range
        if holds(bin_, cores, walltime + lead):
            leads.append(lead)
    return min(leads) if leads else None


#: The thesis' scan step (Figure 33: "Increment = 30").
SCAN_STEP_S = 30


def scan_submission(
    probability: Callable[[int, int], float],
    walltime: int,
    start_by: int,
    now: int,
    step: int = SCAN_STEP_S,
) -> Tuple[Submission, float]:
    """The thesis' Figure 33: try submitting every ``step`` seconds from ``now`` until
    ``start_by``, asking at each time t for the job's walltime plus the lead ``start_by − t``,
    and keep the t where ``probability(asked walltime, start_by − t)`` (the chance a job asking
    that long starts within that long) is highest, the earliest on ties; with that
    probability. A scan that finds no chance at all submits now, as the thesis' does."""
    if step <= 0:
        raise ValueError(f"the scan step must be positive, got {step}")
    best, best_p = Submission(now, walltime + max(start_by - now, 0)), 0.0
    for t in range(now, start_by, step):
        lead = start_by - t
        p = probability(walltime + lead, lead)
        if p > best_p:
            best, best_p = Submission(t, walltime + lead), p
    return best, best_p
