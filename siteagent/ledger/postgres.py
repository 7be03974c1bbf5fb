"""The bank on PostgreSQL (``ledger.database: postgresql://...``): one database that several
bank processes, on several hosts, book on at once.

A booking must behave as if the banks took turns: its funds check must see every booking of
the same buyer committed before it, and two processes must never both find a receipt "not
booked yet" (or one its void, the other its booking). Each operation is one transaction that
first *claims* what it decides on (:meth:`PostgresTx.claim`: a transaction-scoped advisory
lock on the receipt id, and on the buyer's account for a funds check), so that a second
transaction deciding on the same receipt or buyer waits for the first to commit and then, at
PostgreSQL's default READ COMMITTED, reads what it wrote. Balances move by ``balance = balance +
amount`` under the row's lock, which needs no claim. The unique keys (receipt id, a site's
reservation, one deal and one refund per receipt) stay the last guard: a transaction that
meets one a concurrent transaction just took, or a deadlock, is run again from the start after
a short random pause. Claims rather than SERIALIZABLE: serializable transactions were aborted
2 to 5 times per booking by false conflicts on the small tables' index pages with 20 agents
booking at once (bench/results/ledger.md), where claims conflict only on real contention.
Checks and copies read in one REPEATABLE READ snapshot.

Connections come from a pool (psycopg_pool) of :data:`POOL_SIZE` per process, kept open and
checked again after a failure. A database that cannot be reached is
:class:`~siteagent.ledger.LedgerUnavailable` (the service answers 503 with Retry-After; agents
keep their bookings owed and book them later). A connection lost while its transaction was
being committed leaves it unknown whether it was: a booking (idempotent) is then run again,
anything else reported as unknown. See docs/ledger.md.
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, List, Optional, Sequence, TypeVar

import psycopg
import psycopg.errors
import psycopg_pool

from siteagent.ledger.errors import LedgerUnavailable

if TYPE_CHECKING:  # storage.py opens this module: no import cycle at run time
    from siteagent.ledger.storage import Row, Tx

log = logging.getLogger("siteagent.ledger")

T = TypeVar("T")

#: Connections each bank process keeps: the service books in up to 40 threads, but a booking
#: holds a connection for a few milliseconds, and four processes of 8 stay far below
#: PostgreSQL's default max_connections of 100.
POOL_SIZE = 8
#: Seconds a booking waits for a connection (all busy, or the database unreachable) before
#: the service answers 503: well within the agent's 10 s for a booking.
CONNECT_TIMEOUT_S = 5.0
#: Runs of one transaction before a conflict that does not clear is answered 503.
ATTEMPTS = 30
#: The longest pause between two runs of a transaction PostgreSQL aborted (seconds).
MAX_BACKOFF_S = 0.05
#: Which advisory lock the schema migrations hold (an arbitrary constant: "ledger").
MIGRATION_LOCK = 0x6C6564676572

#: Aborted for a concurrent transaction: running it again is the cure.
CONFLICTS = (
    psycopg.errors.SerializationFailure,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.UniqueViolation,
)


def redacted(url: str) -> str:
    """``url`` without its password, for logs and errors."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


class PostgresTx:
    """A transaction on one pooled connection; ``?`` placeholders become psycopg's ``%s``."""

    dialect = "postgresql"

    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self._connection = connection

    def _execute(self, sql: str, params: Sequence[Any]) -> psycopg.Cursor[Any]:
        return self._connection.execute(sql.replace("?", "%s"), tuple(params))

    def one(self, sql: str, params: Sequence[Any] = ()) -> Optional[Row]:
        row = self._execute(sql, params).fetchone()
        return None if row is None else tuple(row)

    def all(self, sql: str, params: Sequence[Any] = ()) -> List[Row]:
        return [tuple(row) for row in self._execute(sql, params).fetchall()]

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._execute(sql, params)

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._connection.cursor() as cursor:
            cursor.executemany(sql.replace("?", "%s"), [tuple(row) for row in rows])

    def insert(self, sql: str, params: Sequence[Any] = ()) -> int:
        row = self._execute(sql + " RETURNING id", params).fetchone()
        assert row is not None
        return int(row[0])

    def claim(self, *keys: str) -> None:
        for key in sorted(keys):  # one order everywhere: claims never deadlock each other
            self._execute("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", (key,))


