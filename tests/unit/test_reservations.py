"""The reservation lifecycle, transition by transition, on a small replayed cluster.

The cluster: 16 cores, one job holding 8 of them for the first 10 hours, time moved by hand.
So a reservation of up to 8 cores fits anywhere in those 10 hours and 9 or more does not.
Every illegal move is tried from every state, and must raise and change nothing: not the
record, not its history, not the batch system.
"""

from __future__ import annotations

import threading
from decimal import Decimal
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from siteagent.backends.base import BackendUnavailable
from siteagent.backends.replay import SwfReplayBackend
from siteagent.core.defaults import DEFAULT_PENALTY_FACTOR
from siteagent.core.values import CapacityUnit, Offer, ReservationSpec
from siteagent.market.lifecycle import (
    LIVE,
    TRANSITIONS,
    IdempotencyKeyReused,
    IllegalTransition,
    NotOwner,
    OfferRefused,
    ReservationFailed,
    ReservationRecord,
    ReservationState,
    UnknownOffer,
    UnknownReservation,
    check_transition,
)
from siteagent.market.reservations import NOTICE_SKEW_S, ReservationManager
from siteagent.market.store import Store
from testbed.inprocess.fakes import FakeClock, FaultyBackend
from testbed.inprocess.offers import record_offer
from testbed.inprocess.promises import violations
from testbed.inprocess.traces import write_trace

#: What a confirm keeps and owes the ledger (its contents are the deals' business).
A_RECEIPT = {"id": "a-receipt"}

S = ReservationState
T0 = 1_800_000_000
TIMEOUT = 120.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(float(T0))


@pytest.fixture
def backend(tmp_path: Path, clock: FakeClock) -> FaultyBackend:
    trace = write_trace(tmp_path / "t.swf", [(0, 36000, 8, 36000), (500000, 10, 1, 10)], 16)
    return FaultyBackend(SwfReplayBackend(trace, offset_s=0, clock=clock))


@pytest.fixture
def manager(backend: FaultyBackend) -> ReservationManager:
    replay = backend.inner
    assert isinstance(replay, SwfReplayBackend)
    return ReservationManager(Store(":memory:"), backend, clock=replay.now, confirm_timeout=TIMEOUT)


def offer(manager: ReservationManager, size: int = 4, fee: str = "0", **kw: int) -> Offer:
    return record_offer(
        manager,
        size,
        start=kw.pop("start", T0 + 600),
        duration=kw.pop("duration", 3600),
        fee=Decimal(fee),
        **kw,
    )


def held(manager: ReservationManager) -> Dict[str, Tuple[int, int, int]]:
    return {r.name: (r.start, r.end, r.cores) for r in manager.backend.list_reservations()}


def accepted(manager: ReservationManager, fee: str = "0", key: str = "k1") -> ReservationRecord:
    return manager.accept(offer(manager, fee=fee).id, "alice", key)


def states(manager: ReservationManager, rid: str) -> List[Tuple[object, S]]:
    return [(step.from_state, step.to_state) for step in manager.store.history(rid)]


# --------------------------------------------------------------------------- accept


def test_accept_creates_a_verified_tentative_reservation(manager: ReservationManager) -> None:
    bid = offer(manager, size=8)
    record = manager.accept(bid.id, "alice", "k1", users=("alice",))
    assert record.state is S.TENTATIVE
    assert record.name == "sa-" + record.id
    assert (record.start, record.end, record.size) == (bid.start, bid.end, 8)
    assert record.deadline == T0 + TIMEOUT
    assert record.users == ("alice",)
    assert held(manager) == {record.name: (bid.start, bid.end, 8)}
    assert states(manager, record.id) == [(None, S.REQUESTED), (S.REQUESTED, S.TENTATIVE)]
    assert manager.store.get_reservation(record.id) == record


