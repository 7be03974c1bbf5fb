"""The running agent on a 10,000-job queue: quote latency under load, against a reference
version of the code and under attack, and its idle RSS and CPU.

Everything goes through the package's own code paths: the agent is the real ``siteagent
serve`` of the installed (compiled) package, on the SWF replay backend; the clients are
authorized buyers that sign every ``POST /v1/quotes`` (RFC 9421, Ed25519) over HTTPS and trust
the agent's self-signed certificate.

The queue: the trace's submit times are compressed (sped up by 10,000 / its cores, times an
overload factor, as in ``python -m bench slots``) into a derived SWF under
bench/.work/service/ whose header says 10,000 cores; the package's simulator replays it to
find the first instant with 10,000 jobs waiting, and the agent replays it from that offset at
speed 1, so it starts on a ~10,000-job queue that keeps moving with the clock.

Measured, in one run:

- **quote latency, against the reference**: 1, 10 and 50 client processes
  (bench/quote_clients.py: one HTTPS connection each, every quote signed afresh), each sending
  quotes of varied shapes (cores 1..256, walltime 10 min..12 h) one after the other, a fixed
  number of them, and at 50 clients for a whole poll interval as well (so that a poll of the
  agent lands in the level); p50/p99 per request, throughput, refusals, 503 busy answers, 429
  throttled answers and errors, and the CPU the agent and the clients spent per quote. Two
  pricing configurations one after the other: the default (unit price and the externality
  fee, conservative) and unit price only (``pricing.externality.enabled: false``); each with
  the default ``limit`` of 20 offers and with ``limit: 1``. Each configuration runs two agents
  side by side, one of this tree and one of the reference revision (``--reference``, installed
  the same way), and every level runs on each in turn, ``--rounds`` times, the order
  alternating: the figures are medians over the rounds, and the current/reference ratios
  compare code measured on the same machine at the same time. Target: p99 < 100 ms at 50
  clients.
- **under attack**: 10 and 50 buyers quoting (default pricing, one offer asked) for a fixed
  time, alone and while attacker processes (bench/attackers.py: a handful, each bounded in
  requests and time) send the same agent oversized header fields, oversized bodies (unsigned,
  and signed by the buyers' own key), unsigned malformed JSON, forged signatures and request
  lines that are not HTTP; in turn, ``--rounds`` times. The buyers' p50/p99 with and without
  the attack, what the attackers were answered, and the agent's RSS before, at its peak
  during, and 5 s after each level.
  Targets: buyers' p99 < 100 ms under attack; RSS back within 20 MB of idle.
- **RSS and CPU**: the agent polling every 30 s for 10 minutes (``--quick``: 2), psutil
  sampling its resident memory and CPU time, with the per-cycle snapshot and plan times from
  its log; once with the default metrics reference requests (quoted at the first cycle,
  then every 5 minutes) and once with none. The two agents run at the same time, their
  cycles staggered by half a poll.
  Target: RSS < 150 MB, CPU < 2%.

The parts: bench/service_agent.py starts and stops the agents, bench/service_levels.py runs a
load level and sums up its rounds, bench/service_attack.py runs the levels under attack, and
bench/service_report.py writes bench/results/service.md.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import psutil
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.common import ROOT, TRACES, commit_of, machine, median, source_at, write_results
from bench.quote_clients import Load
from bench.service_agent import (
    POLL_S,
    WORK,
    Build,
    RunningAgent,
    cpu_seconds,
    cycles,
    start_agent,
    stop_agent,
)
from bench.service_attack import attack_runs
from bench.service_levels import in_turn, load_level, over_rounds
from bench.service_report import markdown
from siteagent.core.engines import Policy
from siteagent.sim import Simulator, Workload
from siteagent.sim.swf import SwfReader, SwfWriter

# --------------------------------------------------------------------------- the queue


def derived_trace(args: argparse.Namespace) -> Dict[str, Any]:
    """The compressed trace and the offset at which its replay has ``pending`` jobs waiting.

    Built once (deterministic) and described in a JSON file next to it.
    """
    name = f"{Path(args.trace).name.split('.')[0]}-{args.cores}c-x{args.overload}"
    trace, meta = WORK / f"{name}.swf.gz", WORK / f"{name}.json"
    if not meta.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        print(f"deriving {trace.name} from {args.trace} ...", flush=True)
        factor = write_compressed(TRACES / args.trace, trace, args.cores, args.overload)
        offset, running, pending = queue_offset(trace, args.cores, args.pending)
        info = {
            "source": args.trace,
            "path": str(trace.relative_to(ROOT)),
            "cores": args.cores,
            "interarrival_factor": factor,
            "offset_s": offset,
            "running_at_offset": running,
            "pending_at_offset": pending,
        }
        meta.write_text(json.dumps(info, indent=1) + "\n")
    info = json.loads(meta.read_text())
    return dict(info)


def write_compressed(source: Path, target: Path, cores: int, overload: float) -> float:
    """Copy ``source`` with its submit times compressed and its header saying ``cores``."""
    with SwfReader(source, skip_malformed=True) as reader:
        trace_cores = reader.header.max_procs
        if not trace_cores:
            raise ValueError(f"{source}: the header has no MaxProcs")
        factor = trace_cores / cores / overload
        header = [_resized(line, cores) for line in reader.header.lines]
        header.append(f"; Derived by bench/service.py: submit times x {factor:.6g}, {cores} cores")
        with SwfWriter(target, header) as writer:
            first: Optional[int] = None
            for record in reader:
                first = record.submit if first is None else first
                writer.write(
                    record._replace(submit=first + round((record.submit - first) * factor))
                )
    return factor


def _resized(line: str, cores: int) -> str:
    key = line.lstrip(";").partition(":")[0].strip()
    return f"; {key}: {cores}" if key in ("MaxProcs", "MaxNodes") else line


def queue_offset(trace: Path, cores: int, pending: int) -> Tuple[int, int, int]:
    """Seconds after the first submit at which the replay (EASY, as the backend's simulated
    scheduler) first has ``pending`` jobs waiting; and the running and pending counts then."""
    workload = Workload(str(trace), cores=cores, skip_invalid=True)
    tasks = workload.tasks()
    first = next(tasks)
    simulator = Simulator(_chain(first, tasks), cores, Policy.EASY)
    try:
        while len(simulator.queued) < pending:
            moment = simulator.next_event_time()
            if moment is None:
                raise SystemExit(f"{trace}: the queue never reaches {pending} jobs")
            simulator.advance_to(moment)
        return simulator.now - first.submit, len(simulator.running), len(simulator.queued)
    finally:
        workload.close()


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


# --------------------------------------------------------------------------- quote latency


@dataclass(frozen=True)
class Variant:
    """One series of load levels: offers asked per quote, and each level's quotes per client
    (at 50 clients, for at least a poll interval as well, so that a poll lands in it)."""

    label: str
    limit: int
    per_client: Dict[int, int]
    timeout_s: float
    whole_poll_at_50: bool = True

    def load(self, clients: int) -> Load:
        seconds = POLL_S + 2 if clients == 50 and self.whole_poll_at_50 else 0.0
        return Load(self.per_client[clients], self.limit, seconds, self.timeout_s)


def configurations(quick: bool) -> List[Tuple[str, Dict[str, Any], List[Variant]]]:
    """The pricing configurations, their settings, and the variants run on each."""
    scale = 4 if quick else 1
    fast = {1: 300 // scale, 10: 100 // scale, 50: 40 // scale}
    return [
        (
            "unit price only",
            {"pricing": {"externality": {"enabled": False}}},
            [
                Variant("limit 20", 20, fast, 60, whole_poll_at_50=not quick),
                Variant("limit 1", 1, fast, 60, whole_poll_at_50=not quick),
            ],
        ),
        (
            "default (externality fee)",
            {},
            [
                Variant("limit 1", 1, fast, 60, whole_poll_at_50=not quick),
                Variant("limit 20", 20, {1: 5, 10: 2, 50: 2}, 120, whole_poll_at_50=False),
            ],
        ),
    ]


def latency_runs(
    builds: Sequence[Build],
    queue: Mapping[str, Any],
    key: Ed25519PrivateKey,
    rounds: int,
    quick: bool,
) -> Dict[str, Dict[str, Any]]:
    """Each pricing configuration: an agent of each build, side by side; each load level run
    on them in turn, ``rounds`` times. By build name, then configuration."""
    results: Dict[str, Dict[str, Any]] = {build.name: {} for build in builds}
    for name, settings, variants in configurations(quick):
        agents: Dict[str, RunningAgent] = {}
        try:
            for build in builds:
                print(f"latency: starting the {build.name} agent ({name}) ...", flush=True)
                agents[build.name] = start_agent(
                    build, f"{slug(name)}-{slug(build.name)}", queue, key, settings
                )
            levels = variant_levels(agents, key, variants, rounds, name)
            for build_name, agent in agents.items():
                results[build_name][name] = {
                    "ready_s": agent.ready_s,
                    "variants": levels[build_name],
                    "cycles": cycles(agent.log),
                }
        finally:
            for agent in agents.values():
                stop_agent(agent)
    return results


def variant_levels(
    agents: Mapping[str, RunningAgent],
    key: Ed25519PrivateKey,
    variants: Sequence[Variant],
    rounds: int,
    name: str,
) -> Dict[str, Dict[str, List[Dict[str, Any]]]]:
    """Each variant's levels on every agent, in turn: by agent, variant, then level."""
    found: Dict[str, Dict[str, List[Dict[str, Any]]]] = {build: {} for build in agents}
    for variant in variants:
        for agent in agents.values():
            load_level(agent, key, 1, Load(1, variant.limit))  # warm-up
        for build in agents:
            found[build][variant.label] = []
        for clients in variant.per_client:
            load = variant.load(clients)
            print(f"  {name}, {variant.label}: {clients} clients, {load}", flush=True)
            seen: Dict[str, List[Dict[str, Any]]] = {build: [] for build in agents}
            for turn in range(rounds):
                for build in in_turn(list(agents), turn):
                    seen[build].append(load_level(agents[build], key, clients, load))
            for build, levels in seen.items():
                found[build][variant.label].append(over_rounds(levels))
    return found


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# --------------------------------------------------------------------------- RSS and CPU


