"""Smoke tests of the test cluster itself: they fail unless real Slurm daemons run jobs.

If these fail, every other Slurm integration test is meaningless, so they check the two things
the backend relies on: a submitted job really runs (seen in ``squeue --json``), and scontrol
really creates and deletes reservations.
"""

from __future__ import annotations

import json
import time

import pytest

from testbed.slurm.cluster import SlurmTestCluster
from testbed.slurm.install import SlurmInstall, series_of

pytestmark = pytest.mark.slurm


def _job_state(cluster: SlurmTestCluster, job_id: str) -> str:
    data = json.loads(cluster.run(["squeue", "--json"]).stdout)
    assert data["errors"] == []
    for job in data["jobs"]:
        if str(job["job_id"]) == job_id:
            state = job["job_state"]
            return state if isinstance(state, str) else ",".join(state)
    return ""


def test_all_nodes_idle_with_configured_cores(slurm: SlurmTestCluster) -> None:
    """In text, which every release writes alike (the JSON layouts are the parsers' tests)."""
    lines = slurm.run(["sinfo", "-h", "-N", "-o", "%N %c %T"]).stdout.split("\n")
    nodes = {line.split()[0]: line.split()[1:] for line in lines if line.strip()}
    assert nodes == {name: ["16", "idle"] for name in ("n1", "n2", "n3", "n4")}


def test_the_cluster_runs_the_release_asked_for(
    slurm: SlurmTestCluster, slurm_version: SlurmInstall
) -> None:
    """slurmctld and the clients are of the release the test is parametrized by."""
    line = slurm.run(["scontrol", "show", "config"]).stdout
    version = next(v for v in line.splitlines() if v.startswith("SLURM_VERSION"))
    assert series_of(version) == slurm_version.series
    assert series_of(slurm.run(["squeue", "--version"]).stdout) == slurm_version.series


def test_sleep_job_runs(slurm: SlurmTestCluster) -> None:
    job_id = slurm.submit("-n", "2", "-t", "5", wrap="sleep 300")
    deadline = time.monotonic() + 30
    state = ""
    while time.monotonic() < deadline:
        state = _job_state(slurm, job_id)
        if state == "RUNNING":
            break
        time.sleep(0.3)
    assert state == "RUNNING", f"job {job_id} is {state or 'missing'}"
    slurm.run(["scancel", job_id])


def test_reservation_create_show_delete(slurm: SlurmTestCluster) -> None:
    created = slurm.run(
        [
            "scontrol",
            "create",
            "reservation",
            "ReservationName=smoke",
            "StartTime=now+1hour",
            "Duration=30",
            "NodeCnt=1",
            "Users=root",
        ]
    )
    assert "Reservation created: smoke" in created.stdout
    shown = slurm.run(["scontrol", "show", "reservation", "-o"]).stdout
    assert any(
        line.startswith("ReservationName=smoke ") and "NodeCnt=1" in line
        for line in shown.splitlines()
    ), shown
    slurm.run(["scontrol", "delete", "ReservationName=smoke"])
    shown = slurm.run(["scontrol", "show", "reservation", "-o"]).stdout
    assert "ReservationName=smoke" not in shown
