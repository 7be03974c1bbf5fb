"""English auctions against real agents: three ``siteagent serve`` processes on loopback
(replay backends with 16 of 64 cores free for the next two hours) booking at one ``siteagent
ledger serve``, ``siteagent-client english-auction`` run as its own process.

What matters is what the sites hold afterwards, read from their own databases: concurrent
auctions for more than a site's free cores never get overlapping capacity from it (and no
accept of a winning bid is ever refused for capacity another auction took), the winner holds
a confirmed reservation and no loser holds anything, and a site killed with a bid open keeps
it while its auction is open and releases it on restart once the auction is over.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from siteagent.market.lifecycle import BidRecord, BidState, ReservationState
from siteagent.market.site import STORE_FILE
from siteagent.market.store import Store
from testbed.processes.agents import BUSY_JOBS
from testbed.processes.market import Market, SiteSpec
from testbed.processes.programs import wait_until

S = ReservationState
#: Free cores at every site while BUSY_JOBS' two running jobs last (about two hours).
FREE = 16
#: Seconds after a close that a winner has to accept: short, so that a test can outwait it.
ACCEPT_WINDOW_S = 3


def specs() -> List[SiteSpec]:
    return [
        SiteSpec(
            f"hpc{i}",
            seed=i,
            offset=600,
            pricing={"policy": "flat", "externality": {"enabled": False}},
            jobs=BUSY_JOBS,
            settings={"auctions": {"accept_window_s": ACCEPT_WINDOW_S}},
        )
        for i in (1, 2, 3)
    ]


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Market]:
    made = Market(tmp_path_factory.mktemp("english"), specs(), credit="100000.00")
    made.start()
    yield made
    made.stop()


@pytest.fixture
def buyer(market: Market, tmp_path: Path) -> Iterator[Market]:
    """The market with a fresh journal; what the test left confirmed is cancelled after."""
    market.client_state = tmp_path / "client"
    before = market.ids()
    yield market
    market.cancel_alices(before)


def english_auction(market: Market, tmp_path: Path, jobs: List[Dict[str, Any]], *args: str) -> Any:
    path = tmp_path / "jobs.yaml"
    path.write_text(json.dumps({"jobs": jobs}), encoding="utf-8")
    done = market.client(["english-auction", str(path), "--json", *args])
    assert done.returncode in (0, 3), done.stderr
    return json.loads(done.stdout)


def bids(market: Market, site: str) -> List[BidRecord]:
    store = Store(str(market.agents[site].state_dir / STORE_FILE))
    try:
        return store.bids()
    finally:
        store.close()


def most_held(windows: List[Tuple[int, int, int]]) -> int:
    """The most cores the windows need at once."""
    instants = {start for start, _, _ in windows}
    return max((sum(c for s, e, c in windows if s <= t < e) for t in instants), default=0)


def metric(market: Market, site: str, name: str) -> float:
    answer = market.buyer_at(site).call("GET", "/metrics")
    for line in answer.body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{site} shows no {name}")


def test_concurrent_auctions_never_get_overlapping_capacity_from_a_site(
    buyer: Market, tmp_path: Path
) -> None:
    """Twelve half-hour 8-core jobs at once, 16 cores free at each of three sites: each site
    can hold four of them within a walltime, and holds no core for two auctions."""
    since = buyer.ids()
    jobs = [
        {"name": f"j{i}", "cores": 8, "walltime": 1800, "priority": 1 + i % 4} for i in range(12)
    ]
    result = english_auction(buyer, tmp_path, jobs, "-k", "0.002", "--rounds", "3")
    placed = [a for a in result["auctions"] if a["state"] == "placed"]
    assert len(placed) >= 4, result
    for auction in result["auctions"]:
        assert "capacity_gone" not in auction["message"], auction  # no accept refused
        if auction["state"] != "placed":
            assert "no_capacity" in auction["message"] or "outbid" in auction["message"]
    for site, records in buyer.alices(since).items():
        windows = [(r.start, r.end, r.size) for r in records if r.state is S.CONFIRMED]
        assert most_held(windows) <= FREE, (site, windows)
        assert not [b for b in bids(buyer, site) if b.state in (BidState.OPEN, BidState.NONE)]
    assert {a["site"] for a in placed} <= {"hpc1", "hpc2", "hpc3"}


def test_the_winner_holds_a_confirmed_reservation_and_no_loser_holds_anything(
    buyer: Market, tmp_path: Path
) -> None:
    since = buyer.ids()
    job = {
        "name": "one",
        "cores": 8,
        "walltime": 3600,
        "priority": 2,
        "input_bytes": 10**9,
        "input_site": "hpc2",
    }
    result = english_auction(buyer, tmp_path, [job], "-k", "0.001")
    (auction,) = result["auctions"]
    assert auction["state"] == "placed" and auction["site"] == "hpc2"  # its input is there
    assert sorted(auction["bidders"]) == ["hpc1", "hpc2", "hpc3"]
    made = buyer.alices(since)
    (winner,) = made["hpc2"]
    assert winner.id == auction["reservation"] and winner.state is S.CONFIRMED
    for site in ("hpc1", "hpc3"):
        assert made[site] == []
        (lost,) = [b for b in bids(buyer, site) if b.auction_id == auction["auction"]]
        assert lost.state is BidState.RELEASED and lost.reason_code == "lost"
    (won,) = [b for b in bids(buyer, "hpc2") if b.auction_id == auction["auction"]]
    assert won.state is BidState.WON
    for site in ("hpc1", "hpc2", "hpc3"):
        wait_until(
            f"{site}'s metrics to show nothing held",
            lambda site=site: metric(buyer, site, "siteagent_auction_held_cores") == 0,
        )


def announce(
    market: Market, site: str, auction_id: str, closes_in: int, cores: int = FREE
) -> Dict[str, Any]:
    at = market.buyer_at(site)
    body = {
        "auction_id": auction_id,
        "job": {"cores": cores, "walltime": 3600},
        "closes_at": int(time.time()) + closes_in,
    }
    status, answer = at.request("POST", "/v1/bids", body)
    assert status == 200, answer
    return answer


def bid_of(market: Market, site: str, auction_id: str) -> Optional[BidRecord]:
    return next((b for b in bids(market, site) if b.auction_id == auction_id), None)


def test_a_site_killed_with_a_bid_open_keeps_it_while_the_auction_is_open(
    buyer: Market,
) -> None:
    held = announce(buyer, "hpc3", "kept-over-a-crash", closes_in=60)
    assert held["state"] == "open"
    service = buyer.agents["hpc3"].service
    service.kill()
    service.restart()
    kept = bid_of(buyer, "hpc3", "kept-over-a-crash")
    assert kept is not None and kept.state is BidState.OPEN
    other = announce(buyer, "hpc3", "after-the-crash", closes_in=60)
    held_end = held["bid"]["offer"]["end"]
    assert other["state"] != "open" or other["bid"]["offer"]["start"] >= held_end
    at = buyer.buyer_at("hpc3")
    for auction_id in ("kept-over-a-crash", "after-the-crash"):
        assert at.request("DELETE", f"/v1/bids/{auction_id}")[0] == 200


def test_a_site_killed_with_a_bid_open_releases_it_on_restart(buyer: Market) -> None:
    held = announce(buyer, "hpc1", "killed-while-bidding", closes_in=2)
    assert held["state"] == "open"
    service = buyer.agents["hpc1"].service
    service.kill()
    time.sleep(max(0.0, held["held_until"] - time.time()) + 1)  # the auction is over
    service.restart()
    wait_until(
        "the restarted agent to release the bid",
        lambda: (
            getattr(bid_of(buyer, "hpc1", "killed-while-bidding"), "state", None)
            is BidState.RELEASED
        ),
    )
    released = bid_of(buyer, "hpc1", "killed-while-bidding")
    assert released is not None and released.reason_code == "auction_ended"
    wait_until(
        "hpc1's metrics to show nothing held",
        lambda: metric(buyer, "hpc1", "siteagent_auction_held_cores") == 0,
    )
    again = announce(buyer, "hpc1", "the-cores-are-free-again", closes_in=2)
    assert again["state"] == "open"  # the same 16 cores, free again
    stale = buyer.buyer_at("hpc1").request(
        "POST", "/v1/reservations", {"offer_id": held["bid"]["offer"]["offer_id"]}
    )
    assert stale[0] == 409 and stale[1]["error"]["code"] == "offer_expired"
    at = buyer.buyer_at("hpc1")
    assert at.request("DELETE", "/v1/bids/the-cores-are-free-again")[0] == 200
