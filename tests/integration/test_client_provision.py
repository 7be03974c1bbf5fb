"""``siteagent-client provision`` against real agents: three ``siteagent serve`` processes on
loopback (testbed/processes/market.py) booking at one bank, the client run as its own process.

Each test checks what the sites' own databases hold once the client is gone: every task's
reservation confirmed at the site the plan names for exactly the planned window, or, when the
plan cannot be completed, nothing of it left held anywhere, and the journal agreeing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import yaml

from bench.provision import RAISED_LIMITS
from siteagent.market.lifecycle import ReservationState
from testbed.processes.market import Market, flat_priced

S = ReservationState
LEVELS, WIDTH = 10, 10


def layered_workflow(path: Path, levels: int = LEVELS, width: int = WIDTH) -> Path:
    """``levels`` x ``width`` tasks of 4 cores for 10 minutes, each reading 1 GB from two
    tasks of the level above: 100 tasks in 10 levels by default."""
    tasks: List[Dict[str, Any]] = []
    for level in range(levels):
        for i in range(width):
            task: Dict[str, Any] = {
                "id": f"t{level}-{i}",
                "cores": 4,
                "runtime": 600,
                "outputs": {f"out{level}-{i}": 10**9},
            }
            if level:
                parents = sorted({f"t{level - 1}-{i}", f"t{level - 1}-{(i + 1) % width}"})
                task["parents"] = parents
                task["inputs"] = {f"out{p[1:]}": 10**9 for p in parents}
            tasks.append(task)
    path.write_text(yaml.safe_dump({"tasks": tasks}), encoding="utf-8")
    return path


@pytest.fixture
def buyer(tmp_path: Path) -> Iterator[Market]:
    """Three sites at a flat price and the bank, for this test alone: a plan of 100 tasks
    leaves more reservations than the sites' rate limits let a test cancel quickly. The
    limits are raised as for a provisioning buyer (bench/provision.py): these tests are not
    about them, and the defaults (2 reservation requests a second) cost a minute a plan."""
    made = Market(tmp_path / "market", flat_priced(), credit="100000.00", rate_limits=RAISED_LIMITS)
    made.start()
    yield made
    made.stop()


def assert_settled(market: Market, since: Dict[str, List[str]]) -> None:
    assert market.tentative_anywhere() == []
    assert market.disagreements(since) == []


def assert_confirmed_as_planned(
    market: Market, since: Dict[str, List[str]], rows: List[Dict[str, Any]]
) -> None:
    """Each task's reservation confirmed at its site for exactly its window, and nothing
    else of alice's made anywhere."""
    made = market.alices(since)
    by_id = {(site, r.id): r for site, records in made.items() for r in records}
    assert len(by_id) == len(rows)
    for row in rows:
        record = by_id[(row["site"], row["reservation"])]
        assert record.state in (S.CONFIRMED, S.ACTIVE)  # the first windows may have begun
        assert (record.start, record.end) == (row["start"], row["finish"])


def test_a_100_task_workflow_is_confirmed_where_and_when_planned(
    buyer: Market, tmp_path: Path
) -> None:
    before = buyer.ids()
    workflow = layered_workflow(tmp_path / "wf.yaml")
    done = buyer.client(["provision", str(workflow), "--alpha", "0.5", "--json"])
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["state"] == "done"
    rows = result["tasks"]
    assert sorted(row["task"] for row in rows) == sorted(
        f"t{level}-{i}" for level in range(LEVELS) for i in range(WIDTH)
    )
    assert_confirmed_as_planned(buyer, before, rows)
    # every child starts once its parents' outputs are there: 1 GB at 10 Gbps takes 1 s
    # between sites, nothing on the same site
    when = {row["task"]: row for row in rows}
    for level in range(1, LEVELS):
        for i in range(WIDTH):
            child = when[f"t{level}-{i}"]
            for name in (f"t{level - 1}-{i}", f"t{level - 1}-{(i + 1) % WIDTH}"):
                parent = when[name]
                transfer = 0 if parent["site"] == child["site"] else 1
                assert child["start"] >= parent["finish"] + transfer
    assert sum(float(row["cost"]) for row in rows) == pytest.approx(float(result["cost"]))
    assert result["makespan"] > 0
    assert_settled(buyer, before)


def test_a_task_every_site_refuses_mid_plan_releases_everything_held(
    buyer: Market, tmp_path: Path
) -> None:
    """The last level's task asks for more cores than any site has: every site refuses its
    quote once the tasks before it are held, and every one of them is released."""
    before = buyer.ids()
    workflow = layered_workflow(tmp_path / "wf.yaml", levels=3, width=3)
    document = yaml.safe_load(workflow.read_text(encoding="utf-8"))
    document["tasks"][-1]["cores"] = 100000
    workflow.write_text(yaml.safe_dump(document), encoding="utf-8")
    done = buyer.client(["provision", str(workflow), "--json"])
    assert done.returncode == 3, done.stderr
    result = json.loads(done.stdout)
    assert result["state"] == "failed"
    assert "t2-2" in result["message"] and "released" in result["message"]
    # an accept a site refused (its capacity went) holds nothing; the rest were held
    held = [e["state"] for e in result["entries"] if e["state"] != "refused"]
    assert 6 <= len(held) <= 8 and set(held) == {"cancelled"}  # levels 0 and 1 at least
    made = [r for records in buyer.alices(before).values() for r in records]
    assert sorted(r.state.value for r in made) == ["CANCELLED"] * len(held)
    assert_settled(buyer, before)


def test_a_dry_run_plans_and_holds_nothing(buyer: Market, tmp_path: Path) -> None:
    before = buyer.ids()
    workflow = layered_workflow(tmp_path / "wf.yaml", levels=2, width=3)
    done = buyer.client(["provision", str(workflow), "--dry-run", "--json"])
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["state"] == "planned" and len(result["tasks"]) == 6
    assert all(row["reservation"] is None for row in result["tasks"])
    assert result["entries"] == []
    assert all(not records for records in buyer.alices(before).values())


def test_the_genetic_planners_plan_is_reserved_the_same_way(buyer: Market, tmp_path: Path) -> None:
    """20 tasks in 5 levels (the search judges 1000 plans of every task: 100 would take
    minutes on a small machine)."""
    before = buyer.ids()
    workflow = layered_workflow(tmp_path / "wf.yaml", levels=5, width=4)
    done = buyer.client(
        ["provision", str(workflow), "--planner", "genetic", "--seed", "7", "--json"]
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["state"] == "done" and len(result["tasks"]) == 20
    assert_confirmed_as_planned(buyer, before, result["tasks"])
    assert_settled(buyer, before)
