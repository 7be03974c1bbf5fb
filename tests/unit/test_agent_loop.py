"""The agent's loop survives a batch system whose answer no parser foresaw: the poll fails
like an outage (reported, retried) instead of ending the loop's thread, which would leave
/healthz saying "ok" about a picture that is never refreshed again."""

from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path
from typing import List

from siteagent.agent.loop import Agent
from siteagent.agent.metrics import Metrics
from siteagent.agent.state import CycleState
from siteagent.backends.replay import SwfReplayBackend
from siteagent.config.schema import PricingConfig, SiteConfig
from siteagent.core.values import ClusterSnapshot
from siteagent.market.site import pricing_of
from testbed.inprocess.traces import write_trace

PRICING = pricing_of(PricingConfig())


class BrokenParser(SwfReplayBackend):
    """A replay whose snapshot fails with a parser's bug while ``broken`` is set."""

    broken = False

    def snapshot(self) -> ClusterSnapshot:
        if self.broken:
            raise AttributeError("'int' object has no attribute 'get'")
        return super().snapshot()


def test_an_unexpected_error_fails_the_poll_and_the_next_one_recovers(tmp_path: Path) -> None:
    backend = BrokenParser(write_trace(tmp_path / "t.swf", [(0, 3600, 8, 3600)], 16))
    metrics = Metrics(SiteConfig(name="test"))
    agent = Agent(metrics.instrument(backend), PRICING, poll_interval_s=0.5, metrics=metrics)
    assert agent.cycle() is not None

    backend.broken = True
    assert agent.cycle() is None
    assert agent.last_error == "unexpected AttributeError: 'int' object has no attribute 'get'"
    assert b"siteagent_backend_up 0.0" in metrics.render()[0]

    backend.broken = False
    assert agent.cycle() is not None
    assert agent.last_error is None


class BrokenHousekeeping:
    """A reservation manager whose housekeeping has a bug while ``broken`` is set."""

    broken = True

    @property
    def reconciler(self) -> BrokenHousekeeping:
        return self

    def housekeeping(self) -> object:
        raise KeyError("a bug")


def test_an_unexpected_error_in_housekeeping_is_reported_and_the_loop_goes_on(
    tmp_path: Path,
) -> None:
    backend = SwfReplayBackend(write_trace(tmp_path / "t.swf", [(0, 3600, 8, 3600)], 16))
    broken = BrokenHousekeeping()
    agent = Agent(backend, PRICING, poll_interval_s=0.5, manager=broken)  # type: ignore[arg-type]
    state = agent.cycle()
    assert state is not None and agent.state is state  # the snapshot still counts
    assert agent.last_error == "unexpected KeyError in housekeeping: 'a bug'"


def test_listeners_get_each_new_state_and_a_failing_one_does_not_end_the_polls(
    tmp_path: Path,
) -> None:
    backend = BrokenParser(write_trace(tmp_path / "t.swf", [(0, 3600, 8, 3600)], 16))
    seen: List[CycleState] = []

    def broken(state: CycleState) -> None:
        raise RuntimeError("a listener's bug")

    agent = Agent(backend, PRICING, poll_interval_s=0.5, listeners=[broken, seen.append])
    first = agent.cycle()
    assert first is not None and seen == [first]  # called after the one that failed

    backend.broken = True
    assert agent.cycle() is None and seen == [first]  # a failed poll has no new state

    backend.broken = False
    second = agent.cycle()
    assert second is not None and seen == [first, second] and agent.last_error is None


def test_a_replaced_state_is_freed_by_reference_counting_alone(tmp_path: Path) -> None:
    """The service freezes each state out of the garbage collector's sight (gc_freeze.py): that is
    only free if a state holds no reference cycle, so the next one frees it at once."""
    trace = [(0, 3600, 8, 3600), (10, 600, 16, 600), (20, 1200, 4, 1200)]
    agent = Agent(SwfReplayBackend(write_trace(tmp_path / "t.swf", trace, 16)), PRICING)
    first = agent.cycle()
    assert first is not None and first.plan.starts  # a queue was planned
    parts = [weakref.ref(first), weakref.ref(first.snapshot)]
    del first
    collecting = gc.isenabled()
    gc.disable()
    try:
        assert agent.cycle() is not None
        assert [part() for part in parts] == [None, None]
    finally:
        if collecting:
            gc.enable()


def test_a_wake_starts_the_next_cycle_before_the_poll_interval(tmp_path: Path) -> None:
    backend = SwfReplayBackend(write_trace(tmp_path / "t.swf", [(0, 3600, 8, 3600)], 16))
    cycles = threading.Semaphore(0)
    agent = Agent(backend, PRICING, poll_interval_s=3600, listeners=[lambda _: cycles.release()])
    stop = threading.Event()
    loop = threading.Thread(target=agent.run, args=(stop,))
    loop.start()
    try:
        assert cycles.acquire(timeout=30)  # the first cycle
        agent.wake()
        assert cycles.acquire(timeout=30), "no second cycle within the hour's wait"
    finally:
        stop.set()
        agent.wake()
        loop.join(timeout=30)
    assert not loop.is_alive()
