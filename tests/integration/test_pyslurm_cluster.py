"""The pyslurm backend against the real test cluster, with the real pyslurm of its release.

tests/setup/build-pyslurm builds pyslurm 22.5.3 (the release for the test machine's Slurm
22.05, which reads reservations through the legacy ``pyslurm.reservation`` class) and installs
it; without it these tests fail under CI and are skipped elsewhere. pyslurm links libslurm into
this process, so they run on the host's Slurm only (``host_slurm``); for Slurm 24.11 the same
module runs inside the trixie chroot with pyslurm 24.11.0 (tests/integration/
test_pyslurm_versions.py), where that Slurm is the host's. They are the command
backend's scenarios (tests/integration/test_slurm_backend.py), checked against the command
backend itself: on the same cluster at the same moment both backends must give the same
snapshot (the node-aware plan's too) and read back the same reservation, but for the cores on
each node that pyslurm 22.5's records leave out (:func:`as_pyslurm_reads`); and an accepted
reservation goes on the nodes the plan chose through either. pyslurm 25.5's API is shown by
the stand-in (tests/unit/test_pyslurm_backend.py).

libslurm reads ``SLURM_CONF`` once per process, when pyslurm is first imported, so every
pyslurm backend here talks to the session's cluster.
"""

from __future__ import annotations

import importlib.metadata
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

import pytest

from siteagent.backends.base import BackendUnavailable, ReservationRefused
from siteagent.backends.pyslurm import PyslurmBackend, versions
from siteagent.backends.pyslurm.reservations import LegacyReservations
from siteagent.backends.slurm import SlurmBackend, SlurmConfig
from siteagent.core.values import (
    BatchReservation,
    CapacityUnit,
    ClusterSnapshot,
    Placement,
    ReservationSpec,
)
from siteagent.market.reservations import ReservationManager
from siteagent.market.store import Store
from testbed.inprocess.offers import record_offer
from testbed.processes.programs import IN_CI
from testbed.slurm.cluster import SlurmTestCluster
from testbed.slurm.install import SHRINKS_NODE_COUNT, SlurmInstall
from testbed.slurm.queue import job_state, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.host_slurm]

STANDINS = Path(__file__).resolve().parents[2] / "testbed" / "standins"


@pytest.fixture(scope="module")
def real_pyslurm(slurm_cluster: SlurmTestCluster) -> Iterator[str]:
    """The installed pyslurm's version; fails under CI (skips elsewhere) without one.
    ``SLURM_CONF`` is put back afterwards (the backend sets it for libslurm)."""
    try:
        version = importlib.metadata.version("pyslurm")
    except importlib.metadata.PackageNotFoundError:
        reason = "pyslurm is not installed; tests/setup/build-pyslurm builds it (./test runs it)"
        if IN_CI:
            pytest.fail(f"under CI: {reason}", pytrace=False)
        pytest.skip(reason)
    before = os.environ.get("SLURM_CONF")
    yield version
    if before is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = before


def config(
    cluster: SlurmTestCluster,
    unit: CapacityUnit = CapacityUnit.CORE,
    flags: Tuple[str, ...] = (),
    timeout: float = 30.0,
) -> SlurmConfig:
    return cluster.slurm_config(
        users=("root",),
        partition="batch",
        unit=unit,
        flags=flags,
        timeout=timeout,
    )


@pytest.fixture
def both(slurm: SlurmTestCluster, real_pyslurm: str) -> Iterator[Tuple[Any, SlurmBackend]]:
    """The pyslurm backend and the command backend on the emptied cluster."""
    made = PyslurmBackend(config(slurm))
    yield made, SlurmBackend(config(slurm))
    made.close()


def spec(name: str, start: int, duration: int, size: int, **kw: Any) -> ReservationSpec:
    return ReservationSpec(name=name, start=start, duration=duration, size=size, **kw)


def comparable(snap: ClusterSnapshot) -> Tuple[ClusterSnapshot, Any]:
    """The snapshot less what tells the backends apart (when, which backend, the layout, and
    how many finished jobs each read and left out: 24.11's ``squeue --json`` lists none,
    pyslurm's ``Jobs.load()`` still does)."""
    ignored = ("layout", "finished_jobs_ignored")
    extra = {k: v for k, v in snap.extra.items() if k not in ignored}
    return replace(snap, now=0, backend=""), extra


