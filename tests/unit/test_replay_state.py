"""The replay backend's state file: one simulated cluster shared by processes and restarts.

The cluster of the main test has 4 cores: job 1 takes all of them over [0, 100), job 2 (2
cores) arrives at 10 and would start at 100, but a reservation of 3 cores over [100, 200),
made at 20, pushes it to 200. A process started later must see job 2 still waiting at 150:
it replays the reservation at the instant it was made. (Re-injecting it when the new process
starts would find job 2 already running in the rebuilt past, and the reservation no longer
fitting.)
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import stat
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import pytest

from siteagent.backends.base import BackendError, BackendUnavailable, ReservationRefused
from siteagent.backends.replay import SwfReplayBackend
from siteagent.core.values import ClusterSnapshot, ReservationSpec
from testbed.inprocess.fakes import FakeClock
from testbed.inprocess.traces import write_trace

T0 = 1_800_000_000
WRITE = os.write


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
    header, *changes = records(state)
    assert header["format"] == 2
    assert header["anchor"]["trace"] == str(Path(trace).resolve())
    assert header["anchor"]["wall_origin"] == T0
    assert [(c["op"], c["at"]) for c in changes] == [("create", T0 + 5), ("delete", T0 + 5)]
    assert changes[0]["users"] == ["alice"]


def test_a_change_appends_one_line_and_leaves_the_rest_alone(
    tmp_path: Path, clock: FakeClock, trace: str
) -> None:
    state = tmp_path / "replay.json"
    backend = open_at(state, clock, trace)
    backend.create_reservation(ReservationSpec("sa-1", T0 + 300, 100, 1))
    before, inode = state.read_bytes(), state.stat().st_ino
    backend.create_reservation(ReservationSpec("sa-2", T0 + 500, 100, 1))
    after = state.read_bytes()
    assert state.stat().st_ino == inode  # appended to, not replaced
    assert after.startswith(before)
    added = after[len(before) :]
    assert added.count(b"\n") == 1 and added.endswith(b"\n")
    assert json.loads(added)["name"] == "sa-2"


def test_a_line_a_crash_cut_short_is_ignored_then_cut_off(
    tmp_path: Path, clock: FakeClock, trace: str
) -> None:
    """The torn line is valid JSON, only its newline is missing: the appender died before
    it could tell anyone the reservation was made, so nobody may see it."""
    state = tmp_path / "replay.json"
    before = open_at(state, clock, trace)  # has read the file before the crash
    before.create_reservation(ReservationSpec("sa-1", T0 + 300, 100, 1))
    torn = json.dumps({**records(state)[1], "name": "sa-torn", "start": T0 + 500})
    with open(state, "a") as handle:
        handle.write(torn)
    after = open_at(state, clock)  # reads the file after the crash
    assert names(before) == names(after) == ["sa-1"]
    after.create_reservation(ReservationSpec("sa-2", T0 + 700, 100, 1))
    assert [c["name"] for c in records(state)[1:]] == ["sa-1", "sa-2"]
    assert names(before) == names(open_at(state, clock)) == ["sa-1", "sa-2"]


def test_a_reader_parses_only_the_lines_appended_since_it_last_read(
    tmp_path: Path, clock: FakeClock, trace: str
) -> None:
    """Line 2 is damaged in place after the reader read it: re-parsing the whole file would
    fail, parsing only what was appended since does not."""
    state = tmp_path / "replay.json"
    writer, reader = open_at(state, clock, trace), open_at(state, clock)
    writer.create_reservation(ReservationSpec("sa-1", T0 + 300, 100, 1))
    assert names(reader) == ["sa-1"]
    damage_line(state, 2)
    writer.create_reservation(ReservationSpec("sa-2", T0 + 500, 100, 1))
    assert names(reader) == ["sa-1", "sa-2"]
    with pytest.raises(ValueError, match="line 2 is not a reservation change"):
        open_at(state, clock)


@pytest.mark.parametrize("how", ["replaced", "rewritten in place"])
def test_a_file_taken_over_by_another_cluster_stops_the_process(
    tmp_path: Path, clock: FakeClock, trace: str, how: str
) -> None:
    state, other = tmp_path / "replay.json", tmp_path / "other.json"
    backend = open_at(state, clock, trace)
    backend.create_reservation(ReservationSpec("sa-1", T0 + 300, 100, 1))
    open_at(other, clock, trace)  # the same options, but another cluster
    if how == "replaced":
        os.replace(other, state)
    else:
        state.write_bytes(other.read_bytes())  # shorter: the same inode, cut short
    with pytest.raises(BackendError, match="replaced by another simulated cluster"):
        backend.list_reservations()


def test_a_damaged_line_is_reported(tmp_path: Path, clock: FakeClock, trace: str) -> None:
    state = tmp_path / "replay.json"
    backend = open_at(state, clock, trace)
    with open(state, "a") as handle:
        handle.write("{not json\n")
    for read in (backend.list_reservations, lambda: open_at(state, clock)):
        with pytest.raises(
            ValueError, match=rf"{re.escape(str(state))}: line 2 is not.*damaged; remove it"
        ):
            read()


def test_a_header_of_an_unknown_format_is_reported(
    tmp_path: Path, clock: FakeClock, trace: str
) -> None:
    state = tmp_path / "replay.json"
    open_at(state, clock, trace)
    state.write_text(json.dumps({**records(state)[0], "format": 3}) + "\n")
    with pytest.raises(
        ValueError, match=rf"{re.escape(str(state))}: not a replay state file of format 1 or 2"
    ):
        open_at(state, clock)


def test_a_state_file_of_format_1_is_converted_once(
    tmp_path: Path, clock: FakeClock, trace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The main test's cluster, as an older siteagent left it: one indented document."""
    state = tmp_path / "replay.json"
    anchor = {
        "trace": str(Path(trace).resolve()),
        "cores": None,
        "policy": "easy",
        "speed": 1.0,
        "offset_s": 0,
        "wall_origin": T0,
    }
    change = {
        "at": T0 + 20,
        "op": "create",
        "name": "sa-1",
        "start": T0 + 100,
        "end": T0 + 200,
        "size": 3,
        "users": ["alice"],
        "accounts": [],
        "partition": "",
    }
    doc = {"format": 1, "cluster": "c0ffee", "anchor": anchor, "changes": [change]}
    state.write_text(json.dumps(doc, indent=1))
    os.chmod(state, 0o644)
    clock.advance(150)
    with caplog.at_level(logging.INFO, logger="siteagent.backends.replay"):
        backend = open_at(state, clock)
    assert [m for m in caplog.messages if "converted" in m] == [
        f"{state}: converted the replay state file from format 1 (one document, rewritten on "
        "every change) to format 2 (one line appended per change)"
    ]
    assert names(backend) == ["sa-1"]
    assert jobs(backend.snapshot()) == ([], ["2"])  # the reservation still pushes job 2 back
    assert records(state) == [{"format": 2, "cluster": "c0ffee", "anchor": anchor}, change]
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="siteagent.backends.replay"):
        assert names(open_at(state, clock)) == ["sa-1"]
    assert not [m for m in caplog.messages if "converted" in m]


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


