"""A confirm and a cancel of the same reservation, the cancel landing at every step of the
confirm: the buyer never pays for a reservation cancelled before it was confirmed, and pays
exactly the agreed penalty for one cancelled after.

The confirm runs in a thread and is paused at one step (before or after one call: the
batch-system listing, keeping the receipt, the bank's booking, marking it booked, the move to
CONFIRMED); the cancel runs meanwhile, then the confirm goes on. The agent's loop settles
afterwards, as it would at its next cycle.
"""

from __future__ import annotations

import functools
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

from siteagent.core.errors import SiteagentError
from siteagent.market.lifecycle import ReservationState
from siteagent.protocol import documents
from testbed.inprocess.api_harness import World, running_world

S = ReservationState

#: (object, method, when) at which the confirm is paused while the cancel runs.
STEPS = [
    ("backend", "list_reservations", "before"),
    ("store", "owe", "before"),
    ("store", "owe", "after"),  # the receipt kept, the bank not asked yet
    ("ledger", "book", "before"),
    ("ledger", "book", "after"),  # booked at the bank, the reservation not moved
    ("store", "mark_booked", "after"),
    ("store", "transition", "before"),
    ("store", "transition", "after"),  # CONFIRMED
]

#: Long enough for any step of an in-process confirm on a busy machine; a test that hits it
#: failed (it never waits this long when it passes).
TIMEOUT_S = 30.0


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with running_world(tmp_path) as made:
        yield made


class Pause:
    """Pauses the first call of ``method`` on ``target`` made by the confirm's thread, before
    or after it runs, until :meth:`resume`."""

    def __init__(self, target: Any, method: str, when: str) -> None:
        self.reached = threading.Event()
        self.resumed = threading.Event()
        self.thread: Optional[threading.Thread] = None
        original: Callable[..., Any] = getattr(target, method)

        @functools.wraps(original)
        def paused(*args: Any, **kwargs: Any) -> Any:
            mine = threading.current_thread() is self.thread and not self.reached.is_set()
            if mine and when == "before":
                self.wait()
            result = original(*args, **kwargs)
            if mine and when == "after":
                self.wait()
            return result

        setattr(target, method, paused)

    def wait(self) -> None:
        self.reached.set()
        assert self.resumed.wait(TIMEOUT_S), "the test never resumed the confirm"

    def resume(self) -> None:
        self.resumed.set()


def reserve(world: World) -> Dict[str, Any]:
    """A tentative reservation of alice's whose cancellation after a confirm costs a penalty."""
    request = {"cores": 16, "walltime": 7200}
    offers = world.signed(world.alice, "POST", "/v1/quotes", request).json()["offers"]
    best = max(offers, key=lambda offer: Decimal(offer["fee"]))
    answer = world.signed(world.alice, "POST", "/v1/reservations", {"offer_id": best["offer_id"]})
    assert answer.status_code == 201, answer.text
    reservation: Dict[str, Any] = answer.json()
    assert Decimal(reservation["deal"]["cancellation_penalty"]) > 0
    return reservation


@pytest.mark.parametrize(("target", "method", "when"), STEPS)
def test_a_cancel_at_any_step_of_a_confirm_never_charges_a_cancelled_reservation(
    world: World, target: str, method: str, when: str
) -> None:
    deals = world.context.deals
    reservation = reserve(world)
    rid = reservation["id"]
    objects = {"backend": world.backend, "store": world.site.store, "ledger": world.ledger}
    pause = Pause(objects[target], method, when)
    client = world.context.authenticator.clients[world.alice.key_id]
    body = documents.confirm_body(reservation["deal"], world.alice.key, world.alice.key_id)
    outcome: List[str] = []

    def confirm() -> None:
        try:
            outcome.append(deals.confirm(rid, body, client, "confirm-1").record.state.value)
        except SiteagentError as exc:
            outcome.append(exc.code)

    pause.thread = threading.Thread(target=confirm)
    pause.thread.start()
    assert pause.reached.wait(TIMEOUT_S), f"the confirm never reached {method} ({outcome})"
    cancelled = deals.cancel(rid, world.alice.key_id, "cancel-1")
    pause.resume()
    pause.thread.join(TIMEOUT_S)
    deals.settle()  # the agent's next cycle

    record = world.site.store.get_reservation(rid)
    assert record is not None and record.state is S.CANCELLED
    confirmed_first = world.site.store.receipt(rid) is not None
    price = Decimal(reservation["deal"]["price"])
    penalty = Decimal(reservation["deal"]["cancellation_penalty"])
    paid = -world.ledger.balance(world.alice.key_id)
    assert paid == (penalty if confirmed_first else 0), (outcome, paid)
    assert paid != price
    assert world.ledger.balance("hpc1") == paid
    assert cancelled.record.penalty == (penalty if confirmed_first else 0)
    if (method, when) == ("transition", "after"):
        # confirmed, then cancelled: the confirm answers the reservation as it is now
        assert confirmed_first and outcome == ["CANCELLED"]
    else:
        assert not confirmed_first and outcome == ["illegal_transition"], outcome
    assert deals.settle().booked == 0  # settled once and for all
