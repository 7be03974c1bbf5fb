"""A batch accept killed between its parts (docs/batches.md): nothing half-held once the agent
is back.

A real ``siteagent serve`` (replay backend, booking at a ``siteagent ledger serve``) kills
itself (SIGKILL, testbed/processes/crashrun.py) at a point inside a batch accept of three offers:
before or after the batch system creates the second part, or with every part held but the
batch not yet closed. The buyer's request gets no answer. Restarted, the agent's first cycle
releases every part the batch held, and the same request retried answers that the batch was
interrupted, holding nothing: a buyer never pays for, or holds, part of a batch.
"""

from __future__ import annotations

from typing import Iterator, List

import pytest

from siteagent.market.lifecycle import ReservationState
from siteagent.market.site import STORE_FILE
from siteagent.market.store import Store
from testbed.processes.market import Market, flat_priced
from testbed.processes.programs import wait_until

S = ReservationState

POINTS = (
    "backend.create_reservation:2:before",  # the first part held, the second not asked for
    "backend.create_reservation:2:after",  # the second created, its record still REQUESTED
    "store.close_batch:1:before",  # every part held, the batch not closed
)


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Market]:
    made = Market(
        tmp_path_factory.mktemp("market"),
        flat_priced(1),
        rate_limits={"reservations": {"per_second": 100, "burst": 500}},
    )
    made.start()
    yield made
    made.stop()


def offers(market: Market, count: int) -> List[str]:
    """``count`` offers of windows that do not overlap, quoted to alice in one batch."""
    buyer = market.buyer_at("hpc1")
    now = buyer.call("GET", "/v1/slots").json()["now"]
    requests = [
        {"cores": 4, "walltime": 600, "limit": 1, "earliest_start": now + 3600 + 900 * k}
        for k in range(count)
    ]
    answer = buyer.call("POST", "/v1/quotes/batch", {"requests": requests})
    assert answer.status == 200, answer.body
    return [quote["offers"][0]["offer_id"] for quote in answer.json()["answers"]]


def parts(market: Market, offer_ids: List[str]) -> List[S]:
    store = Store(str(market.agents["hpc1"].state_dir / STORE_FILE))
    try:
        found = [store.reservation_for_offer(offer_id) for offer_id in offer_ids]
        return [record.state for record in found if record is not None]
    finally:
        store.close()


@pytest.mark.parametrize("point", POINTS)
def test_a_batch_killed_between_its_parts_holds_nothing(market: Market, point: str) -> None:
    agent = market.agents["hpc1"].service
    ids = offers(market, 3)
    agent.kill()
    agent.restart(crash=point)
    buyer = market.buyer_at("hpc1")
    with pytest.raises(OSError):  # the agent dies while it holds some of the parts
        buyer.call("POST", "/v1/reservations/batch", {"offer_ids": ids})
    agent.process.wait(timeout=30)
    held = parts(market, ids)
    assert S.TENTATIVE in held or S.REQUESTED in held, held  # killed half-way, indeed
    agent.restart()
    wait_until(
        "the interrupted batch released",
        lambda: all(state in (S.CANCELLED, S.FAILED) for state in parts(market, ids)),
        timeout=60,
    )
    assert market.tentative_anywhere() == []
    again = buyer.call("POST", "/v1/reservations/batch", {"offer_ids": ids})
    assert again.status == 409, again.body
    assert again.json()["error"]["code"] == "reservation_failed"
    assert "interrupted" in again.json()["error"]["message"]
