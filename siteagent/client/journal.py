"""The buyer's journal: every auction and every step of its commit, written before it is sent.

Why: a reservation a site holds for the buyer must never be forgotten by the buyer. Each
accept, confirm and cancel is journaled (one SQLite transaction, ``synchronous=FULL``: on
disk when the call returns) *before* the request goes out, and its answer after it comes
back. Whatever interrupts the client (Ctrl-C, a crash, a dead site), the journal names every
reservation a site may hold for it, and ``siteagent-client recover`` finishes the job from it:
an entry still ``accepting``, ``tentative``, ``confirming`` or ``cancelling`` is *unsettled*,
the rest are settled (what the site holds is known).

Only those three steps wait for the disk. What records what came back (an answer, a round's
summary, how the auction ended) is committed without a sync of its own
(:mod:`siteagent.core.transactions`): a crash of the process loses none of it, and the next step
syncs it along before its request leaves. A power loss in between can lose only such a record,
and that is a state the journal is built for: the step before it is still on disk, as if the
answer had never arrived, and ``recover`` sends that step again with the same idempotency key,
which gets the same answer. Each job of an English auction waits for two syncs instead of seven.

The journal lives under ``$XDG_STATE_HOME/siteagent/client.db`` (``~/.local/state/...``), a
private file (0600) in a private directory. An auction in progress holds an ``flock`` on a
file of its own beside it, so that ``recover`` in another shell leaves it alone; the kernel
releases the lock when the process dies, however it dies.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import json
import os
import sqlite3
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from siteagent.client.reverse_auction import Bid
from siteagent.core import transactions
from siteagent.core.errors import SiteagentError
from siteagent.core.files import make_database_private, make_private
from siteagent.protocol.errors import JOURNAL_ERROR

#: The journal's file name in the state directory.
JOURNAL_FILE = "client.db"

#: The schema this code writes; a journal written by a newer siteagent is refused.
SCHEMA_VERSION = 1

#: Seconds to wait for another process's write (another command on the same journal).
BUSY_TIMEOUT_S = 10.0

SCHEMA = """
CREATE TABLE auctions (
    id TEXT PRIMARY KEY,
    request TEXT NOT NULL,
    state TEXT NOT NULL,
    message TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    auction_id TEXT NOT NULL REFERENCES auctions(id),
    part INTEGER NOT NULL,
    site TEXT NOT NULL,
    offer_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE,
    bid TEXT NOT NULL,
    state TEXT NOT NULL,
    reservation_id TEXT,
    deal TEXT,
    deadline REAL,
    receipt TEXT,
    message TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE rounds (
    auction_id TEXT NOT NULL REFERENCES auctions(id),
    round INTEGER NOT NULL,
    summary TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (auction_id, round)
);
CREATE INDEX entries_by_auction ON entries (auction_id);
CREATE INDEX entries_by_reservation ON entries (reservation_id);
"""


class JournalError(SiteagentError):
    code = JOURNAL_ERROR


class AuctionState(str, enum.Enum):
    """Where an auction stands: asking for quotes, holding parts (accepts), confirming them,
    or over (``done``: every part confirmed; ``failed``: nothing bought; ``interrupted``: the
    user stopped it)."""

    BIDDING = "bidding"
    ACCEPTING = "accepting"
    CONFIRMING = "confirming"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class HoldState(str, enum.Enum):
    """What a site holds for one accepted (or to-be-accepted) offer, as far as the buyer
    knows. The ``-ing`` states are written before the request: its answer is not known."""

    ACCEPTING = "accepting"
    REFUSED = "refused"
    TENTATIVE = "tentative"
    CONFIRMING = "confirming"
    CONFIRMED = "confirmed"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    GONE = "gone"


#: States in which the site may hold something for the buyer that nobody settled.
UNSETTLED = frozenset(
    {HoldState.ACCEPTING, HoldState.TENTATIVE, HoldState.CONFIRMING, HoldState.CANCELLING}
)
#: The steps written before their request is sent: synced to disk before it leaves.
SENDING = frozenset({HoldState.ACCEPTING, HoldState.CONFIRMING, HoldState.CANCELLING})
#: States in which the site holds nothing for the buyer any more.
RELEASED = frozenset({HoldState.REFUSED, HoldState.CANCELLED, HoldState.EXPIRED, HoldState.GONE})


@dataclass(frozen=True)
class AuctionRecord:
    id: str
    request: Mapping[str, Any]
    state: AuctionState
    message: str
    created: float
    updated: float


@dataclass(frozen=True)
class JournalEntry:
    """One offer the buyer accepted or meant to: where it stands at its site."""

    id: int
    auction_id: str
    part: int
    site: str
    offer_id: str
    idempotency_key: str
    bid: Bid
    state: HoldState
    reservation_id: Optional[str]
    deal: Optional[Mapping[str, Any]]
    deadline: Optional[float]
    receipt: Optional[Mapping[str, Any]]
    message: str
    created: float
    updated: float

    @property
    def settled(self) -> bool:
        return self.state not in UNSETTLED

    def to_json(self) -> Dict[str, Any]:
        document = asdict(self)
        document["state"] = self.state.value
        document["bid"] = bid_json(self.bid)
        return document


def bid_json(bid: Bid) -> Dict[str, Any]:
    document = asdict(bid)
    for money in ("unit_price", "fee", "total"):
        document[money] = str(document[money])
    return document


def bid_from_json(document: Mapping[str, Any]) -> Bid:
    fields = dict(document)
    for money in ("unit_price", "fee", "total"):
        fields[money] = Decimal(fields[money])
    return Bid(**fields)


def default_path() -> Path:
    """``$XDG_STATE_HOME/siteagent/client.db``, ``~/.local/state/siteagent/client.db`` if the
    variable is unset or empty (the XDG base directory specification)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "siteagent" / JOURNAL_FILE


class Journal:
    """The journal file, shared by threads (one connection, a lock) and by processes (SQLite's
    own locking). Every method that writes has committed when it returns; ``accepting``,
    ``confirming`` and ``cancelling`` have also synced it to disk (see the module's docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            make_private(path.parent, directory=True)
            make_database_private(path)
            self._db = sqlite3.connect(
                str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except (OSError, sqlite3.Error) as exc:
            raise JournalError(f"cannot open the journal {path}: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ---- auctions

    def open_auction(self, request: Mapping[str, Any]) -> AuctionRecord:
        """A new auction of ``request`` (what the buyer asked: parts, rounds, constraints)."""
        now = time.time()
        auction_id = uuid.uuid4().hex[:12]
        with self._write(durable=False) as db:
            db.execute(
                "INSERT INTO auctions (id, request, state, created, updated) "
                "VALUES (?, ?, ?, ?, ?)",
                (auction_id, _dumps(request), AuctionState.BIDDING.value, now, now),
            )
        return self.auction(auction_id)

    def set_auction(self, auction_id: str, state: AuctionState, message: str = "") -> None:
        with self._write(durable=False) as db:
            db.execute(
                "UPDATE auctions SET state = ?, message = ?, updated = ? WHERE id = ?",
                (state.value, message, time.time(), auction_id),
            )

    def bidding_round(self, auction_id: str, round: int, summary: Mapping[str, Any]) -> None:
        """Round ``round`` is over: what it brought (best prices, bids, refusals)."""
        with self._write(durable=False) as db:
            db.execute(
                "INSERT INTO rounds (auction_id, round, summary, at) VALUES (?, ?, ?, ?)",
                (auction_id, round, _dumps(summary), time.time()),
            )

    def rounds(self, auction_id: str) -> List[Dict[str, Any]]:
        """The summaries of the auction's rounds, in order."""
        rows = self._read(
            "SELECT summary FROM rounds WHERE auction_id = ? ORDER BY round", (auction_id,)
        )
        return [_loads(row["summary"]) or {} for row in rows]

    def auction(self, auction_id: str) -> AuctionRecord:
        rows = self._read("SELECT * FROM auctions WHERE id = ?", (auction_id,))
        if not rows:
            raise JournalError(f"the journal {self.path} has no auction {auction_id}")
        return _auction(rows[0])

    def auctions(self) -> List[AuctionRecord]:
        return [_auction(row) for row in self._read("SELECT * FROM auctions ORDER BY created")]

    @contextlib.contextmanager
    def running(self, auction_id: str) -> Iterator[None]:
        """Mark the auction as in progress in this process for as long as the block runs."""
        lock = self._lock_path(auction_id)
        make_private(lock)
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock)

    def is_running(self, auction_id: str) -> bool:
        """Whether a live process is running the auction (holds its lock)."""
        try:
            fd = os.open(self._lock_path(auction_id), os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    # ---- the steps of the commit, each written before it is sent and after it is answered

    def accepting(self, auction_id: str, bid: Bid, key: Optional[str] = None) -> JournalEntry:
        """About to accept ``bid``: the idempotency key the accept is sent with is made here
        (or given: a batch accept's part's, docs/batches.md), so that a retry after a crash
        sends the same one and learns what the first did. The auction's first accept moves
        it from bidding to accepting, in the same transaction."""
        now = time.time()
        key = key or f"auction-{auction_id}-{uuid.uuid4().hex[:16]}"
        with self._write() as db:
            _advance(db, auction_id, AuctionState.BIDDING, AuctionState.ACCEPTING, now)
            cursor = db.execute(
                "INSERT INTO entries (auction_id, part, site, offer_id, idempotency_key, bid, "
                "state, created, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    auction_id,
                    bid.part,
                    bid.site,
                    bid.offer_id,
                    key,
                    _dumps(bid_json(bid)),
                    HoldState.ACCEPTING.value,
                    now,
                    now,
                ),
            )
            entry_id = cursor.lastrowid
        assert entry_id is not None
        return self.entry(entry_id)

    def tentative(
        self,
        entry: JournalEntry,
        reservation_id: str,
        deal: Mapping[str, Any],
        deadline: Optional[float],
    ) -> JournalEntry:
        """The site holds the reservation, to be confirmed by ``deadline``."""
        return self._update(
            entry,
            HoldState.TENTATIVE,
            reservation_id=reservation_id,
            deal=_dumps(deal),
            deadline=deadline,
        )

    def refused(self, entry: JournalEntry, message: str) -> JournalEntry:
        """The accept was refused: the site holds nothing."""
        return self._update(entry, HoldState.REFUSED, message=message)

    def confirming(self, entry: JournalEntry) -> JournalEntry:
        """About to confirm ``entry``; the auction's first confirm moves it from accepting to
        confirming, in the same transaction."""
        moves = (AuctionState.ACCEPTING, AuctionState.CONFIRMING)
        return self._update(entry, HoldState.CONFIRMING, advance=moves)

    def confirmed(self, entry: JournalEntry, receipt: Mapping[str, Any]) -> JournalEntry:
        """Confirmed, with the site's verified receipt."""
        return self._update(entry, HoldState.CONFIRMED, receipt=_dumps(receipt), message="")

    def back_to_tentative(self, entry: JournalEntry, message: str) -> JournalEntry:
        """A confirm that changed nothing (refused): the reservation is still tentative."""
        return self._update(entry, HoldState.TENTATIVE, message=message)

    def cancelling(self, entry: JournalEntry) -> JournalEntry:
        return self._update(entry, HoldState.CANCELLING)

    def released(self, entry: JournalEntry, state: HoldState, message: str = "") -> JournalEntry:
        """The site holds nothing any more: cancelled by us, expired, or gone otherwise."""
        if state not in RELEASED:
            raise ValueError(f"{state.value} is not a released state")
        return self._update(entry, state, message=message)

    def noted(self, entry: JournalEntry, message: str) -> JournalEntry:
        """Why the entry is where it is (a step that did not get an answer), state unchanged."""
        return self._update(entry, entry.state, message=message)

    # ---- reading

    def entry(self, entry_id: int) -> JournalEntry:
        rows = self._read("SELECT * FROM entries WHERE id = ?", (entry_id,))
        if not rows:
            raise JournalError(f"the journal {self.path} has no entry {entry_id}")
        return _entry(rows[0])

    def entries(self, auction_id: Optional[str] = None) -> List[JournalEntry]:
        """Entries in the order they were made, of one auction or of all."""
        if auction_id is None:
            rows = self._read("SELECT * FROM entries ORDER BY id")
        else:
            rows = self._read(
                "SELECT * FROM entries WHERE auction_id = ? ORDER BY id", (auction_id,)
            )
        return [_entry(row) for row in rows]

    def unsettled(self) -> List[JournalEntry]:
        marks = ", ".join("?" for _ in UNSETTLED)
        rows = self._read(
            f"SELECT * FROM entries WHERE state IN ({marks}) ORDER BY id",
            tuple(state.value for state in UNSETTLED),
        )
        return [_entry(row) for row in rows]

    def find(self, reservation_id: str, site: Optional[str] = None) -> List[JournalEntry]:
        """Entries of the reservation ``reservation_id`` (at ``site``, if given)."""
        if site is None:
            rows = self._read("SELECT * FROM entries WHERE reservation_id = ?", (reservation_id,))
        else:
            rows = self._read(
                "SELECT * FROM entries WHERE reservation_id = ? AND site = ?",
                (reservation_id, site),
            )
        return [_entry(row) for row in rows]

    # ---- plumbing

    def _lock_path(self, auction_id: str) -> Path:
        return self.path.with_name(f"{self.path.name}.{auction_id}.lock")

    def _update(
        self,
        entry: JournalEntry,
        state: HoldState,
        advance: Optional[Tuple[AuctionState, AuctionState]] = None,
        **changes: Any,
    ) -> JournalEntry:
        """Write the entry's new ``state`` and ``changes``, synced to disk if the state is a
        step about to be sent; with ``advance`` (from, to), its auction moves on if it is where
        ``from`` says, in the same transaction."""
        now = time.time()
        columns = {"state": state.value, "updated": now, **changes}
        assignments = ", ".join(f"{name} = ?" for name in columns)
        with self._write(durable=state in SENDING) as db:
            if advance is not None:
                _advance(db, entry.auction_id, *advance, now)
            db.execute(
                f"UPDATE entries SET {assignments} WHERE id = ?", (*columns.values(), entry.id)
            )
        return self.entry(entry.id)

    @contextlib.contextmanager
    def _write(self, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (BEGIN IMMEDIATE) and committed (to disk, if
        ``durable``)."""
        with transactions.immediate(
            self._db,
            self._lock,
            lambda exc: JournalError(f"journal {self.path}: {exc}"),
            durable,
        ) as db:
            yield db

    def _read(self, sql: str, params: Sequence[Any] = ()) -> List[Dict[str, Any]]:
        with self._lock:
            try:
                cursor = self._db.execute(sql, params)
                names = [column[0] for column in cursor.description]
                return [dict(zip(names, row)) for row in cursor.fetchall()]
            except sqlite3.Error as exc:
                raise JournalError(f"journal {self.path}: {exc}") from exc

    def _migrate(self) -> None:
        with self._write() as db:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise JournalError(
                    f"{self.path} was written by a newer siteagent (schema {version}, this one "
                    f"knows up to {SCHEMA_VERSION}): upgrade siteagent or use another journal"
                )
            if version == 0:
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _advance(
    db: sqlite3.Connection, auction_id: str, was: AuctionState, to: AuctionState, at: float
) -> None:
    """The auction moves on from ``was`` to ``to`` (if it is elsewhere, it stays there)."""
    db.execute(
        "UPDATE auctions SET state = ?, updated = ? WHERE id = ? AND state = ?",
        (to.value, at, auction_id, was.value),
    )


def _dumps(document: Any) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def _loads(text: Optional[str]) -> Optional[Dict[str, Any]]:
    if text is None:
        return None
    document: Dict[str, Any] = json.loads(text)
    return document


def _auction(row: Mapping[str, Any]) -> AuctionRecord:
    return AuctionRecord(
        id=row["id"],
        request=_loads(row["request"]) or {},
        state=AuctionState(row["state"]),
        message=row["message"],
        created=row["created"],
        updated=row["updated"],
    )


def _entry(row: Mapping[str, Any]) -> JournalEntry:
    return JournalEntry(
        id=row["id"],
        auction_id=row["auction_id"],
        part=row["part"],
        site=row["site"],
        offer_id=row["offer_id"],
        idempotency_key=row["idempotency_key"],
        bid=bid_from_json(_loads(row["bid"]) or {}),
        state=HoldState(row["state"]),
        reservation_id=row["reservation_id"],
        deal=_loads(row["deal"]),
        deadline=row["deadline"],
        receipt=_loads(row["receipt"]),
        message=row["message"],
        created=row["created"],
        updated=row["updated"],
    )
