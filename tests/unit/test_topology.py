"""The topology machine: the paper's shapes, its wiring examples, the two-phase allocator, and
random job streams that never put two jobs on one midplane or one link.

The checks of what a partition is (a box of the job's shape; in every line of it, its links a
path or a cycle through all of its midplanes there) are written here from the paper's words,
sharing no code with ``siteagent.sim.wiring`` or ``siteagent.sim.topology``.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Dict, List, Sequence, Set, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from siteagent.backends.replay import SwfReplayBackend
from siteagent.cli.main import main
from siteagent.core.engines import Policy
from siteagent.core.machine import Task
from siteagent.core.values import ReservationSpec
from siteagent.sim.partitions import MachineSpec
from siteagent.sim.shapes import Request, Shaper, draw, fat_shape, slim_shape
from siteagent.sim.simulator import Simulator
from siteagent.sim.topology import Partition, Topology, TopologyMachine, bgl, torus3d
from siteagent.sim.wiring import LineTable, bgl_x_line, bgl_yz_line, ring
from testbed.inprocess.fakes import FakeClock
from testbed.inprocess.traces import swf_row, trace_prefix, write_swf

Link = Tuple[int, int]


def members(*nodes: int) -> int:
    return sum(1 << node for node in nodes)


def links_of(table: LineTable, link_set: int) -> Set[Link]:
    wiring = table.wiring.links
    return {wiring[k] for k in range(len(wiring)) if link_set >> k & 1}


# =============================================================================================
# Shapes, as the paper's "Simulation environment" states them
# =============================================================================================


@pytest.mark.parametrize(
    ("size", "shape"),
    [(6, (1, 1, 6)), (27, (3, 3, 3)), (8, (1, 1, 8)), (16, (1, 2, 8)), (1, (1, 1, 1))],
)
def test_slim_shapes_of_the_paper(size: int, shape: Tuple[int, int, int]) -> None:
    assert slim_shape(size) == shape


def test_slim_shape_without_an_exact_product_is_the_smallest_larger_box() -> None:
    # 11 is prime and above 8: the smallest product above it is 12, first found as 1 x 2 x 6
    assert slim_shape(11) == (1, 2, 6)
    assert slim_shape(127) == (4, 4, 8)
    for size in range(1, 129):
        b, c, a = slim_shape(size)
        assert 1 <= b <= 4 and 1 <= c <= 4 and 1 <= a <= 8
        assert a * b * c >= size
        assert not any(
            size <= v < a * b * c
            for v in (x * y * z for x in range(1, 9) for y in range(1, 5) for z in range(1, 5))
        )


def test_fat_shapes() -> None:
    assert fat_shape(8) == (2, 2, 2)
    for size in range(1, 8):
        assert fat_shape(size) == (2, 2, 2)
    assert fat_shape(12) == (2, 2, 3)
    assert fat_shape(9) == (2, 2, 3)  # no box of 9 with every extent >= 2: the next is 12
    assert fat_shape(128) == (4, 4, 8)
    for size in range(1, 129):
        assert min(fat_shape(size)) >= 2


def test_shaper_draws_are_fixed_by_job_and_seed() -> None:
    shaper = Shaper(fat=0.5, torus=0.5, seed=3)
    again = Shaper(fat=0.5, torus=0.5, seed=3)
    requests = [shaper.request(job, 5) for job in range(200)]
    assert [r.code for r in requests] == [again.request(job, 5).code for job in range(200)]
    fat = sum(1 for r in requests if min(r.dims) >= 2)
    toroidal = sum(1 for r in requests if r.torus)
    assert 70 < fat < 130 and 70 < toroidal < 130
    other_seed = [Shaper(fat=0.5, torus=0.5, seed=4).request(job, 5).code for job in range(200)]
    assert other_seed != [r.code for r in requests]
    assert draw("fat", 1, 3) != draw("torus", 1, 3)


def test_shaper_extremes_divide_and_fat_sizes() -> None:
    assert Shaper(fat=0.0, torus=0.0).request(7, 16).dims == (8, 1, 2)
    assert Shaper(fat=1.0, torus=1.0).request(7, 3).dims == (2, 2, 2)
    assert Shaper(fat=1.0, torus=1.0).request(7, 3).torus
    assert Shaper(divide=4).request(7, 13).volume == 4  # ceil(13 / 4)
    # Fig. 8: the size is the fat volume (8 for 3 midplanes), the shape slim: 1 x 1 x 8
    assert Shaper(fat_sizes=True).request(7, 3).dims == (8, 1, 1)


# =============================================================================================
# Wiring: what the paper says of its Figs. 2-5
# =============================================================================================


def test_bgl_x_line_of_fig_2b_holds_two_tori_through_outside_switches() -> None:
    """Fig. 2(b): tori {0, 1, 2} and {3, 4} coexist in one x-line, each passing through the
    switches of midplanes outside it."""
    table = LineTable(bgl_x_line())
    first = table.torus[members(0, 1, 2)]
    second = table.torus[members(3, 4)]
    pairs = [(a, b) for a in first for b in second if a & b == 0]
    assert pairs
    a, b = pairs[0]
    through_a = {n for link in links_of(table, a) for n in link} - {0, 1, 2}
    through_b = {n for link in links_of(table, b) for n in link} - {3, 4}
    assert through_a and through_b


def test_bgl_x_line_of_figs_4_and_5() -> None:
    """Fig. 4: {3, 4, 5} as a mesh by 2 links, or by 3 links sharing one with them. Fig. 5:
    a set of three with mesh sets of 2 and 3 links and a torus of 4, their union."""
    table = LineTable(bgl_x_line())
    mesh = table.mesh[members(3, 4, 5)]
    assert [bin(m).count("1") for m in mesh[:2]] == [2, 3]
    assert len(links_of(table, mesh[0]) & links_of(table, mesh[1])) == 1
    mesh = table.mesh[members(0, 1, 2)]
    torus = table.torus[members(0, 1, 2)]
    assert [bin(m).count("1") for m in mesh[:2]] == [2, 3]
    assert bin(torus[0]).count("1") == 4 and torus[0] == mesh[0] | mesh[1]


def test_y_line_of_fig_3b() -> None:
    """Fig. 3(a)/(b): the y-line is the ring 0-1-3-2-0; {0, 1} as a torus takes every link,
    so no other partition of two coexists with it; two meshes of two do."""
    table = LineTable(bgl_yz_line())
    assert table.wiring.links == [(0, 1), (1, 3), (3, 2), (2, 0)]
    assert table.torus[members(0, 1)] == [0b1111]
    assert all(m & 0b1111 for m in table.mesh[members(2, 3)])
    assert any(a & b == 0 for a in table.mesh[members(0, 1)] for b in table.mesh[members(2, 3)])
    assert table.torus[members(2)] == [0]  # one midplane: its own switch closes the torus


def test_plain_ring_torus_takes_the_whole_ring() -> None:
    table = LineTable(ring(8))
    assert table.torus[members(3, 4)] == [0xFF]
    assert table.mesh[members(3, 4, 5)][0] == 0b11000


# =============================================================================================
# The allocator
# =============================================================================================


def line_machine(wiring_x: object = None, y: int = 1) -> TopologyMachine:
    x_line = bgl_x_line() if wiring_x is None else wiring_x
    topo = Topology("test", (x_line.size, y, 1), (x_line, ring(y), ring(1)))  # type: ignore[attr-defined]
    return TopologyMachine(topo, 0)


def place(machine: TopologyMachine, key: int, dims: Tuple[int, int, int], torus: bool) -> bool:
    task = Task(key, 1, 100, 0)
    machine.admit(task, Request(dims, torus))
    if not machine.fits(task, 0, 100):
        return False
    machine.take(task, 0, 100)
    return True


def test_fewest_links_win_and_ties_go_to_the_first_found() -> None:
    machine = line_machine()
    assert place(machine, 1, (3, 1, 1), True)
    first = machine.partition(1)
    assert first is not None and first.origin == (0, 0, 0) and first.links == 4
    # a torus of two: {4, 5} closes with 2 links (4->5->4), fewer than {3, 4}'s 4
    assert place(machine, 2, (2, 1, 1), True)
    second = machine.partition(2)
    assert second is not None and second.origin == (4, 0, 0) and second.links == 2


def test_bgl_x_line_holds_tori_a_plain_ring_cannot() -> None:
    on_bgl, on_ring = line_machine(), line_machine(ring(8))
    for machine in (on_bgl, on_ring):
        assert place(machine, 1, (3, 1, 1), True)
    assert place(on_bgl, 2, (2, 1, 1), True)
    assert not place(on_ring, 2, (2, 1, 1), True)  # the first torus holds the whole ring
    assert place(on_ring, 3, (1, 1, 1), True)  # one midplane needs no link


def test_y_line_torus_blocks_a_mesh_of_two_in_its_line() -> None:
    topo = Topology("y", (1, 4, 1), (ring(1), bgl_yz_line(), ring(1)))
    machine = TopologyMachine(topo, 0)
    assert place(machine, 1, (1, 2, 1), True)
    assert not place(machine, 2, (1, 2, 1), False)
    assert place(machine, 3, (1, 1, 1), True)
    meshes = TopologyMachine(topo, 0)
    assert place(meshes, 1, (1, 2, 1), False) and place(meshes, 2, (1, 2, 1), False)


def test_rotations_and_the_same_link_set_in_every_line() -> None:
    machine = TopologyMachine(bgl(), 0)
    assert place(machine, 1, (2, 4, 4), True)  # fills x 0-1 of every x-line
    part = machine.partition(1)
    assert part is not None and part.dims == (2, 4, 4)
    x_links = [(line, a, b) for dim, line, a, b in part.line_links(bgl()) if dim == 0]
    by_line: Dict[Tuple[int, int], Set[Link]] = {}
    for line, a, b in x_links:
        by_line.setdefault(line, set()).add((a, b))
    assert len(by_line) == 16 and len({frozenset(v) for v in by_line.values()}) == 1
    # a 4 x 1 x 1 job can only lie along x: its rotations 1 x 4 x 1 and 1 x 1 x 4 do too
    assert place(machine, 2, (1, 4, 1), False)
    part = machine.partition(2)
    assert part is not None and part.dims in ((4, 1, 1), (1, 4, 1), (1, 1, 4))


def test_windows_free_at_their_end_and_count_only_where_they_overlap() -> None:
    machine = TopologyMachine(torus3d(), 0)
    whole = Task(1, 1, 100, 0)
    machine.admit(whole, Request((8, 4, 4), False))
    assert machine.fits(whole, 0, 100)
    machine.take(whole, 0, 100)
    small = Task(2, 1, 10, 0)
    machine.admit(small, Request((1, 1, 1), True))
    assert not machine.fits(small, 0, 10)
    assert machine.earliest_fit(small, 10, 0) == 100
    later = Task(3, 1, 10, 0)
    machine.admit(later, Request((8, 4, 4), True))
    assert machine.fits(later, 200, 10)
    machine.take(later, 200, 210)
    assert machine.fits(small, 100, 101) is False  # overlaps the window from 200
    assert machine.fits(small, 100, 100)
    machine.advance(100)
    assert machine.partition(1) is None and machine.fits(small, 100, 50)


# =============================================================================================
# An independent check of partitions, and random job streams
# =============================================================================================


def joins(links: Sequence[Link], nodes: Set[int], torus: bool) -> bool:
    """Whether ``links`` form one simple path (mesh) or one cycle (torus) of a directed graph
    that passes through every node of ``nodes`` and ends (mesh) at two of them."""
    if len(nodes) == 1:
        return not links
    out: Dict[int, int] = {}
    into: Dict[int, int] = {}
    for a, b in links:
        if a in out or b in into:
            return False
        out[a], into[b] = b, a
    if torus:
        start = links[0][0]
        seen, node = [start], out[start]
        while node != start:
            if node in seen or node not in out:
                return False
            seen.append(node)
            node = out[node]
        return len(seen) == len(links) and nodes <= set(seen)
    starts = [a for a in out if a not in into]
    if len(starts) != 1:
        return False
    seen, node = [starts[0]], starts[0]
    while node in out:
        node = out[node]
        if node in seen:
            return False
        seen.append(node)
    return len(seen) == len(links) + 1 and nodes <= set(seen) and {seen[0], seen[-1]} <= nodes


def check_partition(record: Dict[str, object], topo: Topology, dims: Tuple[int, int, int]) -> None:
    """A box of the job's shape (some rotation), and each line of it joined as asked."""
    mps = {tuple(mp) for mp in record["midplanes"]}  # type: ignore[attr-defined]
    xs, ys, zs = ({mp[k] for mp in mps} for k in range(3))
    extents = (len(xs), len(ys), len(zs))
    assert sorted(extents) == sorted(dims) and len(mps) == extents[0] * extents[1] * extents[2]
    for values in (xs, ys, zs):
        assert max(values) - min(values) + 1 == len(values)  # contiguous, no wrapping
    by_line: Dict[Tuple[int, Tuple[int, int]], List[Link]] = {}
    for dim, line, a, b in record["links"]:  # type: ignore[attr-defined]
        by_line.setdefault(("xyz".index(dim), tuple(line)), []).append((a, b))
    for dim, along in enumerate((xs, ys, zs)):
        wiring = topo.wirings[dim].links
        others = [v for k, v in enumerate((xs, ys, zs)) if k != dim]
        for line in itertools.product(*others):
            held = by_line.get((dim, line), [])
            assert set(held) <= set(wiring)
            assert joins(held, set(along), bool(record["torus"])), (dim, line, held, along)


