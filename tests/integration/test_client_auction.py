"""``siteagent-client auction``, ``recover`` and ``reservations`` against real agents: three
``siteagent serve`` processes on loopback (replay backends on different traces and offsets,
pricing by load) booking at one ``siteagent ledger serve``, the client run as its own process.

Each test checks what matters after the client is gone: what each site's own database holds
(a confirmed reservation at the winner, nothing at the losers, nothing tentative anywhere),
that the journal agrees with every site, and that the bank booked each confirmed part once.
The client is interrupted (SIGINT), killed (SIGKILL) or paused at journal writes through
testbed/processes/clientrun.py, i.e. exactly between the steps of the commit.
"""

from __future__ import annotations

import json
import time
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

from siteagent.market.lifecycle import ReservationState
from testbed.processes.market import Market, flat_priced, load_priced, on_slurm
from testbed.processes.programs import wait_until
from testbed.slurm.cluster import SlurmTestCluster

S = ReservationState
#: Three parts of 48 cores on 64-core sites: no site can hold two at once.
CO_ALLOCATION = ["--parts", "3", "--cores", "48", "--walltime", "1h", "--tolerance", "1h"]
ONE_PART = ["--cores", "32", "--walltime", "1h", "--max-price", "2", "--rounds", "4"]


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Market]:
    """Three sites pricing by load and the bank, shared by the tests of this module (each
    with a journal of its own, checking only what it made)."""
    made = Market(tmp_path_factory.mktemp("market"), load_priced(), credit="100000.00")
    made.start()
    yield made
    made.stop()


@pytest.fixture
def buyer(market: Market, tmp_path: Path) -> Iterator[Market]:
    """The market, with a fresh journal for this test; what the test left confirmed is
    cancelled afterwards (no fee, no penalty), so that every test finds the sites as free."""
    market.client_state = tmp_path / "client"
    before = market.ids()
    yield market
    market.cancel_alices(before)


def auction(market: Market, *args: str) -> Dict[str, Any]:
    done = market.client(["auction", *args, "--json"])
    assert done.returncode == 0, done.stderr
    result: Dict[str, Any] = json.loads(done.stdout)
    return result


def assert_settled(market: Market, since: Dict[str, List[str]]) -> None:
    """Nothing tentative anywhere, and the journal agrees with every site."""
    assert market.tentative_anywhere() == []
    assert market.disagreements(since) == []


def confirmed_receipts(market: Market) -> List[str]:
    journal = market.journal()
    try:
        return [
            e.receipt["id"] for e in journal.entries() if e.state.value == "confirmed" and e.receipt
        ]
    finally:
        journal.close()


def assert_booked_once(market: Market) -> None:
    """The bank booked every part the journal says is confirmed exactly once."""
    receipts = confirmed_receipts(market)
    assert set(market.deals_booked(receipts).values()) <= {1}


# ---- auctions that work


def test_the_auction_confirms_at_the_winner_and_leaves_nothing_at_the_losers(
    buyer: Market,
) -> None:
    before = buyer.ids()
    result = auction(buyer, *ONE_PART)
    assert result["state"] == "done"
    (bought,) = result["confirmed"]
    new = buyer.alices(before)
    assert [r.id for r in new[bought["site"]]] == [bought["reservation_id"]]
    assert new[bought["site"]][0].state is S.CONFIRMED
    assert all(not records for site, records in new.items() if site != bought["site"])
    # the rounds lowered the price: later rounds carried the best price so far
    best = [Decimal(summary["best_price"][0]) for summary in result["rounds"]]
    assert len(best) == 4 and best == sorted(best, reverse=True) and best[-1] < best[0]
    assert Decimal(bought["bid"]["unit_price"]) == best[-1]
    assert bought["deal"]["request"]["round"] == bought["bid"]["round"]
    # the receipt was booked once, for the deal's price
    assert buyer.deals_booked([bought["receipt"]["id"]]) == {bought["receipt"]["id"]: 1}
    assert_settled(buyer, before)


