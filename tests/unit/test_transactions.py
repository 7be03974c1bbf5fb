"""One SQLite write transaction: synced to disk unless it is not durable, and the next durable
one synced again (the level belongs to the connection, so each transaction sets its own)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from siteagent.core.transactions import immediate

NORMAL, FULL = 1, 2  # what PRAGMA synchronous reads


def test_each_transaction_runs_at_its_own_level(tmp_path: Path) -> None:
    db = sqlite3.connect(str(tmp_path / "t.db"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (x INTEGER)")
    lock = threading.Lock()
    seen = []
    for durable in (False, True, False, False, True):
        with immediate(db, lock, RuntimeError, durable=durable) as tx:
            seen.append(tx.execute("PRAGMA synchronous").fetchone()[0])
            tx.execute("INSERT INTO t VALUES (1)")
    assert seen == [NORMAL, FULL, NORMAL, NORMAL, FULL]
    assert db.execute("SELECT count(*) FROM t").fetchone()[0] == 5


def test_a_failed_transaction_writes_nothing_at_either_level(tmp_path: Path) -> None:
    db = sqlite3.connect(str(tmp_path / "t.db"), isolation_level=None)
    db.execute("CREATE TABLE t (x INTEGER)")
    for durable in (True, False):
        with (
            pytest.raises(LookupError),
            immediate(db, threading.Lock(), RuntimeError, durable=durable) as tx,
        ):
            tx.execute("INSERT INTO t VALUES (1)")
            raise LookupError("the caller failed half way")
    assert db.execute("SELECT count(*) FROM t").fetchone()[0] == 0
