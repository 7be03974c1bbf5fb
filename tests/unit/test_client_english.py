"""The English auction, the auctioneer's side: the auction's length and rounds, the standing bid
and who is asked to beat it, the ranking at the close, the jobs file, and the auctioneer
against in-memory sites (testbed.inprocess.bidders): the highest bid reserved and the others
released,
the next bid when the winner refuses, no bid, a dead site, and a stream whose auctions open
at their jobs' arrival, the highest priority first."""

from __future__ import annotations

import json
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence

import pytest

from siteagent.client.auctioneer import Auctioneer, JobAuction
from siteagent.client.english import (
    EnglishAuction,
    Raise,
    auction_length,
    round_starts,
)
from siteagent.client.jobs import Job, JobsFileError, load_jobs, mean_walltime
from siteagent.client.journal import AuctionState, HoldState, Journal
from siteagent.protocol.models import AuctionedJob, BidAnswer
from testbed.inprocess.bidders import FakeBidder, FakeSites

JOB = AuctionedJob(cores=8, walltime=600)


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    opened = Journal(tmp_path / "client.db")
    yield opened
    opened.close()


def bidders(**values: Sequence[Optional[str]]) -> FakeSites:
    return FakeSites(
        {name: FakeBidder(name, values=list(v), clock=time.time) for name, v in values.items()}
    )


def answer(
    state: str, value: Optional[str] = None, offer_id: str = "o1", expires: int = 10**10
) -> BidAnswer:
    """A site's answer as the API gives it: an open bid of ``value``, or none."""
    document: Dict[str, object] = {
        "auction_id": "a",
        "state": state,
        "now": 0,
        "closes_at": 0,
        "held_until": 0,
        "updates": 1,
    }
    if value is not None:
        offer = {
            "offer_id": offer_id,
            "start": 100,
            "end": 700,
            "cores": 8,
            "unit_price": "1",
            "fee": "0",
            "total": "1.33",
            "expires": expires,
        }
        document["bid"] = {
            "value": value,
            "cores_value": value,
            "displacement": "0",
            "transfer": "0",
            "transfer_s": 0,
            "offer": offer,
        }
    else:
        document["refusal"] = {"code": "no_capacity", "reason": "busy", "field": None}
    return BidAnswer.model_validate(document)


# --------------------------------------------------------------------------- length and rounds


def test_an_auction_lasts_k_times_the_mean_run_time() -> None:
    assert auction_length(0.35, 1000) == pytest.approx(350)
    assert auction_length(0, 1000) == 0
    with pytest.raises(ValueError):
        auction_length(-0.1, 1000)


def test_rounds_are_spread_over_the_auction_at_least_a_second_apart() -> None:
    assert round_starts(10, 5) == [0, 2, 4, 6, 8]
    assert round_starts(2.5, 5) == [0, 1.25]
    assert round_starts(0, 5) == [0]  # an auction of no length: the announcement only


# --------------------------------------------------------------------------- the auction


def test_the_standing_bid_is_the_highest_and_others_are_asked_to_beat_it() -> None:
    auction = EnglishAuction("a", JOB, ["s1", "s2", "s3"], closes_at=10)
    assert auction.call("s1").to_beat is None  # the announcement: any bid
    auction.record("s1", answer("open", "5", "o1"), 1)
    auction.record("s2", answer("open", "7", "o2"), 1)
    auction.record("s3", answer("none"), 1)
    assert auction.standing == ("s2", Decimal(7))
    assert auction.call("s1").to_beat == Decimal(7)
    assert auction.call("s3").to_beat == Decimal(7)
    assert auction.call("s2").to_beat is None  # the leader is not asked to beat itself
    assert auction.raises == [Raise("s1", Decimal(5), 1), Raise("s2", Decimal(7), 1)]
    assert auction.bidders == {"s1", "s2"}


def test_a_start_price_is_what_a_first_bid_must_beat() -> None:
    auction = EnglishAuction("a", JOB, ["s1"], closes_at=10, start_price=Decimal("2.5"))
    assert auction.call("s1").to_beat == Decimal("2.5")


def test_the_standing_bids_history_only_rises() -> None:
    auction = EnglishAuction("a", JOB, ["s1", "s2"], closes_at=10)
    auction.record("s1", answer("open", "5", "o1"), 1)
    auction.record("s2", answer("none"), 1)
    auction.record("s1", answer("open", "3", "o3"), 2)  # revised down: its capacity was taken
    auction.record("s2", answer("open", "4", "o4"), 3)  # beats the standing bid: a raise
    assert [r.value for r in auction.raises] == [Decimal(5), Decimal(4)]
    assert auction.standing == ("s2", Decimal(4))


