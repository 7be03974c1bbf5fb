"""English auctions through the HTTP API in process: a site bids for an announced job and holds
the capacity it offers, never offers it again to another auction nor to a quote's offer,
releases it at once when its bid is lost or outbid, and turns a won bid into a reservation
through the ordinary accept and confirm.

The world is 64 cores with 48 busy for two hours and a 48-core job queued behind them
(testbed.inprocess.api_harness): 16 cores are free now.
"""

from __future__ import annotations

import itertools
import math
import time
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from siteagent.core.values import ReservationSpec
from siteagent.market.lifecycle import BidState
from siteagent.protocol import documents
from testbed.inprocess.api_harness import World, make_world, running_world
from testbed.inprocess.parties import Party

_ids = itertools.count()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with running_world(tmp_path) as made:
        yield made


def now(world: World) -> int:
    return int(world.site.manager.clock())


def call(
    world: World,
    party: Party,
    auction_id: str,
    cores: int = 8,
    walltime: int = 3600,
    closes_in: int = 30,
    **fields: Any,
) -> Any:
    """POST /v1/bids; the closing time is kept per auction id, as an auctioneer keeps it."""
    closes_at = CLOSING.setdefault((world.site.store.path, auction_id), now(world) + closes_in)
    job = {"cores": cores, "walltime": walltime, **fields.pop("job", {})}
    body = {"auction_id": auction_id, "job": job, "closes_at": closes_at, **fields}
    return world.signed(party, "POST", "/v1/bids", body)


CLOSING: Dict[Tuple[str, str], int] = {}


def bid(world: World, party: Party, auction_id: str = "", **fields: Any) -> Dict[str, Any]:
    answer = call(world, party, auction_id or f"a{next(_ids)}", **fields)
    assert answer.status_code == 200, answer.text
    body: Dict[str, Any] = answer.json()
    return body


def window(answer: Dict[str, Any]) -> Tuple[int, int, int]:
    offer = answer["bid"]["offer"]
    return offer["start"], offer["end"], offer["cores"]


def overcommitted(windows: List[Tuple[int, int, int]], free: int, until: int) -> bool:
    """Whether the windows ever need more than ``free`` cores before ``until``."""
    instants = sorted({t for start, end, _ in windows for t in (start, end) if t < until})
    return any(
        sum(cores for start, end, cores in windows if start <= t < end) > free for t in instants
    )


def test_a_bid_values_the_job_and_offers_its_window(world: World) -> None:
    answer = bid(world, world.alice, cores=8, closes_in=30)
    assert answer["state"] == "open" and answer["updates"] == 1
    made = answer["bid"]
    assert Decimal(made["value"]) == Decimal(made["cores_value"]) - Decimal(
        made["displacement"]
    ) - Decimal(made["transfer"])
    assert Decimal(made["cores_value"]) == Decimal("8.000")  # free at the earliest start
    offer = made["offer"]
    window_s = world.site.config.auctions.accept_window_s
    assert answer["held_until"] == answer["closes_at"] + window_s
    assert offer["start"] >= answer["held_until"] == offer["expires"]  # accepted before it starts
    assert offer["end"] - offer["start"] == 3600 and offer["cores"] == 8
    record = world.site.store.bid(world.alice.key_id, answer["auction_id"])
    assert record is not None and record.state is BidState.OPEN
    assert record.offer_id == offer["offer_id"]


def test_concurrent_auctions_never_get_the_same_cores(world: World) -> None:
    """Three hour-long 12-core jobs, 16 cores free for two hours: each bid is valued around the
    others' held windows, so the second waits for the first, and the third, which would wait
    more than its walltime, gets no bid: the site has no capacity left for it."""
    answers = [bid(world, world.alice, cores=12, closes_in=30) for _ in range(3)]
    assert [answer["state"] for answer in answers] == ["open", "open", "none"]
    assert answers[2]["refusal"]["code"] == "no_capacity"
    windows = [window(answer) for answer in answers[:2]]
    assert not overcommitted(windows, 16, now(world) + 7200)
    assert windows[1][0] == windows[0][1]  # the second starts when the first ends


def test_a_bid_holds_its_cores_against_a_quotes_offer(world: World) -> None:
    quoted = world.signed(world.bob, "POST", "/v1/quotes", {"cores": 16, "walltime": 3600})
    soonest = min(quoted.json()["offers"], key=lambda offer: offer["start"])
    held = bid(world, world.alice, cores=12, closes_in=0)
    assert window(held)[0] <= soonest["start"] < window(held)[1]
    taking = {"offer_id": soonest["offer_id"]}
    accepted = world.signed(world.bob, "POST", "/v1/reservations", taking)
    assert accepted.status_code == 409
    assert accepted.json()["error"]["code"] == "offer_capacity_gone"


