"""A machine of midplanes joined through link switches: Blue Gene/L, or a plain 3D torus.

The scheduling engines (:mod:`siteagent.core.engines`) ask a machine whether a task fits,
where it fits earliest, and to take and give back its window; this machine answers as Aridor et
al.'s two-phase allocator (docs/design.md §4.9):

1. every box of free midplanes of the job's shape, in every rotation and at every origin (x,
   then y, then z), the box not wrapping round the machine's edges;
2. for each box, in each dimension, the first link set of that dimension's line table (fewest
   links first, :mod:`siteagent.sim.wiring`) whose links are free in *every* participating
   line: the same link set in all of them, as the paper does.

Of the boxes that can be joined, the one with the fewest links over all its lines wins, ties
to the first found; its midplanes and links are held until the job ends. A job of one midplane
in a dimension needs no link there. Links are the only switch resources: a link set may pass
through the switch of a midplane another job holds (its ports are the free links'), as in the
paper, where midplanes and links are the two resources.

Held windows have a start and an end, so the engines' plans (EASY's protected head, advance
reservations) hold midplanes and links in the future too; a fit over [start, end) counts every
window overlapping it. A job's request (its box and mesh or torus) is given when it arrives
(:meth:`TopologyMachine.admit`), its size becoming the box's volume: utilization counts the
midplanes a job holds.
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Set, Tuple

from siteagent.core.machine import Machine, Task
from siteagent.core.profile import Profile
from siteagent.sim.shapes import Dims, Request, Shaper, machine_dims, slim_shape
from siteagent.sim.swf import SwfJob
from siteagent.sim.wiring import LineTable, LineWiring, bgl_x_line, bgl_yz_line, link_count, ring

#: Machines by name, as ``siteagent simulate --machine`` knows them.
MACHINES = ("bgl", "torus3d")


class Topology:
    """``dims`` midplanes (x, y, z), each dimension's lines cabled as ``wirings`` says."""

    def __init__(self, name: str, dims: Dims, wirings: Tuple[LineWiring, ...]) -> None:
        if len(wirings) != 3 or any(w.size != d for w, d in zip(wirings, dims)):
            raise ValueError(f"{name}: one line wiring per dimension, of sizes {dims}")
        self.name = name
        self.dims = dims
        self.wirings = wirings
        self.tables = [LineTable(wiring) for wiring in wirings]
        self.midplanes = dims[0] * dims[1] * dims[2]

    def lines(self, dim: int) -> int:
        """How many lines dimension ``dim`` has."""
        x, y, z = self.dims
        return (y * z, x * z, x * y)[dim]


def bgl() -> Topology:
    """Blue Gene/L: 8 x 4 x 4 midplanes, x-lines multi-toroidal, y and z rings 0-1-3-2."""
    return Topology("bgl", (8, 4, 4), (bgl_x_line(), bgl_yz_line(), bgl_yz_line()))


def torus3d() -> Topology:
    """The paper's baseline: 8 x 4 x 4 midplanes, every line a simple ring."""
    return Topology("torus3d", (8, 4, 4), (ring(8), ring(4), ring(4)))


def topology(name: str) -> Topology:
    if name == "bgl":
        return bgl()
    if name == "torus3d":
        return torus3d()
    raise ValueError(f"unknown machine {name!r}; choose one of {', '.join(MACHINES)}")


class Partition:
    """Where a job runs: the box at ``origin`` of extents ``dims``, and the link set (a mask
    over its line's links) used in every participating line of each dimension; ``links``
    counts them over all lines."""

    __slots__ = ("dims", "link_sets", "links", "origin")

    def __init__(self, origin: Dims, dims: Dims, link_sets: Tuple[int, int, int], links: int):
        self.origin = origin
        self.dims = dims
        self.link_sets = link_sets
        self.links = links

    def midplanes(self) -> List[Dims]:
        (x0, y0, z0), (sx, sy, sz) = self.origin, self.dims
        return [
            (x, y, z)
            for x in range(x0, x0 + sx)
            for y in range(y0, y0 + sy)
            for z in range(z0, z0 + sz)
        ]

    def line_links(self, topology: Topology) -> List[Tuple[int, Tuple[int, int], int, int]]:
        """Every link held: (dimension, the line's other two coordinates, from, to)."""
        (x0, y0, z0), (sx, sy, sz) = self.origin, self.dims
        lines = (
            [(y, z) for y in range(y0, y0 + sy) for z in range(z0, z0 + sz)],
            [(x, z) for x in range(x0, x0 + sx) for z in range(z0, z0 + sz)],
            [(x, y) for x in range(x0, x0 + sx) for y in range(y0, y0 + sy)],
        )
        held = []
        for dim in range(3):
            links = topology.wirings[dim].links
            for line in lines[dim]:
                for index in range(len(links)):
                    if self.link_sets[dim] >> index & 1:
                        held.append((dim, line, links[index][0], links[index][1]))
        return held

    def __repr__(self) -> str:
        return f"Partition(origin={self.origin}, dims={self.dims}, links={self.links})"


