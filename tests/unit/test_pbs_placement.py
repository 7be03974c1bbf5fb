"""PBS's rule for placing an advance reservation (docs/pbs.md §11.5), as the node-aware plan
follows it: pbs_sched confirms a reservation only on CPUs of vnodes free all through its
window (``check_resources_for_node``: each vnode's least free CPUs over the window, running
jobs until their walltime ends, other reservations by what they hold at one instant), its
one-CPU chunks placed freely on the vnodes in order. The cases are the real OpenPBS's
(tests/integration/pbs/test_openpbs_agent.py) and hand-worked ones of the rule's source.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence, Tuple

import pytest

from siteagent.core.engines import ReservationConflict
from siteagent.core.machine import Task
from siteagent.core.node_selection import free_placement
from siteagent.core.nodes import NodeMachine
from siteagent.core.prediction import plan, reservable_units, reservation_nodes
from siteagent.core.slots import advertise
from siteagent.core.values import (
    BatchReservation,
    CapacityUnit,
    ClusterSnapshot,
    Job,
    NodeState,
    Placement,
)

NOW = 1_795_537_640
T = NOW + 900  # the start of the windows asked for


def vnodes(count: int, cpus: int = 16) -> Tuple[NodeState, ...]:
    return tuple(NodeState(f"n{i + 1}", cpus, partitions=("workq",)) for i in range(count))


def reservation(name: str, start: int, end: int, *held: Tuple[str, int]) -> BatchReservation:
    return BatchReservation(
        name,
        start,
        end,
        sum(c for _, c in held),
        nodes=len(held),
        node_names=tuple(n for n, _ in held),
        allocation=held,
    )


def pbs(
    reservations: Sequence[BatchReservation] = (),
    running: Sequence[Job] = (),
    pending: Sequence[Job] = (),
    nodes: Tuple[NodeState, ...] = vnodes(4),
    **kw: object,
) -> ClusterSnapshot:
    kw.setdefault("placement", Placement.PBS)
    return ClusterSnapshot(
        now=NOW,
        capacity=sum(n.cores for n in nodes),
        running=tuple(running),
        pending=tuple(pending),
        reservations=tuple(reservations),
        nodes=nodes,
        **kw,  # type: ignore[arg-type]
    )


#: The real cluster's case: n1 reserved for the first minute, n2 for the second.
STAGGERED = (
    reservation("by-hand-1", T, T + 60, ("n1", 16)),
    reservation("by-hand-2", T + 60, T + 120, ("n2", 16)),
)


def test_only_cpus_free_all_through_the_window_count() -> None:
    """48 CPUs are free at every instant of [T, T + 120), but only n3's and n4's 32 all
    through it: pbs_sched denies 40 (reproduced with ``pbs_rsub -I``), confirms 32."""
    snapshot = pbs(STAGGERED)
    with pytest.raises(ReservationConflict):
        reservation_nodes(snapshot, T, T + 120, 40)
    assert reservation_nodes(snapshot, T, T + 120, 32) == ()  # pbs_sched chooses the vnodes
    assert plan(snapshot, extra_reservations=[("r", T, T + 120, 32)]).profile.capacity == 64
    # counted as one pool (the agent's rule before), 40 looked free
    pooled = dataclasses.replace(snapshot, placement=Placement.POOLED)
    assert reservation_nodes(pooled, T, T + 120, 40) == ()


def test_a_vnode_counts_what_its_reservations_hold_at_one_instant() -> None:
    """Two 8-CPU reservations back to back on a 16-CPU vnode leave 8 free all through both:
    PBS walks its calendar's events on the vnode (``check_resources_for_node``) and confirms
    8 more; Slurm's rule counts both reservations and refuses."""
    back_to_back = (
        reservation("a", T, T + 60, ("n1", 8)),
        reservation("b", T + 60, T + 120, ("n1", 8)),
    )
    snapshot = pbs(back_to_back, nodes=vnodes(1))
    reservation_nodes(snapshot, T, T + 120, 8)
    with pytest.raises(ReservationConflict):
        reservation_nodes(snapshot, T, T + 120, 9)
    slurm = dataclasses.replace(snapshot, placement=Placement.SLURM)
    with pytest.raises(ReservationConflict):
        reservation_nodes(slurm, T, T + 120, 8)


def test_overlapping_reservations_add_up_where_they_meet() -> None:
    """Two reservations on n1 that overlap for a minute hold 12 CPUs together there."""
    meeting = (
        reservation("a", T, T + 120, ("n1", 6)),
        reservation("b", T + 60, T + 180, ("n1", 6)),
    )
    snapshot = pbs(meeting, nodes=vnodes(1))
    reservation_nodes(snapshot, T, T + 60, 10)  # before b starts: only a's 6
    reservation_nodes(snapshot, T, T + 180, 4)
    with pytest.raises(ReservationConflict):
        reservation_nodes(snapshot, T, T + 180, 5)


