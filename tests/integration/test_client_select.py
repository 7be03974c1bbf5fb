"""``siteagent-client select`` and ``odds`` against real agents: three ``siteagent serve``
processes on loopback (testbed/processes/market.py) booking at one bank, the client run as its own
process.

The agents start with no queue-wait history worth bounding, so each test gives them one (the
waits of jobs they would have seen start); then it checks what the client chose against the
bounds the agents publish, and, after ``select --reserve``, what the sites' own databases hold
once the client is gone.
"""

from __future__ import annotations

import json
import time
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest
import yaml

from siteagent.core.waits import QueueWait
from siteagent.market.lifecycle import ReservationState
from testbed.processes.market import Market, flat_priced

S = ReservationState

#: Twenty tasks of 4 cores for 10 minutes: 80 cores, more than one 64-core site can run.
BAG = {"tasks": [{"id": "render", "cores": 4, "runtime": 600, "count": 20}]}


def waits_of(
    name: str, count: int, cores: int, walltime: int, wait: int, step: int = 0
) -> List[QueueWait]:
    """``count`` jobs ``name``-k that started in the last hour, the k-th after waiting
    ``wait + k * step`` seconds."""
    began = int(time.time()) - 3600
    return [
        QueueWait(f"{name}-{k}", cores, walltime, began + k - wait - k * step, began + k)
        for k in range(count)
    ]


def published_bound(market: Market, site: str, cores: int, quantile: float) -> Optional[int]:
    """The bound ``site`` publishes now on the wait of jobs of ``cores`` asking up to an hour."""
    status, table = market.buyer_at(site).request("GET", "/v1/history/waits")
    assert status == 200, table
    (bin_,) = [
        b
        for b in table["bins"]
        if b["cores"][0] <= cores <= b["cores"][1] and b["walltime_s"][1] == 3600
    ]
    (bound,) = [b["upper_bound_s"] for b in bin_["wait_bounds"] if b["quantile"] == quantile]
    found: Optional[int] = bound
    return found


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Market]:
    """Three 64-core sites at a flat 1.00 per core-hour; hpc2's 4-core jobs wait about a
    minute, hpc1's ten, hpc3 has seen too few to say."""
    made = Market(tmp_path_factory.mktemp("market"), flat_priced(), credit="100000.00")
    made.start()
    made.agents["hpc1"].record_waits(waits_of("slow", 60, 4, 600, 600))
    made.agents["hpc2"].record_waits(waits_of("quick", 60, 4, 600, 60))
    yield made
    made.stop()


def write_bag(path: Path, bag: Dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(bag), encoding="utf-8")
    return str(path)


def assert_settled(market: Market, since: Dict[str, List[str]]) -> None:
    assert market.tentative_anywhere() == []
    assert market.disagreements(since) == []


def test_select_reserves_every_task_at_the_site_selection_chose(
    market: Market, tmp_path: Path
) -> None:
    """hpc2 finishes a task soonest (its wait bound, 60 s, against hpc1's 600 s; hpc3 bounds
    nothing and ranks last): it takes the sixteen its 64 cores hold, hpc1 the other four.
    Each is then confirmed at that site for the window the client reports."""
    before = market.ids()
    done = market.client(["select", write_bag(tmp_path / "bag.yaml", BAG), "--reserve", "--json"])
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["state"] == "done" and result["unassigned"] == []
    rows = result["tasks"]
    assert [row["task"] for row in rows] == [f"render/{k}" for k in range(1, 21)]
    chosen = {row["task"]: row["site"] for row in rows}
    assert sorted(chosen.values()) == ["hpc1"] * 4 + ["hpc2"] * 16
    bounds = {row["site"]: row["wait_bound_s"] for row in rows}
    assert bounds == {"hpc1": published_bound(market, "hpc1", 4, 0.5), "hpc2": 60}
    made = market.alices(before)
    by_id = {(site, r.id): r for site, records in made.items() for r in records}
    assert len(by_id) == 20  # nothing else of alice's made anywhere
    for row in rows:
        record = by_id[(row["site"], row["reservation"])]
        assert record.state in (S.CONFIRMED, S.ACTIVE)  # the first windows may have begun
        assert (record.start, record.end) == (row["start"], row["finish"])
        assert record.end - record.start == 600 and record.size == 4
    totals = {s["site"]: (s["tasks"], s["cores_assigned"]) for s in result["sites"]}
    assert totals == {"hpc1": (4, 16), "hpc2": (16, 64), "hpc3": (0, 0)}
    assert_settled(market, before)


#: Five tasks of 2 cores: small enough to hold quickly anywhere.
SMALL_BAG = {"tasks": [{"id": "s", "cores": 2, "runtime": 600, "count": 5}]}


def test_ctrl_c_while_reserving_releases_every_task(market: Market, tmp_path: Path) -> None:
    """Ctrl-C once three tasks are held: the request in flight finishes, everything held is
    cancelled, and the client exits 130."""
    before = market.ids()
    bag = write_bag(tmp_path / "bag.yaml", SMALL_BAG)
    done = market.client(
        ["select", bag, "--reserve", "--json"], at="Journal.tentative:3:after", then="INT"
    )
    assert done.returncode == 130, done.stderr
    result = json.loads(done.stdout)
    assert result["state"] == "interrupted" and "released" in result["message"]
    held = [e["state"] for e in result["entries"] if e["state"] != "refused"]
    assert held == ["cancelled"] * 3
    made = [r for records in market.alices(before).values() for r in records]
    assert sorted(r.state.value for r in made) == ["CANCELLED"] * 3
    assert_settled(market, before)