class _Hold:
    """A window [start, end) in which a task holds a partition."""

    __slots__ = ("end", "partition", "start")

    def __init__(self, start: int, end: int, partition: Partition) -> None:
        self.start = start
        self.end = end
        self.partition = partition


class _State:
    """Busy resources: ``midplanes[y * Z + z]`` the mask of busy x positions of each x-line,
    ``links[dim][line]`` the mask of held links of each line."""

    __slots__ = ("links", "midplanes")

    def __init__(self, topology: Optional[Topology]) -> None:
        self.midplanes: List[int] = [0] * topology.lines(0) if topology is not None else []
        self.links: List[List[int]] = (
            [[0] * topology.lines(dim) for dim in range(3)] if topology is not None else []
        )

    def copy(self) -> _State:
        state = _State(None)
        state.midplanes = list(self.midplanes)
        state.links = [list(held) for held in self.links]
        return state


class TopologyMachine(Machine):
    """Midplanes and links of ``topology``, held in windows by tasks (see the module's
    description). ``shaper`` gives arriving tasks their requests (:meth:`admitted`).

    What the windows holding ``now`` hold is kept up to date (they share no resource, so a
    window that ends gives its resources back bit by bit); windows starting later are counted
    in when a fit overlaps them. A request that found no room is remembered until some
    resource comes back, so a long queue of like jobs is searched once per pass.
    """

    pooled = False

    def __init__(self, topology: Topology, now: int, shaper: Optional[Shaper] = None) -> None:
        self.topology = topology
        self.now = now
        self.shaper = shaper if shaper is not None else Shaper()
        self.profile = Profile(topology.midplanes, now)
        self.requests: Dict[object, Request] = {}
        self._holds: Dict[object, _Hold] = {}
        self._upcoming: Dict[object, _Hold] = {}  # the holds starting after now
        self._current = _State(topology)  # what the holds started by now hold
        self._failed: Set[int] = set()  # requests with no room now, no upcoming hold counted
        self._failed_until: Dict[int, int] = {}  # ... no room from now to the end given
        self._found: Dict[object, Partition] = {}
        self._floors: Dict[int, int] = {}

    # -- requests ---------------------------------------------------------------------------

    def admit(self, task: Task, request: Request) -> None:
        """Give ``task`` its request; its size becomes the box's volume."""
        self.requests[task.key] = request
        task.size = request.volume

    def admitted(self, tasks: Iterator[Task]) -> Iterator[Task]:
        """``tasks`` as they arrive, each admitted with the shaper's request for it."""
        shaper = self.shaper
        for task in tasks:
            self.admit(task, shaper.request(_job_number(task), task.size))
            yield task

    def request_of(self, task: Task) -> Request:
        """The task's request; one never admitted (an advance reservation) asks for the
        slim mesh of its size."""
        request = self.requests.get(task.key)
        if request is None:
            request = Request(machine_dims(slim_shape(task.size)), False)
            self.requests[task.key] = request
        return request

    def partition(self, key: object) -> Optional[Partition]:
        """Where the task ``key`` holds its window, None if it holds none."""
        hold = self._holds.get(key)
        return hold.partition if hold is not None else None

    # -- the questions of the engines -----------------------------------------------------

    def ever_fits(self, task: Task) -> bool:
        x, y, z = self.topology.dims
        request = self.request_of(task)
        return any(a <= x and b <= y and c <= z for a, b, c in request.rotations)

    def fits(self, task: Task, start: int, hold: int) -> bool:
        request = self.request_of(task)
        code = request.code
        if start <= self.now and not self._upcoming and code in self._failed:
            return False  # the common case of a long queue: asked and refused already
        end = max(start, self.now) + max(hold, 1)
        found: Optional[Partition] = None
        if start > self.now:
            found = self._search(request, self._over(start, end))
        else:
            upcoming = [h for h in self._upcoming.values() if h.start < end]
            if not upcoming:
                if code in self._failed:
                    return False
                found = self._search(request, self._current)
                if found is None:
                    self._failed.add(code)
            else:
                failed_end = self._failed_until.get(code)
                if failed_end is not None and end >= failed_end:
                    return False
                state = self._current.copy()
                for h in upcoming:
                    _mark(self.topology, state, h.partition, True)
                found = self._search(request, state)
                if found is None:
                    self._failed_until[code] = end
        if found is None:
            return False
        self._found[task.key] = found
        return True

    def earliest_fit(
        self, task: Task, hold: int, after: int, before: Optional[int] = None
    ) -> Optional[int]:
        """Room only comes back when a window ends, so the starts worth trying are ``after``
        and the ends of the windows held after it."""
        after = max(after, self.now)
        ends = sorted({h.end for h in self._holds.values() if h.end > after})
        for t in [after, *ends]:
            if before is not None and t >= before:
                return None
            if self.fits(task, t, hold):
                return t
        return None

    def take(self, task: Task, start: int, end: int) -> None:
        if end <= start:
            return
        partition = self._found.get(task.key)
        if partition is None:
            if not self.fits(task, start, end - start):
                raise ValueError(f"{task!r} has no room over [{start}, {end})")
            partition = self._found[task.key]
        self.profile.reserve(start, end, task.size)
        hold = _Hold(start, end, partition)
        self._holds[task.key] = hold
        if start > self.now:
            self._upcoming[task.key] = hold
        else:
            _mark(self.topology, self._current, partition, True)

    def give_back(self, task: Task, start: int, end: int) -> None:
        self.profile.release(start, end, task.size)
        hold = self._holds.get(task.key)
        if hold is None:
            return
        self._found[task.key] = hold.partition
        if start > max(hold.start, self.now):
            hold.end = start  # only the tail is given back: held until then
            self._forget_failures()
            return
        self._drop(task.key, hold)

    def run_start(self, task: Task, before: int, after: int) -> Optional[int]:
        return after

    def hold(self, task: Task, start: int, end: int) -> bool:
        """An advance reservation: the best box of its request free all over its window."""
        if not 0 < task.size <= self.topology.midplanes or task.key in self._holds:
            return False
        if end <= start or not self.fits(task, start, end - start):
            return False
        self.take(task, start, end)
        return True

    def advance(self, now: int) -> None:
        if now <= self.now:
            return
        self.now = now
        self.profile.advance(now)
        for key in [key for key, hold in self._upcoming.items() if hold.start <= now]:
            _mark(self.topology, self._current, self._upcoming.pop(key).partition, True)
        for key in [key for key, hold in self._holds.items() if hold.end <= now]:
            self._drop(key, self._holds[key])

    # -- the allocator --------------------------------------------------------------------

    def _drop(self, key: object, hold: _Hold) -> None:
        """Forget a window; its resources come back."""
        del self._holds[key]
        if self._upcoming.pop(key, None) is None:
            _mark(self.topology, self._current, hold.partition, False)
        self._forget_failures()

    def _forget_failures(self) -> None:
        self._failed.clear()
        self._failed_until.clear()

    def _over(self, start: int, end: int) -> _State:
        """What the windows overlapping [start, end) hold."""
        state = _State(self.topology)
        for hold in self._holds.values():
            if hold.start < end and start < hold.end:
                _mark(self.topology, state, hold.partition, True)
        return state

    def _search(self, request: Request, state: _State) -> Optional[Partition]:
        """The two phases: free boxes, then link sets; the fewest links wins, ties first."""
        floor = self._floor(request)
        best: Optional[Partition] = None
        for dims in request.rotations:
            found = _search_rotation(self.topology, state, dims, request.torus, best, floor)
            if found is not None:
                best = found
                if best.links <= floor:
                    break
        return best

    def _floor(self, request: Request) -> int:
        """The fewest links any partition of the request could use: once found, stop."""
        floor = self._floors.get(request.code)
        if floor is None:
            empty = _State(self.topology)
            least = -1
            for dims in request.rotations:
                found = _search_rotation(self.topology, empty, dims, request.torus, None, 0)
                if found is not None and (least < 0 or found.links < least):
                    least = found.links
            floor = self._floors[request.code] = max(least, 0)
        return floor


