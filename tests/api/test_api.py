"""The HTTP API in process (FastAPI's TestClient) on a replayed cluster: what a buyer sees,
the signed two-phase commit down to the ledger, and every refusal with its status and code."""

from __future__ import annotations

import base64
import inspect
import json
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest
from fastapi.routing import APIRoute

from siteagent.core.defaults import DEFAULT_OFFER_VALID_S
from siteagent.core.usage import JobUsage
from siteagent.core.waits import QueueWait
from siteagent.ledger.bank import Ledger, LedgerUnavailable, Transaction
from siteagent.market.quoting import ACCEPT_LEAD_S
from siteagent.pricing import Pricing
from siteagent.protocol import documents, keys, signing
from siteagent.protocol.documents import Cancellation, Receipt
from testbed.inprocess.api_harness import World, running_world
from testbed.inprocess.parties import Party

DAY = 86400


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with running_world(tmp_path) as made:
        yield made


def quote(world: World, party: Party, **fields: Any) -> Dict[str, Any]:
    answer = world.signed(party, "POST", "/v1/quotes", {"cores": 8, "walltime": 3600, **fields})
    assert answer.status_code == 200, answer.text
    body: Dict[str, Any] = answer.json()
    return body


def reserve(world: World, party: Party, **fields: Any) -> Dict[str, Any]:
    """Quote, and accept the offer with the highest fee (so a cancellation costs something)."""
    offers = quote(world, party, **fields)["offers"]
    best = max(offers, key=lambda offer: Decimal(offer["fee"]))
    answer = world.signed(party, "POST", "/v1/reservations", {"offer_id": best["offer_id"]})
    assert answer.status_code == 201, answer.text
    body: Dict[str, Any] = answer.json()
    return body


def confirm(world: World, party: Party, reservation: Dict[str, Any]) -> Any:
    body = documents.confirm_body(reservation["deal"], party.key, party.key_id)
    return world.signed(party, "POST", f"/v1/reservations/{reservation['id']}/confirm", body)


def error(answer: Any) -> Dict[str, Any]:
    detail: Dict[str, Any] = answer.json()["error"]
    assert detail["message"] and detail["code"]
    return detail


# --------------------------------------------------------------------------- reads


def test_info_describes_the_site_its_prices_and_key(world: World) -> None:
    info = world.http.get("/v1/info").json()
    assert info["site"]["name"] == "hpc1" and info["site"]["architecture"] == "x86_64"
    assert info["cluster"]["cores"] == 64 and info["cluster"]["unit"] == "core"
    assert info["pricing"]["cancellation_penalty_factor"] == "0.1"
    assert info["pricing"]["unit_price"]["policy"] == "flat"
    raw = base64.b64decode(info["public_key"]["value"])
    assert keys.parse_public_key(info["public_key"]["value"]).public_bytes_raw() == raw
    assert raw == world.context.deals.site_key.public_key().public_bytes_raw()
    assert info["public_key"]["keyid"] == "hpc1" and info["api_version"]


def test_slots_are_the_plans_holes_filtered(world: World) -> None:
    every = world.http.get("/v1/slots").json()["slots"]
    assert every and all(Decimal(slot["fee"]) == 0 for slot in every)
    wide = world.http.get("/v1/slots", params={"min_cores": 32}).json()["slots"]
    assert wide and all(slot["cores"] >= 32 for slot in wide) and len(wide) < len(every)
    long = world.http.get("/v1/slots", params={"min_duration": 7000}).json()["slots"]
    assert all(slot["duration"] >= 7000 for slot in long) and len(long) < len(every)
    first = min(slot["start"] for slot in every)
    before = world.http.get("/v1/slots", params={"start": first - 100, "end": first}).json()
    assert before["slots"] == []
    assert world.http.get("/v1/slots", params={"min_cores": 65}).json()["slots"] == []


def test_a_quote_is_priced_offers_recorded_to_be_accepted(world: World) -> None:
    answer = quote(world, world.alice, max_price="2", deadline=int(time.time()) + 10**8)
    assert answer["status"] == "offered" and answer["offers"]
    assert 0 <= answer["chosen"] < len(answer["offers"])
    for offer in answer["offers"]:
        # the soonest start leaves the buyer a minute to accept; an offer lapses at its start
        assert offer["start"] >= answer["now"] + ACCEPT_LEAD_S
        assert offer["expires"] == min(answer["now"] + DEFAULT_OFFER_VALID_S, offer["start"])
        assert offer["cores"] == 8 and offer["end"] - offer["start"] == 3600
        stored = world.site.store.get_offer(offer["offer_id"])
        assert stored is not None and str(stored.total) == offer["total"]
        assert stored.request.max_price == Decimal("2")


