"""English auctions, the site's side: bidding for a job with free capacity, holding that
capacity until the auction ends, releasing it when the bid is lost (docs/design.md §4.6).

The one implementation of the use case, called by ``POST /v1/bids`` and ``DELETE
/v1/bids/{auction_id}``. An auctioneer's first call for bids announces the job; each later
call (same job, same closing time) asks the site to value its bid again, because the site's
load changed since (a poll), or other auctions took or gave back capacity. The value is
:mod:`siteagent.pricing.bids`; here is what makes it a bid the site can keep:

- **Bids rise.** A later call may name the bid to beat (``to_beat``, the auction's standing
  bid). A bid never falls while the capacity it holds is still free: the site moves to
  another window only when it is worth more. Only when the batch system's own work took the
  held capacity is the bid revised to what the site can offer now, or withdrawn.
- **Held capacity.** An open bid holds its window until its auction ends (``held_until``: the
  closing time and the time the winner has to accept, ``auctions.accept_window_s``, after
  which the window starts at the soonest); every other bid, and every accept of another offer
  (:meth:`ReservationManager.accept`'s re-check), is valued around it. A bid that cannot beat
  the standing bid, or that has no capacity, holds nothing (``NONE``) and may bid again while
  the auction is open. A bid is released at once when its auctioneer says it lost
  (DELETE), and by the agent's cycle when its auction ended without an accept.
- **What is bid with** (``auctions.mode``): ``future``, the best window within one walltime
  of the auction's close (:func:`~siteagent.pricing.bids.valuation`); ``now``, only cores free
  now or held by running jobs of lower absolute priority, which the job would suspend
  (:func:`~siteagent.pricing.bids.valuation_now`, Baranov et al.'s sites). A ``now`` bid's
  capacity is still free while it stays free or held by such jobs.
- **Winning is accepting.** A bid carries an offer, bound to the auctioneer's key like any
  quote's: the winner is accepted with ``POST /v1/reservations {offer_id}`` and confirmed as
  usual, and the store marks the bid WON in the same transaction as the accept's intent.
- **Crash-safe.** Each valuation is written (bid, its new offer, its old offer lapsing) in one
  transaction before it is answered, inside the store's exclusive lock that accepts take too:
  two bids (or a bid and an accept) never both see the same capacity free, and a restarted
  agent still knows what it holds; its first cycle releases what ended while it was down.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Dict, List, Optional, Tuple, Union

from siteagent.config.schema import AuctionsConfig, BidMode, SiteConfig
from siteagent.core.errors import InvalidRequest, SiteagentError
from siteagent.core.profile import Profile
from siteagent.core.values import Offer, Request
from siteagent.market.lifecycle import BIDDING, LIVE, BidRecord, BidState, ReservationState
from siteagent.market.quoting import Refusal, offered, requested
from siteagent.market.reservations import ReservationManager
from siteagent.market.store import Store
from siteagent.market.view import MarketView
from siteagent.pricing import Context, Refused
from siteagent.pricing.bids import (
    AuctionedJob,
    Hold,
    NoBid,
    Valuation,
    capacity_now,
    holding,
    valuation,
    valuation_now,
)
from siteagent.protocol.errors import AUCTION_CONFLICT, TOO_MANY_BIDS, UNKNOWN_BID
from siteagent.protocol.models import BidRequest, QuoteRequest, offer_json

#: How far in the past an auction's closing time may be when it is announced (seconds): the
#: auctioneer's and the site's clocks differ a little, and an auction of length 0 closes as it
#: opens.
CLOCK_SKEW_S = 30

#: The reservations that hold capacity whether or not the latest snapshot shows them yet.
_HOLDING = (ReservationState.REQUESTED, *LIVE)


class UnknownBid(SiteagentError):
    """No bid of this client in that auction at this site."""

    code = UNKNOWN_BID


class AuctionConflict(SiteagentError):
    """The auction id was announced with another job or closing time."""

    code = AUCTION_CONFLICT


class TooManyBids(SiteagentError):
    """The client takes the site into as many auctions at once as it may."""

    code = TOO_MANY_BIDS


@dataclass(frozen=True)
class Bid:
    """The site's bid as its auctioneer sees it: the record, and its offer while it has one."""

    record: BidRecord
    offer: Optional[Offer]
    now: int

    def to_json(self) -> Dict[str, Any]:
        """The answer (``BidAnswer`` in the OpenAPI)."""
        record = self.record
        answer: Dict[str, Any] = {
            "auction_id": record.auction_id,
            "state": record.state.value.lower(),
            "now": self.now,
            "closes_at": record.closes_at,
            "held_until": record.held_until,
            "updates": record.updates,
        }
        if record.state in (BidState.OPEN, BidState.WON) and self.offer is not None:
            answer["bid"] = {
                "value": str(record.value),
                "cores_value": str(record.cores_value),
                "displacement": str(record.displacement),
                "transfer": str(record.transfer),
                "transfer_s": record.transfer_s,
                "offer": offer_json(self.offer),
            }
        elif record.reason_code:
            answer["refusal"] = {
                "code": record.reason_code,
                "reason": record.reason,
                "field": "job.cores" if record.reason_code == "unsatisfiable" else None,
            }
        return answer