class PostgresDatabase:
    """A bank's PostgreSQL database at ``url`` (a libpq URL; the password best in a pgpass
    file, not in the URL); :class:`LedgerUnavailable` if it cannot be reached within
    ``CONNECT_TIMEOUT_S``."""

    dialect = "postgresql"

    def __init__(self, url: str, pool_size: int = POOL_SIZE) -> None:
        self.url = url
        self.conflicts = 0  # transactions run again after a conflict (bench ledger reports it)
        self._pool = psycopg_pool.ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={
                "autocommit": True,
                "connect_timeout": int(CONNECT_TIMEOUT_S),
                "application_name": "siteagent ledger",  # as pg_stat_activity shows it
            },
            timeout=CONNECT_TIMEOUT_S,
            name="siteagent-ledger",
            open=False,
        )
        self._pool.open(wait=False)
        try:
            self._pool.wait(timeout=CONNECT_TIMEOUT_S)
        except psycopg_pool.PoolTimeout:
            self._pool.close()
            raise self._unreachable("no connection could be made") from None

    def describe(self) -> str:
        return redacted(self.url)

    def close(self) -> None:
        self._pool.close()

    def _unreachable(self, why: object) -> LedgerUnavailable:
        return LedgerUnavailable(
            f"the ledger database {self.describe()} cannot be reached ({why}); nothing was "
            "booked, and the same request may be sent again (check that PostgreSQL runs and "
            "ledger.database names it)",
            code="unavailable",
        )

    def run(self, work: Callable[[Tx], T], idempotent: bool = False, snapshot: bool = False) -> T:
        level = "REPEATABLE READ READ ONLY" if snapshot else "READ COMMITTED"
        begin = f"BEGIN ISOLATION LEVEL {level}"  # whatever the database's default
        for attempt in range(ATTEMPTS):
            committing = False
            try:
                with self._pool.connection(timeout=CONNECT_TIMEOUT_S) as connection:
                    connection.execute(begin)
                    try:
                        result = work(PostgresTx(connection))
                    except BaseException:
                        _roll_back(connection)
                        raise
                    committing = True
                    connection.execute("COMMIT")
                    return result
            except CONFLICTS:
                self.conflicts += 1
                time.sleep(random.uniform(0, MAX_BACKOFF_S * min(1.0, (attempt + 1) / 8)))
            except psycopg_pool.PoolTimeout as exc:
                raise self._unreachable(exc) from None
            except psycopg.OperationalError as exc:  # the connection failed
                self._pool.check()  # drop the pooled connections that failed with it
                if committing and not idempotent:
                    raise LedgerUnavailable(
                        f"the connection to the ledger database {self.describe()} was lost "
                        f"while committing ({exc}): whether it was done is unknown; look at "
                        "the statement before doing it again",
                        code="unavailable",
                    ) from None
                if attempt >= 1:
                    raise self._unreachable(exc) from None
        raise LedgerUnavailable(
            f"the ledger database {self.describe()} aborted this transaction {ATTEMPTS} times "
            "for concurrent ones; send it again",
            code="unavailable",
        )

    @contextlib.contextmanager
    def migration_lock(self) -> Iterator[None]:
        """A session advisory lock on a connection of its own, taken before the migrating
        transaction begins (its snapshot then sees what an earlier migration committed)."""
        try:
            connection = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
        except psycopg.OperationalError as exc:
            raise self._unreachable(exc) from None
        with connection:
            connection.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
            yield
            connection.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))


def _roll_back(connection: psycopg.Connection[Any]) -> None:
    """End a failed transaction; a connection that is gone needs nothing more (the server rolls
    back what it had) and the pool discards it."""
    with contextlib.suppress(psycopg.Error):
        connection.execute("ROLLBACK")
