"""What the jobs in the agent's reservations used: the arithmetic, the store, the recorder that
keeps it each cycle and makes it final, and Slurm accounting read for it."""

from __future__ import annotations

import dataclasses
import subprocess
from typing import List, Optional, Sequence

import pytest

from siteagent.backends.base import Backend, BackendError, BackendUnavailable
from siteagent.backends.slurm import SlurmBackend
from siteagent.backends.slurm.arguments import reservation_ids_args, sacct_usage_args
from siteagent.backends.slurm.sacct import reservation_jobs_from_sacct, unnamed_reservation_ids
from siteagent.core.usage import JobUsage, UsageSource, usage_of
from siteagent.core.values import (
    BatchReservation,
    CapacityUnit,
    ClusterSnapshot,
    Job,
    ReservationSpec,
)
from siteagent.market.lifecycle import ReservationState
from siteagent.market.store import Store
from siteagent.market.usage import ACCOUNTING_GRACE_S, UsageRecorder, reservation_usage
from testbed.inprocess.fakes import FakeClock, FakeRun
from testbed.inprocess.records import requested

S = ReservationState
#: The window of the reservation ``requested`` stores: 4 cores over [1000, 4600).
START, END = 1000, 4600


# --------------------------------------------------------------------------- the arithmetic


def test_only_the_time_inside_the_window_counts() -> None:
    jobs = [
        JobUsage("1", "alice", 2, 1, 1000, 2800),  # half the window
        JobUsage("2", "alice", 1, 1, 4000, 5000),  # runs past the end: 600 s count
        JobUsage("3", "alice", 1, 1, 4300),  # running: up to now
    ]
    usage = usage_of(jobs, CapacityUnit.CORE, 4, START, END, 4400, UsageSource.POLL, False)
    assert usage.used_unit_seconds == usage.core_seconds == 2 * 1800 + 600 + 100
    assert usage.sold_unit_seconds == 4 * 3600
    assert usage.utilization == pytest.approx(4300 / 14400)
    assert [job.job_id for job in usage.jobs] == ["1", "2", "3"]


def test_node_reservations_count_whole_nodes() -> None:
    jobs = [JobUsage("1", "bob", 20, 2, START, END)]
    usage = usage_of(jobs, CapacityUnit.NODE, 4, START, END, END, UsageSource.ACCOUNTING, True)
    assert usage.utilization == pytest.approx(0.5)
    assert usage.core_hours == pytest.approx(20.0)


def test_a_reservation_left_empty_used_nothing() -> None:
    usage = usage_of([], CapacityUnit.CORE, 4, START, END, END, UsageSource.POLL, True)
    assert (usage.utilization, usage.core_seconds) == (0.0, 0)
    assert usage.to_json() == {
        "jobs": [],
        "core_hours": 0.0,
        "used_unit_hours": 0.0,
        "sold_unit_hours": 4.0,
        "utilization": 0.0,
        "source": "poll",
        "final": True,
    }


# --------------------------------------------------------------------------- the store


@pytest.fixture
def db() -> Store:
    return Store(":memory:")


def test_running_jobs_are_recorded_once_and_closed(db: Store) -> None:
    record = requested(db)
    job = JobUsage("7", "alice", 2, 1, 1100)
    db.record_running({record.id: [job]}, 1200)
    db.record_running({record.id: [job]}, 1300)  # seen again
    assert db.open_jobs() == {record.id: [job]}
    db.close_jobs(record.id, ["7"], 1400)
    assert db.open_jobs() == {}
    assert db.reservation_jobs(record.id) == [dataclasses.replace(job, end=1400)]


def test_accounting_replaces_what_the_polls_saw(db: Store) -> None:
    record = requested(db)
    db.record_running({record.id: [JobUsage("7", "alice", 2, 1, 1100)]}, 1200)
    exact = [JobUsage("7", "alice", 2, 1, 1090, 1500), JobUsage("8", "alice", 1, 1, 1600, None)]
    db.settle_usage(record.id, UsageSource.ACCOUNTING, 5000.0, END, exact)
    assert db.usage_source(record.id) is UsageSource.ACCOUNTING
    assert db.reservation_jobs(record.id) == [exact[0], dataclasses.replace(exact[1], end=END)]
    db.record_running({record.id: [JobUsage("7", "alice", 2, 1, 1100)]}, 1300)
    assert db.reservation_jobs(record.id)[0] == exact[0]  # a late poll changes nothing


def test_settling_from_the_polls_ends_the_jobs_still_open(db: Store) -> None:
    record = requested(db)
    db.record_running({record.id: [JobUsage("7", "alice", 2, 1, 1100)]}, 4500)
    assert db.unsettled([S.REQUESTED]) == [record]
    db.settle_usage(record.id, UsageSource.POLL, 5000.0, END)
    assert db.reservation_jobs(record.id)[0].end == END
    assert db.unsettled([S.REQUESTED]) == []


