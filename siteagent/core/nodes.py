"""A machine of particular nodes, where tasks go as Slurm's backfill scheduler puts them.

Slurm (22.05, sched/backfill with select/cons_tres) estimates every pending job's start in one
pass, in priority order, as follows; :meth:`NodeMachine.earliest_fit` does the same for one
task:

* it tries a start ``start_res``, first now: the nodes the job may use are its partition's
  nodes that are up, less those in an advance reservation overlapping [start_res, start_res +
  limit] (a core reservation takes only its cores, unless the job wants whole nodes), less
  those promised to a pending job planned before it in any backfill record overlapping that
  window (:mod:`blocks`);
* on those nodes the select plugin answers when the job could start (``_will_run_test``): now
  if the free cores allow it, else it lets the running jobs end in order of their end times,
  in groups: up to a barrier 30 s past the first end (aligned to 30 s), then up to the
  barrier plus 60 s, 120 s, ... (the window doubling until it reaches the next end), and the
  job starts when the last job of the group that made room ends; the nodes and cores it would
  get are Slurm's best fit (:mod:`selection`);
* a start earlier than ``start_res`` becomes ``start_res``; a start whose window would run
  into nodes promised to another job, or that comes after the end of the first backfill record
  (where the promised nodes change), is tried again from there;
* a job that would start later promises its nodes, whole, from its start to its end, both cut
  down to ``bf_resolution``, unless it starts beyond ``bf_window`` (then it promises nothing,
  but its start is still the one Slurm publishes). A job that can start now takes its cores
  from now on, as a running job does.

Slurm publishes no start for a job whose search runs out of records within the window; the
machine still predicts one there: the window's end, or later if the running jobs say so.
Advance reservations (:meth:`NodeMachine.hold`) go on nodes with enough free cores all over
their window, as ``scontrol create reservation`` requires, pending jobs aside. The machine's
``rule`` says how that is counted and chosen where the batch systems differ: Slurm's (every
reservation overlapping the window counted whole, nodes chosen as for a job) or PBS's
(each vnode's least free CPUs over the window, 1-CPU chunks on the vnodes in order:
docs/pbs.md §11.5).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from siteagent.core.blocks import BlockMap
from siteagent.core.machine import Machine, NodeCores, Shape, Task
from siteagent.core.node_selection import choose_nodes, free_placement
from siteagent.core.profile import Profile
from siteagent.core.values import (
    Allocation,
    CapacityUnit,
    ClusterSnapshot,
    Job,
    NodeState,
    Placement,
)

#: The select plugin's first window for grouping running jobs by end time, doubled at every
#: group.
END_GROUP_S = 30


class Held:
    """Cores held from now until ``end`` by a running task (or one started now)."""

    __slots__ = ("end", "key", "mask", "placement")

    def __init__(self, key: object, end: int, placement: NodeCores) -> None:
        self.key = key
        self.end = end
        self.placement = placement
        self.mask = mask_of(placement)


class Reserved:
    """Cores an advance reservation holds over [start, end)."""

    __slots__ = ("end", "key", "placement", "start")

    def __init__(self, key: object, start: int, end: int, placement: NodeCores) -> None:
        self.key = key
        self.start = start
        self.end = end
        self.placement = placement


def mask_of(placement: NodeCores) -> int:
    """The bit mask of the nodes a placement uses."""
    mask = 0
    for node, _ in placement:
        mask |= 1 << node
    return mask


class NodeMachine(Machine):
    """Nodes with ``cores`` each, of scheduling ``weights``, in Slurm's node order.

    ``usable`` are the nodes new work may use. ``whole_nodes``: capacity is counted in nodes
    and every task takes whole nodes (a node-exclusive partition); else in cores.
    ``resolution``, ``window`` and ``kill_wait`` are Slurm's bf_resolution, bf_window and
    KillWait (seconds). ``profile`` counts free units over the whole machine. ``rule`` is
    the batch system whose rule places new advance reservations (SLURM or PBS).
    """

    def __init__(
        self,
        cores: Sequence[int],
        weights: Sequence[int],
        usable: Sequence[bool],
        now: int,
        capacity: int,
        whole_nodes: bool = False,
        resolution: int = 60,
        window: int = 86400,
        kill_wait: int = 30,
        rule: Placement = Placement.SLURM,
    ) -> None:
        self.rule = rule
        self.cores = list(cores)
        self.weights = list(weights)
        self.usable = 0
        for node, ok in enumerate(usable):
            if ok:
                self.usable |= 1 << node
        self.now = now
        self.whole_nodes = whole_nodes
        self.resolution = max(1, resolution)
        self.window = window
        self.kill_wait = kill_wait
        self.profile = Profile(capacity, now)
        self.blocks = BlockMap(
            self._step(now), self._step(now + window), (1 << len(self.cores)) - 1
        )
        self.running: List[Held] = []
        self.used = [0] * len(self.cores)
        self.reserved: List[Reserved] = []
        self._promised: Dict[object, Tuple[int, int, int]] = {}

    # -- the questions of the engines -------------------------------------------------------

    def ever_fits(self, task: Task) -> bool:
        shape = self._shape(task)
        empty = [0] * len(self.cores)
        usable = self._usable(self._allowed(shape), empty, empty, shape)
        return choose_nodes(usable, self.weights, shape) is not None

    def fits(self, task: Task, start: int, hold: int) -> bool:
        shape = self._shape(task)
        start = max(start, self.now)
        reserved, exc = self._reserved(shape, start, start + hold)
        avail = self.blocks.free_over(
            self._allowed(shape) & ~reserved, self._step(start), self._step(start + hold)
        )
        usable = self._free_at(start, avail, exc, shape)
        placement = choose_nodes(usable, self.weights, shape)
        if placement is None:
            return False
        task.placement = placement
        return True

    def earliest_fit(
        self, task: Task, hold: int, after: int, before: Optional[int] = None
    ) -> Optional[int]:
        found = self._backfill(self._shape(task), hold, max(after, self.now))
        if found is None or (before is not None and found[0] >= before):
            return None
        task.placement = found[1]
        return found[0]

    def take(self, task: Task, start: int, end: int) -> None:
        """Work without a placement (running somewhere the snapshot does not say) counts in
        the pooled profile only."""
        self.profile.reserve(start, end, task.size)
        if not task.placement:
            return
        if start <= self.now:
            self._run(Held(task.key, end, task.placement))
            return
        if start > self.now + self.window:
            return
        promise = (mask_of(task.placement), *self._promise_window(start, end))
        self.blocks.promise(*promise)
        self._promised[task.key] = promise

    def give_back(self, task: Task, start: int, end: int) -> None:
        self.profile.release(start, end, task.size)
        promise = self._promised.pop(task.key, None)
        if promise is not None:
            self.blocks.give_back(*promise)
            return
        for index in range(len(self.reserved)):
            if self.reserved[index].key == task.key:
                del self.reserved[index]
                return
        for index in range(len(self.running)):
            held = self.running[index]
            if held.key == task.key:
                del self.running[index]
                for node, cores in held.placement:
                    self.used[node] -= cores
                return

    def run_start(self, task: Task, before: int, after: int) -> Optional[int]:
        return after

    def hold(self, task: Task, start: int, end: int) -> bool:
        """A reservation with its nodes given is the batch system's and is held as it is;
        one without is placed on cores free all over its window, or refused."""
        placement = task.placement
        if not placement:
            placement = self._reservation_placement(task.size, start, end)
            if not placement:
                return False
            task.placement = placement
        self.reserved.append(Reserved(task.key, start, end, placement))
        self.profile.reserve(start, end, task.size)
        return True

    def advance(self, now: int) -> None:
        if now > self.now:
            self.now = now
            self.profile.advance(now)

    # -- placing advance reservations -------------------------------------------------------

    def reservable_units(self, start: int, end: int) -> int:
        """How many units one new reservation over [start, end) could have: cores free all
        over it, or whole nodes in a node unit (what an advertised slot may promise)."""
        free = self._reservable(start, end)
        if self.whole_nodes:
            return sum(1 for n in range(len(free)) if free[n] == self.cores[n] > 0)
        return sum(free)

    def _reservable(self, start: int, end: int) -> List[int]:
        """Cores of each node free all over [start, end) for a reservation: less running
        work ending after ``start`` and the reservations overlapping the window. Slurm may
        give two reservations that do not overlap each other the same cores, or not: counting
        every one never admits what it refuses. PBS counts, on each vnode, the most its
        reservations hold at one instant of the window (docs/pbs.md §11.5)."""
        free = [0] * len(self.cores)
        for node in range(len(self.cores)):
            if self.usable >> node & 1:
                free[node] = self.cores[node]
        for held in self.running:
            if held.end > start:
                for node, cores in held.placement:
                    free[node] -= cores
        overlapping = [res for res in self.reserved if res.start < end and start < res.end]
        if self.rule is Placement.PBS:
            held_most = _most_held(overlapping, start, len(self.cores))
            return [max(0, free[n] - held_most[n]) for n in range(len(free))]
        for res in overlapping:
            for node, cores in res.placement:
                free[node] -= cores
        return [max(0, cores) for cores in free]

    def _reservation_placement(self, size: int, start: int, end: int) -> NodeCores:
        """Where a new reservation of ``size`` units goes on the cores free all over its
        window (whole nodes in a node unit): where Slurm would place a job of that size, or
        PBS's ``place=free`` (``scatter:excl`` for whole vnodes) on the vnodes in order."""
        free = self._reservable(start, end)
        whole = [free[n] if free[n] == self.cores[n] else 0 for n in range(len(free))]
        if self.rule is Placement.PBS:
            if not self.whole_nodes:
                return free_placement(free, size) or ()
            one_each = free_placement([min(1, cores) for cores in whole], size) or ()
            return tuple((node, self.cores[node]) for node, _ in one_each)
        if self.whole_nodes:
            shape = Shape(size, size, size, exclusive=True)
            return choose_nodes(whole, self.weights, shape) or ()
        return choose_nodes(free, self.weights, Shape(size)) or ()

    # -- Slurm's backfill search ------------------------------------------------------------

    def _backfill(self, shape: Shape, limit: int, after: int) -> Optional[Tuple[int, NodeCores]]:
        """Where and when the backfill pass would start a job of ``shape`` and time limit
        ``limit``, searching from ``after`` (see the module's description)."""
        window_end = self.blocks.horizon
        later = after
        while True:
            start_res, later = later, 0
            if start_res > window_end:
                return self._beyond_window(shape, start_res)
            end = max(start_res, self.now) + limit
            reserved, exc = self._reserved(shape, start_res, start_res + limit)
            avail, later = self.blocks.window(self._allowed(shape) & ~reserved, start_res, end)
            after_resv = self._reservation_end_after(start_res, start_res + limit)
            if after_resv and after_resv < window_end and (later == 0 or after_resv < later):
                later = after_resv
            found = self._will_run(shape, avail, exc)
            if found is None:
                if later:
                    continue
                return self._beyond_window(shape, window_end)
            start = max(found[0], start_res)
            if start <= self.now:
                return start, found[1]
            if later and start > later:
                continue
            if start > self.now + self.window:
                return start, found[1]
            first, last = self._promise_window(start, start + limit)
            if self.blocks.overlaps(mask_of(found[1]), first, last):
                # Slurm tries again from the start found; from the same start it would only
                # find the same answer until its time is up, so look one step later
                later = start + (self.resolution if start == start_res else 0)
                continue
            return start, found[1]

    def _promise_window(self, start: int, end: int) -> Tuple[int, int]:
        """The records a job starting at ``start`` promises its nodes in: from the start to
        the end, both cut down to the resolution, at least one step."""
        first = self._step(start)
        return first, max(self._step(end), first + self.resolution)

    def _beyond_window(self, shape: Shape, start: int) -> Optional[Tuple[int, NodeCores]]:
        """Past the window no job promises anything: when the running jobs leave room."""
        found = self._will_run(shape, self._allowed(shape), [0] * len(self.cores))
        if found is None:
            return None
        return max(found[0], start), found[1]

    def _will_run(
        self, shape: Shape, avail: int, exc: List[int]
    ) -> Optional[Tuple[int, NodeCores]]:
        """The select plugin's answer on the nodes of ``avail``: now, or the end of the last
        running job of the group whose end made room (see the module's description)."""
        used = list(self.used)
        placement = choose_nodes(self._usable(avail, used, exc, shape), self.weights, shape)
        if placement is not None:
            return self.now, placement
        running = self.running
        group_s = END_GROUP_S
        barrier = 0
        index = 0
        more = True
        while more:
            last: Optional[Held] = None
            following: Optional[Held] = None
            while True:
                if index == len(running):
                    more = False
                    break
                held = running[index]
                index += 1
                if not held.mask & avail:
                    continue
                if barrier == 0:
                    barrier = held.end + group_s - held.end % group_s
                last = held
                for node, cores in held.placement:
                    used[node] -= cores
                if index == len(running):
                    more = False
                    break
                following = running[index]
                if following.end > barrier + group_s:
                    break
            if last is None:
                break
            group_s *= 2
            while following is not None and following.end > barrier + group_s:
                group_s *= 2
            placement = choose_nodes(self._usable(avail, used, exc, shape), self.weights, shape)
            if placement is not None:
                start = last.end
                if start <= self.now:
                    start = max(start + self.kill_wait, self.now + 1)
                return start, placement
        return None

    # -- helpers ----------------------------------------------------------------------------

    def _shape(self, task: Task) -> Shape:
        if task.shape is None:
            raise ValueError(f"{task!r} has no shape to place on nodes")
        return task.shape

    def _step(self, t: int) -> int:
        """``t`` cut down to the backfill resolution."""
        return t - t % self.resolution

    def _allowed(self, shape: Shape) -> int:
        return self.usable & shape.nodes if shape.nodes else self.usable

    def _run(self, held: Held) -> None:
        """Add a running hold, keeping them in order of their ends."""
        index = len(self.running)
        while index > 0 and self.running[index - 1].end > held.end:
            index -= 1
        self.running.insert(index, held)
        for node, cores in held.placement:
            self.used[node] += cores

    def _reserved(self, shape: Shape, start: int, end: int) -> Tuple[int, List[int]]:
        """What advance reservations overlapping [start, end) keep from a job of ``shape``:
        the nodes of those holding whole nodes (of every one, for a whole-node job), and the
        cores of each node the others hold (Slurm's job_test_resv)."""
        whole_job = shape.exclusive or self.whole_nodes
        nodes = 0
        exc = [0] * len(self.cores)
        for res in self.reserved:
            if res.start < end and start < res.end:
                if whole_job or all(c >= self.cores[n] for n, c in res.placement):
                    nodes |= mask_of(res.placement)
                    continue
                for node, cores in res.placement:
                    exc[node] += cores
        return nodes, exc

    def _reservation_end_after(self, start: int, end: int) -> int:
        """Where the backfill looks again when a reservation overlaps [start, end): one
        second past the first end of a reservation after ``start``, rounded up to the
        resolution (0: no reservation overlaps)."""
        if not any(res.start < end and start < res.end for res in self.reserved):
            return 0
        first = 0
        for res in self.reserved:
            if res.end > start and (first == 0 or res.end < first):
                first = res.end
        if first == 0:
            return 0
        return first + (-first) % self.resolution + 1

    def _free_at(self, t: int, avail: int, exc: List[int], shape: Shape) -> List[int]:
        """What ``shape`` could use on each node of ``avail`` at ``t``: running work still
        there at ``t`` and the reserved cores ``exc`` taken out."""
        used = [0] * len(self.cores)
        for held in self.running:
            if held.end > t:
                for node, cores in held.placement:
                    used[node] += cores
        return self._usable(avail, used, exc, shape)

    def _usable(self, avail: int, used: List[int], exc: List[int], shape: Shape) -> List[int]:
        usable = [0] * len(self.cores)
        whole = shape.exclusive or self.whole_nodes
        for node in range(len(self.cores)):
            if not avail >> node & 1:
                continue
            free = self.cores[node] - used[node] - exc[node]
            if whole:
                usable[node] = self.cores[node] if free == self.cores[node] else 0
            else:
                usable[node] = max(0, free)
        return usable


