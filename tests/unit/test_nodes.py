"""The node-aware machine: Slurm's node choice, its backfill records, and plans on nodes.

The expected placements and starts are what the real test cluster did (Slurm 22.05.8,
cons_tres, bf_resolution 60 s); the plans are checked against the pooled plan where nodes make
no difference and against hand-worked Slurm answers where they do.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence, Tuple

import pytest

from siteagent.core.blocks import BlockMap
from siteagent.core.engines import Policy, ReservationConflict
from siteagent.core.machine import Shape, Task
from siteagent.core.node_selection import choose_nodes
from siteagent.core.nodes import NodeMachine
from siteagent.core.prediction import plan, reservation_nodes
from siteagent.core.values import (
    Backfill,
    CapacityUnit,
    ClusterSnapshot,
    Job,
    Neighbours,
    NodeState,
    Placement,
)

NOW = 1_795_537_640  # a whole minute plus 20 s
ONE = [1, 1, 1, 1]


# ----------------------------------------------------------------------------- choosing nodes


@pytest.mark.parametrize(
    ("free", "shape", "chosen"),
    [
        ([16, 16, 16, 16], Shape(4), ((0, 4),)),  # -n4 on an idle cluster: the first node
        ([16, 16, 16, 16], Shape(24), ((0, 16), (1, 8))),  # -n24: 16 + 8
        ([0, 2, 16, 16], Shape(20), ((1, 2), (2, 16), (3, 2))),  # -n20 over what is left
        ([12, 16, 16, 16], Shape(2, 2, 2), ((0, 1), (1, 1))),  # -N2: one core on each
        ([11, 15, 16, 16], Shape(24, 2, 2), ((0, 11), (1, 13))),  # -N2 -n24
        ([16, 3, 8, 16], Shape(4), ((2, 4),)),  # best fit: the fewest free cores that hold it
        ([16, 0, 16, 16], Shape(3, 3, 3, exclusive=True), ((2, 16), (3, 16), (0, 16))),
    ],
)
def test_slurm_chooses_nodes(
    free: Sequence[int], shape: Shape, chosen: Tuple[Tuple[int, int], ...]
) -> None:
    assert choose_nodes(list(free), ONE, shape) == tuple(sorted(chosen))


def test_lower_weights_first_whatever_their_order() -> None:
    weights = [10, 1, 5, 1]
    assert choose_nodes([8, 24, 16, 8], weights, Shape(8)) == ((3, 8),)
    assert choose_nodes([8, 24, 16, 8], weights, Shape(30)) == ((1, 24), (3, 6))


def test_too_little_anywhere_is_no_choice() -> None:
    assert choose_nodes([4, 4, 0, 4], ONE, Shape(13)) is None
    assert choose_nodes([16, 16, 8, 16], ONE, Shape(2, 5, 5)) is None


# ----------------------------------------------------------------------------- backfill records


def test_promises_split_records_and_take_whole_nodes() -> None:
    blocks = BlockMap(0, 1000, 0b1111)
    blocks.promise(0b0011, 100, 300)
    assert blocks.free_over(0b1111, 0, 100) == 0b1111
    assert blocks.free_over(0b1111, 150, 200) == 0b1100
    assert blocks.free_over(0b1111, 300, 1000) == 0b1111
    assert blocks.overlaps(0b0010, 299, 400) and not blocks.overlaps(0b0100, 0, 1000)
    # look again where promised nodes come free, not where they are promised
    assert blocks.window(0b1111, 0, 50) == (0b1111, 300)
    assert blocks.window(0b1111, 0, 150) == (0b1100, 300)


def test_promises_stop_at_the_window() -> None:
    blocks = BlockMap(0, 600, 0b11)
    blocks.promise(0b01, 500, 900)
    assert blocks.ends[-1] == 600 and blocks.free_over(0b11, 550, 600) == 0b10


# ----------------------------------------------------------------------------- plans on nodes


def nodes_of(*cores: int, weights: Sequence[int] = ()) -> Tuple[NodeState, ...]:
    return tuple(
        NodeState(f"n{i + 1}", c, partitions=("batch",), weight=weights[i] if weights else 1)
        for i, c in enumerate(cores)
    )


def snap(
    running: Sequence[Job] = (),
    pending: Sequence[Job] = (),
    nodes: Tuple[NodeState, ...] = nodes_of(16, 16, 16, 16),
    **kw: object,
) -> ClusterSnapshot:
    kw.setdefault("placement", Placement.SLURM)
    return ClusterSnapshot(
        now=NOW,
        capacity=sum(n.cores for n in nodes),
        running=tuple(running),
        pending=tuple(pending),
        nodes=nodes,
        **{"backfill": Backfill(60, 86400, 5), **kw},  # type: ignore[arg-type]
    )


def running(job_id: str, limit_s: int, *alloc: Tuple[str, int], start: int = NOW - 7) -> Job:
    cores = sum(c for _, c in alloc)
    return Job(job_id, cores, 0, limit_s, start=start, nodes=len(alloc), allocation=alloc)


def queued(job_id: str, cores: int, limit_s: int, **kw: object) -> Job:
    return Job(job_id, cores, 0, limit_s, partition="batch", **kw)  # type: ignore[arg-type]


def test_the_test_clusters_published_starts() -> None:
    """Four running jobs end within two seconds; a 64-core job starts when the last of them
    ends (they end in one group), and a 3-node exclusive job when the 64-core job's whole-node
    promise, cut down to the minute, ends (Slurm published 1795539435 and 1795541220)."""
    busy = [
        running("1", 1800, ("n1", 4), start=1795537633),
        running("2", 1800, ("n1", 1), ("n2", 1), start=1795537633),
        running("3", 1800, ("n1", 11), ("n2", 13), start=1795537633),
        running("4", 1800, ("n2", 2), ("n3", 16), ("n4", 2), start=1795537635),
    ]
    wide = queued("5", 64, 1800, nodes=4)
    whole = queued("6", 48, 1800, nodes=3, max_nodes=3, exclusive=True)
    starts = plan(snap(busy, [wide, whole]), batch_estimates=False).starts
    assert starts == {"5": 1795539435, "6": 1795541220}


def test_fragmentation_delays_what_pooled_cores_would_start_now() -> None:
    """Ten cores free, but six on one node and four on another: an eight-core job cannot
    start on one node until a node frees up; pooled, it would start now."""
    busy = [running("1", 600, ("n1", 10)), running("2", 3600, ("n2", 12))]
    two = nodes_of(16, 16)
    job = queued("3", 8, 600, max_nodes=1)
    on_nodes = plan(snap(busy, [job], nodes=two), batch_estimates=False)
    pooled = plan(snap(busy, [job], nodes=two, placement=Placement.POOLED))
    assert pooled.starts["3"] == NOW
    assert on_nodes.starts["3"] == NOW - 7 + 600


def test_a_planned_job_promises_its_nodes_whole() -> None:
    """A one-core job planned later takes its node whole from its start (cut down to the
    minute) to its end: a 16-core job after it cannot use that node meanwhile."""
    busy = [running("1", 600, ("n1", 16)), running("2", 6000, ("n2", 16))]
    small = queued("3", 1, 1200, max_nodes=1)
    full = queued("4", 16, 600, max_nodes=1)
    starts = plan(snap(busy, [small, full], nodes=nodes_of(16, 16)), batch_estimates=False).starts
    assert starts["3"] == NOW - 7 + 600
    end = NOW - 7 + 600 + 1200
    assert starts["4"] == end - end % 60


def test_running_jobs_end_in_groups_from_one_barrier() -> None:
    """Slurm 22.05 lets running jobs end in groups: up to a barrier 30 s past the first end,
    then the window doubles until it reaches the next end. A job that one end would make room
    for starts at the end of the last job of its group, 1500 s later (seen on the cluster)."""
    busy = [
        running("1", 17, ("n2", 1)),  # ends at NOW + 10: the barrier is NOW + 40
        running("2", 2007, ("n1", 8)),  # NOW + 2000: its group reaches NOW + 3880 ...
        running("3", 3507, ("n2", 7)),  # ... so NOW + 3500 ends in it too
    ]
    job = queued("4", 8, 600, max_nodes=1)
    starts = plan(snap(busy, [job], nodes=nodes_of(8, 8)), batch_estimates=False).starts
    assert starts["4"] == NOW + 3500


def test_jobs_beyond_the_window_promise_nothing() -> None:
    """Past bf_window a job's start is published but nothing is promised: the next job may
    take the same nodes at the same time."""
    busy = [running("1", 2 * 86400, ("n1", 16), ("n2", 16))]
    first = queued("2", 32, 3600, nodes=2)
    second = queued("3", 32, 3600, nodes=2)
    starts = plan(snap(busy, [first, second], nodes=nodes_of(16, 16)), batch_estimates=False)
    assert starts.starts["2"] == starts.starts["3"] == NOW - 7 + 2 * 86400


def test_partitions_sharing_nodes_take_them_from_each_other() -> None:
    """A neighbour partition's job of higher priority takes the shared node first; it is
    placed but not reported."""
    ours = (NodeState("n1", 16, partitions=("batch", "wide")),)
    theirs = (NodeState("n2", 16, partitions=("wide",)),)
    mine = queued("1", 16, 600, priority=5)
    wide = Job("2", 32, 0, 1200, partition="wide", nodes=2, priority=9)
    with_them = snap(
        pending=[mine],
        nodes=ours,
        neighbours=Neighbours(nodes=theirs, pending=(wide,)),
    )
    result = plan(with_them, batch_estimates=False)
    assert list(result.starts) == ["1"]
    assert result.starts["1"] == NOW + 1200
    assert plan(snap(pending=[mine], nodes=ours), batch_estimates=False).starts["1"] == NOW


def test_a_reservation_goes_on_cores_free_all_over_its_window() -> None:
    busy = [running("1", 600, ("n1", 12)), running("2", 600, ("n2", 12))]
    window = (("offer", "x"), NOW + 60, NOW + 660, 8)
    result = plan(snap(busy, nodes=nodes_of(16, 16)), extra_reservations=[window])
    assert result.reservation_nodes[("offer", "x")] == (("n1", 4), ("n2", 4))
    too_big = (("offer", "y"), NOW + 60, NOW + 660, 9)
    with pytest.raises(ReservationConflict):
        plan(snap(busy, nodes=nodes_of(16, 16)), extra_reservations=[too_big])


def test_a_reservation_never_starts_at_the_second_a_running_jobs_limit_ends() -> None:
    """Slurm's boundary (docs/slurm.md §6.1): a core reservation starting at the very second
    a running job's limit ends on its node is "busy"; one second later it is not. The case a
    buyer found: partition a of two 8-core nodes, an 8-core job running on one, the other
    held; two 4-core offers from the job's end."""
    job = running("1", 1800, ("n1", 8))
    other = running("2", 7200, ("n2", 8))
    end = job.start + 1800  # type: ignore[operator]
    snapshot = snap([job, other], nodes=nodes_of(8, 8), end_margin=1)
    with pytest.raises(ReservationConflict):
        reservation_nodes(snapshot, end, end + 600, 4)
    assert reservation_nodes(snapshot, end + 1, end + 601, 8) == (("n1", 8),)
    # the free capacity offers are cut from starts at the same second
    profile = plan(snapshot).profile
    assert not profile.fits(4, end, 600) and profile.fits(8, end + 1, 600)
    # without the margin (a batch system that frees the cores at the end) both start at once
    loose = dataclasses.replace(snapshot, end_margin=0)
    assert reservation_nodes(loose, end, end + 600, 8) == (("n1", 8),)
    assert plan(loose).profile.fits(8, end, 600)