def test_paced_rounds_report_each_site_s_price_and_the_time_it_took(buyer: Market) -> None:
    """--round-interval: each round lasts at least the interval (the paper's round timer);
    each round's summary names every site's lowest price, of which the winner's, and how
    long the sites took to answer (the processing time, without the wait)."""
    before = buyer.ids()
    began = time.monotonic()
    result = auction(buyer, *ONE_PART[:-2], "--rounds", "2", "--round-interval", "2")
    assert time.monotonic() - began >= 4
    assert result["state"] == "done" and len(result["rounds"]) == 2
    assert all(summary["answered_s"] > 0 for summary in result["rounds"])
    (bought,) = result["confirmed"]
    prices = result["rounds"][bought["bid"]["round"] - 1]["prices"]
    assert prices[bought["site"]] == [bought["bid"]["unit_price"]]
    assert min(Decimal(price) for (price,) in prices.values()) == Decimal(
        bought["bid"]["unit_price"]
    )
    assert_settled(buyer, before)


def test_co_allocation_over_three_sites(buyer: Market) -> None:
    before = buyer.ids()
    result = auction(buyer, *CO_ALLOCATION)
    assert result["state"] == "done"
    parts = result["confirmed"]
    assert sorted(part["part"] for part in parts) == [0, 1, 2]
    assert sorted(part["site"] for part in parts) == ["hpc1", "hpc2", "hpc3"]
    starts = [part["bid"]["start"] for part in parts]
    assert max(starts) - min(starts) <= 3600
    for part in parts:
        (record,) = buyer.alices(before)[part["site"]]
        assert record.id == part["reservation_id"] and record.state is S.CONFIRMED
    assert_settled(buyer, before)
    assert_booked_once(buyer)


def test_a_winner_that_refuses_at_accept_gives_way_to_the_next_offer(buyer: Market) -> None:
    """Between the auction and the accept, bob takes the winner's capacity for that window."""
    before = buyer.ids()
    args = ["auction", "--cores", "48", "--walltime", "1h", "--rounds", "2", "--json"]
    client = buyer.paused_client(args, at="Journal.accepting:1:after")
    journal = buyer.journal()
    (first,) = journal.entries()
    journal.close()
    bob = buyer.buyer_at(first.site, buyer.bob)
    window = {"cores": 48, "walltime": 3600, "earliest_start": first.bid.start, "limit": 1}
    status, quoted = bob.request("POST", "/v1/quotes", window)
    # any 48 cores overlapping the window leave less than 48 of the 64 for it
    assert status == 200 and quoted["offers"][0]["start"] < first.bid.end, quoted
    status, taken = bob.request(
        "POST", "/v1/reservations", {"offer_id": quoted["offers"][0]["offer_id"]}
    )
    assert status == 201, taken
    done = client.resume()
    try:
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        refused = result["entries"][0]
        assert refused["state"] == "refused" and "offer_capacity_gone" in refused["message"]
        (bought,) = result["confirmed"]
        assert bought["offer_id"] != first.offer_id
        assert_settled(buyer, before)
    finally:
        assert bob.request("DELETE", f"/v1/reservations/{taken['id']}")[0] == 200


def test_an_auction_nothing_meets_shows_the_closest_offers(buyer: Market) -> None:
    before = buyer.ids()
    args = ["auction", "--cores", "32", "--walltime", "1h", "--deadline", "+10m", "--json"]
    done = buyer.client(args)
    assert done.returncode == 3
    result = json.loads(done.stdout)
    assert result["state"] == "failed"
    assert result["message"].startswith("no offer meets the constraints; the closest: part 1")
    assert 1 <= len(result["closest"]) <= 5
    assert all(
        "after the deadline" in problem for c in result["closest"] for problem in c["problems"]
    )
    assert all(not records for records in buyer.alices(before).values())


def test_reservations_are_listed_shown_and_cancelled_across_sites(buyer: Market) -> None:
    before = buyer.ids()
    (bought,) = auction(buyer, *ONE_PART)["confirmed"]
    name = f"{bought['site']}:{bought['reservation_id']}"
    listed = buyer.client_json(["reservations", "list"])["reservations"]
    assert [(e["site"], e["reservation_id"], e["state"]) for e in listed] == [
        (bought["site"], bought["reservation_id"], "confirmed")
    ]
    shown = buyer.client_json(["reservations", "show", bought["reservation_id"]])
    assert shown["site"]["state"] == "CONFIRMED"
    assert shown["site"]["receipt"]["id"] == bought["receipt"]["id"]
    table = buyer.client(["reservations", "show", name])  # what a user reads to run jobs in it
    assert table.returncode == 0, table.stderr
    assert "batch system name" in table.stdout and shown["site"]["name"] in table.stdout
    cancelled = buyer.client_json(["reservations", "cancel", name])["reservation"]
    assert cancelled["state"] == "cancelled"
    (record,) = buyer.alices(before)[bought["site"]]
    assert record.state is S.CANCELLED
    assert buyer.deals_booked([bought["receipt"]["id"]], "refund") == {bought["receipt"]["id"]: 1}
    assert buyer.client_json(["reservations", "list"])["reservations"] == []
    assert_settled(buyer, before)


