"""The agent's memory in one SQLite file: reservations and their history, offers, bids,
idempotency keys, queue waits, and the jobs that ran in each reservation.

Invariant: every write is one short transaction (WAL, ``synchronous=FULL``), so a crash leaves
the store as it was before or after a write; :meth:`Store.transition` is compare-and-set, so
concurrent moves need no lock across batch-system calls. It knows what is stored, not which
moves are legal (lifecycle.py); the schema is migrations.py. docs/lifecycle.md §5.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import threading
from dataclasses import dataclass, field
from decimal import Decimal
from typing import (
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
)

from siteagent.core import transactions
from siteagent.core.errors import SiteagentError
from siteagent.core.files import make_database_private, make_private
from siteagent.core.usage import JobUsage, UsageSource
from siteagent.core.values import CapacityUnit, Offer, Request
from siteagent.core.waits import QueueWait
from siteagent.market import migrations
from siteagent.market.lifecycle import (
    BIDDING,
    BidRecord,
    BidState,
    ReservationRecord,
    ReservationState,
    Transition,
)
from siteagent.protocol import documents
from siteagent.protocol.errors import STALE_STATE, STORE_UNAVAILABLE

#: Seconds a writer waits for another process's transaction before giving up.
BUSY_TIMEOUT_S = 30.0

#: What the site owes its ledger, by kind: the receipt of a deal (kept before the bank books
#: it, see bookkeeping.py), the refund of a cancelled one (or the void of one never confirmed).
RECEIPT = "receipt"
REFUND = "refund"

#: The bookings the agent's loop books: refunds, and the receipts of reservations that became
#: confirmed (a receipt kept for a confirm that has not moved the reservation yet is the
#: confirm's own to book, or to void).
_OWED = (
    "booked_at IS NULL AND (kind = 'refund' OR EXISTS "
    "(SELECT 1 FROM receipts WHERE receipts.reservation_id = ledger_bookings.reservation_id))"
)


class StoreError(SiteagentError):
    """The state database cannot be read or written; the message says which file and why."""

    code = STORE_UNAVAILABLE


class StaleState(SiteagentError):
    """A compare-and-set transition found the record in another state than expected.

    Somebody else (another thread, the reaper, another process) changed it first; ``current``
    is the record as it is now, so the caller can say what happened. Callers catch it: it
    never reaches a client.
    """

    code = STALE_STATE

    def __init__(self, current: ReservationRecord) -> None:
        super().__init__(f"reservation {current.id} is {current.state.value} now")
        self.current = current


@dataclass(frozen=True)
class BidFigures:
    """The bids as the metrics show them: auctions the site takes part in now, auctions it
    ever bid in and won, and the units its open bids hold."""

    open_auctions: int
    made: int
    won: int
    held_units: int


@dataclass(frozen=True)
class Remember:
    """An idempotency key to answer with the record a write produces: (client, key, operation)."""

    client: str
    key: str
    operation: str


@dataclass(frozen=True)
class AcceptBatch:
    """A batch accept as journaled: its client, key and offers, ``open`` (in progress, or
    interrupted), ``held`` or ``released``, and its answer (reservation ids, or an error's
    code, message and field), None while open."""

    client: str
    key: str
    offer_ids: Tuple[str, ...]
    state: str
    answer: Optional[Dict[str, Any]]


@dataclass(frozen=True)
class IdempotencyEntry:
    """What a (client, key) was used for, and the answer given (None while in progress)."""

    operation: str
    answer: Optional[ReservationRecord]


#: The columns of a reservation's job, in :class:`JobUsage`'s order.
_JOB_COLUMNS = "job_id, user, cores, nodes, start_time, end_time"


@dataclass
class UsageTotals:
    """What the reservations with final figures sold and their jobs used, by unit (in unit
    seconds), the core-seconds used, how many there are and how many no job ever used."""

    sold_unit_seconds: Dict[CapacityUnit, int] = field(default_factory=dict)
    used_unit_seconds: Dict[CapacityUnit, int] = field(default_factory=dict)
    core_seconds: int = 0
    reservations: int = 0
    empty: int = 0


def _batch(row: Tuple[Any, ...]) -> AcceptBatch:
    client, key, offer_ids, state, answer = row
    answered = None if answer is None else json.loads(answer)
    return AcceptBatch(client, key, tuple(json.loads(offer_ids)), state, answered)


_RESERVATION_COLUMNS = (
    "id, name, offer_id, client, accept_key, state, start_time, end_time, size, unit, users, "
    "accounts, unit_price, fee, total, penalty_factor, penalty, deadline, message, created, "
    "updated, allocation"
)


class Store:
    """The SQLite state database of one agent, safe to share between threads and processes.

    ``path`` is a file (created with its directory if missing, and it, its lock and SQLite's
    files beside it kept private: mode 0600) or ``":memory:"`` for tests.
    One connection serves all threads, each call holding a lock, because SQLite serialises
    writers anyway and one connection keeps the WAL readers cheap. Other processes (the admin
    commands) open their own Store on the same file.
    """

    def __init__(self, path: str, busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._exclusive_lock = threading.Lock()
        self._lock_fd: Optional[int] = None
        #: What open bids hold, as last read (None: read it again), for quotes on the event
        #: loop: refreshed by this store's own writes to the bids.
        self._open_holds: Optional[Tuple[Tuple[int, int, int], ...]] = None
        try:
            if path != ":memory:":
                make_private(os.path.dirname(os.path.abspath(path)), directory=True)
                make_database_private(path)
                make_private(path + ".lock")
                self._lock_fd = os.open(path + ".lock", os.O_RDWR)
            self._db = sqlite3.connect(
                path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the state database {path}: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            self._db.close()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    # ---- plumbing

    @contextlib.contextmanager
    def _write(self, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (BEGIN IMMEDIATE) so it never deadlocks, and
        synced to disk unless not ``durable`` (:mod:`siteagent.core.transactions`)."""
        with transactions.immediate(
            self._db,
            self._lock,
            lambda exc: StoreError(f"state database {self.path}: {exc}"),
            durable,
        ) as db:
            yield db

    def _read(self, sql: str, params: Sequence[Any] = ()) -> List[Tuple[Any, ...]]:
        with self._lock:
            try:
                return list(self._db.execute(sql, params).fetchall())
            except sqlite3.Error as exc:
                raise StoreError(f"state database {self.path}: {exc}") from exc

    def _migrate(self) -> None:
        with self._write() as db:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version > migrations.SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} was written by a newer siteagent (schema {version}, this one "
                    f"knows up to {migrations.SCHEMA_VERSION}): upgrade siteagent or use another "
                    "state directory"
                )
            for migrate in migrations.MIGRATIONS[version:]:
                migrate(db)
            db.execute(f"PRAGMA user_version = {migrations.SCHEMA_VERSION}")

    @property
    def schema_version(self) -> int:
        return int(self._read("PRAGMA user_version")[0][0])

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """A critical section shared by every thread and process using this store's file.

        The reservation manager holds it around "re-check the plan, create the reservation"
        and around reconciliation, so that no two accepts can both pass the re-check for the
        same capacity, and reconciliation never mistakes an accept in flight for a leak. It
        is an ``flock`` on ``<path>.lock``: the kernel releases it when a process dies.
        """
        with self._exclusive_lock:
            if self._lock_fd is None:
                yield
                return
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    # ---- offers

    def add_offer(self, offer: Offer, at: float) -> None:
        """Remember an offer issued to a client; ids are unique."""
        self.add_offers([offer], at)

    def add_offers(self, offers: Sequence[Offer], at: float) -> None:
        """Remember the offers of one quote in one transaction (one sync to disk, not one per
        offer: a quote answers with up to 100); ids are unique, and a clash stores none."""
        try:
            with self._write() as db:
                _insert_offers(db, offers, at)
        except StoreError as exc:
            if isinstance(exc.__cause__, sqlite3.IntegrityError):
                ids = ", ".join(repr(offer.id) for offer in offers)
                raise ValueError(f"an offer with one of the ids {ids} exists already") from None
            raise

    def get_offer(self, offer_id: str) -> Optional[Offer]:
        rows = self._read(
            "SELECT id, site, request, start_time, duration, size, unit_price, fee, expires, "
            "client FROM offers WHERE id = ?",
            (offer_id,),
        )
        if not rows:
            return None
        oid, site, request, start, duration, size, unit_price, fee, expires, client = rows[0]
        return Offer(
            id=oid,
            request=documents.request_from_document(json.loads(request)),
            start=start,
            duration=duration,
            size=size,
            unit_price=Decimal(unit_price),
            fee=Decimal(fee),
            expires=expires,
            site=site,
            client=client,
        )

    def withdraw_offers(self, client: str, offer_ids: Sequence[str], now: int) -> int:
        """The client gives up these live offers of its own, not accepted (docs/batches.md):
        they lapse now; how many did. Not synced on its own: an offer a power loss brings
        back lapses within minutes, and its buyer gave it up."""
        with self._write(durable=False) as db:
            count = 0
            for start in range(0, len(offer_ids), 500):
                chunk = list(offer_ids[start : start + 500])
                marks = ", ".join("?" * len(chunk))
                count += db.execute(
                    f"UPDATE offers SET expires = ? WHERE client = ? AND expires > ? "
                    f"AND id IN ({marks}) "
                    "AND NOT EXISTS (SELECT 1 FROM reservations WHERE offer_id = offers.id) "
                    "AND NOT EXISTS (SELECT 1 FROM bids WHERE offer_id = offers.id)",
                    (now, client, now, *chunk),
                ).rowcount
        return count

    def prune_offers(self, expired_before: int, batch: int = 5000) -> int:
        """Forget offers that expired before ``expired_before`` and were never accepted; how
        many. An agent answering quotes all day would otherwise keep every offer it ever
        made. Deleted in batches, each its own short transaction, so that quotes storing their
        offers meanwhile wait at most one batch."""
        pruned = 0
        while True:
            with self._write() as db:
                count = db.execute(
                    "DELETE FROM offers WHERE id IN (SELECT id FROM offers WHERE expires < ? "
                    "AND NOT EXISTS (SELECT 1 FROM reservations WHERE offer_id = offers.id) "
                    "AND NOT EXISTS (SELECT 1 FROM bids WHERE offer_id = offers.id) "
                    "LIMIT ?)",
                    (expired_before, batch),
                ).rowcount
            pruned += count
            if count < batch:
                return pruned

    # ---- reservations

    def add_reservation(
        self, record: ReservationRecord, actor: str, reason: str, remember: Remember
    ) -> None:
        """Write a new reservation (its first state), its first history line, and the
        idempotency key of the request that made it (answer pending), in one transaction. An
        open bid whose offer this is has won: from now on the reservation holds its capacity."""
        try:
            with self._write() as db:
                _insert_reservation(db, record)
                _insert_transition(db, record.id, record.created, actor, None, record.state, reason)
                won = db.execute(
                    "UPDATE bids SET state = ?, updated = ? WHERE offer_id = ? AND state = ?",
                    (BidState.WON.value, record.created, record.offer_id, BidState.OPEN.value),
                ).rowcount
                db.execute(
                    "INSERT INTO idempotency (client, key, operation, result, created) "
                    "VALUES (?,?,?,NULL,?)",
                    (remember.client, remember.key, remember.operation, record.created),
                )
            if won:
                self._refresh_holds()  # the reservation holds its capacity now
        except StoreError as exc:
            if isinstance(exc.__cause__, sqlite3.IntegrityError):
                raise ValueError(
                    f"reservation {record.id} (offer {record.offer_id}) or idempotency key "
                    f"{remember.key!r} exists already"
                ) from None
            raise

    def transition(
        self,
        reservation_id: str,
        expected: ReservationState,
        new: ReservationState,
        at: float,
        actor: str,
        reason: str,
        *,
        deadline: Optional[float] = None,
        unconfirmed_before: Optional[float] = None,
        penalty: Optional[Decimal] = None,
        message: Optional[str] = None,
        remember: Optional[Remember] = None,
        receipt: Optional[Mapping[str, Any]] = None,
        owed: Optional[Tuple[str, Mapping[str, Any]]] = None,
    ) -> ReservationRecord:
        """Move a reservation from ``expected`` to ``new`` if it is still ``expected``.

        Compare-and-set: raises :class:`StaleState` (changing nothing) if the record moved
        meanwhile. ``unconfirmed_before`` adds "and its confirm deadline is after this
        instant" to the condition, so a confirm and the reaper cannot both win. ``deadline``
        sets the confirm deadline (on becoming TENTATIVE). ``remember``
        stores the resulting record as the answer to that idempotency key, in the same
        transaction: the answer exists if and only if the effect does. ``receipt`` keeps the
        deal's receipt and ``owed`` (kind, document) a booking owed to the ledger, in the same
        transaction too: a reservation is CONFIRMED if and only if its receipt is kept and
        owed, and CANCELLED after a confirm if and only if its refund is owed, so no
        interleaving of confirm and cancel can book a charge without its refund.
        """
        with self._write() as db:
            condition = "id = ? AND state = ?"
            params: List[Any] = [reservation_id, expected.value]
            if unconfirmed_before is not None:
                condition += " AND deadline > ?"
                params.append(unconfirmed_before)
            sets = "state = ?, updated = ?"
            values: List[Any] = [new.value, at]
            if deadline is not None:
                sets += ", deadline = ?"
                values.append(deadline)
            if penalty is not None:
                sets += ", penalty = ?"
                values.append(str(penalty))
            if message is not None:
                sets += ", message = ?"
                values.append(message)
            changed = db.execute(
                f"UPDATE reservations SET {sets} WHERE {condition}", [*values, *params]
            ).rowcount
            current = _select_reservation(db, reservation_id)
            if current is None:
                raise KeyError(reservation_id)
            if not changed:
                raise StaleState(current)
            _insert_transition(db, reservation_id, at, actor, expected, new, reason)
            if receipt is not None:
                _keep_receipt(db, reservation_id, receipt)
            if owed is not None:
                _owe_booking(db, reservation_id, *owed)
            if remember is not None:
                db.execute(
                    "INSERT INTO idempotency (client, key, operation, result, created) "
                    "VALUES (?,?,?,?,?) ON CONFLICT (client, key) DO UPDATE SET "
                    "result = excluded.result",
                    (
                        remember.client,
                        remember.key,
                        remember.operation,
                        json.dumps(current.to_dict(), sort_keys=True),
                        at,
                    ),
                )
            return current

    def get_reservation(self, reservation_id: str) -> Optional[ReservationRecord]:
        rows = self._read(
            f"SELECT {_RESERVATION_COLUMNS} FROM reservations WHERE id = ?", (reservation_id,)
        )
        return _record(rows[0]) if rows else None

    # ---- batch accepts

    def open_batch(self, client: str, key: str, offer_ids: Sequence[str], at: float) -> None:
        """Journal a batch accept before its first part (see :func:`migrations._migrate_10`)."""
        with self._write() as db:
            db.execute(
                "INSERT INTO accept_batches (client, key, offer_ids, state, created) "
                "VALUES (?, ?, ?, 'open', ?)",
                (client, key, json.dumps(list(offer_ids)), at),
            )

    def close_batch(self, client: str, key: str, state: str, answer: Mapping[str, Any]) -> None:
        """A batch accept ended: ``held`` or ``released``, with its answer."""
        with self._write() as db:
            db.execute(
                "UPDATE accept_batches SET state = ?, answer = ? WHERE client = ? AND key = ?",
                (state, json.dumps(dict(answer)), client, key),
            )

    def accept_batch(self, client: str, key: str) -> Optional[AcceptBatch]:
        rows = self._read(
            "SELECT client, key, offer_ids, state, answer FROM accept_batches "
            "WHERE client = ? AND key = ?",
            (client, key),
        )
        return _batch(rows[0]) if rows else None

    def open_batches(self) -> List[AcceptBatch]:
        """Batch accepts not finished: in progress (under the exclusive lock) or interrupted."""
        rows = self._read(
            "SELECT client, key, offer_ids, state, answer FROM accept_batches "
            "WHERE state = 'open' ORDER BY created"
        )
        return [_batch(row) for row in rows]

    def reservation_for_offer(self, offer_id: str) -> Optional[ReservationRecord]:
        rows = self._read(
            f"SELECT {_RESERVATION_COLUMNS} FROM reservations WHERE offer_id = ?", (offer_id,)
        )
        return _record(rows[0]) if rows else None

    def reservation_by_name(self, name: str) -> Optional[ReservationRecord]:
        """The reservation called ``name`` in the batch system, if the agent made it."""
        rows = self._read(
            f"SELECT {_RESERVATION_COLUMNS} FROM reservations WHERE name = ?", (name,)
        )
        return _record(rows[0]) if rows else None

    def reservations(
        self, states: Optional[Iterable[ReservationState]] = None
    ) -> List[ReservationRecord]:
        """Reservations (in the given states, else all), oldest first."""
        sql = f"SELECT {_RESERVATION_COLUMNS} FROM reservations"
        params: List[str] = []
        if states is not None:
            params = [state.value for state in states]
            sql += f" WHERE state IN ({', '.join('?' for _ in params)})"
        rows = self._read(sql + " ORDER BY created, id", params)
        return [_record(row) for row in rows]

    def due_for_expiry(self, now: float) -> List[ReservationRecord]:
        """TENTATIVE reservations whose confirm deadline is ``now`` or earlier."""
        rows = self._read(
            f"SELECT {_RESERVATION_COLUMNS} FROM reservations "
            "WHERE state = ? AND deadline <= ? ORDER BY deadline",
            (ReservationState.TENTATIVE.value, now),
        )
        return [_record(row) for row in rows]

    def history(self, reservation_id: str) -> List[Transition]:
        rows = self._read(
            "SELECT reservation_id, at, actor, from_state, to_state, reason FROM transitions "
            "WHERE reservation_id = ? ORDER BY seq",
            (reservation_id,),
        )
        return [
            Transition(
                reservation_id=rid,
                at=at,
                actor=actor,
                from_state=None if src is None else ReservationState(src),
                to_state=ReservationState(dst),
                reason=reason,
            )
            for rid, at, actor, src, dst, reason in rows
        ]

    def count_by_state(self) -> Dict[ReservationState, int]:
        rows = self._read("SELECT state, COUNT(*) FROM reservations GROUP BY state")
        return {ReservationState(state): count for state, count in rows}

    def count_transitions(
        self, after: int = 0
    ) -> Tuple[int, Dict[Tuple[Optional[ReservationState], ReservationState], int]]:
        """Transitions written after sequence number ``after``, counted by (from, to), and the
        last sequence number seen: the metrics read the history incrementally, so their
        counters survive restarts (they count what the store remembers, by every process)."""
        rows = self._read(
            "SELECT from_state, to_state, COUNT(*), MAX(seq) FROM transitions WHERE seq > ? "
            "GROUP BY from_state, to_state",
            (after,),
        )
        counts = {
            (None if src is None else ReservationState(src), ReservationState(dst)): count
            for src, dst, count, _ in rows
        }
        return max([after, *(last for *_, last in rows)]), counts

    # ---- idempotency

    def idempotency(self, client: str, key: str) -> Optional[IdempotencyEntry]:
        """What (client, key) was used for and its answer; None if the key is new."""
        rows = self._read(
            "SELECT operation, result FROM idempotency WHERE client = ? AND key = ?",
            (client, key),
        )
        if not rows:
            return None
        operation, result = rows[0]
        record = None if result is None else ReservationRecord.from_dict(json.loads(result))
        return IdempotencyEntry(operation=operation, answer=record)

    # ---- receipts

    def receipt(self, reservation_id: str) -> Optional[Dict[str, Any]]:
        """The receipt of a confirmed reservation (JSON document), or None."""
        rows = self._read(
            "SELECT document FROM receipts WHERE reservation_id = ?", (reservation_id,)
        )
        if not rows:
            return None
        kept: Dict[str, Any] = json.loads(rows[0][0])
        return kept

    # ---- bookings owed to the ledger

    def owe(self, reservation_id: str, kind: str, document: Mapping[str, Any]) -> Dict[str, Any]:
        """Owe the ledger a receipt or refund of a reservation; the first one of its kind is
        kept, and is what this answers (a confirm retried books the receipt signed first)."""
        with self._write() as db:
            _owe_booking(db, reservation_id, kind, document)
            row = db.execute(
                "SELECT document FROM ledger_bookings WHERE reservation_id = ? AND kind = ?",
                (reservation_id, kind),
            ).fetchone()
        kept: Dict[str, Any] = json.loads(row[0])
        return kept

    def forget_unbooked(self, reservation_id: str, kind: str) -> None:
        """Forget a receipt or refund owed but not booked: the bank refused it for good."""
        with self._write() as db:
            db.execute(
                "DELETE FROM ledger_bookings WHERE reservation_id = ? AND kind = ? "
                "AND booked_at IS NULL",
                (reservation_id, kind),
            )

    def unconfirmed_receipts(
        self, reservation_id: Optional[str] = None
    ) -> List[Tuple[ReservationRecord, Dict[str, Any]]]:
        """Receipts kept for a confirm that did not (or not yet) confirm their reservation,
        and not voided yet: (the reservation, the receipt), oldest first; only
        ``reservation_id``'s if given."""
        sql = (
            "SELECT reservation_id, document FROM ledger_bookings b WHERE kind = 'receipt' "
            "AND NOT EXISTS (SELECT 1 FROM receipts r WHERE r.reservation_id = b.reservation_id) "
            "AND NOT EXISTS (SELECT 1 FROM ledger_bookings v "
            "WHERE v.reservation_id = b.reservation_id AND v.kind = 'refund')"
        )
        params: Tuple[str, ...] = ()
        if reservation_id is not None:
            sql, params = sql + " AND reservation_id = ?", (reservation_id,)
        found = []
        for rid, document in self._read(sql + " ORDER BY seq", params):
            record = self.get_reservation(rid)
            if record is not None:  # a booking always refers to a reservation
                found.append((record, json.loads(document)))
        return found

    def mark_booked(self, reservation_id: str, kind: str, at: float) -> None:
        """The ledger booked it. Not synced on its own: a confirm's next write syncs it before
        the buyer hears of it, and a mark a power loss takes leaves the booking owed, which
        the agent's loop books again (the ledger answers a booked one with its transaction)."""
        with self._write(durable=False) as db:
            db.execute(
                "UPDATE ledger_bookings SET booked_at = ? "
                "WHERE reservation_id = ? AND kind = ? AND booked_at IS NULL",
                (at, reservation_id, kind),
            )

    def booking(self, reservation_id: str, kind: str) -> Optional[Dict[str, Any]]:
        """The receipt or refund owed (or booked) for a reservation, or None."""
        rows = self._read(
            "SELECT document FROM ledger_bookings WHERE reservation_id = ? AND kind = ?",
            (reservation_id, kind),
        )
        if not rows:
            return None
        document: Dict[str, Any] = json.loads(rows[0][0])
        return document

    def size_bytes(self) -> int:
        """The database's size on disk, its write-ahead log included (0 in memory)."""
        if self.path == ":memory:":
            return 0
        files = (self.path, self.path + "-wal", self.path + "-shm")
        return sum(os.path.getsize(name) for name in files if os.path.exists(name))

    def count_bookings_owed(self) -> int:
        return int(self._read(f"SELECT COUNT(*) FROM ledger_bookings WHERE {_OWED}")[0][0])

    def bookings_owed(self) -> List[Tuple[str, str, Dict[str, Any]]]:
        """(reservation id, kind, document) not booked yet, oldest first: a refund always
        comes after its receipt. Receipts of reservations not confirmed are left out (see
        :data:`_OWED`)."""
        rows = self._read(
            f"SELECT reservation_id, kind, document FROM ledger_bookings WHERE {_OWED} ORDER BY seq"
        )
        return [(rid, kind, json.loads(document)) for rid, kind, document in rows]

    # ---- bids

    def bid(self, client: str, auction_id: str) -> Optional[BidRecord]:
        rows = self._read(
            f"SELECT {_BID_COLUMNS} FROM bids WHERE client = ? AND auction_id = ?",
            (client, auction_id),
        )
        return _bid(rows[0]) if rows else None

    def bid_of_offer(self, offer_id: str) -> Optional[BidRecord]:
        """The bid whose offer ``offer_id`` is, if any."""
        rows = self._read(f"SELECT {_BID_COLUMNS} FROM bids WHERE offer_id = ?", (offer_id,))
        return _bid(rows[0]) if rows else None

    def bids(self) -> List[BidRecord]:
        """Every bid, oldest first."""
        rows = self._read(f"SELECT {_BID_COLUMNS} FROM bids ORDER BY created, client, auction_id")
        return [_bid(row) for row in rows]

    def save_bid(self, record: BidRecord, offer: Optional[Offer], withdrawn: Optional[str]) -> None:
        """Write the bid as valued now in one transaction: its new ``offer`` stored, the offer
        it made before (``withdrawn``) lapsing at once, so that no two offers of one bid can
        both be accepted.

        Not synced on its own: a bid that a power loss takes leaves its offer unknown, so no
        buyer can accept it (an accept is refused as for an offer never made), and frees what
        it held, as a lost auction does. A crash of the agent's process loses nothing."""
        with self._write(durable=False) as db:
            if offer is not None:
                _insert_offers(db, [offer], record.updated)
            if withdrawn is not None:
                _withdraw_offer(db, withdrawn, record.updated)
            db.execute(
                f"INSERT OR REPLACE INTO bids ({_BID_COLUMNS}) "
                f"VALUES ({', '.join('?' for _ in _BID_FIELDS)})",
                _bid_row(record),
            )
        self._refresh_holds()

    def release_bid(
        self, client: str, auction_id: str, code: str, reason: str, at: float
    ) -> Optional[BidRecord]:
        """OPEN or NONE -> RELEASED, its offer lapsing at once; the bid as it is now, which
        is unchanged if it was settled already (None if there is no such bid). Not synced on
        its own: a release that a power loss takes leaves the bid holding until its auction's
        time to accept is over, when the agent releases it anyway."""
        with self._write(durable=False) as db:
            mine = [client, auction_id]
            _release_bids(db, "client = ? AND auction_id = ?", mine, code, reason, at)
            row = db.execute(
                f"SELECT {_BID_COLUMNS} FROM bids WHERE client = ? AND auction_id = ?",
                (client, auction_id),
            ).fetchone()
        self._refresh_holds()
        return None if row is None else _bid(row)

    def release_due_bids(self, now: float) -> int:
        """Release the bids whose auction ended and whose offer was not accepted in time (and
        those that took part without a bid); how many."""
        with self._write() as db:
            released = _release_bids(
                db, "held_until <= ?", [now], "auction_ended", "the auction ended", now
            )
        if released:
            self._refresh_holds()
        return released

    def open_holds(self) -> Tuple[Tuple[int, int, int], ...]:
        """(start, end, size) of what every open bid holds, as this store last wrote or read
        it: no read of the database unless a bid changed since (quotes ask it on the event
        loop; see docs/protocol.md, "English auctions")."""
        holds = self._open_holds
        if holds is None:
            holds = self._refresh_holds()
        return holds

    def _refresh_holds(self) -> Tuple[Tuple[int, int, int], ...]:
        holds = tuple(self.bid_holds())
        self._open_holds = holds
        return holds

    def held_by(self, client: str, except_auction: str) -> Tuple[int, Optional[int]]:
        """What ``client``'s open bids hold together, in unit-seconds (size x window), its bid
        in ``except_auction`` left out; and when the first of them is released."""
        ((held, first),) = self._read(
            "SELECT COALESCE(SUM(size * (end_time - start_time)), 0), MIN(held_until) "
            "FROM bids WHERE client = ? AND state = ? AND auction_id != ?",
            (client, BidState.OPEN.value, except_auction),
        )
        return int(held), first

    def bid_holds(self, except_offer: Optional[str] = None) -> List[Tuple[int, int, int]]:
        """(start, end, size) of the capacity open bids hold, the bid of ``except_offer`` left
        out; oldest bid first."""
        rows = self._read(
            "SELECT start_time, end_time, size FROM bids WHERE state = ? "
            "AND offer_id IS NOT ? ORDER BY created, client, auction_id",
            (BidState.OPEN.value, except_offer),
        )
        return [(start, end, size) for start, end, size in rows]

    def bidding(self, client: str) -> Tuple[int, Optional[int]]:
        """How many auctions ``client`` takes this site into now (its OPEN and NONE bids), and
        when the first of them is released."""
        ((count, first),) = self._read(
            "SELECT COUNT(*), MIN(held_until) FROM bids WHERE client = ? AND state IN (?, ?)",
            (client, *(state.value for state in BIDDING)),
        )
        return int(count), first

    def bid_figures(self) -> BidFigures:
        ((open_auctions, made, won, held),) = self._read(
            "SELECT COALESCE(SUM(state IN (?, ?)), 0), COALESCE(SUM(made), 0), "
            "COALESCE(SUM(state = ?), 0), COALESCE(SUM(CASE WHEN state = ? THEN size END), 0) "
            "FROM bids",
            (*(state.value for state in BIDDING), BidState.WON.value, BidState.OPEN.value),
        )
        return BidFigures(int(open_auctions), int(made), int(won), int(held))

    # ---- the jobs that ran in the reservations

    def record_running(self, running: Mapping[str, Sequence[JobUsage]], seen_at: int) -> None:
        """The jobs running now in each reservation (by reservation id): new ones are added,
        known ones marked seen at ``seen_at`` (with their size and start as the batch system
        gives them now). A reservation's figures read from accounting are left alone."""
        rows = [
            (rid, job.job_id, job.user, job.cores, job.nodes, job.start, seen_at)
            for rid, jobs in running.items()
            for job in jobs
        ]
        if not rows:
            return
        with self._write() as db:
            db.executemany(
                "INSERT INTO reservation_jobs (reservation_id, job_id, user, cores, nodes, "
                "start_time, end_time, last_seen, source) VALUES (?,?,?,?,?,?,NULL,?,'poll') "
                "ON CONFLICT (reservation_id, job_id) DO UPDATE SET cores = excluded.cores, "
                "nodes = excluded.nodes, start_time = excluded.start_time, end_time = NULL, "
                "last_seen = excluded.last_seen WHERE reservation_jobs.source = 'poll'",
                rows,
            )

    def open_jobs(self) -> Dict[str, List[JobUsage]]:
        """Jobs recorded as running (no end yet), by reservation id."""
        rows = self._read(
            f"SELECT reservation_id, {_JOB_COLUMNS} FROM reservation_jobs "
            "WHERE end_time IS NULL ORDER BY reservation_id, start_time, job_id"
        )
        found: Dict[str, List[JobUsage]] = {}
        for rid, *job in rows:
            found.setdefault(rid, []).append(JobUsage(*job))
        return found

    def close_jobs(self, reservation_id: str, job_ids: Iterable[str], end: int) -> None:
        """The jobs ended (the polls no longer see them) at ``end``."""
        rows = [(end, reservation_id, job_id) for job_id in job_ids]
        with self._write() as db:
            db.executemany(
                "UPDATE reservation_jobs SET end_time = ? "
                "WHERE reservation_id = ? AND job_id = ? AND end_time IS NULL",
                rows,
            )

    def reservation_jobs(self, reservation_id: str) -> List[JobUsage]:
        """The jobs that ran (or run) in a reservation, in the order they started."""
        rows = self._read(
            f"SELECT {_JOB_COLUMNS} FROM reservation_jobs WHERE reservation_id = ? "
            "ORDER BY start_time, job_id",
            (reservation_id,),
        )
        return [JobUsage(*row) for row in rows]

    def settle_usage(
        self,
        reservation_id: str,
        source: UsageSource,
        at: float,
        end: int,
        jobs: Optional[Sequence[JobUsage]] = None,
    ) -> None:
        """Make a reservation's figures final, in one transaction: ``jobs`` read from the
        batch system's accounting replace what the polls saw; without them, the jobs still
        open are closed at ``end`` (the reservation's end, where the batch system ends them)."""
        with self._write() as db:
            if jobs is not None:
                db.execute(
                    "DELETE FROM reservation_jobs WHERE reservation_id = ?", (reservation_id,)
                )
                db.executemany(
                    "INSERT INTO reservation_jobs (reservation_id, job_id, user, cores, nodes, "
                    "start_time, end_time, last_seen, source) VALUES (?,?,?,?,?,?,?,?,?)",
                    [
                        (
                            reservation_id,
                            job.job_id,
                            job.user,
                            job.cores,
                            job.nodes,
                            job.start,
                            job.end,
                            job.end if job.end is not None else end,
                            source.value,
                        )
                        for job in jobs
                    ],
                )
            db.execute(
                "UPDATE reservation_jobs SET end_time = ? "
                "WHERE reservation_id = ? AND end_time IS NULL",
                (end, reservation_id),
            )
            db.execute(
                "INSERT OR REPLACE INTO reservation_usage (reservation_id, source, settled_at) "
                "VALUES (?, ?, ?)",
                (reservation_id, source.value, at),
            )

    def usage_source(self, reservation_id: str) -> Optional[UsageSource]:
        """Where a reservation's final figures came from; None while they are not final."""
        rows = self._read(
            "SELECT source FROM reservation_usage WHERE reservation_id = ?", (reservation_id,)
        )
        return UsageSource(rows[0][0]) if rows else None

    def unsettled(self, states: Iterable[ReservationState]) -> List[ReservationRecord]:
        """Reservations in ``states`` whose figures are not final yet, oldest first."""
        params = [state.value for state in states]
        rows = self._read(
            f"SELECT {_RESERVATION_COLUMNS} FROM reservations WHERE state IN "
            f"({', '.join('?' for _ in params)}) AND NOT EXISTS (SELECT 1 FROM "
            "reservation_usage u WHERE u.reservation_id = reservations.id) ORDER BY end_time, id",
            params,
        )
        return [_record(row) for row in rows]

    def usage_totals(self) -> UsageTotals:
        """What the reservations with final figures sold and what their jobs used of it."""
        used_row = self._read(
            "SELECT r.unit, SUM(MAX(0, MIN(COALESCE(j.end_time, r.end_time), r.end_time) - "
            "MAX(j.start_time, r.start_time)) * CASE r.unit WHEN 'node' THEN MAX(1, j.nodes) "
            "ELSE j.cores END), SUM(MAX(0, MIN(COALESCE(j.end_time, r.end_time), r.end_time) - "
            "MAX(j.start_time, r.start_time)) * j.cores) FROM reservation_jobs j "
            "JOIN reservations r ON r.id = j.reservation_id "
            "JOIN reservation_usage u ON u.reservation_id = r.id GROUP BY r.unit"
        )
        sold_rows = self._read(
            "SELECT r.unit, SUM(r.size * (r.end_time - r.start_time)), COUNT(*), "
            "SUM(NOT EXISTS (SELECT 1 FROM reservation_jobs j WHERE j.reservation_id = r.id)) "
            "FROM reservations r JOIN reservation_usage u ON u.reservation_id = r.id "
            "GROUP BY r.unit"
        )
        used = {CapacityUnit(unit): (units or 0, cores or 0) for unit, units, cores in used_row}
        totals = UsageTotals()
        for unit, sold, count, empty in sold_rows:
            kind = CapacityUnit(unit)
            units, cores = used.get(kind, (0, 0))
            totals.sold_unit_seconds[kind] = sold or 0
            totals.used_unit_seconds[kind] = units
            totals.core_seconds += cores
            totals.reservations += count
            totals.empty += empty or 0
        return totals

    # ---- queue waits

    def record_waits(self, waits: Iterable[QueueWait]) -> int:
        """Add observed waits (a job seen twice is kept once); returns how many were new."""
        rows = [(w.job_id, w.submit, w.cores, w.walltime, w.start) for w in waits]
        if not rows:
            return 0
        with self._write() as db:
            before = db.total_changes
            db.executemany(
                "INSERT OR IGNORE INTO queue_waits (job_id, submit, cores, walltime, start_time) "
                "VALUES (?,?,?,?,?)",
                rows,
            )
            return db.total_changes - before

    def queue_waits(self, since: Optional[int] = None) -> List[QueueWait]:
        """Observed waits of jobs that started at ``since`` or later (all if None)."""
        rows = self._read(
            "SELECT job_id, cores, walltime, submit, start_time FROM queue_waits "
            "WHERE start_time >= ? ORDER BY start_time, job_id",
            (since if since is not None else -(2**62),),
        )
        return [QueueWait(*row) for row in rows]


