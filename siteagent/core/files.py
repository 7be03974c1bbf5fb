"""File modes: the files the agent trusts, and the files it keeps to itself.

A file the agent trusts decides who may do what: the configuration, the authorized-clients
file (which key reserves as which scheduler user), the bank's participants, a private key. If
its group or everybody may write it, anyone on the host can give themselves those rights, so
the agent refuses it, as ssh refuses such an ``authorized_keys``: the error names the file, its
mode and the ``chmod`` that fixes it (:func:`check_not_writable_by_others`, called where each
file is read).

What the agent writes in its state directory (databases, the ledger, keys, the replayed
cluster) is for its user alone: the directory is made 0700 and each file 0600, whatever the
umask and whatever mode an older siteagent left them with (:func:`make_private`).
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path
from typing import Union

from siteagent.core.errors import SiteagentError

#: The mode of every file the agent keeps: its user may read and write it, nobody else.
PRIVATE_FILE = 0o600
#: The mode of a directory the agent makes for itself.
PRIVATE_DIRECTORY = 0o700

#: The files SQLite keeps beside a database in WAL mode.
SQLITE_COMPANIONS = ("-wal", "-shm")


class UnsafeFile(SiteagentError, ValueError):
    """A trusted file that others may write. The message names the file; ``reason`` is the
    rest (its mode, who may write it, the fix), for reports that name the file already."""

    code = "unsafe_file_mode"

    def __init__(self, path: Union[str, Path], reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.reason = reason


def check_not_writable_by_others(path: Union[str, Path], what: str) -> None:
    """Raise UnsafeFile if the group or others may write ``path`` (the file a link points
    to: that is what is read). ``what`` says what the file is, for the message."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    bits = (("group", stat.S_IWGRP), ("others", stat.S_IWOTH))
    writers = [who for who, bit in bits if mode & bit]
    if writers:
        raise UnsafeFile(
            path,
            f"the {what} is mode {mode:04o}, so {' and '.join(writers)} may change it; "
            f"refusing it (fix: chmod go-w {shlex.quote(str(path))})",
        )


def make_private(path: Union[str, Path], directory: bool = False) -> None:
    """Create ``path`` if missing (a directory with its parents, or an empty file) and leave it
    to its owner alone: 0600 for a file, whatever the umask or an earlier mode.

    A directory that exists already keeps its mode: ``state_dir`` may name one that is not
    the agent's alone, whose mode is not the agent's to change; one it creates is 0700.
    """
    if directory:
        Path(path).mkdir(mode=PRIVATE_DIRECTORY, parents=True, exist_ok=True)
        return
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, PRIVATE_FILE)
    try:
        os.fchmod(fd, PRIVATE_FILE)
    finally:
        os.close(fd)


def make_database_private(path: Union[str, Path]) -> None:
    """A SQLite database file made private before SQLite opens it. SQLite creates the -wal
    and -shm files with the database's mode, so they are private too; any an older siteagent
    left behind are made so here."""
    make_private(path)
    for companion in (f"{path}{suffix}" for suffix in SQLITE_COMPANIONS):
        if os.path.exists(companion):
            make_private(companion)
