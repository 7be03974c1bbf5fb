"""The service benchmark's helpers that could silently go wrong: reading the agent's per-cycle
log line (a changed format would turn every cycle figure into NaN) and deriving the
compressed trace (the queue the agent is measured on)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.quote_clients import Level, Load, percentile
from bench.service import cycles, queue_offset, write_compressed
from siteagent.agent.loop import describe
from siteagent.agent.state import State
from siteagent.config.schema import PricingConfig
from siteagent.core.model import ClusterSnapshot, Job
from siteagent.core.scheduling import Policy, plan
from siteagent.market.site import pricing_of
from siteagent.market.view import market_view
from siteagent.sim.swf import SwfRecord, SwfWriter, read_records


def test_the_cycle_line_the_agent_logs_is_read(tmp_path: Path) -> None:
    snapshot = ClusterSnapshot(
        now=1000,
        capacity=8,
        running=(Job(id="r", cores=8, submit=0, limit=3600, start=0),),
        pending=(Job(id="p", cores=4, submit=10, limit=600),),
    )
    predicted = plan(snapshot, Policy.CONSERVATIVE)
    state = State(market_view(snapshot, predicted, pricing_of(PricingConfig())), 0.0, 0.012, 0.345)
    log = tmp_path / "agent.log"
    log.write_text(f"2026-01-01 00:00:00,000 INFO siteagent.agent: {describe(state)}\n")
    assert cycles(log) == [{"running": 1, "pending": 1, "snapshot_ms": 12, "plan_ms": 345}]


def record(job: int, submit: int, procs: int, run: int) -> SwfRecord:
    return SwfRecord(job, submit, 0, run, procs, -1, -1, procs, run, -1, 1, 1, 1, -1, 1, 1, -1, -1)


def test_the_derived_trace_compresses_submits_and_resizes_the_machine(tmp_path: Path) -> None:
    source = tmp_path / "source.swf"
    with SwfWriter(source, ["; MaxProcs: 4", "; MaxNodes: 4"]) as writer:
        for job in range(1, 5):
            writer.write(record(job, 1000 * job, 4, 10_000))
    target = tmp_path / "derived.swf"
    factor = write_compressed(source, target, cores=8, overload=2.0)
    assert factor == 0.25
    assert [r.submit for r in read_records(target)] == [1000, 1250, 1500, 1750]
    assert "; MaxProcs: 8" in target.read_text().splitlines()
    # 8 cores, 4-core jobs of 10,000 s: two run, the third and fourth wait
    offset, running, pending = queue_offset(target, cores=8, pending=2)
    assert (offset, running, pending) == (750, 2, 2)


def test_a_level_counts_its_quotes_and_its_percentiles_ignore_the_busy_answers() -> None:
    samples = [
        (0.0, 0.010, "offered", ""),
        (0.0, 0.030, "refused", ""),
        (0.5, 0.501, "busy", "503"),
        (0.2, 1.000, "error", "HTTP 500"),
    ]
    level = Level(4, samples, client_cpu_s=0.1)
    answered = level.latencies(("offered", "refused"))
    assert answered == pytest.approx([0.010, 0.030])
    assert percentile(answered, 50) == pytest.approx(0.010)
    assert percentile(answered, 99) == pytest.approx(0.030)
    assert level.count("busy") == 1 and level.errors() == ["HTTP 500"]
    assert level.wall_s == pytest.approx(1.0)


def test_a_load_sends_its_count_and_then_goes_on_for_its_seconds() -> None:
    now = time.perf_counter()
    assert Load(2, 1).more(1, now) and not Load(2, 1).more(2, now)
    assert Load(2, 1, seconds=60).more(5, now)
    assert not Load(2, 1, seconds=60).more(5, now - 61)