def test_the_soonest_offer_can_still_be_accepted_seconds_later(world: World) -> None:
    """A buyer is never as fast as the agent: the earliest offer (the cluster has room now)
    must not have started by the time its accept arrives."""
    offers = quote(world, world.alice)["offers"]
    soonest = min(offers, key=lambda offer: offer["start"])
    time.sleep(1.1)  # the accept lands in a later second than the quote
    accept = {"offer_id": soonest["offer_id"]}
    answer = world.signed(world.alice, "POST", "/v1/reservations", accept)
    assert answer.status_code == 201, answer.text
    assert answer.json()["start"] == soonest["start"]


def test_quotes_come_from_the_agents_plan_not_a_new_poll(world: World) -> None:
    world.backend.unavailable = True  # a poll now would fail; the agent's state is fresh
    world.context.agent.last_error = None
    assert quote(world, world.alice)["status"] == "offered"


@pytest.mark.parametrize(
    ("fields", "field", "code", "words"),
    [
        ({"cores": 128}, "cores", "unsatisfiable", "the site has 64"),
        ({"architecture": "aarch64"}, "architecture", "unsatisfiable", "x86_64"),
        ({"os": "windows"}, "os", "unsatisfiable", "Linux"),
        ({"cpu_speed_mhz": 3000}, "cpu_speed_mhz", "unsatisfiable", "2400"),
        ({"memory_per_core_mb": 8192}, "memory_per_core_mb", "unsatisfiable", "4096"),
        (
            {"nodes": 2, "cores_per_node": 32, "cores": None},
            "cores_per_node",
            "unsatisfiable",
            "16",
        ),
        ({"disk_gb": 10}, "disk_gb", "unsatisfiable", "disk"),
        ({"max_price": "0.5"}, None, "price_above_maximum", "above the maximum 0.5"),
        ({"deadline": 1_000_000_000}, None, "no_offer", "deadline"),
    ],
)
def test_a_quote_the_site_cannot_satisfy_is_refused_with_the_reason(
    world: World, fields: Dict[str, Any], field: Any, code: str, words: str
) -> None:
    before = world.counts()
    answer = quote(world, world.alice, **fields)
    assert answer["status"] == "refused" and answer["offers"] == []
    assert answer["refusal"]["code"] == code and answer["refusal"]["field"] == field
    assert words in answer["refusal"]["reason"]
    assert world.counts() == before  # a refusal records no offer


def test_matching_attributes_and_nodes_are_satisfied(world: World) -> None:
    answer = quote(
        world,
        world.alice,
        cores=None,
        nodes=2,
        cores_per_node=8,
        architecture="X86_64",
        os="linux",
        memory_per_core_mb=1024,
    )
    assert answer["status"] == "offered" and answer["offers"][0]["cores"] == 16


def test_nodes_without_their_size_take_the_sites_cores_per_node_or_are_refused(
    world: World,
) -> None:
    """A node count alone means the site's nodes: 2 nodes of this site's 16 cores are 32
    cores, never 2; a site that does not advertise its cores per node (a replayed trace
    without nodes) refuses, naming cores_per_node, rather than selling 2 cores."""
    answer = quote(world, world.alice, cores=None, nodes=2)
    assert answer["status"] == "offered" and answer["offers"][0]["cores"] == 32
    config = world.site.config
    world.site.config = config.model_copy(
        update=dict(site=config.site.model_copy(update=dict(cores_per_node=None)))
    )
    answer = quote(world, world.alice, cores=None, nodes=2)
    assert answer["status"] == "refused", answer
    assert answer["refusal"]["field"] == "cores_per_node"
    assert "does not advertise its cores per node" in answer["refusal"]["reason"]


# --------------------------------------------------------------------------- the deal


def test_quote_accept_confirm_books_a_doubly_signed_receipt(world: World) -> None:
    reservation = reserve(world, world.alice)
    assert reservation["state"] == "TENTATIVE" and reservation["client"] == "alice@laptop"
    assert reservation["users"] == ["alice"] and reservation["accounts"] == ["proj1"]
    assert reservation["deal"]["buyer"] == "alice@laptop" and reservation["receipt"] is None
    answer = confirm(world, world.alice, reservation)
    assert answer.status_code == 200, answer.text
    confirmed = answer.json()
    assert confirmed["state"] == "CONFIRMED"
    receipt = Receipt.from_json(confirmed["receipt"])
    assert receipt.deal == reservation["deal"]
    assert documents.signature_valid(
        receipt.deal, receipt.user_signature, world.alice.key.public_key()
    )
    assert documents.signature_valid(
        receipt.countersigned(), receipt.site_signature, world.context.deals.site_key.public_key()
    )
    price = Decimal(reservation["total"])
    assert world.ledger.balance("alice@laptop") == -price
    assert world.ledger.balance("hpc1") == price
    assert world.ledger.receipt(receipt.id).to_json() == confirmed["receipt"]
    shown = world.signed(world.alice, "GET", f"/v1/reservations/{reservation['id']}").json()
    assert shown["state"] == "CONFIRMED" and shown["receipt"] == confirmed["receipt"]
    assert "accept_key" not in shown


