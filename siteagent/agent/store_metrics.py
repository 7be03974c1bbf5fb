"""The collector of the store's figures: reservations, English-auction bids and usage.

Read from the store incrementally (the history lines since the last cycle), so the counters
count every move of any process sharing the state directory and carry on across restarts.
Each family is built with its help text where its value is computed. docs/admin.md (Metrics).
"""

from __future__ import annotations

import threading
from typing import Dict, Iterator, List, Sequence, Tuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from siteagent.agent.cluster_metrics import HOUR, cores_per
from siteagent.core.values import CapacityUnit, ClusterSnapshot
from siteagent.market.lifecycle import ReservationRecord, ReservationState
from siteagent.market.store import BidFigures, Store, UsageTotals


class StoreCollector:
    """Reservations by state and their moves, bookings owed, bids, and the capacity sold."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._transitions: Dict[Tuple[str, str], int] = {}
        self._by_state: Dict[ReservationState, int] = {}
        self._bookings_owed = 0
        self._bids = BidFigures(0, 0, 0, 0)
        self._database_bytes = 0
        self._last_seq = 0
        self._usage_totals = UsageTotals()
        self._sold: List[Metric] = []
        self._unit = CapacityUnit.CORE
        self._cores_per_node = 1

    def observe(self, snapshot: ClusterSnapshot) -> None:
        """A new cycle: the capacity sold now in the active reservations, then the rest."""
        sold = sold_families(snapshot, self.store.reservations([ReservationState.ACTIVE]))
        with self._lock:
            self._sold = sold
            self._unit = snapshot.unit
            self._cores_per_node = snapshot.cores_per_node
        self.observe_reservations()

    def observe_reservations(self) -> None:
        """Re-read the counts, the new transitions and the bids' figures."""
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

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            families = self._families()
        yield from families

    def _families(self) -> List[Metric]:
        """The figures as families; the caller holds the lock."""
        out: List[Metric] = list(self._sold)
        by_state = GaugeMetricFamily(
            "siteagent_reservations",
            "The agent's reservations by lifecycle state.",
            labels=("state",),
        )
        for state in ReservationState:
            by_state.add_metric((state.value,), float(self._by_state.get(state, 0)))
        out.append(by_state)
        out.append(
            GaugeMetricFamily(
                "siteagent_ledger_bookings_owed",
                "Receipts and refunds signed but not yet booked by the ledger (it did not "
                "answer); the agent's loop books them when it does.",
                value=self._bookings_owed,
            )
        )
        out.append(
            GaugeMetricFamily(
                "siteagent_state_database_bytes",
                "Size of the agent's state database on disk (with its write-ahead log): "
                "offers, reservations, receipts and queue waits.",
                value=self._database_bytes,
            )
        )
        out.append(
            GaugeMetricFamily(
                "siteagent_auctions_open",
                "English auctions the site takes part in now (bidding, or without a bid for "
                "lack of capacity), until their bids are won or released.",
                value=self._bids.open_auctions,
            )
        )
        out.append(
            GaugeMetricFamily(
                "siteagent_auction_held_cores",
                "Cores the site's open bids in English auctions hold: no other auction, and "
                "no quote's offer, can have them until those auctions end.",
                value=self._bids.held_units * cores_per(self._unit, self._cores_per_node),
            )
        )
        moves = CounterMetricFamily(
            "siteagent_reservation_transitions",
            "Reservation lifecycle moves, from the store.",
            labels=("from", "to"),
        )
        for (src, dst), count in sorted(self._transitions.items()):
            moves.add_metric((src, dst), float(count))
        out.append(moves)
        timeouts = (ReservationState.TENTATIVE.value, ReservationState.EXPIRED.value)
        out.append(
            CounterMetricFamily(
                "siteagent_reservation_confirm_timeouts",
                "Tentative reservations expired unconfirmed.",
                value=self._transitions.get(timeouts, 0),
            )
        )
        out.append(
            CounterMetricFamily(
                "siteagent_auction_bids_made",
                "English auctions the site made a bid in, from the store.",
                value=self._bids.made,
            )
        )
        out.append(
            CounterMetricFamily(
                "siteagent_auction_bids_won",
                "English auctions the site's bid won (its offer accepted).",
                value=self._bids.won,
            )
        )
        out += finished_families(self._usage_totals, self._cores_per_node)
        return out


def sold_families(snapshot: ClusterSnapshot, active: Sequence[ReservationRecord]) -> List[Metric]:
    """The cores sold in the agent's ``active`` reservations, the cores their running jobs use
    now, and how many of them no job uses."""
    in_use: Dict[str, int] = {}
    for job in snapshot.running:
        if job.reservation:
            in_use[job.reservation] = in_use.get(job.reservation, 0) + job.cores
    sold = sum(record.size * cores_per(record.unit, snapshot.cores_per_node) for record in active)
    return [
        GaugeMetricFamily(
            "siteagent_reserved_cores_sold",
            "Cores sold in the agent's active reservations.",
            value=sold,
        ),
        GaugeMetricFamily(
            "siteagent_reserved_cores_used",
            "Cores of the jobs running now in the agent's active reservations.",
            value=sum(in_use.get(record.name, 0) for record in active),
        ),
        GaugeMetricFamily(
            "siteagent_reservations_active_empty",
            "Active reservations of the agent in which no job runs now (bought, and left empty).",
            value=sum(record.name not in in_use for record in active),
        ),
    ]


def finished_families(totals: UsageTotals, cores_per_node: int) -> List[Metric]:
    """Over the reservations that are over (their figures final): core-hours sold and used,
    and how many no job ever used."""
    sold = sum(
        seconds * cores_per(unit, cores_per_node)
        for unit, seconds in totals.sold_unit_seconds.items()
    )
    return [
        CounterMetricFamily(
            "siteagent_reserved_core_hours_sold",
            "Core-hours sold in the agent's reservations that are over (their job figures final).",
            value=sold / HOUR,
        ),
        CounterMetricFamily(
            "siteagent_reserved_core_hours_used",
            "Core-hours the jobs in those reservations used, within their windows.",
            value=totals.core_seconds / HOUR,
        ),
        CounterMetricFamily(
            "siteagent_reservations_finished_empty",
            "Reservations that are over in which no job ran.",
            value=totals.empty,
        ),
    ]
