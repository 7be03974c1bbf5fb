"""A running simulator seen as the agent sees a cluster: its snapshot, and its engine's plan."""

from __future__ import annotations

from typing import List

import pytest

from siteagent.core.engines import Policy
from siteagent.core.machine import Task
from siteagent.core.prediction import plan
from siteagent.core.slots import advertise
from siteagent.core.values import BatchReservation
from siteagent.sim import Simulator
from siteagent.sim.snapshot import schedule_plan, snapshot_of

T0 = 1000


def busy(policy: Policy = Policy.CONSERVATIVE) -> Simulator:
    """8 cores at T0 + 10: job 1 (6 cores) running, jobs 2 (4) and 3 (2) waiting or running."""
    tasks: List[Task] = [
        Task(1, 6, 3600, T0),
        Task(2, 4, 1800, T0 + 5),
        Task(3, 2, 600, T0 + 6),
    ]
    simulator = Simulator(iter(tasks), 8, policy)
    simulator.add_reservation("maint", T0 + 7200, T0 + 9000, 8)
    simulator.advance_to(T0 + 10)
    return simulator


def test_the_snapshot_shows_running_queued_and_reserved() -> None:
    snapshot = snapshot_of(busy())
    assert (snapshot.now, snapshot.capacity) == (T0 + 10, 8)
    assert sorted((j.id, j.cores, j.start, j.limit) for j in snapshot.running) == [
        ("1", 6, T0, 3600),
        ("3", 2, T0 + 6, 600),
    ]
    assert [(j.id, j.cores, j.start, j.submit) for j in snapshot.pending] == [
        ("2", 4, None, T0 + 5)
    ]
    assert snapshot.reservations == (BatchReservation("maint", T0 + 7200, T0 + 9000, 8),)


def test_the_snapshot_can_be_shifted_and_show_given_reservations() -> None:
    mine = BatchReservation("sa-1", 5, 6, 1, users=("alice",))
    snapshot = snapshot_of(busy(), shift=100, reservations=[mine], backend="swf")
    assert snapshot.now == T0 + 110 and snapshot.backend == "swf"
    assert {j.id: j.start for j in snapshot.running} == {"1": T0 + 100, "3": T0 + 106}
    assert snapshot.pending[0].submit == T0 + 105
    assert snapshot.reservations == (mine,)


def test_the_engine_plan_is_the_plan_of_the_snapshot() -> None:
    """With exact estimates the conservative engine already holds the plan: its slots are the
    ones planning the snapshot again gives."""
    simulator = busy()
    held = schedule_plan(simulator, 48 * 3600)
    again = plan(snapshot_of(simulator), Policy.CONSERVATIVE, horizon=held.horizon - held.now)
    assert advertise(held) == advertise(again)


def test_the_engine_plan_starts_now_between_events() -> None:
    """Long after the last event (everything ended at T0 + 3,606, the reservation at 9,000)
    the plan still starts now: the free machine is one slot from now, not from the last
    event."""
    simulator = busy()
    simulator.advance_to(T0 + 20_000)
    held = schedule_plan(simulator, 48 * 3600)
    assert [(s.start, s.cores) for s in advertise(held)] == [(T0 + 20_000, 8)]
    again = plan(snapshot_of(simulator), Policy.CONSERVATIVE, horizon=held.horizon - held.now)
    assert advertise(held) == advertise(again)


def test_only_the_conservative_engine_has_a_plan() -> None:
    with pytest.raises(ValueError, match="easy"):
        schedule_plan(busy(Policy.EASY), 3600)