def overlaps(records: List[Dict[str, object]]) -> List[Tuple[object, object, str]]:
    """Pairs of jobs running at once on a shared midplane or link."""
    held = [
        (
            record,
            {tuple(m) for m in record["midplanes"]},  # type: ignore[attr-defined]
            {json.dumps(link) for link in record["links"]},  # type: ignore[attr-defined]
        )
        for record in records
        if record["start"] < record["end"]  # type: ignore[operator]
    ]
    held.sort(key=lambda item: item[0]["start"])  # type: ignore[arg-type,return-value]
    clashes = []
    for i, (a, mp_a, links_a) in enumerate(held):
        for b, mp_b, links_b in held[i + 1 :]:
            if b["start"] >= a["end"]:  # type: ignore[operator]
                break
            if mp_a & mp_b:
                clashes.append((a["job"], b["job"], "midplane"))
            if links_a & links_b:
                clashes.append((a["job"], b["job"], "link"))
    return clashes


JOBS = st.lists(
    st.tuples(
        st.sampled_from([0, 0, 0, 1, 5, 30]),  # gap to the previous arrival
        st.integers(1, 128),  # midplanes wanted
        st.integers(0, 200),  # run time
        st.integers(1, 250),  # estimate
    ),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    jobs=JOBS,
    name=st.sampled_from(["bgl", "torus3d"]),
    fat=st.sampled_from([0.0, 0.5, 1.0]),
    torus=st.sampled_from([0.0, 0.5, 1.0]),
    policy=st.sampled_from([Policy.GREEDY, Policy.EASY, Policy.FCFS]),
)
def test_random_streams_never_share_a_midplane_or_a_link(
    jobs: List[Tuple[int, int, int, int]], name: str, fat: float, torus: float, policy: Policy
) -> None:
    spec = MachineSpec(name, fat=fat, torus=torus, seed=7)
    machine = spec.build()
    records: List[Dict[str, object]] = []
    wanted: Dict[int, Tuple[int, int, int]] = {}

    def started(task: Task) -> None:
        part = machine.partition(task.key)
        assert task.start is not None
        request = machine.request_of(task)
        wanted[int(task.key)] = request.dims  # type: ignore[call-overload]
        assert task.size == request.volume
        records.append(record_of(task, part, machine, request.torus))

    tasks, submit = [], 0
    for key, (gap, size, run, estimate) in enumerate(jobs):
        submit += gap
        tasks.append(Task(key, size, estimate, submit, min(run, estimate)))
    sim = Simulator(machine.admitted(iter(tasks)), 128, policy, on_start=started, machine=machine)
    sim.run()
    assert len(records) == len(jobs)
    assert overlaps(records) == []
    for record in records:
        if record["midplanes"]:
            check_partition(record, machine.topology, wanted[record["job"]])  # type: ignore[index]