def test_the_margin_leaves_the_queues_predicted_starts_alone() -> None:
    """Pending jobs start when the job ends, as Slurm publishes: the margin is for
    reservations only."""
    job = running("1", 1800, ("n1", 8))
    waiting = queued("2", 8, 600)
    end = job.start + 1800  # type: ignore[operator]
    snapshot = snap([job], [waiting], nodes=nodes_of(8), end_margin=1)
    assert plan(snapshot, batch_estimates=False).starts["2"] == end


def test_a_node_unit_reservation_takes_whole_free_nodes() -> None:
    busy = [running("1", 600, ("n1", 1))]
    snapshot = snap(busy, nodes=nodes_of(16, 16, 16), unit=CapacityUnit.NODE)
    window = (("offer", "x"), NOW + 60, NOW + 660, 2)
    result = plan(snapshot, extra_reservations=[window])
    assert result.reservation_nodes[("offer", "x")] == (("n2", 16), ("n3", 16))


def test_reservations_hold_their_cores_against_jobs() -> None:
    """A batch reservation on n1's cores keeps a job that needs a whole node off it."""
    machine = NodeMachine([16, 16], [1, 1], [True, True], NOW, 32, resolution=60)
    res = Task(("batch", "r"), 4, 600, NOW)
    res.placement = ((0, 4),)
    assert machine.hold(res, NOW, NOW + 600)
    job = Task("j", 16, 600, NOW)
    job.shape = Shape(16, 1, 1)
    assert machine.earliest_fit(job, 600, NOW) == NOW and job.placement == ((1, 16),)


