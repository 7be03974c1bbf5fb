"""The replay backend's state file: one simulated cluster shared by processes and restarts.

The cluster of the main test has 4 cores: job 1 takes all of them over [0, 100), job 2 (2
cores) arrives at 10 and would start at 100, but a reservation of 3 cores over [100, 200),
made at 20, pushes it to 200. A process started later must see job 2 still waiting at 150:
it replays the reservation at the instant it was made. (Re-injecting it when the new process
starts would find job 2 already running in the rebuilt past, and the reservation no longer
fitting.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Tuple

import pytest

from siteagent.backends.base import BackendUnavailable, ReservationRefused
from siteagent.backends.replay import SwfReplayBackend
from siteagent.core.model import ClusterSnapshot, ReservationSpec
from testbed.fakes import FakeClock
from testbed.traces import write_trace

T0 = 1_800_000_000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(float(T0))


@pytest.fixture
def trace(tmp_path: Path) -> str:
    return write_trace(
        tmp_path / "t.swf", [(0, 100, 4, 100), (10, 100, 2, 100), (90000, 5, 1, 5)], 4
    )


def open_at(path: Path, clock: FakeClock, trace: str = "") -> SwfReplayBackend:
    return SwfReplayBackend.open(
        str(path), trace or None, offset_s=0 if trace else None, clock=clock
    )


def jobs(snapshot: ClusterSnapshot) -> Tuple[List[Tuple[str, object]], List[str]]:
    return [(j.id, j.start) for j in snapshot.running], [j.id for j in snapshot.pending]


def test_a_later_process_continues_the_same_cluster(
    tmp_path: Path, clock: FakeClock, trace: str
) -> None:
    state = tmp_path / "state" / "replay.json"
    first = open_at(state, clock, trace)
    clock.advance(20)
    first.create_reservation(ReservationSpec("sa-1", T0 + 100, 100, 3))
    clock.advance(130)
    later = open_at(state, clock)
    assert later.now() == first.now() == T0 + 150
    assert jobs(later.snapshot()) == jobs(first.snapshot()) == ([], ["2"])
    assert [r.name for r in later.list_reservations()] == ["sa-1"]
    clock.advance(50)
    assert jobs(later.snapshot()) == jobs(first.snapshot()) == ([("2", T0 + 200)], [])


def test_processes_see_each_others_changes(tmp_path: Path, clock: FakeClock, trace: str) -> None:
    state = tmp_path / "replay.json"
    a, b = open_at(state, clock, trace), open_at(state, clock)
    a.create_reservation(ReservationSpec("sa-1", T0 + 300, 100, 1))
    assert [r.name for r in b.list_reservations()] == ["sa-1"]
    with pytest.raises(ReservationRefused, match="duplicate"):
        b.create_reservation(ReservationSpec("sa-1", T0 + 300, 100, 1))
    with pytest.raises(ReservationRefused, match="busy"):
        b.create_reservation(ReservationSpec("sa-2", T0 + 300, 100, 4))
    b.delete_reservation("sa-1")
    assert a.list_reservations() == []
    a.create_reservation(ReservationSpec("sa-2", T0 + 300, 100, 4))
    assert [r.cores for r in b.list_reservations()] == [4]


def test_reservations_end_with_their_window(tmp_path: Path, clock: FakeClock, trace: str) -> None:
    state = tmp_path / "replay.json"
    open_at(state, clock, trace).create_reservation(ReservationSpec("sa-1", T0 + 300, 100, 1))
    clock.advance(400)
    assert open_at(state, clock).list_reservations() == []


def test_the_state_file_is_readable_and_logs_changes(
    tmp_path: Path, clock: FakeClock, trace: str
) -> None:
    state = tmp_path / "replay.json"
    backend = open_at(state, clock, trace)
    clock.advance(5)
    backend.create_reservation(ReservationSpec("sa-1", T0 + 300, 100, 1, users=("alice",)))
    backend.delete_reservation("sa-1")
    backend.delete_reservation("sa-1")  # nothing to delete: nothing logged
    doc = json.loads(state.read_text())
    assert doc["anchor"]["trace"] == str(Path(trace).resolve())
    assert doc["anchor"]["wall_origin"] == T0
    assert [(c["op"], c["at"]) for c in doc["changes"]] == [("create", T0 + 5), ("delete", T0 + 5)]
    assert doc["changes"][0]["users"] == ["alice"]


def test_options_must_match_the_saved_cluster(tmp_path: Path, clock: FakeClock, trace: str) -> None:
    state = tmp_path / "replay.json"
    SwfReplayBackend.open(str(state), trace, speed=10, offset_s=0, clock=clock)
    assert open_at(state, clock).speed == 10
    with pytest.raises(ValueError, match=r"another simulated cluster.*speed 10.*speed 2"):
        SwfReplayBackend.open(str(state), speed=2, clock=clock)
    with pytest.raises(ValueError, match="remove the file"):
        SwfReplayBackend(trace, offset_s=5, clock=clock, state_file=str(state))


def test_a_damaged_state_file_is_reported(tmp_path: Path, clock: FakeClock) -> None:
    state = tmp_path / "replay.json"
    state.write_text("{not json")
    with pytest.raises(ValueError, match="not a replay state file"):
        SwfReplayBackend.open(str(state), clock=clock)


def test_without_a_state_file_nothing_is_written(
    tmp_path: Path, clock: FakeClock, trace: str
) -> None:
    backend = SwfReplayBackend(trace, offset_s=0, clock=clock)
    backend.create_reservation(ReservationSpec("sa-1", T0 + 300, 100, 1))
    assert [r.name for r in backend.list_reservations()] == ["sa-1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.swf"]


def test_a_state_file_that_cannot_be_written_stops_the_process(
    tmp_path: Path, clock: FakeClock, trace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "replay.json"
    backend = open_at(state, clock, trace)
    before = state.read_text()

    def disk_full(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("siteagent.backends.replay.os.replace", disk_full)
    with pytest.raises(BackendUnavailable, match=r"No space left.*restart the process"):
        backend.create_reservation(ReservationSpec("sa-1", T0 + 300, 100, 1))
    with pytest.raises(BackendUnavailable):
        backend.snapshot()  # never again a view the other processes do not share
    monkeypatch.undo()
    assert state.read_text() == before
    assert open_at(state, clock).list_reservations() == []