class Bidding:
    """The site's bids in English auctions, kept in the reservation manager's store and
    valued on the agent's latest market view."""

    def __init__(
        self, manager: ReservationManager, site: SiteConfig, settings: AuctionsConfig
    ) -> None:
        self.manager = manager
        self.site = site
        self.settings = settings

    @property
    def store(self) -> Store:
        return self.manager.store

    def bid(self, call: BidRequest, client: str, view: MarketView) -> Bid:
        """Value this site's bid for ``call``'s job now, hold its capacity, and answer it.

        Raises InvalidRequest (a closing time in the past or too far ahead), AuctionConflict
        (the auction was announced with another job) and TooManyBids (the client takes the
        site into too many auctions at once). Once the auction has closed, or the bid was won
        or released, the bid is answered as it stands.
        """
        job = call.job.model_dump(mode="json")
        with self.store.exclusive():
            now = int(self.manager.clock())
            known = self.store.bid(client, call.auction_id)
            if known is None:
                self._admit(call, client, now)
                self._within_allowance(call, client, view, now)
            elif known.job != job or known.closes_at != call.closes_at:
                raise AuctionConflict(
                    f"auction {call.auction_id} was announced with another job or closing "
                    "time; a new auction needs a new id",
                    field="auction_id",
                )
            elif known.state not in BIDDING or now >= known.closes_at:
                return self._answer(known, now)
            record, offer, withdrawn = self._valued(call, client, view, known, now)
            self.store.save_bid(record, offer, withdrawn)
        return Bid(record, offer or self._offer(record), now)

    def release(self, client: str, auction_id: str) -> Bid:
        """The auctioneer says this bid lost: it holds nothing from now on (a bid that won or
        was released already is answered as it is)."""
        with self.store.exclusive():
            now = int(self.manager.clock())
            record = self.store.release_bid(
                client, auction_id, "lost", "released by its auctioneer: another bid won", now
            )
        if record is None:
            raise UnknownBid(f"no bid of {client} in auction {auction_id!r} at this site")
        return self._answer(record, now)

    # ---- valuing

    def _admit(self, call: BidRequest, client: str, now: int) -> None:
        """A new auction: its closing time within bounds, the client within its share."""
        if call.closes_at < now - CLOCK_SKEW_S:
            raise InvalidRequest("the auction closed already", field="closes_at")
        if call.closes_at > now + self.settings.max_length_s:
            raise InvalidRequest(
                f"the auction closes more than {self.settings.max_length_s} s from now, longer "
                "than this site holds capacity for one",
                field="closes_at",
            )
        count, first = self.store.bidding(client)
        if count >= self.settings.max_open_per_client:
            wait = max(1, (first or now) - now)
            raise TooManyBids(
                f"{client} takes this site into {count} auctions at once, the most it may; "
                f"retry in {wait} s, when the first of them ends",
                retry_after_s=wait,
            )

    def _within_allowance(self, call: BidRequest, client: str, view: MarketView, now: int) -> None:
        """A new bid's job, with what the client's open bids hold already, within what one
        client's bids may hold (``auctions.max_held_machine_hours`` of the whole machine):
        InvalidRequest if the job alone is more (it never could be), TooManyBids until the
        first of the others is released if together they are."""
        rfq = QuoteRequest.model_validate({"walltime": call.job.walltime, "cores": call.job.cores})
        request = requested(rfq, view.snapshot, self.site, view.now)
        if isinstance(request, Refusal):
            return  # wider than the machine: the valuation says so
        hours = self.settings.max_held_machine_hours
        allowance = view.snapshot.capacity * hours * 3600
        needs = request.cores * request.duration
        if needs > allowance:
            raise InvalidRequest(
                f"the job's {request.cores} {view.snapshot.unit.value}s for {request.duration} s "
                f"are {needs / 3600 / view.snapshot.capacity:.1f} hours of this whole machine; "
                f"one buyer's bids may hold {hours:g} (auctions.max_held_machine_hours)",
                field="job.walltime",
            )
        held, first = self.store.held_by(client, call.auction_id)
        if held + needs > allowance:
            wait = max(1, (first or now) - now)
            raise TooManyBids(
                f"{client}'s open bids hold {held / 3600 / view.snapshot.capacity:.1f} hours of "
                f"this whole machine already, and this job would make it more than the "
                f"{hours:g} one buyer's bids may hold; retry in {wait} s, when the first of "
                "them is released",
                retry_after_s=wait,
            )

    def _valued(
        self,
        call: BidRequest,
        client: str,
        view: MarketView,
        known: Optional[BidRecord],
        now: int,
    ) -> Tuple[BidRecord, Optional[Offer], Optional[str]]:
        """The bid as valued now, the offer it makes if it is a new one, and the offer it
        withdraws."""
        base = known or BidRecord(
            client=client,
            auction_id=call.auction_id,
            job=call.job.model_dump(mode="json"),
            closes_at=call.closes_at,
            held_until=max(call.closes_at, now) + self.settings.accept_window_s,
            state=BidState.NONE,
            created=now,
            updated=now,
        )
        base = dataclasses.replace(base, updates=base.updates + 1, updated=now)
        own = known.offer_id if known is not None and known.state is BidState.OPEN else None
        holds = self._holds(view, own, now)
        now_mode = self.settings.mode is BidMode.NOW
        context = view.context if now_mode else holding(view.context, holds)
        best = self._best(call, view, context, holds, base.held_until)
        if known is not None and own is not None:
            free = capacity_now(context, call.job.priority, holds) if now_mode else context.hard
            if _stands(known, best, free, now):
                assert known.value is not None
                if call.to_beat is None or known.value > call.to_beat:
                    return base, None, None  # a bid never falls while its capacity is free
                return _none(base, _outbid(known.value, call.to_beat)), None, own
        if isinstance(best, Refusal):
            return _none(base, best), None, own
        request, valued = best
        if call.to_beat is not None and valued.value <= call.to_beat:
            return _none(base, _outbid(valued.value, call.to_beat)), None, own
        offer = self._offer_for(request, valued, base, view, valued.basis or context)
        if isinstance(offer, Refusal):
            return _none(base, offer), None, own
        return _open(base, offer, valued, self.transfer_s(call)), offer, own

    def _offer_for(
        self,
        request: Request,
        valued: Valuation,
        base: BidRecord,
        view: MarketView,
        context: Context,
    ) -> Union[Offer, Refusal]:
        """The offer that wins the bid: the window valued, priced as a quote's would be (the
        deal's price), acceptable by the bid's client until the bid's time is over."""
        try:
            price = view.pricing.price(context, valued.window, request)
        except Refused as exc:
            return Refusal("no_offer", exc.reason)
        now = int(self.manager.clock())
        valid_s = base.held_until - now  # its window starts no sooner: it lapses then
        (offer,) = offered([price], request, now, valid_s, self.site.name, base.client)
        return offer

    def _best(
        self,
        call: BidRequest,
        view: MarketView,
        context: Context,
        holds: List[Hold],
        held_until: int,
    ) -> Union[Tuple[Request, Valuation], Refusal]:
        """The best bid the site can make now (the job in its units, and the valuation), or
        why it makes none. Its window starts when the winner's time to accept is over, at the
        soonest: its offer can be accepted until then. ``context`` has the other bids' holds
        taken already for a ``future`` bid; a ``now`` bid takes ``holds`` itself."""
        rfq = QuoteRequest.model_validate({"walltime": call.job.walltime, "cores": call.job.cores})
        requested_now = requested(rfq, view.snapshot, self.site, view.now)
        if isinstance(requested_now, Refusal):
            return Refusal(requested_now.code, requested_now.reason, "job.cores")
        request = dataclasses.replace(requested_now, earliest=held_until)
        job = AuctionedJob(
            request.cores, request.duration, call.job.priority, self.transfer_s(call)
        )
        if self.settings.mode is BidMode.NOW:
            valued = valuation_now(context, job, held_until, holds)
        else:
            valued = valuation(context, job, held_until)
        if isinstance(valued, NoBid):
            return Refusal(valued.code, valued.reason, valued.field)
        return request, valued

    def _holds(self, view: MarketView, own: Optional[str], now: int) -> List[Hold]:
        """What other bids hold, and the reservations made since the view's snapshot."""
        holds = [Hold(*held) for held in self.store.bid_holds(except_offer=own)]
        seen = {reservation.name for reservation in view.snapshot.reservations}
        for record in self.store.reservations(_HOLDING):
            if record.name not in seen and record.end > now:
                holds.append(Hold(record.start, record.end, record.size))
        return holds

    def transfer_s(self, call: BidRequest) -> int:
        """Seconds the job's input takes to reach this site (none if it is here)."""
        job = call.job
        if job.input_bytes == 0 or job.input_site == self.site.name:
            return 0
        return math.ceil(job.input_bytes / self.settings.transfer_rate)

    # ---- answers

    def _answer(self, record: BidRecord, now: int) -> Bid:
        return Bid(record, self._offer(record), now)

    def _offer(self, record: BidRecord) -> Optional[Offer]:
        return None if record.offer_id is None else self.store.get_offer(record.offer_id)


