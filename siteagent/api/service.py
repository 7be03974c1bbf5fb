"""What the API's routes do, free of HTTP: each method of :class:`Service` takes values the
routes have checked and returns a JSON-ready dict, or raises an error that
:mod:`siteagent.api.errors` turns into a response. Kept apart from the routes so that the
deal's logic (quotes from the agent's plan, the signed two-phase commit, the ledger) reads
without the framework around it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import siteagent
from siteagent.agent.loop import Agent
from siteagent.agent.metrics import Metrics
from siteagent.agent.state import State
from siteagent.api.errors import ApiError
from siteagent.api.offer_writer import OfferWriter
from siteagent.api.pricing_queue import PricingQueue, priced_inline, yielding
from siteagent.core.model import CENT, CapacityUnit, ClusterSnapshot, Request, Slot
from siteagent.core.slots import advertise
from siteagent.core.waits import wait_table
from siteagent.ledger.bank import Bookkeeper, LedgerError, LedgerUnavailable
from siteagent.market import bookkeeping, deals
from siteagent.market.offers import OFFER_VALID_S, earliest_start, make_offer, offer_row, slot_row
from siteagent.market.site import Site
from siteagent.market.store import ReservationRecord, ReservationState
from siteagent.pricing import Context, Price, Pricing, Refused, choose
from siteagent.protocol import documents, keys
from siteagent.protocol.documents import Receipt
from siteagent.protocol.models import QuoteRequest
from siteagent.security import authentication
from siteagent.security.clients import AuthorizedClient

log = logging.getLogger("siteagent.api")

#: The version of the API's contract (the path prefix says the major one).
API_VERSION = "1.0"

#: A snapshot older than this many poll intervals, plus the grace (seconds), means the polls
#: have stopped (a batch-system command hanging past its timeout, a wedged agent): the API
#: stops selling from it.
STALE_POLLS = 3
STALE_GRACE_S = 60.0

#: Reservation states in which the site has signed (and keeps) a receipt.
SIGNED = frozenset(
    {ReservationState.CONFIRMED, ReservationState.ACTIVE, ReservationState.COMPLETED}
)


@dataclass
class ApiContext:
    """What the API serves: the site, the agent keeping its state fresh, who may sign
    requests, the site's own signing key, and (optionally) the ledger and the metrics."""

    site: Site
    agent: Agent
    authenticator: authentication.Authenticator
    site_key: Ed25519PrivateKey
    site_key_id: str
    ledger: Optional[Bookkeeper]
    metrics: Optional[Metrics]


@dataclass(frozen=True)
class Latest:
    """What every read of one agent state shares: its pricing context and priced slots."""

    state: State
    context: Context
    slots: List[Slot]


