"""Offers recorded by group commit: the quotes answered at about the same moment share one
transaction, written by one thread, while the API's event loop goes on answering.

Why: every offer is stored before its quote is answered (a buyer may accept it at once), and
each store transaction syncs to disk. Written by the thread that prices the quote, that is one
disk sync and one hand-over of the interpreter between threads per quote; on a 10,000-job queue
the hand-overs cost more CPU than pricing a unit-price quote, and the syncs queue every quote
behind the disk. Here a quote waits (asynchronously) for the next commit, and under load a
commit carries the offers of every quote that arrived while the previous one was being
written: one sync and one wake-up of the event loop for many quotes. The durability is the
store's own (``synchronous=FULL``): a quote is answered only once its offers are on disk.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from siteagent.core.values import Offer

log = logging.getLogger("siteagent.offers")

#: Stores offers in one transaction, or raises (the reservation manager's record_offers).
Record = Callable[[Sequence[Offer]], None]


@dataclass(frozen=True)
class _Pending:
    """One quote's offers, and the future that tells it they are stored (or why not)."""

    offers: Sequence[Offer]
    loop: asyncio.AbstractEventLoop
    done: asyncio.Future[None]


#: What a commit tells each waiting quote: nothing (stored) or the error that stopped it.
_Outcome = Tuple[_Pending, Optional[Exception]]


class OfferWriter:
    """One thread storing the offers of waiting quotes together (see the module's doc)."""

    def __init__(self, record: Record) -> None:
        self._record = record
        self._queue: queue.SimpleQueue[Optional[_Pending]] = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    async def record(self, offers: Sequence[Offer]) -> None:
        """Return once ``offers`` are stored; raise what storing them raised."""
        self._start()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._queue.put(_Pending(offers, loop, done))
        await done

    def close(self) -> None:
        """Store what is queued, then stop the thread (before the store is closed)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="offers", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            batch, stopping = self._next_batch()
            if batch:
                _settle(self._commit(batch))

    def _next_batch(self) -> Tuple[List[_Pending], bool]:
        """Everything queued (waiting for the first), and whether the stop came with it."""
        first = self._queue.get()
        if first is None:
            return [], True
        batch = [first]
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return batch, False
            if item is None:
                return batch, True
            batch.append(item)

    def _commit(self, batch: Sequence[_Pending]) -> List[_Outcome]:
        """One transaction for the batch; if it fails, each quote on its own, so that one
        quote's failure (an offer id clash) is that quote's answer and not its neighbours'."""
        try:
            self._record([offer for item in batch for offer in item.offers])
        except Exception as exc:
            if len(batch) == 1:
                return [(batch[0], exc)]
            return [(item, self._record_alone(item)) for item in batch]
        return [(item, None) for item in batch]

    def _record_alone(self, item: _Pending) -> Optional[Exception]:
        try:
            self._record(item.offers)
        except Exception as exc:
            return exc
        return None


def _settle(outcomes: Sequence[_Outcome]) -> None:
    """Hand each quote its outcome on its own event loop: one wake-up per loop, not per quote."""
    by_loop: Dict[asyncio.AbstractEventLoop, List[_Outcome]] = {}
    for outcome in outcomes:
        by_loop.setdefault(outcome[0].loop, []).append(outcome)
    for loop, some in by_loop.items():
        try:
            loop.call_soon_threadsafe(_resolve, some)
        except RuntimeError:  # that loop has closed: nobody is waiting for these answers
            log.debug("offers of %d quote(s) stored after their event loop closed", len(some))


def _resolve(outcomes: Sequence[_Outcome]) -> None:
    for pending, error in outcomes:
        if pending.done.cancelled():
            continue
        if error is None:
            pending.done.set_result(None)
        else:
            pending.done.set_exception(error)
