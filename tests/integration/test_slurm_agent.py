"""The agent's reservation lifecycle and planner on the real Slurm test cluster.

test_slurm_backend.py checks the backend's commands one by one; here the site is assembled
from its configuration (``open_site``) as ``siteagent serve`` does, and the checks go through
the ReservationManager: an accepted reservation exists in slurmctld with the size asked for and
blocks that capacity, an unconfirmed one is deleted at its deadline, reconciliation deletes only
the agent's leftovers, an outage is an outage, and Slurm's refusal reaches the FAILED record.
Expectations are read with Slurm's own text commands, never with the parser under test.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence, Set, Tuple

import pytest

from siteagent.backends.base import BackendUnavailable
from siteagent.backends.slurm.backend import SlurmBackend
from siteagent.backends.slurm.jobs import parse_jobs
from siteagent.backends.slurm.times import parse_slurm_time
from siteagent.config import loading
from siteagent.core.estimates import DEFAULT_TOLERANCE_S, compare_starts
from siteagent.core.prediction import plan
from siteagent.market.lifecycle import ReservationFailed, ReservationRecord, ReservationState
from siteagent.market.site import Site, open_site
from testbed.inprocess.offers import record_offer
from testbed.slurm.cluster import SlurmTestCluster
from testbed.slurm.install import UNKNOWN_USER
from testbed.slurm.queue import (
    SIMPLE_PENDING,
    SIMPLE_RUNNING,
    job_state,
    published_starts,
    submit_queue,
    wait_for,
)

pytestmark = pytest.mark.slurm

CONFIRM_TIMEOUT_S = 3.0


@pytest.fixture
def site(slurm: SlurmTestCluster, tmp_path: Path) -> Iterator[Site]:
    """The site ``siteagent serve`` would open for this cluster (partition ``batch``)."""
    yield from opened_site(slurm, tmp_path)


def opened_site(slurm: SlurmTestCluster, tmp_path: Path, **options: Any) -> Iterator[Site]:
    """:func:`site`, with these ``backend.slurm`` options."""
    config = loading.parse(
        {
            "state_dir": str(tmp_path / "state"),
            "backend": {
                "type": "slurm",
                "slurm": {**slurm.backend_options(), "partition": "batch", **options},
            },
            "reservations": {"confirm_timeout_s": CONFIRM_TIMEOUT_S},
        }
    )
    opened = open_site(config)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def impatient_site(slurm: SlurmTestCluster, tmp_path: Path) -> Iterator[Site]:
    """:func:`site`, its Slurm commands giving up on a stopped controller after 1 s of
    retries rather than 9 s (:meth:`SlurmTestCluster.impatient_conf`)."""
    yield from opened_site(slurm, tmp_path, slurm_conf=slurm.impatient_conf())


def show_reservation(cluster: SlurmTestCluster, name: str) -> Dict[str, str]:
    """``scontrol show reservation -o NAME`` as key/value pairs; {} if there is none."""
    proc = cluster.run(["scontrol", "show", "reservation", "-o", name], check=False)
    if proc.returncode != 0:
        assert "not found" in proc.stdout + proc.stderr, proc.stderr
        return {}
    return dict(tok.split("=", 1) for tok in proc.stdout.split() if "=" in tok)


def reservation_names(cluster: SlurmTestCluster) -> List[str]:
    """Names as ``sinfo -T`` lists them (it ignores ``-o``: NAME STATE START END DURATION NODES;
    with none it prints "No reservations in the system")."""
    out = cluster.run(["sinfo", "-h", "-T"]).stdout
    lines = [line for line in out.splitlines() if line.strip()]
    return sorted(line.split()[0] for line in lines if not line.startswith("No reservations"))


def squeue(cluster: SlurmTestCluster, states: str, fmt: str) -> List[List[str]]:
    out = cluster.run(["squeue", "-h", "-r", "-t", states, "-o", fmt]).stdout
    return [line.split("|") for line in out.splitlines() if line.strip()]


def iso(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def accept(
    site: Site, size: int, start: int, duration: int, users: Tuple[str, ...] = ("root",)
) -> ReservationRecord:
    """Offer exactly this window and accept it, as a buyer mapped to ``users`` would."""
    offer = record_offer(site.manager, size, start, duration)
    return site.manager.accept(offer.id, "buyer", offer.id, users=users)


# ----------------------------------------------------------------------------- snapshot


def test_snapshot_of_jobs_in_reservations_matches_squeue_and_sinfo(
    slurm: SlurmTestCluster, site: Site
) -> None:
    now = int(time.time())
    slurm.run(
        [
            "scontrol",
            "create",
            "reservation",
            "ReservationName=maint-now",
            "Nodes=n4",
            f"StartTime={iso(now)}",
            "Duration=60",
            "Users=root",
        ]
    )
    slurm.run(
        [
            "scontrol",
            "create",
            "reservation",
            "ReservationName=course-later",
            "Nodes=n3",
            f"StartTime={iso(now + 3600)}",
            "Duration=30",
            "Users=root",
        ]
    )
    inside = slurm.submit("-n4", "-t", "20", "--reservation=maint-now")
    waiting = slurm.submit("-n2", "-t", "10", "--reservation=course-later")
    outside = slurm.submit("-n8", "-t", "30")
    held = slurm.submit("-H", "-n2", "-t", "10")
    array = slurm.submit("--array=0-2", "-n16", "-t", "15", "--begin=now+2hours")
    wait_for(
        "both jobs to run",
        lambda: job_state(slurm, inside) == "RUNNING" and job_state(slurm, outside) == "RUNNING",
    )

    snap = site.backend.snapshot()
    running = squeue(slurm, "R", "%i|%C|%v|%S")
    pending = squeue(slurm, "PD", "%i|%C|%v|%r")
    assert {j.id for j in snap.running} == {r[0] for r in running} == {inside, outside}
    assert {j.id for j in snap.pending} == {r[0] for r in pending}
    assert {f"{array}_0", f"{array}_1", f"{array}_2", held, waiting} == {r[0] for r in pending}
    for job in snap.running + snap.pending:
        row = next(r for r in running + pending if r[0] == job.id)
        assert job.cores == int(row[1])
        assert job.reservation == ("" if row[2] == "(null)" else row[2])
    assert next(r for r in pending if r[0] == waiting)[3] == "Reservation"

    # reservations as sinfo -T lists them (one node each), nodes as sinfo -N counts their cores
    listed = slurm.run(["sinfo", "-h", "-T"]).stdout.splitlines()
    expected = {
        f[0]: (parse_slurm_time(f[2]), parse_slurm_time(f[3]), 16 * len(f[5].split(",")))
        for f in (line.split() for line in listed)
    }
    assert {r.name: (r.start, r.end, r.cores) for r in snap.reservations} == expected
    cores = slurm.run(["sinfo", "-h", "-N", "-o", "%N|%C"]).stdout.split()
    alloc = {c.split("|")[0]: int(c.split("|")[1].split("/")[0]) for c in cores}
    assert {n.name: n.alloc_cores for n in snap.nodes} == alloc

    # the accept's re-check reads the same running work and reservations without the queue
    occupied = site.backend.occupancy()
    assert occupied.running == snap.running and occupied.reservations == snap.reservations
    assert occupied.pending == () and occupied.capacity == snap.capacity

    # the planner: the job inside the active reservation is covered by it, the one waiting
    # for the future reservation and the held one cannot be planned, the array starts later
    planned = plan(snap)
    assert set(planned.unplanned) == {held, waiting}
    assert all(planned.starts[f"{array}_{i}"] >= now + 7200 for i in range(3))
    open_cores = planned.profile.free_at(snap.now)  # 64 - 16 (maint-now) - 8 (outside)
    assert open_cores == 40


def test_a_recheck_reuses_running_jobs_only_while_no_job_started_or_ended(
    slurm: SlurmTestCluster, site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An accept's re-check reads the running jobs with squeue; the next one, a few seconds
    later, reuses them while every node's allocated cores (sinfo) are unchanged, and reads
    them again as soon as a job started or ended, or Slurm refused a reservation."""
    backend = site.backend
    assert isinstance(backend, SlurmBackend)
    commands: List[str] = []
    run = backend._run

    def recorded(args: Sequence[str]) -> Any:
        commands.append(args[0])
        return run(args)

    monkeypatch.setattr(backend, "_run", recorded)

    def running_ids() -> Tuple[Set[str], int]:
        commands.clear()
        occupied = backend.occupancy()
        return {job.id for job in occupied.running}, commands.count("squeue")

    assert running_ids() == (set(), 1)
    assert running_ids() == (set(), 0)  # nothing started: the jobs read before
    job = slurm.submit("-n16", "-t", "30")
    wait_for("the job to run", lambda: job_state(slurm, job) == "RUNNING")
    assert running_ids() == ({job}, 1)
    assert running_ids() == ({job}, 0)
    slurm.run(["scancel", job])
    wait_for("the job to end", lambda: job_state(slurm, job) == "")
    assert running_ids() == (set(), 1)
    assert running_ids() == (set(), 0)
    with pytest.raises(ReservationFailed):  # Slurm refuses: what was kept is not trusted
        accept(site, 4, int(time.time()) + 600, 600, users=("nosuchuser9",))
    assert running_ids() == (set(), 1)


