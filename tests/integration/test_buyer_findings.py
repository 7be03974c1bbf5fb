"""What a third-party buyer found in ``siteagent-client`` (issue 27), against real agents: three
``siteagent serve`` processes on loopback at a flat 1.00 per core-hour, booking at one ``siteagent
ledger serve``, the client run as its own process (testbed/processes/market.py).

- provisioning and ``select --reserve`` keep within a site's live-offer allowance, and name the
  site's refusal (429 ``too_many_offers``) instead of "no site offers a window";
- ``select --reserve`` and ``provision`` take ``--max-price`` and ``--budget``, and keep to
  them when they hold tasks through batch deals (docs/batches.md);
- another buyer's reservation is "not yours", a site that dies mid-commit is never said to be
  released, and ``recover`` lists what it could not settle apart from what it settled.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from decimal import Decimal
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from siteagent.market.site import STORE_FILE
from testbed.processes.market import Market, flat_priced, with_fresh_journal

#: hpc3's live-offer allowance per buyer: a plan of ten tasks asks it for at most 50 offers.
ALLOWANCE = 60


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Market]:
    """hpc1 and hpc2 as the other client tests have them; hpc3 keeps only 60 live offers per
    buyer."""
    specs = flat_priced()
    specs[2] = dataclasses.replace(
        specs[2], settings={"api": {"max_live_offers_per_client": ALLOWANCE}}
    )
    made = Market(tmp_path_factory.mktemp("market"), specs, credit="100000.00")
    made.start()
    yield made
    made.stop()


@pytest.fixture
def buyer(market: Market, tmp_path: Path) -> Iterator[Market]:
    yield from with_fresh_journal(market, tmp_path)


def spread(path: Path, tasks: int) -> str:
    """A workflow of ``tasks`` independent one-core tasks of ten minutes: each is quoted from
    now, when a site offers the most windows."""
    entries = [{"id": f"t{i}", "cores": 1, "runtime": 600} for i in range(tasks)]
    path.write_text(yaml.safe_dump({"tasks": entries}), encoding="utf-8")
    return str(path)


def bag(path: Path, count: int) -> str:
    path.write_text(
        yaml.safe_dump({"tasks": [{"id": "r", "cores": 1, "runtime": 600, "count": count}]}),
        encoding="utf-8",
    )
    return str(path)


def test_provisioning_keeps_within_the_allowance_and_names_the_sites_refusal(
    buyer: Market, tmp_path: Path
) -> None:
    """Ten tasks at hpc3 ask it for 50 offers, within its 60 (twenty per quote, as before,
    would have been 200); once the buyer holds more live offers than that, provision and
    select --reserve say that hpc3 refuses to quote more, and why."""
    workflow = spread(tmp_path / "spread.yaml", 10)
    planned = buyer.client(["provision", workflow, "--site", "hpc3", "--dry-run", "--json"])
    assert planned.returncode == 0, planned.stderr
    assert len(json.loads(planned.stdout)["tasks"]) == 10
    quote = ["quote", "--site", "hpc3", "--cores", "1", "--walltime", "1h", "--limit", "100"]
    for _ in range(5):  # the three quotes, or as many as the allowance takes
        refused = buyer.client(quote)
        if refused.returncode != 0:
            break
    assert refused.returncode == 3 and "too_many_offers" in refused.stdout
    again = buyer.client(["provision", workflow, "--site", "hpc3"])
    assert again.returncode == 3
    said = again.stderr.strip().splitlines()[-1]
    assert "hpc3: " in said and "live offers" in said and "(too_many_offers)" in said
    selected = buyer.client(
        ["select", bag(tmp_path / "bag.yaml", 2), "--site", "hpc3", "--reserve"]
    )
    assert selected.returncode == 3
    said = selected.stderr.strip().splitlines()[-1]
    assert "(too_many_offers)" in said and "no longer offers a window" in said
    assert buyer.tentative_anywhere() == []


def test_select_reserve_keeps_to_the_price_caps(buyer: Market, tmp_path: Path) -> None:
    """Four tasks of one core for ten minutes cost 0.17 each at 1.00 per core-hour."""
    tasks = bag(tmp_path / "bag.yaml", 4)
    sites = ["--site", "hpc1", "--site", "hpc2"]
    cheap = buyer.client(["select", tasks, *sites, "--reserve", "--max-price", "0.5"])
    assert cheap.returncode == 3
    assert "(price_above_maximum)" in cheap.stderr.strip().splitlines()[-1]
    tight = buyer.client(["select", tasks, *sites, "--reserve", "--budget", "0.50"])
    assert tight.returncode == 3
    assert "the budget 0.50 leaves" in tight.stderr.strip().splitlines()[-1]
    assert buyer.tentative_anywhere() == []
    done = buyer.client(["select", tasks, *sites, "--reserve", "--budget", "0.68", "--json"])
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert sum(float(row["cost"]) for row in result["tasks"]) <= 0.68
    assert result["state"] == "done"


def held_batches(market: Market, site: str) -> int:
    """How many batch accepts of alice's ``site`` held (its own database says so)."""
    agent = market.agents[site]
    with sqlite3.connect(str(agent.state_dir / STORE_FILE)) as db:
        (count,) = db.execute(
            "SELECT COUNT(*) FROM accept_batches WHERE client = ? AND state = 'held'",
            (market.alice.key_id,),
        ).fetchone()
    return int(count)


