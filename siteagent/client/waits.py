"""Reading a site's published queue-wait bounds (``GET /v1/history/waits``).

Each bin of the answer covers a range of cores and of walltime limits and publishes, per
quantile q, a wait that at least a fraction q of such jobs stay under, with a stated confidence
(QBETS, :mod:`siteagent.core.qbets`). Asked for a probability p, the tightest usable bound is
the one of the smallest published quantile at least p that the bin could bound.
"""

from __future__ import annotations

from typing import Optional

from siteagent.protocol.models import WaitBinView, WaitHistory


def holds(bin_: WaitBinView, cores: int, walltime: int) -> bool:
    """Whether a job of ``cores`` asking ``walltime`` seconds falls in the bin."""
    cores_lo, cores_hi = bin_.cores
    wall_lo, wall_hi = bin_.walltime_s
    in_cores = (cores_lo or 1) <= cores and (cores_hi is None or cores <= cores_hi)
    in_wall = walltime > (wall_lo or 0) and (wall_hi is None or walltime <= wall_hi)
    return in_cores and in_wall


def bin_bound(bin_: WaitBinView, probability: float) -> Optional[int]:
    """The bin's tightest bound on the wait that holds with at least ``probability``."""
    bounds = [
        b.upper_bound_s
        for b in bin_.wait_bounds
        if b.quantile >= probability and b.upper_bound_s is not None
    ]
    return min(bounds) if bounds else None


def wait_bound(
    history: WaitHistory, cores: int, walltime: int, probability: float
) -> Optional[int]:
    """The bound for a job of ``cores`` and ``walltime`` at ``probability``; None if its bin
    publishes none (too few waits, or an agent without bounds)."""
    for bin_ in history.bins:
        if holds(bin_, cores, walltime):
            return bin_bound(bin_, probability)
    return None
