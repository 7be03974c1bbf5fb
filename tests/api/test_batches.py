"""Batch deals over the HTTP API (docs/batches.md): quotes, an all-or-nothing accept and a
confirm with one signature and one booking, each answering per part what the single call
would, and counted against the client's rates by their parts."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

from siteagent.backends.base import ReservationRefused
from siteagent.market.lifecycle import ReservationState
from siteagent.market.reservations import BATCH_RELEASED
from siteagent.protocol import documents
from siteagent.protocol.documents import Receipt
from testbed.inprocess.api_harness import World, make_world, running_world
from testbed.inprocess.parties import Party


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with running_world(tmp_path) as made:
        yield made


def shut(world: World) -> None:
    world.http.close()
    world.app.state.quotes.close()
    world.ledger.close()
    world.site.close()


def error(answer: Any) -> Dict[str, Any]:
    detail: Dict[str, Any] = answer.json()["error"]
    assert detail["message"] and detail["code"]
    return detail


def batch_quote(world: World, party: Party, *requests: Dict[str, Any], **extra: Any) -> Any:
    return world.signed(party, "POST", "/v1/quotes/batch", {"requests": list(requests), **extra})


def offer_ids(world: World, party: Party, count: int, cores: int = 4) -> List[str]:
    """One offer each of ``count`` quotes (small windows at their earliest start)."""
    request = {"cores": cores, "walltime": 600, "limit": 1}
    answer = batch_quote(world, party, *[request] * count)
    assert answer.status_code == 200, answer.text
    return [quote["offers"][0]["offer_id"] for quote in answer.json()["answers"]]


def accept_batch(world: World, party: Party, ids: List[str], **headers: str) -> Any:
    return world.signed(
        party, "POST", "/v1/reservations/batch", {"offer_ids": ids}, extra=headers or None
    )


def confirm_batch(world: World, party: Party, reservations: List[Dict[str, Any]]) -> Any:
    body = documents.batch_confirm_body([r["deal"] for r in reservations], party.key, party.key_id)
    return world.signed(party, "POST", "/v1/reservations/confirm", body)


def state(world: World, reservation_id: str) -> ReservationState:
    record = world.site.store.get_reservation(reservation_id)
    assert record is not None
    return record.state


def test_info_says_the_site_takes_batches(world: World) -> None:
    assert world.http.get("/v1/info").json()["batches"] == {"max_parts": 100}


def test_a_batch_quote_answers_each_request_as_a_quote_would(world: World) -> None:
    now = world.http.get("/v1/slots").json()["now"]
    request = {"cores": 8, "walltime": 3600, "earliest_start": now + 600}  # not "from now"
    single = world.signed(world.alice, "POST", "/v1/quotes", request)
    answer = batch_quote(world, world.alice, request, {"cores": 128, "walltime": 60})
    assert answer.status_code == 200, answer.text
    first, second = answer.json()["answers"]
    window = [(o["start"], o["end"], o["total"]) for o in single.json()["offers"]]
    assert [(o["start"], o["end"], o["total"]) for o in first["offers"]] == window
    assert first["status"] == "offered" and first["chosen"] == single.json()["chosen"]
    assert second["status"] == "refused" and second["refusal"]["field"] == "cores"
    for offer in first["offers"]:  # stored, to be accepted
        assert world.site.store.get_offer(offer["offer_id"]) is not None


def test_an_invalid_request_in_a_batch_names_it(world: World) -> None:
    answer = batch_quote(world, world.alice, {"cores": 8, "walltime": 60}, {"cores": 8})
    assert answer.status_code == 422
    assert error(answer)["field"].startswith("requests")
    too_many = batch_quote(world, world.alice, *[{"cores": 1, "walltime": 60}] * 101)
    assert too_many.status_code == 422


def test_withdrawn_offers_lapse_and_stop_counting(tmp_path: Path) -> None:
    world = make_world(tmp_path, api={"max_live_offers_per_client": 3})
    try:
        request = {"cores": 8, "walltime": 60, "limit": 2}
        first = batch_quote(world, world.alice, request, request).json()["answers"]
        held = [o["offer_id"] for quote in first for o in quote["offers"]]
        assert len(held) == 4
        refused = batch_quote(world, world.alice, request)
        assert refused.status_code == 429 and error(refused)["code"] == "too_many_offers"
        answer = batch_quote(world, world.alice, request, withdraw=held)
        assert answer.status_code == 200, answer.text
        assert answer.json()["withdrawn"] == 4
        lapsed = world.signed(world.alice, "POST", "/v1/reservations", {"offer_id": held[0]})
        assert lapsed.status_code == 409 and error(lapsed)["code"] == "offer_expired"
        theirs = batch_quote(world, world.bob, request, withdraw=[held[1]])  # not bob's
        assert theirs.json()["withdrawn"] == 0
    finally:
        shut(world)


def test_a_batch_counts_as_its_parts_against_the_rate(tmp_path: Path) -> None:
    world = make_world(tmp_path, api={"rate_limits": {"quotes": {"per_second": 0.01, "burst": 5}}})
    try:
        request = {"cores": 1, "walltime": 60, "limit": 1}
        assert batch_quote(world, world.alice, request, request, request).status_code == 200
        refused = batch_quote(world, world.alice, request, request, request)
        assert refused.status_code == 429 and error(refused)["code"] == "rate_limited"
        assert batch_quote(world, world.bob, *[request] * 5).status_code == 200
    finally:
        shut(world)


def test_a_batch_accept_holds_every_part(world: World) -> None:
    ids = offer_ids(world, world.alice, 3)
    answer = accept_batch(world, world.alice, ids)
    assert answer.status_code == 201, answer.text
    reservations = answer.json()["reservations"]
    assert [r["offer_id"] for r in reservations] == ids
    assert {r["state"] for r in reservations} == {"TENTATIVE"}
    names = {res.name for res in world.backend.list_reservations()}
    assert all(r["name"] in names for r in reservations)
    again = accept_batch(world, world.alice, ids)  # a plain retry: the same answer
    assert again.status_code == 201
    assert [r["id"] for r in again.json()["reservations"]] == [r["id"] for r in reservations]


def test_a_batch_that_cannot_be_held_whole_creates_nothing(world: World) -> None:
    """Refused before any part is created (an offer used, or windows that do not fit
    together): nothing held, and the other offers stay acceptable."""
    # 16 cores free at first: two 12-core windows at the same time do not fit together
    wide = offer_ids(world, world.alice, 2, cores=12)
    clash = accept_batch(world, world.alice, wide)
    assert clash.status_code == 409, clash.text
    detail = error(clash)
    assert detail["code"] == "offer_capacity_gone" and detail["field"] == "offer_ids[1]"
    assert [world.site.store.reservation_for_offer(i) for i in wide] == [None, None]
    alone = world.signed(world.alice, "POST", "/v1/reservations", {"offer_id": wide[1]})
    assert alone.status_code == 201, alone.text  # still acceptable: nothing burned
    world.signed(world.alice, "DELETE", f"/v1/reservations/{alone.json()['id']}")
    ids = offer_ids(world, world.alice, 3)
    used = world.signed(world.alice, "POST", "/v1/reservations", {"offer_id": ids[2]})
    assert used.status_code == 201
    answer = accept_batch(world, world.alice, ids)
    assert answer.status_code == 409, answer.text
    detail = error(answer)
    assert detail["code"] == "offer_used" and detail["field"] == "offer_ids[2]"
    assert [world.site.store.reservation_for_offer(i) for i in ids[:2]] == [None, None]
    again = accept_batch(world, world.alice, ids[:2])
    assert again.status_code == 201, again.text


def test_a_batch_whose_part_the_batch_system_refuses_holds_nothing(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = offer_ids(world, world.alice, 3)
    create = world.backend.create_reservation
    calls: List[int] = []

    def third_refused(spec: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise ReservationRefused("no (test)")
        return create(spec)

    monkeypatch.setattr(world.backend, "create_reservation", third_refused)
    answer = accept_batch(world, world.alice, ids)
    assert answer.status_code == 409, answer.text
    detail = error(answer)
    assert detail["code"] == "reservation_failed" and detail["field"] == "offer_ids[2]"
    records = [world.site.store.reservation_for_offer(i) for i in ids]
    assert [r.state for r in records if r is not None] == [
        ReservationState.CANCELLED,
        ReservationState.CANCELLED,
        ReservationState.FAILED,
    ]
    names = {res.name for res in world.backend.list_reservations()}
    assert not names & {r.name for r in records if r is not None}
    for record in records[:2]:  # the history says why, apart from an owner's cancel
        assert record is not None
        (released,) = [
            s for s in world.site.store.history(record.id) if s.to_state.value == "CANCELLED"
        ]
        assert released.reason == f"{BATCH_RELEASED} (offer_ids[2]: {detail['message']})"
    again = accept_batch(world, world.alice, ids)
    assert again.status_code == 409 and error(again)["field"] == "offer_ids[2]"


def test_a_batch_confirm_signs_once_and_books_once(world: World) -> None:
    held = accept_batch(world, world.alice, offer_ids(world, world.alice, 3)).json()
    reservations = held["reservations"]
    answer = confirm_batch(world, world.alice, reservations)
    assert answer.status_code == 200, answer.text
    confirmed = answer.json()["reservations"]
    assert {r["state"] for r in confirmed} == {"CONFIRMED"}
    ids = [documents.deal_id(r["deal"]) for r in reservations]
    site_key = world.context.deals.site_key.public_key()
    for part in confirmed:
        receipt = Receipt.from_json(part["receipt"])
        assert receipt.receipt_ids == tuple(ids) and receipt.id in ids
        assert receipt.signed_by_user(world.alice.key.public_key())
        assert documents.signature_valid(receipt.countersigned(), receipt.site_signature, site_key)
        assert part["ledger_transaction"] is not None
    total = sum(Decimal(r["total"]) for r in reservations)
    assert world.ledger.balance("alice@laptop") == -total
    again = confirm_batch(world, world.alice, reservations)  # a retry answers as they are
    assert again.status_code == 200
    assert [r["receipt"] for r in again.json()["reservations"]] == [r["receipt"] for r in confirmed]
    assert world.ledger.balance("alice@laptop") == -total


def test_a_batch_the_buyer_cannot_pay_changes_nothing(world: World) -> None:
    bob = world.bob
    reservations = accept_batch(world, bob, offer_ids(world, bob, 2)).json()["reservations"]
    one = Decimal(reservations[0]["total"])
    world.ledger.register(bob.key_id, "user", bob.key.public_key(), credit=one)  # one, not two
    before = world.counts()
    answer = confirm_batch(world, bob, reservations)
    assert answer.status_code == 402 and error(answer)["code"] == "insufficient_funds"
    assert world.counts() == before
    assert world.ledger.balance(bob.key_id) == 0
    assert {state(world, r["id"]) for r in reservations} == {ReservationState.TENTATIVE}


def test_a_batch_confirm_refuses_a_part_it_does_not_match(world: World) -> None:
    reservations = accept_batch(world, world.alice, offer_ids(world, world.alice, 2)).json()[
        "reservations"
    ]
    deals = [r["deal"] for r in reservations]
    body = documents.batch_confirm_body(deals, world.alice.key, world.alice.key_id)
    body["parts"][1]["receipt_id"] = "0" * 64
    forged = world.signed(world.alice, "POST", "/v1/reservations/confirm", body)
    assert forged.status_code == 422
    assert error(forged)["code"] in ("bad_confirm_signature", "deal_mismatch")
    resigned = documents.batch_confirm_body(deals, world.alice.key, world.alice.key_id)
    resigned["parts"].reverse()  # the ids no longer in the order signed
    assert (
        world.signed(world.alice, "POST", "/v1/reservations/confirm", resigned).json()["error"][
            "code"
        ]
        == "bad_confirm_signature"
    )
    theirs = confirm_batch(world, world.bob, reservations)
    assert theirs.status_code == 403 and error(theirs)["field"] == "parts[0].reservation_id"
    assert {state(world, r["id"]) for r in reservations} == {ReservationState.TENTATIVE}


def test_an_interrupted_batch_is_released_by_housekeeping(world: World) -> None:
    """What a kill between two parts leaves (the batch journaled open, its first part held)
    is released by the next cycle: nothing of the batch stays held."""
    ids = offer_ids(world, world.alice, 2)
    manager = world.site.manager
    manager.store.open_batch("alice@laptop", "k1", ids, manager.clock())
    with manager.store.exclusive():
        first = manager._create(ids[0], "alice@laptop", "k1#0", ("alice",), ())
    assert first.state is ReservationState.TENTATIVE
    report = manager.reconciler.housekeeping()
    assert report.reconciliation.batches_released == ["k1"]
    assert state(world, first.id) is ReservationState.CANCELLED
    assert first.name not in {res.name for res in world.backend.list_reservations()}
    retried = accept_batch(world, world.alice, ids, **{"Idempotency-Key": "k1"})
    assert retried.status_code == 409 and error(retried)["code"] == "reservation_failed"