def idle_runs(
    build: Build, queue: Mapping[str, Any], key: Ed25519PrivateKey, minutes: float
) -> Dict[str, Any]:
    """Two agents polling side by side, half a poll apart: default reference requests, none."""
    setups: Dict[str, Dict[str, Any]] = {
        "default reference requests": {},
        "no reference requests": {"metrics": {"reference_requests": []}},
    }
    agents: Dict[str, RunningAgent] = {}
    try:
        for name, settings in setups.items():
            print(f"idle: starting the agent ({name}) ...", flush=True)
            agents[name] = start_agent(build, slug(name), queue, key, settings)
            time.sleep(POLL_S / 2)
        return watch(agents, minutes * 60)
    finally:
        for agent in agents.values():
            stop_agent(agent)


def watch(agents: Mapping[str, RunningAgent], seconds: float) -> Dict[str, Any]:
    """Sample each process's RSS and CPU time every second for ``seconds``."""
    processes = {name: psutil.Process(agent.process.pid) for name, agent in agents.items()}
    cpu0 = {name: cpu_seconds(p) for name, p in processes.items()}
    rss: Dict[str, List[float]] = {name: [] for name in processes}
    lines0 = {name: len(cycles(agent.log)) for name, agent in agents.items()}
    print(f"idle: watching {len(agents)} agents for {seconds / 60:.0f} min ...", flush=True)
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        for name, process in processes.items():
            rss[name].append(process.memory_info().rss / 2**20)
        time.sleep(1.0)
    wall = time.monotonic() - began
    results: Dict[str, Any] = {}
    for name, process in processes.items():
        cpu = cpu_seconds(process) - cpu0[name]
        seen = cycles(agents[name].log)[lines0[name] :]
        results[name] = {
            "wall_s": wall,
            "cpu_s": cpu,
            "cpu_percent": 100 * cpu / wall,
            "rss_max_mb": max(rss[name]),
            "rss_first_mb": rss[name][0],
            "rss_last_mb": rss[name][-1],
            "ready_s": agents[name].ready_s,
            "cycles": len(seen),
            "snapshot_ms_median": median([c["snapshot_ms"] for c in seen]),
            "plan_ms_median": median([c["plan_ms"] for c in seen]),
            "pending_range": [
                min((c["pending"] for c in seen), default=0),
                max((c["pending"] for c in seen), default=0),
            ],
            "cpu_s_per_cycle": cpu / len(seen) if seen else float("nan"),
        }
    return results


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench service",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--trace", default="HPC2N-2002-2.2-cln.swf.gz", help="under traces/")
    parser.add_argument("--cores", type=int, default=10_000, help="cluster size (10000)")
    parser.add_argument("--pending", type=int, default=10_000, help="queue length (10000)")
    parser.add_argument("--overload", type=float, default=2.5, help="arrival overload (2.5)")
    parser.add_argument(
        "--reference",
        default="58eb219",
        help="git revision whose agent the latency levels also run on (58eb219: main before "
        "the front door)",
    )
    parser.add_argument(
        "--rounds", type=int, help="times each level runs on each agent (3; --quick: 1)"
    )
    parser.add_argument("--quick", action="store_true", help="fewer requests, 2-minute watch")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    current = Build.of("current", ROOT)
    reference = Build.of("reference", source_at(args.reference))
    key = Ed25519PrivateKey.generate()
    results: Dict[str, Any] = {
        "machine": machine(),
        "quick": args.quick,
        "rounds": rounds,
        "compiled": current.compiled,
        "queue": derived_trace(args),
    }
    latency = latency_runs([current, reference], results["queue"], key, rounds, args.quick)
    results["latency"] = latency[current.name]
    results["reference"] = {
        "revision": args.reference,
        "commit": commit_of(args.reference),
        "compiled": reference.compiled,
        "latency": latency[reference.name],
    }
    results["attack"] = attack_runs(current, results["queue"], key, rounds, args.quick)
    results["idle"] = idle_runs(current, results["queue"], key, 2 if args.quick else 10)
    write_results("service", results, markdown(results))
    return 0
