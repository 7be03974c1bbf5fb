"""The reverse auction, buyer's side (Zasada & Coveney, the marketplace paper, section 5.1.1).

The request for quotes goes to every site; for N rounds it is sent again with the lowest unit
price offered so far (``best_price``), so that sites pricing by load undercut it or drop out
(docs/protocol.md, "A reverse auction"). Every offer received stays a bid until it expires: a site
that drops out in round 3 still stands by its round-2 offer. Bids are then ranked by cost,
then end ("deadline"), then arrival, or by the buyer's trade-off between cost and time.

A request may have several parts (co-allocation: 3 x 64 cores starting together). A *choice*
is one way to place every part: an alignment window of ``tolerance`` seconds, and for each
part its bids starting in that window, best first. The commit (:mod:`.commit`) takes the
choices in order and, within one, moves to a part's next bid when a site refuses.

Constraints the buyer checks itself (the sites never see them, so that when nothing meets
them the closest offers can still be shown): a budget for the whole request, and a deadline
every part must end by. Nothing here talks to a site: the rounds are driven by
:func:`run_rounds` through a function that asks them.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar

from siteagent.core import tradeoff
from siteagent.protocol.models import OfferView, QuoteRequest

#: How many rounds an auction runs by default: the paper finds the price it pays levels off
#: at five (its Table 4).
DEFAULT_ROUNDS = 5

#: How many of the closest offers a failed auction shows.
CLOSEST_SHOWN = 5


class Mode(str, enum.Enum):
    """What "best" means: the lowest cost, the earliest end, or a trade-off ``alpha``."""

    CHEAPEST = "cheapest"
    EARLIEST = "earliest"
    ALPHA = "alpha"


@dataclass(frozen=True)
class Preference:
    """How bids are ranked. ``alpha`` weighs cost against time in mode ALPHA, as the agent's
    own ``alpha`` does: 1 is cheapest, 0 earliest."""

    mode: Mode = Mode.CHEAPEST
    alpha: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")


@dataclass(frozen=True)
class Constraints:
    """What every placement must meet: the whole request costs at most ``budget``; every part
    ends by ``deadline`` (epoch seconds); the parts' starts differ by at most ``tolerance``
    seconds."""

    budget: Optional[Decimal] = None
    deadline: Optional[int] = None
    tolerance: int = 0


@dataclass(frozen=True)
class Bid:
    """An offer a site made for one part of the request, in one round; ``arrival`` counts the
    answers in the order they came (the ranking's last tie-break)."""

    site: str
    part: int
    round: int
    arrival: int
    offer_id: str
    start: int
    end: int
    size: int
    unit_price: Decimal
    fee: Decimal
    total: Decimal
    expires: int

    @classmethod
    def of(cls, site: str, part: int, round: int, arrival: int, offer: OfferView) -> Bid:
        return cls(
            site=site,
            part=part,
            round=round,
            arrival=arrival,
            offer_id=offer.offer_id,
            start=offer.start,
            end=offer.end,
            size=offer.cores,
            unit_price=Decimal(offer.unit_price),
            fee=Decimal(offer.fee),
            total=Decimal(offer.total),
            expires=offer.expires,
        )


@dataclass(frozen=True)
class Choice:
    """One way to place every part: for each part, its candidate bids best first, all of
    them starting within the tolerance of each other."""

    candidates: Tuple[Tuple[Bid, ...], ...]

    @property
    def best(self) -> Tuple[Bid, ...]:
        """The first candidate of each part: what this choice is ranked by."""
        return tuple(bids[0] for bids in self.candidates)


@dataclass(frozen=True)
class Shortfall:
    """A bid that misses the constraints, and by how much (the closest offers shown when
    nothing meets them). ``distance`` sums the misses relative to what was asked."""

    bid: Bid
    problems: Tuple[str, ...]
    distance: float


@dataclass(frozen=True)
class NoBid:
    """A site's answer that is not a bid: a refusal (it stays in the auction) or a failure
    (``dropped``: it is asked nothing more). ``answered``: the site said why (a refusal, or a
    4xx that drops it: a key it does not know), rather than failing to answer."""

    site: str
    part: int
    round: int
    reason: str
    dropped: bool = False
    answered: bool = True


@dataclass(frozen=True)
class Score:
    """What ranking looks at: cost, then end, then arrival."""

    cost: Decimal
    end: int
    arrival: int


Item = TypeVar("Item")


def ranked(
    items: Iterable[Item], score: Callable[[Item], Score], preference: Preference
) -> List[Item]:
    """``items`` best first under ``preference``; ties fall to cost, then end, then arrival."""
    scored = [(score(item), item) for item in items]
    costs = [float(s.cost) for s, _ in scored]
    ends = [float(s.end) for s, _ in scored]

    def key(entry: Tuple[Score, Item]) -> Tuple[float, Decimal, int, int]:
        s = entry[0]
        if preference.mode is Mode.CHEAPEST:
            first = 0.0
        elif preference.mode is Mode.EARLIEST:
            first = float(s.end)
        else:
            first = preference.alpha * tradeoff.normalised(float(s.cost), costs)
            first += (1 - preference.alpha) * tradeoff.normalised(float(s.end), ends)
        return (first, s.cost, s.end, s.arrival)

    return [item for _, item in sorted(scored, key=key)]


def bid_score(bid: Bid) -> Score:
    return Score(bid.total, bid.end, bid.arrival)


def choice_score(choice: Choice) -> Score:
    """A choice costs the sum of its best bids and is done when the last of them ends."""
    best = choice.best
    return Score(
        sum((bid.total for bid in best), Decimal(0)),
        max(bid.end for bid in best),
        max(bid.arrival for bid in best),
    )


@dataclass
class Auction:
    """The state of one reverse auction: the request's parts, the bids received, the sites
    still in it. ``parts`` are the requests for quotes as the buyer means them (round 1)."""

    parts: Sequence[QuoteRequest]
    sites: Sequence[str]
    constraints: Constraints = field(default_factory=Constraints)
    preference: Preference = field(default_factory=Preference)
    bids: List[Bid] = field(default_factory=list)
    no_bids: List[NoBid] = field(default_factory=list)
    dropped: Dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("an auction needs at least one part")

    # ---- the rounds

    @property
    def bidders(self) -> List[str]:
        """The sites still asked: all but those dropped."""
        return [site for site in self.sites if site not in self.dropped]

    def rfq(self, part: int, round: int) -> QuoteRequest:
        """What round ``round`` asks for ``part``: the request, and from round 2 on the lowest
        unit price offered so far, for the sites to undercut."""
        request = self.parts[part]
        if round == 1:
            return request
        update: Dict[str, object] = {"round": round}
        best = self.best_price(part)
        if best is not None:
            update["best_price"] = best
        start = self.aligned_start()
        if start is not None and start > (request.earliest_start or 0):
            update["earliest_start"] = start
        return request.model_copy(update=update)

    def aligned_start(self) -> Optional[int]:
        """Where a co-allocation should ask from next: when no window of ``tolerance`` holds
        offers from as many sites as there are parts, the earliest start from which that many
        sites offered; None when a window does, or for one part.

        Why: each site offers a limited number of starts from its own earliest one on, so
        sites whose earliest windows lie hours apart may offer no start in common. Asked
        from the latest of the earliest starts the parts need, every site offers around it.
        """
        parts = len(self.parts)
        if parts == 1:
            return None
        bids = [bid for bid in self.bids if bid.site not in self.dropped and self.in_time(bid)]
        for window in self._windows(bids):
            if len({bid.site for part in window for bid in part}) >= parts:
                return None
        earliest: Dict[str, int] = {}
        for bid in bids:
            earliest[bid.site] = min(bid.start, earliest.get(bid.site, bid.start))
        starts = sorted(earliest.values())
        return starts[parts - 1] if len(starts) >= parts else None

    def best_price(self, part: int) -> Optional[Decimal]:
        """The lowest unit price of the part's bids from sites still in, among bids that meet
        the deadline if any does (a price nobody can use must not drive the others out)."""
        bids = [bid for bid in self.bids if bid.part == part and bid.site not in self.dropped]
        usable = [bid for bid in bids if self.in_time(bid)] or bids
        return min((bid.unit_price for bid in usable), default=None)

    def record(self, site: str, part: int, round: int, offers: Sequence[OfferView]) -> None:
        """A site's offers for a part in a round."""
        for offer in offers:
            self.bids.append(Bid.of(site, part, round, len(self.bids), offer))

    def refused(self, site: str, part: int, round: int, reason: str) -> None:
        """A site offers nothing this round (it may still stand by earlier offers)."""
        self.no_bids.append(NoBid(site, part, round, reason))

    def drop(self, site: str, part: int, round: int, reason: str, answered: bool = False) -> None:
        """A site failed (or refused the buyer itself, ``answered``): it leaves the auction,
        its bids with it."""
        self.no_bids.append(NoBid(site, part, round, reason, dropped=True, answered=answered))
        self.dropped.setdefault(site, reason)

    # ---- the outcome

    def live_bids(self, now: int) -> List[Bid]:
        """Bids that can still be accepted: not expired, from sites still in."""
        return [b for b in self.bids if b.expires > now and b.site not in self.dropped]

    def choices(self, now: int) -> List[Choice]:
        """Every way to place all parts within the constraints, best first."""
        bids = [bid for bid in self.live_bids(now) if self.in_time(bid)]
        found: Dict[Tuple[Tuple[str, ...], ...], Choice] = {}
        for window in self._windows(bids):
            candidates = self._affordable(window)
            if candidates is None:
                continue
            choice = Choice(tuple(tuple(ranked(c, bid_score, self.preference)) for c in candidates))
            key = tuple(tuple(bid.offer_id for bid in part) for part in choice.candidates)
            found.setdefault(key, choice)
        return ranked(found.values(), choice_score, self.preference)

    def closest(self, now: int, limit: int = CLOSEST_SHOWN) -> List[Shortfall]:
        """The bids nearest to meeting the constraints, nearest first (what a failed auction
        shows): each with what it misses."""
        bids = self.live_bids(now)
        cheapest = self._cheapest_per_part(bids)
        order = {id(bid): i for i, bid in enumerate(ranked(bids, bid_score, self.preference))}
        shortfalls = [self._shortfall(bid, cheapest) for bid in bids]
        shortfalls.sort(key=lambda s: (s.distance, order[id(s.bid)]))
        return shortfalls[:limit]

    # ---- helpers

    def in_time(self, bid: Bid) -> bool:
        """Whether ``bid`` ends by the deadline (if any): only such bids can win."""
        deadline = self.constraints.deadline
        return deadline is None or bid.end <= deadline

    def _windows(self, bids: Sequence[Bid]) -> Iterable[List[List[Bid]]]:
        """Each part's bids in each alignment window [s, s + tolerance], s a bid's start; one
        window with every bid when there is one part."""
        by_part: List[List[Bid]] = [[] for _ in self.parts]
        for bid in bids:
            by_part[bid.part].append(bid)
        if len(self.parts) == 1:
            yield by_part
            return
        tolerance = self.constraints.tolerance
        for anchor in sorted({bid.start for bid in bids}):
            yield [[b for b in part if anchor <= b.start <= anchor + tolerance] for part in by_part]

    def _affordable(self, window: List[List[Bid]]) -> Optional[List[List[Bid]]]:
        """The window's bids that leave room in the budget for the other parts at their
        cheapest; None if a part has none."""
        if any(not part for part in window):
            return None
        budget = self.constraints.budget
        if budget is None:
            return window
        cheapest = [min(bid.total for bid in part) for part in window]
        rest = sum(cheapest, Decimal(0))
        kept = [
            [bid for bid in part if rest - cheapest[i] + bid.total <= budget]
            for i, part in enumerate(window)
        ]
        return None if any(not part for part in kept) else kept

    def _cheapest_per_part(self, bids: Sequence[Bid]) -> List[Optional[Decimal]]:
        cheapest: List[Optional[Decimal]] = [None for _ in self.parts]
        for bid in bids:
            current = cheapest[bid.part]
            cheapest[bid.part] = bid.total if current is None else min(current, bid.total)
        return cheapest

    def _shortfall(self, bid: Bid, cheapest: Sequence[Optional[Decimal]]) -> Shortfall:
        problems: List[str] = []
        distance = 0.0
        deadline, budget = self.constraints.deadline, self.constraints.budget
        if deadline is not None and bid.end > deadline:
            late = bid.end - deadline
            problems.append(f"ends {late} s after the deadline")
            distance += late / max(bid.end - bid.start, 1)
        if budget is not None:
            others = [c for i, c in enumerate(cheapest) if i != bid.part and c is not None]
            over = bid.total + sum(others, Decimal(0)) - budget
            if over > 0:
                with_others = " with the other parts at their cheapest" if others else ""
                problems.append(f"{over} over the budget{with_others}")
                distance += float(over / budget) if budget > 0 else float(over)
        if len(self.parts) > 1 and not problems:
            problems.append(
                f"no start within {self.constraints.tolerance} s of it has offers for every part"
            )
            distance += 1.0
        return Shortfall(bid, tuple(problems), distance)


#: Asks every site still in for every part in one round (in parallel, say), and records each
#: answer in the auction (``record``, ``refused`` or ``drop``).
AskRound = Callable[[Auction, int], None]

#: How often a paced auction looks whether it was stopped while it waits for its next round.
STOP_CHECK_S = 0.25


def run_rounds(
    auction: Auction,
    rounds: int,
    ask_round: AskRound,
    stop: Callable[[], bool],
    interval_s: float = 0.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Run up to ``rounds`` rounds; stops early when ``stop()`` says so (the user interrupted)
    or no site is left. Returns the number of rounds run.

    ``interval_s`` paces the rounds as the paper's round timer did (its RequestManager ticks
    at a fixed interval): each round lasts at least that long, the next round (or, after the
    last, the close of bidding) starting ``interval_s`` after it began, or once it has all its
    answers if that is later. 0 runs each round as soon as the previous one is answered."""
    if rounds < 1:
        raise ValueError(f"an auction needs at least one round, got {rounds}")
    if interval_s < 0:
        raise ValueError(f"the round interval must be >= 0, got {interval_s}")
    done = 0
    tick = clock()
    for round in range(1, rounds + 1):
        if stop() or not auction.bidders:
            break
        ask_round(auction, round)
        done = round
        tick = max(tick + interval_s, clock()) if interval_s else tick
        if interval_s and not _wait_until(tick, clock, sleep, stop):
            break
    return done


def _wait_until(
    instant: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    stop: Callable[[], bool],
) -> bool:
    """Sleep until ``instant`` on ``clock``; False if stopped meanwhile."""
    while not stop():
        left = instant - clock()
        if left <= 0:
            return True
        sleep(min(left, STOP_CHECK_S))
    return False
