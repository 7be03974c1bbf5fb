"""The nonces a restart must not forget: those of signatures dated ahead of the clock.

A signature is accepted once, by its nonce, while the service runs; its nonces live in memory
(:class:`~siteagent.security.authentication.NonceCache`). After a restart the service refuses
every signature dated before it started, which covers every signature whose ``created`` was
before the second it was accepted in. Two kinds are left, and kept here, in the state
directory, before the request is answered:

- a signature dated ahead (clocks differ: up to 30 s is accepted): one accepted at 12:00:00
  with ``created`` 12:00:20 would be accepted again after a restart at 12:00:02. Its nonce is
  written, and read back at start; a buyer whose clock is not ahead costs nothing;
- a signature dated in the second it was accepted, when the service restarts within that
  same second: the last second in which a signature was accepted is written (once a second
  at most), and a service starting in it refuses signatures of that second too.

The file is SQLite beside the agent's database (``nonces.sqlite3``, 0600), written without
waiting for the disk: a crash of the process loses nothing, a power loss at most the last
moment's writes, which a replay must then also beat the restart to use.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import List, Optional, Tuple

from siteagent.core.files import make_database_private, make_private

#: The file's name in the state directory.
NONCES_FILE = "nonces.sqlite3"

#: Nonces written between two clean-ups of those past their time.
PRUNE_EVERY = 1000


class SavedNonces:
    """The file of nonces of signatures dated ahead (see the module's docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        make_private(path.parent, directory=True)
        make_database_private(path)
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        self._added = 0
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS nonces (client TEXT NOT NULL, nonce TEXT NOT NULL, "
            "until REAL NOT NULL, PRIMARY KEY (client, nonce))"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS last_use (id INTEGER PRIMARY KEY CHECK (id = 0), "
            "second INTEGER NOT NULL)"
        )

    def used_in(self, second: int) -> None:
        """A signature was accepted in ``second`` (epoch seconds)."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO last_use (id, second) VALUES (0, ?)", (second,)
            )

    def last_used(self) -> Optional[int]:
        """The last second a signature was accepted in, None if never."""
        with self._lock:
            row = self._db.execute("SELECT second FROM last_use WHERE id = 0").fetchone()
        return None if row is None else int(row[0])

    def add(self, client: str, nonce: str, until: float, now: float) -> None:
        """Keep ``client``'s ``nonce`` until ``until`` (epoch seconds); every so often the
        nonces past their time (at ``now``) are forgotten, so the file stays small."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO nonces (client, nonce, until) VALUES (?, ?, ?)",
                (client, nonce, until),
            )
            self._added += 1
            if self._added % PRUNE_EVERY == 0:
                self._db.execute("DELETE FROM nonces WHERE until <= ?", (now,))

    def live(self, now: float) -> List[Tuple[str, str, float]]:
        """(client, nonce, until) of every nonce kept past ``now``; the rest are forgotten."""
        with self._lock:
            self._db.execute("DELETE FROM nonces WHERE until <= ?", (now,))
            rows = self._db.execute("SELECT client, nonce, until FROM nonces").fetchall()
        return [(str(client), str(nonce), float(until)) for client, nonce, until in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()
