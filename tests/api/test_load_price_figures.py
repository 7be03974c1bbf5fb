"""A site pricing by load logs and exports each quote's decrement and offer (the marketplace
paper's attractiveness and offer price over time, docs/design.md §4.4)."""

from __future__ import annotations

import logging
import re
from decimal import Decimal
from pathlib import Path
from typing import Dict, Iterator

import pytest

from testbed.inprocess.api_harness import World, running_world

START, LOW, ROUNDS = Decimal("80"), Decimal("40"), 4
CENT = Decimal("0.01")
LOAD = {
    "policy": "load",
    "load": {"start_price": str(START), "min_price": str(LOW), "rounds": ROUNDS},
    "externality": {"enabled": False},
}
LOGGED = re.compile(
    r"load price at (\d+): round (\d+) for (\S+), price (\S+), load (\S+), decrement (\S+), "
    r"offer (\S+)"
)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with running_world(tmp_path, pricing=LOAD) as made:
        yield made


def gauges(world: World) -> Dict[str, float]:
    text = world.http.get("/metrics").text
    found = re.findall(r"^(siteagent_load_price_\w+) (\S+)$", text, re.MULTILINE)
    return {name: float(value) for name, value in found}


def test_each_quote_logs_and_exports_its_decrement_and_offer(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    assert gauges(world) == {}  # nothing priced yet: no figure rather than a false zero
    rfq = {"cores": 8, "walltime": 3600, "limit": 1}
    with caplog.at_level(logging.INFO, logger="siteagent.api"):
        first = world.signed(world.alice, "POST", "/v1/quotes", {**rfq, "max_price": "70"})
        second = world.signed(
            world.alice, "POST", "/v1/quotes", {**rfq, "round": 2, "best_price": "55"}
        )
    offers = [answer.json()["offers"][0] for answer in (first, second)]
    lines = [LOGGED.search(record.getMessage()) for record in caplog.records]
    logged = [match.groups() for match in lines if match]
    assert len(logged) == 2
    for (_, _, client, price, load, decrement, offer), answer, asked in zip(
        logged, offers, ("70", "55")
    ):
        assert client == world.alice.key_id and price == asked
        assert 0 <= float(load) < 1
        expected = (START - LOW) * (1 - Decimal(load)) / ROUNDS  # the load is logged to 1e-4
        assert abs(Decimal(decrement) - expected) <= CENT
        assert offer == answer["unit_price"]
        assert abs(Decimal(offer) - max(Decimal(asked) - Decimal(decrement), LOW)) <= CENT
    assert [row[1] for row in logged] == ["1", "2"]
    exported = gauges(world)
    assert exported["siteagent_load_price_offer_per_core_hour"] == float(offers[1]["unit_price"])
    assert exported["siteagent_load_price_decrement_per_core_hour"] == pytest.approx(
        float(logged[1][5]), abs=0.005
    )
    assert exported["siteagent_load_price_load_ratio"] == pytest.approx(float(logged[1][4]))