def fail_to_write(fd: int, data: bytes) -> int:
    raise OSError(errno.ENOSPC, "No space left on device")


def write_half(fd: int, data: bytes) -> int:
    return WRITE(fd, data[: len(data) // 2])


def fail_to_sync(fd: int) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(
    "call, failure",
    [("write", fail_to_write), ("write", write_half), ("fsync", fail_to_sync)],
    ids=["write fails", "short write", "fsync fails"],
)
def test_a_state_file_that_cannot_be_written_stops_the_process(
    tmp_path: Path,
    clock: FakeClock,
    trace: str,
    monkeypatch: pytest.MonkeyPatch,
    call: str,
    failure: Callable[..., object],
) -> None:
    state = tmp_path / "replay.json"
    backend = open_at(state, clock, trace)
    before = state.read_text()
    monkeypatch.setattr(f"siteagent.backends.replay.os.{call}", failure)
    with pytest.raises(BackendUnavailable, match=r"(No space left|wrote \d+ of).*restart the"):
        backend.create_reservation(ReservationSpec("sa-1", T0 + 300, 100, 1))
    with pytest.raises(BackendUnavailable):
        backend.snapshot()  # never again a view the other processes do not share
    monkeypatch.undo()
    assert state.read_text() == before
    assert open_at(state, clock).list_reservations() == []


def records(state: Path) -> List[Dict[str, Any]]:
    """The state file's lines: the header, then the changes."""
    return [json.loads(line) for line in state.read_text().splitlines()]


def names(backend: SwfReplayBackend) -> List[str]:
    return [r.name for r in backend.list_reservations()]


def damage_line(state: Path, number: int) -> None:
    """Overwrite line ``number`` (from 1) in place with as many bytes that are not JSON."""
    lines = state.read_bytes().split(b"\n")
    lines[number - 1] = b"x" * len(lines[number - 1])
    with open(state, "r+b") as handle:
        handle.write(b"\n".join(lines))
