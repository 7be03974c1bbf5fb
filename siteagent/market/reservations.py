"""The reservation manager: offers turned into real, verified reservations, confirmed or
released (the paper's two-phase commit on one site: accept votes, confirm commits, expiry is
the timer).

Invariant: every move is written to the store before the batch system is touched, and "re-check
the plan, then create" runs inside :meth:`Store.exclusive`. Crash recovery is reconcile.py, the
states and legal moves lifecycle.py. docs/lifecycle.md §3-4, §7 (time).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from decimal import Decimal
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
)

from siteagent.backends.base import Backend, BackendError, BackendUnavailable, ReservationRefused
from siteagent.core import names
from siteagent.core.defaults import (
    DEFAULT_CONFIRM_TIMEOUT_S,
    DEFAULT_PENALTY_FACTOR,
    DEFAULT_RESERVATION_PREFIX,
)
from siteagent.core.engines import Policy, ReservationConflict
from siteagent.core.errors import SiteagentError
from siteagent.core.money import CENT, cancellation_penalty
from siteagent.core.prediction import plan, reservation_nodes, without_queue
from siteagent.core.values import (
    Allocation,
    BatchReservation,
    CapacityUnit,
    ClusterSnapshot,
    Offer,
    ReservationSpec,
)
from siteagent.market.lifecycle import (
    AGENT,
    LIVE,
    IdempotencyKeyReused,
    IllegalTransition,
    NotOwner,
    OfferRefused,
    ReservationFailed,
    ReservationRecord,
    ReservationState,
    UnknownOffer,
    UnknownReservation,
    check_transition,
    describe,
    shortfall,
    when,
)
from siteagent.market.reconcile import Reconciler
from siteagent.market.store import (
    RECEIPT,
    REFUND,
    AcceptBatch,
    Remember,
    StaleState,
    Store,
)
from siteagent.pricing.bids import Hold, held_profile

log = logging.getLogger("siteagent.reservations")

#: What cancelling a confirmed reservation owes the ledger: the document refunding the buyer
#: the price less ``penalty``, made for (the record, penalty, cancellation time).
Refund = Callable[[ReservationRecord, Decimal, int], Mapping[str, Any]]

#: What confirming a reservation costs its buyer, paid once every check passed and before
#: the move: given (the record, the receipt signed), it has the bank book the deal and
#: answers the receipt to keep; it raises (changing nothing here) when the bank refuses.
Pay = Callable[[ReservationRecord, Mapping[str, Any]], Mapping[str, Any]]

S = ReservationState

#: Seconds a batch system's notice that a window started or ended may come before the agent's
#: clock says so (the clocks of the controller and the agent's host may differ this much).
NOTICE_SKEW_S = 60

#: How the history names a part released because its batch could not be held whole: the
#: buyer was never handed it (docs/batches.md).
BATCH_RELEASED = "released with its batch accept, which could not be held whole"
#: The answer of a batch accept that was interrupted (the agent stopped in its middle).
INTERRUPTED: Mapping[str, Any] = {
    "code": "reservation_failed",
    "message": "the batch accept was interrupted (the agent stopped) and every part it held "
    "was released; ask for new quotes",
    "field": None,
}


# --------------------------------------------------------------------------- the manager


class ReservationManager:
    """Carries reservations through their lifecycle on one backend, remembering in a store.

    ``clock`` is the batch system's clock (epoch seconds). ``policy`` is the scheduling policy
    the accept re-check plans with. ``name_prefix`` marks the reservations this agent owns in
    the batch system; it must be unique to this agent on the cluster. ``penalty_factor`` is
    the p of a cancellation's p x f, fixed on each reservation when it is accepted.
    ``suspends`` (the site bids with ``auctions.mode: now``): a won bid's window may lie over
    running jobs of lower absolute priority than its job, which the batch system's preemption
    suspends or requeues; it is reserved over them (docs/english-auction.md §5).
    """

    def __init__(
        self,
        store: Store,
        backend: Backend,
        clock: Callable[[], float] = time.time,
        policy: Policy = Policy.CONSERVATIVE,
        confirm_timeout: float = DEFAULT_CONFIRM_TIMEOUT_S,
        name_prefix: str = DEFAULT_RESERVATION_PREFIX,
        penalty_factor: Decimal = DEFAULT_PENALTY_FACTOR,
        suspends: bool = False,
    ) -> None:
        if not confirm_timeout > 0:
            raise ValueError(f"confirm timeout must be > 0 s, got {confirm_timeout}")
        if not names.is_valid(names.RESERVATION_PREFIX, name_prefix):
            raise ValueError(
                f"reservation name prefix {name_prefix!r} must be a letter, then up to 15 letters, "
                "digits, '_', '.' or '-' (it is how the agent tells its reservations from others')"
            )
        if not Decimal(penalty_factor) >= 0:
            raise ValueError(f"penalty factor must be >= 0, got {penalty_factor}")
        self.store = store
        self.backend = backend
        self.clock = clock
        self.policy = Policy(policy)
        self.confirm_timeout = confirm_timeout
        self.name_prefix = name_prefix
        self.penalty_factor = Decimal(penalty_factor)
        self.suspends = suspends
        #: Live reservations found vanished from the batch system since this process started
        #: (exported as a metric: every one is a promise the site broke).
        self.lost_total = 0
        self.reconciler = Reconciler(self)

    # ---- offers

    def record_offer(self, offer: Offer) -> None:
        """Remember an offer made to a client, so that it can be accepted until it expires."""
        self.record_offers([offer])

    def record_offers(self, offers: Sequence[Offer]) -> None:
        """Remember the offers of one quote together (one write)."""
        for offer in offers:
            if offer.size <= 0 or offer.duration <= 0:
                raise ValueError(
                    f"offer {offer.id}: size and duration must be positive, got {offer.size} "
                    f"units for {offer.duration} s"
                )
        self.store.add_offers(offers, self.clock())

    # ---- the buyer's requests

    def accept(
        self,
        offer_id: str,
        client: str,
        idempotency_key: str,
        users: Sequence[str] = (),
        accounts: Sequence[str] = (),
    ) -> ReservationRecord:
        """Turn an offer into a TENTATIVE reservation that exists, verified, in the batch system.

        Raises UnknownOffer for an offer never issued, OfferRefused (nothing changed) when it
        expired, was used, or its capacity is gone; ReservationFailed when the batch system
        refused or shrank it (the record is FAILED with the batch system's message);
        BackendUnavailable when the batch system did not answer (retry with the same key: the
        intent is resolved then, or by the next reconciliation). An accept that changed
        something (TENTATIVE, FAILED) gives the same answer when the same (client, key) sends
        it again; a refusal changed nothing and is decided afresh.
        """
        _require_identity(client, idempotency_key)
        operation = f"accept {offer_id}"
        answered = self._answered(client, idempotency_key, operation)
        if answered is not None:
            return _deliver(answered)
        with self.store.exclusive():
            entry = self.store.idempotency(client, idempotency_key)
            if entry is not None:
                _check_operation(entry.operation, operation, idempotency_key)
                if entry.answer is not None:
                    return _deliver(entry.answer)
                # an intent without an answer, and nobody else inside the lock: a crash (or a
                # batch system outage) interrupted this very request; finish it now
                intent = self.store.reservation_for_offer(offer_id)
                if intent is None:
                    raise RuntimeError(f"idempotency key {idempotency_key!r} has no intent")
                listing = self._ours(self.backend.list_reservations())
                return _deliver(self.reconciler.resolve_intent(intent, listing))
            record = self._create(offer_id, client, idempotency_key, users, accounts)
        return _deliver(record)

    def accept_all(
        self,
        offer_ids: Sequence[str],
        client: str,
        idempotency_key: str,
        users: Sequence[str] = (),
        accounts: Sequence[str] = (),
    ) -> List[ReservationRecord]:
        """Accept several offers, all or nothing (docs/batches.md): each part as
        :meth:`accept` would, in order, inside one hold of the exclusive lock; if one cannot
        be held, those held before it are released (free: tentative) and its error raised,
        ``field`` naming it (``offer_ids[i]``).

        The batch is journaled before its first part, so one this process did not finish
        (killed, or a part left to the batch system's answer) is released by the next
        :meth:`housekeeping`. The same (client, key) again answers the same: the
        reservations as they are now, or the error.
        """
        _require_identity(client, idempotency_key)
        with self.store.exclusive():
            journaled = self.store.accept_batch(client, idempotency_key)
            if journaled is not None:
                if list(journaled.offer_ids) != list(offer_ids):
                    raise IdempotencyKeyReused(
                        f"idempotency key {idempotency_key!r} was used for another batch of "
                        "offers; use a new key"
                    )
                if journaled.state == "open":  # interrupted, and nothing is in flight
                    journaled = self._release_batch(journaled, INTERRUPTED)
                return self._batch_answer(journaled)
            self._check_batch(offer_ids, client)
            self.store.open_batch(client, idempotency_key, offer_ids, self.clock())
            held: List[ReservationRecord] = []
            for i, offer_id in enumerate(offer_ids):
                try:
                    held.append(
                        _deliver(
                            self._create(
                                offer_id, client, f"{idempotency_key}#{i}", users, accounts
                            )
                        )
                    )
                except SiteagentError as exc:
                    exc.field = f"offer_ids[{i}]"
                    error = {"code": exc.code, "message": str(exc), "field": exc.field}
                    journaled = self.store.accept_batch(client, idempotency_key)
                    assert journaled is not None
                    self._release_batch(journaled, error)
                    raise
            self.store.close_batch(
                client, idempotency_key, "held", {"reservations": [r.id for r in held]}
            )
        return held

    def _release_batch(self, batch: AcceptBatch, error: Mapping[str, Any]) -> AcceptBatch:
        """Release every part of ``batch`` that is held (inside the exclusive lock), and
        close it with ``error`` as its answer; one whose accept the batch system has not
        answered yet is left open, for the next housekeeping to release once reconciliation
        has resolved it."""
        unresolved = False
        for i, offer_id in enumerate(batch.offer_ids):
            record = self.store.reservation_for_offer(offer_id)
            if record is None or record.client != batch.client:
                continue
            if record.state is S.REQUESTED:
                unresolved = True
            elif record.state is S.TENTATIVE:
                why = f"{BATCH_RELEASED} ({error.get('field', '')}: {error.get('message', '')})"
                self.cancel(record.id, batch.client, f"{batch.key}#{i}#release", reason=why)
        state = "open" if unresolved else "released"
        if not unresolved:
            self.store.close_batch(batch.client, batch.key, state, error)
        log.warning(
            "batch accept %s of %s: %s; its held parts released",
            batch.key,
            batch.client,
            error.get("message", ""),
        )
        return dataclasses.replace(batch, state=state, answer=dict(error))

    def _batch_answer(self, batch: AcceptBatch) -> List[ReservationRecord]:
        answer = batch.answer or INTERRUPTED
        if batch.state == "held":
            return [self._current_by_id(rid) for rid in answer["reservations"]]
        raise SiteagentError(
            str(answer.get("message", "")),
            code=str(answer.get("code", INTERRUPTED["code"])),
            field=answer.get("field"),
        )

    def release_interrupted_batches(self) -> List[str]:
        """Release the parts of every batch accept no process is finishing (one killed in
        the middle): the keys of the batches released."""
        released = []
        with self.store.exclusive():  # a batch in progress holds it: none is seen here
            for batch in self.store.open_batches():
                if self._release_batch(batch, INTERRUPTED).state == "released":
                    released.append(batch.key)
        return released

    def _current_by_id(self, reservation_id: str) -> ReservationRecord:
        record = self.store.get_reservation(reservation_id)
        if record is None:
            raise UnknownReservation(f"no reservation {reservation_id!r} at this site")
        return record

    def confirm(
        self,
        reservation_id: str,
        client: str,
        idempotency_key: str,
        *,
        receipt: Mapping[str, Any],
        pay: Optional[Pay] = None,
        held: Optional[Set[str]] = None,
    ) -> ReservationRecord:
        """The owner commits a TENTATIVE reservation before its deadline: CONFIRMED, with its
        ``receipt`` (the doubly signed deal, see :mod:`siteagent.market.deals`) kept and owed to
        the ledger in the same transaction.

        With ``pay``, the deal is paid for after every check and before the move, and the
        receipt it answers is the one kept: a confirm the bank refuses changes nothing, and
        one whose move then fails (the deadline passed, the owner cancelled meanwhile) leaves
        a paid receipt of a reservation never confirmed, which the caller voids. ``held`` is
        the names of the batch system's reservations, if the caller listed them already.
        """
        _require_identity(client, idempotency_key)
        operation = f"confirm {reservation_id}"
        record = self.owned(reservation_id, client)
        # looked up after reading the record: a duplicate of this request that finished
        # before the read is found here, one that finishes after it makes the write below fail
        answered = self._answered(client, idempotency_key, operation)
        if answered is not None:
            return answered
        self.check_confirmable(record, held)
        now = self.clock()
        if pay is not None:
            receipt = pay(record, receipt)
            now = self.clock()  # paying took time: the deadline is checked again below
        try:
            confirmed = self.store.transition(
                record.id,
                S.TENTATIVE,
                S.CONFIRMED,
                now,
                client,
                "confirmed by its owner",
                unconfirmed_before=now,
                remember=Remember(client, idempotency_key, operation),
                receipt=receipt,
                owed=(RECEIPT, receipt),
            )
        except StaleState as exc:
            answered = self._answered(client, idempotency_key, operation)
            if answered is not None:
                return answered  # the same request, sent twice at once, won the race
            if exc.current.state is S.TENTATIVE:  # still tentative: the deadline stopped it
                raise IllegalTransition(
                    f"reservation {record.id} was not confirmed by its deadline "
                    f"({when(record.deadline)}); accept a new offer"
                ) from None
            check_transition(exc.current, S.CONFIRMED)
            raise
        log.info("%s: CONFIRMED by %s", describe(confirmed), client)
        return confirmed

    def check_confirmable(self, record: ReservationRecord, held: Optional[Set[str]] = None) -> None:
        """Raise unless ``record`` may be confirmed now: TENTATIVE, before its deadline and the
        end of its window, and in the batch system (``held``: its reservations' names, listed
        now if not given); one found missing is marked LOST."""
        check_transition(record, S.CONFIRMED)
        now = self.clock()
        if record.deadline is not None and now >= record.deadline:
            raise IllegalTransition(
                f"reservation {record.id} was not confirmed by its deadline "
                f"({when(record.deadline)}) and is being released; accept a new offer"
            )
        if record.end <= now:
            raise IllegalTransition(
                f"reservation {record.id}'s window ended at {when(record.end)} before it was "
                "confirmed; accept a new offer"
            )
        if held is None:
            held = self.listed()
        if record.name not in held:
            self.reconciler.mark_lost(record, "not in the batch system when its owner confirmed it")
            raise IllegalTransition(
                f"reservation {record.id} ({record.name}) no longer exists in the batch system "
                "(deleted outside the agent?) and is marked LOST; accept a new offer"
            )

    def listed(self) -> Set[str]:
        """The names of the batch system's reservations, now."""
        return {res.name for res in self.backend.list_reservations()}

    def cancel(
        self,
        reservation_id: str,
        client: str,
        idempotency_key: str,
        refund: Optional[Refund] = None,
        reason: str = "",
    ) -> ReservationRecord:
        """The owner cancels; free while TENTATIVE, p x f once CONFIRMED (``record.penalty``).
        ``reason``: the history's line, where not the owner's own cancel.

        Cancelling a confirmed reservation owes the ledger ``refund(record, penalty, at)`` (the
        site's signed cancellation, see :mod:`siteagent.market.deals`), written in the same
        transaction as CANCELLED. The record is CANCELLED before the batch system is asked to
        delete the reservation; if that deletion fails, reconciliation retries it.
        """
        _require_identity(client, idempotency_key)
        operation = f"cancel {reservation_id}"
        while True:  # again if it moved meanwhile (confirmed: the penalty changes)
            record = self.owned(reservation_id, client)
            answered = self._answered(client, idempotency_key, operation)  # as in confirm
            if answered is not None:
                return answered
            check_transition(record, S.CANCELLED)
            at = int(self.clock())
            penalty, owed = Decimal(0).quantize(CENT), None
            if record.state is S.CONFIRMED:
                penalty = cancellation_penalty(record.penalty_factor, record.fee)
                if refund is not None:
                    owed = (REFUND, refund(record, penalty, at))
            try:
                cancelled = self.store.transition(
                    record.id,
                    record.state,
                    S.CANCELLED,
                    at,
                    client,
                    reason or f"cancelled by its owner while {record.state.value}",
                    penalty=penalty,
                    remember=Remember(client, idempotency_key, operation),
                    owed=owed,
                )
                break
            except StaleState:
                continue  # the next round finds the answer, or the state it moved to
        log.info("%s: CANCELLED by %s, penalty %s", describe(cancelled), client, cancelled.penalty)
        self._delete(cancelled.name, "cancelled")
        return cancelled

    # ---- the agent's own moves

    def expire_due(self) -> List[ReservationRecord]:
        """The reaper: TENTATIVE reservations past their deadline become EXPIRED and are
        deleted from the batch system."""
        expired = []
        now = self.clock()
        for record in self.store.due_for_expiry(now):
            try:
                gone = self.store.transition(
                    record.id,
                    S.TENTATIVE,
                    S.EXPIRED,
                    now,
                    AGENT,
                    f"not confirmed by its deadline ({when(record.deadline)})",
                )
            except StaleState:
                continue  # its owner cancelled it meanwhile
            log.info("%s: EXPIRED (not confirmed in time), deleting it", describe(gone))
            self._delete(gone.name, "expired")
            expired.append(gone)
        return expired

    def advance(self, now: Optional[float] = None) -> List[ReservationRecord]:
        """Move confirmed reservations along with time: ACTIVE when the window starts,
        COMPLETED when it ends. Returns the records that moved (as they are now)."""
        now = self.clock() if now is None else now
        moved = []
        for record in self.store.reservations([S.CONFIRMED, S.ACTIVE]):
            moved += self._advance(record, now, "its window")
        return moved

    def started(self, name: str) -> ReservationRecord:
        """The batch system says reservation ``name`` started (Slurm's ResvProlog, PBS's
        resv_begin hook): a CONFIRMED one is ACTIVE now rather than at the next poll.

        The notice moves a reservation only as far as its window allows, give or take
        :data:`NOTICE_SKEW_S` between the clocks: a notice for a window still far ahead is
        refused (IllegalTransition) and changes nothing. A TENTATIVE reservation stays
        tentative: it is its buyer's to confirm. Returns the record as it is now."""
        record = self._notified(name)
        if self.clock() + NOTICE_SKEW_S < record.start:
            raise IllegalTransition(
                f"reservation {record.id} starts at {when(record.start)}, not now: the "
                "notice is ignored"
            )
        self._advance(record, max(self.clock(), record.start), "the batch system: its window")
        return self._current(record)

    def ended(self, name: str) -> ReservationRecord:
        """The batch system says reservation ``name`` ended (Slurm's ResvEpilog, PBS's
        resv_end hook): it is COMPLETED now rather than at the next poll.

        A notice before the window's end (give or take :data:`NOTICE_SKEW_S`) is refused and
        changes nothing: a reservation that ends early was deleted, which the next
        reconciliation finds LOST rather than completed. Returns the record as it is now."""
        record = self._notified(name)
        if self.clock() + NOTICE_SKEW_S < record.end:
            raise IllegalTransition(
                f"reservation {record.id} ends at {when(record.end)}, not now: the notice "
                "is ignored (a reservation deleted early is found LOST by the next poll)"
            )
        self._advance(record, max(self.clock(), record.end), "the batch system: its window")
        return self._current(record)

    def _notified(self, name: str) -> ReservationRecord:
        """The agent's reservation a batch-system notice names."""
        record = self.store.reservation_by_name(name) if name.startswith(self.name_prefix) else None
        if record is None:
            raise UnknownReservation(f"no reservation named {name!r} is the agent's")
        return record

    def _current(self, record: ReservationRecord) -> ReservationRecord:
        current = self.store.get_reservation(record.id)
        if current is None:  # reservations are never deleted from the store
            raise RuntimeError(f"reservation {record.id} vanished from the store")
        return current

    def _advance(self, record: ReservationRecord, now: float, why: str) -> List[ReservationRecord]:
        """Move one reservation along with time as of ``now``; the records that moved."""
        moved = []
        try:
            if record.state is S.CONFIRMED and record.start <= now:
                record = self._move(record, S.ACTIVE, f"{why} started")
                moved.append(record)
            if record.state is S.ACTIVE and record.end <= now:
                record = self._move(record, S.COMPLETED, f"{why} ended")
                moved.append(record)
        except StaleState:
            pass  # cancelled, found lost, or moved by another notice meanwhile
        return moved

    def _create(
        self,
        offer_id: str,
        client: str,
        key: str,
        users: Sequence[str],
        accounts: Sequence[str],
    ) -> ReservationRecord:
        """The accept proper, inside the exclusive lock: re-check, intent, create, verify."""
        now = self.clock()
        offer = self._acceptable(offer_id, client, now)
        priority = self._suspending(offer_id)
        if priority:  # the whole snapshot: running jobs with their absolute priorities
            snapshot = without_lower(self.with_known_nodes(self.backend.snapshot()), priority)
        else:
            snapshot = self.with_known_nodes(self.backend.occupancy())
        nodes = self._recheck(offer, snapshot)
        record = self._intent(offer, client, key, snapshot.unit, users, accounts, now, nodes)
        self.store.add_reservation(
            record,
            client,
            "offer accepted; creating it in the batch system",
            Remember(client, key, f"accept {offer_id}"),
        )
        spec = ReservationSpec(
            name=record.name,
            start=record.start,
            duration=record.end - record.start,
            size=record.size,
            unit=record.unit,
            users=record.users,
            accounts=record.accounts,
            allocation=record.allocation,
            over_running=bool(priority),
        )
        try:
            made = self.backend.create_reservation(spec)
        except BackendUnavailable:
            log.warning(
                "%s: the batch system did not answer; the intent stays REQUESTED until the "
                "client retries or the next reconciliation resolves it",
                describe(record),
            )
            raise
        except (ReservationRefused, ValueError) as exc:
            return self._fail(record, f"the batch system refused it: {exc}", delete=False)
        except BackendError as exc:
            return self._fail(record, f"the batch system failed: {exc}", delete=True)
        short = shortfall(record, made)
        if short:
            return self._fail(record, short, delete=True)
        tentative = self.store.transition(
            record.id,
            S.REQUESTED,
            S.TENTATIVE,
            self.clock(),
            AGENT,
            f"created and verified in the batch system as {made.name}",
            deadline=self.clock() + self.confirm_timeout,
            remember=Remember(client, key, f"accept {offer_id}"),
        )
        log.info(
            "%s: TENTATIVE, to be confirmed by %s", describe(tentative), when(tentative.deadline)
        )
        return tentative

    def _acceptable(self, offer_id: str, client: str, now: float) -> Offer:
        """The offer, if ``client`` may accept it now: quoted to it, not used, not expired."""
        offer = self.store.get_offer(offer_id)
        if offer is None or offer.client not in ("", client):  # another's: as if none
            raise UnknownOffer(
                f"no offer {offer_id!r} for {client}: this agent never quoted it to you; ask "
                "for a quote first"
            )
        taken = self.store.reservation_for_offer(offer_id)
        if taken is not None:
            raise OfferRefused(
                f"offer {offer_id} was accepted already (reservation {taken.id}, "
                f"{taken.state.value}); ask for a new quote",
                offer_id=offer_id,
                reason="used",
            )
        if now >= offer.expires:
            raise OfferRefused(
                f"offer {offer_id} expired at {when(offer.expires)}; ask for a new quote",
                offer_id=offer_id,
                reason="expired",
            )
        return offer

    def _check_batch(self, offer_ids: Sequence[str], client: str) -> None:
        """Refuse a batch that cannot be held whole before any part is created (so that a
        refused batch leaves nothing behind, and its offers stay acceptable): every offer
        acceptable, and their windows fitting together beside running work and
        reservations (the queue is planned around them); the error names the first part
        at fault (``offer_ids[i]``)."""
        now = self.clock()
        windows = []
        for i, offer_id in enumerate(offer_ids):
            try:
                offer = self._acceptable(offer_id, client, now)
            except SiteagentError as exc:
                exc.field = f"offer_ids[{i}]"
                raise
            start, end = self.backend.held_window(offer.start, offer.end)
            windows.append((offer_id, start, end, offer.size))
        snapshot = self.with_known_nodes(self.backend.occupancy())
        bare = without_queue(snapshot)
        for i in range(len(windows)):
            if windows[i][1] < snapshot.now:
                continue  # refused as its own accept refuses it: window_passed
            together = [(("part", k), *w[1:]) for k, w in enumerate(windows[: i + 1])]
            try:
                plan(bare, self.policy, together)
            except ReservationConflict:
                offer_id, start, end, size = windows[i]
                refused = OfferRefused(
                    f"offer {offer_id}'s {size} {snapshot.unit.value}s from {when(start)} to "
                    f"{when(end)} do not fit beside the batch's other parts (or running work "
                    "and reservations took them): accept it in another batch or alone",
                    offer_id=offer_id,
                    reason="capacity_gone",
                )
                refused.field = f"offer_ids[{i}]"
                raise refused from None

    def _suspending(self, offer_id: str) -> int:
        """The absolute priority of the job whose won bid made the offer, where the site's
        bids count on suspending lower-priority work (0: none, the offer is checked as any)."""
        if not self.suspends:
            return 0
        bid = self.store.bid_of_offer(offer_id)
        if bid is None:
            return 0
        return int(bid.job.get("priority", 1))

    def with_known_nodes(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """``snapshot`` with the split of the agent's own reservations over their nodes as its
        records keep it, where the batch system shows only their totals. Where it lists each
        node's cores its split stands: Slurm 23.11 and later spread a total over the named
        nodes their own way, not always as the plan did (docs/slurm.md §11)."""
        if not snapshot.reservations:
            return snapshot
        known = {
            record.name: record.allocation
            for record in self.store.reservations([S.REQUESTED, *LIVE])
            if record.allocation
        }
        if not known:
            return snapshot
        reservations = tuple(
            dataclasses.replace(res, allocation=known[res.name])
            if res.name in known and not _split_listed(res)
            else res
            for res in snapshot.reservations
        )
        return dataclasses.replace(snapshot, reservations=reservations)

    def _recheck(self, offer: Offer, snapshot: ClusterSnapshot) -> Allocation:
        """Withdraw if the offer's window can no longer be reserved (docs/design.md §4.3 rule);
        else the nodes it goes on, where the batch system places reservations on nodes.

        Admissible means no conflict with running jobs, existing reservations or the capacity
        that English auctions' open bids hold (but the offer's own bid: it is the one winning),
        over the window the batch system will hold (it may round it up); queued jobs do not
        count (they are planned around it), so they are left out of the check, which keeps it
        cheap on a long queue.
        """
        if offer.start < snapshot.now:
            raise OfferRefused(
                f"offer {offer.id}'s window started at {when(offer.start)}, before now "
                f"({when(snapshot.now)}); ask for a new quote",
                offer_id=offer.id,
                reason="window_passed",
            )
        start, end = self.backend.held_window(offer.start, offer.end)
        holds = [Hold(*held) for held in self.store.bid_holds(except_offer=offer.id)]
        try:
            nodes = reservation_nodes(snapshot, start, end, offer.size, self.policy)
            fits = self._fits_beside(holds, snapshot, offer.size, start, end)
        except ReservationConflict:  # no room, or the batch system's own reservations collide
            fits = False
        if not fits:
            raise OfferRefused(
                f"the capacity offered in {offer.id} ({offer.size} {snapshot.unit.value}s, "
                f"{when(offer.start)} to {when(offer.end)}) is no longer free: running work, "
                "another reservation or an auction's bid holds it now; ask for a new quote",
                offer_id=offer.id,
                reason="capacity_gone",
            )
        return nodes

    def _fits_beside(
        self, holds: Sequence[Hold], snapshot: ClusterSnapshot, size: int, start: int, end: int
    ) -> bool:
        """Whether ``size`` units over [start, end) are left free beside running work,
        reservations and ``holds``; bids hold capacity by count, wherever the plan puts it."""
        if not holds:
            return True
        hard = plan(dataclasses.replace(snapshot, pending=()), self.policy).profile
        free, _ = held_profile(hard, holds)
        return free.fits(size, start, end - start)

    def _intent(
        self,
        offer: Offer,
        client: str,
        key: str,
        unit: CapacityUnit,
        users: Sequence[str],
        accounts: Sequence[str],
        now: float,
        allocation: Allocation,
    ) -> ReservationRecord:
        rid = reservation_id(offer.id)
        return ReservationRecord(
            id=rid,
            name=self.name_prefix + rid,
            offer_id=offer.id,
            client=client,
            accept_key=key,
            state=S.REQUESTED,
            start=offer.start,
            end=offer.end,
            size=offer.size,
            unit=unit,
            users=tuple(users),
            accounts=tuple(accounts),
            unit_price=offer.unit_price,
            fee=offer.fee,
            total=offer.total,
            penalty_factor=self.penalty_factor,
            created=now,
            updated=now,
            allocation=allocation,
        )

    def _fail(self, record: ReservationRecord, message: str, delete: bool) -> ReservationRecord:
        """REQUESTED -> FAILED (the answer to the accept), then delete what may exist."""
        failed = self.store.transition(
            record.id,
            S.REQUESTED,
            S.FAILED,
            self.clock(),
            AGENT,
            "the batch system did not give what was asked",
            message=message,
            remember=Remember(record.client, record.accept_key, f"accept {record.offer_id}"),
        )
        log.warning("%s: FAILED: %s", describe(failed), message)
        if delete:
            self._delete(record.name, "failed")
        return failed

    def _move(
        self,
        record: ReservationRecord,
        new: ReservationState,
        reason: str,
        message: Optional[str] = None,
    ) -> ReservationRecord:
        check_transition(record, new)
        return self.store.transition(
            record.id, record.state, new, self.clock(), AGENT, reason, message=message
        )

    def _delete(self, name: str, why: str) -> bool:
        """Delete one of our reservations; a failure is logged, reconciliation retries it."""
        if not name.startswith(self.name_prefix):
            raise ValueError(
                f"refusing to delete {name!r}: not an agent reservation (prefix "
                f"{self.name_prefix!r})"
            )
        try:
            self.backend.delete_reservation(name)
        except BackendError as exc:
            log.warning(
                "could not delete %s reservation %s: %s (the next reconciliation retries)",
                why,
                name,
                exc,
            )
            return False
        return True

    def _ours(self, reservations: Iterable[BatchReservation]) -> Dict[str, BatchReservation]:
        return {res.name: res for res in reservations if res.name.startswith(self.name_prefix)}

    def owned(self, reservation_id: str, client: str) -> ReservationRecord:
        """The reservation, if ``client`` is its owner: only the client that accepted it may
        confirm or cancel it.

        Ownership is the key id, the same identity the confirm must be signed with and the
        ledger debits; so a user's second key is a second buyer, and no check can disagree
        with another."""
        record = self.store.get_reservation(reservation_id)
        if record is None:
            raise UnknownReservation(f"no reservation {reservation_id!r} at this site")
        if record.client != client:
            raise NotOwner(
                f"reservation {reservation_id} belongs to another client; only its owner may "
                "confirm or cancel it"
            )
        return record

    def _answered(self, client: str, key: str, operation: str) -> Optional[ReservationRecord]:
        """The answer already given to (client, key), if any; the key must mean ``operation``."""
        entry = self.store.idempotency(client, key)
        if entry is None:
            return None
        _check_operation(entry.operation, operation, key)
        return entry.answer


# --------------------------------------------------------------------------- small functions


def reservation_id(offer_id: str) -> str:
    """The reservation id for an offer: deterministic (an offer is accepted at most once), so
    the batch-system name is known before it is created and found again after a crash."""
    return hashlib.sha256(offer_id.encode("utf-8")).hexdigest()[:12]


def _require_identity(client: str, key: str) -> None:
    if not client:
        raise ValueError("a client name is required (who is asking?)")
    if not key:
        raise ValueError("an idempotency key is required (any unique string per request)")


def _check_operation(used_for: str, operation: str, key: str) -> None:
    if used_for != operation:
        raise IdempotencyKeyReused(
            f"idempotency key {key!r} was used for '{used_for}', not '{operation}': use a new "
            "key for each new request, the same key only to retry one"
        )


def _deliver(record: ReservationRecord) -> ReservationRecord:
    """An accept's answer: the reservation, or ReservationFailed for a FAILED one."""
    if record.state is S.FAILED:
        raise ReservationFailed(record)
    return record


def without_lower(snapshot: ClusterSnapshot, priority: int) -> ClusterSnapshot:
    """The snapshot without the running jobs a job of ``priority`` may suspend (those of a
    lower known absolute priority): where a won ``now`` bid's window is checked and placed."""
    kept = tuple(job for job in snapshot.running if not 0 < job.absolute_priority < priority)
    return dataclasses.replace(snapshot, running=kept)


def _split_listed(res: BatchReservation) -> bool:
    """Whether ``res``'s split over its nodes is the batch system's: a listed split holds no
    more than its CPUs (its cores, or fewer where cores run several threads); one the snapshot
    bounded from its nodes and total holds more (backends/slurm/snapshot.py
    ``reservation_allocation``)."""
    return bool(res.allocation) and sum(cores for _, cores in res.allocation) <= res.cores
