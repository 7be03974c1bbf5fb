"""The collector of the cluster's figures: the snapshot, the plan, the reference quotes.

Figures are computed when the agent observes a new state, never at scrape time (a scrape must
not plan or price); a scrape only adds the snapshot's age, a subtraction. Each family is built
with its help text where its value is computed. Names, units: docs/admin.md (Metrics).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

import siteagent
from siteagent.agent.state import CycleState
from siteagent.config.schema import ReferenceRequest, SiteConfig
from siteagent.core.defaults import DEFAULT_POLL_INTERVAL_S
from siteagent.core.values import CapacityUnit, ClusterSnapshot
from siteagent.market.quoting import quote
from siteagent.pricing import Refused, Window
from siteagent.pricing.load import LoadOffer
from siteagent.protocol.models import QuoteRequest

#: Windows over which free capacity is summed (label value, seconds).
FREE_WINDOWS: Tuple[Tuple[str, int], ...] = (("1h", 3600), ("6h", 6 * 3600), ("24h", 86400))

#: Node states as the metrics group them: the batch systems' own words vary too much.
NODE_STATES = ("idle", "mixed", "allocated", "unavailable")

HOUR = 3600.0


class ClusterCollector:
    """Gauges of the latest state, the reference quotes made from it, and the backend's health.

    ``reference_requests`` are quoted as a buyer would, at the first cycle and then every
    ``reference_interval_s``; ``clock`` must be the agent's (the age is ``clock() - taken_at``).
    """

    def __init__(
        self,
        site: SiteConfig,
        reference_requests: Sequence[ReferenceRequest] = (),
        reference_interval_s: float = 0.0,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.site = site
        self.reference_requests = tuple(reference_requests)
        self.reference_interval_s = reference_interval_s
        self.poll_interval_s = poll_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._families: List[Metric] = []
        self._reference: List[Metric] = []
        self._referenced_at: Optional[float] = None
        self._taken_at: Optional[float] = None
        self._up = 0.0
        self._backend = ""
        self._failures = 0
        self._load_offer: Optional[LoadOffer] = None

    def observe(self, state: CycleState, up: bool = True) -> None:
        """Take the figures of a new cycle's state; ``up`` False when the batch system failed
        later in the cycle (its housekeeping), as /healthz then says."""
        snapshot = state.snapshot
        families = cluster_families(snapshot, state.plan.profile.free_at(snapshot.now))
        families += plan_families(state)
        families += self._reference_quotes(state)
        with self._lock:
            self._families = families
            self._taken_at = state.taken_at
            self._up = 1.0 if up else 0.0
            self._backend = snapshot.backend

    def follow(self, requests: Sequence[ReferenceRequest], interval_s: float) -> None:
        """Quote these reference shapes from the next cycle on (a reloaded configuration)."""
        self.reference_requests = tuple(requests)
        self.reference_interval_s = interval_s
        self._referenced_at = None

    def observe_failure(self) -> None:
        """A cycle's refresh failed: the backend is down; the last state's figures stay."""
        with self._lock:
            self._up = 0.0
            self._failures += 1

    def observe_down(self) -> None:
        """The batch system failed after the cycle's refresh (not a refresh failure)."""
        with self._lock:
            self._up = 0.0

    def observe_load_offer(self, figures: LoadOffer) -> None:
        """The latest quote priced by load (the paper's attractiveness and offer curves)."""
        with self._lock:
            self._load_offer = figures

    def _reference_quotes(self, state: CycleState) -> List[Metric]:
        now = self._clock()
        due = self._referenced_at is None or now - self._referenced_at >= self.reference_interval_s
        if due:
            self._reference = quote_families(state, self.site, self.reference_requests)
            self._referenced_at = now
        return self._reference

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            families = list(self._families)
            age = float("inf") if self._taken_at is None else self._clock() - self._taken_at
            up, backend, failures, offer = self._up, self._backend, self._failures, self._load_offer
        yield from families
        yield GaugeMetricFamily(
            "siteagent_snapshot_age_seconds",
            "Seconds since the latest good snapshot (+Inf: none yet).",
            value=max(age, 0.0),
        )
        yield GaugeMetricFamily(
            "siteagent_backend_up",
            "1 if the latest refresh reached the batch system, else 0.",
            value=up,
        )
        yield GaugeMetricFamily(
            "siteagent_poll_interval_seconds",
            "How often the agent polls the batch system.",
            value=self.poll_interval_s,
        )
        info = GaugeMetricFamily(
            "siteagent_info",
            "The agent's version, site name and backend.",
            labels=("version", "site", "backend"),
        )
        info.add_metric((siteagent.__version__, self.site.name, backend), 1.0)
        yield info
        yield from load_offer_families(offer)
        yield CounterMetricFamily(
            "siteagent_refresh_failures",
            "Cycles whose snapshot failed since the agent started.",
            value=failures,
        )


