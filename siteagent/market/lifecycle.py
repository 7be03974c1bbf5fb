"""The reservation lifecycle's vocabulary: states, records, the legal moves and their errors.

Invariant: a reservation changes state only along :data:`TRANSITIONS`; anything else raises
:class:`IllegalTransition` and changes nothing. The store persists these records, the manager
(reservations.py) makes the moves, reconcile.py repairs them after a crash. The diagram and the
meaning of each state: docs/lifecycle.md §1-2.
"""

from __future__ import annotations

import enum
import time
from dataclasses import asdict, dataclass, fields
from decimal import Decimal
from typing import Any, Dict, FrozenSet, Mapping, Optional, Tuple

from siteagent.core.errors import SiteagentError
from siteagent.core.values import Allocation, BatchReservation, CapacityUnit
from siteagent.protocol.errors import (
    IDEMPOTENCY_KEY_REUSED,
    ILLEGAL_TRANSITION,
    NOT_OWNER,
    RESERVATION_FAILED,
    UNKNOWN_OFFER,
    UNKNOWN_RESERVATION,
)


class ReservationState(str, enum.Enum):
    """Where a reservation stands (docs/lifecycle.md §1); the legal moves are in reservations.py."""

    REQUESTED = "REQUESTED"
    TENTATIVE = "TENTATIVE"
    CONFIRMED = "CONFIRMED"
    ACTIVE = "ACTIVE"
    COMPLETED = "COMPLETED"
    EXPIRED = "EXPIRED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    LOST = "LOST"


@dataclass(frozen=True)
class ReservationRecord:
    """One reservation as the agent remembers it: the deal, its window and where it stands.

    ``name`` is the batch system's reservation name (the agent's prefix + ``id``).
    ``accept_key`` is the idempotency key of the accept that made it, so that a crash-left
    intent can be answered when the client retries. ``deadline`` is the confirm deadline, set
    when it became TENTATIVE and kept afterwards as history. ``penalty_factor`` is fixed at
    accept time: changing the site's setting never changes the terms of a deal already made.
    ``penalty`` is set when it is cancelled.
    ``message`` keeps the batch system's words for FAILED and the reason for LOST.
    ``allocation`` is where it is, node by node, where the batch system places reservations on
    nodes the agent chose (Slurm shows a multi-node core reservation's total only).
    """

    id: str
    name: str
    offer_id: str
    client: str
    accept_key: str
    state: ReservationState
    start: int
    end: int
    size: int
    unit: CapacityUnit
    users: Tuple[str, ...]
    accounts: Tuple[str, ...]
    unit_price: Decimal
    fee: Decimal
    total: Decimal
    penalty_factor: Decimal
    created: float
    updated: float
    deadline: Optional[float] = None
    penalty: Optional[Decimal] = None
    message: str = ""
    allocation: Allocation = ()

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready dict: money as decimal strings, enums as their values."""
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, Decimal):
                out[key] = str(value)
            elif isinstance(value, enum.Enum):
                out[key] = value.value
            elif isinstance(value, tuple):
                out[key] = list(value)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReservationRecord:
        """The inverse of :meth:`to_dict` (used to give back a stored idempotent answer)."""
        money = {"unit_price", "fee", "total", "penalty_factor", "penalty"}
        values: Dict[str, Any] = {}
        for item in fields(cls):
            value = data.get(item.name)
            if item.name in money:
                value = None if value is None else Decimal(value)
            elif item.name == "state":
                value = ReservationState(value)
            elif item.name == "unit":
                value = CapacityUnit(value)
            elif item.name in ("users", "accounts"):
                value = tuple(value or ())
            elif item.name == "allocation":
                value = tuple((str(name), int(cores)) for name, cores in value or ())
            values[item.name] = value
        return cls(**values)


class BidState(str, enum.Enum):
    """Where the site's bid in one English auction stands: ``OPEN`` (it bids, and holds the
    capacity its offer names), ``NONE`` (it takes part without a bid: no capacity), ``WON``
    (its offer was accepted: the reservation holds the capacity now) or ``RELEASED`` (lost, or
    the auction ended: it holds nothing)."""

    OPEN = "OPEN"
    NONE = "NONE"
    WON = "WON"
    RELEASED = "RELEASED"


#: Bid states whose auction the site still takes part in.
BIDDING = (BidState.OPEN, BidState.NONE)


@dataclass(frozen=True)
class BidRecord:
    """The site's bid in one client's auction, as valued last.

    ``job`` is the job as announced (its JSON), ``closes_at`` when the auction ends and
    ``held_until`` when the bid's capacity is released if its offer was not accepted by then.
    An OPEN bid names its ``offer_id`` and holds ``size`` units over [start, end); ``value``
    and its parts are the valuation it was made with. ``reason_code``/``reason`` say why a
    bid is NONE or RELEASED. ``made`` is true once the site bid in the auction; ``updates``
    counts the valuations.
    """

    client: str
    auction_id: str
    job: Mapping[str, Any]
    closes_at: int
    held_until: int
    state: BidState
    created: float
    updated: float
    offer_id: Optional[str] = None
    start: Optional[int] = None
    end: Optional[int] = None
    size: Optional[int] = None
    value: Optional[Decimal] = None
    cores_value: Optional[Decimal] = None
    displacement: Optional[Decimal] = None
    transfer: Optional[Decimal] = None
    transfer_s: int = 0
    reason_code: str = ""
    reason: str = ""
    made: bool = False
    updates: int = 0


@dataclass(frozen=True)
class Transition:
    """One line of a reservation's history: who moved it from where to where, when and why."""

    reservation_id: str
    at: float
    actor: str
    from_state: Optional[ReservationState]
    to_state: ReservationState
    reason: str


