"""English auctions over the wire: a stream of jobs, each auctioned at every site from the
moment it arrives, the winner reserved through the reverse auction's two-phase commit, the
other bids released (docs/design.md §4.6; the auction itself is :mod:`.english`).

**Priorities are absolute.** Every job's auction opens when the job arrives, on a thread of its
own, whatever else is open: no job waits behind another's auction, and among jobs arriving
together the highest priority opens first. What a site holds for one auction, no other
auction is offered (the site's side guarantees it), so concurrent auctions never share cores.

**Rounds.** The first round announces the job to every site at once; later rounds, spread
over the auction's length, ask again naming the standing bid. A site that is busy or asks for
patience (503, 429) stays in; one that fails otherwise (no answer, not the protocol, a key it
does not know) is not asked again in this auction, and is released at the end like the rest.

**Close.** As soon as the auction's length has passed, the open bids are taken best first by
:class:`~siteagent.client.commit.Commit` (journaled, a refused accept moving to the next
bid), and every other site that took part is told its bid lost (``DELETE /v1/bids/{id}``), so
that its capacity is free at once. The auction's id is the journal's: ``recover`` settles an
interrupted commit as it settles a reverse auction's.

Connections: a site's :class:`~siteagent.client.connection.SiteConnection` serves one thread
at a time, so each site has a pool of them, lent per request; the rounds' requests go out on
one shared thread pool.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import queue
import threading
import time
from concurrent.futures import Executor, ThreadPoolExecutor, wait
from dataclasses import dataclass
from decimal import Decimal
from typing import (
    Any,
    Callable,
    Collection,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from siteagent.client.commit import Commit, CommitOutcome
from siteagent.client.connection import (
    Cancellation,
    Receipt,
    ReservationView,
    SiteConnection,
    SiteError,
    SiteUnreachable,
    Tentative,
)
from siteagent.client.english import DEFAULT_ROUNDS, EnglishAuction, Raise, round_starts
from siteagent.client.fanout import Answered, outcome_of
from siteagent.client.jobs import Job
from siteagent.client.journal import AuctionState, Journal, JournalEntry
from siteagent.client.recovery import Patient
from siteagent.client.reverse_auction import Choice
from siteagent.client.reverse_rounds import passes
from siteagent.client.sites import Site
from siteagent.core.errors import SiteagentError
from siteagent.protocol.models import BidAnswer, BidRequest

T = TypeVar("T")

#: Requests in flight to one site at most, from all the auctions of a stream.
CONNECTIONS_PER_SITE = 8

#: How often a wait looks whether the user interrupted (seconds).
INTERRUPT_CHECK_S = 0.25


class SiteTime:
    """The time one auction waits for its sites once its length is over (``after``, wall
    clock): what of a job's overhead beyond the auction's length is the sites' work, the rest
    being the auctioneer's own."""

    def __init__(self, after: float, clock: Callable[[], float]) -> None:
        self.after = after
        self.clock = clock
        self.seconds = 0.0
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        began = self.clock()
        try:
            yield
        finally:
            waited = self.clock() - max(began, self.after)
            with self._lock:
                self.seconds += max(waited, 0.0)


class Lender(Protocol):
    """The sites an auctioneer asks, by name: each request runs on a connection of its own
    for its time (:class:`SitePool`; a test's fake sites)."""

    @property
    def names(self) -> List[str]: ...

    def call(self, name: str, request: Callable[[SiteConnection], T]) -> T: ...


class SitePool:
    """Connections to each site, each lent to one thread at a time and kept for the next."""

    def __init__(self, sites: Sequence[Site]) -> None:
        self.sites = {site.name: site for site in sites}
        self._idle: Dict[str, queue.LifoQueue[SiteConnection]] = {
            name: queue.LifoQueue() for name in self.sites
        }
        self._all: List[SiteConnection] = []
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def lend(self, name: str) -> Iterator[SiteConnection]:
        """A connection to ``name`` for the block's time."""
        try:
            connection = self._idle[name].get_nowait()
        except queue.Empty:
            connection = SiteConnection(self.sites[name])
            with self._lock:
                self._all.append(connection)
        try:
            yield connection
        finally:
            self._idle[name].put(connection)

    @property
    def names(self) -> List[str]:
        return list(self.sites)

    def call(self, name: str, request: Callable[[SiteConnection], T]) -> T:
        with self.lend(name) as connection:
            return request(connection)

    def close(self) -> None:
        with self._lock:
            for connection in self._all:
                connection.close()


