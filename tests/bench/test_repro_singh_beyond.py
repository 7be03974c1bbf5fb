"""``python -m bench repro-singh beyond --quick`` as a user runs it: the stronger baselines on
the replay, and one workflow provisioned on the real Slurm test cluster and run in its
reservations (minutes of waiting: a module of its own, so that its worker group waits alone).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict

import pytest

from bench.repro.singh import realized
from testbed.processes.programs import unavailable

pytestmark = pytest.mark.slurm


def test_a_quick_beyond_run_provisions_a_workflow_that_slurm_runs_in_its_windows(
    tmp_path: Path, quick_report: Callable[..., Dict[str, Any]]
) -> None:
    why = realized.unavailable()
    if why:
        unavailable(why)
    report = quick_report(["repro-singh", "beyond"], tmp_path, "repro-singh-beyond")
    assert report["problems"] == []
    slurm = report["data"]["slurm"]
    figures = slurm["summary"]
    assert figures["tasks"] == len(realized.QUICK.tasks)
    windows, runs = slurm["provisioned"]["windows"], slurm["provisioned"]["runs"]
    for task, (start, end) in windows.items():
        began, ended = runs[task]
        # Slurm held each job until its reservation began, and started it within a few
        # scheduling passes (bf_interval=5): the reservation is where the plan said
        assert start <= began <= start + 30, (task, start, began)
        assert ended <= end, (task, end, ended)
    # the plan keeps the workflow's order: a child's window opens after its parents' close
    for task, _, parents in realized.QUICK.tasks:
        for parent in parents:
            assert windows[task][0] >= windows[parent][1]
    assert figures["realized_makespan_s"] <= figures["planned_makespan_s"]
    assert figures["best_effort_makespan_s"] > 0
    best = slurm["best_effort"]["runs"]
    for task, _, parents in realized.QUICK.tasks:
        for parent in parents:  # --dependency=afterok held each child until its parents ended
            assert best[task][0] >= best[parent][1]
    text = (tmp_path / "repro-singh-beyond.json").with_suffix(".md").read_text()
    assert "## On the real Slurm test cluster" in text and "realized / planned" in text
