"""Use this when a test or benchmark runs English auctions in simulated time.

English auctions in simulated time: the project's own auctioneer, its sites' own bidding and
the simulator, in one process on one clock (docs/design.md §4.6; ``bench/repro/english.py``).

Each site is a simulated cluster (:class:`~siteagent.sim.simulator.Simulator`) with its own
stream of local jobs, bidding through the agent's use case
(:class:`~siteagent.market.english_bids.Bidding`, on an in-memory store) against the market view of
its cluster as it is at that instant, and accepting and confirming as the commit's in-memory
seller does (:class:`testbed.inprocess.sellers.FakeSeller`: real signed receipts). The auctioneer is
:class:`~siteagent.client.auctioneer.Auctioneer`, driven step by step by :class:`World`:

- an auction opens when its job arrives and asks every site at once;
- it asks again at each instant a site's capacity changed while it is open (a job started,
  ended or was suspended there, a reservation ended, or another auction's bid released the
  capacity it held): what a site polling its batch system sees, and when the paper's sites
  re-bid; on the wall clock the rounds are spread over the auction instead. Such a round asks
  the sites whose capacity changed and those whose bid the standing bid beats: every other
  site would answer as it did;
- it is decided when its length ``T_a`` is over: the best bid accepted and confirmed, the
  others released;
- a job no site bid for waits in the global queue and is auctioned again at the next instant
  a site gives capacity back (the paper's auctions repeat until every job is placed), the
  highest priority first.

The winner's accept places the job. A site bidding what is free now (``auctions.mode: now``)
runs a preemptive cluster: the job is submitted at its priority once its input has arrived,
and starts at once, suspending lower-priority work. A site bidding future windows (the
project's default) makes the offered window an advance reservation; the job runs in it from
its start (or once its input has arrived) and the reservation is given back when the job
ends. Winning windows start one second after the close (``ACCEPT_WINDOW_S``: an offer must
still be open when it is accepted).

Times are whole seconds from 0. The streams' random draws are the caller's (a reproduction
keys them by purpose, site and seed, so that every arm of a comparison sees the same jobs).
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

from siteagent.backends.base import Backend
from siteagent.client.auctioneer import Auctioneer, LiveAuction
from siteagent.client.connection import SiteError, Tentative
from siteagent.client.jobs import Job as AuctionJob
from siteagent.client.journal import Journal
from siteagent.config.schema import AuctionsConfig, BidMode, SiteConfig
from siteagent.core.engines import Policy, ReservationConflict
from siteagent.core.machine import Task
from siteagent.core.prediction import plan
from siteagent.core.values import BatchReservation, ClusterSnapshot, Job, ReservationSpec
from siteagent.market.english_bids import Bidding
from siteagent.market.lifecycle import BidState
from siteagent.market.reservations import ReservationManager
from siteagent.market.store import Store
from siteagent.market.view import MarketView
from siteagent.pricing import FlatPrice, NoFee, Pricing
from siteagent.protocol.models import AuctionedJob, BidAnswer, BidRequest
from siteagent.sim.simulator import Simulator
from siteagent.sim.snapshot import snapshot_of
from testbed.inprocess.sellers import FakeSeller

T = TypeVar("T")

#: Seconds after an auction's close that its winner has to accept: the least there can be (an
#: offer lapses when its window starts, and it must be open when it is accepted).
ACCEPT_WINDOW_S = 1

#: Bytes per second a job's input travels between sites; inputs are sized to take the seconds
#: the stream draws.
TRANSFER_RATE = 1_000_000

#: The sites' prices do not rank bids (values do): one per core-hour, no fee.
PRICING = Pricing(FlatPrice(Decimal(1)), NoFee())

#: Absolute priorities, 1 the lowest: local jobs have the lowest.
LOCAL_PRIORITY = 1


def lognormal_run(rng: random.Random, mean_s: float, sigma: float) -> int:
    """A run time (whole seconds, at least 1) of a lognormal law of mean ``mean_s``."""
    mu = math.log(mean_s) - sigma * sigma / 2
    return max(1, round(rng.lognormvariate(mu, sigma)))


@dataclass(frozen=True)
class SiteSpec:
    """A simulated site: ``cores`` in all, and its local stream: Poisson arrivals at ``rate``
    per second of jobs of ``sizes`` cores running about ``mean_run_s`` seconds (lognormal of
    spread ``sigma``), at the lowest priority, estimates exact."""

    name: str
    cores: int
    rate: float
    sizes: Tuple[int, ...]
    mean_run_s: float
    sigma: float = 0.5


@dataclass(frozen=True)
class GlobalJob:
    """A job of the global stream: its input is at ``input_site`` and takes ``transfer_s`` to
    reach any other; its estimate is its run time (``run``)."""

    name: str
    submit: int
    cores: int
    run: int
    priority: int
    input_site: str
    transfer_s: int

    def auctioned(self) -> AuctionedJob:
        return AuctionedJob(
            cores=self.cores,
            walltime=self.run,
            priority=self.priority,
            input_bytes=self.transfer_s * TRANSFER_RATE,
            input_site=self.input_site,
        )

    def transfer_to(self, site: str) -> int:
        return 0 if site == self.input_site else self.transfer_s


def local_tasks(spec: SiteSpec, rng: random.Random) -> Iterator[Task]:
    """The site's local stream drawn from ``rng``, without end (the world stops when the
    global jobs are done); none at a rate of 0."""
    if spec.rate <= 0:
        return
    t = 0.0
    for number in itertools.count(1):
        t += rng.expovariate(spec.rate)
        run = lognormal_run(rng, spec.mean_run_s, spec.sigma)
        size = rng.choice(spec.sizes)
        yield Task(f"{spec.name}-l{number}", size, run, int(t), run=run, priority=LOCAL_PRIORITY)


@dataclass
class JobRecord:
    """What became of one global job: where and when it ran, and its auctions' share of sites
    that bid (one per auction, repeats included)."""

    job: GlobalJob
    site: Optional[str] = None
    placed_at: Optional[int] = None
    start: Optional[int] = None
    end: Optional[int] = None
    auctions: int = 0
    participation: List[float] = field(default_factory=list)
    rounds: List[int] = field(default_factory=list)

    @property
    def response_s(self) -> int:
        assert self.end is not None, f"{self.job.name} never ended"
        return self.end - self.job.submit


class SimulatorBackend(Backend):
    """The batch system of a simulated site, as the agent's manager holds it (the bids never
    touch it: the world places won jobs itself)."""

    def __init__(self, simulator: Simulator) -> None:
        self.simulator = simulator

    def snapshot(self) -> ClusterSnapshot:
        return snapshot_of(self.simulator)

    def create_reservation(self, spec: ReservationSpec) -> BatchReservation:
        self.simulator.add_reservation(spec.name, spec.start, spec.end, spec.size)
        return BatchReservation(spec.name, spec.start, spec.end, spec.size)

    def delete_reservation(self, name: str) -> None:
        self.simulator.remove_reservation(name)

    def list_reservations(self) -> List[BatchReservation]:
        return list(snapshot_of(self.simulator).reservations)


@dataclass
class SimSite(FakeSeller):
    """One site: its simulated cluster, the agent's bidding on it, and its seller's side.
    ``version`` counts the changes of its capacity, ``freed`` those that gave capacity back
    (a job ended, a reservation or a held bid was given back); ``placed`` is told of every accepted
    offer (site, auction id, offer) and places the job, or raises SiteError; ``observer``
    hears of every start and end of a job in the cluster."""

    mode: BidMode = BidMode.NOW
    simulator: Any = None
    placed: Any = None
    observer: Any = None
    version: int = 0
    freed: int = 0
    store: Any = None
    bidding: Any = None
    _cached: Optional[Tuple[Tuple[int, int], MarketView]] = None
    _auctions: Dict[str, str] = field(default_factory=dict)

    def open_market(self, clock: Callable[[], float]) -> None:
        """The agent's store and bidding over the cluster, on ``clock``."""
        self.clock = clock
        self.store = Store(":memory:")
        manager = ReservationManager(self.store, SimulatorBackend(self.simulator), clock=clock)
        settings = AuctionsConfig(
            transfer_rate=TRANSFER_RATE,
            max_length_s=10**8,
            max_open_per_client=10**6,
            accept_window_s=ACCEPT_WINDOW_S,
            mode=self.mode,
        )
        self.bidding = Bidding(manager, SiteConfig(name=self.name), settings)

    def close_market(self) -> None:
        if self.store is not None:
            self.store.close()

    # ---- the cluster's events

    def changed(self, task: Optional[Task] = None) -> None:
        self.version += 1

    def gave_back(self) -> None:
        self.version += 1
        self.freed += 1

    def started(self, task: Task) -> None:
        self.version += 1
        if self.observer is not None:
            self.observer(task, True)

    def finished(self, task: Task) -> None:
        self.gave_back()
        if self.observer is not None:
            self.observer(task, False)

    def view(self) -> MarketView:
        """The market view of the cluster now (made again once it changed). Slots are left
        out: bids do not read them."""
        key = (self.version, int(self.clock()))
        if self._cached is None or self._cached[0] != key:
            snapshot = snapshot_of(self.simulator, backend="simulated")
            context = PRICING.context(snapshot)
            self._cached = (key, MarketView(snapshot, context.plan, context, (), PRICING))
        return self._cached[1]

    # ---- the auctioneer's requests

    def bid(self, call: BidRequest) -> BidAnswer:
        made = self.bidding.bid(call, self.buyer.key_id, self.view())
        if made.offer is not None:
            self._auctions[made.offer.id] = call.auction_id
        return BidAnswer.model_validate(made.to_json())

    def release_bid(self, auction_id: str) -> BidAnswer:
        held = self.store.bid(self.buyer.key_id, auction_id)
        released = self.bidding.release(self.buyer.key_id, auction_id)
        if held is not None and held.state is BidState.OPEN:
            self.gave_back()  # the capacity it held is free
        return BidAnswer.model_validate(released.to_json())

    def accept(self, offer_id: str, idempotency_key: str) -> Tentative:
        if idempotency_key in self.answered_accepts:
            return self.accept_answer(self.reservations[self.answered_accepts[idempotency_key]])
        offer = self.store.get_offer(offer_id)
        auction_id = self._auctions.get(offer_id)
        if offer is None or auction_id is None:
            raise self._error(404, "unknown_offer", f"no offer {offer_id}")
        if offer.expires <= self.clock():
            raise self._error(409, "offer_expired", f"offer {offer_id} expired")
        self.placed(self, auction_id, offer)
        self.store.release_bid(
            self.buyer.key_id, auction_id, "won", "accepted: the job is placed", self.clock()
        )
        return self.accept_answer(self.hold(offer, idempotency_key))


