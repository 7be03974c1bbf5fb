"""Parsers of the PBS backend against fixtures constructed from docs/pbs.md.

These fixtures in tests/data/pbs are constructed (see its README), for the cases a small test
cluster does not produce (down vnodes, history, waiting jobs, time zones...); output captured
from a real OpenPBS is read in test_pbs_openpbs_captures.py, and the backend meets the real
commands in tests/integration/pbs/.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Sequence
from zoneinfo import ZoneInfo

import pytest

from siteagent.backends.base import BackendUnavailable
from siteagent.backends.pbs.arguments import local_datetime, parse_rsub_reply, rsub_args
from siteagent.backends.pbs.backend import PbsBackend
from siteagent.backends.pbs.config import PbsConfig
from siteagent.backends.pbs.jobs import PbsJobs, parse_jobs
from siteagent.backends.pbs.nodes import parse_nodes
from siteagent.backends.pbs.reservations import PbsReservation, parse_reservations
from siteagent.backends.pbs.snapshot import build_snapshot
from siteagent.backends.pbs.values import (
    array_indices,
    exec_allocation,
    exec_vnodes,
    number,
    parse_duration,
    parse_pbs_time,
    parse_select,
    parse_size_kb,
    select_totals,
)
from siteagent.core.names import PBS_NAME_MAX
from siteagent.core.values import (
    UNLIMITED_S,
    BatchReservation,
    CapacityUnit,
    Job,
    Placement,
    ReservationSpec,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "pbs"
#: 2023-11-15 14:00:00 UTC: docs/pbs.md's examples are taken at this instant.
NOW = 1700056800
UTC = ZoneInfo("UTC")


def load(name: str) -> Dict[str, Any]:
    doc: Dict[str, Any] = json.loads((DATA / name).read_text())
    return doc


def by_id(jobs: List[Job]) -> Dict[str, Job]:
    return {j.id: j for j in jobs}


def utc(text: str) -> int:
    stamp = parse_pbs_time(text)
    assert stamp is not None
    return stamp


# ----------------------------------------------------------------------------- value helpers


def test_numbers_come_as_json_numbers_or_numeric_strings() -> None:
    assert number(16) == 16 and number("16") == 16 and number(" 8 ") == 8
    assert number("16gb") is None and number(None) is None and number(True) is None


def test_durations() -> None:
    assert parse_duration("01:00:00") == 3600
    assert parse_duration("48:00:00") == 48 * 3600
    assert parse_duration("420:16:02") == 420 * 3600 + 16 * 60 + 2
    assert parse_duration("10:00") == 600
    assert parse_duration("3600") == 3600 and parse_duration(90) == 90
    assert parse_duration("1d") is None and parse_duration(None) is None


def test_sizes_in_kb() -> None:
    assert parse_size_kb("4gb") == 4 * 1024 * 1024
    assert parse_size_kb("527672488kb") == 527672488
    assert parse_size_kb("0kb") == 0
    assert parse_size_kb("2048") == 2  # bytes
    assert parse_size_kb("1mw") == 8 * 1024  # words of 8 bytes
    assert parse_size_kb("lots") is None


def test_dates_are_local_time_of_the_command() -> None:
    assert parse_pbs_time("Wed Nov 15 14:00:00 2023") == NOW
    # ctime pads the day with a space, pbs_rstat's strftime with a zero
    assert parse_pbs_time("Wed Nov  1 09:05:00 2023") == parse_pbs_time("Wed Nov 01 09:05:00 2023")
    assert parse_pbs_time("Wed Nov 15 23:00:00 2023", ZoneInfo("Asia/Tokyo")) == NOW
    # the scheduler stored 0 for an estimate it could not make
    assert parse_pbs_time("UNKNOWN") is None
    assert parse_pbs_time("2023-11-15T14:00:00") is None


def test_select_statements() -> None:
    assert parse_select("2:ncpus=8:mem=16gb+host=n1:ncpus=4") == [
        (2, {"ncpus": "8", "mem": "16gb"}),
        (1, {"host": "n1", "ncpus": "4"}),
    ]
    assert select_totals("4:ncpus=16") == (4, 64)
    assert select_totals("3:mem=1gb") == (3, 3)  # a chunk without ncpus has one CPU
    with pytest.raises(ValueError):
        parse_select("x:ncpus=1")
    with pytest.raises(ValueError):
        parse_select("2:ncpus")


def test_exec_vnode_names() -> None:
    assert exec_vnodes("(node01:ncpus=8:mem=8388608kb)+(node02:ncpus=8:mem=8388608kb)") == [
        "node01",
        "node02",
    ]
    # a chunk split over vnodes, and a vnode allocated but unused (§2.1)
    assert exec_vnodes("(vA:ncpus=4+vB:ncpus=4)+(vC)+(vA:ncpus=1)") == ["vA", "vB", "vC"]
    assert exec_vnodes(None) == []


def test_exec_vnode_cpus() -> None:
    """The CPUs held on each vnode, chunks on one vnode added up (pbs_rsub's one-CPU chunks
    list it once per chunk), bare vnodes left out."""
    assert exec_allocation("(vA:ncpus=4:mem=4gb+vB:ncpus=4)+(vC)+(vA:ncpus=1)") == (
        ("vA", 5),
        ("vB", 4),
    )
    assert exec_allocation("(n3:ncpus=1)+(n3:ncpus=1)") == (("n3", 2),)
    assert exec_allocation(None) == ()


def test_array_ranges() -> None:
    assert array_indices("4-9") == [4, 5, 6, 7, 8, 9]
    assert array_indices("2-3,12") == [2, 3, 12]
    assert array_indices("1-7:3") == [1, 4, 7]


# ----------------------------------------------------------------------------- jobs


def test_queue_jobs() -> None:
    jobs = parse_jobs(load("qstat-queue-constructed.json"), NOW)
    running = by_id(jobs.running)
    pending = by_id(jobs.pending)
    assert set(running) == {"101.pbs-head", "106.pbs-head", "109.pbs-head"}
    assert jobs.finished == 1  # 108 is history

    a = running["101.pbs-head"]
    assert (a.cores, a.nodes, a.limit) == (16, 2, 7200)
    assert a.start == utc("Wed Nov 15 13:51:50 2023")
    assert a.submit == utc("Wed Nov 15 13:50:01 2023")
    assert a.user == "alice" and a.partition == "workq" and a.reservation == ""
    assert jobs.nodes_of["101.pbs-head"] == ["node01", "node02"]

    big = pending["102.pbs-head"]
    assert big.expected_start == utc("Wed Nov 15 15:51:50 2023")  # a top job
    assert big.eligible and "102.pbs-head" in jobs.exclusive  # place=scatter:excl

    held = pending["104.pbs-head"]
    assert not held.eligible and held.expected_start is None

    later = pending["105.pbs-head"]  # numbers as strings, day padded with a space
    assert (later.cores, later.limit) == (8, 48 * 3600)
    assert later.not_before == utc("Wed Nov 15 18:00:00 2023") and later.eligible
    assert later.submit == utc("Wed Nov  1 09:05:00 2023")

    assert not pending["111.pbs-head"].eligible  # W without a start time: stage-in failed
    assert running["106.pbs-head"].reservation == "R210"
    assert pending["107.pbs-head"].limit == UNLIMITED_S  # no walltime
    assert pending["110.pbs-head"].partition == "gpuq"


def test_array_parent_without_subjobs_is_expanded() -> None:
    jobs = parse_jobs(load("qstat-queue-constructed.json"), NOW)
    subjobs = [j for j in jobs.pending if j.id.startswith("103[")]
    assert len(subjobs) == 96  # array_indices_remaining 4-99
    assert subjobs[0].id == "103[4].pbs-head" and subjobs[-1].id == "103[99].pbs-head"
    assert {j.cores for j in subjobs} == {1}
    assert jobs.arrays_expanded == ["103[].pbs-head"]


def test_array_with_subjobs_listed_drops_the_parent() -> None:
    jobs = parse_jobs(load("qstat-arrays-t-constructed.json"), NOW)
    assert [j.id for j in jobs.running] == ["103[0].pbs-head", "103[1].pbs-head"]
    assert [j.id for j in jobs.pending] == ["103[2].pbs-head", "103[3].pbs-head"]
    assert jobs.arrays_expanded == []
    # PBS puts an array's estimate on the parent: it goes to the first queued subjob
    assert [j.expected_start for j in jobs.pending] == [utc("Wed Nov 15 14:08:00 2023"), None]


def test_no_jobs_key_is_an_empty_queue_and_no_header_is_an_error() -> None:
    empty = parse_jobs(load("qstat-empty-constructed.json"), NOW)
    assert empty.running == [] and empty.pending == []
    with pytest.raises(ValueError, match="not a PBS JSON document"):
        parse_jobs({"Jobs": {}}, NOW)


# ----------------------------------------------------------------------------- nodes


def test_nodes() -> None:
    nodes = {n.node.name: n for n in parse_nodes(load("pbsnodes-constructed.json"))}
    assert nodes["node01"].node.alloc_cores == 16 and nodes["node01"].node.usable
    # "free" is not idle: 8 of 16 CPUs in use
    assert nodes["node02"].node.alloc_cores == 8 and nodes["node02"].node.state == "free"
    # resources_assigned leaves zeros out: no ncpus means none
    assert nodes["node03"].node.alloc_cores == 0 and nodes["node03"].node.usable
    down = nodes["node04"].node
    assert not down.usable and down.reason == "node down: communication closed"
    # job-exclusive takes the whole vnode although one CPU is assigned
    assert nodes["node05"].node.alloc_cores == 16
    assert nodes["gpu01"].node.partitions == ("gpuq",) and nodes["gpu01"].node.cores == 32
    assert nodes["node01"].node.memory_mb == 65536000 // 1024


# ----------------------------------------------------------------------------- reservations


def test_reservations_are_named_for_the_agent() -> None:
    resvs = {
        r.id: r for r in parse_reservations((DATA / "rstat-f-utc-constructed.txt").read_text())
    }
    # a foreign name (no agent prefix) and an unnamed one go by their ids
    assert resvs["R123.pbs-head"].record.name == "R123.pbs-head"
    assert resvs["R210.pbs-head"].record.name == "R210.pbs-head"
    assert resvs["R210.pbs-head"].reserve_name == ""
    # the agent's by their names; a second one with the same name is set apart
    assert resvs["R124.pbs-head"].record.name == "sa-offer1"
    assert resvs["R211.pbs-head"].record.name == "sa-offer2"
    assert resvs["R212.pbs-head"].record.name == "sa-offer2@R212.pbs-head"


def test_reservation_fields() -> None:
    resvs = {
        r.id: r for r in parse_reservations((DATA / "rstat-f-utc-constructed.txt").read_text())
    }
    r123 = resvs["R123.pbs-head"]
    assert (r123.record.start, r123.record.end) == (NOW, NOW + 3600)
    assert (r123.record.cores, r123.record.nodes) == (16, 2)
    assert r123.state == "CONFIRMED" and r123.queue == "R123"
    assert r123.record.node_list == "(node01:ncpus=8)+(node02:ncpus=8)"
    assert r123.record.users == ("agent",)

    unconfirmed = resvs["R124.pbs-head"]
    assert unconfirmed.state == "UNCONFIRMED" and unconfirmed.record.node_list == ""
    assert unconfirmed.record.nodes == 8  # no resv_nodes yet: nodect
    assert unconfirmed.record.users == ("alice", "agent")

    excl = resvs["R211.pbs-head"].record
    assert excl.start == utc("Fri Dec  1 10:00:00 2023")  # printed zero-padded
    assert excl.flags == ("scatter", "excl") and excl.accounts == ("proj42",)
    assert resvs["R213.pbs-head"].state == "DEGRADED"
    assert resvs["R214.pbs-head"].state == "BEING_DELETED"


def test_a_reservation_without_end_ends_after_its_duration() -> None:
    text = "Resv ID: R9.h\nreserve_start = Wed Nov 15 14:00:00 2023\nreserve_duration = 600\n"
    assert [(r.record.start, r.record.end) for r in parse_reservations(text)] == [(NOW, NOW + 600)]
    assert parse_reservations("Resv ID: R9.h\nreserve_duration = 600\n") == []


def test_reservation_times_follow_the_command_time_zone() -> None:
    tokyo = parse_reservations(
        (DATA / "rstat-f-tokyo-constructed.txt").read_text(), ZoneInfo("Asia/Tokyo")
    )
    assert (tokyo[0].record.start, tokyo[0].record.end) == (NOW, NOW + 3600)


# ----------------------------------------------------------------------------- creating


def spec(**kw: Any) -> ReservationSpec:
    base: Dict[str, Any] = dict(name="sa-q1", start=NOW + 3600, duration=1800, size=8)
    base.update(kw)
    return ReservationSpec(**base)


def test_rsub_arguments_for_cores() -> None:
    args = rsub_args(spec(users=("alice",)), PbsConfig(), NOW)
    assert args == [
        "pbs_rsub",
        "-R",
        "202311151500.00",
        "-E",
        "202311151530.00",
        "-N",
        "sa-q1",
        "-l",
        "select=8:ncpus=1",
        "-l",
        "place=free",
        "-U",
        "alice",
    ]


def test_rsub_arguments_for_whole_nodes_and_groups() -> None:
    config = PbsConfig(unit=CapacityUnit.NODE, users=("bob",))
    args = rsub_args(spec(size=2, unit=CapacityUnit.NODE, accounts=("proj42",)), config, NOW, 64)
    assert args[args.index("-l") + 1] == "select=2:ncpus=64"
    assert "place=scatter:excl" in args
    assert args[-4:] == ["-U", "bob", "-G", "proj42"]
    with pytest.raises(ValueError, match="cores_per_node"):
        rsub_args(spec(size=2, unit=CapacityUnit.NODE), config, NOW, 0)


def test_a_start_of_now_moves_past_the_slack_and_keeps_the_end() -> None:
    args = rsub_args(spec(start=NOW - 30, duration=600), PbsConfig(), NOW)
    assert args[2] == local_datetime(NOW + 2) == "202311151400.02"
    assert args[4] == local_datetime(NOW + 570)


@pytest.mark.parametrize(
    "kw, config, message",
    [
        (dict(name="sa-" + "x" * PBS_NAME_MAX), PbsConfig(), "reservation name"),
        (dict(name="sa x"), PbsConfig(), "reservation name"),
        (dict(name="other1"), PbsConfig(), "prefix"),
        (dict(size=0), PbsConfig(), "size"),
        (dict(duration=0), PbsConfig(), "duration"),
        (dict(start=NOW - 7200, duration=600), PbsConfig(), "past"),
        (dict(users=("Bad User",)), PbsConfig(), "user name"),
        (dict(accounts=("proj;rm",)), PbsConfig(), "group"),
        (dict(unit=CapacityUnit.NODE), PbsConfig(), "unit"),
        (dict(partition="other"), PbsConfig(queue="workq"), "queue"),
    ],
)
def test_rsub_arguments_are_validated(kw: Dict[str, Any], config: PbsConfig, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rsub_args(spec(**kw), config, NOW)


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="queue"):
        PbsConfig(queue="work q")
    with pytest.raises(ValueError, match="prefix"):
        PbsConfig(name_prefix="-x")
    with pytest.raises(ValueError, match="confirm"):
        PbsConfig(confirm_timeout=0)


def test_rsub_replies() -> None:
    replies = load("rsub-replies-constructed.json")
    assert parse_rsub_reply(replies["accepted"]["stdout"]) == ("R123.pbs-head", "UNCONFIRMED")
    assert parse_rsub_reply(replies["denied"]["stdout"]) == ("R123.pbs-head", "DENIED")
    assert parse_rsub_reply(replies["expired"]["stdout"]) == (
        "R123.pbs-head",
        "delete, wait period expired",
    )
    assert parse_rsub_reply(replies["standing"]["stdout"])[0] == "S124.pbs-head"
    with pytest.raises(ValueError):
        parse_rsub_reply(replies["bad_time"]["stdout"])
    backend = PbsBackend()
    assert backend.is_unavailable(replies["unreachable"]["stderr"])
    for case in ("bad_time", "illegal_value", "not_authorised"):
        assert not backend.is_unavailable(replies[case]["stderr"])


# ----------------------------------------------------------------------------- snapshot


def snapshot_of(config: PbsConfig, jobs_file: str = "qstat-queue-constructed.json") -> Any:
    nodes = parse_nodes(load("pbsnodes-constructed.json"))
    jobs = parse_jobs(load(jobs_file), NOW)
    resvs = parse_reservations((DATA / "rstat-f-utc-constructed.txt").read_text())
    return build_snapshot(NOW, nodes, jobs, resvs, config, "pbs-head")


def test_snapshot_capacity_and_exclusive_jobs() -> None:
    snap = snapshot_of(PbsConfig())
    # node01-03, node05 (16 each) and gpu01 (32) are usable; node04 is down,offline
    assert snap.capacity == 4 * 16 + 32 and snap.cores_per_node == 32
    running = by_id(list(snap.running))
    # one CPU asked, place=excl: the whole of node05
    assert running["109.pbs-head"].cores == 16
    assert running["109.pbs-head"].allocation == (("node05", 16),)
    pending = by_id(list(snap.pending))
    assert pending["102.pbs-head"].cores == 4 * 32  # nodect x cores per node, at least 64
    assert snapshot_of(PbsConfig(unit=CapacityUnit.NODE)).capacity == 5


def test_snapshot_reservations_hold_only_when_confirmed() -> None:
    snap = snapshot_of(PbsConfig())
    names = {r.name for r in snap.reservations}
    # unconfirmed (R124) and being-deleted (R214) ones hold nothing; the rest do
    assert names == {
        "R123.pbs-head",
        "R210.pbs-head",
        "sa-offer2",
        "sa-offer2@R212.pbs-head",
        "sa-lost",
    }
    # the job in queue R210 names the reservation as the snapshot does
    assert by_id(list(snap.running))["106.pbs-head"].reservation == "R210.pbs-head"
    assert snap.extra["reservation_ids"]["sa-offer1"] == "R124.pbs-head"


def test_an_exclusive_reservation_holds_its_vnodes_whole() -> None:
    """``place=excl`` keeps every other reservation off its vnodes whatever CPUs it asked
    (pbs_sched's ``is_excl`` in ``check_resources_for_node``): whole vnodes in the snapshot."""
    nodes = parse_nodes(load("pbsnodes-constructed.json"))
    small = BatchReservation(
        "R300.pbs-head",
        NOW + 600,
        NOW + 1200,
        2,
        flags=("excl",),
        node_names=("node01",),
        allocation=(("node01", 2),),
    )
    held = PbsReservation("R300.pbs-head", "R300", "", "CONFIRMED", small)
    snap = build_snapshot(NOW, nodes, PbsJobs(), [held], PbsConfig())
    assert snap.placement is Placement.PBS
    assert snap.reservations[0].allocation == (("node01", 16),)


def test_snapshot_limited_to_a_queue() -> None:
    # a vnode associated with no queue serves every queue (gpu01 serves gpuq only)
    snap = snapshot_of(PbsConfig(queue="gpuq"))
    assert len(snap.nodes) == 6 and snap.capacity == 4 * 16 + 32
    assert [j.id for j in snap.pending] == ["110.pbs-head"]
    # other queues' jobs running on vnodes gpuq may use still take their capacity
    assert {j.id for j in snap.running} == {"101.pbs-head", "106.pbs-head", "109.pbs-head"}
    workq = snapshot_of(PbsConfig(queue="workq"))
    assert "110.pbs-head" not in {j.id for j in workq.pending}
    assert [n.name for n in workq.nodes] == ["node01", "node02", "node03", "node04", "node05"]
    assert workq.capacity == 4 * 16
    assert {j.id for j in workq.running} == {"101.pbs-head", "106.pbs-head", "109.pbs-head"}


def test_jobs_on_unusable_nodes_are_dropped() -> None:
    nodes = parse_nodes(load("pbsnodes-constructed.json"))
    job = Job(id="1.pbs-head", cores=4, submit=NOW - 60, limit=600, start=NOW - 30)
    jobs = PbsJobs(running=[job], nodes_of={"1.pbs-head": ["node04"]})
    snap = build_snapshot(NOW, nodes, jobs, [], PbsConfig())
    assert snap.running == () and snap.extra["running_on_unusable_nodes"] == ["1.pbs-head"]


def test_forced_exclusive_vnodes_make_every_job_whole_nodes() -> None:
    nodes = parse_nodes(load("pbsnodes-force-excl-constructed.json"))
    job = Job(id="201.pbs-head", cores=1, submit=NOW - 60, limit=600, start=NOW - 30, nodes=1)
    queued = Job(id="202.pbs-head", cores=2, submit=NOW - 10, limit=600, nodes=1)
    jobs = PbsJobs(running=[job], pending=[queued], nodes_of={"201.pbs-head": ["n1"]})
    snap = build_snapshot(NOW, nodes, jobs, [], PbsConfig())
    assert snap.running[0].cores == 64 and snap.pending[0].cores == 64
    assert snap.running[0].allocation == (("n1", 64),)
    assert {n.name: n.alloc_cores for n in snap.nodes} == {"n1": 64, "n2": 0}


def test_a_header_without_jobs_is_an_outage_when_qstat_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """qstat prints its JSON header even when it cannot reach the server (§2): only the exit
    status tells that from an empty queue."""
    header = (DATA / "qstat-empty-constructed.json").read_text()
    nodes = (DATA / "pbsnodes-constructed.json").read_text()
    outputs = {
        "pbsnodes": (0, nodes, ""),
        "qstat": (255, header, "Connection refused\nqstat: cannot connect to server pbs-head"),
        "pbs_rstat": (0, "", ""),
    }

    def run(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        rc, out, err = outputs[args[0]]
        return subprocess.CompletedProcess(list(args), rc, out, err)

    b = PbsBackend()
    monkeypatch.setattr(b, "_run", run)
    with pytest.raises(BackendUnavailable, match="cannot connect to server"):
        b.snapshot()
    outputs["qstat"] = (0, header, "")
    snap = b.snapshot()
    assert snap.running == () and snap.pending == () and snap.capacity == 96
