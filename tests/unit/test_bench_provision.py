"""The provisioning benchmark's end-to-end helpers that could silently measure the wrong thing:
the workflow the client is given (it must be the one the planners are timed on in memory),
the agents' raised rate limits (a section the agent refuses would fail only at start-up), and
what a run is read as."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import pytest

from bench.provision import RAISED_LIMITS, run_figures
from siteagent.client.tasks import edge_bytes, task_of
from siteagent.client.workflow import load_workflow
from siteagent.config.loading import parse
from siteagent.config.schema import RateLimit
from testbed.inprocess.provisioning import layered_workflow, write_workflow


def test_the_workflow_file_reads_back_as_the_thesis_workflow(tmp_path: Path) -> None:
    graph = layered_workflow(1)
    read = load_workflow(write_workflow(graph, tmp_path / "wf.yaml"))
    assert sorted(read.nodes) == sorted(graph.nodes) and len(read) == 100
    assert sorted(read.edges) == sorted(graph.edges)
    for node in graph:
        assert task_of(read, node) == task_of(graph, node)
    for parent, child in graph.edges:
        assert edge_bytes(read, parent, child) == edge_bytes(graph, parent, child) > 0


def test_the_raised_rate_limits_are_a_section_the_agent_takes() -> None:
    limits = parse({"api": {"rate_limits": RAISED_LIMITS}}).api.rate_limits
    assert limits.reservations == RateLimit(per_second=100, burst=500)
    assert limits.quotes == RateLimit(per_second=200, burst=1000)


def entry(state: str) -> Dict[str, Any]:
    return {"state": state, "site": "hpc1", "part": 0}


def test_a_run_counts_its_accepts_and_only_a_confirmed_plan_counts() -> None:
    result = {
        "state": "done",
        "message": "2 part(s) confirmed",
        "cost": "12.50",
        "makespan": 5400,
        "entries": [entry("confirmed"), entry("refused"), entry("confirmed")],
    }
    assert run_figures(result, 8.5, 1.25) == {
        "seconds": 8.5,
        "client_cpu_seconds": 1.25,
        "accepts": 3,
        "refused_accepts": 1,
        "confirmed": 2,
        "cost_su": 12.5,
        "makespan_h": 1.5,
    }
    with pytest.raises(RuntimeError, match="provision ended failed: no window"):
        run_figures({**result, "state": "failed", "message": "no window"}, 1, 1)
