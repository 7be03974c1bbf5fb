"""One SQLite write transaction, as the agent's store and the client's journal both take them.

Both databases are written from several threads through one connection: the lock serialises
them, ``BEGIN IMMEDIATE`` takes the write lock at once (two processes never deadlock upgrading a
read), and any failure rolls back so that nothing half-written is ever committed. An SQLite error
becomes the caller's own error, which names the file.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Callable, ContextManager, Iterator


@contextlib.contextmanager
def immediate(
    db: sqlite3.Connection,
    lock: ContextManager[object],
    failed: Callable[[sqlite3.Error], Exception],
) -> Iterator[sqlite3.Connection]:
    """Yield ``db`` inside one committed write transaction; raise ``failed(error)`` on an
    SQLite error."""
    with lock:
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise failed(exc) from exc
