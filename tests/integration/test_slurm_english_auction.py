"""English auctions on the real Slurm test cluster behind one agent (``siteagent serve`` on
the ``slurm`` backend, 4 nodes x 16 cores, empty), the auctioneer being the client library.

Concurrent auctions for jobs that together need more than the cluster's 64 cores never get
overlapping capacity (each winner is a reservation Slurm holds with its cores, none sharing a
core in time with another), every job is placed or gets no bid for lack of capacity, never a
refused accept; no auction leaves anything held; and an agent killed with a bid open keeps it
over a restart while its auction is open, and releases it on restart once it is over.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

from siteagent.client.auctioneer import Auctioneer, SitePool
from siteagent.client.jobs import Job
from siteagent.client.journal import Journal
from siteagent.market.lifecycle import BidState, ReservationState
from siteagent.protocol.models import AuctionedJob
from testbed.processes.programs import wait_until
from testbed.slurm.cluster import SlurmTestCluster
from testbed.slurm.site import SlurmSite

pytestmark = pytest.mark.slurm

S = ReservationState
#: The cluster's cores: 4 nodes of 16.
CORES = 64
#: Seconds a winner has to accept after a close (short, so that the test outwaits it).
ACCEPT_WINDOW_S = 3


@pytest.fixture
def site(slurm: SlurmTestCluster, tmp_path: Path) -> Iterator[SlurmSite]:
    made = SlurmSite(slurm, tmp_path, accept_window_s=ACCEPT_WINDOW_S)
    try:
        yield made
    finally:
        made.service.stop()


def slurm_reservations(cluster: SlurmTestCluster) -> Dict[str, Dict[str, str]]:
    """The agent's reservations as ``scontrol show reservation -o`` shows them, by name."""
    out = cluster.run(["scontrol", "show", "reservation", "-o"], check=False).stdout
    found = {}
    for line in out.splitlines():
        fields = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        if fields.get("ReservationName", "").startswith("sa-"):
            found[fields["ReservationName"]] = fields
    return found


def most_held(windows: List[Tuple[int, int, int]]) -> int:
    instants = {start for start, _, _ in windows}
    return max((sum(c for s, e, c in windows if s <= t < e) for t in instants), default=0)


def test_concurrent_auctions_never_get_overlapping_cores_from_slurm(
    site: SlurmSite, tmp_path: Path
) -> None:
    """Six 32-core jobs of ten minutes at once: the cluster can hold two at a time, so four
    within one walltime; the others get no bid."""
    jobs = [
        Job(f"j{i}", AuctionedJob(cores=32, walltime=600, priority=1 + i % 3)) for i in range(6)
    ]
    journal = Journal(tmp_path / "client.db")
    pool = SitePool([site.site()])
    try:
        with Auctioneer(pool, journal, length_s=2.0, rounds=2) as auctioneer:
            placements = auctioneer.run(jobs)
    finally:
        pool.close()
        journal.close()
    placed = [p for p in placements if p.state == "placed"]
    assert len(placed) == 4, [(p.job.name, p.state, p.message) for p in placements]
    for placement in placements:
        if placement.state != "placed":
            assert "no_capacity" in placement.message, placement.message
    store = site.store()
    try:
        confirmed = store.reservations([S.CONFIRMED])
        open_bids = [b for b in store.bids() if b.state in (BidState.OPEN, BidState.NONE)]
    finally:
        store.close()
    assert sorted(r.id for r in confirmed) == sorted(p.reservation_id for p in placed)
    assert most_held([(r.start, r.end, r.size) for r in confirmed]) <= CORES
    in_slurm = slurm_reservations(site.cluster)
    for record in confirmed:
        assert in_slurm[record.name]["CoreCnt"] == "32"
    assert open_bids == []


def test_a_killed_agent_keeps_an_open_auctions_bid_and_releases_it_once_over(
    site: SlurmSite,
) -> None:
    body = {"job": {"cores": CORES // 2, "walltime": 600}}
    status, open_bid = site.buyer.request(
        "POST", "/v1/bids", {"auction_id": "open", "closes_at": int(time.time()) + 30, **body}
    )
    assert status == 200 and open_bid["state"] == "open", open_bid
    status, ending = site.buyer.request(
        "POST", "/v1/bids", {"auction_id": "ending", "closes_at": int(time.time()) + 2, **body}
    )
    assert status == 200 and ending["state"] == "open", ending
    site.service.kill()
    time.sleep(max(0.0, ending["held_until"] - time.time()) + 1)
    site.service.restart()
    wait_until(
        "the restarted agent to release the bid of the auction that ended",
        lambda: getattr(site.bid("ending"), "state", None) is BidState.RELEASED,
    )
    assert site.bid("ending").reason_code == "auction_ended"
    assert site.bid("open").state is BidState.OPEN  # its auction is still open: kept
    status, released = site.buyer.request("DELETE", "/v1/bids/open")
    assert status == 200 and released["state"] == "released"
    assert slurm_reservations(site.cluster) == {}  # a bid is never a reservation in Slurm
