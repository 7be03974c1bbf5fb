"""Shared fixtures. Only fixtures used by several test modules belong here.

The real Slurm cluster is started once per session. Under CI (CI=true) a cluster that cannot
come up fails every test that needs it, with the reason: the integration tests are the point
of CI and must never be skipped silently. On a developer machine without root or without the
Slurm packages the same tests are skipped with the reason instead.
"""

from __future__ import annotations

import os
from typing import Iterator

import pytest

from tests.slurm_cluster import ClusterError, SlurmTestCluster, missing_binaries

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _unavailable_reason() -> str:
    """Why the cluster cannot be started on this machine, or "" if it can be tried."""
    if os.geteuid() != 0:
        return "the Slurm test cluster needs root"
    missing = missing_binaries()
    if missing:
        return "Slurm/munge not installed (missing " + ", ".join(missing) + "); run " \
            "tests/setup/install-system-deps"
    return ""


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmTestCluster]:
    """A running 4-node Slurm cluster (n1..n4, 16 cores each, partition ``batch``)."""
    reason = _unavailable_reason()
    if reason:
        if IN_CI:
            pytest.fail(f"Slurm test cluster unavailable under CI: {reason}", pytrace=False)
        pytest.skip(reason)
    cluster = SlurmTestCluster()
    try:
        cluster.start()
    except ClusterError as exc:
        pytest.fail(f"Slurm test cluster did not start: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: SlurmTestCluster) -> Iterator[SlurmTestCluster]:
    """The session cluster, emptied of jobs and reservations before and after the test."""
    slurm_cluster.reset()
    yield slurm_cluster
    slurm_cluster.reset()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the cluster ``slurm`` so that ``-m 'not slurm'`` works."""
    for item in items:
        if "slurm_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slurm)
