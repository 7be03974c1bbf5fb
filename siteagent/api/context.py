"""What the API serves: the site, the agent keeping its view fresh, who may sign, the deals.

Reads come from the agent's latest state, never from the batch system per request: a burst of
quotes costs no batch-system calls, and a slow batch system never makes a quote slow. When the
state cannot be trusted (the last poll failed, none succeeded yet, the polls stopped), reads
answer 503 with Retry-After rather than sell capacity from a picture that may be wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from siteagent.agent.loop import Agent
from siteagent.agent.metrics import Metrics
from siteagent.core.errors import Unavailable
from siteagent.market.deals import Deals
from siteagent.market.site import Site
from siteagent.market.view import MarketView
from siteagent.security.authentication import Authenticator


@dataclass
class ApiContext:
    """The parts every route works on; ``metrics`` is None for an agent run without them."""

    site: Site
    agent: Agent
    authenticator: Authenticator
    deals: Deals
    metrics: Optional[Metrics]

    def view(self) -> MarketView:
        """The latest state's market view, or 503 (Unavailable) while it cannot be trusted."""
        state = self.agent.state
        problem = self.agent.staleness()
        if problem is not None or state is None:
            code, why = problem or ("no_snapshot", "the agent has not read the cluster yet")
            retry = self.retry_after_s()
            raise Unavailable(f"{why}; retry in {retry} s", code=code, retry_after_s=retry)
        return state.market

    def retry_after_s(self) -> int:
        """Seconds until the agent polls again: when a retry can see something new."""
        return max(1, math.ceil(self.agent.poll_interval_s))
