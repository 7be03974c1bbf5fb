"""Load calibration for a reproduction: the overlay probability (then the inter-arrival
factor) at which a trace's *measured* best-effort utilization over the paper's window is
within 1 point of the paper's figure.

The bisection is the simulator's own (siteagent/sim/calibration.py); the measurement is
siteagent/sim/window.py's utilization over the window. The overlay's admission draws come
from the seed (``seed_int("overlay", trace, seed)``), so each seed has its own duplicated
jobs and its own calibration. Report target and achieved with ``Report.calibration``.
See docs/reproductions.md ("Load calibration").
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional

from bench.common import TRACES
from bench.repro.seeds import seed_int
from siteagent.cli.console import progress_bar
from siteagent.core.engines import Policy
from siteagent.sim.calibration import Calibration, calibrate_load, same_workload
from siteagent.sim.window import TraceReplay, Window, window_utilization
from siteagent.sim.workload import LoadScaling

DAY_S = 86400
MAX_STEPS = 16


def trace(name: str, cores: Optional[int] = None, exact_estimates: bool = False) -> TraceReplay:
    """A trace of traces/ by the start of its file name ("CTC-SP2", "SDSC-SP2-1998"), or any
    SWF path; ``cores`` overrides the header's MaxProcs (CTC's 430 operational of 512)."""
    path = Path(name)
    if not path.exists():
        found = sorted(TRACES.glob(f"{name}*.swf*"))
        if len(found) != 1:
            known = ", ".join(p.name for p in sorted(TRACES.glob("*.swf*")))
            raise ValueError(f"{name!r} names {len(found)} traces in {TRACES} (there: {known})")
        path = found[0]
    return TraceReplay(str(path), cores=cores, exact_estimates=exact_estimates)


def overlay_scaling(replay: TraceReplay, seed: int, **knobs: float) -> LoadScaling:
    """The LoadScaling of ``seed`` for ``replay``: its overlay draws keyed by trace and seed."""
    return LoadScaling(seed=seed_int("overlay", Path(replay.path).name, seed), **knobs)


def utilization(
    replay: TraceReplay,
    scaling: LoadScaling,
    window: Window,
    policy: Policy = Policy.CONSERVATIVE,
) -> float:
    """``window_utilization``, kept for this process under ``same_workload(scaling)``: a
    sweep's worker calibrating one trace for several seeds and targets replays each
    workload once."""
    return _utilization(replay, same_workload(scaling), window, policy)


@functools.cache
def _utilization(
    replay: TraceReplay, scaling: LoadScaling, window: Window, policy: Policy
) -> float:
    return window_utilization(replay, scaling, window, policy)


def calibrate(
    replay: TraceReplay,
    target: float,
    window: Window,
    policy: Policy = Policy.CONSERVATIVE,
    seed: int = 0,
    tolerance: float = 0.01,
) -> Calibration:
    """Knobs that bring ``replay``'s best-effort utilization over ``window`` (under
    ``policy``, with ``seed``'s overlay draws) within ``tolerance`` of ``target``.

    ``converged`` on the result is False when no knob within ×4 / ÷4 load reaches it.
    """
    measure = functools.partial(utilization, replay, window=window, policy=policy)
    label = f"calibrating {Path(replay.path).name} to {target:.1%}"
    with progress_bar(label) as advance:

        def measured(scaling: LoadScaling) -> float:
            utilization = measure(scaling)
            measured.steps += 1  # type: ignore[attr-defined]
            advance(measured.steps / MAX_STEPS)  # type: ignore[attr-defined]
            return utilization

        measured.steps = 0  # type: ignore[attr-defined]
        return calibrate_load(measured, target, tolerance, overlay_scaling(replay, seed), MAX_STEPS)


def days(length: float, warm_up: float = 0.0) -> Window:
    """A window of ``length`` days after ``warm_up`` days (from the first arrival)."""
    return Window(length_s=round(length * DAY_S), start_s=round(warm_up * DAY_S))