def _insert_offers(db: sqlite3.Connection, offers: Sequence[Offer], at: float) -> None:
    encoded: Dict[int, str] = {}

    def request_json(request: Request) -> str:
        """The offers of a quote share one request: it is encoded once."""
        if id(request) not in encoded:
            encoded[id(request)] = json.dumps(documents.request_document(request), sort_keys=True)
        return encoded[id(request)]

    rows = [
        (
            offer.id,
            offer.site,
            request_json(offer.request),
            offer.start,
            offer.duration,
            offer.size,
            str(offer.unit_price),
            str(offer.fee),
            str(offer.total),
            offer.expires,
            at,
            offer.client,
        )
        for offer in offers
    ]
    db.executemany(
        "INSERT INTO offers (id, site, request, start_time, duration, size, "
        "unit_price, fee, total, expires, created, client) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        rows,
    )


def _withdraw_offer(db: sqlite3.Connection, offer_id: str, at: float) -> None:
    """An offer lapses now (a bid moved on or was released): it can no longer be accepted."""
    db.execute("UPDATE offers SET expires = MIN(expires, ?) WHERE id = ?", (int(at), offer_id))


def _release_bids(
    db: sqlite3.Connection, condition: str, params: List[Any], code: str, reason: str, at: float
) -> int:
    """Release the OPEN and NONE bids matching ``condition``, their offers lapsing now."""
    bidding = [state.value for state in BIDDING]
    where = f"state IN (?, ?) AND {condition}"
    for (offer_id,) in db.execute(
        f"SELECT offer_id FROM bids WHERE {where} AND offer_id IS NOT NULL", [*bidding, *params]
    ).fetchall():
        _withdraw_offer(db, offer_id, at)
    return int(
        db.execute(
            f"UPDATE bids SET state = ?, reason_code = ?, reason = ?, updated = ? WHERE {where}",
            [BidState.RELEASED.value, code, reason, at, *bidding, *params],
        ).rowcount
    )


