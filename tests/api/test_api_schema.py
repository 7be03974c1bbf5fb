"""Schemathesis against the published OpenAPI: no input, valid or malformed, gets a 5xx, and
every answer (success or error) has a status and a body the OpenAPI publishes.

Requests are generated from ``/v1/openapi.json`` in both modes (conforming and deliberately
malformed) for every operation and sent to the in-process app. Signatures are taken as
given here (every request counts as signed by "alice"), so that generated bodies reach
validation and the routes behind it; the signature checks have their own tests in
test_api.py. Hypothesis drives the cases directly (schemathesis' pytest plugin does not load
under pytest 9).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Iterator, List

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

from testbed.inprocess.api_harness import World, running_world
from testbed.inprocess.fakes import Trusting

#: Examples per operation and mode: enough to reach every validator, quick (< 60 s in all).
EXAMPLES = 60


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with running_world(tmp_path) as made:
        made.context.authenticator = Trusting(made.alice.client("alice", "proj1"))
        yield made


def operations(world: World) -> List[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        schema = schemathesis.openapi.from_asgi("/v1/openapi.json", world.app)
    return [result.ok() for result in schema.get_all_operations()]


def has_inputs(operation: Any) -> bool:
    parts = ("path_parameters", "query", "headers", "body")
    return any(len(getattr(operation, part)) for part in parts)


def exercise(operation: Any, mode: GenerationMode) -> List[int]:
    """Send ``EXAMPLES`` generated requests to one operation; the statuses answered."""
    statuses: List[int] = []

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def call(case: Any) -> None:
        checks = [not_a_server_error, status_code_conformance, response_schema_conformance]
        response = case.call_and_validate(checks=checks)
        statuses.append(response.status_code)

    call()
    return statuses


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_request_gets_a_server_error(world: World, mode: GenerationMode) -> None:
    found = operations(world)
    assert {op.path for op in found} >= {"/v1/quotes", "/v1/reservations/{reservation_id}"}
    for operation in found:
        if mode is GenerationMode.NEGATIVE and not has_inputs(operation):
            continue  # nothing to malform
        # a fresh snapshot, as the agent's polls keep it: on a loaded machine (two xdist
        # workers on two busy cores) the run outlasts the one make_world took, and a stale
        # snapshot is a 503 that says so, not the server error this test looks for
        world.context.agent.cycle()
        statuses = exercise(operation, mode)
        assert statuses, f"no request was sent to {operation.method} {operation.path}"
        assert all(status < 500 for status in statuses)