def cores_per(unit: CapacityUnit, cores_per_node: int) -> int:
    """Cores in one unit of capacity (metrics count cores)."""
    return cores_per_node if unit is CapacityUnit.NODE else 1


def cluster_families(snapshot: ClusterSnapshot, free_now: int) -> List[Metric]:
    """Cores and nodes by state, and jobs by state, from one snapshot.

    With node records (Slurm, PBS) cores are counted per node; a replayed cluster has none,
    so its cores are split by the plan's free capacity now (running jobs and reservations).
    """
    per_unit = cores_per(snapshot.unit, snapshot.cores_per_node)
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
    families: List[Metric] = [
        _by_label(
            "siteagent_cluster_cores",
            "Cores by state: allocated, idle, unavailable (down, drained).",
            "state",
            cores.items(),
        )
    ]
    if snapshot.nodes:
        families.append(
            _by_label(
                "siteagent_cluster_nodes",
                "Nodes by state: idle, mixed, allocated, unavailable.",
                "state",
                nodes.items(),
            )
        )
    families += [
        GaugeMetricFamily(
            "siteagent_cluster_capacity_cores",
            "Usable cores of the partition the agent serves.",
            value=snapshot.capacity * per_unit,
        ),
        _by_label(
            "siteagent_jobs",
            "Jobs in the latest snapshot, running and pending.",
            "state",
            (("running", len(snapshot.running)), ("pending", len(snapshot.pending))),
        ),
        GaugeMetricFamily(
            "siteagent_batch_reservations",
            "Reservations the batch system holds (anybody's).",
            value=len(snapshot.reservations),
        ),
    ]
    return families


def plan_families(state: CycleState) -> List[Metric]:
    """How the cycle went and what the plan leaves free: slots and core-hours ahead."""
    snapshot, predicted = state.snapshot, state.plan
    per_unit = cores_per(snapshot.unit, snapshot.cores_per_node)
    sources: Dict[str, int] = {}
    for source in predicted.sources.values():
        sources[source.value] = sources.get(source.value, 0) + 1
    planned = [(kind, sources.get(kind, 0)) for kind in ("batch", "predicted")]
    free = [
        (label, free_unit_seconds(predicted.profile.segments(), snapshot.now, snapshot.now + s))
        for label, s in FREE_WINDOWS
    ]
    return [
        GaugeMetricFamily(
            "siteagent_snapshot_duration_seconds",
            "How long the latest snapshot took to read.",
            value=state.snapshot_s,
        ),
        GaugeMetricFamily(
            "siteagent_plan_duration_seconds",
            "How long the latest schedule prediction took.",
            value=state.plan_s,
        ),
        GaugeMetricFamily(
            "siteagent_snapshot_timestamp_seconds",
            "The cluster's clock at the latest snapshot.",
            value=snapshot.now,
        ),
        GaugeMetricFamily(
            "siteagent_advertised_slots",
            "Slots advertised from the latest plan.",
            value=len(state.market.slots),
        ),
        _by_label(
            "siteagent_pending_jobs_planned",
            "Pending jobs by whose start estimate the plan used: "
            "the batch system's, the agent's prediction, or none (cannot start).",
            "source",
            [*planned, ("none", len(predicted.unplanned))],
        ),
        _by_label(
            "siteagent_free_core_hours",
            "Free core-hours in the latest plan within the next window.",
            "within",
            [(label, seconds * per_unit / HOUR) for label, seconds in free],
        ),
    ]


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