# ---- interrupted and crashed clients


#: The commit phase of a three-part co-allocation: after each accept, between confirms (and,
#: first, between two bidding rounds).
COMMIT_STEPS = [
    ("Journal.bidding_round:1:after", 0),
    ("Journal.tentative:1:after", 0),
    ("Journal.tentative:2:after", 0),
    ("Journal.tentative:3:after", 0),
    ("Journal.confirmed:1:after", 1),
    ("Journal.confirmed:2:after", 2),
]


@pytest.mark.parametrize(("step", "kept"), COMMIT_STEPS)
def test_sigint_at_any_step_of_the_commit_leaves_nothing_tentative(
    buyer: Market, step: str, kept: int
) -> None:
    before = buyer.ids()
    done = buyer.client(["auction", *CO_ALLOCATION, "--json"], at=step, then="INT")
    assert done.returncode == 130, done.stderr
    result = json.loads(done.stdout)
    assert result["state"] == "interrupted"
    assert len(result["confirmed"]) == kept  # bought parts are kept, and reported
    assert_settled(buyer, before)
    assert_booked_once(buyer)
    held = [
        r for records in buyer.alices(before).values() for r in records if r.state is S.CONFIRMED
    ]
    assert len(held) == kept


#: Where a crash can leave the journal: an accept not sent, tentative parts, a confirm not
#: sent, a part confirmed.
CRASH_STEPS = [
    ("Journal.accepting:1:after", 0),
    ("Journal.tentative:2:after", 0),
    ("Journal.confirming:1:after", 0),
    ("Journal.confirmed:1:after", 1),
]


@pytest.mark.parametrize(("step", "kept"), CRASH_STEPS)
def test_recover_undoes_an_auction_the_client_crashed_in(
    buyer: Market, step: str, kept: int
) -> None:
    before = buyer.ids()
    crashed = buyer.client(["auction", *CO_ALLOCATION], at=step, then="KILL")
    assert crashed.returncode == -9, crashed.stderr
    recovered = buyer.client_json(["recover"])
    assert recovered["unsettled"] == []
    assert len(recovered["confirmed"]) == kept
    assert_settled(buyer, before)
    assert_booked_once(buyer)
    journal = buyer.journal()
    try:
        (record,) = journal.auctions()
        assert record.state.value == "interrupted"
    finally:
        journal.close()
    assert buyer.client_json(["recover"])["settled"] == []  # nothing left to do


# ---- sites that die, a bank that refuses


@pytest.fixture
def fragile_market(tmp_path: Path) -> Iterator[Market]:
    """A market of its own, for tests that kill sites."""
    made = Market(tmp_path / "market", load_priced(), credit="100000.00")
    made.start()
    yield made
    made.stop()


def test_a_site_killed_mid_auction_is_dropped(fragile_market: Market) -> None:
    market = fragile_market
    before = market.ids()
    client = market.paused_client(["auction", *ONE_PART, "--json"], "Journal.bidding_round:1:after")
    market.agents["hpc2"].service.kill()  # the cheapest site (its minimum is the lowest)
    done = client.resume()
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["rounds"][1]["answers"]["hpc2"].startswith("dropped:")
    assert "hpc2" not in result["rounds"][2]["answers"]  # not asked again
    (bought,) = result["confirmed"]
    assert bought["site"] in ("hpc1", "hpc3")
    assert all(entry["site"] != "hpc2" for entry in result["entries"])
    market.agents["hpc2"].service.restart()
    assert_settled(market, before)