def test_the_buyer_sees_the_jobs_that_ran_in_its_reservation(world: World) -> None:
    reservation = reserve(world, world.alice)
    confirm(world, world.alice, reservation)
    start = reservation["start"]
    job = JobUsage("42", "alice", 2, 1, start + 60, start + 660)
    world.site.store.record_running({reservation["id"]: [job]}, start + 600)
    world.site.store.close_jobs(reservation["id"], ["42"], start + 660)
    path = f"/v1/reservations/{reservation['id']}"
    usage = world.signed(world.alice, "GET", path).json()["usage"]
    [shown] = usage["jobs"]
    held = {"id": "42", "user": "alice", "cores": 2, "nodes": 1}
    assert shown == {**held, "start": start + 60, "end": start + 660}
    assert usage["core_hours"] == pytest.approx(2 * 600 / 3600, abs=1e-4)
    assert (usage["source"], usage["final"]) == ("poll", False)
    assert "usage" not in world.http.get(path).json()  # nobody else's business
    assert "usage" not in world.signed(world.bob, "GET", path).json()


def test_a_retried_confirm_returns_the_same_receipt_and_books_once(world: World) -> None:
    reservation = reserve(world, world.alice)
    first = confirm(world, world.alice, reservation).json()
    again = confirm(world, world.alice, reservation)
    assert again.status_code == 200 and again.json()["receipt"] == first["receipt"]
    assert world.ledger.balance("alice@laptop") == -Decimal(reservation["total"])


def test_a_confirm_the_buyer_cannot_pay_is_402_and_changes_nothing(world: World) -> None:
    bob = world.bob
    world.ledger.register(bob.key_id, "user", bob.key.public_key())  # no credit
    reservation = reserve(world, bob)
    price = reservation["deal"]["price"]
    before = world.counts()
    answer = confirm(world, bob, reservation)
    assert answer.status_code == 402, answer.text
    detail = error(answer)
    assert detail["code"] == "insufficient_funds"
    assert f"cannot pay {price}" in detail["message"]
    assert "balance is 0.00 and its credit 0.00" in detail["message"]
    assert world.counts() == before
    assert world.ledger.balance(bob.key_id) == 0
    shown = world.signed(bob, "GET", f"/v1/reservations/{reservation['id']}").json()
    assert shown["state"] == "TENTATIVE" and shown["receipt"] is None
    world.ledger.deposit(bob.key_id, Decimal(price))
    answer = confirm(world, bob, reservation)  # paid for now
    assert answer.status_code == 200 and answer.json()["state"] == "CONFIRMED", answer.text
    assert world.ledger.balance(bob.key_id) == 0


class SilentBank:
    """The embedded bank behind a ledger service that does not answer while ``down``."""

    def __init__(self, inner: Ledger) -> None:
        self.inner = inner
        self.down = True

    def book(self, receipt: Receipt) -> Transaction:
        if self.down:
            raise LedgerUnavailable("the ledger service did not answer", code="unavailable")
        return self.inner.book(receipt)

    def refund(self, cancellation: Cancellation) -> Optional[Transaction]:
        if self.down:
            raise LedgerUnavailable("the ledger service did not answer", code="unavailable")
        return self.inner.refund(cancellation)

    def close(self) -> None:
        self.inner.close()


def test_a_confirm_the_bank_does_not_answer_is_503_and_confirms_nothing(world: World) -> None:
    bank = SilentBank(world.ledger)
    world.context.deals.ledger = bank
    reservation = reserve(world, world.alice)
    answer = confirm(world, world.alice, reservation)
    assert answer.status_code == 503 and error(answer)["code"] == "ledger_unavailable"
    assert "nothing changed" in error(answer)["message"] and answer.headers["Retry-After"]
    shown = world.signed(world.alice, "GET", f"/v1/reservations/{reservation['id']}").json()
    assert shown["state"] == "TENTATIVE" and shown["receipt"] is None
    assert world.context.deals.settle().booked == 0  # the loop books no unconfirmed receipt
    bank.down = False
    answer = confirm(world, world.alice, reservation)
    assert answer.status_code == 200 and answer.json()["state"] == "CONFIRMED", answer.text
    assert bank.inner.balance("alice@laptop") == -Decimal(reservation["total"])


