"""The state database: migrations, round trips, compare-and-set, and sharing between threads
and processes (including one killed in the middle of writing)."""

from __future__ import annotations

import dataclasses
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import List

import pytest

from siteagent.core.waits import QueueWait
from siteagent.market import migrations as migrations_module
from siteagent.market.lifecycle import ReservationRecord, ReservationState
from siteagent.market.migrations import SCHEMA_VERSION
from siteagent.market.store import RECEIPT, REFUND, Remember, StaleState, Store, StoreError
from testbed.inprocess.offers import an_offer
from testbed.inprocess.records import a_record, requested
from testbed.inprocess.syncs import commit_levels

S = ReservationState
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def db(tmp_path: Path) -> Store:
    return Store(str(tmp_path / "state" / "siteagent.sqlite3"))


# --------------------------------------------------------------------------- schema


def test_a_new_store_is_migrated_and_in_wal_mode(db: Store) -> None:
    assert db.schema_version == SCHEMA_VERSION
    raw = sqlite3.connect(db.path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"offers", "reservations", "transitions", "idempotency", "queue_waits"} <= tables


def test_reopening_keeps_everything(db: Store) -> None:
    record = requested(db)
    db.close()
    again = Store(db.path)
    assert again.get_reservation(record.id) == record
    assert again.schema_version == SCHEMA_VERSION


def test_a_store_from_a_newer_siteagent_is_refused(db: Store) -> None:
    db.close()
    raw = sqlite3.connect(db.path)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(StoreError, match="newer siteagent"):
        Store(db.path)


