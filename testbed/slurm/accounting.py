"""Use this when a Slurm test needs real accounting (mariadbd and slurmdbd).

Real Slurm accounting for the test cluster: a private mariadbd and slurmdbd.

``SlurmAccounting`` runs Debian's ``mariadb-server`` as a plain process (own datadir, unix
socket and a TCP port on 127.0.0.1, no systemd) and ``slurmdbd`` with
``StorageType=accounting_storage/mysql`` beside it. ``SlurmTestCluster(accounting=True)`` starts
it before slurmctld and adds ``AccountingStorageType=accounting_storage/slurmdbd`` to its
slurm.conf; the other Slurm tests run without it, so they keep starting in seconds.

slurmdbd reads ``slurmdbd.conf`` from the directory of ``SLURM_CONF`` and refuses it unless it
is mode 600 and owned by SlurmUser (root here). slurmdbd talks to the database over TCP, so no
client option file (``/etc/mysql``) decides which socket it uses. Both daemons are stopped by
PID. Needs root and ``mariadb-server slurmdbd`` (tests/setup/install-system-deps, or in the
chroot of the cluster's ``install``: testbed/slurm/install.py, whose paths and users it uses).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

from testbed.processes.ports import free_ports
from testbed.slurm.cluster import ClusterError, _pid_alive, _tail
from testbed.slurm.install import SlurmInstall, host_series

#: Programs accounting needs beyond the cluster's own.
ACCOUNTING_BINARIES = ("mariadb-install-db", "mariadbd", "mariadb", "slurmdbd", "sacctmgr", "sacct")


def missing_accounting_binaries(install: Optional[SlurmInstall] = None) -> List[str]:
    """Names of accounting programs ``install`` (the host's by default) lacks."""
    return (install or SlurmInstall(host_series())).missing(ACCOUNTING_BINARIES)


class SlurmAccounting:
    """mariadbd + slurmdbd under ``base`` (the cluster's directory), configured from ``env``
    (``SLURM_CONF`` says where slurmdbd.conf goes)."""

    def __init__(
        self,
        base: Path,
        env: Dict[str, str],
        install: Optional[SlurmInstall] = None,
        timeout: float = 120.0,
    ) -> None:
        self.base = base
        self.env = env
        self.install = install or SlurmInstall(host_series())
        self.timeout = timeout
        self.db_dir = base / "mariadb"
        self.db_port = 0
        self.dbd_port = 0
        self._password = secrets.token_hex(12)
        self._mariadbd: Optional[subprocess.Popen[bytes]] = None
        self.startup_seconds = 0.0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Initialise and start mariadbd, create the database user, start slurmdbd and wait
        until it listens. Raises ClusterError with the log tails when a step fails."""
        missing = missing_accounting_binaries(self.install)
        if missing:
            raise ClusterError(
                "missing accounting programs: "
                + ", ".join(missing)
                + " (run tests/setup/install-system-deps)"
            )
        t0 = time.monotonic()
        self.db_port, self.dbd_port = free_ports(2)
        self._start_mariadb()
        self._create_user()
        self._start_slurmdbd()
        self.startup_seconds = time.monotonic() - t0

    def _start_mariadb(self) -> None:
        # mariadbd runs as mysql and must create its socket and files in here
        (self.db_dir / "data").mkdir(parents=True)
        uid, gid = self.install.ids("mysql")
        os.chown(self.db_dir, uid, gid)
        os.chown(self.db_dir / "data", uid, gid)
        db_dir = self.install.inside(self.db_dir)
        install = subprocess.run(
            self.install.daemon(
                [
                    "mariadb-install-db",
                    "--no-defaults",
                    "--user=mysql",
                    f"--datadir={db_dir}/data",
                    "--auth-root-authentication-method=socket",
                    "--skip-test-db",
                ]
            ),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if install.returncode != 0:
            raise ClusterError(f"mariadb-install-db failed: {install.stderr.strip()[-2000:]}")
        # the child keeps its own copy of the log's descriptor
        with open(self.db_dir / "mariadbd.out", "wb") as log:
            self._mariadbd = subprocess.Popen(
                self.install.daemon(
                    [
                        "mariadbd",
                        "--no-defaults",
                        "--user=mysql",
                        f"--datadir={db_dir}/data",
                        f"--socket={db_dir}/mysqld.sock",
                        f"--port={self.db_port}",
                        "--bind-address=127.0.0.1",
                        f"--pid-file={db_dir}/mariadbd.pid",
                        "--skip-name-resolve",
                        "--innodb-buffer-pool-size=64M",
                        "--innodb-log-file-size=16M",
                    ]
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait(
            "mariadbd to answer",
            lambda: self.sql("SELECT 1", check=False) == 0,
            self.db_dir / "mariadbd.out",
        )

    @property
    def socket(self) -> Path:
        return self.db_dir / "mysqld.sock"

    def sql(self, statement: str, check: bool = True) -> int:
        """Run one statement as the database's root over the unix socket; the exit status."""
        proc = subprocess.run(
            self.install.command(
                [
                    "mariadb",
                    "--no-defaults",
                    f"--socket={self.install.inside(self.socket)}",
                    "-u",
                    "root",
                    "-e",
                    statement,
                ]
            ),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if check and proc.returncode != 0:
            raise ClusterError(f"mariadb: {statement!r} failed: {proc.stderr.strip()}")
        return proc.returncode

    def _create_user(self) -> None:
        self.sql("CREATE DATABASE slurm_acct_db")
        self.sql(f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{self._password}'")
        self.sql("GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'")

    def _start_slurmdbd(self) -> None:
        conf = self.base / "slurmdbd.conf"
        conf.write_text(
            "\n".join(
                [
                    "AuthType=auth/munge",
                    "DbdHost=localhost",
                    "DbdAddr=127.0.0.1",
                    f"DbdPort={self.dbd_port}",
                    "SlurmUser=root",
                    "DebugLevel=info",
                    f"LogFile={self.install.inside(self.base)}/log/slurmdbd.log",
                    f"PidFile={self.install.inside(self.base)}/slurmdbd.pid",
                    "StorageType=accounting_storage/mysql",
                    "StorageHost=127.0.0.1",
                    f"StoragePort={self.db_port}",
                    "StorageUser=slurm",
                    f"StoragePass={self._password}",
                    "StorageLoc=slurm_acct_db",
                    "",
                ]
            )
        )
        conf.chmod(0o600)
        proc = subprocess.run(
            self.install.daemon(["slurmdbd"]),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if proc.returncode != 0:
            raise ClusterError(f"slurmdbd exited {proc.returncode}: {proc.stderr.strip()}")
        # sacctmgr cannot ask yet (slurm.conf, which tells it the port, comes later): poll TCP
        self._wait("slurmdbd to listen", self._dbd_listens, self.base / "log" / "slurmdbd.log")

    def _dbd_listens(self) -> bool:
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", self.dbd_port), timeout=1),
        ):
            return True
        return False

    def conf_lines(self) -> List[str]:
        """What slurm.conf needs to send job records to this slurmdbd."""
        return [
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=127.0.0.1",
            f"AccountingStoragePort={self.dbd_port}",
        ]

    def add_cluster(self, name: str) -> None:
        """Register the cluster, so slurmctld's job records are stored from its first job."""
        try:
            proc = subprocess.run(
                self.install.command(["sacctmgr", "-i", "add", "cluster", name]),
                env=self.env,
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ClusterError(f"sacctmgr add cluster {name}: no answer in 30 s") from exc
        if proc.returncode != 0:
            raise ClusterError(f"sacctmgr add cluster {name}: {proc.stderr.strip()}")

    def _wait(self, what: str, ready: Callable[[], bool], log: Path) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if ready():
                return
            if self._mariadbd is not None and self._mariadbd.poll() is not None:
                break
            time.sleep(0.2)
        raise ClusterError(f"timed out waiting for {what}:\n{_tail(log)}")

    def stop(self) -> None:
        """Stop slurmdbd (by its pid file), then mariadbd; wait for both."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((self.base / "slurmdbd.pid").read_text().split()[0])
            _terminate(pid)
        if self._mariadbd is not None and self._mariadbd.poll() is None:
            self._mariadbd.send_signal(signal.SIGTERM)
            try:
                self._mariadbd.wait(30)
            except subprocess.TimeoutExpired:
                self._mariadbd.kill()
                self._mariadbd.wait()


def _terminate(pid: int) -> None:
    """SIGTERM, wait up to 15 s, then SIGKILL."""
    if not _pid_alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