class Service:
    """What the routes do, free of HTTP: each method takes checked values and returns JSON,
    or raises an error that :mod:`siteagent.api.errors` turns into a response."""

    def __init__(self, context: ApiContext) -> None:
        self.context = context
        self.site = context.site
        self._lock = threading.Lock()
        self._latest_seen: Optional[Latest] = None
        self.pricing_queue = PricingQueue()
        self.offer_writer = OfferWriter(lambda offers: self.site.manager.record_offers(offers))

    def close(self) -> None:
        """Finish the quotes in progress (priced, offers stored); the store closes next."""
        self.pricing_queue.close()
        self.offer_writer.close()

    # ---- reads

    def info(self) -> Dict[str, Any]:
        site, state = self.site.config.site, self.context.agent.state
        return {
            "api_version": API_VERSION,
            "software_version": siteagent.__version__,
            "site": {
                "name": site.name,
                "description": site.description,
                "architecture": site.architecture,
                "os": site.os,
                "cpu_speed_mhz": site.cpu_speed_mhz,
                "memory_per_core_mb": site.memory_per_core_mb,
                "cores_per_node": self._cores_per_node(state.snapshot if state else None),
                "partitions": list(site.partitions),
            },
            "cluster": None if state is None else cluster_view(state.snapshot),
            "pricing": self.site.pricing.describe(),
            "offers_valid_s": OFFER_VALID_S,
            "confirm_timeout_s": self.site.manager.confirm_timeout,
            "public_key": {
                "keyid": self.context.site_key_id,
                "alg": "ed25519",
                "value": keys.public_key_text(self.context.site_key.public_key()),
            },
        }

    def slots(
        self,
        min_cores: int,
        min_duration: int,
        start: Optional[int],
        end: Optional[int],
        limit: int,
    ) -> Dict[str, Any]:
        if start is not None and end is not None and end <= start:
            raise ApiError(422, "invalid_request", "end must be after start", field="end")
        latest = self._latest()
        rows: List[Dict[str, Any]] = []
        for slot in latest.slots:
            wanted = slot.cores >= min_cores and slot.duration >= min_duration
            after = end is not None and slot.start >= end
            before = start is not None and slot.end <= start
            if wanted and not after and not before:
                rows.append(slot_row(slot))
            if len(rows) >= limit:
                break
        snapshot = latest.state.snapshot
        return {"now": snapshot.now, "unit": snapshot.unit.value, "slots": rows}

    def show(self, reservation_id: str) -> Dict[str, Any]:
        return self._view(self._record(reservation_id))

    def waits(self, since: Optional[int]) -> Dict[str, Any]:
        table: Dict[str, Any] = wait_table(self.site.store.queue_waits(since)).to_json()
        return table

    def health(self) -> Tuple[Dict[str, Any], bool]:
        agent = self.context.agent
        problem = self.unavailable()
        body = {
            "status": "ok" if problem is None else problem[0],
            "backend": self.site.backend.name,
            "backend_reachable": agent.last_error is None and agent.state is not None,
            "snapshot_age_s": agent.snapshot_age(),
            "last_error": agent.last_error,
        }
        return body, problem is None

    def unavailable(self) -> Optional[Tuple[str, str]]:
        """Why the agent's picture of the cluster cannot be sold from now (code, sentence):
        the last poll failed, none succeeded yet, or the polls stopped (a hanging batch system
        or agent). None when it is fresh."""
        agent = self.context.agent
        if agent.last_error is not None:
            return "backend_unavailable", (
                f"the agent's last poll of the batch system failed ({agent.last_error})"
            )
        age = agent.snapshot_age()
        if age is None:
            return "no_snapshot", "the agent has not read the cluster yet"
        if age > STALE_POLLS * agent.poll_interval_s + STALE_GRACE_S:
            return "snapshot_stale", (
                f"the agent's snapshot is {age:.0f} s old although it polls every "
                f"{agent.poll_interval_s:g} s: the batch system is not answering"
            )
        return None

    # ---- quotes

    async def quote(self, body: QuoteRequest, client: AuthorizedClient) -> Dict[str, Any]:
        """Priced offers, stored before they are answered; runs on the event loop (see
        :mod:`siteagent.api.pricing_queue` for where the pricing itself runs)."""
        latest = self._latest()
        context, snapshot = latest.context, latest.state.snapshot
        request = self._request(body, snapshot)
        now = int(self.site.manager.clock())
        unsatisfied = self._unsatisfied(body, request, snapshot)
        if unsatisfied is not None:
            return refusal("unsatisfiable", unsatisfied[1], now, unsatisfied[0])
        # the plan may be a poll old: nothing may start before the present (and the buyer's
        # time to accept)
        priced = dataclasses.replace(request, earliest=earliest_start(request.earliest, now))
        pricing = self.site.pricing
        if priced_inline(pricing, body.limit):
            prices = self._price(pricing, context, priced, body.limit)
        else:
            threaded = yielding(pricing)
            prices = await self.pricing_queue.run(
                lambda: self._price(threaded, context, priced, body.limit), body.limit
            )
        if isinstance(prices, tuple):
            return refusal(prices[0], prices[1], now)
        site = self.site.config.site.name
        offers = [make_offer(p, request, now, OFFER_VALID_S, site) for p in prices]
        await self.offer_writer.record(offers)
        log.debug("quote for %s: %d offers", client.key_id, len(offers))
        return {
            "status": "offered",
            "now": now,
            "snapshot_time": snapshot.now,
            "unit": snapshot.unit.value,
            "offers": [{**offer_row(o), "expires": o.expires} for o in offers],
            "chosen": choose(prices, body.alpha),
        }

    @classmethod
    def _price(
        cls, pricing: Pricing, context: Context, request: Request, limit: int
    ) -> Union[List[Price], Tuple[str, str]]:
        """The priced alternatives, or the refusal (code, reason)."""
        try:
            return pricing.alternatives(context, request, limit)
        except Refused as exc:
            return cls._refusal_code(pricing, context, request, limit), exc.reason

    def _request(self, body: QuoteRequest, snapshot: ClusterSnapshot) -> Request:
        """The RFQL request in the site's capacity unit (cores, or whole nodes)."""
        per_node = body.cores_per_node or self._cores_per_node(snapshot) or 1
        if body.cores is None and body.nodes is None:
            raise ApiError(
                422, "invalid_request", "give cores, or nodes (and cores_per_node)", field="cores"
            )
        both = body.cores is not None and body.nodes is not None and body.cores_per_node
        if both and body.cores != (body.nodes or 0) * (body.cores_per_node or 0):
            raise ApiError(
                422, "invalid_request", "cores must equal nodes x cores_per_node", field="cores"
            )
        cores = body.cores if body.cores is not None else (body.nodes or 1) * per_node
        size = cores
        if snapshot.unit is CapacityUnit.NODE:
            size = body.nodes or math.ceil(cores / per_node)
        return Request(
            cores=size,
            duration=body.walltime,
            earliest=body.earliest_start,
            deadline=body.deadline,
            max_price=body.max_price,
            nodes=body.nodes,
            cores_per_node=body.cores_per_node,
            memory_per_core_mb=body.memory_per_core_mb,
            architecture=body.architecture,
            os=body.os,
            cpu_speed_mhz=body.cpu_speed_mhz,
            disk_gb=body.disk_gb,
            round=body.round,
            best_price=body.best_price,
        )

    def _unsatisfied(
        self, body: QuoteRequest, request: Request, snapshot: ClusterSnapshot
    ) -> Optional[Tuple[str, str]]:
        """The first present RFQL field this site cannot satisfy, and why; None if none."""
        site = self.site.config.site
        if request.cores > snapshot.capacity:
            unit = snapshot.unit.value
            return "cores", f"{request.cores} {unit}s asked, the site has {snapshot.capacity}"
        named = (("architecture", body.architecture, site.architecture), ("os", body.os, site.os))
        for field, wanted, have in named:
            if wanted is not None and (have is None or wanted.lower() != have.lower()):
                what = f"is {have}" if have else f"does not advertise its {field}"
                return field, f"this site {what}, the request asks for {wanted}"
        minima = (
            ("cpu_speed_mhz", body.cpu_speed_mhz, site.cpu_speed_mhz),
            ("memory_per_core_mb", body.memory_per_core_mb, site.memory_per_core_mb),
            ("cores_per_node", body.cores_per_node, self._cores_per_node(snapshot)),
        )
        for field, needed, offered in minima:
            if needed is not None and (offered is None or offered < needed):
                shown = "is not advertised" if offered is None else f"is {offered}"
                return field, f"the site's {field} {shown}, the request needs {needed}"
        nodes = self._node_count(snapshot)
        if body.nodes is not None and nodes is not None and body.nodes > nodes:
            return "nodes", f"{body.nodes} nodes asked, the site has {nodes}"
        if body.disk_gb is not None:
            return "disk_gb", "this site does not advertise disk space, so it cannot promise it"
        return None

    @staticmethod
    def _refusal_code(pricing: Pricing, context: Context, request: Request, limit: int) -> str:
        """``price_above_maximum`` when only the buyer's price stood in the way."""
        if request.max_price is None:
            return "no_offer"
        try:
            pricing.alternatives(context, dataclasses.replace(request, max_price=None), limit)
        except Refused:
            return "no_offer"
        return "price_above_maximum"

    # ---- reservations

    def accept(self, offer_id: str, client: AuthorizedClient, key: Optional[str]) -> Dict[str, Any]:
        accounts = (client.account,) if client.account else ()
        record = self.site.manager.accept(
            offer_id, client.key_id, key or f"accept-{offer_id}", (client.user,), accounts
        )
        return self._view(record)

    def confirm(
        self,
        reservation_id: str,
        body: Dict[str, Any],
        client: AuthorizedClient,
        key: Optional[str],
    ) -> Dict[str, Any]:
        record = self._owned(reservation_id, client)
        expected = self._deal(record)
        now = int(self.site.manager.clock())
        receipt = deals.accept_confirm(
            body, expected, client, self.context.site_key, self.context.site_key_id, now
        )
        kept = self.site.store.receipt(reservation_id)
        if kept is None or record.state not in SIGNED:
            record = self.site.manager.confirm(
                reservation_id, client.key_id, key or f"confirm-{reservation_id}"
            )
            kept = self.site.store.add_receipt(reservation_id, receipt.to_json())
        booked = self._ledger(
            lambda ledger: bookkeeping.book(
                self.site.store, ledger, reservation_id, bookkeeping.RECEIPT, kept
            ).to_json()
        )
        return {**self._view(record), "receipt": kept, "ledger_transaction": booked}

    def cancel(
        self, reservation_id: str, client: AuthorizedClient, key: Optional[str]
    ) -> Dict[str, Any]:
        self._owned(reservation_id, client)
        record = self.site.manager.cancel(
            reservation_id, client.key_id, key or f"cancel-{reservation_id}"
        )
        penalty = record.penalty if record.penalty is not None else Decimal(0)
        kept = self.site.store.receipt(reservation_id)
        cancellation, refund = None, None
        if kept is not None:
            signed = documents.sign_cancellation(
                Receipt.from_json(kept),
                penalty.quantize(CENT),
                int(record.updated),
                self.context.site_key,
                self.context.site_key_id,
            )
            cancellation = signed.to_json()
            refund = self._ledger(
                lambda ledger: bookkeeping.book(
                    self.site.store, ledger, reservation_id, bookkeeping.REFUND, cancellation
                ).to_json()
            )
        return {
            **self._view(record),
            "penalty": str(penalty.quantize(CENT)),
            "cancellation": cancellation,
            "ledger_transaction": refund,
        }

    # ---- helpers

    def _latest(self) -> Latest:
        """The latest state, its pricing context and priced slots (made once per state and
        shared by every request until the next cycle); 503 while :meth:`unavailable`."""
        problem = self.unavailable()
        state = self.context.agent.state
        if problem is not None or state is None:
            code, why = problem or ("no_snapshot", "the agent has not read the cluster yet")
            retry = self.retry_after()
            message = f"{why}; retry in {retry} s"
            raise ApiError(503, code, message, headers={"Retry-After": str(retry)})
        with self._lock:
            if self._latest_seen is None or self._latest_seen.state is not state:
                self._latest_seen = self._prepare(state)
            return self._latest_seen

    def prepare(self, state: State) -> None:
        """Make ``state``'s pricing context and priced slots now (the agent calls this at the
        end of each cycle, in its own thread), so that no request waits for them."""
        latest = self._prepare(state)
        with self._lock:
            self._latest_seen = latest

    def _prepare(self, state: State) -> Latest:
        context = self.site.pricing.context(state.snapshot, state.plan)
        return Latest(state, context, self.site.pricing.price_slots(context, advertise(state.plan)))

    def retry_after(self) -> int:
        """Seconds until the agent polls again: when a retry can see something new."""
        return max(1, math.ceil(self.context.agent.poll_interval_s))

    def _cores_per_node(self, snapshot: Optional[ClusterSnapshot]) -> Optional[int]:
        configured = self.site.config.site.cores_per_node
        if configured is not None or snapshot is None:
            return configured
        if snapshot.nodes:
            return max(node.cores for node in snapshot.nodes)
        return snapshot.cores_per_node if snapshot.unit is CapacityUnit.NODE else None

    @staticmethod
    def _node_count(snapshot: ClusterSnapshot) -> Optional[int]:
        if snapshot.nodes:
            return sum(1 for node in snapshot.nodes if node.usable)
        return snapshot.capacity if snapshot.unit is CapacityUnit.NODE else None

    def _record(self, reservation_id: str) -> ReservationRecord:
        record = self.site.store.get_reservation(reservation_id)
        if record is None:
            raise ApiError(
                404, "unknown_reservation", f"no reservation {reservation_id!r} at this site"
            )
        return record

    def _owned(self, reservation_id: str, client: AuthorizedClient) -> ReservationRecord:
        record = self._record(reservation_id)
        authentication.authorize_owner(client, record.client, f"reservation {reservation_id}")
        return record

    def _deal(self, record: ReservationRecord) -> Dict[str, Any]:
        """The deal a buyer signs to confirm ``record``, built from the site's own records."""
        offer = self.site.store.get_offer(record.offer_id)
        if offer is None:  # the store keeps every offer a reservation refers to
            raise RuntimeError(f"reservation {record.id}: offer {record.offer_id} is missing")
        penalty = (record.penalty_factor * record.fee).quantize(CENT)
        return documents.deal_document(
            self.context.site_key_id, record.client, record.id, offer, record.total, penalty
        )

    def _view(self, record: ReservationRecord) -> Dict[str, Any]:
        view = record.to_dict()
        del view["accept_key"]  # the client's own idempotency key: nobody else's business
        view["deal"] = self._deal(record)
        view["receipt"] = self.site.store.receipt(record.id)
        return view

    def _ledger(self, book: Callable[[Bookkeeper], Dict[str, Any]]) -> Optional[Dict[str, Any]]:
        """Book in the ledger, if there is one; its refusal after the reservation moved, or a
        ledger service that does not answer, is a 502 that says so (the reservation stands and
        the booking stays owed: retrying the request books it, and so does the agent's loop)."""
        if self.context.ledger is None:
            return None
        try:
            return book(self.context.ledger)
        except LedgerError as exc:
            what = "could not reach" if isinstance(exc, LedgerUnavailable) else "refused"
            raise ApiError(
                502,
                f"ledger_{exc.code}",
                f"the reservation was updated but the ledger {what} the booking ({exc}); "
                "retry the same request to book it",
            ) from None


def cluster_view(snapshot: ClusterSnapshot) -> Dict[str, Any]:
    """What the snapshot says of the machine: capacity in its unit and in cores, nodes."""
    per_unit = snapshot.cores_per_node if snapshot.unit is CapacityUnit.NODE else 1
    usable = [node for node in snapshot.nodes if node.usable]
    return {
        "backend": snapshot.backend,
        "unit": snapshot.unit.value,
        "capacity": snapshot.capacity,
        "cores": snapshot.capacity * per_unit,
        "nodes": len(usable) if snapshot.nodes else None,
        "snapshot_time": snapshot.now,
    }


def refusal(code: str, reason: str, now: int, field: Optional[str] = None) -> Dict[str, Any]:
    """The site's "Refuse" (the paper's protocol): no offer, and why."""
    return {
        "status": "refused",
        "now": now,
        "refusal": {"code": code, "reason": reason, "field": field},
        "offers": [],
    }