def test_the_intent_is_written_before_the_batch_system_is_asked(
    manager: ReservationManager, backend: FaultyBackend
) -> None:
    seen: List[object] = []
    create = backend.inner.create_reservation

    def spy(spec: object) -> object:
        seen.extend(r.state for r in manager.store.reservations())
        return create(spec)  # type: ignore[arg-type]

    backend.inner.create_reservation = spy  # type: ignore[method-assign,assignment]
    accepted(manager)
    assert seen == [S.REQUESTED]


def test_accept_twice_with_the_same_key_has_one_effect(manager: ReservationManager) -> None:
    bid = offer(manager)
    first = manager.accept(bid.id, "alice", "k1")
    again = manager.accept(bid.id, "alice", "k1")
    assert again == first
    assert len(held(manager)) == 1
    assert len(manager.store.reservations()) == 1


def test_a_key_reused_for_another_request_is_refused(manager: ReservationManager) -> None:
    record = accepted(manager)
    other = offer(manager)
    with pytest.raises(IdempotencyKeyReused, match="was used for 'accept"):
        manager.accept(other.id, "alice", "k1")
    with pytest.raises(IdempotencyKeyReused):
        manager.confirm(record.id, "alice", "k1", receipt=A_RECEIPT)
    assert manager.store.reservation_for_offer(other.id) is None
    assert manager.store.get_reservation(record.id) == record


def test_keys_belong_to_their_client(manager: ReservationManager) -> None:
    mine = accepted(manager, key="same")
    theirs = manager.accept(offer(manager).id, "bob", "same")
    assert mine.id != theirs.id and theirs.client == "bob"


@pytest.mark.parametrize(
    ("kwargs", "wait", "code"),
    [
        ({"valid_s": 60}, 60, "expired"),
        ({"start": T0 - 1}, 0, "window_passed"),
        ({"size": 9}, 0, "capacity_gone"),
        ({"size": 17, "start": T0 + 40000}, 0, "capacity_gone"),
    ],
    ids=["expired", "window passed", "running job in the way", "larger than the machine"],
)
def test_withdraw_changes_nothing(
    manager: ReservationManager, clock: FakeClock, kwargs: Dict[str, int], wait: int, code: str
) -> None:
    bid = offer(manager, **kwargs)
    clock.advance(wait)
    with pytest.raises(OfferRefused) as refused:
        manager.accept(bid.id, "alice", "k1")
    assert refused.value.reason == code and refused.value.code == f"offer_{code}"
    assert "ask for a new quote" in str(refused.value)
    assert manager.store.reservations() == []
    assert manager.store.idempotency("alice", "k1") is None
    assert held(manager) == {}


def test_capacity_taken_by_another_reservation_is_withdrawn(manager: ReservationManager) -> None:
    accepted(manager)  # 4 of the 8 free cores
    late = offer(manager, size=5)
    with pytest.raises(OfferRefused, match="no longer free") as refused:
        manager.accept(late.id, "bob", "k1")
    assert refused.value.code == "offer_capacity_gone"
    assert len(held(manager)) == 1


def test_an_offer_is_accepted_once(manager: ReservationManager) -> None:
    bid = offer(manager)
    manager.accept(bid.id, "alice", "k1")
    with pytest.raises(OfferRefused, match="accepted already") as refused:
        manager.accept(bid.id, "bob", "k2")
    assert refused.value.code == "offer_used"


def test_unknown_offer(manager: ReservationManager) -> None:
    with pytest.raises(UnknownOffer, match="never quoted it to you"):
        manager.accept("nope", "alice", "k1")


def test_client_and_key_are_required(manager: ReservationManager) -> None:
    bid = offer(manager)
    with pytest.raises(ValueError, match="client"):
        manager.accept(bid.id, "", "k1")
    with pytest.raises(ValueError, match="idempotency key"):
        manager.accept(bid.id, "alice", "")


def test_refused_by_the_batch_system_fails_with_its_message(
    manager: ReservationManager, backend: FaultyBackend
) -> None:
    backend.refuse = "Requested nodes are busy"
    bid = offer(manager)
    with pytest.raises(ReservationFailed, match="Requested nodes are busy") as failed:
        manager.accept(bid.id, "alice", "k1")
    record = failed.value.record
    assert record.state is S.FAILED and "Requested nodes are busy" in record.message
    assert states(manager, record.id) == [(None, S.REQUESTED), (S.REQUESTED, S.FAILED)]
    backend.refuse = None  # the same request again: the same answer, not a second try
    with pytest.raises(ReservationFailed) as again:
        manager.accept(bid.id, "alice", "k1")
    assert again.value.record == record
    assert held(manager) == {}