#: The bids table's columns, in BidRecord's order.
_BID_FIELDS = (
    ("client", "client"),
    ("auction_id", "auction_id"),
    ("job", "job"),
    ("closes_at", "closes_at"),
    ("held_until", "held_until"),
    ("state", "state"),
    ("created", "created"),
    ("updated", "updated"),
    ("offer_id", "offer_id"),
    ("start", "start_time"),
    ("end", "end_time"),
    ("size", "size"),
    ("value", "value"),
    ("cores_value", "cores_value"),
    ("displacement", "displacement"),
    ("transfer", "transfer"),
    ("transfer_s", "transfer_s"),
    ("reason_code", "reason_code"),
    ("reason", "reason"),
    ("made", "made"),
    ("updates", "updates"),
)
_BID_COLUMNS = ", ".join(column for _, column in _BID_FIELDS)
_BID_MONEY = ("value", "cores_value", "displacement", "transfer")


def _bid_row(record: BidRecord) -> List[Any]:
    row: List[Any] = []
    for name, _ in _BID_FIELDS:
        value = getattr(record, name)
        if name == "job":
            value = json.dumps(dict(value), sort_keys=True)
        elif name == "state":
            value = value.value
        elif name in _BID_MONEY and value is not None:
            value = str(value)
        elif name == "made":
            value = int(value)
        row.append(value)
    return row


