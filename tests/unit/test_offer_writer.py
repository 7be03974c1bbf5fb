"""Offers stored by group commit: each quote learns that its own offers are stored (or why
not), quotes waiting together share a transaction, and one quote's failure is its own."""

from __future__ import annotations

import asyncio
import threading
from typing import List, Sequence

import pytest

from siteagent.api.offer_writer import OfferWriter
from siteagent.core.values import Offer
from siteagent.market.store import Store
from testbed.inprocess.offers import an_offer


class Recorder:
    """Stores offers in a real store, holding the first commit until ``release`` is set, so
    that the quotes arriving meanwhile queue up behind it; remembers each commit's ids."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.commits: List[List[str]] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, offers: Sequence[Offer]) -> None:
        self.started.set()
        self.release.wait(30)
        self.commits.append([offer.id for offer in offers])
        self.store.add_offers(offers, 0.0)


async def quotes_behind_a_slow_commit(
    writer: OfferWriter, recorder: Recorder, quotes: List[List[Offer]]
) -> List[object]:
    """The first quote's offers, then (while they are being written) the others'."""
    first = asyncio.ensure_future(writer.record(quotes[0]))
    await asyncio.get_running_loop().run_in_executor(None, recorder.started.wait, 30)
    rest = [asyncio.ensure_future(writer.record(offers)) for offers in quotes[1:]]
    await asyncio.sleep(0)
    recorder.release.set()
    return list(await asyncio.gather(first, *rest, return_exceptions=True))


def test_quotes_waiting_together_share_one_commit() -> None:
    store = Store(":memory:")
    recorder = Recorder(store)
    writer = OfferWriter(recorder)
    quotes = [[an_offer("a1"), an_offer("a2")], [an_offer("b1")], [an_offer("c1")]]
    outcomes = asyncio.run(quotes_behind_a_slow_commit(writer, recorder, quotes))
    writer.close()
    assert outcomes == [None, None, None]
    assert recorder.commits == [["a1", "a2"], ["b1", "c1"]]
    assert all(store.get_offer(o.id) is not None for offers in quotes for o in offers)


def test_one_quotes_failure_is_its_own_and_its_neighbours_are_stored() -> None:
    store = Store(":memory:")
    store.add_offers([an_offer("taken")], 0.0)
    recorder = Recorder(store)
    writer = OfferWriter(recorder)
    quotes = [[an_offer("a1")], [an_offer("b1")], [an_offer("taken")], [an_offer("d1")]]
    outcomes = asyncio.run(quotes_behind_a_slow_commit(writer, recorder, quotes))
    writer.close()
    assert outcomes[:2] == [None, None] and outcomes[3] is None
    assert isinstance(outcomes[2], ValueError) and "exists already" in str(outcomes[2])
    assert all(store.get_offer(offer_id) is not None for offer_id in ("a1", "b1", "d1"))


def test_close_stores_what_is_queued_and_stops_the_thread() -> None:
    store = Store(":memory:")
    writer = OfferWriter(lambda offers: store.add_offers(offers, 0.0))

    async def one() -> None:
        await writer.record([an_offer("x1")])

    before = set(threading.enumerate())
    asyncio.run(one())
    threads = [t for t in threading.enumerate() if t.name == "offers" and t not in before]
    writer.close()
    assert store.get_offer("x1") is not None
    assert threads and not any(thread.is_alive() for thread in threads)


def test_an_error_storing_reaches_the_quote() -> None:
    def failing(offers: Sequence[Offer]) -> None:
        raise OSError("disk full")

    writer = OfferWriter(failing)

    async def one() -> None:
        await writer.record([an_offer("x1")])

    with pytest.raises(OSError, match="disk full"):
        asyncio.run(one())
    writer.close()
