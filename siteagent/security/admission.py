"""How much each client may ask: a token bucket per client and kind of request, and a bound
on the offers a client holds.

An authorized client is trusted to be who it is, not to be reasonable: a quote costs the site
pricing work and stored offers (kept until a day after they lapse), an accept or a cancel
batch-system commands. Each client has its own buckets and its own bound, so one client's
flood is refused (429 with Retry-After) without slowing the others.
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from typing import Callable, Collection, Dict, List, Mapping, Sequence, Set, Tuple

from siteagent.config.schema import RateLimit
from siteagent.core.errors import SiteagentError
from siteagent.core.values import Offer
from siteagent.protocol.errors import RATE_LIMITED, TOO_MANY_OFFERS


class RateLimited(SiteagentError):
    """429: the client asked more often than its rate allows; ``retry_after_s`` says when
    its next request is let in."""

    code = RATE_LIMITED


class RateLimiter:
    """Token buckets per (client, kind): ``limits[kind]`` requests per second on average,
    ``burst`` at once. A kind without a limit is not limited."""

    def __init__(
        self, limits: Mapping[str, RateLimit], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = dict(limits)
        self._clock = clock
        self._buckets: Dict[Tuple[str, str], Tuple[float, float]] = {}  # (tokens, at)
        self._lock = threading.Lock()

    def admit(self, client: str, kind: str, cost: float = 1.0) -> None:
        """Take ``cost`` tokens for one request (a batch costs the work of its parts, see
        docs/batches.md), or raise RateLimited. A request costing more than a full bucket is
        let in once the bucket is full, and leaves it owing the rest: a client's rate over
        time is the limit's, however it batches its requests."""
        limit = self.limits.get(kind)
        if limit is None:
            return
        with self._lock:
            now = self._clock()
            tokens, at = self._buckets.get((client, kind), (float(limit.burst), now))
            tokens = min(float(limit.burst), tokens + (now - at) * limit.per_second)
            needed = min(cost, float(limit.burst))
            if tokens < needed:
                self._buckets[(client, kind)] = (tokens, now)
                wait = math.ceil((needed - tokens) / limit.per_second)
                raise RateLimited(
                    f"{client} sends {kind} faster than {limit.per_second:g} per second "
                    f"(bursts of {limit.burst}); retry in {wait} s",
                    retry_after_s=wait,
                )
            self._buckets[(client, kind)] = (tokens - cost, now)


class TooManyOffers(SiteagentError):
    """429: the client holds as many live offers as it may; ``retry_after_s`` is when the
    first of them lapses."""

    code = TOO_MANY_OFFERS


class OfferQuota:
    """The offers each client holds (quoted and not yet lapsed), against ``per_client``.

    Counted in memory, as the quotes are answered, so that a quote costs no read of the
    state database on the server's event loop; offers quoted before a restart are not
    counted (they lapse within minutes). A quote is let in while the client holds fewer than
    the bound, so a client may pass it by one quote's offers at most.
    """

    def __init__(self, per_client: int) -> None:
        self.per_client = per_client
        self._expiries: Dict[str, List[Tuple[int, str]]] = {}  # (expires, offer id), a heap
        self._withdrawn: Dict[str, Set[str]] = {}  # ids in the heap the client withdrew
        self._lock = threading.Lock()

    def check(self, client: str, now: int) -> None:
        """Raise TooManyOffers if ``client`` may not be quoted more now."""
        with self._lock:
            held = self._live(client, now)
            count = len(held) - len(self._withdrawn.get(client, ()))
            if count >= self.per_client:
                wait = max(1, held[0][0] - now)
                raise TooManyOffers(
                    f"{client} holds {count} live offers, the most this site keeps for one "
                    f"client; accept some, withdraw those it does not want (docs/batches.md), "
                    f"or retry in {wait} s when the first lapses",
                    retry_after_s=wait,
                )

    def add(self, client: str, offers: Sequence[Offer]) -> None:
        with self._lock:
            held = self._expiries.setdefault(client, [])
            for offer in offers:
                heapq.heappush(held, (offer.expires, offer.id))

    def withdraw(self, client: str, offer_ids: Collection[str]) -> None:
        """The client gave these offers up: they count no more."""
        with self._lock:
            held = {offer_id for _, offer_id in self._expiries.get(client, ())}
            self._withdrawn.setdefault(client, set()).update(held & set(offer_ids))

    def _live(self, client: str, now: int) -> List[Tuple[int, str]]:
        held = self._expiries.setdefault(client, [])
        withdrawn = self._withdrawn.get(client)
        while held and held[0][0] <= now:
            _, offer_id = heapq.heappop(held)
            if withdrawn:
                withdrawn.discard(offer_id)
        return held
