"""Prometheus metrics of one agent: the cluster, the plan, prices, reservations, the API.

Why the figures are computed when the agent observes a new state rather than when Prometheus
scrapes: a scrape must be cheap and must never plan or price (a slow scrape of a 10,000-job
queue times out, and concurrent scrapes would multiply the work). :meth:`Metrics.observe_state`
turns the latest :class:`~siteagent.agent.State` into a finished set of samples once per cycle;
:meth:`Metrics.render` only formats them. The one figure read at scrape time is the snapshot's
age, which is a subtraction.

Reservation counts and transition counters are read from the store, incrementally (new
history lines since the last cycle), so they count every move made by any process sharing the
state directory, and the counters carry on across restarts instead of falling back to zero.
So are the figures of the capacity sold: the cores of the active reservations and the cores
their jobs use now (a reservation bought and left empty shows as sold and unused, and is
counted), and over the reservations that are over, the core-hours sold and used.

Names carry the ``siteagent_`` prefix and a unit suffix; capacity is always in cores (a
partition allocating whole nodes is converted with its cores per node), money in the site's
virtual currency, times in seconds.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import (
    Callable,
    Dict,
    Iterable,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

import siteagent
from siteagent.agent.state import State
from siteagent.backends.base import Backend, BackendUnavailable, ReservationRefused
from siteagent.config.schema import ReferenceRequest, SiteConfig
from siteagent.core.defaults import DEFAULT_POLL_INTERVAL_S
from siteagent.core.model import BatchReservation, CapacityUnit, ClusterSnapshot, ReservationSpec
from siteagent.core.usage import JobUsage
from siteagent.market.lifecycle import ReservationRecord, ReservationState
from siteagent.market.quoting import quote
from siteagent.market.store import BidFigures, Store, UsageTotals
from siteagent.pricing import Refused, Window
from siteagent.pricing.load import LoadOffer
from siteagent.protocol.models import QuoteRequest

#: Windows over which free capacity is summed (label value, seconds).
FREE_WINDOWS: Tuple[Tuple[str, int], ...] = (("1h", 3600), ("6h", 6 * 3600), ("24h", 86400))

#: Latency buckets (seconds): API requests are milliseconds, backend calls up to their timeout.
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BACKEND_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

#: HTTP methods labelled by name; any other request method is counted as ``other``.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

#: Node states as the metrics group them: the batch systems' own words vary too much.
NODE_STATES = ("idle", "mixed", "allocated", "unavailable")

_HOUR = 3600.0

_T = TypeVar("_T")


@dataclass(frozen=True)
class Sample:
    """One gauge or counter value with its labels, ready to be exposed."""

    name: str
    value: float
    labels: Tuple[Tuple[str, str], ...] = ()


class Metrics:
    """The agent's metrics in their own registry (so tests and several agents never collide).

    ``reference_requests`` are quoted as a buyer would (:func:`siteagent.market.quoting.quote`
    on the state's market view, at the site ``site`` describes), at the first cycle and then
    every ``reference_interval_s`` (their figures stay in between); ``store`` supplies the
    reservation counts; ``clock`` must be the agent's clock (the snapshot's age is
    ``clock() - state.taken_at``).
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
        self.reference_requests = tuple(reference_requests)
        self.reference_interval_s = reference_interval_s
        self._reference_samples: List[Sample] = []
        self._referenced_at: Optional[float] = None
        self.store = store
        self.poll_interval_s = poll_interval_s
        self.site = site
        self._clock = clock
        self._lock = threading.Lock()
        self._state_samples: List[Sample] = []
        self._taken_at: Optional[float] = None
        self._backend_up = 0.0
        self._backend_name = ""
        self._refresh_failures = 0
        self._transitions: Dict[Tuple[str, str], int] = {}
        self._by_state: Dict[ReservationState, int] = {}
        self._bookings_owed = 0
        self._bids = BidFigures(0, 0, 0, 0)
        self._unit = CapacityUnit.CORE
        self._database_bytes = 0
        self._last_seq = 0
        self._usage_totals = UsageTotals()
        self._cores_per_node = 1
        self._load_offer: Optional[LoadOffer] = None
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
        self.registry.register(_StateCollector(self))

    # ---- what the agent, the API and the backend wrapper report

    def observe_state(self, state: State) -> None:
        """Take the figures of a new cycle's state (and the store's reservations)."""
        samples = cluster_samples(state.snapshot, state.plan.profile.free_at(state.snapshot.now))
        samples += plan_samples(state)
        samples += self._reference_quotes(state)
        if self.store is not None:
            active = self.store.reservations([ReservationState.ACTIVE])
            samples += sold_samples(state.snapshot, active)
        with self._lock:
            self._state_samples = samples
            self._taken_at = state.taken_at
            self._backend_up = 1.0
            self._backend_name = state.snapshot.backend
            self._unit = state.snapshot.unit
            self._cores_per_node = state.snapshot.cores_per_node
        self.observe_reservations()

    def follow(self, requests: Sequence[ReferenceRequest], interval_s: float) -> None:
        """Quote these reference shapes from the next cycle on (a reloaded configuration)."""
        self.reference_requests = tuple(requests)
        self.reference_interval_s = interval_s
        self._referenced_at = None

    def _reference_quotes(self, state: State) -> List[Sample]:
        """The reference shapes' quotes, made again once ``reference_interval_s`` passed."""
        now = self._clock()
        due = self._referenced_at is None or now - self._referenced_at >= self.reference_interval_s
        if due:
            self._reference_samples = quote_samples(state, self.site, self.reference_requests)
            self._referenced_at = now
        return self._reference_samples

    def observe_failure(self) -> None:
        """A cycle's refresh failed: the backend is down; the last state's figures stay."""
        with self._lock:
            self._backend_up = 0.0
            self._refresh_failures += 1

    def observe_reservations(self) -> None:
        """Re-read reservation counts and new transitions, and the bids' figures, from the
        store (if there is one)."""
        if self.store is None:
            return
        by_state = self.store.count_by_state()
        owed = self.store.count_bookings_owed()
        bids = self.store.bid_figures()
        size = self.store.size_bytes()
        totals = self.store.usage_totals()
        with self._lock:
            self._bids = bids
            self._usage_totals = totals
            last, counts = self.store.count_transitions(self._last_seq)
            self._last_seq = last
            self._by_state = by_state
            self._bookings_owed = owed
            self._database_bytes = size
            for (src, dst), count in counts.items():
                key = ("" if src is None else src.value, dst.value)
                self._transitions[key] = self._transitions.get(key, 0) + count

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        """One API request. ``route`` is the route's template (``/v1/reservations/{id}``),
        never the raw path, and a method the API does not know is ``other``: no value a client
        sends becomes a label value (each one is a new time series)."""
        method = method.upper() if method.upper() in KNOWN_METHODS else "other"
        self.requests.labels(route, method, str(status)).observe(max(seconds, 0.0))

    def observe_load_offer(self, figures: LoadOffer) -> None:
        """The latest quote priced by load: its decrement, offer and load, exported as gauges
        (scraped over time, they are the paper's attractiveness and offer curves)."""
        with self._lock:
            self._load_offer = figures

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

    # ---- read by the collector

    def _live_samples(self) -> List[Sample]:
        with self._lock:
            samples = list(self._state_samples)
            age = float("inf") if self._taken_at is None else self._clock() - self._taken_at
            samples.append(Sample("siteagent_snapshot_age_seconds", max(age, 0.0)))
            samples.append(Sample("siteagent_backend_up", self._backend_up))
            samples.append(Sample("siteagent_poll_interval_seconds", self.poll_interval_s))
            samples.append(
                Sample(
                    "siteagent_info",
                    1.0,
                    (
                        ("version", siteagent.__version__),
                        ("site", self.site.name),
                        ("backend", self._backend_name),
                    ),
                )
            )
            samples += load_offer_samples(self._load_offer)
            if self.store is not None:
                samples += [
                    Sample(
                        "siteagent_reservations",
                        float(self._by_state.get(s, 0)),
                        (("state", s.value),),
                    )
                    for s in ReservationState
                ]
                samples.append(Sample("siteagent_ledger_bookings_owed", float(self._bookings_owed)))
                samples.append(
                    Sample("siteagent_state_database_bytes", float(self._database_bytes))
                )
                samples += [
                    Sample("siteagent_auctions_open", float(self._bids.open_auctions)),
                    Sample(
                        "siteagent_auction_held_cores",
                        float(self._bids.held_units * _cores_per(self._unit, self._cores_per_node)),
                    ),
                ]
            return samples

    def _counters(self) -> List[Sample]:
        with self._lock:
            counters = [Sample("siteagent_refresh_failures", float(self._refresh_failures))]
            if self.store is not None:
                counters += [
                    Sample("siteagent_reservation_transitions", float(n), (("from", a), ("to", b)))
                    for (a, b), n in sorted(self._transitions.items())
                ]
                timeouts = self._transitions.get(
                    (ReservationState.TENTATIVE.value, ReservationState.EXPIRED.value), 0
                )
                counters.append(Sample("siteagent_reservation_confirm_timeouts", float(timeouts)))
                counters += [
                    Sample("siteagent_auction_bids_made", float(self._bids.made)),
                    Sample("siteagent_auction_bids_won", float(self._bids.won)),
                ]
                counters += finished_samples(self._usage_totals, self._cores_per_node)
            return counters