# ----------------------------------------------------------------------------- reservations


def test_accepted_reservation_has_its_size_and_blocks_capacity(
    slurm: SlurmTestCluster, site: Site
) -> None:
    start = int(time.time()) + 2
    record = accept(site, 24, start, 1800)
    assert record.state is ReservationState.TENTATIVE
    shown = show_reservation(slurm, record.name)
    assert shown["TRES"] == "cpu=24" and shown["CoreCnt"] == "24"
    assert parse_slurm_time(shown["StartTime"]) == start
    assert parse_slurm_time(shown["EndTime"]) == start + 1800
    assert shown["Users"] == "root" and shown["PartitionName"] == "batch"
    wait_for(
        "the reservation to start",
        lambda: show_reservation(slurm, record.name).get("State") == "ACTIVE",
    )

    too_big = slurm.submit("-n48", "-t", "5")  # 64 - 24 = 40 cores outside the reservation
    fits = slurm.submit("-n40", "-t", "5")
    wait_for("the job that fits outside to run", lambda: job_state(slurm, fits) == "RUNNING")
    inside = slurm.submit("-n24", "-t", "5", f"--reservation={record.name}")
    wait_for("the job in the reservation to run", lambda: job_state(slurm, inside) == "RUNNING")
    time.sleep(7)  # more than one backfill pass (bf_interval=5)
    assert job_state(slurm, too_big) == "PENDING"


