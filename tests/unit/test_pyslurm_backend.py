"""The pyslurm backend against a stand-in for pyslurm 25.5 (testbed/standins/pyslurm): a real
pyslurm needs a libslurm of its own version, and this machine's Slurm 22.05 takes pyslurm 22.5,
which tests/integration/test_pyslurm_cluster.py runs against the real test cluster. Also the
refusal of unsupported releases, and the legacy API's requests and records.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import threading
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Iterator

import pytest

from siteagent.backends.base import BackendError, BackendUnavailable, ReservationRefused
from siteagent.backends.slurm import SlurmConfig
from siteagent.core.values import UNLIMITED_S, Backfill, CapacityUnit, Placement, ReservationSpec

STANDIN = Path(__file__).resolve().parents[2] / "testbed" / "standins" / "pyslurm"


@pytest.fixture
def pyslurm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The stand-in, imported fresh from the front of sys.path, with a 4-node cluster; the
    local Slurm is the one it is built for (25.05)."""
    from siteagent.backends.pyslurm import versions

    monkeypatch.setattr(versions, "local_slurm", lambda: (25, 5))
    monkeypatch.syspath_prepend(str(STANDIN))
    monkeypatch.delitem(sys.modules, "pyslurm", raising=False)
    module: Any = importlib.import_module("pyslurm")
    assert Path(module.__file__).parent.parent == STANDIN
    for i in range(1, 5):
        module.CLUSTER.nodes[f"n{i}"] = module.Node(f"n{i}")
    yield module
    module.CLUSTER.reset()
    sys.modules.pop("pyslurm", None)


@pytest.fixture
def backend(pyslurm: Any) -> Iterator[Any]:
    from siteagent.backends.pyslurm import PyslurmBackend

    made = PyslurmBackend(SlurmConfig(partition="batch", users=("alice",), timeout=2))
    yield made
    made.close()


def spec(name: str = "sa-1", start: int = 0, minutes: int = 60, size: int = 16) -> ReservationSpec:
    begin = start or int(time.time()) + 3600
    return ReservationSpec(name=name, start=begin, duration=minutes * 60, size=size)


# --------------------------------------------------------------------------- snapshot


def test_snapshot_running_pending_held(pyslurm: Any, backend: Any) -> None:
    now = int(time.time())
    cluster = pyslurm.CLUSTER
    cluster.nodes["n1"].state, cluster.nodes["n1"].allocated_cpus = "ALLOCATED", 16
    cluster.nodes["n4"].state = "IDLE+DRAIN"
    cluster.jobs[1] = pyslurm.Job(
        1,
        state="RUNNING",
        cpus=16,
        allocated_nodes="n1",
        submit_time=now - 600,
        eligible_time=now - 600,
        start_time=now - 300,
        time_limit=30,
    )
    cluster.jobs[2] = pyslurm.Job(
        2,
        state="PENDING",
        state_reason="Resources",
        cpus=32,
        num_nodes=2,
        submit_time=now - 200,
        eligible_time=now - 200,
        start_time=now + 1500,
        priority=4294901758,
    )
    cluster.jobs[3] = pyslurm.Job(
        3,
        state="PENDING",
        state_reason="JobHeldUser",
        priority=0,
        submit_time=now - 100,
        time_limit=None,
    )
    cluster.jobs[4] = pyslurm.Job(
        4,
        state="PENDING",
        state_reason="Priority",
        cpus=1,
        num_nodes=1,
        resource_sharing="NO",
        submit_time=now - 50,
        eligible_time=now - 50,
        priority=4294901757,
    )
    cluster.jobs[5] = pyslurm.Job(5, state="COMPLETED", cpus=4, start_time=now - 900)
    snap = backend.snapshot()

    assert snap.backend == "pyslurm" and snap.extra["layout"] == "pyslurm/25.5.0"
    assert snap.capacity == 48  # n4 drained
    assert [n.name for n in snap.nodes if not n.usable] == ["n4"]
    assert [(j.id, j.cores, j.start, j.limit) for j in snap.running] == [("1", 16, now - 300, 1800)]
    pending = {j.id: j for j in snap.pending}
    assert list(pending) == ["2", "4", "3"]  # Slurm's priority order
    assert pending["2"].expected_start == now + 1500 and pending["2"].eligible
    assert pending["2"].cores == 32 and pending["2"].nodes == 2
    assert not pending["3"].eligible and pending["3"].limit == UNLIMITED_S
    assert pending["4"].cores == 16  # --exclusive: a whole node
    assert snap.extra["finished_jobs_ignored"] == 1


