"""Prometheus metrics of one agent: the registry, the API's and the backend's histograms.

The figures come from two collectors: :class:`~siteagent.agent.cluster_metrics.ClusterCollector`
(snapshot, plan, reference quotes) and :class:`~siteagent.agent.store_metrics.StoreCollector`
(reservations, bids, usage). Invariant: a scrape never plans or prices; the figures are made
once per cycle by :meth:`Metrics.observe_state`. Names carry ``siteagent_`` and a unit suffix;
capacity is in cores. docs/admin.md (Metrics).
"""

from __future__ import annotations

import time
from typing import Callable, Optional, Sequence, Tuple

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from siteagent.agent.cluster_metrics import ClusterCollector
from siteagent.agent.metered import MeteredBackend, error_kind
from siteagent.agent.state import CycleState
from siteagent.agent.store_metrics import StoreCollector
from siteagent.backends.base import Backend
from siteagent.config.schema import ReferenceRequest, SiteConfig
from siteagent.core.defaults import DEFAULT_POLL_INTERVAL_S
from siteagent.market.store import Store
from siteagent.pricing.load import LoadOffer

#: Latency buckets (seconds): API requests are milliseconds, backend calls up to their timeout.
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BACKEND_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

#: HTTP methods labelled by name; any other request method is counted as ``other``.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class Metrics:
    """The agent's metrics in their own registry (so tests and several agents never collide).

    ``reference_requests`` are quoted as a buyer would, at the first cycle and then every
    ``reference_interval_s``; ``store`` supplies the reservation figures; ``clock`` must be the
    agent's clock (the snapshot's age is ``clock() - state.taken_at``).
    """

    def __init__(
        self,
        site: SiteConfig,
        reference_requests: Sequence[ReferenceRequest] = (),
        reference_interval_s: float = 0.0,
        store: Optional[Store] = None,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.cluster = ClusterCollector(
            site, reference_requests, reference_interval_s, poll_interval_s, clock
        )
        self.store = store
        self.stored = None if store is None else StoreCollector(store)
        self.requests = Histogram(
            "siteagent_http_request_duration_seconds",
            "API requests by route template, method and status code.",
            ("route", "method", "status"),
            buckets=REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.backend_calls = Histogram(
            "siteagent_backend_operation_duration_seconds",
            "Batch-system operations (snapshot, list/create/delete reservation), each one or "
            "more client commands, by outcome.",
            ("backend", "operation", "outcome"),
            buckets=BACKEND_BUCKETS,
            registry=self.registry,
        )
        self.rate_limited = Counter(
            "siteagent_rate_limited_requests",
            "Signed requests refused (429) because their client asked faster than its rate, "
            "by kind: quotes, reservations (accept, confirm, cancel), bids.",
            ("kind",),
            registry=self.registry,
        )
        self.backend_errors = Counter(
            "siteagent_backend_operation_errors",
            "Failed batch-system operations: 'unavailable' (no answer, hang, garbage), "
            "'refused' (a reservation refused), 'error' (anything else).",
            ("backend", "operation", "kind"),
            registry=self.registry,
        )
        ProcessCollector(registry=self.registry)
        self.registry.register(self.cluster)
        if self.stored is not None:
            self.registry.register(self.stored)

    # ---- settings a reload changes

    @property
    def site(self) -> SiteConfig:
        return self.cluster.site

    @site.setter
    def site(self, site: SiteConfig) -> None:
        self.cluster.site = site

    @property
    def poll_interval_s(self) -> float:
        return self.cluster.poll_interval_s

    @poll_interval_s.setter
    def poll_interval_s(self, seconds: float) -> None:
        self.cluster.poll_interval_s = seconds

    @property
    def reference_requests(self) -> Tuple[ReferenceRequest, ...]:
        return self.cluster.reference_requests

    def follow(self, requests: Sequence[ReferenceRequest], interval_s: float) -> None:
        """Quote these reference shapes from the next cycle on (a reloaded configuration)."""
        self.cluster.follow(requests, interval_s)

    # ---- what the agent, the API and the backend wrapper report

    def observe_state(self, state: CycleState, up: bool = True) -> None:
        """Take the figures of a new cycle's state (and the store's reservations)."""
        self.cluster.observe(state, up)
        if self.stored is not None:
            self.stored.observe(state.snapshot)

    def observe_failure(self) -> None:
        """A cycle's refresh failed: the backend is down; the last state's figures stay."""
        self.cluster.observe_failure()

    def observe_down(self) -> None:
        """The batch system failed in the cycle's housekeeping, after its refresh."""
        self.cluster.observe_down()

    def observe_reservations(self) -> None:
        """Re-read reservation counts, new transitions and the bids' figures from the store."""
        if self.stored is not None:
            self.stored.observe_reservations()

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        """One API request. ``route`` is the route's template (``/v1/reservations/{id}``),
        never the raw path, and a method the API does not know is ``other``: no value a client
        sends becomes a label value (each one is a new time series)."""
        method = method.upper() if method.upper() in KNOWN_METHODS else "other"
        self.requests.labels(route, method, str(status)).observe(max(seconds, 0.0))

    def observe_load_offer(self, figures: LoadOffer) -> None:
        """The latest quote priced by load: its decrement, offer and load, as gauges."""
        self.cluster.observe_load_offer(figures)

    def observe_rate_limited(self, kind: str) -> None:
        """A signed request refused for its client's rate (``kind``: quotes, reservations,
        bids)."""
        self.rate_limited.labels(kind).inc()

    def observe_backend_call(
        self, backend: str, operation: str, seconds: float, error: Optional[BaseException]
    ) -> None:
        """One batch-system operation, and its failure if it failed."""
        outcome = "ok" if error is None else "error"
        self.backend_calls.labels(backend, operation, outcome).observe(max(seconds, 0.0))
        if error is not None:
            self.backend_errors.labels(backend, operation, error_kind(error)).inc()

    def instrument(self, backend: Backend) -> Backend:
        """``backend`` with every operation timed and its failures counted here."""
        return MeteredBackend(backend, self)

    def render(self) -> Tuple[bytes, str]:
        """The exposition body and its content type, for ``GET /metrics``."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