def _search_rotation(
    topology: Topology,
    state: _State,
    dims: Dims,
    torus: bool,
    best: Optional[Partition],
    floor: int,
) -> Optional[Partition]:
    """The best partition of extents ``dims`` (better than ``best``), or None."""
    nx, ny, nz = topology.dims
    sx, sy, sz = dims
    if sx > nx or sy > ny or sz > nz:
        return None
    busy = state.midplanes
    # busy x positions of each (y0, z0) column of x-lines the box would cover
    covered = [0] * (ny * nz)
    for y0 in range(ny - sy + 1):
        for z0 in range(nz - sz + 1):
            mask = 0
            for y in range(y0, y0 + sy):
                for z in range(z0, z0 + sz):
                    mask |= busy[y * nz + z]
            covered[y0 * nz + z0] = mask
    tables = topology.tables
    x_sets, y_sets, z_sets = tables[0], tables[1], tables[2]
    bound = best.links if best is not None else -1
    found: Optional[Partition] = None
    width = (1 << sx) - 1
    for x0 in range(nx - sx + 1):
        xs = width << x0
        x_links = x_sets.link_sets(xs, torus)
        for y0 in range(ny - sy + 1):
            ys = ((1 << sy) - 1) << y0
            y_links = y_sets.link_sets(ys, torus)
            for z0 in range(nz - sz + 1):
                if covered[y0 * nz + z0] & xs:
                    continue
                zs = ((1 << sz) - 1) << z0
                z_links = z_sets.link_sets(zs, torus)
                if not (x_links and y_links and z_links):
                    continue
                if bound >= 0:  # fewer links than the best so far is the only way to win
                    least = link_count(x_links[0]) * sy * sz + link_count(y_links[0]) * sx * sz
                    if least + link_count(z_links[0]) * sx * sy >= bound:
                        continue
                chosen = _join(state, topology, x0, y0, z0, sx, sy, sz, x_links, y_links, z_links)
                if chosen is None:
                    continue
                lx, ly, lz = chosen
                total = link_count(lx) * sy * sz + link_count(ly) * sx * sz
                total += link_count(lz) * sx * sy
                if bound < 0 or total < bound:
                    bound = total
                    found = Partition((x0, y0, z0), dims, chosen, total)
                    if total <= floor:
                        return found
    return found