def test_snapshot_array_remainder_is_expanded(pyslurm: Any, backend: Any) -> None:
    now = int(time.time())
    pyslurm.CLUSTER.jobs[7] = pyslurm.Job(
        7,
        state="PENDING",
        state_reason="JobArrayTaskLimit",
        cpus=4,
        array_id=7,
        array_tasks_waiting="2-5",
        array_tasks_parallel=2,
        submit_time=now,
    )
    pyslurm.CLUSTER.jobs[8] = pyslurm.Job(  # task 0, split off: pyslurm reads its id as None
        8, state="RUNNING", cpus=4, array_id=7, allocated_nodes="n2", start_time=now
    )
    pyslurm.CLUSTER.jobs[9] = pyslurm.Job(
        9, state="RUNNING", cpus=4, array_id=7, array_task_id=1, allocated_nodes="n2"
    )
    snap = backend.snapshot()
    assert [j.id for j in snap.pending] == ["7_2", "7_3", "7_4", "7_5"]
    assert sorted(j.id for j in snap.running) == ["7_0", "7_1"]
    assert snap.extra["array_throttle"] == {"7": 2}


def test_a_partly_allocated_node_is_mixed_as_sinfo_says(pyslurm: Any, backend: Any) -> None:
    nodes = pyslurm.CLUSTER.nodes
    nodes["n1"].state, nodes["n1"].allocated_cpus = "ALLOCATED", 8
    nodes["n2"].state, nodes["n2"].allocated_cpus = "ALLOCATED+DRAIN", 8
    nodes["n3"].state, nodes["n3"].allocated_cpus = "ALLOCATED", 16
    states = {n.name: n.state for n in backend.snapshot().nodes}
    assert states == {"n1": "mixed", "n2": "mixed+drain", "n3": "allocated", "n4": "idle"}


def test_snapshot_for_the_node_aware_plan(pyslurm: Any, backend: Any) -> None:
    """What the command backend reads from scontrol show config, squeue's job_resources and
    sinfo: the placement and backfill settings, where running jobs run, the nodes' weights,
    and the cores a reservation holds on each node."""
    now = int(time.time())
    cluster = pyslurm.CLUSTER
    cluster.nodes["n2"].weight = 5
    cluster.nodes["n1"].allocated_cpus = cluster.nodes["n2"].allocated_cpus = 10
    cluster.jobs[1] = pyslurm.Job(
        1,
        state="RUNNING",
        cpus=20,
        num_nodes=2,
        allocated_nodes="n[1-2]",
        start_time=now - 60,
        resource_layout={"n1": {"cpus": "0-9"}, "n2": {"cpus": "0-7,12-13"}},
    )
    cluster.jobs[2] = pyslurm.Job(2, state="PENDING", cpus=8, num_nodes=2, max_nodes=2)
    cluster.reservations["sa-held"] = pyslurm.Reservation(
        "sa-held",
        start_time=now + 600,
        end_time=now + 1200,
        cpus=12,
        node_count=2,
        nodes="n3,n4",
        tres={"cpu": 12},
        cpu_ids_by_node={"n3": "0-3", "n4": "0-7"},
    )
    snap = backend.snapshot()

    assert snap.placement is Placement.SLURM
    assert snap.backfill == Backfill(resolution=60, window=86400, kill_wait=5)
    assert [n.weight for n in snap.nodes] == [1, 5, 1, 1]
    assert snap.running[0].allocation == (("n1", 10), ("n2", 10))
    assert snap.pending[0].max_nodes == 2
    [held] = snap.reservations
    assert held.node_names == ("n3", "n4") and held.allocation == (("n3", 4), ("n4", 8))
    backend.snapshot()
    assert pyslurm.CLUSTER.calls.count("slurm_load_ctl_conf") == 1  # read once


def test_other_scheduling_gets_the_pooled_plan(pyslurm: Any, backend: Any) -> None:
    pyslurm.CLUSTER.config["select_type"] = "select/linear"
    pyslurm.CLUSTER.config["scheduler_parameters"] = {"bf_resolution": "120", "bf_window": "60"}
    snap = backend.snapshot()
    assert snap.placement is Placement.POOLED
    assert snap.backfill == Backfill(resolution=120, window=3600, kill_wait=5)


def test_snapshot_with_the_controller_down(pyslurm: Any, backend: Any) -> None:
    pyslurm.CLUSTER.down = True
    with pytest.raises(BackendUnavailable, match="Unable to contact slurm controller"):
        backend.snapshot()


