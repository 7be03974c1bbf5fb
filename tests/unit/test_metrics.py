"""The Prometheus metrics of one agent, read back through Prometheus' own text parser.

The cluster: 16 cores replayed from a hand-made trace, time moved by hand. At T0 + 100 s one
job holds 8 cores until T0 + 36,000 and another 4 cores until T0 + 7,200; an 8-core job of
3,600 s waits for the second to end. So the plan leaves 4 cores free until 7,200, none until
10,800 (the pending job runs), 8 until 36,000 and all 16 after: every figure below is worked
out by hand from that.
"""

from __future__ import annotations

import dataclasses
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, FrozenSet, Iterator, List, Set, Tuple

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from siteagent.agent.loop import Agent
from siteagent.agent.metrics import Metrics
from siteagent.agent.state import CycleState
from siteagent.agent.store_metrics import finished_families, sold_families
from siteagent.backends.base import BackendUnavailable
from siteagent.backends.replay import SwfReplayBackend
from siteagent.config.schema import PricingConfig, ReferenceRequest, SiteConfig
from siteagent.core.slots import advertise
from siteagent.core.values import CapacityUnit, ClusterSnapshot, Job
from siteagent.market.lifecycle import ReservationState
from siteagent.market.quoting import ACCEPT_LEAD_S
from siteagent.market.reservations import ReservationManager
from siteagent.market.site import pricing_of
from siteagent.market.store import Store, UsageTotals
from siteagent.pricing import Pricing
from siteagent.pricing.load import LoadOffer
from testbed.inprocess.fakes import FakeClock, FaultyBackend
from testbed.inprocess.offers import record_offer
from testbed.inprocess.records import a_record
from testbed.inprocess.traces import write_trace

#: The default configuration's pricing.
PRICING = pricing_of(PricingConfig())

#: What a confirm keeps and owes the ledger (its contents are the deals' business).
A_RECEIPT = {"id": "a-receipt"}

T0 = 1_800_000_000
NOW = T0 + 100
CONFIRM_TIMEOUT = 120.0
SHAPES = (
    ReferenceRequest(name="one-core-hour", cores=1, duration_s=3600),
    ReferenceRequest(name="too-wide", cores=64, duration_s=3600),
)

Key = Tuple[str, FrozenSet[Tuple[str, str]]]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(float(T0))


@pytest.fixture
def backend(tmp_path: Path, clock: FakeClock) -> FaultyBackend:
    """The replay starts the trace at T0; the test looks at it from NOW on."""
    jobs = [(0, 36000, 8, 36000), (0, 7200, 4, 7200), (10, 3600, 8, 3600)]
    trace = write_trace(tmp_path / "t.swf", jobs, 16)
    replay = SwfReplayBackend(trace, offset_s=0, clock=clock)
    clock.advance(NOW - T0)
    return FaultyBackend(replay)


@pytest.fixture
def store() -> Iterator[Store]:
    store = Store(":memory:")
    yield store
    store.close()


@pytest.fixture
def metrics(store: Store, clock: FakeClock) -> Metrics:
    return Metrics(
        site=SiteConfig(name="test-site"),
        reference_requests=SHAPES,
        store=store,
        poll_interval_s=30.0,
        clock=clock,
    )


def scrape(metrics: Metrics) -> Dict[Key, float]:
    """Every sample of the exposition, by name and labels, as Prometheus would read it."""
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain")
    samples: Dict[Key, float] = {}
    for family in text_string_to_metric_families(body.decode("utf-8")):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Dict[Key, float], name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def observed(backend: FaultyBackend, metrics: Metrics, clock: FakeClock) -> CycleState:
    agent = Agent(metrics.instrument(backend), PRICING, clock=clock, metrics=metrics)
    state = agent.cycle()
    assert state is not None
    return state


