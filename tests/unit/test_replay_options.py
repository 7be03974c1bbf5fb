"""The replay backend's options as an administrator sets them (backend.swf.*): the cluster's
size, where in the trace it starts, and the trace lines it cannot replay, reported at start.

The trace: 4 cores by its header; job 1 (4 cores) runs over [0, 100), job 2 (2 cores) over
[10, 60), and job 3 arrives a day later.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from siteagent.backends.replay import REPLAY_STATE_FILE, SwfReplayBackend
from siteagent.config import loading
from siteagent.market.site import open_backend
from testbed.inprocess.fakes import FakeClock
from testbed.inprocess.traces import swf_row, swf_text, write_trace

T0 = 1_800_000_000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(float(T0))


@pytest.fixture
def trace(tmp_path: Path) -> str:
    return write_trace(tmp_path / "t.swf", [(0, 100, 4, 100), (10, 50, 2, 50), (86400, 5, 1, 5)], 4)


def test_the_cluster_is_as_large_as_the_header_says_unless_told(
    trace: str, clock: FakeClock
) -> None:
    assert SwfReplayBackend(trace, offset_s=20, clock=clock).snapshot().capacity == 4
    wider = SwfReplayBackend(trace, offset_s=20, cores=6, clock=clock).snapshot()
    assert wider.capacity == 6
    assert sorted(job.cores for job in wider.running) == [2, 4]  # jobs 1 and 2


def test_a_smaller_cluster_skips_the_jobs_wider_than_it_and_says_so(
    trace: str, clock: FakeClock, workload_log: pytest.LogCaptureFixture
) -> None:
    smaller = SwfReplayBackend(trace, offset_s=20, cores=2, clock=clock)
    snapshot = smaller.snapshot()
    assert snapshot.capacity == 2
    assert [job.cores for job in snapshot.running] == [2]  # job 2 only
    [warning] = workload_log.records
    assert warning.getMessage() == (
        f"{trace}: 1 line(s) skipped as they cannot be simulated (1 more processors than the "
        "cluster's 2); the first is line 4: job 1: more processors than the cluster's 2"
    )


def test_invalid_lines_are_reported_once_when_the_replay_starts(
    tmp_path: Path, clock: FakeClock, workload_log: pytest.LogCaptureFixture
) -> None:
    """Not one warning per line, and not only once the first pass has run out (days later)."""
    rows = [swf_row(job, job, 100, 1, req_time=100) for job in range(1, 5)]
    lines = swf_text(rows, ["; MaxProcs: 4"]).splitlines()
    lines[2] = "1 2 3"  # line 3
    lines[4] = " ".join(map(str, swf_row(4, 4, -1, 1)))  # line 5: a negative run time
    path = tmp_path / "bad.swf"
    path.write_text("\n".join(lines) + "\n", encoding="latin-1")
    SwfReplayBackend(str(path), offset_s=0, clock=clock).snapshot()
    [warning] = workload_log.records
    message = warning.getMessage()
    assert message.startswith(f"{path}: 2 line(s) skipped as they cannot be simulated")
    assert message.endswith("the first is line 3: malformed line: expected 18 fields, found 3")


def test_a_saved_cluster_keeps_its_size_and_refuses_another(
    tmp_path: Path, trace: str, clock: FakeClock
) -> None:
    state = str(tmp_path / "state" / REPLAY_STATE_FILE)
    SwfReplayBackend.open(state, trace, offset_s=0, cores=6, clock=clock).close()
    assert SwfReplayBackend.open(state, clock=clock).cores == 6
    with pytest.raises(ValueError, match=r"holds another simulated cluster.*8 cores"):
        SwfReplayBackend.open(state, cores=8, clock=clock)


def test_naming_the_header_s_size_is_the_same_cluster_as_leaving_it_out(
    tmp_path: Path, trace: str, clock: FakeClock
) -> None:
    state = str(tmp_path / "state" / REPLAY_STATE_FILE)
    SwfReplayBackend.open(state, trace, offset_s=0, clock=clock).close()
    assert SwfReplayBackend.open(state, cores=4, clock=clock).cores == 4
    SwfReplayBackend.open(state, clock=clock).close()


def test_the_configuration_sets_trace_offset_and_cores(tmp_path: Path, trace: str) -> None:
    """The offset counts from the trace's first submit: 30 s in, jobs 1 and 2 both run."""
    config = tmp_path / "siteagent.yaml"
    swf = {"trace": trace, "offset": 30, "speed": 60, "cores": 6}
    settings = {"state_dir": str(tmp_path / "state"), "backend": {"type": "swf", "swf": swf}}
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    backend = open_backend(loading.load(config))
    try:
        snapshot = backend.snapshot()
        assert snapshot.capacity == 6
        assert sorted(job.cores for job in snapshot.running) == [2, 4]
        assert isinstance(backend, SwfReplayBackend) and backend.speed == 60
    finally:
        backend.close()


def test_sites_given_one_origin_share_one_clock(tmp_path: Path, trace: str) -> None:
    """Two sites started minutes apart, at different offsets, at 15 times the wall clock,
    show the same time once told the same origin (a federation of replayed sites that a
    buyer's absolute start times mean the same thing to), and a saved cluster keeps its own."""
    clock = FakeClock(float(T0))
    first = SwfReplayBackend(trace, speed=15, offset_s=20, clock=clock, origin=T0 - 60)
    clock.advance(300)
    second = SwfReplayBackend(trace, speed=15, offset_s=40, clock=clock, origin=T0 - 60)
    alone = SwfReplayBackend(trace, speed=15, offset_s=40, clock=clock)
    clock.advance(2)
    assert first.now() == second.now() == T0 - 60 + 15 * 362
    assert alone.now() == T0 + 300 + 15 * 2
    state = str(tmp_path / REPLAY_STATE_FILE)
    SwfReplayBackend.open(state, trace, speed=15, clock=clock, origin=T0 - 60).close()
    again = SwfReplayBackend.open(state, trace, speed=15, clock=clock, origin=T0)
    assert again.now() == first.now()
    for backend in (first, second, alone, again):
        backend.close()


def test_the_configuration_sets_the_origin(tmp_path: Path, trace: str) -> None:
    """An origin 100 s ago at speed 15: the cluster is already 1,500 s on."""
    origin = int(time.time()) - 100
    swf = {"trace": trace, "speed": 15, "origin": origin}
    settings = {"state_dir": str(tmp_path / "state"), "backend": {"type": "swf", "swf": swf}}
    backend = open_backend(loading.parse(settings))
    try:
        assert backend.now() >= origin + 15 * 100
    finally:
        backend.close()
