"""A site's bid for a job in an English auction (Baranov et al., docs/design.md §4.6).

In this auction the roles are inverted: the job is the good, and sites bid for it with their
free capacity. The paper gives the bid's parts but not their formula (it refers to the
authors' earlier work); this is the project's reconstruction, in one unit, core-hours:

    value = p · n/3600 · (d · d/(d + w) − τ) − displacement

- **The cores offered, by how soon they are free** (``cores_value``): the job's ``n`` cores for
  its walltime ``d``, worth less the longer they wait (``w`` seconds after the earliest start
  the auction allows): a window free at once is worth all its core-hours, one a walltime away
  half. ``p`` is the job's absolute priority: a job of priority 3 is worth three of priority 1,
  so that the higher a job's priority, the more queued work a site will push back to start it
  sooner.
- **The cost of displacing lower-priority work** (``displacement``): the externality fee of
  placing the job in that window at a rate of one per core-hour (Singh, ch. 5): the delay, in
  core-hours, it imposes on the jobs queued at the site. Queued jobs have no priority the site
  can compare, so all of them count as the lower-priority work the paper's sites preempt.
- **The input transfer time** (``transfer``): ``τ`` seconds for the job's input to reach this
  site (0 when it is here), in the job's core-hours at its priority, like the wait.

The site offers the window of greatest value among its earliest possible start (which may push
queued jobs back), each change of its predicted availability after it, and its earliest start
that delays nobody, within one walltime of the earliest start. **A site that cannot start the
job within that time has no capacity, and does not bid** (the paper's sites bid only when they
have free resources).

**Held capacity.** A site never offers the same cores in two open auctions: a bid holds its
window until its auction ends, and every other bid is valued around it (:func:`holding`), as
if the held windows were reservations. A hold whose capacity the batch system's own work took
meanwhile holds nothing any more and is left out; its bid is revised when asked again.

**Bidding only what is free now** (:func:`valuation_now`, the site's ``auctions.mode: now``,
as the paper's sites bid): the window starts at the earliest start the auction allows, on
cores free now and until it ends, or held by running jobs of lower absolute priority, which
the job would suspend (:mod:`siteagent.core.preemption`; the batch system must preempt). The
displacement then counts the suspended work too: the victims are queued again at the front,
with what remains of their runs, and the fee is the delay the window imposes on them and on
the queue. With no such capacity the site does not bid.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Iterable, List, Optional, Sequence, Tuple, Union

from siteagent.core.money import HOUR
from siteagent.core.preemption import victim_order
from siteagent.core.profile import Profile
from siteagent.core.values import BatchReservation, Job
from siteagent.pricing.base import Context, Window
from siteagent.pricing.externality import ExternalityFee

#: Bids are written to the thousandth of a core-hour.
MILLI = Decimal("0.001")

#: How many windows a bid compares at most: the earliest start, the changes of availability
#: after it, and the earliest start that delays nobody.
CANDIDATES = 12

#: The harm to the queue in core-hours: the externality fee at one per core-hour of delay.
_DISPLACEMENT = ExternalityFee(Decimal(1))


@dataclass(frozen=True)
class Hold:
    """Capacity held for an open bid (or a reservation the latest snapshot does not show
    yet): ``size`` units over [start, end)."""

    start: int
    end: int
    size: int


@dataclass(frozen=True)
class AuctionedJob:
    """The job as a site values it: ``cores`` in the site's unit for ``walltime`` seconds, its
    absolute ``priority`` (1 and up, higher first) and ``transfer_s``, the seconds its input
    takes to reach this site."""

    cores: int
    walltime: int
    priority: int
    transfer_s: int


@dataclass(frozen=True)
class Valuation:
    """A bid: the window offered and its value's parts (core-hours, to the thousandth), and the
    context it was valued in when that is not the site's own (``basis``: the work it suspends
    queued again), where its offer is priced."""

    window: Window
    cores_value: Decimal
    displacement: Decimal
    transfer: Decimal
    basis: Optional[Context] = field(default=None, compare=False)

    @property
    def value(self) -> Decimal:
        return self.cores_value - self.displacement - self.transfer


@dataclass(frozen=True)
class NoBid:
    """Why a site does not bid: ``no_capacity`` (nothing free soon enough) or
    ``unsatisfiable`` (the job is wider than the machine; ``field`` names it)."""

    code: str
    reason: str
    field: Optional[str] = None


def held_profile(profile: Profile, holds: Iterable[Hold]) -> Tuple[Profile, List[Hold]]:
    """``profile`` (running work and reservations) less the holds that still fit in it, and
    those holds; a hold that no longer fits (the batch system's own work took its capacity) is
    left out."""
    held = profile.copy()
    kept = []
    for hold in holds:
        start = max(hold.start, held.origin)
        if hold.end > start and held.fits(hold.size, start, hold.end - start):
            held.reserve(start, hold.end, hold.size)
            kept.append(hold)
    return held, kept


def holding(context: Context, holds: Sequence[Hold]) -> Context:
    """The pricing context with ``holds`` taken as reservations (those that still fit): what
    is left to bid with, and the queue planned around what is held."""
    _, kept = held_profile(context.hard, holds)
    if not kept:
        return context
    snapshot = context.snapshot
    held = tuple(
        BatchReservation(name=f"bid-hold-{k}", start=h.start, end=h.end, cores=h.size, nodes=h.size)
        for k, h in enumerate(kept)
    )
    reserved = dataclasses.replace(snapshot, reservations=snapshot.reservations + held)
    return Context(reserved, context.policy)


def around_holds(context: Context, holds: Sequence[Hold]) -> Context:
    """``context`` with ``holds`` taken out of the capacity a window may use (those that still
    fit): what a quote may offer, so that it never offers what an open bid holds. Unlike
    :func:`holding`, the queue is not planned again (a quote on the event loop cannot wait for
    that): the fee is the one of the plan without the holds, which can only be lower."""
    held, kept = held_profile(context.hard, holds)
    if not kept:
        return context
    around = copy.copy(context)
    around.hard = held
    return around


def valuation(context: Context, job: AuctionedJob, earliest: int) -> Union[Valuation, NoBid]:
    """The best bid for ``job`` on ``context`` (held capacity already taken), its window
    starting at ``earliest`` or later; or why there is none."""
    size, duration = job.cores, job.walltime
    if size > context.capacity:
        unit = context.snapshot.unit.value
        reason = f"{size} {unit}s asked, the site has {context.capacity}"
        return NoBid("unsatisfiable", reason, "job.cores")
    latest = earliest + duration
    values = [
        value_of(context, job, Window(start, size, duration), earliest)
        for start in candidate_starts(context, size, duration, earliest, latest)
    ]
    if not values:
        return NoBid(
            "no_capacity",
            f"{size} {context.snapshot.unit.value}s for {duration} s are not free within one "
            "walltime of the earliest start (running work, reservations and other auctions' "
            "bids hold them)",
        )
    return max(values, key=lambda bid: (bid.value, -bid.window.start))


def candidate_starts(
    context: Context, size: int, duration: int, earliest: int, latest: int
) -> List[int]:
    """The starts a bid compares, all in [earliest, latest]: the earliest the job fits with
    running work, reservations and holds only (queued jobs pushed back), each change of the
    predicted availability after it, and the earliest start that delays nobody."""
    first = context.hard.earliest_fit(size, duration, earliest)
    if first is None or first > latest:
        return []
    starts = [first]
    for start, _, _ in context.plan.profile.segments(since=first):
        if start > latest or len(starts) >= CANDIDATES - 1:
            break
        if start > first and context.hard.fits(size, start, duration):
            starts.append(start)
    free = context.plan.profile.earliest_fit(size, duration, first)
    if free is not None and free <= latest and free not in starts:
        starts.append(free)
    return starts


def value_of(context: Context, job: AuctionedJob, window: Window, earliest: int) -> Valuation:
    """The parts of the bid that offers ``window``."""
    size, duration = Decimal(job.cores), Decimal(job.walltime)
    weight = Decimal(job.priority) * size / HOUR
    wait = Decimal(window.start - earliest)
    cores_value = weight * duration * duration / (duration + wait)
    transfer = weight * Decimal(job.transfer_s)
    displacement = _DISPLACEMENT.fee(context, window)
    return Valuation(
        window,
        cores_value.quantize(MILLI),
        displacement.quantize(MILLI),
        transfer.quantize(MILLI),
    )


# ---- bidding only what is free now (the paper's sites)


def valuation_now(
    context: Context, job: AuctionedJob, earliest: int, holds: Sequence[Hold]
) -> Union[Valuation, NoBid]:
    """The bid for ``job`` of a site bidding only what is free now (see the module's
    docstring): its window from ``earliest``, on cores free from now until it ends beside
    ``holds`` (other bids), counting those of running jobs of lower absolute priority; or why
    there is none."""
    size, duration = job.cores, job.walltime
    if size > context.capacity:
        unit = context.snapshot.unit.value
        return NoBid("unsatisfiable", f"{size} {unit}s asked, the site has {context.capacity}")
    free = capacity_now(context, job.priority, holds)
    now = context.now
    span = earliest + duration - now
    if not free.fits(size, now, span):
        return NoBid(
            "no_capacity",
            f"{size} {context.snapshot.unit.value}s are not free from now until the job would "
            "end, even counting those of running jobs of lower priority (running work, "
            "reservations and other auctions' bids hold them)",
        )
    victims = []
    for victim in reversed(_lower(context, job.priority)):
        # keep running the jobs least fit to suspend, while the job still fits
        end = _end_of(victim, now)
        demand = context.snapshot.demand(victim)
        free.reserve(now, end, demand)
        if not free.fits(size, now, span):
            free.release(now, end, demand)
            victims.append(victim)
    victims.reverse()
    basis = _displaced(context, victims, _kept(context, holds) if holds else [])
    valued = value_of(basis, job, Window(earliest, size, duration), earliest)
    return dataclasses.replace(valued, basis=basis)


def capacity_now(context: Context, priority: int, holds: Sequence[Hold]) -> Profile:
    """What a job of ``priority`` may take beside ``holds``: free capacity, and that of running
    jobs of lower absolute priority. Holds take free capacity first and then, as counts, what
    they would suspend (lowest priorities first, as their jobs would): a hold of a job that
    suspends the same low-priority work leaves this one nothing of it. A hold that does not fit
    even with every job of a known priority suspended (work that is never suspended took its
    capacity) holds nothing."""
    free = _released(context, _lower(context, priority))
    for hold in _kept(context, holds) if holds else ():
        free.reserve(hold.start, hold.end, hold.size)
    return free


def _kept(context: Context, holds: Sequence[Hold]) -> List[Hold]:
    """The holds that still fit beside the work that is never suspended."""
    suspensible = [job for job in context.snapshot.running if job.absolute_priority > 0]
    return held_profile(_released(context, suspensible), holds)[1]


def _lower(context: Context, priority: int) -> List[Job]:
    """The running jobs of lower absolute priority, in the order they would be suspended (a
    job of no known priority, 0, is never suspended)."""
    lower = [job for job in context.snapshot.running if 0 < job.absolute_priority < priority]
    return sorted(lower, key=lambda job: victim_order(job.absolute_priority, job.start or 0))


def _end_of(job: Job, now: int) -> int:
    """Where a running job's window ends in the plan (at least a second from now)."""
    assert job.start is not None
    return max(job.start + job.limit, now + 1)


def _released(context: Context, jobs: Sequence[Job]) -> Profile:
    """The capacity running work and reservations leave, ``jobs`` suspended."""
    free = context.hard.copy()
    for job in jobs:
        free.release(context.now, _end_of(job, context.now), context.snapshot.demand(job))
    return free


def _displaced(context: Context, victims: Sequence[Job], holds: Sequence[Hold]) -> Context:
    """The context with ``victims`` queued again (first of their priority, with what remains
    of their time limits) and ``holds`` taken as reservations: where the suspended work's
    delay counts in the displacement."""
    if not victims and not holds:
        return context
    snapshot = context.snapshot
    gone = {job.id for job in victims}
    # the holds that fit beside what keeps running: others count on suspending other work
    _, holds = held_profile(
        _released(context, [job for job in snapshot.running if job.id in gone]), holds
    )
    now = context.now
    queued = [
        dataclasses.replace(job, start=None, submit=now, limit=_end_of(job, now) - now)
        for job in victims
    ]
    queued.extend(snapshot.pending)
    queued.sort(key=lambda job: -job.absolute_priority)  # stable: the victims first of theirs
    held = tuple(
        BatchReservation(name=f"bid-hold-{k}", start=h.start, end=h.end, cores=h.size, nodes=h.size)
        for k, h in enumerate(holds)
    )
    displaced = dataclasses.replace(
        snapshot,
        running=tuple(job for job in snapshot.running if job.id not in gone),
        pending=tuple(queued),
        reservations=snapshot.reservations + held,
    )
    return Context(displaced, context.policy)