def test_provision_keeps_to_the_price_caps_through_batches(buyer: Market, tmp_path: Path) -> None:
    """Four independent tasks of one core for ten minutes, 0.17 each at 1.00 per core-hour
    (1.02 with the fee): a cap below the price and a budget for three tasks hold nothing;
    a budget for four holds all four in batch accepts, within it."""
    workflow = spread(tmp_path / "four.yaml", 4)
    sites = ["--site", "hpc1", "--site", "hpc2"]
    before = {site: held_batches(buyer, site) for site in ("hpc1", "hpc2")}
    cheap = buyer.client(["provision", workflow, *sites, "--max-price", "0.5"])
    assert cheap.returncode == 3
    said = cheap.stderr.strip().splitlines()[-1]
    assert "above the maximum 0.5 (price_above_maximum)" in said and "every task released" in said
    tight = buyer.client(["provision", workflow, *sites, "--budget", "0.50"])
    assert tight.returncode == 3
    assert "the budget 0.50 leaves" in tight.stderr.strip().splitlines()[-1]
    assert buyer.tentative_anywhere() == []
    done = buyer.client(["provision", workflow, *sites, "--budget", "0.68", "--json"])
    assert done.returncode == 0, done.stderr
    tasks = json.loads(done.stdout)["tasks"]
    assert len(tasks) == 4 and sum(Decimal(task["cost"]) for task in tasks) <= Decimal("0.68")
    after = {site: held_batches(buyer, site) for site in ("hpc1", "hpc2")}
    used = {task["site"] for task in tasks}
    assert all(after[site] > before[site] for site in used), (before, after)


def test_another_buyers_reservation_is_not_yours(buyer: Market) -> None:
    done = buyer.client(
        ["auction", "--site", "hpc1", "--cores", "4", "--walltime", "1h", "--rounds", "1"]
    )
    assert done.returncode == 0, done.stderr
    journal = buyer.journal()
    (entry,) = journal.entries()
    journal.close()
    name = f"hpc1:{entry.reservation_id}"
    bobs = str(buyer.write_sites_file(buyer.bob, "bob"))
    for action in ("show", "cancel"):
        seen = buyer.client(["reservations", action, name, "--sites", bobs])
        assert seen.returncode == 3, seen.stderr
        said = seen.stderr.strip()
        assert said.count("\n") == 0 and "is not yours" in said and "bob@lab" in said
    shown = buyer.client(["reservations", "show", name, "--json"])
    assert shown.returncode == 0 and json.loads(shown.stdout)["site"]["state"] == "CONFIRMED"


def test_a_site_dead_mid_commit_is_never_said_released(buyer: Market) -> None:
    """The winner dies once its part is held: the auction says what it may still hold and
    releases the rest; recover lists that part as unsettled while the site is down, and
    settles it once the site is back."""
    args = ["auction", "--site", "hpc2", "--cores", "4", "--walltime", "1h", "--rounds", "1"]
    client = buyer.paused_client(args, "Journal.tentative:1:after")
    buyer.agents["hpc2"].service.kill()
    try:
        done = client.resume()
        assert done.returncode == 3
        lines = done.stderr.strip().splitlines()
        assert any(
            line.startswith("siteagent-client: error: hpc2 may hold part 1") for line in lines
        )
        assert "every part released but part 1 at hpc2" in lines[-1]
        down = buyer.client(["recover"])
        assert down.returncode == 75
        assert "Settled" not in down.stdout
        assert "is still" in down.stderr and "hpc2:" in down.stderr
    finally:
        buyer.agents["hpc2"].service.restart()
    up = buyer.client(["recover", "--json"])
    assert up.returncode == 0, up.stderr
    recovered = json.loads(up.stdout)
    assert recovered["unsettled"] == [] and len(recovered["settled"]) == 1
    assert buyer.tentative_anywhere() == []
