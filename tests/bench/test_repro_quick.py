"""Every reproduction command runs with --quick, as a user runs it, and its report holds a row
for every headline result of its paper. The paper's values are not asserted here (the reports
judge them); a command joins this test by being registered (bench/repro/registry.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import ROOT
from bench.repro.paper_values import paper_values, seed_ids
from bench.repro.registry import available

COMMANDS = sorted(available().items())


@pytest.mark.parametrize(
    ("name", "command"),
    COMMANDS or [pytest.param("none", None, marks=pytest.mark.skip("no repro command yet"))],
)
def test_quick_run_reports_every_result_of_its_paper(
    name: str, command: object, tmp_path: Path
) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench", name, "--quick", "--jobs", "2", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads((tmp_path / f"{name}.json").read_text())
    rows = report["rows"]
    seed = available()[name].seed
    assert {row["id"] for row in rows} == set(seed_ids(seed))
    assert report["problems"] == []
    values = paper_values()
    for row in rows:
        if row["point"] is not None:
            assert row["point"] in values[row["id"]].values
        assert row["verdict"] in ("match", "trend", "differs", "n/a", "not run")
        if row["verdict"] in ("differs", "n/a", "not run"):
            assert row["why"].strip(), row
    assert report["options"]["quick"] is True
    for figure in report["figures"]:
        assert (tmp_path / figure).exists(), figure