class PooledSeller:
    """A site as one auction's commit sees it (:class:`~siteagent.client.recovery.Seller`),
    each request on a connection lent by the pool, the time it takes counted in ``timed``."""

    def __init__(self, pool: Lender, name: str, timed: SiteTime) -> None:
        self.pool = pool
        self.name = name
        self.timed = timed

    def accept(self, offer_id: str, idempotency_key: str) -> Tentative:
        return self._call(lambda site: site.accept(offer_id, idempotency_key))

    def confirm(self, tentative: Tentative) -> Receipt:
        return self._call(lambda site: site.confirm(tentative))

    def cancel(self, reservation_id: str) -> Optional[Cancellation]:
        return self._call(lambda site: site.cancel(reservation_id))

    def reservation(self, reservation_id: str) -> ReservationView:
        return self._call(lambda site: site.reservation(reservation_id))

    def verified_receipt(self, data: Any, deal: Mapping[str, Any]) -> Receipt:
        return self.pool.call(self.name, lambda site: site.verified_receipt(data, deal))

    def _call(self, request: Callable[[SiteConnection], T]) -> T:
        with self.timed.waiting():
            return self.pool.call(self.name, request)


@dataclass(frozen=True)
class JobAuction:
    """How one job's auction ended: ``state`` is ``placed`` (a reservation confirmed at
    ``site``), ``unplaced`` (no site bid, or none could be reserved) or ``interrupted``; the
    sites ``asked``, those that ``answered`` and those that bid (``bidders``).
    ``opened_at`` and ``decided_at`` are wall-clock times: the job's overhead is what it
    waited beyond the auction's ``length_s``, of which ``sites_s`` went to the sites' answers
    (the auctioneer's own share is the rest)."""

    job: Job
    auction_id: str
    state: str
    message: str
    asked: Tuple[str, ...]
    answered: Tuple[str, ...]
    bidders: Tuple[str, ...]
    raises: Tuple[Raise, ...]
    rounds: int
    length_s: float
    opened_at: float
    decided_at: float
    sites_s: float = 0.0
    site: Optional[str] = None
    value: Optional[Decimal] = None
    reservation_id: Optional[str] = None
    start: Optional[int] = None
    end: Optional[int] = None

    @property
    def overhead_s(self) -> float:
        return self.decided_at - self.opened_at - self.length_s

    @property
    def own_overhead_s(self) -> float:
        """The auctioneer's own share of the overhead: not waiting for a site."""
        return self.overhead_s - self.sites_s

    @property
    def participation(self) -> float:
        """The share of the sites asked that bid."""
        return len(self.bidders) / len(self.asked) if self.asked else 0.0


@dataclass
class LiveAuction:
    """One job's auction while it runs: the job, the auction, when it opened, the time spent
    waiting for sites, and what marks it as running in the journal (:meth:`finish` ends it)."""

    job: Job
    auction: EnglishAuction
    opened: float
    timed: SiteTime
    running: contextlib.ExitStack

    def finish(self) -> None:
        self.running.close()


