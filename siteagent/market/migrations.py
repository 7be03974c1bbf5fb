"""The state database's schema, as migrations: function i+1 takes it from version i to i+1.

Invariant: a released migration is never edited, only appended; the store applies the missing
ones in order in one transaction when it opens and keeps the version in ``PRAGMA user_version``
(a store written by a newer siteagent is refused). docs/lifecycle.md §5.
"""

from __future__ import annotations

import sqlite3
from typing import Callable, Tuple

from siteagent.core.usage import UsageSource
from siteagent.market.lifecycle import BidState, ReservationState


def _migrate_1(db: sqlite3.Connection) -> None:
    """The first schema: offers, reservations with history, idempotency keys, queue waits."""
    states = ", ".join(f"'{state.value}'" for state in ReservationState)
    db.execute(
        """CREATE TABLE offers (
            id TEXT PRIMARY KEY,
            site TEXT NOT NULL,
            request TEXT NOT NULL,
            start_time INTEGER NOT NULL,
            duration INTEGER NOT NULL,
            size INTEGER NOT NULL,
            unit_price TEXT NOT NULL,
            fee TEXT NOT NULL,
            total TEXT NOT NULL,
            expires INTEGER NOT NULL,
            created REAL NOT NULL
        )"""
    )
    db.execute(
        f"""CREATE TABLE reservations (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            offer_id TEXT NOT NULL UNIQUE REFERENCES offers(id),
            client TEXT NOT NULL,
            accept_key TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ({states})),
            start_time INTEGER NOT NULL,
            end_time INTEGER NOT NULL,
            size INTEGER NOT NULL,
            unit TEXT NOT NULL,
            users TEXT NOT NULL,
            accounts TEXT NOT NULL,
            unit_price TEXT NOT NULL,
            fee TEXT NOT NULL,
            total TEXT NOT NULL,
            penalty_factor TEXT NOT NULL,
            penalty TEXT,
            deadline REAL,
            message TEXT NOT NULL DEFAULT '',
            created REAL NOT NULL,
            updated REAL NOT NULL
        )"""
    )
    db.execute("CREATE INDEX reservations_by_state ON reservations(state)")
    db.execute(
        """CREATE TABLE transitions (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            reservation_id TEXT NOT NULL REFERENCES reservations(id),
            at REAL NOT NULL,
            actor TEXT NOT NULL,
            from_state TEXT,
            to_state TEXT NOT NULL,
            reason TEXT NOT NULL
        )"""
    )
    db.execute("CREATE INDEX transitions_by_reservation ON transitions(reservation_id, seq)")
    db.execute(
        """CREATE TABLE idempotency (
            client TEXT NOT NULL,
            key TEXT NOT NULL,
            operation TEXT NOT NULL,
            result TEXT,
            created REAL NOT NULL,
            PRIMARY KEY (client, key)
        )"""
    )
    db.execute(
        """CREATE TABLE queue_waits (
            job_id TEXT NOT NULL,
            submit INTEGER NOT NULL,
            cores INTEGER NOT NULL,
            walltime INTEGER NOT NULL,
            start_time INTEGER NOT NULL,
            PRIMARY KEY (job_id, submit)
        )"""
    )
    db.execute("CREATE INDEX queue_waits_by_start ON queue_waits(start_time)")


def _migrate_2(db: sqlite3.Connection) -> None:
    """Receipts: the doubly signed deal of each confirmed reservation, kept by the agent
    itself (with or without a ledger) so that it can show and cancel what it signed."""
    db.execute(
        """CREATE TABLE receipts (
            reservation_id TEXT PRIMARY KEY REFERENCES reservations(id),
            document TEXT NOT NULL
        )"""
    )


def _migrate_3(db: sqlite3.Connection) -> None:
    """What the site owes its ledger: each receipt and refund it signed, until booked, so that
    the agent's loop books what a confirm or cancel could not (ledger down, no retry)."""
    db.execute(
        """CREATE TABLE ledger_bookings (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            reservation_id TEXT NOT NULL REFERENCES reservations(id),
            kind TEXT NOT NULL CHECK (kind IN ('receipt', 'refund')),
            document TEXT NOT NULL,
            booked_at REAL,
            UNIQUE (reservation_id, kind)
        )"""
    )


def _migrate_4(db: sqlite3.Connection) -> None:
    """Offers by expiry, so that each cycle finds the expired ones to prune cheaply."""
    db.execute("CREATE INDEX offers_by_expiry ON offers(expires)")


