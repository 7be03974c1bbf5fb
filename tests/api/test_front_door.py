"""What the API refuses before any route runs, and what one client may ask of it: bodies over
the limit, unsigned bodies (never parsed), signatures made for another site, rates, live
offers, loose types, and labels a client could multiply.
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from siteagent.protocol import signing
from testbed.inprocess.api_harness import BASE, World, make_world


def shut(world: World) -> None:
    world.http.close()
    world.app.state.quotes.close()
    world.ledger.close()
    world.site.close()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = make_world(tmp_path)
    yield made
    shut(made)


def error(answer: Any) -> Dict[str, Any]:
    detail: Dict[str, Any] = answer.json()["error"]
    return detail


def test_an_unsigned_body_is_refused_before_it_is_parsed(world: World) -> None:
    """Malformed JSON, or a JSON array of a million objects: unsigned, it is 401, never 422
    (which would mean the server decoded it), and nothing is stored."""
    before = world.counts()
    for body in (b"{not json", json.dumps([{}] * 1000).encode()):
        answer = world.http.post("/v1/quotes", content=body)
        assert answer.status_code == 401 and error(answer)["code"] == "unsigned"
    answer = world.http.delete("/v1/reservations/x")
    assert answer.status_code == 401
    assert world.counts() == before


def test_a_body_over_the_limit_is_413_signed_or_not(tmp_path: Path) -> None:
    world = make_world(tmp_path, api={"max_body_bytes": 1024})
    try:
        padded = {"cores": 8, "walltime": 3600, "architecture": "x86_64" + " " * 2000}
        answer = world.signed(world.alice, "POST", "/v1/quotes", padded)
        assert answer.status_code == 413 and error(answer)["code"] == "body_too_large"

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it is read
            for _ in range(64):
                yield b" " * 64

        answer = world.http.post("/v1/quotes", content=chunks())
        assert answer.status_code == 413
        assert world.signed(world.alice, "POST", "/v1/quotes", {"cores": 8, "walltime": 60})
    finally:
        shut(world)


def test_a_signed_body_that_is_not_json_says_so(world: World) -> None:
    truncated = b'{"cores": 8, "wallt'
    headers = signing.sign_request(
        "POST", BASE + "/v1/quotes", truncated, world.alice.key, world.alice.key_id
    )
    answer = world.http.post("/v1/quotes", content=truncated, headers=headers)
    assert answer.status_code == 422
    assert error(answer)["field"] == "body" and "not a JSON" in error(answer)["message"]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"cores": True}, "cores"),
        ({"cores": "8"}, "cores"),
        ({"cores": 8.0}, "cores"),
        ({"walltime": "3600"}, "walltime"),
        ({"alpha": "0.5"}, "alpha"),
        ({"limit": False}, "limit"),
        ({"max_price": True}, "max_price"),
        ({"architecture": 64}, "architecture"),
    ],
)
def test_types_are_strict_as_published(world: World, fields: Dict[str, Any], field: str) -> None:
    """No bool for an integer, no numeric strings: what the OpenAPI says, nothing looser."""
    answer = world.signed(world.alice, "POST", "/v1/quotes", {"cores": 8, "walltime": 60, **fields})
    assert answer.status_code == 422, answer.text
    assert error(answer)["field"] == field


def test_a_signature_made_for_another_site_is_refused(world: World) -> None:
    """Signed for the bank and sent here with the bank's name in Host: the signature verifies
    over that URL, and the site refuses it because the bank is not one of its names."""
    body = json.dumps({"cores": 8, "walltime": 60}).encode()
    url = "https://bank.example.org/v1/quotes"
    headers = signing.sign_request("POST", url, body, world.alice.key, world.alice.key_id)
    headers["Host"] = "bank.example.org"
    answer = world.http.post("/v1/quotes", content=body, headers=headers)
    assert answer.status_code == 401 and error(answer)["code"] == "wrong_authority"


def test_a_host_with_a_port_out_of_range_is_refused(world: World) -> None:
    """A forged signature over ``@authority`` with ``Host: 127.0.0.1:99999`` is a 401, never a
    500. Starlette 0.36 builds the request's URL from that Host (a port no URL can hold:
    malformed); newer releases fall back to the server's own name, which was not signed."""
    body = json.dumps({"cores": 8, "walltime": 60}).encode()
    url = "https://127.0.0.1:99999/v1/quotes"
    headers = signing.sign_request("POST", url, body, world.alice.key, world.alice.key_id)
    headers["Host"] = "127.0.0.1:99999"
    answer = world.http.post("/v1/quotes", content=body, headers=headers)
    assert answer.status_code == 401, answer.text
    assert error(answer)["code"] in ("malformed_signature", "bad_signature")


