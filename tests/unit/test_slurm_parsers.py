"""Parsers of the Slurm backend against output captured from the real 22.05 test cluster.

The ``*-constructed.json`` fixtures stand in for Slurm 23.02+ (data_parser layout), built by
hand from docs/slurm.md §9; they check that one parser accepts both shapes and gives the
same jobs and nodes for the same cluster state.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List
from zoneinfo import ZoneInfo

import pytest

from siteagent.backends.base import BackendUnavailable
from siteagent.backends.slurm import SlurmBackend
from siteagent.backends.slurm.arguments import reservation_args
from siteagent.backends.slurm.config import SlurmConfig
from siteagent.backends.slurm.errors import is_unavailable
from siteagent.backends.slurm.hostlist import array_indices, expand_hostlist
from siteagent.backends.slurm.jobs import (
    SlurmJobs,
    parse_exclusive_text,
    parse_jobs,
    parse_running_text,
)
from siteagent.backends.slurm.layout import detect_layout, number, state_words
from siteagent.backends.slurm.nodes import parse_nodes
from siteagent.backends.slurm.reservations import parse_reservations
from siteagent.backends.slurm.scheduler import parse_scheduler_config
from siteagent.backends.slurm.snapshot import allocations, build_snapshot, reservation_allocation
from siteagent.backends.slurm.times import parse_duration, parse_slurm_time, parse_time_limit
from siteagent.core.values import (
    UNLIMITED_S,
    Backfill,
    BatchReservation,
    CapacityUnit,
    Job,
    NodeState,
    Placement,
    ReservationSpec,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "slurm"
NOW = int((DATA / "queue-now.txt").read_text())


def load(name: str) -> Dict[str, Any]:
    doc: Dict[str, Any] = json.loads((DATA / name).read_text())
    return doc


def by_id(jobs: List[Job]) -> Dict[str, Job]:
    return {j.id: j for j in jobs}


# ----------------------------------------------------------------------------- layout, helpers


def test_layout_is_read_from_meta_plugin() -> None:
    assert detect_layout(load("squeue-queue-22.05.json")) == "openapi/v0.0.38"
    assert detect_layout(load("sinfo-queue-22.05.json")) == "openapi/v0.0.38"
    assert detect_layout(load("squeue-v0.0.40-constructed.json")) == "data_parser/v0.0.40"
    with pytest.raises(ValueError, match="layout"):
        detect_layout({"meta": {"Slurm": {"release": "22.05.8"}}, "jobs": []})
    with pytest.raises(ValueError, match="meta"):
        detect_layout({"jobs": []})


def test_number_accepts_both_shapes() -> None:
    assert number(30) == 30
    assert number(None) is None
    assert number({"set": True, "infinite": False, "number": 30}) == 30
    assert number({"set": False, "infinite": False, "number": 0}) is None
    assert number({"set": True, "infinite": True, "number": 0}) is None
    assert number(True) is None
    assert number("12") == 12


def test_state_words_accepts_both_shapes() -> None:
    assert state_words("mixed", ["DRAIN"]) == ("mixed", ("DRAIN",))
    assert state_words(["MIXED", "DRAIN"]) == ("mixed", ("DRAIN",))
    assert state_words("RUNNING") == ("running", ())
    assert state_words(["RUNNING", "COMPLETING"]) == ("running", ("COMPLETING",))
    assert state_words(None) == ("unknown", ())


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("n[1-2]", ["n1", "n2"]),
        ("n[1-3,5]", ["n1", "n2", "n3", "n5"]),
        ("n1,n4", ["n1", "n4"]),
        ("r[1-2]-n[01-02]", ["r1-n01", "r1-n02", "r2-n01", "r2-n02"]),
        ("a[08-10],b", ["a08", "a09", "a10", "b"]),
        ("", []),
        ("(null)", []),
    ],
)
def test_expand_hostlist(text: str, names: List[str]) -> None:
    assert expand_hostlist(text) == names


@pytest.mark.parametrize(
    ("text", "count"),
    [("2-5%2", 4), ("49-97:3", 17), ("1,3,5-7", 5), ("7", 1), ("0-3%1", 4)],
)
def test_array_indices(text: str, count: int) -> None:
    assert len(array_indices(text)) == count


def test_array_indices_values() -> None:
    assert array_indices("49-97:3")[:3] == [49, 52, 55]
    assert array_indices("1,3,5-7") == [1, 3, 5, 6, 7]


# ----------------------------------------------------------------------------- jobs (22.05)


@pytest.fixture(scope="module")
def queue() -> SlurmJobs:
    return parse_jobs(load("squeue-queue-22.05.json"), NOW, cores_per_node=16)


def test_running_jobs(queue: SlurmJobs) -> None:
    running = by_id(queue.running)
    assert sorted(running) == ["1", "2", "4_0", "4_1", "9"]
    assert running["1"].cores == 32 and running["1"].nodes == 2
    assert running["1"].limit == 30 * 60
    assert running["1"].start == 1795326597
    assert running["2"].cores == 8
    assert running["9"].user == "nobody"
    assert queue.nodes_of["1"] == ["n1", "n2"]


def test_finished_jobs_are_dropped(queue: SlurmJobs) -> None:
    all_ids = {j.id for j in queue.running + queue.pending}
    assert "10" not in all_ids  # COMPLETED, still listed by squeue --json
    assert queue.finished == 1


def test_pending_order_is_priority_then_submit(queue: SlurmJobs) -> None:
    assert [j.id for j in queue.pending] == [
        "3",
        "4_2",
        "4_3",
        "4_4",
        "4_5",
        "5",
        "7",
        "8",
        "13",
        "6",
    ]


def test_array_remainder_is_expanded_per_pending_task(queue: SlurmJobs) -> None:
    pending = by_id(queue.pending)
    tasks = [pending[f"4_{i}"] for i in range(2, 6)]
    assert all(t.cores == 4 and t.limit == 600 and t.eligible for t in tasks)
    assert queue.array_throttle == {"4": 2}


def test_expected_start_from_backfill(queue: SlurmJobs) -> None:
    pending = by_id(queue.pending)
    assert pending["3"].expected_start == 1795329361
    assert pending["3"].nodes == 4 and pending["3"].cores == 4
    assert pending["8"].expected_start == 1795332960
    assert pending["4_2"].expected_start is None  # no estimate for array remainders


def test_unlimited_time_limit(queue: SlurmJobs) -> None:
    assert by_id(queue.pending)["8"].limit == UNLIMITED_S


def test_running_text_form_gives_the_jobs_json_gives() -> None:
    """The accept's re-check reads running work from text squeue (its -t filter works, JSON's
    does not): captured at the same moment, both forms give the same running jobs, including a
    two-node exclusive job, array tasks, a day-long and an unlimited limit, and a job in a
    reservation."""
    doc = load("squeue-running-22.05.json")
    from_json = parse_jobs(doc, NOW)
    from_text = parse_running_text((DATA / "squeue-running-22.05.txt").read_text())
    assert from_text.running == [replace(job, allocation=()) for job in from_json.running]
    assert from_text.nodes_of == from_json.nodes_of
    limits = {job.id: job.limit for job in from_text.running}
    assert limits["2"] == 26 * 3600 and limits["4"] == UNLIMITED_S and limits["3_0"] == 2700
    assert from_text.pending == []


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("7:00", 420),
        ("1:30:00", 5400),
        ("1-02:00:00", 93600),
        ("UNLIMITED", UNLIMITED_S),
        ("NOT_SET", UNLIMITED_S),
        ("0:00", UNLIMITED_S),
    ],
)
def test_time_limit_text(text: str, seconds: int) -> None:
    assert parse_time_limit(text) == seconds


def test_running_text_with_a_missing_column_is_an_error_naming_the_line() -> None:
    with pytest.raises(ValueError, match="squeue line 2: expected 11 columns"):
        parse_running_text("1|4|x|x|5:00|1|root|(null)|batch|(null)|n1\n2|4|x\n")


def test_held_dependent_and_reservation_jobs_are_not_eligible(queue: SlurmJobs) -> None:
    pending = by_id(queue.pending)
    assert not pending["6"].eligible  # -H: priority 0, JobHeldUser
    assert not pending["7"].eligible  # Dependency
    assert pending["13"].reservation == "r_future"  # waits for its reservation
    assert pending["13"].expected_start is None


def test_begin_time_job_is_eligible_not_before_its_begin(queue: SlurmJobs) -> None:
    job = by_id(queue.pending)["5"]
    assert job.eligible
    assert job.expected_start == 1795330196
    assert job.not_before == 1795330196


def test_arrays_with_steps_lists_and_cancelled_jobs() -> None:
    jobs = parse_jobs(load("squeue-arrays-states-22.05.json"), NOW, cores_per_node=16)
    running = by_id(jobs.running)
    pending = by_id(jobs.pending)
    assert len(running) == 16 and all(i.startswith("14_") for i in running)
    assert sorted(int(i.split("_")[1]) for i in pending if i.startswith("14_")) == list(
        range(49, 98, 3)
    )
    assert sorted(i for i in pending if i.startswith("15_")) == [
        "15_1",
        "15_3",
        "15_5",
        "15_6",
        "15_7",
    ]
    assert pending["15_1"].cores == 16
    assert jobs.finished == 12  # the CANCELLED queue


def test_controller_down_is_unavailable_not_empty() -> None:
    for name in (
        "squeue-controller-down-22.05.json",
        "squeue-controller-down-v0.0.40-constructed.json",
    ):
        with pytest.raises(BackendUnavailable, match="looking for jobs"):
            parse_jobs(load(name), NOW)
    with pytest.raises(BackendUnavailable, match="Unspecified error"):
        parse_nodes(load("sinfo-controller-down-22.05.json"))


# ----------------------------------------------------------------------------- jobs (23.02+)


def test_data_parser_layout_gives_the_same_jobs(queue: SlurmJobs) -> None:
    """The same jobs; the constructed document lists neither cores per node (the nodes'
    allocated CPUs tell then, as for the text form) nor the most nodes a job may take."""
    later = parse_jobs(load("squeue-v0.0.40-constructed.json"), NOW, cores_per_node=16)
    old = by_id(queue.running + queue.pending)
    new = by_id(later.running + later.pending)
    assert sorted(new) == ["1", "3", "4_0", "4_2", "4_3", "4_4", "4_5", "5", "6", "8"]
    for job_id, job in new.items():
        assert job == replace(old[job_id], allocation=(), max_nodes=0), job_id
    assert later.finished == 1
    assert {j.id: j.not_before for j in later.pending if j.not_before} == {"5": 1795330196}
    order = [j.id for j in later.pending]
    assert order[0] == "3" and order[-1] == "6"


def test_pending_exclusive_job_counts_whole_nodes() -> None:
    doc = load("squeue-v0.0.40-constructed.json")
    rec = dict(doc["jobs"][2])  # pend4nodes
    rec["shared"] = ["none"]
    jobs = parse_jobs({"meta": doc["meta"], "errors": [], "jobs": [rec]}, NOW, cores_per_node=16)
    assert jobs.pending[0].cores == 64


#: ``squeue -h -r -t PD -O JobArrayID:64,Exclusive:16`` as Slurm 26.05.5 printed it for
#: ``-N2 --exclusive``, ``-n4`` and an array of ``-N1 --exclusive`` (columns shortened).
EXCLUSIVE_26_05 = (
    "7                   NO                  \n"
    "6_1                 NODE                \n"
    "6_2                 NODE                \n"
    "4                   NO                  \n"
    "2                   NODE                \n"
)


def test_from_26_05_exclusive_jobs_come_from_squeue_format() -> None:
    """26.05's squeue --json (data_parser v0.0.45) has ``"shared": []`` for every job, with
    or without --exclusive (the field is listed as removed): the backend reads the jobs
    holding whole nodes from ``squeue -O ...,Exclusive`` beside it (docs/slurm.md §11)."""
    assert parse_exclusive_text(EXCLUSIVE_26_05) == {"6_1", "6_2", "2"}
    doc = load("squeue-v0.0.40-constructed.json")
    rec = dict(doc["jobs"][2])  # pend4nodes
    rec["shared"] = []
    one = {"meta": doc["meta"], "errors": [], "jobs": [rec]}
    job_id = str(number(rec["job_id"]))
    assert not parse_jobs(one, NOW, cores_per_node=16).pending[0].exclusive
    whole = parse_jobs(one, NOW, cores_per_node=16, exclusive={job_id}).pending[0]
    assert whole.exclusive and whole.cores == 64


@pytest.mark.parametrize("release", ["24.11", "26.05"])
def test_running_jobs_cores_on_each_node_from_data_parser(release: str) -> None:
    """data_parser layouts give each node's CPUs in ``job_resources.nodes.allocation``
    (captured from the real 24.11.5 and 26.05.5): without them the plan guessed every job
    held all a shared node's allocated cores, and planned 26.05's shared queues late."""
    jobs = parse_jobs(load(f"squeue-running-{release}.json"), NOW)
    assert {job.id: job.allocation for job in jobs.running} == {
        "1": (("n1", 4),),
        "2": (("n1", 12), ("n2", 8)),
        "3": (("n3", 16), ("n4", 16)),
    }


@pytest.mark.parametrize("release", ["24.11", "26.05"])
def test_a_task_count_asks_for_no_most_nodes(release: str) -> None:
    """26.05 puts the task count of ``-n12`` and ``-n40`` in ``max_nodes`` itself, flagged
    ``JOB_IMPLICIT_MAX_NODES``; read as asked for, the plan held the jobs to Slurm's guess
    of their node count (3 for ``-n40``) as a minimum."""
    jobs = parse_jobs(load(f"squeue-running-{release}.json"), NOW)
    assert {job.id: (job.max_nodes, job.nodes) for job in jobs.pending} == {
        "4": (0, 1),
        "5": (0, 3),
    }


def test_the_backfill_rules_follow_the_release() -> None:
    """24.11 changed how the backfill rounds and searches (docs/slurm.md §11); the settings
    carry the release's rules from SLURM_VERSION, 22.05's when it is not said."""
    config = "SelectType = select/cons_tres\nSchedulerType = sched/backfill\n"
    for version, later in (("22.05.8", False), ("24.11.5", True), ("26.05.5", True), ("", False)):
        settings = parse_scheduler_config(config + f"SLURM_VERSION = {version}\n")
        assert settings.backfill.ends_up is later and settings.backfill.from_start is later
    assert parse_scheduler_config(config + "SLURM_VERSION = 26.05.5\n").release == (26, 5)


# ----------------------------------------------------------------------------- nodes


def test_nodes_and_usability_22_05() -> None:
    nodes = {n.name: n for n in parse_nodes(load("sinfo-states-22.05.json"))}
    assert [nodes[n].usable for n in ("n1", "n2", "n3", "n4")] == [False, False, False, True]
    assert nodes["n1"].state == "down" and nodes["n1"].reason == "broken"
    assert nodes["n2"].state == "idle+fail"
    assert nodes["n3"].state == "idle+drain"
    assert nodes["n4"].alloc_cores == 16 and nodes["n4"].cores == 16
    assert nodes["n4"].partitions == ("batch",)


def test_reserved_node_stays_usable() -> None:
    nodes = {n.name: n for n in parse_nodes(load("sinfo-queue-22.05.json"))}
    assert nodes["n4"].state == "mixed+reserved"
    assert nodes["n4"].usable  # the reservation itself holds the capacity in the snapshot


def test_nodes_data_parser_layout() -> None:
    nodes = {n.name: n for n in parse_nodes(load("scontrol-show-nodes-v0.0.40-constructed.json"))}
    assert [nodes[f"n{i}"].usable for i in range(1, 6)] == [False, False, False, True, True]
    assert nodes["n3"].state == "idle+drain"
    assert nodes["n5"].partitions == ("batch", "debug")


def test_grouped_sinfo_has_no_node_list() -> None:
    with pytest.raises(ValueError, match="per-node"):
        parse_nodes(load("sinfo-v0.0.40-constructed.json"))


# ----------------------------------------------------------------------------- reservations


@pytest.fixture(scope="module")
def reservations() -> Dict[str, Any]:
    text = (DATA / "reservations-utc-22.05.txt").read_text()
    return {r.name: r for r in parse_reservations(text)}


def test_reservations_fields(reservations: Dict[str, Any]) -> None:
    assert sorted(reservations) == [
        "r_acct",
        "r_active",
        "r_cores",
        "r_cores2",
        "r_future",
        "r_purge",
    ]
    fut = reservations["r_future"]
    assert fut.start == parse_slurm_time("2026-11-22T07:50:10") == 1795333810
    assert fut.end - fut.start == 7200
    assert (fut.cores, fut.nodes, fut.node_list) == (32, 2, "n[1-2]")
    assert fut.users == ("root",) and fut.accounts == () and fut.flags == ()
    assert fut.partition == "batch" and fut.state == "INACTIVE"
    assert reservations["r_cores"].cores == 6
    assert reservations["r_cores"].users == ("root", "nobody")
    assert reservations["r_cores2"].cores == 20 and reservations["r_cores2"].nodes == 2
    assert reservations["r_acct"].accounts == ("foo",) and reservations["r_acct"].users == ()
    active = reservations["r_active"]
    assert active.state == "ACTIVE" and active.partition == ""
    assert active.flags == ("IGNORE_JOBS", "SPEC_NODES")
    assert reservations["r_purge"].flags == ("PURGE_COMP=00:10:00",)
    assert reservations["r_purge"].end - reservations["r_purge"].start == 86400


def test_reservation_times_follow_the_scontrol_time_zone() -> None:
    utc = parse_reservations((DATA / "reservations-utc-22.05.txt").read_text())
    tokyo_text = (DATA / "reservations-tokyo-22.05.txt").read_text()
    assert tokyo_text != (DATA / "reservations-utc-22.05.txt").read_text()
    assert parse_reservations(tokyo_text, ZoneInfo("Asia/Tokyo")) == utc


def test_wrapped_format_parses_like_one_line_format() -> None:
    utc = parse_reservations((DATA / "reservations-utc-22.05.txt").read_text())
    wrapped = (DATA / "reservations-multiline-utc-22.05.txt").read_text()
    assert parse_reservations(wrapped) == utc


def test_no_reservations_and_endless_reservation() -> None:
    assert parse_reservations("No reservations in the system\n") == []
    # from docs/slurm.md §6.3: Duration=0 gives EndTime=Unknown
    line = (
        "ReservationName=b23 StartTime=2026-11-22T08:38:17 EndTime=Unknown "
        "Duration=28930-21:49:58 Nodes=n1 NodeCnt=1 CoreCnt=16 Features=(null) "
        "PartitionName=batch Flags= TRES=cpu=16 Users=(null) Groups=(null) Accounts=foo "
        "Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)"
    )
    (res,) = parse_reservations(line)
    assert res.end - res.start == parse_duration("28930-21:49:58")
    assert res.users == () and res.accounts == ("foo",) and res.cores == 16


def test_duration_and_time_parsing() -> None:
    assert parse_duration("00:30:00") == 1800
    assert parse_duration("1-00:00:00") == 86400
    assert parse_duration("UNLIMITED") is None
    assert parse_slurm_time("Unknown") is None
    assert parse_slurm_time("(null)") is None


# ----------------------------------------------------------------------------- create arguments

CONFIG = SlurmConfig(users=("root",), partition="batch")
T0 = 1795330000


def spec(**kw: Any) -> ReservationSpec:
    base: Dict[str, Any] = {"name": "sa-r1", "start": T0, "duration": 3600, "size": 8}
    base.update(kw)
    return ReservationSpec(**base)


def test_reservation_args() -> None:
    assert reservation_args(spec(), CONFIG, now=T0 - 100) == [
        "scontrol",
        "create",
        "reservation",
        "ReservationName=sa-r1",
        "StartTime=2026-11-22T06:46:40",
        "Duration=60",
        "CoreCnt=8",
        "Users=root",
        "PartitionName=batch",
    ]


def test_reservation_args_nodes_accounts_flags() -> None:
    config = SlurmConfig(unit=CapacityUnit.NODE, flags=("IGNORE_JOBS",))
    args = reservation_args(
        spec(unit=CapacityUnit.NODE, size=2, accounts=("proj1",), users=("alice",)),
        config,
        now=T0,
    )
    assert args[6:] == ["NodeCnt=2", "Users=alice", "Accounts=proj1", "Flags=IGNORE_JOBS"]


def test_duration_rounds_up_and_is_never_zero() -> None:
    assert "Duration=2" in reservation_args(spec(duration=61), CONFIG, now=T0)
    assert "Duration=1" in reservation_args(spec(duration=60), CONFIG, now=T0)
    assert "Duration=1" in reservation_args(spec(duration=1), CONFIG, now=T0)


def test_start_in_the_past_becomes_now_keeping_the_end() -> None:
    args = reservation_args(spec(start=T0 - 600, duration=3600), CONFIG, now=T0)
    assert "StartTime=2026-11-22T06:46:40" in args and "Duration=50" in args
    with pytest.raises(ValueError, match="past"):
        reservation_args(spec(start=T0 - 7200, duration=3600), CONFIG, now=T0)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"name": "sa-bad name"}, "reservation name"),
        ({"name": "sa-x Flags=MAGNETIC"}, "reservation name"),
        ({"name": "other-r1"}, "prefix"),
        ({"size": 0}, "size"),
        ({"size": -4}, "size"),
        ({"duration": 0}, "duration"),
        ({"start": 0}, "start"),
        ({"size": 2.5}, "integer"),
        ({"users": ("root,evil",)}, "user name"),
        ({"users": ("bob Flags=FLEX",)}, "user name"),
        ({"users": ("Root",)}, "user name"),
        ({"accounts": ("a b",)}, "account name"),
        ({"partition": "x;y"}, "partition"),
        ({"unit": CapacityUnit.NODE}, "unit"),
    ],
)
def test_reservation_args_validation(kw: Dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        reservation_args(spec(**kw), CONFIG, now=T0)


def test_users_or_accounts_required() -> None:
    with pytest.raises(ValueError, match="users or accounts"):
        reservation_args(spec(), SlurmConfig(), now=T0)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="FLEX"):
        SlurmConfig(flags=("FLEX",))
    with pytest.raises(ValueError, match="user name"):
        SlurmConfig(users=("no body",))
    with pytest.raises(ValueError, match="timeout"):
        SlurmConfig(timeout=0)


def test_error_classification() -> None:
    errors = load("scontrol-errors-22.05.json")
    for case in ("create_controller_down", "show_controller_down", "delete_controller_down"):
        assert is_unavailable(errors[case]["stderr"]), case
    for case in ("create_busy", "create_invalid_user", "create_duplicate", "delete_in_use"):
        assert not is_unavailable(errors[case]["stderr"]), case


# ----------------------------------------------------------------------------- snapshot


def test_snapshot_capacity_excludes_unusable_nodes() -> None:
    nodes = parse_nodes(load("sinfo-states-22.05.json"))
    jobs = parse_jobs(load("squeue-arrays-states-22.05.json"), NOW, cores_per_node=16)
    snap = build_snapshot(NOW, nodes, jobs, [], SlurmConfig(), "openapi/v0.0.38")
    assert snap.capacity == 16 and snap.cores_per_node == 16
    assert len(snap.running) == 16
    node_snap = build_snapshot(NOW, nodes, jobs, [], SlurmConfig(unit=CapacityUnit.NODE))
    assert node_snap.capacity == 1 and node_snap.unit is CapacityUnit.NODE


def test_snapshot_of_the_queue(queue: SlurmJobs, reservations: Dict[str, Any]) -> None:
    nodes = parse_nodes(load("sinfo-queue-22.05.json"))
    snap = build_snapshot(
        NOW, nodes, queue, list(reservations.values()), SlurmConfig(partition="batch")
    )
    assert snap.capacity == 64
    assert len(snap.running) == 5 and len(snap.pending) == 10
    assert len(snap.reservations) == 6  # r_active has no partition but sits on n4
    assert {j.id: j.not_before for j in snap.pending if j.not_before} == {"5": 1795330196}
    other = build_snapshot(
        NOW, nodes, queue, list(reservations.values()), SlurmConfig(partition="debug")
    )
    assert other.capacity == 0 and not other.running and not other.pending
    assert not other.reservations


def test_running_job_on_drained_node_is_left_out() -> None:
    nodes = parse_nodes(load("sinfo-states-22.05.json"))  # n3 drained
    job = Job(id="77", cores=4, submit=NOW, limit=600, start=NOW, nodes=1, partition="batch")
    jobs = SlurmJobs(running=[job], nodes_of={"77": ["n3"]})
    snap = build_snapshot(NOW, nodes, jobs, [], SlurmConfig())
    assert snap.running == () and snap.extra["running_on_unusable_nodes"] == ["77"]


# ----------------------------------------------------------------------------- node-aware


def test_running_jobs_say_their_cores_on_each_node() -> None:
    """squeue --json lists each allocated node's cores (22.05 leaves the CPU counters 0): a
    two-node exclusive job holds both nodes whole."""
    running = by_id(parse_jobs(load("squeue-running-22.05.json"), NOW).running)
    assert running["1"].allocation == (("n1", 16), ("n2", 16))
    assert all(sum(c for _, c in job.allocation) == job.cores for job in running.values())


def test_text_form_allocations_follow_the_nodes_allocated_cpus() -> None:
    """The text form names nodes only; with the nodes' allocated CPUs the split comes back as
    squeue --json gives it."""
    from_json = parse_jobs(load("squeue-running-22.05.json"), NOW)
    from_text = parse_running_text((DATA / "squeue-running-22.05.txt").read_text())
    held: Dict[str, int] = {}
    for job in from_json.running:
        for name, cores in job.allocation:
            held[name] = held.get(name, 0) + cores
    nodes = [NodeState(name, 16, alloc_cores=cores) for name, cores in held.items()]
    assert allocations(from_text, nodes) == {j.id: j.allocation for j in from_json.running}


def test_two_multi_node_jobs_sharing_nodes_are_never_given_less_than_they_hold() -> None:
    jobs = parse_running_text(
        "7|24|2026-11-23T10:00:00|2026-11-23T10:00:00|30:00|2|root|(null)|batch|(null)|n[1-2]\n"
        "8|8|2026-11-23T10:00:00|2026-11-23T10:00:00|30:00|2|root|(null)|batch|(null)|n[2-3]\n"
    )
    nodes = [NodeState("n1", 16, 16), NodeState("n2", 16, 12), NodeState("n3", 16, 4)]
    placed = allocations(jobs, nodes)
    assert placed["7"] == (("n1", 16), ("n2", 12)) and placed["8"] == (("n2", 8), ("n3", 4))


def test_pending_jobs_carry_their_node_request(queue: SlurmJobs) -> None:
    pending = by_id(queue.pending)
    assert pending["3"].nodes == 4 and not pending["3"].exclusive
    assert pending["3"].priority > pending["8"].priority > 0


def test_node_weights() -> None:
    nodes = parse_nodes(load("sinfo-queue-22.05.json"))
    assert [n.weight for n in nodes] == [1, 1, 1, 1]


def test_reservation_cores_per_node() -> None:
    """Slurm lists a core reservation's cores per node when it chose them; a node
    reservation holds its nodes whole; a multi-node core reservation whose split Slurm does
    not show is taken to hold as much as each node has."""
    text = (DATA / "reservations-utc-22.05.txt").read_text()
    listed = {r.name: r for r in parse_reservations(text)}
    cores = {f"n{i}": 16 for i in range(1, 5)}
    assert reservation_allocation(listed["r_cores2"], cores) == (("n2", 16), ("n3", 4))
    assert reservation_allocation(listed["r_cores"], cores) == (("n3", 6),)
    assert reservation_allocation(listed["r_future"], cores) == (("n1", 16), ("n2", 16))
    assert listed["r_cores2"].node_names == ("n2", "n3")
    split = BatchReservation("x", 0, 60, cores=12, nodes=2, node_names=("n1", "n2"))
    assert reservation_allocation(split, cores) == (("n1", 12), ("n2", 12))


def test_scheduler_settings_from_scontrol_show_config() -> None:
    text = (
        "SchedulerParameters     = bf_interval=5,bf_resolution=120,bf_window=2880\n"
        "SchedulerType           = sched/backfill\n"
        "SelectType              = select/cons_tres\n"
        "KillWait                = 5 sec\n"
    )
    settings = parse_scheduler_config(text)
    assert settings.placement is Placement.SLURM
    assert settings.backfill == Backfill(resolution=120, window=2 * 86400, kill_wait=5)
    linear = parse_scheduler_config(text.replace("cons_tres", "linear"))
    assert linear.placement is Placement.POOLED
    assert parse_scheduler_config("SelectType = select/cons_tres\n").backfill == Backfill(
        60, 86400, 30
    )


def test_reservation_on_the_nodes_the_plan_chose() -> None:
    """A spec naming nodes reserves them, with the cores on each (Slurm takes the counts in
    its node order, the allocation's); one whose counts do not add up, or that names a node
    scontrol would read as more than a name, is refused before anything runs."""
    spec = ReservationSpec("sa-n", 1795330000, 600, 12, allocation=(("n1", 4), ("n2", 8)))
    args = reservation_args(spec, SlurmConfig(users=("root",)), 1795320000)
    assert args[6:8] == ["Nodes=n1,n2", "CoreCnt=4,8"]
    whole = ReservationSpec(
        "sa-w", 1795330000, 600, 2, CapacityUnit.NODE, allocation=(("n1", 16), ("n3", 16))
    )
    node_config = SlurmConfig(users=("root",), unit=CapacityUnit.NODE)
    assert reservation_args(whole, node_config, 1795320000)[6:7] == ["Nodes=n1,n3"]
    for bad in (
        replace(spec, allocation=(("n1", 4), ("n2", 9))),
        replace(spec, allocation=(("n1", 4), ("n2 Flags=MAINT", 8))),
        replace(spec, allocation=(("n1", 12), ("n2", 0))),
    ):
        with pytest.raises(ValueError):
            reservation_args(bad, SlurmConfig(users=("root",)), 1795320000)


def test_slurm_holds_reservations_for_whole_minutes() -> None:
    backend = SlurmBackend(SlurmConfig())
    assert backend.held_window(1000, 1061) == (1000, 1120)
    assert backend.held_window(1000, 1060) == (1000, 1060)


def test_cores_on_each_node_up_to_23_02_and_one_total_from_23_11() -> None:
    """Slurm 23.11 dropped per-node core lists ("Using a comma separated array for CoreCnt is
    no longer valid"): the same nodes, one total that slurmctld spreads itself."""
    placed = spec(size=12, allocation=(("n1", 4), ("n3", 8)))
    assert reservation_args(placed, CONFIG, now=T0)[6:8] == ["Nodes=n1,n3", "CoreCnt=4,8"]
    assert reservation_args(placed, CONFIG, T0, cores_per_node=False)[6:8] == [
        "Nodes=n1,n3",
        "CoreCnt=12",
    ]
    config = "SelectType = select/cons_tres\nSchedulerType = sched/backfill\n"
    for version, per_node in (
        ("22.05.8", True),
        ("23.02.7", True),
        ("23.11.0", False),
        ("24.11.5", False),
        ("26.05.5", False),
        ("", True),
    ):
        settings = parse_scheduler_config(config + f"SLURM_VERSION = {version}\n")
        assert settings.version == version and settings.cores_per_node is per_node


def test_a_command_prefix_carries_the_variables_as_env_words() -> None:
    """ssh passes no environment on: the variables go after ``env`` (an argument list)."""
    plain = SlurmConfig(slurm_conf="/etc/slurm/slurm.conf")
    assert plain.command(["squeue", "--json"], {"TZ": "UTC"}) == ["squeue", "--json"]
    remote = SlurmConfig(slurm_conf="/etc/slurm/slurm.conf", command_prefix=("ssh", "ctl"))
    assert remote.command(["squeue", "--json"], {"TZ": "UTC", "LC_ALL": "C"}) == [
        "ssh",
        "ctl",
        "env",
        "LC_ALL=C",
        "TZ=UTC",
        "squeue",
        "--json",
    ]
    for bad in ("", "a\nb", "nul\0"):
        with pytest.raises(ValueError, match="command prefix"):
            SlurmConfig(command_prefix=("ssh", bad))


def test_the_backend_runs_every_command_through_the_prefix(tmp_path: Path) -> None:
    """A prefix program that records its arguments: the Slurm command comes after env and
    the pinned variables, SLURM_CONF among them."""
    log = tmp_path / "argv"
    recorder = tmp_path / "recorder"
    recorder.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}\nexit 1\n')
    recorder.chmod(0o755)
    backend = SlurmBackend(
        SlurmConfig(slurm_conf="/srv/slurm.conf", command_prefix=(str(recorder), "ctl"))
    )
    with pytest.raises(BackendUnavailable):
        backend.list_reservations()
    argv = log.read_text().splitlines()
    assert argv[:2] == ["ctl", "env"]
    assert "SLURM_CONF=/srv/slurm.conf" in argv and "TZ=UTC" in argv
    assert argv[-4:] == ["scontrol", "show", "reservation", "-o"]


def test_slurm_26_05s_reasonless_refusal_gets_a_hint() -> None:
    from siteagent.backends.slurm.errors import with_hint

    message = "Error creating the reservation: Unspecified error"
    assert with_hint(message).startswith(message)
    assert "a user it does not know" in with_hint(message)
    assert with_hint("Error creating the reservation: Requested nodes are busy").endswith("busy")
