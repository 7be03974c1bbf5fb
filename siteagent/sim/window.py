"""Utilization over a stretch of simulated time, as papers state their loads.

A paper says "63 % utilization over the first 30 days"; a whole-trace summary (busy core-time
over first arrival to last end) counts the drain at the end and cannot say that. A ``Window``
is counted from the first arrival (an optional warm-up first), and ``window_utilization``
replays only the arrivals before its end, up to its end (what comes later cannot change what
ran inside it), and counts the core-seconds run inside it. See docs/reproductions.md ("Load
calibration").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

from siteagent.core.engines import Policy
from siteagent.core.machine import Task
from siteagent.sim.simulator import Simulator
from siteagent.sim.workload import LoadScaling, Workload


@dataclass(frozen=True)
class Window:
    """[first arrival + start_s, first arrival + start_s + length_s) of simulated time."""

    length_s: int
    start_s: int = 0

    def __post_init__(self) -> None:
        if self.length_s <= 0 or self.start_s < 0:
            raise ValueError(
                f"a window needs length > 0 and start >= 0 s, got {self.length_s}, {self.start_s}"
            )


@dataclass(frozen=True)
class TraceReplay:
    """What to replay: an SWF file on ``cores`` cores, with the workload rules of sim/workload."""

    path: str
    cores: Optional[int] = None
    exact_estimates: bool = False
    skip_invalid: bool = True

    def workload(self, scaling: LoadScaling) -> Workload:
        return Workload(
            self.path,
            cores=self.cores,
            skip_invalid=self.skip_invalid,
            scaling=scaling,
            exact_estimates=self.exact_estimates,
        )


def arrivals_before(tasks: Iterator[Task], until: int) -> Iterator[Task]:
    """The tasks that arrive before ``until`` (tasks come in arrival order)."""
    for task in tasks:
        if task.submit >= until:
            return
        yield task


class BusyMeter:
    """An ``on_start`` callback summing the core-seconds run inside [start, end)."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.core_seconds = 0

    def __call__(self, task: Task) -> None:
        began = task.start
        assert began is not None
        overlap = min(began + task.run, self.end) - max(began, self.start)
        if overlap > 0:
            self.core_seconds += task.size * overlap

    def utilization(self, cores: int) -> float:
        return self.core_seconds / (cores * (self.end - self.start))


def window_utilization(
    trace: TraceReplay,
    scaling: LoadScaling,
    window: Window,
    policy: Policy = Policy.CONSERVATIVE,
) -> float:
    """Best-effort utilization in ``window`` of ``trace`` replayed with ``scaling``, in [0, 1]."""
    workload = trace.workload(scaling)
    try:
        tasks = workload.tasks()
        first = next(tasks, None)
        if first is None:
            raise ValueError(f"{trace.path}: no job to replay")
        start = first.submit + window.start_s
        meter = BusyMeter(start, start + window.length_s)

        def chained() -> Iterator[Task]:
            yield first
            yield from arrivals_before(tasks, meter.end)

        # work after the window cannot change what ran inside it: stop there
        Simulator(chained(), workload.cores, policy, on_start=meter).advance_to(meter.end)
        return meter.utilization(workload.cores)
    finally:
        workload.close()