def test_the_cluster_figures_match_the_snapshot(
    backend: FaultyBackend, metrics: Metrics, clock: FakeClock
) -> None:
    state = observed(backend, metrics, clock)
    samples = scrape(metrics)
    cores = {
        s: value(samples, "siteagent_cluster_cores", state=s)
        for s in ("allocated", "idle", "unavailable")
    }
    assert cores == {"allocated": 12, "idle": 4, "unavailable": 0}
    assert sum(cores.values()) == value(samples, "siteagent_cluster_capacity_cores") == 16
    assert value(samples, "siteagent_jobs", state="running") == len(state.snapshot.running) == 2
    assert value(samples, "siteagent_jobs", state="pending") == len(state.snapshot.pending) == 1
    assert value(samples, "siteagent_backend_up") == 1
    assert value(samples, "siteagent_snapshot_timestamp_seconds") == NOW
    info = value(samples, "siteagent_info", version=_version(), site="test-site", backend="swf")
    assert info == 1


def test_the_plan_figures_are_the_free_capacity_ahead(
    backend: FaultyBackend, metrics: Metrics, clock: FakeClock
) -> None:
    state = observed(backend, metrics, clock)
    samples = scrape(metrics)
    slots = value(samples, "siteagent_advertised_slots")
    assert slots == len(advertise(state.plan)) and slots > 0
    hours = {w: value(samples, "siteagent_free_core_hours", within=w) for w in ("1h", "6h", "24h")}
    assert hours["1h"] == pytest.approx(4 * 3600 / 3600)
    assert hours["6h"] == pytest.approx((4 * 7100 + 8 * (21700 - 10800)) / 3600)
    assert hours["24h"] == pytest.approx(
        (4 * 7100 + 8 * (36000 - 10800) + 16 * (86500 - 36000)) / 3600
    )
    planned = value(samples, "siteagent_pending_jobs_planned", source="predicted")
    planned += value(samples, "siteagent_pending_jobs_planned", source="batch")
    assert planned == 1
    assert value(samples, "siteagent_pending_jobs_planned", source="none") == 0


def test_reference_requests_are_quoted_as_a_buyer_would_be(
    backend: FaultyBackend, metrics: Metrics, clock: FakeClock
) -> None:
    observed(backend, metrics, clock)
    samples = scrape(metrics)
    one = {"request": "one-core-hour"}
    assert value(samples, "siteagent_reference_quote_available", **one) == 1
    # 4 cores are free now, so one core for an hour starts as soon as a buyer can accept (a
    # minute from the quote) at the flat price, no fee
    lead = ACCEPT_LEAD_S
    assert value(samples, "siteagent_reference_quote_start_delay_seconds", **one) == lead
    assert value(samples, "siteagent_reference_quote_fee", **one) == 0
    assert value(samples, "siteagent_reference_quote_unit_price_per_core_hour", **one) == 1
    assert value(samples, "siteagent_reference_quote_total", **one) == 1
    assert value(samples, "siteagent_reference_quote_free_start_delay_seconds", **one) == lead
    assert value(samples, "siteagent_unit_price_per_core_hour") == 1
    # wider than the machine: reported as unavailable, with no price figures
    wide = {"request": "too-wide"}
    assert value(samples, "siteagent_reference_quote_available", **wide) == 0
    assert ("siteagent_reference_quote_fee", frozenset(wide.items())) not in samples


def test_reference_requests_are_quoted_again_only_after_their_interval(
    backend: FaultyBackend, store: Store, clock: FakeClock
) -> None:
    """Each reference quote with a fee re-plans the queue: quoted at the first cycle, kept
    until ``reference_interval_s`` has passed, and at once for shapes a reload brings."""
    quoted: List[str] = []

    class CountingPricing(Pricing):
        def alternatives(self, context: Any, request: Any, limit: int = 100) -> Any:
            quoted.append(f"{request.cores}x{request.duration}")
            return super().alternatives(context, request, limit)

    base = pricing_of(PricingConfig())
    counting = CountingPricing(base.unit, base.fee, base.policy, base.penalty_factor)
    metrics = Metrics(
        site=SiteConfig(name="test-site"),
        reference_requests=SHAPES[:1],
        reference_interval_s=300.0,
        store=store,
        clock=clock,
    )
    agent = Agent(metrics.instrument(backend), counting, clock=clock, metrics=metrics)
    agent.cycle()
    clock.advance(30)
    agent.cycle()
    assert len(quoted) == 1
    clock.advance(300)
    agent.cycle()
    assert len(quoted) == 2
    metrics.follow([ReferenceRequest(name="two-cores", cores=2, duration_s=600)], 300.0)
    agent.cycle()
    assert len(quoted) == 3 and quoted[-1] == "2x600"
    assert value(scrape(metrics), "siteagent_reference_quote_available", request="two-cores") == 1


