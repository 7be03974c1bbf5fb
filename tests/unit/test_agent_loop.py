"""The agent's loop survives a batch system whose answer no parser foresaw: the poll fails
like an outage (reported, retried) instead of ending the loop's thread, which would leave
/healthz saying "ok" about a picture that is never refreshed again."""

from __future__ import annotations

from pathlib import Path

from siteagent.agent import Agent
from siteagent.backends.swf import SwfReplayBackend
from siteagent.metrics import Metrics
from siteagent.model import ClusterSnapshot
from tests.lifecycle import write_trace


class BrokenParser(SwfReplayBackend):
    """A replay whose snapshot fails with a parser's bug while ``broken`` is set."""

    broken = False

    def snapshot(self) -> ClusterSnapshot:
        if self.broken:
            raise AttributeError("'int' object has no attribute 'get'")
        return super().snapshot()


def test_an_unexpected_error_fails_the_poll_and_the_next_one_recovers(tmp_path: Path) -> None:
    backend = BrokenParser(write_trace(tmp_path / "t.swf", [(0, 3600, 8, 3600)], 16))
    metrics = Metrics()
    agent = Agent(metrics.instrument(backend), poll_interval_s=0.5, metrics=metrics)
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

    def housekeeping(self) -> object:
        raise KeyError("a bug")


def test_an_unexpected_error_in_housekeeping_is_reported_and_the_loop_goes_on(
    tmp_path: Path,
) -> None:
    backend = SwfReplayBackend(write_trace(tmp_path / "t.swf", [(0, 3600, 8, 3600)], 16))
    agent = Agent(backend, poll_interval_s=0.5, manager=BrokenHousekeeping())  # type: ignore[arg-type]
    state = agent.cycle()
    assert state is not None and agent.state is state  # the snapshot still counts
    assert agent.last_error == "unexpected KeyError in housekeeping: 'a bug'"