def test_totals_count_the_settled_reservations_only(db: Store) -> None:
    used, empty, running = requested(db, "r1"), requested(db, "r2"), requested(db, "r3")
    db.record_running({used.id: [JobUsage("7", "alice", 2, 1, 1000)]}, 1200)
    db.record_running({running.id: [JobUsage("9", "alice", 4, 1, 1000)]}, 1200)
    db.settle_usage(used.id, UsageSource.POLL, 5000.0, END)
    db.settle_usage(empty.id, UsageSource.POLL, 5000.0, END)
    totals = db.usage_totals()
    assert totals.sold_unit_seconds == {CapacityUnit.CORE: 2 * 4 * 3600}
    assert totals.used_unit_seconds == {CapacityUnit.CORE: 2 * 3600}
    assert totals.core_seconds == 2 * 3600
    assert (totals.reservations, totals.empty) == (2, 1)


# --------------------------------------------------------------------------- the recorder


class Accounting(Backend):
    """A batch system whose accounting says ``jobs`` ran in every reservation (None: it
    keeps no accounting); nothing else is asked of it."""

    name = "accounting"

    def __init__(self, jobs: Optional[List[JobUsage]]) -> None:
        self.jobs = jobs
        self.asked: List[tuple[str, int, int]] = []

    def reservation_jobs(self, name: str, start: int, end: int) -> Optional[List[JobUsage]]:
        self.asked.append((name, start, end))
        return self.jobs

    def snapshot(self) -> ClusterSnapshot:
        raise NotImplementedError

    def create_reservation(self, spec: ReservationSpec) -> BatchReservation:
        raise NotImplementedError

    def delete_reservation(self, name: str) -> None:
        raise NotImplementedError

    def list_reservations(self) -> List[BatchReservation]:
        raise NotImplementedError


def running(now: int, *jobs: Job) -> ClusterSnapshot:
    return ClusterSnapshot(now=now, capacity=16, running=jobs)


def a_job(job_id: str, reservation: str, cores: int = 2, start: int = 1100) -> Job:
    return Job(
        job_id, cores, 900, 3600, start=start, user="alice", nodes=1, reservation=reservation
    )


def moved(db: Store, rid: str, *path: S, at: float = 4700.0) -> None:
    current = S.REQUESTED
    for state in path:
        db.transition(rid, current, state, at, "agent", "test")
        current = state


def test_the_recorder_keeps_the_agents_jobs_and_ends_those_gone(db: Store) -> None:
    record = requested(db)
    recorder = UsageRecorder(db, Accounting(None), "sa-", FakeClock(2000.0))
    recorder.observe(running(1200, a_job("7", record.name), a_job("8", ""), a_job("9", "sa-zz")))
    assert [job.job_id for job in db.reservation_jobs(record.id)] == ["7"]
    recorder.observe(running(1800))
    assert db.reservation_jobs(record.id)[0].end == 1800
    recorder.observe(running(5000, a_job("10", record.name, start=4000)))
    recorder.observe(running(5100))
    assert db.reservation_jobs(record.id)[1].end == END  # ended by the reservation's end


def test_a_reservation_is_settled_from_the_polls_without_accounting(db: Store) -> None:
    record = requested(db)
    recorder = UsageRecorder(db, Accounting(None), "sa-", FakeClock(4700.0))
    recorder.observe(running(4500, a_job("7", record.name, start=1000)))
    assert recorder.settle() == []  # not over yet
    moved(db, record.id, S.TENTATIVE, S.CONFIRMED, S.ACTIVE, S.COMPLETED)
    assert recorder.settle() == [record.id]
    usage = reservation_usage(db, record, 4700)
    assert (usage.final, usage.source, usage.core_seconds) == (True, UsageSource.POLL, 2 * 3600)
    assert recorder.settle() == []  # once


def test_accounting_waits_for_every_end_then_settles(db: Store) -> None:
    record = requested(db)
    moved(db, record.id, S.TENTATIVE, S.CONFIRMED, S.ACTIVE, S.COMPLETED)
    clock = FakeClock(float(END + 5))
    backend = Accounting([JobUsage("7", "alice", 2, 1, 1000, None)])
    recorder = UsageRecorder(db, backend, "sa-", clock)
    assert recorder.settle() == []
    clock.advance(ACCOUNTING_GRACE_S)
    assert recorder.settle() == [record.id]
    assert backend.asked[-1] == (record.name, START, END)
    assert db.usage_source(record.id) is UsageSource.ACCOUNTING