def test_a_confirm_retried_after_a_cancel_answers_the_cancelled_reservation(
    world: World,
) -> None:
    reservation = reserve(world, world.alice, cores=16, walltime=7200)
    key = {"Idempotency-Key": "confirm-once"}
    body = documents.confirm_body(reservation["deal"], world.alice.key, world.alice.key_id)
    path = f"/v1/reservations/{reservation['id']}/confirm"
    first = world.signed(world.alice, "POST", path, body, extra=key).json()
    cancelled = world.signed(world.alice, "DELETE", f"/v1/reservations/{reservation['id']}")
    assert cancelled.status_code == 200
    again = world.signed(world.alice, "POST", path, body, extra=key)
    assert again.status_code == 200, again.text
    answered = again.json()
    assert answered["state"] == "CANCELLED" and answered["receipt"] == first["receipt"]
    assert answered["cancellation"] == cancelled.json()["cancellation"]
    assert answered["penalty"] == cancelled.json()["penalty"]
    penalty = Decimal(answered["penalty"])
    assert world.ledger.balance("alice@laptop") == -penalty  # nothing booked again


def test_a_confirm_that_lost_the_race_to_a_cancel_voids_what_it_paid(world: World) -> None:
    """The bank booked the deal, and the buyer cancelled before the reservation moved: the
    confirm is refused, and the charge refunded in full by the site's void."""
    reservation = reserve(world, world.alice)
    deals = world.context.deals
    bank = world.ledger

    class CancelledMeanwhile(SilentBank):
        def book(self, receipt: Receipt) -> Transaction:
            done = self.inner.book(receipt)
            deals.ledger = bank
            deals.cancel(reservation["id"], world.alice.key_id, "cancel-meanwhile")
            return done

    deals.ledger = CancelledMeanwhile(bank)
    answer = confirm(world, world.alice, reservation)
    assert answer.status_code == 409 and error(answer)["code"] == "illegal_transition"
    lines = bank.statement("alice@laptop")
    price = Decimal(reservation["total"])
    assert [(line.kind, line.amount) for line in lines] == [("deal", -price), ("refund", price)]
    assert lines[0].receipt_id == lines[1].receipt_id
    assert deals.settle().booked == 0  # voided once


def test_an_accept_retried_with_its_key_gives_the_same_reservation(world: World) -> None:
    offer = quote(world, world.alice)["offers"][0]
    key = {"Idempotency-Key": "k-1"}
    body = {"offer_id": offer["offer_id"]}
    first = world.signed(world.alice, "POST", "/v1/reservations", body, extra=key)
    again = world.signed(world.alice, "POST", "/v1/reservations", body, extra=key)
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"]
    assert world.counts()["reservations"] == 1


def test_cancelling_a_confirmed_reservation_says_and_refunds_minus_the_penalty(
    world: World,
) -> None:
    reservation = reserve(world, world.alice, cores=16, walltime=7200)
    fee = Decimal(reservation["fee"])
    assert fee > 0  # the offer delays the queued job: cancelling it costs something
    assert confirm(world, world.alice, reservation).status_code == 200
    answer = world.signed(world.alice, "DELETE", f"/v1/reservations/{reservation['id']}")
    assert answer.status_code == 200, answer.text
    cancelled = answer.json()
    penalty = (Decimal("0.1") * fee).quantize(Decimal("0.01"))
    assert cancelled["state"] == "CANCELLED" and Decimal(cancelled["penalty"]) == penalty
    assert Decimal(cancelled["cancellation"]["penalty"]) == penalty
    assert world.ledger.balance("alice@laptop") == -penalty
    assert world.ledger.balance("hpc1") == penalty
    assert reservation["deal"]["cancellation_penalty"] == str(penalty)


def test_cancelling_a_tentative_reservation_is_free(world: World) -> None:
    reservation = reserve(world, world.alice)
    answer = world.signed(world.alice, "DELETE", f"/v1/reservations/{reservation['id']}")
    assert answer.status_code == 200
    assert answer.json()["penalty"] == "0.00" and answer.json()["cancellation"] is None
    assert world.ledger.balance("alice@laptop") == 0


def test_a_reservation_s_details_are_its_buyer_s_and_the_rest_public(world: World) -> None:
    reservation = reserve(world, world.alice)
    confirm(world, world.alice, reservation)
    path = f"/v1/reservations/{reservation['id']}"
    owner = world.signed(world.alice, "GET", path)
    assert owner.status_code == 200, owner.text
    assert owner.json()["receipt"]["deal"] == reservation["deal"]
    assert owner.json()["users"] == ["alice"] and owner.json()["total"] == reservation["total"]
    public = {"id", "state", "start", "end", "size", "unit"}
    for answer in (world.http.get(path), world.signed(world.bob, "GET", path)):
        assert answer.status_code == 200, answer.text
        assert set(answer.json()) == public
        assert answer.json() == {key: owner.json()[key] for key in public}
        assert "alice" not in answer.text
    forged = world.signed(Party(world.alice.key_id), "GET", path)  # alice's id, not her key
    assert forged.status_code == 401 and error(forged)["code"] == "bad_signature"