class _StateCollector:
    """Exposes the figures :class:`Metrics` keeps, as gauges and counters."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        yield from _families(self.metrics._live_samples(), GaugeMetricFamily)
        yield from _families(self.metrics._counters(), CounterMetricFamily)


def _families(
    samples: Iterable[Sample],
    kind: Callable[..., Union[GaugeMetricFamily, CounterMetricFamily]],
) -> Iterable[Metric]:
    grouped: Dict[str, List[Sample]] = {}
    for sample in samples:
        grouped.setdefault(sample.name, []).append(sample)
    for name, group in grouped.items():
        labels = [key for key, _ in group[0].labels]
        family = kind(name, HELP.get(name, name), labels=labels)
        for sample in group:
            family.add_metric([value for _, value in sample.labels], sample.value)
        yield family


# --------------------------------------------------------------------------- figures of a state


def cores_per_unit(snapshot: ClusterSnapshot) -> int:
    """Cores in one unit of the snapshot's capacity (metrics count cores)."""
    return _cores_per(snapshot.unit, snapshot.cores_per_node)


def cluster_samples(snapshot: ClusterSnapshot, free_now: int) -> List[Sample]:
    """Cores and nodes by state, and jobs by state, from one snapshot.

    With node records (Slurm, PBS) cores are counted per node; a replayed cluster has none,
    so its cores are split by the plan's free capacity now (running jobs and reservations).
    """
    per_unit = cores_per_unit(snapshot)
    cores = dict.fromkeys(("allocated", "idle", "unavailable"), 0)
    nodes = dict.fromkeys(NODE_STATES, 0)
    if snapshot.nodes:
        for node in snapshot.nodes:
            if not node.usable:
                cores["unavailable"] += node.cores
                nodes["unavailable"] += 1
                continue
            allocated = min(node.alloc_cores, node.cores)
            cores["allocated"] += allocated
            cores["idle"] += node.cores - allocated
            grouped = (
                "idle" if allocated == 0 else "allocated" if allocated >= node.cores else "mixed"
            )
            nodes[grouped] += 1
    else:
        free = max(min(free_now, snapshot.capacity), 0)
        cores["allocated"] = (snapshot.capacity - free) * per_unit
        cores["idle"] = free * per_unit
    samples = [
        Sample("siteagent_cluster_cores", float(n), (("state", s),)) for s, n in cores.items()
    ]
    if snapshot.nodes:
        samples += [
            Sample("siteagent_cluster_nodes", float(n), (("state", s),)) for s, n in nodes.items()
        ]
    samples += [
        Sample("siteagent_cluster_capacity_cores", float(snapshot.capacity * per_unit)),
        Sample("siteagent_jobs", float(len(snapshot.running)), (("state", "running"),)),
        Sample("siteagent_jobs", float(len(snapshot.pending)), (("state", "pending"),)),
        Sample("siteagent_batch_reservations", float(len(snapshot.reservations))),
    ]
    return samples