def test_unconfirmed_reservation_is_deleted_at_its_deadline(
    slurm: SlurmTestCluster, site: Site
) -> None:
    record = accept(site, 8, int(time.time()) + 600, 600)
    assert record.deadline is not None
    assert site.manager.reconciler.housekeeping().expired == []  # before the deadline: kept
    assert show_reservation(slurm, record.name)
    wait_for(
        "the confirm deadline",
        lambda: site.manager.clock() >= (record.deadline or 0),
        timeout=CONFIRM_TIMEOUT_S + 5,
    )
    assert site.manager.reconciler.housekeeping().expired == [record.id]
    expired = site.store.get_reservation(record.id)
    assert expired is not None and expired.state is ReservationState.EXPIRED
    assert show_reservation(slurm, record.name) == {}


def test_reconciliation_deletes_the_agents_orphan_only(slurm: SlurmTestCluster, site: Site) -> None:
    live = accept(site, 4, int(time.time()) + 600, 600)
    start = iso(int(time.time()) + 1200)
    for name in ("sa-orphan0001", "someone-else"):
        slurm.run(
            [
                "scontrol",
                "create",
                "reservation",
                f"ReservationName={name}",
                "CoreCnt=4",
                f"StartTime={start}",
                "Duration=10",
                "Users=root",
            ]
        )
    result = site.manager.reconciler.reconcile()
    assert result.orphans_deleted == ["sa-orphan0001"]
    assert result.lost == [] and result.failed == []
    assert reservation_names(slurm) == sorted([live.name, "someone-else"])


