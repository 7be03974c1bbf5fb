"""Schedule prediction: FCFS, EASY (aggressive) and conservative backfilling.

One engine per policy decides, at an instant, which queued tasks start. The same engines serve
two drivers, so the agent's prediction and the simulator's replay can never disagree about
what a policy does:

* the simulator (``siteagent.sim``) completes tasks at their real run times;
* :func:`plan` completes them at their estimates to predict a snapshot's future.

The rules (stated in the foundation issue so that two correct implementations agree job for
job): at each instant completions come first, then the pass. FCFS starts queue-head tasks while
they fit. EASY does the same, then protects the first task that does not fit with a
reservation at its shadow time and starts any later task that fits now without touching that
reservation. Conservative revisits queued tasks in queue order, moving each to its earliest fit
if that is earlier than its reservation (never later); then gives the instant's arrivals
reservations at their earliest fit; then starts the tasks whose reservation is now. Greedy
(backfilling without any reservation) starts, in queue order, every queued task that fits now.

Reservations (advance reservations, the agent's own or the batch system's) are rectangles in
the profile that no task may use.

Absolute priorities (Baranov et al., docs/design.md §4.6): where tasks carry different
priorities, the queue is kept in priority order (arrival order within a priority), a
higher-priority arrival going ahead of lower-priority queued tasks, whose plans are laid out
again behind it. A **preemptive** engine also suspends running tasks of lower priority, before
each pass, for waiting tasks that outrank them and could not start otherwise (see
:meth:`Engine._preempt`); a suspended task keeps its remaining run time and waits at the front
of its priority. With every priority equal (a trace) none of this changes a decision.

Where a task fits is the engine's :class:`~siteagent.core.machine.Machine`'s answer: units
pooled over the machine (the simulator, the replay, PBS), or particular nodes as Slurm places
jobs (:mod:`siteagent.core.nodes`); the rules above are the same on both.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import heapq
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from siteagent.core.backfill import BackfillIndex
from siteagent.core.machine import Machine, PooledMachine, Shape, Task, planned_hold
from siteagent.core.model import (
    UNLIMITED_S,
    Allocation,
    ClusterSnapshot,
    Job,
    Placement,
    Source,
)
from siteagent.core.nodes import NodeTable
from siteagent.core.preemption import victim_order
from siteagent.core.profile import Profile

#: No bound on an estimate (below the index's EMPTY, so that only real tasks pass).
ANY = (1 << 62) - 1


class Policy(str, enum.Enum):
    FCFS = "fcfs"
    EASY = "easy"
    CONSERVATIVE = "conservative"
    GREEDY = "greedy"


class ReservationConflict(Exception):  # not a SiteagentError: mypyc cannot subclass it here
    """An advance reservation would overlap running work or another reservation."""


class Engine(abc.ABC):
    """State shared by the policies: the machine holding running work and reservations, the
    queue.

    ``_dirty`` records that capacity came back (a completion, a reservation ending or removed,
    a queued task moving earlier) since the last pass. Only then can a task that was refused
    before fit now, so a pass without it looks only at new arrivals. The shortcut changes no
    decision; it skips work whose answer is already known.

    ``preemptive`` (off by default) lets a pass suspend lower-priority running tasks; the
    tasks it suspended are in ``suspended`` until the driver takes them (:meth:`take_suspended`)
    to stop their runs. With ``requeue`` a suspended task starts over (Slurm's
    ``PreemptMode=REQUEUE``) instead of resuming with what remains.
    """

    policy: Policy

    def __init__(self, capacity: int, now: int, machine: Optional[Machine] = None) -> None:
        self.capacity = capacity
        self.now = now
        self.machine: Machine = machine if machine is not None else PooledMachine(capacity, now)
        self._queue: List[Task] = []
        self._arrivals: List[Task] = []
        self._reservations: Dict[object, Tuple[int, int, int]] = {}
        self._reservation_tasks: Dict[object, Task] = {}
        self._dirty = True
        self.preemptive = False
        self.requeue = False
        self.suspended: List[Task] = []
        # some task carries a priority: the queue is kept in priority order
        self._priorities = False
        self._reorder = False
        # tasks suspended and waiting to go back at the front of their priority
        self._resumed: List[Task] = []
        # running tasks, kept only by a preemptive engine (its victims are among them)
        self._live: Dict[Task, None] = {}

    @property
    def profile(self) -> Profile:
        """Free units over time, pooled over the machine."""
        return self.machine.profile

    @property
    def queue(self) -> List[Task]:
        """The queued tasks (submitted before the last pass, not started), in queue order."""
        return self._queue

    def _set_queue(self, tasks: List[Task]) -> None:
        """Make ``tasks`` (none started) the queue, in that order."""
        self._queue = tasks

    # -- what the drivers call -------------------------------------------------------------

    def add_running(self, task: Task, start: int) -> None:
        """Register a task that is already running (a snapshot's running jobs).

        A task past its estimate is still running, so it holds its units for at least a second.
        """
        task.start = start
        task.window_end = max(start + task.estimate, self.now + 1)
        self.machine.take(task, self.now, task.window_end)
        if self.preemptive:
            self._live[task] = None
        if task.priority:
            self._priorities = True

    def submit(self, task: Task) -> None:
        """Queue a task; it is considered at the next pass, after the tasks already queued (of
        its priority or higher, where tasks carry priorities)."""
        self._arrivals.append(task)
        if task.priority:
            self._priorities = True

    def insert(self, task: Task, position: int) -> None:
        """Queue ``task`` ahead of the queued tasks from ``position`` on: a job of older
        priority joining now (Slurm's ``--dependency`` job, queued early, eligible once its
        parents end). The queue is planned again in its new order at once: under
        conservative backfilling the tasks behind it may move later. Call it after a pass at
        the engine's current instant (no arrivals waiting)."""
        self._withdraw_plans()
        queue = self.queue
        queue.insert(position, task)
        self._set_queue(queue)
        self._replan([(queued, self.now) for queued in queue])
        self._dirty = True

    @property
    def waiting(self) -> int:
        """Tasks not started yet (queued and just submitted)."""
        return len(self._queue) + len(self._arrivals) + len(self._resumed)

    def complete(self, task: Task, now: int) -> None:
        """A running task ended at ``now``; give back what remains of the window it held."""
        if now < task.window_end:
            self.machine.give_back(task, now, task.window_end)
        self._dirty = True
        if self._live:
            self._live.pop(task, None)

    def take_suspended(self) -> List[Task]:
        """The tasks suspended since the last call (a preemptive engine's victims), in the
        order they were suspended; each is queued again with what remains of its run."""
        taken, self.suspended = self.suspended, []
        return taken

    def add_reservation(
        self,
        key: object,
        start: int,
        end: int,
        size: int,
        holder: Optional[Task] = None,
    ) -> Task:
        """Hold ``size`` units over [start, end) against all tasks; returns the task standing
        for the reservation (on a node machine its ``placement`` says where it is).

        Admissible only if running work and other reservations leave room: queued tasks do
        not count against it, they are re-planned around it (pushed back where they collide).
        A refused reservation (ReservationConflict) leaves every plan exactly as it was.
        ``holder`` is a task to hold as it would run there (a job pinned at its batch system's
        start); its placement, if set, is where the reservation is (the batch system's own).
        """
        if key in self._reservations:
            raise ReservationConflict(f"reservation {key!r} exists already")
        start = max(start, self.now)
        if end <= start or size <= 0:
            raise ValueError(f"empty reservation {key!r}: [{start}, {end}) x {size}")
        task = holder if holder is not None else Task(key, size, end - start, start)
        withdrawn = self._withdraw_plans()
        machine = self.machine
        if task.shape is not None:
            held = machine.fits(task, start, end - start)
            if held:
                machine.take(task, start, end)
        else:
            held = machine.hold(task, start, end)
        if not held:
            self._restore_plans(withdrawn)
            raise ReservationConflict(
                f"{size} units over [{start}, {end}) conflict with running work or reservations"
            )
        self._reservations[key] = (start, end, size)
        self._reservation_tasks[key] = task
        self._replan(withdrawn)
        self._dirty = True
        return task

    def remove_reservation(self, key: object) -> None:
        """Cancel a reservation: its capacity comes back from now on."""
        start, end, _ = self._reservations.pop(key)
        self.machine.give_back(self._reservation_tasks.pop(key), max(start, self.now), end)
        self._dirty = True

    def reservation_ended(self, key: object) -> None:
        """A reservation's window closed: forget it, and let refused tasks try again."""
        self._reservations.pop(key, None)
        self._reservation_tasks.pop(key, None)
        self._dirty = True

    def fork(self) -> Engine:
        """A new engine of this policy on a copy of this one's pooled machine, with its
        reservations and no queue: a plan's groundwork, used once per re-plan."""
        if not self.machine.pooled or self.waiting:
            raise ValueError("only a pooled engine with nothing queued can be forked")
        machine = PooledMachine(self.capacity, self.now, self.machine.profile.copy())
        engine = make_engine(self.policy, self.capacity, self.now, machine)
        engine._reservations = dict(self._reservations)
        engine._reservation_tasks = dict(self._reservation_tasks)
        return engine

    @property
    def reservations(self) -> Dict[object, Tuple[int, int, int]]:
        """The reservations held now: key -> (start, end, size)."""
        return dict(self._reservations)

    def schedule(self, now: int) -> List[Task]:
        """The pass at instant ``now``: the tasks that start now, in the order they started
        (a preemptive engine first suspends what outranked tasks need: ``suspended``)."""
        self.now = now
        self.machine.advance(now)
        if self._priorities and (self._reorder or not self._in_priority_order()):
            self._prioritize()
        started = self._started(now)
        while self._priorities and self.preemptive:
            # what the pass started may stand in an outranking task's way (a conservative
            # reservation made before it arrived; EASY's backfill): suspended at once, it has
            # not run
            self._preempt(now)
            if not self._reorder:
                break
            now_started = set(started)
            self.suspended = [task for task in self.suspended if task not in now_started]
            started = [task for task in started if task.start is not None]
            self._prioritize()
            started += self._started(now)
        return started

    def _started(self, now: int) -> List[Task]:
        started = self._pass(now)
        for task in started:
            task.start = now
            task.planned = None
        if self.preemptive:
            for task in started:
                self._live[task] = None
        return started

    # -- absolute priorities -------------------------------------------------------------------

    def _in_priority_order(self) -> bool:
        """Whether the arrivals join the queue without passing a task of lower priority."""
        if self._resumed:
            return False
        last = self.queue[-1].priority if self.queue else None
        for task in self._arrivals:
            if last is not None and task.priority > last:
                return False
            last = task.priority
        return True

    def _prioritize(self) -> None:
        """Put every waiting task in priority order (suspended ones first within theirs, then
        as they queued) and take back their plans: the pass lays the queue out again."""
        self._withdraw_plans()
        waiting = self._resumed + self.queue + self._arrivals
        for task in waiting:
            task.planned = None
        waiting.sort(key=lambda task: -task.priority)
        self._resumed = []
        self._set_queue([])
        self._arrivals = waiting
        self._reorder = False
        self._dirty = True

    def _preempt(self, now: int) -> None:
        """Suspend running tasks for the waiting tasks that outrank them (docs/design.md §4.6).

        The waiting tasks are taken in priority order. One that fits now (beside running
        work, reservations and the tasks taken before it) will start; one that does not
        suspends running tasks of lower priority, in :func:`victim_order`, until it fits, or
        none if even all of them would not make room. What a task that cannot start leaves to
        the tasks after it is the policy's (:meth:`_blocked`). Victims leave the machine at
        ``now`` with what remains of their runs, and wait at the front of their priority.
        """
        live = self._live
        waiting = self._resumed + self.queue + self._arrivals
        if not live or not waiting:
            return
        lowest = min(task.priority for task in live)
        if max(task.priority for task in waiting) <= lowest:
            return
        machine = self.machine
        withdrawn = self._withdraw_plans()
        candidates = sorted(live, key=lambda task: victim_order(task.priority, task.start or 0))
        taken: List[Tuple[Task, int, int]] = []
        victims: Dict[Task, None] = {}
        first_blocked = True
        for task in sorted(waiting, key=lambda task: -task.priority):
            if task.priority <= lowest:
                break
            if not machine.ever_fits(task):
                continue
            hold = planned_hold(task)
            chosen: List[Task] = []
            if not machine.fits(task, now, hold):
                for victim in candidates:
                    if victim.priority >= task.priority:
                        break
                    if victim in victims:
                        continue
                    machine.give_back(victim, now, victim.window_end)
                    chosen.append(victim)
                    if machine.fits(task, now, hold):
                        break
                if not chosen or not machine.fits(task, now, hold):
                    for victim in chosen:
                        machine.take(victim, now, victim.window_end)
                    if not self._blocked(task, now, first_blocked, taken):
                        break
                    first_blocked = False
                    continue
            machine.take(task, now, now + hold)
            taken.append((task, now, now + hold))
            victims.update(dict.fromkeys(chosen))
        for task, start, end in taken:
            machine.give_back(task, start, end)
        if not victims:
            self._restore_plans(withdrawn)
            return
        self._set_queue(self.queue)  # EASY's line keeps started tasks: the victims leave it
        for victim in victims:
            del live[victim]
            assert victim.start is not None
            if victim.shape is None and not machine.pooled:
                # a running job known by where it runs: it asks again for as many nodes
                nodes = len(victim.placement) or 1
                victim.shape = Shape(victim.size, min_nodes=nodes, max_nodes=nodes)
            if not self.requeue:
                victim.run = max(victim.run - (now - victim.start), 0)
                victim.estimate = max(victim.window_end - now, 0)
            victim.start = None
            victim.planned = None
            victim.window_end = 0
            self._resumed.append(victim)
            self.suspended.append(victim)
        self._reorder = True
        self._dirty = True

    def _blocked(
        self, task: Task, now: int, first: bool, taken: List[Tuple[Task, int, int]]
    ) -> bool:
        """``task`` cannot start now even with preemption: whether lower-priority tasks may
        still suspend work to start now, after taking (into ``taken``) what the policy keeps
        for it. First come, first served: nothing starts behind it."""
        return False

    def _keep_earliest(self, task: Task, now: int, taken: List[Tuple[Task, int, int]]) -> None:
        """Hold ``task``'s earliest fit from ``now``, as its reservation would."""
        hold = planned_hold(task)
        start = self.machine.earliest_fit(task, hold, now)
        if start is not None:
            self.machine.take(task, start, start + hold)
            taken.append((task, start, start + hold))

    def copy(self, task_copy: Callable[[Task], Task]) -> Engine:
        """An independent engine in the same state, each task it holds replaced by
        ``task_copy(task)`` (the caller keeps one copy per task, so that a task its driver
        also holds stays one object), preemption state included. Pooled machines only
        (ValueError otherwise): there the profile is all the machine knows."""
        machine = self.machine
        if not isinstance(machine, PooledMachine):
            raise ValueError("only an engine on pooled units can be copied")
        twin = make_engine(
            self.policy, self.capacity, self.now, None, self.preemptive, self.requeue
        )
        twin_machine = twin.machine
        assert isinstance(twin_machine, PooledMachine)
        twin_machine.profile = machine.profile.copy()
        twin._set_queue([task_copy(task) for task in self.queue])
        twin._arrivals = [task_copy(task) for task in self._arrivals]
        twin._reservations = dict(self._reservations)
        twin._reservation_tasks = {
            key: task_copy(task) for key, task in self._reservation_tasks.items()
        }
        twin._dirty = self._dirty
        twin.suspended = [task_copy(task) for task in self.suspended]
        twin._priorities, twin._reorder = self._priorities, self._reorder
        twin._resumed = [task_copy(task) for task in self._resumed]
        twin._live = {task_copy(task): None for task in self._live}
        return twin

    # -- policy hooks --------------------------------------------------------------------------

    @abc.abstractmethod
    def _pass(self, now: int) -> List[Task]:
        """Decide which tasks start now; the machine must hold each started task's window."""

    def _withdraw_plans(self) -> List[Tuple[Task, int]]:
        """Take queued tasks' planned windows out of the machine, returning what they were."""
        machine = self.machine
        withdrawn = []
        for task in self._queue:
            if task.planned is not None:
                machine.give_back(task, task.planned, task.planned + planned_hold(task))
                withdrawn.append((task, task.planned))
                task.planned = None
        return withdrawn

    def _restore_plans(self, withdrawn: List[Tuple[Task, int]]) -> None:
        for task, planned in withdrawn:
            task.window_end = planned + planned_hold(task)
            self.machine.take(task, planned, task.window_end)
            task.planned = planned

    def _replan(self, withdrawn: List[Tuple[Task, int]]) -> None:  # noqa: B027 - optional hook
        """After a reservation was added: policies with plans recompute them at the next pass."""


class FcfsEngine(Engine):
    """First come, first served: start queue-head tasks while they fit, never skip ahead."""

    policy = Policy.FCFS

    def _pass(self, now: int) -> List[Task]:
        self._queue.extend(self._arrivals)
        self._arrivals.clear()
        self._dirty = False
        queue = self._queue
        machine = self.machine
        count = 0
        while count < len(queue):
            task = queue[count]
            if not machine.fits(task, now, task.estimate):
                break
            task.window_end = now + task.estimate
            machine.take(task, now, task.window_end)
            count += 1
        started = queue[:count]
        del queue[:count]
        return started


class EasyEngine(Engine):
    """EASY (aggressive) backfilling: only the first waiting task is protected.

    The protected head's window is not written into the profile (it moves with every
    completion); a later task may start now if it fits now and, where it overlaps the head's
    window, leaves the head its units: exactly "fits with the head's window in place", and it
    keeps tasks out of reservations too. Without reservations free capacity only rises after
    now, and the test reduces to the textbook counters: the task ends by the shadow time or uses
    no more than the ``extra`` units free then beyond the head's need. That is the fast path;
    tests hold the two to the same answers.

    The queue is a line in queue order in which started tasks stay behind (until it is
    compacted) and, on a pooled machine, a :class:`~siteagent.core.backfill.BackfillIndex` of
    it: a pass asks the index for the first task that passes instead of scanning the queue,
    and starts the same tasks in the same order (every test only gets harder as tasks start,
    so the first task passing now is the next one a scan would start).
    """

    policy = Policy.EASY

    def __init__(self, capacity: int, now: int, machine: Optional[Machine] = None) -> None:
        super().__init__(capacity, now, machine)
        self._line: List[Task] = []  # queued tasks in queue order, started ones left behind
        self._head = 0  # index in _line of the first task not started
        self._waiting = 0  # tasks of _line not started
        self._index = BackfillIndex()

    @property
    def queue(self) -> List[Task]:
        line = self._line
        return [line[i] for i in range(self._head, len(line)) if line[i].start is None]

    def _set_queue(self, tasks: List[Task]) -> None:
        """The line made of ``tasks`` afresh and indexed; the head's shadow is found again."""
        self._line, self._head, self._waiting = [], 0, 0
        self._index = BackfillIndex()
        self._join(tasks)
        if tasks:
            tasks[0].planned = None

    @property
    def waiting(self) -> int:
        return self._waiting + len(self._arrivals) + len(self._resumed)

    def _withdraw_plans(self) -> List[Tuple[Task, int]]:
        """The head's window is not in the profile: nothing to take out (or put back)."""
        return []

    def _replan(self, withdrawn: List[Tuple[Task, int]]) -> None:
        """A reservation was added: the head's shadow time is stale until the next pass."""
        if self._waiting:
            self._line[self._head].planned = None

    def _pass(self, now: int) -> List[Task]:
        machine = self.machine
        protected = (
            self._waiting > 0 and self._line[self._head].planned is not None and not self._dirty
        )
        first_new = self._join(self._arrivals)
        self._arrivals.clear()
        self._dirty = False
        started: List[Task] = []
        if not protected:
            while self._waiting and machine.fits(
                self._line[self._head], now, self._line[self._head].estimate
            ):
                task = self._line[self._head]
                self._begin(task, now, self._head)
                started.append(task)
            if not self._waiting:
                return started
            head = self._line[self._head]
            head.planned = machine.earliest_fit(head, head.estimate, now)
            if head.planned is None:
                raise ValueError(f"{head!r} can never fit in capacity {self.capacity}")
            first_new = self._head + 1
        if first_new < len(self._line):
            started.extend(self._backfill(first_new, now))
        return started

    def _blocked(
        self, task: Task, now: int, first: bool, taken: List[Tuple[Task, int, int]]
    ) -> bool:
        """The first task that cannot start is the protected head: its shadow window is kept;
        later tasks start only beside it."""
        if first:
            self._keep_earliest(task, now, taken)
        return True

    def _join(self, arrivals: List[Task]) -> int:
        """Append ``arrivals`` to the line (and the index), compacting it first when started
        tasks make up most of it; the line position of the first arrival."""
        line = self._line
        if len(line) > 64 and len(line) > 2 * self._waiting:
            self._compact()
            line = self._line
        first = len(line)
        pooled = self.machine.pooled
        for task in arrivals:
            if pooled:
                self._index.add(task, len(line))
            line.append(task)
        self._waiting += len(arrivals)
        return first

    def _compact(self) -> None:
        """Drop the started tasks from the line and index it afresh."""
        line = [task for task in self._line[self._head :] if task.start is None]
        self._line, self._head = line, 0
        self._index = BackfillIndex()
        if self.machine.pooled:
            for position, task in enumerate(line):
                self._index.add(task, position)

    def _backfill(self, first: int, now: int) -> List[Task]:
        """Start the tasks from line position ``first`` on that fit now without delaying the
        head, in queue order."""
        if not self.machine.pooled:
            return self._backfill_beside_head(first, now)
        profile = self.machine.profile
        free_now = profile.free_at(now)
        started: List[Task] = []
        head = self._line[self._head]
        shadow = head.planned
        assert shadow is not None
        index, line = self._index, self._line
        rectangles = bool(self._reservations)
        head_end = shadow + planned_hold(head)
        extra = 0 if rectangles else profile.free_at(shadow) - head.size
        while free_now > 0:
            # the sizes free now, by the first of their tasks in the line: the first that
            # passes its size's bound is the next task to start
            candidates: List[Tuple[int, int]] = []
            for size in index.sizes:
                if size > free_now:
                    break
                earliest = index.first(size, first, ANY)
                if earliest >= 0:
                    candidates.append((earliest, size))
            candidates.sort()
            best = -1
            spare = profile.min_free(shadow, head_end) - head.size if rectangles else 0
            for earliest, size in candidates:
                if best >= 0 and earliest >= best:
                    break
                if not rectangles:
                    limit = ANY if size <= extra else shadow - now
                elif size <= spare:  # room beside the head all through its window
                    limit = profile.room_until(size, now) - now
                else:
                    limit = min(
                        profile.room_until(size, now) - now,
                        self._beside_head(profile, size + head.size, shadow, head_end) - now,
                    )
                if limit < 0:
                    continue
                position = index.first(size, first, limit)
                if position >= 0 and (best < 0 or position < best):
                    best = position
            if best < 0:
                break
            task = line[best]
            if not rectangles and now + task.estimate > shadow:
                extra -= task.size
            free_now -= task.size
            self._begin(task, now, best)
            started.append(task)
            first = best + 1
        return started

    @staticmethod
    def _beside_head(profile: Profile, need: int, shadow: int, head_end: int) -> int:
        """The latest end for a task started now that overlaps the head's window [shadow,
        head_end) only where ``need`` units (its own and the head's) are free: unbounded if
        they are free all through the head's window."""
        until = profile.room_until(need, shadow)
        return ANY if head_end <= until else max(until, shadow)

    def _backfill_beside_head(self, first: int, now: int) -> List[Task]:
        """Where counting units is not enough (tasks on particular nodes): the head's window
        is held in place while the later tasks that fit now start beside it."""
        head = self._line[self._head]
        shadow = head.planned
        assert shadow is not None
        machine = self.machine
        head_end = shadow + planned_hold(head)
        machine.take(head, shadow, head_end)
        started: List[Task] = []
        line = self._line
        for i in range(first, len(line)):
            task = line[i]
            if task.start is None and machine.fits(task, now, task.estimate):
                self._begin(task, now, i)
                started.append(task)
        machine.give_back(head, shadow, head_end)
        return started

    def _begin(self, task: Task, now: int, position: int) -> None:
        """Start the task at line ``position`` now."""
        task.window_end = now + task.estimate
        self.machine.take(task, now, task.window_end)
        task.start = now
        self._waiting -= 1
        if self.machine.pooled:
            self._index.remove(task, position)
        line = self._line
        while self._head < len(line) and line[self._head].start is not None:
            self._head += 1


class GreedyEngine(Engine):
    """Backfilling without reservations: every queued task that fits now starts, in queue
    order; a task that does not fit protects nothing (Aridor et al.'s "aggressive backfill",
    docs/design.md §4.9). Without a completion since the last pass only arrivals can fit."""

    policy = Policy.GREEDY

    def _pass(self, now: int) -> List[Task]:
        queue = self._queue
        first = 0 if self._dirty else len(queue)
        queue.extend(self._arrivals)
        self._arrivals.clear()
        self._dirty = False
        machine = self.machine
        free = machine.profile.free_at(now)
        started: List[Task] = []
        for i in range(first, len(queue)):
            if free <= 0:
                break
            task = queue[i]
            if machine.fits(task, now, task.estimate):
                task.window_end = now + task.estimate
                machine.take(task, now, task.window_end)
                task.start = now
                free -= task.size
                started.append(task)
        if started:
            self._queue = [task for task in queue if task.start is None]
        return started

    def _blocked(
        self, task: Task, now: int, first: bool, taken: List[Tuple[Task, int, int]]
    ) -> bool:
        """A task that cannot start protects nothing: later tasks may still push work out."""
        return True


class FitBound:
    """Lower bounds for earliest fits while a profile only loses capacity.

    Once a task of some size and hold fits earliest at s, a task of the same size and a hold
    no shorter cannot fit before s until capacity is given back; searches start there.
    """

    def __init__(self) -> None:
        # per size: the holds seen and the latest fit of each, as parallel lists (the hot
        # loop in after() then reads plain lists, no dict items)
        self._holds: Dict[int, List[int]] = {}
        self._fits: Dict[int, List[int]] = {}

    def copy(self) -> FitBound:
        clone = FitBound()
        clone._holds = {size: holds[:] for size, holds in self._holds.items()}
        clone._fits = {size: fits[:] for size, fits in self._fits.items()}
        return clone

    def after(self, size: int, hold: int, default: int) -> int:
        holds = self._holds.get(size)
        if holds is None:
            return default
        fits = self._fits[size]
        best = default
        for k in range(len(holds)):
            if holds[k] <= hold and fits[k] > best:
                best = fits[k]
        return best

    def found(self, size: int, hold: int, fit: int) -> None:
        holds = self._holds.get(size)
        if holds is None:
            self._holds[size] = [hold]
            self._fits[size] = [fit]
            return
        fits = self._fits[size]
        for k in range(len(holds)):
            if holds[k] == hold:
                fits[k] = fit
                return
        holds.append(hold)
        fits.append(fit)


class ConservativeEngine(Engine):
    """Conservative backfilling: every queued task holds a reservation at its earliest fit."""

    policy = Policy.CONSERVATIVE

    def _pass(self, now: int) -> List[Task]:
        if self._dirty:
            self._dirty = False
            self._compress(now)
        self._place_arrivals(now)
        queue = self._queue
        started = [task for task in queue if task.planned == now]
        if started:
            self._queue = [task for task in queue if task.planned != now]
        return started

    def _place_arrivals(self, now: int) -> None:
        """Reserve each arrival's earliest fit, in arrival order.

        Placing only takes capacity away, so on a pooled machine the earliest fit of a task can
        only be later than that of an earlier task of the same size and no longer hold: the
        search starts there. (A planner placing a whole queue at once scans the profile once
        per shape, not per job.) Slurm's search on nodes always starts from now.
        """
        bound = FitBound()
        pooled = self.machine.pooled
        for task in self._arrivals:
            hold = planned_hold(task)
            self._place(task, bound.after(task.size, hold, now) if pooled else now)
            assert task.planned is not None
            bound.found(task.size, hold, task.planned)
            self._queue.append(task)
        self._arrivals.clear()

    def _place(self, task: Task, after: int) -> None:
        hold = planned_hold(task)
        start = self.machine.earliest_fit(task, hold, after)
        if start is None:
            raise ValueError(f"{task!r} can never fit in capacity {self.capacity}")
        task.window_end = start + hold
        self.machine.take(task, start, task.window_end)
        task.planned = start

    def _compress(self, now: int) -> None:
        """Revisit queued tasks in order; each moves to its earliest fit if that is earlier.

        Most tasks cannot move, and many share a shape, so the question "where would a task of
        this shape fit?" is answered once per shape and kept while it stays exact. A move
        frees capacity only from ``freed_from`` on; a shape's earliest fit s of duration d can
        only get earlier through a window reaching past ``freed_from``, and every window
        starting before s ends before s + d. So an answer survives a move if its window ends by
        ``freed_from`` and does not overlap the window the task moved into. (That holds for
        pooled units; on nodes every task is searched again.)
        """
        machine = self.machine
        pooled = machine.pooled
        fit_of_shape: Dict[Tuple[int, int], Optional[int]] = {}
        for task in self._queue:
            planned = task.planned
            assert planned is not None
            if planned <= now:
                continue
            hold = planned_hold(task)
            if pooled:
                shape = (task.size, hold)
                if shape in fit_of_shape:
                    unclipped = fit_of_shape[shape]
                else:
                    unclipped = fit_of_shape[shape] = machine.profile.earliest_fit(*shape, now)
                if (unclipped is None or unclipped >= planned) and machine.run_start(
                    task, planned, now
                ) is None:
                    continue
            machine.give_back(task, planned, planned + hold)
            earlier = machine.earliest_fit(task, hold, now, before=planned)
            start = planned if earlier is None else earlier
            machine.take(task, start, start + hold)
            if start != planned:
                task.planned = start
                task.window_end = start + hold
                taken_end = start + hold
                freed_from = max(planned, taken_end)
                fit_of_shape = {
                    shape: fit
                    for shape, fit in fit_of_shape.items()
                    if fit is not None
                    and fit + shape[1] <= freed_from
                    and (fit + shape[1] <= start or fit >= taken_end)
                }
                self._dirty = True

    def _blocked(
        self, task: Task, now: int, first: bool, taken: List[Tuple[Task, int, int]]
    ) -> bool:
        """Every queued task holds its earliest fit: later tasks start only around it."""
        self._keep_earliest(task, now, taken)
        return True

    def _replan(self, withdrawn: List[Tuple[Task, int]]) -> None:
        """Lay the queue out again around the new reservation, in queue order."""
        for task, _ in withdrawn:
            self._place(task, self.now)


def make_engine(
    policy: Policy,
    capacity: int,
    now: int,
    machine: Optional[Machine] = None,
    preemptive: bool = False,
    requeue: bool = False,
) -> Engine:
    """A fresh engine for ``policy`` over ``capacity`` units, its clock at ``now``, on
    ``machine`` (default: the units pooled); ``preemptive``: higher-priority tasks suspend
    lower-priority running ones (which start over with ``requeue``)."""
    policy = Policy(policy)
    engine: Engine
    if policy is Policy.FCFS:
        engine = FcfsEngine(capacity, now, machine)
    elif policy is Policy.EASY:
        engine = EasyEngine(capacity, now, machine)
    elif policy is Policy.GREEDY:
        engine = GreedyEngine(capacity, now, machine)
    else:
        engine = ConservativeEngine(capacity, now, machine)
    engine.preemptive = preemptive
    engine.requeue = requeue
    return engine


# -- prediction over a snapshot ------------------------------------------------------------------


@dataclass
class Plan:
    """A snapshot's predicted future under one policy.

    ``profile`` is the free capacity with running jobs, reservations and every pending job at
    its planned start; ``starts``/``ends`` map pending job ids to their planned windows;
    ``sources`` says for each whether the start is the batch system's own estimate or ours;
    ``unplanned`` lists pending jobs that cannot start whatever happens (held, or larger than
    the machine). ``placed_at_once`` is true for a conservative plan whose pending jobs were
    all placed in one pass at ``now``, in the order of ``starts``: such a plan can be re-used
    by :func:`replan_with_reservation`. ``reservation_nodes`` says, on a node-aware plan, on
    which nodes (and how many cores on each) each of the extra reservations asked for goes.
    """

    now: int
    capacity: int
    policy: Policy
    profile: Profile
    starts: Dict[str, int] = field(default_factory=dict)
    ends: Dict[str, int] = field(default_factory=dict)
    sizes: Dict[str, int] = field(default_factory=dict)
    sources: Dict[str, Source] = field(default_factory=dict)
    unplanned: List[str] = field(default_factory=list)
    horizon: int = 0
    placed_at_once: bool = False
    reservation_nodes: Dict[object, Allocation] = field(default_factory=dict)
    _queue: Optional[Tuple[List[str], List[int], List[int], List[int]]] = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self._queue = None  # compiled dataclasses leave init=False fields unset

    def queue(self) -> Tuple[List[str], List[int], List[int], List[int]]:
        """Pending job ids in plan order, with their sizes, planned starts and holds.

        Built once and kept: every fee of a quote re-plans the queue from these lists, and
        reading them beats looking each job up in three dicts 10,000 times per alternative.
        """
        if self._queue is None:
            ids = list(self.starts)
            starts = [self.starts[job_id] for job_id in ids]
            holds = [max(self.ends[job_id] - self.starts[job_id], 1) for job_id in ids]
            self._queue = (ids, [self.sizes[job_id] for job_id in ids], starts, holds)
        return self._queue


def plan(
    snapshot: ClusterSnapshot,
    policy: Policy = Policy.CONSERVATIVE,
    extra_reservations: Iterable[Tuple[object, int, int, int]] = (),
    horizon: int = 48 * 3600,
    batch_estimates: bool = True,
    preemptive: bool = False,
    requeue: bool = False,
) -> Plan:
    """Predict when each pending job starts, and the free capacity that leaves.

    Running jobs hold their units until start + time limit (those running inside a reservation
    of the snapshot are covered by it), reservations hold theirs, and pending jobs are laid out
    in priority order by ``policy``, every task running to its estimate. A job with a
    ``not_before`` in the future joins the queue then. Jobs that cannot start (held, bound to a
    reservation, larger than the machine) are listed in ``unplanned``. ``extra_reservations``
    (key, start, end, size) are added as if they existed: pricing asks "and with this
    reservation in place?". Raises ReservationConflict if one of them collides with running
    work or an existing reservation; on a node-aware snapshot the nodes each one got are in
    ``reservation_nodes``.

    With ``batch_estimates``, a job whose batch system published an expected start (Slurm's
    backfill does) is held at that start, if it fits there after the reservations, and its
    source is BATCH; the rest are predicted around it. Those estimates are not a consistent
    plan (two jobs may be promised the same nodes), so one that does not fit is predicted.

    On a snapshot whose ``placement`` is SLURM, jobs go on particular nodes as Slurm's backfill
    places them (:mod:`siteagent.core.nodes`), the jobs of partitions sharing nodes with this
    one (``neighbours``) among them; those are placed, not reported.

    ``preemptive``: the batch system suspends running jobs for pending jobs of higher absolute
    priority (``Job.absolute_priority``, docs/design.md §4.6), and keeps its queue in that
    order: the starts are predicted so (the profile still holds every running job to its
    limit); with ``requeue`` a preempted job starts over instead of resuming.
    """
    now = snapshot.now
    ground = groundwork(snapshot, policy, preemptive, requeue)
    engine, nodes = ground.engine, ground.nodes
    result = Plan(
        now=now, capacity=snapshot.capacity, policy=Policy(policy), profile=engine.profile
    )
    for key, start, end, size in extra_reservations:
        got = engine.add_reservation(key, start, end, size)
        if nodes is not None:
            result.reservation_nodes[key] = nodes.names(got.placement)
    ours = {job.id for job in snapshot.pending}
    pending, pinned = _queued(
        snapshot, engine, nodes, batch_estimates, ours, result.unplanned, preemptive
    )
    reserved = [window for key, window in engine.reservations.items() if not _is_pin(key)]
    # read before the prediction runs: it drops each pin once its window has passed
    pinned_at = {task.key: engine.reservations[("pinned", task.key)][0] for task in pinned}
    starts = _predict_starts(engine, now, ground.running, pending)
    starts.update(pinned_at)
    pinned_keys = set(pinned_at)
    reported = [task for task in pinned + pending if task.key in ours]
    result.profile = _profile_of(snapshot, ground.held, reserved, reported, starts)
    for task in [task for task in pending + pinned if task.key in ours]:
        key = str(task.key)
        result.starts[key] = starts[task.key]
        result.ends[key] = starts[task.key] + task.estimate
        result.sizes[key] = task.size
        result.sources[key] = Source.BATCH if task.key in pinned_keys else Source.PREDICTED
    last_end = max(result.ends.values(), default=now)
    result.horizon = max(now + horizon, last_end + 300)
    result.placed_at_once = (
        isinstance(engine, ConservativeEngine)
        and engine.machine.pooled
        and not pinned
        and all(task.submit <= now for task in pending)
    )
    return result


@dataclass
class Groundwork:
    """What every plan of a snapshot starts from: an engine whose machine holds the running
    jobs and the snapshot's reservations, with no queue yet; the running jobs' tasks; the
    reservations running jobs run inside (``held``); the node table of a node-aware snapshot."""

    engine: Engine
    running: List[Task]
    held: Set[str]
    nodes: Optional[NodeTable]


def groundwork(
    snapshot: ClusterSnapshot, policy: Policy, preemptive: bool = False, requeue: bool = False
) -> Groundwork:
    """The running work and the reservations of ``snapshot`` on a fresh engine of ``policy``
    (preempting as :func:`plan` says)."""
    now = snapshot.now
    nodes = NodeTable(snapshot) if snapshot.placement is Placement.SLURM else None
    machine = nodes.machine(snapshot) if nodes is not None else None
    engine = make_engine(
        policy, snapshot.capacity, now, machine, preemptive=preemptive, requeue=requeue
    )
    held = {res.name for res in snapshot.reservations if res.start <= now < res.end}
    running = []
    for job in snapshot.running + snapshot.neighbours.running:
        if job.reservation in held:
            continue
        assert job.start is not None
        task = _task_of(snapshot, job, nodes, preemptive)
        engine.add_running(task, job.start)
        running.append(task)
    for res in snapshot.reservations:
        if res.end > now:
            holder = Task(("batch", res.name), res.demand(snapshot.unit), res.end, res.start)
            if nodes is not None:
                holder.placement = nodes.placement(res.allocation)
            engine.add_reservation(
                holder.key, res.start, res.end, res.demand(snapshot.unit), holder
            )
    return Groundwork(engine, running, held, nodes)


def starts_with_reservation(
    snapshot: ClusterSnapshot,
    ground: Groundwork,
    key: object,
    start: int,
    end: int,
    size: int,
    batch_estimates: bool = True,
) -> Dict[str, int]:
    """``plan(snapshot, policy, [(key, start, end, size)]).starts`` on a pooled snapshot,
    from its ``ground`` (forked, so it serves every window of a poll): only the prediction is
    run again, not the set-up nor the plan's profile. Raises ReservationConflict as plan()."""
    engine = ground.engine.fork()
    engine.add_reservation(key, start, end, size)
    ours = {job.id for job in snapshot.pending}
    pending, pinned = _queued(snapshot, engine, None, batch_estimates, ours, [])
    pinned_at = {task.key: engine.reservations[("pinned", task.key)][0] for task in pinned}
    starts = _predict_starts(engine, snapshot.now, ground.running, pending)
    starts.update(pinned_at)
    return {str(task.key): starts[task.key] for task in pending + pinned if task.key in ours}


def _queued(
    snapshot: ClusterSnapshot,
    engine: Engine,
    nodes: Optional[NodeTable],
    batch_estimates: bool,
    ours: Set[str],
    unplanned: List[str],
    preemptive: bool = False,
) -> Tuple[List[Task], List[Task]]:
    """The queued jobs' tasks in queue order: those to predict, and those held at the batch
    system's expected start (pinned in ``engine``). This partition's jobs that cannot start
    go to ``unplanned``."""
    pending: List[Task] = []
    pinned: List[Task] = []
    for job in _queue_order(snapshot.pending, snapshot.neighbours.pending):
        task = _task_of(snapshot, job, nodes, preemptive)
        if not job.eligible or job.reservation or not engine.machine.ever_fits(task):
            if job.id in ours:
                unplanned.append(job.id)
            continue
        if batch_estimates and _pin(engine, task, job.expected_start):
            pinned.append(task)
            continue
        pending.append(task)
    return pending, pinned


def reservation_nodes(
    snapshot: ClusterSnapshot,
    start: int,
    end: int,
    size: int,
    policy: Policy = Policy.CONSERVATIVE,
) -> Allocation:
    """Where a new reservation of ``size`` units over [start, end) goes beside the snapshot's
    running work and reservations: its nodes (and cores on each) on a node-aware snapshot,
    nothing on a pooled one (the batch system chooses there). Queued jobs do not count: they
    are planned around it. Raises ReservationConflict when there is no room; a running job
    ending less than ``snapshot.end_margin`` seconds before ``start`` is in the way too."""
    key = ("reservation", start, end, size)
    bare = without_queue(snapshot)
    return plan(bare, policy, [(key, start, end, size)]).reservation_nodes.get(key, ())


def without_queue(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """What a new reservation must fit beside: ``snapshot`` without queued jobs (they are
    planned around it), running jobs held ``end_margin`` seconds past their limit."""
    return dataclasses.replace(
        snapshot,
        running=_with_margin(snapshot.running, snapshot.end_margin),
        pending=(),
        neighbours=dataclasses.replace(
            snapshot.neighbours,
            running=_with_margin(snapshot.neighbours.running, snapshot.end_margin),
            pending=(),
        ),
    )


def _with_margin(running: Tuple[Job, ...], margin: int) -> Tuple[Job, ...]:
    """Running jobs held ``margin`` seconds past their limit (unlimited ones stay so)."""
    if not margin:
        return running
    return tuple(
        dataclasses.replace(job, limit=job.limit + margin) if job.limit else job for job in running
    )


def _queue_order(pending: Sequence[Job], neighbours: Sequence[Job]) -> List[Job]:
    """This partition's queue with the neighbours' jobs merged in by priority (then submit
    time); among equals, this partition's first."""
    if not neighbours:
        return list(pending)
    return list(heapq.merge(pending, neighbours, key=lambda job: (-job.priority, job.submit)))


def _pin(engine: Engine, task: Task, expected_start: Optional[int]) -> bool:
    """Hold a job at the batch system's expected start, if it has one and fits there."""
    if expected_start is None or expected_start < engine.now:
        return False
    hold = planned_hold(task)
    try:
        engine.add_reservation(
            ("pinned", task.key), expected_start, expected_start + hold, task.size, task
        )
    except ReservationConflict:
        return False
    return True


def _is_pin(key: object) -> bool:
    return isinstance(key, tuple) and len(key) == 2 and key[0] == "pinned"


def replan_with_reservation(
    base: Plan, hard: Profile, start: int, end: int, size: int
) -> Optional[Dict[str, int]]:
    """The starts ``plan()`` would give with one more reservation, reusing a conservative plan.

    ``hard`` is the free capacity with running jobs and reservations only. Jobs are placed in
    the base plan's order; job k keeps its start unless the new reservation, or a job moved
    before it, took capacity inside its window, or a job moved before it freed capacity early
    enough for k to start earlier. Only those jobs are searched for. Returns None when the
    plan cannot be re-used (not conservative, or jobs joining later); raises
    ReservationConflict like ``plan()`` when the reservation collides with running work.
    """
    if base.policy is not Policy.CONSERVATIVE or not base.placed_at_once:
        return None
    return replan_from(base, hard.copy(), FitBound(), 0, max(start, base.now), end, size)


def replan_from(
    base: Plan, profile: Profile, bound: FitBound, first: int, start: int, end: int, size: int
) -> Dict[str, int]:
    """:func:`replan_with_reservation` from the base plan's ``first`` job on.

    ``profile`` is the free capacity with running jobs, reservations and the jobs before
    ``first`` (in the base plan's order) at their planned starts, and ``bound`` holds those
    jobs' fits. Jobs before the first one whose window overlaps the reservation's keep their
    starts (nothing before them moved, and the reservation took nothing from their windows),
    so any ``first`` up to that job gives the same starts: a re-plan need not place them again.
    """
    now = base.now
    if end <= start or not profile.fits(size, start, end - start):
        raise ReservationConflict(
            f"{size} units over [{start}, {end}) conflict with running work or reservations"
        )
    profile.reserve(start, end, size)
    taken: List[Tuple[int, int]] = [(start, end)]
    freed_from = base.horizon  # where moved jobs first gave capacity back; no window reaches it
    ids, sizes, planned_starts, holds = base.queue()
    starts: List[int] = planned_starts[:first]
    for k in range(first, len(ids)):
        job_size, planned, hold = sizes[k], planned_starts[k], holds[k]
        window_end = planned + hold
        if freed_from < window_end:
            fit = profile.earliest_fit(job_size, hold, bound.after(job_size, hold, now))
        elif _overlaps(taken, planned, window_end) and not profile.fits(job_size, planned, hold):
            fit = profile.earliest_fit(job_size, hold, bound.after(job_size, hold, planned))
        else:
            fit = planned
        assert fit is not None
        bound.found(job_size, hold, fit)
        profile.reserve(fit, fit + hold, job_size)
        if fit != planned:
            taken.append((fit, fit + hold))
            freed_from = min(freed_from, planned)
        starts.append(fit)
    return dict(zip(ids, starts))


def _overlaps(intervals: List[Tuple[int, int]], start: int, end: int) -> bool:
    return any(low < end and start < high for low, high in intervals)


def _task_of(
    snapshot: ClusterSnapshot, job: Job, nodes: Optional[NodeTable], preemptive: bool = False
) -> Task:
    """The engine's task for a job; on nodes, with its shape (pending) or placement (running);
    where jobs are ``preemptive``, with its absolute priority."""
    submit = max(job.not_before or 0, snapshot.now) if job.start is None else job.submit
    task = Task(job.id, snapshot.demand(job), job.limit or UNLIMITED_S, submit, payload=job)
    if preemptive:
        task.priority = job.absolute_priority
    if nodes is not None:
        if job.start is None:
            task.shape = nodes.shape(job)
        else:
            task.placement = nodes.placement(job.allocation)
    return task


#: Event kinds of the prediction, in the order they are handled within one instant.
_COMPLETION, _RESERVATION_END, _ARRIVAL = 0, 1, 2


def _predict_starts(
    engine: Engine, now: int, running: List[Task], pending: List[Task]
) -> Dict[object, int]:
    """Run the engine forward, every task ending at its estimate, until every task started.

    Events are what the simulator has: completions, reservation ends, arrivals (jobs whose
    ``not_before`` is in the future). Under conservative backfilling the prediction may stop
    once every task has arrived: with exact estimates nothing frees early, so reservations
    never move again and are the starts.
    """
    starts: Dict[object, int] = {}
    # the event heap holds (time, kind, order) packed into one int, its item in ``items``
    events: List[int] = []
    items: List[object] = []
    # a preemptive engine suspends tasks: a completion is that of the task's latest run only
    runs: Dict[Task, int] = {}
    for task in running:
        _push(events, items, task.window_end, _COMPLETION, (task, 0))
    for key, (_, end, _) in engine.reservations.items():
        _push(events, items, end, _RESERVATION_END, key)
    for task in pending:
        if task.submit > now:
            _push(events, items, task.submit, _ARRIVAL, task)
        else:
            engine.submit(task)
    arrivals_left = sum(1 for task in pending if task.submit > now)
    conservative = isinstance(engine, ConservativeEngine)
    t = now
    while True:
        started = engine.schedule(t)
        for task in engine.take_suspended():
            runs[task] = runs.get(task, 0) + 1
        for task in started:
            starts.setdefault(task.key, t)
            runs[task] = runs.get(task, 0) + 1
            _push(events, items, t + task.estimate, _COMPLETION, (task, runs[task]))
        if conservative and not arrivals_left and not engine.preemptive:
            # (with preemption a queued task may yet suspend work backfilled before it)
            for task in engine.queue:
                assert task.planned is not None
                starts[task.key] = task.planned
            return starts
        if not engine.waiting and not arrivals_left:
            return starts
        if not events:
            raise RuntimeError("tasks wait but nothing runs or ends: the engine stalled")
        t = events[0] >> _TIME_SHIFT
        while events and events[0] >> _TIME_SHIFT == t:
            packed = heapq.heappop(events)
            kind = (packed >> _KIND_SHIFT) & 3
            item = items[packed & _ORDER_MASK]
            if kind == _COMPLETION:
                assert isinstance(item, tuple)
                task, run = item
                if runs.get(task, 0) == run:
                    engine.complete(task, t)
            elif kind == _RESERVATION_END:
                engine.reservation_ended(item)
            else:
                assert isinstance(item, Task)
                engine.submit(item)
                arrivals_left -= 1


#: How an event is packed into one int, ordered as (time, kind, order): a heap of ints is
#: compared and kept without a tuple per event.
_KIND_SHIFT = 28
_TIME_SHIFT = 30
_ORDER_MASK = (1 << _KIND_SHIFT) - 1


def _push(events: List[int], items: List[object], t: int, kind: int, item: object) -> None:
    if len(items) > _ORDER_MASK:
        raise OverflowError("more events than a prediction can order")
    heapq.heappush(events, (t << _TIME_SHIFT) | (kind << _KIND_SHIFT) | len(items))
    items.append(item)


def _profile_of(
    snapshot: ClusterSnapshot,
    covered: Set[str],
    reservations: Iterable[Tuple[int, int, int]],
    pending: List[Task],
    starts: Dict[object, int],
) -> Profile:
    """Free capacity with running jobs, reservations and pending jobs at their planned starts."""
    now = snapshot.now
    profile = Profile(snapshot.capacity, now)
    for job in snapshot.running:
        if job.reservation in covered:
            continue
        assert job.start is not None
        limit = job.limit + snapshot.end_margin if job.limit else UNLIMITED_S
        end = max(job.start + limit, now + 1)
        profile.reserve(now, end, snapshot.demand(job))
    for start, end, size in reservations:
        profile.reserve(start, end, size)
    for task in pending:
        start = starts[task.key]
        profile.reserve(start, start + task.estimate, task.size)
    return profile
