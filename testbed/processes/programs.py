"""Use this when a test needs a system program, or waits for/stops a process.

Processes the tests start: system programs (Prometheus, promtool, systemd-analyze), where
they are or why the test cannot run, and the agent's own server process.

Like the Slurm cluster (tests/conftest.py): under CI (CI=true) a missing program fails the
test with the reason, because those tests are the point of CI; on a developer machine without
the Debian packages the test is skipped with the same reason.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from typing import Any, Dict, Iterator, Optional

import pytest

from testbed.pbs.cluster import PbsClusterError, PbsTestCluster, unavailable_reason
from testbed.processes import postgres
from testbed.slurm.accounting import missing_accounting_binaries
from testbed.slurm.cluster import (
    ClusterError,
    SlurmTestCluster,
    missing_binaries,
)
from testbed.slurm.install import SlurmInstall, install_for

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

#: How long a started process may take to answer, on a busy two-core CI machine.
START_TIMEOUT_S = 60.0


def unavailable(reason: str) -> None:
    """Skip the test with ``reason``; under CI fail it: what CI is for must not be skipped."""
    if IN_CI:
        pytest.fail(f"under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def slurm_install(series: str) -> SlurmInstall:
    """Where Slurm ``series`` runs (testbed/slurm/install.py); skips (or, under CI, fails)
    when its chroot has not been built."""
    try:
        return install_for(series)
    except LookupError as exc:
        unavailable(str(exc))
        raise


def running_slurm(
    accounting: bool = False, install: Optional[SlurmInstall] = None, **options: Any
) -> Iterator[SlurmTestCluster]:
    """A started Slurm test cluster of ``install``'s release (the host's by default; with
    slurmdbd if ``accounting``, and the other :class:`SlurmTestCluster` ``options``: its
    ``shape``, extra configuration, ...), stopped afterwards; skips (or, under CI, fails) with
    the reason when it cannot run or start here."""
    missing = missing_binaries(install) + (
        missing_accounting_binaries(install) if accounting else []
    )
    if os.geteuid() != 0:
        reason = "the Slurm test cluster needs root (slurmd runs jobs as users)"
    elif missing:
        reason = f"missing {', '.join(missing)}; run tests/setup/install-system-deps"
    else:
        reason = ""
    if reason:
        unavailable(f"Slurm test cluster: {reason}")
    cluster = SlurmTestCluster(accounting=accounting, install=install, **options)
    try:
        cluster.start()
    except ClusterError as exc:
        pytest.fail(f"Slurm test cluster did not start: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


def running_pbs() -> Iterator[PbsTestCluster]:
    """A started OpenPBS test cluster (4 hosts of 16 CPUs, queue ``workq``), stopped
    afterwards; skips (or, under CI, fails) with the reason when it cannot run or start here."""
    reason = unavailable_reason()
    if reason:
        if IN_CI:
            pytest.fail(f"OpenPBS test cluster unavailable under CI: {reason}", pytrace=False)
        pytest.skip(reason)
    cluster = PbsTestCluster()
    try:
        cluster.start()
    except PbsClusterError as exc:
        pytest.fail(f"OpenPBS test cluster did not start: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


def running_postgres() -> Iterator[postgres.PostgresTestServer]:
    """A started PostgreSQL (testbed/processes/postgres.py), removed afterwards; skips (or, under
    CI,
    fails) with the reason when it cannot run or start here."""
    reason = postgres.unavailable_reason()
    if reason:
        if IN_CI:
            pytest.fail(f"PostgreSQL unavailable under CI: {reason}", pytrace=False)
        pytest.skip(reason)
    server = postgres.PostgresTestServer()
    try:
        server.start()
    except postgres.PostgresError as exc:
        server.remove()
        pytest.fail(f"PostgreSQL did not start: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.remove()


def require_postgres_driver() -> None:
    """Skips (or, under CI, fails) the test unless psycopg, the postgres extra, is installed."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        reason = "psycopg is not installed: pip install -e '.[postgres]'"
        if IN_CI:
            pytest.fail(f"under CI: {reason}", pytrace=False)
        pytest.skip(reason)


def require_programs(*names: str) -> Dict[str, str]:
    """The paths of these programs; skips (or, under CI, fails) the test if one is missing."""
    found = {name: shutil.which(name) for name in names}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        reason = (
            f"missing {', '.join(missing)}; run tests/setup/install-system-deps "
            "(Debian packages prometheus, systemd, lua5.1)"
        )
        if IN_CI:
            pytest.fail(f"under CI: {reason}", pytrace=False)
        pytest.skip(reason)
    return {name: path for name, path in found.items() if path is not None}


def wait_until(what: str, check: Any, timeout: float = START_TIMEOUT_S) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
        except OSError:
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}", pytrace=False)
        time.sleep(0.2)


def stop(process: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
    """SIGTERM to this PID, then wait (SIGKILL only if it ignores that)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
