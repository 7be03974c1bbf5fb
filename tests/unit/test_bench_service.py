"""The service benchmark's helpers that could silently go wrong: reading the agent's per-cycle
log line (a changed format would turn every cycle figure into NaN), deriving the compressed
trace (the queue the agent is measured on), the settings that keep each version's per-client
limits out of the way (else the latencies are those of 429s), and how rounds are ordered and
summed up."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Dict

import pytest

from bench.quote_clients import Level, Load, percentile
from bench.service import queue_offset, write_compressed
from bench.service_agent import UNLIMITED, cycles, unthrottled
from bench.service_attack import rss_figures
from bench.service_levels import in_turn, over_rounds
from siteagent.agent.loop import describe
from siteagent.agent.state import CycleState
from siteagent.config.loading import parse
from siteagent.config.schema import PricingConfig
from siteagent.core.engines import Policy
from siteagent.core.prediction import plan
from siteagent.core.values import ClusterSnapshot, Job
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
    state = CycleState(
        market_view(snapshot, predicted, pricing_of(PricingConfig())), 0.0, 0.012, 0.345
    )
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


def test_the_bench_lifts_this_trees_per_client_limits_in_the_keys_it_reads(tmp_path: Path) -> None:
    config = parse(unthrottled(Path(__file__).parents[2]), state_dir=tmp_path)
    assert config.api.rate_limits.quotes.per_second == UNLIMITED
    assert config.api.rate_limits.quotes.burst == UNLIMITED
    assert config.api.max_live_offers_per_client == UNLIMITED
    assert config.security.nonces_per_client == UNLIMITED


def test_a_version_before_the_rate_limits_gets_its_one_limit_lifted(tmp_path: Path) -> None:
    schema = tmp_path / "siteagent" / "config" / "schema.py"
    schema.parent.mkdir(parents=True)
    schema.write_text("class SecurityConfig:\n    nonce_cache_size: int = 100_000\n")
    assert unthrottled(tmp_path) == {"security": {"nonce_cache_size": UNLIMITED}}


def level(clients: int, p99_ms: float, max_ms: float, errors: int) -> Dict[str, Any]:
    figures = dict.fromkeys(
        ["p50_ms", "throughput_per_s", "wall_s", "agent_cpu_ms_per_request"], 1.0
    )
    figures.update(dict.fromkeys(["requests", "polls", "offered", "refused", "busy"], 10))
    return {
        **figures,
        "clients": clients,
        "p99_ms": p99_ms,
        "max_ms": max_ms,
        "busy_p50_ms": float("nan"),  # no busy answers in that round
        "busy_max_ms": float("nan"),
        "client_cpu_ms_per_request": 0.5,
        "throttled": 0,
        "errors": errors,
        "first_errors": [f"error {n}" for n in range(errors)],
    }


def test_a_levels_rounds_give_medians_sums_and_the_largest_maximum() -> None:
    rounds = [level(10, 30.0, 40.0, 0), level(10, 90.0, 400.0, 2), level(10, 50.0, 60.0, 1)]
    summary = over_rounds(rounds)
    assert summary["clients"] == 10
    assert summary["p99_ms"] == 50.0  # the median, not the mean (56.7)
    assert summary["max_ms"] == 400.0
    assert summary["requests"] == 30 and summary["errors"] == 3
    assert summary["first_errors"] == ["error 0", "error 1", "error 0"]
    assert math.isnan(summary["busy_p50_ms"])
    assert summary["rounds"] == rounds


def test_rounds_alternate_which_side_goes_first() -> None:
    assert [in_turn(["current", "reference"], turn) for turn in range(3)] == [
        ["current", "reference"],
        ["reference", "current"],
        ["current", "reference"],
    ]


def test_rss_figures_are_the_idle_median_the_peak_during_and_the_last_after() -> None:
    samples = [(0.0, 100.0), (0.5, 102.0), (0.9, 101.0), (1.0, 150.0), (2.0, 130.0), (7.0, 110.0)]
    figures = rss_figures(samples, began=1.0, ended=2.0)
    assert figures == {"idle_mb": 101.0, "peak_mb": 150.0, "after_mb": 110.0}
