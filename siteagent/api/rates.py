"""How much of its rate each signed request costs a client: one request, or a batch's parts.

The gate (:mod:`siteagent.http.gate`) lets a signed request in against its client's token
bucket before its body is read; a batch (docs/batches.md) is let in there as one request and
charged the rest of its work by its route, once the body says how many parts it has: a batch
quote as its requests, a batch accept as its parts (each is a command to the batch system),
a batch confirm as one request per ten parts (one signature, one booking, and a state write
per part: bench/results/batches.md measures the agent's CPU per part of each).
"""

from __future__ import annotations

import math

from siteagent.api.context import ApiContext
from siteagent.http.gate import signs_state_changes
from siteagent.security.admission import RateLimited, RateLimiter
from siteagent.security.clients import AuthorizedClient

#: The kinds of request each client's rate is counted in.
QUOTES, RESERVATIONS, BIDS = "quotes", "reservations", "bids"

#: Confirm parts per request of a client's rate in a batch confirm.
CONFIRMS_PER_REQUEST = 10


def kind_of(path: str) -> str:
    """The rate a state-changing request counts against."""
    if path in ("/v1/quotes", "/v1/quotes/batch"):
        return QUOTES
    if path == "/v1/bids" or path.startswith("/v1/bids/"):
        return BIDS
    return RESERVATIONS


def confirm_cost(parts: int) -> int:
    """Requests of the rate a batch confirm of ``parts`` parts costs."""
    return 1 + math.ceil((parts - 1) / CONFIRMS_PER_REQUEST)


class Admission:
    """Each client's token buckets (``api.rate_limits``): quotes, bids, and the reservation
    requests (accept, confirm, cancel); refusals counted in the metrics."""

    def __init__(self, context: ApiContext) -> None:
        rates = context.site.config.api.rate_limits
        self.limiter = RateLimiter(
            {QUOTES: rates.quotes, RESERVATIONS: rates.reservations, BIDS: rates.bids}
        )
        self.context = context

    def __call__(self, client: AuthorizedClient, method: str, path: str) -> None:
        """The gate's check: one request."""
        if signs_state_changes(method, path):
            self._take(client, kind_of(path), 1.0)

    def batch(self, client: AuthorizedClient, path: str, cost: int) -> None:
        """A batch of ``cost`` requests' work, the gate having let in the first."""
        if cost > 1:
            self._take(client, kind_of(path), float(cost - 1))

    def _take(self, client: AuthorizedClient, kind: str, cost: float) -> None:
        try:
            self.limiter.admit(client.key_id, kind, cost)
        except RateLimited:
            if self.context.metrics is not None:
                self.context.metrics.observe_rate_limited(kind)
            raise
