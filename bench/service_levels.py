"""A load level against a running agent (bench/service.py): buyers quoting it at once, the
latencies and answers they saw and the CPU the agent spent; and a level's figures over the
rounds it ran, the agents (or the traffic) it compares taken in turn.

Why rounds in turn: the machine is shared, so a level run once on one agent and then on the
other compares two moments as much as two agents; alternating the order and taking medians
gives neither side always the first (or the quieter) slot.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterator, List, Mapping, Sequence, TypeVar

import psutil
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.common import median
from bench.quote_clients import Load, Target, percentile, run_level
from bench.service_agent import KEY_ID, RunningAgent, cpu_seconds, cycles

T = TypeVar("T")


def load_level(
    agent: RunningAgent, key: Ed25519PrivateKey, clients: int, load: Load
) -> Dict[str, Any]:
    """``clients`` client processes, each sending its quotes one after the other; the agent's
    CPU time and its polls are taken over the same span (bench/quote_clients.py)."""
    target = Target.of(agent.url, agent.cert, KEY_ID, key)
    process = psutil.Process(agent.process.pid)
    cpu_before, polls_before = cpu_seconds(process), len(cycles(agent.log))
    level = run_level(target, clients, load)
    agent_cpu = cpu_seconds(process) - cpu_before  # the clients' warm-up quotes included
    answered = level.latencies(("offered", "refused"))
    busy = level.latencies(("busy",))
    errors = level.errors()
    return {
        "clients": clients,
        "requests": len(level.samples),
        "p50_ms": percentile(answered, 50) * 1000,
        "p99_ms": percentile(answered, 99) * 1000,
        "max_ms": max(answered, default=float("nan")) * 1000,
        "throughput_per_s": len(level.samples) / level.wall_s,
        "wall_s": level.wall_s,
        "polls": len(cycles(agent.log)) - polls_before,
        "offered": level.count("offered"),
        "refused": level.count("refused"),
        "busy": len(busy),
        "busy_p50_ms": percentile(busy, 50) * 1000,
        "busy_max_ms": max(busy, default=float("nan")) * 1000,
        "throttled": level.count("throttled"),
        "errors": len(errors),
        "first_errors": errors[:3],
        "agent_cpu_ms_per_request": agent_cpu / (len(level.samples) + clients) * 1000,
        "client_cpu_ms_per_request": level.client_cpu_s / len(level.samples) * 1000,
    }


#: A level's figures taken as the median of its rounds, and those summed over them.
MEDIANS = (
    "p50_ms",
    "p99_ms",
    "throughput_per_s",
    "wall_s",
    "busy_p50_ms",
    "agent_cpu_ms_per_request",
    "client_cpu_ms_per_request",
)
TOTALS = ("requests", "polls", "offered", "refused", "busy", "throttled", "errors")


def over_rounds(rounds: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """One level's figures over its rounds: the medians of its times, rates and CPU, the
    largest of its maxima, the sums of its counts; the rounds themselves kept."""
    summary: Dict[str, Any] = {"clients": rounds[0]["clients"]}
    summary.update({key: median(_finite(r[key] for r in rounds)) for key in MEDIANS})
    summary.update(
        {
            key: max(_finite(r[key] for r in rounds), default=math.nan)
            for key in ("max_ms", "busy_max_ms")
        }
    )
    summary.update({key: sum(r[key] for r in rounds) for key in TOTALS})
    summary["first_errors"] = [error for r in rounds for error in r["first_errors"]][:3]
    summary["rounds"] = list(rounds)
    return summary


def _finite(values: Iterator[float]) -> List[float]:
    """Without the NaNs of a round with no such answers."""
    return [value for value in values if not math.isnan(value)]


def in_turn(order: List[T], turn: int) -> List[T]:
    """The order of a round: as given, then reversed, and so on (none always first)."""
    return order if turn % 2 == 0 else order[::-1]