def test_a_shrunk_reservation_is_deleted_and_fails(
    manager: ReservationManager, backend: FaultyBackend
) -> None:
    backend.shrink = 1
    with pytest.raises(ReservationFailed, match="holds 3 cores, not 4") as failed:
        accepted(manager)
    assert failed.value.record.state is S.FAILED
    assert held(manager) == {}


def test_outage_at_create_leaves_the_intent_for_the_retry(
    manager: ReservationManager, backend: FaultyBackend
) -> None:
    backend.lose_answer = True  # created, but the answer never came
    bid = offer(manager)
    with pytest.raises(BackendUnavailable):
        manager.accept(bid.id, "alice", "k1")
    [record] = manager.store.reservations()
    assert record.state is S.REQUESTED
    backend.lose_answer = False
    again = manager.accept(bid.id, "alice", "k1")
    assert again.state is S.TENTATIVE and again.id == record.id
    assert held(manager) == {record.name: (bid.start, bid.end, 4)}
    assert manager.accept(bid.id, "alice", "k1") == again


def test_outage_before_create_fails_on_retry(
    manager: ReservationManager, backend: FaultyBackend
) -> None:
    bid = offer(manager)
    original = backend.inner.create_reservation

    def down(spec: object) -> object:
        raise BackendUnavailable("controller down (test)")

    backend.inner.create_reservation = down  # type: ignore[method-assign,assignment]
    with pytest.raises(BackendUnavailable):
        manager.accept(bid.id, "alice", "k1")
    backend.inner.create_reservation = original  # type: ignore[method-assign]
    with pytest.raises(ReservationFailed, match="interrupted before the batch system created"):
        manager.accept(bid.id, "alice", "k1")


# --------------------------------------------------------------------------- confirm


def test_confirm_by_the_owner_before_the_deadline(
    manager: ReservationManager, clock: FakeClock
) -> None:
    record = accepted(manager)
    clock.advance(TIMEOUT - 1)
    confirmed = manager.confirm(record.id, "alice", "c1", receipt=A_RECEIPT)
    assert confirmed.state is S.CONFIRMED
    assert states(manager, record.id)[-1] == (S.TENTATIVE, S.CONFIRMED)
    assert manager.store.history(record.id)[-1].actor == "alice"
    again = manager.confirm(record.id, "alice", "c1", receipt=A_RECEIPT)
    assert again == confirmed  # the same request again
    with pytest.raises(IllegalTransition, match="confirmed already"):
        manager.confirm(record.id, "alice", "c2", receipt=A_RECEIPT)  # a new request


def test_only_the_owner_confirms_or_cancels(manager: ReservationManager) -> None:
    record = accepted(manager)
    with pytest.raises(NotOwner, match="only its owner"):
        manager.confirm(record.id, "mallory", "c1", receipt=A_RECEIPT)
    with pytest.raises(NotOwner):
        manager.cancel(record.id, "mallory", "c2")
    assert manager.store.get_reservation(record.id) == record
    assert manager.store.idempotency("mallory", "c1") is None


def test_confirm_after_the_deadline_is_refused(
    manager: ReservationManager, clock: FakeClock
) -> None:
    record = accepted(manager)
    clock.advance(TIMEOUT)
    with pytest.raises(IllegalTransition, match="not confirmed by its deadline"):
        manager.confirm(record.id, "alice", "c1", receipt=A_RECEIPT)
    assert manager.store.get_reservation(record.id) == record


