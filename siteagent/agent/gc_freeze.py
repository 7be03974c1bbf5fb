"""The agent's long-lived objects kept out of the cyclic garbage collector's way.

Why: each cycle leaves a snapshot, a plan and the priced slots of a 10,000-job queue in
memory, well over 100,000 objects that live until the next cycle replaces them. Python's
collector walks every one of them in each full collection, 40-60 ms during which no request
is answered; under a burst of quotes (each allocating short-lived objects, some of them alive
across a young collection) full collections came every second or so, and they were most of
the quote latency's tail. So after each cycle everything alive is frozen (:func:`gc.freeze`):
later collections skip it. Frozen objects are still freed by reference counting when the next
state replaces them (the states hold no reference cycles: a cycle's state is freed whole when
the next one replaces it), so freezing costs no memory; only cyclic garbage that happened to be
alive at a freeze would wait, and a full collection every :data:`FULL_COLLECTION_S` (before
that cycle's freeze) frees it.
"""

from __future__ import annotations

import gc
import time
from typing import Callable, Optional

#: How often a settle first unfreezes and collects everything (seconds).
FULL_COLLECTION_S = 300.0


class Heap:
    """Settles the heap after each cycle (see the module's doc)."""

    def __init__(
        self,
        full_collection_s: float = FULL_COLLECTION_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.full_collection_s = full_collection_s
        self._clock = clock
        self._collected_at: Optional[float] = None

    def settle(self) -> bool:
        """Freeze what is alive, after a full collection when one is due; True if it
        collected (the first settle always does)."""
        now = self._clock()
        due = self._collected_at is None or now - self._collected_at >= self.full_collection_s
        if due:
            gc.unfreeze()
            gc.collect()
            self._collected_at = now
        gc.freeze()
        return due