S = ReservationState

#: The actor named in the history for the agent's own moves (expiry, reconciliation, time).
AGENT = "agent"

#: Legal moves. Everything else raises IllegalTransition and changes nothing.
TRANSITIONS: Mapping[ReservationState, FrozenSet[ReservationState]] = {
    S.REQUESTED: frozenset({S.TENTATIVE, S.FAILED}),
    S.TENTATIVE: frozenset({S.CONFIRMED, S.EXPIRED, S.CANCELLED, S.LOST}),
    S.CONFIRMED: frozenset({S.ACTIVE, S.CANCELLED, S.LOST}),
    S.ACTIVE: frozenset({S.COMPLETED, S.LOST}),
    S.COMPLETED: frozenset(),
    S.EXPIRED: frozenset(),
    S.CANCELLED: frozenset(),
    S.FAILED: frozenset(),
    S.LOST: frozenset(),
}

#: States in which a reservation exists in the batch system on the agent's behalf.
LIVE: FrozenSet[ReservationState] = frozenset({S.TENTATIVE, S.CONFIRMED, S.ACTIVE})

#: Why a state cannot move, for the error a client sees.
_STUCK = {
    S.REQUESTED: "it is still being created; retry in a moment",
    S.TENTATIVE: "it is waiting for its owner's confirmation",
    S.CONFIRMED: "it is confirmed already",
    S.ACTIVE: "its window has started",
    S.COMPLETED: "its window is over",
    S.EXPIRED: "it was not confirmed by its deadline and was released; accept a new offer",
    S.CANCELLED: "it was cancelled",
    S.FAILED: "the batch system did not create it; accept a new offer",
    S.LOST: "it vanished from the batch system; accept a new offer",
}


class LifecycleError(SiteagentError):
    """A request the lifecycle cannot carry out; nothing was changed. The message says why
    and what to do instead."""


class UnknownOffer(LifecycleError):
    code = UNKNOWN_OFFER


class UnknownReservation(LifecycleError):
    code = UNKNOWN_RESERVATION


class NotOwner(LifecycleError):
    code = NOT_OWNER


class IdempotencyKeyReused(LifecycleError):
    """The idempotency key was used before by this client for another request."""

    code = IDEMPOTENCY_KEY_REUSED


class IllegalTransition(LifecycleError):
    """The reservation is in a state from which the requested move is not allowed."""

    code = ILLEGAL_TRANSITION


class OfferRefused(LifecycleError):
    """The site withdraws (the paper's "Refuse"): expired, already used, or capacity gone.

    ``code`` is ``offer_`` + ``reason``, which is one of ``expired``, ``used``,
    ``window_passed``, ``capacity_gone``.
    """

    def __init__(self, message: str, *, offer_id: str, reason: str) -> None:
        super().__init__(message, code=f"offer_{reason}", field="offer_id")
        self.offer_id = offer_id
        self.reason = reason


class ReservationFailed(LifecycleError):
    """The batch system refused the reservation or gave less than asked; ``record`` is FAILED
    and keeps the batch system's message."""

    code = RESERVATION_FAILED

    def __init__(self, record: ReservationRecord) -> None:
        super().__init__(f"reservation {record.id} failed: {record.message}")
        self.record = record


def check_transition(record: ReservationRecord, new: ReservationState) -> None:
    """Raise IllegalTransition unless ``record`` may move to ``new``."""
    if new not in TRANSITIONS[record.state]:
        raise IllegalTransition(
            f"reservation {record.id} is {record.state.value} and cannot become {new.value}: "
            f"{_STUCK[record.state]}"
        )


def shortfall(record: ReservationRecord, made: BatchReservation) -> str:
    """Why the batch system's reservation does not hold what was promised; "" if it does.

    It must cover the window (Slurm rounds durations up to whole minutes, so a longer one is
    fine) with at least the size promised, on the nodes the agent chose if it chose any.
    """
    size = made.demand(record.unit)
    problems = []
    if size < record.size:
        problems.append(f"it holds {size} {record.unit.value}s, not {record.size}")
    wanted = sorted(name for name, _ in record.allocation)
    if wanted and made.node_names and sorted(made.node_names) != wanted:
        problems.append(f"it is on {','.join(made.node_names)}, not {','.join(wanted)}")
    if made.start > record.start or made.end < record.end:
        problems.append(
            f"it covers {when(made.start)} to {when(made.end)}, not "
            f"{when(record.start)} to {when(record.end)}"
        )
    return "; ".join(problems)


def when(epoch: Optional[float]) -> str:
    """An epoch as the log and the errors show it (UTC); "-" for none."""
    if epoch is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(epoch))


def describe(record: ReservationRecord) -> str:
    """How a reservation appears in the log: name, owner, size and window."""
    return (
        f"reservation {record.name} ({record.client}, {record.size} {record.unit.value}s, "
        f"{when(record.start)} to {when(record.end)})"
    )