class InTurn(Executor):
    """Runs each request as it is submitted: sites in memory answer in turn, in the order the
    auctioneer asks them (the same order in every run)."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


@dataclass
class SitePool:
    """The sites, lent by name as :class:`siteagent.client.auctioneer.SitePool` lends
    connections."""

    sites: Dict[str, SimSite]

    @property
    def names(self) -> List[str]:
        return list(self.sites)

    def call(self, name: str, request: Callable[[Any], Any]) -> Any:
        return request(self.sites[name])


def make_sites(
    specs: Sequence[SiteSpec],
    mode: BidMode,
    local: Dict[str, Iterator[Task]],
    policy: Policy = Policy.CONSERVATIVE,
) -> Dict[str, SimSite]:
    """The sites, their clusters at time 0 running their ``local`` streams (in arrival order;
    a site not named has none); sites bidding what is free now preempt."""
    sites: Dict[str, SimSite] = {}
    for spec in specs:
        site = SimSite(name=spec.name, capacity=spec.cores, mode=mode)
        site.simulator = Simulator(
            local.get(spec.name, iter(())),
            spec.cores,
            policy,
            start_time=0,
            on_start=site.started,
            on_finish=site.finished,
            on_suspend=site.changed,
            preemptive=mode is BidMode.NOW,
        )
        sites[spec.name] = site
    return sites


class World:
    """Sites and the global stream on one clock (see the module's docstring): each job
    auctioned (``length_s`` is every auction's ``T_a``), or with ``greedy``, sent as it
    arrives to the site that predicts its earliest start (the baseline without auctions).
    ``work`` is a directory for the auctioneer's journal. ``busy_core_seconds`` is the work
    the sites did until the last global job ended (local jobs and global ones, suspended time
    left out)."""

    def __init__(
        self,
        sites: Dict[str, SimSite],
        jobs: Sequence[GlobalJob],
        length_s: int,
        work: Path,
        greedy: bool = False,
        policy: Policy = Policy.CONSERVATIVE,
    ) -> None:
        self.sites = sites
        self.jobs = sorted(jobs, key=lambda job: (job.submit, -job.priority, job.name))
        self.length_s = length_s
        self.greedy = greedy
        self.policy = policy
        self.now = 0
        self.busy_core_seconds = 0
        self.records = {job.name: JobRecord(job) for job in self.jobs}
        self._events: List[Tuple[int, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._open: List[Tuple[LiveAuction, Tuple[int, ...]]] = []
        self._waiting: List[GlobalJob] = []
        self._auctioned: Dict[str, GlobalJob] = {}
        self.journal = Journal(work / "journal.db")
        for site in sites.values():
            site.open_market(self.clock)
            site.placed = self._place
            site.observer = self._observe
        self.auctioneer = Auctioneer(
            SitePool(sites), self.journal, length_s, clock=self.clock, requests=InTurn()
        )

    def clock(self) -> float:
        return float(self.now)

    # ---- the run

    def run(self) -> List[JobRecord]:
        """Run until every global job has ended; each job's record, in arrival order."""
        arrivals = list(reversed(self.jobs))
        seen, freed = self._versions(), self._freed()
        unfinished = len(self.jobs)
        try:
            while unfinished:
                t = self._next_instant(arrivals)
                self.busy_core_seconds += (t - self.now) * self._busy()
                self.now = t
                for site in self.sites.values():
                    site.simulator.advance_to(t)
                while self._events and self._events[0][0] == t:
                    heapq.heappop(self._events)[2]()
                self._decide_due(t)
                changed = self._versions() != seen
                if changed:
                    self._ask_open()
                due = []
                while arrivals and arrivals[-1].submit == t:
                    due.append(arrivals.pop())
                if self._freed() != freed:
                    due.extend(self._waiting)
                    self._waiting = []
                for job in sorted(due, key=lambda job: (-job.priority, job.submit, job.name)):
                    if self.greedy:
                        self._dispatch(job)
                    else:
                        self._open_auction(job)
                seen, freed = self._versions(), self._freed()
                unfinished = sum(1 for record in self.records.values() if record.end is None)
        finally:
            self.close()
        return [self.records[job.name] for job in self.jobs]

    def close(self) -> None:
        for live, _ in self._open:
            live.finish()
        self._open = []
        self.auctioneer.close()
        self.journal.close()
        for site in self.sites.values():
            site.close_market()

    def _next_instant(self, arrivals: List[GlobalJob]) -> int:
        times = [site.simulator.next_event_time() for site in self.sites.values()]
        found = [t for t in times if t is not None]
        if arrivals:
            found.append(arrivals[-1].submit)
        if self._events:
            found.append(self._events[0][0])
        found.extend(int(live.opened) + self.length_s for live, _ in self._open)
        if not found:
            raise RuntimeError("global jobs wait but nothing will ever happen")
        return max(min(found), self.now)

    def _busy(self) -> int:
        """Cores running jobs now (a job in a reservation counts once its run starts)."""
        running = sum(task.size for site in self.sites.values() for task in site.simulator.running)
        reserved = sum(
            record.job.cores
            for record in self.records.values()
            if record.start is not None
            and record.end is not None
            and record.start <= self.now < record.end
            and self.sites[record.site or ""].mode is BidMode.FUTURE
        )
        return running + reserved

    def _versions(self) -> Tuple[int, ...]:
        return tuple(site.version for site in self.sites.values())

    def _freed(self) -> Tuple[int, ...]:
        return tuple(site.freed for site in self.sites.values())

    # ---- auctions

    def _open_auction(self, job: GlobalJob) -> None:
        live = self.auctioneer.open(AuctionJob(job.name, job.auctioned()))
        self._auctioned[live.auction.auction_id] = job
        self.records[job.name].auctions += 1
        self.auctioneer.ask(live)
        if self.length_s == 0:
            self._decide(live)
        else:
            self._open.append((live, self._versions()))

    def _ask_open(self) -> None:
        """A round of every open auction that a change of some site's capacity has not yet
        been asked about: the sites whose capacity changed since its last round, and those
        whose bid the standing bid beats (every other site would answer as it did)."""
        asked = []
        names = list(self.sites)
        for live, seen in self._open:
            now = self._versions()
            changed = {name for name, old, new in zip(names, seen, now) if old != new}
            if changed:
                self.auctioneer.ask(live, among=changed | set(live.auction.behind()))
            asked.append((live, self._versions()))
        self._open = asked

    def _decide_due(self, t: int) -> None:
        due = [entry for entry in self._open if int(entry[0].opened) + self.length_s <= t]
        if due:
            self._open = [entry for entry in self._open if entry not in due]
        for live, _ in due:
            self._decide(live)

    def _decide(self, live: LiveAuction) -> None:
        try:
            placement = self.auctioneer.decide(live)
        finally:
            live.finish()
        job = self._auctioned.pop(live.auction.auction_id)
        record = self.records[job.name]
        record.participation.append(placement.participation)
        record.rounds.append(placement.rounds)
        if placement.state != "placed":
            self._waiting.append(job)

    # ---- the baseline

    def _dispatch(self, job: GlobalJob) -> None:
        """Send ``job`` to the site predicting its earliest start once its input is there."""
        best = min(
            self.sites.values(),
            key=lambda site: max(
                self.now + job.transfer_to(site.name), self._predicted_start(site, job)
            ),
        )
        self.records[job.name].site = best.name
        self.records[job.name].placed_at = self.now
        self._at(self.now + job.transfer_to(best.name), lambda: self._submit(best, job))

    def _predicted_start(self, site: SimSite, job: GlobalJob) -> int:
        """When the site's plan (preemptive) would start ``job`` queued now at its priority."""
        snapshot = snapshot_of(site.simulator)
        pending = Job(job.name, job.cores, self.now, job.run, absolute_priority=job.priority)
        queued = sorted((*snapshot.pending, pending), key=lambda j: -j.absolute_priority)
        extended = ClusterSnapshot(
            now=snapshot.now,
            capacity=snapshot.capacity,
            running=snapshot.running,
            pending=tuple(queued),
            reservations=snapshot.reservations,
        )
        preemptive = bool(site.simulator.preemptive)
        return plan(extended, self.policy, preemptive=preemptive).starts[job.name]

    # ---- placing a won job

    def _place(self, site: SimSite, auction_id: str, offer: Any) -> None:
        """The winner's accept: the job goes to ``site`` (see the module's docstring)."""
        job = self._auctioned[auction_id]
        record = self.records[job.name]
        arrives = self.now + job.transfer_to(site.name)
        if site.mode is BidMode.NOW:
            self._at(arrives, lambda: self._submit(site, job))
        else:
            try:
                site.simulator.add_reservation(job.name, offer.start, offer.end, offer.size)
            except ReservationConflict:
                raise SiteError(
                    "the capacity is gone", code="offer_capacity_gone", site=site.name, status=409
                ) from None
            start = max(offer.start, arrives)
            record.start, record.end = start, start + job.run
            self._at(record.end, lambda: self._give_back(site, job.name))
        record.site, record.placed_at = site.name, self.now

    def _submit(self, site: SimSite, job: GlobalJob) -> None:
        task = Task(job.name, job.cores, job.run, self.now, run=job.run, priority=job.priority)
        site.simulator.submit(task)

    def _observe(self, task: Task, started: bool) -> None:
        record = self.records.get(str(task.key))
        if record is None:
            return
        if started and record.start is None:
            record.start = self.now
        elif not started:
            record.end = self.now

    def _give_back(self, site: SimSite, key: str) -> None:
        if key in site.simulator.engine.reservations:
            site.simulator.remove_reservation(key)
        site.gave_back()

    def _at(self, t: int, action: Callable[[], None]) -> None:
        if t <= self.now:
            action()
        else:
            heapq.heappush(self._events, (t, next(self._seq), action))