def plan_samples(state: State) -> List[Sample]:
    """How the cycle went and what the plan leaves free: slots and core-hours ahead."""
    snapshot, predicted = state.snapshot, state.plan
    per_unit = cores_per_unit(snapshot)
    sources: Dict[str, int] = {}
    for source in predicted.sources.values():
        sources[source.value] = sources.get(source.value, 0) + 1
    samples = [
        Sample("siteagent_snapshot_duration_seconds", state.snapshot_s),
        Sample("siteagent_plan_duration_seconds", state.plan_s),
        Sample("siteagent_snapshot_timestamp_seconds", float(snapshot.now)),
        Sample("siteagent_advertised_slots", float(len(state.market.slots))),
    ]
    samples += [
        Sample("siteagent_pending_jobs_planned", float(sources.get(kind, 0)), (("source", kind),))
        for kind in ("batch", "predicted")
    ]
    samples.append(
        Sample(
            "siteagent_pending_jobs_planned", float(len(predicted.unplanned)), (("source", "none"),)
        )
    )
    for label, seconds in FREE_WINDOWS:
        unit_seconds = free_unit_seconds(
            predicted.profile.segments(), snapshot.now, snapshot.now + seconds
        )
        samples.append(
            Sample(
                "siteagent_free_core_hours", unit_seconds * per_unit / _HOUR, (("within", label),)
            )
        )
    return samples


