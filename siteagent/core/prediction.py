"""Prediction: a snapshot's future under one policy, and the re-plans pricing asks for.

:func:`plan` drives an engine (:mod:`siteagent.core.engines`) over a snapshot, every task
running to its estimate, and returns the :class:`Plan`: planned starts and the free profile.
:func:`replan_with_reservation` re-uses a conservative plan to answer "and with this
reservation?". Invariant: the engines decide, this module only feeds them and reads them.
See docs/design.md §4.
"""

from __future__ import annotations

import dataclasses
import heapq
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from siteagent.core.engines import (
    ConservativeEngine,
    Engine,
    FitBound,
    Policy,
    ReservationConflict,
    make_engine,
)
from siteagent.core.machine import Task, planned_hold
from siteagent.core.nodes import NodeMachine, NodeTable
from siteagent.core.profile import Profile
from siteagent.core.values import (
    UNLIMITED_S,
    Allocation,
    ClusterSnapshot,
    Job,
    Placement,
    Source,
)


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
    work or an existing reservation; on a Slurm snapshot the nodes each one got are in
    ``reservation_nodes`` (pbs_sched chooses its own).

    With ``batch_estimates``, a job whose batch system published an expected start (Slurm's
    backfill does) is held at that start, if it fits there after the reservations, and its
    source is BATCH; the rest are predicted around it. Those estimates are not a consistent
    plan (two jobs may be promised the same nodes), so one that does not fit is predicted.

    On a snapshot whose ``placement`` is SLURM, jobs go on particular nodes as Slurm's backfill
    places them (:mod:`siteagent.core.nodes`), the jobs of partitions sharing nodes with this
    one (``neighbours``) among them; those are placed, not reported. On PBS, reservations go
    on vnodes where nothing is queued (:func:`on_nodes`).

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
        if nodes is not None and snapshot.placement is Placement.SLURM:
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
    nodes = NodeTable(snapshot) if on_nodes(snapshot) else None
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


def on_nodes(snapshot: ClusterSnapshot) -> bool:
    """Whether a plan of ``snapshot`` places work on particular nodes: always on Slurm; on
    PBS only where nothing is queued (the snapshot of the admission checks,
    :func:`without_queue`), since its reservations follow pbs_sched's placement but its
    queue is planned pooled."""
    if snapshot.placement is Placement.PBS:
        return not snapshot.pending and not snapshot.neighbours.pending
    return snapshot.placement is Placement.SLURM


def reservable_units(snapshot: ClusterSnapshot) -> Optional[Callable[[int, int], int]]:
    """How many units one new reservation over [start, end) could have beside the running
    work and reservations of a snapshot whose batch system places reservations on nodes;
    None on a pooled one (its profile says it)."""
    if snapshot.placement is Placement.POOLED:
        return None
    machine = groundwork(without_queue(snapshot), Policy.CONSERVATIVE).engine.machine
    if not isinstance(machine, NodeMachine):
        return None
    return machine.reservable_units


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
    running work and reservations: its nodes (and cores on each) on a Slurm snapshot,
    nothing on a pooled or PBS one (the batch system chooses there, PBS by the rule the
    check follows). Queued jobs do not count: they
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
    """This partition's queue with the neighbours' jobs merged in by priority, then submit
    time, then job number, as Slurm sorts its queue (job_scheduler.c ``sort_job_queue2``:
    equal priorities are the rule from 24.11, whose default priority/multifactor gives every
    job 1); among equals, this partition's first."""
    if not neighbours:
        return list(pending)
    return list(heapq.merge(pending, neighbours, key=_queue_key))


def _queue_key(job: Job) -> Tuple[int, int, int]:
    number = re.match(r"\d+", job.id)
    return -job.priority, job.submit, int(number.group()) if number else 0


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
            # a start before ``planned`` must overlap capacity a moved job gave back, all of
            # it at or after ``freed_from``: earlier starts did not fit in the base plan
            after = max(now, freed_from - hold + 1)
            fit = profile.earliest_fit(job_size, hold, bound.after(job_size, hold, after))
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
