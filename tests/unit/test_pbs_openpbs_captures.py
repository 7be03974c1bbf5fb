"""The PBS backend's parsers on output captured from a real OpenPBS 23.06.06.

tests/data/pbs/*-openpbs.* are what the test cluster (testbed/pbs/cluster.py) printed with
TZ=UTC, see tests/data/pbs/README.md for the scene: n1 full with job 0, n2 with job 1's first
chunk and an array's four running subjobs, n3 with job 1's second chunk and job 7 in the
agent's running reservation ``sa-capture0001`` (R5), n4 idle; job 2 (all 64 CPUs) the top job
with PBS's estimate, job 3 held, and a foreign reservation ``course`` (R6) in two days. The
expectations were read off the files by hand, not with these parsers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

from siteagent.backends.pbs.config import PbsConfig
from siteagent.backends.pbs.jobs import parse_jobs
from siteagent.backends.pbs.nodes import parse_nodes
from siteagent.backends.pbs.reservations import parse_reservations
from siteagent.backends.pbs.snapshot import build_snapshot
from siteagent.backends.pbs.values import parse_pbs_time
from siteagent.core.values import Placement

DATA = Path(__file__).resolve().parent.parent / "data" / "pbs"


def load(name: str) -> Dict[str, Any]:
    doc: Dict[str, Any] = json.loads((DATA / name).read_text())
    return doc


def utc(text: str) -> int:
    stamp = parse_pbs_time(text)
    assert stamp is not None
    return stamp


QSTAT = load("qstat-t-openpbs.json")
NOW = int(QSTAT["timestamp"])
SUBJOBS = {f"4[{i}].pbshead" for i in range(4)}


def test_jobs() -> None:
    jobs = parse_jobs(QSTAT, NOW)
    running = {j.id: j for j in jobs.running}
    assert set(running) == {"0.pbshead", "1.pbshead", "7.pbshead", *SUBJOBS}
    assert [j.id for j in jobs.pending] == ["2.pbshead", "3.pbshead"]
    assert jobs.arrays_expanded == []  # -t listed the subjobs: the parent 4[] is dropped
    split = running["1.pbshead"]
    assert (split.cores, split.nodes, split.limit) == (16, 2, 3600)
    assert jobs.nodes_of["1.pbshead"] == ["n2", "n3"]
    assert running["7.pbshead"].reservation == "R5"
    top, held = jobs.pending
    assert top.cores == 64 and top.eligible
    assert top.expected_start == utc("Sat Nov 28 16:46:02 2026")
    assert not held.eligible and held.expected_start is None


def test_nodes() -> None:
    nodes = {n.node.name: n.node for n in parse_nodes(load("pbsnodes-openpbs.json"))}
    assert {name: n.alloc_cores for name, n in nodes.items()} == {
        "n1": 16,
        "n2": 16,
        "n3": 12,
        "n4": 0,
    }
    assert all(n.usable and n.cores == 16 for n in nodes.values())
    assert nodes["n1"].state == "job-busy" and nodes["n3"].state == "free"


def test_reservations() -> None:
    text = (DATA / "rstat-f-openpbs.txt").read_text()
    resvs = {r.id: r for r in parse_reservations(text)}
    ours, course = resvs["R5.pbshead"], resvs["R6.pbshead"]
    assert ours.record.name == "sa-capture0001" and ours.state == "RUNNING"
    assert ours.record.cores == 4 and ours.record.users == ("root",)  # root,root@pbshead
    assert ours.record.end - ours.record.start == 1800
    assert course.record.name == "R6.pbshead" and course.state == "CONFIRMED"
    assert course.record.flags == ("scatter", "excl") and course.record.accounts == ("root",)
    assert (course.record.cores, course.record.nodes) == (32, 2)


def test_snapshot() -> None:
    snap = build_snapshot(
        NOW,
        parse_nodes(load("pbsnodes-openpbs.json")),
        parse_jobs(QSTAT, NOW),
        parse_reservations((DATA / "rstat-f-openpbs.txt").read_text()),
        PbsConfig(queue="workq"),
        "pbshead",
    )
    assert snap.capacity == 64
    assert sum(j.cores for j in snap.running) == 16 + 16 + 8 + 2
    inside = next(j for j in snap.running if j.id == "7.pbshead")
    assert inside.reservation == "sa-capture0001"  # named as the snapshot names it
    assert {r.name for r in snap.reservations} == {"sa-capture0001", "R6.pbshead"}
    # where things are, for placing new reservations as pbs_sched does (docs/pbs.md §11.5)
    assert snap.placement is Placement.PBS
    by_id = {j.id: j.allocation for j in snap.running}
    assert by_id["0.pbshead"] == (("n1", 16),)
    assert by_id["1.pbshead"] == (("n2", 8), ("n3", 8))
    assert by_id["4[0].pbshead"] == (("n2", 2),)
    held = {r.name: r.allocation for r in snap.reservations}
    assert held["sa-capture0001"] == (("n3", 4),)  # four one-CPU chunks, all on n3
    assert held["R6.pbshead"] == (("n1", 16), ("n2", 16))