def quote_families(
    state: CycleState, site: SiteConfig, shapes: Sequence[ReferenceRequest]
) -> List[Metric]:
    """Each reference shape quoted as a buyer would (the quoting use case, nothing stored):
    the earliest start and its unit price and fee, and the earliest start with no fee."""
    market, snapshot = state.market, state.snapshot
    families: List[Metric] = []
    try:
        current = market.pricing.unit.unit_price(
            market.context, Window(snapshot.now, 1, 3600), None
        )
        families.append(
            GaugeMetricFamily(
                "siteagent_unit_price_per_core_hour",
                "The unit price of one core for the next hour "
                "(absent while the machine is saturated).",
                value=float(current),
            )
        )
    except Refused:
        pass  # a saturated machine has no current price; the gauge is left out
    if not shapes:
        return families

    def family(name: str, help_text: str) -> GaugeMetricFamily:
        made = GaugeMetricFamily(name, help_text, labels=("request",))
        families.append(made)
        return made

    available = family(
        "siteagent_reference_quote_available", "1 if the reference request gets an offer."
    )
    delay = family(
        "siteagent_reference_quote_start_delay_seconds",
        "Earliest start offered to the reference request, seconds from the snapshot.",
    )
    fee = family(
        "siteagent_reference_quote_fee", "Fee (delay imposed on the queue) at the earliest start."
    )
    price = family(
        "siteagent_reference_quote_unit_price_per_core_hour", "Unit price at the earliest start."
    )
    total = family("siteagent_reference_quote_total", "Total price at the earliest start.")
    free_delay = family(
        "siteagent_reference_quote_free_start_delay_seconds",
        "Earliest start with no fee offered to the reference request, seconds from the snapshot.",
    )
    for shape in shapes:
        label = (shape.name,)
        rfq = QuoteRequest.model_validate(
            {"cores": shape.cores, "walltime": shape.duration_s, "limit": 2}
        )
        answer = quote(rfq, market, site, snapshot.now, record=None)
        if answer.refusal is not None:
            available.add_metric(label, 0.0)
            continue
        earliest = min(answer.offers, key=lambda offer: offer.start)
        available.add_metric(label, 1.0)
        delay.add_metric(label, float(earliest.start - snapshot.now))
        fee.add_metric(label, float(earliest.fee))
        price.add_metric(label, float(earliest.unit_price))
        total.add_metric(label, float(earliest.total))
        free = [offer.start for offer in answer.offers if offer.fee == 0]
        if free:
            free_delay.add_metric(label, float(min(free) - snapshot.now))
    return [made for made in families if made.samples]


def load_offer_families(figures: Optional[LoadOffer]) -> List[Metric]:
    """The latest load-priced quote's figures; none before the first (or without load pricing)."""
    if figures is None:
        return []
    return [
        GaugeMetricFamily(
            "siteagent_load_price_decrement_per_core_hour",
            "The decrement (the paper's attractiveness) of the latest load-priced offer.",
            value=float(figures.decrement),
        ),
        GaugeMetricFamily(
            "siteagent_load_price_offer_per_core_hour",
            "The unit price of the latest load-priced offer.",
            value=float(figures.offer),
        ),
        GaugeMetricFamily(
            "siteagent_load_price_load_ratio",
            "The allocated fraction the latest load-priced offer was priced at.",
            value=figures.load,
        ),
    ]


def _by_label(
    name: str, help_text: str, label: str, values: Iterable[Tuple[str, float]]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=(label,))
    for key, value in values:
        family.add_metric((key,), float(value))
    return family
