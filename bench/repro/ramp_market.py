"""The market of ``python -m bench repro-ramp``: the marketplace paper's 20 Table 2 agents
(testbed/processes/market.py, as ``bench auction`` starts them) on one shared clock, the buyers that
run auctions on it, wide-area routes to some agents, and what is measured around them.

- **Clock.** Every agent replays its trace at ``SPEED`` (15) times the wall clock from one
  origin (``backend.swf.origin``), so that all show the same time and a buyer pausing 1 s
  between rounds sees the market 15 s of trace later, as under the paper's 15-s round timer.
  Seed s starts every agent at its Table 2 offset + s x 6 h.
- **Buyers.** A pool of processes (bench/repro/ramp_buyer.py), each with its own key, run the
  auctions they are sent (each auction with a fresh journal: a fresh User Agent).
- **Wide area.** Agents may be reached through bench/delay_proxy.py (20-50 ms round trips);
  each names the proxy's port among its public names, since requests are signed for it.
- **Measures.** Each agent's log (the decrement and offer of every quote it prices by load),
  its ``/metrics`` (the quote response-time histogram), and CPU use (the machine's, the
  agents', the buyers').
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import psutil
import yaml

from bench.auction import TABLE2, TRACE_OF
from bench.common import ROOT, TRACES
from testbed.inprocess.parties import Party
from testbed.processes.market import Market, SiteSpec
from testbed.processes.ports import free_port
from testbed.processes.programs import stop

#: Replay speed: one wall second is 15 s of trace, the paper's round timer.
SPEED = 15.0
#: The seed's shift of every agent's Table 2 offset (docs/repro-ramp.md §2).
SEED_SHIFT_S = 6 * 3600
#: The rounds a site spreads its decrement over (the paper's R; docs/repro-ramp.md §2).
SITE_ROUNDS = 3
#: How often the agents poll their replayed cluster (wall seconds; 75 s of trace): often
#: enough that rounds see the market move, rarely enough that 20 agents leave CPU to quotes.
POLL_S = 5.0
#: Agents that replay months of CEA Curie or RICC to their offset take minutes on 2 cores.
START_TIMEOUT_S = 900.0
#: Rate limits raised for the buyers (a federation's setting): co-allocations of 25 parts
#: send 50 reservation requests to a site at once.
RAISED_LIMITS = {
    "quotes": {"per_second": 1000, "burst": 10000},
    "reservations": {"per_second": 1000, "burst": 10000},
}
#: Memory an agent or a buyer may take (MB), to refuse a run the machine cannot hold.
AGENT_MB, BUYER_MB = 150, 70

PRICE_LINE = re.compile(
    r"load price at (\d+): round (\d+) for (\S+), price (\S+), load (\S+), decrement (\S+), "
    r"offer (\S+)"
)


def table2_site(name: str, seed: int, origin: float, api: Mapping[str, Any]) -> SiteSpec:
    """One Table 2 row as a market site: its trace (CEA Curie for Intrepid) from its offset
    shifted by the seed, on the shared clock, load pricing between its start and minimum
    price, no externality fee."""
    row = next(row for row in TABLE2 if row[0] == name)
    _, system, offset, start, low = row
    backend = {
        "type": "swf",
        "swf": {
            "trace": str(TRACES / TRACE_OF[system]),
            "offset": offset + seed * SEED_SHIFT_S,
            "speed": SPEED,
            "origin": origin,
        },
    }
    pricing = {
        "policy": "load",
        "load": {"start_price": str(start), "min_price": str(low), "rounds": SITE_ROUNDS},
        "externality": {"enabled": False},
    }
    return SiteSpec(name, seed, offset, pricing, backend, settings={"api": dict(api)})


def prices_of(name: str) -> Tuple[int, int]:
    """(start, minimum) price of a Table 2 resource."""
    row = next(row for row in TABLE2 if row[0] == name)
    return row[3], row[4]


@dataclass
class Buyers:
    """The buyer processes: ``run`` sends commands (buyer index, command) and returns the
    answers in the same order."""

    processes: List[subprocess.Popen[str]]

    def run(self, commands: Sequence[Tuple[int, Dict[str, Any]]]) -> List[Dict[str, Any]]:
        for index, command in commands:
            stdin = self.processes[index].stdin
            assert stdin is not None
            stdin.write(json.dumps(command) + "\n")
            stdin.flush()
        return [self._answer(index) for index, _ in commands]

    def _answer(self, index: int) -> Dict[str, Any]:
        process = self.processes[index]
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"buyer {index + 1} ended (exit {process.wait()})")
        answer: Dict[str, Any] = json.loads(line)
        return answer

    def stop(self) -> None:
        for process in self.processes:
            if process.stdin is not None:
                process.stdin.close()
        for process in self.processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def pids(self) -> List[int]:
        return [process.pid for process in self.processes]


@dataclass
class RampMarket:
    """One seed's market: the agents and bank, the shared clock, the buyers, and the
    wide-area routes (``proxied``: agent name -> (proxy port, round trip ms))."""

    market: Market
    origin: float
    seed: int
    buyers: Buyers
    proxied: Dict[str, Tuple[int, float]] = field(default_factory=dict)
    proxy: Optional[subprocess.Popen[str]] = None
    started_s: float = 0.0

    @property
    def names(self) -> List[str]:
        return list(self.market.agents)

    def now(self) -> int:
        """The agents' clock now."""
        return int(self.origin + (time.time() - self.origin) * SPEED)

    def stop(self) -> None:
        self.buyers.stop()
        if self.proxy is not None:
            stop(self.proxy)
        self.market.stop()

    # ---- what the agents say

    def offers_logged(self) -> Dict[str, List[Dict[str, Any]]]:
        """Every quote each agent priced by load: its time (agent clock), round, the request's
        price, the load, the decrement and the offer."""
        found: Dict[str, List[Dict[str, Any]]] = {}
        for name in self.names:
            rows = found.setdefault(name, [])
            log = self.market.root / f"{name}.log"
            for match in PRICE_LINE.finditer(log.read_text(errors="replace")):
                at, round, client, price, load, decrement, offer = match.groups()
                rows.append(
                    {
                        "at": int(at),
                        "round": int(round),
                        "client": client,
                        "price": float(price),
                        "load": float(load),
                        "decrement": float(decrement),
                        "offer": float(offer),
                    }
                )
        return found

    def quote_latency(self) -> Dict[str, Tuple[float, float]]:
        """Each agent's quote response-time histogram so far: (sum of seconds, count), from
        ``GET /metrics`` (siteagent_http_request_duration_seconds, :data:`QUOTE_ROUTES`)."""
        totals = {}
        for name in self.names:
            answer = self.market.buyer_at(name).call("GET", "/metrics")
            text = answer.body.decode()
            totals[name] = (_metric(text, "_sum"), _metric(text, "_count"))
        return totals

    def rate_limited(self) -> int:
        """Requests the agents refused so far for their buyer's rate (429), all kinds."""
        total = 0.0
        for name in self.names:
            text = self.market.buyer_at(name).call("GET", "/metrics").body.decode()
            for line in text.splitlines():
                if line.startswith("siteagent_rate_limited_requests_total{"):
                    total += float(line.rsplit(" ", 1)[1])
        return int(total)

    def cpu_seconds(self) -> Dict[str, float]:
        """CPU seconds used so far by the agents, the buyers, and the whole machine (busy, and
        all, summed over its cores; others' work included)."""
        agents = [agent.service.process.pid for agent in self.market.agents.values()]
        machine = psutil.cpu_times()
        idle = machine.idle + getattr(machine, "iowait", 0.0)
        busy = sum(
            getattr(machine, name, 0.0)
            for name in ("user", "nice", "system", "irq", "softirq", "steal")
        )
        return {
            "agents": _cpu(agents),
            "buyers": _cpu(self.buyers.pids()),
            "machine_busy": busy,
            "machine_all": busy + idle,
        }