def test_a_hanging_call_times_out(pyslurm: Any, backend: Any) -> None:
    release = threading.Event()
    pyslurm.CLUSTER.hang = release
    began = time.monotonic()
    try:
        with pytest.raises(BackendUnavailable, match="did not answer within 2 s"):
            backend.list_reservations()
    finally:
        release.set()
    assert time.monotonic() - began < 5


# --------------------------------------------------------------------------- reservations


def test_create_list_and_delete(pyslurm: Any, backend: Any) -> None:
    wanted = spec(size=24, minutes=90)
    made = backend.create_reservation(wanted)
    assert (made.name, made.start, made.end, made.cores) == ("sa-1", wanted.start, wanted.end, 24)
    assert made.users == ("alice",) and made.partition == "batch"
    assert made.state == "INACTIVE"
    stored = pyslurm.CLUSTER.reservations["sa-1"]
    assert (stored.start_time, stored.end_time, stored.cpus) == (wanted.start, wanted.end, 24)
    assert [r.name for r in backend.list_reservations()] == ["sa-1"]
    assert "sa-1" in [r.name for r in backend.snapshot().reservations]

    backend.delete_reservation("sa-1")
    assert pyslurm.CLUSTER.reservations == {}
    backend.delete_reservation("sa-1")  # already gone: not an error
    assert backend.list_reservations() == []


def test_create_rounds_to_minutes_and_sets_flags(pyslurm: Any) -> None:
    from siteagent.backends.pyslurm import PyslurmBackend

    made = PyslurmBackend(
        SlurmConfig(users=("alice",), flags=("IGNORE_JOBS", "MAINT"), unit=CapacityUnit.NODE)
    )
    try:
        start = int(time.time()) + 600
        got = made.create_reservation(ReservationSpec("sa-n", start, 61, 2, unit=CapacityUnit.NODE))
    finally:
        made.close()
    stored = pyslurm.CLUSTER.reservations["sa-n"]
    assert stored.end_time - stored.start_time == 120  # 61 s -> 2 whole minutes
    assert stored.node_count == 2 and stored.cpus == 32
    flags = pyslurm.ReservationFlags
    assert flags.IGNORE_RUNNING_JOBS in stored.flags and flags.MAINTENANCE in stored.flags
    assert set(got.flags) == {"IGNORE_JOBS", "MAINT", "SPECIFIC_NODES"}


def test_create_on_the_nodes_the_plan_chose(pyslurm: Any, backend: Any) -> None:
    """pyslurm 25.5's Reservation takes one core count for the nodes it names: the cores
    chosen on each node are asked as their total on those nodes (here they fill n2)."""
    wanted = dataclasses.replace(spec(size=24), allocation=(("n2", 16), ("n3", 8)))
    made = backend.create_reservation(wanted)
    stored = pyslurm.CLUSTER.reservations["sa-1"]
    assert (stored.nodes, stored.cpus) == ("n2,n3", 24)
    assert made.node_names == ("n2", "n3") and made.cores == 24
    assert made.allocation == (("n2", 16), ("n3", 8))
    fields = {"ReservationName": "sa-2", "Nodes": "n1,n4", "CoreCnt": "4,8"}
    request = backend.reservations.request(fields, wanted.start, wanted.end)
    assert (request.nodes, request.cpus) == ("n1,n4", 12)


def test_the_held_window_is_in_whole_minutes(backend: Any) -> None:
    assert backend.held_window(1000, 1061) == (1000, 1120)
    assert backend.held_window(1000, 1060) == (1000, 1060)


def test_refusals_carry_slurms_message(pyslurm: Any, backend: Any) -> None:
    with pytest.raises(ReservationRefused, match="Requested nodes are busy"):
        backend.create_reservation(spec(size=65))
    with pytest.raises(ReservationRefused, match="Invalid user id"):
        backend.create_reservation(
            ReservationSpec("sa-2", int(time.time()) + 60, 600, 1, users=("mallory",))
        )
    assert pyslurm.CLUSTER.reservations == {}


def test_duplicate_name_is_idempotent_for_the_same_window(pyslurm: Any, backend: Any) -> None:
    wanted = spec()
    first = backend.create_reservation(wanted)
    assert backend.create_reservation(wanted) == first
    moved = ReservationSpec(wanted.name, wanted.start + 3600, wanted.duration, wanted.size)
    with pytest.raises(ReservationRefused, match="Duplicate reservation name"):
        backend.create_reservation(moved)