def as_pyslurm_reads(res: Optional[BatchReservation]) -> Optional[BatchReservation]:
    """A reservation the command backend read, as pyslurm 22.5's legacy records give it:
    without the cores on each node (scontrol's ``CoreIDs=``), which the snapshots of both
    backends then tell alike from the nodes and the total."""
    return None if res is None else replace(res, allocation=())


def same_snapshots(pyslurm: Any, command: SlurmBackend) -> Tuple[ClusterSnapshot, ClusterSnapshot]:
    """Both backends' snapshots, taken while the command backend saw no change (a backfill pass
    between two reads may move an expected start): the comparison is then of one state."""
    for _ in range(5):
        before = command.snapshot()
        ours = pyslurm.snapshot()
        after = command.snapshot()
        if comparable(before) == comparable(after):
            return ours, after
    raise AssertionError("the queue kept changing under the command backend")


# ----------------------------------------------------------------------------- the release


def test_the_real_pyslurm_is_tested(
    both: Tuple[Any, SlurmBackend], real_pyslurm: str, slurm_version: SlurmInstall
) -> None:
    """Not the stand-in: the installed release for this Slurm (22.5 for 22.05, 24.11 for
    24.11), on its legacy reservation API."""
    pyslurm, _ = both
    assert versions.series(real_pyslurm) == versions.series(slurm_version.series)
    assert not Path(pyslurm.pyslurm.__file__).resolve().is_relative_to(STANDINS)
    assert pyslurm.pyslurm.__version__ == real_pyslurm
    assert isinstance(pyslurm.reservations, LegacyReservations)


# ----------------------------------------------------------------------------- snapshot


def test_snapshot_equals_the_command_backends(
    slurm: SlurmTestCluster, both: Tuple[Any, SlurmBackend]
) -> None:
    pyslurm, command = both
    big = slurm.submit("-N2", "--exclusive", "-t", "30")
    eight = slurm.submit("-n8", "-t", "20")
    blocked = slurm.submit("-N4", "-t", "60")  # waits for the exclusive job: Resources
    array = slurm.submit("--array=0-3%1", "-n2", "-t", "10")
    slurm.submit("-H", "-n2", "-t", "10")
    slurm.submit(f"--dependency=afterok:{blocked}", "-n1", "-t", "10")
    slurm.submit("--begin=now+1hour", "-n1", "-t", "5")
    slurm.submit("-n1", "-t", "1", wrap="true")  # finishes: left out by both
    slurm.submit("-n4", "-t", "15", "--exclusive")  # pending: counts a whole node
    wait_for(
        "running jobs",
        lambda: job_state(slurm, big) == "RUNNING" and job_state(slurm, eight) == "RUNNING",
    )
    start = int(time.time()) + 7200
    command.create_reservation(spec("sa-held", start, 1800, 8))
    wait_for(
        "the blocked job's backfill estimate",
        lambda: any(
            j.id == blocked and j.expected_start is not None for j in command.snapshot().pending
        ),
    )

    ours, theirs = same_snapshots(pyslurm, command)

    assert comparable(ours) == comparable(theirs)
    assert ours.backend == "pyslurm"
    assert ours.extra["layout"] == f"pyslurm/{pyslurm.pyslurm.__version__}"
    assert ours.placement is Placement.SLURM and ours.backfill.kill_wait == 5
    running: Dict[str, Any] = {j.id: j.allocation for j in ours.running}
    assert [cores for _, cores in running[big]] == [16, 16]  # whole nodes
    assert sum(cores for _, cores in running[eight]) == 8
    [held] = ours.reservations
    assert held.allocation == theirs.reservations[0].allocation and len(held.allocation) == 1
    assert {big, eight} <= {j.id for j in ours.running}
    assert ours.pending[0].id == blocked and ours.pending[0].expected_start is not None
    tasks = [j.id for j in ours.running + ours.pending if j.id.startswith(f"{array}_")]
    assert sorted(tasks) == [f"{array}_{i}" for i in range(4)]  # task 0 too, see job_record
    assert [r.name for r in ours.reservations] == ["sa-held"]
    assert ours.capacity == 64


