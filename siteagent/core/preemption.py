"""Absolute priorities (Baranov et al., docs/design.md §4.6): which running work a job of higher
priority suspends.

A job may suspend running jobs of strictly lower priority; a suspended job keeps what it has
done and resumes, with what remains of its run, when capacity frees. The victims are taken
lowest priority first and, among equals, the latest started first (Slurm's
``PreemptParameters=youngest_first``), until the job fits. The scheduling engines
(:mod:`siteagent.core.engines`) and a site's bid for capacity held by lower-priority work
(:mod:`siteagent.pricing.bids`) both take them in this order.
"""

from __future__ import annotations

import enum
from typing import Tuple


class Preemption(str, enum.Enum):
    """How a site's batch system treats running work a higher-priority job needs: ``none``
    (it waits), ``suspend`` (suspended, it resumes with what remains) or ``requeue`` (put back
    in the queue, it starts over: Slurm's ``PreemptMode=REQUEUE``)."""

    NONE = "none"
    SUSPEND = "suspend"
    REQUEUE = "requeue"


def victim_order(priority: int, start: int) -> Tuple[int, int]:
    """The sort key of a running job as a victim: lowest priority, then latest start, first."""
    return (priority, -start)