def _bid(row: Sequence[Any]) -> BidRecord:
    values: Dict[str, Any] = {}
    for (name, _), value in zip(_BID_FIELDS, row):
        if name == "job":
            value = json.loads(value)
        elif name == "state":
            value = BidState(value)
        elif name in _BID_MONEY and value is not None:
            value = Decimal(value)
        elif name == "made":
            value = bool(value)
        values[name] = value
    return BidRecord(**values)


def _keep_receipt(db: sqlite3.Connection, reservation_id: str, document: Mapping[str, Any]) -> None:
    """Keep the receipt of a reservation; the first kept stays (a confirm is signed once)."""
    db.execute(
        "INSERT OR IGNORE INTO receipts (reservation_id, document) VALUES (?, ?)",
        (reservation_id, json.dumps(dict(document), sort_keys=True)),
    )


def _owe_booking(
    db: sqlite3.Connection, reservation_id: str, kind: str, document: Mapping[str, Any]
) -> None:
    """Remember a receipt or refund the ledger must book (the first one of its kind kept)."""
    db.execute(
        "INSERT OR IGNORE INTO ledger_bookings (reservation_id, kind, document) VALUES (?, ?, ?)",
        (reservation_id, kind, json.dumps(dict(document), sort_keys=True)),
    )


def _insert_reservation(db: sqlite3.Connection, r: ReservationRecord) -> None:
    db.execute(
        f"INSERT INTO reservations ({_RESERVATION_COLUMNS}) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            r.id,
            r.name,
            r.offer_id,
            r.client,
            r.accept_key,
            r.state.value,
            r.start,
            r.end,
            r.size,
            r.unit.value,
            json.dumps(list(r.users)),
            json.dumps(list(r.accounts)),
            str(r.unit_price),
            str(r.fee),
            str(r.total),
            str(r.penalty_factor),
            None if r.penalty is None else str(r.penalty),
            r.deadline,
            r.message,
            r.created,
            r.updated,
            json.dumps([list(pair) for pair in r.allocation]),
        ),
    )


