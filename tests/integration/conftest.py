"""Fixtures of the integration tests: the site the lifecycle tests run against.

``lifecycle_site`` is each batch system the lifecycle must hold on: the SWF replay backend,
the real Slurm test cluster and the real OpenPBS (which fail, not skip, under CI when they
cannot start).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from testbed.inprocess.traces import busy_trace
from testbed.processes.sites import LifecycleSite, PbsSite, ReplaySite, SlurmSite
from testbed.slurm.install import SlurmInstall


@pytest.fixture(
    params=[
        "replay",
        pytest.param("slurm", marks=pytest.mark.slurm),
        pytest.param("pbs", marks=pytest.mark.pbs),
    ]
)
def lifecycle_site(
    request: pytest.FixtureRequest, tmp_path: Path, slurm_version: SlurmInstall
) -> Iterator[LifecycleSite]:
    """replay: a 64-core simulated cluster about half busy with small jobs; slurm, pbs: the
    64-core test clusters, emptied of jobs and reservations before and after. The Slurm
    variant runs on each Slurm release (``slurm_version``); the others once."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    site: LifecycleSite
    if request.param == "slurm":
        site = SlurmSite(state_dir, request.getfixturevalue("slurm"))
    elif request.param == "pbs":
        site = PbsSite(state_dir, request.getfixturevalue("openpbs"))
    else:
        site = ReplaySite(state_dir, busy_trace(tmp_path / "busy.swf", seed=7))
    try:
        yield site
    finally:
        site.close()