def test_drained_node_leaves_capacity_in_both(
    slurm: SlurmTestCluster, both: Tuple[Any, SlurmBackend]
) -> None:
    pyslurm, command = both
    slurm.run(["scontrol", "update", "NodeName=n2", "State=DRAIN", "Reason=test drain"])
    try:
        ours, theirs = same_snapshots(pyslurm, command)
        assert comparable(ours) == comparable(theirs)
        node = next(n for n in ours.nodes if n.name == "n2")
        assert ours.capacity == 48 and not node.usable and node.reason == "test drain"
    finally:
        slurm.run(["scontrol", "update", "NodeName=n2", "State=RESUME"])


def test_a_recheck_reads_running_work_only_and_reuses_it_while_nothing_started(
    slurm: SlurmTestCluster, both: Tuple[Any, SlurmBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An accept's re-check (``occupancy``): the snapshot's running work and reservations
    without the queue; the jobs are loaded once and reused while no job started or ended,
    and loaded again as soon as one did or Slurm refused a reservation."""
    pyslurm, _ = both
    loads: List[str] = []
    load = pyslurm._load

    def recorded(what: str, collection: Any) -> List[Any]:
        loads.append(what)
        return load(what, collection)

    monkeypatch.setattr(pyslurm, "_load", recorded)

    def running_ids() -> Tuple[Set[str], int]:
        loads.clear()
        occupied = pyslurm.occupancy()
        assert occupied.pending == ()
        return {job.id for job in occupied.running}, loads.count("Jobs.load")

    assert running_ids() == (set(), 1)
    assert running_ids() == (set(), 0)  # nothing started: the jobs loaded before
    job = slurm.submit("-n16", "-t", "30")
    slurm.submit("-H", "-n2", "-t", "10")  # held: queued, not in the re-check
    wait_for("the job to run", lambda: job_state(slurm, job) == "RUNNING")
    assert running_ids() == ({job}, 1)
    assert running_ids() == ({job}, 0)
    snap, occupied = pyslurm.snapshot(), pyslurm.occupancy()
    assert occupied.running == snap.running and occupied.reservations == snap.reservations
    assert occupied.capacity == snap.capacity and len(snap.pending) == 1
    with pytest.raises(ReservationRefused):  # Slurm refuses: what was kept is not trusted
        pyslurm.create_reservation(
            spec("sa-user", int(time.time()) + 600, 600, 2, users=("nosuchuser9",))
        )
    assert running_ids() == ({job}, 1)
    slurm.run(["scancel", job])
    wait_for("the job to end", lambda: job_state(slurm, job) == "")
    assert running_ids() == (set(), 1)


# ----------------------------------------------------------------------------- reservations


def test_create_read_back_and_delete(
    slurm: SlurmTestCluster, both: Tuple[Any, SlurmBackend]
) -> None:
    pyslurm, command = both
    start = int(time.time()) + 3600
    made = pyslurm.create_reservation(spec("sa-later", start, 5400 + 1, 8))
    assert (made.cores, made.start) == (8, start)
    assert made.end - made.start == 91 * 60  # whole minutes, rounded up
    assert made.state == "INACTIVE" and made.users == ("root",) and made.partition == "batch"
    assert as_pyslurm_reads(command.get_reservation("sa-later")) == made  # what scontrol shows
    text = slurm.run(["scontrol", "show", "reservation", "-o", "sa-later"]).stdout
    assert "CoreCnt=8" in text and "PartitionName=batch" in text
    assert pyslurm.list_reservations() == [as_pyslurm_reads(r) for r in command.list_reservations()]

    pyslurm.delete_reservation("sa-later")
    assert command.get_reservation("sa-later") is None
    assert pyslurm.get_reservation("sa-later") is None
    pyslurm.delete_reservation("sa-later")  # already gone: not an error
    with pytest.raises(ValueError, match="not an agent reservation"):
        pyslurm.delete_reservation("somebody-elses")


def test_active_reservation_blocks_capacity(
    slurm: SlurmTestCluster, both: Tuple[Any, SlurmBackend]
) -> None:
    pyslurm, command = both
    now = int(time.time())
    made = pyslurm.create_reservation(spec("sa-block", now, 1800, 64))
    assert made.cores == 64 and made.state == "ACTIVE" and made.start == now
    assert as_pyslurm_reads(command.get_reservation("sa-block")) == made
    outsider = slurm.submit("-n1", "-t", "5")
    insider = slurm.submit("-n1", "-t", "5", "--reservation=sa-block")
    wait_for("the job in the reservation to run", lambda: job_state(slurm, insider) == "RUNNING")
    time.sleep(7)  # more than one backfill pass
    assert job_state(slurm, outsider) == "PENDING"
    with pytest.raises(ReservationRefused, match="in use"):
        pyslurm.delete_reservation("sa-block")


def test_node_count_is_silently_reduced_and_read_back(
    slurm: SlurmTestCluster, real_pyslurm: str
) -> None:
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
    pyslurm = PyslurmBackend(config(slurm, unit=CapacityUnit.NODE))
    asked = spec("sa-nodes", start, 3600, 3, unit=CapacityUnit.NODE)
    try:
        if slurm.install.series not in SHRINKS_NODE_COUNT:  # 24.11 on: refused, not shrunk
            with pytest.raises(ReservationRefused, match="Requested nodes are busy"):
                pyslurm.create_reservation(asked)
            return
        made = pyslurm.create_reservation(asked)
    finally:
        pyslurm.close()
    assert made.nodes == 1 and made.node_list == "n4" and made.cores == 16  # asked for 3
    assert made.node_names == ("n4",)
    assert as_pyslurm_reads(SlurmBackend(config(slurm)).get_reservation("sa-nodes")) == made


def test_retry_with_the_same_name_is_idempotent(
    slurm: SlurmTestCluster, both: Tuple[Any, SlurmBackend]
) -> None:
    pyslurm, _ = both
    asked = spec("sa-twice", int(time.time()) + 600, 600, 2)
    first = pyslurm.create_reservation(asked)
    assert pyslurm.create_reservation(asked) == first
    with pytest.raises(ReservationRefused, match="Duplicate reservation name"):
        pyslurm.create_reservation(spec("sa-twice", asked.start + 60, 600, 2))


def test_an_accepted_reservation_is_on_the_nodes_the_plan_chose(
    slurm: SlurmTestCluster, both: Tuple[Any, SlurmBackend], tmp_path: Path
) -> None:
    """As through the commands (tests/integration/test_slurm_placement.py): jobs leave 4, 6,
    16 and 16 cores free, and twenty cores for an hour go on n1, n2 and n3 with the cores
    the plan chose on each, which both backends read back alike."""
    pyslurm, command = both
    jobs = [
        slurm.submit(f"-w{node}", f"-n{cores}", "-t", "120")
        for node, cores in (
            ("n1", 12),
            ("n2", 10),
        )
    ]
    wait_for("the jobs to run", lambda: all(job_state(slurm, j) == "RUNNING" for j in jobs))
    manager = ReservationManager(Store(str(tmp_path / "store.db")), pyslurm)
    offer = record_offer(manager, 20, int(time.time()) + 600, 3600)
    record = manager.accept(offer.id, "buyer", "k", users=("root",))
    assert record.allocation == (("n1", 4), ("n2", 6), ("n3", 10))
    text = slurm.run(["scontrol", "show", "reservation", "-o", record.name]).stdout
    assert "Nodes=n[1-3]" in text and "CoreCnt=20" in text
    made = pyslurm.get_reservation(record.name)
    assert made.node_names == ("n1", "n2", "n3")
    assert as_pyslurm_reads(command.get_reservation(record.name)) == made


def test_cores_spread_by_slurm_are_never_fewer_than_scontrol_shows(
    slurm: SlurmTestCluster, both: Tuple[Any, SlurmBackend]
) -> None:
    """A core reservation Slurm spreads over two nodes: scontrol lists its cores on each
    (16 and 4; some seconds after it was made, told from the total before), pyslurm 22.5 does
    not, and its snapshot holds up to the total on each."""
    pyslurm, command = both
    command.create_reservation(spec("sa-spread", int(time.time()) + 7200, 1800, 20))
    wait_for("scontrol to list its cores on each node", lambda: _lists_cores(command, "sa-spread"))
    [exact] = command.snapshot().reservations
    [told] = pyslurm.snapshot().reservations
    assert sorted(cores for _, cores in exact.allocation) == [4, 16]
    assert told.node_names == exact.node_names
    held = dict(told.allocation)
    assert all(held[node] >= cores for node, cores in exact.allocation)


# ----------------------------------------------------------------------------- refusals


def test_busy_nodes_are_refused_unless_ignore_jobs(
    slurm: SlurmTestCluster, real_pyslurm: str
) -> None:
    job = slurm.submit("-N4", "--exclusive", "-t", "30")
    wait_for("the full-cluster job to run", lambda: job_state(slurm, job) == "RUNNING")
    now = int(time.time())
    backends = [PyslurmBackend(config(slurm, unit=u)) for u in CapacityUnit]
    ignoring = PyslurmBackend(config(slurm, flags=("IGNORE_JOBS",)))
    try:
        for backend, size in zip(backends, (4, 1)):
            unit = backend.config.unit
            with pytest.raises(ReservationRefused, match="Requested nodes are busy"):
                backend.create_reservation(spec("sa-busy", now, 600, size, unit=unit))
        assert backends[0].get_reservation("sa-busy") is None
        made = ignoring.create_reservation(spec("sa-busy", now, 600, 4))
    finally:
        for backend in (*backends, ignoring):
            backend.close()
    assert made.cores == 4 and "IGNORE_JOBS" in made.flags
    assert as_pyslurm_reads(SlurmBackend(config(slurm)).get_reservation("sa-busy")) == made
    assert job_state(slurm, job) == "RUNNING"


def test_unknown_user_is_refused(both: Tuple[Any, SlurmBackend]) -> None:
    pyslurm, command = both
    with pytest.raises(ReservationRefused, match="Invalid user id"):
        pyslurm.create_reservation(
            spec("sa-user", int(time.time()) + 600, 600, 2, users=("nosuchuser9",))
        )
    assert command.list_reservations() == []


# ----------------------------------------------------------------------------- outages


def test_controller_down_is_unavailable(slurm: SlurmTestCluster, real_pyslurm: str) -> None:
    """libslurm finds a stopped controller's port closed at once (the commands retry for
    seconds): unavailable, with Slurm's words, and the same backend works once it is back."""
    slurm.stop_controller()
    pyslurm = PyslurmBackend(config(slurm))
    try:
        try:
            with pytest.raises(BackendUnavailable, match="Unable to contact slurm controller"):
                pyslurm.snapshot()
            with pytest.raises(BackendUnavailable, match="Unexpected message received"):
                pyslurm.create_reservation(spec("sa-down", int(time.time()) + 600, 600, 2))
        finally:
            slurm.start_controller()
        assert pyslurm.snapshot().capacity == 64
    finally:
        pyslurm.close()


def test_hanging_controller_is_unavailable_after_libslurms_timeout(
    slurm: SlurmTestCluster, real_pyslurm: str
) -> None:
    """A controller that accepts and never answers. pyslurm 22.5.3 holds the GIL through its
    calls, so the worker thread's timeout (2 s here) cannot fire: libslurm's own
    MessageTimeout (10 s in the test cluster) ends the call, which is then unavailable, and
    the backend answers again once the controller does."""
    pyslurm = PyslurmBackend(config(slurm, timeout=2.0))
    slurm.pause_controller()
    try:
        began = time.monotonic()
        with pytest.raises(BackendUnavailable, match="Socket timed out on send/recv"):
            pyslurm.snapshot()
        assert time.monotonic() - began < 20  # one call, MessageTimeout, not forever
    finally:
        slurm.resume_controller()
    try:
        wait_for("the backend to answer again", lambda: _answers(pyslurm), timeout=60)
    finally:
        pyslurm.close()


def _lists_cores(backend: SlurmBackend, name: str) -> bool:
    made = backend.get_reservation(name)
    return made is not None and bool(made.allocation)


def _answers(backend: PyslurmBackend) -> bool:
    try:
        return backend.snapshot().capacity == 64
    except BackendUnavailable:
        return False
