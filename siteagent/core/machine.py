"""Where work goes: the machine a scheduling engine plans on.

The engines (:mod:`siteagent.core.engines`) decide *when* tasks start: queue order,
reservations, backfilling. A :class:`Machine` answers the questions those rules ask of the
hardware: does this task fit at this instant, where is its earliest fit, take its window, give
it back. Two answer them:

* :class:`PooledMachine`: free units are one count over time (a :class:`Profile`): the
  simulator, the replayed trace and PBS's queue;
* ``NodeMachine`` (:mod:`siteagent.core.nodes`): free cores per node, tasks placed on
  particular nodes as Slurm's select/cons_tres with its backfill scheduler places them, and
  advance reservations as Slurm or PBS places them.

A pooled machine of N units is the node machine's special case of one node of N cores, so one
set of backfilling rules serves both.
"""

from __future__ import annotations

import abc
from typing import Optional, Tuple

from siteagent.core.profile import Profile

#: Cores a task holds on each node it uses: (node index, cores), in node order.
NodeCores = Tuple[Tuple[int, int], ...]


class Shape:
    """What a job asks of nodes: ``cpus`` in all, on ``min_nodes`` to ``max_nodes`` nodes (0:
    as many as it takes), whole nodes if ``exclusive``; ``nodes`` is the mask of the nodes it
    may use (its partition's), 0 for every node."""

    __slots__ = ("cpus", "exclusive", "max_nodes", "min_nodes", "nodes")

    def __init__(
        self,
        cpus: int,
        min_nodes: int = 1,
        max_nodes: int = 0,
        exclusive: bool = False,
        nodes: int = 0,
    ) -> None:
        self.cpus = cpus
        self.min_nodes = max(1, min_nodes)
        self.max_nodes = max_nodes
        self.exclusive = exclusive
        self.nodes = nodes

    def __repr__(self) -> str:
        return (
            f"Shape(cpus={self.cpus}, nodes={self.min_nodes}-{self.max_nodes or ''}"
            f"{', exclusive' if self.exclusive else ''})"
        )


class Task:
    """A unit of work as a scheduling engine sees it: size, estimate, and where it stands.

    ``planned`` is the start the engine currently holds for a queued task (its reservation
    under conservative backfilling, the shadow time of EASY's protected head), else None.
    ``window_end`` is where the window the task holds in the profile ends (planned or
    running), so that a completion gives back exactly what was taken. ``payload`` is whatever
    the driver wants back (the SWF record, the snapshot's Job). On a node machine, ``shape`` is
    what the task asks of nodes (None: an advance reservation of ``size`` units) and
    ``placement`` the cores it holds or was last found room for. ``priority`` is the task's
    absolute priority (higher first; docs/design.md §4.6): equal everywhere, as in a trace, it
    changes nothing; otherwise the queue is kept in its order, and a preemptive engine suspends
    lower-priority running tasks for it.
    """

    __slots__ = (
        "estimate",
        "key",
        "payload",
        "placement",
        "planned",
        "priority",
        "run",
        "shape",
        "size",
        "start",
        "submit",
        "window_end",
    )

    def __init__(
        self,
        key: object,
        size: int,
        estimate: int,
        submit: int,
        run: Optional[int] = None,
        payload: object = None,
        priority: int = 0,
    ) -> None:
        self.key = key
        self.size = size
        self.estimate = estimate
        self.submit = submit
        self.run = estimate if run is None else run
        self.payload = payload
        self.start: Optional[int] = None
        self.planned: Optional[int] = None
        self.window_end = 0
        self.shape: Optional[Shape] = None
        self.placement: NodeCores = ()
        self.priority = priority

    def __repr__(self) -> str:
        return f"Task({self.key!r}, size={self.size}, est={self.estimate}, start={self.start})"


def planned_hold(task: Task) -> int:
    """How long a planned window (a reservation, EASY's claim) holds a task's units.

    Its estimate, and at least the instant it starts: a zero-length task needs its units free
    when it starts, so nothing else may be planned onto them at that instant. Once started it
    is already over and holds nothing.
    """
    return task.estimate if task.estimate > 0 else 1


class Machine(abc.ABC):
    """Free capacity over time, and where tasks fit in it.

    ``profile`` is the free capacity in units, pooled over the whole machine: what slots,
    load and the engines' pooled shortcuts read. ``pooled`` says whether that count is all
    there is to know (then the engines may use their counting shortcuts on ``profile``).
    """

    pooled: bool = False
    profile: Profile

    @abc.abstractmethod
    def ever_fits(self, task: Task) -> bool:
        """Whether ``task`` fits on the machine at all, everything else gone."""

    @abc.abstractmethod
    def fits(self, task: Task, start: int, hold: int) -> bool:
        """Whether ``task`` can run over [start, start + hold); on a node machine the nodes
        found are kept in ``task.placement`` for :meth:`take`."""

    @abc.abstractmethod
    def earliest_fit(
        self, task: Task, hold: int, after: int, before: Optional[int] = None
    ) -> Optional[int]:
        """The earliest start >= ``after`` for ``task`` holding ``hold`` seconds (only starts
        before ``before`` count, when given); None if there is none. Like :meth:`fits`, it
        keeps the nodes found in ``task.placement``."""

    @abc.abstractmethod
    def take(self, task: Task, start: int, end: int) -> None:
        """Hold ``task``'s units over [start, end), where the last fit found them."""

    @abc.abstractmethod
    def give_back(self, task: Task, start: int, end: int) -> None:
        """Give back what ``task`` holds over [start, end)."""

    @abc.abstractmethod
    def run_start(self, task: Task, before: int, after: int) -> Optional[int]:
        """Earliest r >= after from which ``task`` fits all over [r, before), or None: a task
        reserved at ``before`` could slide back there (the conservative engine's hint that a
        search is worth it; answering ``after`` is always safe)."""

    @abc.abstractmethod
    def hold(self, task: Task, start: int, end: int) -> bool:
        """Hold ``task.size`` units over [start, end) for an advance reservation, on the nodes
        of ``task.placement`` if given, else where the machine chooses; False (nothing held)
        if running work or other reservations leave no room."""

    @abc.abstractmethod
    def advance(self, now: int) -> None:
        """Forget everything before ``now``."""


class PooledMachine(Machine):
    """Units pooled over the whole machine: one :class:`Profile`, every task a count."""

    pooled = True

    def __init__(self, capacity: int, now: int, profile: Optional[Profile] = None) -> None:
        self.profile = Profile(capacity, now) if profile is None else profile

    def ever_fits(self, task: Task) -> bool:
        return 0 < task.size <= self.profile.capacity

    def fits(self, task: Task, start: int, hold: int) -> bool:
        return self.profile.fits(task.size, start, hold)

    def earliest_fit(
        self, task: Task, hold: int, after: int, before: Optional[int] = None
    ) -> Optional[int]:
        return self.profile.earliest_fit(task.size, hold, after, before)

    def take(self, task: Task, start: int, end: int) -> None:
        self.profile.reserve(start, end, task.size)

    def give_back(self, task: Task, start: int, end: int) -> None:
        self.profile.release(start, end, task.size)

    def run_start(self, task: Task, before: int, after: int) -> Optional[int]:
        return self.profile.run_start(task.size, before, after)

    def hold(self, task: Task, start: int, end: int) -> bool:
        if not self.profile.fits(task.size, start, end - start):
            return False
        self.profile.reserve(start, end, task.size)
        return True

    def advance(self, now: int) -> None:
        self.profile.advance(now)