def reserve(backend: FaultyBackend, store: Store, clock: FakeClock) -> None:
    """Three reservations: one expires unconfirmed, one is confirmed, one stays tentative."""
    replay = backend.inner
    assert isinstance(replay, SwfReplayBackend)
    manager = ReservationManager(store, backend, clock=replay.now, confirm_timeout=CONFIRM_TIMEOUT)

    def accepted(key: str) -> str:
        offer = record_offer(manager, 1, start=NOW + 600, duration=600, fee=Decimal("0"))
        return manager.accept(offer.id, "alice", key).id

    expiring = accepted("k1")
    clock.advance(CONFIRM_TIMEOUT)  # k1's deadline passes; the next two are younger
    manager.confirm(accepted("k2"), "alice", "c2", receipt=A_RECEIPT)
    accepted("k3")
    assert [record.id for record in manager.expire_due()] == [expiring]


def test_reservations_by_state_and_transitions_come_from_the_store(
    backend: FaultyBackend, metrics: Metrics, clock: FakeClock, store: Store
) -> None:
    reserve(backend, store, clock)
    observed(backend, metrics, clock)
    samples = scrape(metrics)
    by_state = {
        s.value: value(samples, "siteagent_reservations", state=s.value) for s in ReservationState
    }
    assert by_state["TENTATIVE"] == by_state["CONFIRMED"] == by_state["EXPIRED"] == 1
    assert sum(by_state.values()) == 3
    moves = {
        (dict(labels)["from"], dict(labels)["to"]): count
        for (name, labels), count in samples.items()
        if name == "siteagent_reservation_transitions_total"
    }
    assert moves == {
        ("", "REQUESTED"): 3,
        ("REQUESTED", "TENTATIVE"): 3,
        ("TENTATIVE", "CONFIRMED"): 1,
        ("TENTATIVE", "EXPIRED"): 1,
    }
    assert value(samples, "siteagent_reservation_confirm_timeouts_total") == 1
    # counters only grow: a second cycle adds the moves since the first, not all of them again
    observed(backend, metrics, clock)
    assert (
        value(
            scrape(metrics),
            "siteagent_reservation_transitions_total",
            **{"from": "REQUESTED", "to": "TENTATIVE"},
        )
        == 3
    )


def test_backend_calls_are_timed_and_failures_counted(
    backend: FaultyBackend, metrics: Metrics, clock: FakeClock
) -> None:
    agent = Agent(metrics.instrument(backend), PRICING, clock=clock, metrics=metrics)
    assert agent.cycle() is not None
    backend.unavailable = True
    clock.advance(30)
    assert agent.cycle() is None
    samples = scrape(metrics)
    calls = "siteagent_backend_operation_duration_seconds_count"
    assert value(samples, calls, backend="faulty", operation="snapshot", outcome="ok") == 1
    assert value(samples, calls, backend="faulty", operation="snapshot", outcome="error") == 1
    errors = "siteagent_backend_operation_errors_total"
    assert value(samples, errors, backend="faulty", operation="snapshot", kind="unavailable") == 1
    with pytest.raises(BackendUnavailable):
        metrics.instrument(backend).list_reservations()
    samples = scrape(metrics)
    assert (
        value(samples, errors, backend="faulty", operation="list_reservations", kind="unavailable")
        == 1
    )
    # the outage shows: backend down, one failed refresh, and the last good state aging
    assert value(samples, "siteagent_backend_up") == 0
    assert value(samples, "siteagent_refresh_failures_total") == 1
    assert value(samples, "siteagent_snapshot_age_seconds") == 30
    assert value(samples, "siteagent_jobs", state="running") == 2


