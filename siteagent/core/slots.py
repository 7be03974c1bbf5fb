"""Advertised slots: the holes of the predicted schedule that a reservation can take for free.

Singh's thesis, ch. 3: slots are the leftovers of the conservative schedule, so provisioning
one is no different to the scheduler from backfilling a job into it. No two slots describe the
same capacity: free capacity is cut into horizontal bands, each as long as the capacity under
it stays free. A band that ends because a planned job (or a reservation) starts is bounded:
indivisible and not extensible, since cutting it would fragment the schedule. A band still
open at the horizon is divisible and extensible. Default price: ``c = 1`` per core-hour and
``f = 0``, what the same job would cost in the queue.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Callable, List, Optional, Sequence, Tuple

from siteagent.core.money import CENT, core_hours
from siteagent.core.prediction import Plan
from siteagent.core.values import Slot


def advertise(
    plan: Plan,
    unit_price: Decimal = Decimal(1),
    fee: Decimal = Decimal(0),
    reservable: Optional[Callable[[int, int], int]] = None,
) -> List[Slot]:
    """The slots of a plan over [now, horizon), by start time then by level.

    ``reservable(start, end)``, where the batch system places reservations on nodes, is how
    many units one reservation over the window could have (:func:`~siteagent.core.prediction.
    reservable_units`): a band is cut down to it, so no slot, nor the bands under it (which
    last at least as long), promises a window the batch system would refuse.
    """
    horizon = plan.horizon
    slots: List[Slot] = []
    open_bands: List[Tuple[int, int, int]] = []  # (low, high, start), levels bottom-up
    level = 0
    # what any window within the horizon can have: a band no higher needs no asking
    floor = reservable(plan.now, horizon) if reservable is not None else 0

    def close(low: int, high: int, start: int, end: int, bounded: bool) -> None:
        if reservable is not None and high > floor:
            high = min(high, reservable(start, end))
            if high <= low:
                return
        slots.append(
            Slot(start, end - start, high - low, unit_price, fee, not bounded, not bounded)
        )

    for start, _, free in plan.profile.segments():
        if start >= horizon:
            break
        free = max(free, 0)
        if free > level:
            open_bands.append((level, free, start))
        elif free < level:
            while open_bands and open_bands[-1][0] >= free:
                low, high, since = open_bands.pop()
                close(low, high, since, start, bounded=True)
            if open_bands and open_bands[-1][1] > free:
                low, high, since = open_bands.pop()
                close(free, high, since, start, bounded=True)
                open_bands.append((low, free, since))
        level = free
    for low, high, since in open_bands:
        close(low, high, since, horizon, bounded=False)
    slots.sort(key=lambda slot: (slot.start, slot.cores))
    return slots


def subslot_cost(slot: Slot, cores: int, start: int, duration: int) -> Optional[Decimal]:
    """Cost of using ``cores`` x [start, start + duration) of ``slot`` to the cent, or None if
    not allowed."""
    exact = _exact_cost(slot, cores, start, duration)
    return None if exact is None else exact.quantize(CENT)


def _exact_cost(slot: Slot, cores: int, start: int, duration: int) -> Optional[Decimal]:
    """:func:`subslot_cost` before rounding: a plan adds its parts exactly, so that two
    plans of the same core-hours cost the same however their tasks are cut into parts."""
    if cores <= 0 or duration <= 0 or not _allowed(slot, cores, start, start + duration):
        return None
    return _part_cost(cores, duration, slot.unit_price, slot.fee)


def _unrounded(size: int, duration_s: int, unit_price: Decimal, fee: Decimal) -> Decimal:
    """``n·d·c + f`` as :func:`~siteagent.core.money.cost` has it, not rounded to the cent."""
    return core_hours(size, duration_s) * unit_price + fee


#: :func:`_unrounded`, remembered: fitting plans' tasks to slots prices the same few hundred
#: parts over and over (a whole indivisible slot each time it could hold a task), some 650,000
#: times in one genetic search at the thesis' defaults, and a price in Decimal takes ten times
#: as long as looking it up.
_part_cost = functools.lru_cache(maxsize=4096)(_unrounded)


def _allowed(slot: Slot, cores: int, start: int, end: int) -> bool:
    """The thesis' Table 1: an indivisible slot is taken whole (longer only if extensible); a
    divisible one in any part from its start on (past its end only if extensible)."""
    slot_end = slot.start + slot.duration  # (Slot.end is a Python property: slow here)
    if not slot.divisible:
        whole = cores == slot.cores and start == slot.start
        return whole and (end == slot_end or (slot.extensible and end > slot_end))
    return cores <= slot.cores and slot.start <= start and (end <= slot_end or slot.extensible)


@dataclass(frozen=True)
class SlotFit:
    """Where a request goes on a set of slots: its start, the parts taken, and the cost."""

    start: int
    parts: Tuple[Tuple[Slot, int], ...]
    cost: Decimal


def fit_request(
    slots: Sequence[Slot], cores: int, duration: int, earliest: int
) -> Optional[SlotFit]:
    """The earliest placement of ``cores`` x ``duration`` on the slots, and what it costs.

    One slot if one suffices (the cheapest at that start); otherwise slots stacked over the
    same window (the thesis' vertical combination: the cores may come from different slots
    but the time must be the same), cheapest cores first. None if nothing fits.
    """
    # A slot can hold the window from its start up to its end less the duration (for ever if
    # extensible). Slots that cannot hold it from ``earliest`` on are left out at once; a
    # start the window fits at is ``earliest`` or a remaining slot's start, where the set of
    # slots that can hold it last grew.
    spans = []
    for slot in slots:
        since = slot.start
        latest = math.inf if slot.extensible else since + slot.duration - duration
        if latest >= since and latest >= earliest:
            spans.append((slot, since, latest))
    candidates = sorted({earliest} | {since for _, since, _ in spans if since >= earliest})
    for start in candidates:
        holding = [slot for slot, since, latest in spans if since <= start <= latest]
        if sum(slot.cores for slot in holding) < cores:
            continue
        placed = _single(holding, cores, duration, start) or _stacked(
            holding, cores, duration, start
        )
        if placed is not None:
            return placed
    return None


def provision(slot: Slot, cores: int, start: int, duration: int) -> Optional[Tuple[int, Decimal]]:
    """What must be taken of ``slot`` to hold ``cores`` x [start, start + duration), and its
    cost by the thesis' Table 1 (exact: a plan's total is what is rounded); None if the slot
    cannot hold it.

    A divisible slot gives just that. An indivisible one is taken whole, from its start to its
    end (past the end if extensible and the request runs longer): the thesis backfills a 2 h
    task into Figure 1's 3 h indivisible slot S3 that way, paying for all of it.
    """
    end = start + duration
    if not 0 < cores <= slot.cores or duration <= 0 or start < slot.start:
        return None
    if end > slot.end and not slot.extensible:
        return None
    if slot.divisible:
        taken, since, length = cores, start, duration
    else:
        taken, since, length = slot.cores, slot.start, max(end, slot.end) - slot.start
    cost = _exact_cost(slot, taken, since, length)
    return None if cost is None else (taken, cost)


def _single(slots: Sequence[Slot], cores: int, duration: int, start: int) -> Optional[SlotFit]:
    best: Optional[SlotFit] = None
    for slot in slots:
        taken = provision(slot, cores, start, duration)
        if taken is not None and (best is None or taken[1] < best.cost):
            best = SlotFit(start, ((slot, taken[0]),), taken[1])
    return best


def _stacked(slots: Sequence[Slot], cores: int, duration: int, start: int) -> Optional[SlotFit]:
    usable = [slot for slot in slots if provision(slot, 1, start, duration) is not None]
    usable.sort(key=lambda slot: (not slot.divisible, slot.unit_price, slot.fee))
    parts: List[Tuple[Slot, int]] = []
    total = Decimal(0)
    needed = cores
    for slot in usable:
        if needed <= 0:
            break
        taken = provision(slot, min(slot.cores, needed), start, duration)
        assert taken is not None  # the slot holds the window, so it holds part of it
        parts.append((slot, taken[0]))
        total += taken[1]
        needed -= taken[0]
    if needed > 0 or len(parts) < 2:
        return None
    return SlotFit(start, tuple(parts), total)


def remainder(slot: Slot, cores: int, start: int, end: int) -> List[Slot]:
    """What is left of ``slot`` once a task holds ``cores`` of it over [start, end) (the
    thesis' Figure 3): the time before the task and after it at full width, and the cores
    beside it.

    The leftovers of a divisible slot keep its price; those before and beside the task are
    bounded by it (not extensible), the one after keeps the slot's extensibility (an
    extensible slot is free past its end, so that piece exists even when the task outlasts
    the slot). An indivisible slot was paid whole when first taken, so its leftovers are free
    and divisible: later tasks of the same plan use them at no further cost.
    """
    paid = not slot.divisible
    price, fee = (Decimal(0), Decimal(0)) if paid else (slot.unit_price, slot.fee)

    def piece(since: int, until: int, width: int, extensible: bool = False) -> Slot:
        return Slot(since, until - since, width, price, fee, True, extensible and not paid)

    pieces = []
    if start > slot.start:
        pieces.append(piece(slot.start, start, slot.cores))
    if slot.cores > cores:
        pieces.append(piece(start, end, slot.cores - cores))
    if end < slot.end:
        pieces.append(piece(end, slot.end, slot.cores, slot.extensible))
    elif slot.extensible and not paid:
        pieces.append(piece(end, end + max(slot.duration, 1), slot.cores, True))
    return pieces