def test_recover_finishes_a_select_the_client_crashed_in(market: Market, tmp_path: Path) -> None:
    """Single calls (``--no-batches``): the client dies once the first task is confirmed:
    ``recover`` cancels the four held, keeps the one bought, and closes the bag as
    interrupted, not done."""
    before = market.ids()
    bag = write_bag(tmp_path / "bag.yaml", SMALL_BAG)
    crashed = market.client(
        ["select", bag, "--reserve", "--no-batches"], at="Journal.confirmed:1:after", then="KILL"
    )
    assert crashed.returncode == -9, crashed.stderr
    recovered = market.client_json(["recover"])
    assert recovered["unsettled"] == [] and len(recovered["confirmed"]) == 1
    assert_settled(market, before)
    made = [r.state for records in market.alices(before).values() for r in records]
    assert sorted(state is S.CANCELLED for state in made) == [False] + [True] * 4
    assert {S.CONFIRMED, S.ACTIVE} >= set(made) - {S.CANCELLED}  # its window may have begun
    journal = market.journal()
    try:
        record = journal.auctions()[-1]
    finally:
        journal.close()
    assert record.request["select"] == bag and record.request["parts"] == 5
    assert record.state.value == "interrupted" and "part(s) 1 confirmed and kept" in record.message


def test_odds_shows_a_price_and_a_bound_from_real_agents(market: Market) -> None:
    """One core for 30 minutes two hours from now: every site offers a reservation at 0.50
    (0.5 h x 1.00); hpc1 has seen a hundred such jobs wait up to ten minutes and bounds the
    0.95-quantile, so it says when to submit; hpc3 has no bound."""
    market.agents["hpc1"].record_waits(waits_of("single", 100, 1, 1800, 0, step=6))
    bound = published_bound(market, "hpc1", 1, 0.95)
    start_by = int(time.time()) + 2 * 3600
    args = ["odds", "--cores", "1", "--walltime", "30m", "--start", str(start_by)]
    result = market.client_json(args)
    bound_after = published_bound(market, "hpc1", 1, 0.95)
    rows = {row["site"]: row for row in result["sites"]}
    for row in rows.values():
        assert row["status"] == "answered" and Decimal(row["total"]) == Decimal("0.5")
        assert row["start"] <= start_by
    hpc1 = rows["hpc1"]
    assert bound is not None and 0 < bound <= 594
    assert hpc1["lead_s"] in (bound, bound_after)  # a job the agent saw start may move it
    assert hpc1["submit_by"] == start_by - hpc1["lead_s"]
    assert hpc1["queue_walltime"] == 1800 + hpc1["lead_s"]
    assert rows["hpc3"]["lead_s"] is None and rows["hpc3"]["submit_by"] is None
    table = market.client(args)
    assert table.returncode == 0, table.stderr
    hpc3 = next(line for line in table.stdout.splitlines() if line.startswith("│ hpc3"))
    assert "no bound" in hpc3


@pytest.fixture
def poor(tmp_path: Path) -> Iterator[Market]:
    """The same sites, and a buyer the bank lets owe 3.00: four tasks' worth."""
    made = Market(tmp_path / "market", flat_priced(), credit="3.00")
    made.start()
    yield made
    made.stop()


def test_a_refused_confirm_releases_every_task(poor: Market, tmp_path: Path) -> None:
    """Single calls (``--no-batches``): eight tasks of 0.67 each: the fifth confirm is refused
    (the buyer cannot pay), and every reservation is released, the four confirmed ones too."""
    before = poor.ids()
    bag = {"tasks": [{"id": "t", "cores": 4, "runtime": 600, "count": 8}]}
    written = write_bag(tmp_path / "bag.yaml", bag)
    done = poor.client(["select", written, "--reserve", "--json", "--no-batches"])
    assert done.returncode == 3, done.stderr
    result = json.loads(done.stdout)
    assert result["state"] == "failed"
    assert "the confirm of part 5" in result["message"] and "released" in result["message"]
    assert all("reservation" not in row for row in result["tasks"])  # nothing is kept
    # an accept a site refused (the window went to an earlier task) holds nothing
    held = [e["state"] for e in result["entries"] if e["state"] != "refused"]
    assert held == ["cancelled"] * 8
    made = [r for records in poor.alices(before).values() for r in records]
    assert sorted(r.state.value for r in made) == ["CANCELLED"] * 8
    assert_settled(poor, before)


def test_a_batch_confirm_the_buyer_cannot_pay_books_nothing(poor: Market, tmp_path: Path) -> None:
    """With batches (docs/batches.md): the tasks held at a site are confirmed in one request,
    and a batch whose total the buyer cannot pay is refused whole by the bank; every
    reservation is then released, as with single confirms."""
    before = poor.ids()
    bag = {"tasks": [{"id": "t", "cores": 4, "runtime": 600, "count": 8}]}
    written = write_bag(tmp_path / "bag.yaml", bag)
    done = poor.client(["select", written, "--reserve", "--json"])
    assert done.returncode == 3, done.stderr
    result = json.loads(done.stdout)
    assert result["state"] == "failed" and "insufficient_funds" in result["message"]
    assert "the confirm of part" in result["message"] and "released" in result["message"]
    states = [e["state"] for e in result["entries"] if e["state"] != "refused"]
    assert states == ["cancelled"] * 8
    made = [r for records in poor.alices(before).values() for r in records]
    assert sorted(r.state.value for r in made) == ["CANCELLED"] * 8
    assert_settled(poor, before)