def test_delete_errors(pyslurm: Any, backend: Any) -> None:
    backend.create_reservation(spec(start=int(time.time()) + 5))
    pyslurm.CLUSTER.jobs[9] = pyslurm.Job(9, state="RUNNING", reservation="sa-1", cpus=1)
    with pytest.raises(ReservationRefused, match="in use"):
        backend.delete_reservation("sa-1")
    with pytest.raises(ValueError, match="not an agent reservation"):
        backend.delete_reservation("maintenance")
    pyslurm.CLUSTER.down = True
    with pytest.raises(BackendUnavailable, match="connect failure"):
        backend.delete_reservation("sa-1")


def test_create_with_the_controller_down(pyslurm: Any, backend: Any) -> None:
    pyslurm.CLUSTER.down = True
    with pytest.raises(BackendUnavailable, match="Unable to contact slurm controller"):
        backend.create_reservation(spec())


def test_invalid_requests_never_reach_pyslurm(pyslurm: Any, backend: Any) -> None:
    with pytest.raises(ValueError, match="prefix"):
        backend.create_reservation(spec(name="other"))
    with pytest.raises(ValueError, match="reservation name"):
        backend.create_reservation(spec(name="sa-x y"))
    assert pyslurm.CLUSTER.calls == []


# --------------------------------------------------------------------------- installation


def fake_pyslurm(monkeypatch: pytest.MonkeyPatch, version: str, *names: str) -> None:
    """A module ``pyslurm`` of ``version`` with attributes ``names``, the local Slurm being
    22.05."""
    from siteagent.backends.pyslurm import versions

    module = ModuleType("pyslurm")
    module.__version__ = version  # type: ignore[attr-defined]
    for name in names:
        setattr(module, name, object())
    monkeypatch.setitem(sys.modules, "pyslurm", module)
    monkeypatch.setattr(versions, "local_slurm", lambda: (22, 5))


def test_missing_pyslurm_says_what_is_supported_and_how_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from siteagent.backends.pyslurm import PyslurmBackend, versions

    monkeypatch.setitem(sys.modules, "pyslurm", None)  # import fails
    monkeypatch.setattr(versions, "local_slurm", lambda: (22, 5))
    with pytest.raises(BackendError) as refused:
        PyslurmBackend(SlurmConfig())
    message = str(refused.value)
    assert "supports pyslurm 22.5 to 24.x" in message and "25.5 or later" in message
    assert "pip install 'pyslurm==22.5.*'" in message and "v22.5.*" in message


@pytest.mark.parametrize(
    ("version", "reason"),
    [
        ("21.8.1", r"pyslurm 21\.8\.1 is too old"),
        ("23.2.2", r"pyslurm 23\.2\.2 is built for Slurm 23\.02, not this Slurm"),
        ("25.5.0", r"pyslurm 25\.5\.0 is built for Slurm 25\.05, not this Slurm"),
        ("unknown", r"cannot tell the version of pyslurm 'unknown'"),
    ],
)
def test_unsupported_pyslurm_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch, version: str, reason: str
) -> None:
    from siteagent.backends.pyslurm import PyslurmBackend

    fake_pyslurm(monkeypatch, version, "Jobs", "Nodes", "RPCError", "reservation")
    with pytest.raises(BackendError, match=reason) as refused:
        PyslurmBackend(SlurmConfig())
    assert "supports pyslurm 22.5 to 24.x" in str(refused.value)
    assert "pip install 'pyslurm==22.5.*'" in str(refused.value)


def test_a_release_without_its_reservation_class_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from siteagent.backends.pyslurm import PyslurmBackend

    fake_pyslurm(monkeypatch, "22.5.3", "Jobs", "Nodes", "RPCError")
    with pytest.raises(BackendError, match=r"pyslurm 22\.5\.3 lacks reservation"):
        PyslurmBackend(SlurmConfig())