def test_a_batch_system_failing_after_the_snapshot_shows_down_as_healthz_does(
    backend: FaultyBackend,
    metrics: Metrics,
    clock: FakeClock,
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The snapshot answered, then the cycle's reconciliation did not: /healthz says the
    backend is unreachable, so the metrics say down too (CI once read up = 1 there), without
    counting a failed refresh."""
    replay = backend.inner
    assert isinstance(replay, SwfReplayBackend)
    manager = ReservationManager(store, backend, clock=replay.now, confirm_timeout=CONFIRM_TIMEOUT)
    agent = Agent(backend, PRICING, clock=clock, metrics=metrics, manager=manager, store=store)
    assert agent.cycle() is not None and value(scrape(metrics), "siteagent_backend_up") == 1

    def down() -> None:
        raise BackendUnavailable("controller down (test)")

    monkeypatch.setattr(backend, "list_reservations", down)
    clock.advance(30)
    assert agent.cycle() is not None and agent.last_error is not None
    samples = scrape(metrics)
    assert value(samples, "siteagent_backend_up") == 0
    assert value(samples, "siteagent_refresh_failures_total") == 0
    monkeypatch.undo()
    clock.advance(30)
    assert agent.cycle() is not None and agent.last_error is None
    assert value(scrape(metrics), "siteagent_backend_up") == 1


def test_before_the_first_snapshot_its_age_is_infinite(metrics: Metrics) -> None:
    samples = scrape(metrics)
    assert value(samples, "siteagent_snapshot_age_seconds") == float("inf")
    assert value(samples, "siteagent_backend_up") == 0
    assert ("siteagent_cluster_capacity_cores", frozenset()) not in samples


def test_api_requests_are_counted_by_route_template(metrics: Metrics) -> None:
    metrics.observe_request("/v1/reservations/{reservation_id}", "get", 404, 0.002)
    metrics.observe_request("/v1/reservations/{reservation_id}", "get", 404, 0.2)
    samples = scrape(metrics)
    labels = {"route": "/v1/reservations/{reservation_id}", "method": "GET", "status": "404"}
    assert value(samples, "siteagent_http_request_duration_seconds_count", **labels) == 2
    assert value(samples, "siteagent_http_request_duration_seconds_sum", **labels) == pytest.approx(
        0.202
    )
    assert (
        value(samples, "siteagent_http_request_duration_seconds_bucket", le="0.005", **labels) == 1
    )


def _version() -> str:
    import siteagent

    return siteagent.__version__


# --------------------------------------------------------------------------- contrib files

REPO = Path(__file__).resolve().parents[2]
METRIC_NAME = re.compile(r"\b(?:siteagent|process)_[a-z_]+\b")


def exposed_names(
    backend: FaultyBackend, metrics: Metrics, clock: FakeClock, store: Store
) -> Set[str]:
    """Every sample name a busy agent exposes (reservations, a cycle, a request, a failed
    backend call)."""
    reserve(backend, store, clock)
    observed(backend, metrics, clock)
    metrics.observe_request("/v1/quotes", "POST", 200, 0.01)
    metrics.observe_backend_call("swf", "snapshot", 0.1, BackendUnavailable("down"))
    return {name for name, _ in scrape(metrics)}


def test_the_grafana_dashboard_uses_only_defined_metrics(
    backend: FaultyBackend, metrics: Metrics, clock: FakeClock, store: Store
) -> None:
    dashboard = json.loads((REPO / "contrib/grafana/siteagent-dashboard.json").read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels) > 0
    names = exposed_names(backend, metrics, clock, store)
    for panel in panels:
        targets = panel["targets"]
        assert targets and len({t["refId"] for t in targets}) == len(targets), panel["title"]
        for target in targets:
            used = METRIC_NAME.findall(target["expr"])
            assert used, f"{panel['title']}: {target['expr']} names no siteagent metric"
            assert set(used) <= names, f"{panel['title']}: {set(used) - names} undefined"


def test_the_alerting_rules_use_only_defined_metrics(
    backend: FaultyBackend, metrics: Metrics, clock: FakeClock, store: Store
) -> None:
    rules = yaml.safe_load((REPO / "contrib/prometheus/siteagent-rules.yml").read_text())
    names = exposed_names(backend, metrics, clock, store)
    exprs = {rule["alert"]: rule["expr"] for group in rules["groups"] for rule in group["rules"]}
    assert len(exprs) == 8
    for alert, expr in exprs.items():
        used = set(METRIC_NAME.findall(expr))
        assert used <= names, f"{alert}: {used - names} undefined"


def test_bookings_owed_to_the_ledger_are_counted_until_booked(
    backend: FaultyBackend, metrics: Metrics, clock: FakeClock, store: Store
) -> None:
    reserve(backend, store, clock)  # one reservation confirmed: its receipt is owed
    observed(backend, metrics, clock)
    assert value(scrape(metrics), "siteagent_ledger_bookings_owed") == 1
    confirmed = next(r for r in store.reservations() if r.state is ReservationState.CONFIRMED)
    store.mark_booked(confirmed.id, "receipt", clock())
    observed(backend, metrics, clock)
    assert value(scrape(metrics), "siteagent_ledger_bookings_owed") == 0


def test_sold_capacity_and_what_its_jobs_use() -> None:
    """Two active reservations, one with a 3-core job in it, the other left empty; and over
    the finished ones, the core-hours sold and used (node reservations in whole nodes)."""
    used = dataclasses.replace(a_record("r1"), state=ReservationState.ACTIVE)
    empty = dataclasses.replace(a_record("r2"), state=ReservationState.ACTIVE, size=2)
    snapshot = ClusterSnapshot(
        now=NOW,
        capacity=16,
        running=(
            Job("1", 3, T0, 3600, start=T0, reservation=used.name),
            Job("2", 5, T0, 3600, start=T0, reservation="maintenance"),
            Job("3", 1, T0, 3600, start=T0),
        ),
        cores_per_node=8,
    )
    figures = {f.name: f.samples[0].value for f in sold_families(snapshot, [used, empty])}
    assert figures == {
        "siteagent_reserved_cores_sold": 6.0,
        "siteagent_reserved_cores_used": 3.0,
        "siteagent_reservations_active_empty": 1.0,
    }
    totals = UsageTotals(
        sold_unit_seconds={CapacityUnit.CORE: 4 * 3600, CapacityUnit.NODE: 2 * 3600},
        used_unit_seconds={CapacityUnit.CORE: 3600, CapacityUnit.NODE: 3600},
        core_seconds=3 * 3600,
        reservations=3,
        empty=1,
    )
    finished = {f.name: f.samples[0].value for f in finished_families(totals, 8)}
    assert finished == {
        "siteagent_reserved_core_hours_sold": 4.0 + 16.0,
        "siteagent_reserved_core_hours_used": 3.0,
        "siteagent_reservations_finished_empty": 1.0,
    }


# --------------------------------------------------------------------------- the contract

Family = Tuple[str, str, str, Tuple[str, ...]]


def families(metrics: Metrics) -> List[Family]:
    """(name, type, help, label names) of every family, the process collector's left out."""
    body, _ = metrics.render()
    found: List[Family] = []
    for family in text_string_to_metric_families(body.decode("utf-8")):
        if family.name.startswith("process_"):
            continue
        labels: Set[str] = set()
        for sample in family.samples:
            labels.update(sample.labels)
        found.append((family.name, family.type, family.documentation, tuple(sorted(labels))))
    return sorted(found)


def test_every_metric_keeps_its_name_type_help_and_labels(
    backend: FaultyBackend, metrics: Metrics, clock: FakeClock, store: Store
) -> None:
    """Dashboards and alerting rules depend on these: the list was read from a busy agent's
    exposition at the code before the metrics became collectors (issue 28), so a change here
    is a change of the published interface, made on purpose."""
    metrics.observe_load_offer(LoadOffer(Decimal("2"), 0.5, Decimal("0.25"), Decimal("1.75")))
    metrics.observe_failure()
    metrics.observe_rate_limited("quotes")
    exposed_names(backend, metrics, clock, store)
    assert families(metrics) == EXPOSITION


#: Read from main at 24c036a, except the three load_price gauges, whose help text was their own
#: name there (no entry in the old HELP dict): they got one when help moved beside each value.
EXPOSITION: List[Family] = [
    ("siteagent_advertised_slots", "gauge", "Slots advertised from the latest plan.", ()),
    (
        "siteagent_auction_bids_made",
        "counter",
        "English auctions the site made a bid in, from the store.",
        (),
    ),
    (
        "siteagent_auction_bids_won",
        "counter",
        "English auctions the site's bid won (its offer accepted).",
        (),
    ),
    (
        "siteagent_auction_held_cores",
        "gauge",
        "Cores the site's open bids in English auctions hold: no other auction, and no quote's offer, can have them until those auctions end.",  # noqa: E501
        (),
    ),
    (
        "siteagent_auctions_open",
        "gauge",
        "English auctions the site takes part in now (bidding, or without a bid for lack of capacity), until their bids are won or released.",  # noqa: E501
        (),
    ),
    (
        "siteagent_backend_operation_duration_seconds",
        "histogram",
        "Batch-system operations (snapshot, list/create/delete reservation), each one or more client commands, by outcome.",  # noqa: E501
        ("backend", "le", "operation", "outcome"),
    ),
    (
        "siteagent_backend_operation_duration_seconds_created",
        "gauge",
        "Batch-system operations (snapshot, list/create/delete reservation), each one or more client commands, by outcome.",  # noqa: E501
        ("backend", "operation", "outcome"),
    ),
    (
        "siteagent_backend_operation_errors",
        "counter",
        "Failed batch-system operations: 'unavailable' (no answer, hang, garbage), 'refused' (a reservation refused), 'error' (anything else).",  # noqa: E501
        ("backend", "kind", "operation"),
    ),
    (
        "siteagent_backend_operation_errors_created",
        "gauge",
        "Failed batch-system operations: 'unavailable' (no answer, hang, garbage), 'refused' (a reservation refused), 'error' (anything else).",  # noqa: E501
        ("backend", "kind", "operation"),
    ),
    (
        "siteagent_backend_up",
        "gauge",
        "1 if the latest refresh reached the batch system, else 0.",
        (),
    ),
    (
        "siteagent_batch_reservations",
        "gauge",
        "Reservations the batch system holds (anybody's).",
        (),
    ),
    (
        "siteagent_cluster_capacity_cores",
        "gauge",
        "Usable cores of the partition the agent serves.",
        (),
    ),
    (
        "siteagent_cluster_cores",
        "gauge",
        "Cores by state: allocated, idle, unavailable (down, drained).",
        ("state",),
    ),
    (
        "siteagent_free_core_hours",
        "gauge",
        "Free core-hours in the latest plan within the next window.",
        ("within",),
    ),
    (
        "siteagent_http_request_duration_seconds",
        "histogram",
        "API requests by route template, method and status code.",
        ("le", "method", "route", "status"),
    ),
    (
        "siteagent_http_request_duration_seconds_created",
        "gauge",
        "API requests by route template, method and status code.",
        ("method", "route", "status"),
    ),
    (
        "siteagent_info",
        "gauge",
        "The agent's version, site name and backend.",
        ("backend", "site", "version"),
    ),
    ("siteagent_jobs", "gauge", "Jobs in the latest snapshot, running and pending.", ("state",)),
    (
        "siteagent_ledger_bookings_owed",
        "gauge",
        "Receipts and refunds signed but not yet booked by the ledger (it did not answer); the agent's loop books them when it does.",  # noqa: E501
        (),
    ),
    (
        "siteagent_load_price_decrement_per_core_hour",
        "gauge",
        "The decrement (the paper's attractiveness) of the latest load-priced offer.",
        (),
    ),
    (
        "siteagent_load_price_load_ratio",
        "gauge",
        "The allocated fraction the latest load-priced offer was priced at.",
        (),
    ),
    (
        "siteagent_load_price_offer_per_core_hour",
        "gauge",
        "The unit price of the latest load-priced offer.",
        (),
    ),
    (
        "siteagent_pending_jobs_planned",
        "gauge",
        "Pending jobs by whose start estimate the plan used: the batch system's, the agent's prediction, or none (cannot start).",  # noqa: E501
        ("source",),
    ),
    (
        "siteagent_plan_duration_seconds",
        "gauge",
        "How long the latest schedule prediction took.",
        (),
    ),
    ("siteagent_poll_interval_seconds", "gauge", "How often the agent polls the batch system.", ()),
    (
        "siteagent_rate_limited_requests",
        "counter",
        "Signed requests refused (429) because their client asked faster than its rate, by kind: quotes, reservations (accept, confirm, cancel), bids.",  # noqa: E501
        ("kind",),
    ),
    (
        "siteagent_rate_limited_requests_created",
        "gauge",
        "Signed requests refused (429) because their client asked faster than its rate, by kind: quotes, reservations (accept, confirm, cancel), bids.",  # noqa: E501
        ("kind",),
    ),
    (
        "siteagent_reference_quote_available",
        "gauge",
        "1 if the reference request gets an offer.",
        ("request",),
    ),
    (
        "siteagent_reference_quote_fee",
        "gauge",
        "Fee (delay imposed on the queue) at the earliest start.",
        ("request",),
    ),
    (
        "siteagent_reference_quote_free_start_delay_seconds",
        "gauge",
        "Earliest start with no fee offered to the reference request, seconds from the snapshot.",
        ("request",),
    ),
    (
        "siteagent_reference_quote_start_delay_seconds",
        "gauge",
        "Earliest start offered to the reference request, seconds from the snapshot.",
        ("request",),
    ),
    (
        "siteagent_reference_quote_total",
        "gauge",
        "Total price at the earliest start.",
        ("request",),
    ),
    (
        "siteagent_reference_quote_unit_price_per_core_hour",
        "gauge",
        "Unit price at the earliest start.",
        ("request",),
    ),
    (
        "siteagent_refresh_failures",
        "counter",
        "Cycles whose snapshot failed since the agent started.",
        (),
    ),
    (
        "siteagent_reservation_confirm_timeouts",
        "counter",
        "Tentative reservations expired unconfirmed.",
        (),
    ),
    (
        "siteagent_reservation_transitions",
        "counter",
        "Reservation lifecycle moves, from the store.",
        ("from", "to"),
    ),
    ("siteagent_reservations", "gauge", "The agent's reservations by lifecycle state.", ("state",)),
    (
        "siteagent_reservations_active_empty",
        "gauge",
        "Active reservations of the agent in which no job runs now (bought, and left empty).",
        (),
    ),
    (
        "siteagent_reservations_finished_empty",
        "counter",
        "Reservations that are over in which no job ran.",
        (),
    ),
    (
        "siteagent_reserved_core_hours_sold",
        "counter",
        "Core-hours sold in the agent's reservations that are over (their job figures final).",
        (),
    ),
    (
        "siteagent_reserved_core_hours_used",
        "counter",
        "Core-hours the jobs in those reservations used, within their windows.",
        (),
    ),
    (
        "siteagent_reserved_cores_sold",
        "gauge",
        "Cores sold in the agent's active reservations.",
        (),
    ),
    (
        "siteagent_reserved_cores_used",
        "gauge",
        "Cores of the jobs running now in the agent's active reservations.",
        (),
    ),
    (
        "siteagent_snapshot_age_seconds",
        "gauge",
        "Seconds since the latest good snapshot (+Inf: none yet).",
        (),
    ),
    (
        "siteagent_snapshot_duration_seconds",
        "gauge",
        "How long the latest snapshot took to read.",
        (),
    ),
    (
        "siteagent_snapshot_timestamp_seconds",
        "gauge",
        "The cluster's clock at the latest snapshot.",
        (),
    ),
    (
        "siteagent_state_database_bytes",
        "gauge",
        "Size of the agent's state database on disk (with its write-ahead log): offers, reservations, receipts and queue waits.",  # noqa: E501
        (),
    ),
    (
        "siteagent_unit_price_per_core_hour",
        "gauge",
        "The unit price of one core for the next hour (absent while the machine is saturated).",
        (),
    ),
]
