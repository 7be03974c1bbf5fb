"""PbsBackend against the OpenPBS stand-in: snapshots, reservations, refusals, outages.

Expectations are checked against what the stand-in's simulated scheduler holds (``siminfo``),
not against the text the backend parses, so a parser bug cannot confirm itself.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import pytest

from siteagent.backends.base import BackendError, BackendUnavailable, ReservationRefused
from siteagent.backends.pbs import PbsBackend, PbsConfig
from siteagent.core.values import CapacityUnit, ClusterSnapshot, ReservationSpec
from testbed.standins.pbs.harness import StandinServer, StartStandin


def backend(server: StandinServer, **kw: Any) -> PbsBackend:
    config: Dict[str, Any] = dict(pbs_conf=str(server.conf), env=server.env, users=("alice",))
    config.update(kw)
    return PbsBackend(PbsConfig(**config))


def spec(name: str, start: int, duration: int, size: int, **kw: Any) -> ReservationSpec:
    return ReservationSpec(name=name, start=start, duration=duration, size=size, **kw)


def wait_for(what: str, check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def steady_snapshot(server: StandinServer, b: PbsBackend) -> Tuple[ClusterSnapshot, Dict[str, Any]]:
    """A snapshot and the simulator's state, taken while no job started or ended."""
    for _ in range(20):
        before = server.siminfo()
        snap = b.snapshot()
        after = server.siminfo()
        if (before["running"], before["queued"]) == (after["running"], after["queued"]):
            return snap, after
    raise AssertionError("the simulated queue never held still for a snapshot")


# ----------------------------------------------------------------------------- snapshot


def test_snapshot_matches_the_simulated_scheduler(sdsc: StandinServer) -> None:
    snap, sim = steady_snapshot(sdsc, backend(sdsc))
    assert snap.capacity == sim["capacity"] == 128 and snap.cores_per_node == 16
    assert snap.backend == "pbs" and snap.extra["pbs_server"] == "pbs-head"
    running = {j.id: j for j in snap.running}
    assert set(running) == {t["id"] for t in sim["running"]}
    for task in sim["running"]:
        job = running[task["id"]]
        assert (job.cores, job.start, job.limit) == (task["procs"], task["start"], task["estimate"])
        assert job.submit == task["submit"]
    # pending in the server's (submission) order, the scheduler's plan on the top job only
    assert [j.id for j in snap.pending] == [t["id"] for t in sim["queued"]]
    for job, task in zip(snap.pending, sim["queued"]):
        assert (job.cores, job.limit, job.eligible) == (task["procs"], task["estimate"], True)
        assert job.expected_start == task["planned"]
    assert sum(1 for j in snap.pending if j.expected_start is not None) == 1
    # every CPU the simulator gave a job is on some vnode
    assert sum(n.alloc_cores for n in snap.nodes) == sum(t["procs"] for t in sim["running"])
    assert all(n.usable and n.cores == 16 for n in snap.nodes)


# ----------------------------------------------------------------------------- reservations


def test_reservation_confirmed_blocks_capacity_and_is_deleted(sdsc: StandinServer) -> None:
    b = backend(sdsc)
    start = int(time.time()) + 3 * 86400  # past every running job's walltime
    window = {"start": start, "end": start + 3600}
    assert sdsc.request({"op": "free", **window})["free"] == 128

    t0 = time.monotonic()
    made = b.create_reservation(spec("sa-block", start, 3600, 64))
    # returned only after PBS's scheduler confirmed it, a cycle (0.3 s) after the request
    assert time.monotonic() - t0 >= 0.3
    assert made.state == "CONFIRMED" and made.name == "sa-block"
    assert (made.start, made.end, made.cores) == (start, start + 3600, 64)
    assert made.users == ("alice", "root") and made.node_list.count("ncpus=1") == 64

    sim = sdsc.siminfo()
    resv_id = b.snapshot().extra["reservation_ids"]["sa-block"]
    assert sim["reservations"] == {resv_id: [start, start + 3600, 64]}
    assert sdsc.request({"op": "free", **window})["free"] == 64
    assert "sa-block" in {r.name for r in b.list_reservations()}
    assert "sa-block" in {r.name for r in b.snapshot().reservations}

    b.delete_reservation("sa-block")
    assert sdsc.siminfo()["reservations"] == {}
    assert sdsc.request({"op": "free", **window})["free"] == 128
    assert b.list_reservations() == []
    b.delete_reservation("sa-block")  # gone already: not an error
    with pytest.raises(ValueError, match="not an agent reservation"):
        b.delete_reservation("other1")


def test_denied_when_the_capacity_is_busy(sdsc: StandinServer) -> None:
    b = backend(sdsc)
    assert sdsc.siminfo()["running"], "the trace should have jobs running now"
    with pytest.raises(ReservationRefused, match=r"PBS denied R\d+\.pbs-head") as refused:
        b.create_reservation(spec("sa-full", int(time.time()), 1800, 128))
    assert "Unknown Reservation Id" in str(refused.value)  # PBS's own words
    assert b.list_reservations() == [] and sdsc.siminfo()["reservations"] == {}
    assert len(sdsc.siminfo()["denied"]) >= 1