def test_rates_are_per_client_429_with_retry_after(tmp_path: Path) -> None:
    rates = {"quotes": {"per_second": 0.01, "burst": 3}}
    world = make_world(tmp_path, api={"rate_limits": rates})
    try:
        body = {"cores": 8, "walltime": 60, "limit": 1}
        for _ in range(3):
            assert world.signed(world.alice, "POST", "/v1/quotes", body).status_code == 200
        refused = world.signed(world.alice, "POST", "/v1/quotes", body)
        assert refused.status_code == 429 and error(refused)["code"] == "rate_limited"
        assert int(refused.headers["Retry-After"]) >= 1
        assert world.signed(world.bob, "POST", "/v1/quotes", body).status_code == 200
        metrics = world.http.get("/metrics").text
        assert 'siteagent_rate_limited_requests_total{kind="quotes"} 1.0' in metrics
    finally:
        shut(world)


def test_a_client_holds_a_bounded_number_of_live_offers(tmp_path: Path) -> None:
    world = make_world(tmp_path, api={"max_live_offers_per_client": 3})
    try:
        body = {"cores": 8, "walltime": 60, "limit": 2}
        for _ in range(2):  # 2, then 4 live offers: the second quote was let in at 2 < 3
            assert world.signed(world.alice, "POST", "/v1/quotes", body).status_code == 200
        refused = world.signed(world.alice, "POST", "/v1/quotes", body)
        assert refused.status_code == 429 and error(refused)["code"] == "too_many_offers"
        assert 1 <= int(refused.headers["Retry-After"]) <= 300
        assert world.signed(world.bob, "POST", "/v1/quotes", body).status_code == 200
    finally:
        shut(world)


def test_an_offer_is_accepted_only_by_the_client_it_was_quoted_to(world: World) -> None:
    body = {"cores": 8, "walltime": 3600, "limit": 1}
    offer = world.signed(world.alice, "POST", "/v1/quotes", body).json()["offers"][0]
    stolen = world.signed(world.bob, "POST", "/v1/reservations", {"offer_id": offer["offer_id"]})
    assert stolen.status_code == 404 and error(stolen)["code"] == "unknown_offer"
    taken = world.signed(world.alice, "POST", "/v1/reservations", {"offer_id": offer["offer_id"]})
    assert taken.status_code == 201


def test_request_methods_do_not_become_metric_labels(world: World) -> None:
    """Every made-up method is counted as "other": the metrics do not grow with them."""
    for _ in range(30):
        method = "".join(random.choices(string.ascii_uppercase, k=8))
        world.http.request(method, "/v1/info")
    methods = {
        sample.labels["method"]
        for family in text_string_to_metric_families(world.http.get("/metrics").text)
        if family.name == "siteagent_http_request_duration_seconds"
        for sample in family.samples
        if "method" in sample.labels
    }
    assert methods <= {"GET", "other"} and "other" in methods


def test_the_state_database_size_is_a_metric(world: World) -> None:
    world.context.agent.cycle()
    metrics = world.http.get("/metrics").text
    line = next(x for x in metrics.splitlines() if x.startswith("siteagent_state_database_bytes"))
    assert float(line.split()[-1]) > 0


def test_no_page_loads_code_from_elsewhere(world: World) -> None:
    """Swagger UI would load from a CDN a cluster may not reach: the API serves none; the
    OpenAPI document is there for any viewer."""
    assert world.http.get("/v1/docs").status_code == 404
    assert world.http.get("/v1/openapi.json").status_code == 200
