"""The experiments of ``python -m bench repro-ramp`` on one seed's market (docs/repro-ramp.md
§3): what each sends the buyers and what it keeps of their answers. The analysis
and the report are bench/repro/ramp.py's.

Every request asks for 1 h (the paper gives no walltime), one offer per site (``--limit 1``:
the paper's Resource Agent makes one), and, where the paper gives a start ("in 5 min"), to
start exactly then on the agents' clock: an offer starting later cannot win.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from bench.repro.ramp_market import RampMarket, proxied_sites_file
from bench.repro.seeds import rng
from siteagent.cli.console import progress_bar

WALLTIME_S = 3600
#: Table 3: experiment, cores, start (s after the request), request price.
TABLE3 = (
    ("exp1", 16, 300, 70),
    ("exp2", 16, 3600, 55),
    ("exp3", 16, 43200, 35),
    ("exp4", 256, 300, 50),
    ("exp5", 256, 3600, 30),
    ("exp6", 256, 43200, 25),
    ("exp7", 1024, 3600, 55),
    ("exp8", 1024, 43200, 35),
    ("exp9", 4096, 3600, 55),
    ("exp10", 4096, 43200, 35),
    ("exp11", 20480, 300, 80),
    ("exp12", 20480, 3600, 55),
    ("exp13", 20480, 43200, 35),
)
#: The paper's User Agents ran 3 rounds in Sec. 10, each round on its 15-s timer.
PRICE_ROUNDS = 3
#: Wall seconds per round: 15 s of the agents' trace at speed 15.
ROUND_INTERVAL_S = 1
#: Table 4's request (only Intrepid/Curie-sized rows hold it, which fits a 66.00 first-round
#: price) and the secondary one, both starting in 60 min at a request price of 80.
ROUNDS_REQUESTS = {"16384 cores": 16384, "16 cores": 16}
ROUNDS_PRICE, ROUNDS_START_S = 80, 3600
#: Rounds of the units, users and network experiments (the paper does not say; Sec. 10's 3),
#: each round as soon as every site answered (their round timer was a 5-min timeout).
PERF_ROUNDS = 3


def request(
    cores: int, price: int, rounds: int, interval: int = 0, walltime: int = WALLTIME_S
) -> List[str]:
    return [
        "--cores",
        str(cores),
        "--walltime",
        str(walltime),
        "--max-price",
        str(price),
        "--rounds",
        str(rounds),
        "--round-interval",
        str(interval),
        "--limit",
        "1",
    ]


def summary(answer: Dict[str, Any]) -> Dict[str, Any]:
    """What the analysis keeps of a buyer's answer: the outcome, every round's prices and
    processing time, the winner and its price, and the phases' times."""
    report = answer.get("report") or {}
    confirmed = report.get("confirmed", [])
    return {
        "code": answer["code"],
        "state": report.get("state"),
        "wall_s": answer["wall_s"],
        "agent_began": answer["agent_began"],
        "rounds": [
            {
                "round": r["round"],
                "prices": {site: p[0] for site, p in r.get("prices", {}).items() if p[0]},
                "best": r["best_price"][0],
                "answered_s": r.get("answered_s"),
            }
            for r in report.get("rounds", [])
        ],
        "winners": [[e["site"], float(e["bid"]["unit_price"])] for e in confirmed],
        "refusals": _refusals(report),
        "phases": answer.get("phases", {}),
    }


def _refusals(report: Dict[str, Any]) -> Dict[str, int]:
    """How many answers of each kind of refusal the rounds brought (rate limiting shows)."""
    counts: Dict[str, int] = {}
    for round in report.get("rounds", []):
        for said in round.get("answers", {}).values():
            if not said.endswith("offers"):
                kind = said.split(":")[0] + (": rate" if "rate" in said or "429" in said else "")
                counts[kind] = counts.get(kind, 0) + 1
    return counts


class Runner:
    """Sends one seed's experiments to the buyers, one at a time or a level at once."""

    def __init__(self, ramp: RampMarket) -> None:
        self.ramp = ramp
        self.count = 0

    def one(
        self,
        label: str,
        auction: List[str],
        start_in: Optional[int],
        cancel: bool,
        exact: bool = True,
    ) -> Dict[str, Any]:
        """An auction by the next buyer (a fresh one each time, in turn)."""
        buyer = self.count % len(self.ramp.buyers.processes)
        self.count += 1
        command = {**self._command(label, auction, start_in, cancel, None), "exact_start": exact}
        return summary(self.ramp.buyers.run([(buyer, command)])[0])

    def level(
        self, label: str, buyers: int, auction: List[str], sites: Callable[[int], List[str]]
    ) -> Dict[str, Any]:
        """``buyers`` auctions at once, each by its own buyer, with the agents' quote latency
        and the CPU used over the level."""
        at = time.time() + 1.0 + 0.05 * buyers
        commands = [
            (b, self._command(f"{label}-b{b}", [*auction, *sites(b)], ROUNDS_START_S, True, at))
            for b in range(buyers)
        ]
        latency, cpu, wall = self.ramp.quote_latency(), self.ramp.cpu_seconds(), time.time()
        answers = self.ramp.buyers.run(commands)
        elapsed = time.time() - wall
        latency_after, cpu_after = self.ramp.quote_latency(), self.ramp.cpu_seconds()
        quoted = {
            name: (latency_after[name][0] - s, latency_after[name][1] - n)
            for name, (s, n) in latency.items()
        }
        return {
            "buyers": buyers,
            "auctions": [summary(answer) for answer in answers],
            "quote_s": sum(s for s, _ in quoted.values())
            / max(sum(n for _, n in quoted.values()), 1),
            "quotes": sum(n for _, n in quoted.values()),
            "wall_s": elapsed,
            "cpu": {key: cpu_after[key] - cpu[key] for key in cpu},
        }

    def _command(
        self,
        label: str,
        auction: List[str],
        start_in: Optional[int],
        cancel: bool,
        at: Optional[float],
    ) -> Dict[str, Any]:
        return {
            "id": f"s{self.ramp.seed}-{label}",
            "at": at,
            "auction": auction,
            "start_in_s": start_in,
            "walltime_s": WALLTIME_S,
            "cancel": cancel,
        }


