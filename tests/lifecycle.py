"""Helpers shared by the reservation lifecycle tests (unit and integration).

Small hand-made traces, a clock the test moves, a backend that misbehaves on request, and the
lifecycle's promises written once as a function (:func:`violations`) so that the unit, crash
and concurrency tests all check the same thing, on whichever backend they run.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from siteagent.backends.base import Backend, BackendUnavailable, ReservationRefused
from siteagent.core.model import BatchReservation, ClusterSnapshot, Offer, Request, ReservationSpec
from siteagent.core.scheduling import plan
from siteagent.market.reservations import LIVE, ReservationManager
from siteagent.market.store import ReservationState, Store

S = ReservationState

#: An SWF job: (submit, run time, processors, requested time), seconds from the trace start.
SwfJob = Tuple[int, int, int, int]


def write_trace(path: Path, jobs: Iterable[SwfJob], max_procs: int) -> str:
    """A plain SWF file with these jobs (the fields the simulator reads; the rest -1)."""
    lines = ["; Version: 2.2", "; Computer: lifecycle test cluster", f"; MaxProcs: {max_procs}"]
    for number, (submit, run, procs, req_time) in enumerate(jobs, start=1):
        fields = [number, submit, -1, run, procs, -1, -1, procs, req_time]
        lines.append(" ".join(str(v) for v in fields + [-1, 1] + [-1] * 7))
    path.write_text("\n".join(lines) + "\n", encoding="latin-1")
    return str(path)


def busy_trace(path: Path, seed: int, cores: int = 64, jobs: int = 4000) -> str:
    """A steady stream of small jobs (about half the machine busy) for tests that need a
    living cluster: jobs start and end while reservations come and go."""
    rng = random.Random(seed)
    rows: List[SwfJob] = []
    t = 0
    for _ in range(jobs):
        t += rng.randint(1, 12)
        run = rng.randint(10, 240)
        rows.append((t, run, rng.randint(1, cores // 8), run + rng.randint(0, 120)))
    return write_trace(path, rows, cores)


class FakeClock:
    """Wall-clock time that moves only when the test says so."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class FaultyBackend(Backend):
    """Another backend that refuses, shrinks, or stops answering when the test asks it to.

    ``refuse``: the next creations are refused with this message. ``shrink``: creations get
    this many units less than asked (Slurm's silent NodeCnt reduction). ``unavailable``: every
    call fails as if the controller were down. ``lose_answer``: creations happen but the answer
    is lost (a timeout after the controller acted).
    """

    name = "faulty"

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.refuse: Optional[str] = None
        self.shrink = 0
        self.unavailable = False
        self.lose_answer = False

    def _check(self) -> None:
        if self.unavailable:
            raise BackendUnavailable("controller down (test)")

    def snapshot(self) -> ClusterSnapshot:
        self._check()
        return self.inner.snapshot()

    def create_reservation(self, spec: ReservationSpec) -> BatchReservation:
        self._check()
        if self.refuse is not None:
            raise ReservationRefused(self.refuse)
        made = self.inner.create_reservation(
            dataclasses.replace(spec, size=spec.size - self.shrink)
        )
        if self.lose_answer:
            raise BackendUnavailable("scontrol did not answer within 30 s (test)")
        return made

    def delete_reservation(self, name: str) -> None:
        self._check()
        self.inner.delete_reservation(name)

    def list_reservations(self) -> List[BatchReservation]:
        self._check()
        return self.inner.list_reservations()


def record_offer(
    manager: ReservationManager,
    size: int,
    start: int,
    duration: int,
    valid_s: int = 60,
    fee: Decimal = Decimal("0"),
    offer_id: Optional[str] = None,
) -> Offer:
    """Record an offer for exactly this window (no feasibility check: tests choose)."""
    now = int(manager.clock())
    offer = Offer(
        id=offer_id or uuid.uuid4().hex[:16],
        request=Request(cores=size, duration=duration, earliest=start),
        start=start,
        duration=duration,
        size=size,
        unit_price=Decimal("1"),
        fee=fee,
        expires=now + valid_s,
    )
    manager.record_offer(offer)
    return offer


def earliest_start(backend: Backend, size: int, duration: int, after: int) -> Optional[int]:
    """Earliest start >= after where a reservation of ``size`` fits (running work and
    reservations only), as the placeholder offer command computes it."""
    snapshot = backend.snapshot()
    free = plan(dataclasses.replace(snapshot, pending=())).profile
    return free.earliest_fit(size, duration, max(after, snapshot.now))


# --------------------------------------------------------------------------- the promises


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
) -> List[str]:
    """Every broken lifecycle promise, as sentences (empty: all kept).

    ``grace_s`` is how long the agent may take to act on a deadline: one poll interval and
    the cycle's own time. It can only act while it runs: ``agent_up_since`` is when it last
    came up (batch-system clock), so a deadline that passed while it was down counts from
    then. ``clock`` is the batch system's. ``confirmed`` are reservation ids known to have
    been confirmed at some point (answers received, or seen in the store);
    ``cancelled_by_us`` those the test itself cancelled. The batch system is listed before
    the store and the clock are read, the order in which the agent's own reconciliation
    reads them.
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
        due = max(record.deadline, agent_up_since) if record.deadline is not None else now
        overdue = now - due
        late = overdue > grace_s
        if late and record.state is S.TENTATIVE:
            problems.append(f"{record.id} is still TENTATIVE {overdue:.1f} s past its due time")
        if late and record.name in held and record.state not in (S.CONFIRMED, S.ACTIVE):
            problems.append(f"unconfirmed {record.name} still held after its deadline")
        if record.state is S.REQUESTED and now > max(record.created, agent_up_since) + grace_s:
            problems.append(f"{record.id} is still REQUESTED {now - record.created:.1f} s on")
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