def test_an_unknown_offer_or_reservation_is_404(world: World) -> None:
    answer = world.signed(world.alice, "POST", "/v1/reservations", {"offer_id": "nope"})
    assert answer.status_code == 404 and error(answer)["code"] == "unknown_offer"
    answer = world.http.get("/v1/reservations/nope")
    assert answer.status_code == 404 and error(answer)["code"] == "unknown_reservation"


def test_confirming_twice_after_cancel_is_a_409(world: World) -> None:
    reservation = reserve(world, world.alice)
    world.signed(world.alice, "DELETE", f"/v1/reservations/{reservation['id']}")
    answer = confirm(world, world.alice, reservation)
    assert answer.status_code == 409 and error(answer)["code"] == "illegal_transition"


# --------------------------------------------------------------------------- security


def test_unsigned_requests_are_401_and_change_nothing(world: World) -> None:
    before = world.counts()
    answer = world.http.post("/v1/quotes", json={"cores": 8, "walltime": 3600})
    assert answer.status_code == 401 and error(answer)["code"] == "unsigned"
    assert "Accept-Signature" in answer.headers
    answer = world.http.delete("/v1/reservations/abc")
    assert answer.status_code == 401
    assert world.counts() == before


def test_a_request_signed_with_the_wrong_key_is_401(world: World) -> None:
    before = world.counts()
    impostor = Party(world.alice.key_id)  # alice's key id, another key
    answer = world.signed(impostor, "POST", "/v1/quotes", {"cores": 8, "walltime": 3600})
    assert answer.status_code == 401 and error(answer)["code"] == "bad_signature"
    stranger = Party("mallory@nowhere")
    answer = world.signed(stranger, "POST", "/v1/quotes", {"cores": 8, "walltime": 3600})
    assert answer.status_code == 401 and error(answer)["code"] == "unknown_key"
    assert world.counts() == before


def test_a_tampered_body_is_401(world: World) -> None:
    body = json.dumps({"cores": 8, "walltime": 3600}).encode()
    headers = signing.sign_request(
        "POST", "http://testserver/v1/quotes", body, world.alice.key, world.alice.key_id
    )
    tampered = body.replace(b"8", b"9")
    answer = world.http.post(
        "/v1/quotes", content=tampered, headers={**headers, "Content-Type": "application/json"}
    )
    assert answer.status_code == 401 and error(answer)["code"] == "bad_signature"


def test_an_expired_signature_is_401(world: World) -> None:
    before = world.counts()
    old = int(time.time()) - 3600
    answer = world.signed(
        world.alice, "POST", "/v1/quotes", {"cores": 8, "walltime": 3600}, created=old
    )
    assert answer.status_code == 401 and error(answer)["code"] == "signature_expired"
    assert world.counts() == before


def test_a_replayed_request_is_401_and_changes_nothing(world: World) -> None:
    offer = quote(world, world.alice)["offers"][0]
    body = json.dumps({"offer_id": offer["offer_id"]}).encode()
    headers = signing.sign_request(
        "POST", "http://testserver/v1/reservations", body, world.alice.key, world.alice.key_id
    )
    headers["Content-Type"] = "application/json"
    first = world.http.post("/v1/reservations", content=body, headers=headers)
    assert first.status_code == 201
    before = world.counts()
    again = world.http.post("/v1/reservations", content=body, headers=headers)
    assert again.status_code == 401 and error(again)["code"] == "replayed_signature"
    assert world.counts() == before


def test_only_the_owner_confirms_or_cancels(world: World) -> None:
    reservation = reserve(world, world.alice)
    before = world.counts()
    # bob signs the deal as it stands, with his own key: still not his reservation
    answer = confirm(world, world.bob, reservation)
    assert answer.status_code == 403 and error(answer)["code"] == "not_owner"
    answer = world.signed(world.bob, "DELETE", f"/v1/reservations/{reservation['id']}")
    assert answer.status_code == 403 and error(answer)["code"] == "not_owner"
    assert world.counts() == before
    shown = world.http.get(f"/v1/reservations/{reservation['id']}").json()
    assert shown["state"] == "TENTATIVE"
    assert world.ledger.balance("bob@desk") == 0