def record_of(task: Task, part: object, machine: TopologyMachine, torus: bool) -> Dict[str, object]:
    assert task.start is not None
    if not isinstance(part, Partition):
        return {
            "job": task.key,
            "start": task.start,
            "end": task.start,
            "midplanes": [],
            "links": [],
        }
    return {
        "job": task.key,
        "start": task.start,
        "end": task.start + task.run,
        "torus": torus,
        "midplanes": [list(m) for m in part.midplanes()],
        "links": [
            ["xyz"[d], list(line), a, b] for d, line, a, b in part.line_links(machine.topology)
        ],
    }


# =============================================================================================
# As a user runs it
# =============================================================================================


def test_simulate_on_bgl_writes_partitions_a_third_party_can_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = trace_prefix("SDSC-SP2-1998-4.2-cln.swf.gz", 400, tmp_path / "sdsc.swf")
    out = tmp_path / "partitions.jsonl"
    code = main(
        [
            "simulate",
            str(trace),
            "--machine",
            "bgl",
            "--fat",
            "1",
            "--torus",
            "1",
            "--policy",
            "greedy",
            "--skip-invalid",
            "--out",
            str(out),
            "--json",
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert summary["cores"] == 128 and len(records) == summary["jobs"] > 300
    assert overlaps(records) == []
    for record in records:
        if record["midplanes"]:
            dims = tuple(record["dims"])
            check_partition(record, bgl(), dims)  # type: ignore[arg-type]
            assert min(dims) >= 2 and record["torus"]


def test_simulate_refuses_shape_options_without_a_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_swf(tmp_path / "t.swf", [swf_row(1, 0, 10, 2)], max_procs=4)
    assert main(["simulate", str(trace), "--fat", "1"]) != 0
    assert "--machine" in capsys.readouterr().err
    assert main(["simulate", str(trace), "--machine", "bgl", "--cores", "4"]) != 0
    assert "--divide-sizes" in capsys.readouterr().err


def test_the_replay_backend_runs_a_bgl_machine_and_keeps_it_in_its_state_file(
    tmp_path: Path,
) -> None:
    trace = str(trace_prefix("SDSC-SP2-1998-4.2-cln.swf.gz", 300, tmp_path / "sdsc.swf"))
    state = str(tmp_path / "replay-state.json")
    clock = FakeClock(1_800_000_000.0)
    spec = MachineSpec("bgl", fat=1.0, torus=1.0)
    backend = SwfReplayBackend(
        trace, offset_s=3 * 86400, clock=clock, state_file=state, machine=spec
    )
    snapshot = backend.snapshot()
    assert snapshot.capacity == 128
    running = [job.cores for job in snapshot.running]
    assert running and all(size >= 8 for size in running) and sum(running) <= 128
    # a reservation is a box (the slim mesh of its size) on free midplanes and links
    start = backend.now() + 86400
    made = backend.create_reservation(ReservationSpec("sa-1", start, 3600, 16))
    assert made.cores == 16
    backend.close()
    again = SwfReplayBackend.open(state, clock=clock)  # the machine comes from the state file
    assert sorted(job.cores for job in again.snapshot().running) == sorted(running)
    assert [r.name for r in again.list_reservations()] == ["sa-1"]
    again.close()
    with pytest.raises(ValueError, match="another simulated cluster"):
        SwfReplayBackend.open(state, clock=clock, machine=MachineSpec("torus3d"))