def test_a_winner_killed_before_its_confirm_is_released_by_recover(
    fragile_market: Market,
) -> None:
    market = fragile_market
    before = market.ids()
    client = market.paused_client(["auction", *ONE_PART, "--json"], "Journal.tentative:1:after")
    journal = market.journal()
    (held,) = journal.entries()
    journal.close()
    market.agents[held.site].service.kill()
    done = client.resume()
    assert done.returncode == 3, done.stderr
    result = json.loads(done.stdout)
    assert result["state"] == "failed" and result["confirmed"] == []
    (entry,) = result["entries"]
    assert entry["state"] in ("confirming", "cancelling")  # the site may hold it: unsettled
    still_dead = market.client(["recover", "--json"])
    assert still_dead.returncode == 75
    assert [e["site"] for e in json.loads(still_dead.stdout)["unsettled"]] == [held.site]
    market.agents[held.site].service.restart()
    recovered = market.client_json(["recover"])
    assert recovered["unsettled"] == []
    assert_settled(market, before)


def test_a_confirm_refused_on_one_part_releases_every_part(tmp_path: Path) -> None:
    """Flat prices and a credit of 100.00: two parts of 48.00 confirm, the third is refused
    (402), and the two confirmed are cancelled (refunded in full: no fee, no penalty)."""
    market = Market(tmp_path / "market", flat_priced(), credit="100.00")
    market.start()
    try:
        before = market.ids()
        done = market.client(["auction", *CO_ALLOCATION, "--rounds", "1", "--json"])
        assert done.returncode == 3, done.stderr
        result = json.loads(done.stdout)
        assert "every part released" in result["message"]
        assert "insufficient_funds" in result["message"]
        # A site may offer several parts the same window and then refuse all but one at
        # accept, so a part can be held at a second site: at least one hold per part, and
        # every hold released.
        held = [e["state"] for e in result["entries"] if e["state"] != "refused"]
        assert len(held) >= 3
        assert set(held) == {"cancelled"}
        new = [r for records in market.alices(before).values() for r in records]
        states = [r.state.value for r in new]
        assert states.count("CANCELLED") == len(held)
        assert set(states) <= {"CANCELLED", "FAILED"}  # FAILED: an accept that made nothing
        assert_settled(market, before)
        receipts = [line["receipt_id"] for line in market.statement() if line["kind"] == "deal"]
        assert len(receipts) == 2
        assert market.deals_booked(receipts) == dict.fromkeys(receipts, 1)
        assert market.deals_booked(receipts, "refund") == dict.fromkeys(receipts, 1)
        wait_until("the refunds", lambda: Decimal(market.statement()[-1]["balance"]) == 0)
    finally:
        market.stop()


def slurm_reservations(cluster: SlurmTestCluster) -> List[str]:
    """The names of the reservations the Slurm cluster holds."""
    shown = cluster.run(["scontrol", "show", "reservation", "-o"]).stdout
    return [
        line.split()[0].split("=", 1)[1]
        for line in shown.splitlines()
        if line.startswith("ReservationName=")
    ]


def test_co_allocation_with_a_site_on_real_slurm(slurm: SlurmTestCluster, tmp_path: Path) -> None:
    """hpc1 is the real Slurm test cluster (4 nodes of 16 cores): interrupted once every part
    is held, the client leaves no reservation in Slurm; then a whole co-allocation leaves
    exactly the confirmed part's reservation there."""
    specs = load_priced()
    market = Market(tmp_path / "market", [on_slurm(specs[0], slurm), *specs[1:]], "100000.00")
    market.start()
    try:
        before = market.ids()
        step = "Journal.tentative:3:after"
        interrupted = market.client(["auction", *CO_ALLOCATION, "--json"], at=step, then="INT")
        assert interrupted.returncode == 130, interrupted.stderr
        held = [e for e in json.loads(interrupted.stdout)["entries"] if e["state"] == "cancelled"]
        assert len(held) == 3 and "hpc1" in {e["site"] for e in held}
        assert_settled(market, before)
        assert slurm_reservations(slurm) == []
        result = auction(market, *CO_ALLOCATION)
        assert result["state"] == "done"
        (on_slurm_part,) = [e for e in result["confirmed"] if e["site"] == "hpc1"]
        assert slurm_reservations(slurm) == [f"sa-{on_slurm_part['reservation_id']}"]
        assert_settled(market, before)
        assert_booked_once(market)
    finally:
        market.stop()