def test_a_window_that_ended_unconfirmed_cannot_be_confirmed(
    manager: ReservationManager, clock: FakeClock
) -> None:
    record = manager.accept(offer(manager, start=T0 + 10, duration=20).id, "alice", "k1")
    clock.advance(30)  # the window is over, the deadline (120 s) is not
    with pytest.raises(IllegalTransition, match="window ended"):
        manager.confirm(record.id, "alice", "c1", receipt=A_RECEIPT)
    assert manager.store.get_reservation(record.id) == record  # not LOST: it simply ended


def test_unknown_reservation(manager: ReservationManager) -> None:
    with pytest.raises(UnknownReservation):
        manager.confirm("nope", "alice", "c1", receipt=A_RECEIPT)


def test_confirming_a_vanished_reservation_marks_it_lost(manager: ReservationManager) -> None:
    record = accepted(manager)
    manager.backend.delete_reservation(record.name)  # an administrator's scontrol delete
    with pytest.raises(IllegalTransition, match="no longer exists"):
        manager.confirm(record.id, "alice", "c1", receipt=A_RECEIPT)
    assert manager.store.get_reservation(record.id).state is S.LOST  # type: ignore[union-attr]
    assert manager.lost_total == 1


@pytest.mark.parametrize("operation", ["confirm", "cancel"])
def test_concurrent_duplicates_of_one_request_give_one_answer(
    manager: ReservationManager, operation: str
) -> None:
    record = accepted(manager)
    requests = {
        "confirm": lambda *args: manager.confirm(*args, receipt=A_RECEIPT),
        "cancel": manager.cancel,
    }
    request = requests[operation]
    answers: List[object] = []
    barrier = threading.Barrier(8)

    def send() -> None:
        barrier.wait()
        try:
            answers.append(request(record.id, "alice", "same-key"))
        except Exception as exc:  # collected: every duplicate must get the same answer
            answers.append(exc)

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({repr(a) for a in answers}) == 1, answers
    assert isinstance(answers[0], ReservationRecord)
    assert len(manager.store.history(record.id)) == 3


# --------------------------------------------------------------------------- cancel


def test_cancel_while_tentative_is_free(manager: ReservationManager) -> None:
    record = accepted(manager, fee="10")
    cancelled = manager.cancel(record.id, "alice", "x1")
    assert cancelled.state is S.CANCELLED and cancelled.penalty == Decimal("0.00")
    assert held(manager) == {}
    assert manager.cancel(record.id, "alice", "x1") == cancelled


def test_cancel_once_confirmed_costs_p_times_the_fee(manager: ReservationManager) -> None:
    record = accepted(manager, fee="12.34")
    manager.confirm(record.id, "alice", "c1", receipt=A_RECEIPT)
    cancelled = manager.cancel(record.id, "alice", "x1")
    assert cancelled.penalty == (DEFAULT_PENALTY_FACTOR * Decimal("12.34")).quantize(
        Decimal("0.01")
    )
    assert cancelled.penalty == Decimal("1.23")
    assert states(manager, record.id)[-1] == (S.CONFIRMED, S.CANCELLED)
    assert held(manager) == {}


def test_the_penalty_factor_is_fixed_when_the_deal_is_made(
    manager: ReservationManager,
) -> None:
    record = accepted(manager, fee="10")
    manager.confirm(record.id, "alice", "c1", receipt=A_RECEIPT)
    manager.penalty_factor = Decimal("1")  # the site changes its terms afterwards
    assert manager.cancel(record.id, "alice", "x1").penalty == Decimal("1.00")


def test_a_failed_deletion_on_cancel_is_retried_by_reconciliation(
    manager: ReservationManager, backend: FaultyBackend
) -> None:
    record = accepted(manager)
    delete = backend.inner.delete_reservation

    def broken(name: str) -> None:
        raise BackendUnavailable("controller down (test)")

    backend.inner.delete_reservation = broken  # type: ignore[method-assign,assignment]
    assert manager.cancel(record.id, "alice", "x1").state is S.CANCELLED
    assert record.name in held(manager)
    backend.inner.delete_reservation = delete  # type: ignore[method-assign]
    assert manager.reconciler.reconcile().orphans_deleted == [record.name]
    assert held(manager) == {}


# --------------------------------------------------------------------------- time


