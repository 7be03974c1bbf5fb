"""The reproduction tests' shared check: what every command's --quick run must hold,
whichever test runs it (the ``quick_run`` fixture)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

import pytest

from bench.common import ROOT
from bench.repro.paper_values import paper_values, seed_ids
from bench.repro.registry import available


def check_quick_run(name: str, out: Path, extra: Sequence[str] = ()) -> None:
    """Run ``python -m bench NAME --quick`` as a user does; its report holds a row for every
    headline result of its paper, each with a verdict (and why, where it is not a match), and
    its figures exist. The paper's values are not asserted here (the reports judge them)."""
    run = subprocess.run(
        [sys.executable, "-m", "bench", name, "--quick", *extra, "--jobs", "2", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads((out / f"{name}.json").read_text())
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
def quick_run() -> Callable[..., None]:
    """:func:`check_quick_run`, for a test to call with its command and output folder."""
    return check_quick_run