def test_a_confirm_signed_over_another_deal_is_422(world: World) -> None:
    reservation = reserve(world, world.alice)
    cheaper = {**reservation["deal"], "price": "0.01"}
    body = documents.confirm_body(cheaper, world.alice.key, world.alice.key_id)
    before = world.counts()
    answer = world.signed(
        world.alice, "POST", f"/v1/reservations/{reservation['id']}/confirm", body
    )
    assert answer.status_code == 422 and error(answer)["code"] == "deal_mismatch"
    assert world.counts() == before


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"cores": -1, "walltime": 3600}, "cores"),
        ({"cores": 8, "walltime": "an hour"}, "walltime"),
        ({"cores": 8}, "walltime"),
        ({"walltime": 3600}, "cores"),
        ({"cores": 8, "walltime": 3600, "bandwidth": 10}, "bandwidth"),
        ({"cores": 8, "walltime": 3600, "max_price": "NaN"}, "max_price"),
        ({"cores": 8, "walltime": 3600, "deadline": 10**30}, "deadline"),
        ({"cores": 4, "nodes": 2, "cores_per_node": 8, "walltime": 60}, "cores"),
    ],
)
def test_bad_quote_input_is_422_naming_the_field(
    world: World, payload: Dict[str, Any], field: str
) -> None:
    answer = world.signed(world.alice, "POST", "/v1/quotes", payload)
    assert answer.status_code == 422, answer.text
    detail = error(answer)
    assert detail["code"] == "invalid_request" and detail["field"] == field
    assert field in detail["message"]


def test_malformed_json_and_bad_parameters_are_4xx(world: World) -> None:
    answer = world.http.post(
        "/v1/quotes",
        content=b"{not json",
        headers=signing.sign_request(
            "POST", "http://testserver/v1/quotes", b"{not json", world.alice.key, world.alice.key_id
        ),
    )
    assert answer.status_code == 422 and error(answer)["code"] == "invalid_request"
    answer = world.http.get("/v1/slots", params={"min_cores": "many"})
    assert answer.status_code == 422 and error(answer)["field"] == "min_cores"
    answer = world.http.get("/v1/slots", params={"start": 10, "end": 5})
    assert answer.status_code == 422 and error(answer)["field"] == "end"
    answer = world.http.get("/v1/reservations/has space")
    assert answer.status_code == 422 and error(answer)["field"] == "reservation_id"
    assert world.http.get("/v1/nothing").status_code == 404
    assert error(world.http.put("/v1/info"))["code"] == "unsigned"  # a write: signed first
    put = signing.sign_request("PUT", "http://testserver/v1/info", b"", world.alice.key, "x")
    assert error(world.http.put("/v1/info", headers=put))["code"] == "unknown_key"
    put = signing.sign_request(
        "PUT", "http://testserver/v1/info", b"", world.alice.key, world.alice.key_id
    )
    assert error(world.http.put("/v1/info", headers=put))["code"] == "method_not_allowed"


# --------------------------------------------------------------------------- operations


def test_a_backend_outage_is_503_with_retry_after_and_recovers(world: World) -> None:
    offer = quote(world, world.alice)["offers"][0]
    world.backend.unavailable = True
    world.context.agent.cycle()
    answer = world.signed(world.alice, "POST", "/v1/quotes", {"cores": 8, "walltime": 3600})
    assert answer.status_code == 503 and error(answer)["code"] == "backend_unavailable"
    assert answer.headers["Retry-After"] == "2"
    assert world.http.get("/v1/slots").status_code == 503
    answer = world.signed(world.alice, "POST", "/v1/reservations", {"offer_id": offer["offer_id"]})
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "2"
    health = world.http.get("/healthz")
    assert health.status_code == 503 and health.json()["backend_reachable"] is False
    assert "controller down" in health.json()["last_error"]
    world.backend.unavailable = False
    world.context.agent.cycle()
    assert world.http.get("/healthz").json()["status"] == "ok"
    assert quote(world, world.alice)["status"] == "offered"


def test_a_snapshot_that_stops_being_refreshed_is_not_sold_from(world: World) -> None:
    """A poll hanging past every timeout leaves no error, only an ageing snapshot."""
    world.clock.ahead = 3 * 2 + 61.0
    answer = world.signed(world.alice, "POST", "/v1/quotes", {"cores": 8, "walltime": 3600})
    assert answer.status_code == 503 and error(answer)["code"] == "snapshot_stale"
    assert answer.headers["Retry-After"] == "2"
    health = world.http.get("/healthz")
    assert health.status_code == 503 and health.json()["status"] == "snapshot_stale"
    assert health.json()["snapshot_age_s"] > 66
    world.context.agent.cycle()
    assert world.http.get("/healthz").status_code == 200


