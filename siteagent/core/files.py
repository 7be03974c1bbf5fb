"""File modes: the files the agent trusts, and the files it keeps to itself.

A file the agent trusts decides who may do what: the configuration, the authorized-clients
file (which key reserves as which scheduler user), the bank's participants, a private key. If
anyone but root and the agent's own user may change it, anyone on the host can give themselves
those rights, so the agent refuses it, as ssh's StrictModes refuses such an
``authorized_keys``: a file owned by another user, writable by its group or by everybody, or
in a directory (or a directory above it) that another user owns or that its group or
everybody may write, where the file could be replaced. A directory everybody may write with
the sticky bit (``/tmp``) is accepted when root owns it: there nobody may rename or remove
what another user owns. The error names the file (or the directory), what is wrong and the
``chmod`` or ``chown`` that fixes it (:func:`check_not_writable_by_others`, called where each
file is read).

What the agent writes in its state directory (databases, the ledger, keys, the replayed
cluster) is for its user alone: the directory is made 0700 and each file 0600, whatever the
umask and whatever mode an older siteagent left them with (:func:`make_private`).
"""

from __future__ import annotations

import os
import pwd
import shlex
import stat
from pathlib import Path
from typing import List, Union

from siteagent.core.errors import SiteagentError

#: The mode of every file the agent keeps: its user may read and write it, nobody else.
PRIVATE_FILE = 0o600
#: The mode of a directory the agent makes for itself.
PRIVATE_DIRECTORY = 0o700

#: The files SQLite keeps beside a database in WAL mode.
SQLITE_COMPANIONS = ("-wal", "-shm")


class UnsafeFile(SiteagentError, ValueError):
    """A trusted file that others may change. The message names the file; ``reason`` is the
    rest (its mode or owner, or its directory's, who may change it, the fix), for reports
    that name the file already."""

    code = "unsafe_file_mode"

    def __init__(self, message: str, *, path: Union[str, Path]) -> None:
        super().__init__(f"{path}: {message}")
        self.reason = message


def check_not_writable_by_others(path: Union[str, Path], what: str) -> None:
    """Raise UnsafeFile if anyone but root and this process's user may change ``path`` (the
    file a link points to: that is what is read): see the module's docstring. ``what`` says
    what the file is, for the message."""
    real = Path(os.path.realpath(path))
    info = os.stat(real)
    mode = stat.S_IMODE(info.st_mode)
    _check_owner(path, info.st_uid, what, "")
    writers = _writers(mode)
    if writers:
        raise UnsafeFile(
            f"the {what} is mode {mode:04o}, so {' and '.join(writers)} may change it; "
            f"refusing it (fix: chmod go-w {shlex.quote(str(path))})",
            path=path,
        )
    for directory in real.parents:
        _check_directory(path, directory, what)


def _check_owner(path: Union[str, Path], uid: int, what: str, where: str) -> None:
    """Refuse ``what`` (or the directory ``where`` it is in) owned by another user."""
    if uid in (0, os.geteuid()):
        return
    named = where or str(path)
    trusted = "root" if os.geteuid() == 0 else f"root or {_user(os.geteuid())} (who reads it)"
    raise UnsafeFile(
        f"{'its directory ' + where if where else 'the ' + what} is owned by "
        f"{_user(uid)}, not by {trusted}, so {_user(uid)} may change the {what}; refusing it "
        f"(fix: chown root {shlex.quote(named)})",
        path=path,
    )


def _check_directory(path: Union[str, Path], directory: Path, what: str) -> None:
    """Refuse ``what`` if ``directory`` (one it is in) lets another user replace it."""
    info = os.stat(directory)
    _check_owner(path, info.st_uid, what, str(directory))
    mode = stat.S_IMODE(info.st_mode)
    if mode & stat.S_ISVTX and info.st_uid == 0:
        return  # sticky, root's: nobody may rename or remove what another owns there
    writers = _writers(mode)
    if writers:
        raise UnsafeFile(
            f"its directory {directory} is mode {mode:04o}, so {' and '.join(writers)} may "
            f"replace the {what}; refusing it (fix: chmod go-w {shlex.quote(str(directory))})",
            path=path,
        )


def _writers(mode: int) -> List[str]:
    """Who besides the owner may write by ``mode``: "group", "others", both or neither."""
    bits = (("group", stat.S_IWGRP), ("others", stat.S_IWOTH))
    return [who for who, bit in bits if mode & bit]


def _user(uid: int) -> str:
    """A user's name (its uid if the system knows no name for it)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


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