def _most_held(reservations: Sequence[Reserved], start: int, count: int) -> List[int]:
    """The most cores ``reservations`` hold on each of ``count`` nodes at one instant from
    ``start`` on: PBS's walk of its calendar's run and end events over a reservation's window,
    an end before a start at the same second (``check_resources_for_node``)."""
    most = [0] * count
    instants = {start} | {res.start for res in reservations if res.start > start}
    for t in instants:
        now = [0] * count
        for res in reservations:
            if res.start <= t < res.end:
                for node, cores in res.placement:
                    now[node] += cores
        most = [max(most[n], now[n]) for n in range(count)]
    return most


class NodeTable:
    """A snapshot's nodes (its partition's, then its neighbours') as a node machine numbers
    them, and the way back from numbers to names."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.nodes: Tuple[NodeState, ...] = snapshot.nodes + snapshot.neighbours.nodes
        self.index: Dict[str, int] = {node.name: i for i, node in enumerate(self.nodes)}
        self.whole_nodes = snapshot.unit is CapacityUnit.NODE
        self._masks: Dict[str, int] = {}

    def machine(self, snapshot: ClusterSnapshot) -> NodeMachine:
        backfill = snapshot.backfill
        return NodeMachine(
            cores=[node.cores for node in self.nodes],
            weights=[node.weight for node in self.nodes],
            usable=[node.usable for node in self.nodes],
            now=snapshot.now,
            capacity=snapshot.capacity,
            whole_nodes=self.whole_nodes,
            resolution=backfill.resolution,
            window=backfill.window,
            kill_wait=backfill.kill_wait,
            rule=snapshot.placement,
        )

    def shape(self, job: Job) -> Shape:
        """What a pending job asks of the nodes of its partition(s)."""
        return Shape(
            # an exclusive job's cores count its whole nodes; Slurm asks one CPU per node
            cpus=max(1, job.nodes if job.exclusive else job.cores),
            # a count of nodes binds only where one was asked for (Slurm: -N sets a maximum
            # too); else it is the batch system's guess, and one node may do
            min_nodes=job.nodes if job.max_nodes else 1,
            max_nodes=job.max_nodes,
            exclusive=job.exclusive or self.whole_nodes,
            nodes=self.partition_mask(job.partition),
        )

    def partition_mask(self, partitions: str) -> int:
        """The nodes of the (comma-separated) partitions; 0 (any node) if none is named."""
        mask = self._masks.get(partitions)
        if mask is None:
            names = set(partitions.split(",")) - {""}
            mask = 0
            for i, node in enumerate(self.nodes):
                if names & set(node.partitions):
                    mask |= 1 << i
            self._masks[partitions] = mask
        return mask

    def placement(self, allocation: Allocation) -> NodeCores:
        """The machine's numbers for an allocation, leaving out nodes it does not have."""
        found = [(self.index[name], cores) for name, cores in allocation if name in self.index]
        return tuple(sorted(found))

    def whole(self, names: Sequence[str], cores: int) -> NodeCores:
        """An allocation known only by its nodes and total: on each node, all of that total
        it can hold (never less than the truth)."""
        found = [
            (self.index[name], min(cores, self.nodes[self.index[name]].cores) or 1)
            for name in names
            if name in self.index
        ]
        return tuple(sorted(found))

    def names(self, placement: NodeCores) -> Allocation:
        return tuple((self.nodes[node].name, cores) for node, cores in placement)
