"""One SQLite write transaction, as the agent's store and the client's journal both take them.

Both databases are written from several threads through one connection: the lock serialises
them, ``BEGIN IMMEDIATE`` takes the write lock at once (two processes never deadlock upgrading a
read), and any failure rolls back so that nothing half-written is ever committed. An SQLite error
becomes the caller's own error, which names the file.

**Durable or not.** Both databases are WAL files opened ``synchronous=FULL``: a commit is on disk
when it returns. A transaction that is not ``durable`` commits without that fsync
(``synchronous=NORMAL``): a crash of the process loses nothing (the kernel has the write), a power
loss may, until the next durable commit, whose fsync of the WAL (one file, appended in order)
covers every frame before it. A write may skip its sync only where losing it to a power loss is
harmless: what it records is learnt again (an answer, which a retry with the same idempotency key
gets again) or nobody can rely on it once it is gone (a bid, whose offer is then unknown). Each
such write says why.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Callable, ContextManager, Iterator

#: How a durable commit is written (the databases' default), and one that is not.
SYNCED, UNSYNCED = "PRAGMA synchronous=FULL", "PRAGMA synchronous=NORMAL"


@contextlib.contextmanager
def immediate(
    db: sqlite3.Connection,
    lock: ContextManager[object],
    failed: Callable[[sqlite3.Error], Exception],
    durable: bool = True,
) -> Iterator[sqlite3.Connection]:
    """Yield ``db`` inside one committed write transaction, synced to disk if ``durable``;
    raise ``failed(error)`` on an SQLite error."""
    with lock:
        try:
            db.execute(SYNCED if durable else UNSYNCED)
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise failed(exc) from exc