def test_a_quote_prices_against_the_view_the_agent_made_in_its_cycle(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pricing context and the slots are made once per cycle, by the agent, off the
    request path: a quote or a slot listing makes none of its own."""
    made: List[object] = []
    context_of = Pricing.context
    monkeypatch.setattr(Pricing, "context", lambda *args: made.append(args) or context_of(*args))
    world.context.agent.cycle()
    assert len(made) == 1
    state = world.context.agent.state
    assert state is not None and quote(world, world.alice)["snapshot_time"] == state.snapshot.now
    assert world.http.get("/v1/slots").status_code == 200
    assert len(made) == 1


def test_healthz_reports_the_snapshot_age(world: World) -> None:
    health = world.http.get("/healthz")
    assert health.status_code == 200
    body = health.json()
    assert body["backend_reachable"] is True and 0 <= body["snapshot_age_s"] < 60


def test_metrics_observe_requests_by_route(world: World) -> None:
    world.http.get("/v1/reservations/abc")
    quote(world, world.alice)
    world.http.get("/no/such/route")
    text = world.http.get("/metrics").text
    assert 'method="GET",route="/v1/reservations/{reservation_id}",status="404"' in text
    assert 'method="POST",route="/v1/quotes",status="200"' in text
    assert 'method="GET",route="unmatched",status="404"' in text
    assert "siteagent_http_request_duration_seconds" in text
    assert "siteagent_cluster_capacity_cores 64.0" in text


def test_the_openapi_document_is_published(world: World) -> None:
    document = world.http.get("/v1/openapi.json").json()
    assert (
        "/v1/quotes" in document["paths"]
        and "/v1/reservations/{reservation_id}" in (document["paths"])
    )


def test_without_a_ledger_the_site_still_keeps_and_returns_the_receipt(world: World) -> None:
    world.context.deals.ledger = None
    reservation = reserve(world, world.alice)
    confirmed = confirm(world, world.alice, reservation).json()
    assert confirmed["state"] == "CONFIRMED" and confirmed["ledger_transaction"] is None
    assert world.site.store.receipt(reservation["id"]) == confirmed["receipt"]


def test_endpoints_that_touch_the_batch_system_run_in_the_thread_pool(world: World) -> None:
    """An async endpoint would run accept/confirm/cancel on the event loop and stall it."""
    blocking = {
        "/v1/reservations",
        "/v1/reservations/{reservation_id}",
        "/v1/reservations/{reservation_id}/confirm",
        "/v1/slots",
    }
    endpoints = {
        route.path: route.endpoint
        for route in world.app.routes
        if isinstance(route, APIRoute) and route.path in blocking
    }
    assert set(endpoints) == blocking
    assert not any(inspect.iscoroutinefunction(f) for f in endpoints.values())


def test_quotes_are_priced_on_the_event_loop_unless_they_may_replan_the_queue(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread hand-over costs more than cheap pricing; a quote whose externality fee may
    re-plan the queue for each start it asks for is priced on the one pricing thread, so that
    the event loop goes on answering meanwhile."""
    quotes = next(
        route.endpoint
        for route in world.app.routes
        if isinstance(route, APIRoute) and route.path == "/v1/quotes"
    )
    assert inspect.iscoroutinefunction(quotes)
    threads: List[str] = []
    alternatives = Pricing.alternatives

    def spied(pricing: Pricing, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return alternatives(pricing, *args, **kwargs)

    monkeypatch.setattr(Pricing, "alternatives", spied)
    assert quote(world, world.alice, limit=1)["status"] == "offered"
    assert quote(world, world.alice, limit=5)["status"] == "offered"
    assert not threads[0].startswith("pricing") and threads[1].startswith("pricing")


def test_history_waits_are_binned_by_cores_and_walltime(world: World) -> None:
    world.site.store.record_waits(
        [
            QueueWait(job_id="1", cores=4, walltime=3600, submit=1000, start=1600),
            QueueWait(job_id="2", cores=4, walltime=3600, submit=2000, start=2200),
            QueueWait(job_id="3", cores=4, walltime=3600, submit=5000, start=9000),
        ]
    )
    table = world.http.get("/v1/history/waits").json()
    assert table["jobs"] == 3
    filled = [b for b in table["bins"] if b["jobs"]]
    assert len(filled) == 1 and filled[0]["median_wait_s"] == 600
    later = world.http.get("/v1/history/waits", params={"since": 2200}).json()
    assert later["jobs"] == 2 and later["since"] == 2200


def test_history_waits_publish_upper_bounds_on_the_quantiles_of_each_bin(world: World) -> None:
    """Ten waits of 10..100 s: the median's 95% bound is the 9th smallest (P(Binomial(10, 1/2)
    <= 8) = 0.989 is the first to reach 0.95); the 95th percentile's needs 59 waits."""
    world.site.store.record_waits(
        [
            QueueWait(job_id=str(w), cores=2, walltime=600, submit=10_000 + i, start=10_000 + i + w)
            for i, w in enumerate([70, 10, 100, 40, 20, 90, 30, 60, 50, 80])
        ]
    )
    table = world.http.get("/v1/history/waits").json()
    (filled,) = [b for b in table["bins"] if b["jobs"]]
    bounds = {b["quantile"]: b["upper_bound_s"] for b in filled["wait_bounds"]}
    assert bounds == {0.5: 90, 0.75: None, 0.9: None, 0.95: None}
    assert {b["confidence"] for b in filled["wait_bounds"]} == {0.95}
    assert table["bound_window_jobs"] == 500
    schemas = world.http.get("/v1/openapi.json").json()["components"]["schemas"]
    assert set(schemas["WaitBoundView"]["properties"]) == {
        "quantile",
        "confidence",
        "upper_bound_s",
    }
    assert "wait_bounds" in schemas["WaitBinView"]["properties"]


def test_history_waits_since_takes_an_age_as_the_command_line_does(world: World) -> None:
    now = int(world.site.manager.clock())
    world.site.store.record_waits(
        [
            QueueWait(
                job_id="old", cores=1, walltime=60, submit=now - 41 * DAY, start=now - 40 * DAY
            ),
            QueueWait(
                job_id="week", cores=1, walltime=60, submit=now - 8 * DAY, start=now - 7 * DAY
            ),
            QueueWait(job_id="hour", cores=1, walltime=60, submit=now - 7200, start=now - 3600),
        ]
    )
    month = world.http.get("/v1/history/waits", params={"since": "30d"})
    assert month.status_code == 200 and month.json()["jobs"] == 2
    assert abs(month.json()["since"] - (now - 30 * DAY)) <= 60
    assert world.http.get("/v1/history/waits", params={"since": "2h"}).json()["jobs"] == 1
    assert (
        world.http.get("/v1/history/waits", params={"since": str(now - 3600)}).json()["jobs"] == 1
    )
    assert world.http.get("/v1/history/waits").json()["jobs"] == 3
    for bad in ("yesterday", "30x", "-5", "3\u0660d"):
        answer = world.http.get("/v1/history/waits", params={"since": bad})
        assert answer.status_code == 422, bad
        assert answer.json()["error"]["field"] == "since"
        assert "30d" in answer.json()["error"]["message"]


def test_history_waits_publishes_the_forms_of_since(world: World) -> None:
    route = world.http.get("/v1/openapi.json").json()["paths"]["/v1/history/waits"]["get"]
    since = next(p for p in route["parameters"] if p["name"] == "since")
    assert since["schema"]["anyOf"][0]["type"] == "string"
    for form in ("30d", "epoch seconds", "ISO 8601"):
        assert form in since["description"]


def test_a_quote_that_would_wait_too_long_to_be_priced_is_503_busy_at_once(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quotes that may re-plan the queue are priced one at a time; one that would wait longer
    than the site allows is told so at once (nothing recorded), while cheap quotes are still
    answered, and once the queue has drained it is priced."""
    pricing_queue = world.app.state.quotes.pricing_queue
    assert quote(world, world.alice, limit=5)["status"] == "offered"  # the time per offer
    monkeypatch.setattr(pricing_queue, "max_wait_s", 0.0)
    started, release = threading.Event(), threading.Event()
    alternatives = Pricing.alternatives

    def held(pricing: Pricing, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name.startswith("pricing") and not release.is_set():
            started.set()
            release.wait(30)
        return alternatives(pricing, *args, **kwargs)

    monkeypatch.setattr(Pricing, "alternatives", held)
    answers: List[Any] = []
    body = {"cores": 8, "walltime": 3600}
    first = threading.Thread(
        target=lambda: answers.append(world.signed(world.bob, "POST", "/v1/quotes", body))
    )
    first.start()
    try:
        assert started.wait(30)
        offers_before = world.counts()
        answer = world.signed(world.alice, "POST", "/v1/quotes", body)
        assert answer.status_code == 503 and error(answer)["code"] == "busy"
        assert int(answer.headers["Retry-After"]) >= 1
        assert world.counts() == offers_before
        assert quote(world, world.alice, limit=1)["status"] == "offered"  # not held up
    finally:
        release.set()
        first.join(30)
    assert answers[0].status_code == 200 and answers[0].json()["status"] == "offered"
    assert quote(world, world.alice, limit=5)["status"] == "offered"  # its turn came