# ---- the parts ----------------------------------------------------------------------------


def prices(runner: Runner, experiments: Sequence[str], repetitions: int) -> List[Dict[str, Any]]:
    """(a) Table 3's requests one after another, each by a fresh buyer, 3 rounds on the timer,
    the set repeated; the won reservations are kept (the paper's won jobs joined the log)."""
    chosen = [row for row in TABLE3 if row[0] in experiments]
    out = []
    with progress_bar(
        f"seed {runner.ramp.seed}: prices ({len(chosen) * repetitions} auctions)"
    ) as step:
        for rep in range(repetitions):
            for index, (name, cores, start, price) in enumerate(chosen):
                auction = request(cores, price, PRICE_ROUNDS, ROUND_INTERVAL_S)
                found = runner.one(f"prices-{rep}-{name}", auction, start, cancel=False)
                out.append(
                    {
                        "rep": rep,
                        "exp": name,
                        "cores": cores,
                        "start_s": start,
                        "price": price,
                        **found,
                    }
                )
                step((rep * len(chosen) + index + 1) / (len(chosen) * repetitions))
    return out


def rounds(
    runner: Runner, counts: Sequence[int], repetitions: Dict[str, int]
) -> List[Dict[str, Any]]:
    """(b) One request with 1 ... 10 rounds on the timer, each count ``repetitions`` times per
    request, in an order drawn per repetition; each won reservation is cancelled at once, so
    that every auction finds the market as the last one did."""
    total = sum(repetitions.values()) * len(counts)
    out = []
    with progress_bar(f"seed {runner.ramp.seed}: rounds ({total} auctions)") as step:
        for which, reps in repetitions.items():
            cores = ROUNDS_REQUESTS[which]
            for rep in range(reps):
                order = list(counts)
                rng("rounds-order", [which, rep], runner.ramp.seed).shuffle(order)
                for n in order:
                    auction = request(cores, ROUNDS_PRICE, n, ROUND_INTERVAL_S)
                    found = runner.one(
                        f"rounds-{which}-{rep}-{n}", auction, ROUNDS_START_S, cancel=True
                    )
                    out.append({"request": which, "rep": rep, "rounds_n": n, **found})
                    step(len(out) / total)
    return out


def units(
    runner: Runner, counts: Sequence[int], repetitions: int, series: str
) -> List[Dict[str, Any]]:
    """(c) Co-allocations of 1 ... 25 parts, each part's cores (16-1,024), start (5 min-12 h)
    and price (25-80) drawn from the seed (the parts of one auction alike: the client
    co-allocates copies of one request), starting within 12 h of each other; cancelled after."""
    out = []
    total = len(counts) * repetitions
    with progress_bar(f"seed {runner.ramp.seed}: units, {series} ({total} auctions)") as step:
        for rep in range(repetitions):
            for parts in counts:
                draw = rng("units", [parts, rep], runner.ramp.seed)
                cores = 2 ** draw.randint(4, 10)
                start = draw.randint(300, 43200)
                price = draw.randint(25, 80)
                auction = [
                    *request(cores, price, PERF_ROUNDS),
                    "--parts",
                    str(parts),
                    "--tolerance",
                    "12h",
                ]
                found = runner.one(
                    f"units-{series}-{rep}-{parts}", auction, start, cancel=True, exact=False
                )
                out.append(
                    {
                        "series": series,
                        "rep": rep,
                        "parts": parts,
                        "cores": cores,
                        "start_s": start,
                        "price": price,
                        **found,
                    }
                )
                step(len(out) / total)
    return out


def users(
    runner: Runner, levels: Sequence[int], repetitions: int, wide_area: bool
) -> List[Dict[str, Any]]:
    """(d), (e) 1 ... 30 buyers at once, one single-unit auction each (16 cores in an hour at
    80), repeated; over the loopback, or (``wide_area``) to the 15 agents through the delaying
    proxy."""
    label = "network" if wide_area else "users"
    files = {}
    if wide_area:
        files = {b: str(proxied_sites_file(runner.ramp, b)) for b in range(max(levels))}

    def sites(buyer: int) -> List[str]:
        return ["--sites", files[buyer]] if wide_area else []

    out = []
    total = len(levels) * repetitions
    with progress_bar(f"seed {runner.ramp.seed}: {label} ({total} levels)") as step:
        for rep in range(repetitions):
            for buyers in levels:
                level = runner.level(
                    f"{label}-{rep}-{buyers}", buyers, request(16, 80, PERF_ROUNDS), sites
                )
                out.append({"rep": rep, **level})
                step(len(out) / total)
    return out