def test_the_winning_bid_is_accepted_and_confirmed_as_any_offer(world: World) -> None:
    answer = bid(world, world.alice, cores=8)
    offer_id = answer["bid"]["offer"]["offer_id"]
    accepted = world.signed(world.alice, "POST", "/v1/reservations", {"offer_id": offer_id})
    assert accepted.status_code == 201, accepted.text
    reservation = accepted.json()
    assert reservation["state"] == "TENTATIVE" and reservation["deal"]["offer"]["id"] == offer_id
    body = documents.confirm_body(reservation["deal"], world.alice.key, world.alice.key_id)
    path = f"/v1/reservations/{reservation['id']}/confirm"
    confirmed = world.signed(world.alice, "POST", path, body)
    assert confirmed.status_code == 200 and confirmed.json()["state"] == "CONFIRMED"
    again = bid(world, world.alice, answer["auction_id"])
    assert again["state"] == "won" and again["bid"]["offer"]["offer_id"] == offer_id
    figures = world.site.store.bid_figures()
    assert (figures.won, figures.held_units, figures.open_auctions) == (1, 0, 0)


def test_a_won_bids_reservation_is_held_before_the_next_poll_sees_it(world: World) -> None:
    """The agent's view is a poll old: a bid made after an accept still counts its
    reservation, from the store."""
    first = bid(world, world.alice, cores=16)
    offer_id = first["bid"]["offer"]["offer_id"]
    accepted = world.signed(world.alice, "POST", "/v1/reservations", {"offer_id": offer_id})
    assert accepted.status_code == 201
    second = bid(world, world.alice, cores=16)
    assert not overcommitted([window(first), window(second)], 16, now(world) + 7200)


def test_a_lost_bid_is_released_at_once_and_its_offer_lapses(world: World) -> None:
    held = bid(world, world.alice, cores=16)
    released = world.signed(world.alice, "DELETE", f"/v1/bids/{held['auction_id']}")
    assert released.status_code == 200, released.text
    body = released.json()
    assert body["state"] == "released" and body["refusal"]["code"] == "lost"
    late = world.signed(
        world.alice, "POST", "/v1/reservations", {"offer_id": held["bid"]["offer"]["offer_id"]}
    )
    assert late.status_code == 409 and late.json()["error"]["code"] == "offer_expired"
    after = bid(world, world.alice, cores=16)
    assert window(after)[0] == window(held)[0]  # the capacity is free again
    assert world.signed(world.alice, "DELETE", f"/v1/bids/{held['auction_id']}").json() == body


def test_an_outbid_site_holds_nothing_and_bids_again_when_it_can_beat_the_standing_bid(
    world: World,
) -> None:
    held = bid(world, world.alice, cores=8)
    value = Decimal(held["bid"]["value"])
    outbid = bid(world, world.alice, held["auction_id"], cores=8, to_beat=str(value))
    assert outbid["state"] == "none" and outbid["refusal"]["code"] == "outbid"
    assert world.site.store.bid_figures().held_units == 0
    other = bid(world, world.alice, cores=16, walltime=1800)
    assert window(other)[0] <= window(held)[0]  # what it held is another auction's now
    back = bid(world, world.alice, held["auction_id"], cores=8, to_beat=str(value - 5))
    assert back["state"] == "open" and window(back)[0] >= window(other)[1]
    assert Decimal(back["bid"]["value"]) < value  # it waits for the other auction's hold
    assert back["bid"]["offer"]["offer_id"] != held["bid"]["offer"]["offer_id"]


def test_a_bid_asked_again_stands_while_its_capacity_is_free(world: World) -> None:
    first = bid(world, world.alice, cores=8)
    again = bid(world, world.alice, first["auction_id"], cores=8)
    assert again["updates"] == 2
    assert again["bid"] == first["bid"]  # same offer, same value: bids never fall by choice


def test_a_bid_whose_capacity_the_batch_system_took_is_revised(world: World) -> None:
    first = bid(world, world.alice, cores=16)
    start, end, _ = window(first)
    maintenance = ReservationSpec("admin-maintenance", start, end - start, 16)
    world.site.manager.backend.create_reservation(maintenance)  # the administrator's own
    world.context.agent.cycle()
    revised = bid(world, world.alice, first["auction_id"], cores=16)
    assert revised["state"] == "open" and window(revised)[0] >= end
    assert revised["bid"]["offer"]["offer_id"] != first["bid"]["offer"]["offer_id"]
    stale = world.signed(
        world.alice, "POST", "/v1/reservations", {"offer_id": first["bid"]["offer"]["offer_id"]}
    )
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "offer_expired"


