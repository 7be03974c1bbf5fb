"""PbsBackend against a real OpenPBS (testbed/pbs/cluster.py: pbs_server, pbs_sched, four
pbs_moms n1..n4 of 16 CPUs, queue ``workq``): snapshots, reservations confirmed, denied or
left unconfirmed, deletion, node reservations, outages.

Expectations are read with PBS's plain text listings (``qstat -f``, ``pbsnodes -a``,
``pbs_rstat -f``, through :func:`testbed.pbs.cluster.text_blocks`), never with the backend's
parsers of the JSON forms, so a parser bug cannot confirm itself. One cluster serves the
session; every test starts and ends with it empty.
"""

from __future__ import annotations

import calendar
import os
import signal
import time
from typing import Any, Dict

import pytest

from siteagent.backends.base import BackendUnavailable, ReservationRefused
from siteagent.backends.pbs import PbsBackend, PbsConfig
from siteagent.core.values import CapacityUnit, ReservationSpec
from testbed.pbs.cluster import PbsTestCluster, text_blocks
from testbed.processes.programs import wait_until

pytestmark = pytest.mark.pbs


def backend(cluster: PbsTestCluster, **kw: Any) -> PbsBackend:
    config: Dict[str, Any] = dict(
        pbs_conf=str(cluster.conf), env={"PATH": cluster.env["PATH"]}, users=("root",)
    )
    config.update(kw)
    return PbsBackend(PbsConfig(**config))


def spec(name: str, start: int, duration: int, size: int, **kw: Any) -> ReservationSpec:
    return ReservationSpec(name=name, start=start, duration=duration, size=size, **kw)