def test_ties_go_to_the_bid_that_arrived_first_and_expired_offers_are_no_candidates() -> None:
    auction = EnglishAuction("a", JOB, ["s1", "s2", "s3"], closes_at=10)
    auction.record("s2", answer("open", "5", "o2"), 1)
    auction.record("s1", answer("open", "5", "o1"), 1)
    auction.record("s3", answer("open", "9", "o3", expires=50), 1)
    assert auction.standing == ("s3", Decimal(9))
    assert [bid.offer_id for bid in auction.candidates(now=10)] == ["o3", "o2", "o1"]
    assert [bid.offer_id for bid in auction.candidates(now=50)] == ["o2", "o1"]


def test_every_site_that_took_part_but_the_winner_is_released() -> None:
    auction = EnglishAuction("a", JOB, ["s1", "s2", "s3", "s4"], closes_at=10)
    auction.record("s1", answer("open", "5"), 1)
    auction.record("s2", answer("none"), 1)
    auction.fail("s3", "no answer", dropped=True)
    assert auction.holders(winner="s1") == ["s2", "s3"]
    assert auction.asked == ["s1", "s2", "s4"]


# --------------------------------------------------------------------------- the jobs file


def write(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_the_jobs_file_gives_jobs_in_arrival_order_highest_priority_first(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "jobs": [
                {"cores": 4, "walltime": "10m", "priority": 1, "submit": 5},
                {"name": "urgent", "cores": 8, "walltime": 60, "priority": 4, "submit": 5},
                {"cores": 2, "walltime": "1h", "input_bytes": 10, "input_site": "hpc2"},
            ]
        },
    )
    jobs = load_jobs(path)
    assert [job.name for job in jobs] == ["job-3", "urgent", "job-1"]
    assert jobs[0].job == AuctionedJob(cores=2, walltime=3600, input_bytes=10, input_site="hpc2")
    assert jobs[2].job.walltime == 600 and jobs[2].submit == 5
    assert mean_walltime(jobs) == pytest.approx((3600 + 60 + 600) / 3)


@pytest.mark.parametrize(
    ("document", "said"),
    [
        ({"jobs": [{"cores": 4, "walltime": 60, "priorty": 2}]}, "jobs[0].priorty"),
        ({"jobs": [{"cores": 0, "walltime": 60}]}, "jobs[0].cores"),
        ({"jobs": [{"cores": 4, "walltime": "soon"}]}, "jobs[0].walltime"),
        ({"jobs": [{"cores": 4, "walltime": 60, "submit": -1}]}, "jobs[0].submit"),
        ({"jobs": [{"name": "a", "cores": 1, "walltime": 1}] * 2}, "named a more than once"),
        ({"jobs": []}, "at least one job"),
        ({"job": []}, "one key, jobs"),
    ],
)
def test_a_bad_jobs_file_is_refused_naming_the_job_and_key(
    tmp_path: Path, document: object, said: str
) -> None:
    path = write(tmp_path, document)
    with pytest.raises(JobsFileError) as refused:
        load_jobs(path)
    assert str(refused.value).startswith(f"{path}:") and said in str(refused.value)


# --------------------------------------------------------------------------- the auctioneer


def place(journal: Journal, sites: FakeSites, length_s: float = 0.0, rounds: int = 5) -> JobAuction:
    with Auctioneer(sites, journal, length_s, rounds) as auctioneer:
        return auctioneer.place(Job("j", JOB))


def test_the_highest_bid_is_reserved_and_the_others_released(journal: Journal) -> None:
    sites = bidders(s1=["3"], s2=["8"], s3=[None])
    placement = place(journal, sites)
    assert placement.state == "placed" and placement.site == "s2"
    assert placement.value == Decimal(8)
    assert placement.bidders == ("s1", "s2") and placement.participation == pytest.approx(2 / 3)
    winner = sites.sites["s2"]
    assert [held.state for held in winner.reservations.values()] == ["CONFIRMED"]
    assert placement.reservation_id in winner.reservations
    for loser in ("s1", "s3"):
        assert sites.sites[loser].released == [placement.auction_id]
        assert sites.sites[loser].reservations == {}
    assert winner.released == []
    assert journal.auction(placement.auction_id).state is AuctionState.DONE
    assert [entry.state for entry in journal.entries(placement.auction_id)] == [HoldState.CONFIRMED]


