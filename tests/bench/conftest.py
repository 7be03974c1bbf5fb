"""The reproduction tests' shared pieces: a command's --quick run as a user starts it
(``quick_report``), and what every command's report must hold (``quick_run``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Sequence

import pytest

from bench.common import ROOT
from bench.repro.paper_values import paper_values, seed_ids
from bench.repro.registry import available


def run_quick(command: Sequence[str], out: Path, report: str) -> Dict[str, Any]:
    """Run ``python -m bench COMMAND --quick`` as a user does, its results in ``out``; the
    JSON report named ``report`` (without ``.json``) it wrote there."""
    run = subprocess.run(
        [sys.executable, "-m", "bench", *command, "--quick", "--jobs", "2", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    found: Dict[str, Any] = json.loads((out / f"{report}.json").read_text())
    return found


def check_quick_run(name: str, out: Path, extra: Sequence[str] = ()) -> None:
    """:func:`run_quick` of command ``name``: its report holds a row for every headline result
    of its paper, each with a verdict (and why, where it is not a match), and its figures
    exist. The paper's values are not asserted here (the reports judge them)."""
    report = run_quick([name, *extra], out, name)
    rows = report["rows"]
    assert {row["id"] for row in rows} == set(seed_ids(available()[name].seed))
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
        assert (out / figure).exists(), figure


@pytest.fixture
def quick_report() -> Callable[..., Dict[str, Any]]:
    """:func:`run_quick`, for a test that checks the report itself."""
    return run_quick


@pytest.fixture
def quick_run() -> Callable[..., None]:
    """:func:`check_quick_run`, for a test to call with its command and output folder."""
    return check_quick_run