def _migrate_5(db: sqlite3.Connection) -> None:
    """Offers remember the client they were quoted to: only it may accept them. Offers of
    earlier versions have none and stay acceptable by anyone until they lapse."""
    db.execute("ALTER TABLE offers ADD COLUMN client TEXT NOT NULL DEFAULT ''")


def _migrate_6(db: sqlite3.Connection) -> None:
    """The jobs that ran in each reservation (seen by the polls, or read from the batch
    system's accounting), and which reservations' figures are final and from where."""
    sources = ", ".join(f"'{source.value}'" for source in UsageSource)
    db.execute(
        f"""CREATE TABLE reservation_jobs (
            reservation_id TEXT NOT NULL REFERENCES reservations(id),
            job_id TEXT NOT NULL,
            user TEXT NOT NULL,
            cores INTEGER NOT NULL,
            nodes INTEGER NOT NULL,
            start_time INTEGER NOT NULL,
            end_time INTEGER,
            last_seen INTEGER NOT NULL,
            source TEXT NOT NULL CHECK (source IN ({sources})),
            PRIMARY KEY (reservation_id, job_id)
        )"""
    )
    db.execute("CREATE INDEX reservation_jobs_running ON reservation_jobs(end_time)")
    db.execute(
        f"""CREATE TABLE reservation_usage (
            reservation_id TEXT PRIMARY KEY REFERENCES reservations(id),
            source TEXT NOT NULL CHECK (source IN ({sources})),
            settled_at REAL NOT NULL
        )"""
    )


def _migrate_7(db: sqlite3.Connection) -> None:
    """Bids in English auctions: one per (client, auction), holding the capacity its offer
    names until the auction ends (docs/design.md §4.6)."""
    states = ", ".join(f"'{state.value}'" for state in BidState)
    db.execute(
        f"""CREATE TABLE bids (
            client TEXT NOT NULL,
            auction_id TEXT NOT NULL,
            job TEXT NOT NULL,
            closes_at INTEGER NOT NULL,
            held_until INTEGER NOT NULL,
            state TEXT NOT NULL CHECK (state IN ({states})),
            offer_id TEXT REFERENCES offers(id),
            start_time INTEGER,
            end_time INTEGER,
            size INTEGER,
            value TEXT,
            cores_value TEXT,
            displacement TEXT,
            transfer TEXT,
            transfer_s INTEGER NOT NULL DEFAULT 0,
            reason_code TEXT NOT NULL DEFAULT '',
            reason TEXT NOT NULL DEFAULT '',
            made INTEGER NOT NULL DEFAULT 0,
            updates INTEGER NOT NULL DEFAULT 0,
            created REAL NOT NULL,
            updated REAL NOT NULL,
            PRIMARY KEY (client, auction_id)
        )"""
    )
    db.execute("CREATE INDEX bids_by_state ON bids(state, held_until)")
    db.execute("CREATE INDEX bids_by_offer ON bids(offer_id)")


def _migrate_8(db: sqlite3.Connection) -> None:
    """Reservations remember their nodes (JSON [[name, cores], ...]); earlier ones have none
    and are planned as the batch system shows them."""
    db.execute("ALTER TABLE reservations ADD COLUMN allocation TEXT NOT NULL DEFAULT '[]'")


def _migrate_9(db: sqlite3.Connection) -> None:
    """A client's bids by state: each call for bids counts the client's open auctions, which
    the primary key found only by reading every bid the client ever made."""
    db.execute("CREATE INDEX bids_by_client_state ON bids(client, state, held_until)")


def _migrate_10(db: sqlite3.Connection) -> None:
    """Batch accepts (docs/batches.md), journaled before their first part so that a batch
    an agent did not finish is released when it comes back: its offers in order, whether it
    is in progress (``open``), ``held`` or ``released``, and its answer (the reservations
    held, or the error that released it)."""
    db.execute(
        """CREATE TABLE accept_batches (
            client TEXT NOT NULL,
            key TEXT NOT NULL,
            offer_ids TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('open', 'held', 'released')),
            answer TEXT,
            created REAL NOT NULL,
            PRIMARY KEY (client, key)
        )"""
    )
    db.execute("CREATE INDEX accept_batches_open ON accept_batches(state)")


#: Migration i+1 takes the schema from version i to i+1. Append, never edit a released one.
MIGRATIONS: Tuple[Callable[[sqlite3.Connection], None], ...] = (
    _migrate_1,
    _migrate_2,
    _migrate_3,
    _migrate_4,
    _migrate_5,
    _migrate_6,
    _migrate_7,
    _migrate_8,
    _migrate_9,
    _migrate_10,
)


SCHEMA_VERSION = len(MIGRATIONS)