def test_retry_with_the_same_name_is_idempotent(sdsc: StandinServer) -> None:
    b = backend(sdsc)
    start = int(time.time()) + 3 * 86400
    first = b.create_reservation(spec("sa-twice", start, 600, 4))
    assert b.create_reservation(spec("sa-twice", start, 600, 4)) == first
    assert len(sdsc.siminfo()["reservations"]) == 1
    with pytest.raises(ReservationRefused, match="another window"):
        b.create_reservation(spec("sa-twice", start + 60, 600, 4))


def test_a_reservation_keeps_jobs_out_until_deleted(
    start_standin: StartStandin, tiny_trace: Path
) -> None:
    server = start_standin(trace=tiny_trace, nodes=2, offset_s=100)
    b = backend(server)
    # job 1 holds 24 of 32 CPUs for two hours, job 2 waits for all 32: 8 CPUs are free
    made = b.create_reservation(spec("sa-eight", int(time.time()), 1800, 8))
    assert made.cores == 8 and made.state in ("CONFIRMED", "RUNNING")
    with pytest.raises(ReservationRefused, match="denied"):
        b.create_reservation(spec("sa-one", int(time.time()), 1800, 1))

    # job 3 arrives (8 CPUs, 10 min: it would backfill before job 2) and must wait
    wait_for("job 3 to arrive", lambda: len(server.siminfo()["queued"]) == 2)
    time.sleep(1.0)
    sim = server.siminfo()
    assert [t["procs"] for t in sim["queued"]] == [32, 8] and len(sim["running"]) == 1
    snap = b.snapshot()
    assert [r.name for r in snap.reservations] == ["sa-eight"]
    assert snap.reservations[0].state == "RUNNING"
    assert [j.cores for j in snap.pending] == [32, 8]

    b.delete_reservation("sa-eight")
    sim = server.siminfo()
    assert sorted(t["procs"] for t in sim["running"]) == [8, 24]  # job 3 started at once


def test_unconfirmed_in_time_is_refused_and_deleted(
    start_standin: StartStandin, done_trace: Path
) -> None:
    server = start_standin(trace=done_trace, nodes=2, confirm_delay=30)
    b = backend(server, confirm_timeout=0.5)
    with pytest.raises(ReservationRefused, match=r"did not confirm R\d+\.pbs-head within 0\.5 s"):
        b.create_reservation(spec("sa-slow", int(time.time()) + 3600, 600, 2))
    assert server.siminfo()["states"] == {} and b.list_reservations() == []


def test_node_reservations_on_exclusive_vnodes(start_standin: StartStandin) -> None:
    server = start_standin(exclusive=True)
    b = backend(server, unit=CapacityUnit.NODE)
    snap, sim = steady_snapshot(server, b)
    assert snap.capacity == sim["capacity"] == 8 and snap.unit is CapacityUnit.NODE
    running = {j.id: j for j in snap.running}
    for task in sim["running"]:
        job = running[task["id"]]
        assert job.nodes == task["size"]
        assert job.cores == 16 * task["size"]  # whole vnodes, whatever the job asked for
    busy = {n.name for n in snap.nodes if n.alloc_cores}
    assert all(n.alloc_cores == 16 for n in snap.nodes if n.name in busy)
    assert len(busy) == sum(t["size"] for t in sim["running"])

    start = int(time.time()) + 3 * 86400
    made = b.create_reservation(spec("sa-nodes", start, 3600, 2, unit=CapacityUnit.NODE))
    assert (made.nodes, made.cores) == (2, 32) and made.flags == ("scatter", "excl")
    assert list(server.siminfo()["reservations"].values()) == [[start, start + 3600, 2]]


def test_deleting_needs_the_owner_or_a_manager(sdsc: StandinServer) -> None:
    start = int(time.time()) + 3 * 86400
    backend(sdsc).create_reservation(spec("sa-mine", start, 600, 2))
    stranger = backend(sdsc, env={**sdsc.env, "PBS_STANDIN_USER": "bob"})
    with pytest.raises(BackendError, match="Unauthorized Request"):
        stranger.delete_reservation("sa-mine")
    assert len(sdsc.siminfo()["reservations"]) == 1


# ----------------------------------------------------------------------------- outages


def test_server_down_is_unavailable(start_standin: StartStandin, done_trace: Path) -> None:
    server = start_standin(trace=done_trace, nodes=2)
    b = backend(server)
    assert b.snapshot().capacity == 32
    server.stop()
    with pytest.raises(BackendUnavailable, match="cannot connect to server"):
        b.snapshot()
    with pytest.raises(BackendUnavailable, match="cannot connect to server"):
        b.create_reservation(spec("sa-down", int(time.time()) + 3600, 600, 2))
    with pytest.raises(BackendUnavailable):
        b.delete_reservation("sa-down")
    with pytest.raises(BackendUnavailable):
        b.list_reservations()


def test_a_hung_server_times_out(start_standin: StartStandin, done_trace: Path) -> None:
    server = start_standin(trace=done_trace, nodes=2)
    server.pause()
    try:
        t0 = time.monotonic()
        with pytest.raises(BackendUnavailable, match="did not answer within 1 s"):
            backend(server, timeout=1.0).snapshot()
        assert time.monotonic() - t0 < 3
    finally:
        server.resume()
    assert backend(server).snapshot().capacity == 32