def test_later_rounds_name_the_standing_bid_and_bids_rise(journal: Journal) -> None:
    sites = bidders(s1=["3", "3", "9"], s2=["5"])
    placement = place(journal, sites, length_s=3.0, rounds=3)
    assert placement.rounds == 3
    assert [r.value for r in placement.raises] == [Decimal(3), Decimal(5), Decimal(9)]
    s1, s2 = sites.sites["s1"].bids, sites.sites["s2"].bids
    assert [to_beat for _, to_beat in s1] == [None, Decimal(5), Decimal(5)]
    assert [to_beat for _, to_beat in s2] == [None, None, None]  # it led until round 3 ended
    assert placement.site == "s1" and placement.value == Decimal(9)
    assert sites.sites["s2"].released == [placement.auction_id]
    rounds = journal.rounds(placement.auction_id)
    assert [(r["leader"], r["standing"]) for r in rounds] == [("s2", "5"), ("s2", "5"), ("s1", "9")]


def test_a_winner_that_refuses_leaves_the_job_to_the_next_bid(journal: Journal) -> None:
    sites = bidders(s1=["9"], s2=["4"])
    sites.sites["s1"].capacity = 0  # its capacity is gone when accepted
    placement = place(journal, sites)
    assert placement.state == "placed" and placement.site == "s2"
    assert sites.sites["s1"].released == [placement.auction_id]
    states = [entry.state for entry in journal.entries(placement.auction_id)]
    assert states == [HoldState.REFUSED, HoldState.CONFIRMED]


def test_no_bid_leaves_the_job_unplaced_saying_why(journal: Journal) -> None:
    sites = bidders(s1=[None], s2=[None])
    placement = place(journal, sites)
    assert placement.state == "unplaced" and placement.site is None
    assert "s1: no_capacity" in placement.message and "s2: no_capacity" in placement.message
    assert all(site.released == [placement.auction_id] for site in sites.sites.values())
    assert journal.auction(placement.auction_id).state is AuctionState.FAILED


def test_a_site_that_does_not_answer_is_not_asked_again(journal: Journal) -> None:
    sites = bidders(s1=["2"], s2=["6"])
    sites.sites["s2"].down = True
    placement = place(journal, sites, length_s=2.0, rounds=2)
    assert placement.site == "s1" and placement.answered == ("s1",)
    assert len(sites.sites["s1"].bids) == 2 and sites.sites["s2"].bids == []


def test_a_stream_opens_each_auction_at_its_jobs_arrival_none_waiting_for_another(
    journal: Journal,
) -> None:
    """Three jobs: two arriving at once (the higher priority opens first) and one a second
    later, whose auction opens while the first two are still open."""
    sites = bidders(s1=["1"])
    jobs = [
        Job("low", JOB.model_copy(update={"priority": 1})),
        Job("high", JOB.model_copy(update={"priority": 3})),
        Job("later", JOB, submit=1.0),
    ]
    jobs.sort(key=lambda job: (job.submit, -job.job.priority))
    opened: List[str] = []
    lock = threading.Lock()
    original = journal.open_auction

    def opening(request):  # type: ignore[no-untyped-def]
        with lock:
            opened.append(request["english"]["name"])
        return original(request)

    journal.open_auction = opening  # type: ignore[method-assign]
    with Auctioneer(sites, journal, length_s=2.0, rounds=1) as auctioneer:
        placements = auctioneer.run(jobs)
    assert opened == ["high", "low", "later"]
    assert [p.job.name for p in placements] == ["high", "low", "later"]
    assert all(p.state == "placed" for p in placements)
    later = placements[2]
    assert later.opened_at < placements[0].decided_at  # it did not wait for the others


def test_when_the_leader_withdraws_at_the_close_the_outbid_sites_are_asked_again(
    journal: Journal,
) -> None:
    """In the last round the leader's capacity went and the other site, told to beat the
    leader, held nothing: it is asked once more, with nothing to beat, and wins."""
    sites = bidders(s1=["9", None], s2=["5"])
    placement = place(journal, sites, length_s=2.0, rounds=2)
    assert placement.state == "placed" and placement.site == "s2"
    assert placement.rounds == 3
    assert [to_beat for _, to_beat in sites.sites["s2"].bids] == [None, Decimal(9), None]


def test_when_the_winner_refuses_and_the_others_were_outbid_they_are_asked_again(
    journal: Journal,
) -> None:
    sites = bidders(s1=["9"], s2=["5"])
    sites.sites["s1"].capacity = 0  # its capacity is gone when accepted
    placement = place(journal, sites, length_s=2.0, rounds=2)
    assert placement.state == "placed" and placement.site == "s2"
    states = [entry.state for entry in journal.entries(placement.auction_id)]
    assert states == [HoldState.REFUSED, HoldState.REFUSED, HoldState.CONFIRMED]
