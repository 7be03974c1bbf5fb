"""Discrete-event replay of a workload on a cluster of P cores under one scheduling policy.

Events are task arrivals (from the workload, in order), task completions (at start + actual
run time) and reservation ends. At each instant completions come first, then arrivals join the
queue, then the policy's pass decides what starts. The policy is the very engine the agent
plans with (``siteagent.core.engines``); this module only moves time.

The simulator can stop at any instant and go on later (the replay backend advances it to
"now" on every snapshot) and takes advance reservations injected while it runs.

With ``preemptive``, tasks carry absolute priorities (docs/design.md §4.6): a pass may suspend
lower-priority running tasks for a waiting task that outranks them; a suspended task's run
stops at that instant and resumes, with what remained of it, when it starts again. Its summary
figures are the whole job's: its wait is its time in the system less its run.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from siteagent.core.engines import Engine, Policy, make_engine
from siteagent.core.machine import Machine, Task

BOUNDED_SLOWDOWN_TAU_S = 10

TaskCallback = Callable[[Task], None]
ArrivalCallback = Callable[[Task], bool]


@dataclass
class Summary:
    """What a replay measured. Times in seconds; utilization in [0, 1]."""

    policy: str
    cores: int
    jobs: int = 0
    skipped: int = 0
    skipped_by_reason: Dict[str, int] = field(default_factory=dict)
    dropped: int = 0
    mean_wait_s: float = 0.0
    mean_bounded_slowdown: float = 0.0
    utilization: float = 0.0
    makespan_s: int = 0
    first_submit: int = 0
    last_end: int = 0
    wall_s: float = 0.0
    #: CPU time of the replay: unlike wall time, barely moved by other work on the machine
    cpu_s: float = 0.0

    def to_dict(self) -> Dict[str, object]:
        return asdict(self)


class _Accumulator:
    """Running sums for the summary, so a 450k-job replay keeps no per-job list."""

    __slots__ = ("core_seconds", "first_submit", "jobs", "last_end", "sum_bsld", "sum_wait")

    def __init__(self) -> None:
        self.jobs = 0
        self.sum_wait = 0
        self.sum_bsld = 0.0
        self.core_seconds = 0
        self.first_submit: Optional[int] = None
        self.last_end = 0

    def copy(self) -> _Accumulator:
        twin = _Accumulator()
        twin.jobs, twin.sum_wait, twin.sum_bsld = self.jobs, self.sum_wait, self.sum_bsld
        twin.core_seconds, twin.first_submit = self.core_seconds, self.first_submit
        twin.last_end = self.last_end
        return twin

    def add(self, task: Task) -> None:
        start = task.start
        assert start is not None
        self.add_run(task.submit, start - task.submit, task.run, task.size)

    def add_run(self, submit: int, wait: int, run: int, size: int) -> None:
        """One job that waited ``wait`` seconds in all and ran ``run`` seconds in all."""
        self.jobs += 1
        self.sum_wait += wait
        self.sum_bsld += max(1.0, (wait + run) / max(run, BOUNDED_SLOWDOWN_TAU_S))
        self.core_seconds += size * run
        if self.first_submit is None or submit < self.first_submit:
            self.first_submit = submit
        end = submit + wait + run
        if end > self.last_end:
            self.last_end = end


def _task_copy(task: Task) -> Task:
    """A task in the same state, sharing nothing mutable with ``task``."""
    twin = Task(
        task.key, task.size, task.estimate, task.submit, task.run, task.payload, task.priority
    )
    twin.start = task.start
    twin.planned = task.planned
    twin.window_end = task.window_end
    twin.shape = task.shape
    twin.placement = task.placement
    return twin


class Simulator:
    """Replays ``tasks`` (in arrival order) on ``cores`` cores under ``policy``.

    ``on_start`` is called for every task when it starts (its ``start`` set), ``on_finish``
    when it ends. ``on_arrival`` sees every task as it arrives, before it joins the queue, with
    the simulator at that instant (completions done, and the tasks queued before it started if
    they start now; the arrivals join behind them, so the order of the pass is unchanged):
    returning False keeps it out of the
    queue, for a caller that turns it into something else (an advance reservation, through
    ``add_reservation``). ``start_time`` is where the clock begins (default: the first arrival).
    ``preemptive``: tasks of higher ``priority`` suspend lower-priority running ones; then
    ``on_start`` is called at every start and resume, ``on_suspend`` at every suspension.
    ``machine`` is where tasks go (default: ``cores`` pooled; a topology machine's clock must
    start at ``start_time``).
    """

    def __init__(
        self,
        tasks: Iterator[Task],
        cores: int,
        policy: Policy,
        start_time: Optional[int] = None,
        on_start: Optional[TaskCallback] = None,
        on_finish: Optional[TaskCallback] = None,
        on_arrival: Optional[ArrivalCallback] = None,
        preemptive: bool = False,
        on_suspend: Optional[TaskCallback] = None,
        machine: Optional[Machine] = None,
    ) -> None:
        self._tasks = tasks
        self._next: Optional[Task] = next(tasks, None)
        if start_time is None:
            start_time = self._next.submit if self._next is not None else 0
        self.cores = cores
        self.policy = Policy(policy)
        self.now = start_time
        self.engine: Engine = make_engine(
            self.policy, cores, start_time, machine, preemptive=preemptive
        )
        self.preemptive = preemptive
        # each running task's whole run, as it was at its first start (a suspended task's
        # ``run`` is what remains of it)
        self._whole_run: Dict[Task, int] = {}
        self._on_suspend = on_suspend
        self._running: List[Tuple[int, int, Task]] = []
        self._reservation_ends: List[Tuple[int, int, object]] = []
        self._seq = 0
        self._on_start = on_start
        self._on_finish = on_finish
        self._on_arrival = on_arrival
        self._stats = _Accumulator()

    # -- state the replay backend reads ----------------------------------------------------------

    @property
    def running(self) -> List[Task]:
        return [task for _, _, task in self._running]

    @property
    def queued(self) -> List[Task]:
        return self.engine.queue + self.engine._arrivals

    @property
    def finished(self) -> bool:
        return self._next is None and not self._running and not self.engine.waiting

    def next_event_time(self) -> Optional[int]:
        """When the next thing happens (arrival, completion, reservation end), None if never."""
        t = self._next.submit if self._next is not None else None
        if self._running and (t is None or self._running[0][0] < t):
            t = self._running[0][0]
        if self._reservation_ends and (t is None or self._reservation_ends[0][0] < t):
            t = self._reservation_ends[0][0]
        return t

    # -- work injected while it runs ---------------------------------------------------------------

    def submit(self, task: Task, since: Optional[int] = None) -> None:
        """Inject ``task`` now, behind the instant's arrivals: one more pass at ``now`` considers
        it at once. Its ``submit`` becomes now; it counts in the summary like any task. For
        work that appears while a replay runs: a workflow's ready tasks, a VAR job.

        With ``since``, the task was queued then and held until now (a job submitted with a
        dependency, eligible now): it joins the queue ahead of every task that arrived after
        ``since``, as a first-come-first-served priority places it, and its wait counts from
        ``since``."""
        self.advance_to(self.now)  # an instant not processed yet (a replay just begun) first
        if since is None:
            task.submit = self.now
            self.engine.submit(task)
        else:
            self._start(self.engine.schedule(self.now), self.now)  # the engine's clock to now
            task.submit = since
            queue = self.engine.queue
            position = next(
                (i for i, queued in enumerate(queue) if queued.submit > since), len(queue)
            )
            self.engine.insert(task, position)
        self._start(self.engine.schedule(self.now), self.now)

    def fork(
        self,
        on_start: Optional[TaskCallback] = None,
        on_finish: Optional[TaskCallback] = None,
        on_arrival: Optional[ArrivalCallback] = None,
    ) -> Simulator:
        """An independent replay in this one's state, with callbacks of its own: it goes on
        from ``now`` with copies of every task (running, queued, still to arrive), so that
        what is done to one (a task submitted, a reservation) never touches the other. Both
        read the rest of the workload through ``itertools.tee``. For experiments that try
        several things from one instant (thesis ch. 4, 6, 7). Pooled machines only; a
        preemptive replay's twin preempts too (with no ``on_suspend``)."""
        copies: Dict[int, Task] = {}

        def copy(task: Task) -> Task:
            twin = copies.get(id(task))
            if twin is None:
                twin = _task_copy(task)
                copies[id(task)] = twin
            return twin

        self._tasks, rest = itertools.tee(self._tasks)
        twin = Simulator(
            iter(()),
            self.cores,
            self.policy,
            self.now,
            on_start,
            on_finish,
            preemptive=self.preemptive,
        )
        twin._on_arrival = on_arrival
        twin._tasks = map(_task_copy, rest)
        twin._next = None if self._next is None else copy(self._next)
        twin.engine = self.engine.copy(copy)
        twin._running = [(end, seq, copy(task)) for end, seq, task in self._running]
        twin._whole_run = {copy(task): run for task, run in self._whole_run.items()}
        twin._reservation_ends = list(self._reservation_ends)
        twin._seq = self._seq
        twin._stats = self._stats.copy()
        return twin

    # -- reservations ------------------------------------------------------------------------------

    def add_reservation(self, key: object, start: int, end: int, size: int) -> None:
        """Inject an advance reservation; the pass at the current instant honours it at once.

        Raises engines.ReservationConflict if running work or reservations leave no room.
        The engine's clock is brought to the simulator's first (by a pass at this instant):
        after ``advance_to`` past the last event, or from ``on_arrival`` within an instant, it
        still reads an earlier instant, and queued tasks would be re-planned into the past.
        """
        self._start(self.engine.schedule(self.now), self.now)
        self.engine.add_reservation(key, start, end, size)
        heapq.heappush(self._reservation_ends, (end, self._bump(), key))
        self._start(self.engine.schedule(self.now), self.now)

    def remove_reservation(self, key: object) -> None:
        self.engine.remove_reservation(key)
        self._reservation_ends = [item for item in self._reservation_ends if item[2] != key]
        heapq.heapify(self._reservation_ends)
        self._start(self.engine.schedule(self.now), self.now)

    # -- running ---------------------------------------------------------------------------------

    def run(self, progress: Optional[Callable[[], None]] = None, every: int = 2000) -> Summary:
        """Replay to the end. ``progress`` is called every ``every`` instants."""
        began, began_cpu = time.perf_counter(), time.process_time()
        instants = 0
        # A replay allocates millions of short-lived objects and builds no reference cycles;
        # the cyclic collector would only walk the heap over and over.
        collecting = gc.isenabled()
        gc.disable()
        try:
            while True:
                t = self.next_event_time()
                if t is None:
                    break
                self._instant(t)
                instants += 1
                if progress is not None and instants % every == 0:
                    progress()
        finally:
            if collecting:
                gc.enable()
        if self.engine.waiting:
            raise RuntimeError(f"{self.engine.waiting} tasks never started: the engine stalled")
        summary = self.summary()
        summary.wall_s = time.perf_counter() - began
        summary.cpu_s = time.process_time() - began_cpu
        return summary

    def advance_to(self, until: int) -> None:
        """Process every instant up to and including ``until``; the clock then reads ``until``."""
        while True:
            t = self.next_event_time()
            if t is None or t > until:
                break
            self._instant(t)
        if until > self.now:
            self.now = until

    def summary(self) -> Summary:
        stats = self._stats
        summary = Summary(policy=self.policy.value, cores=self.cores, jobs=stats.jobs)
        if stats.jobs:
            first = stats.first_submit if stats.first_submit is not None else 0
            makespan = stats.last_end - first
            summary.mean_wait_s = stats.sum_wait / stats.jobs
            summary.mean_bounded_slowdown = stats.sum_bsld / stats.jobs
            summary.makespan_s = makespan
            summary.first_submit = first
            summary.last_end = stats.last_end
            summary.utilization = (
                stats.core_seconds / (self.cores * makespan) if makespan > 0 else math.nan
            )
        return summary

    def _bump(self) -> int:
        self._seq += 1
        return self._seq

    def _instant(self, t: int) -> None:
        """One instant: completions, reservation ends, arrivals, then the pass."""
        self.now = t
        engine = self.engine
        running = self._running
        while running and running[0][0] == t:
            task = heapq.heappop(running)[2]
            engine.complete(task, t)
            if self.preemptive:
                whole_run = self._whole_run.pop(task)
                self._stats.add_run(task.submit, t - task.submit - whole_run, whole_run, task.size)
            else:
                self._stats.add(task)
            if self._on_finish is not None:
                self._on_finish(task)
        ends = self._reservation_ends
        while ends and ends[0][0] == t:
            engine.reservation_ended(heapq.heappop(ends)[2])
        arrival = self._next
        if self._on_arrival is not None and arrival is not None and arrival.submit == t:
            self._start(engine.schedule(t), t)
        while arrival is not None and arrival.submit == t:
            if self._on_arrival is None or self._on_arrival(arrival):
                engine.submit(arrival)
            arrival = next(self._tasks, None)
        self._next = arrival
        self._start(engine.schedule(t), t)

    def _start(self, started: List[Task], t: int) -> None:
        if self.preemptive:
            self._suspend(self.engine.take_suspended())
            for task in started:
                self._whole_run.setdefault(task, task.run)
        running = self._running
        for task in started:
            self._seq += 1
            heapq.heappush(running, (t + task.run, self._seq, task))
            if self._on_start is not None:
                self._on_start(task)

    def _suspend(self, victims: List[Task]) -> None:
        """Stop the runs of the tasks the pass suspended (the engine queued them again)."""
        if not victims:
            return
        stopped = set(victims)
        self._running = [entry for entry in self._running if entry[2] not in stopped]
        heapq.heapify(self._running)
        if self._on_suspend is not None:
            for task in victims:
                self._on_suspend(task)