def _stands(
    known: BidRecord, best: Union[Tuple[Request, Valuation], Refusal], free: Profile, now: int
) -> bool:
    """Whether the open bid ``known`` stands: the capacity it holds is still ``free``, and the
    best bid the site can make now is not worth more (bids rise, never fall by choice)."""
    if isinstance(best, tuple) and known.value is not None and best[1].value > known.value:
        return False
    return _still_free(free, known, now)


def _open(base: BidRecord, offer: Offer, valued: Valuation, transfer_s: int) -> BidRecord:
    """The bid open with ``offer``, holding its window, at ``valued``."""
    return dataclasses.replace(
        base,
        state=BidState.OPEN,
        offer_id=offer.id,
        start=offer.start,
        end=offer.end,
        size=offer.size,
        value=valued.value,
        cores_value=valued.cores_value,
        displacement=valued.displacement,
        transfer=valued.transfer,
        transfer_s=transfer_s,
        reason_code="",
        reason="",
        made=True,
    )


def _none(base: BidRecord, why: Refusal) -> BidRecord:
    """The bid taking part without a bid (holding nothing), and why."""
    return dataclasses.replace(
        base,
        state=BidState.NONE,
        offer_id=None,
        start=None,
        end=None,
        size=None,
        reason_code=why.code,
        reason=why.reason,
    )


def _outbid(value: Decimal, to_beat: Decimal) -> Refusal:
    return Refusal(
        "outbid",
        f"this site's bid ({value}) does not beat the standing bid ({to_beat}); it holds "
        "nothing, and bids again if it can beat it while the auction is open",
    )


def _still_free(free: Profile, known: BidRecord, now: int) -> bool:
    """Whether the capacity ``known`` holds is still ``free`` (the batch system's own work did
    not take it since)."""
    if known.start is None or known.end is None or known.size is None:
        return False
    start = max(known.start, now)
    return known.end > start and free.fits(known.size, start, known.end - start)
