"""English auctions in simulated time (testbed.sims.english): the project's auctioneer and its
sites' bidding on simulated clusters, on one clock. Small worlds worked by hand: who bids, who
wins, when the job runs; a site re-bidding when its load changes during the auction; a job
nobody bid for auctioned again at the next change; the project's future windows beside the
paper's bids; the greedy baseline; and the same seed giving the same run.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pytest

from siteagent.client.journal import AuctionState
from siteagent.config.schema import BidMode
from siteagent.core.machine import Task
from testbed.sims.english import GlobalJob, JobRecord, SiteSpec, World, local_tasks, make_sites

QUIET = (SiteSpec("s1", 8, 0.0, (8,), 100), SiteSpec("s2", 8, 0.0, (8,), 100))


def local(name: str, submit: int, cores: int, run: int, priority: int = 1) -> Task:
    return Task(name, cores, run, submit, run=run, priority=priority)


def world_run(
    tmp_path: Path,
    jobs: Sequence[GlobalJob],
    length_s: int,
    mode: BidMode = BidMode.NOW,
    local_jobs: Optional[Dict[str, List[Task]]] = None,
    greedy: bool = False,
) -> Dict[str, JobRecord]:
    sites = make_sites(QUIET, mode, {k: iter(v) for k, v in (local_jobs or {}).items()})
    world = World(sites, jobs, length_s, tmp_path, greedy=greedy)
    return {record.job.name: record for record in world.run()}


def job(
    name: str = "g1",
    submit: int = 0,
    cores: int = 8,
    run: int = 50,
    priority: int = 2,
    input_site: str = "s2",
    transfer_s: int = 5,
) -> GlobalJob:
    return GlobalJob(name, submit, cores, run, priority, input_site, transfer_s)


def test_both_sites_bid_and_the_one_holding_the_input_wins_at_once(tmp_path: Path) -> None:
    records = world_run(tmp_path, [job()], 0)
    record = records["g1"]
    assert record.site == "s2" and record.auctions == 1
    assert record.participation == [1.0]
    assert (record.placed_at, record.start, record.end) == (0, 0, 50)


def test_a_remote_winner_starts_the_job_once_its_input_has_arrived(tmp_path: Path) -> None:
    busy = {"s2": [local("l", 0, 8, 1000, priority=3)]}
    record = world_run(tmp_path, [job()], 0, local_jobs=busy)["g1"]
    assert record.site == "s1" and record.participation == [0.5]
    assert (record.start, record.end) == (5, 55)


def test_the_winner_suspends_lower_priority_work(tmp_path: Path) -> None:
    """Both sites full: s1 of a priority-1 job, s2 of a priority-3 one. A priority-2 job can
    only be bid for by s1, which suspends its job for it."""
    busy = {"s1": [local("low", 0, 8, 1000)], "s2": [local("high", 0, 8, 1000, priority=3)]}
    record = world_run(tmp_path, [job(input_site="s1")], 0, local_jobs=busy)["g1"]
    assert record.site == "s1" and record.participation == [0.5]
    assert (record.start, record.end) == (0, 50)


def test_a_job_nobody_bids_for_is_auctioned_again_when_capacity_changes(tmp_path: Path) -> None:
    """Both sites run priority-3 work; the first frees at 30: the job's second auction then
    finds it."""
    busy = {
        "s1": [local("a", 0, 8, 30, priority=3)],
        "s2": [local("b", 0, 8, 1000, priority=3)],
    }
    record = world_run(tmp_path, [job(submit=10)], 0, local_jobs=busy)["g1"]
    assert record.auctions == 2 and record.participation == [0.0, 0.5]
    assert record.site == "s1" and (record.placed_at, record.start) == (30, 35)


def test_a_site_whose_load_changes_during_the_auction_bids_then(tmp_path: Path) -> None:
    """An auction of 40 s from 0; s2 (holding the input) is busy until 20 with work of a higher
    priority, s1 is free: s2 bids when it frees, and wins, having no transfer to pay."""
    busy = {"s2": [local("b", 0, 8, 20, priority=3)]}
    record = world_run(tmp_path, [job()], 40, local_jobs=busy)["g1"]
    assert record.participation == [1.0] and record.rounds == [2]
    assert record.site == "s2" and (record.placed_at, record.start) == (40, 40)


def test_the_projects_sites_bid_future_windows_and_reserve_them(tmp_path: Path) -> None:
    """Bidding future windows, both sites bid though s2 is busy until 20 (its window then
    starts later); the job is reserved where its value is highest and runs in the window."""
    busy = {"s2": [local("b", 0, 8, 20, priority=3)]}
    record = world_run(tmp_path, [job()], 0, mode=BidMode.FUTURE, local_jobs=busy)["g1"]
    assert record.participation == [1.0]
    assert record.site == "s1" and record.start == 5 and record.end == 55


def test_the_greedy_baseline_sends_each_job_where_it_starts_soonest(tmp_path: Path) -> None:
    busy = {"s2": [local("b", 0, 8, 20, priority=3)]}
    record = world_run(tmp_path, [job()], 0, local_jobs=busy, greedy=True)["g1"]
    assert record.auctions == 0
    assert record.site == "s1" and (record.start, record.end) == (5, 55)


def test_the_auctions_are_the_auctioneers_own_journaled_as_over_the_wire(
    tmp_path: Path,
) -> None:
    from siteagent.client.journal import Journal

    world_run(tmp_path, [job("g1"), job("g2", submit=1)], 0)
    journal = Journal(tmp_path / "journal.db")
    try:
        states = [auction.state for auction in journal.auctions()]
        assert states == [AuctionState.DONE, AuctionState.DONE]
        assert len(journal.entries()) == 2
    finally:
        journal.close()


@pytest.mark.parametrize("mode", [BidMode.NOW, BidMode.FUTURE])
def test_a_seed_gives_the_same_run_every_time(tmp_path: Path, mode: BidMode) -> None:
    specs = (SiteSpec("s1", 16, 0.02, (8,), 100), SiteSpec("s2", 24, 0.03, (8, 16), 100))
    jobs = [
        job(f"g{k}", submit=7 * k, cores=8 * (1 + k % 2), priority=1 + k % 4) for k in range(30)
    ]
    runs = []
    for attempt in range(2):
        work = tmp_path / str(attempt)
        work.mkdir()
        streams = {spec.name: local_tasks(spec, random.Random(spec.name)) for spec in specs}
        sites = make_sites(specs, mode, streams)
        records = World(sites, jobs, 30, work).run()
        runs.append([(r.site, r.start, r.end, r.participation) for r in records])
    assert runs[0] == runs[1]
    assert all(end is not None for _, _, end, _ in runs[0])
