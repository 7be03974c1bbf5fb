"""The running agent on a 10,000-job queue: quote latency under load, and its idle RSS and CPU.

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

- **quote latency**: 1, 10 and 50 client processes (bench/quote_clients.py: one HTTPS
  connection each, every quote signed afresh), each sending quotes of varied shapes (cores
  1..256, walltime 10 min..12 h) one after the other, a fixed number of them, and at 50
  clients for a whole poll interval as well (so that a poll of the agent lands in the level);
  p50/p99 per request, throughput, refusals, 503 busy answers and errors, and the CPU the
  agent and the clients spent per quote. Two agents one after the other: the default pricing
  (unit price and the externality fee, conservative) and unit price only
  (``pricing.externality.enabled: false``); each with the default ``limit`` of 20 offers and
  with ``limit: 1``. Target: p99 < 100 ms at 50 clients.
- **RSS and CPU**: the agent polling every 30 s for 10 minutes (``--quick``: 2), psutil
  sampling its resident memory and CPU time, with the per-cycle snapshot and plan times from
  its log; once with the default metrics reference requests (quoted at the first cycle,
  then every 5 minutes) and once with none. The two agents run at the same time, their
  cycles staggered by half a poll.
  Target: RSS < 150 MB, CPU < 2%.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import httpx
import psutil
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.common import (
    INSTALLS,
    ROOT,
    TRACES,
    compiled,
    installed_siteagent,
    machine,
    md_table,
    median,
    write_results,
)
from bench.quote_clients import Load, Target, percentile, run_level
from siteagent.core.scheduling import Policy
from siteagent.protocol import keys
from siteagent.sim import Simulator, Workload
from siteagent.sim.swf import SwfReader, SwfWriter

WORK = INSTALLS / "service"
TARGET_P99_S = 0.100
TARGET_RSS_MB = 150.0
TARGET_CPU_PERCENT = 2.0
POLL_S = 30.0
KEY_ID = "bench@service"
CYCLE_LINE = re.compile(r"(\d+) running, (\d+) pending, .* snapshot (\d+) ms, plan (\d+) ms")


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


# --------------------------------------------------------------------------- the agent


@dataclass
class RunningAgent:
    """A ``siteagent serve`` process and what a client needs to reach it."""

    process: subprocess.Popen[bytes]
    url: str
    cert: Path
    log: Path
    started: float
    ready_s: float = 0.0


def start_agent(
    siteagent: str,
    name: str,
    queue: Mapping[str, Any],
    key: Ed25519PrivateKey,
    port: int,
    settings: Mapping[str, Any],
) -> RunningAgent:
    """Write a configuration under bench/.work/service/NAME (fresh state) and start the agent.

    Returns once its /healthz answers 200 over HTTPS, that is after its first cycle.
    """
    root = WORK / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    clients = root / "authorized_clients.yaml"
    entry = {"public_key": keys.public_key_text(key.public_key()), "user": "bench"}
    clients.write_text(yaml.safe_dump({"clients": {KEY_ID: entry}}), encoding="utf-8")
    config = {
        "state_dir": str(root / "state"),
        "backend": {
            "type": "swf",
            "swf": {"trace": str(ROOT / queue["path"]), "offset": queue["offset_s"], "speed": 1},
        },
        "planner": {"poll_interval_s": POLL_S},
        "security": {"authorized_clients": str(clients)},
        "api": {"listen": "127.0.0.1", "port": port},
        **settings,
    }
    (root / "siteagent.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    log = root / "agent.log"
    began = time.monotonic()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [siteagent, "serve", "--config", str(root / "siteagent.yaml")],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    agent = RunningAgent(
        process, f"https://127.0.0.1:{port}", root / "state" / "tls" / "server.crt", log, began
    )
    wait_healthy(agent)
    agent.ready_s = time.monotonic() - began
    return agent


def wait_healthy(agent: RunningAgent, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if agent.process.poll() is not None:
            raise RuntimeError(f"the agent exited:\n{agent.log.read_text(errors='replace')}")
        if agent.cert.exists():
            try:
                with httpx.Client(verify=tls_context(agent.cert), timeout=5) as client:
                    if client.get(agent.url + "/healthz").status_code == 200:
                        return
            except httpx.HTTPError:
                pass
        time.sleep(0.5)
    stop_agent(agent)
    raise RuntimeError(f"the agent was not healthy within {timeout:.0f} s; see {agent.log}")


def stop_agent(agent: RunningAgent) -> None:
    """SIGTERM, as systemd stops it; it must exit cleanly."""
    agent.process.send_signal(signal.SIGTERM)
    try:
        code = agent.process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        agent.process.kill()
        agent.process.wait()
        raise RuntimeError(f"the agent did not stop on SIGTERM; see {agent.log}") from None
    if code != 0:
        raise RuntimeError(f"the agent exited with {code}; see {agent.log}")


def tls_context(cert: Path) -> ssl.SSLContext:
    """Trust only the agent's own self-signed certificate."""
    return ssl.create_default_context(cafile=str(cert))


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# --------------------------------------------------------------------------- quote latency


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
        "errors": len(errors),
        "first_errors": errors[:3],
        "agent_cpu_ms_per_request": agent_cpu / (len(level.samples) + clients) * 1000,
        "client_cpu_ms_per_request": level.client_cpu_s / len(level.samples) * 1000,
    }


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