def _join(
    state: _State,
    topology: Topology,
    x0: int,
    y0: int,
    z0: int,
    sx: int,
    sy: int,
    sz: int,
    x_links: List[int],
    y_links: List[int],
    z_links: List[int],
) -> Optional[Tuple[int, int, int]]:
    """The first link set of each dimension free in all the box's lines, or None."""
    _, ny, nz = topology.dims
    held = state.links
    lx = _first_free(
        x_links, held[0], [y * nz + z for y in range(y0, y0 + sy) for z in range(z0, z0 + sz)]
    )
    if lx < 0:
        return None
    ly = _first_free(
        y_links, held[1], [x * nz + z for x in range(x0, x0 + sx) for z in range(z0, z0 + sz)]
    )
    if ly < 0:
        return None
    lz = _first_free(
        z_links, held[2], [x * ny + y for x in range(x0, x0 + sx) for y in range(y0, y0 + sy)]
    )
    if lz < 0:
        return None
    return (lx, ly, lz)


def _first_free(link_sets: List[int], held: List[int], lines: List[int]) -> int:
    """The first link set none of whose links is held in any of ``lines``; -1 if none."""
    for links in link_sets:
        if links == 0:
            return 0
        free = True
        for line in lines:
            if held[line] & links:
                free = False
                break
        if free:
            return links
    return -1


def _mark(topology: Topology, state: _State, partition: Partition, busy: bool) -> None:
    """Add (or, held by nobody else, remove) a partition's midplanes and links."""
    _, ny, nz = topology.dims
    (x0, y0, z0), (sx, sy, sz) = partition.origin, partition.dims
    lx, ly, lz = partition.link_sets
    xs = ((1 << sx) - 1) << x0
    midplanes = state.midplanes
    x_held, y_held, z_held = state.links[0], state.links[1], state.links[2]
    for y in range(y0, y0 + sy):
        for z in range(z0, z0 + sz):
            line = y * nz + z
            midplanes[line] = midplanes[line] | xs if busy else midplanes[line] & ~xs
            x_held[line] = x_held[line] | lx if busy else x_held[line] & ~lx
    for x in range(x0, x0 + sx):
        for z in range(z0, z0 + sz):
            line = x * nz + z
            y_held[line] = y_held[line] | ly if busy else y_held[line] & ~ly
        for y in range(y0, y0 + sy):
            line = x * ny + y
            z_held[line] = z_held[line] | lz if busy else z_held[line] & ~lz


def _job_number(task: Task) -> int:
    """What the shape draws are keyed on: the SWF job number, else the task's integer key."""
    if isinstance(task.payload, SwfJob):
        return task.payload.job
    if isinstance(task.key, int):
        return task.key
    raise TypeError(f"{task!r}: no job number to draw its shape from")
