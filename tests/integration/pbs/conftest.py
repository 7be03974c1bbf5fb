"""Fixtures for the tests against the OpenPBS stand-in (testbed/standins/pbs).

``sdsc`` is one stand-in server for the module, replaying the bundled SDSC-SP2 slice on 8
vnodes of 16 CPUs, two days into the trace (8 jobs running, a few queued); its reservations
are deleted after every test. ``start_standin`` starts further servers for tests that need
another trace or setting; every server is stopped by its PID at the end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, List, Sequence

import pytest

from testbed.standins.pbs.harness import StandinServer, StartStandin


def write_trace(path: Path, rows: Sequence[Sequence[int]], max_procs: int) -> Path:
    """An SWF file of ``(job, submit, run, procs, req_time)`` rows, other fields unknown."""
    lines = ["; Version: 2.2", f"; MaxProcs: {max_procs}"]
    for job, submit, run, procs, req_time in rows:
        fields = [job, submit, -1, run, procs, -1, -1, procs, req_time, -1, 1, job, 1]
        lines.append(" ".join(str(f) for f in fields + [-1] * 5))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def sdsc_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandinServer]:
    server = StandinServer(tmp_path_factory.mktemp("pbs-sdsc"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def sdsc(sdsc_server: StandinServer) -> Iterator[StandinServer]:
    """The module's SDSC server, with no reservation left behind by the test."""
    yield sdsc_server
    ids = list(sdsc_server.siminfo()["states"])
    if ids:
        sdsc_server.run(["pbs_rdel", *ids])


@pytest.fixture
def start_standin(tmp_path: Path) -> Iterator[StartStandin]:
    started: List[StandinServer] = []

    def start(**kw: Any) -> StandinServer:
        server = StandinServer(tmp_path / f"pbs-{len(started)}", **kw)
        started.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def tiny_trace(tmp_path: Path) -> Path:
    """Two vnodes of 16 CPUs; started 100 s in: job 1 (24 CPUs, 2 h) runs, job 2 (all 32
    CPUs) waits for it, job 3 (8 CPUs, 10 min) arrives 6 s later and fits the 8 free CPUs."""
    rows = [(1, 0, 7200, 24, 7200), (2, 10, 3600, 32, 3600), (3, 106, 600, 8, 600)]
    return write_trace(tmp_path / "tiny.swf", rows, 32)


@pytest.fixture
def done_trace(tmp_path: Path) -> Path:
    """One job, finished long before the server starts: an empty queue, idle vnodes."""
    return write_trace(tmp_path / "done.swf", [(1, 0, 10, 4, 60)], 32)