@pytest.mark.parametrize("policy", list(Policy))
def test_every_policy_plans_on_nodes(policy: Policy) -> None:
    """FCFS and EASY run on nodes too (the same rules; where EASY backfills, the head's
    window is held in place)."""
    busy = [running("1", 600, ("n1", 16)), running("2", 1200, ("n2", 8))]
    queue = [queued("3", 32, 600, nodes=2), queued("4", 8, 300), queued("5", 4, 3000)]
    starts = plan(snap(busy, queue, nodes=nodes_of(16, 16)), policy, batch_estimates=False)
    assert starts.starts["3"] >= NOW - 7 + 1200
    if policy is Policy.FCFS:
        assert starts.starts["4"] >= starts.starts["3"]
    else:
        assert starts.starts["4"] == NOW  # eight cores free on n2 until the head starts


# ----------------------------------------------------------------------------- Slurm 24.11 on

RULES_22_05 = Backfill.of_release((22, 5), resolution=60, window=86400, kill_wait=5)
RULES_24_11 = Backfill.of_release((24, 11), resolution=60, window=86400, kill_wait=5)


def one_node_machine(backfill: Backfill, nodes: int = 1) -> NodeMachine:
    return NodeMachine(
        [16] * nodes,
        [1] * nodes,
        [True] * nodes,
        NOW,
        16 * nodes,
        resolution=backfill.resolution,
        window=backfill.window,
        kill_wait=backfill.kill_wait,
        ends_up=backfill.ends_up,
        from_start=backfill.from_start,
    )