def free_unit_seconds(
    segments: Iterable[Tuple[int, Optional[int], int]], start: int, end: int
) -> int:
    """Free capacity integrated over [start, end): the area of the plan's free profile."""
    total = 0
    for begin, stop, free in segments:
        lo, hi = max(begin, start), end if stop is None else min(stop, end)
        if hi > lo:
            total += max(free, 0) * (hi - lo)
        if stop is None or stop >= end:
            break
    return total


def quote_samples(
    state: State, site: SiteConfig, shapes: Sequence[ReferenceRequest]
) -> List[Sample]:
    """Each reference shape quoted as a buyer would (the quoting use case, nothing stored):
    the earliest start and its unit price and fee, and the earliest start with no fee."""
    market, snapshot = state.market, state.snapshot
    samples: List[Sample] = []
    try:
        window = Window(snapshot.now, 1, 3600)
        current = market.pricing.unit.unit_price(market.context, window, None)
        samples.append(Sample("siteagent_unit_price_per_core_hour", float(current)))
    except Refused:
        pass  # a saturated machine has no current price; the gauge is left out
    for shape in shapes:
        label = (("request", shape.name),)
        rfq = QuoteRequest.model_validate(
            {"cores": shape.cores, "walltime": shape.duration_s, "limit": 2}
        )
        answer = quote(rfq, market, site, snapshot.now, record=None)
        if answer.refusal is not None:
            samples.append(Sample("siteagent_reference_quote_available", 0.0, label))
            continue
        earliest = min(answer.offers, key=lambda offer: offer.start)
        free = [offer.start for offer in answer.offers if offer.fee == 0]
        samples += [
            Sample("siteagent_reference_quote_available", 1.0, label),
            Sample(
                "siteagent_reference_quote_start_delay_seconds",
                float(earliest.start - snapshot.now),
                label,
            ),
            Sample("siteagent_reference_quote_fee", float(earliest.fee), label),
            Sample(
                "siteagent_reference_quote_unit_price_per_core_hour",
                float(earliest.unit_price),
                label,
            ),
            Sample("siteagent_reference_quote_total", float(earliest.total), label),
        ]
        if free:
            samples.append(
                Sample(
                    "siteagent_reference_quote_free_start_delay_seconds",
                    float(min(free) - snapshot.now),
                    label,
                )
            )
    return samples