def test_expiry_deletes_unconfirmed_reservations_at_their_deadline(
    manager: ReservationManager, clock: FakeClock
) -> None:
    record = accepted(manager)
    clock.advance(TIMEOUT - 1)
    assert manager.expire_due() == []
    clock.advance(1)
    [expired] = manager.expire_due()
    assert expired.state is S.EXPIRED and expired.deadline == record.deadline
    assert states(manager, record.id)[-1] == (S.TENTATIVE, S.EXPIRED)
    assert held(manager) == {}
    with pytest.raises(IllegalTransition, match="not confirmed by its deadline"):
        manager.confirm(record.id, "alice", "c1", receipt=A_RECEIPT)


def test_confirmed_reservations_start_and_end_with_time(
    manager: ReservationManager, clock: FakeClock
) -> None:
    record = accepted(manager)
    manager.confirm(record.id, "alice", "c1", receipt=A_RECEIPT)
    assert manager.advance() == []
    clock.advance(600)
    [active] = manager.advance()
    assert active.state is S.ACTIVE
    clock.advance(3600)
    [completed] = manager.advance()
    assert completed.state is S.COMPLETED
    assert [s for _, s in states(manager, record.id)] == [
        S.REQUESTED,
        S.TENTATIVE,
        S.CONFIRMED,
        S.ACTIVE,
        S.COMPLETED,
    ]
    assert manager.reconciler.reconcile().lost == []  # ended and gone: not lost


def test_advance_skips_states_it_does_not_own(
    manager: ReservationManager, clock: FakeClock
) -> None:
    record = accepted(manager)
    clock.advance(600 + 3600)  # window over, never confirmed
    assert manager.advance() == []
    assert manager.store.get_reservation(record.id).state is S.TENTATIVE  # type: ignore[union-attr]


# --------------------------------------------------------------------------- notices


def confirmed(manager: ReservationManager) -> ReservationRecord:
    record = accepted(manager)
    return manager.confirm(record.id, "alice", "c1", receipt=A_RECEIPT)


def test_a_start_notice_activates_a_confirmed_reservation_at_once(
    manager: ReservationManager, clock: FakeClock
) -> None:
    record = confirmed(manager)
    clock.advance(600 - NOTICE_SKEW_S)  # the controller's clock is a little ahead
    assert manager.started(record.name).state is S.ACTIVE
    [step] = manager.store.history(record.id)[-1:]
    assert (step.to_state, step.reason) == (S.ACTIVE, "the batch system: its window started")
    assert manager.started(record.name).state is S.ACTIVE  # told twice: no second move
    assert [s for _, s in states(manager, record.id)][-2:] == [S.CONFIRMED, S.ACTIVE]


def test_an_end_notice_completes_a_reservation_whose_start_was_missed(
    manager: ReservationManager, clock: FakeClock
) -> None:
    record = confirmed(manager)
    clock.advance(600 + 3600)
    assert manager.ended(record.name).state is S.COMPLETED
    assert [s for _, s in states(manager, record.id)][-2:] == [S.ACTIVE, S.COMPLETED]


def test_a_notice_before_its_window_moves_nothing(
    manager: ReservationManager, clock: FakeClock
) -> None:
    record = confirmed(manager)
    before = manager.store.history(record.id)
    with pytest.raises(IllegalTransition, match="starts at"):
        manager.started(record.name)
    clock.advance(600)
    manager.started(record.name)
    with pytest.raises(IllegalTransition, match="found LOST by the next poll"):
        manager.ended(record.name)  # deleted early: not completed
    assert manager.store.get_reservation(record.id).state is S.ACTIVE  # type: ignore[union-attr]
    assert len(manager.store.history(record.id)) == len(before) + 1


def test_a_tentative_reservation_stays_tentative_when_its_window_starts(
    manager: ReservationManager, clock: FakeClock
) -> None:
    record = accepted(manager)
    clock.advance(600)
    assert manager.started(record.name).state is S.TENTATIVE


