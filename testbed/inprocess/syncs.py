"""Use this when a test checks which SQLite commits wait for the disk.

Which commits of an SQLite connection wait for the disk: the ``synchronous`` level each
``COMMIT`` ran at, read off the statements the connection runs
(:mod:`siteagent.core.transactions` sets it before each transaction)."""

from __future__ import annotations

import sqlite3
from typing import List


def commit_levels(db: sqlite3.Connection) -> List[str]:
    """From now on, the level ("FULL": synced, "NORMAL": not) of each commit on ``db``, in
    the order they are made; a commit with no level set before it is "unset"."""
    levels: List[str] = []
    current = ["unset"]

    def traced(statement: str) -> None:
        if statement.startswith("PRAGMA synchronous="):
            current[0] = statement.split("=", 1)[1]
        elif statement == "COMMIT":
            levels.append(current[0])

    db.set_trace_callback(traced)
    return levels