def load_offer_samples(figures: Optional[LoadOffer]) -> List[Sample]:
    """The latest load-priced quote's figures; none before the first (or without load pricing)."""
    if figures is None:
        return []
    return [
        Sample("siteagent_load_price_decrement_per_core_hour", float(figures.decrement)),
        Sample("siteagent_load_price_offer_per_core_hour", float(figures.offer)),
        Sample("siteagent_load_price_load_ratio", figures.load),
    ]


def sold_samples(snapshot: ClusterSnapshot, active: Sequence[ReservationRecord]) -> List[Sample]:
    """The cores sold in the agent's ``active`` reservations, the cores their running jobs use
    now, and how many of them no job uses."""
    in_use: Dict[str, int] = {}
    for job in snapshot.running:
        if job.reservation:
            in_use[job.reservation] = in_use.get(job.reservation, 0) + job.cores
    sold = sum(record.size * _cores_per(record.unit, snapshot.cores_per_node) for record in active)
    used = sum(in_use.get(record.name, 0) for record in active)
    empty = sum(record.name not in in_use for record in active)
    return [
        Sample("siteagent_reserved_cores_sold", float(sold)),
        Sample("siteagent_reserved_cores_used", float(used)),
        Sample("siteagent_reservations_active_empty", float(empty)),
    ]


def finished_samples(totals: UsageTotals, cores_per_node: int) -> List[Sample]:
    """Over the reservations that are over (their figures final): core-hours sold and used,
    and how many no job ever used."""
    sold = sum(
        seconds * _cores_per(unit, cores_per_node)
        for unit, seconds in totals.sold_unit_seconds.items()
    )
    return [
        Sample("siteagent_reserved_core_hours_sold", sold / _HOUR),
        Sample("siteagent_reserved_core_hours_used", totals.core_seconds / _HOUR),
        Sample("siteagent_reservations_finished_empty", float(totals.empty)),
    ]


def _cores_per(unit: CapacityUnit, cores_per_node: int) -> int:
    return cores_per_node if unit is CapacityUnit.NODE else 1


# --------------------------------------------------------------------------- the backend


def error_kind(error: BaseException) -> str:
    if isinstance(error, BackendUnavailable):
        return "unavailable"
    if isinstance(error, ReservationRefused):
        return "refused"
    return "error"


class MeteredBackend(Backend):
    """A backend whose operations are timed, and their failures counted, in a Metrics."""

    def __init__(self, inner: Backend, metrics: Metrics) -> None:
        self.inner = inner
        self.metrics = metrics
        self.name = inner.name

    def _timed(self, operation: str, call: Callable[[], _T]) -> _T:
        began = time.monotonic()
        try:
            result = call()
        except Exception as exc:
            self.metrics.observe_backend_call(self.name, operation, time.monotonic() - began, exc)
            raise
        self.metrics.observe_backend_call(self.name, operation, time.monotonic() - began, None)
        return result

    def snapshot(self) -> ClusterSnapshot:
        return self._timed("snapshot", self.inner.snapshot)

    def occupancy(self) -> ClusterSnapshot:
        return self._timed("occupancy", self.inner.occupancy)

    def create_reservation(self, spec: ReservationSpec) -> BatchReservation:
        return self._timed("create_reservation", lambda: self.inner.create_reservation(spec))

    def delete_reservation(self, name: str) -> None:
        self._timed("delete_reservation", lambda: self.inner.delete_reservation(name))

    def list_reservations(self) -> List[BatchReservation]:
        return self._timed("list_reservations", self.inner.list_reservations)

    def reservation_jobs(self, name: str, start: int, end: int) -> Optional[List[JobUsage]]:
        return self._timed(
            "reservation_jobs", lambda: self.inner.reservation_jobs(name, start, end)
        )

    def now(self) -> int:
        return self.inner.now()

    def held_window(self, start: int, end: int) -> Tuple[int, int]:
        return self.inner.held_window(start, end)

    def close(self) -> None:
        self.inner.close()


