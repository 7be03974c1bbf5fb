"""Use this when a test checks the reservation lifecycle's promises on any backend.

The reservation lifecycle's promises, written once as a function (:func:`violations`), so
that the unit, crash and concurrency tests all check the same thing, on whichever backend they
run, the money included (no booked charge without a confirmed reservation, once the agent
settled: :func:`unsettled_charges`); and the capacity no set of reservations may overrun
(:func:`capacity_overruns`).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Callable, Dict, Iterable, List, Optional, Sequence

from siteagent.backends.base import Backend
from siteagent.core.values import BatchReservation, ClusterSnapshot
from siteagent.ledger.bank import Ledger
from siteagent.market.lifecycle import LIVE, ReservationState
from siteagent.market.store import RECEIPT, Store
from siteagent.protocol.documents import Receipt

S = ReservationState


def ours(backend: Backend, prefix: str) -> Dict[str, BatchReservation]:
    return {r.name: r for r in backend.list_reservations() if r.name.startswith(prefix)}


def violations(
    backend: Backend,
    store: Store,
    prefix: str,
    grace_s: float,
    clock: Callable[[], float],
    confirmed: Iterable[str] = (),
    cancelled_by_us: Iterable[str] = (),
    agent_up_since: float = 0.0,
    ledger: Optional[Ledger] = None,
) -> List[str]:
    """Every broken lifecycle promise, as sentences (empty: all kept).

    ``grace_s`` is how long the agent may take to act on a deadline: one poll interval and
    the cycle's own time. It can only act while it runs: ``agent_up_since`` is when it last
    came up (batch-system clock), so a deadline that passed while it was down counts from
    then. ``clock`` is the batch system's. ``confirmed`` are reservation ids known to have
    been confirmed at some point (answers received, or seen in the store);
    ``cancelled_by_us`` those the test itself cancelled. A confirmed reservation always has
    its receipt (they are written together). The batch system is listed before
    the store and the clock are read, the order in which the agent's own reconciliation
    reads them. With the site's ``ledger``, the money is checked too
    (:func:`unsettled_charges`).
    """
    held = ours(backend, prefix)
    records = {record.id: record for record in store.reservations()}
    now = clock()
    cancelled = set(cancelled_by_us)
    by_name = {record.name: record for record in records.values()}
    problems = []
    for name in held:
        record = by_name.get(name)
        if record is None or record.state not in LIVE:
            state = "no record" if record is None else record.state.value
            problems.append(f"{name} exists in the batch system with {state}")
    for rid in confirmed:
        record = records[rid]
        ok = {S.CONFIRMED, S.ACTIVE, S.COMPLETED} | ({S.CANCELLED} if rid in cancelled else set())
        if record.state not in ok:
            problems.append(f"confirmed reservation {rid} is {record.state.value}")
        elif (
            record.state in (S.CONFIRMED, S.ACTIVE)
            and record.end > now
            and (record.name not in held)
        ):
            problems.append(f"confirmed reservation {rid} is missing from the batch system")
    for record in records.values():
        if (
            record.state in (S.CONFIRMED, S.ACTIVE, S.COMPLETED)
            and store.receipt(record.id) is None
        ):
            problems.append(f"{record.id} is {record.state.value} without its receipt")
    for record in records.values():
        due = max(record.deadline, agent_up_since) if record.deadline is not None else now
        overdue = now - due
        late = overdue > grace_s
        if late and record.state is S.TENTATIVE:
            problems.append(f"{record.id} is still TENTATIVE {overdue:.1f} s past its due time")
        if late and record.name in held and record.state not in (S.CONFIRMED, S.ACTIVE):
            problems.append(f"unconfirmed {record.name} still held after its deadline")
        if record.state is S.REQUESTED and now > max(record.created, agent_up_since) + grace_s:
            problems.append(f"{record.id} is still REQUESTED {now - record.created:.1f} s on")
    if ledger is not None:
        problems.extend(unsettled_charges(store, ledger))
    return problems


def unsettled_charges(store: Store, ledger: Ledger) -> List[str]:
    """What the bank holds against the promises, once the agent settled: a confirmed
    reservation whose deal is not booked (the bank books before the reservation moves), or a
    buyer who paid for a reservation that is no longer live and was never confirmed (its
    receipt not voided)."""
    problems = []
    for record in store.reservations():
        signed = store.booking(record.id, RECEIPT)
        if signed is None:
            continue
        receipt = Receipt.from_json(signed)
        moves = ledger.movements(receipt.id)
        buyer = receipt.deal["buyer"]
        paid = -sum(
            (entry.amount for move in moves for entry in move.entries if entry.account == buyer),
            Decimal(0),
        )
        confirmed = store.receipt(record.id) is not None
        if confirmed and not any(move.kind == "deal" for move in moves):
            problems.append(f"{record.id} is {record.state.value} but its deal is not booked")
        if not confirmed and record.state not in LIVE and paid != 0:
            problems.append(
                f"{record.id} was never confirmed ({record.state.value}) but {buyer} paid {paid}"
            )
    return problems


def capacity_overruns(
    snapshot: ClusterSnapshot, reservations: Sequence[BatchReservation]
) -> List[str]:
    """Instants where reservations and running jobs together hold more than the machine (in
    the snapshot's unit: cores, or whole nodes)."""
    points = sorted({snapshot.now} | {r.start for r in reservations if r.start > snapshot.now})
    problems = []
    for t in points:
        held = sum(r.demand(snapshot.unit) for r in reservations if r.start <= t < r.end)
        running = sum(
            snapshot.demand(job)
            for job in snapshot.running
            if job.start is not None and job.start + job.limit > t
        )
        if held + running > snapshot.capacity:
            problems.append(
                f"at {t}: reservations hold {held} and running jobs {running} of "
                f"{snapshot.capacity}"
            )
    return problems