@pytest.mark.parametrize("name", ["sa-000000000000", "maintenance", "other-sa-x"])
def test_a_notice_for_a_reservation_not_the_agents_is_refused(
    manager: ReservationManager, name: str
) -> None:
    accepted(manager)
    with pytest.raises(UnknownReservation):
        manager.started(name)
    with pytest.raises(UnknownReservation):
        manager.ended(name)


# --------------------------------------------------------------------------- reconcile


def test_reconcile_deletes_prefixed_leftovers_and_nothing_else(
    manager: ReservationManager,
) -> None:
    replay = manager.backend
    replay.create_reservation(ReservationSpec("sa-leftover", T0 + 600, 60, 1))
    replay.create_reservation(ReservationSpec("maintenance", T0 + 600, 60, 1))
    record = accepted(manager)
    result = manager.reconciler.reconcile()
    assert result.orphans_deleted == ["sa-leftover"]
    assert set(held(manager)) == {"maintenance", record.name}


@pytest.mark.parametrize("state", [S.TENTATIVE, S.CONFIRMED, S.ACTIVE])
def test_reconcile_marks_vanished_live_reservations_lost(
    manager: ReservationManager, clock: FakeClock, state: S
) -> None:
    record = accepted(manager)
    if state is not S.TENTATIVE:
        manager.confirm(record.id, "alice", "c1", receipt=A_RECEIPT)
    if state is S.ACTIVE:
        clock.advance(600)
        manager.advance()
    manager.backend.delete_reservation(record.name)
    result = manager.reconciler.reconcile()
    assert result.lost == [record.id]
    lost = manager.store.get_reservation(record.id)
    assert lost is not None and lost.state is S.LOST and "vanished" in lost.message
    assert states(manager, record.id)[-1] == (state, S.LOST)
    assert manager.lost_total == 1
    assert manager.reconciler.reconcile().lost == []  # reported once


def _crash_after_create(manager: ReservationManager, backend: FaultyBackend) -> Offer:
    """An accept whose process died between creating the reservation and answering."""
    backend.lose_answer = True
    bid = offer(manager)
    with pytest.raises(BackendUnavailable):
        manager.accept(bid.id, "alice", "k1")
    backend.lose_answer = False
    return bid


def test_reconcile_recovers_a_verified_intent_with_a_fresh_deadline(
    manager: ReservationManager, backend: FaultyBackend, clock: FakeClock
) -> None:
    bid = _crash_after_create(manager, backend)
    clock.advance(30)
    result = manager.reconciler.reconcile()
    [record] = manager.store.reservations()
    assert result.recovered == [record.id]
    assert record.state is S.TENTATIVE and record.deadline == T0 + 30 + TIMEOUT
    assert manager.accept(bid.id, "alice", "k1") == record  # the retry finds its answer


def test_reconcile_fails_an_intent_that_never_reached_the_batch_system(
    manager: ReservationManager, backend: FaultyBackend
) -> None:
    bid = _crash_after_create(manager, backend)
    [record] = manager.store.reservations()
    backend.inner.delete_reservation(record.name)  # as if the create had never happened
    result = manager.reconciler.reconcile()
    assert result.failed == [record.id]
    with pytest.raises(ReservationFailed, match="interrupted"):
        manager.accept(bid.id, "alice", "k1")


def test_reconcile_fails_and_deletes_a_short_intent(
    manager: ReservationManager, backend: FaultyBackend
) -> None:
    backend.shrink = 2
    _crash_after_create(manager, backend)
    [record] = manager.store.reservations()
    assert manager.reconciler.reconcile().failed == [record.id]
    assert held(manager) == {}
    failed = manager.store.get_reservation(record.id)
    assert failed is not None and "holds 2 cores, not 4" in failed.message


def test_housekeeping_reports_one_readable_line(
    manager: ReservationManager, clock: FakeClock
) -> None:
    keep = accepted(manager, key="a")
    manager.confirm(keep.id, "alice", "c", receipt=A_RECEIPT)
    accepted(manager, key="b")
    clock.advance(TIMEOUT)
    line = manager.reconciler.housekeeping().describe()
    assert line == "reservations: 0 tentative, 1 confirmed, 0 active; this cycle: 1 expired"
    assert violations(manager.backend, manager.store, "sa-", 0, clock, [keep.id]) == []


