"""`bench slurm`'s report over runs made in parts (``--only``): which figure came from which
run, and the accept rows of each backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

from bench import slurm


def accept_row(queue: str, median_ms: float, backend: str = "slurm") -> Dict[str, Any]:
    return {
        "queue": queue,
        "backend": backend,
        "accept": {"median_ms": median_ms, "p99_ms": 2 * median_ms},
        "bare_create_delete": {"median_ms": 20.0, "p99_ms": 40.0},
        "ratio_median": median_ms / 20.0,
    }


def test_the_summary_reads_each_backends_accepts_and_says_where_one_is_missing() -> None:
    rows: List[Dict[str, Any]] = [
        accept_row("idle", 60.0),
        accept_row("idle", 9.0, "pyslurm"),
        accept_row("full", 70.0),
        accept_row("full", 12.0, "pyslurm"),
    ]
    release = {"accept": rows}
    assert slurm._accept(release, "full") == 70.0
    assert slurm._accept(release, "full", "pyslurm") == 12.0
    old = {"accept": [{k: v for k, v in rows[2].items() if k != "backend"}]}
    assert slurm._accept(old, "full") == 70.0  # rows written before backends were recorded
    assert slurm._accept(old, "full", "pyslurm") == "-"


def test_a_part_measured_again_is_dated_beside_the_runs_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A result written before parts were recorded (a full run, then the agreement again)
    reads as those two parts; ``--only accepts`` adds a third and keeps the others' figures."""
    last = {
        "machine": {"date": "2026-11-29 04:48:23 UTC", "load_average_1m_at_start": 35.07},
        "carried_over": "2026-11-28 15:20:58 UTC",
        "measured": ["22.05", "24.11"],
        "versions": {"24.11": {"agreement": ["a"]}, "22.05": {"agreement": ["b"]}},
    }
    (tmp_path / "slurm.json").write_text(json.dumps(last))
    monkeypatch.setattr(slurm, "RESULTS", tmp_path)
    data: Dict[str, Any] = {}
    versions = slurm.carried_over(data)
    assert versions == last["versions"]
    assert [(p["part"], p["date"], p["load"]) for p in data["parts"]] == [
        ("everything", "2026-11-28 15:20:58 UTC", None),
        ("agreement", "2026-11-29 04:48:23 UTC", 35.07),
    ]
    assert data["parts"][0]["releases"] == ["22.05", "24.11"]
    parts = [*data["parts"], {"part": "accepts", "releases": ["22.05"], "date": "D", "load": 1.5}]
    said = slurm._parts(parts)
    assert "everything on 2026-11-28 15:20:58 UTC (22.05, 24.11)" in said
    assert "agreement on 2026-11-29 04:48:23 UTC (22.05, 24.11; load 35.07" in said
    assert said.index("agreement") < said.index("accepts on D (22.05; load 1.5")
    assert slurm._parts(parts[:1]) == ""  # one run: nothing to date apart
    assert slurm.PARTS["accepts"] == ("accept", "pyslurm_accept")