def test_a_failing_migration_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE half_done (x)")
        raise sqlite3.OperationalError("disk full (test)")

    path = str(tmp_path / "s.sqlite3")
    monkeypatch.setattr(migrations_module, "MIGRATIONS", (*migrations_module.MIGRATIONS, broken))
    monkeypatch.setattr(migrations_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises(StoreError, match="disk full"):
        Store(path)
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 0
    assert raw.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall() == []


def test_migrations_run_from_the_stored_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "s.sqlite3")
    Store(path).close()
    ran: List[int] = []
    monkeypatch.setattr(
        migrations_module, "MIGRATIONS", (*migrations_module.MIGRATIONS, lambda db: ran.append(2))
    )
    monkeypatch.setattr(migrations_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    assert Store(path).schema_version == SCHEMA_VERSION + 1
    assert Store(path).schema_version == SCHEMA_VERSION + 1
    assert ran == [2]


def test_reservations_written_before_their_nodes_read_back_without_them(db: Store) -> None:
    """Migration 8 (the nodes a reservation is on) comes after the usage tables (6) and the
    bids (7): a version-7 database gains the column, and its reservations have no nodes."""
    record = requested(db)
    db.close()
    raw = sqlite3.connect(db.path)
    raw.execute("ALTER TABLE reservations DROP COLUMN allocation")
    raw.execute("DROP INDEX bids_by_client_state")  # migration 9's
    raw.execute("DROP TABLE accept_batches")  # migration 10's
    raw.execute("PRAGMA user_version = 7")
    raw.commit()
    raw.close()
    assert SCHEMA_VERSION == 10  # 8, the index of 9, the batch accepts of 10
    again = Store(db.path)
    assert again.schema_version == SCHEMA_VERSION
    assert again.get_reservation(record.id) == dataclasses.replace(record, allocation=())
    assert again.bid_holds() == []  # the bids' table of version 7 is still there


# --------------------------------------------------------------------------- round trips


def test_offers_round_trip_with_exact_money(db: Store) -> None:
    offer = an_offer()
    db.add_offer(offer, 5.0)
    assert db.get_offer("o1") == offer
    assert db.get_offer("nope") is None
    with pytest.raises(ValueError, match="exists already"):
        db.add_offer(offer, 6.0)


def test_the_offers_of_one_quote_are_stored_together_or_not_at_all(db: Store) -> None:
    db.add_offers([an_offer("o1"), an_offer("o2")], 5.0)
    assert db.get_offer("o1") is not None and db.get_offer("o2") is not None
    with pytest.raises(ValueError, match="exists already"):
        db.add_offers([an_offer("o3"), an_offer("o1")], 6.0)
    assert db.get_offer("o3") is None


def test_expired_offers_nobody_accepted_are_pruned_in_batches(db: Store) -> None:
    """Offers expiring at 2000: those never accepted go once the cut-off passes 2000; an
    accepted one stays (its reservation refers to it), as do offers still valid."""
    db.add_offers([an_offer(f"o{i}") for i in range(7)], 5.0)
    db.add_offers([dataclasses.replace(an_offer("late"), expires=5000)], 5.0)
    accepted = a_record("r1", "o3")
    db.add_reservation(accepted, "alice", "accepted", Remember("alice", accepted.accept_key, "a"))
    assert db.prune_offers(expired_before=2000) == 0  # expired at 2000, not before it
    assert db.prune_offers(expired_before=2001, batch=2) == 6
    assert db.get_offer("o3") is not None and db.get_offer("late") is not None
    assert [db.get_offer(f"o{i}") for i in (0, 1, 2, 4, 5, 6)] == [None] * 6
    assert db.prune_offers(expired_before=2001) == 0


def test_records_round_trip_through_their_json_form(db: Store) -> None:
    record = requested(db)
    assert ReservationRecord.from_dict(record.to_dict()) == record
    assert record.to_dict()["fee"] == "0.333"


def test_transition_moves_and_writes_history(db: Store) -> None:
    record = requested(db)
    moved = db.transition(record.id, S.REQUESTED, S.TENTATIVE, 20.0, "agent", "made", deadline=140)
    assert moved.state is S.TENTATIVE and moved.deadline == 140 and moved.updated == 20.0
    confirmed = db.transition(record.id, S.TENTATIVE, S.CONFIRMED, 30.0, "alice", "yes")
    assert confirmed.deadline == 140  # kept as history
    steps = [(t.from_state, t.to_state, t.actor, t.reason) for t in db.history(record.id)]
    assert steps == [
        (None, S.REQUESTED, "alice", "accepted"),
        (S.REQUESTED, S.TENTATIVE, "agent", "made"),
        (S.TENTATIVE, S.CONFIRMED, "alice", "yes"),
    ]


def test_a_stale_transition_changes_nothing(db: Store) -> None:
    record = requested(db)
    with pytest.raises(StaleState) as stale:
        db.transition(
            record.id,
            S.TENTATIVE,
            S.CONFIRMED,
            20.0,
            "alice",
            "x",
            remember=Remember("alice", "k9", "confirm"),
        )
    assert stale.value.current == record
    assert len(db.history(record.id)) == 1
    assert db.idempotency("alice", "k9") is None


def test_the_deadline_condition_is_part_of_the_compare_and_set(db: Store) -> None:
    record = requested(db)
    db.transition(record.id, S.REQUESTED, S.TENTATIVE, 20.0, "agent", "made", deadline=140)
    with pytest.raises(StaleState):
        db.transition(
            record.id, S.TENTATIVE, S.CONFIRMED, 140.0, "a", "late", unconfirmed_before=140.0
        )
    assert db.due_for_expiry(139.9) == []
    assert [r.id for r in db.due_for_expiry(140.0)] == [record.id]
    db.transition(record.id, S.TENTATIVE, S.CONFIRMED, 139.0, "a", "ok", unconfirmed_before=139.0)


def test_the_answer_is_stored_with_the_effect(db: Store) -> None:
    record = requested(db)
    pending = db.idempotency("alice", record.accept_key)
    assert pending is not None and pending.operation == "a" and pending.answer is None
    moved = db.transition(
        record.id,
        S.REQUESTED,
        S.TENTATIVE,
        20.0,
        "agent",
        "made",
        deadline=140,
        remember=Remember("alice", record.accept_key, "a"),
    )
    entry = db.idempotency("alice", record.accept_key)
    assert entry is not None and entry.answer == moved


def test_queries_by_state_and_counts(db: Store) -> None:
    first, second = requested(db, "r1"), requested(db, "r2")
    db.transition(first.id, S.REQUESTED, S.FAILED, 20.0, "agent", "no", message="busy")
    assert [r.id for r in db.reservations([S.REQUESTED])] == [second.id]
    assert [r.id for r in db.reservations()] == [first.id, second.id]
    assert db.reservation_for_offer(second.offer_id) == second
    assert db.count_by_state() == {S.FAILED: 1, S.REQUESTED: 1}
    assert db.get_reservation(first.id).message == "busy"  # type: ignore[union-attr]


def test_queue_waits_are_kept_once(db: Store) -> None:
    waits = [QueueWait("1", 4, 3600, 100, 160), QueueWait("2", 8, 60, 100, 400)]
    assert db.record_waits(waits) == 2
    assert db.record_waits(waits[:1]) == 0
    assert db.queue_waits() == waits
    assert db.queue_waits(since=200) == waits[1:]
    assert waits[1].wait == 300


def test_a_confirm_keeps_its_receipt_and_owes_it_in_the_same_write(db: Store) -> None:
    """CONFIRMED, the receipt and the booking owed are one transaction: a failed move keeps
    neither, and the first receipt kept is the one that stays."""
    requested(db, "r1")
    assert db.receipt("r1") is None
    first = {"id": "abc", "confirmed_at": 10}
    with pytest.raises(StaleState):  # it is REQUESTED, not TENTATIVE: nothing is written
        db.transition("r1", S.TENTATIVE, S.CONFIRMED, 5, "alice", "x", receipt=first)
    assert db.receipt("r1") is None and db.booking("r1", RECEIPT) is None
    db.transition("r1", S.REQUESTED, S.TENTATIVE, 5, "agent", "made", deadline=100)
    db.transition(
        "r1", S.TENTATIVE, S.CONFIRMED, 6, "alice", "ok", receipt=first, owed=(RECEIPT, first)
    )
    assert db.receipt("r1") == first and db.booking("r1", RECEIPT) == first
    assert db.bookings_owed() == [("r1", RECEIPT, first)]
    db.transition(
        "r1",
        S.CONFIRMED,
        S.CANCELLED,
        7,
        "alice",
        "x",
        receipt={"id": "other"},
        owed=(REFUND, {"refund": 1}),
    )
    assert db.receipt("r1") == first  # the site signs a deal once
    assert [kind for _, kind, _ in db.bookings_owed()] == [RECEIPT, REFUND]


def test_a_confirm_syncs_its_receipt_owed_and_its_move_but_not_the_booking_mark(
    db: Store,
) -> None:
    """The receipt is owed on disk before the bank is asked, and CONFIRMED before the buyer
    hears of it; the mark that the ledger booked it is not synced on its own: the move syncs
    it along, and a mark a power loss takes leaves the booking owed, to be booked again (the
    ledger answers it with its transaction)."""
    requested(db, "r1")
    db.transition("r1", S.REQUESTED, S.TENTATIVE, 5, "agent", "made", deadline=100)
    levels = commit_levels(db._db)
    receipt = {"id": "abc"}
    db.owe("r1", RECEIPT, receipt)
    db.mark_booked("r1", RECEIPT, 6)
    db.transition(
        "r1", S.TENTATIVE, S.CONFIRMED, 6, "alice", "ok", receipt=receipt, owed=(RECEIPT, receipt)
    )
    assert levels == ["FULL", "NORMAL", "FULL"]
    assert db.bookings_owed() == []


# --------------------------------------------------------------------------- sharing


def test_threads_share_one_store(db: Store) -> None:
    def write(worker: int) -> None:
        for i in range(40):
            db.record_waits([QueueWait(f"{worker}-{i}", 1, 1, 0, i)])
            db.count_by_state()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(db.queue_waits()) == 8 * 40


WRITER = textwrap.dedent(
    """
    import sys
    from siteagent.core.waits import QueueWait
    from siteagent.market.store import Store
    db = Store(sys.argv[1])
    batch = 0
    print("ready", flush=True)
    while True:
        db.record_waits(QueueWait(f"{batch}-{i}", 1, 1, 0, batch) for i in range(10))
        batch += 1
    """
)


def test_a_process_killed_while_writing_leaves_whole_transactions(db: Store) -> None:
    for _ in range(3):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, db.path], cwd=REPO, stdout=subprocess.PIPE, text=True
        )
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
        time.sleep(0.3)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        db.record_waits([QueueWait("reader", 1, 1, 0, 0)])  # the survivor still writes
    count = len(db.queue_waits()) - 1
    assert count > 0 and count % 10 == 0
    assert sqlite3.connect(db.path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


HOLDER = textwrap.dedent(
    """
    import sys, time
    from siteagent.market.store import Store
    db = Store(sys.argv[1])
    with db.exclusive():
        print("inside", flush=True)
        time.sleep(0.5)
    """
)


def test_exclusive_excludes_other_processes(db: Store) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, db.path], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "inside\n"
    began = time.monotonic()
    with db.exclusive():
        waited = time.monotonic() - began
    holder.wait()
    assert waited > 0.3


def test_exclusive_is_released_when_its_holder_is_killed(db: Store) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER.replace("0.5", "60"), db.path],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "inside\n"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    began = time.monotonic()
    with db.exclusive():
        assert time.monotonic() - began < 5
