"""Where the bank keeps its books: the storage seam under :class:`~siteagent.ledger.Ledger`.

The bank's rules (signatures, funds, double entry, idempotence) are written once, in
``bank.py``, as functions of one transaction (:class:`Tx`). A :class:`Database` runs such a
function atomically and says which SQL dialect it speaks; there are two:

- :class:`SqliteDatabase`, the embedded default: one file, ``BEGIN IMMEDIATE`` transactions (a
  write lock taken at the start, so processes sharing the file book one at a time);
- :class:`~siteagent.ledger.postgres.PostgresDatabase` (``ledger.database:
  postgresql://...``, the ``siteagent[postgres]`` extra): transactions that claim the receipt
  and the account they decide on (:meth:`Tx.claim`), run again when PostgreSQL aborts one for a
  concurrent one, so that several bank processes on several hosts can book on one database at
  once, each booking as if the banks took turns (docs/ledger.md).

The SQL is written once with ``?`` placeholders; each database adapts it. Both databases carry
the same schema at the same version (:mod:`siteagent.ledger.schema`), migrated when opened.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path
from typing import (
    Any,
    Callable,
    ContextManager,
    List,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from siteagent.core.errors import SiteagentError
from siteagent.core.files import make_database_private, make_private
from siteagent.protocol.errors import LEDGER_DATABASE

T = TypeVar("T")

#: What a location names: a PostgreSQL URL's prefixes, and the explicit SQLite one.
POSTGRES_PREFIXES = ("postgresql://", "postgres://")
SQLITE_PREFIX = "sqlite:"

Row = Tuple[Any, ...]


class DatabaseError(SiteagentError):
    """The bank's database cannot be used as it is (its driver is not installed, its schema is
    newer than this siteagent): an administrator's problem, not a request's."""

    code = LEDGER_DATABASE


class Tx(Protocol):
    """One open transaction: SQL with ``?`` placeholders, rows as tuples."""

    dialect: str

    def one(self, sql: str, params: Sequence[Any] = ()) -> Optional[Row]: ...

    def all(self, sql: str, params: Sequence[Any] = ()) -> List[Row]: ...

    def run(self, sql: str, params: Sequence[Any] = ()) -> None: ...

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement for each row (a copy's bulk insert)."""
        ...

    def insert(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run an INSERT into a table with an ``id`` key; the id it was given."""
        ...

    def claim(self, *keys: str) -> None:
        """Hold ``keys`` (a receipt, an account) until the transaction ends: another
        transaction claiming one of them waits until this one has committed, then reads what
        it wrote. The rules claim what they read before deciding (bank.py)."""
        ...


class Database(Protocol):
    """A bank's database: runs a function of one transaction atomically."""

    dialect: str

    def run(self, work: Callable[[Tx], T], idempotent: bool = False, snapshot: bool = False) -> T:
        """``work(tx)`` in one transaction, committed unless it raises. ``idempotent``: running
        it twice has one effect (a booking), so it may be run again when the connection was
        lost while committing and nobody knows whether the first run was committed.
        ``snapshot``: a read of several queries that must all see one instant (a check)."""
        ...

    def migration_lock(self) -> ContextManager[None]:
        """Held while the schema is migrated, so that bank processes starting at once migrate
        one after the other (each transaction begins after the lock is taken)."""
        ...

    def describe(self) -> str:
        """Where the database is, for logs and errors (never a password)."""
        ...

    def close(self) -> None: ...


class SqliteTx:
    """A transaction on an SQLite connection."""

    dialect = "sqlite"

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def one(self, sql: str, params: Sequence[Any] = ()) -> Optional[Row]:
        row = self._db.execute(sql, tuple(params)).fetchone()
        return None if row is None else tuple(row)

    def all(self, sql: str, params: Sequence[Any] = ()) -> List[Row]:
        return [tuple(row) for row in self._db.execute(sql, tuple(params)).fetchall()]

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._db.execute(sql, tuple(params))

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._db.executemany(sql, [tuple(row) for row in rows])

    def insert(self, sql: str, params: Sequence[Any] = ()) -> int:
        return int(self._db.execute(sql, tuple(params)).lastrowid or 0)

    def claim(self, *keys: str) -> None:
        """Nothing to do: BEGIN IMMEDIATE holds the whole file's write lock already."""


class SqliteDatabase:
    """One SQLite file (``:memory:`` for tests), private to its owner (0600, with SQLite's
    files beside it); every transaction ``BEGIN IMMEDIATE``, synced to disk at commit."""

    dialect = "sqlite"

    def __init__(self, path: Union[str, Path] = ":memory:") -> None:
        self.path = str(path)
        if self.path != ":memory:":
            make_private(Path(path).parent, directory=True)
            make_database_private(path)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA foreign_keys = ON")
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = FULL")  # money: a booked deal survives power loss
        self._lock = threading.Lock()

    def run(self, work: Callable[[Tx], T], idempotent: bool = False, snapshot: bool = False) -> T:
        # IMMEDIATE takes the write lock at the start, so that two processes sharing the file
        # cannot both read "not booked yet" and then both book.
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                result = work(SqliteTx(self._db))
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return result

    def migration_lock(self) -> ContextManager[None]:
        return contextlib.nullcontext()  # BEGIN IMMEDIATE already serializes the migrations

    def describe(self) -> str:
        return f"sqlite:{self.path}"

    def close(self) -> None:
        self._db.close()


def is_postgres(location: str) -> bool:
    return location.startswith(POSTGRES_PREFIXES)


def open_database(location: Union[str, Path]) -> Database:
    """The database ``location`` names: a PostgreSQL URL (``postgresql://...``, needs the
    ``siteagent[postgres]`` extra), ``sqlite:PATH``, or an SQLite file's path."""
    text = str(location)
    if is_postgres(text):
        try:
            from siteagent.ledger.postgres import PostgresDatabase  # an optional extra
        except ImportError as exc:
            raise DatabaseError(
                f"a bank on PostgreSQL needs psycopg ({exc}): pip install 'siteagent[postgres]'"
            ) from None
        return PostgresDatabase(text)
    if text.startswith(SQLITE_PREFIX):
        text = text[len(SQLITE_PREFIX) :]
    return SqliteDatabase(text)