def test_a_job_the_site_cannot_hold_gets_no_bid_saying_why(world: World) -> None:
    wide = bid(world, world.alice, cores=100)
    assert wide["state"] == "none"
    assert wide["refusal"] == {
        "code": "unsatisfiable",
        "reason": "100 cores asked, the site has 64",
        "field": "job.cores",
    }
    busy = bid(world, world.alice, cores=64, walltime=3600)
    assert busy["state"] == "none" and busy["refusal"]["code"] == "no_capacity"
    assert "bid" not in busy


def test_a_site_bidding_only_what_is_free_now_bids_no_later_window(tmp_path: Path) -> None:
    """``auctions.mode: now``: 16 cores are free now; a 32-core job for two hours, which a
    site bidding windows places about two hours on, gets no bid, and a 16-core one a window at
    the earliest start worth all its core-hours. The replayed cluster names no priorities, so
    its running jobs are never counted on being suspended."""
    (tmp_path / "future").mkdir()
    (tmp_path / "now").mkdir()
    future = make_world(tmp_path / "future")
    try:
        assert future.site.config.auctions.mode.value == "future"
        assert bid(future, future.alice, cores=32, walltime=7200)["state"] == "open"
    finally:
        future.http.close()
        future.app.state.quotes.close()
        future.ledger.close()
        future.site.close()
    world = make_world(tmp_path / "now", auctions={"mode": "now"})
    try:
        assert world.site.config.auctions.mode.value == "now"
        later = bid(world, world.alice, cores=32, walltime=7200)
        assert later["state"] == "none" and later["refusal"]["code"] == "no_capacity"
        assert "free from now" in later["refusal"]["reason"]
        fits = bid(world, world.alice, cores=16)
        assert fits["state"] == "open"
        assert window(fits)[0] == fits["held_until"]
        assert Decimal(fits["bid"]["cores_value"]) == Decimal("16.000")
    finally:
        world.http.close()
        world.app.state.quotes.close()
        world.ledger.close()
        world.site.close()


def test_the_input_transfer_is_counted_unless_the_input_is_here(world: World) -> None:
    size = 10**9
    rate = world.site.config.auctions.transfer_rate
    remote = bid(world, world.alice, cores=8, job={"input_bytes": size, "input_site": "hpc2"})
    assert remote["bid"]["transfer_s"] == math.ceil(size / rate)
    assert Decimal(remote["bid"]["transfer"]) > 0
    local = bid(world, world.alice, cores=8, job={"input_bytes": size, "input_site": "hpc1"})
    assert local["bid"]["transfer_s"] == 0 and Decimal(local["bid"]["transfer"]) == 0


def test_an_auction_announced_again_with_another_job_is_409(world: World) -> None:
    first = bid(world, world.alice, cores=8)
    changed = call(world, world.alice, first["auction_id"], cores=4)
    assert changed.status_code == 409
    assert changed.json()["error"] == {
        "code": "auction_conflict",
        "message": f"auction {first['auction_id']} was announced with another job or closing "
        "time; a new auction needs a new id",
        "field": "auction_id",
    }


@pytest.mark.parametrize("closes_in", [-3600, 7 * 3600])
def test_an_auction_closing_in_the_past_or_too_far_ahead_is_422(
    world: World, closes_in: int
) -> None:
    answer = call(world, world.alice, f"c{closes_in}", closes_in=closes_in)
    assert answer.status_code == 422
    assert answer.json()["error"]["field"] == "closes_at"
    assert world.site.store.bid(world.alice.key_id, f"c{closes_in}") is None


def test_a_client_takes_the_site_into_a_bounded_number_of_auctions(world: World) -> None:
    config = world.site.config
    world.site.config = config.model_copy(
        update=dict(auctions=config.auctions.model_copy(update=dict(max_open_per_client=2)))
    )
    bid(world, world.alice, cores=1)
    bid(world, world.alice, cores=1)
    refused = call(world, world.alice, "third", cores=1)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "too_many_bids"
    assert int(refused.headers["retry-after"]) >= 1
    assert bid(world, world.bob, cores=1)["state"] == "open"  # another client's share


def test_bids_are_one_clients_own(world: World) -> None:
    held = bid(world, world.alice, cores=8)
    stranger = world.signed(world.bob, "DELETE", f"/v1/bids/{held['auction_id']}")
    assert stranger.status_code == 404 and stranger.json()["error"]["code"] == "unknown_bid"
    taken = world.signed(
        world.bob, "POST", "/v1/reservations", {"offer_id": held["bid"]["offer"]["offer_id"]}
    )
    assert taken.status_code == 404 and taken.json()["error"]["code"] == "unknown_offer"
    unsigned = world.http.post("/v1/bids", json={"auction_id": "x"})
    assert unsigned.status_code == 401