def epoch(text: str) -> int:
    """A date as PBS prints it in UTC (``Sat Nov 28 14:55:54 2026``)."""
    return calendar.timegm(time.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y"))


def seconds(text: str) -> int:
    hours, minutes, secs = (int(p) for p in text.split(":"))
    return (hours * 60 + minutes) * 60 + secs


def jobs(cluster: PbsTestCluster) -> Dict[str, Dict[str, str]]:
    return text_blocks(cluster.run(["qstat", "-f"]).stdout)


def reservations(cluster: PbsTestCluster) -> Dict[str, Dict[str, str]]:
    return text_blocks(cluster.run(["pbs_rstat", "-f"]).stdout)


def state(cluster: PbsTestCluster, job: str) -> str:
    return jobs(cluster).get(job, {}).get("job_state", "")


def reserved_cpus(resv_nodes: str) -> Dict[str, int]:
    """CPUs per vnode in ``resv_nodes`` (``(n1:ncpus=8)+(n2:ncpus=1)+...``)."""
    cpus: Dict[str, int] = {}
    for chunk in resv_nodes.replace("(", "").replace(")", "").split("+"):
        vnode, _, ncpus = chunk.partition(":ncpus=")
        cpus[vnode] = cpus.get(vnode, 0) + int(ncpus.split(":")[0])
    return cpus


# ----------------------------------------------------------------------------- snapshot


def test_snapshot_matches_qstat_and_pbsnodes(openpbs: PbsTestCluster) -> None:
    small = openpbs.submit("-l", "select=1:ncpus=4", "-l", "walltime=00:30:00")
    wide = openpbs.submit(
        "-l", "select=2:ncpus=16", "-l", "place=scatter", "-l", "walltime=01:00:00"
    )
    whole = openpbs.submit("-l", "select=4:ncpus=16", "-l", "walltime=01:00:00")
    short = openpbs.submit("-l", "select=1:ncpus=8", "-l", "walltime=00:10:00")  # backfills
    held = openpbs.submit("-h", "-l", "select=1:ncpus=2", "-l", "walltime=00:10:00")
    wait_until(
        "three jobs to run and the top job's estimate",
        lambda: (
            all(state(openpbs, j) == "R" for j in (small, wide, short))
            and "estimated.start_time" in jobs(openpbs).get(whole, {})
        ),
    )

    snap = backend(openpbs).snapshot()
    listed = jobs(openpbs)
    assert snap.capacity == 64 and snap.cores_per_node == 16
    assert snap.backend == "pbs" and snap.extra["pbs_server"] == "pbshead"
    assert {j.id for j in snap.running} == {small, wide, short}
    for job in snap.running:
        shown = listed[job.id]
        assert job.cores == int(shown["Resource_List.ncpus"])
        assert job.start == epoch(shown["stime"])
        assert job.limit == seconds(shown["Resource_List.walltime"])
        assert job.nodes == int(shown["Resource_List.nodect"])
    assert [j.id for j in snap.pending] == [whole, held]
    top, waiting = snap.pending
    assert top.cores == 64 and top.eligible
    assert top.expected_start == epoch(listed[whole]["estimated.start_time"])
    assert waiting.cores == 2 and not waiting.eligible  # held (Hold_Types = u)
    nodes = text_blocks(openpbs.run(["pbsnodes", "-a"]).stdout)
    assert {n.name: n.alloc_cores for n in snap.nodes} == {
        name: int(rec["resources_assigned.ncpus"]) for name, rec in nodes.items()
    }
    assert all(n.usable and n.cores == 16 for n in snap.nodes)


# ----------------------------------------------------------------------------- reservations


def test_reservation_is_confirmed_blocks_its_cpus_and_is_deleted(openpbs: PbsTestCluster) -> None:
    b = backend(openpbs)
    start = int(time.time())
    made = b.create_reservation(spec("sa-block", start, 1800, 24))
    assert made.state == "CONFIRMED" and made.name == "sa-block" and made.cores == 24
    assert made.end == start + 1800 and start <= made.start <= start + 5
    ((resv_id, shown),) = reservations(openpbs).items()
    assert shown["Reserve_Name"] == "sa-block" and shown["reserve_state"] == "RESV_CONFIRMED"
    assert (epoch(shown["reserve_start"]), epoch(shown["reserve_end"])) == (made.start, made.end)
    assert sum(reserved_cpus(shown["resv_nodes"]).values()) == 24
    assert made.node_list == shown["resv_nodes"] and made.users == ("root",)
    assert b.snapshot().extra["reservation_ids"] == {"sa-block": resv_id}

    wait_until(
        "the reservation to run",
        lambda: reservations(openpbs)[resv_id]["reserve_state"] == "RESV_RUNNING",
    )
    inside = openpbs.submit(
        "-q", resv_id.split(".")[0], "-l", "select=24:ncpus=1", "-l", "walltime=00:05:00"
    )
    too_big = openpbs.submit("-l", "select=41:ncpus=1", "-l", "walltime=00:05:00")
    wait_until("the job in the reservation to run", lambda: state(openpbs, inside) == "R")
    time.sleep(2)  # scheduling cycles ran for both submissions
    assert state(openpbs, too_big) == "Q"  # 64 - 24 reserved = 40 CPUs outside
    assert [r.name for r in b.snapshot().reservations] == ["sa-block"]

    b.delete_reservation("sa-block")
    wait_until(
        "the reservation and its job to go",
        lambda: not reservations(openpbs) and state(openpbs, inside) in ("", "F"),
    )
    wait_until("the big job to run once the CPUs are free", lambda: state(openpbs, too_big) == "R")
    assert b.list_reservations() == []
    b.delete_reservation("sa-block")  # gone already: not an error
    with pytest.raises(ValueError, match="not an agent reservation"):
        b.delete_reservation("other1")


def test_denied_when_the_cpus_are_busy(openpbs: PbsTestCluster) -> None:
    busy = openpbs.submit("-l", "select=4:ncpus=16", "-l", "walltime=01:00:00")
    wait_until("the job to run", lambda: state(openpbs, busy) == "R")
    with pytest.raises(ReservationRefused, match=r"PBS denied R\d+\.pbshead") as refused:
        backend(openpbs).create_reservation(spec("sa-full", int(time.time()), 1800, 8))
    assert "Unknown Reservation Id" in str(refused.value)  # PBS's own words
    assert reservations(openpbs) == {}
    # after the job's walltime the same CPUs are free: confirmed
    later = int(time.time()) + 3600 + 60
    made = backend(openpbs).create_reservation(spec("sa-later", later, 600, 8))
    assert made.state == "CONFIRMED"


def test_retry_with_the_same_name_is_idempotent(openpbs: PbsTestCluster) -> None:
    b = backend(openpbs)
    start = int(time.time()) + 3600
    first = b.create_reservation(spec("sa-twice", start, 600, 4))
    assert b.create_reservation(spec("sa-twice", start, 600, 4)) == first
    assert len(reservations(openpbs)) == 1
    with pytest.raises(ReservationRefused, match="another window"):
        b.create_reservation(spec("sa-twice", start + 60, 600, 4))


def test_unconfirmed_in_time_is_refused_and_deleted(openpbs: PbsTestCluster) -> None:
    """With pbs_sched frozen nobody decides: after the confirm timeout the agent deletes the
    UNCONFIRMED reservation itself."""
    sched = openpbs.daemon_pid("pbs_sched")
    os.kill(sched, signal.SIGSTOP)
    try:
        with pytest.raises(ReservationRefused, match=r"did not confirm R\d+\.pbshead within 1 s"):
            backend(openpbs, confirm_timeout=1.0).create_reservation(
                spec("sa-slow", int(time.time()) + 3600, 600, 2)
            )
        assert reservations(openpbs) == {}
    finally:
        os.kill(sched, signal.SIGCONT)


def test_node_reservations_take_whole_vnodes(openpbs: PbsTestCluster) -> None:
    openpbs.submit("-l", "select=1:ncpus=1", "-l", "walltime=01:00:00")  # one vnode in use
    b = backend(openpbs, unit=CapacityUnit.NODE)
    made = b.create_reservation(spec("sa-nodes", int(time.time()), 1800, 3, unit=CapacityUnit.NODE))
    assert (made.nodes, made.cores) == (3, 48) and made.flags == ("scatter", "excl")
    (shown,) = reservations(openpbs).values()
    assert sorted(reserved_cpus(shown["resv_nodes"]).values()) == [16, 16, 16]
    with pytest.raises(ReservationRefused, match="denied"):  # the fourth vnode runs a job
        b.create_reservation(spec("sa-more", int(time.time()), 1800, 1, unit=CapacityUnit.NODE))


# ----------------------------------------------------------------------------- outages


def test_a_hung_server_times_out(openpbs: PbsTestCluster) -> None:
    server = openpbs.daemon_pid("pbs_server")
    os.kill(server, signal.SIGSTOP)
    try:
        with pytest.raises(BackendUnavailable, match="did not answer within 2 s"):
            backend(openpbs, timeout=2.0).snapshot()
    finally:
        os.kill(server, signal.SIGCONT)
    assert backend(openpbs).snapshot().capacity == 64


def test_server_down_is_unavailable(openpbs: PbsTestCluster) -> None:
    b = backend(openpbs)
    openpbs.stop_server()
    try:
        with pytest.raises(BackendUnavailable, match="cannot connect to server"):
            b.snapshot()
        with pytest.raises(BackendUnavailable, match="cannot connect to server"):
            b.create_reservation(spec("sa-down", int(time.time()) + 3600, 600, 2))
        with pytest.raises(BackendUnavailable):
            b.delete_reservation("sa-down")
        with pytest.raises(BackendUnavailable):
            b.list_reservations()
    finally:
        openpbs.start_server()
    assert b.snapshot().capacity == 64
