"""Crash recovery: make the store and the batch system agree again, once per agent cycle.

Invariant: the store is written before the batch system is touched, so the store and the batch
system's own list always suffice to finish or undo what a crash interrupted; the agent never
touches a reservation without its prefix. docs/lifecycle.md §5-6.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Mapping

from siteagent.core.values import BatchReservation
from siteagent.market.lifecycle import (
    AGENT,
    LIVE,
    ReservationRecord,
    ReservationState,
    describe,
    shortfall,
    when,
)
from siteagent.market.store import Remember, StaleState

if TYPE_CHECKING:
    from siteagent.market.reservations import ReservationManager

log = logging.getLogger("siteagent.reservations")

S = ReservationState

#: How long an offer nobody accepted is kept after it expired (seconds): a late accept is still
#: told when it expired rather than that it never existed; after a day it is forgotten.
OFFER_RETENTION_S = 86400


@dataclass
class Reconciliation:
    """What one reconciliation did (ids of records, names of deleted reservations)."""

    recovered: List[str] = field(default_factory=list)
    failed: List[str] = field(default_factory=list)
    lost: List[str] = field(default_factory=list)
    orphans_deleted: List[str] = field(default_factory=list)
    #: keys of batch accepts left unfinished whose held parts were released
    batches_released: List[str] = field(default_factory=list)


@dataclass
class Housekeeping:
    """What one agent cycle did to the reservations, and how many are in each state."""

    activated: List[str]
    completed: List[str]
    expired: List[str]
    reconciliation: Reconciliation
    by_state: Dict[ReservationState, int]
    offers_pruned: int = 0
    bids_released: int = 0

    def describe(self) -> str:
        """One log line: the live reservations, then what changed (if anything)."""
        live = ", ".join(f"{self.by_state.get(s, 0)} {s.value.lower()}" for s in _LIVE_ORDER)
        rec = self.reconciliation
        changes = [
            (len(self.activated), "started"),
            (len(self.completed), "completed"),
            (len(self.expired), "expired"),
            (len(rec.recovered), "recovered after a crash"),
            (len(rec.failed), "failed after a crash"),
            (len(rec.lost), "LOST (vanished from the batch system)"),
            (len(rec.orphans_deleted), "leftovers deleted"),
            (self.offers_pruned, "expired offers forgotten"),
            (self.bids_released, "bids released (their auctions ended)"),
        ]
        done = "; ".join(f"{n} {what}" for n, what in changes if n)
        return f"reservations: {live}" + (f"; this cycle: {done}" if done else "")


_LIVE_ORDER = (S.TENTATIVE, S.CONFIRMED, S.ACTIVE)


class Reconciler:
    """Crash recovery and the cycle's housekeeping for one :class:`ReservationManager`."""

    def __init__(self, manager: ReservationManager) -> None:
        self.manager = manager

    def reconcile(self) -> Reconciliation:
        """Make the store and the batch system agree, after a crash or anything else.

        * A REQUESTED record is an accept that never finished (the lock guarantees none is in
          flight). If its reservation exists and verifies, it becomes TENTATIVE with a fresh
          deadline and is remembered as the answer to the accept's idempotency key: only the
          answer was lost, a client retrying with the same key gets its reservation, and one
          that gave up costs the site one confirm timeout of held capacity, as any unconfirmed
          reservation does. Otherwise it is FAILED, and deleted if it half-exists.
        * A TENTATIVE/CONFIRMED/ACTIVE record whose reservation is gone before its window ended
          is LOST (logged as an error, counted in ``lost_total``).
        * A reservation with the agent's prefix and no TENTATIVE/CONFIRMED/ACTIVE record is
          deleted. Reservations without the prefix are never looked at.
        """
        result = Reconciliation()
        with self.manager.store.exclusive():
            listing = self.manager._ours(self.manager.backend.list_reservations())
            now = self.manager.clock()  # after listing: what ended by now is allowed to be missing
            for intent in self.manager.store.reservations([S.REQUESTED]):
                resolved = self.resolve_intent(intent, listing)
                bucket = result.recovered if resolved.state is S.TENTATIVE else result.failed
                bucket.append(resolved.id)
            live = set()
            for record in self.manager.store.reservations(LIVE):
                live.add(record.name)
                missing = record.name not in listing and record.end > now
                if missing and self.mark_lost(record, "vanished from the batch system"):
                    result.lost.append(record.id)
            for name in sorted(set(listing) - live):
                log.warning(
                    "reservation %s has the agent's prefix but no live record (left by a crash "
                    "or an earlier failed deletion): deleting it",
                    name,
                )
                if self.manager._delete(name, "leftover"):
                    result.orphans_deleted.append(name)
        return result

    def housekeeping(self) -> Housekeeping:
        """One agent cycle's work: advance with time, expire, reconcile, release the bids of
        auctions that ended (the first cycle after a restart releases those that ended while
        the agent was down), forget old offers."""
        activated: List[str] = []
        completed: List[str] = []
        for record in self.manager.advance():
            (completed if record.state is S.COMPLETED else activated).append(record.id)
        expired = [record.id for record in self.manager.expire_due()]
        reconciliation = self.reconcile()
        reconciliation.batches_released.extend(self.manager.release_interrupted_batches())
        with self.manager.store.exclusive():  # not while an accept of one of their offers runs
            released = self.manager.store.release_due_bids(self.manager.clock())
        pruned = self.manager.store.prune_offers(int(self.manager.clock()) - OFFER_RETENTION_S)
        return Housekeeping(
            activated=activated,
            completed=completed,
            expired=expired,
            reconciliation=reconciliation,
            by_state=self.manager.store.count_by_state(),
            offers_pruned=pruned,
            bids_released=released,
        )

    # ---- helpers

    def resolve_intent(
        self, record: ReservationRecord, listing: Mapping[str, BatchReservation]
    ) -> ReservationRecord:
        """Finish an accept interrupted after its intent was written (see reconcile)."""
        made = listing.get(record.name)
        remember = Remember(record.client, record.accept_key, f"accept {record.offer_id}")
        now = self.manager.clock()
        if made is not None and not shortfall(record, made) and record.end > now:
            recovered = self.manager.store.transition(
                record.id,
                S.REQUESTED,
                S.TENTATIVE,
                now,
                AGENT,
                "the accept was interrupted before it answered; the reservation was found in "
                "the batch system and verified, so it waits for a fresh confirm deadline",
                deadline=now + self.manager.confirm_timeout,
                remember=remember,
            )
            log.warning(
                "%s: interrupted accept recovered as TENTATIVE, to be confirmed by %s",
                describe(recovered),
                when(recovered.deadline),
            )
            return recovered
        if made is None:
            message = "the accept was interrupted before the batch system created it"
        elif record.end <= now:
            message = "the accept was interrupted and its window is over"
        else:
            message = "the accept was interrupted; " + shortfall(record, made)
        return self.manager._fail(record, message, delete=made is not None)

    def mark_lost(self, record: ReservationRecord, why: str) -> bool:
        """Record that a live reservation vanished; False if it moved on meanwhile."""
        try:
            lost = self.manager._move(record, S.LOST, why, message=why)
        except StaleState:
            return False
        self.manager.lost_total += 1
        log.error(
            "%s: LOST while %s: %s; the agent broke its promise to %s",
            describe(lost),
            record.state.value,
            why,
            record.client,
        )
        return True
