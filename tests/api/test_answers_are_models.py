"""The agent's answers, built by hand where they are hot or hold signed bytes, are exactly what
their models in siteagent/protocol/models.py (the published OpenAPI) describe: no key the model
lacks, and every value the model takes and gives back unchanged. A field added to an answer
and not to its model (or the other way round, where the model requires it) fails here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterator, Set, Type

import pytest
from pydantic import BaseModel

from siteagent.protocol import documents
from siteagent.protocol.models import (
    BatchQuoteAnswer,
    BidAnswer,
    Health,
    Info,
    QuoteAnswer,
    ReservationView,
    SlotList,
    WaitHistory,
)
from testbed.inprocess.api_harness import World, running_world


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with running_world(Path(tmp_path_factory.mktemp("world"))) as made:
        yield made


#: Keys an answer carries that its model does not publish yet (answers allow extra keys, so
#: older clients keep working): publishing one changes the OpenAPI document, a change of its own.
UNPUBLISHED: Dict[Type[BaseModel], Set[str]] = {ReservationView: {"allocation"}}


def described(model: Type[BaseModel], document: Dict[str, Any]) -> None:
    """``document`` has only the model's keys, and the model gives it back as it is."""
    known = set(model.model_fields) | UNPUBLISHED.get(model, set())
    assert set(document) <= known, set(document) - known
    assert model.model_validate(document).model_dump(exclude_unset=True) == document


def answer(world: World, method: str, path: str, body: Any = None, status: int = 200) -> Any:
    done = world.signed(world.alice, method, path, body)
    assert done.status_code == status, done.text
    return done.json()


def test_the_reads_are_their_models(world: World) -> None:
    described(Info, world.http.get("/v1/info").json())
    described(SlotList, world.http.get("/v1/slots").json())
    described(WaitHistory, world.http.get("/v1/history/waits").json())
    described(Health, world.http.get("/healthz").json())


def test_quotes_offered_and_refused_are_their_model(world: World) -> None:
    offered = answer(world, "POST", "/v1/quotes", {"cores": 8, "walltime": 3600})
    assert offered["status"] == "offered"
    described(QuoteAnswer, offered)
    refused = answer(world, "POST", "/v1/quotes", {"cores": 8, "walltime": 3600, "os": "vms"})
    assert refused["status"] == "refused"
    described(QuoteAnswer, refused)
    batch = {"requests": [{"cores": 8, "walltime": 3600}]}
    described(BatchQuoteAnswer, answer(world, "POST", "/v1/quotes/batch", batch))


def test_a_reservation_is_its_model_through_its_life(world: World) -> None:
    offers = answer(world, "POST", "/v1/quotes", {"cores": 8, "walltime": 3600})["offers"]
    accepted = answer(
        world, "POST", "/v1/reservations", {"offer_id": offers[0]["offer_id"]}, status=201
    )
    described(ReservationView, accepted)
    path = f"/v1/reservations/{accepted['id']}"
    body = documents.confirm_body(accepted["deal"], world.alice.key, world.alice.key_id)
    confirmed = answer(world, "POST", f"{path}/confirm", body)
    assert confirmed["receipt"] is not None and confirmed["ledger_transaction"] is not None
    described(ReservationView, confirmed)
    described(ReservationView, answer(world, "GET", path))
    cancelled = answer(world, "DELETE", path)
    assert cancelled["cancellation"] is not None
    described(ReservationView, cancelled)


def test_a_bid_open_and_released_is_its_model(world: World) -> None:
    closes_at = int(world.site.manager.clock()) + 30
    call = {"auction_id": "a-models", "job": {"cores": 8, "walltime": 3600}, "closes_at": closes_at}
    held = answer(world, "POST", "/v1/bids", call)
    assert held["state"] == "open" and held["bid"] is not None
    described(BidAnswer, held)
    released = answer(world, "DELETE", "/v1/bids/a-models")
    assert released["state"] == "released"
    described(BidAnswer, released)