def test_each_release_gets_its_reservation_api(monkeypatch: pytest.MonkeyPatch) -> None:
    from siteagent.backends.pyslurm import PyslurmBackend, versions
    from siteagent.backends.pyslurm.reservations import LegacyReservations, ObjectReservations

    for version, series, adapter in (
        ("22.5.3", (22, 5), LegacyReservations),
        ("24.11.0", (24, 11), LegacyReservations),
        ("25.5.0", (25, 5), ObjectReservations),
        ("25.11.1", (25, 11), ObjectReservations),
    ):
        names = ("Jobs", "Nodes", "reservation", "Reservation", "Reservations", "config")
        names += ("slurmctld",)
        fake_pyslurm(monkeypatch, version, *names)
        sys.modules["pyslurm"].RPCError = RuntimeError  # type: ignore[attr-defined]
        monkeypatch.setattr(versions, "local_slurm", lambda series=series: series)
        backend = PyslurmBackend(SlurmConfig())
        try:
            assert isinstance(backend.reservations, adapter), version
        finally:
            backend.close()


def test_without_scontrol_the_slurm_version_is_not_compared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from siteagent.backends.pyslurm import versions

    assert versions.refusal("24.5.1", None) == ""
    assert versions.series("22.05.8") == (22, 5)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert versions.local_slurm() is None


def test_site_opens_the_pyslurm_backend_lazily(pyslurm: Any, tmp_path: Path) -> None:
    from siteagent.config import loading
    from siteagent.market.site import open_backend

    path = tmp_path / "agent.yaml"
    path.write_text("backend:\n  type: pyslurm\n")
    opened = open_backend(loading.load(path))
    try:
        assert opened.name == "pyslurm"
    finally:
        opened.close()


# --------------------------------------------------------------------------- the legacy API


