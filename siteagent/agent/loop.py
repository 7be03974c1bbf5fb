"""The daemon loop: refresh the snapshot, predict the schedule, publish, sleep, repeat.

Everything the agent serves (slots, quotes, metrics) is read from the latest :class:`CycleState`,
computed once per cycle, so that a burst of requests never multiplies the planning work and a
slow batch system never blocks a request: readers see the last good state and its age.

With a reservation manager, each cycle also does the lifecycle's housekeeping (reservations
started or ended, unconfirmed ones expired, the store reconciled with the batch system); the
first cycle's reconciliation is the start-up one that repairs whatever a crash left. With a
store, each cycle records the queue waits of the jobs that started since the cycle before
(:class:`WaitObserver`: a job that was submitted and started between two polls counts, with
its wait by the batch system's times; jobs already running at the agent's first cycle do not).
With a usage recorder, each cycle records the jobs running in the agent's reservations and
makes final the figures of those that are over. With the site's deals, each cycle then settles
with the bank: voids the receipts of reservations that were never confirmed and books what is
owed.

:meth:`Agent.wake` starts the next cycle at once: the batch system's notice that a reservation
started or ended has moved it already, and the cycle records what its jobs used without waiting
for the poll interval.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Callable, List, Optional, Sequence, Set, Tuple

from siteagent.agent.metrics import Metrics
from siteagent.agent.state import CycleState
from siteagent.backends.base import Backend, BackendError
from siteagent.core.defaults import DEFAULT_POLL_INTERVAL_S
from siteagent.core.engines import Policy
from siteagent.core.prediction import plan
from siteagent.core.preemption import Preemption
from siteagent.core.values import ClusterSnapshot, Placement
from siteagent.core.waits import QueueWait
from siteagent.host import sdnotify
from siteagent.market.deals import Deals
from siteagent.market.reservations import ReservationManager
from siteagent.market.store import Store, StoreError
from siteagent.market.usage import UsageRecorder
from siteagent.market.view import market_view
from siteagent.pricing import Pricing

log = logging.getLogger("siteagent.agent")

#: A snapshot older than this many poll intervals, plus the grace (seconds), means the polls
#: have stopped (a batch-system command hanging past its timeout, a wedged agent): nothing is
#: sold from it.
STALE_POLLS = 3
STALE_GRACE_S = 60.0

#: How often an idle loop looks whether it was asked to stop (seconds), when nothing wakes it.
STOP_CHECK_S = 0.5


class Agent:
    """Keeps a fresh :class:`CycleState` of one cluster, polling its backend.

    ``pricing`` prices each state's market view (slots, the context quotes price against);
    ``manager`` (optional) carries the reservations along each cycle; ``store`` (optional)
    receives the queue waits observed between cycles; ``metrics`` (optional) takes each
    cycle's state; ``watchdog`` (optional) is fed while the loop makes progress; ``usage``
    (optional) records the jobs in the agent's reservations; ``deals`` (optional) settles with
    the bank after the housekeeping; ``listeners`` are called in order with each new state at
    the end of its cycle, in the loop's thread. ``preemption`` is how the batch system preempts
    lower-priority work: the predicted schedule follows it.
    """

    def __init__(
        self,
        backend: Backend,
        pricing: Pricing,
        policy: Policy = Policy.CONSERVATIVE,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        manager: Optional[ReservationManager] = None,
        store: Optional[Store] = None,
        metrics: Optional[Metrics] = None,
        watchdog: Optional[sdnotify.Watchdog] = None,
        deals: Optional[Deals] = None,
        listeners: Sequence[Callable[[CycleState], object]] = (),
        usage: Optional[UsageRecorder] = None,
        preemption: Preemption = Preemption.NONE,
    ) -> None:
        if poll_interval_s <= 0:
            raise ValueError(f"poll interval must be > 0 s, got {poll_interval_s}")
        self.backend = backend
        self.pricing = pricing
        self.policy = Policy(policy)
        self.preemption = Preemption(preemption)
        self.poll_interval_s = poll_interval_s
        self._clock = clock
        self.manager = manager
        self.store = store
        self.metrics = metrics
        self.watchdog = watchdog
        self.deals = deals
        self.listeners: List[Callable[[CycleState], object]] = list(listeners)
        self.usage = usage
        self._waits = WaitObserver()
        self._wake = threading.Event()
        self.state: Optional[CycleState] = None
        self.last_error: Optional[str] = None

    def refresh(self) -> CycleState:
        """Take a snapshot, plan it and price its market view; raises BackendError when the
        batch system fails. The state is published whole, ready for every reader."""
        began = self._clock()
        snapshot = self.backend.snapshot()
        if self.manager is not None and snapshot.placement is not Placement.POOLED:
            snapshot = self.manager.with_known_nodes(snapshot)
        taken = self._clock()
        predicted = plan(
            snapshot,
            self.policy,
            preemptive=self.preemption is not Preemption.NONE,
            requeue=self.preemption is Preemption.REQUEUE,
        )
        done = self._clock()
        market = market_view(snapshot, predicted, self.pricing)
        self.state = CycleState(market, taken, taken - began, done - taken)
        self.last_error = None
        return self.state

    def reprice(self) -> None:
        """The latest state's market view made again with ``pricing`` (and planned again under
        ``policy`` if that changed), on the same snapshot: a reloaded configuration's prices
        apply to the next quote, not from the next poll on."""
        state = self.state
        if state is None:
            return
        snapshot = state.market.snapshot
        predicted = state.market.plan
        if predicted.policy is not self.policy:
            predicted = plan(snapshot, self.policy)
        self.state = dataclasses.replace(
            state, market=market_view(snapshot, predicted, self.pricing)
        )

    def staleness(self) -> Optional[Tuple[str, str]]:
        """Why the state cannot be sold from now (code, sentence): the last poll failed, none
        succeeded yet, or the polls stopped (a hanging batch system or agent). None when it is
        fresh."""
        if self.last_error is not None:
            return "backend_unavailable", (
                f"the agent's last poll of the batch system failed ({self.last_error})"
            )
        age = self.snapshot_age()
        if age is None:
            return "no_snapshot", "the agent has not read the cluster yet"
        if age > STALE_POLLS * self.poll_interval_s + STALE_GRACE_S:
            return "snapshot_stale", (
                f"the agent's snapshot is {age:.0f} s old although it polls every "
                f"{self.poll_interval_s:g} s: the batch system is not answering"
            )
        return None

    def snapshot_age(self) -> Optional[float]:
        """Seconds since the latest good snapshot was taken (on the agent's clock); None
        before the first one. What /healthz reports: a growing age means polls fail."""
        if self.state is None:
            return None
        return max(self._clock() - self.state.taken_at, 0.0)

    def cycle(self) -> Optional[CycleState]:
        """One poll: refresh, log what was seen, keep the last good state on failure; then
        record queue waits and look after the reservations."""
        try:
            state = self.refresh()
        except BackendError as exc:
            self._poll_failed(str(exc))
            return None
        except Exception as exc:  # an answer no parser foresaw must not end the polls
            log.exception("reading the batch system failed unexpectedly")
            self._poll_failed(f"unexpected {type(exc).__name__}: {exc}")
            return None
        log.info(describe(state))
        self._beat(describe(state))
        reached = True  # the batch system answered every call of this cycle
        try:
            if self.store is not None:
                self.store.record_waits(self._waits.observe(state.snapshot))
            if self.manager is not None:
                log.info(self.manager.reconciler.housekeeping().describe())
            if self.usage is not None:
                self.usage.observe(state.snapshot)
                self.usage.settle()
            if self.deals is not None:
                caught_up = self.deals.settle()
                if caught_up.booked or caught_up.problems:
                    log.info(caught_up.describe())
        except (BackendError, StoreError) as exc:
            reached = not isinstance(exc, BackendError)
            if not reached and self.metrics is not None:
                self.metrics.observe_down()  # first, as in _poll_failed
            self.last_error = str(exc)
            log.error("recording waits or reservation housekeeping failed: %s", exc)
        except Exception as exc:  # a bug here must not end the polls either; say so each cycle
            self.last_error = f"unexpected {type(exc).__name__} in housekeeping: {exc}"
            log.exception("recording waits or reservation housekeeping failed unexpectedly")
        self._beat()
        if self.metrics is not None:
            try:
                self.metrics.observe_state(state, up=reached)
            except StoreError as exc:
                log.error("reading the reservations for the metrics failed: %s", exc)
        for listener in self.listeners:
            try:
                listener(state)
            except Exception:  # a listener's bug must not end the polls
                log.exception("a listener of the agent's state failed")
        return state

    def _poll_failed(self, error: str) -> None:
        """Keep the state from before, and say (on /healthz, to systemd, in the metrics) that
        the batch system could not be read: the next cycle tries again. The metrics first, so
        that they already say so when /healthz does."""
        if self.metrics is not None:
            self.metrics.observe_failure()
        self.last_error = error
        log.error("backend %s failed: %s (keeping the state from before)", self.backend.name, error)
        self._beat(f"backend {self.backend.name} unavailable: {error}")

    def _beat(self, status: Optional[str] = None) -> None:
        """The loop made progress: feed the watchdog, and tell systemd what it saw."""
        if self.watchdog is not None:
            self.watchdog.beat()
        if status is not None:
            sdnotify.notify(f"STATUS={status}")

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set."""
        log.info(
            "agent started: backend %s, policy %s, polling every %g s",
            self.backend.name,
            self.policy.value,
            self.poll_interval_s,
        )
        if self.manager is not None:
            log.info(
                "reservations: names %s*, confirm within %g s, state in %s; the first cycle "
                "reconciles them with the batch system",
                self.manager.name_prefix,
                self.manager.confirm_timeout,
                self.manager.store.path,
            )
        while not stop.is_set():
            self.cycle()
            self._idle(stop)
        log.info("agent stopped")

    def wake(self) -> None:
        """Start the next cycle now instead of at the end of the poll interval (and let a
        stop be seen at once)."""
        self._wake.set()

    def _idle(self, stop: threading.Event) -> None:
        """Wait for the next cycle, feeding the watchdog: waiting is what a healthy loop does.
        A :meth:`wake` ends the wait early."""
        beat = self.watchdog.beat_every_s if self.watchdog is not None else None
        step = STOP_CHECK_S if beat is None else min(beat, STOP_CHECK_S)
        deadline = time.monotonic() + self.poll_interval_s
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self._wake.wait(min(left, step)):
                self._wake.clear()
                return
            self._beat()


class WaitObserver:
    """The queue waits of the jobs that started since the previous snapshot.

    Every job running now that was not running in the previous snapshot has started in
    between, and counts with its wait by the batch system's own times (start - submit): zero
    for one that started at once. Whether it was seen pending first does not matter, so a job
    that was submitted and started between two polls counts like any other; leaving those
    out would keep exactly the short waits out of every statistic. A job that starts and ends
    between two polls is never seen, and is missed. The first snapshot after a (re)start only
    says which jobs are running already: they started before the agent watched, and are not
    counted (those the agent saw start before it stopped are in the store already).
    """

    def __init__(self) -> None:
        self._running: Optional[Set[str]] = None

    def observe(self, snapshot: ClusterSnapshot) -> List[QueueWait]:
        running_before = self._running
        self._running = {job.id for job in snapshot.running}
        if running_before is None:
            return []
        return [
            QueueWait(job.id, job.cores, job.limit, job.submit, job.start)
            for job in snapshot.running
            if job.id not in running_before and job.start is not None
        ]


def describe(state: CycleState) -> str:
    """One log line an administrator can read at a glance."""
    snapshot, predicted = state.snapshot, state.plan
    upcoming = sorted(predicted.starts.values())
    next_start = (
        f"next pending start in {max(upcoming[0] - snapshot.now, 0) // 60} min"
        if upcoming
        else "queue empty"
    )
    return (
        f"{len(snapshot.running)} running, {len(snapshot.pending)} pending, "
        f"{state.busy}/{snapshot.capacity} {snapshot.unit.value}s busy, "
        f"{len(snapshot.reservations)} reservations; {next_start}; "
        f"snapshot {state.snapshot_s * 1000:.0f} ms, plan {state.plan_s * 1000:.0f} ms"
    )