#: Help texts of the figures kept by Metrics (the registry's own metrics carry theirs).
HELP = {
    "siteagent_cluster_cores": "Cores by state: allocated, idle, unavailable (down, drained).",
    "siteagent_cluster_nodes": "Nodes by state: idle, mixed, allocated, unavailable.",
    "siteagent_cluster_capacity_cores": "Usable cores of the partition the agent serves.",
    "siteagent_jobs": "Jobs in the latest snapshot, running and pending.",
    "siteagent_batch_reservations": "Reservations the batch system holds (anybody's).",
    "siteagent_snapshot_duration_seconds": "How long the latest snapshot took to read.",
    "siteagent_plan_duration_seconds": "How long the latest schedule prediction took.",
    "siteagent_snapshot_timestamp_seconds": "The cluster's clock at the latest snapshot.",
    "siteagent_snapshot_age_seconds": "Seconds since the latest good snapshot (+Inf: none yet).",
    "siteagent_backend_up": "1 if the latest refresh reached the batch system, else 0.",
    "siteagent_poll_interval_seconds": "How often the agent polls the batch system.",
    "siteagent_info": "The agent's version, site name and backend.",
    "siteagent_advertised_slots": "Slots advertised from the latest plan.",
    "siteagent_pending_jobs_planned": "Pending jobs by whose start estimate the plan used: "
    "the batch system's, the agent's prediction, or none (cannot start).",
    "siteagent_free_core_hours": "Free core-hours in the latest plan within the next window.",
    "siteagent_unit_price_per_core_hour": "The unit price of one core for the next hour "
    "(absent while the machine is saturated).",
    "siteagent_reference_quote_available": "1 if the reference request gets an offer.",
    "siteagent_reference_quote_start_delay_seconds": "Earliest start offered to the "
    "reference request, seconds from the snapshot.",
    "siteagent_reference_quote_free_start_delay_seconds": "Earliest start with no fee offered "
    "to the reference request, seconds from the snapshot.",
    "siteagent_reference_quote_fee": "Fee (delay imposed on the queue) at the earliest start.",
    "siteagent_reference_quote_unit_price_per_core_hour": "Unit price at the earliest start.",
    "siteagent_reference_quote_total": "Total price at the earliest start.",
    "siteagent_reservations": "The agent's reservations by lifecycle state.",
    "siteagent_ledger_bookings_owed": "Receipts and refunds signed but not yet booked by the "
    "ledger (it did not answer); the agent's loop books them when it does.",
    "siteagent_state_database_bytes": "Size of the agent's state database on disk (with its "
    "write-ahead log): offers, reservations, receipts and queue waits.",
    "siteagent_refresh_failures": "Cycles whose snapshot failed since the agent started.",
    "siteagent_reservation_transitions": "Reservation lifecycle moves, from the store.",
    "siteagent_reservation_confirm_timeouts": "Tentative reservations expired unconfirmed.",
    "siteagent_auctions_open": "English auctions the site takes part in now (bidding, or "
    "without a bid for lack of capacity), until their bids are won or released.",
    "siteagent_auction_held_cores": "Cores the site's open bids in English auctions hold: no "
    "other auction, and no quote's offer, can have them until those auctions end.",
    "siteagent_auction_bids_made": "English auctions the site made a bid in, from the store.",
    "siteagent_auction_bids_won": "English auctions the site's bid won (its offer accepted).",
    "siteagent_reserved_cores_sold": "Cores sold in the agent's active reservations.",
    "siteagent_reserved_cores_used": "Cores of the jobs running now in the agent's active "
    "reservations.",
    "siteagent_reservations_active_empty": "Active reservations of the agent in which no job "
    "runs now (bought, and left empty).",
    "siteagent_reserved_core_hours_sold": "Core-hours sold in the agent's reservations that "
    "are over (their job figures final).",
    "siteagent_reserved_core_hours_used": "Core-hours the jobs in those reservations used, "
    "within their windows.",
    "siteagent_reservations_finished_empty": "Reservations that are over in which no job ran.",
}
