"""Load calibration: the overlay probability, then the inter-arrival factor, that give a trace
the utilization a paper states.

Papers raise load by duplicating jobs (an overlay copy admitted with probability p) or by
compressing inter-arrival times, and state the utilization they reached, not the knob. Given
a measurement (utilization as a function of ``LoadScaling``), ``calibrate_load`` bisects: on
p in [0, 1] when the trace is below the target, then on the factor below 1 if p = 1 is not
enough; on the factor above 1 when the trace alone is above it. Utilization grows with p
(a job admitted at p is admitted at every larger p: one draw per job) and falls with the
factor, so the search converges to within the tolerance unless the target is out of reach.
Each step is a replay, slow at high load, so the cuts are interpolated (false position), and
``same_workload`` names the steps that several calibrations share (see below).
See docs/reproductions.md ("Load calibration").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

from siteagent.sim.workload import LoadScaling

Measure = Callable[[LoadScaling], float]

#: The inter-arrival factors calibration may use: ×4 load at most, ÷4 at least.
FACTOR_RANGE = (0.25, 4.0)


@dataclass(frozen=True)
class Step:
    """One measurement: the knobs and the utilization they gave."""

    overlay_probability: float
    interarrival_factor: float
    utilization: float


@dataclass(frozen=True)
class Calibration:
    """The knobs found, the utilization measured with them, and every step on the way."""

    target: float
    tolerance: float
    scaling: LoadScaling
    achieved: float
    steps: Tuple[Step, ...] = field(default_factory=tuple)

    @property
    def converged(self) -> bool:
        return abs(self.achieved - self.target) <= self.tolerance


def same_workload(scaling: LoadScaling) -> LoadScaling:
    """``scaling`` with its seed set to 0 where the seed changes nothing: an overlay copy is
    admitted when its draw is below p, so p = 0 admits none and p = 1 every one, whatever
    the draws. Every seed's calibration replays the same trace at (0, 1) and (1, 1), and
    a search on the factor alone is the same for every seed; a measurement kept under this
    key is made once (bench/repro/calibrate.py)."""
    if 0.0 < scaling.overlay_probability < 1.0:
        return scaling
    return dataclasses.replace(scaling, seed=0)


def calibrate_load(
    measure: Measure,
    target: float,
    tolerance: float = 0.01,
    base: Optional[LoadScaling] = None,
    max_steps: int = 16,
) -> Calibration:
    """Search ``base``'s overlay probability, then its inter-arrival factor, until
    ``measure`` is within ``tolerance`` of ``target`` (utilizations in [0, 1]).

    Stops after ``max_steps`` measurements (or when the bracket is too narrow to move the
    knobs) with the closest one found; ``converged`` says whether it is within the tolerance
    (a target beyond what the knobs reach is not).
    """
    if not 0.0 < target < 1.0 or tolerance <= 0:
        raise ValueError(f"target must be in (0, 1) and tolerance > 0, got {target}, {tolerance}")
    steps: List[Step] = []
    base = base or LoadScaling()

    def at(p: float, factor: float) -> float:
        scaling = dataclasses.replace(base, overlay_probability=p, interarrival_factor=factor)
        utilization = measure(scaling)
        steps.append(Step(p, factor, utilization))
        return utilization

    def done() -> bool:
        return abs(steps[-1].utilization - target) <= tolerance or len(steps) >= max_steps

    low_f, high_f = FACTOR_RANGE
    native = at(0.0, 1.0)
    if done():
        pass
    elif native > target:
        # the trace alone is too busy: stretch inter-arrival times (load falls about as 1/f;
        # the far end is estimated, not replayed)
        _search(lambda f: at(0.0, f), (1.0, native), (high_f, native / high_f), target, done)
    else:
        full = at(1.0, 1.0)
        if done():
            pass
        elif full >= target:
            _search(lambda p: at(p, 1.0), (0.0, native), (1.0, full), target, done)
        else:
            # the whole overlay is not enough: compress inter-arrival times too (a replay at
            # ×4 load would be slow and saturated: its end is estimated, not replayed)
            _search(lambda f: at(1.0, f), (1.0, full), (low_f, 1.0), target, done)
    best = min(steps, key=lambda step: abs(step.utilization - target))
    scaling = dataclasses.replace(
        base,
        overlay_probability=best.overlay_probability,
        interarrival_factor=best.interarrival_factor,
    )
    return Calibration(target, tolerance, scaling, best.utilization, tuple(steps))


def _search(
    measure: Callable[[float], float],
    a: Tuple[float, float],
    b: Tuple[float, float],
    target: float,
    done: Callable[[], bool],
) -> None:
    """Narrow the bracket [a, b] of (knob, utilization) around ``target`` until ``done``:
    bisection that cuts where the line through the ends crosses the target (false position,
    Illinois variant: an end kept twice has its distance halved), so that a smooth
    utilization curve takes a few replays, not a dozen."""
    (xa, fa), (xb, fb) = (a[0], a[1] - target), (b[0], b[1] - target)
    if (fa > 0) == (fb > 0):
        return  # the target lies beyond the bracket: out of the knobs' reach
    kept = 0
    while abs(xb - xa) > 1e-3:
        x = (xa * fb - xb * fa) / (fb - fa)
        x = min(max(x, min(xa, xb)), max(xa, xb))  # an estimated end may be off
        fx = measure(x) - target
        if done():
            return
        if (fx > 0) == (fb > 0):
            xb, fb = x, fx
            fa = fa / 2 if kept == -1 else fa
            kept = -1
        else:
            xa, fa = x, fx
            fb = fb / 2 if kept == 1 else fb
            kept = 1