def _insert_transition(
    db: sqlite3.Connection,
    reservation_id: str,
    at: float,
    actor: str,
    src: Optional[ReservationState],
    dst: ReservationState,
    reason: str,
) -> None:
    db.execute(
        "INSERT INTO transitions (reservation_id, at, actor, from_state, to_state, reason) "
        "VALUES (?,?,?,?,?,?)",
        (reservation_id, at, actor, None if src is None else src.value, dst.value, reason),
    )


def _select_reservation(db: sqlite3.Connection, reservation_id: str) -> Optional[ReservationRecord]:
    row = db.execute(
        f"SELECT {_RESERVATION_COLUMNS} FROM reservations WHERE id = ?", (reservation_id,)
    ).fetchone()
    return None if row is None else _record(row)


def _record(row: Sequence[Any]) -> ReservationRecord:
    (
        rid,
        name,
        offer_id,
        client,
        accept_key,
        state,
        start,
        end,
        size,
        unit,
        users,
        accounts,
        unit_price,
        fee,
        total,
        penalty_factor,
        penalty,
        deadline,
        message,
        created,
        updated,
        allocation,
    ) = row
    return ReservationRecord(
        id=rid,
        name=name,
        offer_id=offer_id,
        client=client,
        accept_key=accept_key,
        state=ReservationState(state),
        start=start,
        end=end,
        size=size,
        unit=CapacityUnit(unit),
        users=tuple(json.loads(users)),
        accounts=tuple(json.loads(accounts)),
        unit_price=Decimal(unit_price),
        fee=Decimal(fee),
        total=Decimal(total),
        penalty_factor=Decimal(penalty_factor),
        created=created,
        updated=updated,
        deadline=deadline,
        penalty=None if penalty is None else Decimal(penalty),
        message=message,
        allocation=tuple((str(name), int(cores)) for name, cores in json.loads(allocation)),
    )