# --------------------------------------------------------------------------- illegal moves


def test_every_move_outside_the_table_is_illegal() -> None:
    for src in S:
        for dst in S:
            moved = _record_in(src)
            if dst in TRANSITIONS[src]:
                check_transition(moved, dst)
            else:
                with pytest.raises(IllegalTransition, match=f"is {src.value} and cannot"):
                    check_transition(moved, dst)
    assert {S.TENTATIVE, S.CONFIRMED, S.ACTIVE} == LIVE


def _record_in(state: S) -> ReservationRecord:
    return ReservationRecord(
        id="r",
        name="sa-r",
        offer_id="o",
        client="c",
        accept_key="k",
        state=state,
        start=0,
        end=1,
        size=1,
        unit=CapacityUnit.CORE,
        users=(),
        accounts=(),
        unit_price=Decimal(1),
        fee=Decimal(0),
        total=Decimal(0),
        penalty_factor=Decimal(0),
        created=0.0,
        updated=0.0,
    )


def _drive_to(state: S, manager: ReservationManager, clock: FakeClock) -> ReservationRecord:
    """A reservation in ``state``, reached the way it is reached in service."""
    backend = manager.backend
    assert isinstance(backend, FaultyBackend)
    if state is S.REQUESTED:
        backend.lose_answer = True
        with pytest.raises(BackendUnavailable):
            accepted(manager)
        backend.lose_answer = False
    elif state is S.FAILED:
        backend.refuse = "busy"
        with pytest.raises(ReservationFailed):
            accepted(manager)
        backend.refuse = None
    else:
        record = accepted(manager)
        if state in (S.CONFIRMED, S.ACTIVE, S.COMPLETED):
            manager.confirm(record.id, "alice", "c0", receipt=A_RECEIPT)
        if state in (S.ACTIVE, S.COMPLETED):
            clock.advance(600 if state is S.ACTIVE else 4200)
            manager.advance()
        if state is S.EXPIRED:
            clock.advance(TIMEOUT)
            manager.expire_due()
        if state is S.CANCELLED:
            manager.cancel(record.id, "alice", "x0")
        if state is S.LOST:
            backend.delete_reservation(record.name)
            manager.reconciler.reconcile()
    [record] = manager.store.reservations()
    assert record.state is state
    return record


@pytest.mark.parametrize("state", list(S))
def test_illegal_requests_raise_and_change_nothing(
    manager: ReservationManager, clock: FakeClock, state: S
) -> None:
    record = _drive_to(state, manager, clock)
    history = manager.store.history(record.id)
    before = held(manager)
    requests = {
        S.CONFIRMED: lambda: manager.confirm(record.id, "alice", "new-1", receipt=A_RECEIPT),
        S.CANCELLED: lambda: manager.cancel(record.id, "alice", "new-2"),
    }
    for target, request in requests.items():
        if target in TRANSITIONS[state]:
            continue
        with pytest.raises(IllegalTransition, match=f"is {state.value} and cannot") as error:
            request()
        assert record.id in str(error.value)
        assert manager.store.get_reservation(record.id) == record
        assert manager.store.history(record.id) == history
        assert held(manager) == before
    assert manager.store.idempotency("alice", "new-1") is None
    assert manager.store.idempotency("alice", "new-2") is None


def test_manager_settings_are_checked(backend: FaultyBackend) -> None:
    store = Store(":memory:")
    with pytest.raises(ValueError, match="prefix"):
        ReservationManager(store, backend, name_prefix="")
    with pytest.raises(ValueError, match="prefix"):
        ReservationManager(store, backend, name_prefix="sa-\n")
    with pytest.raises(ValueError, match="confirm timeout"):
        ReservationManager(store, backend, confirm_timeout=0)
    with pytest.raises(ValueError, match="penalty factor"):
        ReservationManager(store, backend, penalty_factor=Decimal("-1"))
