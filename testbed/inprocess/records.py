"""Use this when a store test needs reservation records.

Reservation records for the store's tests: one as the store holds it, and one stored as
REQUESTED behind its offer, the state every accepted reservation starts in."""

from __future__ import annotations

from decimal import Decimal

from siteagent.core.values import CapacityUnit
from siteagent.market.lifecycle import ReservationRecord, ReservationState
from siteagent.market.store import Remember, Store
from testbed.inprocess.offers import an_offer

S = ReservationState


def a_record(rid: str = "r1", offer_id: str = "o1") -> ReservationRecord:
    return ReservationRecord(
        id=rid,
        name="sa-" + rid,
        offer_id=offer_id,
        client="alice",
        accept_key="k-" + rid,
        state=S.REQUESTED,
        start=1000,
        end=4600,
        size=4,
        unit=CapacityUnit.CORE,
        users=("alice",),
        accounts=("proj",),
        unit_price=Decimal("1.10"),
        fee=Decimal("0.333"),
        total=Decimal("4.73"),
        penalty_factor=Decimal("0.1"),
        created=10.0,
        updated=10.0,
    )


def requested(db: Store, rid: str = "r1") -> ReservationRecord:
    offer_id = "o-" + rid
    db.add_offer(an_offer(offer_id), 5.0)
    record = a_record(rid, offer_id)
    db.add_reservation(record, "alice", "accepted", Remember("alice", record.accept_key, "a"))
    return record
