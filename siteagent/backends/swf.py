"""A simulated cluster replaying an SWF trace in real time (or N times faster): the "fake qstat".

This is the agent's embedded default, so ``siteagent serve`` works with no batch system: the
queue is a real workload (a bundled slice of SDSC-SP2) advancing with the clock, scheduled by
the simulator with the same engines the agent plans with, and reservations created through it
are rectangles the simulated scheduler honours.

Times: the simulated cluster lives in trace time. The backend shows it shifted so that at
start-up the snapshot's ``now`` is the wall clock; with ``speed`` N it then runs N times faster
than the wall clock (simulated now = (wall now - start) x speed + offset into the log).
When the trace runs out it starts over, shifted past its own end, so an agent never idles.
"""

from __future__ import annotations

import itertools
import threading
import time
from importlib import resources
from typing import Callable, Dict, Iterator, List, Optional

from siteagent.backends.base import Backend, ReservationRefused
from siteagent.model import BatchReservation, ClusterSnapshot, Job, ReservationSpec
from siteagent.scheduling import Policy, ReservationConflict, Task
from siteagent.sim.simulator import Simulator
from siteagent.sim.workload import Workload

#: Gap between the end of one pass over the trace and the start of the next.
LOOP_GAP_S = 3600


def bundled_trace() -> str:
    """Path of the trace shipped with the package (3,000 jobs of SDSC-SP2, 128 cores)."""
    return str(resources.files("siteagent") / "data" / "sdsc-sp2-slice.swf.gz")


class SwfReplayBackend(Backend):
    """A cluster whose queue is an SWF trace replayed against the clock."""

    name = "swf"

    def __init__(
        self,
        trace: Optional[str] = None,
        speed: float = 1.0,
        offset_s: int = 2 * 86400,
        cores: Optional[int] = None,
        policy: Policy = Policy.EASY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if speed <= 0:
            raise ValueError(f"replay speed must be > 0, got {speed}")
        if offset_s < 0:
            raise ValueError(f"replay offset must be >= 0, got {offset_s}")
        self.trace = trace or bundled_trace()
        self.speed = speed
        self._clock = clock
        self._lock = threading.Lock()
        probe = Workload(self.trace, cores=cores, skip_invalid=True)
        self.cores = probe.cores
        first = next(probe.tasks(), None)
        probe.close()
        if first is None:
            raise ValueError(f"{self.trace}: no job in the trace can be simulated")
        self._trace_start = first.submit
        self._reservations: Dict[str, BatchReservation] = {}
        self._simulator = Simulator(self._looped_tasks(cores), self.cores, policy)
        self._sim_origin = self._trace_start + offset_s
        self._simulator.advance_to(self._sim_origin)
        self._wall_origin = clock()
        self._shift = int(self._wall_origin) - self._sim_origin

    # -- time -----------------------------------------------------------------------------------

    def _sim_now(self) -> int:
        elapsed = (self._clock() - self._wall_origin) * self.speed
        return self._sim_origin + int(elapsed)

    def now(self) -> int:
        """The simulated cluster's current time, as the snapshots show it (epoch seconds)."""
        return self._sim_now() + self._shift

    # -- the Backend interface ---------------------------------------------------------------

    def snapshot(self) -> ClusterSnapshot:
        with self._lock:
            sim_now = self._sim_now()
            self._simulator.advance_to(sim_now)
            held = self._simulator.engine.reservations
            for name in [n for n in self._reservations if n not in held]:
                del self._reservations[name]
            return ClusterSnapshot(
                now=sim_now + self._shift,
                capacity=self.cores,
                running=tuple(self._job(task) for task in self._simulator.running),
                pending=tuple(self._job(task) for task in self._simulator.queued),
                reservations=tuple(self._reservations.values()),
                backend=self.name,
            )

    def create_reservation(self, spec: ReservationSpec) -> BatchReservation:
        with self._lock:
            self._simulator.advance_to(self._sim_now())
            if spec.name in self._reservations:
                raise ReservationRefused(f"duplicate reservation name {spec.name!r}")
            try:
                self._simulator.add_reservation(
                    spec.name, spec.start - self._shift, spec.end - self._shift, spec.size
                )
            except ReservationConflict as exc:
                raise ReservationRefused(f"requested capacity is busy: {exc}") from None
            start, end, size = self._simulator.engine.reservations[spec.name]
            made = BatchReservation(
                name=spec.name,
                start=start + self._shift,
                end=end + self._shift,
                cores=size,
                users=spec.users,
                accounts=spec.accounts,
                partition=spec.partition,
            )
            self._reservations[spec.name] = made
            return made

    def delete_reservation(self, name: str) -> None:
        with self._lock:
            if name in self._simulator.engine.reservations:
                self._simulator.remove_reservation(name)
            self._reservations.pop(name, None)

    def list_reservations(self) -> List[BatchReservation]:
        return list(self.snapshot().reservations)

    # -- helpers ---------------------------------------------------------------------------------

    def _job(self, task: Task) -> Job:
        start = None if task.start is None else task.start + self._shift
        return Job(
            id=str(task.key),
            cores=task.size,
            submit=task.submit + self._shift,
            limit=task.estimate,
            start=start,
            nodes=task.size,
        )

    def _looped_tasks(self, cores: Optional[int]) -> Iterator[Task]:
        """The trace over and over, each pass shifted past the previous one; keys unique."""
        key = itertools.count(1)
        shift = 0
        while True:
            workload = Workload(self.trace, cores=cores, skip_invalid=True)
            last_submit = self._trace_start
            for task in workload.tasks():
                task.key = next(key)
                task.submit += shift
                last_submit = task.submit
                yield task
            workload.close()
            shift = last_submit - self._trace_start + LOOP_GAP_S