def test_bids_count_against_their_own_rate(tmp_path: Path) -> None:
    world = make_world(tmp_path, api={"rate_limits": {"bids": {"per_second": 0.01, "burst": 2}}})
    try:
        assert call(world, world.alice, "r1").status_code == 200
        assert call(world, world.alice, "r2").status_code == 200
        limited = call(world, world.alice, "r3")
        assert limited.status_code == 429 and limited.json()["error"]["code"] == "rate_limited"
        quoted = world.signed(world.alice, "POST", "/v1/quotes", {"cores": 1, "walltime": 60})
        assert quoted.status_code == 200  # quotes have a rate of their own
        rendered = world.context.metrics.render()[0].decode()  # type: ignore[union-attr]
        assert 'siteagent_rate_limited_requests_total{kind="bids"} 1.0' in rendered
    finally:
        world.http.close()
        world.app.state.quotes.close()
        world.ledger.close()
        world.site.close()


def test_the_cycle_releases_bids_whose_auction_ended_and_the_metrics_say_so(
    world: World,
) -> None:
    held = bid(world, world.alice, cores=8)
    won = bid(world, world.alice, cores=4)
    accepted = world.signed(
        world.alice, "POST", "/v1/reservations", {"offer_id": won["bid"]["offer"]["offer_id"]}
    )
    assert accepted.status_code == 201
    bid(world, world.alice, cores=100)  # takes part without a bid
    world.context.agent.cycle()
    rendered = metrics(world)
    assert rendered["siteagent_auctions_open"] == 2
    assert rendered["siteagent_auction_held_cores"] == 8
    assert rendered["siteagent_auction_bids_made_total"] == 2
    assert rendered["siteagent_auction_bids_won_total"] == 1
    clock, ahead = world.site.manager.clock, held["held_until"] - now(world) + 1
    world.site.manager.clock = lambda: clock() + ahead
    world.context.agent.cycle()
    record = world.site.store.bid(world.alice.key_id, held["auction_id"])
    assert record is not None and record.state is BidState.RELEASED
    assert record.reason_code == "auction_ended"
    rendered = metrics(world)
    assert rendered["siteagent_auctions_open"] == 0
    assert rendered["siteagent_auction_held_cores"] == 0
    assert rendered["siteagent_auction_bids_made_total"] == 2


def metrics(world: World) -> Dict[str, float]:
    text = world.context.metrics.render()[0].decode()  # type: ignore[union-attr]
    return {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line.startswith("siteagent_auction")
    }


def test_time_is_the_sites_clock(world: World) -> None:
    """The replayed cluster runs on the wall clock at speed 1: auctions close in epoch
    seconds the auctioneer and the site share."""
    assert abs(now(world) - time.time()) < 5


def test_a_quote_never_offers_what_an_open_bid_holds(world: World) -> None:
    """Bob's accept of the soonest window Alice's open bid leaves is taken, not refused
    (409 offer_capacity_gone): the quote was priced around the held cores."""
    held = bid(world, world.alice, cores=12, closes_in=0)
    quoted = world.signed(world.bob, "POST", "/v1/quotes", {"cores": 16, "walltime": 3600})
    assert quoted.status_code == 200, quoted.text
    offers = quoted.json()["offers"]
    start, end, _ = window(held)
    assert all(offer["end"] <= start or offer["start"] >= end for offer in offers)
    soonest = min(offers, key=lambda offer: offer["start"])
    taking = {"offer_id": soonest["offer_id"]}
    assert world.signed(world.bob, "POST", "/v1/reservations", taking).status_code == 201


def test_what_a_bid_may_hold_is_bounded_and_counted_against_its_buyer(world: World) -> None:
    """The default allowance: 24 hours of the whole machine (64 cores here) per buyer."""
    hoard = call(world, world.alice, "hoard", cores=64, walltime=30 * 86400, closes_in=6 * 3600)
    assert hoard.status_code == 422, hoard.text
    assert hoard.json()["error"]["field"] == "job.walltime"
    assert "auctions.max_held_machine_hours" in hoard.json()["error"]["message"]
    first = bid(world, world.alice, cores=16, walltime=20 * 3600, closes_in=60)  # 5 h of 64
    assert first["state"] == "open"
    more = call(world, world.alice, "more", cores=16, walltime=80 * 3600, closes_in=60)
    assert more.status_code == 429, more.text  # 5 + 20 hours of the machine: more than 24
    assert more.json()["error"]["code"] == "too_many_bids"
    assert int(more.headers["retry-after"]) >= 1
    other = call(world, world.bob, "bobs", cores=16, walltime=80 * 3600, closes_in=60)
    assert other.status_code == 200, other.text  # bob's own allowance
