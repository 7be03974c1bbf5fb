"""Absolute priorities from Slurm's QoS (``backend.slurm.qos_levels``): where Slurm preempts by
QoS, each job of a real ``squeue --json`` document (22.05) gets its QoS's level; a QoS not
listed, and every job when no level is configured, has none (0). A won ``now`` bid is
checked without the running work its job may suspend, and reserved over it (IGNORE_JOBS)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from siteagent.backends.slurm.arguments import reservation_args
from siteagent.backends.slurm.config import SlurmConfig
from siteagent.backends.slurm.jobs import parse_jobs, with_levels
from siteagent.core.values import ClusterSnapshot, Job, ReservationSpec
from siteagent.market.reservations import without_lower

DATA = Path(__file__).resolve().parent.parent / "data" / "slurm"
NOW = int((DATA / "queue-now.txt").read_text())


def test_each_job_gets_its_qos_level() -> None:
    doc = json.loads((DATA / "squeue-queue-22.05.json").read_text())
    for index, record in enumerate(doc["jobs"]):
        record["qos"] = ("low", "high", "other")[index % 3]
    jobs = parse_jobs(doc, NOW)
    assert jobs.running and jobs.pending
    levelled = with_levels(jobs, {"low": 1, "high": 4})
    expected = {"low": 1, "high": 4, "other": 0}
    for job in levelled.running + levelled.pending:
        assert job.absolute_priority == expected[jobs.qos_of[job.id]], job.id
    assert {job.absolute_priority for job in levelled.running + levelled.pending} == {0, 1, 4}
    assert [job.id for job in levelled.pending] == [job.id for job in jobs.pending]
    unlevelled = with_levels(jobs, {})
    assert all(job.absolute_priority == 0 for job in unlevelled.running + unlevelled.pending)


def test_levels_are_checked() -> None:
    with pytest.raises(ValueError, match="QoS name"):
        SlurmConfig(qos_levels=(("bad name!", 1),))
    with pytest.raises(ValueError, match="a level is 1 or more"):
        SlurmConfig(qos_levels=(("low", 0),))


def test_a_reservation_over_preemptable_work_asks_slurm_to_ignore_running_jobs() -> None:
    config = SlurmConfig(users=("alice",), flags=("MAINT",))
    spec = ReservationSpec("sa-1", NOW + 60, 600, 8)
    assert reservation_args(spec, config, NOW)[-1] == "Flags=MAINT"
    over = dataclasses.replace(spec, over_running=True)
    assert reservation_args(over, config, NOW)[-1] == "Flags=MAINT,IGNORE_JOBS"


def test_a_won_now_bid_is_checked_without_the_work_it_may_suspend() -> None:
    snapshot = ClusterSnapshot(
        now=NOW,
        capacity=48,
        running=(
            Job("low", 16, NOW, 600, start=NOW, absolute_priority=1),
            Job("same", 16, NOW, 600, start=NOW, absolute_priority=3),
            Job("unknown", 16, NOW, 600, start=NOW),
        ),
    )
    kept = without_lower(snapshot, priority=3)
    assert [job.id for job in kept.running] == ["same", "unknown"]
