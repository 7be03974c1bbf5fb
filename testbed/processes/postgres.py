"""Use this when a bank test or benchmark needs a private, real PostgreSQL.

A private, real PostgreSQL server on localhost for the bank's tests and benchmark.

``PostgresTestServer`` makes a fresh data directory with Debian's ``initdb`` in a temporary
directory, and runs ``postgres`` on it listening on 127.0.0.1 at a port picked at run time,
its Unix socket in the same directory: nothing outside it is touched, and several servers
(other engineers', other sessions') can run at once. PostgreSQL refuses to run as root, so
under root the directory belongs to Debian's ``postgres`` user and the server runs as that
user; otherwise it runs as whoever runs the tests.

Authentication is ``trust`` for the one superuser (``siteagent``) on loopback only: the server
holds test data and lives as long as the test session. ``fsync=off`` for speed (a crash of
the machine loses a test's data, nothing else); every other setting is PostgreSQL's default,
SERIALIZABLE behaviour included. :meth:`database` makes an empty database for a test;
:meth:`restart` and :meth:`stop` stop it as an administrator would (fast shutdown: sessions
are cut, transactions in flight roll back).

Needs Debian's ``postgresql`` package (tests/setup/install-system-deps).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional

from testbed.processes.ports import free_port

#: The superuser the tests connect as.
USER = "siteagent"
#: Seconds the server may take to accept connections, on a busy two-core machine.
START_TIMEOUT_S = 60.0


class PostgresError(Exception):
    """The server could not be set up or started; the message names the log."""


def binaries() -> Optional[Path]:
    """The directory of the newest installed server's programs (Debian keeps them out of
    PATH, in /usr/lib/postgresql/VERSION/bin), or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/postgres"),
        key=lambda path: int(Path(path).parts[-3]) if Path(path).parts[-3].isdigit() else 0,
    )
    return Path(found[-1]).parent if found else None


def unavailable_reason() -> str:
    """Why no server can run here ("" if one can)."""
    if binaries() is None:
        return "PostgreSQL is not installed; run tests/setup/install-system-deps"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root, and no 'postgres' user to run the server as"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed: pip install -e '.[postgres]'"
    return ""


class PostgresTestServer:
    """One server in a temporary directory of its own (see the module's docstring)."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="siteagent-pg-"))
        self.data = self.directory / "data"
        self.log = self.directory / "postgres.log"
        self.port = 0
        self.process: Optional[subprocess.Popen[bytes]] = None
        bindir = binaries()
        if bindir is None:
            raise PostgresError(unavailable_reason())
        self.bindir = bindir
        self._as: Dict[str, Any] = {}
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.directory, owner.pw_uid, owner.pw_gid)
            self._as = {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}
        os.chmod(self.directory, 0o700)

    # ---- life cycle

    def start(self) -> None:
        """initdb (the first time), then the server; waits until it accepts connections."""
        if not self.data.exists():
            self._run(
                [
                    str(self.bindir / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    USER,
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                ]
            )
        if not self.port:
            self.port = free_port()
        log = open(self.log, "ab")  # noqa: SIM115 (the server keeps writing to it)
        if self._as:
            os.chown(self.log, self._as["user"], self._as["group"])
        command = [
            str(self.bindir / "postgres"),
            "-D",
            str(self.data),
            "-p",
            str(self.port),
            "-k",
            str(self.directory),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=100",
        ]
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **self._as
        )
        log.close()
        self._wait_ready()

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise PostgresError(
                    f"postgres exited with {self.process.returncode}: {self.tail()}"
                )
            try:
                psycopg.connect(self.url("postgres"), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise PostgresError(
                        f"postgres did not accept connections in {START_TIMEOUT_S:g} s: "
                        f"{self.tail()}"
                    ) from None
                time.sleep(0.2)

    def stop(self) -> None:
        """Fast shutdown (SIGINT): sessions are cut, their transactions roll back."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self) -> None:
        """Stop and start again on the same port and data (an administrator's restart)."""
        self.stop()
        self.start()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    # ---- databases

    def url(self, database: str, schema: Optional[str] = None) -> str:
        """A libpq URL of ``database``; ``schema`` as its search path (a test's own tables)."""
        url = f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"
        return url + (f"?options=-csearch_path%3D{schema}" if schema else "")

    def database(self, prefix: str = "bank") -> str:
        """A new, empty database; its URL."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')  # a name we made: no user input
        return self.url(name)

    def schema(self, database: str = "postgres") -> str:
        """A new, empty schema in ``database`` (cheaper than a database, for unit tests);
        the URL whose connections use it."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(database), autocommit=True) as connection:
            connection.execute(f'CREATE SCHEMA "{name}"')
        return self.url(database, name)

    def tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return f"(no log at {self.log})"

    def _run(self, command: List[str]) -> None:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, **self._as)
        if done.returncode != 0:
            raise PostgresError(f"{command[0]} failed: {done.stdout}{done.stderr}")