class Auctioneer:
    """Runs English auctions at ``sites`` (see the module's docstring): each lasts
    ``length_s`` with up to ``rounds`` rounds; ``start_price`` is what a first bid must beat.
    ``interrupted`` is checked between requests; ``clock`` is the wall clock (epoch seconds,
    which the sites' closing times are in). The rounds' requests go out at once on
    ``requests`` (default: a thread pool, :data:`CONNECTIONS_PER_SITE` per site; a simulation
    whose sites are in memory runs them in turn). The caller closes ``sites``."""

    def __init__(
        self,
        sites: Lender,
        journal: Journal,
        length_s: float,
        rounds: int = DEFAULT_ROUNDS,
        start_price: Optional[Decimal] = None,
        interrupted: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.time,
        requests: Optional[Executor] = None,
    ) -> None:
        self.names = sites.names
        self.pool = sites
        self.journal = journal
        self.length_s = length_s
        self.rounds = rounds
        self.start_price = start_price
        self.interrupted = interrupted
        self.clock = clock
        self._requests = requests or ThreadPoolExecutor(
            max_workers=CONNECTIONS_PER_SITE * len(self.names), thread_name_prefix="bid"
        )

    def close(self) -> None:
        self._requests.shutdown(wait=True)

    def __enter__(self) -> Auctioneer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- a stream of jobs

    def run(
        self, jobs: Sequence[Job], decided: Optional[Callable[[JobAuction], None]] = None
    ) -> List[JobAuction]:
        """Auction every job from its arrival (``submit`` seconds after now), each on its own
        thread; the placements in the jobs' order. ``decided`` hears of each as it ends."""
        began = self.clock()
        results: List[Optional[JobAuction]] = [None] * len(jobs)
        failures: List[BaseException] = []
        threads = []

        def auction(index: int, job: Job) -> None:
            try:
                placement = self.place(job)
            except BaseException as exc:  # raised in the caller's thread once all are done
                failures.append(exc)
                return
            results[index] = placement
            if decided is not None:
                decided(placement)

        for index, job in enumerate(jobs):
            if not self._wait_until(began + job.submit):
                break
            thread = threading.Thread(target=auction, args=(index, job), name=f"auction-{index}")
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]
        return [result for result in results if result is not None]

    # ---- one job

    def place(self, job: Job) -> JobAuction:
        """Auction ``job`` and reserve it at the winning site: its rounds spread over the
        auction's length on the clock (:func:`round_starts`)."""
        live = self.open(job)
        try:
            for offset in round_starts(self.length_s, self.rounds):
                if not self._wait_until(live.opened + offset):
                    break
                self.ask(live)
            if not self._wait_until(live.opened + self.length_s):
                return self.interrupt(live)
            return self.decide(live)
        finally:
            live.finish()

    # ---- the steps of one job's auction, for a driver that keeps time itself (``place`` on the
    # wall clock; a simulation on its own clock, which asks at each change of a site's load)

    def open(self, job: Job) -> LiveAuction:
        """Open ``job``'s auction now (journaled, marked as running here until it is
        finished); nothing is asked yet."""
        record = self.journal.open_auction(
            {"english": {"name": job.name, **job.job.model_dump(mode="json")}}
        )
        running = contextlib.ExitStack()
        running.enter_context(self.journal.running(record.id))
        opened = self.clock()
        auction = EnglishAuction(
            record.id,
            job.job,
            self.names,
            closes_at=math.ceil(opened + self.length_s),
            start_price=self.start_price,
        )
        return LiveAuction(
            job, auction, opened, SiteTime(opened + self.length_s, self.clock), running
        )

    def ask(self, live: LiveAuction, among: Optional[Collection[str]] = None) -> None:
        """The auction's next round: every site still in asked at once (only those ``among``
        them, for a driver that knows whose answer may have changed)."""
        with live.timed.waiting():
            self._round(live.auction, live.auction.rounds + 1, among=among)

    def decide(self, live: LiveAuction) -> JobAuction:
        """The auction's length is over: reserve the best bid, release the others."""
        return self._close(live.job, live.auction, live.opened, live.timed)

    def interrupt(self, live: LiveAuction) -> JobAuction:
        """Stop the auction without a winner, every bid released."""
        self._release(live.auction, winner=None)
        return self._end(
            live.job, live.auction, live.opened, AuctionState.INTERRUPTED, "interrupted"
        )

    def _round(
        self,
        auction: EnglishAuction,
        number: int,
        beat: bool = True,
        among: Optional[Collection[str]] = None,
    ) -> None:
        """Ask every site still in (``among`` them, if given), at once, naming the standing bid
        (unless not ``beat``); journal what it brought."""
        futures = {
            name: self._requests.submit(self._bid, name, auction.call(name, beat))
            for name in auction.asked
            if among is None or name in among
        }
        wait(futures.values())
        for name, future in futures.items():
            answer = future.result()
            if isinstance(answer, BidAnswer):
                auction.record(name, answer, number)
            else:
                refused = outcome_of(answer) is Answered.REFUSED
                auction.fail(name, _reason(answer), dropped=not passes(answer), refused=refused)
        auction.rounds = number
        self.journal.bidding_round(auction.auction_id, number, summary(auction))

    def _bid(self, name: str, call: BidRequest) -> Union[BidAnswer, Exception]:
        """One site's bid, or why there is none (its failure: a bug of ours is raised)."""
        try:
            return self.pool.call(name, lambda site: site.bid(call))
        except (SiteagentError, ValueError, OSError) as exc:
            return exc

    def _close(
        self, job: Job, auction: EnglishAuction, opened: float, timed: SiteTime
    ) -> JobAuction:
        """Reserve the best bid that a site still stands by; release the others.

        When the standing bid falls through at the close (its site withdrew it in the last
        round, or refused the accept: the batch system's own work took the capacity) while
        other sites hold nothing only because they were outbid, they are asked once more,
        with nothing to beat, and the best of their bids is reserved instead."""
        outcome = self._commit(auction, timed)
        if (outcome is None or outcome.state is AuctionState.FAILED) and auction.outbid():
            with timed.waiting():
                self._round(auction, auction.rounds + 1, beat=False)
            outcome = self._commit(auction, timed)
        decided = self.clock()
        if outcome is None:
            self._release(auction, winner=None)
            why = "no site bid: " + "; ".join(
                f"{site}: {reason}" for site, reason in sorted(no_bid_reasons(auction).items())
            )
            self.journal.set_auction(auction.auction_id, AuctionState.FAILED, why)
            return self._end(job, auction, opened, AuctionState.FAILED, why, decided, timed)
        confirmed = outcome.confirmed
        winner = confirmed[0] if confirmed else None
        self._release(auction, winner=None if winner is None else winner.site)
        placement = self._end(job, auction, opened, outcome.state, outcome.message, decided, timed)
        if winner is None:
            return placement
        return _placed(placement, winner.site, auction.value(winner.site), winner)

    def _commit(self, auction: EnglishAuction, timed: SiteTime) -> Optional[CommitOutcome]:
        """Accept the open bids best first until a site agrees, and confirm; None when no
        site has an open bid."""
        candidates = auction.candidates(int(self.clock()))
        if not candidates:
            return None
        sellers = {name: Patient(PooledSeller(self.pool, name, timed)) for name in self.names}
        commit = Commit(
            self.journal,
            auction.auction_id,
            sellers,
            parts=1,
            interrupted=self.interrupted,
            clock=self.clock,
        )
        return commit.run([Choice((tuple(candidates),))])

    def _release(self, auction: EnglishAuction, winner: Optional[str]) -> None:
        """Tell every other site that took part its bid lost (at once, in parallel); a site
        that does not answer releases it when the auction's time to accept is over."""
        release = functools.partial(_release_bid, self.pool, auction.auction_id)
        wait([self._requests.submit(release, name) for name in auction.holders(winner)])

    def _end(
        self,
        job: Job,
        auction: EnglishAuction,
        opened: float,
        state: AuctionState,
        message: str,
        decided: Optional[float] = None,
        timed: Optional[SiteTime] = None,
    ) -> JobAuction:
        if state is AuctionState.INTERRUPTED:
            self.journal.set_auction(auction.auction_id, state, message)
        shown = {AuctionState.DONE: "placed", AuctionState.INTERRUPTED: "interrupted"}
        return JobAuction(
            job=job,
            auction_id=auction.auction_id,
            state=shown.get(state, "unplaced"),
            message=message,
            asked=tuple(self.names),
            answered=tuple(
                site for site in self.names if site in auction.answers or site in auction.refused
            ),
            bidders=tuple(sorted(auction.bidders)),
            raises=tuple(auction.raises),
            rounds=auction.rounds,
            length_s=self.length_s,
            opened_at=opened,
            decided_at=self.clock() if decided is None else decided,
            sites_s=0.0 if timed is None else timed.seconds,
        )

    def _wait_until(self, instant: float) -> bool:
        """Sleep until ``instant`` (wall clock); False if interrupted meanwhile."""
        while not self.interrupted():
            left = instant - self.clock()
            if left <= 0:
                return True
            time.sleep(min(left, INTERRUPT_CHECK_S))
        return False


