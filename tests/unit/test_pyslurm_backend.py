"""The pyslurm backend against a stand-in pyslurm (testbed/standins/pyslurm): a real pyslurm needs
a libslurm of its own version, which this machine does not have (see the stand-in's docstring).
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import pytest

from siteagent.backends.base import BackendError, BackendUnavailable, ReservationRefused
from siteagent.backends.slurm import SlurmConfig
from siteagent.core.model import UNLIMITED_S, CapacityUnit, ReservationSpec

STANDIN = Path(__file__).resolve().parents[2] / "testbed" / "standins" / "pyslurm"


@pytest.fixture
def pyslurm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The stand-in, imported fresh from the front of sys.path, with a 4-node cluster."""
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
    cluster.nodes["n1"].state, cluster.nodes["n1"].alloc_cpus = "ALLOCATED", 16
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
    snap = backend.snapshot()
    assert [j.id for j in snap.pending] == ["7_2", "7_3", "7_4", "7_5"]
    assert snap.extra["array_throttle"] == {"7": 2}


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


def test_missing_pyslurm_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from siteagent.backends import pyslurm as backend_module

    monkeypatch.setitem(sys.modules, "pyslurm", None)  # import fails
    monkeypatch.setattr(backend_module, "slurm_series", lambda: "22.5")
    with pytest.raises(BackendError, match=r"pip install pyslurm==22\.5\.\*"):
        backend_module.PyslurmBackend(SlurmConfig())


def test_pyslurm_without_reservation_api_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from siteagent.backends import pyslurm as backend_module

    old = ModuleType("pyslurm")
    old.__version__ = "24.11.0"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyslurm", old)
    with pytest.raises(BackendError, match=r"pyslurm 24\.11\.0 has no Reservation API"):
        backend_module.PyslurmBackend(SlurmConfig())


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
