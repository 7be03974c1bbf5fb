"""Use this when a client commit test needs a site in memory that offers and confirms.

An in-memory site for the client's commit tests: it makes offers, holds tentative
reservations against its capacity, confirms them with real signed receipts and cancels them,
and misbehaves on request (refuses confirms, stops answering, loses an answer).

It answers as :class:`siteagent.client.connection.SiteConnection` does (the same result types
and errors), so the commit and its recovery run against it unchanged.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Dict, List, Mapping, Optional, Tuple

from siteagent.client.connection import BadAnswer, SiteError, SiteUnreachable, Tentative
from siteagent.client.reverse_auction import Bid
from siteagent.core.values import Offer, Request
from siteagent.protocol import documents
from siteagent.protocol.documents import Cancellation, Receipt
from siteagent.protocol.models import OfferView, ReservationView
from testbed.inprocess.parties import Party

NOW = 1_800_000_000
LIVE = ("TENTATIVE", "CONFIRMED")


@dataclass
class Held:
    """A reservation at the fake site."""

    id: str
    offer: Offer
    state: str
    deal: Dict[str, Any]
    deadline: float
    receipt: Optional[Receipt] = None


@dataclass
class FakeSeller:
    """One site. ``clock`` is the time its offers expire by. Faults: ``down`` (nothing
    answers), ``refuse_confirm`` (an error code every confirm is refused with: the
    reservation stays tentative), ``lose_accept_answer`` (the next accept happens but its
    answer is lost), ``lose_confirm_answer`` (likewise for the next confirm), ``rate_limited``
    (the next N requests are refused with 429, changing nothing)."""

    name: str
    capacity: int = 64
    buyer: Party = field(default_factory=lambda: Party("alice@laptop"))
    key: Party = field(default_factory=lambda: Party("site"))
    clock: Any = lambda: NOW
    down: bool = False
    refuse_confirm: Optional[str] = None
    lose_accept_answer: bool = False
    lose_confirm_answer: bool = False
    rate_limited: int = 0
    offers: Dict[str, Offer] = field(default_factory=dict)
    reservations: Dict[str, Held] = field(default_factory=dict)
    answered_accepts: Dict[str, str] = field(default_factory=dict)
    calls: List[Tuple[str, str]] = field(default_factory=list)
    _ids: Any = field(default_factory=itertools.count)

    # ---- offers, as a quote would make them

    def offer(
        self,
        start: int,
        size: int = 64,
        duration: int = 3600,
        unit_price: str = "1.00",
        fee: str = "0",
        expires: Optional[int] = None,
    ) -> OfferView:
        """A new offer of this site, as a quote answers it."""
        offer_id = f"{self.name}-o{next(self._ids)}"
        request = Request(cores=size, duration=duration)
        made = Offer(
            id=offer_id,
            request=request,
            start=start,
            duration=duration,
            size=size,
            unit_price=Decimal(unit_price),
            fee=Decimal(fee),
            expires=expires if expires is not None else start,
            site=self.name,
        )
        self.offers[offer_id] = made
        return OfferView(
            offer_id=offer_id,
            start=start,
            end=start + duration,
            cores=size,
            unit_price=unit_price,
            fee=fee,
            total=str(made.total),
            expires=made.expires,
        )

    def bid(self, part: int, arrival: int, **terms: Any) -> Bid:
        """An offer of this site as the auction keeps it."""
        return Bid.of(self.name, part, 1, arrival, self.offer(**terms))

    def live(self) -> List[Held]:
        return [held for held in self.reservations.values() if held.state in LIVE]

    def tentative(self) -> List[Held]:
        return [held for held in self.reservations.values() if held.state == "TENTATIVE"]

    # ---- the connection's requests

    def accept(self, offer_id: str, idempotency_key: str) -> Tentative:
        self._call("accept", offer_id)
        if idempotency_key in self.answered_accepts:
            return self.accept_answer(self.reservations[self.answered_accepts[idempotency_key]])
        offer = self.offers.get(offer_id)
        if offer is None:
            raise self._error(404, "unknown_offer", f"no offer {offer_id}")
        if offer.expires <= self.clock():
            raise self._error(409, "offer_expired", f"offer {offer_id} expired")
        if any(held.offer.id == offer_id for held in self.reservations.values()):
            raise self._error(409, "offer_used", f"offer {offer_id} was accepted already")
        busy = sum(
            h.offer.size
            for h in self.live()
            if h.offer.start < offer.end and offer.start < h.offer.end
        )
        if busy + offer.size > self.capacity:
            raise self._error(409, "offer_capacity_gone", "the capacity is gone")
        held = self.hold(offer, idempotency_key)
        if self.lose_accept_answer:
            self.lose_accept_answer = False
            raise SiteUnreachable("no answer within 10 s", site=self.name)
        return self.accept_answer(held)

    def hold(self, offer: Offer, idempotency_key: str) -> Held:
        """A tentative reservation of ``offer`` with its deal, remembered under the key."""
        reservation_id = f"{self.name}-r{next(self._ids)}"
        deal = documents.deal_document(
            self.key.key_id, self.buyer.key_id, reservation_id, offer, offer.total, Decimal(0)
        )
        held = Held(reservation_id, offer, "TENTATIVE", deal, self.clock() + 120)
        self.reservations[reservation_id] = held
        self.answered_accepts[idempotency_key] = reservation_id
        return held

    def confirm(self, tentative: Tentative) -> Receipt:
        self._call("confirm", tentative.reservation_id)
        held = self.reservations[tentative.reservation_id]
        if held.state == "CONFIRMED" and held.receipt is not None:
            return held.receipt
        if held.state != "TENTATIVE":
            raise self._error(409, "illegal_transition", f"it is {held.state}")
        if self.refuse_confirm is not None:
            raise self._error(402, self.refuse_confirm, "the buyer cannot pay")
        signed = documents.sign_document(held.deal, self.buyer.key, self.buyer.key_id)
        countersigned = documents.countersigned_document(held.deal, signed, int(self.clock()))
        site_signature = documents.sign_document(countersigned, self.key.key, self.key.key_id)
        held.receipt = Receipt(held.deal, signed, int(self.clock()), site_signature)
        held.state = "CONFIRMED"
        if self.lose_confirm_answer:
            self.lose_confirm_answer = False
            raise SiteUnreachable("no answer within 10 s", site=self.name)
        return held.receipt

    def cancel(self, reservation_id: str) -> Optional[Cancellation]:
        self._call("cancel", reservation_id)
        held = self._held(reservation_id)
        if held.state not in LIVE:
            raise self._error(409, "illegal_transition", f"it is {held.state}")
        was = held.state
        held.state = "CANCELLED"
        if was == "TENTATIVE" or held.receipt is None:
            return None
        return documents.sign_cancellation(
            held.receipt, Decimal("0.10"), int(self.clock()), self.key.key, self.key.key_id
        )

    def reservation(self, reservation_id: str) -> ReservationView:
        self._call("show", reservation_id)
        return self._view(self._held(reservation_id))

    def _view(self, held: Held) -> ReservationView:
        offer = held.offer
        return ReservationView.model_validate(
            {
                "id": held.id,
                "state": held.state,
                "start": offer.start,
                "end": offer.end,
                "size": offer.size,
                "unit": "core",
                "name": f"sa-{held.id}",
                "offer_id": offer.id,
                "client": self.buyer.key_id,
                "users": ["alice"],
                "accounts": [],
                "unit_price": str(offer.unit_price),
                "fee": str(offer.fee),
                "total": str(offer.total),
                "penalty_factor": "0.1",
                "created": float(NOW),
                "updated": float(NOW),
                "deadline": held.deadline,
                "penalty": None,
                "message": "",
                "deal": held.deal,
                "receipt": None if held.receipt is None else held.receipt.to_json(),
            }
        )

    def verified_receipt(self, data: Any, deal: Mapping[str, Any]) -> Receipt:
        try:
            receipt = Receipt.from_json(data)
        except ValueError as exc:
            raise BadAnswer(
                str(exc), code="bad_site_signature", site=self.name, status=None
            ) from None
        public = self.key.key.public_key()
        if receipt.deal != dict(deal) or not documents.signature_valid(
            receipt.countersigned(), receipt.site_signature, public
        ):
            raise BadAnswer(
                "does not verify", code="bad_site_signature", site=self.name, status=None
            )
        return receipt

    # ---- helpers

    def _call(self, what: str, about: str) -> None:
        if self.down:
            raise SiteUnreachable("cannot connect", site=self.name)
        if self.rate_limited:
            self.rate_limited -= 1
            raise SiteError(
                "too fast", code="rate_limited", site=self.name, status=429, retry_after_s=1
            )
        self.calls.append((what, about))

    def _held(self, reservation_id: str) -> Held:
        held = self.reservations.get(reservation_id)
        if held is None:
            raise self._error(404, "unknown_reservation", f"no reservation {reservation_id}")
        return held

    def accept_answer(self, held: Held) -> Tentative:
        """What an accept of ``held`` answers."""
        """What an accept of ``held`` answered."""
        return Tentative(self.name, held.id, held.deal, held.deadline, self._view(held))

    def _error(self, status: int, code: str, message: str) -> SiteError:
        return SiteError(message, code=code, site=self.name, status=status)