def test_a_running_job_holds_its_cpus_until_its_walltime_ends_and_not_a_second_more() -> None:
    """A job's end event frees its CPUs at start + walltime, before a run event of the same
    second (``add_timed_event``): a reservation may start at that very second."""
    job = Job("1.pbshead", 16, 0, 1800, start=NOW - 60, nodes=1, allocation=(("n1", 16),))
    end = NOW - 60 + 1800
    snapshot = pbs(running=[job], nodes=vnodes(1))
    reservation_nodes(snapshot, end, end + 600, 16)
    with pytest.raises(ReservationConflict):
        reservation_nodes(snapshot, end - 1, end + 600, 1)


def test_whole_vnodes_need_nothing_on_them_all_through_the_window() -> None:
    """``place=scatter:excl`` (the node unit): a vnode any reservation touches during the
    window is out, however little it holds."""
    touched = (reservation("a", T + 100, T + 110, ("n2", 1)),)
    snapshot = pbs(touched, nodes=vnodes(3), unit=CapacityUnit.NODE)
    snapshot = dataclasses.replace(snapshot, capacity=3)
    reservation_nodes(snapshot, T, T + 120, 2)
    with pytest.raises(ReservationConflict):
        reservation_nodes(snapshot, T, T + 120, 3)
    reservation_nodes(snapshot, T, T + 100, 3)  # ends as the other starts


@pytest.mark.parametrize(
    ("free", "chunks", "placed"),
    [
        ([16, 16, 16, 16], 4, ((0, 4),)),  # as many chunks on the first vnode as it holds
        ([16, 16, 16, 16], 24, ((0, 16), (1, 8))),
        ([4, 0, 16, 16], 10, ((0, 4), (2, 6))),  # in vnode order, not best fit
        ([4, 0, 2], 7, None),
    ],
)
def test_free_placement_fills_vnodes_in_order(
    free: Sequence[int], chunks: int, placed: object
) -> None:
    assert free_placement(list(free), chunks) == placed


def test_the_machine_places_on_the_vnodes_free_all_through() -> None:
    """The node machine with PBS's rule puts a new reservation's chunks on n3 and n4, the
    vnodes the staggered reservations leave free all through."""
    machine = NodeMachine([16] * 4, [1] * 4, [True] * 4, NOW, 64, rule=Placement.PBS)
    for key, node, start in (("a", 0, T), ("b", 1, T + 60)):
        held = Task(key, 16, 60, NOW)
        held.placement = ((node, 16),)
        assert machine.hold(held, start, start + 60)
    new = Task("new", 20, 120, NOW)
    assert machine.hold(new, T, T + 120)
    assert new.placement == ((2, 16), (3, 4))
    assert machine.reservable_units(T, T + 120) == 12
    assert not machine.hold(Task("more", 13, 120, NOW), T, T + 120)
    # in vnode order, where Slurm's choice is the best fit (n2's 4 free CPUs)
    for rule, placed in ((Placement.PBS, ((0, 4),)), (Placement.SLURM, ((1, 4),))):
        machine = NodeMachine([16] * 3, [1] * 3, [True] * 3, NOW, 48, rule=rule)
        held = Task("a", 12, 600, NOW)
        held.placement = ((1, 12),)
        assert machine.hold(held, T, T + 600)
        small = Task("small", 4, 60, NOW)
        assert machine.hold(small, T, T + 60) and small.placement == placed


def test_advertised_slots_promise_no_window_pbs_would_deny() -> None:
    """The plan's free capacity over [T, T + 120) is 48 at every instant; the slots say no
    more than the 32 pbs_sched would confirm for a window, and every one is admitted."""
    snapshot = pbs(STAGGERED)
    conservative = plan(snapshot)
    slots = advertise(conservative, reservable=reservable_units(snapshot))
    assert slots
    for slot in slots:
        reservation_nodes(snapshot, slot.start, slot.end, slot.cores)
    spanning = [s for s in slots if s.start <= T and s.end >= T + 120]
    assert sum(s.cores for s in spanning) == 32
    # the pooled bands alone promise more than PBS confirms
    pooled = advertise(conservative)
    with pytest.raises(ReservationConflict):
        for slot in pooled:
            reservation_nodes(snapshot, slot.start, slot.end, slot.cores)


def test_the_queue_is_planned_pooled() -> None:
    """PBS's queue is not placed on vnodes (only its reservations are): a plan with queued
    jobs is the pooled plan."""
    waiting = Job("9.pbshead", 40, 0, 600, partition="workq")
    snapshot = pbs(STAGGERED, pending=[waiting])
    pooled = dataclasses.replace(snapshot, placement=Placement.POOLED)
    assert plan(snapshot).starts == plan(pooled).starts
    assert reservable_units(pooled) is None