def test_a_lost_reservation_is_settled_at_the_moment_it_was_lost(db: Store) -> None:
    record = requested(db)
    moved(db, record.id, S.TENTATIVE, S.CONFIRMED, S.ACTIVE, at=1500.0)
    recorder = UsageRecorder(db, Accounting(None), "sa-", FakeClock(2000.0))
    recorder.observe(running(1400, a_job("7", record.name, start=1000)))
    db.transition(record.id, S.ACTIVE, S.LOST, 1800.0, "agent", "vanished")
    assert recorder.settle() == [record.id]
    assert db.reservation_jobs(record.id)[0].end == 1800


# --------------------------------------------------------------------------- Slurm accounting

#: ``sacct -n -P -o JobID,User,AllocCPUS,NNodes,Start,End,Reservation,ReservationId,AdminComment``
#: (TZ=UTC), as the test cluster with slurmdbd prints it: a job in sa-r1 (id 7), one tagged by
#: job_submit.lua whose reservation accounting lost, a job still running, one elsewhere, one
#: that never ran, one that started in sa-r1's first second (so unnamed), one in no reservation.
SACCT = """41|root|2|1|2027-01-15T08:00:05|2027-01-15T08:10:05|sa-r1|7|
42|alice|16|1|2027-01-15T08:01:00|2027-01-15T08:02:00|||siteagent:reservation=sa-r1
43|root|1|1|2027-01-15T08:03:00|Unknown|sa-r1|7|note | with a bar
44|root|1|0|2027-01-15T08:00:00|2027-01-15T08:00:09|other|8|
45|root|1|0|Unknown|2027-01-15T08:00:09|sa-r1|7|
46|bob|4|1|2027-01-15T08:00:00|2027-01-15T08:05:00||7|
47|bob|1|1|2027-01-15T08:00:00|2027-01-15T08:05:00||0|
"""
T = 1_800_000_000  # 2027-01-15T08:00:00Z


def test_sacct_gives_the_jobs_of_one_reservation() -> None:
    assert reservation_jobs_from_sacct(SACCT, "sa-r1") == [
        JobUsage("41", "root", 2, 1, T + 5, T + 605),
        JobUsage("42", "alice", 16, 1, T + 60, T + 120),
        JobUsage("43", "root", 1, 1, T + 180, None),
    ]
    assert reservation_jobs_from_sacct(SACCT, "sa-r2") == []


def test_a_job_started_in_the_reservations_first_second_is_found_by_its_id() -> None:
    """slurmdbd names a job's reservation only if the job started after the reservation's
    first second: the unnamed job 46 is sa-r1's by its id, job 47 (id 0) is nobody's."""
    assert unnamed_reservation_ids(SACCT) == {"7"}
    found = reservation_jobs_from_sacct(SACCT, "sa-r1", ["7"])
    assert [job.job_id for job in found] == ["41", "42", "43", "46"]
    assert found[-1] == JobUsage("46", "bob", 4, 1, T, T + 300)
    assert [job.job_id for job in reservation_jobs_from_sacct(SACCT, "other", ["8"])] == ["44"]


def test_garbage_from_sacct_is_no_answer() -> None:
    with pytest.raises(BackendUnavailable, match="line 1"):
        reservation_jobs_from_sacct("sacct: something else\n", "sa-r1")
    with pytest.raises(BackendUnavailable, match="not a job"):
        reservation_jobs_from_sacct("41|root|two|1|2027-01-15T08:00:05|Unknown|sa-r1|7|\n", "sa-r1")


def test_the_slurm_backend_reads_accounting_or_says_there_is_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = SlurmBackend()
    calls: List[List[str]] = []

    def run(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        calls.append(list(args))
        out = "7\n" if args[0] == "sacctmgr" else SACCT
        return subprocess.CompletedProcess(list(args), 0, out, "")

    monkeypatch.setattr(backend, "_run", run)
    assert [job.job_id for job in backend.reservation_jobs("sa-r1", T, T + 3600) or []] == [
        "41",
        "42",
        "43",
        "46",
    ]
    assert calls == [sacct_usage_args(T, T + 3600), reservation_ids_args("sa-r1", T, T + 3600)]
    named = "\n".join(line for line in SACCT.splitlines() if "||" not in line)
    monkeypatch.setattr(backend, "_run", FakeRun(0, named))
    assert len(backend.reservation_jobs("sa-r1", T, T + 3600) or []) == 2  # no sacctmgr asked
    disabled = "sacct: error: Slurm accounting storage is disabled\n"
    monkeypatch.setattr(backend, "_run", FakeRun(1, stderr=disabled))
    assert backend.reservation_jobs("sa-r1", T, T + 3600) is None
    down = "sacct: error: Problem talking to the database: Connection refused\n"
    monkeypatch.setattr(backend, "_run", FakeRun(1, stderr=down))
    with pytest.raises(BackendError, match="Problem talking"):
        backend.reservation_jobs("sa-r1", T, T + 3600)