def test_slurm_refusal_is_carried_into_the_failed_record(
    slurm: SlurmTestCluster, site: Site
) -> None:
    with pytest.raises(ReservationFailed) as failed:
        accept(site, 4, int(time.time()) + 600, 600, users=("nosuchuser9",))
    record = site.store.get_reservation(failed.value.record.id)
    assert record is not None and record.state is ReservationState.FAILED
    wording = UNKNOWN_USER[slurm.install.series]
    assert f"Error creating the reservation: {wording}" in (record.message or "")
    # Slurm's words are ambiguous: the agent says what they may mean
    hint = "AdminLevel=Operator" if wording == "Invalid user id" else "a user it does not know"
    assert hint in (record.message or "")
    assert reservation_names(slurm) == []


# ----------------------------------------------------------------------------- outages


def test_squeue_json_with_controller_down_is_an_outage(
    slurm: SlurmTestCluster, impatient_site: Site
) -> None:
    site = impatient_site
    offer = record_offer(site.manager, 4, int(time.time()) + 600, 600)
    slurm.stop_controller()
    try:
        impatient = {"SLURM_CONF": slurm.impatient_conf()}
        proc = slurm.run(["squeue", "--json"], check=False, timeout=60, env=impatient)
        if slurm.install.series == "22.05":
            doc = json.loads(proc.stdout)
            # what makes it dangerous: success exit, no jobs, and only an error entry says why
            assert proc.returncode == 0 and doc["jobs"] == [] and doc["errors"]
            with pytest.raises(BackendUnavailable, match="Failed while looking for jobs"):
                parse_jobs(doc, int(time.time()))
        else:  # 24.11 and 26.05 fail as the text form does (docs/slurm.md §11)
            assert proc.returncode == 1 and proc.stdout == ""
            assert "Unable to contact slurm controller" in proc.stderr
        with pytest.raises(BackendUnavailable):
            site.manager.accept(offer.id, "buyer", "k1", users=("root",))
        assert site.store.reservation_for_offer(offer.id) is None  # nothing half-done
    finally:
        slurm.start_controller()
    assert site.manager.accept(offer.id, "buyer", "k1", users=("root",)).state is (
        ReservationState.TENTATIVE
    )


# ----------------------------------------------------------------------------- estimates


def test_predicted_starts_agree_with_slurms_within_a_minute(
    slurm: SlurmTestCluster, site: Site
) -> None:
    pending = submit_queue(slurm, SIMPLE_RUNNING, SIMPLE_PENDING)
    agreement = compare_starts(site.backend.snapshot())
    assert sorted(p.job_id for p in agreement.pairs) == sorted(pending)
    published = {job: parse_slurm_time(start) for job, start in published_starts(slurm)}
    assert {p.job_id: p.published for p in agreement.pairs} == published
    # backfill rounds starts that do not follow from a running job's end to bf_resolution
    # (60 s); the 64-core job's start is exactly the 40-core job's end in both
    assert agreement.fraction_within(DEFAULT_TOLERANCE_S) == 1.0, agreement.pairs
    assert next(p for p in agreement.pairs if p.job_id == pending[0]).difference == 0