#: The routes a quote comes by: one request, or a batch of them (what the client's rounds send
#: to a site that takes batches, docs/batches.md).
QUOTE_ROUTES = ("/v1/quotes", "/v1/quotes/batch")


def _metric(text: str, suffix: str) -> float:
    total = 0.0
    name = f"siteagent_http_request_duration_seconds{suffix}"
    for line in text.splitlines():
        if line.startswith(name + "{") and any(f'route="{r}"' in line for r in QUOTE_ROUTES):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _cpu(pids: Sequence[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def memory_needed_mb(sites: int, buyers: int) -> int:
    return sites * AGENT_MB + buyers * BUYER_MB


def start(
    root: Path,
    seed: int,
    names: Sequence[str],
    buyers: int,
    wide_area: Mapping[str, float],
    rate_limits: Optional[Mapping[str, Any]] = RAISED_LIMITS,
) -> RampMarket:
    """Start the agents ``names`` (each reachable directly, and through the delaying proxy
    with the round trip ``wide_area`` gives it in ms), the bank and ``buyers`` buyers."""
    began = time.perf_counter()
    origin = time.time()
    ports = {name: (free_port(), free_port()) for name in wide_area}
    specs = []
    for name in names:
        api: Dict[str, Any] = {}
        if name in ports:
            port, proxy_port = ports[name]
            api = {"port": port, "public_names": [f"127.0.0.1:{port}", f"127.0.0.1:{proxy_port}"]}
        specs.append(table2_site(name, seed, origin, api))
    market = Market(
        root,
        specs,
        credit="1000000000.00",
        buyers=[Party(f"buyer{i + 1}@ramp") for i in range(buyers)],
        poll_interval_s=POLL_S,
        start_timeout_s=START_TIMEOUT_S,
        rate_limits=dict(rate_limits or {}),
        start_together=len(specs),
    )
    try:
        market.start()
        sites_files = [
            market.write_sites_file(p, f"buyer{i + 1}") for i, p in enumerate(market.buyers)
        ]
        processes = [
            buyer_process(root / f"buyer{i + 1}-state", f, origin, SPEED)
            for i, f in enumerate(sites_files)
        ]
    except BaseException:
        market.stop()
        raise
    ramp = RampMarket(market, origin, seed, Buyers(processes))
    if wide_area:
        ramp.proxy, ramp.proxied = _proxy(ports, wide_area, seed)
    ramp.started_s = time.perf_counter() - began
    return ramp


def buyer_process(state: Path, sites: Path, origin: float, speed: float) -> subprocess.Popen[str]:
    """A buyer (bench/repro/ramp_buyer.py) with the key of ``sites``, its journals in
    ``state``, on the agents' clock; returned once it is ready for commands."""
    argv = [
        sys.executable,
        "-m",
        "bench.repro.ramp_buyer",
        "--sites",
        str(sites),
        "--state",
        str(state),
        "--clock",
        f"{origin}:{speed}",
    ]
    process = subprocess.Popen(
        argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    process.stdout.readline()  # ready
    return process


def _proxy(
    ports: Mapping[str, Tuple[int, int]], rtt_ms: Mapping[str, float], seed: int
) -> Tuple[subprocess.Popen[str], Dict[str, Tuple[int, float]]]:
    routes = [f"{proxy}=127.0.0.1:{port}@{rtt_ms[name]}" for name, (port, proxy) in ports.items()]
    argv = [sys.executable, "-m", "bench.delay_proxy", "--seed", str(seed)]
    for route in routes:
        argv += ["--route", route]
    process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    json.loads(process.stdout.readline())  # every route listens
    return process, {name: (proxy, rtt_ms[name]) for name, (_, proxy) in ports.items()}


def proxied_sites_file(ramp: RampMarket, buyer: int) -> Path:
    """Buyer ``buyer``'s sites file naming only the proxied agents, at their proxy ports."""
    name = f"buyer{buyer + 1}"
    document = yaml.safe_load((ramp.market.root / f"{name}-sites.yaml").read_text())
    sites = []
    for site in document["sites"]:
        if site["name"] in ramp.proxied:
            port = ramp.proxied[site["name"]][0]
            sites.append({**site, "url": f"https://127.0.0.1:{port}"})
    path = ramp.market.root / f"{name}-wide-area-sites.yaml"
    path.write_text(yaml.safe_dump({**document, "sites": sites}), encoding="utf-8")
    return path


def reload_site_rounds(ramp: RampMarket, rounds: int) -> None:
    """Make every agent spread its decrement over ``rounds`` rounds (R): its configuration
    rewritten and reloaded (SIGHUP; pricing changes apply without a restart, from the
    agent's next poll on)."""
    for name, agent in ramp.market.agents.items():
        config = ramp.market.root / f"{name}.yaml"
        document = yaml.safe_load(config.read_text(encoding="utf-8"))
        document["pricing"]["load"]["rounds"] = rounds
        config.write_text(yaml.safe_dump(document), encoding="utf-8")
        before = _reloads(ramp.market.root / f"{name}.log")
        agent.service.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 120
        while _reloads(ramp.market.root / f"{name}.log") == before:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not reload its configuration in 2 minutes")
            time.sleep(0.2)
    # quotes price on the view of the agent's latest poll, which takes up the new pricing
    time.sleep(3 * POLL_S)


def _reloads(log: Path) -> int:
    return log.read_text(errors="replace").count("configuration reloaded")


def restart_at_default_limits(ramp: RampMarket) -> None:
    """Restart every agent with the rate limits it has by default (2 reservation requests a
    second per buyer, burst 20), to show what they do to a 25-part co-allocation. An agent
    takes its state back (its replayed cluster, its reservations) from its state directory."""
    market = ramp.market
    for name, agent in market.agents.items():
        config = market.root / f"{name}.yaml"
        document = yaml.safe_load(config.read_text(encoding="utf-8"))
        document["api"].pop("rate_limits", None)
        config.write_text(yaml.safe_dump(document), encoding="utf-8")
        agent.service.stop()
    with ThreadPoolExecutor(len(market.agents)) as pool:
        list(pool.map(lambda agent: agent.service.restart(), market.agents.values()))
