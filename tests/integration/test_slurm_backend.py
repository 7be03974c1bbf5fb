"""SlurmBackend against the real test cluster: snapshots, reservations, refusals, outages.

Each test starts from an empty cluster (the ``slurm`` fixture cancels jobs and deletes
reservations). Expectations are checked against Slurm's own text commands, not against the
JSON the backend parses, so a parser bug cannot confirm itself.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Dict, List, Optional, Tuple

import pytest

from siteagent.backends.base import BackendUnavailable, ReservationRefused
from siteagent.backends.slurm import SlurmBackend
from siteagent.backends.slurm.times import parse_slurm_time
from siteagent.core.values import CapacityUnit, ClusterSnapshot, ReservationSpec
from testbed.slurm.cluster import SlurmTestCluster
from testbed.slurm.install import (
    CORES_IGNORE_JOBS,
    JSON_LAYOUTS,
    SHRINKS_NODE_COUNT,
    UNKNOWN_USER,
)
from testbed.slurm.queue import job_state, wait_for

pytestmark = pytest.mark.slurm


def backend(
    cluster: SlurmTestCluster,
    unit: CapacityUnit = CapacityUnit.CORE,
    flags: Tuple[str, ...] = (),
    timeout: float = 30.0,
    slurm_conf: Optional[str] = None,
) -> SlurmBackend:
    config = cluster.slurm_config(
        users=("root",),
        partition="batch",
        unit=unit,
        flags=flags,
        timeout=timeout,
    )
    return SlurmBackend(dataclasses.replace(config, slurm_conf=slurm_conf or config.slurm_conf))


def squeue(cluster: SlurmTestCluster, states: str, fmt: str) -> List[List[str]]:
    """Text squeue with array tasks expanded (-r): the reference the snapshot must match."""
    out = cluster.run(["squeue", "-h", "-r", "-t", states, "-o", fmt]).stdout
    return [line.split("|") for line in out.splitlines() if line.strip()]


def spec(
    name: str,
    start: int,
    duration: int,
    size: int,
    unit: CapacityUnit = CapacityUnit.CORE,
    users: Tuple[str, ...] = (),
) -> ReservationSpec:
    return ReservationSpec(
        name=name, start=start, duration=duration, size=size, unit=unit, users=users
    )


# ----------------------------------------------------------------------------- snapshot


def test_snapshot_matches_squeue_and_sinfo(slurm: SlurmTestCluster) -> None:
    big = slurm.submit("-N2", "--exclusive", "-t", "30")
    eight = slurm.submit("-n8", "-t", "20")
    blocked = slurm.submit("-N4", "-t", "60")  # waits for the exclusive job: Resources
    array = slurm.submit("--array=0-3%1", "-n2", "-t", "10")
    held = slurm.submit("-H", "-n2", "-t", "10")
    dep = slurm.submit(f"--dependency=afterok:{blocked}", "-n1", "-t", "10")
    begin = slurm.submit("--begin=now+1hour", "-n1", "-t", "5")
    wait_for(
        "running jobs",
        lambda: job_state(slurm, big) == "RUNNING" and job_state(slurm, eight) == "RUNNING",
    )
    # the backfill pass (bf_interval=5) publishes the blocked job's expected start
    wait_for(
        "a backfill estimate",
        lambda: any(r[0] == blocked and r[1] != "N/A" for r in squeue(slurm, "PD", "%i|%S")),
    )

    snap = backend(slurm).snapshot()
    running = squeue(slurm, "R", "%i|%C|%D|%S|%l")
    pending = squeue(slurm, "PD", "%i|%C|%D|%Q|%r")

    assert {j.id for j in snap.running} == {r[0] for r in running}
    for job in snap.running:
        row = next(r for r in running if r[0] == job.id)
        assert (job.cores, job.nodes) == (int(row[1]), int(row[2]))
        assert job.start == parse_slurm_time(row[3])  # harness runs with the host TZ (UTC)
    assert {j.id for j in snap.pending} == {r[0] for r in pending}
    assert len([j for j in snap.pending if j.id.startswith(f"{array}_")]) == len(
        [r for r in pending if r[0].startswith(f"{array}_")]
    )
    # Slurm's order: priority descending (held jobs have priority 0 and come last)
    prio: Dict[str, int] = {r[0]: int(r[3]) for r in pending}
    order = [prio[j.id] for j in snap.pending]
    assert order == sorted(order, reverse=True)

    jobs = {j.id: j for j in snap.pending}
    assert not jobs[held].eligible and not jobs[dep].eligible
    assert jobs[blocked].eligible and jobs[blocked].expected_start is not None
    begin_time = jobs[begin].not_before
    assert jobs[begin].eligible and begin_time is not None and begin_time > snap.now + 3000
    assert jobs[blocked].nodes == 4

    nodes = slurm.run(["sinfo", "-h", "-N", "-o", "%N|%C"]).stdout.split()
    alloc = {n.split("|")[0]: int(n.split("|")[1].split("/")[0]) for n in nodes}
    assert {n.name: n.alloc_cores for n in snap.nodes} == alloc
    assert snap.capacity == 64 and snap.cores_per_node == 16
    assert snap.extra["layout"] == JSON_LAYOUTS[slurm.install.series]


def test_finished_jobs_are_not_in_the_snapshot(slurm: SlurmTestCluster) -> None:
    done = slurm.submit("-n1", "-t", "1", wrap="true")
    wait_for("the job to finish", lambda: job_state(slurm, done) == "")
    snap = backend(slurm).snapshot()
    assert done not in {j.id for j in snap.running + snap.pending}


def test_drained_node_leaves_capacity(slurm: SlurmTestCluster) -> None:
    slurm.run(["scontrol", "update", "NodeName=n2", "State=DRAIN", "Reason=test drain"])
    try:
        snap = backend(slurm).snapshot()
        assert snap.capacity == 48
        node = next(n for n in snap.nodes if n.name == "n2")
        assert not node.usable and node.reason == "test drain"
        nodes = backend(slurm, unit=CapacityUnit.NODE).snapshot()
        assert nodes.capacity == 3
    finally:
        slurm.run(["scontrol", "update", "NodeName=n2", "State=RESUME"])


# ----------------------------------------------------------------------------- reservations


def test_reservation_created_with_asked_size_and_blocks_capacity(slurm: SlurmTestCluster) -> None:
    b = backend(slurm)
    now = int(time.time())
    made = b.create_reservation(spec("sa-block", now, 1800, 64))
    assert made.cores == 64 and made.name == "sa-block"
    assert made.start == now and made.end == now + 1800
    assert "sa-block" in {r.name for r in b.list_reservations()}
    assert "sa-block" in {r.name for r in b.snapshot().reservations}

    outsider = slurm.submit("-n1", "-t", "5")
    insider = slurm.submit("-n1", "-t", "5", "--reservation=sa-block")
    wait_for("the job in the reservation to run", lambda: job_state(slurm, insider) == "RUNNING")
    time.sleep(7)  # more than one backfill pass
    assert job_state(slurm, outsider) == "PENDING"


def test_core_reservation_in_the_future(slurm: SlurmTestCluster) -> None:
    b = backend(slurm)
    start = int(time.time()) + 3600
    made = b.create_reservation(spec("sa-later", start, 5400 + 1, 8))
    assert (made.cores, made.start) == (8, start)
    assert made.end - made.start == 91 * 60  # whole minutes, rounded up
    assert made.state == "INACTIVE" and made.users == ("root",)
    text = slurm.run(["scontrol", "show", "reservation", "-o", "sa-later"]).stdout
    assert "CoreCnt=8" in text and "PartitionName=batch" in text


def test_node_count_is_silently_reduced_and_read_back(slurm: SlurmTestCluster) -> None:
    # Another reservation holds n1-n3 in the window: NodeCnt=3 is "created" with one node.
    # (Running jobs instead make the same request fail as busy, see the next test.)
    start = int(time.time()) + 7200
    slurm.run(
        [
            "scontrol",
            "create",
            "reservation",
            "ReservationName=foreign",
            "Nodes=n[1-3]",
            f"StartTime={time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(start))}",
            "Duration=60",
            "Users=root",
        ]
    )
    b = backend(slurm, unit=CapacityUnit.NODE)
    asked = spec("sa-nodes", start, 3600, 3, unit=CapacityUnit.NODE)
    if slurm.install.series not in SHRINKS_NODE_COUNT:  # 24.11 on: refused, not shrunk
        with pytest.raises(ReservationRefused, match="Requested nodes are busy"):
            b.create_reservation(asked)
        return
    made = b.create_reservation(asked)
    assert made.nodes == 1 and made.node_list == "n4"  # asked for 3
    assert made.cores == 16


def test_busy_nodes_are_refused_unless_ignore_jobs(slurm: SlurmTestCluster) -> None:
    job = slurm.submit("-N4", "--exclusive", "-t", "30")
    wait_for("the full-cluster job to run", lambda: job_state(slurm, job) == "RUNNING")
    now = int(time.time())
    with pytest.raises(ReservationRefused, match="Requested nodes are busy"):
        backend(slurm).create_reservation(spec("sa-busy", now, 600, 4))
    with pytest.raises(ReservationRefused, match="Requested nodes are busy"):
        backend(slurm, unit=CapacityUnit.NODE).create_reservation(
            spec("sa-busy", now, 600, 1, unit=CapacityUnit.NODE)
        )
    assert backend(slurm).get_reservation("sa-busy") is None
    ignoring = backend(slurm, flags=("IGNORE_JOBS",))
    if slurm.install.series not in CORES_IGNORE_JOBS:  # 26.05: whole nodes only
        with pytest.raises(ReservationRefused, match="Requested nodes are busy"):
            ignoring.create_reservation(spec("sa-busy", now, 600, 4))
        ignoring = backend(slurm, unit=CapacityUnit.NODE, flags=("IGNORE_JOBS",))
        made = ignoring.create_reservation(spec("sa-busy", now, 600, 1, unit=CapacityUnit.NODE))
        assert made.nodes == 1 and "IGNORE_JOBS" in made.flags
    else:
        made = ignoring.create_reservation(spec("sa-busy", now, 600, 4))
        assert made.cores == 4 and "IGNORE_JOBS" in made.flags
    assert job_state(slurm, job) == "RUNNING"


def test_unknown_user_is_refused(slurm: SlurmTestCluster) -> None:
    with pytest.raises(ReservationRefused, match=UNKNOWN_USER[slurm.install.series]):
        backend(slurm).create_reservation(
            spec("sa-user", int(time.time()) + 600, 600, 2, users=("nosuchuser9",))
        )


def test_retry_with_the_same_name_is_idempotent(slurm: SlurmTestCluster) -> None:
    b = backend(slurm)
    s = spec("sa-twice", int(time.time()) + 600, 600, 2)
    first = b.create_reservation(s)
    assert b.create_reservation(s) == first
    with pytest.raises(ReservationRefused, match="Duplicate reservation name"):
        b.create_reservation(spec("sa-twice", s.start + 60, 600, 2))


def test_delete(slurm: SlurmTestCluster) -> None:
    b = backend(slurm)
    b.create_reservation(spec("sa-del", int(time.time()) + 600, 600, 2))
    job = slurm.submit("-n1", "-t", "5", "--reservation=sa-del")
    with pytest.raises(ReservationRefused, match="in use"):
        b.delete_reservation("sa-del")
    slurm.run(["scancel", job])
    wait_for("the job to go", lambda: job_state(slurm, job) in ("", "CANCELLED"))
    b.delete_reservation("sa-del")
    assert b.get_reservation("sa-del") is None
    b.delete_reservation("sa-del")  # already gone: not an error
    with pytest.raises(ValueError, match="not an agent reservation"):
        b.delete_reservation("somebody-elses")


# ----------------------------------------------------------------------------- outages


def test_controller_down_is_unavailable(slurm: SlurmTestCluster) -> None:
    slurm.stop_controller()
    try:
        t0 = time.monotonic()
        with pytest.raises(BackendUnavailable, match="did not answer within 2 s"):
            backend(slurm, timeout=2.0).snapshot()
        assert time.monotonic() - t0 < 5
        # clients that give up on the closed port after 1 s of retries rather than 9 s
        b = backend(slurm, slurm_conf=slurm.impatient_conf())
        with pytest.raises(BackendUnavailable):
            b.snapshot()  # squeue/sinfo --json exit 0 with an errors entry
        with pytest.raises(BackendUnavailable):
            b.create_reservation(spec("sa-down", int(time.time()) + 600, 600, 2))
    finally:
        slurm.start_controller()
    snap: Optional[ClusterSnapshot] = backend(slurm).snapshot()
    assert snap is not None and snap.capacity == 64