def run_on(machine: NodeMachine, key: str, cores: int, end: int, node: int = 0) -> None:
    task = Task(key, cores, end - NOW, NOW)
    task.placement = ((node, cores),)
    machine.take(task, NOW - 7, end)


def first_start(machine: NodeMachine, cores: int, after: int = NOW) -> int | None:
    task = Task("pending", cores, 600, NOW)
    task.shape = Shape(cores)
    return machine.earliest_fit(task, 600, after)


def test_the_release_says_which_rules_apply() -> None:
    assert not RULES_22_05.ends_up and not RULES_22_05.from_start
    assert RULES_24_11.ends_up and RULES_24_11.from_start
    assert Backfill.of_release((26, 5)).from_start


def test_from_24_11_a_promise_ends_rounded_up() -> None:
    """Slurm 24.11's ``_set_slot_time`` rounds a planned job's end *up* to bf_resolution
    (22.05 cut it down): the 16-core job after the one-core job's promise starts at the next
    whole minute, not the last one (docs/slurm.md §11)."""
    busy = [running("1", 600, ("n1", 16)), running("2", 6000, ("n2", 16))]
    small = queued("3", 1, 1200, max_nodes=1)
    full = queued("4", 16, 600, max_nodes=1)
    end = NOW - 7 + 600 + 1200
    for rules, expected in ((RULES_22_05, end - end % 60), (RULES_24_11, end - end % 60 + 60)):
        queue = snap(busy, [small, full], nodes=nodes_of(16, 16), backfill=rules)
        assert plan(queue, batch_estimates=False).starts["4"] == expected


