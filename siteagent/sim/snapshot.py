"""A simulated cluster as the agent sees a real one: a :class:`ClusterSnapshot`, or the plan.

The replay backend, the thesis reproduction and the slot benchmark all plan and price against
a running :class:`Simulator`; they see it through this one conversion, so they see the same
cluster a batch system would show.
"""

from __future__ import annotations

from typing import Iterable, Optional

from siteagent.core.engines import Policy
from siteagent.core.machine import Task
from siteagent.core.prediction import Plan
from siteagent.core.values import BatchReservation, ClusterSnapshot, Job
from siteagent.sim.simulator import Simulator


def job_of(task: Task, shift: int = 0) -> Job:
    """A simulated task as a batch system's job: one node per core (the simulator knows cores
    only), its estimate as the time limit (what remains of it, for a task suspended and
    resumed), its priority as its absolute priority, times moved by ``shift`` seconds."""
    return Job(
        id=str(task.key),
        cores=task.size,
        submit=task.submit + shift,
        limit=task.estimate,
        start=None if task.start is None else task.start + shift,
        nodes=task.size,
        absolute_priority=task.priority,
    )


def snapshot_of(
    simulator: Simulator,
    shift: int = 0,
    reservations: Optional[Iterable[BatchReservation]] = None,
    backend: str = "",
) -> ClusterSnapshot:
    """The simulated cluster now: its running and queued tasks and its reservations.

    ``shift`` moves every time by that many seconds (the replay backend shows trace time as
    wall-clock time). ``reservations`` are the records to show (with their users and
    accounts); by default, the simulator's own, named by their keys.
    """
    if reservations is None:
        reservations = (
            BatchReservation(name=str(key), start=start + shift, end=end + shift, cores=size)
            for key, (start, end, size) in simulator.engine.reservations.items()
        )
    return ClusterSnapshot(
        now=simulator.now + shift,
        capacity=simulator.cores,
        running=tuple(job_of(task, shift) for task in simulator.running),
        pending=tuple(job_of(task, shift) for task in simulator.queued),
        reservations=tuple(reservations),
        backend=backend,
    )


def schedule_plan(simulator: Simulator, horizon_s: int) -> Plan:
    """The conservative engine's own schedule as a Plan, without planning again.

    That engine holds every queued task at its planned start, so with exact estimates this is
    the plan of :func:`snapshot_of`'s snapshot. The horizon reaches ``horizon_s`` past now, and
    past the last planned end. Other engines hold no start for most queued tasks (ValueError).
    """
    if simulator.policy is not Policy.CONSERVATIVE:
        raise ValueError(f"the {simulator.policy.value} engine plans no start for its queue")
    engine = simulator.engine
    now = simulator.now
    # between events the engine's profile still starts at its last pass: the plan starts now
    engine.machine.advance(now)
    last_end = max(
        [task.window_end for task in engine.queue] + [t.window_end for t in simulator.running],
        default=now,
    )
    return Plan(
        now=now,
        capacity=engine.capacity,
        policy=Policy.CONSERVATIVE,
        profile=engine.profile,
        horizon=max(now + horizon_s, last_end + 300),
    )
