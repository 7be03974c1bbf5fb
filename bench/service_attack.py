"""The service benchmark's level under attack (bench/service.py): buyers quoting an agent
alone and while attacker processes (bench/attackers.py) send it requests it must refuse, in
turn; what the attackers were answered, what each attack costs, and the agent's memory.
"""

from __future__ import annotations

import resource
import time
from typing import Any, Callable, Dict, List, Mapping, Sequence, Tuple, TypeVar

import psutil
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.attackers import ATTACKS, Attackers
from bench.common import median
from bench.quote_clients import Load, Target
from bench.service_agent import (
    KEY_ID,
    Build,
    RssSampler,
    RunningAgent,
    cpu_seconds,
    cycles,
    start_agent,
    stop_agent,
)
from bench.service_levels import in_turn, load_level, over_rounds

T = TypeVar("T")

#: Seconds the buyers quote in each level of the attack runs (--quick: 5).
ATTACK_S = 15.0
#: Requests per second each attacker sends in those levels (bench/attackers.py: why bounded).
ATTACK_RATE = 10.0
#: Seconds the agent rests before a level of the attack runs, and is watched after it; and
#: after the last attack, before its RSS is taken once more.
REST_S, AFTER_S, SETTLE_S = 2.0, 5.0, 30.0


def attack_runs(
    build: Build, queue: Mapping[str, Any], key: Ed25519PrivateKey, rounds: int, quick: bool
) -> Dict[str, Any]:
    """One agent of ``build`` (default pricing): at each number of buyers, a level of quotes
    (one offer asked) alone and one under attack, in turn, ``rounds`` times; then what each
    attack costs it, alone and flat out (last: it may leave the agent's memory higher); its
    RSS before all that, and ``SETTLE_S`` after."""
    print("attack: starting the agent ...", flush=True)
    agent = start_agent(build, "under-attack", queue, key, {})
    process = psutil.Process(agent.process.pid)
    try:
        load_level(agent, key, 1, Load(1, 1))  # warm-up
        first_idle_mb = process.memory_info().rss / 2**20
        levels = attack_levels(agent, key, rounds, quick)
        print("  each attack alone, flat out", flush=True)
        seconds = 2.0 if quick else 5.0
        costs, flat_out_rss = watched(agent, lambda: refusal_costs(agent, key, seconds))
        time.sleep(SETTLE_S)
        return {
            "ready_s": agent.ready_s,
            "per_attacker_per_s": ATTACK_RATE,
            "levels": levels,
            "refusal_costs": costs,
            "rss": {
                "first_idle_mb": first_idle_mb,
                "flat_out": flat_out_rss,
                "settled_mb": process.memory_info().rss / 2**20,
                "settle_s": SETTLE_S,
            },
            "cycles": cycles(agent.log),
        }
    finally:
        stop_agent(agent)


def attack_levels(
    agent: RunningAgent, key: Ed25519PrivateKey, rounds: int, quick: bool
) -> List[Dict[str, Any]]:
    """At each number of buyers, the level alone and under attack, in turn."""
    load = Load(1, 1, 5.0 if quick else ATTACK_S)
    levels = []
    for clients in (10,) if quick else (10, 50):
        print(f"  {clients} clients, alone and under attack, {load}", flush=True)
        seen: Dict[bool, List[Dict[str, Any]]] = {False: [], True: []}
        for turn in range(rounds):
            for attacked in in_turn([False, True], turn):
                seen[attacked].append(watched_level(agent, key, clients, load, attacked))
        levels.append(
            {
                "clients": clients,
                "alone": over_rounds(seen[False]),
                "attacked": over_rounds(seen[True]),
            }
        )
    return levels


def watched_level(
    agent: RunningAgent, key: Ed25519PrivateKey, clients: int, load: Load, attacked: bool
) -> Dict[str, Any]:
    """A load level (:func:`load_level`), with the attackers sending throughout if
    ``attacked``; what they were answered, and the agent's RSS (:func:`watched`)."""
    target = Target.of(agent.url, agent.cert, KEY_ID, key)

    def level() -> Dict[str, Any]:
        attackers = Attackers(target, load.seconds + 60, ATTACK_RATE) if attacked else None
        found = load_level(agent, key, clients, load)
        found["attacks"] = attackers.stop() if attackers else []
        return found

    found, rss = watched(agent, level)
    found["rss"] = rss
    return found


def watched(agent: RunningAgent, action: Callable[[], T]) -> Tuple[T, Dict[str, float]]:
    """What ``action`` returns, and the agent's RSS before it, during it and after it
    (:func:`rss_figures`), the agent having rested ``REST_S`` first."""
    time.sleep(REST_S)
    sampler = RssSampler(agent.process.pid)
    time.sleep(1.0)  # the idle samples
    began = time.monotonic()
    result = action()
    ended = time.monotonic()
    time.sleep(AFTER_S)
    return result, rss_figures(sampler.stop(), began, ended)


def refusal_costs(
    agent: RunningAgent, key: Ed25519PrivateKey, seconds: float
) -> List[Dict[str, Any]]:
    """Each attack alone, flat out for ``seconds``: its rate, and the CPU the agent and the
    attacker spent per request."""
    target = Target.of(agent.url, agent.cert, KEY_ID, key)
    process = psutil.Process(agent.process.pid)
    found = []
    for attack in ATTACKS:
        agent_before, attacker_before = cpu_seconds(process), children_cpu_s()
        attackers = Attackers(target, seconds, None, [attack])
        time.sleep(seconds)
        [report] = attackers.stop()
        requests = max(1, report["requests"])
        agent_cpu, attacker_cpu = cpu_seconds(process) - agent_before, children_cpu_s()
        report["agent_cpu_ms_per_request"] = agent_cpu / requests * 1000
        report["attacker_cpu_ms_per_request"] = (attacker_cpu - attacker_before) / requests * 1000
        found.append(report)
    return found


def children_cpu_s() -> float:
    """The CPU seconds of this process's children that have ended."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def rss_figures(
    samples: Sequence[Tuple[float, float]], began: float, ended: float
) -> Dict[str, float]:
    """The agent's RSS (MB) before a level (the median of the last second), its peak during,
    and the last sample, ``AFTER_S`` after it."""
    before = [rss for at, rss in samples if at < began]
    during = [rss for at, rss in samples if began <= at <= ended]
    return {"idle_mb": median(before), "peak_mb": max(during), "after_mb": samples[-1][1]}
