"""Accepting offers where the batch system places reservations on particular nodes.

The agent re-checks an offer on its node-aware plan, creates the reservation on the nodes
that plan chose, and verifies on reading it back that the batch system put it there. Runs on
:class:`testbed.inprocess.fakes.NodeCluster`, which places and refuses as Slurm does and,
like pyslurm's legacy API, does not show how a reservation over several nodes splits its
cores unless asked to (as ``scontrol`` does).
"""

from __future__ import annotations

from typing import Dict, Sequence

import pytest

from siteagent.core.values import Job
from siteagent.market.lifecycle import (
    BidRecord,
    BidState,
    OfferRefused,
    ReservationFailed,
    ReservationRecord,
    ReservationState,
)
from siteagent.market.reservations import ReservationManager
from siteagent.market.store import Store
from testbed.inprocess.fakes import NodeCluster
from testbed.inprocess.offers import record_offer

T0 = 1_800_000_000


def manager_on(cores: Dict[str, int], running: Sequence[Job] = ()) -> ReservationManager:
    backend = NodeCluster(cores, running, T0)
    return ReservationManager(Store(":memory:"), backend, clock=backend.now)


def accept(
    manager: ReservationManager, size: int, start: int, duration: int, key: str
) -> ReservationRecord:
    offer = record_offer(manager, size, start=start, duration=duration)
    return manager.accept(offer.id, "alice", key)


def test_accept_reserves_the_nodes_the_plan_chose() -> None:
    """Four cores free on n1 and sixteen on n2: eight go on n2, named in the request and kept
    with the record."""
    busy = Job("1", 12, 0, 3600, start=T0 - 100, nodes=1, allocation=(("n1", 12),))
    manager = manager_on({"n1": 16, "n2": 16}, [busy])
    record = accept(manager, 8, T0 + 600, 3600, "k1")
    assert record.state is ReservationState.TENTATIVE
    assert record.allocation == (("n2", 8),)
    backend = manager.backend
    assert isinstance(backend, NodeCluster)
    assert [spec.allocation for spec in backend.created] == [(("n2", 8),)]


def test_a_reservation_put_on_other_nodes_fails_and_is_deleted() -> None:
    manager = manager_on({"n1": 16, "n2": 16})
    backend = manager.backend
    assert isinstance(backend, NodeCluster)
    backend.moved = (("n1", 4), ("n2", 4))
    with pytest.raises(ReservationFailed, match="it is on n1,n2, not n1"):
        accept(manager, 8, T0 + 600, 3600, "k1")
    assert backend.list_reservations() == []


def test_cores_free_only_on_different_nodes_in_turn_are_withdrawn() -> None:
    """Eight cores are free all through the window, pooled: on n2 until a reservation takes
    it, on n1 from when a job there ends. No node has them all along, so the offer is
    withdrawn before anything is asked of the batch system (it would refuse it as busy)."""
    busy = Job("1", 8, 0, 1900, start=T0 - 100, nodes=1, allocation=(("n1", 8),))
    manager = manager_on({"n2": 8, "n1": 8}, [busy])  # n2 first in the node order
    taken = accept(manager, 8, T0 + 1800, 3200, "first")
    assert taken.allocation == (("n2", 8),)
    with pytest.raises(OfferRefused) as refused:
        accept(manager, 8, T0 + 600, 3000, "second")
    assert refused.value.reason == "capacity_gone"
    backend = manager.backend
    assert isinstance(backend, NodeCluster)
    assert len(backend.created) == 1


def test_the_store_knows_how_a_reservation_splits_its_cores() -> None:
    """Twelve cores over n1 (8) and n2 (4): the batch system shows only the total, which
    could mean all of n2; the record says four, so four more fit on n2."""
    manager = manager_on({"n1": 8, "n2": 8})
    first = accept(manager, 12, T0 + 600, 3600, "k1")
    assert first.allocation == (("n1", 8), ("n2", 4))
    second = accept(manager, 4, T0 + 600, 3600, "k2")
    assert second.allocation == (("n2", 4),)


def test_the_split_the_batch_system_lists_stands_over_the_record() -> None:
    """Slurm 23.11 and later take one total for the named nodes and split it their own way:
    asked for n1 8 and n2 4, it holds n1 4 and n2 8, and lists that. Four more cores fit on
    n1 only; planned from the record they would go on n2, and be refused as busy."""
    manager = manager_on({"n1": 8, "n2": 8})
    backend = manager.backend
    assert isinstance(backend, NodeCluster)
    backend.lists_cores = True
    backend.moved = (("n1", 4), ("n2", 8))
    first = accept(manager, 12, T0 + 600, 3600, "k1")
    assert first.allocation == (("n1", 8), ("n2", 4))
    second = accept(manager, 4, T0 + 600, 3600, "k2")
    assert second.state is ReservationState.TENTATIVE
    assert second.allocation == (("n1", 4),)


def test_the_window_checked_is_the_one_the_batch_system_holds() -> None:
    """Slurm holds whole minutes: a 30 s offer takes a minute of its node, and a reservation
    40 s after its start leaves no room for it (checked, not refused by the batch system)."""
    manager = manager_on({"n1": 8})
    accept(manager, 8, T0 + 640, 600, "first")
    with pytest.raises(OfferRefused):
        accept(manager, 8, T0 + 600, 30, "second")
    backend = manager.backend
    assert isinstance(backend, NodeCluster)
    assert len(backend.created) == 1
    assert backend.held_window(T0, T0 + 61) == (T0, T0 + 120)


def test_an_open_bid_holds_cores_the_nodes_would_have_room_for() -> None:
    """An English auction's open bid holds twenty of the thirty-two cores over the window: an
    offer of sixteen, for which the nodes alone have room, is withdrawn; the bid's own offer
    is not held against itself and goes on the nodes the plan chose."""
    manager = manager_on({"n1": 16, "n2": 16})
    won = record_offer(manager, 20, start=T0 + 600, duration=3600, valid_s=600)
    bid = BidRecord(
        client="bob",
        auction_id="a1",
        job={"cores": 20, "walltime": 3600, "priority": 1},
        closes_at=T0 + 60,
        held_until=T0 + 300,
        state=BidState.OPEN,
        created=T0,
        updated=T0,
        offer_id=won.id,
        start=T0 + 600,
        end=T0 + 4200,
        size=20,
        made=True,
    )
    manager.store.save_bid(bid, None, None)
    with pytest.raises(OfferRefused) as refused:
        accept(manager, 16, T0 + 600, 3600, "k1")
    assert refused.value.reason == "capacity_gone"
    record = manager.accept(won.id, "bob", "k2")
    assert record.allocation == (("n1", 16), ("n2", 4))
