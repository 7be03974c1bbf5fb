"""The English auction, the auctioneer's side (Baranov et al., docs/design.md §4.6): one job
up for auction at every site, the sites bidding for it with their free capacity, the highest
bid winning. Nothing here talks to a site: :mod:`.auctioneer` runs the rounds over the wire.

**Length.** An auction lasts ``T_a = k · mean job run time``: long enough for sites whose load
changes meanwhile to take part, short enough not to keep the job (and the capacity the bids
hold) waiting. The paper finds ``k`` = 0.3-0.4 best; 0.35 is the default.

**Rounds; bids rise.** The first round announces the job to every site. Each later round asks
every site again, naming the standing bid (``to_beat``): a site whose bid does not beat it
holds nothing, one whose load freed capacity may raise. The leading site is not told to beat
its own bid. The standing bid is the highest open bid; its history only rises (a raise is
recorded when a bid beats it), although the leader may be revised down when the batch
system's own work took its capacity, and others may then take the lead again.

**Close.** When the auction ends, the open bids are ranked by value (the earliest to arrive
first on a tie) and the best is accepted and confirmed through the reverse auction's
two-phase commit (:mod:`.commit`), the next one if a site refuses; every other site's bid is
then released. Should the standing bid fall through at the close with the others outbid
(holding nothing), those are asked once more with nothing to beat.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Dict, List, Optional, Sequence, Set, Tuple

from siteagent.client.reverse_auction import Bid
from siteagent.protocol.models import AuctionedJob, BidAnswer, BidRequest

#: The auction's length as a share of the jobs' mean run time: the paper's best is 0.3-0.4.
DEFAULT_K = 0.35

#: Rounds asked within one auction at most (the first announces the job): sites value their
#: bids again when their load changes, which a site sees once per poll.
DEFAULT_ROUNDS = 5

#: The shortest pause between two rounds (seconds): a site's load changes no faster than it
#: polls its batch system.
MIN_ROUND_INTERVAL_S = 1.0


def auction_length(k: float, mean_run_time_s: float) -> float:
    """``T_a = k · mean run time``, seconds."""
    if k < 0 or mean_run_time_s < 0:
        raise ValueError(f"k and the mean run time must be >= 0, got {k} and {mean_run_time_s}")
    return k * mean_run_time_s


def round_starts(length_s: float, rounds: int = DEFAULT_ROUNDS) -> List[float]:
    """When each round starts, in seconds from the auction's opening: ``rounds`` spread over
    its length, at least :data:`MIN_ROUND_INTERVAL_S` apart; one round for an auction of no
    length."""
    if rounds < 1:
        raise ValueError(f"an auction needs at least one round, got {rounds}")
    count = max(1, min(rounds, math.floor(length_s / MIN_ROUND_INTERVAL_S)))
    return [length_s * i / count for i in range(count)]


@dataclass(frozen=True)
class Raise:
    """The standing bid rose: ``site`` bid ``value`` in round ``round``."""

    site: str
    value: Decimal
    round: int


@dataclass
class EnglishAuction:
    """One job's auction: ``auction_id`` (the sites know it by it), the job, the sites asked,
    when it closes (epoch seconds), and ``start_price``, the value a first bid must beat
    (none: any bid). Each site's latest answer is kept, the order its bid arrived in (the
    ranking's tie-break), the raises of the standing bid, the sites that ever bid, and the
    rounds asked so far."""

    auction_id: str
    job: AuctionedJob
    sites: Sequence[str]
    closes_at: int
    start_price: Optional[Decimal] = None
    answers: Dict[str, BidAnswer] = field(default_factory=dict)
    arrivals: Dict[str, int] = field(default_factory=dict)
    raises: List[Raise] = field(default_factory=list)
    bidders: Set[str] = field(default_factory=set)
    failed: Dict[str, str] = field(default_factory=dict)
    dropped: Set[str] = field(default_factory=set)
    #: Sites that refused the request itself (a 4xx: its job past what they hold for one
    #: buyer, a key they do not know): they answered, with no bid.
    refused: Set[str] = field(default_factory=set)
    rounds: int = 0
    received: int = 0

    def call(self, site: str, beat: bool = True) -> BidRequest:
        """What ``site`` is asked this round: the job, and the bid it must beat (the standing
        bid unless it holds it, else the start price; nothing unless ``beat``)."""
        standing = self.standing
        to_beat = self.start_price if beat else None
        if beat and standing is not None and standing[0] != site:
            to_beat = standing[1]
        return BidRequest(
            auction_id=self.auction_id, job=self.job, closes_at=self.closes_at, to_beat=to_beat
        )

    def record(self, site: str, answer: BidAnswer, round: int) -> None:
        """``site``'s answer in ``round``; a new bid that beats the standing one is a raise."""
        before = self.standing
        previous = self.answers.get(site)
        self.answers[site] = answer
        self.failed.pop(site, None)
        value = self.value(site)
        if value is None:
            return
        self.bidders.add(site)
        if previous is None or _offer_id(previous) != _offer_id(answer):
            self.arrivals[site] = self.received  # a new bid arrived: ties go to older bids
            self.received += 1
        if before is None or value > before[1]:
            self.raises.append(Raise(site, value, round))

    def fail(self, site: str, reason: str, dropped: bool, refused: bool = False) -> None:
        """``site`` did not answer this round with a bid (or ``refused`` the request): its
        last answer stands; a ``dropped`` site is not asked again."""
        self.failed[site] = reason
        if dropped:
            self.dropped.add(site)
        if refused:
            self.refused.add(site)

    def outbid(self) -> List[str]:
        """The sites holding nothing only because they did not beat the standing bid."""
        return [
            site
            for site, answer in self.answers.items()
            if answer.refusal is not None and answer.refusal.code == "outbid"
        ]

    def behind(self) -> List[str]:
        """The sites whose open bid the standing bid beats: asked again, each raises or holds
        nothing."""
        return self.ranked_sites()[1:]

    @property
    def asked(self) -> List[str]:
        """The sites the next round asks: all but those dropped."""
        return [site for site in self.sites if site not in self.dropped]

    def value(self, site: str) -> Optional[Decimal]:
        """The value of ``site``'s open bid, None if it has none."""
        answer = self.answers.get(site)
        if answer is None or answer.state != "open" or answer.bid is None:
            return None
        return Decimal(answer.bid.value)

    @property
    def standing(self) -> Optional[Tuple[str, Decimal]]:
        """The leading site and its bid: the highest open bid, the earliest on a tie."""
        ranked = self.ranked_sites()
        if not ranked:
            return None
        value = self.value(ranked[0])
        assert value is not None
        return ranked[0], value

    def ranked_sites(self) -> List[str]:
        """The sites with an open bid, best first."""
        bidding = [site for site in self.answers if self.value(site) is not None]
        return sorted(bidding, key=lambda site: (-(self.value(site) or 0), self.arrivals[site]))

    def candidates(self, now: int) -> List[Bid]:
        """The open bids whose offers can still be accepted, best first, as the commit takes
        them (one part)."""
        bids = []
        for site in self.ranked_sites():
            answer = self.answers[site]
            assert answer.bid is not None
            offer = answer.bid.offer
            if offer.expires > now:
                bids.append(Bid.of(site, 0, self.rounds, self.arrivals[site], offer))
        return bids

    def holders(self, winner: Optional[str]) -> List[str]:
        """The sites that took part (they answered, or may have): each is released at the
        end, but the winner."""
        asked = set(self.answers) | set(self.failed)
        return [site for site in self.sites if site in asked and site != winner]


def _offer_id(answer: BidAnswer) -> Optional[str]:
    return None if answer.bid is None else answer.bid.offer.offer_id