def test_from_24_11_running_jobs_ending_before_the_start_tried_are_gone() -> None:
    """24.11's will-run test from a later start drops the running jobs that end before it
    first (cons_tres ``_build_cr_job_list``): a job tried from NOW + 110 fits there. 22.05 let
    the jobs end in groups, and the group of the job ending at NOW + 95 reaches NOW + 115."""
    for rules, expected in ((RULES_22_05, NOW + 115), (RULES_24_11, NOW + 110)):
        machine = one_node_machine(rules)
        run_on(machine, "a", 8, NOW + 95)
        run_on(machine, "b", 8, NOW + 115)
        assert first_start(machine, 8, after=NOW + 110) == expected


def test_from_24_11_no_running_job_past_the_next_try_is_waited_for() -> None:
    """24.11's will-run test stops at running jobs ending after where the backfill tries next
    (``will_run_data.end``): the job ending at NOW + 95 makes room on n1 then. 22.05 waited for
    its whole group (to NOW + 115), past the next try at NOW + 100, and tried there, on n2."""
    for rules, expected in ((RULES_22_05, NOW + 100), (RULES_24_11, NOW + 95)):
        machine = one_node_machine(rules, nodes=2)
        run_on(machine, "a", 8, NOW + 95)
        run_on(machine, "b", 8, NOW + 115)
        machine.blocks.promise(0b10, NOW - 20, NOW + 100)  # n2 promised until NOW + 100
        assert first_start(machine, 8) == expected


def test_from_24_11_the_next_try_may_lie_past_the_jobs_window() -> None:
    """When no node comes free within the job's window, 24.11 tries next at the end of the
    record after the first one beginning past it (backfill.c, ``_attempt_backfill``); 22.05
    gave up (no estimate within bf_window)."""
    blocks = BlockMap(0, 1000, 0b11)
    blocks.promise(0b10, 100, 300)
    blocks.promise(0b01, 200, 300)  # records: [0, 100) 11, [100, 200) 01, [200, 300) 00, ...
    assert blocks.window(0b11, 0, 50) == (0b11, 0)
    assert blocks.window(0b11, 0, 50, past_end=True) == (0b11, 300)
    assert blocks.window(0b11, 0, 250, past_end=True) == (0b00, 300)  # found inside


def test_equal_priorities_go_by_submit_time_then_job_number() -> None:
    """From 24.11 every job has priority 1 (priority/multifactor, no weights): Slurm's queue
    then goes by submit time, then job number, across partitions (``sort_job_queue2``). The
    neighbour's job 1 takes the shared node before this partition's job 2."""
    ours = (NodeState("n1", 16, partitions=("batch", "wide")),)
    theirs = (NodeState("n2", 16, partitions=("wide",)),)
    for mine, wide, start in (("2", "1", NOW + 1200), ("1", "2", NOW)):
        queue = snap(
            pending=[queued(mine, 16, 600, priority=1)],
            nodes=ours,
            neighbours=Neighbours(
                nodes=theirs,
                pending=(Job(wide, 32, 0, 1200, partition="wide", nodes=2, priority=1),),
            ),
        )
        assert plan(queue, batch_estimates=False).starts[mine] == start
