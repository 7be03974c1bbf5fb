"""Queue waits: how long jobs waited before they started, grouped by core count and walltime.

A buyer deciding between a reservation and the ordinary queue needs to know what the queue
costs in time for a job like theirs; waits differ by orders of magnitude between a 1-core
1-hour job and a 512-core 2-day one, so one average says nothing. The table groups observed
waits into power-of-four core bins and walltime-limit bins and gives each bin's count, mean,
median and 90th percentile, and upper bounds on its quantiles with a stated confidence
(:mod:`siteagent.core.qbets`) over its most recent waits. The waits come from the agent's own
snapshots (the store) or from the batch system's accounting (:mod:`siteagent.backends.sacct`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from siteagent.core.qbets import BoundSettings, wait_bounds


@dataclass(frozen=True)
class QueueWait:
    """A job that started: what it asked for, and when it was submitted and when it started,
    both by the batch system's clock."""

    job_id: str
    cores: int
    walltime: int
    submit: int
    start: int

    @property
    def wait(self) -> int:
        return self.start - self.submit


#: Upper bounds (inclusive) of the core-count bins; jobs above the last form one more bin:
#: 1, 2-4, 5-16, 17-64, 65-256, 257+.
DEFAULT_CORE_BINS: Tuple[int, ...] = (1, 4, 16, 64, 256)
#: Upper bounds (inclusive) of the walltime-limit bins in seconds; longer (and unlimited) jobs
#: form one more bin: <=1 h, <=4 h, <=12 h, <=24 h, >24 h.
DEFAULT_WALLTIME_BINS_S: Tuple[int, ...] = (3600, 4 * 3600, 12 * 3600, 24 * 3600)


@dataclass(frozen=True)
class WaitBin:
    """The waits of jobs with ``cores_lo <= cores <= cores_hi`` and a walltime limit in
    ``(walltime_lo, walltime_hi]`` seconds, in the order the jobs started; a ``None`` upper
    bound means no bound."""

    cores_lo: int
    cores_hi: Optional[int]
    walltime_lo: int
    walltime_hi: Optional[int]
    waits: Tuple[int, ...] = ()

    def to_json(self, bounds: BoundSettings) -> Dict[str, Any]:
        """The bin with its statistics (None where it holds no jobs) and its wait bounds."""
        waits = sorted(self.waits)
        return {
            "cores": [self.cores_lo, self.cores_hi],
            "walltime_s": [self.walltime_lo, self.walltime_hi],
            "jobs": len(waits),
            "mean_wait_s": round(statistics.fmean(waits), 1) if waits else None,
            "median_wait_s": float(statistics.median(waits)) if waits else None,
            "p90_wait_s": percentile(waits, 90) if waits else None,
            "wait_bounds": [
                {"quantile": b.quantile, "confidence": b.confidence, "upper_bound_s": b.upper_s}
                for b in wait_bounds(self.waits, bounds)
            ],
        }


@dataclass(frozen=True)
class WaitTable:
    """Every bin (empty ones included, so that consumers see the same grid each time), the
    number of jobs binned, the source the waits came from, how many records were dropped as
    inconsistent (no start, start before submission, no cores), and how the bins' wait bounds
    are taken."""

    bins: Tuple[WaitBin, ...]
    source: str = "store"
    skipped: int = 0
    core_bins: Tuple[int, ...] = field(default=DEFAULT_CORE_BINS)
    walltime_bins_s: Tuple[int, ...] = field(default=DEFAULT_WALLTIME_BINS_S)
    bounds: BoundSettings = field(default_factory=BoundSettings)

    @property
    def jobs(self) -> int:
        return sum(len(b.waits) for b in self.bins)

    def to_json(self) -> Dict[str, Any]:
        return {
            "bins": [b.to_json(self.bounds) for b in self.bins],
            "bound_window_jobs": self.bounds.window,
            "jobs": self.jobs,
            "skipped": self.skipped,
            "source": self.source,
        }


def percentile(sorted_values: Sequence[int], pct: float) -> int:
    """Nearest-rank percentile of an ascending, non-empty sequence: a wait some job really
    had, never an interpolation between two jobs (bins are often small)."""
    rank = max(1, math.ceil(pct / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def _check_bins(bounds: Sequence[int], what: str) -> Tuple[int, ...]:
    out = tuple(bounds)
    if not out:
        raise ValueError(f"{what} bins must not be empty")
    if any(isinstance(b, bool) or not isinstance(b, int) or b <= 0 for b in out):
        raise ValueError(f"{what} bins must be positive integers, got {list(out)}")
    if any(a >= b for a, b in zip(out, out[1:])):
        raise ValueError(f"{what} bins must increase strictly, got {list(out)}")
    return out


def _index(value: int, bounds: Sequence[int]) -> int:
    """The bin of ``value``: the first upper bound it does not exceed, else the open bin."""
    for i, bound in enumerate(bounds):
        if value <= bound:
            return i
    return len(bounds)


def wait_table(
    waits: Iterable[QueueWait],
    core_bins: Sequence[int] = DEFAULT_CORE_BINS,
    walltime_bins_s: Sequence[int] = DEFAULT_WALLTIME_BINS_S,
    *,
    source: str = "store",
    bounds: Optional[BoundSettings] = None,
) -> WaitTable:
    """Group ``waits`` by core count and walltime limit.

    ``core_bins`` and ``walltime_bins_s`` are inclusive upper bounds, strictly increasing; one
    open bin follows the last (unlimited jobs fall there). Records without a start, with a
    start before the submission or without cores are counted in ``skipped``, not binned.
    Each bin keeps its waits in the order the jobs started, so that its bounds are taken over
    the most recent ones (``bounds``, by default :class:`~siteagent.core.qbets.BoundSettings`).
    """
    cores_b = _check_bins(core_bins, "core")
    wall_b = _check_bins(walltime_bins_s, "walltime")
    grid: List[List[List[int]]] = [
        [[] for _ in range(len(wall_b) + 1)] for _ in range(len(cores_b) + 1)
    ]
    skipped = 0
    for w in sorted(waits, key=lambda w: w.start):
        if w.start <= 0 or w.submit <= 0 or w.start < w.submit or w.cores <= 0:
            skipped += 1
            continue
        grid[_index(w.cores, cores_b)][_index(max(w.walltime, 0), wall_b)].append(w.wait)
    bins = []
    for ci, row in enumerate(grid):
        c_lo = 1 if ci == 0 else cores_b[ci - 1] + 1
        c_hi = cores_b[ci] if ci < len(cores_b) else None
        for wi, values in enumerate(row):
            w_lo = 0 if wi == 0 else wall_b[wi - 1]
            w_hi = wall_b[wi] if wi < len(wall_b) else None
            bins.append(WaitBin(c_lo, c_hi, w_lo, w_hi, tuple(values)))
    return WaitTable(tuple(bins), source, skipped, cores_b, wall_b, bounds or BoundSettings())