def _release_bid(pool: Lender, auction_id: str, name: str) -> None:
    """Release the bid at one site; a site that does not answer releases it itself when the
    auction's time to accept is over."""
    with contextlib.suppress(SiteagentError, ValueError, OSError):
        pool.call(name, lambda site: site.release_bid(auction_id))


def summary(auction: EnglishAuction) -> Dict[str, Any]:
    """What a round brought, for the journal and the report."""
    standing = auction.standing
    answers: Dict[str, str] = {}
    for site in auction.sites:
        if site in auction.failed:
            answers[site] = f"failed: {auction.failed[site]}"
        elif site in auction.answers:
            answers[site] = describe(auction.answers[site])
    return {
        "round": auction.rounds,
        "standing": None if standing is None else str(standing[1]),
        "leader": None if standing is None else standing[0],
        "answers": answers,
    }


def describe(answer: BidAnswer) -> str:
    if answer.bid is not None and answer.state in ("open", "won"):
        return f"{answer.state} {answer.bid.value}"
    if answer.refusal is not None:
        return f"{answer.state}: {answer.refusal.code}"
    return answer.state


def no_bid_reasons(auction: EnglishAuction) -> Dict[str, str]:
    """Why each site has no bid at the close."""
    reasons = dict(auction.failed)
    for site, answer in auction.answers.items():
        if answer.refusal is not None and site not in reasons:
            reasons[site] = f"{answer.refusal.code} ({answer.refusal.reason})"
    return reasons


def _placed(
    placement: JobAuction, site: str, value: Optional[Decimal], entry: JournalEntry
) -> JobAuction:
    return dataclasses.replace(
        placement,
        site=site,
        value=value,
        reservation_id=entry.reservation_id,
        start=entry.bid.start,
        end=entry.bid.end,
    )


def _reason(error: Exception) -> str:
    if isinstance(error, SiteError):
        return f"{error.message} ({error.code})"
    if isinstance(error, SiteUnreachable):
        return error.reason
    return str(error)
