"""How the midplanes of one line of a topology machine are cabled, and the link sets that join
any set of them as a mesh or a torus (docs/design.md §4.9; Aridor et al. 2005).

A midplane machine (Blue Gene/L: 8 × 4 × 4 midplanes) joins midplanes only through one switch
per midplane and dimension, and cables run only between switches of one line of a dimension,
all lines of a dimension cabled alike. So one line's wiring says everything: a directed graph
whose nodes are the line's midplanes (their switches) and whose arcs are the cables (links),
each from an output port to an input port. A set of midplanes of a line is joined as a mesh by
a path through all of them and as a torus by a cycle, passing where needed through the switches
of midplanes outside the set. :class:`LineTable` holds, for every set, every such link set,
fewest links first, ties in the order found: the paper's lookup tables ("Creating lookup
tables of link sets"). A single midplane needs no link either way (its own switch closes it).

The Blue Gene/L x-line. The paper's Fig. 2(a), which drew it, is lost from the text. It is
reconstructed here from the cabling that Slurm's Blue Gene/L support (written at LLNL, which
ran the 64-rack machine) emulates for an x dimension of 8 midplanes: SchedMD/slurm,
``src/plugins/select/bluegene/block_allocator/block_allocator.c``, ``_set_external_wires``
(commit 9942b4151709; the same cables in its 2005 predecessor ``partition_allocator.c``).
Every switch's port 2 is cabled to the next midplane's port 5 (the ring 0→1→…→7→0), and
"split" cables from port 4 to port 3 join 1→0, 5→4, 2→7, 7→2, 3→6 and 6→3 (ports 2 and 4 are
outputs there). This wiring has what the paper's text says of its figures (tests/unit/
test_topology.py checks each): tori {0, 1, 2} and {3, 4} coexist in one x-line, each through
switches outside it (Fig. 2(b); the paper draws the cables the other way round, so its first
torus runs 0→2→1→0, ours 0→1→2→(7)→0: the same cables); midplanes {3, 4, 5} are joined as a
mesh by 2 links or by 3 links sharing one of them (Fig. 4); a set of three midplanes has mesh
link sets of 2 and 3 links and a torus of 4 that is their union (Fig. 5's example, which
numbers that set {1, 2, 3}: here it is {0, 1, 2}). Y- and z-lines are the ring 0→1→3→2→0
(Fig. 3(a)); a plain 3D torus has simple rings everywhere.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

#: A cable of a line: (from midplane, to midplane), from an output port to an input port.
Link = Tuple[int, int]


class LineWiring:
    """The cables of one line of ``size`` midplanes (all lines of a dimension are alike)."""

    def __init__(self, name: str, size: int, links: Sequence[Link]) -> None:
        if size < 1:
            raise ValueError(f"a line needs at least one midplane, got {size}")
        for a, b in links:
            if not (0 <= a < size and 0 <= b < size) or a == b:
                raise ValueError(f"{name}: link {a}->{b} does not join two of {size} midplanes")
        if len(set(links)) != len(links):
            raise ValueError(f"{name}: a link is listed twice")
        self.name = name
        self.size = size
        self.links: List[Link] = list(links)

    def __repr__(self) -> str:
        return f"LineWiring({self.name!r}, {self.size}, {len(self.links)} links)"


def ring(size: int, order: Sequence[int] = ()) -> LineWiring:
    """A simple ring through ``order`` (default 0, 1, ..., size - 1) and back."""
    nodes = list(order) or list(range(size))
    if sorted(nodes) != list(range(size)):
        raise ValueError(f"a ring order must list each of 0..{size - 1} once, got {nodes}")
    if size == 1:
        return LineWiring("ring-1", 1, [])
    links = [(nodes[k], nodes[(k + 1) % size]) for k in range(size)]
    name = "ring-" + "-".join(map(str, nodes)) if order else f"ring-{size}"
    return LineWiring(name, size, links)


def bgl_x_line() -> LineWiring:
    """The Blue Gene/L x-line of 8 midplanes (see the module's description for the source)."""
    ring_links = [(x, (x + 1) % 8) for x in range(8)]
    split_links = [(1, 0), (5, 4), (2, 7), (7, 2), (3, 6), (6, 3)]
    return LineWiring("bgl-x", 8, ring_links + split_links)


def bgl_yz_line() -> LineWiring:
    """A Blue Gene/L y- or z-line: the ring 0→1→3→2→0 (the paper's Fig. 3(a))."""
    return ring(4, (0, 1, 3, 2))


class LineTable:
    """For every set of midplanes of a line (a bit mask), the link sets (bit masks over the
    line's links, bit k for ``wiring.links[k]``) that join it as a mesh and as a torus, fewest
    links first, ties in the order found: paths and cycles by start midplane, then by the
    order of the wiring's links. A set no link set joins has an empty list."""

    def __init__(self, wiring: LineWiring) -> None:
        self.wiring = wiring
        size = wiring.size
        out: List[List[Tuple[int, int]]] = [[] for _ in range(size)]
        for index, (a, b) in enumerate(wiring.links):
            out[a].append((b, index))
        mesh: Dict[int, List[int]] = {}
        torus: Dict[int, List[int]] = {}
        for start in range(size):
            _walk(out, [start], 0, mesh, torus)
        self.mesh: List[List[int]] = [_ordered(mesh.get(s, [])) for s in range(1 << size)]
        self.torus: List[List[int]] = [_ordered(torus.get(s, [])) for s in range(1 << size)]
        for node in range(size):
            self.mesh[1 << node] = [0]
            self.torus[1 << node] = [0]

    def link_sets(self, members: int, torus: bool) -> List[int]:
        """The link sets joining the midplanes of the mask ``members``, fewest links first."""
        return self.torus[members] if torus else self.mesh[members]


def _walk(
    out: List[List[Tuple[int, int]]],
    path: List[int],
    used: int,
    mesh: Dict[int, List[int]],
    torus: Dict[int, List[int]],
) -> None:
    """Extend the simple path ``path`` (links ``used``) every way; record what it joins."""
    if len(path) > 1:
        _record(mesh, path, used, closed=False)
    here = path[-1]
    for nxt, index in out[here]:
        if nxt == path[0] and len(path) > 1:
            _record(torus, path, used | 1 << index, closed=True)
        elif nxt not in path:
            path.append(nxt)
            _walk(out, path, used | 1 << index, mesh, torus)
            path.pop()


def _record(table: Dict[int, List[int]], path: List[int], links: int, closed: bool) -> None:
    """Every member set the path (or, ``closed``, the cycle) joins: it must hold the path's
    two ends; the midplanes between may be members or passed through."""
    inner = path if closed else path[1:-1]
    base = 0 if closed else (1 << path[0]) | (1 << path[-1])
    for pick in range(1 << len(inner)):
        members = base
        for k, node in enumerate(inner):
            if pick >> k & 1:
                members |= 1 << node
        if bin(members).count("1") < 2:
            continue
        found = table.setdefault(members, [])
        if links not in found:
            found.append(links)


def _ordered(link_sets: List[int]) -> List[int]:
    """Fewest links first; among equals, the order found (``sorted`` is stable)."""
    return sorted(link_sets, key=lambda links: bin(links).count("1"))


def link_count(links: int) -> int:
    return bin(links).count("1")