def test_legacy_request_is_scontrols_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyslurm 22.5 to 24.x get a dict with the very words scontrol would be given; the real
    one is exercised against the test cluster (tests/integration/test_pyslurm_cluster.py)."""
    from siteagent.backends.pyslurm.reservations import LegacyReservations
    from siteagent.backends.slurm.arguments import reservation_args

    module = ModuleType("pyslurm")
    module.__version__ = "22.5.3"  # type: ignore[attr-defined]
    module.RESERVE_FLAG_IGN_JOBS = 1 << 6  # type: ignore[attr-defined]
    module.RESERVE_FLAG_MAINT = 1  # type: ignore[attr-defined]
    legacy = LegacyReservations(module)
    now = int(time.time())
    config = SlurmConfig(partition="batch", users=("alice", "bob"), flags=("IGNORE_JOBS", "MAINT"))
    args = reservation_args(ReservationSpec("sa-1", now + 600, 61, 8), config, now)
    fields = dict(a.split("=", 1) for a in args if "=" in a)
    assert legacy.request(fields, now + 600, now + 720) == {
        "name": "sa-1",
        "start_time": now + 600,
        "duration": 2,
        "core_cnt": [8],
        "users": "alice,bob",
        "partition": "batch",
        "flags": (1 << 6) | 1,
    }
    nodes = SlurmConfig(users=("alice",), unit=CapacityUnit.NODE, flags=("OVERLAP",))
    two_nodes = ReservationSpec("sa-2", now + 600, 60, 2, unit=CapacityUnit.NODE)
    fields = dict(a.split("=", 1) for a in reservation_args(two_nodes, nodes, now) if "=" in a)
    with pytest.raises(BackendError, match=r"\(22\.5\.3\) cannot set reservation flag\(s\) OVERL"):
        legacy.request(fields, now + 600, now + 660)
    del fields["Flags"]
    assert legacy.request(fields, now + 600, now + 660)["node_cnt"] == 2

    placed = ReservationSpec("sa-3", now + 600, 60, 12, allocation=(("n2", 4), ("n3", 8)))
    fields = dict(a.split("=", 1) for a in reservation_args(placed, config, now) if "=" in a)
    request = legacy.request(fields, now + 600, now + 660)
    assert (request["node_list"], request["core_cnt"]) == ("n2,n3", [4, 8])
    # pyslurm 22.5.3 encodes the list, then (to count its nodes) encodes the bytes again
    assert request["node_list"].encode("UTF-8", "replace").encode("UTF-8") == b"n2,n3"
    assert "node_cnt" not in request
    whole = dataclasses.replace(two_nodes, allocation=(("n1", 16), ("n4", 16)))
    fields = dict(a.split("=", 1) for a in reservation_args(whole, nodes, now) if "=" in a)
    del fields["Flags"]
    request = legacy.request(fields, now + 600, now + 660)
    assert request["node_list"] == "n1,n4" and "core_cnt" not in request


def test_legacy_record_reads_like_scontrol() -> None:
    from siteagent.backends.pyslurm.reservations import legacy_reservation

    now = int(time.time())
    entry = {
        "accounts": None,
        "core_cnt": 8,
        "end_time": now + 3600,
        "flags": "IGNORE_JOBS,SPEC_NODES",
        "node_cnt": 1,
        "node_list": "n1",
        "partition": "batch",
        "start_time": now - 60,
        "tres_str": ["cpu=8"],
        "users": ["root"],
    }
    made = legacy_reservation("sa-1", entry, now)
    assert (made.start, made.end, made.cores, made.nodes) == (now - 60, now + 3600, 8, 1)
    assert made.flags == ("IGNORE_JOBS", "SPEC_NODES") and made.users == ("root",)
    assert made.accounts == () and made.state == "ACTIVE"
    later = legacy_reservation("sa-2", {**entry, "start_time": now + 60, "tres_str": None}, now)
    assert later.state == "INACTIVE" and later.cores == 8  # core count without TRES
    assert made.node_names == ("n1",) and made.allocation == ()  # no CoreIDs in pyslurm 22.5
    spread = legacy_reservation("sa-3", {**entry, "node_list": "n[2-3]", "node_cnt": 2}, now)
    assert spread.node_names == ("n2", "n3")


def test_legacy_config_gives_the_scheduler_settings() -> None:
    """pyslurm 22.5's ``config().get()`` (its values as the test cluster has them) gives the
    settings the command backend reads from ``scontrol show config``."""
    from siteagent.backends.pyslurm.scheduler import scheduler_values
    from siteagent.backends.pyslurm.versions import ReservationApi
    from siteagent.backends.slurm.scheduler import parse_scheduler_config, scheduler_settings

    class Config:
        def get(self) -> Any:
            return {
                "select_type": "select/cons_tres",
                "schedtype": "sched/backfill",
                "sched_params": "bf_interval=5,bf_resolution=30",
                "kill_wait": 5,
                "version": "24.11.5",
            }

    module = ModuleType("pyslurm")
    module.config = Config  # type: ignore[attr-defined]
    values = scheduler_values(module, ReservationApi.LEGACY)
    scontrol = (
        "SchedulerParameters     = bf_interval=5,bf_resolution=30\n"
        "SchedulerType           = sched/backfill\n"
        "SelectType              = select/cons_tres\n"
        "KillWait                = 5 sec\n"
        "SLURM_VERSION           = 24.11.5\n"
    )
    assert scheduler_settings(values) == parse_scheduler_config(scontrol)
    assert scheduler_settings(values).backfill.resolution == 30
    assert scheduler_settings(values).backfill.ends_up  # 24.11's backfill rules, as scontrol's
    no_grace = {**Config().get(), "kill_wait": 0}
    module.config = lambda: SimpleNamespace(get=lambda: no_grace)  # type: ignore[attr-defined]
    assert scheduler_settings(scheduler_values(module, ReservationApi.LEGACY)).backfill == (
        parse_scheduler_config(scontrol.replace("5 sec", "0 sec")).backfill
    )


# --------------------------------------------------------------------------- check-config


def test_check_config_refuses_a_pyslurm_the_backend_would_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from siteagent.backends.pyslurm import versions
    from siteagent.cli.main import main

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    path = tmp_path / "agent.yaml"
    path.write_text("backend:\n  type: pyslurm\n")
    monkeypatch.setattr(versions.importlib.metadata, "version", lambda name: "23.2.2")
    monkeypatch.setattr(versions, "local_slurm", lambda: (22, 5))
    assert main(["check-config", str(path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["errors"][0]["path"] == "backend.type"
    assert "pyslurm 23.2.2 is built for Slurm 23.02" in report["errors"][0]["message"]
    assert "pip install 'pyslurm==22.5.*'" in report["errors"][0]["message"]

    monkeypatch.setattr(versions.importlib.metadata, "version", lambda name: "22.5.3")
    assert main(["check-config", str(path), "--json"]) == 0
    capsys.readouterr()
    path.write_text("backend:\n  type: slurm\n")  # other backends never look for pyslurm
    monkeypatch.setattr(versions.importlib.metadata, "version", lambda name: "1.0")
    assert main(["check-config", str(path), "--json"]) == 0


def test_check_config_says_pyslurm_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from siteagent.backends.pyslurm import versions

    def not_installed(name: str) -> str:
        raise versions.importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(versions.importlib.metadata, "version", not_installed)
    monkeypatch.setattr(versions, "local_slurm", lambda: (22, 5))
    refused = versions.installed_refusal()
    assert refused.startswith("pyslurm is not installed; the pyslurm backend supports")
    assert "pip install 'pyslurm==22.5.*'" in refused