def latency_runs(
    siteagent: str, queue: Mapping[str, Any], key: Ed25519PrivateKey, quick: bool
) -> Dict[str, Any]:
    """Each pricing configuration: its own agent, its variants' load levels in turn."""
    scale = 4 if quick else 1
    fast = {1: 300 // scale, 10: 100 // scale, 50: 40 // scale}
    configurations: List[Tuple[str, Dict[str, Any], List[Variant]]] = [
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
    results: Dict[str, Any] = {}
    for name, settings, variants in configurations:
        print(f"latency: starting the agent ({name}) ...", flush=True)
        agent = start_agent(siteagent, slug(name), queue, key, free_port(), settings)
        try:
            entry: Dict[str, Any] = {"ready_s": agent.ready_s, "variants": {}}
            for variant in variants:
                load_level(agent, key, 1, Load(1, variant.limit))  # warm-up
                levels = []
                for clients in variant.per_client:
                    load = variant.load(clients)
                    print(f"  {name}, {variant.label}: {clients} clients, {load}", flush=True)
                    levels.append(load_level(agent, key, clients, load))
                entry["variants"][variant.label] = levels
            entry["cycles"] = cycles(agent.log)
            results[name] = entry
        finally:
            stop_agent(agent)
    return results


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# --------------------------------------------------------------------------- RSS and CPU


def idle_runs(
    siteagent: str, queue: Mapping[str, Any], key: Ed25519PrivateKey, minutes: float
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
            agents[name] = start_agent(siteagent, slug(name), queue, key, free_port(), settings)
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


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def cycles(log: Path) -> List[Dict[str, int]]:
    """The agent's per-cycle log lines: queue, and the snapshot and plan times."""
    found = []
    for match in CYCLE_LINE.finditer(log.read_text(errors="replace")):
        running, pending, snap, planned = (int(g) for g in match.groups())
        found.append(
            {"running": running, "pending": pending, "snapshot_ms": snap, "plan_ms": planned}
        )
    return found


# --------------------------------------------------------------------------- report


def latency_notes(latency: Mapping[str, Any]) -> List[str]:
    """Why the figures are what they are, with this run's numbers."""
    notes = [
        "How a quote is served: on the agent's event loop (TLS, RFC 9421 signature check, "
        "validation, pricing), its offers stored by one writer thread in group commits (a "
        "quote is answered once its offers are on disk), so a cheap quote never changes "
        "threads. A quote whose externality fee may re-plan the queue (more than one offer "
        "asked) is priced on the one pricing thread instead, and is answered 503 `busy` at "
        "once, with the estimated wait as Retry-After, when the quotes ahead of it would "
        "hold it more than 5 s. Every 50-client level of a fast variant runs for a whole "
        "poll interval as well, so that one of the agent's polls (snapshot, plan, pricing "
        "context) lands inside it: the `polls` column counts them.",
        "",
    ]
    notes += error_notes(latency)
    for name, entry in latency.items():
        for label, levels in entry["variants"].items():
            for level in (lv for lv in levels if lv["clients"] == 50):
                notes.append(
                    f"- {name}, {label}, 50 clients: {level['throughput_per_s']:.0f} quotes/s, "
                    f"the agent spending {level['agent_cpu_ms_per_request']:.2f} ms of CPU "
                    f"per quote and each client process "
                    f"{level['client_cpu_ms_per_request']:.2f} ms (both on the same 2 CPUs)"
                    + (
                        f"; {level['busy']} of {level['requests']} answered 503 busy (p50 "
                        f"{level['busy_p50_ms']:,.0f} ms, max {level['busy_max_ms']:,.0f} ms; "
                        "p50/p99 are of the priced ones)."
                        if level["busy"]
                        else "."
                    )
                )
    fee20 = latency.get("default (externality fee)", {}).get("variants", {}).get("limit 20")
    if fee20:
        alone = fee20[0]
        notes.append(
            f"- The externality fee with 20 offers asked costs {alone['p50_ms']:,.0f} ms per "
            "quote even alone (each start inside the schedule re-plans the 10,000-job queue): "
            "the agent prices a few such quotes per second, whatever the concurrency, and "
            "answers the excess 503 busy rather than queueing it."
        )
    return notes


def error_notes(latency: Mapping[str, Any]) -> List[str]:
    """The errors seen, and what a stale snapshot under load means."""
    notes = []
    for name, entry in latency.items():
        stale = False
        for label, levels in entry["variants"].items():
            for level in (level for level in levels if level["errors"]):
                first = level["first_errors"][0]
                stale = stale or "snapshot_stale" in first
                notes.append(
                    f"- Errors, {name}, {label}, {level['clients']} clients: "
                    f"{level['errors']} of {level['requests']}; the first: `{first[:160]}`."
                )
        if stale:
            slowest = max(entry["cycles"], key=lambda c: c["snapshot_ms"] + c["plan_ms"])
            notes.append(
                f"- The stale snapshot is the agent's own doing: with {name} the quotes' "
                "re-plans hold the interpreter so long that the poll thread is starved (only "
                f"{len(entry['cycles'])} cycles logged during the whole run, the slowest "
                f"snapshot {slowest['snapshot_ms'] / 1000:.1f} s + plan "
                f"{slowest['plan_ms'] / 1000:.1f} s instead of about 0.05 + 0.3 s), the "
                "snapshot ages past the staleness limit, and the API refuses quotes with 503 "
                "as if the batch system were not answering."
            )
    return notes + ([""] if notes else [])


def markdown(results: Mapping[str, Any]) -> str:
    where, queue = results["machine"], results["queue"]
    lines = [
        "# The running agent on a 10,000-job queue: quote latency, RSS and CPU",
        "",
        f"Measured {where['date']} on {where['cpus']} CPUs shared with other work (and with "
        f"the bench's own client processes), Python {where['python']}, load average "
        f"{where['load_average_1m_at_start']} at start; installed package compiled: "
        f"{results['compiled']}."
        + (" Quick run (--quick): fewer requests, 2-minute watch." if results["quick"] else ""),
        "",
        f"Queue: {queue['source']} with submit times x {queue['interarrival_factor']:.4g} on "
        f"{queue['cores']:,} cores ({queue['path']}), replayed by the agent's SWF backend at "
        f"speed 1 from offset {queue['offset_s']:,} s, where the package's simulator has "
        f"{queue['pending_at_offset']:,} jobs waiting and {queue['running_at_offset']:,} "
        "running. Clients: one process each, one keep-alive HTTPS connection (the agent's "
        "self-signed certificate verified), signed POST /v1/quotes (every request signed "
        "afresh, and verified in full by the agent), cores 1..256, walltime 10 min..12 h; "
        "each client connects and sends one unmeasured quote, then all start together. "
        "p50/p99/max are over the quotes answered 200 (offered or refused), from before "
        "signing to the parsed answer.",
        "",
        "## Quote latency",
        "",
    ]
    rows: List[Mapping[str, Any]] = []
    for name, entry in results["latency"].items():
        for label, levels in entry["variants"].items():
            for level in levels:
                rows.append(
                    {
                        "pricing": name,
                        "offers asked": label,
                        "clients": level["clients"],
                        "requests": level["requests"],
                        "p50 ms": level["p50_ms"],
                        "p99 ms": level["p99_ms"],
                        "max ms": level["max_ms"],
                        "req/s": level["throughput_per_s"],
                        "polls": level["polls"],
                        "offered": level["offered"],
                        "refused": level["refused"],
                        "busy": level["busy"],
                        "errors": level["errors"],
                        "agent CPU ms/req": level["agent_cpu_ms_per_request"],
                    }
                )
    lines.append(md_table(rows, list(rows[0])))
    for name, entry in results["latency"].items():
        for label, levels in entry["variants"].items():
            at50 = [level for level in levels if level["clients"] == 50]
            if not at50:
                lines.append(f"- {name}, {label}: not run at 50 clients in this run.")
                continue
            p99 = at50[0]["p99_ms"]
            verdict = "meets" if p99 < TARGET_P99_S * 1000 else "does NOT meet"
            under = [str(lv["clients"]) for lv in levels if lv["p99_ms"] < TARGET_P99_S * 1000]
            lines.append(
                f"- {name}, {label}: p99 {p99:,.0f} ms at 50 clients, {verdict} the target "
                f"(< {TARGET_P99_S * 1000:.0f} ms); p99 under it at "
                f"{', '.join(under) + ' client(s)' if under else 'no level'}."
            )
    lines += ["", *latency_notes(results["latency"]), ""]
    lines += [
        "## RSS and CPU while polling",
        "",
    ]
    rows = []
    for name, entry in results["idle"].items():
        rows.append(
            {
                "metrics": name,
                "minutes": entry["wall_s"] / 60,
                "max RSS MB": entry["rss_max_mb"],
                "CPU %": entry["cpu_percent"],
                "cycles": entry["cycles"],
                "CPU s per cycle": entry["cpu_s_per_cycle"],
                "snapshot ms": entry["snapshot_ms_median"],
                "plan ms": entry["plan_ms_median"],
                "pending": "{:,}..{:,}".format(*entry["pending_range"]),
                "start-up s": entry["ready_s"],
            }
        )
    lines.append(md_table(rows, list(rows[0])))
    for name, entry in results["idle"].items():
        rss_ok = entry["rss_max_mb"] < TARGET_RSS_MB
        cpu_ok = entry["cpu_percent"] < TARGET_CPU_PERCENT
        lines.append(
            f"- {name}: max RSS {entry['rss_max_mb']:.0f} MB "
            f"({'meets' if rss_ok else 'does NOT meet'} < {TARGET_RSS_MB:.0f} MB), CPU "
            f"{entry['cpu_percent']:.2f}% ({'meets' if cpu_ok else 'does NOT meet'} "
            f"< {TARGET_CPU_PERCENT:.0f}%)."
        )
    lines += [
        "",
        "CPU % is the process's CPU seconds over the wall seconds watched (after start-up, "
        "which replays the trace up to the offset: its time is the start-up column). Both "
        "agents ran at the same time, half a poll apart; snapshot and plan times are the "
        "medians of the agent's own per-cycle log lines. The difference between the two rows "
        "is the metrics' reference requests, quoted with the default pricing at the first "
        "cycle and then every 5 minutes (metrics.reference_interval_s).",
        "",
    ]
    return "\n".join(lines)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench service", description=__doc__)
    parser.add_argument("--trace", default="HPC2N-2002-2.2-cln.swf.gz", help="under traces/")
    parser.add_argument("--cores", type=int, default=10_000, help="cluster size (10000)")
    parser.add_argument("--pending", type=int, default=10_000, help="queue length (10000)")
    parser.add_argument("--overload", type=float, default=2.5, help="arrival overload (2.5)")
    parser.add_argument("--quick", action="store_true", help="fewer requests, 2-minute watch")
    args = parser.parse_args(argv)
    python = installed_siteagent()
    siteagent = str(Path(python).parent / "siteagent")
    key = Ed25519PrivateKey.generate()
    results: Dict[str, Any] = {
        "machine": machine(),
        "quick": args.quick,
        "compiled": compiled(python),
        "queue": derived_trace(args),
    }
    results["latency"] = latency_runs(siteagent, results["queue"], key, args.quick)
    results["idle"] = idle_runs(siteagent, results["queue"], key, 2 if args.quick else 10)
    write_results("service", results, markdown(results))
    return 0
