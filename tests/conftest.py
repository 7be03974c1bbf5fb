"""Shared fixtures. Only fixtures used by several test modules belong here.

The real Slurm cluster, the real OpenPBS and the bank's real PostgreSQL are each started once
per session, the Slurm one once per Slurm release: ``slurm_version`` is each release
``SLURM_VERSIONS`` selects (default every one: the host's 22.05, and 24.11 and 26.05 from their
chroots, testbed/slurm/install.py), so every test that uses a Slurm cluster runs on each. Under
CI (CI=true) a cluster that cannot come up fails every test that needs it, with the reason: the
integration tests are the point of CI and must never be skipped silently. On a developer machine
without root, the Slurm packages (or chroots), the OpenPBS build or PostgreSQL the same tests
are skipped with the reason instead.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

from testbed.compiled import stale_compiled_modules
from testbed.pbs.cluster import PbsTestCluster
from testbed.processes.postgres import PostgresTestServer
from testbed.processes.programs import running_pbs, running_postgres, running_slurm, slurm_install
from testbed.slurm.cluster import SlurmTestCluster
from testbed.slurm.install import SlurmInstall, host_series, selected_series


@pytest.fixture(scope="session", params=selected_series())
def slurm_version(request: pytest.FixtureRequest) -> SlurmInstall:
    """Each selected Slurm release in turn, where its programs run (host or chroot)."""
    return slurm_install(request.param)


@pytest.fixture(scope="session")
def slurm_cluster(slurm_version: SlurmInstall) -> Iterator[SlurmTestCluster]:
    """A running 4-node Slurm cluster (n1..n4, 16 cores each, partition ``batch``) of each
    selected release."""
    yield from running_slurm(install=slurm_version)


@pytest.fixture
def slurm(slurm_cluster: SlurmTestCluster) -> Iterator[SlurmTestCluster]:
    """The session cluster, emptied of jobs and reservations before and after the test."""
    slurm_cluster.reset()
    yield slurm_cluster
    slurm_cluster.reset()


@pytest.fixture(scope="session")
def openpbs_cluster() -> Iterator[PbsTestCluster]:
    """A running OpenPBS (n1..n4, 16 CPUs each, queue ``workq``; testbed/pbs/cluster.py)."""
    yield from running_pbs()


@pytest.fixture
def openpbs(openpbs_cluster: PbsTestCluster) -> Iterator[PbsTestCluster]:
    """The session's OpenPBS, emptied of jobs and reservations before and after the test."""
    openpbs_cluster.reset()
    yield openpbs_cluster
    openpbs_cluster.reset()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresTestServer]:
    """A running PostgreSQL in a private directory on a free port
    (testbed/processes/postgres.py)."""
    yield from running_postgres()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def ledger_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a test's bank keeps its books, once on each database: a fresh SQLite file, or a
    fresh schema on the session's PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'bank' / 'ledger.sqlite3'}"
    server: PostgresTestServer = request.getfixturevalue("postgres_server")
    return server.schema()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow",
        action="store_true",
        help="also run the slow tests (every trace in traces/ replayed end to end)",
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuse to test compiled modules older than their sources: they are not the code.

    The umask is set to the usual 022: tests write configuration and authorized-clients files
    that the agent refuses when their group may write them, as a umask of 002 (per-user
    groups) would make them.
    """
    os.umask(0o022)
    stale = stale_compiled_modules(Path(__file__).resolve().parent.parent / "siteagent")
    if stale:
        pytest.exit(
            "compiled modules are older than their sources: "
            + ", ".join(stale)
            + ". Rebuild them (./test does, or `pip install -e .`), or remove them "
            "(`git clean -fX siteagent`) to test the pure Python sources.",
            returncode=2,
        )


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Mark tests that use the Slurm cluster ``slurm``, those that use the OpenPBS cluster
    ``pbs`` and those that use PostgreSQL ``postgres``; skip ``slow`` ones unless asked with
    --slow; put each test in its worker's group (:func:`_group`).

    A test that takes ``slurm_version`` only for its Slurm variants (the replay and PBS variants
    of a lifecycle test) runs those once, not once per release; one marked ``host_slurm``
    (pyslurm links the host's libslurm into this process) runs on the host's release only, one
    marked ``slurm_series("24.11")`` on the releases it names only. Both are deselected
    elsewhere, not skipped: there is nothing to run.

    The modules with a Slurm or OpenPBS test run first: they are the longest (real daemons,
    real waits), and pytest-xdist hands out groups in this order (``--dist loadgroup``), so
    the short ones fill in around them instead of one long group running alone at the end.
    """
    run_slow = config.getoption("--slow")
    first = selected_series()[0]
    keep, dropped = [], []
    for item in items:
        if "slurm_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slurm)
        if "openpbs_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.pbs)
        if "postgres_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)
        if "slow" in item.keywords and not run_slow:
            item.add_marker(pytest.mark.skip(reason="slow; run with --slow"))
        series = _slurm_series(item)
        item.add_marker(pytest.mark.xdist_group(_group(item, series)))
        only = item.get_closest_marker("slurm_series")
        if series is not None and (
            ("slurm" not in item.keywords and series != first)
            or ("host_slurm" in item.keywords and series != host_series())
            or (only is not None and series not in only.args)
        ):
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    on_clusters = {_module(i) for i in keep if "slurm" in i.keywords or "pbs" in i.keywords}
    items[:] = sorted(keep, key=lambda item: _module(item) not in on_clusters)


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _group(item: pytest.Item, series: Optional[str]) -> str:
    """What one worker runs together under ``--dist loadgroup``: a module (its module-scoped
    clusters and markets start once), and a module's tests on one Slurm release apart from
    its others, since their clusters are the release's anyway. A module of one-minute
    reservations on three releases then takes three workers' time, not eleven minutes of one.
    The replayed site of a lifecycle test (no cluster) goes apart too, and each test of a
    module marked ``apart`` (its waits are long, its module fixture cheap to start again)."""
    group = _module(item)
    if "apart" in item.keywords:
        group += f"::{getattr(item, 'originalname', item.name)}"
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("lifecycle_site") == "replay":
        return f"{group}[replay]"
    return group if series is None else f"{group}[{series}]"


def _slurm_series(item: pytest.Item) -> Optional[str]:
    """The Slurm release a collected test runs on, if it is parametrized by one."""
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get("slurm_version") if callspec is not None else None
    return value if isinstance(value, str) else None


@pytest.fixture
def workload_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """``caplog`` at WARNING for the replayed workload's logger, which is enabled and
    propagating for the test whatever tests run before it in this worker did to it (the
    full run under xdist lost its warnings once, after other modules in the same process)."""
    chain = [logging.getLogger(name) for name in ("siteagent", "siteagent.sim.workload")]
    saved = [(logger.disabled, logger.propagate) for logger in chain]
    for logger in chain:
        logger.disabled, logger.propagate = False, True
    caplog.set_level(logging.WARNING, logger="siteagent.sim.workload")
    yield caplog
    for logger, (disabled, propagate) in zip(chain, saved):
        logger.disabled, logger.propagate = disabled, propagate
